//! Litmus tests of the coherence protocol, under CSM-DMS and CSM-None, on every fault
//! backend built in (or only on `DSM_BACKEND` when it is set).

use dsm::{Cluster, Config, ExecMode, FaultBackend, Protocol};
use protocol_variants::{CSM_DMS, CSM_NONE};

/// One protocol on one fault backend.
struct Case {
    proto: Protocol,
    backend: FaultBackend,
    name: String,
}

fn config(case: &Case, nodes: usize, procs: usize, mode: ExecMode) -> Config {
    let mut c = Config::new(nodes, procs, case.proto);
    c.heap_bytes = 16 << 20;
    c.mode = mode;
    c.backend = case.backend;
    c
}

/// The fault backends this build has, or the one `DSM_BACKEND` names.
fn backends() -> Vec<FaultBackend> {
    match std::env::var("DSM_BACKEND") {
        Ok(b) if !b.is_empty() => vec![b.parse().expect("DSM_BACKEND must name a fault backend")],
        _ if cfg!(feature = "userfaultfd") => {
            vec![FaultBackend::Mprotect, FaultBackend::Userfaultfd]
        }
        _ => vec![FaultBackend::Mprotect],
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for backend in backends() {
        for proto in [CSM_DMS, CSM_NONE] {
            out.push(Case {
                proto,
                backend,
                name: format!("{} on {backend}", proto.name),
            });
        }
    }
    out
}

/// A value written before a lock release is seen by the next holder of the lock.
#[test]
fn message_passing_through_a_lock() {
    for case in cases() {
        let report = Cluster::new(config(&case, 2, 1, ExecMode::Threads))
            .run(|s| {
                let data = s.alloc::<u64>(1024);
                let ready = s.alloc::<u64>(1);
                let lock = s.lock();
                move |p| {
                    if p.id() == 0 {
                        lock.acquire(p);
                        for i in 0..1024 {
                            data.set(i, 1000 + i as u64);
                        }
                        ready.set(0, 1);
                        lock.release(p);
                        0
                    } else {
                        loop {
                            lock.acquire(p);
                            let r = ready.get(0);
                            let sum: u64 = if r == 1 {
                                (0..1024).map(|i| data.get(i)).sum()
                            } else {
                                0
                            };
                            lock.release(p);
                            if r == 1 {
                                return sum;
                            }
                        }
                    }
                }
            })
            .unwrap();
        assert_eq!(
            report.results[1],
            (0..1024u64).map(|i| 1000 + i).sum::<u64>(),
            "{}",
            case.name
        );
    }
}

/// After a barrier, every processor sees every write made before it, on every node.
#[test]
fn visibility_after_a_barrier() {
    for case in cases() {
        for mode in [ExecMode::Threads, ExecMode::Processes] {
            let r = Cluster::new(config(&case, 3, 2, mode)).run(|s| {
                let a = s.alloc::<u32>(6 * 3000);
                let bar = s.barrier();
                move |p| {
                    let n = p.nprocs();
                    for round in 1..=3u32 {
                        for i in (p.id()..a.len()).step_by(n) {
                            a.set(i, round * 100_000 + i as u32);
                        }
                        bar.wait(p);
                        for i in 0..a.len() {
                            assert_eq!(
                                a.get(i),
                                round * 100_000 + i as u32,
                                "round {round}, element {i}"
                            );
                        }
                        bar.wait(p);
                    }
                    1u32
                }
            });
            match r {
                Err(e) if e.is_other_run() => continue,
                r => assert_eq!(r.unwrap().results, vec![1; 6], "{} {mode}", case.name),
            }
        }
    }
}

/// A flag orders the setter's earlier writes before the waiter's later reads.
#[test]
fn a_flag_publishes_data() {
    for case in cases() {
        let r = Cluster::new(config(&case, 2, 2, ExecMode::Threads))
            .run(|s| {
                let a = s.alloc::<f64>(4096);
                let flags = s.flags(4);
                move |p| {
                    // Processor k fills its quarter and sets flag k; everyone reads it all.
                    let q = a.len() / 4;
                    for i in p.id() * q..(p.id() + 1) * q {
                        a.set(i, i as f64 * 0.5);
                    }
                    flags[p.id()].set(p);
                    let mut sum = 0.0;
                    for (k, f) in flags.iter().enumerate() {
                        f.wait(p);
                        for i in k * q..(k + 1) * q {
                            sum += a.get(i);
                        }
                    }
                    sum
                }
            })
            .unwrap();
        let want: f64 = (0..4096).map(|i| i as f64 * 0.5).sum();
        assert!(
            r.results.iter().all(|&s| s == want),
            "{}: {:?}",
            case.name,
            r.results
        );
    }
}

/// Several nodes write disjoint words of the same pages (false sharing); every write
/// survives the diffs.
#[test]
fn false_sharing_keeps_every_write() {
    for case in cases() {
        let r = Cluster::new(config(&case, 4, 1, ExecMode::Threads))
            .run(|s| {
                let a = s.alloc::<u16>(2048 * 3);
                let bar = s.barrier();
                move |p| {
                    for round in 0..4u16 {
                        // Interleaved words: every page is written by every node.
                        for i in (p.id()..a.len()).step_by(p.nprocs()) {
                            a.set(i, round * 8 + p.id() as u16);
                        }
                        bar.wait(p);
                        for i in 0..a.len() {
                            assert_eq!(
                                a.get(i),
                                round * 8 + (i % p.nprocs()) as u16,
                                "element {i} in round {round}"
                            );
                        }
                        bar.wait(p);
                    }
                }
            })
            .unwrap();
        assert!(
            r.counters.diffs > 0,
            "{}: false sharing must produce diffs",
            case.name
        );
        assert!(r.counters.twins > 0);
    }
}

/// A page written at its home is read elsewhere after a barrier, and the home never
/// diffs it.
#[test]
fn home_writes_are_seen_elsewhere() {
    for case in cases() {
        let r = Cluster::new(config(&case, 2, 1, ExecMode::Threads))
            .run(|s| {
                let a = s.alloc::<u64>(1024);
                let bar = s.barrier();
                move |p| {
                    if p.node() == 0 {
                        a.set(0, 1); // first touch: node 0 becomes home
                    }
                    bar.wait(p);
                    if p.node() == 1 {
                        assert_eq!(a.get(0), 1); // node 1 now shares the page
                    }
                    bar.wait(p);
                    if p.node() == 0 {
                        for i in 0..1024 {
                            a.set(i, 7 * i as u64); // the home writes the master copy
                        }
                    }
                    bar.wait(p);
                    (0..1024).map(|i| a.get(i)).sum::<u64>()
                }
            })
            .unwrap();
        let want: u64 = (0..1024u64).map(|i| 7 * i).sum();
        assert_eq!(r.results, vec![want, want], "{}", case.name);
        assert_eq!(
            r.node_counters[0].diffs, 0,
            "{}: the home must not diff its own page",
            case.name
        );
        assert!(
            r.node_counters[1].invalidations >= 1,
            "{}: the reader's copy must be invalidated",
            case.name
        );
    }
}

/// A page written only by its home goes exclusive (no dirty list); when a second node
/// reads it, the home leaves exclusive mode, and its later writes are noticed.
#[test]
fn exclusive_mode_is_entered_and_left() {
    for case in cases() {
        let r = Cluster::new(config(&case, 2, 1, ExecMode::Threads))
            .run(|s| {
                let a = s.alloc::<u64>(1024);
                let bar = s.barrier();
                move |p| {
                    if p.node() == 0 {
                        a.set(5, 10); // home and only sharer: exclusive
                    }
                    bar.wait(p);
                    let first = if p.node() == 1 { a.get(5) } else { 0 };
                    bar.wait(p);
                    if p.node() == 0 {
                        a.set(5, 20); // a second sharer exists now: noticed
                    }
                    bar.wait(p);
                    (first, a.get(5))
                }
            })
            .unwrap();
        assert_eq!(r.results[1], (10, 20), "{}", case.name);
        assert_eq!(r.node_counters[0].exclusive_entries, 1, "{}", case.name);
        assert_eq!(r.node_counters[0].exclusive_exits, 1, "{}", case.name);
        assert_eq!(r.node_counters[0].twins, 0, "{}", case.name);
    }
}

/// Without the cargo feature, asking for userfaultfd is a configuration error that says
/// how to get it.
#[cfg(not(feature = "userfaultfd"))]
#[test]
fn userfaultfd_needs_its_cargo_feature() {
    let mut c = Config::new(1, 1, CSM_NONE);
    c.backend = FaultBackend::Userfaultfd;
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("--features dsm/userfaultfd") && e.contains("libclang-dev"),
        "{e}"
    );
}

