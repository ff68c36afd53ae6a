//! The table's verdict on the paper: how our CSM-DMS speedups and best variants compare
//! with Table 4, and whether each of the paper's findings (section 3.3) holds in our
//! cells. Only verified cells count; a finding whose cells are missing is "not measured",
//! with the missing cells named, never guessed.

use crate::paper;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the verdicts read of one verified cell.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Measured {
    pub speedup: f64,
    pub diffs: u64,
    pub migrations: u64,
    pub migration_attempts: u64,
}

/// The verified cells, by (app, variant).
pub type Cells = BTreeMap<(String, String), Measured>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Held,
    NotHeld,
    NotMeasured,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Held => "held",
            Verdict::NotHeld => "not held",
            Verdict::NotMeasured => "not measured",
        })
    }
}

/// One of the paper's findings and what our cells say of it.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub number: usize,
    pub claim: &'static str,
    pub verdict: Verdict,
    /// The figures that decide the verdict (or the cells that are missing).
    pub figures: String,
}

/// One app's CSM-DMS speedup against the paper's.
#[derive(Clone, Debug, Serialize)]
pub struct DmsComparison {
    pub app: String,
    pub ours: f64,
    pub paper: f64,
    /// True when ours is within 25% of the paper's.
    pub within_25_percent: bool,
}

/// One app's fastest variant against the paper's, among the Table 4 variants we ran.
#[derive(Clone, Debug, Serialize)]
pub struct BestComparison {
    pub app: String,
    pub ours: String,
    /// The paper's fastest among the same variants (several on a tie).
    pub paper: Vec<String>,
    pub same: bool,
}

/// Everything the summary says.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub dms_speedups: Vec<DmsComparison>,
    pub best_variants: Vec<BestComparison>,
    pub findings: Vec<Finding>,
}

/// The summary of `cells` for the apps in `apps` (in table order).
pub fn summarize(apps: &[&str], cells: &Cells) -> Summary {
    Summary {
        dms_speedups: apps
            .iter()
            .filter_map(|&app| {
                let ours = cells.get(&key(app, "CSM-DMS"))?.speedup;
                let paper = paper::table4(app, "CSM-DMS")?.speedup;
                Some(DmsComparison {
                    app: app.to_string(),
                    ours,
                    paper,
                    within_25_percent: (ours / paper - 1.0).abs() <= 0.25,
                })
            })
            .collect(),
        best_variants: apps
            .iter()
            .filter_map(|&app| best_comparison(app, cells))
            .collect(),
        findings: evaluate(cells),
    }
}

fn best_comparison(app: &str, cells: &Cells) -> Option<BestComparison> {
    let ran: Vec<(&str, f64, f64)> = paper::TABLE4_VARIANTS
        .iter()
        .filter_map(|&v| {
            let ours = cells.get(&key(app, v))?.speedup;
            Some((v, ours, paper::table4(app, v)?.speedup))
        })
        .collect();
    if ran.len() < 2 {
        return None;
    }
    let ours = ran.iter().max_by(|a, b| a.1.total_cmp(&b.1))?.0;
    let top = ran.iter().map(|r| r.2).fold(f64::MIN, f64::max);
    let paper: Vec<String> = ran
        .iter()
        .filter(|r| r.2 == top)
        .map(|r| r.0.to_string())
        .collect();
    Some(BestComparison {
        app: app.to_string(),
        ours: ours.to_string(),
        same: paper.iter().any(|p| p == ours),
        paper,
    })
}

fn key(app: &str, variant: &str) -> (String, String) {
    (app.to_string(), variant.to_string())
}

