//! The modeled clock (`crate::sched`): programs run to the right results under every
//! variant, declared computation gives the same times and counters on every run, and a
//! barrier and a lock over a tiny hand-written profile take the virtual times computed by
//! hand here.

use dsm::{ClockMode, Cluster, Config, Protocol};
use protocol_variants::{CSM_DMS, CSM_NONE};

fn modeled(nodes: usize, procs: usize, proto: Protocol) -> Config {
    let mut c = Config::new(nodes, procs, proto);
    c.heap_bytes = 16 << 20;
    c.clock = ClockMode::Modeled;
    c.cpu_scale = 0.0;
    c
}

/// A lock-protected counter and a barrier-separated sum, with declared computation.
fn counter_program(c: Config) -> (u64, dsm::Report<()>) {
    let report = Cluster::new(c)
        .run(|s| {
            let counter = s.alloc::<u64>(1);
            let slots = s.alloc::<u64>(64);
            let lock = s.lock();
            let bar = s.barrier();
            move |p| {
                for i in 0..5 {
                    p.compute(10_000 * (p.id() as u64 + 1));
                    lock.acquire(p);
                    counter.set(0, counter.get(0) + 1);
                    lock.release(p);
                    slots.set(p.id(), (i + 1) as u64 * p.id() as u64);
                }
                bar.wait(p);
                (0..p.nprocs()).map(|i| slots.get(i)).sum::<u64>() + 1000 * counter.get(0)
            }
        })
        .expect("run");
    let (results, rest) = report.take_results();
    let n = results.len() as u64;
    let want = 5 * (0..n).sum::<u64>() + 1000 * 5 * n;
    assert!(results.iter().all(|&r| r == want), "results {results:?}, want {want}");
    (want, rest)
}

#[test]
fn every_variant_runs_correctly_under_the_modeled_clock() {
    for v in protocol_variants::ALL
        .iter()
        .copied()
        .filter(|v| ClockMode::Modeled.refuses(v).is_none())
    {
        for (nodes, procs) in [(2, 1), (2, 2), (4, 2)] {
            let (_, r) = counter_program(modeled(nodes, procs, v));
            assert_eq!(r.clock, "modeled");
            assert!(r.elapsed_ns > 0, "{}: no virtual time", v.name);
            // Declared computation alone is 5 x 10 us x (id + 1) for the last processor.
            let floor = 5 * 10_000 * (nodes * procs) as u64;
            assert!(r.elapsed_ns >= floor, "{} {nodes}x{procs}: {} ns < {floor}", v.name, r.elapsed_ns);
        }
    }
}

#[test]
fn declared_computation_repeats_to_the_nanosecond() {
    for v in [CSM_DMS, CSM_NONE] {
        let (_, a) = counter_program(modeled(2, 2, v));
        let (_, b) = counter_program(modeled(2, 2, v));
        assert_eq!(a.elapsed_ns, b.elapsed_ns, "{}", v.name);
        assert_eq!(a.counters, b.counters, "{}", v.name);
        let ta: Vec<_> = a.procs.iter().map(|p| p.breakdown).collect();
        let tb: Vec<_> = b.procs.iter().map(|p| p.breakdown).collect();
        assert_eq!(ta, tb, "{}", v.name);
    }
}

/// A profile of round numbers: 1 us latency, 1 byte/ns, no software overheads and no
/// host costs; with a CPU scale of 0, only declared computation and the network take time.
fn tiny(nodes: usize, procs: usize) -> Config {
    let mut c = modeled(nodes, procs, CSM_DMS);
    c.profile.latency_ns = 1_000;
    c.profile.bandwidth_bytes_per_s = 1_000_000_000;
    c.profile.send_overhead_ns = 0;
    c.profile.recv_overhead_ns = 0;
    c.profile.broadcast_extra_ns = 0;
    let h = &mut c.platform.host;
    h.fault_ns = 0;
    h.mprotect_ns = 0;
    h.copy_ns_per_byte = 0.0;
    h.diff_scan_ns_per_byte = 0.0;
    h.diff_run_ns = 0;
    h.diff_apply_ns_per_byte = 0.0;
    h.handler_ns = 0;
    h.local_sync_ns = 0;
    c
}

