//! The table's outputs: Table 4 in the paper's layout (printed, and in `table.md`), the
//! summary, `table.json` (schema `cashmere-table/1`), `table.csv` and Figure 1.

use super::findings::{self, Cells, Measured, Summary};
use super::{Cell, Plan};
use crate::paper::{self, Table4Cell};
use anyhow::bail;
use std::fmt::Write as _;

/// The version of `table.json`'s layout.
pub const SCHEMA: &str = "cashmere-table/1";

/// One line on how a cell ended, for progress lines.
pub fn cell_outcome(cell: &Cell) -> String {
    match (&cell.run, &cell.error) {
        (Some(run), None) => format!("speedup {:.2}, verified", run.speedup),
        (Some(run), Some(e)) => format!("speedup {:.2}, FAILED: {e}", run.speedup),
        (None, e) => format!("ERROR: {}", e.as_deref().unwrap_or("no result")),
    }
}

/// Prints and writes everything; an error at the end if any cell failed.
pub fn finish(plan: &Plan, cells: &[Cell]) -> anyhow::Result<()> {
    let apps: Vec<&str> = plan.apps.iter().map(|a| a.app.name()).collect();
    let variants: Vec<&str> = plan.variants.iter().map(|c| c.protocol.name).collect();
    let summary = findings::summarize(&apps, &measured(cells));
    let comparable = plan.comparable_to_paper();
    let grid = table4_grid(&apps, &variants, cells, comparable);
    let heading = heading(plan, cells);

    outln!("\n{heading}\n");
    out!("{}", render_text(&grid));
    outln!();
    let notes: Vec<String> = [computation_line(&apps, cells), interval_line(&apps, cells)]
        .into_iter()
        .flatten()
        .collect();
    out!("{}", summary_lines(&summary, comparable).join("\n"));
    outln!();
    for line in &notes {
        outln!("{line}");
    }

    let out = &plan.out;
    let md = out.join("table.md");
    let svg = out.join("figure1.svg");
    write(
        &out.join("table.json"),
        &serde_json::to_string_pretty(&json(plan, cells, &summary))?,
    )?;
    write(&out.join("table.csv"), &csv(cells))?;
    write(&md, &markdown(&heading, &grid, &summary, &notes, comparable))?;
    super::figure::figure1(&apps, &variants, cells, &svg)?;
    outln!("\nMarkdown: {}\nFigure 1: {}", md.display(), svg.display());

    let failures: Vec<String> = cells
        .iter()
        .filter(|c| c.error.is_some())
        .map(|c| {
            format!(
                "{} under {}: {}",
                c.config.app,
                c.config.variant,
                cell_outcome(c)
            )
        })
        .collect();
    if !failures.is_empty() {
        bail!(
            "{} of {} cell(s) failed:\n  {}",
            failures.len(),
            cells.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    super::write_file(path, text.as_bytes())
}

/// The verified cells, as the findings read them.
fn measured(cells: &[Cell]) -> Cells {
    cells
        .iter()
        .filter_map(|c| {
            let run = c.measured()?;
            let m = Measured {
                speedup: run.speedup,
                diffs: run.shown().diffs,
                migrations: run.shown().migrations,
                migration_attempts: run.shown().migration_attempts,
            };
            Some(((c.config.app.clone(), c.config.variant.clone()), m))
        })
        .collect()
}

/// What the table shows and how it was run; a note when runs report another clock than
/// the one asked for (the engine runs the wall clock until it has the modeled one).
fn heading(plan: &Plan, cells: &[Cell]) -> String {
    let config = &plan.variants[0];
    let clocks = if plan.clock == dsm::ClockMode::Modeled {
        format!("modeled clock on {}", plan.platform.name)
    } else {
        "wall clock".to_string()
    };
    let asked = plan.clock.to_string();
    let other_clock = cells
        .iter()
        .filter_map(|c| c.run.as_ref())
        .filter(|r| r.clock != asked)
        .count();
    let charge = match plan.compute {
        _ if plan.clock != dsm::ClockMode::Modeled => String::new(),
        crate::scale::ComputeChoice::Counted => " Computation is charged by the work each app counts, at the platform's cost per unit (Table 3's sequential time over the units counted at the paper's input), so a cell repeats exactly; the platform's caches are not modeled (no superlinear effects).".to_string(),
        crate::scale::ComputeChoice::Measured => " Computation is charged as this machine's CPU time times each app's scale factor (--compute measured), so a repeated cell moves with this host's noise.".to_string(),
    };
    let compare = if plan.comparable_to_paper() {
        "Table 4: speedups and statistics, ours / the paper's (ours over the paper's); counts in thousands over the timed region (the computation the speedup times; the whole run's are in table.json)."
    } else {
        "Table 4's layout with our figures only; counts in thousands over the timed region (the computation the speedup times; the whole run's are in table.json). Ours are not the paper's configuration (its inputs on 8 x 4 under the modeled clock on the built-in alphaserver-mc2 platform, --size paper), so they are not set beside the paper's; the findings below are relative and are judged at any size."
    };
    let note = if other_clock > 0 {
        format!(
            "\nNote: {other_clock} cell(s) report another clock than the {asked} clock asked for; their speedups are in the clock they report (see table.json)."
        )
    } else {
        String::new()
    };
    format!(
        "{compare}\n\
         Ours: {} inputs, {} nodes x {} processors, network {}, {clocks}, {} KiB pages, {} homes.{charge} \
         The paper: its inputs (Table 3), 8 x 4 AlphaServer processors on Memory Channel 2, homes captured from CSM-DMS. \
         `!` marks a cell that failed verification; CSM-ADB has no Table 4 column.{note}",
        plan.size,
        config.nodes,
        config.procs_per_node,
        config.profile.name,
        config.page_bytes / 1024,
        plan.homes,
    )
}

/// A number the way Table 4 prints it: one decimal, two below 10.
fn num(x: f64) -> String {
    if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A count in thousands: one decimal, three below a thousand (our test inputs are small).
fn thousands(count: u64) -> String {
    match count {
        0 => "0".into(),
        1..=999 => format!("{:.3}", count as f64 / 1e3),
        _ => format!("{:.1}", count as f64 / 1e3),
    }
}

/// A figure of the paper's, as Table 4 prints it (one decimal).
fn papers(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1}")
    }
}

/// `ours / paper (ratio)`; the ratio where the paper's figure is not zero; ours alone
/// where there is no paper's figure to set it beside.
fn beside(ours: String, paper: Option<(f64, String)>, ratio_of: f64) -> String {
    match paper {
        None => ours,
        Some((p, text)) if p != 0.0 => format!("{ours} / {text} ({:.2})", ratio_of / p),
        Some((_, text)) => format!("{ours} / {text}"),
    }
}

/// Table 4's rows for one app: (row label, our figure, the paper's figure) getters.
type RowFn = fn(&Cell, Option<&Table4Cell>) -> String;

const ROWS: [(&str, RowFn); 5] = [
    ("Speedup", |c, p| {
        let run = c.run.as_ref().expect("rows are drawn for finished cells");
        beside(
            num(run.speedup),
            p.map(|p| (p.speedup, papers(p.speedup))),
            run.speedup,
        )
    }),
    ("Page Transfers (K)", |c, p| {
        count_row(c, p.map(|p| p.page_transfers_k), |r| {
            r.shown().page_transfers
        })
    }),
    ("Invalidations (K)", |c, p| {
        count_row(c, p.map(|p| p.invalidations_k), |r| {
            r.shown().invalidations
        })
    }),
    ("Diffs (K)", |c, p| {
        count_row(c, p.map(|p| p.diffs_k), |r| r.shown().diffs)
    }),
    ("Migrations (K)", |c, p| {
        let k = c.run.as_ref().expect("a finished cell").shown();
        let ours = format!(
            "{} ({})",
            thousands(k.migrations),
            thousands(k.migration_attempts)
        );
        let paper = p.map(|p| {
            let text = if p.migration_attempts_k == 0.0 {
                "0".to_string()
            } else {
                format!(
                    "{} ({})",
                    papers(p.migrations_k),
                    papers(p.migration_attempts_k)
                )
            };
            (p.migrations_k, text)
        });
        beside(ours, paper, k.migrations as f64 / 1e3)
    }),
];

fn count_row(cell: &Cell, paper_k: Option<f64>, count: fn(&super::Measurements) -> u64) -> String {
    let ours = count(cell.run.as_ref().expect("a finished cell"));
    beside(
        thousands(ours),
        paper_k.map(|k| (k, papers(k))),
        ours as f64 / 1e3,
    )
}

/// Table 4 as a grid of strings: a header row, then five rows per app.
/// `comparable`: the paper's configuration ([`super::Plan::comparable_to_paper`]); else
/// our figures only.
fn table4_grid(apps: &[&str], variants: &[&str], cells: &[Cell], comparable: bool) -> Vec<Vec<String>> {
    let mut grid = vec![["Application", ""]
        .into_iter()
        .chain(variants.iter().copied())
        .map(String::from)
        .collect::<Vec<_>>()];
    for app in apps {
        for (i, (label, row)) in ROWS.iter().enumerate() {
            let name = if i == 0 { paper::display_name(app) } else { "" };
            let mut line = vec![name.to_string(), label.to_string()];
            for variant in variants {
                let cell = cells
                    .iter()
                    .find(|c| c.config.app == *app && c.config.variant == *variant);
                let paper = paper::table4(app, variant).filter(|_| comparable);
                line.push(match cell {
                    Some(c) if c.run.is_some() => {
                        let text = row(c, paper.as_ref());
                        if c.verified {
                            text
                        } else {
                            match text.find(" /") {
                                Some(_) => text.replacen(" /", "! /", 1),
                                None => format!("{text}!"),
                            }
                        }
                    }
                    Some(_) if i == 0 => {
                        beside("error".into(), paper.map(|p| (0.0, papers(p.speedup))), 0.0)
                    }
                    _ => String::new(),
                });
            }
            grid.push(line);
        }
    }
    grid
}

/// The grid with columns padded to their widest entry.
fn render_text(grid: &[Vec<String>]) -> String {
    let columns = grid.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            grid.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in grid {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        out += line.join("  ").trim_end();
        out.push('\n');
    }
    out
}

fn render_markdown(grid: &[Vec<String>]) -> String {
    let mut out = String::new();
    for (i, row) in grid.iter().enumerate() {
        out += &format!("| {} |\n", row.join(" | "));
        if i == 0 {
            out += &format!("|{}\n", "---|".repeat(row.len()));
        }
    }
    out
}

/// The summary as plain lines (also the Markdown list items).
/// `comparable`: the table is the paper's configuration, so its CSM-DMS speedups are set
/// beside the paper's; else they are listed alone.
fn summary_lines(s: &Summary, comparable: bool) -> Vec<String> {
    let mut lines = vec!["Summary".to_string()];
    if !comparable {
        lines.push(format!(
            "- CSM-DMS speedups (not the paper's configuration, so not compared with Table 4's){}",
            list(": ", s.dms_speedups.iter().map(|d| format!("{} {:.2}", d.app, d.ours)))
        ));
        lines.extend(relative_lines(s));
        return lines;
    }
    let (near, far): (Vec<_>, Vec<_>) = s.dms_speedups.iter().partition(|d| d.within_25_percent);
    let speedup = |d: &&findings::DmsComparison| {
        format!(
            "{} {:.2} vs {:.1} ({:.2})",
            d.app,
            d.ours,
            d.paper,
            d.ours / d.paper
        )
    };
    lines.push(format!(
        "- CSM-DMS speedup within 25% of the paper's: {} of {} app(s){}{}",
        near.len(),
        s.dms_speedups.len(),
        list(": ", near.iter().map(speedup)),
        list("; not within: ", far.iter().map(speedup)),
    ));
    lines.extend(relative_lines(s));
    lines
}

/// The summary's lines that compare variants with each other, as the paper's findings
/// do: meaningful at any size.
fn relative_lines(s: &Summary) -> Vec<String> {
    let mut lines = Vec::new();
    let (same, other): (Vec<_>, Vec<_>) = s.best_variants.iter().partition(|b| b.same);
    lines.push(format!(
        "- Fastest variant the same as the paper's (among the Table 4 variants run): {} of {} app(s){}{}",
        same.len(),
        s.best_variants.len(),
        list(": ", same.iter().map(|b| format!("{} ({})", b.app, b.ours))),
        list(
            "; different: ",
            other
                .iter()
                .map(|b| format!("{} (ours {}, the paper's {})", b.app, b.ours, b.paper.join(" or ")))
        ),
    ));
    lines.push("- The paper's findings:".into());
    for f in &s.findings {
        lines.push(format!(
            "  {}. {}: {}. {}.",
            f.number, f.verdict, f.claim, f.figures
        ));
    }
    lines
}

/// `prefix` and the items joined with ", ", or nothing when there are none.
fn list(prefix: &str, items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        String::new()
    } else {
        format!("{prefix}{}", items.join(", "))
    }
}

