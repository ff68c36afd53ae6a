//! The parallel water programs on the DSM against the sequential versions.
//!
//! With one processor the parallel programs add every term in the sequential order, so
//! their results are identical; with several, the molecule forces, cell lists and global
//! sums are summed in lock order, and the checker's tolerance (crate documentation)
//! applies.

use app_common::{App, AppError, AppResult, Params, Size, Value};
use app_water::{nsq, WATER_NSQ, WATER_SP};
use dsm::{Config, ExecMode};
use protocol_variants::{CSM_DMS, CSM_NONE};

use app_common::test_config as config;

fn params(app: &dyn App, overrides: &[(&str, &str)]) -> Params {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve(app.name(), app.params(), Size::Test, &o).unwrap()
}

/// Runs `app` in parallel; `None` in a node process serving a later run.
fn run(app: &dyn App, params: &Params, config: &Config) -> Option<(AppResult, dsm::Report<()>)> {
    dsm::skip_other_run(app.parallel(params, config)).unwrap()
}

/// Runs `app` at test size on 2 nodes of 2 processors under CSM-None and CSM-DMS and
/// checks each result against the sequential one; returns the reports.
fn agrees(app: &dyn App, mode: ExecMode) -> Vec<dsm::Report<()>> {
    let p = params(app, &[]);
    let seq = app.sequential(&p).unwrap();
    let mut reports = Vec::new();
    for proto in [CSM_NONE, CSM_DMS] {
        let Some((par, report)) = run(app, &p, &config(proto, 2, 2, mode)) else {
            continue;
        };
        if let Err(m) = app.check(&seq, &par) {
            panic!("{} {} {mode}: {m}", app.name(), proto.name);
        }
        // Every processor reads every molecule: a run that moved no page shared nothing.
        assert!(
            report.counters.page_transfers > 0,
            "{}: no page moved",
            proto.name
        );
        reports.push(report);
    }
    reports
}

/// The lock acquisitions of Water-nsquared at test size, counted from the plan: per
/// `INTRAF` one (`IntrafVirLock`), per `INTERF` one (`InterfVirLock`) plus one per flushed
/// molecule, per step three (`KinetiSumLock`, one per direction), per potential-energy
/// step one (`PotengSumLock`).
fn nsq_lock_acquires(nmol: usize, nprocs: usize, steps: usize, poteng_steps: usize) -> u64 {
    let flushed: usize = (0..nprocs)
        .map(|id| {
            nsq::flush_ranges(id, nprocs, nmol)
                .iter()
                .map(|r| r.len())
                .sum::<usize>()
        })
        .sum();
    let per_proc = 2 * (steps + 1) + 3 * steps + poteng_steps;
    (nprocs * per_proc + (steps + 1) * flushed) as u64
}

#[test]
fn water_nsq_on_two_nodes_of_two_matches_sequential() {
    for report in agrees(&WATER_NSQ, ExecMode::Threads) {
        // 64 molecules, 3 steps, the potential energy at step 3 only (nprint 3).
        assert_eq!(
            report.counters.lock_acquires,
            nsq_lock_acquires(64, 4, 3, 1),
            "{}",
            report.protocol
        );
    }
}

#[test]
fn water_sp_on_two_nodes_of_two_matches_sequential() {
    agrees(&WATER_SP, ExecMode::Threads);
}

#[test]
fn water_nsq_in_node_processes_matches_sequential() {
    agrees(&WATER_NSQ, ExecMode::Processes);
}

/// Units in the last place between two finite doubles of the same sign.
fn ulps(a: f64, b: f64) -> u64 {
    assert_eq!(a.is_sign_negative(), b.is_sign_negative(), "{a} vs {b}");
    a.to_bits().abs_diff(b.to_bits())
}

/// With one processor every sum is taken in the sequential order, so the parallel program
/// computes the sequential results bit for bit. They reach us through the DSM's report,
/// which carries each processor's result as JSON; serde_json without its
/// `float_roundtrip` feature may read a double back one unit in the last place off (for
/// example 10.569822587366419), so one ulp is allowed until the engine reads results
/// exactly.
#[test]
fn one_processor_reproduces_the_sequential_arithmetic() {
    for app in [&WATER_NSQ as &dyn App, &WATER_SP] {
        let p = params(app, &[("steps", "4"), ("nprint", "2")]);
        let seq = app.sequential(&p).unwrap();
        let (par, _) = run(app, &p, &config(CSM_NONE, 1, 1, ExecMode::Threads)).unwrap();
        assert_eq!(par.fields.len(), seq.fields.len());
        for ((name, s), (pname, q)) in seq.fields.iter().zip(&par.fields) {
            assert_eq!(name, pname);
            let (Value::F64(s), Value::F64(q)) = (s, q) else {
                panic!("{name}: {s:?} {q:?}");
            };
            assert!(ulps(*s, *q) <= 1, "{} {name}: {s} vs {q}", app.name());
        }
    }
}

/// Water-spatial at 343 molecules has 3 x 3 x 3 cells, so with 4 processors molecules move
/// between cells of different processors and nodes, under the cell locks.
#[test]
fn water_sp_with_cells_on_several_processors_matches_sequential() {
    let p = params(&WATER_SP, &[("molecules", "343"), ("steps", "4")]);
    let grid = app_water::sp::Grid::new(&app_water::setup(&p).unwrap().sys);
    assert_eq!(grid.bps, 3);
    let seq = WATER_SP.sequential(&p).unwrap();
    let (par, _) = run(&WATER_SP, &p, &config(CSM_DMS, 2, 2, ExecMode::Threads)).unwrap();
    WATER_SP.check(&seq, &par).unwrap();
}

#[test]
fn too_few_molecules_or_cells_for_the_processors_are_rejected() {
    let c = config(CSM_NONE, 2, 2, ExecMode::Threads);
    let e = WATER_NSQ
        .parallel(&params(&WATER_NSQ, &[("molecules", "1")]), &c)
        .unwrap_err();
    assert!(
        matches!(&e, AppError::BadParam { name, .. } if name == "molecules"),
        "{e}"
    );
    // 27 molecules fill a box smaller than two cutoffs: one cell.
    let e = WATER_SP
        .parallel(&params(&WATER_SP, &[("molecules", "27")]), &c)
        .unwrap_err();
    assert!(e.to_string().contains("1 cell(s) for 4 processors"), "{e}");
    assert!(
        matches!(&e, AppError::BadParam { name, .. } if name == "molecules"),
        "{e}"
    );
}
