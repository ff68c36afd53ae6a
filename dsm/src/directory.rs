//! The page directory and write notices, in the two metadata strategies of the paper's
//! Table 1. The engine calls these with the page's state (under its lock); the strategies
//! know the network, never the engine.
//!
//! * Replicated (CSM-DMS, -MS, -MS-Mg, -ADB; section 2.3.1, "Metadata"): every node holds
//!   the whole directory in a region that every node receives. An entry is a home word
//!   plus one word per node (`SHARED | WRITING`); each node writes only its own word, by
//!   broadcast. The home word is written by the page's manager at first touch and, under
//!   home migration, by the home that gives the page away (before it answers the new
//!   home), so it has one writer at a time. `WRITING` is kept only by the home, and only
//!   under home migration, which is its one reader (2.3.5). Write notices are
//!   remote-written into per-sender rings in the receiver's memory; the receiver writes
//!   back how far it has read. A sender that would overrun a ring bumps an overflow count
//!   instead (counted in the report), and the receiver then invalidates everything it
//!   caches (correct, merely slow). Rings share 16 MiB of network address space equally,
//!   so that this does not happen in practice.
//! * Home-held (CSM-S, -None, -None-Mg; sections 2.3.3 and 2.3.4): the home keeps each
//!   page's sharing set in the page's state (a fetch joins it, a diff acknowledgement
//!   carries it back, an invalidation leaves it by an explicit message); homes are
//!   assigned by the page's manager; write notices are explicit messages, acknowledged
//!   before the release completes.
//!
//! # Memory ordering
//!
//! Replicated: a node's join is broadcast (and so has landed everywhere) before it asks
//! the home for the page, so a release that reads the directory after its diff landed
//! either sees the joiner or happened before the joiner's fetch was served. A notice ring's
//! entries are transmitted before its write index, so a receiver that sees the index sees
//! the entries. A migrating home's broadcast of the new home word lands everywhere before
//! its grant reaches the new home, so every node that reads the word after that asks the
//! new home (which defers requests until it has taken over).

use crate::ids::{NodeId, NodeSet, PageId};
use crate::net::{Backing, Net, NetError, Region};
use crate::page::PageState;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

const SHARED: u32 = 1;
const WRITING: u32 = 2;
const NOTICE_HEADER: u64 = 16;
/// Smallest notice ring (one per ordered pair of nodes).
const MIN_NOTICE_RING_BYTES: u64 = 8192;
/// Cap on all notice rings together, in network address space.
const NOTICE_SPACE_BYTES: u64 = 16 << 20;

pub(crate) enum Directory {
    Replicated(Box<Replicated>),
    HomeHeld(HomeHeld),
}

pub(crate) struct Replicated {
    dir: Region,
    stride: u64,
    notices: Region,
    ring_bytes: u64,
    /// Notices one ring holds: what its bytes hold, or fewer (`TestKnobs`).
    capacity: u64,
    consumed: Region,
    nodes: usize,
    /// Keep the home's `WRITING` bit (home migration reads it).
    track_writing: bool,
    /// This node's own word of every page, as it last wrote it. A broadcast comes back
    /// to the writer's replica only with the network's latency (at once under the wall
    /// clock, later under the modeled one), so read-modify-writes of our own word start
    /// from this copy, never from the replica.
    own: Box<[AtomicU32]>,
    /// At a page's manager: the home it assigned (node + 1), for the same reason.
    assigned: Box<[AtomicU32]>,
    /// Serializes home assignment at this node when it is the manager.
    assign: Mutex<()>,
    /// Per destination: (next write index, overflow count).
    send: Mutex<Vec<(u64, u64)>>,
    /// Per source: (consumed index, overflow count seen).
    recv: Mutex<Vec<(u64, u64)>>,
}

pub(crate) struct HomeHeld {
    /// At the manager: the first-touch home of each page it manages.
    homes: Mutex<Vec<Option<NodeId>>>,
    /// Write notices received and not yet acted on.
    inbox: Mutex<Vec<PageId>>,
}

/// A home as the directory's home word holds it: the node plus one, so that 0 is "no home".
fn home_word(home: NodeId) -> u32 {
    u32::from(home.0) + 1
}

