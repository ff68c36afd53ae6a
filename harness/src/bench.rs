//! `cashmere bench net` and `cashmere bench proto`: the basic operations of the network and
//! of the protocol (the paper's section 3.1 and Table 2), measured on this machine. Each
//! figure is the median of many repetitions, in microseconds.

use anyhow::bail;
use clap::Args;
use dsm::{Cluster, Config, ExecMode, FaultBackend, Protocol};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: net or proto.
    pub what: String,
    /// Execution modes to measure (comma-separated) [default: threads,processes; with
    /// `--clock modeled`, threads].
    #[arg(long)]
    pub exec: Option<String>,
    /// `wall`, or `modeled` for `proto`: the basic operations in virtual time on the
    /// platform's costs, to compare with the paper's Table 2 (computation between
    /// operations is not counted: the CPU scale is 0).
    #[arg(long, default_value = "wall")]
    pub clock: String,
    /// The platform for `--clock modeled` (a built-in name or a platform file).
    #[arg(long, default_value = "alphaserver-mc2")]
    pub platform: String,
    /// Network profile for `proto` (`cashmere profiles` lists them) [default: the
    /// platform's, mc2].
    #[arg(long)]
    pub network: Option<String>,
    /// Variants for `proto` (comma-separated).
    #[arg(long, default_value = "CSM-DMS,CSM-None")]
    pub variants: String,
    /// Fault backends for `proto` (comma-separated).
    #[arg(long, default_value = "mprotect")]
    pub backends: String,
    /// Repetitions per figure.
    #[arg(long, default_value_t = 2000)]
    pub iters: usize,
    /// Node counts for the CSM-ADB broadcast measurement of `proto` (comma-separated; empty
    /// to skip it).
    #[arg(long, default_value = "2,4,8")]
    pub adb_nodes: String,
    /// Skip the home-migration measurement of `proto` (CSM-MS-Mg and CSM-None-Mg).
    #[arg(long)]
    pub no_migration: bool,
}

/// What this host's hardware and kernel allow at best, measured in the same run as the
/// figures printed beside them (medians, us): the figures then mean something on any
/// machine, as ratios.
struct HostLimits {
    /// A protection fault whose handler opens the page with `mprotect` (8 KiB), and the
    /// retried access (`dsm::host::fault_round_trips_ns`).
    fault_round_trip_us: f64,
    /// The fault round trip's spread over its first `SPREAD_SAMPLES` (as many as the page
    /// fetches a spread is printed for): max / median and p99 / median, about the least
    /// spread an operation that takes a fault can show on this host.
    fault_spread: (f64, f64),
    /// The same on a page in the middle of a `HEAP_BYTES` mapping, as the runtime's pages
    /// are (`dsm::host::fault_round_trips_within_ns`): its `mprotect`s split the mapping
    /// and merge it again. Printed beside the yardstick, not a part of it.
    fault_in_heap_us: f64,
    /// A word written by one thread and seen by another spinning on it: half a ping-pong.
    one_way_message_us: f64,
    /// A copy of one 8 KiB page, warm in the cache.
    page_copy_us: f64,
    /// A copy of one 8 KiB page that a thread on the other core has just written, as a
    /// fetched page is: its lines come from that core's cache. Printed for context, not a
    /// part of the yardstick. `None` on a host with one allowed CPU.
    cross_core_copy_us: Option<f64>,
}

/// Rounds of a two-thread hand-over (`HostLimits`) that warm up the lines, the buffers and
/// the other thread before any is timed.
const WARM_UP: u64 = 100;

/// A counter on a cache line of its own, which one thread sets and another spins on.
#[derive(Default)]
#[repr(align(128))]
struct Line(std::sync::atomic::AtomicU64);

impl Line {
    fn set(&self, i: u64) {
        self.0.store(i, std::sync::atomic::Ordering::Release);
    }

    fn wait_for(&self, i: u64) {
        while self.0.load(std::sync::atomic::Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
    }
}

/// What a figure is divided by.
#[derive(Clone, Copy)]
enum Yardstick {
    /// A fault round trip plus a page copy: the least a page fault that moves a page costs.
    FaultAndCopy,
    /// A one-way message.
    Message,
}

impl Yardstick {
    fn name(self) -> &'static str {
        match self {
            Yardstick::FaultAndCopy => "fault+copy",
            Yardstick::Message => "message",
        }
    }
}

impl HostLimits {
    const SAMPLES: usize = 2000;
    const SPREAD_SAMPLES: usize = 1000;
    const PAGE_BYTES: usize = 8192;
    const HEAP_BYTES: usize = 64 << 20;