/// The cell an app's one-figure lines speak for: its CSM-DMS cell, else its first verified
/// one.
fn reference_cell<'a>(app: &str, cells: &'a [Cell]) -> Option<&'a Cell> {
    let mine = |c: &&Cell| c.config.app == app && c.verified && c.run.is_some();
    cells
        .iter()
        .filter(mine)
        .find(|c| c.config.variant == "CSM-DMS")
        .or_else(|| cells.iter().find(mine))
}

/// How much slower the parallel program's computation ran than the sequential program's
/// (each app's [`reference_cell`]): the processors' total User time over the sequential
/// time, both in the table's clock. 1.00 means the parallel program computed exactly as
/// fast; above it, the parallel code did more work, or (under the modeled clock, where
/// every simulated processor computes on one host core) its working sets competed for that
/// one core's caches, which the platform's 32 processors each had to themselves. Speedup
/// cannot exceed processors / this.
fn computation_line(apps: &[&str], cells: &[Cell]) -> Option<String> {
    let figures: Vec<String> = apps
        .iter()
        .filter_map(|app| {
            let run = reference_cell(app, cells)?.run.as_ref()?;
            (run.seq_s > 0.0).then(|| {
                let ratio = run.breakdown.user_ns as f64 / 1e9 / run.seq_s;
                let why = crate::apps::by_name(app)
                    .ok()
                    .and_then(|a| a.extra_work())
                    .filter(|_| ratio > 1.02);
                match why {
                    Some(why) => format!("{app} {ratio:.2} ({why})"),
                    None => format!("{app} {ratio:.2}"),
                }
            })
        })
        .collect();
    (!figures.is_empty()).then(|| {
        format!(
            "- Computation, the processors' total User time over the sequential time (1.00: as \
             fast as the sequential program; above it, the parallel program did more work, or \
             under measured computation this host's caches were shared; speedup is at most \
             processors / this): {}",
            figures.join(", ")
        )
    })
}

