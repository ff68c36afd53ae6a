//! The parallel version on the DSM against the sequential one: at `test` size, 2 nodes x
//! 2 processors, under CSM-None and CSM-DMS, in threads and in processes. The checker is
//! exact (the crate documentation, "Checking"), so the results must agree bit for bit.

use app_barnes::{simulate, Config, BARNES};
use app_common::{App, Params, Size};
use dsm::ExecMode;
use protocol_variants::{CSM_DMS, CSM_NONE};

fn params(overrides: &[(&str, &str)]) -> Params {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("barnes", BARNES.params(), Size::Test, &o).unwrap()
}

use app_common::test_config as dsm_config;

/// Runs sequential and parallel versions under both protocols in `mode` and checks them.
fn matches_sequential(mode: ExecMode, overrides: &[(&str, &str)], nodes: usize, procs: usize) {
    let p = params(overrides);
    let seq = BARNES.sequential(&p).unwrap();
    for proto in [CSM_NONE, CSM_DMS] {
        let Some((par, report)) =
            dsm::skip_other_run(BARNES.parallel(&p, &dsm_config(proto, nodes, procs, mode)))
                .unwrap()
        else {
            continue;
        };
        assert_eq!(BARNES.check(&seq, &par), Ok(()), "{} {mode}", proto.name);
        assert_eq!(par, seq, "{} {mode}", proto.name);
        assert_eq!(report.procs.len(), nodes * procs);
        // Every node but 0 reads positions that processor 0 wrote first (their home is
        // node 0), so pages must have moved.
        if nodes > 1 {
            assert!(
                report.counters.page_transfers > 0,
                "{}: {:?}",
                proto.name,
                report.counters
            );
        }
    }
}

#[test]
fn test_size_2x2_threads_matches_sequential() {
    matches_sequential(ExecMode::Threads, &[], 2, 2);
}

#[test]
fn test_size_2x2_processes_matches_sequential() {
    matches_sequential(ExecMode::Processes, &[], 2, 2);
}

/// Another shape and input: three nodes of one processor, more steps, so the costzones
/// change from step to step and both positions of each record are read and written
/// several times.
#[test]
fn other_shape_and_seed_match_sequential() {
    matches_sequential(
        ExecMode::Threads,
        &[("nbody", "300"), ("nsteps", "5"), ("seed", "7")],
        3,
        1,
    );
}

/// A tree that does not fit its cell arrays stops the run with the sequential version's
/// error on every processor, rather than hanging at a barrier or panicking.
#[test]
fn tree_failure_is_reported_not_hung() {
    let p = params(&[("fcells", "0.1")]);
    let seq = simulate(&Config::from_params(&p).unwrap())
        .unwrap_err()
        .to_string();
    assert!(seq.contains("raise `fcells`"), "{seq}");
    for proto in [CSM_NONE, CSM_DMS] {
        let e = BARNES
            .parallel(&p, &dsm_config(proto, 2, 2, ExecMode::Threads))
            .unwrap_err()
            .to_string();
        assert_eq!(e, seq, "{}", proto.name);
    }
}
