//! The parallel TSP on the DSM against the sequential version. The checker demands the
//! same optimal length and a valid tour of that length, read again from the instance.

use app_common::{App, Params, Size};
use app_tsp::TSP;
use dsm::ExecMode;
use protocol_variants::{CSM_DMS, CSM_NONE};

use app_common::test_config as config;

/// Runs `params` sequentially and on each protocol, and checks each parallel result.
fn agrees(params: &Params, nodes: usize, procs: usize, mode: ExecMode) {
    let seq = TSP.sequential(params).unwrap();
    for proto in [CSM_NONE, CSM_DMS] {
        let Some((par, report)) =
            dsm::skip_other_run(TSP.parallel(params, &config(proto, nodes, procs, mode))).unwrap()
        else {
            continue;
        };
        if let Err(m) = TSP.check(&seq, &par) {
            panic!("{} {mode} {nodes}x{procs}: {m}", proto.name);
        }
        // Processor 0 initializes the queue, so its pages are homed on node 0 and every
        // other node must fetch them; every processor takes TourLock at least once.
        assert!(
            report.counters.page_transfers > 0,
            "{}: no page moved",
            proto.name
        );
        assert!(
            report.counters.lock_acquires >= (nodes * procs) as u64,
            "{}: {} lock acquires for {} processors",
            proto.name,
            report.counters.lock_acquires,
            nodes * procs
        );
    }
}

fn test_size() -> Params {
    Params::resolve("tsp", TSP.params(), Size::Test, &[]).unwrap()
}

fn with(pairs: &[(&str, &str)]) -> Params {
    let overrides: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("tsp", TSP.params(), Size::Test, &overrides).unwrap()
}

#[test]
fn test_size_on_two_nodes_of_two_matches_sequential() {
    agrees(&test_size(), 2, 2, ExecMode::Threads);
}

#[test]
fn test_size_in_node_processes_matches_sequential() {
    agrees(&test_size(), 2, 2, ExecMode::Processes);
}

#[test]
fn a_tiny_pool_makes_workers_take_whole_subtrees() {
    // With 12 records the root's 15 children do not fit: the first worker takes the whole
    // tree (the overflow path) and the others find the queue done. With 40 a few splits
    // fit, then workers compete for the last free records and take overflow subtrees.
    agrees(&with(&[("max_tours", "12")]), 2, 2, ExecMode::Threads);
    agrees(&with(&[("max_tours", "40")]), 3, 1, ExecMode::Threads);
}

#[test]
fn fine_grained_splitting_on_three_nodes_matches_sequential() {
    // tspfile8 split down to 3 cities from the end: hundreds of short get_tour critical
    // sections and tiny subtrees, so the queue, the free stack and the pruning of the
    // queue by the best length are exercised under contention.
    agrees(
        &with(&[
            ("input", "tsp/tspfile8"),
            ("nodes_from_end", "3"),
            ("dfs_bound", "path"),
        ]),
        3,
        1,
        ExecMode::Threads,
    );
}
