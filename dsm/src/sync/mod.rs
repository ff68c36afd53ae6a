//! Locks, barriers and flags in the two synchronization strategies of the paper's Table 1,
//! one file each, dispatched by a plain enum (crossbeam-channel's `flavors/`):
//!
//! 1. [`network`]: Memory Channel locks, barriers and flags (CSM-DMS, section 2.3.1,
//!    "Synchronization"): arrays of words every node receives, written by broadcast.
//! 2. [`messages`]: a manager node per object grants locks, counts barrier arrivals and
//!    records flags over explicit messages (CSM-None, section 2.3.4).
//!
//! What both share lives here: the node-local half of a barrier (the last processor of a
//! node to arrive acts for the node), the record of which processor holds each lock, and
//! the release before / acquire after every operation.
//!
//! # The engine's interface
//!
//! A strategy sees the engine only through [`SyncHost`]: the network, this node's place in
//! the cluster, its counters, a wait seam that serves messages, and release and acquire.
//! The strategy files never name the engine (they do not import `crate::engine`), so they
//! can be read, and tested, on their own.
//!
//! # Memory ordering (both strategies)
//!
//! * `lock_release` completes a release (every write of this node is at its home and
//!   noticed) before the lock can be granted; `lock_acquire` performs an acquire (pages
//!   named by received notices are invalidated) after the grant. So a processor that
//!   acquires a lock sees every write made before the previous holder released it.
//! * A barrier is a release by every node followed by an acquire by every node: after it,
//!   every processor sees every write made before any processor arrived.
//! * `flag_set` releases, then sets; `flag_wait` returns after the flag is set and an
//!   acquire: the waiter sees every write made before the set.
//! * Within a node, the processors that wait at a barrier see the acquire of the last
//!   arriver: it publishes the new round (Release) after its acquire, and they return
//!   after observing it (Acquire).

pub(crate) mod messages;
pub(crate) mod network;

use crate::config::SyncStrategy;
use crate::ids::NodeId;
use crate::net::{Inbound, Net, NetError};
use crate::stats::{Clock, NodeCounters};
use crate::wait::{Seam, WaitFor};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What a synchronization strategy needs from the engine of its node.
pub(crate) trait SyncHost {
    fn net(&self) -> &Net;
    /// This node.
    fn node(&self) -> NodeId;
    fn nodes(&self) -> usize;
    /// Processors per node.
    fn procs(&self) -> usize;
    fn counters(&self) -> &NodeCounters;
    /// The calling thread's reply mailbox.
    fn slot(&self) -> u16;
    /// This node's wait seam, serving the node's messages while it waits.
    fn seam(&self) -> Seam<'_>;
    /// Completes a release: every write of this node is at its home and noticed.
    fn release(&self);
    /// Performs an acquire: pages named by received write notices are invalidated.
    fn acquire(&self);
}

