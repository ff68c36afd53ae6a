//! Criterion benchmarks of the simulated network in the in-process mode: a point-to-point
//! remote write, a broadcast, and a null-message round trip to a polling receiver.
//! `cashmere bench net` measures the same operations in both execution modes.
//!
//! The cluster runs in a thread of its own (`dsm::netbench::NetBench`); criterion asks
//! node 0 to run a number of operations and report how long they took (`iter_custom`), so
//! the request's channel is not measured.

use criterion::{criterion_group, criterion_main, Criterion};
use dsm::netbench::{NetBench, NetOp};

fn network(c: &mut Criterion) {
    let cluster = NetBench::start();
    let mut g = c.benchmark_group("net");
    for (name, op) in [
        ("remote_write_8B", NetOp::RemoteWrite),
        ("broadcast_write_8B_2_nodes", NetOp::Broadcast),
        ("null_message_round_trip_polling", NetOp::RoundTrip),
    ] {
        g.bench_function(name, |b| b.iter_custom(|n| cluster.time(op, n)));
    }
    g.finish();
}

criterion_group!(benches, network);
criterion_main!(benches);
