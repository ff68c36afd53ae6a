//! Unit tests of the network layer and the launcher, both crate-private: ordering rules
//! under concurrent senders, loopback, acknowledge requests, messages (request/reply under load, full rings, oversized messages), the
//! launcher's handling of failed nodes, and configuration errors. Every test runs in both
//! execution modes unless it says otherwise.

use crate::launch::{launch, ExecMode, LaunchError, LaunchSpec, NodeCtx};
use crate::net::{Backing, Net, NodeId, Region};
use crate::profile;
use std::time::{Duration, Instant};

fn spec(nodes: usize, mode: ExecMode) -> LaunchSpec {
    LaunchSpec {
        nodes,
        procs: 1,
        heap_bytes: 1 << 20,
        profile: profile::by_name("mc2").unwrap(),
        mode,
        child_args: None,
        trace_entries: 0,
    }
}

// SplitMix64, for reproducible random traffic.
use crate::testing::SplitMix64 as Rng;

/// A network-level barrier for tests: every node broadcasts its arrival count into a
/// region every node receives, then waits to see everyone's.
fn net_barrier(net: &Net, region: Region, round: u64) {
    if round == 1 {
        // Nobody may transmit before everyone has attached its receive regions.
        crate::launch::startup_barrier(net.fabric(), net.node().index()).unwrap();
    }
    net.tx(region)
        .write_u64(net.node().index() as u64 * 8, round);
    let rx = net.rx(region);
    let start = Instant::now();
    for n in 0..net.nodes() {
        while rx.load_u64(n as u64 * 8) < round {
            assert!(!net.fabric().aborted(), "{}", crate::control::ABORT_MESSAGE);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "test barrier stuck waiting for node {n}"
            );
            std::thread::yield_now();
        }
    }
}

fn barrier_region(net: &Net) -> Region {
    let r = net
        .alloc_region(crate::net::MC_PAGE_BYTES, Backing::Pool, "test barrier")
        .unwrap();
    net.attach_rx(&r, 0, r.len, true);
    r
}

const P2P: u64 = 1;
const BCAST: u64 = 2;

fn tag(sender: usize, kind: u64, seq: u64) -> u64 {
    ((sender as u64) << 40) | (kind << 32) | seq
}

/// What node `node` sends: (word offset, tag, receiver) with `None` for a broadcast.
fn plan(seed: u64, node: usize, nodes: usize, packets: u64) -> Vec<(u64, u64, Option<usize>)> {
    let mut rng = Rng(seed ^ (node as u64 * 0x1234_5678));
    (0..packets)
        .map(|seq| {
            let word = (rng.next_u64() % 64) * 8;
            if nodes == 1 || rng.next_u64() % 3 == 0 {
                (word, tag(node, BCAST, seq), None)
            } else {
                let to = (node + 1 + (rng.next_u64() % (nodes as u64 - 1)) as usize) % nodes;
                (word, tag(node, P2P, seq), Some(to))
            }
        })
        .collect()
}

/// Every node sends a random mix of point-to-point and broadcast packets; every node
/// returns its complete arrival log.
fn ordering_run(
    mode: ExecMode,
    nodes: usize,
    seed: u64,
    packets: u64,
) -> Result<Vec<Vec<u64>>, LaunchError> {
    let mut s = spec(nodes, mode);
    s.trace_entries = (nodes as u64 * packets * 2 + 64) as usize;
    let logs = launch(&s, |ctx: NodeCtx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let bar = barrier_region(&net);
        // One point-to-point region per receiver, and one broadcast region with loopback.
        let p2p: Vec<Region> = (0..nodes)
            .map(|_| {
                net.alloc_region(crate::net::MC_PAGE_BYTES, Backing::Pool, "p2p")
                    .unwrap()
            })
            .collect();
        net.attach_rx(&p2p[ctx.node], 0, crate::net::MC_PAGE_BYTES, false);
        let bcast = net
            .alloc_region(crate::net::MC_PAGE_BYTES, Backing::Pool, "bcast")
            .unwrap();
        net.attach_rx(&bcast, 0, bcast.len, true);
        net_barrier(&net, bar, 1);
        for (i, (word, tag, to)) in plan(seed, ctx.node, nodes, packets).into_iter().enumerate() {
            match to {
                None => net.tx(bcast).write(word, &tag.to_ne_bytes()),
                Some(to) => net.tx(p2p[to]).write(word, &tag.to_ne_bytes()),
            }
            // Line the senders up often, so that their packets really are concurrent.
            if i % 50 == 49 {
                net_barrier(&net, bar, 2 + i as u64 / 50);
            }
        }
        net.ack();
        net_barrier(&net, bar, 1_000_000);
        let log: Vec<u64> = net
            .fabric()
            .arrivals(ctx.node)
            .into_iter()
            .filter(|t| matches!((t >> 32) & 0xff, P2P | BCAST))
            .collect();
        Ok(serde_json::to_vec(&log).unwrap())
    })?;
    Ok(logs
        .into_iter()
        .map(|b| serde_json::from_slice(&b).unwrap())
        .collect())
}

