//! The parallel versions on the DSM, 2 nodes x 2 processors at `test` size, against the
//! sequential result with the apps' own (exact) checker.

use app_common::{App, AppResult, Params, Size};
use app_lu::{parallel_layout, Owners, Variant, CLU, LU};
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

/// Runs `app` in parallel under `config` and checks it against the sequential run.
/// Returns `None` in a node process started for another cluster run.
fn parallel_matches_sequential(
    app: &dyn App,
    params: &Params,
    config: &Config,
) -> Option<(AppResult, dsm::Report<()>)> {
    let (par, report) = dsm::skip_other_run(app.parallel(params, config))
        .unwrap_or_else(|e| panic!("{} under {}: {e}", app.name(), config.protocol.name))?;
    // The sequential run comes after the cluster run, so node processes (which stop at
    // their cluster run) do not repeat it.
    let seq = app.sequential(params).unwrap();
    if let Err(m) = app.check(&seq, &par) {
        panic!(
            "{} under {} ({} x {}, {}): {m}\nsequential {seq}\nparallel {par}",
            app.name(),
            config.protocol.name,
            config.nodes,
            config.procs_per_node,
            config.mode
        );
    }
    Some((par, report))
}

#[test]
fn lu_matches_sequential_under_csm_none_and_csm_dms() {
    for proto in [CSM_NONE, CSM_DMS] {
        let cfg = config(proto, 2, 2, ExecMode::Threads);
        let (_, report) = parallel_matches_sequential(&LU, &params(&LU, &[]), &cfg).unwrap();
        // Each node reads the other's perimeter blocks: pages must have crossed.
        assert!(report.counters.page_transfers > 0, "{}", proto.name);
        // The end of initialization (two barriers), the one after `InitA`, the one after
        // `TouchA`, two per step (7 block steps at n = 100), the final one: 19, plus the
        // engine's own at the end; the DSM counts a barrier once per node.
        assert_eq!(report.counters.barriers, 2 * 20, "{}", proto.name);
        // Initialization ends before processor 0's `InitA` (SPLASH-2 creates the processes
        // first), so node 0 is the first toucher and stays every page's home: no home
        // moves at the end of initialization, and node 1 diffs its blocks to node 0.
        assert_eq!(report.counters.rehomes, 0, "{}", proto.name);
        assert!(report.counters.diffs > 0, "{}", proto.name);
    }
}

#[test]
fn clu_matches_sequential_under_csm_none_and_csm_dms() {
    for proto in [CSM_NONE, CSM_DMS] {
        let cfg = config(proto, 2, 2, ExecMode::Threads);
        let (_, report) = parallel_matches_sequential(&CLU, &params(&CLU, &[]), &cfg).unwrap();
        assert!(report.counters.page_transfers > 0, "{}", proto.name);
        // CLU's master writes the matrix before the processes exist: the pages of node 1's
        // blocks move to node 1 at their first touch after initialization (`TouchA`).
        assert!(report.counters.rehomes > 0, "{}", proto.name);
    }
}

#[test]
fn the_processors_together_count_the_sequential_flops() {
    // Each block is factored, divided or updated once, by its owner: the processors'
    // timed tallies add up to the sequential count, (n^3 - n) / 3.
    let cfg = config(CSM_NONE, 2, 2, ExecMode::Threads);
    for app in [&LU as &dyn App, &CLU] {
        let p = params(app, &[]);
        let n: u64 = p.get("n").unwrap();
        let (_, report) = parallel_matches_sequential(app, &p, &cfg).unwrap();
        let total: u64 = report.procs.iter().map(|r| r.work[app_lu::FLOP]).sum();
        assert_eq!(total, (n * n * n - n) / 3, "{}", app.name());
        assert!(report.procs.iter().all(|r| r.work[app_lu::FLOP] > 0), "{}", app.name());
    }
}

#[test]
fn clu_matches_sequential_in_node_processes() {
    for proto in [CSM_NONE, CSM_DMS] {
        let cfg = config(proto, 2, 2, ExecMode::Processes);
        let Some((_, report)) = parallel_matches_sequential(&CLU, &params(&CLU, &[]), &cfg) else {
            continue;
        };
        assert_eq!(report.mode, "processes");
    }
}

#[test]
fn uneven_shapes_and_small_pages_still_match() {
    // 3 processors per node: CLU's grid is 2 x 3 and LU's node rows are 3 wide; 4 KiB
    // pages move CLU's region boundaries; n = 90 leaves 10-row edge blocks.
    let mut cfg = config(CSM_NONE, 2, 3, ExecMode::Threads);
    cfg.page_bytes = 4096;
    for app in [&LU as &dyn App, &CLU] {
        parallel_matches_sequential(app, &params(app, &[("n", "90")]), &cfg).unwrap();
    }
}

#[test]
fn clu_regions_start_on_dsm_pages_and_lu_columns_stay_on_one_node() {
    let cfg = config(CSM_NONE, 2, 2, ExecMode::Threads);
    let (layout, owners) = parallel_layout(Variant::Contiguous, 128, 16, &cfg).unwrap();
    // 128 / 16 = 8 block rows; grid 2 x 2: each processor owns 16 blocks of 256
    // elements, 4096 elements = 32 KiB, exactly 4 pages of 8 KiB: regions at 0, 4096,
    // 8192, 12288 elements.
    for p in 0..4 {
        let first = (0..8)
            .flat_map(|bi| (0..8).map(move |bj| (bi, bj)))
            .filter(|&(bi, bj)| owners.owner(bi, bj) == p)
            .map(|(bi, bj)| layout.block(bi, bj).offset)
            .min()
            .unwrap();
        assert_eq!(first, p * 4096);
    }
    assert_eq!(layout.len(), 4 * 4096);
    // LU: processor p is on node p / 2, the DSM's numbering.
    let lu = Owners::new(Variant::NonContiguous, 4, cfg.procs_per_node).unwrap();
    for bj in 0..7 {
        for bi in 0..7 {
            assert_eq!(lu.owner(bi, bj) / 2, bj % 2);
        }
    }
}
