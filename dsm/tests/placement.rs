//! Placement under the wall clock (`wait`, "Placement"). In a test binary of its own: the
//! cores a cluster binds are the process's, and another cluster running at once in the
//! same process (a parallel test) would hold them.

use dsm::{Cluster, Config, ExecMode};
use protocol_variants::CSM_NONE;

/// Under the wall clock a cluster whose processors fit the cores binds each processor to
/// a core of its own (`wait`, "Placement"), and `Pinning::Off` binds none. On a host (or
/// CPU set) of one core nothing fits, and the test checks that nothing is bound.
#[test]
fn processors_are_bound_to_cores_of_their_own_when_they_fit() {
    let cpus = dsm::host::allowed_cpus();
    for pinning in [dsm::Pinning::Auto, dsm::Pinning::Off] {
        for mode in [ExecMode::Threads, ExecMode::Processes] {
            let mut c = Config::new(2, 1, CSM_NONE);
            c.heap_bytes = 16 << 20;
            c.mode = mode;
            c.pinning = pinning;
            let r = Cluster::new(c).run(|s| {
                let bar = s.barrier();
                move |p| {
                    bar.wait(p);
                    // The CPUs this processor may run on now, as a bit mask.
                    dsm::host::allowed_cpus().iter().fold(0u64, |m, &c| m | 1 << (c % 64))
                }
            });
            if let Some(r) = dsm::skip_other_run(r).unwrap() {
                let all = cpus.iter().fold(0u64, |m, &c| m | 1 << (c % 64));
                let expect = if pinning == dsm::Pinning::Auto && cpus.len() >= 2 {
                    vec![1 << (cpus[0] % 64), 1 << (cpus[1] % 64)]
                } else {
                    vec![all, all]
                };
                assert_eq!(r.results, expect, "{pinning:?} {mode}: CPU masks per processor");
            }
        }
    }
}
