//! Locks, barriers and flags in the two synchronization strategies of the paper's Table 1.
//!
//! * Network (CSM-DMS, section 2.3.1, "Synchronization"): a lock is an array with one
//!   entry per node in a region every node receives with loopback, plus a node-local
//!   test-and-set lock. A processor takes the local lock, sets its node's entry by
//!   broadcast, and (the write having looped back) reads the whole array: if no other
//!   entry is set it holds the lock; otherwise it clears its entry, waits for the others
//!   to clear, backs off and tries again. Total order makes this safe: of two bidders, the
//!   later one's read follows the earlier one's write everywhere. A barrier is an arrival
//!   array plus a sense word: the last processor of each node to arrive writes the node's
//!   arrival; node 0's last arriver waits for all and writes the sense. A flag is a
//!   write-once word set by broadcast.
//! * Messages (CSM-None, section 2.3.4): each object has a manager node (its number
//!   modulo the node count) whose service thread grants locks in request order, counts
//!   barrier arrivals and records flags; waiting processors wait for its reply.
//!
//! # Memory ordering (both strategies)
//!
//! * `Lock::release` completes a release (every write of this node is at its home and
//!   noticed) before the lock can be granted; `Lock::acquire` performs an acquire (pages
//!   named by received notices are invalidated) after the grant. So a processor that
//!   acquires a lock sees every write made before the previous holder released it.
//! * A barrier is a release by every node followed by an acquire by every node: after it,
//!   every processor sees every write made before any processor arrived.
//! * `Flag::set` releases, then sets; `Flag::wait` returns after the flag is set and an
//!   acquire: the waiter sees every write made before the set.

use crate::config::SyncStrategy;
use crate::engine::{kind, my_slot, Node};
use crate::net::{Backing, Inbound, Net, NetError, Region};
use crate::stats::{Clock, NodeCounters};
use crate::sys;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Node-local state of one barrier: arrivals this round and completed rounds.
#[derive(Default)]
struct LocalBarrier {
    state: Mutex<(usize, u64)>,
    done: Condvar,
}

/// A node-local test-and-set lock (0 free, 1 held, 2 held with waiters).
#[derive(Default)]
struct LocalLock {
    word: AtomicU32,
}

impl LocalLock {
    /// Takes the lock; panics with the abort message if the cluster fails meanwhile (its
    /// holder may be a processor that died holding it).
    fn lock(&self, aborted: impl Fn() -> bool) {
        for _ in 0..100 {
            if self
                .word
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            std::hint::spin_loop();
        }
        while self.word.swap(2, Ordering::Acquire) != 0 {
            if aborted() {
                panic!("{}", crate::ABORT_MESSAGE);
            }
            sys::futex_wait(&self.word, 2, Some(Duration::from_millis(50)));
        }
    }

    fn unlock(&self) {
        if self.word.swap(0, Ordering::Release) == 2 {
            sys::futex_wake(&self.word, 1);
        }
    }
}

type Waiter = (usize, u16, u32);

#[derive(Default)]
struct Managed {
    locks: Vec<(bool, VecDeque<Waiter>)>,
    barriers: Vec<Vec<Waiter>>,
    flags: Vec<(bool, Vec<Waiter>)>,
}

pub(crate) struct SyncState {
    strategy: SyncStrategy,
    pub nbarriers: usize,
    locks: Option<(Region, u64)>,
    barriers: Option<(Region, u64)>,
    flags: Option<Region>,
    local_locks: Box<[LocalLock]>,
    local_barriers: Box<[LocalBarrier]>,
    /// Global processor id + 1 of the holder of each lock on this node, 0 if none.
    holders: Box<[AtomicU32]>,
    managed: Mutex<Managed>,
}

/// Errors of misused synchronization objects.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    #[error("lock {lock} released by processor {proc}, which does not hold it; release only a lock you acquired")]
    NotHolder { lock: usize, proc: usize },
}