    fn measure() -> anyhow::Result<HostLimits> {
        let faults = dsm::host::fault_round_trips_ns(Self::PAGE_BYTES, Self::SAMPLES)
            .map_err(|e| anyhow::anyhow!("cannot measure a fault round trip: {e}"))?;
        let in_heap =
            dsm::host::fault_round_trips_within_ns(Self::PAGE_BYTES, Self::HEAP_BYTES, Self::SAMPLES)
                .map_err(|e| anyhow::anyhow!("cannot measure a fault round trip: {e}"))?;
        let median = median_us(faults.clone());
        let first = &faults[..faults.len().min(Self::SPREAD_SAMPLES)];
        let first_median = median_us(first.to_vec());
        let fault_spread = (max_us(first) / first_median, p99_us(first) / first_median);
        Ok(HostLimits {
            fault_round_trip_us: median,
            fault_spread,
            fault_in_heap_us: median_us(in_heap),
            one_way_message_us: Self::one_way_message_us(),
            page_copy_us: Self::page_copy_us(),
            cross_core_copy_us: Self::cross_core_copy_us(),
        })
    }

    /// Two threads pass a counter back and forth through two cache lines, each spinning on
    /// its own; a round trip is two one-way messages.
    fn one_way_message_us() -> f64 {
        let (ping, pong) = (Line::default(), Line::default());
        let rounds = Self::SAMPLES as u64 + WARM_UP;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=rounds {
                    ping.wait_for(i);
                    pong.set(i);
                }
            });
            let mut trips = Vec::with_capacity(Self::SAMPLES);
            for i in 1..=rounds {
                let t0 = dsm::host::monotonic_ns();
                ping.set(i);
                pong.wait_for(i);
                if i > WARM_UP {
                    trips.push((dsm::host::monotonic_ns() - t0) / 2);
                }
            }
            median_us(trips)
        })
    }

    /// One thread, bound to one CPU, writes every word of an 8 KiB page and hands it over;
    /// the other, bound to another, copies it into its own warm buffer and hands it back.
    /// The median copy, over `SAMPLES`. (Both are threads of their own: the caller's
    /// binding, which the clusters' threads inherit, stays as it was.)
    fn cross_core_copy_us() -> Option<f64> {
        use std::sync::atomic::{AtomicU64, Ordering};
        let cpus = dsm::host::allowed_cpus();
        let (&a, &b) = (cpus.first()?, cpus.get(1)?);
        let words = Self::PAGE_BYTES / 8;
        let page: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        let (handed, back) = (Line::default(), Line::default());
        let rounds = Self::SAMPLES as u64 + WARM_UP;
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = dsm::host::pin_thread(a);
                for i in 1..=rounds {
                    for w in &page {
                        w.store(i, Ordering::Relaxed);
                    }
                    handed.set(i);
                    back.wait_for(i);
                }
            });
            let copier = s.spawn(|| {
                let _ = dsm::host::pin_thread(b);
                let mut dst = vec![0u64; words];
                let mut copies = Vec::with_capacity(Self::SAMPLES);
                for i in 1..=rounds {
                    handed.wait_for(i);
                    let t0 = dsm::host::monotonic_ns();
                    for (d, w) in dst.iter_mut().zip(&page) {
                        *d = w.load(Ordering::Relaxed);
                    }
                    std::hint::black_box(&mut dst);
                    let t1 = dsm::host::monotonic_ns();
                    back.set(i);
                    if i > WARM_UP {
                        copies.push(t1 - t0);
                    }
                }
                copies
            });
            copier.join().ok().map(median_us)
        })
    }

    /// 100 copies between two warm 8 KiB buffers per sample.
    fn page_copy_us() -> f64 {
        let src = vec![7u8; Self::PAGE_BYTES];
        let mut dst = vec![0u8; Self::PAGE_BYTES];
        let mut samples = Vec::with_capacity(200);
        for _ in 0..200 {
            let t0 = dsm::host::monotonic_ns();
            for _ in 0..100 {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            }
            samples.push((dsm::host::monotonic_ns() - t0) / 100);
        }
        median_us(samples)
    }

    fn yardstick_us(&self, y: Yardstick) -> f64 {
        match y {
            Yardstick::FaultAndCopy => self.fault_round_trip_us + self.page_copy_us,
            Yardstick::Message => self.one_way_message_us,
        }
    }

    fn print(&self, mode: ExecMode) {
        outln!(
            "host limits (this run, {mode}): fault + mprotect round trip {:.2} us (over {} faults max/median {:.1}, p99/median {:.2}; {:.2} us on a page inside a {} MiB mapping), one-way message {:.2} us, 8 KiB page copy {:.2} us ({} from the other core's cache); fault+copy {:.2} us",
            self.fault_round_trip_us,
            Self::SPREAD_SAMPLES,
            self.fault_spread.0,
            self.fault_spread.1,
            self.fault_in_heap_us,
            Self::HEAP_BYTES >> 20,
            self.one_way_message_us,
            self.page_copy_us,
            self.cross_core_copy_us
                .map_or("not measured".to_string(), |us| format!("{us:.2} us")),
            self.yardstick_us(Yardstick::FaultAndCopy)
        );
    }
}

fn max_us(v: &[u64]) -> f64 {
    v.iter().max().map_or(f64::NAN, |&m| m as f64 / 1e3)
}

