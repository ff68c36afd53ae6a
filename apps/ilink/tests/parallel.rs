//! The parallel ILINK on the DSM against the sequential version. Peeling up, every
//! genotype of a connector is computed by one processor with the sequential arithmetic
//! and the other rows add exact zeros, so a study peeled only upwards must give the
//! sequential estimate bit for bit; with peeling down the checker's tolerance applies.

use app_common::{App, AppResult, Params, Size};
use app_ilink::parallel::run_parallel;
use app_ilink::peel::MASTER_ALONE_WORK;
use app_ilink::{estimate, Problem, ILINK};
use dsm::{ExecMode, Protocol};
use protocol_variants::{CSM_DMS, CSM_NONE};
use std::path::Path;

use app_common::test_config as config;

const BOTH: [Protocol; 2] = [CSM_NONE, CSM_DMS];

fn summary(problem: &Problem) -> AppResult {
    let est = estimate(problem).unwrap();
    AppResult::new()
        .with("thetas", app_common::Value::F64s(est.thetas))
        .f64("neg2_ln_like", est.neg2_ln_like)
}

/// Whether some family is peeled onto a child.
fn peels_down(problem: &Problem) -> bool {
    let peds = &problem.pedigrees;
    peds.families
        .iter()
        .any(|f| f.target != f.father && f.target != f.mother)
}

/// Runs `problem` on each of `protocols` and compares with the sequential estimate: exactly
/// when `exact`, otherwise with the checker. Returns how many runs this process made
/// (in process mode a child makes only its own).
fn agrees(
    problem: &Problem,
    protocols: &[Protocol],
    (nodes, procs): (usize, usize),
    mode: ExecMode,
    exact: bool,
) -> usize {
    let seq = summary(problem);
    let mut runs = 0;
    for &proto in protocols {
        let Some((par, report)) =
            dsm::skip_other_run(run_parallel(problem, &config(proto, nodes, procs, mode))).unwrap()
        else {
            continue;
        };
        runs += 1;
        if let Err(m) = ILINK.check(&seq, &par) {
            panic!("{} {mode} {nodes}x{procs}: {m}", proto.name);
        }
        if exact {
            assert_eq!(par, seq, "{} {mode} {nodes}x{procs}", proto.name);
        }
        // Node 1 reads the genotype arrays the master wrote: pages must have moved.
        assert!(
            report.counters.page_transfers > 0,
            "{}: no page moved",
            proto.name
        );
    }
    runs
}

fn example() -> Problem {
    let params = Params::resolve("ilink", ILINK.params(), Size::Test, &[]).unwrap();
    ILINK.problem(&params).unwrap()
}

/// A generated study of one pedigree whose founder couple is untyped: with 3 alleles at
/// each marker there are 18 haplotypes and 171 genotypes, and the founders' family has
/// far more work than [`MASTER_ALONE_WORK`], so it is split among the processors.
/// `proband` moves the proband to that individual of each pedigree.
fn generated(proband: Option<&str>) -> Problem {
    let spec = app_ilink::generate::Spec {
        pedigrees: 1,
        sibship: 3,
        alleles: 3,
        markers: 2,
        seed: 5,
    };
    let (data, ped) = app_ilink::generate::linkage_files(&spec);
    let ped: String = match proband {
        None => ped,
        Some(id) => ped
            .lines()
            .map(|l| {
                let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
                f[8] = if f[1] == id { "1" } else { "0" }.into();
                f.join(" ") + "\n"
            })
            .collect(),
    };
    let problem = Problem::from_text(Path::new("g.dat"), &data, Path::new("g.ped"), &ped).unwrap();
    // The founders' family reads the founders' starting arrays, whichever way it is
    // peeled (neither founder is the connector of any other family).
    let g = problem.model.ngeno;
    let nonzero = |p: usize| {
        problem.base[p * g..(p + 1) * g]
            .iter()
            .filter(|&&x| x != 0.0)
            .count()
    };
    assert!(
        nonzero(0) * nonzero(1) * spec.sibship >= MASTER_ALONE_WORK,
        "the founders' family should be split"
    );
    problem
}

#[test]
fn the_example_on_two_nodes_of_two_gives_the_sequential_estimate() {
    let problem = example();
    // Both probands are founders: every family is peeled up, so the result is exact.
    assert!(!peels_down(&problem));
    agrees(&problem, &BOTH, (2, 2), ExecMode::Threads, true);
}

#[test]
fn the_example_in_node_processes_gives_the_sequential_estimate() {
    let runs = agrees(&example(), &BOTH, (2, 2), ExecMode::Processes, true);
    // The launcher checks every run; a node process serves one and skips the others.
    if !dsm::host::is_node_process() {
        assert_eq!(runs, BOTH.len());
    }
}

#[test]
fn split_families_peeled_up_give_the_sequential_estimate_exactly() {
    let problem = generated(None);
    assert!(!peels_down(&problem));
    agrees(&problem, &BOTH, (2, 2), ExecMode::Threads, true);
}

#[test]
fn split_families_peeled_down_agree_with_the_sequential_estimate() {
    // Grandchild 8 as proband: the founders' family is peeled down onto child 3.
    let problem = generated(Some("8"));
    assert!(peels_down(&problem));
    agrees(&problem, &BOTH, (2, 2), ExecMode::Threads, false);
    // Three nodes of one processor: uneven stripes, each on its own node.
    agrees(&problem, &[CSM_NONE], (3, 1), ExecMode::Threads, false);
}

#[test]
fn inconsistent_data_is_reported_by_the_parallel_version() {
    let dir = app_common::data_dir().join("ilink");
    let data = std::fs::read_to_string(dir.join("ilink_example_datafile.dat")).unwrap();
    let ped = std::fs::read_to_string(dir.join("ilink_example_pedfile.dat")).unwrap();
    // Child 14 of pedigree 1 given allele 2 at the first marker: its parents are 1 3 and
    // 1 3 at that locus.
    let bad = ped.replace(
        "  1 14 11 10  0 15 15 2 0  1 3",
        "  1 14 11 10  0 15 15 2 0  2 2",
    );
    assert_ne!(bad, ped);
    let problem = Problem::from_text(Path::new("t.dat"), &data, Path::new("t.ped"), &bad).unwrap();
    let e = run_parallel(&problem, &config(CSM_DMS, 2, 1, ExecMode::Threads)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("pedigree 1") && msg.contains("Mendelian"),
        "{msg}"
    );
}

#[test]
fn the_app_runs_the_parallel_version() {
    let params = Params::resolve("ilink", ILINK.params(), Size::Test, &[]).unwrap();
    let seq = ILINK.sequential(&params).unwrap();
    let (par, report) = ILINK
        .parallel(&params, &config(CSM_NONE, 2, 1, ExecMode::Threads))
        .unwrap();
    assert_eq!(par, seq);
    assert_eq!((report.nodes, report.procs_per_node), (2, 1));
}
