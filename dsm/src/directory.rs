//! The page directory and write notices, in the two metadata strategies of the paper's
//! Table 1.
//!
//! * Replicated (CSM-DMS, section 2.3.1, "Metadata"): every node holds the whole
//!   directory in a region that every node receives; each node writes only its own word of
//!   each entry (`SHARED | WRITING`) by broadcast, and the page's manager writes the home
//!   word once. Write notices are remote-written into per-sender rings in the receiver's
//!   memory; the receiver writes back how far it has read. A sender that would overrun a
//!   ring bumps an overflow count instead, and the receiver then invalidates everything
//!   it caches (correct, merely slow).
//! * Home-held (CSM-None, section 2.3.4): the home keeps each page's sharing set; a fetch
//!   joins it, a diff's acknowledgement carries it back, an invalidation leaves it by an
//!   explicit message; homes are assigned by the page's manager and cached; write notices
//!   are explicit messages, acknowledged before the release completes.
//!
//! # Memory ordering
//!
//! Replicated: a node's join is broadcast (and so has landed everywhere) before it asks
//! the home for the page, so a release that reads the directory after its diff landed
//! either sees the joiner or happened before the joiner's fetch was served. A notice ring's
//! entries are transmitted before its write index, so a receiver that sees the index sees
//! the entries.

use crate::engine::{kind, my_slot, Node};
use crate::net::{Backing, Net, NetError, Region};
use crate::stats::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SHARED: u32 = 1;
const WRITING: u32 = 2;
/// Bytes of one notice ring (one per ordered pair of nodes).
const NOTICE_RING_BYTES: u64 = 8192;
const NOTICE_HEADER: u64 = 16;
const NOTICE_CAPACITY: u64 = (NOTICE_RING_BYTES - NOTICE_HEADER) / 4;

pub(crate) enum Directory {
    Replicated(Replicated),
    HomeHeld(HomeHeld),
}

pub(crate) struct Replicated {
    dir: Region,
    stride: u64,
    notices: Region,
    consumed: Region,
    nodes: usize,
    /// Serializes home assignment at this node when it is the manager.
    assign: Mutex<()>,
    /// Per destination: (next write index, overflow count).
    send: Mutex<Vec<(u64, u64)>>,
    /// Per source: (consumed index, overflow count seen).
    recv: Mutex<Vec<(u64, u64)>>,
}

pub(crate) struct HomeHeld {
    /// At the home: the sharing set of each page it is home of.
    sharers: Box<[AtomicU64]>,
    /// At the manager: the home of each page it manages.
    homes: Mutex<Vec<u8>>,
    /// Write notices received and not yet acted on.
    inbox: Mutex<Vec<u32>>,
}

fn part_bytes(nodes: usize, each: u64) -> u64 {
    (nodes as u64 * each).div_ceil(crate::net::MC_PAGE_BYTES) * crate::net::MC_PAGE_BYTES
}

impl Directory {
    /// Allocates the replicated directory's regions (same order on every node).
    pub fn replicated(net: &Net, npages: usize) -> Result<Directory, NetError> {
        let nodes = net.nodes();
        let stride = 4 * (1 + nodes as u64);
        let dir = net.alloc_region(
            npages as u64 * stride,
            Backing::Pool,
            "the replicated page directory",
        )?;
        net.attach_rx(&dir, 0, dir.len, true);
        let per_receiver = nodes as u64 * NOTICE_RING_BYTES;
        let notices = net.alloc_region(
            nodes as u64 * per_receiver,
            Backing::Pool,
            "write-notice lists",
        )?;
        net.attach_rx(
            &notices,
            net.node() as u64 * per_receiver,
            per_receiver,
            false,
        );
        let part = part_bytes(nodes, 8);
        let consumed = net.alloc_region(
            nodes as u64 * part,
            Backing::Pool,
            "write-notice flow control",
        )?;
        net.attach_rx(&consumed, net.node() as u64 * part, part, false);
        Ok(Directory::Replicated(Replicated {
            dir,
            stride,
            notices,
            consumed,
            nodes,
            assign: Mutex::new(()),
            send: Mutex::new(vec![(0, 0); nodes]),
            recv: Mutex::new(vec![(0, 0); nodes]),
        }))
    }

