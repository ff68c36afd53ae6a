//! The cluster's control block: the words through which the nodes of one cluster and its
//! launcher watch each other, apart from the network that carries the protocol's data.
//!
//! It lives in shared memory (at the start of the fabric's mapping, so node processes
//! share it), and holds:
//!
//! - the abort flag: non-zero once any node failed; every wait of the runtime gives up;
//! - the first failure: which node failed first and why ([`Control::fail`]);
//! - each node's doorbell, on which its parked threads sleep (`crate::wait`);
//! - each node's status (state, pid, result length) for the launcher;
//! - each node's heartbeat, bumped while its service polls and watched by the launcher;
//! - until when the host counts as crowded: a waiter of any node found that the cores were
//!   wanted by more threads than they hold (`crate::wait`, "Policy");
//! - how many of the cluster's runtime threads run or wait to run, and how many cores
//!   this host gives them (`crate::wait`, "Policy").
//!
//! It knows nothing of the network or the launcher: both use it.

use crate::ids::MAX_NODES;
use crate::sys;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The message every runtime wait gives when another node of the cluster failed.
pub const ABORT_MESSAGE: &str =
    "cluster aborted: another node failed (see the launcher's error for which and why)";

/// Bytes of the first failure's cause kept in the control block; a longer cause is cut at
/// a character boundary.
pub const ABORT_CAUSE_BYTES: usize = 2048;

/// The first failure recorded in the control block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbortOrigin {
    /// No node has recorded a failure.
    None,
    /// `node` claimed the origin and has not yet published its cause (or died doing so).
    Claimed { node: usize },
    /// `node` failed first, for `cause`.
    Recorded { node: usize, cause: String },
}

#[repr(C, align(64))]
struct Padded<T>(T);

/// A node's doorbell: parked threads sleep on `word`; a waker that sees `parked` (or a
/// waiter's own flag) non-zero bumps the word and wakes them. It stands for the adapter's
/// receive interrupt, which is why a node may look at another node's doorbell. The
/// protocol between sleepers and wakers is in `crate::wait`.
///
/// The service thread, idle, sleeps on a word of its own (`service_word`), so that a
/// message, which only it must handle, wakes it alone: on `word` it would wake the
/// processors parked at a barrier or a lock too, each to take a core, look, and sleep again
/// (`crate::wait`, "Sleepers and wakers").
#[repr(C)]
pub(crate) struct Doorbell {
    pub(crate) word: AtomicU32,
    /// Threads of the node parked on either word.
    pub(crate) parked: AtomicU32,
    /// Threads of the node polling its messages right now: spinning in a wait that serves
    /// them. A message for a node with a poller needs no ring (`crate::wait`, "Pollers").
    pub(crate) pollers: AtomicU32,
    pub(crate) service_word: AtomicU32,
    /// The idle service, parked on `service_word` (counted in `parked` too).
    pub(crate) service_parked: AtomicU32,
    /// The service thread's kernel thread id while it runs where a waker may move it
    /// (`crate::wait`, "Placement"); 0 otherwise.
    pub(crate) service_tid: AtomicU32,
    /// One more than the core the service is bound to now, 0 if it is not bound.
    pub(crate) service_core: AtomicU32,
    /// 1 while a thread changes the service's binding, so that `service_core` and the
    /// kernel's binding change together (`crate::wait`, "Placement").
    pub(crate) service_binding: AtomicU32,
    /// The CPUs the service may use when it is not bound, as a bit set.
    pub(crate) service_cpus: AtomicU64,
}

impl Doorbell {
    /// Wakes every thread parked on this bell, the idle service included, unconditionally.
    pub(crate) fn ring(&self) {
        self.ring_word();
        // The caller's fence (or SeqCst store, `Control::abort`) came before its look at
        // `parked`, and the service counts itself in both counts before its own fence: if
        // it counted in `parked`, this sees it here.
        if self.service_parked.load(Ordering::SeqCst) != 0 {
            self.ring_service();
        }
    }

    /// Wakes the threads parked on `word`, not the idle service: for an event only a
    /// processor waits for (`crate::wait::wake_flagged`).
    pub(crate) fn ring_word(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.word, i32::MAX as u32);
    }

    /// Wakes the idle service parked on this bell, unconditionally.
    pub(crate) fn ring_service(&self) {
        self.service_word.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.service_word, i32::MAX as u32);
    }
}

/// What the launcher knows about a node.
#[repr(C)]
pub(crate) struct NodeStatus {
    pub state: AtomicU32,
    pub pid: AtomicU32,
    pub result_len: AtomicU64,
}

/// Node states in [`NodeStatus::state`].
pub(crate) mod node_state {
    pub const RUNNING: u32 = 1;
    /// Past the start-up barrier: receive regions attached.
    pub const READY: u32 = 2;
    pub const DONE: u32 = 3;
    pub const FAILED: u32 = 4;
}