fn check_ordering(logs: &[Vec<u64>], seed: u64, packets: u64) {
    let nodes = logs.len();
    // Completeness: every receiver got exactly the packets addressed to it.
    for (r, log) in logs.iter().enumerate() {
        let mut want: Vec<u64> = (0..nodes)
            .flat_map(|s| plan(seed, s, nodes, packets))
            .filter(|(_, _, to)| to.is_none_or(|t| t == r))
            .map(|(_, tag, _)| tag)
            .collect();
        let mut got = log.clone();
        want.sort_unstable();
        got.sort_unstable();
        let diff = want
            .iter()
            .zip(&got)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        assert!(
            got == want,
            "seed {seed}: receiver {r} got {} packets, expected {}; first difference at sorted index {diff}",
            got.len(),
            want.len()
        );
    }
    // Rule 1: at every receiver, each sender's packets arrive in the order sent.
    for (r, log) in logs.iter().enumerate() {
        let mut last = vec![None::<u64>; nodes];
        for t in log {
            let s = (t >> 40) as usize;
            let seq = t & 0xFFFF_FFFF;
            if let Some(prev) = last[s] {
                assert!(
                    seq > prev,
                    "seed {seed}: receiver {r} got sender {s}'s packet {seq} after {prev} (rule 1)"
                );
            }
            last[s] = Some(seq);
        }
    }
    // Rule 2: every receiver sees the broadcasts in one order; with loopback, all of them.
    let bcasts: Vec<Vec<u64>> = logs
        .iter()
        .map(|l| {
            l.iter()
                .copied()
                .filter(|t| (t >> 32) & 0xff == BCAST)
                .collect()
        })
        .collect();
    for r in 1..nodes {
        let at = bcasts[0].iter().zip(&bcasts[r]).position(|(a, b)| a != b);
        assert!(bcasts[r] == bcasts[0], "seed {seed}: receivers 0 and {r} saw broadcasts in different orders (rule 2), first at {at:?}");
    }
}

fn ordering_over_seeds(mode: ExecMode, seeds: std::ops::Range<u64>, packets: u64) {
    for seed in seeds {
        for nodes in [2, 3, 4] {
            match crate::launch::skip_other_run(ordering_run(mode, nodes, seed, packets)) {
                Ok(None) => continue,
                Err(e) => panic!("seed {seed}, {nodes} nodes: {e}"),
                Ok(Some(logs)) => check_ordering(&logs, seed, packets),
            }
        }
    }
}

#[test]
fn ordering_rules_hold_with_threads() {
    ordering_over_seeds(ExecMode::Threads, 0..12, 2000);
}

#[test]
fn ordering_rules_hold_with_processes() {
    ordering_over_seeds(ExecMode::Processes, 100..104, 2000);
}