    pub fn home_held(npages: usize) -> Directory {
        Directory::HomeHeld(HomeHeld {
            sharers: (0..npages).map(|_| AtomicU64::new(0)).collect(),
            homes: Mutex::new(vec![crate::engine::NO_HOME; npages]),
            inbox: Mutex::new(Vec::new()),
        })
    }

    /// The home recorded in the replicated directory, if any.
    pub fn replicated_home(&self, node: &Node, p: u32) -> Option<usize> {
        match self {
            Directory::Replicated(r) => {
                let h = node.net.rx(r.dir).load_u32(p as u64 * r.stride);
                (h != 0).then(|| h as usize - 1)
            }
            Directory::HomeHeld(_) => None,
        }
    }

    /// At `p`'s manager: returns `p`'s home, making it `claimant` if it has none.
    pub fn assign_home(&self, node: &Node, p: u32, claimant: usize) -> usize {
        match self {
            Directory::Replicated(r) => {
                let _g = r.assign.lock().expect("poisoned");
                let at = p as u64 * r.stride;
                let h = node.net.rx(r.dir).load_u32(at);
                if h != 0 {
                    return h as usize - 1;
                }
                node.net.tx(r.dir).write_u32(at, claimant as u32 + 1);
                claimant
            }
            Directory::HomeHeld(h) => {
                let mut homes = h.homes.lock().expect("poisoned");
                if homes[p as usize] == crate::engine::NO_HOME {
                    homes[p as usize] = claimant as u8;
                }
                homes[p as usize] as usize
            }
        }
    }

    /// Records a home read from a homes file (every node does the same).
    pub fn preset_home(&self, node: &Node, p: u32, home: usize) {
        match self {
            Directory::Replicated(r) => node
                .net
                .rx(r.dir)
                .atomic_u32(p as u64 * r.stride)
                .store(home as u32 + 1, Ordering::Release),
            Directory::HomeHeld(h) => h.homes.lock().expect("poisoned")[p as usize] = home as u8,
        }
    }

    /// This node now shares `p` (and writes it, if `writing`).
    pub fn join(&self, node: &Node, p: u32, writing: bool) {
        match self {
            Directory::Replicated(r) => {
                let at = p as u64 * r.stride + 4 * (1 + node.id as u64);
                let old = node.net.rx(r.dir).load_u32(at);
                let new = old | SHARED | if writing { WRITING } else { 0 };
                if new != old {
                    node.net.tx(r.dir).write_u32(at, new);
                }
            }
            Directory::HomeHeld(h) => {
                // A fetch joins at the home; the home records itself.
                if node.is_home(p) {
                    h.sharers[p as usize].fetch_or(1 << node.id, Ordering::AcqRel);
                }
            }
        }
    }