/// Memory Channel barrier (`sync/network.rs`) on 2 nodes x 1 processor, all times in ns.
/// A broadcast of `b` bytes sent at `t` occupies the sender and the hub for `b` ns and
/// arrives everywhere at `max(t + 1000, receiver's link free) + b`.
/// - P0 arrives at 1000: broadcasts its 8-byte arrival word (busy until 1008; it lands at
///   2008) and, as node 0, waits for every arrival.
/// - P1 arrives at 5000: broadcasts its arrival (busy until 5008; it lands at 6008) and
///   waits for the sense word.
/// - At 6008 node 0 has every arrival: it broadcasts the sense word (busy until 6016, so
///   P0 leaves at 6016; it lands at 7016, when P1 leaves).
#[test]
fn a_barrier_takes_the_hand_computed_virtual_time() {
    let r = Cluster::new(tiny(2, 1))
        .run(|s| {
            let bar = s.barrier();
            move |p| {
                p.compute(if p.id() == 0 { 1_000 } else { 5_000 });
                bar.wait(p);
                p.now_ns()
            }
        })
        .expect("run");
    assert_eq!(r.results, vec![6_016, 7_016]);
}

/// Counted work (`dsm::work`) is charged at the run's cost per unit, kind by kind, with
/// the fractions of a nanosecond carried, and only it: the host's CPU time spent on the
/// same work is not. On the round-number profile the barrier of the test above follows.
/// - P0 counts 400 units of kind 0 at 2.5 ns (1000 ns); P1 counts 3 x 1000 units of kind
///   1 at 1.33334 ns (4000.02 ns: whole nanoseconds 1333 + 1333 + 1334 with the carry,
///   3999 without it) and spins on this host for a millisecond, which is not charged; then 1000 ns
///   of declared computation. So P1 arrives at 5000, as in the barrier test.
#[test]
fn counted_work_is_charged_at_its_cost_per_unit_and_host_time_is_not() {
    let run = || {
        let mut c = tiny(2, 1);
        c.compute = dsm::Compute::Counted { ns_per_unit: vec![2.5, 1.33334] };
        c.cpu_scale = 1e6; // would dwarf everything, were CPU time charged
        Cluster::new(c)
            .run(|s| {
                let bar = s.barrier();
                move |p| {
                    if p.id() == 0 {
                        p.count_work(0, 400);
                    } else {
                        for _ in 0..3 {
                            dsm::work::count(1, 1000);
                        }
                        let t = dsm::host::thread_cpu_ns();
                        while dsm::host::thread_cpu_ns() - t < 1_000_000 {
                            std::hint::spin_loop();
                        }
                        p.compute(1_000);
                    }
                    bar.wait(p);
                    p.now_ns()
                }
            })
            .expect("run")
    };
    let (a, b) = (run(), run());
    assert_eq!(a.results, vec![6_016, 7_016]);
    assert_eq!(b.results, a.results);
    assert_eq!(a.compute, "counted");
    assert_eq!(&a.procs[0].work[..2], &[400, 0]);
    assert_eq!(&a.procs[1].work[..2], &[0, 3000]);
    assert_eq!(a.procs[1].breakdown.user_ns, 5_000, "counted work plus declared computation");
}

/// A kind of work the run has no cost for is a programming error, reported as the
/// processor's failure with the reason.
#[test]
fn counting_a_kind_without_a_cost_fails_the_run_with_the_reason() {
    let mut c = tiny(1, 1);
    c.compute = dsm::Compute::Counted { ns_per_unit: vec![1.0] };
    let e = Cluster::new(c)
        .run(|_| move |_p| dsm::work::count(3, 1))
        .expect_err("kind 3 has no cost");
    assert!(e.to_string().contains("costs for 1 kinds only"), "{e}");
}

/// Memory Channel lock (`sync/network.rs`: bid by broadcast, wait for our bid's loopback,
/// withdraw if another bid is there, wait for it to clear, back off, bid again) on 2
/// nodes x 1 processor; 4-byte words, so a write busies the sender 4 ns.
/// - P0 bids at 1000 (lands 2004); its loopback at 2004 finds P1's entry clear: P0 holds
///   the lock from 2004, computes 2000 ns and releases at 4004 (lands 5008).
/// - P1 bids at 1500 (lands 2504); at 2504 it sees P0's bid, withdraws (lands 3508),
///   and waits for P0's entry to clear: 5008. It backs off 2 x 64 spins (128 ns, at
///   1 ns each), bids again at 5136 (busy until 5140, lands 6140), and its loopback at
///   6140 finds P0's entry clear: P1 holds the lock from 6140.
#[test]
fn a_contended_lock_takes_the_hand_computed_virtual_time() {
    let r = Cluster::new(tiny(2, 1))
        .run(|s| {
            let lock = s.lock();
            move |p| {
                p.compute(if p.id() == 0 { 1_000 } else { 1_500 });
                lock.acquire(p);
                let got = p.now_ns();
                if p.id() == 0 {
                    p.compute(2_000);
                }
                lock.release(p);
                got
            }
        })
        .expect("run");
    assert_eq!(r.results, vec![2_004, 6_140]);
}

