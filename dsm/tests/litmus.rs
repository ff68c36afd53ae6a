//! Litmus tests of the coherence protocol, on every fault backend built in (or only on
//! `DSM_BACKEND` when it is set): the basic orderings under CSM-DMS and CSM-None, then
//! home migration (section 2.3.5) under CSM-MS-Mg and CSM-None-Mg and adaptive broadcast
//! (2.3.6) under CSM-ADB. Each scenario asserts the data and the protocol counters that
//! prove the scenario happened, so that it cannot pass without exercising what it names.

mod support;
use support::{backends, HomesFile};
use dsm::{Cluster, Config, ExecMode, FaultBackend, Protocol};
use protocol_variants::{CSM_ADB, CSM_DMS, CSM_MS_MG, CSM_NONE, CSM_NONE_MG};

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


fn cases() -> Vec<Case> {
    cases_of(&[CSM_DMS, CSM_NONE])
}

/// Every protocol of `protos` on every backend.
fn cases_of(protos: &[Protocol]) -> Vec<Case> {
    let mut out = Vec::new();
    for backend in backends() {
        for &proto in protos {
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
            if let Some(r) = dsm::skip_other_run(r).unwrap() {
                assert_eq!(r.results, vec![1; 6], "{} {mode}", case.name);
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

/// The value processor 0 writes into word `i` during initialization.
fn init_value(i: usize) -> u64 {
    0x1000_0000 + i as u64 * 3
}

/// First touch after initialization (section 2.3.1): processor 0 writes twelve pages
/// (homing them on node 0) and ends initialization; then node n's second processor first
/// touches page n (a read), page n + 4 (a write) and page n + 12 (never written before:
/// plain first touch), and node 0 touches pages 8-11 first. Every page must end homed at
/// its first toucher after initialization, with the data of the initialization and of the
/// writes intact, under every variant, backend and mode: six homes move (pages 1-3 and
/// 5-7; node 0 keeps pages 0 and 4, which it touched first, and pages 8-11).
#[test]
fn the_first_node_to_touch_a_page_after_initialization_becomes_its_home() {
    const NODES: usize = 4;
    for case in cases_of(&protocol_variants::ALL) {
        for mode in modes(&case) {
            let what = format!("{} ({mode})", case.name);
            let r = Cluster::new(config(&case, NODES, 2, mode))
                .run(|s| {
                    let a = s.alloc::<u64>(16 * PAGE_WORDS);
                    let bar = s.barrier();
                    move |p: &dsm::Proc| -> Result<(), String> {
                        if p.id() == 0 {
                            for i in 0..12 * PAGE_WORDS {
                                a.set(i, init_value(i));
                            }
                        }
                        bar.end_initialization(p);
                        let n = p.node();
                        if p.local_id() == 1 {
                            let mut pages = vec![n, n + 4, n + 12];
                            if n == 0 {
                                pages.extend(8..12);
                            }
                            for pg in pages {
                                let i = pg * PAGE_WORDS + 5;
                                if pg == n || (8..12).contains(&pg) {
                                    if a.get(i) != init_value(i) {
                                        return Err(format!("page {pg} lost its initial value"));
                                    }
                                } else {
                                    for k in 0..PAGE_WORDS {
                                        let i = pg * PAGE_WORDS + k;
                                        a.set(i, init_value(i) + 1);
                                    }
                                }
                            }
                        }
                        bar.wait(p);
                        for i in 0..16 * PAGE_WORDS {
                            let pg = i / PAGE_WORDS;
                            let want = match pg {
                                4..=7 | 12..=15 => init_value(i) + 1,
                                _ => init_value(i),
                            };
                            if a.get(i) != want {
                                return Err(format!("word {i} (page {pg}) = {:#x}, expected {want:#x}", a.get(i)));
                            }
                        }
                        bar.wait(p);
                        Ok(())
                    }
                });
            let Some(r) = dsm::skip_other_run(r).unwrap_or_else(|e| panic!("{what}: {e}")) else {
                continue;
            };
            for (id, res) in r.results.iter().enumerate() {
                assert_eq!(res, &Ok(()), "{what}: processor {id}");
            }
            let mut homes: Vec<(u32, usize)> = r.homes.iter().map(|&(p, h)| (p, h as usize)).collect();
            homes.sort_unstable();
            let expect: Vec<(u32, usize)> = (0..16u32)
                .map(|pg| {
                    let h = match pg as usize {
                        pg @ 0..=3 => pg,
                        pg @ 4..=7 => pg - 4,
                        8..=11 => 0,
                        pg => pg - 12,
                    };
                    (pg, h)
                })
                .collect();
            assert_eq!(homes, expect, "{what}: homes (page, node)");
            assert_eq!(r.counters.rehomes, 6, "{what}: homes moved to their first toucher");
            assert_eq!(r.counters.migrations, 0, "{what}: no migration (2.3.5) is needed");
        }
    }
}

/// Under home migration, a node's first write since initialization to a page whose home
/// touched it first since then is a migration (2.3.5), not a move to the first toucher
/// (2.3.1): the home says which it granted, and the counters say the same.
#[test]
fn a_migration_after_the_home_touched_first_counts_as_a_migration() {
    for case in cases_of(&[CSM_MS_MG, CSM_NONE_MG]) {
        let what = case.name.clone();
        let r = Cluster::new(config(&case, 2, 1, ExecMode::Threads)).run(|s| {
            let a = s.alloc::<u64>(PAGE_WORDS);
            let bar = s.barrier();
            move |p: &dsm::Proc| -> Result<(), String> {
                if p.id() == 0 {
                    a.set(5, 55);
                }
                bar.end_initialization(p);
                // Node 0, the home, touches the page first: it keeps it.
                if p.id() == 0 && a.get(5) != 55 {
                    return Err("node 0 lost its initial value".into());
                }
                bar.wait(p);
                // Node 1's first touch, a write fault: a migration request.
                if p.id() == 1 {
                    a.set(6, 66);
                }
                bar.wait(p);
                if a.get(5) != 55 || a.get(6) != 66 {
                    return Err(format!("values {} and {}", a.get(5), a.get(6)));
                }
                bar.wait(p);
                Ok(())
            }
        });
        let Some(r) = dsm::skip_other_run(r).unwrap_or_else(|e| panic!("{what}: {e}")) else {
            continue;
        };
        for res in &r.results {
            assert_eq!(res, &Ok(()), "{what}");
        }
        assert_eq!(r.counters.rehomes, 0, "{what}: rehomes");
        assert_eq!(r.counters.migrations, 1, "{what}: migrations");
        assert_eq!(r.counters.migration_attempts, 1, "{what}: attempts");
    }
}

/// A home that gives a page to its first toucher since initialization hands over only
/// the toucher as a sharer: every other node dropped its copy at the end of
/// initialization, even if its drop (home-held directory) reached a node that was no longer
/// the home and was lost. Here node 2's drop goes to node 0 after the page migrated to node
/// 1; node 0 then touches first after initialization, and its writes must go exclusive, not
/// noticed to node 2 at every release.
#[test]
fn a_page_moved_to_its_first_toucher_has_no_stale_sharers() {
    for case in cases_of(&[CSM_NONE_MG]) {
        let what = case.name.clone();
        let r = Cluster::new(config(&case, 3, 1, ExecMode::Threads)).run(|s| {
            let a = s.alloc::<u64>(PAGE_WORDS);
            let bar = s.barrier();
            move |p: &dsm::Proc| -> Result<(), String> {
                if p.id() == 0 {
                    a.set(5, 1);
                }
                bar.wait(p);
                if p.id() == 2 {
                    let _ = a.get(5);
                }
                bar.wait(p);
                if p.id() == 1 {
                    a.set(6, 2); // migrates to node 1, whose set names node 2
                }
                bar.wait(p); // node 2 drops the page; its drop goes to node 0
                bar.end_initialization(p);
                if p.id() == 0 {
                    let _ = a.get(5); // the page moves to node 0
                }
                bar.wait(p);
                if p.id() == 0 {
                    a.set(7, 3);
                }
                bar.wait(p);
                if a.get(5) != 1 || a.get(6) != 2 || a.get(7) != 3 {
                    return Err("bad values".into());
                }
                bar.wait(p);
                Ok(())
            }
        });
        let Some(r) = dsm::skip_other_run(r).unwrap_or_else(|e| panic!("{what}: {e}")) else {
            continue;
        };
        for res in &r.results {
            assert_eq!(res, &Ok(()), "{what}");
        }
        assert_eq!(r.node_counters[0].write_notices, 0, "{what}: node 0's notices");
        assert_eq!(r.counters.rehomes, 1, "{what}: rehomes");
    }
}

// -----------------------------------------------------------------------------------
// Home migration (2.3.5) and adaptive broadcast (2.3.6).
// -----------------------------------------------------------------------------------

/// `u64` words in one coherence page of the default 8 KiB.
const PAGE_WORDS: usize = 1024;

/// `nodes` nodes of one processor each, with a small heap.
fn small_config(case: &Case, nodes: usize, mode: ExecMode) -> Config {
    let mut c = Config::new(nodes, 1, case.proto);
    c.heap_bytes = 1 << 20;
    c.mode = mode;
    c.backend = case.backend;
    c
}

/// The modes a scenario runs in for `case`: threads always, and processes on the first
/// backend (process mode re-runs the test binary once per node, which is slow).
fn modes(case: &Case) -> Vec<ExecMode> {
    if case.backend == backends()[0] {
        vec![ExecMode::Threads, ExecMode::Processes]
    } else {
        vec![ExecMode::Threads]
    }
}


/// Pages written by all three nodes in the migration race, first homed at node 0.
const RACE_PAGES: usize = 8;
const RACE_ROUNDS: u64 = 100;

/// The value of word `i` of the race pages at the end of `round`.
fn race_value(round: u64, i: usize) -> u64 {
    ((round + 1) << 32) | i as u64
}

/// Home migration racing a fetch and a diff from a third node (2.3.5), 3 nodes x 1. In
/// every round the three nodes write their own words (word `i` is node `i % 3`'s) of pages
/// first homed at node 0, at once: each write fault asks the page's current home to move
/// (granted unless that home is writing the page), so homes move while the others fault.
/// Meanwhile node 2 writes a temporary value, releases it through a lock of its own (its
/// diffs go to the home it believes in, which may have moved: redirected, or deferred at
/// a new home still taking over), fetches a page node 0 wrote in the previous round, and
/// writes its final values, which the barrier's release diffs. After the barrier every
/// node checks every word. The run must have migrated homes, refused a migration to a
/// writing home, and met both a home that had moved and a busy page or a home taking over:
/// on the wall clock those paths depend on how the host schedules the three nodes, so the
/// wall-clock runs check the words and that homes moved, and the modeled clock's run (with
/// jittered wake-ups, the same interleaving on every host) asserts every path.
///
/// This runs the race's program on `c` (homes at node 0), checks every word after every
/// round and that every node checked them all and homes moved, and prints the paths the
/// run took under `what`. `None` on a node process's other runs.
fn migration_race(mut c: Config, what: &str) -> Option<dsm::Report<u64>> {
    // Two more pages after the race pages: node 0 writes one per round, node 2 reads the
    // other (written the round before), so the two never race.
    let homes: Vec<(u32, usize)> = (0..RACE_PAGES as u32 + 2).map(|p| (p, 0)).collect();
    let file = HomesFile::new("litmus-migration_race", &homes);
    c.homes_file = Some(file.0.clone());
    let r = Cluster::new(c).run(|s| {
        let a = s.alloc::<u64>(RACE_PAGES * PAGE_WORDS);
        let q = s.alloc::<u64>(2 * PAGE_WORDS);
        let own = s.lock();
        let bar = s.barrier();
        move |p| {
            let me = p.node();
            let mine = move || (me..a.len()).step_by(3);
            let mut checked = 0u64;
            for round in 0..RACE_ROUNDS {
                let fresh = (round % 2) as usize * PAGE_WORDS;
                let old = PAGE_WORDS - fresh;
                match me {
                    0 => {
                        for i in mine() {
                            a.set(i, race_value(round, i));
                        }
                        for j in 0..PAGE_WORDS {
                            q.set(fresh + j, race_value(round, j));
                        }
                    }
                    1 => {
                        for i in mine() {
                            a.set(i, race_value(round, i));
                        }
                    }
                    _ => {
                        for i in mine() {
                            a.set(i, race_value(round, i) ^ 0xdead);
                        }
                        own.acquire(p);
                        own.release(p);
                        if round > 0 {
                            for j in 0..PAGE_WORDS {
                                assert_eq!(q.get(old + j), race_value(round - 1, j));
                            }
                        }
                        for i in mine() {
                            a.set(i, race_value(round, i));
                        }
                    }
                }
                bar.wait(p);
                for i in 0..a.len() {
                    assert_eq!(
                        a.get(i),
                        race_value(round, i),
                        "round {round}, word {i} (written by node {}), read at node {me}",
                        i % 3
                    );
                    checked += 1;
                }
                bar.wait(p);
            }
            checked
        }
    });
    let r = dsm::skip_other_run(r).unwrap()?;
    let want = RACE_ROUNDS * (RACE_PAGES * PAGE_WORDS) as u64;
    assert_eq!(r.results, vec![want; 3], "{what}");
    let k = &r.counters;
    eprintln!(
        "{what}: {} migrations of {} attempts, {} redirects ({} at node 2), {} deferred",
        k.migrations,
        k.migration_attempts,
        k.redirects,
        r.node_counters[2].redirects,
        k.deferred_messages,
    );
    assert!(k.migrations > 0, "{what}: no home migrated: {k:?}");
    Some(r)
}

#[test]
fn migration_races_a_fetch_and_a_diff() {
    for case in cases_of(&[CSM_MS_MG, CSM_NONE_MG]) {
        for mode in modes(&case) {
            migration_race(small_config(&case, 3, mode), &format!("{} {mode}", case.name));
        }
    }
}

/// The migration race under the modeled clock, whose interleaving is the same on every
/// host: the paths the race is there to reach are asserted here, where a loaded host
/// cannot take them away (the wall-clock runs above check the words).
#[test]
fn the_migration_race_under_the_modeled_clock_reaches_every_path() {
    for case in cases_of(&[CSM_MS_MG, CSM_NONE_MG]) {
        let mut c = small_config(&case, 3, ExecMode::Threads);
        c.clock = dsm::ClockMode::Modeled;
        c.cpu_scale = 0.0;
        c.test_knobs.wake_jitter = Some(dsm::WakeJitter { seed: 1, max_ns: 20_000, one_in: 4 });
        let what = format!("{} modeled", case.name);
        let r = migration_race(c, &what).expect("threads mode runs every run");
        let k = &r.counters;
        assert!(
            k.migration_attempts > k.migrations,
            "{what}: no migration was refused to a writing home: {k:?}"
        );
        assert!(k.redirects > 0, "{what}: no request met a home that had moved: {k:?}");
        assert!(
            k.deferred_messages > 0,
            "{what}: no request met a busy page or a home still taking over: {k:?}"
        );
        // Node 2 diffs the pages whose home it did not take over.
        assert!(
            r.node_counters[2].diffs > 0,
            "{what}: node 2 never sent a diff: {:?}",
            r.node_counters[2]
        );
    }
}

/// A stale cached directory entry makes a useless migration request (2.3.5), 2 nodes x 1,
/// page P pinned at node 0. Node 1 reads P while the home is not writing it, so under
/// CSM-None-Mg it caches "home not writing". The home then writes P and releases (a
/// flag), which sends node 1 a write notice; node 1 drops P at its acquire and leaves the
/// sharing set. The home, P's only sharer again, writes P once more: P goes exclusive,
/// which no release downgrades, so the home is still writing P after it sets the next
/// flag. Node 1 then write-faults P, trusts its stale entry and asks the home to move: the
/// home refuses and, since node 1 has no valid copy, sends P with the refusal (the request
/// rides on the page update, 2.3.5), so node 1 writes P as a plain writer after one round
/// trip. Under CSM-MS-Mg the replicated directory shows the home's bit, so the same
/// program asks nothing.
#[test]
fn a_stale_cached_entry_makes_a_refused_migration() {
    for case in cases_of(&[CSM_NONE_MG, CSM_MS_MG]) {
        for mode in modes(&case) {
            let file = HomesFile::new("litmus-stale_entry", &[(0, 0)]);
            let mut c = small_config(&case, 2, mode);
            c.homes_file = Some(file.0.clone());
            let r = Cluster::new(c).run(|s| {
                let a = s.alloc::<u64>(PAGE_WORDS);
                // Under message synchronization flag k is managed by node k % 2, so
                // `dropped` (flag 2) is set at the home by a message that follows node 1's
                // one-way drop of P on the same FIFO ring: the home has handled the drop
                // when it sees the flag.
                let f = s.flags(4);
                let (read, downgraded, dropped, exclusive) = (f[0], f[1], f[2], f[3]);
                let bar = s.barrier();
                move |p| {
                    if p.node() == 1 {
                        assert_eq!(a.get(0), 0);
                        read.set(p);
                        downgraded.wait(p);
                        dropped.set(p);
                        exclusive.wait(p);
                        a.set(1, 3);
                    } else {
                        read.wait(p);
                        a.set(0, 1);
                        downgraded.set(p);
                        dropped.wait(p);
                        a.set(0, 2);
                        exclusive.set(p);
                    }
                    bar.wait(p);
                    (a.get(0), a.get(1))
                }
            });
            let Some(r) = dsm::skip_other_run(r).unwrap() else {
                continue;
            };
            let what = format!("{} {mode}", case.name);
            assert_eq!(r.results, vec![(2, 3); 2], "{what}");
            let (home, writer) = (&r.node_counters[0], &r.node_counters[1]);
            assert_eq!(
                home.exclusive_entries, 1,
                "{what}: the home must write P exclusively once: {home:?}"
            );
            assert_eq!(writer.invalidations, 1, "{what}: {writer:?}");
            assert_eq!(writer.migrations, 0, "{what}: {writer:?}");
            // The read and the write fault: one request each, each bringing the page.
            assert_eq!(
                (writer.page_requests, writer.page_transfers),
                (2, 2),
                "{what}: {writer:?}"
            );
            if case.proto == CSM_NONE_MG {
                assert_eq!(
                    writer.migration_attempts, 1,
                    "{what}: node 1's stale entry must make one refused request: {writer:?}"
                );
            } else {
                assert_eq!(
                    writer.migration_attempts, 0,
                    "{what}: the replicated directory shows the home writing: {writer:?}"
                );
            }
            assert_eq!(r.homes, vec![(0, 0)], "{what}: P must stay at node 0");
        }
    }
}

/// A granted migration moves a page only if the requester's valid copy is older than the
/// master copy (`PageState::version`), 3 nodes x 1, page P first homed at node 0, modeled
/// clock (so the order below is the program's on any host). Node 1 and node 2 read P after
/// the home wrote it. Node 2 then writes P[2]: its copy is the master's version, so the
/// home moves to node 2 with no page; node 2 releases (a flag). Node 1, which has not
/// acquired since, still holds its copy valid, and writes P[1] much later in virtual time:
/// it asks the home to move with its copy's old version, and the grant must carry the
/// master copy, or node 2's write would be lost at the new home. In the second round node
/// 0 reads P and writes it: its copy is current, so the migration moves no page.
#[test]
fn a_migration_sends_the_page_only_to_an_older_copy() {
    for case in cases_of(&[CSM_NONE_MG, CSM_MS_MG]) {
        let file = HomesFile::new("litmus-version", &[(0, 0)]);
        let mut c = small_config(&case, 3, ExecMode::Threads);
        c.homes_file = Some(file.0.clone());
        c.clock = dsm::ClockMode::Modeled;
        c.cpu_scale = 0.0;
        let r = Cluster::new(c).run(|s| {
            let a = s.alloc::<u64>(PAGE_WORDS);
            let f = s.flags(2);
            let (read, diffed) = (f[0], f[1]);
            let bar = s.barrier();
            move |p| {
                if p.node() == 0 {
                    a.set(0, 1);
                }
                bar.wait(p);
                match p.node() {
                    1 => {
                        assert_eq!(a.get(0), 1);
                        read.set(p);
                        p.compute(10_000_000);
                        a.set(1, 11);
                    }
                    2 => {
                        read.wait(p);
                        assert_eq!(a.get(0), 1);
                        a.set(2, 22);
                        diffed.set(p);
                    }
                    _ => diffed.wait(p),
                }
                bar.wait(p);
                let first = (a.get(0), a.get(1), a.get(2));
                bar.wait(p);
                if p.node() == 0 {
                    a.set(3, 33);
                }
                bar.wait(p);
                (first, a.get(3))
            }
        });
        let Some(r) = dsm::skip_other_run(r).unwrap() else {
            continue;
        };
        let what = case.name.clone();
        assert_eq!(r.results, vec![((1, 11, 22), 33); 3], "{what}");
        let k = &r.node_counters;
        // Requests that came back without the page: redirects, and grants to a current
        // copy (no refusal happens here).
        let without_page = |n: usize| k[n].page_requests - k[n].page_transfers - k[n].redirects;
        for (n, grants_without_page) in [(0, 1), (1, 0), (2, 1)] {
            assert_eq!(k[n].migrations, 1, "{what}: node {n}: {:?}", k[n]);
            assert_eq!(
                without_page(n),
                grants_without_page,
                "{what}: node {n}'s grants without a page: {:?}",
                k[n]
            );
        }
        assert_eq!(r.homes, vec![(0, 0)], "{what}: P ends at node 0");
    }
}

/// Rounds of the adaptive-broadcast scenario, after the first read.
const ADB_ROUNDS: u64 = 6;

/// The value of word `i` of P after `round` writes (round 0: the home's first write).
fn adb_value(round: u64, i: usize) -> u64 {
    ((round + 1) << 40) | (i as u64 * 3)
}

/// A page broadcast to its readers (2.3.6), then rewritten by `writer`, is never read from
/// the broadcast buffer again, 4 nodes x 1. Node 0 first-touches P. In every round nodes 1
/// and 2 read P at once after a barrier; node 3 reads it after both (flags), and so finds
/// the copy the home broadcast at the second request of its synchronization interval (the
/// home waits for node 3 before its next release starts a new interval). After another
/// barrier `writer` rewrites P and releases at a barrier, which must invalidate the
/// broadcast copy: every node then reads the new value in the next round's reads.
fn broadcast_copy_is_invalidated_by_a_release(writer: usize) {
    for case in cases_of(&[CSM_ADB]) {
        for mode in modes(&case) {
            let r = Cluster::new(small_config(&case, 4, mode)).run(|s| {
                let a = s.alloc::<u64>(PAGE_WORDS);
                let flags = s.flags(3 * (ADB_ROUNDS as usize + 1));
                let bar = s.barrier();
                move |p| {
                    let me = p.node();
                    let check = |round: u64| {
                        for i in 0..PAGE_WORDS {
                            assert_eq!(
                                a.get(i),
                                adb_value(round, i),
                                "node {me}, round {round}, word {i}"
                            );
                        }
                    };
                    if me == 0 {
                        for i in 0..PAGE_WORDS {
                            a.set(i, adb_value(0, i));
                        }
                    }
                    bar.wait(p);
                    for round in 0..=ADB_ROUNDS {
                        let f = &flags[3 * round as usize..][..3];
                        match me {
                            1 | 2 => {
                                check(round);
                                f[me - 1].set(p);
                            }
                            3 => {
                                f[0].wait(p);
                                f[1].wait(p);
                                check(round);
                                f[2].set(p);
                            }
                            _ => {
                                f[2].wait(p);
                                check(round);
                            }
                        }
                        bar.wait(p);
                        if round < ADB_ROUNDS {
                            if me == writer {
                                for i in 0..PAGE_WORDS {
                                    a.set(i, adb_value(round + 1, i));
                                }
                            }
                            bar.wait(p);
                        }
                    }
                }
            });
            let Some(r) = dsm::skip_other_run(r).unwrap() else {
                continue;
            };
            let what = format!("{} {mode}, writer node {writer}", case.name);
            let k = &r.node_counters;
            eprintln!(
                "{what}: broadcast {}, hits {:?}, transfers {:?}, diffs {}",
                k[0].pages_broadcast,
                k.iter().map(|c| c.broadcast_hits).collect::<Vec<_>>(),
                k.iter().map(|c| c.page_transfers).collect::<Vec<_>>(),
                r.counters.diffs
            );
            assert_eq!(r.homes, vec![(0, 0)], "{what}");
            assert!(
                k[0].pages_broadcast > ADB_ROUNDS,
                "{what}: the home must broadcast P every round: {:?}",
                k[0]
            );
            // After a home write nodes 1 to 3 are invalidated, so node 3 makes the third
            // request of the interval and takes the broadcast copy every round. After a
            // write by node 1 only nodes 2 and 3 are, so node 3 makes the second request,
            // the one that publishes: it hits only in the first round.
            let node3_hits = if writer == 0 { ADB_ROUNDS + 1 } else { 1 };
            assert_eq!(
                k[3].broadcast_hits, node3_hits,
                "{what}: node 3's reads after the broadcast: {:?}",
                k[3]
            );
            // After each write node 2 looks in the buffer first, which holds the copy
            // published before the write: it must fetch from the home instead.
            assert!(
                k[2].page_transfers >= ADB_ROUNDS,
                "{what}: node 2 must fetch P from the home after each write: {:?}",
                k[2]
            );
            if writer == 0 {
                assert_eq!(r.counters.diffs, 0, "{what}: the home never diffs");
            } else {
                assert_eq!(k[writer].diffs, ADB_ROUNDS, "{what}: one diff per write");
            }
        }
    }
}

/// The release that invalidates the broadcast copy is a non-home writer's: a remote-write
/// diff and an epoch bump by the releaser.
#[test]
fn adb_copy_invalidated_by_a_remote_writer() {
    broadcast_copy_is_invalidated_by_a_release(1);
}

/// The release that invalidates the broadcast copy is the home's own: no diff, the home
/// stops writing P.
#[test]
fn adb_copy_invalidated_by_the_home() {
    broadcast_copy_is_invalidated_by_a_release(0);
}

/// CSM-ADB on 32 nodes of one processor, as the paper's one-level runs (2.3.6): every
/// node writes its slice of an array (falsely shared pages, diffs from everyone), adds to
/// a counter under a lock, and reads a page the home wrote, which nodes 1 and 2 read
/// first so that the home broadcasts it and the other 29 nodes take it from the buffer.
#[test]
fn adb_on_32_nodes() {
    const NODES: usize = 32;
    const SLICE: usize = 64;
    for case in cases_of(&[CSM_ADB]) {
        let r = Cluster::new(small_config(&case, NODES, ExecMode::Threads))
            .run(|s| {
                let wide = s.alloc::<u64>(PAGE_WORDS);
                let slices = s.alloc::<u64>(NODES * SLICE);
                let total = s.alloc::<u64>(1);
                let lock = s.lock();
                let first = s.flags(2);
                let bar = s.barrier();
                move |p| {
                    let me = p.node();
                    if me == 0 {
                        for i in 0..PAGE_WORDS {
                            wide.set(i, 5 * i as u64);
                        }
                    }
                    for j in 0..SLICE {
                        slices.set(me * SLICE + j, (me * 1000 + j) as u64);
                    }
                    lock.acquire(p);
                    total.set(0, total.get(0) + me as u64 + 1);
                    lock.release(p);
                    bar.wait(p);
                    // The home waits too: its next release would start a new interval
                    // between the two first requests.
                    if me != 1 && me != 2 {
                        first[0].wait(p);
                        first[1].wait(p);
                    }
                    let wide_sum: u64 = (0..PAGE_WORDS).map(|i| wide.get(i)).sum();
                    if me == 1 || me == 2 {
                        first[me - 1].set(p);
                    }
                    let slice_sum: u64 = (0..slices.len()).map(|i| slices.get(i)).sum();
                    (wide_sum, slice_sum, total.get(0))
                }
            })
            .unwrap();
        let wide: u64 = (0..PAGE_WORDS as u64).map(|i| 5 * i).sum();
        let slices: u64 = (0..NODES)
            .flat_map(|n| (0..SLICE).map(move |j| (n * 1000 + j) as u64))
            .sum();
        let total = (NODES * (NODES + 1) / 2) as u64;
        assert_eq!(
            r.results,
            vec![(wide, slices, total); NODES],
            "{}",
            case.name
        );
        let k = &r.counters;
        eprintln!(
            "{}: broadcast {}, hits {}, diffs {}, transfers {}",
            case.name, k.pages_broadcast, k.broadcast_hits, k.diffs, k.page_transfers
        );
        assert!(
            r.node_counters[0].pages_broadcast > 0,
            "{}: {k:?}",
            case.name
        );
        assert!(
            k.broadcast_hits >= NODES as u64 - 3,
            "{}: nodes 3.. must read the wide page from the buffer: {k:?}",
            case.name
        );
        assert!(k.diffs > 0, "{}: {k:?}", case.name);
    }
}

// -----------------------------------------------------------------------------------
// Exclusive mode away from the home (section 2.2).
// -----------------------------------------------------------------------------------

/// Pages of one episode of the exclusive-mode scenario, all homed at node 0.
const EXCL_PAGES: usize = 2;
const EXCL_EPISODES: usize = 4;
const EXCL_ROUNDS: u64 = 5;

/// The value of word `i` after node 1's `round`-th write.
fn excl_value(round: u64, i: usize) -> u64 {
    ((round + 1) << 36) | (i as u64 * 5 + 1)
}

/// A page whose only sharer is not its home goes exclusive there (section 2.2), 3 nodes
/// x 2, in episodes of fresh pages. A homes file gives the pages to node 0, whose
/// processors do not touch them before the episode's readers come; node 1's processors
/// are the only ones that write and read them, over several intervals of one lock, each
/// starting with a write (the first faults the page in and asks to hold it exclusively).
/// After a barrier every processor reads them at once (node 2's and the home's: the first
/// request recalls the pages from node 1, the others wait for the flush) and must see node
/// 1's last values. Node 1 then writes again (a second sharer exists: twins and diffs)
/// and everyone checks again under the lock. Under CSM-MS-Mg and CSM-None-Mg the home
/// migrates to node 1 instead, which writes exclusively as the home; the counters say
/// which happened.
#[test]
fn a_single_non_home_sharer_writes_exclusively() {
    for case in cases_of(&protocol_variants::ALL) {
        for mode in modes(&case) {
            let homes: Vec<(u32, usize)> = (0..(EXCL_EPISODES * EXCL_PAGES) as u32)
                .map(|p| (p, 0))
                .collect();
            let file = HomesFile::new("litmus-non_home_exclusive", &homes);
            let mut c = small_config(&case, 3, mode);
            c.procs_per_node = 2;
            c.homes_file = Some(file.0.clone());
            let words = EXCL_PAGES * PAGE_WORDS;
            let r = Cluster::new(c).run(|s| {
                let a = s.alloc::<u64>(EXCL_EPISODES * words);
                let lock = s.lock();
                let bar = s.barrier();
                move |p| {
                    let mine = |i: usize| i % 2 == p.local_id();
                    let mut errors = 0;
                    for e in 0..EXCL_EPISODES {
                        let at = e * words;
                        let wrong = |round: u64| {
                            (0..words)
                                .filter(|&i| a.get(at + i) != excl_value(round, i))
                                .count()
                        };
                        if p.node() == 1 {
                            for round in 0..EXCL_ROUNDS {
                                lock.acquire(p);
                                for i in (0..words).filter(|&i| mine(i)) {
                                    a.set(at + i, excl_value(round, i));
                                }
                                errors += (0..words)
                                    .filter(|&i| mine(i) && a.get(at + i) != excl_value(round, i))
                                    .count();
                                lock.release(p);
                            }
                        }
                        bar.wait(p);
                        errors += wrong(EXCL_ROUNDS - 1);
                        bar.wait(p);
                        if p.node() == 1 {
                            lock.acquire(p);
                            for i in (0..words).filter(|&i| mine(i)) {
                                a.set(at + i, excl_value(EXCL_ROUNDS, i));
                            }
                            lock.release(p);
                        }
                        bar.wait(p);
                        lock.acquire(p);
                        errors += wrong(EXCL_ROUNDS);
                        lock.release(p);
                    }
                    errors
                }
            });
            let Some(r) = dsm::skip_other_run(r).unwrap_or_else(|e| panic!("{} {mode}: {e}", case.name))
            else {
                continue;
            };
            let name = format!("{} {mode}", case.name);
            assert_eq!(
                r.results,
                vec![0; 6],
                "{name}: words read wrong, per processor"
            );
            let n1 = &r.node_counters[1];
            eprintln!(
                "{name}: node 1 entered exclusive mode {} times and left it {} times; {} twins, {} diffs, {} deferred",
                n1.exclusive_entries, n1.exclusive_exits, n1.twins, n1.diffs, r.counters.deferred_messages
            );
            assert!(
                n1.exclusive_entries >= 1,
                "{name}: node 1 never went exclusive"
            );
            assert!(
                n1.exclusive_exits >= 1,
                "{name}: node 1 never left exclusive mode"
            );
            assert_eq!(r.node_counters[0].exclusive_entries, 0, "{name}");
            assert_eq!(r.node_counters[2].exclusive_entries, 0, "{name}");
            if case.proto.home == dsm::HomePolicy::Migrating {
                assert!(n1.migrations >= 1, "{name}: the home did not migrate");
            } else {
                assert_eq!(n1.migrations, 0, "{name}");
                // Exclusive away from the home: node 1's intervals before the readers came
                // made no twins and no diffs; only its last interval (two releases at
                // most, each of both pages) did.
                let pages = (EXCL_EPISODES * EXCL_PAGES) as u64;
                assert_eq!(n1.exclusive_entries, pages, "{name}");
                assert!(
                    n1.twins <= 2 * pages && n1.diffs <= 2 * pages,
                    "{name}: {} twins and {} diffs at node 1",
                    n1.twins,
                    n1.diffs
                );
            }
        }
    }
}

/// An exclusive holder that drops its page flushes all of it home first, 4 nodes x 1,
/// page P homed at node 0 (which touches it only at the end), under the modeled clock
/// with declared computation only, so that the order below is the simulation's, the same
/// on every run. Nodes 1, 2 and 3 read P. Nodes 2 and 3 then write halves of a part of P
/// and release (flags), each noticing the other two, and take each other's flag, so that
/// both drop P and leave its sharing set. Node 1 has taken no notice yet: long after
/// (declared computation), it writes its own part of P on its clean copy, sees in the
/// replicated directory that nobody else shares P, and is granted P exclusively, with the
/// master copy. Its next acquire takes the two notices and drops P: the whole page goes
/// home (no twin to diff against). After a barrier every node, the home too, must see all
/// three writers' words. Only the replicated directory lets a clean copy ask (the
/// home-held one has no sharing set away from the home); CSM-ADB is left out because
/// the three reads at once would publish P to the broadcast buffers, after which P is
/// never granted (see `adb.rs`).
#[test]
fn an_exclusive_holder_that_drops_its_page_flushes_it_whole() {
    use protocol_variants::{CSM_DMS, CSM_MS};
    const PARTS: [(usize, usize); 3] = [(0, 300), (300, 700), (700, PAGE_WORDS)];
    let value = |node: usize, i: usize| ((node as u64) << 40) | (i as u64 * 3 + 7);
    for case in cases_of(&[CSM_DMS, CSM_MS]) {
        let file = HomesFile::new("litmus-drop_flush", &[(0, 0)]);
        let mut c = small_config(&case, 4, ExecMode::Threads);
        c.clock = dsm::ClockMode::Modeled;
        c.cpu_scale = 0.0;
        c.homes_file = Some(file.0.clone());
        let r = Cluster::new(c)
            .run(|s| {
                let a = s.alloc::<u64>(PAGE_WORDS);
                let flags = s.flags(3);
                let bar = s.barrier();
                move |p| {
                    let me = p.node();
                    if me > 0 {
                        assert_eq!(a.get(0), 0);
                    }
                    bar.wait(p);
                    if me > 0 {
                        let (from, to) = PARTS[me - 1];
                        if me == 1 {
                            // Long after nodes 2 and 3 have dropped P.
                            p.compute(20_000_000);
                        }
                        for i in from..to {
                            a.set(i, value(me, i));
                        }
                        flags[me - 1].set(p);
                        match me {
                            1 => flags[1].wait(p),
                            2 => flags[2].wait(p),
                            _ => flags[1].wait(p),
                        }
                    }
                    bar.wait(p);
                    PARTS
                        .iter()
                        .enumerate()
                        .flat_map(|(k, &(from, to))| (from..to).map(move |i| (k + 1, i)))
                        .filter(|&(node, i)| a.get(i) != value(node, i))
                        .count()
                }
            })
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let name = &case.name;
        assert_eq!(r.results, vec![0; 4], "{name}: words read wrong, per node");
        let n1 = &r.node_counters[1];
        assert_eq!(
            (n1.exclusive_entries, n1.exclusive_exits, n1.flushes_before_drop, n1.twins),
            (1, 1, 1, 0),
            "{name}: node 1 did not write P exclusively and flush it whole when it dropped it: {n1:?}"
        );
    }
}

/// The home moves in the middle of a diff split over several messages (2.3.5), 3 nodes x
/// 1, one 16 KiB page P homed at node 0, under the modeled clock with declared
/// computation only, so that the order below is the simulation's, the same on every run.
/// Nodes 1 and 2 read P. Node 0 writes the even bytes of P's first half, so that node 1's
/// write fault finds the home writing and twins P instead of taking its home; node 1
/// writes every odd byte (one run of 2,048 masked words, split by a test knob into four
/// messages of at most 4,700 bytes: a 16 KiB page's diff fits one message otherwise). Node 0
/// releases; node 1 releases later, sending its diff to node 0; while its messages are on
/// their way, node 2 writes the even bytes of P's second half, and its write fault asks
/// node 0, which no longer writes P, to give it P's home. The rest of node 1's diff is
/// answered `Moved` and follows the home to node 2. After a barrier every node must see
/// every byte.
#[test]
fn the_home_moves_in_the_middle_of_a_split_diff() {
    const PAGE: usize = 16384;
    let value = |i: usize| (i as u8).wrapping_mul(7) | 1;
    for case in cases_of(&[CSM_MS_MG, CSM_NONE_MG]) {
        let file = HomesFile::new("litmus-midway", &[(0, 0)]);
        let mut c = small_config(&case, 3, ExecMode::Threads);
        c.page_bytes = PAGE;
        c.clock = dsm::ClockMode::Modeled;
        c.cpu_scale = 0.0;
        c.homes_file = Some(file.0.clone());
        // Word runs put node 1's whole diff in one message of about 18 KB; at most 4,700
        // bytes a message, it takes four.
        c.test_knobs.diff_message_bytes = Some(4700);
        let r = Cluster::new(c)
            .run(|s| {
                let a = s.alloc::<u8>(PAGE);
                let flags = s.flags(2);
                let bar = s.barrier();
                move |p| {
                    let me = p.node();
                    if me > 0 {
                        assert_eq!(a.get(0), 0);
                    }
                    bar.wait(p);
                    match me {
                        0 => {
                            for i in (0..PAGE / 2).step_by(2) {
                                a.set(i, value(i));
                            }
                            p.compute(300_000);
                            flags[0].set(p);
                        }
                        1 => {
                            p.compute(100_000);
                            for i in (1..PAGE).step_by(2) {
                                a.set(i, value(i));
                            }
                            p.compute(900_000);
                            flags[1].set(p);
                        }
                        _ => {
                            // Node 1's diff leaves at about 1 ms in four messages of 4.7 KB:
                            // the home moves in its middle for delays from 1.2 to 1.5 ms on
                            // the built-in platform.
                            p.compute(1_350_000);
                            for i in (PAGE / 2..PAGE).step_by(2) {
                                a.set(i, value(i));
                            }
                        }
                    }
                    bar.wait(p);
                    (0..PAGE).filter(|&i| a.get(i) != value(i)).count()
                }
            })
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let name = &case.name;
        let k = &r.node_counters;
        eprintln!(
            "{name}: node 1 sent {} diff in {} messages, {} redirected midway; migrations {:?}",
            k[1].diffs,
            k[1].diff_messages,
            k[1].split_diff_redirects,
            k.iter().map(|c| c.migrations).collect::<Vec<_>>()
        );
        assert_eq!(r.results, vec![0; 3], "{name}: bytes read wrong, per node");
        assert_eq!(r.homes, vec![(0, 2)], "{name}: P's home must end at node 2");
        assert_eq!(k[2].migrations, 1, "{name}: {:?}", k[2]);
        assert_eq!(
            (k[1].diffs, k[1].split_diff_redirects),
            (1, 1),
            "{name}: node 1's one diff must meet the moved home after its first message: {:?}",
            k[1]
        );
        assert!(
            k[1].diff_messages >= 5,
            "{name}: a diff of 2,048 masked words takes four messages, and one goes again: {:?}",
            k[1]
        );
    }
}

/// More twins live at once than a node makes ready when it starts (`TWINS_READY`, 1,024):
/// node 1 writes one word of each of 1,600 pages homed at node 0 and read by both nodes,
/// so each write makes a twin and all 1,600 stay live until node 1's release; the slab
/// grows past its ready slots a chunk at a time, every diff reaches the home, and the
/// node ends with no twin live (`Node::finish` asserts it). Twice, so that the second
/// round reuses the slots the first gave back.
#[test]
fn more_twins_live_than_the_slab_makes_ready() {
    const PAGES: usize = 1_600;
    const WORDS: usize = 8192 / 8;
    for case in cases() {
        for mode in [ExecMode::Threads, ExecMode::Processes] {
            let mut c = config(&case, 2, 1, mode);
            c.heap_bytes = 32 << 20;
            let r = Cluster::new(c).run(|s| {
                let a = s.alloc::<u64>(PAGES * WORDS);
                let bar = s.barrier();
                move |p| {
                    if p.id() == 0 {
                        for i in 0..a.len() {
                            a.set(i, i as u64);
                        }
                    }
                    bar.wait(p);
                    let mut wrong = 0;
                    for round in 1..=2u64 {
                        // Both nodes share every page.
                        let sum: u64 = (0..PAGES).map(|pg| a.get(pg * WORDS)).sum();
                        // Word 0 of each page keeps processor 0's initial value.
                        assert_eq!(sum, (0..PAGES).map(|pg| (pg * WORDS) as u64).sum::<u64>());
                        bar.wait(p);
                        if p.id() == 1 {
                            for pg in 0..PAGES {
                                a.set(pg * WORDS + round as usize, round * 1_000_000 + pg as u64);
                            }
                        }
                        bar.wait(p);
                        wrong += (0..PAGES)
                            .filter(|&pg| a.get(pg * WORDS + round as usize) != round * 1_000_000 + pg as u64)
                            .count();
                        bar.wait(p);
                    }
                    wrong
                }
            });
            if let Some(r) = dsm::skip_other_run(r).unwrap() {
                let name = format!("{} {mode}", case.name);
                assert_eq!(r.results, vec![0, 0], "{name}: words read wrong, per processor");
                let k = &r.node_counters[1];
                assert!(
                    k.twins >= 2 * PAGES as u64 && k.diffs >= 2 * PAGES as u64,
                    "{name}: node 1 must twin and diff every page in both rounds: {k:?}"
                );
            }
        }
    }
}