/// Homes captured from one run replay in another (the paper's footnote 4): the replaying
/// run assigns exactly the captured homes, even where its own first touches would differ.
#[test]
fn homes_captured_from_one_variant_replay_in_another() {
    let program = |s: &mut dsm::Setup| {
        let a = s.alloc::<u64>(8 * 1024);
        let bar = s.barrier();
        move |p: &dsm::Proc| {
            // Node 1 touches the first half first, node 0 the second half.
            let half = a.len() / 2;
            let mine = if p.node() == 1 {
                0..half
            } else {
                half..a.len()
            };
            for i in mine.step_by(1024) {
                a.set(i, 1);
            }
            bar.wait(p);
        }
    };
    let first = Cluster::new(config(&cases()[0], 2, 1, ExecMode::Threads))
        .run(program)
        .unwrap();
    assert_eq!(first.homes.len(), 8, "every page got a home");
    assert!(
        first
            .homes
            .iter()
            .all(|&(p, h)| h == if p < 4 { 1 } else { 0 }),
        "{:?}",
        first.homes
    );
    let dir = std::env::temp_dir().join(format!("cashmere-homes-{}", std::process::id()));
    std::fs::write(&dir, first.homes_file()).unwrap();
    // Replay under CSM-None with a program whose first touches are the other way round.
    let mut c = config(&cases()[1], 2, 1, ExecMode::Threads);
    c.homes_file = Some(dir.clone());
    let replay = Cluster::new(c)
        .run(|s| {
            let a = s.alloc::<u64>(8 * 1024);
            let bar = s.barrier();
            move |p: &dsm::Proc| {
                for i in (0..a.len()).step_by(1024) {
                    if (i < a.len() / 2) == (p.node() == 0) {
                        a.set(i, 2);
                    }
                }
                bar.wait(p);
            }
        })
        .unwrap();
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(replay.homes, first.homes);
}