impl SyncState {
    /// Allocates the synchronization regions (same order on every node). `nbarriers`
    /// includes the engine's own final barrier.
    pub fn new(
        strategy: SyncStrategy,
        net: &Net,
        nlocks: usize,
        nbarriers: usize,
        nflags: usize,
    ) -> Result<SyncState, NetError> {
        let nodes = net.nodes() as u64;
        let (mut locks, mut barriers, mut flags) = (None, None, None);
        if strategy == SyncStrategy::Network {
            let lstride = (4 * nodes).div_ceil(8) * 8;
            let l = net.alloc_region(
                (nlocks as u64 * lstride).max(8),
                Backing::Pool,
                "Memory Channel locks",
            )?;
            net.attach_rx(&l, 0, l.len, true);
            locks = Some((l, lstride));
            let bstride = 8 * (nodes + 1);
            let b = net.alloc_region(
                nbarriers as u64 * bstride,
                Backing::Pool,
                "Memory Channel barriers",
            )?;
            net.attach_rx(&b, 0, b.len, true);
            barriers = Some((b, bstride));
            let f = net.alloc_region(
                (nflags as u64 * 8).max(8),
                Backing::Pool,
                "Memory Channel flags",
            )?;
            net.attach_rx(&f, 0, f.len, true);
            flags = Some(f);
        }
        Ok(SyncState {
            strategy,
            nbarriers,
            locks,
            barriers,
            flags,
            local_locks: (0..nlocks).map(|_| LocalLock::default()).collect(),
            local_barriers: (0..nbarriers).map(|_| LocalBarrier::default()).collect(),
            holders: (0..nlocks).map(|_| AtomicU32::new(0)).collect(),
            managed: Mutex::new(Managed {
                locks: (0..nlocks).map(|_| (false, VecDeque::new())).collect(),
                barriers: (0..nbarriers).map(|_| Vec::new()).collect(),
                flags: (0..nflags).map(|_| (false, Vec::new())).collect(),
            }),
        })
    }

