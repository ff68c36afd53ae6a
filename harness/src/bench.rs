//! `cashmere bench net` and `cashmere bench proto`: the basic operations of the network and
//! of the protocol (the paper's section 3.1 and Table 2), measured on this machine. Each
//! figure is the median of many repetitions, in microseconds.

use anyhow::bail;
use clap::Args;
use dsm::launch::{launch, ExecMode, LaunchSpec};
use dsm::net::{Backing, Net, MC_PAGE_BYTES};
use dsm::{Cluster, Config, FaultBackend, Protocol};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: net or proto.
    pub what: String,
    /// Execution modes to measure (comma-separated).
    #[arg(long, default_value = "threads,processes")]
    pub exec: String,
    /// Variants for `proto` (comma-separated).
    #[arg(long, default_value = "CSM-DMS,CSM-None")]
    pub variants: String,
    /// Fault backends for `proto` (comma-separated).
    #[arg(long, default_value = "mprotect")]
    pub backends: String,
    /// Repetitions per figure.
    #[arg(long, default_value_t = 2000)]
    pub iters: usize,
}

fn median_us(mut v: Vec<u64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1e3
}

fn modes(list: &str) -> anyhow::Result<Vec<ExecMode>> {
    list.split(',')
        .map(|m| m.trim().parse::<ExecMode>().map_err(anyhow::Error::msg))
        .collect()
}

pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.iters == 0 {
        bail!("--iters 0: each figure is the median of --iters repetitions; give at least 1 (the default is 2000)");
    }
    match a.what.as_str() {
        "net" => {
            for mode in modes(&a.exec)? {
                bench_net(mode, a.iters)?;
            }
            Ok(())
        }
        "proto" => {
            let variants: Vec<Protocol> = a
                .variants
                .split(',')
                .map(|v| protocol_variants::by_name(v.trim()))
                .collect::<Result<_, _>>()?;
            let backends: Vec<FaultBackend> = a
                .backends
                .split(',')
                .map(|b| b.trim().parse::<FaultBackend>().map_err(anyhow::Error::msg))
                .collect::<Result<_, _>>()?;
            for mode in modes(&a.exec)? {
                for &v in &variants {
                    for &b in &backends {
                        bench_proto(v, b, mode, a.iters)?;
                    }
                }
            }
            Ok(())
        }
        other => bail!("unknown benchmark `{other}`; valid: net, proto"),
    }
}

fn spec(nodes: usize, mode: ExecMode) -> LaunchSpec {
    LaunchSpec {
        nodes,
        procs: 1,
        heap_bytes: 1 << 21,
        profile: dsm::net::profile::by_name("host").expect("host profile"),
        mode,
        child_args: None,
        trace_entries: 0,
    }
}

fn skip_other(
    r: Result<Vec<Vec<u8>>, dsm::launch::LaunchError>,
) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
    match r {
        Err(e) if e.is_other_run() => Ok(None),
        Err(e) => Err(e.into()),
        Ok(v) => Ok(Some(v)),
    }
}