/// This machine's time per barrier interval, in milliseconds: the parallel time over the
/// scale factor (1 under the wall clock) and the barriers each node crossed. Every interval
/// lasts as long as its slowest processor's burst, so the host's noise in a burst is paid
/// once per interval: the shorter the intervals, the more a repeated cell moves
/// (`harness/results/README.md`, "Why EM3D does not repeat within 2%"). The barriers are
/// the whole run's, the time the timed region's, so this is an estimate.
fn interval_ms(par_s: f64, scale: f64, barriers: u64, nodes: usize) -> Option<f64> {
    let per_node = barriers as f64 / nodes.max(1) as f64;
    (per_node >= 1.0 && scale > 0.0).then(|| par_s / scale / per_node * 1e3)
}

/// The line of each app's [`interval_ms`] (its [`reference_cell`]).
fn interval_line(apps: &[&str], cells: &[Cell]) -> Option<String> {
    let figures: Vec<String> = apps
        .iter()
        .filter_map(|app| {
            let cell = reference_cell(app, cells)?;
            let run = cell.run.as_ref()?;
            // Counted work takes nothing from this host's clock: no noise to estimate.
            if cell.scale.as_ref().is_some_and(|s| s.counted()) {
                return None;
            }
            let scale = cell.scale.as_ref().map_or(1.0, |s| s.factor);
            let ms = interval_ms(run.par_s, scale, run.counters.barriers, cell.config.nodes)?;
            Some(format!("{app} {ms:.2} ms"))
        })
        .collect();
    (!figures.is_empty()).then(|| {
        format!(
            "- Barrier intervals, this machine's time per interval (the parallel time over the \
             scale factor and the barriers; the shorter, the more this host's noise moves a \
             repeated cell): {}",
            figures.join(", ")
        )
    })
}

