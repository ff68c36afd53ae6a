//! A recall of an exclusive page that ends while a processor of the page's home waits for
//! it, followed by a fresh grant before that processor looks (a test binary of its own:
//! the hooks, `dsm::testing`, are global to the process).
//!
//! Found by `random_drf` (notice-overflow class, seed 7036, CSM-DMS, 3 x 1 threads), once
//! in 38 long sweeps, as a hang: node 1's processor waited for the flush that ends the
//! recall of page 12 while nodes 0 and 2 waited at a barrier. The trace showed node 2
//! granted the page exclusively, node 0 told to recall it, node 1's processor waiting for
//! that recall, the recall ending, and node 2 granted the page again before node 1's
//! processor looked. That processor waited for `excl_at` to clear, which only a recall
//! does, and nobody was recalling the fresh grant.
//!
//! Here the hooks open that window every time, on 3 nodes x 1 processor, page P homed at
//! node 1 (a homes file), under the variants whose directory is replicated (a write fault
//! on a clean copy asks for exclusive mode when the directory shows no other sharer):
//! 1. node 2 writes P[0] = 1: P is granted to it exclusively;
//! 2. node 0 reads P: the home answers with the holder and marks P being recalled; the
//!    holder hook holds node 0 before it recalls;
//! 3. node 1's processor reads P, finds the recall under way, and the recall-wait hook
//!    holds it before it waits;
//! 4. node 0 recalls P from node 2 and reads it (the recall ends);
//! 5. node 2 writes P[1] = 2 under lock L (twin and diff: node 0 shares P) and releases;
//! 6. node 0 acquires L, which invalidates its copy of P (node 0 leaves P's sharers);
//! 7. node 2 writes P[2] = 3 on its clean copy: no other sharer, so P is granted to it
//!    exclusively again, and no recall is under way;
//! 8. node 1's processor looks. It must recall P itself and read P[0] = 1.
//!
//! After a barrier every processor must read (1, 2, 3). A hang is a failure: the run has
//! a deadline.

mod support;
use dsm::{Cluster, Config, ExecMode, MetadataStrategy};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use support::{backends, HomesFile};

/// The scenario's step, advanced by the processor (or hook) that completes each step.
static STEP: AtomicU32 = AtomicU32::new(0);
/// Set when the holder hook held node 0 (step 2) and the recall-wait hook node 1 (step 3).
static HELD_RECALLER: AtomicBool = AtomicBool::new(false);
static HELD_HOME: AtomicBool = AtomicBool::new(false);

/// Page P: the first page of the heap.
const P: usize = 0;
const HOME: usize = 1;
/// How long the scenario may take before it counts as hung: it takes milliseconds.
const DEADLINE: Duration = Duration::from_secs(60);

/// Waits until the scenario reaches `step` (or fails the test within a minute).
fn wait_step(step: u32) {
    support::wait_step(&STEP, step);
}

/// Step 2: node 0 is told the holder; it recalls only once node 1 waits (step 3).
fn hold_the_recaller(node: usize, page: usize) {
    if node == 0 && page == P && !HELD_RECALLER.swap(true, Ordering::AcqRel) {
        STEP.store(2, Ordering::Release);
        wait_step(3);
    }
}

/// Step 3: node 1's processor found the recall under way; it looks only after the fresh
/// grant (step 7).
fn hold_the_home(node: usize, page: usize) {
    if node == HOME && page == P && !HELD_HOME.swap(true, Ordering::AcqRel) {
        STEP.store(3, Ordering::Release);
        wait_step(7);
    }
}

#[test]
fn a_home_processor_recalls_a_page_granted_anew_while_it_waited_for_a_recall() {
    dsm::testing::set_holder_hook(Some(hold_the_recaller));
    dsm::testing::set_recall_wait_hook(Some(hold_the_home));
    let homes = HomesFile::new("recall-regrant", &[(P, HOME)]);
    let variants: Vec<dsm::Protocol> = protocol_variants::ALL
        .into_iter()
        .filter(|p| p.metadata == MetadataStrategy::Replicated && p.home == dsm::HomePolicy::FirstTouch)
        .collect();
    assert_eq!(variants.len(), 3, "CSM-DMS, CSM-MS and CSM-ADB");
    for backend in backends() {
        for &proto in &variants {
            let what = format!("{} on {backend}", proto.name);
            STEP.store(0, Ordering::Release);
            HELD_RECALLER.store(false, Ordering::Release);
            HELD_HOME.store(false, Ordering::Release);
            let mut c = Config::new(3, 1, proto);
            c.mode = ExecMode::Threads;
            c.backend = backend;
            c.page_bytes = 4096;
            c.heap_bytes = 1 << 20;
            c.homes_file = Some(homes.0.clone());
            // The run goes on a thread of its own, so that a hang fails the test.
            let (done, ended) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let report = Cluster::new(c).run(|s| {
                    let page = s.alloc::<u64>(512);
                    let lock = s.lock();
                    let bar = s.barrier();
                    move |p| {
                        match p.id() {
                            2 => {
                                page.set(0, 1);
                                STEP.store(1, Ordering::Release);
                                wait_step(4);
                                lock.acquire(p);
                                page.set(1, 2);
                                lock.release(p);
                                STEP.store(5, Ordering::Release);
                                wait_step(6);
                                page.set(2, 3);
                                STEP.store(7, Ordering::Release);
                            }
                            0 => {
                                wait_step(1);
                                // Held in the holder hook until node 1 waits.
                                assert_eq!(page.get(0), 1);
                                STEP.store(4, Ordering::Release);
                                wait_step(5);
                                lock.acquire(p);
                                lock.release(p);
                                STEP.store(6, Ordering::Release);
                            }
                            _ => {
                                wait_step(2);
                                // Held in the recall-wait hook until the fresh grant.
                                assert_eq!(page.get(0), 1);
                            }
                        }
                        bar.wait(p);
                        (page.get(0), page.get(1), page.get(2))
                    }
                });
                let _ = done.send(report);
            });
            let report = match ended.recv_timeout(DEADLINE) {
                Ok(r) => r.unwrap_or_else(|e| panic!("{what}: {e}")),
                Err(_) => panic!(
                    "{what}: the run hung at step {} (node 1's processor waits for a recall that \
                     nobody makes)",
                    STEP.load(Ordering::Acquire)
                ),
            };
            assert!(
                HELD_RECALLER.load(Ordering::Acquire) && HELD_HOME.load(Ordering::Acquire),
                "{what}: a hook never held its processor, so the scenario did not happen"
            );
            // Node 2 entered exclusive mode twice (steps 1 and 7); the second grant is the
            // one node 1's processor had to recall.
            assert!(
                report.counters.exclusive_entries >= 2,
                "{what}: node 2 was granted P {} time(s), not twice: {:?}",
                report.counters.exclusive_entries,
                report.counters
            );
            for (i, r) in report.results.iter().enumerate() {
                assert_eq!(*r, (1, 2, 3), "{what}: processor {i} read P[0..3]");
            }
        }
    }
    dsm::testing::set_holder_hook(None);
    dsm::testing::set_recall_wait_hook(None);
}
