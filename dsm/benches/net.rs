//! Criterion benchmarks of the simulated network in the in-process mode: a point-to-point
//! remote write, a broadcast, and a null-message round trip to a polling receiver.
//! `cashmere bench net` measures the same operations in both execution modes.

use criterion::{criterion_group, criterion_main, Criterion};
use dsm::launch::{launch, ExecMode, LaunchSpec};
use dsm::net::{profile, Backing, Net, MC_PAGE_BYTES};
use std::sync::Mutex;

const PING: u16 = 1;
const QUIT: u16 = 2;

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

fn network(c: &mut Criterion) {
    let c = Mutex::new(c);
    launch(&spec(), |ctx| {
        let net = Net::new(ctx.fabric, ctx.node);
        let p2p = net.alloc_region(MC_PAGE_BYTES, Backing::Pool, "p2p").map_err(|e| e.to_string())?;
        let bcast = net.alloc_region(MC_PAGE_BYTES, Backing::Pool, "bcast").map_err(|e| e.to_string())?;
        net.attach_rx(&bcast, 0, MC_PAGE_BYTES, true);
        if ctx.node == 1 {
            net.attach_rx(&p2p, 0, MC_PAGE_BYTES, false);
            // The receiver polls until told to stop.
            let mut quit = false;
            while !quit {
                net.poll(|m| {
                    quit |= m.kind == QUIT;
                    net.reply(m.from, m.slot, m.token, &[]).expect("reply");
                });
            }
            return Ok(Vec::new());
        }
        let mut c = c.lock().expect("poisoned");
        let mut g = c.benchmark_group("net");
        g.bench_function("remote_write_8B", |b| b.iter(|| net.tx(p2p).write_u64(0, 42)));
        g.bench_function("broadcast_write_8B_2_nodes", |b| b.iter(|| net.tx(bcast).write_u64(0, 42)));
        let mut out = Vec::new();
        g.bench_function("null_message_round_trip_polling", |b| b.iter(|| net.request(1, PING, 0, &[], &mut out).expect("request")));
        g.finish();
        net.request(1, QUIT, 0, &[], &mut out).map_err(|e| e.to_string())?;
        Ok(Vec::new())
    })
    .expect("the benchmark cluster runs");
}

criterion_group!(benches, network);
criterion_main!(benches);