/// The 99th percentile (nearest rank), in microseconds: the tail without the few
/// operations a host hiccup (a timer tick, another program) happened to land on.
fn p99_us(v: &[u64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_unstable();
    v[(v.len() * 99).div_ceil(100) - 1] as f64 / 1e3
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

/// The clock, platform and network a `proto` run measures with.
#[derive(Clone)]
struct Timing {
    clock: dsm::ClockMode,
    platform: dsm::platform::Platform,
    network: dsm::profile::Profile,
}

pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let clock: dsm::ClockMode = a
        .clock
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--clock `{}` is not valid: {e}", a.clock))?;
    let platform = dsm::platform::resolve(&a.platform)
        .map_err(|e| anyhow::anyhow!("--platform `{}` is not valid: {e}", a.platform))?;
    let network = match &a.network {
        Some(n) => dsm::profile::by_name(n)
            .map_err(|e| anyhow::anyhow!("--network `{n}` is not valid: {e}"))?,
        None => platform
            .network_profile()
            .map_err(|e| anyhow::anyhow!("platform {}: {e}", platform.name))?,
    };
    let timing = Timing {
        clock,
        platform,
        network,
    };
    let exec = a.exec.clone().unwrap_or_else(|| match clock {
        dsm::ClockMode::Wall => "threads,processes".into(),
        dsm::ClockMode::Modeled => "threads".into(),
    });
    if clock == dsm::ClockMode::Modeled {
        if a.what != "proto" {
            bail!("--clock modeled measures `proto` only (the simulated network's own costs are the profile's)");
        }
        if modes(&exec)?.contains(&ExecMode::Processes) {
            bail!("--clock modeled runs every node as threads of one process; use --exec threads");
        }
    }
    if a.iters == 0 {
        bail!("--iters 0: each figure is the median of --iters repetitions; give at least 1 (the default is 2000)");
    }
    match a.what.as_str() {
        "net" => {
            if modes(&exec)?.contains(&ExecMode::Mpi) {
                bail!("`bench net` measures the simulated network, which MPI ranks do not share; over MPI measure `bench proto --exec mpi` (under mpirun -np 2)");
            }
            for mode in modes(&exec)? {
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
            let adb_nodes: Vec<usize> = a
                .adb_nodes
                .split(',')
                .filter(|n| !n.trim().is_empty())
                .map(|n| match n.trim().parse::<usize>() {
                    Ok(n) if (2..=dsm::MAX_NODES).contains(&n) => Ok(n),
                    _ => Err(anyhow::anyhow!(
                        "--adb-nodes expects node counts from 2 to {}, comma-separated (e.g. 2,4,8); got `{n}`; nothing was run",
                        dsm::MAX_NODES
                    )),
                })
                .collect::<Result<_, _>>()?;
            for mode in modes(&exec)? {
                // A node process only serves the runs; the launcher measures and prints.
                let limits = match clock {
                    dsm::ClockMode::Wall if !dsm::host::is_node_process() => {
                        let l = HostLimits::measure()?;
                        l.print(mode);
                        Some(l)
                    }
                    _ => None,
                };
                let mut measured = Vec::new();
                let mpi = mode == ExecMode::Mpi;
                // Over MPI only the variants built on messages alone run (and the job has
                // as many ranks as the 2-node runs' nodes: no 4-node barrier, no ADB).
                let runs_over_mpi = |v: Protocol| {
                    v.refuse_without(dsm::profile::Features::MPI, dsm::profile::MPI_TITLE)
                };
                for &v in &variants {
                    if mpi {
                        if let Err(e) = runs_over_mpi(v) {
                            if !dsm::host::is_node_process() {
                                outln!("proto {} ({mode}): not measured: {e}", v.name);
                            }
                            continue;
                        }
                    }
                    for &b in &backends {
                        if let Some(t) = bench_proto(v, b, mode, a.iters, &timing, limits.as_ref())?
                        {
                            measured.push((v, t));
                        }
                    }
                }
                if clock == dsm::ClockMode::Modeled {
                    compare_table2(&measured, &timing);
                    continue;
                }
                for &b in &backends {
                    if !a.no_migration {
                        for v in [protocol_variants::CSM_MS_MG, protocol_variants::CSM_NONE_MG] {
                            if !mpi || runs_over_mpi(v).is_ok() {
                                bench_migration(v, b, mode, a.iters)?;
                            }
                        }
                    }
                    if mpi {
                        continue;
                    }
                    for &n in &adb_nodes {
                        bench_adb(n, b, mode, a.iters)?;
                    }
                }
            }
            Ok(())
        }
        other => bail!("unknown benchmark `{other}`; valid: net, proto"),
    }
}

/// `cashmere bench net`: the simulated network's basic operations (`dsm::netbench`).
fn bench_net(mode: ExecMode, iters: usize) -> anyhow::Result<()> {
    // A node process only serves the runs; the launcher prints.
    let Some(f) = dsm::netbench::measure(mode, iters)? else {
        return Ok(());
    };
    outln!("net ({mode}): remote-write one-way latency        {:8.3} us", f.one_way_us);
    for (label, rtt) in [("polling", f.round_trip_polling_us), ("parked", f.round_trip_parked_us)] {
        outln!("net ({mode}): null message round trip, {label:<8}  {rtt:8.3} us");
    }
    for (nodes, t) in f.broadcast_us {
        outln!("net ({mode}): broadcast write to {nodes} nodes          {t:8.3} us");
    }
    for (size, mbs) in f.bandwidth_mb_s {
        outln!("net ({mode}): bandwidth, {size:>6}-byte writes     {mbs:9.1} MB/s");
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

/// [`proto_config`] in the clock, platform and network of `timing`.
fn timed_config(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    nodes: usize,
    procs: usize,
    timing: &Timing,
) -> Config {
    let mut c = proto_config(v, backend, mode, nodes);
    c.procs_per_node = procs;
    c.clock = timing.clock;
    c.platform = timing.platform.clone();
    c.profile = timing.network.clone();
    c.cpu_scale = 0.0;
    c
}

/// Our modeled basic operations beside the paper's Table 2 (Stets et al., HPCA 2000,
/// section 3.1 and Table 2; 32 processors, AlphaServer 4100 on Memory Channel 2): the
/// Memory Channel figure for variants with remote-write data (CSM-DMS), the explicit-message
/// one for the others. A release row includes the page's downgrade (one protection
/// change), which the paper's diff operation does not: it is subtracted, and said so. The
/// write fault includes the fault and a protection change besides the twin: it is not.
fn compare_table2(measured: &[(Protocol, ProtoTimes)], timing: &Timing) {
    let mprotect = timing.platform.host.mprotect_ns as f64 / 1e3;
    outln!();
    outln!("Beside Stets et al., Table 2 and section 3.1 (null message round trip 15 us by construction of the network profile):");
    outln!("  {:<12} {:<52} {:>9} {:>9} {:>7}", "variant", "operation", "ours us", "paper us", "ratio");
    let mut misses = 0;
    for (v, t) in measured {
        let mc = v.data == dsm::DataStrategy::RemoteWrite;
        let pick = |mc_us: f64, msg_us: f64| if mc { mc_us } else { msg_us };
        let rows = [
            ("page fetch (read fault, remote home)", t.page_fetch, 220.0),
            ("write fault with twin (the paper: twin)", t.write_fault_twin, 68.0),
            ("diff of one word (release minus one mprotect)", t.diff_word - mprotect, pick(31.0, 70.0)),
            ("diff of a whole page (release minus one mprotect)", t.diff_100 - mprotect, pick(129.0, 245.0)),
            ("lock acquire, uncontended, remote", t.lock_uncontended, pick(10.0, 33.0)),
            ("barrier, 8 nodes x 4", t.barrier_32, pick(29.0, 53.0)),
        ];
        for (what, ours, paper) in rows {
            let ratio = ours / paper;
            let off = (ratio - 1.0).abs() > 0.25;
            misses += off as usize;
            outln!(
                "  {:<12} {what:<52} {ours:>9.1} {paper:>9.1} {ratio:>7.2}{}",
                v.name,
                if off { "  more than 25% off" } else { "" }
            );
        }
    }
    outln!("  {misses} row(s) more than 25% off the paper");
}

/// Times per operation (us), measured on processor 1 (node 1) unless said otherwise.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct ProtoTimes {
    /// A fetch of a page the requester has held before and whose home released its
    /// writes (a page transfer in the paper's Table 2).
    page_fetch: f64,
    /// The requester's first fetch of a page the home alone has written: it asks the
    /// page's manager for the home first when that is another node, and the home leaves
    /// exclusive mode (downgrades its page) before it copies it.
    #[serde(default)]
    first_fetch: f64,
    write_fault_twin: f64,
    diff_word: f64,
    diff_1: f64,
    diff_10: f64,
    diff_100: f64,
    release_1: f64,
    release_64: f64,
    lock_uncontended: f64,
    lock_contended: f64,
    barrier: f64,
    /// The slowest page fetch and write fault (us), for their spread, and their 99th
    /// percentiles.
    #[serde(default)]
    page_fetch_max: f64,
    #[serde(default)]
    write_fault_twin_max: f64,
    #[serde(default)]
    page_fetch_p99: f64,
    #[serde(default)]
    write_fault_twin_p99: f64,
    /// Barrier of 8 nodes x 4 processors (modeled clock only).
    #[serde(default)]
    barrier_32: f64,
}

fn bench_proto(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    iters: usize,
    timing: &Timing,
    limits: Option<&HostLimits>,
) -> anyhow::Result<Option<ProtoTimes>> {
    // Up to 1,000 fetches, enough for a spread (max / median) that means something.
    let pages = iters.clamp(64, 1000);
    let words = 8192 / 8;
    let r = Cluster::new(timed_config(v, backend, mode, 2, 1, timing)).run(|s| {
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
            let fetch_all = || {
                let mut s = Vec::new();
                for pg in 0..pages {
                    let t0 = p.now_ns();
                    std::hint::black_box(a.get(pg * words));
                    s.push(p.now_ns() - t0);
                }
                s
            };
            if node1 {
                t.first_fetch = median_us(fetch_all());
            }
            bar.wait(p);
            // The home writes every page again; its release at the barrier downgrades
            // them and sends node 1 write notices, which node 1's acquire applies.
            if !node1 {
                for pg in 0..pages {
                    a.set(pg * words, 3);
                }
            }
            bar.wait(p);
            if node1 {
                let s = fetch_all();
                t.page_fetch_max = max_us(&s);
                t.page_fetch_p99 = p99_us(&s);
                t.page_fetch = median_us(s);
                let mut s = Vec::new();
                for pg in 0..pages {
                    let t0 = p.now_ns();
                    a.set(pg * words + 1, 2);
                    s.push(p.now_ns() - t0);
                }
                t.write_fault_twin_max = max_us(&s);
                t.write_fault_twin_p99 = p99_us(&s);
                t.write_fault_twin = median_us(s);
                // Release of all those dirty pages.
                lock_far.acquire(p);
                lock_far.release(p);
            }
            bar.wait(p);
            // Diffs and releases: node 1 dirties k pages, changing a fraction of each.
            // Every byte of a written word changes from one repetition to the next, so a
            // diff of k words is one run of 8k bytes.
            let release = |npages: usize, frac: f64, reps: usize| -> f64 {
                let mut s = Vec::new();
                for r in 0..reps {
                    lock_far.acquire(p);
                    for pg in 0..npages {
                        let n = ((words as f64 * frac) as usize).max(1);
                        for w in 0..n {
                            let byte = ((r * 7 + w) % 251) as u64 + 1;
                            a.set(pg * words + w, byte * 0x0101_0101_0101_0101);
                        }
                    }
                    let t0 = p.now_ns();
                    lock_far.release(p);
                    s.push(p.now_ns() - t0);
                }
                median_us(s)
            };
            if node1 {
                t.diff_word = release(1, 0.0, 200);
                t.diff_1 = release(1, 0.01, 200);
                t.diff_10 = release(1, 0.10, 200);
                t.diff_100 = release(1, 1.0, 200);
                t.release_1 = t.diff_1;
                t.release_64 = release(64.min(pages), 0.01, 20);
                let mut s = Vec::new();
                for _ in 0..iters.min(2000) {
                    let t0 = p.now_ns();
                    lock_far.acquire(p);
                    s.push(p.now_ns() - t0);
                    lock_far.release(p);
                }
                t.lock_uncontended = median_us(s);
            }
            bar.wait(p);
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = p.now_ns();
                lock_shared.acquire(p);
                s.push(p.now_ns() - t0);
                lock_shared.release(p);
            }
            t.lock_contended = median_us(s);
            bar.wait(p);
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = p.now_ns();
                bar.wait(p);
                s.push(p.now_ns() - t0);
            }
            t.barrier = median_us(s);
            node1.then_some(t)
        }
    });
    // In a node process serving the 4-node barrier run, this run is skipped; go on to it.
    let report = match dsm::skip_other_run(r)? {
        None => {
            if mode != ExecMode::Mpi {
                barrier_time(v, backend, mode, 4, 1, iters, timing)?;
            }
            return Ok(None);
        }
        Some(report) => report,
    };
    let t = report
        .results
        .into_iter()
        .flatten()
        .next()
        .expect("node 1 reports");
    // Under MPI the job's ranks are the 2 nodes of this run.
    let b4 = match mode {
        ExecMode::Mpi => None,
        _ => barrier_time(v, backend, mode, 4, 1, iters, timing)?,
    };
    let b32 = match timing.clock {
        dsm::ClockMode::Modeled => barrier_time(v, backend, mode, 8, 4, iters, timing)?,
        dsm::ClockMode::Wall => None,
    };
    let tag = match timing.clock {
        dsm::ClockMode::Wall => format!("{} ({mode}, {backend})", v.name),
        dsm::ClockMode::Modeled => format!(
            "{} (modeled: {}, {})",
            v.name, timing.platform.name, timing.network.name
        ),
    };
    // Beside each wall-clock figure, its ratio to this host's limit for it, measured in
    // the same run: a fault (round trip and page copy) for what faults or releases pages,
    // a one-way message for locks and barriers.
    let row = |what: &str, us: f64, per: Yardstick, extra: &str| {
        let ratio = limits
            .map(|l| format!("  {:6.2}x {}", us / l.yardstick_us(per), per.name()))
            .unwrap_or_default();
        outln!("proto {tag}: {what:<36} {us:8.2} us{ratio}{extra}");
    };
    let spread = |max: f64, p99: f64, med: f64| {
        format!(
            "  (max {max:.1} us, max/median {:.1}; p99/median {:.2})",
            max / med,
            p99 / med
        )
    };
    let fault = Yardstick::FaultAndCopy;
    let message = Yardstick::Message;
    row(
        "page fetch (read fault, remote home)",
        t.page_fetch,
        fault,
        &spread(t.page_fetch_max, t.page_fetch_p99, t.page_fetch),
    );
    row("page fetch, first (lookup+downgrade)", t.first_fetch, fault, "");
    row(
        "write fault with twin",
        t.write_fault_twin,
        fault,
        &spread(t.write_fault_twin_max, t.write_fault_twin_p99, t.write_fault_twin),
    );
    row("release with a diff of one word", t.diff_word, fault, "");
    row("release with a diff of 1% of a page", t.diff_1, fault, "");
    row("release with a diff of 10%", t.diff_10, fault, "");
    row("release with a diff of 100%", t.diff_100, fault, "");
    row("release of 64 dirty pages", t.release_64, fault, "");
    row(
        "lock acquire, uncontended, remote",
        t.lock_uncontended,
        message,
        "",
    );
    row(
        "lock acquire, contended by 2 nodes",
        t.lock_contended,
        message,
        "",
    );
    row("barrier, 2 nodes", t.barrier, message, "");
    if let Some(b4) = b4 {
        row("barrier, 4 nodes", b4, message, "");
    }
    if let Some(b) = b32 {
        row("barrier, 8 nodes x 4", b, message, "");
    }
    let mut t = t;
    t.barrier_32 = b32.unwrap_or(f64::NAN);
    Ok(Some(t))
}