/// Loopback: a node's own broadcast lands in its own memory, in order with the others';
/// without loopback it does not.
fn loopback(mode: ExecMode) {
    let r = launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let with = net
            .alloc_region(crate::net::MC_PAGE_BYTES, Backing::Pool, "with")
            .unwrap();
        let without = net
            .alloc_region(crate::net::MC_PAGE_BYTES, Backing::Pool, "without")
            .unwrap();
        net.attach_rx(&with, 0, with.len, true);
        net.attach_rx(&without, 0, without.len, false);
        let bar = barrier_region(&net);
        net_barrier(&net, bar, 1);
        let slot = ctx.node as u64 * 8;
        for v in 1..=100u64 {
            net.tx(with).write_u64(slot, v);
            // Loopback completes in order: our own write is visible as soon as it returns.
            assert_eq!(net.rx(with).load_u64(slot), v);
        }
        net.tx(without).write_u64(slot, 7);
        net_barrier(&net, bar, 2);
        let other = (1 - ctx.node) as u64 * 8;
        let seen = (
            net.rx(with).load_u64(other),
            net.rx(without).load_u64(slot),
            net.rx(without).load_u64(other),
        );
        Ok(serde_json::to_vec(&seen).unwrap())
    })
    .unwrap();
    for bytes in r {
        let (other_with, own_without, other_without): (u64, u64, u64) =
            serde_json::from_slice(&bytes).unwrap();
        assert_eq!(other_with, 100, "the other node's last broadcast");
        assert_eq!(
            own_without, 0,
            "no loopback: own write must not land locally"
        );
        assert_eq!(other_without, 7);
    }
}

#[test]
fn loopback_with_threads() {
    loopback(ExecMode::Threads);
}

#[test]
fn loopback_with_processes() {
    loopback(ExecMode::Processes);
}

const ECHO: u16 = 1;
const DONE: u16 = 2;
const NOTE: u16 = 3;

/// Request/reply under load: every node runs a service thread that echoes requests, and
/// several client threads per node hammer random peers; every reply must match its request.
/// One-way notes check FIFO order per ring, and the small ring fills up (back-pressure).
fn request_reply(mode: ExecMode, nodes: usize) {
    let clients = 3usize;
    let per_client = 400u64;
    let mut s = spec(nodes, mode);
    s.procs = clients;
    let r = launch(&s, |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let nodes = net.nodes();
        let mut notes_seen = vec![0u64; nodes];
        let mut dones = 0;
        let mut served = 0u64;
        std::thread::scope(|sc| {
            for c in 0..clients {
                let net = &net;
                sc.spawn(move || {
                    let mut rng = Rng(ctx.node as u64 * 77 + c as u64);
                    let mut out = Vec::new();
                    for i in 0..per_client {
                        let to = NodeId::from_usize((rng.next_u64() % nodes as u64) as usize);
                        let len = (rng.next_u64() % 3000) as usize;
                        let payload: Vec<u8> =
                            (0..len).map(|k| (k as u64 ^ i ^ c as u64) as u8).collect();
                        net.request(to, ECHO, c as u16, &payload, &mut out).unwrap();
                        assert_eq!(
                            out, payload,
                            "reply does not match request {i} of client {c}"
                        );
                    }
                    if c == 0 {
                        // A burst of one-way notes larger than the ring: back-pressure, no loss.
                        for to in net.all_nodes().iter() {
                            for k in 0..3000u64 {
                                net.send(to, NOTE, c as u16, 0, &k.to_ne_bytes()).unwrap();
                            }
                        }
                    }
                    // Rings are FIFO, so this arrives after everything this client sent.
                    for to in net.all_nodes().iter() {
                        net.send(to, DONE, c as u16, 0, &[]).unwrap();
                    }
                });
            }
            // This node's service loop runs here until every client of every node is done.
            loop {
                let n = net.poll(|m| match m.kind {
                    ECHO => {
                        net.reply(m.from, m.slot, m.token, m.payload).unwrap();
                        served += 1;
                    }
                    NOTE => {
                        let k = u64::from_ne_bytes(m.payload.try_into().unwrap());
                        assert_eq!(
                            k,
                            notes_seen[m.from.index()],
                            "notes from {} out of order",
                            m.from
                        );
                        notes_seen[m.from.index()] += 1;
                    }
                    DONE => dones += 1,
                    other => panic!("unexpected message kind {other}"),
                });
                if dones == nodes * clients {
                    assert!(
                        notes_seen.iter().all(|&k| k == 3000),
                        "notes were lost: {notes_seen:?}"
                    );
                    break;
                }
                if n == 0 {
                    net.wait_for_messages().unwrap();
                }
            }
        });
        Ok(serde_json::to_vec(&(served, net.fabric().counters(ctx.node).messages)).unwrap())
    })
    .unwrap();
    let served: u64 = r
        .iter()
        .map(|b| serde_json::from_slice::<(u64, u64)>(b).unwrap().0)
        .sum();
    assert_eq!(served, nodes as u64 * clients as u64 * per_client);
}