    fn request(node: &Node, to: usize, k: u16, payload: &[u8]) {
        let mut out = Vec::new();
        node.request(to, k, payload, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn lock_acquire(&self, node: &Node, lock: usize, proc: usize) {
        let _entry = Clock::enter();
        Clock::wait(|| match self.strategy {
            SyncStrategy::Network => {
                self.local_locks[lock].lock(|| node.net.fabric().aborted());
                self.mc_lock(node, lock);
            }
            SyncStrategy::Messages => {
                Self::request(
                    node,
                    lock % node.nodes,
                    kind::LOCK_ACQ,
                    &(lock as u32).to_le_bytes(),
                );
            }
        });
        let prev = self.holders[lock].swap(proc as u32 + 1, Ordering::AcqRel);
        assert_eq!(
            prev,
            0,
            "lock {lock} granted to processor {proc} while processor {} held it",
            prev.wrapping_sub(1)
        );
        NodeCounters::bump(&node.counters.lock_acquires);
        node.acquire();
    }

    /// The Memory Channel lock algorithm (module doc).
    fn mc_lock(&self, node: &Node, lock: usize) {
        let (region, stride) = self.locks.expect("network locks need their region");
        let base = lock as u64 * stride;
        let me = base + 4 * node.id as u64;
        let others_clear = || {
            (0..node.nodes)
                .all(|n| n == node.id || node.net.rx(region).load_u32(base + 4 * n as u64) == 0)
        };
        let mut backoff = 1u32 + node.id as u32;
        loop {
            node.net.tx(region).write_u32(me, 1);
            // Loopback: our bid has landed everywhere once the write returns.
            if others_clear() {
                return;
            }
            node.net.tx(region).write_u32(me, 0);
            node.wait_until(others_clear)
                .unwrap_or_else(|e| panic!("{e}"));
            for _ in 0..backoff * 64 {
                std::hint::spin_loop();
            }
            backoff = (backoff * 2).min(1024);
        }
    }

    pub fn lock_release(&self, node: &Node, lock: usize, proc: usize) -> Result<(), SyncError> {
        let _entry = Clock::enter();
        if self.holders[lock].load(Ordering::Acquire) != proc as u32 + 1 {
            return Err(SyncError::NotHolder { lock, proc });
        }
        node.release();
        self.holders[lock].store(0, Ordering::Release);
        match self.strategy {
            SyncStrategy::Network => {
                let (region, stride) = self.locks.expect("network locks need their region");
                node.net
                    .tx(region)
                    .write_u32(lock as u64 * stride + 4 * node.id as u64, 0);
                node.net.ring_bells(node.net.all_nodes());
                self.local_locks[lock].unlock();
            }
            SyncStrategy::Messages => {
                node.net
                    .send(
                        lock % node.nodes,
                        kind::LOCK_REL,
                        my_slot(node),
                        0,
                        &(lock as u32).to_le_bytes(),
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        Ok(())
    }

    /// Waits at barrier `b` with the other processors of the cluster.
    pub fn barrier(&self, node: &Node, b: usize) {
        let _entry = Clock::enter();
        let local = &self.local_barriers[b];
        let mut st = local.state.lock().expect("poisoned");
        st.0 += 1;
        if st.0 < node.procs {
            let round = st.1;
            Clock::wait(|| {
                while st.1 == round {
                    if node.net.fabric().aborted() {
                        drop(st);
                        panic!("{}", crate::ABORT_MESSAGE);
                    }
                    st = local
                        .done
                        .wait_timeout(st, Duration::from_millis(50))
                        .expect("poisoned")
                        .0;
                }
            });
            return;
        }
        st.0 = 0;
        let epoch = st.1 + 1;
        drop(st);
        // The last processor of this node to arrive acts for the node.
        node.release();
        Clock::wait(|| self.global_barrier(node, b, epoch));
        node.acquire();
        NodeCounters::bump(&node.counters.barriers);
        let mut st = local.state.lock().expect("poisoned");
        st.1 = epoch;
        local.done.notify_all();
    }

    fn global_barrier(&self, node: &Node, b: usize, epoch: u64) {
        match self.strategy {
            SyncStrategy::Network => {
                let (region, stride) = self.barriers.expect("network barriers need their region");
                let base = b as u64 * stride;
                let rx = node.net.rx(region);
                let tx = node.net.tx(region);
                tx.write_u64(base + 8 * node.id as u64, epoch);
                let sense = base + 8 * node.nodes as u64;
                if node.id == 0 {
                    node.net.ring_bells(1);
                    node.wait_until(|| {
                        (0..node.nodes).all(|n| rx.load_u64(base + 8 * n as u64) >= epoch)
                    })
                    .unwrap_or_else(|e| panic!("{e}"));
                    tx.write_u64(sense, epoch);
                    node.net.ring_bells(node.net.all_nodes());
                } else {
                    node.net.ring_bells(1);
                    node.wait_until(|| rx.load_u64(sense) >= epoch)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            }
            SyncStrategy::Messages => {
                let mut p = (b as u32).to_le_bytes().to_vec();
                p.extend_from_slice(&epoch.to_le_bytes());
                Self::request(node, b % node.nodes, kind::BARRIER, &p);
            }
        }
    }

    pub fn flag_set(&self, node: &Node, f: usize) {
        let _entry = Clock::enter();
        node.release();
        NodeCounters::bump(&node.counters.flag_sets);
        match self.strategy {
            SyncStrategy::Network => {
                let region = self.flags.expect("network flags need their region");
                node.net.tx(region).write_u64(f as u64 * 8, 1);
                node.net.ring_bells(node.net.all_nodes());
            }
            SyncStrategy::Messages => Self::request(
                node,
                f % node.nodes,
                kind::FLAG_SET,
                &(f as u32).to_le_bytes(),
            ),
        }
    }

    pub fn flag_wait(&self, node: &Node, f: usize) {
        let _entry = Clock::enter();
        Clock::wait(|| match self.strategy {
            SyncStrategy::Network => {
                let region = self.flags.expect("network flags need their region");
                let rx = node.net.rx(region);
                node.wait_until(|| rx.load_u64(f as u64 * 8) != 0)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            SyncStrategy::Messages => Self::request(
                node,
                f % node.nodes,
                kind::FLAG_WAIT,
                &(f as u32).to_le_bytes(),
            ),
        });
        NodeCounters::bump(&node.counters.flag_waits);
        node.acquire();
    }

    /// The manager's side of the message strategy; runs on the service thread and never
    /// waits.
    pub fn handle(&self, node: &Node, m: &Inbound<'_>) {
        let id = u32::from_le_bytes(m.payload[..4].try_into().expect("object id")) as usize;
        let me: Waiter = (m.from, m.slot, m.token);
        let grant = |w: Waiter| {
            node.net
                .reply(w.0, w.1, w.2, &[])
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut g = self.managed.lock().expect("poisoned");
        match m.kind {
            kind::LOCK_ACQ => {
                let (held, queue) = &mut g.locks[id];
                if *held {
                    queue.push_back(me);
                } else {
                    *held = true;
                    grant(me);
                }
            }
            kind::LOCK_REL => {
                let (held, queue) = &mut g.locks[id];
                assert!(*held, "lock {id} released at its manager while free");
                match queue.pop_front() {
                    Some(next) => grant(next),
                    None => *held = false,
                }
            }
            kind::BARRIER => {
                let waiting = &mut g.barriers[id];
                waiting.push(me);
                if waiting.len() == node.nodes {
                    for w in waiting.drain(..) {
                        grant(w);
                    }
                }
            }
            kind::FLAG_SET => {
                let (set, waiting) = &mut g.flags[id];
                *set = true;
                for w in waiting.drain(..) {
                    grant(w);
                }
                grant(me);
            }
            kind::FLAG_WAIT => {
                let (set, waiting) = &mut g.flags[id];
                if *set {
                    grant(me);
                } else {
                    waiting.push(me);
                }
            }
            k => panic!("not a synchronization message: {k}"),
        }
    }
}