fn markdown(
    heading: &str,
    grid: &[Vec<String>],
    summary: &Summary,
    notes: &[String],
    comparable: bool,
) -> String {
    let mut md = String::from("# Cashmere: Table 4 and Figure 1\n\n");
    let _ = writeln!(md, "{heading}\n");
    md += &render_markdown(grid);
    let mut lines = summary_lines(summary, comparable);
    lines.extend(notes.iter().cloned());
    lines[0] = "\n## Summary\n".into();
    md += &lines.join("\n");
    md += "\n\n## Figure 1\n\nTime breakdown (User, Protocol, Wait, Message) summed over the processors, normalized to CSM-DMS's total.\n\n![Figure 1](figure1.svg)\n";
    md
}

/// The whole table as one JSON document.
fn json(plan: &Plan, cells: &[Cell], summary: &Summary) -> serde_json::Value {
    let config = &plan.variants[0];
    let scales: serde_json::Map<String, serde_json::Value> = cells
        .iter()
        .filter_map(|c| {
            Some((
                c.config.app.clone(),
                serde_json::to_value(c.scale.as_ref()?).ok()?,
            ))
        })
        .collect();
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).expect("cells serialize");
            v["paper"] = serde_json::to_value(paper::table4(&c.config.app, &c.config.variant))
                .expect("paper cells serialize");
            v
        })
        .collect();
    serde_json::json!({
        "schema": SCHEMA,
        "config": {
            "apps": plan.apps.iter().map(|a| a.app.name()).collect::<Vec<_>>(),
            "variants": plan.variants.iter().map(|c| c.protocol.name).collect::<Vec<_>>(),
            "size": plan.size.to_string(),
            "nodes": config.nodes,
            "procs": config.procs_per_node,
            "network": config.profile.name,
            "clock": plan.clock.to_string(),
            "compute": plan.compute.name(),
            "comparable_to_paper": plan.comparable_to_paper(),
            "page_bytes": config.page_bytes,
            "homes": plan.homes.to_string(),
            "platform": plan.platform.name,
            "exec": config.mode.to_string(),
            "backend": config.backend.to_string(),
            "heap_bytes": config.heap_bytes,
        },
        "platform": plan.platform,
        "scale_factors": scales,
        "cells": cells,
        "summary": summary,
    })
}