#[test]
fn request_reply_under_load_with_threads() {
    request_reply(ExecMode::Threads, 3);
}

#[test]
fn request_reply_under_load_with_processes() {
    request_reply(ExecMode::Processes, 2);
}

#[test]
fn oversized_message_is_a_clear_error() {
    let r = launch(&spec(2, ExecMode::Threads), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let big = vec![0u8; crate::net::MAX_MESSAGE_BYTES + 1];
        let other = NodeId::from_usize(1 - ctx.node);
        let e = net.send(other, ECHO, 0, 0, &big).unwrap_err();
        Ok(e.to_string().into_bytes())
    })
    .unwrap();
    let msg = String::from_utf8(r[0].clone()).unwrap();
    assert!(msg.contains("exceeds the largest message"), "{msg}");
}

/// A node that dies mid-run: the launcher names it and the cause and stops the rest, which
/// wait for it in the test barrier. Were the crash path broken, a survivor's barrier would
/// give up after its 60 s deadline and the run would end in that panic's report instead,
/// so the exact message proves the crash path, with no wall-clock bound that a loaded
/// host could break, and the test cannot hang.
fn crash(mode: ExecMode, how: &'static str) -> LaunchError {
    launch(&spec(3, mode), move |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let bar = barrier_region(&net);
        net_barrier(&net, bar, 1);
        if ctx.node == 1 {
            match how {
                "panic" => panic!("node one gives up"),
                "kill" => crate::testing::raise_kill(),
                _ => std::process::exit(3),
            }
        }
        // The survivors wait for node 1 forever; only the launcher can free them.
        net_barrier(&net, bar, 2);
        Ok(Vec::new())
    })
    .unwrap_err()
}

#[test]
fn crashed_node_is_reported_with_threads() {
    let e = crash(ExecMode::Threads, "panic");
    assert_eq!(e.to_string(), "node 1 failed: panicked: node one gives up");
}

#[test]
fn crashed_node_is_reported_with_processes() {
    for (how, want) in [
        ("panic", "node 1 failed: panicked: node one gives up"),
        ("kill", "node 1 failed: killed by SIGKILL"),
        (
            "exit",
            "node 1 failed: exited with status 3 before reporting a result",
        ),
    ] {
        match crash(ExecMode::Processes, how) {
            e if crate::launch::OtherRun::is_other_run(&e) => continue,
            e => assert_eq!(e.to_string(), want, "{how}"),
        }
    }
}

#[test]
fn bad_configuration_is_refused() {
    let e = launch(&spec(0, ExecMode::Threads), |_| Ok(Vec::new())).unwrap_err();
    assert_eq!(e.to_string(), "a cluster needs at least one node; got 0");
    let e = launch(&spec(33, ExecMode::Threads), |_| Ok(Vec::new())).unwrap_err();
    assert!(e.to_string().contains("at most 32"), "{e}");
    let r = launch(&spec(1, ExecMode::Threads), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let space = 128 << 20;
        let e1 = net
            .region_at(space - 8, 16, Backing::Pool)
            .unwrap_err()
            .to_string();
        let e2 = net
            .alloc_region(space, Backing::Pool, "a huge table")
            .unwrap_err()
            .to_string();
        Ok(serde_json::to_vec(&(e1, e2)).unwrap())
    })
    .unwrap();
    let (e1, e2): (String, String) = serde_json::from_slice(&r[0]).unwrap();
    assert!(e1.contains("outside the network address space"), "{e1}");
    assert!(
        e2.contains("is full") && e2.contains("a huge table"),
        "{e2}"
    );
    assert!(profile::by_name("ethernet-1983")
        .unwrap_err()
        .to_string()
        .contains("valid profiles"));
}

