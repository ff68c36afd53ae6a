//! Measurements of the simulated network itself (the paper's section 3.1 figures below
//! the protocol): what `cashmere bench net` prints and the criterion benchmark
//! `benches/net.rs` times. They run clusters of the launcher's own (no DSM heap, no
//! engine) on the host's network profile, so a program measures the network without
//! reaching the crate's network and launcher layers, which are not public.
//!
//! Each measurement launches its clusters in the same order in every process, as the
//! process mode requires ([`crate::skip_other_run`]): a node process re-runs the program
//! and passes the runs that are not its own.

use crate::launch::{launch, skip_other_run, startup_barrier, ExecMode, LaunchError, LaunchSpec};
use crate::net::{Backing, Net, MC_PAGE_BYTES};
use crate::ids::NodeId;
use std::time::{Duration, Instant};

/// The network's basic operations, medians in microseconds (bandwidth in MB/s).
#[derive(Clone, Debug, PartialEq)]
pub struct NetFigures {
    /// A remote write of one word and its sight at the receiver: half a ping-pong of
    /// words, both sides spinning on their receive memory.
    pub one_way_us: f64,
    /// A null message and its reply, the receiver polling.
    pub round_trip_polling_us: f64,
    /// The same with the receiver parked between messages (each request wakes it).
    pub round_trip_parked_us: f64,
    /// A broadcast write of one word, as the sender sees it, by node count.
    pub broadcast_us: Vec<(usize, f64)>,
    /// Remote-write bandwidth from one node to another, by write size in bytes.
    pub bandwidth_mb_s: Vec<(usize, f64)>,
}

const PING: u16 = 1;
const QUIT: u16 = 2;

/// The most repetitions of the parked round trip, each of which waits 300 us first.
const PARKED_ITERS_MAX: usize = 300;

fn spec(nodes: usize, mode: ExecMode) -> LaunchSpec {
    LaunchSpec {
        nodes,
        procs: 1,
        heap_bytes: 1 << 21,
        profile: crate::profile::by_name("host").expect("the host profile is built in"),
        mode,
        child_args: None,
        trace_entries: 0,
    }
}

fn median_us(mut v: Vec<u64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1e3
}

fn busy_wait(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Node 0's figure of a run whose nodes return one `f64` each (the others' are empty).
fn node_0_figure(r: Option<Vec<Vec<u8>>>) -> Option<f64> {
    r.map(|r| decode_f64(&r[0]))
}

fn decode_f64(b: &[u8]) -> f64 {
    f64::from_le_bytes(b.try_into().expect("a figure is 8 bytes"))
}

