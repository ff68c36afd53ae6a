//! Memory Channel synchronization (CSM-DMS): the paper's section 2.3.1, "Synchronization".
//!
//! * A lock is an array with one entry per node in a region every node receives with
//!   loopback, plus a node-local test-and-set lock. A processor takes the local lock, sets
//!   its node's entry by broadcast, and (the write having looped back) reads the whole
//!   array: if no other entry is set it holds the lock; otherwise it clears its entry, waits
//!   for the others to clear, backs off and tries again. Total order makes this safe: of two
//!   bidders, the later one's read follows the earlier one's write everywhere.
//! * A barrier is an arrival array plus a sense word: the last processor of each node to
//!   arrive writes the node's arrival; node 0's last arriver waits for all and writes the
//!   sense.
//! * A flag is a write-once word set by broadcast.
//!
//! # Memory ordering
//!
//! Words are written with `Tx::write_u32`/`write_u64` (a Release fence, then the transmit)
//! and read with Acquire loads, so a processor that sees an entry clear, an arrival, the
//! sense or a flag also sees everything its writer transmitted before. Every write that a
//! processor of another node may be waiting for is followed by `Net::ring_bells` on the
//! nodes that may wait, so parked waiters wake (`crate::wait`, "Sleepers and wakers").

use super::{wait_written, SyncHost};
use crate::ids::{NodeId, NodeSet};
use crate::net::{Backing, Net, NetError, Region};
use crate::wait::{SeamLock, WaitFor};

pub(crate) struct Network {
    /// Lock arrays, one entry (u32) per node, `stride` bytes per lock.
    locks: (Region, u64),
    /// Arrival words (u64) per node, then the sense word, `stride` bytes per barrier.
    barriers: (Region, u64),
    /// One u64 per flag.
    flags: Region,
    /// The value of this node's next bid (any nonzero value means "bidding").
    next_bid: std::sync::atomic::AtomicU32,
    /// The node-local test-and-set lock in front of each network lock.
    local_locks: Box<[SeamLock<()>]>,
}

