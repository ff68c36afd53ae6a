//! Criterion benchmarks of protocol operations on a 2-node cluster in the in-process mode,
//! under CSM-DMS and CSM-None: a barrier, a lock acquire and release whose lock lives on
//! the other node, and a release that diffs one dirty page home.
//! `cashmere bench proto` measures these and more (page fetch, write fault, diffs of several
//! sizes, 4-node barriers) in both execution modes and on both fault backends.
//!
//! Both processors take commands over channels; criterion's `iter_custom` gets the time
//! processor 1 measured, so the channels' cost is not in the figures.

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam::channel::{bounded, Receiver, Sender};
use dsm::{Cluster, Config, Protocol};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Barrier,
    RemoteLock,
    ReleaseOnePage,
    Stop,
}

fn cluster(protocol: Protocol, ops: [Receiver<(Op, u64)>; 2], times: Sender<Duration>) {
    let mut config = Config::new(2, 1, protocol);
    config.heap_bytes = 16 << 20;
    Cluster::new(config)
        .run(|s| {
            let page = s.alloc::<u64>(1024);
            let lock = s.lock(); // lock 0: its manager is node 0 under message locks
            let bar = s.barrier();
            let ops = &ops;
            let times = &times;
            move |p| {
                if p.id() == 0 {
                    page.set(0, 1); // node 0 becomes the page's home
                }
                bar.wait(p);
                loop {
                    let (op, n) = ops[p.id()].recv().expect("bench driver gone");
                    if op == Op::Stop {
                        break;
                    }
                    let t = Instant::now();
                    match op {
                        Op::Barrier => (0..n).for_each(|_| bar.wait(p)),
                        Op::RemoteLock if p.id() == 1 => (0..n).for_each(|_| {
                            lock.acquire(p);
                            lock.release(p);
                        }),
                        Op::ReleaseOnePage if p.id() == 1 => (0..n).for_each(|i| {
                            lock.acquire(p);
                            page.set(1 + (i as usize % 64), i); // dirty: a twin, then a diff
                            lock.release(p);
                        }),
                        _ => {}
                    }
                    let elapsed = t.elapsed();
                    bar.wait(p);
                    if p.id() == 1 {
                        times.send(elapsed).expect("bench driver gone");
                    }
                }
            }
        })
        .expect("the benchmark cluster runs");
}

fn protocol_ops(c: &mut Criterion) {
    for protocol in [protocol_variants::CSM_DMS, protocol_variants::CSM_NONE] {
        let (tx0, rx0) = bounded(1);
        let (tx1, rx1) = bounded(1);
        let (time_tx, time_rx) = bounded(1);
        let runner = std::thread::spawn(move || cluster(protocol, [rx0, rx1], time_tx));
        let mut g = c.benchmark_group(format!("proto/{}", protocol.name));
        for (name, op) in [
            ("barrier_2_nodes", Op::Barrier),
            ("remote_lock_acquire_release", Op::RemoteLock),
            ("release_one_dirty_page", Op::ReleaseOnePage),
        ] {
            g.bench_function(name, |b| {
                b.iter_custom(|n| {
                    tx0.send((op, n)).expect("cluster gone");
                    tx1.send((op, n)).expect("cluster gone");
                    time_rx.recv().expect("cluster gone")
                })
            });
        }
        g.finish();
        tx0.send((Op::Stop, 0)).expect("cluster gone");
        tx1.send((Op::Stop, 0)).expect("cluster gone");
        runner.join().expect("cluster thread");
    }
}

criterion_group!(benches, protocol_ops);
criterion_main!(benches);
