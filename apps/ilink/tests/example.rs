//! The shipped LINKAGE example and properties of the whole computation that do not
//! depend on the code's own output: the estimate is a minimum on a grid, the likelihood
//! factorizes over loci at free recombination, it does not depend on where the peeling is
//! rooted, and the round-robin split of the family kernel among processors gives the
//! sequential likelihood.

use app_common::{App, AppError, AppResult, Params, Size, Value};
use app_ilink::model::Gametes;
use app_ilink::peel::{self, Workspace};
use app_ilink::{estimate, Problem, ILINK};
use std::path::{Path, PathBuf};

fn example_paths() -> (PathBuf, PathBuf) {
    let dir = app_common::data_dir().join("ilink");
    (
        dir.join("ilink_example_datafile.dat"),
        dir.join("ilink_example_pedfile.dat"),
    )
}

fn example_text() -> (String, String) {
    let (d, p) = example_paths();
    (
        std::fs::read_to_string(d).unwrap(),
        std::fs::read_to_string(p).unwrap(),
    )
}

fn example() -> Problem {
    let (d, p) = example_paths();
    Problem::from_files(&d, &p).unwrap()
}

fn from_text(data: &str, ped: &str) -> Result<Problem, AppError> {
    Problem::from_text(Path::new("t.dat"), data, Path::new("t.ped"), ped)
}

#[test]
fn the_estimate_is_the_minimum_over_a_grid() {
    let problem = example();
    let est = estimate(&problem).unwrap();
    let mut ws = Workspace::default();
    // The reported value is the function at the reported thetas.
    assert_eq!(est.neg2_ln_like, problem.neg2_ln_like(&est.thetas, &mut ws));
    // No point of a 51 x 51 grid over the whole box, nor any nearby point, is lower.
    let mut lowest = f64::INFINITY;
    for i in 0..=50 {
        for j in 0..=50 {
            lowest = lowest.min(problem.neg2_ln_like(&[i as f64 * 0.01, j as f64 * 0.01], &mut ws));
        }
    }
    assert!(
        est.neg2_ln_like <= lowest,
        "grid has {lowest}, estimate {}",
        est.neg2_ln_like
    );
    for (d1, d2) in [
        (1e-4, 0.0),
        (-1e-4, 0.0),
        (0.0, 1e-4),
        (1e-4, 1e-4),
        (-1e-4, 1e-4),
    ] {
        let t = [est.thetas[0] + d1, est.thetas[1] + d2];
        assert!(
            problem.neg2_ln_like(&t, &mut ws) > est.neg2_ln_like,
            "{t:?} is lower"
        );
    }
    // The marker-disease fraction is on its lower bound; the marker-marker one inside.
    assert_eq!(est.thetas[1], 0.0);
    assert!((est.thetas[0] - 0.0987).abs() < 1e-3, "{:?}", est.thetas);
    // Linkage improves on free recombination.
    assert!(est.neg2_ln_like < problem.neg2_ln_like(&[0.5, 0.5], &mut ws) - 1.0);
}

/// The example's text with only the loci `keep` (input numbers from 1, two of them):
/// a two-locus datafile and the pedfile with those loci's columns.
fn two_loci(data: &str, ped: &str, keep: [usize; 2]) -> (String, String) {
    let lines: Vec<&str> = data.lines().collect();
    // Locus descriptions start on line 4: locus 1 takes 2 lines, locus 2 (affection with
    // 3 liability classes) 6 lines, locus 3 2 lines.
    let spans = [(3, 5), (5, 11), (11, 13)];
    let mut d = String::from("2 0 0 3\n0 0.0 0.0 0\n1 2\n");
    for k in keep {
        let (a, b) = spans[k - 1];
        for l in &lines[a..b] {
            d += l;
            d += "\n";
        }
    }
    d += "0 0\n0.5\n0\n1\n";
    // After the 9 pedigree columns each locus has two columns (alleles, or status and
    // liability class).
    let p: String = ped
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let cols: Vec<&str> = keep
                .iter()
                .flat_map(|&k| f[7 + 2 * k..9 + 2 * k].to_vec())
                .collect();
            format!("{} {}\n", f[..9].join(" "), cols.join(" "))
        })
        .collect();
    (d, p)
}

#[test]
fn at_free_recombination_the_likelihood_is_the_product_over_loci() {
    // With every fraction 0.5 the loci are independent, L = L1 L2 L3, so the two-locus
    // likelihoods satisfy L12 L13 L23 = L^2.
    let (data, ped) = example_text();
    let problem = from_text(&data, &ped).unwrap();
    let mut ws = Workspace::default();
    let joint = problem.pedigree_ln_likelihoods(&[0.5, 0.5], &mut ws);
    let mut sum = vec![0.0; joint.len()];
    for keep in [[1, 2], [1, 3], [2, 3]] {
        let (d, p) = two_loci(&data, &ped, keep);
        let pair = from_text(&d, &p).unwrap_or_else(|e| panic!("loci {keep:?}: {e}"));
        for (s, l) in sum
            .iter_mut()
            .zip(pair.pedigree_ln_likelihoods(&[0.5], &mut ws))
        {
            *s += l / 2.0;
        }
    }
    for (j, s) in joint.iter().zip(&sum) {
        assert!(
            (j - s).abs() < 1e-12 * s.abs(),
            "joint {j} vs product of loci {s}"
        );
    }
}