    /// This node dropped its copy of `p`, whose home is `home`.
    pub fn leave(&self, node: &Node, p: u32, home: usize) {
        match self {
            Directory::Replicated(r) => {
                let at = p as u64 * r.stride + 4 * (1 + node.id as u64);
                node.net.tx(r.dir).write_u32(at, 0);
            }
            Directory::HomeHeld(_) => {
                // One-way: the ring is FIFO, so a later fetch from us arrives after it.
                node.net
                    .send_via(
                        &node.seam(),
                        home,
                        kind::DROP,
                        my_slot(node),
                        0,
                        &p.to_le_bytes(),
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    /// At the home, serving a fetch: `from` joins the sharing set.
    pub fn home_join(&self, _node: &Node, p: u32, from: usize) {
        if let Directory::HomeHeld(h) = self {
            h.sharers[p as usize].fetch_or(1 << from, Ordering::AcqRel);
        }
    }

    /// At the home: `from` dropped its copy.
    pub fn home_leave(&self, _node: &Node, p: u32, from: usize) {
        if let Directory::HomeHeld(h) = self {
            h.sharers[p as usize].fetch_and(!(1u64 << from), Ordering::AcqRel);
        }
    }

    /// The nodes sharing `p`: from the replica, or (home-held) as known at the home.
    pub fn sharers(&self, node: &Node, p: u32) -> u64 {
        match self {
            Directory::Replicated(r) => {
                let rx = node.net.rx(r.dir);
                let base = p as u64 * r.stride;
                (0..r.nodes)
                    .filter(|&n| rx.load_u32(base + 4 * (1 + n as u64)) & SHARED != 0)
                    .fold(0, |m, n| m | 1 << n)
            }
            Directory::HomeHeld(h) => h.sharers[p as usize].load(Ordering::Acquire),
        }
    }

    /// Sends write notices for `pages` to node `to`; returns once they are delivered.
    pub fn send_notices(&self, node: &Node, to: usize, pages: &[u32]) {
        match self {
            Directory::Replicated(r) => r.send_notices(node, to, pages),
            Directory::HomeHeld(_) => {
                let per_message = crate::net::MAX_MESSAGE_BYTES / 4;
                let mut out = Vec::new();
                for chunk in pages.chunks(per_message) {
                    let bytes: Vec<u8> = chunk.iter().flat_map(|p| p.to_le_bytes()).collect();
                    Clock::message(|| node.request(to, kind::NOTICE, &bytes, &mut out))
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }

    /// Home-held: a notice message arrived.
    pub fn receive_notices(&self, payload: &[u8]) {
        if let Directory::HomeHeld(h) = self {
            let mut inbox = h.inbox.lock().expect("poisoned");
            inbox.extend(
                payload
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
            );
        }
    }

    /// The pages noticed since the last call, or `true` if everything must go.
    pub fn take_notices(&self, node: &Node) -> (Vec<u32>, bool) {
        match self {
            Directory::Replicated(r) => r.take_notices(node),
            Directory::HomeHeld(h) => {
                // Drain messages that already arrived but the service thread has not seen.
                (
                    std::mem::take(&mut *h.inbox.lock().expect("poisoned")),
                    false,
                )
            }
        }
    }
}

impl Replicated {
    fn ring(&self, receiver: usize, sender: usize) -> u64 {
        (receiver * self.nodes + sender) as u64 * NOTICE_RING_BYTES
    }

    fn send_notices(&self, node: &Node, to: usize, pages: &[u32]) {
        let mut send = self.send.lock().expect("poisoned");
        let (widx, ovf) = &mut send[to];
        let part = part_bytes(self.nodes, 8);
        let consumed = node
            .net
            .rx(self.consumed)
            .load_u64(node.id as u64 * part + to as u64 * 8);
        let ring = self.ring(to, node.id);
        let tx = node.net.tx(self.notices);
        if *widx + pages.len() as u64 - consumed > NOTICE_CAPACITY {
            *ovf += 1;
            tx.write_u64(ring + 8, *ovf);
            return;
        }
        for &p in pages {
            tx.write_u32(ring + NOTICE_HEADER + (*widx % NOTICE_CAPACITY) * 4, p);
            *widx += 1;
        }
        tx.write_u64(ring, *widx);
    }

    fn take_notices(&self, node: &Node) -> (Vec<u32>, bool) {
        let mut recv = self.recv.lock().expect("poisoned");
        let rx = node.net.rx(self.notices);
        let part = part_bytes(self.nodes, 8);
        let mut pages = Vec::new();
        let mut all = false;
        for (s, (consumed, ovf_seen)) in recv.iter_mut().enumerate() {
            let ring = self.ring(node.id, s);
            let w = rx.load_u64(ring);
            let ovf = rx.load_u64(ring + 8);
            if ovf != *ovf_seen {
                *ovf_seen = ovf;
                all = true;
            }
            if w == *consumed {
                continue;
            }
            for i in *consumed..w {
                pages.push(rx.load_u32(ring + NOTICE_HEADER + (i % NOTICE_CAPACITY) * 4));
            }
            *consumed = w;
            node.net
                .tx(self.consumed)
                .write_u64(s as u64 * part + node.id as u64 * 8, w);
        }
        (pages, all)
    }
}