/// Measures every figure of [`NetFigures`] in `mode` (threads or processes; MPI ranks
/// share no simulated network), `iters` repetitions each (at most 300 for the parked
/// round trip). `None` in a process that only serves the runs (a node process).
pub fn measure(mode: ExecMode, iters: usize) -> Result<Option<NetFigures>, LaunchError> {
    let one_way = node_0_figure(skip_other_run(launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let r = net
            .alloc_region(2 * MC_PAGE_BYTES, Backing::Pool, "ping-pong")
            .map_err(|e| e.to_string())?;
        net.attach_rx(&r, ctx.node as u64 * MC_PAGE_BYTES, MC_PAGE_BYTES, false);
        startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
        let other = (1 - ctx.node) as u64 * MC_PAGE_BYTES;
        let mine = ctx.node as u64 * MC_PAGE_BYTES;
        let rx = net.rx(r);
        let tx = net.tx(r);
        let wait_for = |i: u64| {
            while rx.load_u64(mine) != i {
                if net.fabric().aborted() {
                    return Err(String::from("aborted"));
                }
                std::hint::spin_loop();
            }
            Ok(())
        };
        let mut samples = Vec::with_capacity(iters);
        for i in 1..=iters as u64 {
            let t = Instant::now();
            if ctx.node == 0 {
                tx.write_u64(other, i);
                wait_for(i)?;
                samples.push(t.elapsed().as_nanos() as u64 / 2);
            } else {
                wait_for(i)?;
                tx.write_u64(other, i);
            }
        }
        Ok(median_us(samples).to_le_bytes().to_vec())
    }))?);

    let mut round_trips = Vec::new();
    for gap in [Duration::ZERO, Duration::from_micros(300)] {
        let n = if gap.is_zero() { iters } else { iters.min(PARKED_ITERS_MAX) };
        round_trips.push(node_0_figure(skip_other_run(launch(&spec(2, mode), |ctx| {
            let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
            if ctx.node == 1 {
                let mut quit = false;
                while !quit {
                    let got = net.poll(|m| {
                        quit |= m.kind == QUIT;
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
                net.request(NodeId::from_usize(1), PING, 0, &[], &mut out)
                    .map_err(|e| e.to_string())?;
                samples.push(t.elapsed().as_nanos() as u64);
            }
            net.request(NodeId::from_usize(1), QUIT, 0, &[], &mut out)
                .map_err(|e| e.to_string())?;
            Ok(median_us(samples).to_le_bytes().to_vec())
        }))?));
    }

    let mut broadcast = Vec::new();
    for nodes in [2usize, 4] {
        let t = node_0_figure(skip_other_run(launch(&spec(nodes, mode), |ctx| {
            let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
            let r = net
                .alloc_region(MC_PAGE_BYTES, Backing::Pool, "broadcast")
                .map_err(|e| e.to_string())?;
            net.attach_rx(&r, 0, MC_PAGE_BYTES, true);
            startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
            let mut samples = Vec::new();
            if ctx.node == 0 {
                for i in 0..iters as u64 {
                    let t = Instant::now();
                    net.tx(r).write_u64(0, i);
                    samples.push(t.elapsed().as_nanos() as u64);
                }
            }
            Ok(median_us(samples).to_le_bytes().to_vec())
        }))?);
        broadcast.push(t.map(|t| (nodes, t)));
    }

    let bandwidth = skip_other_run(launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let r = net
            .alloc_region(64 * 1024, Backing::Pool, "bandwidth")
            .map_err(|e| e.to_string())?;
        if ctx.node == 0 {
            net.attach_rx(&r, 0, r.len, false);
        }
        startup_barrier(net.fabric(), ctx.node).map_err(|e| e.to_string())?;
        let mut rates = Vec::new();
        if ctx.node == 1 {
            let buf = vec![7u8; 64 * 1024];
            for size in [64usize, 256, 1024, 4096, 16384, 65536] {
                let reps = (64 << 20) / size;
                let t = Instant::now();
                for _ in 0..reps {
                    net.tx(r).write(0, &buf[..size]);
                }
                let rate = (reps * size) as f64 / t.elapsed().as_secs_f64() / 1e6;
                rates.extend_from_slice(&(size as u64).to_le_bytes());
                rates.extend_from_slice(&rate.to_le_bytes());
            }
        }
        Ok(rates)
    }))?
    .map(|r| {
        r[1].chunks_exact(16)
            .map(|c| (u64::from_le_bytes(c[..8].try_into().unwrap()) as usize, decode_f64(&c[8..])))
            .collect::<Vec<_>>()
    });

    // A node process passes every run but its own, which never returns: only the
    // launcher's process gets here with every figure.
    let (Some(one_way_us), &[Some(polling), Some(parked)], Some(bandwidth_mb_s)) =
        (one_way, &round_trips[..], bandwidth)
    else {
        return Ok(None);
    };
    let Some(broadcast_us) = broadcast.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    Ok(Some(NetFigures {
        one_way_us,
        round_trip_polling_us: polling,
        round_trip_parked_us: parked,
        broadcast_us,
        bandwidth_mb_s,
    }))
}

/// An operation [`NetBench`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetOp {
    /// A one-word remote write to the other node.
    RemoteWrite,
    /// A one-word broadcast write to both nodes.
    Broadcast,
    /// A null message and its reply, the receiver polling.
    RoundTrip,
}