fn barrier_time(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    nodes: usize,
    procs: usize,
    iters: usize,
    timing: &Timing,
) -> anyhow::Result<Option<f64>> {
    let r = Cluster::new(timed_config(v, backend, mode, nodes, procs, timing)).run(|s| {
        let bar = s.barrier();
        move |p| {
            let mut s = Vec::new();
            for _ in 0..iters.min(2000) {
                let t0 = p.now_ns();
                bar.wait(p);
                s.push(p.now_ns() - t0);
            }
            median_us(s)
        }
    });
    Ok(dsm::skip_other_run(r)?.map(|report| report.results[0]))
}

/// What the home-migration run measures (us), on node 1.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct MigrationTimes {
    /// A read fault on a page homed at node 0 (the plain page fetch), in the same run.
    page_fetch: f64,
    /// A write fault on a page homed at node 0 that moves the home to node 1 (fetch + grant).
    migrating_write: f64,
    /// A write fault that moves the home to node 1 of a page node 1 has just fetched: its
    /// copy is the master's version, so the grant carries no page.
    current_write: f64,
    /// Words node 0 read back wrong from the migrated pages (0 unless the protocol is broken).
    wrong: usize,
}

/// Home migration (section 2.3.5), 2 nodes: node 0 reads a set of fresh pages first (so it
/// is their home by first touch and is not writing them); then node 1 read-faults half of
/// them (plain fetches) and write-faults the other half, each of which asks the home to move
/// and is granted with the page; then it writes each page it fetched, which migrates with
/// no page (its copy is current). Each write fault therefore migrates a page of its own: no
/// synchronization is inside the timed operation, so nothing is subtracted. Node 0 then
/// reads the written pages back from their new home.
fn bench_migration(
    v: Protocol,
    backend: FaultBackend,
    mode: ExecMode,
    iters: usize,
) -> anyhow::Result<()> {
    let pages = iters.clamp(64, 1024);
    let words = 8192 / 8;
    let r = Cluster::new(proto_config(v, backend, mode, 2)).run(|s| {
        let a = s.alloc_named::<u64>(2 * pages * words, "migration pages");
        let bar = s.barrier();
        move |p| -> MigrationTimes {
            let mut t = MigrationTimes::default();
            let node1 = p.node() == 1;
            if !node1 {
                for pg in 0..2 * pages {
                    std::hint::black_box(a.get(pg * words));
                }
            }
            bar.wait(p);
            if node1 {
                // Interleaved, so that both figures see the same conditions.
                let mut fetch = Vec::with_capacity(pages);
                let mut migrate = Vec::with_capacity(pages);
                let mut current = Vec::with_capacity(pages);
                for pg in 0..pages {
                    let t0 = Instant::now();
                    std::hint::black_box(a.get((pages + pg) * words));
                    fetch.push(t0.elapsed().as_nanos() as u64);
                    let t0 = Instant::now();
                    a.set(pg * words, pg as u64 + 1);
                    migrate.push(t0.elapsed().as_nanos() as u64);
                    let t0 = Instant::now();
                    a.set((pages + pg) * words, pg as u64 + 1);
                    current.push(t0.elapsed().as_nanos() as u64);
                }
                t.page_fetch = median_us(fetch);
                t.migrating_write = median_us(migrate);
                t.current_write = median_us(current);
            }
            bar.wait(p);
            if !node1 {
                t.wrong = (0..pages)
                    .filter(|&pg| {
                        a.get(pg * words) != pg as u64 + 1
                            || a.get((pages + pg) * words) != pg as u64 + 1
                    })
                    .count();
            }
            t
        }
    });
    let Some(report) = dsm::skip_other_run(r)? else {
        return Ok(());
    };
    let c = &report.counters;
    let tag = format!("{} ({mode}, {backend})", v.name);
    let wrong = report.results[0].wrong;
    if wrong > 0 {
        bail!(
            "{tag}: node 0 read {wrong} of {pages} pairs of migrated pages back wrong; the migration protocol lost writes (rerun with DSM_TRACE_HOMES=1 to trace the homes)"
        );
    }
    if c.migrations < 2 * pages as u64 {
        bail!(
            "{tag}: {} write faults away from the home should each have migrated it, but only {} migrations happened ({} attempts); home migration is not working",
            2 * pages,
            c.migrations,
            c.migration_attempts
        );
    }
    // Node 1's requests that brought no page: the grants to its current copies.
    let n1 = &report.node_counters[1];
    let without_page = n1.page_requests - n1.page_transfers - n1.redirects;
    if without_page != pages as u64 {
        bail!(
            "{tag}: node 1's {pages} write faults on pages it had just fetched should each have migrated with no page, but {without_page} of its requests came back without one; the versioned grant (PageState::version) is not working"
        );
    }
    let t = &report.results[1];
    outln!(
        "proto {tag}: page fetch (read fault, remote home)  {:8.2} us",
        t.page_fetch
    );
    outln!(
        "proto {tag}: write fault migrating the home        {:8.2} us  ({:.2}x the page fetch; {} migrations ({} attempts))",
        t.migrating_write,
        t.migrating_write / t.page_fetch,
        c.migrations,
        c.migration_attempts
    );
    outln!(
        "proto {tag}: write fault migrating a page just read {:8.2} us  ({:.2}x the page fetch; the copy is current: {without_page} grants without a page)",
        t.current_write,
        t.current_write / t.page_fetch,
    );
    Ok(())
}