/// An acknowledge request returns only when everything sent before it has landed: after
/// `ack`, a one-way message tells the receiver to look, and every earlier remote write must
/// already be in its memory (the message is not ordered with the writes by anything else:
/// they travel on different paths).
fn acknowledge(mode: ExecMode) {
    const LOOK: u16 = 9;
    let r = launch(&spec(2, mode), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let data = net
            .alloc_region(4 * crate::net::MC_PAGE_BYTES, Backing::Pool, "data")
            .unwrap();
        if ctx.node == 1 {
            net.attach_rx(&data, 0, data.len, false);
        }
        let bar = barrier_region(&net);
        net_barrier(&net, bar, 1);
        if ctx.node == 0 {
            for round in 1..=50u64 {
                for w in 0..(data.len / 8) {
                    net.tx(data).write_u64(w * 8, round * 1_000_000 + w);
                }
                net.ack();
                net.send(NodeId::from_usize(1), LOOK, 0, 0, &round.to_ne_bytes())
                    .unwrap();
            }
            return Ok(serde_json::to_vec(&net.fabric().counters(0).acks).unwrap());
        }
        let mut seen = 0u64;
        while seen < 50 {
            let n = net.poll(|m| {
                let round = u64::from_ne_bytes(m.payload.try_into().unwrap());
                // The sender may be rounds ahead by now: values only grow, so each word must
                // hold this round's value or a later one.
                for w in 0..(data.len / 8) {
                    let got = net.rx(data).load_u64(w * 8);
                    assert!(
                        got >= round * 1_000_000 + w,
                        "word {w} of round {round} missing after the ack: {got}"
                    );
                }
                seen = round;
            });
            if n == 0 {
                net.wait_for_messages().unwrap();
            }
        }
        Ok(serde_json::to_vec(&0u64).unwrap())
    })
    .unwrap();
    let acks: u64 = serde_json::from_slice(&r[0]).unwrap();
    assert_eq!(acks, 50, "every acknowledge request is counted");
}

#[test]
fn acknowledge_requests_with_threads() {
    acknowledge(ExecMode::Threads);
}

#[test]
fn acknowledge_requests_with_processes() {
    acknowledge(ExecMode::Processes);
}

/// Runs transmitted as groups per receive page land exactly as the same writes one by one
/// would, including runs that cross a page boundary, and nothing else is touched.
#[test]
fn grouped_runs_land_like_single_writes() {
    let page = crate::net::MC_PAGE_BYTES as usize;
    let r = launch(&spec(2, ExecMode::Threads), |ctx| {
        let net = Net::new(ctx.fabric, NodeId::from_usize(ctx.node));
        let region = net
            .alloc_region(3 * page as u64, Backing::Pool, "runs")
            .unwrap();
        if ctx.node == 1 {
            net.attach_rx(&region, 0, region.len, false);
        }
        let bar = barrier_region(&net);
        net_barrier(&net, bar, 1);
        let mut rng = Rng(77);
        let mut expect = vec![0u8; 3 * page];
        if ctx.node == 0 {
            let mut runs: Vec<(usize, Vec<u8>)> = Vec::new();
            let mut at = 100usize;
            while at < 3 * page - 200 {
                let len = 1 + (rng.next_u64() % 150) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| 1 + (rng.next_u64() % 250) as u8).collect();
                runs.push((at, bytes));
                at += len + 1 + (rng.next_u64() % 300) as usize;
            }
            runs.push((page - 3, vec![9; 10])); // crosses into the second page
            let refs: Vec<(usize, &[u8])> = runs.iter().map(|(o, b)| (*o, b.as_slice())).collect();
            net.tx(region).write_runs(0, &refs);
        }
        net_barrier(&net, bar, 2);
        if ctx.node == 0 {
            return Ok(Vec::new());
        }
        // Rebuild what node 0 sent, in order, and compare every byte.
        let mut rng = Rng(77);
        let mut at = 100usize;
        while at < 3 * page - 200 {
            let len = 1 + (rng.next_u64() % 150) as usize;
            for k in 0..len {
                expect[at + k] = 1 + (rng.next_u64() % 250) as u8;
            }
            at += len + 1 + (rng.next_u64() % 300) as usize;
        }
        expect[page - 3..page + 7].fill(9);
        let mut got = vec![0u8; 3 * page];
        net.rx(region).read(0, &mut got);
        let first_diff = got.iter().zip(&expect).position(|(a, b)| a != b);
        Ok(serde_json::to_vec(&first_diff).unwrap())
    })
    .unwrap();
    let diff: Option<usize> = serde_json::from_slice(&r[1]).unwrap();
    assert_eq!(diff, None, "first differing byte");
}