/// The control block of one cluster, as laid out in shared memory. Every field is an
/// atomic, so any bit pattern (zero at creation) is a valid block: no failure, no node
/// started, no heartbeat.
#[repr(C)]
pub(crate) struct Control {
    /// The number of nodes whose bells [`Control::abort`] rings.
    nodes: AtomicU32,
    /// Non-zero once any node failed: every wait in the runtime gives up.
    abort: AtomicU32,
    bell: [Padded<Doorbell>; MAX_NODES],
    status: [Padded<NodeStatus>; MAX_NODES],
    /// The first failure of the run (see [`Control::fail`]): 0 while no node has failed,
    /// else the failed node's number plus one. Set once, by compare-exchange.
    abort_origin: AtomicU32,
    /// 0 until the origin's cause is in `abort_cause`, then its length plus one.
    abort_cause_len: AtomicU32,
    abort_cause: [AtomicU8; ABORT_CAUSE_BYTES],
    /// Each node's liveness counter, bumped by every poll of the node's messages (its
    /// service thread polls at least every 50 ms while it runs) and watched by the launcher.
    heartbeat: [Padded<AtomicU64>; MAX_NODES],
    /// Until when (`sys::monotonic_ns`, the same clock in every process of the host) the
    /// host counts as crowded; 0 if it never was. Only the wait policy reads it, and no
    /// wake-up depends on it: a stale value costs time, never progress.
    crowded_until_ns: Padded<AtomicU64>,
    /// The cluster's runtime threads (processors and services) that hold a core or want
    /// one: started ones less parked ones (`crate::wait::Running`). Signed: a thread
    /// that parks without having counted itself (a test's client) takes it below the
    /// truth, which only makes waits spin as they would without the count.
    running: Padded<AtomicI32>,
    /// The cores this host gives the process that created the block (its CPU affinity);
    /// 0 if unknown, which turns the running count's rule off.
    cores: AtomicU32,
    /// The cores the cluster's processors are bound to (`crate::wait`, "Placement"), one
    /// bit each (cores 0 to 63), and of those the ones whose processor is parked now: the
    /// idle service steps off a core whose bound processor may want it (`wait::step_off`).
    bound_cores: AtomicU64,
    parked_cores: AtomicU64,
}

impl Control {
    /// A control block of this process alone, for tests of what waits on one.
    #[cfg(test)]
    pub(crate) fn new_local(nodes: usize) -> Box<Control> {
        // SAFETY: every field of Control is an atomic or an array of them, for which the
        // all-zero bit pattern is a valid value (see the type's doc).
        let c = unsafe { Box::<Control>::new_zeroed().assume_init() };
        c.init(nodes);
        c
    }

    /// Sets the number of nodes of a new cluster's block (before any node uses it).
    pub(crate) fn init(&self, nodes: usize) {
        assert!(nodes <= MAX_NODES);
        self.nodes.store(nodes as u32, Ordering::Relaxed);
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        self.cores.store(cores.min(u32::MAX as usize) as u32, Ordering::Relaxed);
    }

    /// A processor of the cluster is bound to `core` from now on.
    pub(crate) fn bind_core(&self, core: usize) {
        if core < 64 {
            self.bound_cores.fetch_or(1 << core, Ordering::Relaxed);
        }
    }

    /// The processor bound to `core` parks (`parked`) or runs again.
    pub(crate) fn core_parked(&self, core: usize, parked: bool) {
        if core < 64 {
            if parked {
                self.parked_cores.fetch_or(1 << core, Ordering::Relaxed);
            } else {
                self.parked_cores.fetch_and(!(1 << core), Ordering::Relaxed);
            }
        }
    }

    /// The cores with a bound processor, and of those the ones whose processor is
    /// parked, as bit sets. A hint for placement only: stale bits cost time, not progress.
    pub(crate) fn core_use(&self) -> (u64, u64) {
        (
            self.bound_cores.load(Ordering::Relaxed),
            self.parked_cores.load(Ordering::Relaxed),
        )
    }

    /// Counts a runtime thread in (`by` 1) or out (`by` -1) of the running ones.
    pub(crate) fn count_running(&self, by: i32) {
        self.running.0.fetch_add(by, Ordering::Relaxed);
    }

    /// The host's cores (as [`Control::init`] found them) are shared with `ranks`
    /// processes alike, whose threads this block does not count (the ranks of an MPI job
    /// on this host): the block counts its own threads against its share of the cores, and
    /// turns the running count's rule off (0) if the share is less than one core.
    #[cfg(feature = "mpi")]
    pub(crate) fn share_cores(&self, ranks: usize) {
        let share = self.cores.load(Ordering::Relaxed) / ranks.max(1) as u32;
        self.cores.store(share, Ordering::Relaxed);
    }

    /// Whether the running count means anything: the block knows the host's cores and
    /// counts every runtime thread that uses them.
    pub(crate) fn cores_known(&self) -> bool {
        self.cores.load(Ordering::Relaxed) != 0
    }