/// The paper's findings, each with the function that judges it.
const FINDINGS: [(&str, Judge); 7] = [
    (
        "Barnes is at least 1.4x faster under CSM-DMS than under CSM-None",
        barnes_dms_over_none,
    ),
    (
        "EM3D is about 1.2x faster under CSM-DMS than under CSM-MS (1.1x to 1.35x)",
        em3d_dms_over_ms,
    ),
    (
        "Water-nsquared is fastest under CSM-DMS (among the Table 4 variants run)",
        water_nsq_fastest_under_dms,
    ),
    (
        "LU and Water-spatial are fastest under a -Mg variant (among the Table 4 variants run), with diffs down at least 50x",
        migration_wins_lu_water_sp,
    ),
    (
        "CLU, Gauss, SOR and TSP vary by less than 12% across CSM-DMS, -MS, -S and -None",
        insensitive_apps,
    ),
    (
        "EM3D and Ilink are slower under the -Mg variants than under their first-touch counterparts",
        migration_hurts_em3d_ilink,
    ),
    (
        "CSM-None-Mg records refused migration attempts (attempts > migrations)",
        none_mg_refuses_attempts,
    ),
];

/// Judges each of the paper's findings on `cells`.
pub fn evaluate(cells: &Cells) -> Vec<Finding> {
    FINDINGS
        .iter()
        .enumerate()
        .map(|(i, (claim, judge))| {
            let mut look = Look {
                cells,
                missing: Vec::new(),
            };
            let (verdict, figures) = match judge(&mut look) {
                Some((held, figures)) if look.missing.is_empty() => (
                    if held {
                        Verdict::Held
                    } else {
                        Verdict::NotHeld
                    },
                    figures,
                ),
                _ => (
                    Verdict::NotMeasured,
                    format!("no verified result for {}", look.missing.join(", ")),
                ),
            };
            Finding {
                number: i + 1,
                claim,
                verdict,
                figures,
            }
        })
        .collect()
}

/// A judge of one finding: whether it held and the figures that say so, or `None` when
/// cells are missing (each named in the [`Look`] it was given).
type Judge = fn(&mut Look) -> Option<(bool, String)>;

/// The cells a judge reads, noting every one it asked for and did not find.
struct Look<'a> {
    cells: &'a Cells,
    missing: Vec<String>,
}

impl Look<'_> {
    fn get(&mut self, app: &str, variant: &str) -> Option<Measured> {
        let found = self.cells.get(&key(app, variant)).copied();
        if found.is_none() {
            self.missing.push(format!("{app} under {variant}"));
        }
        found
    }

    /// Every cell `app` has under `variants` (all of them, or `None` with the rest noted).
    fn all(&mut self, app: &str, variants: &[&str]) -> Option<Vec<Measured>> {
        let got: Vec<Option<Measured>> = variants.iter().map(|v| self.get(app, v)).collect();
        got.into_iter().collect()
    }

    /// `app`'s verified cells under the variants of Table 4, in its order: the findings
    /// compare these (CSM-ADB has no column there).
    fn ran(&self, app: &str) -> Vec<(&'static str, Measured)> {
        paper::TABLE4_VARIANTS
            .iter()
            .filter_map(|&v| Some((v, *self.cells.get(&key(app, v))?)))
            .collect()
    }
}

/// The fastest of some (variant, cell) pairs.
fn fastest<'a>(
    cells: impl Iterator<Item = &'a (&'static str, Measured)>,
) -> Option<&'a (&'static str, Measured)> {
    cells.max_by(|a, b| a.1.speedup.total_cmp(&b.1.speedup))
}

/// How many times faster `a` is than `b`, as "a / b = r.rrx".
fn times(a: (&str, f64), b: (&str, f64)) -> (f64, String) {
    let r = a.1 / b.1;
    (
        r,
        format!("{} {:.2} / {} {:.2} = {r:.2}x", a.0, a.1, b.0, b.1),
    )
}

fn barnes_dms_over_none(look: &mut Look) -> Option<(bool, String)> {
    let (Some(dms), Some(none)) = (
        look.get("barnes", "CSM-DMS"),
        look.get("barnes", "CSM-None"),
    ) else {
        return None;
    };
    let (r, text) = times(("CSM-DMS", dms.speedup), ("CSM-None", none.speedup));
    Some((r >= 1.4, format!("barnes: {text} (needs >= 1.4x)")))
}

