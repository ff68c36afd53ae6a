//! The parallel SOR on the DSM against the sequential version: the checker is exact, so
//! every point of the parallel grid must have seen the sequential arithmetic.

use app_common::{App, Params, Size};
use app_sor::SOR;
use dsm::ExecMode;
use protocol_variants::{CSM_DMS, CSM_NONE};

use app_common::test_config as config;

/// Runs `params` sequentially and on each protocol, and checks each parallel result.
fn agrees(params: &Params, nodes: usize, procs: usize, mode: ExecMode) {
    let seq = SOR.sequential(params).unwrap();
    for proto in [CSM_NONE, CSM_DMS] {
        let Some((par, report)) =
            dsm::skip_other_run(SOR.parallel(params, &config(proto, nodes, procs, mode))).unwrap()
        else {
            continue;
        };
        if let Err(m) = SOR.check(&seq, &par) {
            panic!("{} {mode} {nodes}x{procs}: {m}", proto.name);
        }
        // The bands' boundary rows live on other nodes' pages: a run that moved no page
        // did not share anything.
        assert!(
            report.counters.page_transfers > 0,
            "{}: no page moved",
            proto.name
        );
    }
}

fn test_size() -> Params {
    Params::resolve("sor", SOR.params(), Size::Test, &[]).unwrap()
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
fn uneven_bands_match_sequential() {
    // 13 rows over 3 processors: bands of 5, 4 and 4 rows; 2 columns make every row a
    // fraction of a page, so every page is written by several processors.
    let p = Params::from_pairs(
        Size::Test,
        &[("rows", "13"), ("cols", "2"), ("iterations", "7")],
    );
    agrees(&p, 3, 1, ExecMode::Threads);
}