impl Network {
    /// Allocates the lock, barrier and flag regions (same order on every node) and
    /// receives them with loopback.
    pub(crate) fn new(
        net: &Net,
        nlocks: usize,
        nbarriers: usize,
        nflags: usize,
    ) -> Result<Network, NetError> {
        let nodes = net.nodes() as u64;
        let lstride = (4 * nodes).div_ceil(8) * 8;
        let l = net.alloc_region(
            (nlocks as u64 * lstride).max(8),
            Backing::Pool,
            "Memory Channel locks",
        )?;
        net.attach_rx(&l, 0, l.len, true);
        let bstride = 8 * (nodes + 1);
        let b = net.alloc_region(
            nbarriers as u64 * bstride,
            Backing::Pool,
            "Memory Channel barriers",
        )?;
        net.attach_rx(&b, 0, b.len, true);
        let f = net.alloc_region(
            (nflags as u64 * 8).max(8),
            Backing::Pool,
            "Memory Channel flags",
        )?;
        net.attach_rx(&f, 0, f.len, true);
        Ok(Network {
            locks: (l, lstride),
            barriers: (b, bstride),
            flags: f,
            local_locks: (0..nlocks).map(|_| SeamLock::new(())).collect(),
            next_bid: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Takes the node-local lock, then the network lock; the local lock stays held until
    /// [`Network::lock_release`], so one processor per node bids.
    pub(crate) fn lock_acquire<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        self.local_locks[lock]
            .hold(&host.seam(), WaitFor::LocalLock { id: lock })
            .unwrap_or_else(|e| panic!("{e}"));
        // Modeled time: the node's test-and-set step in hardware-coherent memory.
        crate::sched::charge_cost("host.local_sync_ns", |h, _| h.local_sync_ns as f64);
        self.bid(host, lock);
    }

    /// The Memory Channel lock algorithm (module doc).
    fn bid<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        let (region, stride) = self.locks;
        let (net, me_node, nodes) = (host.net(), host.node(), host.nodes());
        let base = lock as u64 * stride;
        let me = base + 4 * me_node.index() as u64;
        let others_clear = || {
            (0..nodes)
                .all(|n| n == me_node.index() || net.rx(region).load_u32(base + 4 * n as u64) == 0)
        };
        let mut backoff = 1u32 + me_node.index() as u32;
        loop {
            // A bid value of our own, so that the loopback we wait for is this bid's and
            // not an earlier one's whose withdrawal is still on its way to us.
            let bid = self.next_bid.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 0x7FFF_FFFF + 1;
            let own = || net.rx(region).load_u32(me) == bid;
            net.tx(region).write_u32(me, bid);
            // Loopback: once our own bid has come back to us, it has landed everywhere
            // (total order), and so has every bid written before it.
            wait_written(
                host,
                WaitFor::SyncWord {
                    what: "the loopback of our bid for network lock",
                    id: lock,
                },
                region.span(me, 4),
                own,
            );
            if others_clear() {
                return;
            }
            net.tx(region).write_u32(me, 0);
            // Another bidder may be waiting for our entry to clear.
            net.ring_bells(net.all_nodes().without(me_node));
            wait_written(
                host,
                WaitFor::SyncWord {
                    what: "the other nodes' entries of network lock",
                    id: lock,
                },
                region.span(base, 4 * nodes as u64),
                others_clear,
            );
            // Back off before bidding again, longer each time, so two bidders that keep
            // colliding fall out of step.
            host.seam().back_off(backoff * 64);
            backoff = (backoff * 2).min(1024);
        }
    }

    pub(crate) fn lock_release<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        let (region, stride) = self.locks;
        let net = host.net();
        net.tx(region)
            .write_u32(lock as u64 * stride + 4 * host.node().index() as u64, 0);
        net.ring_bells(net.all_nodes());
        // This processor took the local lock in lock_acquire (the caller checked it holds
        // the lock) and gives it up here.
        self.local_locks[lock].unhold(&host.seam());
    }

    /// The network half of barrier `b`, round `epoch`, run by this node's last arriver.
    pub(crate) fn barrier<H: SyncHost + ?Sized>(&self, host: &H, b: usize, epoch: u64) {
        let (region, stride) = self.barriers;
        let (net, me, nodes) = (host.net(), host.node(), host.nodes());
        let base = b as u64 * stride;
        let rx = net.rx(region);
        let tx = net.tx(region);
        tx.write_u64(base + 8 * me.index() as u64, epoch);
        let sense = base + 8 * nodes as u64;
        // Node 0 gathers the arrivals (module doc).
        let gatherer = NodeId(0);
        net.ring_bells(NodeSet::only(gatherer));
        let what = |what| WaitFor::SyncWord { what, id: b };
        if me == gatherer {
            let arrivals = region.span(base, 8 * nodes as u64);
            wait_written(host, what("every node's arrival at barrier"), arrivals, || {
                (0..nodes).all(|n| rx.load_u64(base + 8 * n as u64) >= epoch)
            });
            tx.write_u64(sense, epoch);
            net.ring_bells(net.all_nodes());
        } else {
            wait_written(host, what("the sense word of barrier"), region.span(sense, 8), || {
                rx.load_u64(sense) >= epoch
            });
        }
    }

    pub(crate) fn flag_set<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        let net = host.net();
        net.tx(self.flags).write_u64(f as u64 * 8, 1);
        net.ring_bells(net.all_nodes());
    }

    pub(crate) fn flag_wait<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        let rx = host.net().rx(self.flags);
        wait_written(
            host,
            WaitFor::SyncWord {
                what: "network flag",
                id: f,
            },
            self.flags.span(f as u64 * 8, 8),
            || rx.load_u64(f as u64 * 8) != 0,
        );
    }
}