/// Sends a request and waits for its reply through the host's seam; a failure (the
/// cluster aborted) unwinds with its message.
fn request<H: SyncHost + ?Sized>(host: &H, to: NodeId, kind: u16, payload: &[u8]) {
    let mut out = Vec::new();
    host.net()
        .request_via(&host.seam(), to, kind, host.slot(), payload, &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits through the host's seam until `ready()` holds, a condition on the words other
/// nodes write at network addresses `watch` (`Seam::until_written`); unwinds if the
/// cluster aborts.
fn wait_written<H: SyncHost + ?Sized>(
    host: &H,
    what: WaitFor,
    watch: (u64, u64),
    ready: impl FnMut() -> bool,
) {
    host.seam()
        .until_written(what, watch, ready)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The strategy in use, with its state.
enum Flavor {
    Network(network::Network),
    Messages(messages::Managed),
}

/// Node-local state of one barrier: arrivals this round and completed rounds.
#[derive(Default)]
struct LocalBarrier {
    arrived: AtomicUsize,
    round: AtomicU64,
    /// Waiters parked on the doorbell, so that completing the barrier rings only for them.
    parked: AtomicU32,
}

pub(crate) struct SyncState {
    flavor: Flavor,
    pub nbarriers: usize,
    local_barriers: Box<[LocalBarrier]>,
    /// Global processor id + 1 of the holder of each lock on this node, 0 if none.
    holders: Box<[AtomicU32]>,
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
        let flavor = match strategy {
            SyncStrategy::Network => {
                Flavor::Network(network::Network::new(net, nlocks, nbarriers, nflags)?)
            }
            SyncStrategy::Messages => {
                Flavor::Messages(messages::Managed::new(nlocks, nbarriers, nflags))
            }
        };
        Ok(SyncState {
            flavor,
            nbarriers,
            local_barriers: (0..nbarriers).map(|_| LocalBarrier::default()).collect(),
            holders: (0..nlocks).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    pub fn lock_acquire<H: SyncHost + ?Sized>(&self, host: &H, lock: usize, proc: usize) {
        let _entry = Clock::enter();
        Clock::wait(|| match &self.flavor {
            Flavor::Network(n) => n.lock_acquire(host, lock),
            Flavor::Messages(m) => m.lock_acquire(host, lock),
        });
        let prev = self.holders[lock].swap(proc as u32 + 1, Ordering::AcqRel);
        assert_eq!(
            prev,
            0,
            "lock {lock} granted to processor {proc} while processor {} held it",
            prev.wrapping_sub(1)
        );
        NodeCounters::bump(&host.counters().lock_acquires);
        host.acquire();
    }

    pub fn lock_release<H: SyncHost + ?Sized>(
        &self,
        host: &H,
        lock: usize,
        proc: usize,
    ) -> Result<(), SyncError> {
        let _entry = Clock::enter();
        if self.holders[lock].load(Ordering::Acquire) != proc as u32 + 1 {
            return Err(SyncError::NotHolder { lock, proc });
        }
        host.release();
        self.holders[lock].store(0, Ordering::Release);
        match &self.flavor {
            Flavor::Network(n) => n.lock_release(host, lock),
            Flavor::Messages(m) => m.lock_release(host, lock),
        }
        Ok(())
    }

    /// Waits at barrier `b` with the other processors of the cluster: the processors of
    /// this node gather here, and the last of them to arrive acts for the node.
    pub fn barrier<H: SyncHost + ?Sized>(&self, host: &H, b: usize) {
        self.barrier_then(host, b, true);
    }

    /// The end of a run, a protocol step of its own: a barrier whose release puts every
    /// write at its home (except a page a node still holds in exclusive mode away from
    /// its home, whose master copy stays stale: nothing reads the homes after the run) and
    /// whose completion means every node has done so, but with no acquire after it.
    /// Nothing is read after it, and an acquire could send messages (drops under the
    /// home-held directory) to nodes whose service has already stopped. After it, no node
    /// sends anything.
    pub fn final_barrier<H: SyncHost + ?Sized>(&self, host: &H, b: usize) {
        self.barrier_then(host, b, false);
    }

    fn barrier_then<H: SyncHost + ?Sized>(&self, host: &H, b: usize, acquire: bool) {
        let _entry = Clock::enter();
        // Modeled time: this processor's arrival on the node's barrier counter.
        crate::sched::charge_cost("host.local_sync_ns", |h, _| h.local_sync_ns as f64);
        let local = &self.local_barriers[b];
        // Read the round before arriving: it cannot advance until this processor arrives.
        let round = local.round.load(Ordering::Acquire);
        if local.arrived.fetch_add(1, Ordering::AcqRel) + 1 < host.procs() {
            Clock::wait(|| {
                host.seam()
                    .until_flagged(WaitFor::LocalBarrier { id: b }, &local.parked, || {
                        local.round.load(Ordering::Acquire) != round
                    })
                    .unwrap_or_else(|e| panic!("{e}"))
            });
            return;
        }
        // Nobody arrives for the next round before `round` advances, so this reset is safe.
        local.arrived.store(0, Ordering::Relaxed);
        let epoch = round + 1;
        host.release();
        Clock::wait(|| match &self.flavor {
            Flavor::Network(n) => n.barrier(host, b, epoch),
            Flavor::Messages(m) => m.barrier(host, b, epoch),
        });
        if acquire {
            host.acquire();
        }
        NodeCounters::bump(&host.counters().barriers);
        local.round.store(epoch, Ordering::Release);
        host.seam().wake_flagged(&local.parked);
    }

    pub fn flag_set<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        let _entry = Clock::enter();
        host.release();
        NodeCounters::bump(&host.counters().flag_sets);
        match &self.flavor {
            Flavor::Network(n) => n.flag_set(host, f),
            Flavor::Messages(m) => m.flag_set(host, f),
        }
    }

    pub fn flag_wait<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        let _entry = Clock::enter();
        Clock::wait(|| match &self.flavor {
            Flavor::Network(n) => n.flag_wait(host, f),
            Flavor::Messages(m) => m.flag_wait(host, f),
        });
        NodeCounters::bump(&host.counters().flag_waits);
        host.acquire();
    }

    /// Handles a synchronization message: the manager's side of the message strategy. It
    /// runs where messages are served and never waits.
    pub fn handle<H: SyncHost + ?Sized>(&self, host: &H, m: &Inbound<'_>) {
        match &self.flavor {
            Flavor::Messages(managed) => managed.handle(host, m),
            Flavor::Network(_) => panic!(
                "{}: synchronization message of kind {} from {} under network synchronization",
                host.node(),
                m.kind,
                m.from
            ),
        }
    }
}