fn part_bytes(nodes: usize, each: u64) -> u64 {
    (nodes as u64 * each).div_ceil(crate::net::MC_PAGE_BYTES) * crate::net::MC_PAGE_BYTES
}

/// Bytes of one notice ring on `nodes` nodes: an equal share of [`NOTICE_SPACE_BYTES`]
/// (at least [`MIN_NOTICE_RING_BYTES`]), whatever the heap. A sender notices a page at
/// most once per release, but it may release many times while the receiver takes none of
/// its notices (its processors wait at a barrier while the sender's still take and
/// release locks), so no multiple of the page count bounds what a ring must hold: rings
/// of two notices per page overflowed 27,506 times in Water-nsquared at the paper's input
/// on 8 x 4, where it sends about 5,600 notices per pair of nodes in the whole run.
/// On 8 nodes a ring holds 65,532 notices.
fn notice_ring_bytes(nodes: usize) -> u64 {
    let share = NOTICE_SPACE_BYTES / (nodes * nodes) as u64;
    let bytes = share.max(MIN_NOTICE_RING_BYTES);
    bytes.div_ceil(crate::net::MC_PAGE_BYTES) * crate::net::MC_PAGE_BYTES
}

/// The network address space the replicated directory takes before its per-page words:
/// the write-notice rings and their flow-control words.
pub(crate) fn replicated_fixed_bytes(nodes: usize) -> u64 {
    let n = nodes as u64;
    n * n * notice_ring_bytes(nodes) + part_bytes(nodes, 8) * n
}

impl Directory {
    /// Allocates the replicated directory's regions (same order on every node). With
    /// `ring_capacity` (a test knob, `crate::config::TestKnobs`), a notice ring holds at most
    /// that many notices, so that a test can overflow it.
    pub fn replicated(
        net: &Net,
        npages: usize,
        track_writing: bool,
        ring_capacity: Option<usize>,
    ) -> Result<Directory, NetError> {
        let nodes = net.nodes();
        let stride = 4 * (1 + nodes as u64);
        let dir = net.alloc_region(
            npages as u64 * stride,
            Backing::Pool,
            "the replicated page directory",
        )?
        .unawaited();
        net.attach_rx(&dir, 0, dir.len, true);
        let ring_bytes = notice_ring_bytes(nodes);
        let full = (ring_bytes - NOTICE_HEADER) / 4;
        let capacity = ring_capacity.map_or(full, |c| (c as u64).clamp(1, full));
        let per_receiver = nodes as u64 * ring_bytes;
        let notices = net.alloc_region(
            nodes as u64 * per_receiver,
            Backing::Pool,
            "write-notice lists",
        )?
        .unawaited();
        net.attach_rx(
            &notices,
            net.node().index() as u64 * per_receiver,
            per_receiver,
            false,
        );
        let part = part_bytes(nodes, 8);
        let consumed = net.alloc_region(
            nodes as u64 * part,
            Backing::Pool,
            "write-notice flow control",
        )?
        .unawaited();
        net.attach_rx(&consumed, net.node().index() as u64 * part, part, false);

        Ok(Directory::Replicated(Box::new(Replicated {
            dir,
            stride,
            notices,
            ring_bytes,
            capacity,
            consumed,
            nodes,
            track_writing,
            own: (0..npages).map(|_| AtomicU32::new(0)).collect(),
            assigned: (0..npages).map(|_| AtomicU32::new(0)).collect(),
            assign: Mutex::new(()),
            send: Mutex::new(vec![(0, 0); nodes]),
            recv: Mutex::new(vec![(0, 0); nodes]),
        })))
    }

    pub fn home_held(npages: usize) -> Directory {
        Directory::HomeHeld(HomeHeld {
            homes: Mutex::new(vec![None; npages]),
            inbox: Mutex::new(Vec::new()),
        })
    }

    /// The home recorded in the replicated directory, if any (always `None` when homes are
    /// held by their pages' homes).
    pub fn home_word(&self, net: &Net, p: PageId) -> Option<NodeId> {
        match self {
            Directory::Replicated(r) => {
                let h = net.rx(r.dir).load_u32(u64::from(p.0) * r.stride);
                (h != 0).then(|| NodeId::from_usize(h as usize - 1))
            }
            Directory::HomeHeld(_) => None,
        }
    }