/// A two-node cluster of threads kept running so that a benchmark (criterion's
/// `iter_custom`) can time any number of one operation at a time; the cluster stops when
/// this is dropped.
pub struct NetBench {
    ops: crossbeam::channel::Sender<Option<(NetOp, u64)>>,
    times: crossbeam::channel::Receiver<Duration>,
    runner: Option<std::thread::JoinHandle<Result<(), LaunchError>>>,
}

impl NetBench {
    /// Starts the cluster (threads mode, the host's network profile).
    pub fn start() -> NetBench {
        let (ops, op_rx) = crossbeam::channel::bounded(1);
        let (time_tx, times) = crossbeam::channel::bounded(1);
        let runner = std::thread::spawn(move || bench_cluster(op_rx, time_tx));
        NetBench {
            ops,
            times,
            runner: Some(runner),
        }
    }

    /// How long node 0 took to do `op` `n` times (the request's channel not included).
    /// Panics if the cluster has failed.
    pub fn time(&self, op: NetOp, n: u64) -> Duration {
        self.ops.send(Some((op, n))).expect("the benchmark cluster has stopped");
        self.times.recv().expect("the benchmark cluster has stopped")
    }
}

impl Drop for NetBench {
    fn drop(&mut self) {
        let _ = self.ops.send(None);
        if let Some(runner) = self.runner.take() {
            let r = runner.join();
            if !std::thread::panicking() {
                r.expect("the benchmark cluster's thread")
                    .expect("the benchmark cluster runs");
            }
        }
    }
}

fn bench_cluster(
    ops: crossbeam::channel::Receiver<Option<(NetOp, u64)>>,
    times: crossbeam::channel::Sender<Duration>,
) -> Result<(), LaunchError> {
    launch(&spec(2, ExecMode::Threads), |ctx| {
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
        while let Ok(Some((op, n))) = ops.recv() {
            let t = Instant::now();
            match op {
                NetOp::RemoteWrite => (0..n).for_each(|i| net.tx(p2p).write_u64(0, i)),
                NetOp::Broadcast => (0..n).for_each(|i| net.tx(bcast).write_u64(0, i)),
                NetOp::RoundTrip => {
                    for _ in 0..n {
                        net.request(NodeId::from_usize(1), PING, 0, &[], &mut out)
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
            if times.send(t.elapsed()).is_err() {
                break;
            }
        }
        net.request(NodeId::from_usize(1), QUIT, 0, &[], &mut out)
            .map_err(|e| e.to_string())?;
        Ok(Vec::new())
    })
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(f: &NetFigures) {
        for t in [f.one_way_us, f.round_trip_polling_us, f.round_trip_parked_us] {
            assert!(t.is_finite() && t > 0.0, "{f:?}");
        }
        assert_eq!(f.broadcast_us.iter().map(|b| b.0).collect::<Vec<_>>(), [2, 4], "{f:?}");
        assert!(f.broadcast_us.iter().all(|b| b.1.is_finite() && b.1 > 0.0), "{f:?}");
        let sizes: Vec<usize> = f.bandwidth_mb_s.iter().map(|b| b.0).collect();
        assert_eq!(sizes, [64, 256, 1024, 4096, 16384, 65536], "{f:?}");
        assert!(f.bandwidth_mb_s.iter().all(|b| b.1.is_finite() && b.1 > 0.0), "{f:?}");
    }

    #[test]
    fn every_figure_is_measured_with_threads_and_with_processes() {
        for mode in [ExecMode::Threads, ExecMode::Processes] {
            // A node process passes this test's runs but its own, which never returns.
            if let Some(f) = measure(mode, 20).expect("the measurement runs") {
                check(&f);
            }
        }
    }

    #[test]
    fn a_kept_cluster_times_every_operation() {
        let bench = NetBench::start();
        for op in [NetOp::RemoteWrite, NetOp::Broadcast, NetOp::RoundTrip] {
            assert!(bench.time(op, 50) > Duration::ZERO, "{op:?}");
        }
    }
}
