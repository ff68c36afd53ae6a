//! First-touch claims that race with other nodes' writes (a test binary of its own: the
//! claim hook, `dsm::testing::set_claim_hook`, is global to the process).
//!
//! The scenario of issue 16 that lost an update under remote-write data: on 4 nodes x 2
//! processors, node A's first processor claims page P by first touch and its claim is
//! held (the hook holds it; a descheduled thread would do the same, sometimes); P's
//! manager B touches P and wins; A's second processor learns B, fetches P, twins it and
//! writes word Y; node C writes word X under lock L; A's claim is answered (B); node D
//! writes X under L; A releases. A claimant that received remote writes while its claim
//! was in flight took C's diff into its working copy, and its own diff then carried C's X
//! as if A had written it, landing after D's: every processor read C's 111, not D's 222.
//! The program is data-race-free, so every variant must end with X = 222 and Y = 7.

mod support;
use dsm::{Cluster, Config, ExecMode};
use support::backends;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The scenario's step, advanced by the processor that completes each step.
static STEP: AtomicU32 = AtomicU32::new(0);
/// Set when the hook held node A's claim of page P (proof the window was open).
static HELD: AtomicBool = AtomicBool::new(false);

const A: usize = 1;
/// Page P: the first page of the heap (the first allocation starts there), whose manager is
/// node 0 (page % nodes), node B.
const P: usize = 0;
const X: usize = 200;
const Y: usize = 100;

/// Waits until the scenario reaches `step` (or fails the test within a minute).
fn wait_step(step: u32) {
    support::wait_step(&STEP, step);
}

/// Holds node A's first claim of page P until node C has released its write of X.
fn hold_a_claim(node: usize, page: usize) {
    if node == A && page == P && !HELD.swap(true, Ordering::AcqRel) {
        STEP.store(1, Ordering::Release);
        wait_step(4);
    }
}


#[test]
fn a_claim_in_flight_receives_no_other_nodes_diffs() {
    dsm::testing::set_claim_hook(Some(hold_a_claim));
    let mut failures = Vec::new();
    for backend in backends() {
        for proto in protocol_variants::ALL {
            STEP.store(0, Ordering::Release);
            HELD.store(false, Ordering::Release);
            let mut c = Config::new(4, 2, proto);
            c.mode = ExecMode::Threads;
            c.backend = backend;
            c.page_bytes = 4096;
            c.heap_bytes = 1 << 20;
            let report = Cluster::new(c)
                .run(|s| {
                    let page = s.alloc::<u64>(4 * 512);
                    let lock = s.lock();
                    let bar = s.barrier();
                    move |p| {
                        let base = P * 512;
                        match p.id() {
                            // Node A, first processor: its claim of P is held in the hook.
                            2 => {
                                let _ = page.get(base);
                                STEP.store(5, Ordering::Release);
                            }
                            // Node B, P's manager: touches P while A's claim is held, and wins.
                            0 => {
                                wait_step(1);
                                let _ = page.get(base);
                                STEP.store(2, Ordering::Release);
                            }
                            // Node A, second processor: learns B, fetches, twins, writes Y,
                            // and releases only after D's write.
                            3 => {
                                wait_step(2);
                                page.set(base + Y, 7);
                                STEP.store(3, Ordering::Release);
                                wait_step(6);
                            }
                            // Node C: X = 111 under L, while A's claim is held.
                            4 => {
                                wait_step(3);
                                lock.acquire(p);
                                page.set(base + X, 111);
                                lock.release(p);
                                STEP.store(4, Ordering::Release);
                            }
                            // Node D: X = 222 under L, after A's claim was answered.
                            6 => {
                                wait_step(5);
                                lock.acquire(p);
                                page.set(base + X, 222);
                                lock.release(p);
                                STEP.store(6, Ordering::Release);
                            }
                            _ => {}
                        }
                        bar.wait(p);
                        (page.get(base + X), page.get(base + Y))
                    }
                })
                .unwrap_or_else(|e| panic!("{} on {backend}: {e}", proto.name));
            assert!(
                HELD.load(Ordering::Acquire),
                "{} on {backend}: node A's claim of page P was never held, so the scenario did not happen",
                proto.name
            );
            // Under the -Mg variants A's write fault may migrate P's home to A, which then
            // makes no diff of it; elsewhere C, D and A each send one.
            assert!(
                proto.home == dsm::HomePolicy::Migrating || report.counters.diffs >= 3,
                "{} on {backend}: {} diffs, expected C's, D's and A's",
                proto.name,
                report.counters.diffs
            );
            for (i, &(x, y)) in report.results.iter().enumerate() {
                if (x, y) != (222, 7) {
                    failures.push(format!(
                        "{} on {backend}: processor {i} read X = {x}, Y = {y} (expected 222, 7)",
                        proto.name
                    ));
                }
            }
        }
    }
    dsm::testing::set_claim_hook(None);
    assert!(failures.is_empty(), "lost updates:\n{}", failures.join("\n"));
}
