//! Criterion benchmarks of the simulated network in the in-process mode: a point-to-point
//! remote write, a broadcast, and a null-message round trip to a polling receiver.
//! `cashmere bench net` measures the same operations in both execution modes.
//!
//! The cluster runs in a thread of its own; criterion asks node 0 (over a channel) to run
//! a number of operations and report how long they took (`iter_custom`), so the channel's
//! cost is not measured.

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam::channel::{bounded, Receiver, Sender};
use dsm::launch::{launch, ExecMode, LaunchSpec};
use dsm::net::{Backing, Net, NodeId, MC_PAGE_BYTES};
use dsm::profile;
use std::time::{Duration, Instant};

const PING: u16 = 1;
const QUIT: u16 = 2;

#[derive(Clone, Copy)]
enum Op {
    RemoteWrite,
    Broadcast,
    RoundTrip,
    Stop,
}

fn spec() -> LaunchSpec {
    LaunchSpec {
        nodes: 2,
        procs: 1,
        heap_bytes: 1 << 21,
        profile: profile::by_name("host").expect("host profile"),
        mode: ExecMode::Threads,
        child_args: None,
        trace_entries: 0,
    }
}

fn cluster(ops: Receiver<(Op, u64)>, times: Sender<Duration>) {
    launch(&spec(), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let p2p = net
            .alloc_region(MC_PAGE_BYTES, Backing::Pool, "p2p")
            .map_err(|e| e.to_string())?;
        let bcast = net
            .alloc_region(MC_PAGE_BYTES, Backing::Pool, "bcast")
            .map_err(|e| e.to_string())?;
        net.attach_rx(&bcast, 0, MC_PAGE_BYTES, true);
        if ctx.node == 1 {
            net.attach_rx(&p2p, 0, MC_PAGE_BYTES, false);
            let mut quit = false;
            while !quit {
                net.poll(|m| {
                    quit |= m.kind == QUIT;
                    net.reply(m.from, m.slot, m.token, &[]).expect("reply");
                });
            }
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        while let Ok((op, n)) = ops.recv() {
            let t = Instant::now();
            match op {
                Op::RemoteWrite => (0..n).for_each(|i| net.tx(p2p).write_u64(0, i)),
                Op::Broadcast => (0..n).for_each(|i| net.tx(bcast).write_u64(0, i)),
                Op::RoundTrip => {
                    for _ in 0..n {
                        net.request(NodeId::from_usize(1), PING, 0, &[], &mut out)
                            .expect("request");
                    }
                }
                Op::Stop => break,
            }
            times.send(t.elapsed()).expect("bench driver gone");
        }
        net.request(NodeId::from_usize(1), QUIT, 0, &[], &mut out)
            .map_err(|e| e.to_string())?;
        Ok(Vec::new())
    })
    .expect("the benchmark cluster runs");
}

fn network(c: &mut Criterion) {
    let (op_tx, op_rx) = bounded(1);
    let (time_tx, time_rx) = bounded(1);
    let runner = std::thread::spawn(move || cluster(op_rx, time_tx));
    let mut g = c.benchmark_group("net");
    for (name, op) in [
        ("remote_write_8B", Op::RemoteWrite),
        ("broadcast_write_8B_2_nodes", Op::Broadcast),
        ("null_message_round_trip_polling", Op::RoundTrip),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                op_tx.send((op, n)).expect("cluster gone");
                time_rx.recv().expect("cluster gone")
            })
        });
    }
    g.finish();
    op_tx.send((Op::Stop, 0)).expect("cluster gone");
    runner.join().expect("cluster thread");
}

criterion_group!(benches, network);
criterion_main!(benches);