#[test]
fn the_likelihood_does_not_depend_on_the_proband() {
    let (data, ped) = example_text();
    let base = from_text(&data, &ped).unwrap();
    let mut ws = Workspace::default();
    let thetas = [0.1197, 0.125];
    let want = base.pedigree_ln_likelihoods(&thetas, &mut ws);
    // Move the proband of pedigree 1 to grandchild 15 and of pedigree 2 to grandchild 13:
    // families above them are then peeled down.
    let moved: String = ped
        .lines()
        .map(|l| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            let is = |p: &str, i: &str| f[0] == p && f[1] == i;
            f[8] = if is("1", "15") || is("2", "13") {
                "1"
            } else {
                "0"
            }
            .into();
            f.join(" ") + "\n"
        })
        .collect();
    let other = from_text(&data, &moved).unwrap();
    assert_ne!(other.pedigrees.roots, base.pedigrees.roots);
    let got = other.pedigree_ln_likelihoods(&thetas, &mut ws);
    for (w, g) in want.iter().zip(&got) {
        assert!((w - g).abs() < 1e-12 * w.abs(), "{w} vs {g}");
    }
}

/// The parallel decomposition, run on one thread: every family's kernel split into
/// `nprocs` round-robin stripes with one contribution array each, combined in processor
/// order. Returns the pedigrees' log-likelihoods and whether every peel-up target came out
/// bit-for-bit equal to the sequential one.
fn split_likelihood(problem: &Problem, thetas: &[f64], nprocs: usize) -> (Vec<f64>, bool) {
    let (model, peds) = (&problem.model, &problem.pedigrees);
    let g = model.ngeno;
    let gam = Gametes::new(model, thetas);
    let tables = peel::Tables {
        model,
        gam: &gam,
        peds,
    };
    let mut arrays = problem.base.clone();
    let mut seq = Workspace::default();
    let mut contrib = vec![0.0; nprocs * g];
    let mut scratch = vec![peel::Scratch::default(); nprocs];
    let mut up_exact = true;
    let mut result = Vec::new();
    for (fams, roots) in peds.ped_families.iter().zip(&peds.ped_roots) {
        let mut ln = 0.0;
        for fam in &peds.families[fams.clone()] {
            let jobs: Vec<_> = scratch
                .iter_mut()
                .map(|s| peel::prepare(model, peds, fam, &arrays, s))
                .collect();
            assert!(
                jobs.iter().all(|j| *j == jobs[0]),
                "prepare must agree on every processor"
            );
            let job = jobs[0];
            for (id, (s, out)) in scratch.iter_mut().zip(contrib.chunks_mut(g)).enumerate() {
                peel::family_kernel(
                    &tables,
                    &job,
                    &arrays,
                    peel::stripe(id, nprocs, job.n_outer),
                    s,
                    out,
                );
            }
            // The sequential kernel on the same arrays, for comparison.
            let sj = peel::prepare(model, peds, fam, &arrays, &mut seq.scratch);
            seq.contrib.resize(g, 0.0);
            peel::family_kernel(
                &tables,
                &sj,
                &arrays,
                0..sj.n_outer,
                &mut seq.scratch,
                &mut seq.contrib,
            );
            let t = job.target(peds) as usize;
            let mut alone = arrays[t * g..(t + 1) * g].to_vec();
            peel::combine(&sj, &mut alone, &seq.contrib, 1);
            let target = &mut arrays[t * g..(t + 1) * g];
            peel::combine(&job, target, &contrib, nprocs);
            if job.down.is_none()
                && alone
                    .iter()
                    .zip(target.iter())
                    .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                up_exact = false;
            }
            ln += peel::rescale(target);
        }
        for &r in &peds.roots[roots.clone()] {
            ln += peel::person_array(&arrays, g, r).iter().sum::<f64>().ln();
        }
        result.push(ln);
    }
    (result, up_exact)
}

#[test]
fn the_striped_kernel_gives_the_sequential_likelihood() {
    let (data, ped) = example_text();
    let mut problems = vec![from_text(&data, &ped).unwrap()];
    // A generated study peeled towards a grandchild, so that families are peeled down.
    let spec = app_ilink::generate::Spec {
        pedigrees: 2,
        sibship: 3,
        alleles: 3,
        markers: 2,
        seed: 5,
    };
    let (gd, gp) = app_ilink::generate::linkage_files(&spec);
    let gp: String = gp
        .lines()
        .map(|l| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            f[8] = if f[1] == "8" { "1" } else { "0" }.into();
            f.join(" ") + "\n"
        })
        .collect();
    problems.push(from_text(&gd, &gp).unwrap());
    let mut downs = 0;
    for problem in &problems {
        downs += problem
            .pedigrees
            .families
            .iter()
            .filter(|f| f.target != f.father && f.target != f.mother)
            .count();
        let thetas = vec![0.13; problem.data.thetas.len()];
        let want = problem.pedigree_ln_likelihoods(&thetas, &mut Workspace::default());
        for nprocs in [1, 2, 3, 7] {
            let (got, up_exact) = split_likelihood(problem, &thetas, nprocs);
            assert!(
                up_exact,
                "peeling up must be exact with {nprocs} processors"
            );
            for (w, g) in want.iter().zip(&got) {
                if nprocs == 1 {
                    assert_eq!(w, g);
                }
                assert!(
                    (w - g).abs() <= 1e-13 * w.abs(),
                    "{nprocs} processors: {g} vs {w}"
                );
            }
        }
    }
    assert!(downs > 0, "the second problem should peel some family down");
}