fn em3d_dms_over_ms(look: &mut Look) -> Option<(bool, String)> {
    let (Some(dms), Some(ms)) = (look.get("em3d", "CSM-DMS"), look.get("em3d", "CSM-MS")) else {
        return None;
    };
    let (r, text) = times(("CSM-DMS", dms.speedup), ("CSM-MS", ms.speedup));
    Some((
        (1.1..=1.35).contains(&r),
        format!("em3d: {text} (needs 1.1x to 1.35x)"),
    ))
}

fn water_nsq_fastest_under_dms(look: &mut Look) -> Option<(bool, String)> {
    let ran = look.ran("water-nsq");
    let dms = look.get("water-nsq", "CSM-DMS");
    let others: Vec<&(&str, Measured)> = ran.iter().filter(|(v, _)| *v != "CSM-DMS").collect();
    let (Some(dms), Some(next)) = (dms, fastest(others.iter().copied())) else {
        if look.missing.is_empty() {
            look.missing
                .push("water-nsq under any Table 4 variant other than CSM-DMS".into());
        }
        return None;
    };
    Some((
        dms.speedup >= next.1.speedup,
        format!(
            "water-nsq: CSM-DMS {:.2}, fastest of the other {} variant(s): {} {:.2}",
            dms.speedup,
            others.len(),
            next.0,
            next.1.speedup
        ),
    ))
}

/// The first-touch variant a migrating one is compared with.
fn counterpart(mg: &str) -> &str {
    mg.strip_suffix("-Mg").unwrap_or(mg)
}

fn migration_wins_lu_water_sp(look: &mut Look) -> Option<(bool, String)> {
    let mut held = true;
    let mut figures = Vec::new();
    for app in ["lu", "water-sp"] {
        let ran = look.ran(app);
        let Some(&(best, best_cell)) = fastest(ran.iter()) else {
            look.missing
                .push(format!("{app} under any Table 4 variant"));
            continue;
        };
        // The -Mg variant the verdict rests on: the fastest, if it migrates; otherwise
        // the fastest migrating variant, for its diffs.
        let Some(&(mg, mg_cell)) = fastest(ran.iter().filter(|(v, _)| v.ends_with("-Mg"))) else {
            look.missing
                .push(format!("{app} under CSM-MS-Mg or CSM-None-Mg"));
            continue;
        };
        let base_name = if ran.iter().any(|(v, _)| *v == counterpart(mg)) {
            counterpart(mg)
        } else {
            "CSM-DMS"
        };
        let Some(base) = look.get(app, base_name) else {
            continue;
        };
        let fewer = base.diffs as f64 / mg_cell.diffs as f64;
        let ok = best == mg && base.diffs > 0 && fewer >= 50.0;
        held &= ok;
        figures.push(format!(
            "{app}: fastest {best} {:.2}; diffs {base_name} {} vs {mg} {} ({})",
            best_cell.speedup,
            base.diffs,
            mg_cell.diffs,
            if base.diffs == 0 {
                "none to reduce".to_string()
            } else if mg_cell.diffs == 0 {
                "all gone".to_string()
            } else {
                format!("{fewer:.1}x fewer")
            }
        ));
    }
    if !look.missing.is_empty() {
        return None;
    }
    Some((
        held,
        figures.join("; ") + " (needs a -Mg fastest, diffs >= 50x fewer)",
    ))
}

fn insensitive_apps(look: &mut Look) -> Option<(bool, String)> {
    const FIRST_TOUCH: [&str; 4] = ["CSM-DMS", "CSM-MS", "CSM-S", "CSM-None"];
    let mut held = true;
    let mut figures = Vec::new();
    for app in ["clu", "gauss", "sor", "tsp"] {
        let Some(cells) = look.all(app, &FIRST_TOUCH) else {
            continue;
        };
        let speedups: Vec<f64> = cells.iter().map(|c| c.speedup).collect();
        let lo = speedups.iter().copied().fold(f64::MAX, f64::min);
        let hi = speedups.iter().copied().fold(f64::MIN, f64::max);
        let spread = hi / lo - 1.0;
        held &= spread < 0.12;
        figures.push(format!(
            "{app}: {:.2} to {:.2} ({:.0}%)",
            lo,
            hi,
            spread * 100.0
        ));
    }
    if !look.missing.is_empty() {
        return None;
    }
    Some((held, figures.join("; ") + " (needs < 12%)"))
}