/// A wait nobody ends is reported with who waits for what, not a hang: processor 1 waits
/// for a flag nobody sets, processor 0 for it at the run's final barrier.
#[test]
fn a_deadlock_is_reported_with_who_waits_for_what() {
    for v in [CSM_DMS, CSM_NONE] {
        let err = Cluster::new(modeled(2, 1, v))
            .run(|s| {
                let flag = s.flag();
                move |p| {
                    if p.id() == 1 {
                        flag.wait(p);
                    }
                }
            })
            .expect_err("a deadlock must fail the run");
        let text = err.to_string();
        assert!(text.contains("deadlocked"), "{}: {text}", v.name);
        assert!(text.contains("processor 0 of node 1"), "{}: {text}", v.name);
        assert!(text.to_lowercase().contains("flag"), "{}: {text}", v.name);
    }
}

/// The modeled clock refuses no variant (CSM-ADB was refused until its lost updates there
/// were fixed), so the tests above that ask `ClockMode::refuses` run all seven.
#[test]
fn the_modeled_clock_refuses_no_variant() {
    for v in protocol_variants::ALL {
        assert_eq!(ClockMode::Modeled.refuses(&v), None, "{}", v.name);
    }
}

/// The timed region (`Proc::start_timing`, `Proc::stop_timing`) over the barrier of
/// `a_barrier_takes_the_hand_computed_virtual_time`: P0 leaves the barrier at 6016 and P1
/// at 7016; both start timing there, compute 3000 ns and stop (P0 at 9016, P1 at 10016),
/// then compute 50,000 ns outside the region. The region runs from the earliest start to
/// the latest stop: 10016 - 6016 = 4000 ns, each processor's breakdown is its 3000 ns of
/// User time, and the whole run is longer by the rest (and the engine's final barrier).
#[test]
fn the_timed_region_covers_the_marked_part_only() {
    let r = Cluster::new(tiny(2, 1))
        .run(|s| {
            let bar = s.barrier();
            move |p| {
                p.compute(if p.id() == 0 { 1_000 } else { 5_000 });
                bar.wait(p);
                p.start_timing();
                p.compute(3_000);
                p.stop_timing();
                p.compute(50_000);
            }
        })
        .expect("run");
    assert!(r.timed_region);
    assert_eq!(r.elapsed_ns, 4_000);
    // The whole run also holds the engine's final barrier.
    assert!(r.run_ns >= 10_016 + 50_000, "run {} ns", r.run_ns);
    for p in &r.procs {
        let t = p.timed.expect("marked");
        assert_eq!(t.end_ns - t.begin_ns, 3_000, "processor {}", p.id);
        assert_eq!(p.breakdown.user_ns, 3_000, "processor {}", p.id);
        assert_eq!(p.breakdown.total_ns(), 3_000, "processor {}", p.id);
        assert!(p.run_breakdown.total_ns() > 50_000, "processor {}", p.id);
    }
    // A program that marks no region is timed whole.
    let whole = Cluster::new(tiny(2, 1))
        .run(|_| |p: &dsm::Proc| p.compute(7_000))
        .expect("run");
    assert!(!whole.timed_region);
    assert_eq!(whole.elapsed_ns, whole.run_ns);
    assert!(whole.procs.iter().all(|p| p.timed.is_none() && p.breakdown == p.run_breakdown));
}

/// Every processor marks the timed region, or none does; marks out of order are refused
/// with the reason.
#[test]
fn a_timed_region_marked_wrongly_is_refused_with_the_reason() {
    let partly = Cluster::new(tiny(2, 1)).run(|_| {
        |p: &dsm::Proc| {
            if p.id() == 0 {
                p.start_timing();
                p.stop_timing();
            }
        }
    });
    match partly {
        Ok(_) => panic!("a region marked on one processor of two must be refused"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("on 1 of 2 processors (not on processor(s) 1)"), "{e}");
        }
    }
    let unstarted = Cluster::new(tiny(2, 1)).run(|_| |p: &dsm::Proc| p.stop_timing());
    match unstarted {
        Ok(_) => panic!("a region stopped before it started must be refused"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("stopped before it was started"), "{e}");
        }
    }
}

