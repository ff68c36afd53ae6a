//! The parallel Gauss on the DSM against the sequential version: the checker is exact, so
//! every row must have been eliminated with the sequential arithmetic in pivot order.

use app_common::{App, Params, Size};
use app_gauss::GAUSS;
use dsm::ExecMode;
use protocol_variants::{CSM_DMS, CSM_NONE};

/// Runs `params` sequentially and on each protocol with `nodes` x `procs` processors in
/// threads, and checks each parallel result.
fn agrees(params: &Params, nodes: usize, procs: usize) {
    let seq = GAUSS.sequential(params).unwrap();
    let n: usize = params.get("n").unwrap();
    for proto in [CSM_NONE, CSM_DMS] {
        let c = app_common::test_config(proto, nodes, procs, ExecMode::Threads);
        let (par, report) = GAUSS.parallel(params, &c).unwrap();
        if let Err(m) = GAUSS.check(&seq, &par) {
            panic!("{} {nodes}x{procs}: {m}", proto.name);
        }
        // One flag per pivot row, set once by its owner and waited for by every other
        // processor.
        let procs_total = (nodes * procs) as u64;
        assert_eq!(report.counters.flag_sets, n as u64, "{}", proto.name);
        assert_eq!(
            report.counters.flag_waits,
            n as u64 * (procs_total - 1),
            "{}",
            proto.name
        );
    }
}

fn params(size: Size, overrides: &[(&str, &str)]) -> Params {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("gauss", GAUSS.params(), size, &o).unwrap()
}

#[test]
fn test_size_on_two_nodes_of_two_matches_sequential() {
    agrees(&params(Size::Test, &[]), 2, 2);
}

#[test]
fn an_order_that_is_no_multiple_of_the_processors_matches_sequential() {
    // 37 rows over 3 processors: 13, 12 and 12 rows; rows of 38 entries share pages.
    agrees(&params(Size::Test, &[("n", "37"), ("seed", "5")]), 3, 1);
}