/// One row per cell: the configuration, the outcome, the times, the paper's speedup, the
/// breakdown and every counter.
fn csv(cells: &[Cell]) -> String {
    let counter_names: Vec<String> = match serde_json::to_value(dsm::Counters::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let mut out = String::from(
        "app,variant,verified,error,clock,speedup,paper_speedup,seq_s,par_s,seq_wall_s,seq_cpu_s,scale_factor,user_ns,protocol_ns,wait_ns,message_ns",
    );
    for name in &counter_names {
        out += &format!(",{name}");
    }
    out.push('\n');
    for c in cells {
        let paper = paper::table4(&c.config.app, &c.config.variant)
            .map_or(String::new(), |p| p.speedup.to_string());
        let mut fields = vec![
            c.config.app.clone(),
            c.config.variant.clone(),
            c.verified.to_string(),
            csv_quote(c.error.as_deref().unwrap_or("")),
        ];
        match &c.run {
            Some(r) => {
                let counters = serde_json::to_value(r.counters).expect("counters serialize");
                fields.extend([
                    r.clock.clone(),
                    r.speedup.to_string(),
                    paper,
                    r.seq_s.to_string(),
                    r.par_s.to_string(),
                    r.seq_wall_s.to_string(),
                    r.seq_cpu_s.to_string(),
                    c.scale
                        .as_ref()
                        .map_or(String::new(), |s| s.factor.to_string()),
                    r.breakdown.user_ns.to_string(),
                    r.breakdown.protocol_ns.to_string(),
                    r.breakdown.wait_ns.to_string(),
                    r.breakdown.message_ns.to_string(),
                ]);
                fields.extend(counter_names.iter().map(|n| counters[n].to_string()));
            }
            None => {
                fields.extend([String::new(), String::new(), paper]);
                fields.extend(std::iter::repeat_n(String::new(), 9 + counter_names.len()));
            }
        }
        out += &fields.join(",");
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_sit_beside_the_papers_with_the_ratio() {
        assert_eq!(
            beside(num(7.1), Some((7.6, papers(7.6))), 7.1),
            "7.10 / 7.6 (0.93)"
        );
        assert_eq!(papers(278.06), "278.1");
        assert_eq!(beside(num(12.25), None, 12.25), "12.2");
        assert_eq!(beside("0".into(), Some((0.0, "0".into())), 0.0), "0 / 0");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(12), "0.012");
        assert_eq!(thousands(66_049), "66.0");
    }

    #[test]
    fn an_interval_is_the_host_time_over_each_nodes_barriers() {
        // EM3D at the paper's input: 1.98 s of virtual time at a scale factor of 120,
        // 1,616 barrier crossings counted over 8 nodes (202 each).
        let ms = interval_ms(1.98, 120.0, 1616, 8).unwrap();
        assert!((ms - 1.98 / 120.0 / 202.0 * 1e3).abs() < 1e-12, "{ms}");
        // The wall clock's scale is 1.
        assert_eq!(interval_ms(2.0, 1.0, 40, 4), Some(200.0));
        // No barrier, or no scale: no figure.
        assert_eq!(interval_ms(2.0, 1.0, 0, 4), None);
        assert_eq!(interval_ms(2.0, 0.0, 40, 4), None);
    }

    #[test]
    fn csv_fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(csv_quote("plain"), "plain");
        assert_eq!(csv_quote("a, b"), "\"a, b\"");
        assert_eq!(csv_quote("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn text_columns_are_padded_to_the_widest_entry() {
        let grid = vec![
            vec!["a".to_string(), "bb".to_string()],
            vec!["ccc".to_string(), "d".to_string()],
        ];
        assert_eq!(render_text(&grid), "a    bb\nccc  d\n");
        assert_eq!(
            render_markdown(&grid),
            "| a | bb |\n|---|---|\n| ccc | d |\n"
        );
    }
}