fn busy_wait(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

const PING: u16 = 1;
const QUIT: u16 = 2;

fn bench_net(mode: ExecMode, iters: usize) -> anyhow::Result<()> {
    // One-way remote write: a ping-pong of words, both sides spinning on their receive memory.
    let r = skip_other(launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, ctx.node);
        let r = net
            .alloc_region(2 * MC_PAGE_BYTES, Backing::Pool, "ping-pong")
            .map_err(|e| e.to_string())?;
        net.attach_rx(&r, ctx.node as u64 * MC_PAGE_BYTES, MC_PAGE_BYTES, false);
        dsm::launch::startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
        let other = (1 - ctx.node) as u64 * MC_PAGE_BYTES;
        let mine = ctx.node as u64 * MC_PAGE_BYTES;
        let rx = net.rx(r);
        let tx = net.tx(r);
        let mut samples = Vec::with_capacity(iters);
        for i in 1..=iters as u64 {
            let t = Instant::now();
            if ctx.node == 0 {
                tx.write_u64(other, i);
                while rx.load_u64(mine) != i {
                    if net.fabric().aborted() {
                        return Err("aborted".into());
                    }
                    std::hint::spin_loop();
                }
                samples.push(t.elapsed().as_nanos() as u64 / 2);
            } else {
                while rx.load_u64(mine) != i {
                    if net.fabric().aborted() {
                        return Err("aborted".into());
                    }
                    std::hint::spin_loop();
                }
                tx.write_u64(other, i);
            }
        }
        Ok(serde_json::to_vec(&median_us(samples)).unwrap())
    }))?;
    if let Some(r) = r {
        let one_way: f64 = serde_json::from_slice(&r[0])?;
        println!("net ({mode}): remote-write one-way latency        {one_way:8.3} us");
    }

    for (label, gap) in [
        ("polling", Duration::ZERO),
        ("parked", Duration::from_micros(300)),
    ] {
        let n = if gap.is_zero() { iters } else { iters.min(300) };
        let r = skip_other(launch(&spec(2, mode), |ctx| {
            let net = Net::new(ctx.fabric, ctx.node);
            if ctx.node == 1 {
                let mut quit = false;
                while !quit {
                    let got = net.poll(|m| {
                        if m.kind == QUIT {
                            quit = true;
                        }
                        net.reply(m.from, m.slot, m.token, &[]).unwrap();
                    });
                    if got == 0 && !gap.is_zero() {
                        net.wait_for_messages().map_err(|e| e.to_string())?;
                    }
                }
                return Ok(Vec::new());
            }
            let mut out = Vec::new();
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                busy_wait(gap);
                let t = Instant::now();
                net.request(1, PING, 0, &[], &mut out)
                    .map_err(|e| e.to_string())?;
                samples.push(t.elapsed().as_nanos() as u64);
            }
            net.request(1, QUIT, 0, &[], &mut out)
                .map_err(|e| e.to_string())?;
            Ok(serde_json::to_vec(&median_us(samples)).unwrap())
        }))?;
        if let Some(r) = r {
            let rtt: f64 = serde_json::from_slice(&r[0])?;
            println!("net ({mode}): null message round trip, {label:<8}  {rtt:8.3} us");
        }
    }

    for nodes in [2usize, 4] {
        let r = skip_other(launch(&spec(nodes, mode), |ctx| {
            let net = Net::new(ctx.fabric, ctx.node);
            let r = net
                .alloc_region(MC_PAGE_BYTES, Backing::Pool, "broadcast")
                .map_err(|e| e.to_string())?;
            net.attach_rx(&r, 0, MC_PAGE_BYTES, true);
            dsm::launch::startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
            let mut samples = Vec::new();
            if ctx.node == 0 {
                for i in 0..iters as u64 {
                    let t = Instant::now();
                    net.tx(r).write_u64(0, i);
                    samples.push(t.elapsed().as_nanos() as u64);
                }
            }
            Ok(serde_json::to_vec(&median_us(samples)).unwrap())
        }))?;
        if let Some(r) = r {
            let t: f64 = serde_json::from_slice(&r[0])?;
            println!("net ({mode}): broadcast write to {nodes} nodes          {t:8.3} us");
        }
    }

    let r = skip_other(launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, ctx.node);
        let r = net
            .alloc_region(64 * 1024, Backing::Pool, "bandwidth")
            .map_err(|e| e.to_string())?;
        if ctx.node == 0 {
            net.attach_rx(&r, 0, r.len, false);
        }
        dsm::launch::startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
        let mut rates = Vec::new();
        if ctx.node == 1 {
            let buf = vec![7u8; 64 * 1024];
            for size in [64usize, 256, 1024, 4096, 16384, 65536] {
                let reps = (64 << 20) / size;
                let t = Instant::now();
                for _ in 0..reps {
                    net.tx(r).write(0, &buf[..size]);
                }
                rates.push((size, (reps * size) as f64 / t.elapsed().as_secs_f64() / 1e6));
            }
        }
        Ok(serde_json::to_vec(&rates).unwrap())
    }))?;
    let Some(r) = r else { return Ok(()) }; // the last run: nothing follows it
    let rates: Vec<(usize, f64)> = serde_json::from_slice(&r[1])?;
    for (size, mbs) in rates {
        println!("net ({mode}): bandwidth, {size:>6}-byte writes     {mbs:9.1} MB/s");
    }
    Ok(())
}

fn proto_config(v: Protocol, backend: FaultBackend, mode: ExecMode, nodes: usize) -> Config {
    let mut c = Config::new(nodes, 1, v);
    c.backend = backend;
    c.mode = mode;
    c.heap_bytes = 64 << 20;
    c.page_bytes = 8192;
    c
}

/// Times per operation (us), measured on processor 1 (node 1) unless said otherwise.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct ProtoTimes {
    page_fetch: f64,
    write_fault_twin: f64,
    diff_1: f64,
    diff_10: f64,
    diff_100: f64,
    release_1: f64,
    release_64: f64,
    lock_uncontended: f64,
    lock_contended: f64,
    barrier: f64,
}

