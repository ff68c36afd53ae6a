//! The parallel EM3D on the DSM against the sequential version: the checker is exact, so
//! every node of the parallel graph must have seen the sequential arithmetic.

use app_common::{App, Params, Size};
use app_em3d::EM3D;
use dsm::ExecMode;
use protocol_variants::{CSM_DMS, CSM_NONE};

/// Runs `params` sequentially and on each protocol with `nodes` x `procs` processors in
/// threads, and checks each parallel result.
fn agrees(params: &Params, nodes: usize, procs: usize) {
    let seq = EM3D.sequential(params).unwrap();
    for proto in [CSM_NONE, CSM_DMS] {
        let c = app_common::test_config(proto, nodes, procs, ExecMode::Threads);
        let (par, report) = EM3D.parallel(params, &c).unwrap();
        if let Err(m) = EM3D.check(&seq, &par) {
            panic!("{} {nodes}x{procs}: {m}", proto.name);
        }
        // Remote edges read the values of other processors' blocks.
        assert!(
            report.counters.page_transfers > 0,
            "{}: no page moved",
            proto.name
        );
    }
}

fn params(size: Size, overrides: &[(&str, &str)]) -> Params {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("em3d", EM3D.params(), size, &o).unwrap()
}

#[test]
fn test_size_on_two_nodes_of_two_matches_sequential() {
    agrees(&params(Size::Test, &[]), 2, 2);
}

#[test]
fn blocks_that_cut_graph_blocks_match_sequential() {
    // 3 running processors and a graph built for 5: the running blocks (334, 333, 333
    // nodes of each kind) cut through the graph's blocks of 200, and remote edges reach up
    // to 2 graph blocks away, wrapping around.
    let p = params(
        Size::Test,
        &[
            ("nodes", "2000"),
            ("graph_procs", "5"),
            ("dist_span", "2"),
            ("iterations", "4"),
        ],
    );
    agrees(&p, 3, 1);
}