fn migration_hurts_em3d_ilink(look: &mut Look) -> Option<(bool, String)> {
    let mut held = true;
    let mut figures = Vec::new();
    for app in ["em3d", "ilink"] {
        for mg in ["CSM-MS-Mg", "CSM-None-Mg"] {
            let ft = counterpart(mg);
            let (Some(m), Some(f)) = (look.get(app, mg), look.get(app, ft)) else {
                continue;
            };
            held &= m.speedup < f.speedup;
            figures.push(format!(
                "{app}: {mg} {:.2} vs {ft} {:.2}",
                m.speedup, f.speedup
            ));
        }
    }
    if !look.missing.is_empty() {
        return None;
    }
    Some((held, figures.join("; ") + " (needs each -Mg slower)"))
}

fn none_mg_refuses_attempts(look: &mut Look) -> Option<(bool, String)> {
    let ran: Vec<(String, Measured)> = look
        .cells
        .iter()
        .filter(|((_, v), _)| v == "CSM-None-Mg")
        .map(|((app, _), m)| (app.clone(), *m))
        .collect();
    if ran.is_empty() {
        look.missing.push("any app under CSM-None-Mg".into());
        return None;
    }
    let refused: Vec<String> = ran
        .iter()
        .filter(|(_, m)| m.migration_attempts > m.migrations)
        .map(|(app, m)| {
            format!(
                "{app}: {} attempts, {} migrations",
                m.migration_attempts, m.migrations
            )
        })
        .collect();
    if refused.is_empty() {
        let apps: Vec<&str> = ran.iter().map(|(a, _)| a.as_str()).collect();
        Some((
            false,
            format!(
                "no refused attempts under CSM-None-Mg in {}",
                apps.join(", ")
            ),
        ))
    } else {
        Some((true, refused.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(speedup: f64, diffs: u64) -> Measured {
        Measured {
            speedup,
            diffs,
            migrations: 0,
            migration_attempts: 0,
        }
    }

    /// Cells from `(app, variant, speedup, diffs)`.
    fn cells(rows: &[(&str, &str, f64, u64)]) -> Cells {
        rows.iter()
            .map(|&(a, v, s, d)| (key(a, v), cell(s, d)))
            .collect()
    }

    fn verdict(n: usize, cells: &Cells) -> (Verdict, String) {
        let f = evaluate(cells).into_iter().find(|f| f.number == n).unwrap();
        (f.verdict, f.figures)
    }

    fn assert_verdict(n: usize, rows: &[(&str, &str, f64, u64)], want: Verdict) -> String {
        let (got, figures) = verdict(n, &cells(rows));
        assert_eq!(got, want, "finding {n}: {figures}");
        figures
    }

    #[test]
    fn barnes_needs_dms_at_least_1_4_times_none() {
        let f = assert_verdict(
            1,
            &[
                ("barnes", "CSM-DMS", 7.0, 0),
                ("barnes", "CSM-None", 5.0, 0),
            ],
            Verdict::Held,
        );
        assert!(f.contains("1.40x"), "{f}");
        assert_verdict(
            1,
            &[
                ("barnes", "CSM-DMS", 6.9, 0),
                ("barnes", "CSM-None", 5.0, 0),
            ],
            Verdict::NotHeld,
        );
        let f = assert_verdict(1, &[("barnes", "CSM-DMS", 7.0, 0)], Verdict::NotMeasured);
        assert_eq!(f, "no verified result for barnes under CSM-None");
    }

    #[test]
    fn em3d_needs_dms_over_ms_between_1_1_and_1_35() {
        let rows = |dms| [("em3d", "CSM-DMS", dms, 0), ("em3d", "CSM-MS", 10.0, 0)];
        assert_verdict(2, &rows(12.0), Verdict::Held);
        assert_verdict(2, &rows(10.5), Verdict::NotHeld);
        assert_verdict(2, &rows(14.0), Verdict::NotHeld);
        assert_verdict(2, &rows(12.0)[..1], Verdict::NotMeasured);
    }

    #[test]
    fn water_nsq_is_judged_among_the_variants_run() {
        assert_verdict(
            3,
            &[
                ("water-nsq", "CSM-DMS", 20.0, 0),
                ("water-nsq", "CSM-MS", 18.0, 0),
                ("water-nsq", "CSM-None-Mg", 19.0, 0),
            ],
            Verdict::Held,
        );
        let f = assert_verdict(
            3,
            &[
                ("water-nsq", "CSM-DMS", 20.0, 0),
                ("water-nsq", "CSM-MS-Mg", 21.0, 0),
            ],
            Verdict::NotHeld,
        );
        assert!(f.contains("CSM-MS-Mg 21.00"), "{f}");
        // CSM-ADB has no Table 4 column: the finding is about the others.
        assert_verdict(
            3,
            &[
                ("water-nsq", "CSM-DMS", 20.0, 0),
                ("water-nsq", "CSM-None", 17.0, 0),
                ("water-nsq", "CSM-ADB", 22.0, 0),
            ],
            Verdict::Held,
        );
        assert_verdict(
            3,
            &[
                ("water-nsq", "CSM-DMS", 20.0, 0),
                ("water-nsq", "CSM-ADB", 22.0, 0),
            ],
            Verdict::NotMeasured,
        );
        assert_verdict(3, &[("water-nsq", "CSM-MS", 20.0, 0)], Verdict::NotMeasured);
    }

    #[test]
    fn lu_and_water_sp_need_a_migrating_winner_with_far_fewer_diffs() {
        let rows = |lu_mg_speedup, water_mg_diffs| {
            vec![
                ("lu", "CSM-DMS", 4.0, 285_600),
                ("lu", "CSM-MS", 3.5, 278_000),
                ("lu", "CSM-MS-Mg", lu_mg_speedup, 1_100),
                ("water-sp", "CSM-DMS", 7.7, 6_200),
                ("water-sp", "CSM-None", 7.2, 6_400),
                ("water-sp", "CSM-None-Mg", 11.8, water_mg_diffs),
            ]
        };
        let f = assert_verdict(4, &rows(12.5, 100), Verdict::Held);
        // Each -Mg variant is compared with its first-touch counterpart.
        assert!(f.contains("diffs CSM-MS 278000 vs CSM-MS-Mg 1100"), "{f}");
        assert!(f.contains("diffs CSM-None 6400 vs CSM-None-Mg 100"), "{f}");
        assert_verdict(4, &rows(12.5, 0), Verdict::Held);
        // Slower than CSM-DMS, or diffs down only 32x.
        assert_verdict(4, &rows(3.9, 100), Verdict::NotHeld);
        assert_verdict(4, &rows(12.5, 200), Verdict::NotHeld);
        // Without its counterpart, a -Mg variant is compared with CSM-DMS.
        let f = assert_verdict(
            4,
            &[
                ("lu", "CSM-DMS", 4.0, 285_600),
                ("lu", "CSM-None-Mg", 12.4, 1_100),
                ("water-sp", "CSM-DMS", 7.7, 6_200),
                ("water-sp", "CSM-MS-Mg", 12.3, 100),
            ],
            Verdict::Held,
        );
        assert!(
            f.contains("diffs CSM-DMS 285600 vs CSM-None-Mg 1100"),
            "{f}"
        );
        let f = assert_verdict(4, &rows(12.5, 100)[..3], Verdict::NotMeasured);
        assert!(f.contains("water-sp under any Table 4 variant"), "{f}");
        let f = assert_verdict(
            4,
            &[("lu", "CSM-DMS", 4.0, 1), ("water-sp", "CSM-DMS", 7.7, 1)],
            Verdict::NotMeasured,
        );
        assert!(f.contains("lu under CSM-MS-Mg or CSM-None-Mg"), "{f}");
    }

    #[test]
    fn insensitive_apps_vary_by_less_than_12_percent() {
        let rows = |tsp_none: f64| {
            let mut rows = Vec::new();
            for app in ["clu", "gauss", "sor", "tsp"] {
                for (v, s) in [("CSM-DMS", 10.0), ("CSM-MS", 10.5), ("CSM-S", 10.9)] {
                    rows.push((app, v, s, 0));
                }
                let none = if app == "tsp" { tsp_none } else { 10.0 };
                rows.push((app, "CSM-None", none, 0));
            }
            rows
        };
        let f = assert_verdict(5, &rows(10.0), Verdict::Held);
        assert!(f.contains("tsp: 10.00 to 10.90 (9%)"), "{f}");
        assert_verdict(5, &rows(9.0), Verdict::NotHeld);
        let f = assert_verdict(5, &rows(10.0)[1..], Verdict::NotMeasured);
        assert_eq!(f, "no verified result for clu under CSM-DMS");
    }

    #[test]
    fn em3d_and_ilink_are_slower_with_migration() {
        let rows = |ilink_none_mg| {
            let mut rows = Vec::new();
            for app in ["em3d", "ilink"] {
                rows.push((app, "CSM-MS", 10.5, 0));
                rows.push((app, "CSM-MS-Mg", 10.2, 0));
                rows.push((app, "CSM-None", 10.3, 0));
                let s = if app == "ilink" { ilink_none_mg } else { 9.8 };
                rows.push((app, "CSM-None-Mg", s, 0));
            }
            rows
        };
        assert_verdict(6, &rows(9.8), Verdict::Held);
        let f = assert_verdict(6, &rows(10.4), Verdict::NotHeld);
        assert!(
            f.contains("ilink: CSM-None-Mg 10.40 vs CSM-None 10.30"),
            "{f}"
        );
        assert_verdict(6, &rows(9.8)[..6], Verdict::NotMeasured);
    }

    #[test]
    fn none_mg_must_refuse_some_attempt() {
        let with = |attempts| -> Cells {
            let mut c = cells(&[
                ("barnes", "CSM-None-Mg", 5.9, 0),
                ("lu", "CSM-MS-Mg", 1.0, 0),
            ]);
            for m in c.values_mut() {
                m.migrations = 10;
                m.migration_attempts = attempts;
            }
            c
        };
        let (v, f) = verdict(7, &with(12));
        assert_eq!(v, Verdict::Held);
        assert_eq!(f, "barnes: 12 attempts, 10 migrations");
        assert_eq!(verdict(7, &with(10)).0, Verdict::NotHeld);
        let (v, f) = verdict(7, &cells(&[("lu", "CSM-MS-Mg", 1.0, 0)]));
        assert_eq!(
            (v, f.as_str()),
            (
                Verdict::NotMeasured,
                "no verified result for any app under CSM-None-Mg"
            )
        );
    }

    #[test]
    fn the_summary_compares_dms_speedups_and_best_variants_with_the_paper() {
        let c = cells(&[
            ("sor", "CSM-DMS", 30.0, 0),
            ("sor", "CSM-None", 29.0, 0),
            ("lu", "CSM-DMS", 2.9, 0),
            ("lu", "CSM-None-Mg", 2.0, 0),
            ("lu", "CSM-ADB", 9.0, 0),
        ]);
        let s = summarize(&["sor", "lu", "tsp"], &c);
        let dms: Vec<(&str, bool)> = s
            .dms_speedups
            .iter()
            .map(|d| (d.app.as_str(), d.within_25_percent))
            .collect();
        // SOR 30.0 against 31.2; LU 2.9 against 4.0 (27% off).
        assert_eq!(dms, [("sor", true), ("lu", false)]);
        let best: Vec<(&str, &str, bool)> = s
            .best_variants
            .iter()
            .map(|b| (b.app.as_str(), b.ours.as_str(), b.same))
            .collect();
        // CSM-ADB has no Table 4 column, so it takes no part in the comparison.
        assert_eq!(best, [("sor", "CSM-DMS", true), ("lu", "CSM-DMS", false)]);
        assert_eq!(s.best_variants[1].paper, ["CSM-None-Mg"]);
    }
}