    /// At `p`'s manager: returns `p`'s home, making it `claimant` if it has none.
    pub fn assign_home(&self, net: &Net, p: PageId, claimant: NodeId) -> NodeId {
        match self {
            Directory::Replicated(r) => {
                let _g = r.assign.lock().expect("poisoned");
                let at = u64::from(p.0) * r.stride;
                // The replica is fresher once the assignment has come back (a migration
                // may have moved the home since); before that, our own record answers.
                let h = net.rx(r.dir).load_u32(at);
                let h = if h != 0 { h } else { r.assigned[p.index()].load(Ordering::Relaxed) };
                if h != 0 {
                    return NodeId::from_usize(h as usize - 1);
                }
                r.assigned[p.index()].store(home_word(claimant), Ordering::Relaxed);
                net.tx(r.dir).write_u32(at, home_word(claimant));
                claimant
            }
            Directory::HomeHeld(h) => {
                let mut homes = h.homes.lock().expect("poisoned");
                *homes[p.index()].get_or_insert(claimant)
            }
        }
    }

    /// Records a home read from a homes file (every node does the same).
    pub fn preset_home(&self, net: &Net, p: PageId, home: NodeId) {
        match self {
            Directory::Replicated(r) => net
                .rx(r.dir)
                .atomic_u32(u64::from(p.0) * r.stride)
                .store(home_word(home), Ordering::Release),
            Directory::HomeHeld(h) => {
                h.homes.lock().expect("poisoned")[p.index()] = Some(home);
            }
        }
    }

    /// The home that gave `p` away publishes its successor (replicated directory only;
    /// under the home-held one the old home redirects instead).
    pub fn publish_home(&self, net: &Net, p: PageId, home: NodeId) {
        if let Directory::Replicated(r) = self {
            net.tx(r.dir)
                .write_u32(u64::from(p.0) * r.stride, home_word(home));
        }
    }

    /// Node `me` now shares `p`. Under the home-held directory only the home records
    /// sharers (a fetch joins there), so a non-home join changes nothing.
    pub fn join(&self, net: &Net, me: NodeId, p: PageId, st: &mut PageState) {
        match self {
            Directory::Replicated(r) => r.update_own(net, p, me, |w| w | SHARED),
            Directory::HomeHeld(_) => {
                if st.at_home(me) {
                    st.sharers.insert(me);
                }
            }
        }
    }

    /// Replicated directory: node `me` dropped its copy of `p`. (Home-held: the engine
    /// sends a drop message to the home.)
    pub fn leave(&self, net: &Net, me: NodeId, p: PageId) {
        if let Directory::Replicated(r) = self {
            r.update_own(net, p, me, |_| 0);
        }
    }

    /// The home `me` starts (or stops) writing `p`: sets its `WRITING` bit where home
    /// migration reads it.
    pub fn set_home_writing(&self, net: &Net, me: NodeId, p: PageId, writing: bool) {
        if let Directory::Replicated(r) = self {
            if !r.track_writing {
                return;
            }
            r.update_own(net, p, me, |w| if writing { w | WRITING } else { w & !WRITING });
        }
    }

    /// Replicated directory: whether `home`'s word says it is writing `p`. (Home-held: the
    /// engine reads its cached entry.)
    pub fn home_writing(&self, net: &Net, p: PageId, home: NodeId) -> bool {
        match self {
            Directory::Replicated(r) => net.rx(r.dir).load_u32(r.word(p, home)) & WRITING != 0,
            Directory::HomeHeld(_) => false,
        }
    }

    /// The nodes sharing `p`: from the replica, or (home-held, at the home) from the page's
    /// state.
    pub fn sharers(&self, net: &Net, p: PageId, st: &PageState) -> NodeSet {
        match self {
            Directory::Replicated(r) => r.sharers(net, p),
            Directory::HomeHeld(_) => st.sharers,
        }
    }

    /// Replicated directory: whether `me` is the only node whose word says it shares `p`
    /// (a hint: the home decides, under its page lock). Home-held: `false`, as no node
    /// but the home knows the sharing set.
    pub fn sole_sharer(&self, net: &Net, p: PageId, me: NodeId) -> bool {
        match self {
            Directory::Replicated(r) => r.sharers(net, p) == NodeSet::only(me),
            Directory::HomeHeld(_) => false,
        }
    }