#[test]
fn the_app_reports_thetas_and_likelihood_and_checks_them() {
    let params = Params::resolve("ilink", ILINK.params(), Size::Test, &[]).unwrap();
    let seq = ILINK.sequential(&params).unwrap();
    let Some(Value::F64s(thetas)) = seq.get("thetas") else {
        panic!("no thetas in {seq}")
    };
    assert_eq!(thetas.len(), 2);
    let Some(Value::F64(f)) = seq.get("neg2_ln_like") else {
        panic!("no neg2_ln_like in {seq}")
    };
    assert!(*f > 0.0);
    assert!(ILINK.check(&seq, &seq).is_ok());
    let shifted = |dt: f64, df: f64| {
        AppResult::new()
            .with(
                "thetas",
                Value::F64s(thetas.iter().map(|t| t + dt).collect()),
            )
            .f64("neg2_ln_like", f * (1.0 + df))
    };
    assert!(ILINK.check(&seq, &shifted(1e-7, 1e-13)).is_ok());
    assert_eq!(
        ILINK.check(&seq, &shifted(1e-3, 0.0)).unwrap_err().field,
        "thetas"
    );
    assert_eq!(
        ILINK.check(&seq, &shifted(0.0, 1e-6)).unwrap_err().field,
        "neg2_ln_like"
    );
}

#[test]
fn fixed_recombination_fractions_stay_fixed() {
    let (data, ped) = example_text();
    let data = data.replace(" 1 1 << ITERATE THETA FLAGS", " 0 1 << ITERATE THETA FLAGS");
    let problem = from_text(&data, &ped).unwrap();
    let est = estimate(&problem).unwrap();
    assert_eq!(est.thetas[0], 0.1197);
    let mut ws = Workspace::default();
    for t in [0.0, 0.01, 0.05, 0.2] {
        assert!(problem.neg2_ln_like(&[0.1197, t], &mut ws) >= est.neg2_ln_like);
    }
}

#[test]
fn inconsistent_data_and_loops_are_reported() {
    let (data, ped) = example_text();
    // Child 14 of pedigree 1 given allele 2 at the first marker: its parents are 1 3 and
    // 1 3 at that locus.
    let bad = ped.replace(
        "  1 14 11 10  0 15 15 2 0  1 3",
        "  1 14 11 10  0 15 15 2 0  2 2",
    );
    assert_ne!(bad, ped);
    let e = estimate(&from_text(&data, &bad).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("pedigree 1") && e.to_string().contains("Mendelian"),
        "{e}"
    );

    // Individual 11 of pedigree 1 made a child of 1 and 2 who marries his sister 10.
    let looped = ped
        .replace("  1 10  1  2 14 12 12 2", "  1 10  1  2 14 11 11 2")
        .replace("  1 11  0  0 14  0  0 1", "  1 11  1  2 14 12 12 1");
    assert_ne!(looped, ped);
    match from_text(&data, &looped).unwrap_err() {
        AppError::Malformed { path, line, why } => {
            assert_eq!(path, Path::new("t.ped"));
            assert!(why.contains("loop"), "{why}");
            assert!((1..=17).contains(&line));
        }
        e => panic!("expected a loop to be malformed input, got {e}"),
    }
}

#[test]
fn estimates_on_a_generated_study_recover_the_simulated_linkage() {
    // The generator simulates marker - disease - marker with fractions 0.10 and 0.05, so
    // the markers recombine with probability 0.10 + 0.05 - 2 (0.10) (0.05) = 0.14. That is
    // well determined by the typed meioses (about 200 informative ones in 40 pedigrees,
    // standard error about 0.03); the disease position between the markers much less so.
    let spec = app_ilink::generate::Spec {
        pedigrees: 40,
        sibship: 5,
        alleles: 3,
        markers: 2,
        seed: 2,
    };
    let (d, p) = app_ilink::generate::linkage_files(&spec);
    let est = estimate(&from_text(&d, &p).unwrap()).unwrap();
    let [t1, t2] = est.thetas[..] else {
        panic!("two intervals expected")
    };
    let markers = t1 + t2 - 2.0 * t1 * t2;
    assert!(
        (markers - 0.14).abs() < 0.06,
        "marker recombination {markers} from {:?}",
        est.thetas
    );
    assert!(
        t1 < 0.25 && t2 < 0.25,
        "linkage not detected: {:?}",
        est.thetas
    );
}