/// Virtual time is checked arithmetic: a run whose times cannot be represented (past
/// `dsm::MAX_VIRTUAL_NS`) stops with an error naming the figure that took it
/// there, never a wrapped or silently saturated time.
#[test]
fn virtual_time_that_cannot_be_represented_stops_the_run_and_names_the_figure() {
    let fail = |c: Config, declare: u64| {
        Cluster::new(c)
            .run(move |s| {
                let slots = s.alloc::<u64>(64);
                let bar = s.barrier();
                move |p| {
                    p.compute(declare);
                    p.compute(declare);
                    slots.set(p.id(), 1);
                    bar.wait(p);
                    p.now_ns()
                }
            })
            .map(|r| r.results)
            .expect_err("a run past the representable virtual time must fail")
            .to_string()
    };
    // Declared computation that would wrap a u64 (twice u64::MAX / 2 + 1).
    let e = fail(tiny(2, 1), u64::MAX / 2 + 1);
    assert!(e.contains("virtual time overflow"), "{e}");
    assert!(e.contains("Proc::compute"), "{e}");
    // A host cost at u64::MAX: the first fault.
    let mut c = tiny(2, 1);
    c.platform.host.fault_ns = u64::MAX;
    let e = fail(c, 0);
    assert!(
        e.contains("virtual time overflow") && e.contains("host.fault_ns"),
        "{e}"
    );
    // A per-byte cost whose product is not even a u64.
    let mut c = tiny(2, 1);
    c.platform.host.copy_ns_per_byte = 1e300;
    let e = fail(c, 0);
    assert!(e.contains("host.copy_ns_per_byte"), "{e}");
    // A latency that wraps an arrival time.
    let mut c = tiny(2, 1);
    c.profile.latency_ns = u64::MAX;
    let e = fail(c, 0);
    assert!(e.contains("latency_ns"), "{e}");
    // A CPU scale factor that turns any computation into more than the limit.
    let mut c = tiny(2, 1);
    c.cpu_scale = 1e300;
    let e = Cluster::new(c)
        .run(|_| {
            |p: &dsm::Proc| {
                let mut x = 0u64;
                for i in 0..200_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i * i));
                }
                std::hint::black_box(x);
                p.now_ns()
            }
        })
        .map(|r| r.results)
        .expect_err("a scale of 1e300 must fail")
        .to_string();
    assert!(e.contains("CPU scale factor"), "{e}");
    // Just below the limit is fine, and exact.
    let r = Cluster::new(tiny(1, 1))
        .run(|_| {
            |p: &dsm::Proc| {
                p.compute(dsm::MAX_VIRTUAL_NS - 1_000_000_000);
                p.now_ns()
            }
        })
        .expect("a run just below the limit");
    assert_eq!(r.results, vec![dsm::MAX_VIRTUAL_NS - 1_000_000_000]);
}

/// The timed region's counters (`Report::region_counters`) count what happens between the
/// marks only: a page read before the region and one inside it, on 2 nodes x 1. Node 1
/// reads page A (homed on node 0) before the region and page B inside it: the whole run
/// counts both transfers, the region one. A program that marks no region has none.
#[test]
fn the_region_counters_count_between_the_marks_only() {
    let r = Cluster::new(tiny(2, 1))
        .run(|s| {
            let a = s.alloc::<u64>(1024);
            let b = s.alloc::<u64>(1024);
            let bar = s.barrier();
            move |p| {
                if p.id() == 0 {
                    a.set(0, 1);
                    b.set(0, 2);
                }
                bar.wait(p);
                let x = if p.id() == 1 { a.get(0) } else { 1 };
                bar.wait(p);
                p.start_timing();
                let y = if p.id() == 1 { b.get(0) } else { 2 };
                p.stop_timing();
                x + y
            }
        })
        .expect("run");
    assert_eq!(r.results, vec![3, 3]);
    let region = r.region_counters.expect("a region was marked");
    assert_eq!(region.page_transfers, 1, "{region:?}");
    assert!(r.counters.page_transfers >= 2, "{:?}", r.counters);
    let whole = Cluster::new(tiny(2, 1)).run(|_| |_: &dsm::Proc| ()).expect("run");
    assert_eq!(whole.region_counters, None);
}