fn bench_proto(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    iters: usize,
) -> anyhow::Result<()> {
    let pages = 256usize.min(iters.max(64));
    let words = 8192 / 8;
    let r = Cluster::new(proto_config(v, backend, mode, 2)).run(|s| {
        let a = s.alloc_named::<u64>(pages * words, "bench pages");
        let lock_far = s.lock(); // lock 0: managed by node 0 under message locks
        let lock_shared = s.lock();
        let bar = s.barrier();
        move |p| -> Option<ProtoTimes> {
            let mut t = ProtoTimes::default();
            let node1 = p.node() == 1;
            // Node 0 touches every page first: it becomes their home.
            if !node1 {
                for pg in 0..pages {
                    a.set(pg * words, 1);
                }
            }
            bar.wait(p);
            if node1 {
                let mut s = Vec::new();
                for pg in 0..pages {
                    let t0 = Instant::now();
                    std::hint::black_box(a.get(pg * words));
                    s.push(t0.elapsed().as_nanos() as u64);
                }
                t.page_fetch = median_us(s);
                let mut s = Vec::new();
                for pg in 0..pages {
                    let t0 = Instant::now();
                    a.set(pg * words + 1, 2);
                    s.push(t0.elapsed().as_nanos() as u64);
                }
                t.write_fault_twin = median_us(s);
                // Release of all those dirty pages.
                lock_far.acquire(p);
                lock_far.release(p);
            }
            bar.wait(p);
            // Diffs and releases: node 1 dirties k pages, changing a fraction of each.
            let release = |npages: usize, frac: f64, reps: usize| -> f64 {
                let mut s = Vec::new();
                for r in 0..reps {
                    lock_far.acquire(p);
                    for pg in 0..npages {
                        let n = ((words as f64 * frac) as usize).max(1);
                        for w in 0..n {
                            a.set(pg * words + w, (r * 7 + w) as u64);
                        }
                    }
                    let t0 = Instant::now();
                    lock_far.release(p);
                    s.push(t0.elapsed().as_nanos() as u64);
                }
                median_us(s)
            };
            if node1 {
                t.diff_1 = release(1, 0.01, 200);
                t.diff_10 = release(1, 0.10, 200);
                t.diff_100 = release(1, 1.0, 200);
                t.release_1 = t.diff_1;
                t.release_64 = release(64.min(pages), 0.01, 20);
                let mut s = Vec::new();
                for _ in 0..iters.min(2000) {
                    let t0 = Instant::now();
                    lock_far.acquire(p);
                    s.push(t0.elapsed().as_nanos() as u64);
                    lock_far.release(p);
                }
                t.lock_uncontended = median_us(s);
            }
            bar.wait(p);
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = Instant::now();
                lock_shared.acquire(p);
                s.push(t0.elapsed().as_nanos() as u64);
                lock_shared.release(p);
            }
            t.lock_contended = median_us(s);
            bar.wait(p);
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = Instant::now();
                bar.wait(p);
                s.push(t0.elapsed().as_nanos() as u64);
            }
            t.barrier = median_us(s);
            node1.then_some(t)
        }
    });
    // In a node process serving the 4-node barrier run, this run is skipped; go on to it.
    let report = match r {
        Err(e) if e.is_other_run() => {
            barrier_time(v, backend, mode, 4, iters)?;
            return Ok(());
        }
        r => r?,
    };
    let t = report
        .results
        .into_iter()
        .flatten()
        .next()
        .expect("node 1 reports");
    let b4 = barrier_time(v, backend, mode, 4, iters)?;
    let tag = format!("{} ({mode}, {backend})", v.name);
    println!(
        "proto {tag}: page fetch (read fault, remote home)  {:8.2} us",
        t.page_fetch
    );
    println!(
        "proto {tag}: write fault with twin                 {:8.2} us",
        t.write_fault_twin
    );
    println!(
        "proto {tag}: release with a diff of 1% of a page   {:8.2} us",
        t.diff_1
    );
    println!(
        "proto {tag}: release with a diff of 10%            {:8.2} us",
        t.diff_10
    );
    println!(
        "proto {tag}: release with a diff of 100%           {:8.2} us",
        t.diff_100
    );
    println!(
        "proto {tag}: release of 64 dirty pages             {:8.2} us",
        t.release_64
    );
    println!(
        "proto {tag}: lock acquire, uncontended, remote     {:8.2} us",
        t.lock_uncontended
    );
    println!(
        "proto {tag}: lock acquire, contended by 2 nodes    {:8.2} us",
        t.lock_contended
    );
    println!(
        "proto {tag}: barrier, 2 nodes                      {:8.2} us",
        t.barrier
    );
    if let Some(b4) = b4 {
        println!("proto {tag}: barrier, 4 nodes                      {b4:8.2} us");
    }
    Ok(())
}

fn barrier_time(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    nodes: usize,
    iters: usize,
) -> anyhow::Result<Option<f64>> {
    let r = Cluster::new(proto_config(v, backend, mode, nodes)).run(|s| {
        let bar = s.barrier();
        move |p| {
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = Instant::now();
                bar.wait(p);
                s.push(t0.elapsed().as_nanos() as u64);
            }
            median_us(s)
        }
    });
    match r {
        Err(e) if e.is_other_run() => Ok(None),
        r => Ok(Some(r?.results[0])),
    }
}