/// What one node measures in a CSM-ADB run (us; `None` where it measured nothing).
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct AdbTimes {
    /// Burst, node 0: an empty barrier.
    barrier: Option<f64>,
    /// Burst, node 0: from one barrier to the next while every other node reads one fresh
    /// page, less the empty barrier.
    serve_all: Option<f64>,
    /// A reader: its read fault (burst), or its read fault in the chain (node 1: a plain
    /// fetch; node 2: the fetch that makes the home publish; nodes 3 and up: reads the
    /// broadcast buffer should serve).
    read: Option<f64>,
    /// Words read wrong.
    wrong: usize,
}

/// Adaptive broadcast (section 2.3.6), N nodes of one processor, node 0 home of every page
/// (it writes them first). Two runs, so that each one's counters say what it did:
///
/// * Burst: after a barrier, nodes 1..N read the same fresh page at once. Node 0 times
///   barrier to barrier and subtracts an empty barrier (timed the same way in the same
///   run): the time to serve the page to all N-1 readers. Each reader times its own read
///   fault.
/// * Chain (N >= 3): per fresh page, after a barrier, node 1 reads it (a plain fetch: the
///   first request for it), then node 2 (the second request in the home's interval: the
///   home publishes the page as it replies), then nodes 3..N one after another, each
///   started by a flag from the one before: their reads find the page in the home's
///   broadcast buffer. The flags are outside the timed reads.
fn bench_adb(
    nodes: usize,
    backend: FaultBackend,
    mode: ExecMode,
    iters: usize,
) -> anyhow::Result<()> {
    let v = protocol_variants::CSM_ADB;
    let rounds = 200usize.min(iters.max(20));
    let words = 8192 / 8;
    let tag = format!("{} ({mode}, {backend}, {nodes} nodes)", v.name);
    let mut c = proto_config(v, backend, mode, nodes);
    c.heap_bytes = (rounds * 8192).next_power_of_two().max(4 << 20);
    let check = |report: &dsm::Report<AdbTimes>| -> anyhow::Result<()> {
        let wrong: usize = report.results.iter().map(|t| t.wrong).sum();
        if wrong > 0 {
            bail!("{tag}: readers saw {wrong} stale or wrong words; adaptive broadcast served bad copies");
        }
        Ok(())
    };

    // Burst.
    let r = Cluster::new(c.clone()).run(|s| {
        let a = s.alloc_named::<u64>(rounds * words, "broadcast pages");
        let bar = s.barrier();
        move |p| -> AdbTimes {
            let me = p.node();
            let mut t = AdbTimes::default();
            if me == 0 {
                for pg in 0..rounds {
                    a.set(pg * words, pg as u64 + 1);
                }
            }
            bar.wait(p);
            let mut s = Vec::with_capacity(rounds);
            let mut t0 = Instant::now();
            for _ in 0..rounds {
                bar.wait(p);
                s.push(t0.elapsed().as_nanos() as u64);
                t0 = Instant::now();
            }
            let barrier = median_us(s);
            let mut serve = Vec::with_capacity(rounds);
            let mut reads = Vec::with_capacity(rounds);
            bar.wait(p);
            let mut t0 = Instant::now();
            for pg in 0..rounds {
                if me != 0 {
                    let t1 = Instant::now();
                    let x = a.get(pg * words);
                    reads.push(t1.elapsed().as_nanos() as u64);
                    t.wrong += usize::from(x != pg as u64 + 1);
                }
                bar.wait(p);
                serve.push(t0.elapsed().as_nanos() as u64);
                t0 = Instant::now();
            }
            if me == 0 {
                t.barrier = Some(barrier);
                t.serve_all = Some((median_us(serve) - barrier).max(0.0));
            } else {
                t.read = Some(median_us(reads));
            }
            t
        }
    });
    match dsm::skip_other_run(r)? {
        None => {}
        Some(report) => {
            check(&report)?;
            let res = &report.results;
            let c = &report.counters;
            outln!(
                "proto {tag}: serve 1 page to {} readers at once {:8.2} us  (an empty barrier, {:.2} us, subtracted)",
                nodes - 1,
                res[0].serve_all.unwrap_or(f64::NAN),
                res[0].barrier.unwrap_or(f64::NAN)
            );
            outln!(
                "proto {tag}: read fault in that burst, per reader  {:8.2} us  (pages broadcast {}, broadcast hits {} of {} reads)",
                median_f(res[1..].iter().filter_map(|t| t.read)),
                c.pages_broadcast,
                c.broadcast_hits,
                rounds * (nodes - 1)
            );
        }
    }
    if nodes < 3 {
        return Ok(());
    }

    // Chain.
    let r = Cluster::new(c).run(|s| {
        let a = s.alloc_named::<u64>(rounds * words, "broadcast pages");
        let bar = s.barrier();
        let flags = s.flags(rounds * (nodes - 1));
        move |p| -> AdbTimes {
            let me = p.node();
            let n = p.nodes();
            let mut t = AdbTimes::default();
            if me == 0 {
                for pg in 0..rounds {
                    a.set(pg * words, pg as u64 + 1);
                }
            }
            let mut reads = Vec::with_capacity(rounds);
            for pg in 0..rounds {
                bar.wait(p);
                if me == 0 {
                    continue;
                }
                if me > 1 {
                    flags[pg * (n - 1) + me - 2].wait(p);
                }
                let t1 = Instant::now();
                let x = a.get(pg * words);
                reads.push(t1.elapsed().as_nanos() as u64);
                t.wrong += usize::from(x != pg as u64 + 1);
                flags[pg * (n - 1) + me - 1].set(p);
            }
            bar.wait(p);
            if me != 0 {
                t.read = Some(median_us(reads));
            }
            t
        }
    });
    let Some(report) = dsm::skip_other_run(r)? else {
        return Ok(());
    };
    check(&report)?;
    let res = &report.results;
    let c = &report.counters;
    let fetch = res[1].read.unwrap_or(f64::NAN);
    let publish = res[2].read.unwrap_or(f64::NAN);
    outln!("proto {tag}: read fault, plain fetch               {fetch:8.2} us");
    outln!(
        "proto {tag}: read fault, fetch that publishes      {publish:8.2} us  ({:.2}x the plain fetch)",
        publish / fetch
    );
    if nodes >= 4 {
        let hit = median_f(res[3..].iter().filter_map(|t| t.read));
        outln!(
            "proto {tag}: read fault from the broadcast buffer  {hit:8.2} us  ({:.2}x the plain fetch; pages broadcast {}, broadcast hits {} of {} reads expected){}",
            hit / fetch,
            c.pages_broadcast,
            c.broadcast_hits,
            rounds * (nodes - 3),
            if c.broadcast_hits == 0 {
                "  NO HITS: the buffers were not used"
            } else {
                ""
            }
        );
    } else {
        outln!(
            "proto {tag}: pages broadcast {}, broadcast hits {} (no reader follows the publishing one)",
            c.pages_broadcast, c.broadcast_hits
        );
    }
    Ok(())
}

/// The median of some figures (NaN if there are none).
fn median_f(it: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = it.collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_99th_percentile_leaves_out_the_slowest_hundredth() {
        let v: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        assert_eq!(p99_us(&v), 99.0);
        // 1,000 fetches of 5 us with 9 hiccups of 3 ms: the tail without them.
        let mut v = vec![5_000u64; 991];
        v.extend([3_000_000; 9]);
        assert_eq!((p99_us(&v), max_us(&v)), (5.0, 3000.0));
        assert_eq!(p99_us(&[7_000]), 7.0);
        assert!(p99_us(&[]).is_nan());
    }
}