    /// Replicated directory: remote-writes notices for `pages` from `me` into `to`'s ring.
    /// Returns false if the ring overflowed (the receiver will then invalidate everything).
    pub fn send_notices(&self, net: &Net, me: NodeId, to: NodeId, pages: &[PageId]) -> bool {
        match self {
            Directory::Replicated(r) => r.send_notices(net, me.index(), to.index(), pages),
            Directory::HomeHeld(_) => unreachable!("home-held notices are messages"),
        }
    }

    /// Home-held: a notice message arrived.
    pub fn receive_notices(&self, pages: impl Iterator<Item = PageId>) {
        if let Directory::HomeHeld(h) = self {
            h.inbox.lock().expect("poisoned").extend(pages);
        }
    }

    /// The pages noticed since the last call, or `true` if everything must go.
    pub fn take_notices(&self, net: &Net, me: NodeId) -> (Vec<PageId>, bool) {
        match self {
            Directory::Replicated(r) => r.take_notices(net, me.index()),
            Directory::HomeHeld(h) => (
                std::mem::take(&mut *h.inbox.lock().expect("poisoned")),
                false,
            ),
        }
    }
}

impl Replicated {
    fn word(&self, p: PageId, node: NodeId) -> u64 {
        u64::from(p.0) * self.stride + 4 * (1 + u64::from(node.0))
    }

    /// The nodes whose word in this replica says they share `p`.
    fn sharers(&self, net: &Net, p: PageId) -> NodeSet {
        let rx = net.rx(self.dir);
        (0..self.nodes)
            .map(NodeId::from_usize)
            .filter(|&n| rx.load_u32(self.word(p, n)) & SHARED != 0)
            .collect()
    }

    /// Changes our own word of `p` by `f` (from our copy of it, see `own`) and broadcasts
    /// it if it changed. Only the node itself writes its word.
    fn update_own(&self, net: &Net, p: PageId, me: NodeId, f: impl FnOnce(u32) -> u32) {
        let own = &self.own[p.index()];
        let old = own.load(Ordering::Relaxed);
        let new = f(old);
        if new != old {
            own.store(new, Ordering::Relaxed);
            net.tx(self.dir).write_u32(self.word(p, me), new);
        }
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn ring(&self, receiver: usize, sender: usize) -> u64 {
        (receiver * self.nodes + sender) as u64 * self.ring_bytes
    }

    fn send_notices(&self, net: &Net, me: usize, to: usize, pages: &[PageId]) -> bool {
        let mut send = self.send.lock().expect("poisoned");
        let (widx, ovf) = &mut send[to];
        let part = part_bytes(self.nodes, 8);
        let consumed = net
            .rx(self.consumed)
            .load_u64(me as u64 * part + to as u64 * 8);
        let ring = self.ring(to, me);
        let tx = net.tx(self.notices);
        let cap = self.capacity();
        if *widx + pages.len() as u64 - consumed > cap {
            *ovf += 1;
            tx.write_u64(ring + 8, *ovf);
            return false;
        }
        for &p in pages {
            tx.write_u32(ring + NOTICE_HEADER + (*widx % cap) * 4, p.0);
            *widx += 1;
        }
        tx.write_u64(ring, *widx);
        true
    }

    fn take_notices(&self, net: &Net, me: usize) -> (Vec<PageId>, bool) {
        let mut recv = self.recv.lock().expect("poisoned");
        let rx = net.rx(self.notices);
        let part = part_bytes(self.nodes, 8);
        let cap = self.capacity();
        let mut pages = Vec::new();
        let mut all = false;
        for (s, (consumed, ovf_seen)) in recv.iter_mut().enumerate() {
            let ring = self.ring(me, s);
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
                pages.push(PageId(rx.load_u32(ring + NOTICE_HEADER + (i % cap) * 4)));
            }
            *consumed = w;
            net.tx(self.consumed)
                .write_u64(s as u64 * part + me as u64 * 8, w);
        }
        (pages, all)
    }
}