    /// Whether the cluster's running threads outnumber the host's cores: a thread of the
    /// cluster (or the one a waiter waits for) then waits for a core, and a spinner holds
    /// one it needs. Ignores other programs: those show as long yields ([`Control::crowd`]).
    pub(crate) fn oversubscribed(&self) -> bool {
        let cores = self.cores.load(Ordering::Relaxed);
        cores != 0 && self.running.0.load(Ordering::Relaxed) > cores as i32
    }

    /// Whether a core stands free for one more running thread of the cluster (false if
    /// the block knows no cores).
    pub(crate) fn core_free(&self) -> bool {
        let cores = self.cores.load(Ordering::Relaxed);
        cores != 0 && self.running.0.load(Ordering::Relaxed) < cores as i32
    }

    /// Whether the running threads use every core the block knows of (or it knows none):
    /// a thread that only looks for work (the MPI transport's progress thread) should
    /// sleep between looks rather than spin on a core a running thread needs.
    #[cfg(feature = "mpi")]
    pub(crate) fn cores_taken(&self) -> bool {
        let cores = self.cores.load(Ordering::Relaxed);
        cores == 0 || self.running.0.load(Ordering::Relaxed) >= cores as i32
    }

    pub(crate) fn bell(&self, node: usize) -> &Doorbell {
        &self.bell[node].0
    }

    pub(crate) fn status(&self, node: usize) -> &NodeStatus {
        &self.status[node].0
    }

    /// Marks the cluster as failed: every runtime wait returns an error from now on.
    pub(crate) fn abort(&self) {
        self.abort.store(1, Ordering::SeqCst);
        for node in 0..self.nodes.load(Ordering::Relaxed) as usize {
            self.bell(node).ring();
        }
    }

    /// Records that a waiter found the host crowded at `now_ns`: it stays so for `for_ns`.
    pub(crate) fn crowd(&self, now_ns: u64, for_ns: u64) {
        self.crowded_until_ns
            .0
            .fetch_max(now_ns + for_ns, Ordering::Relaxed);
    }

    /// Whether a waiter found the host crowded recently enough that it still counts so at
    /// `now_ns` (see [`Control::crowd`]).
    pub(crate) fn crowded(&self, now_ns: u64) -> bool {
        self.crowded_until_ns.0.load(Ordering::Relaxed) > now_ns
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire) != 0
    }

    /// Records that `node` failed for `cause`, if no node has failed before it, and aborts
    /// the cluster. Returns true if this call recorded the origin. Causes that are
    /// consequences of an abort ([`ABORT_MESSAGE`]) should not be recorded: call
    /// [`Control::abort`] for them.
    ///
    /// # Memory ordering
    ///
    /// The origin word is claimed by compare-exchange, so exactly one failure is the
    /// origin. Its cause is stored and published (Release on the length word) before the
    /// abort flag is set (Release), so anyone who observes the abort flag (Acquire) that
    /// this call set, or anything that happened after it, finds the cause published.
    pub(crate) fn fail(&self, node: usize, cause: &str) -> bool {
        let won = self
            .abort_origin
            .compare_exchange(0, node as u32 + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            let mut len = cause.len().min(ABORT_CAUSE_BYTES);
            while !cause.is_char_boundary(len) {
                len -= 1;
            }
            for (slot, &b) in self.abort_cause.iter().zip(&cause.as_bytes()[..len]) {
                slot.store(b, Ordering::Relaxed);
            }
            self.abort_cause_len
                .store(len as u32 + 1, Ordering::Release);
        }
        self.abort();
        won
    }

    /// The first failure recorded with [`Control::fail`].
    pub(crate) fn abort_origin(&self) -> AbortOrigin {
        let node = match self.abort_origin.load(Ordering::Acquire) {
            0 => return AbortOrigin::None,
            n => n as usize - 1,
        };
        match self.abort_cause_len.load(Ordering::Acquire) {
            0 => AbortOrigin::Claimed { node },
            n => {
                let bytes: Vec<u8> = self.abort_cause[..n as usize - 1]
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect();
                AbortOrigin::Recorded {
                    node,
                    cause: String::from_utf8_lossy(&bytes).into_owned(),
                }
            }
        }
    }

    /// `node`'s heartbeat count: the launcher declares a node that runs but whose count
    /// stands still for the stall limit stopped.
    pub(crate) fn heartbeat(&self, node: usize) -> u64 {
        self.heartbeat[node].0.load(Ordering::Relaxed)
    }

    /// Bumps `node`'s heartbeat (its service's polls do; a node process's start-up beat
    /// does until its service thread takes over, see `crate::launch`).
    pub(crate) fn beat(&self, node: usize) {
        self.heartbeat[node].0.fetch_add(1, Ordering::Relaxed);
    }
}
