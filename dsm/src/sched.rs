//! The modeled-time scheduler: a direct-execution simulation of the cluster (`DESIGN.md`,
//! "Time: two clocks"; the model is written down in `ARCHITECTURE.md`, "Modeled time").
//!
//! Under `ClockMode::Modeled` every simulated processor, and every
//! node's message service, is an *activity* with an integer virtual clock in nanoseconds.
//! Exactly one activity runs at a time: the runnable one with the smallest `(clock, id)`.
//! It runs until its next runtime entry ([`yield_now`], called by `stats::Clock::enter`)
//! or its next wait (every wait goes through the [`Seam`](crate::wait::Seam), which calls
//! [`block`]); then the baton passes to the next. Processors have the smallest ids, so at
//! equal clocks a processor runs before a service.
//!
//! # Where virtual time comes from
//!
//! - **Computation** between runtime entries: the thread's CPU time times the app's CPU
//!   scale factor ([`user_burst`]), plus what a program declares (`Proc::compute`). A
//!   burst that ends in a protection fault leaves out this host's cost of delivering it
//!   (`sys::fault_delivery_ns`, measured once per process): the platform's fault cost is
//!   charged for the fault instead.
//! - **Host operations** inside the runtime: the platform's costs ([`charge`], called at
//!   the fault, protection change, twin, diff, copy and handler points of the engine).
//! - **The network**: every remote write, message, reply and acknowledgement made by an
//!   activity is *deferred*: its bytes are kept, its arrival time is computed, and the
//!   write is performed only when the simulation reaches that time, in `(time, seq)`
//!   order. So a waiter sees exactly what has arrived by its clock. The arrival times are
//!   the network's business (`crate::net::timing`: links and the hub queue in virtual
//!   time); the scheduler lends it the calling activity's clock and its queue of
//!   deliveries ([`on_timeline`], [`Timeline`]) and knows nothing else of the network.
//! - **Synchronization** merges clocks: a waiter woken by an event at time `t` resumes at
//!   `max(its clock, t)`; a lock or barrier is therefore granted no earlier than the
//!   release or the last arrival plus the network's transfer.
//! - **Message handling** runs where Cashmere's polling puts it: a ring delivery wakes
//!   one *server* of the receiving node: a processor of that node that is waiting (since
//!   no later than the arrival), which handles it in its Message or Wait time, else the
//!   node's service activity, whose handler time is then stolen from a processor of the
//!   node ([`steal`]: the one with the smallest clock, as polling would find it) and
//!   counted once, as that processor's Message time (`stats::Clock` takes it inside the
//!   runtime, where the processor was parked, so every processor's breakdown adds up to
//!   its elapsed time).
//!
//! # One host CPU
//!
//! Since one activity runs at a time, every activity's thread is bound to the CPU the
//! cluster was started on ([`Activity::start`]). A hand-over is then a switch on one
//! core rather than a wake-up across cores: runs are several times faster in wall time, and
//! a burst's CPU time does not depend on which core's caches it lands on.
//!
//! # Deadlock, abort, end
//!
//! When nothing is runnable and nothing is in flight but a processor has not finished,
//! the run is stopped with a report of which activity waits for what. A cluster abort
//! (another node failed: the cluster's control block, `crate::control`) wakes every
//! sleeper, whose wait then fails as in wall mode. When
//! every processor has finished, the services are released to the wall-clock policy.

use crate::control::Control;
use crate::ids::{NodeId, PageId};
use crate::platform::HostCosts;
use crate::profile::Profile;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The latest virtual time a run may reach: 2^53 ns, about 104 days. Every clock, link and
/// arrival time is checked against it (and never wraps or saturates silently): a run that
/// would pass it is stopped with an error naming the figure that took it there (a CPU scale
/// factor, a platform cost, declared computation). Below it every time is exact as an
/// `f64` of nanoseconds, and sums of a breakdown's parts over every processor of the
/// largest cluster (32 x 64) still fit a `u64`.
pub const MAX_VIRTUAL_NS: u64 = 1 << 53;

/// The longest wake-up delay a test may ask for ([`WakeJitter`]): one second of virtual
/// time.
pub(crate) const MAX_WAKE_JITTER_NS: u64 = 1_000_000_000;

/// Wake-up delays of the modeled clock (test knob `TestKnobs::wake_jitter`): each
/// wake-up of a blocked activity is delayed by a draw from a seeded generator, 0 for most
/// and up to `max_ns` for one in `one_in`, so that most events keep their order and a few
/// are late enough for a protocol's windows (a round trip or more) to open.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeJitter {
    pub seed: u64,
    pub max_ns: u64,
    pub one_in: u32,
}

/// Femtoseconds per nanosecond: counted work is charged in femtoseconds, so that a cost
/// per unit below a nanosecond adds up exactly ([`charge_work`]).
const FS_PER_NS: u128 = 1_000_000;

/// A cost per unit of counted work in femtoseconds (`ns` has been validated:
/// `crate::Config::validate`).
pub(crate) fn fs_per_unit(ns: f64) -> u64 {
    (ns * FS_PER_NS as f64).round() as u64
}

/// How often a sleeping activity looks at the cluster's abort flag: a safety net for an
/// abort raised outside the scheduler (a node's panic), never what makes progress.
const ABORT_POLL: Duration = Duration::from_millis(50);

/// Which activities of the receiving node a delivery wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Every blocked activity (a local event).
    All,
    /// A remote write to network addresses `[lo, hi)` of memory that activities wait on:
    /// the blocked activities that poll memory, that is, that wait with no waiter flag
    /// (a flagged waiter is woken by its flag's event alone) and not for messages (a ring
    /// delivery wakes its server: [`Wake::Server`]), unless the words they said they poll
    /// lie elsewhere.
    Memory { lo: u64, hi: u64 },
    /// No one: a remote write to memory no activity waits on (the directory, write
    /// notices, master copies; `Region::unawaited`). Its readers look when they run.
    Nobody,
    /// The activities blocked with this waiter flag (its address; [`wake_flagged`]).
    Flag(usize),
    /// The activity whose mailbox slot was written (a reply or an acknowledgement): the
    /// processor `slot` of the node, or the node's service for the slot after them.
    Slot(u16),
    /// One server for a message that landed in a ring (module doc).
    Server,
    /// The one activity (an acknowledge request, `net::timing::Links::ack_time`, wakes its
    /// requester: [`Timeline::wake_me_at`]).
    Act(usize),
}

/// What a thread is waiting for: named in stall reports and in the scheduler's deadlock
/// report (`crate::wait` re-exports it for the code that waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitFor {
    /// The reply to a request of `kind` sent to node `to`.
    Reply { to: NodeId, kind: u16 },
    /// Space in the message ring to node `to`.
    RingSpace { to: NodeId },
    /// A synchronization word (lock entry, barrier arrival or sense, flag) another node writes.
    SyncWord { what: &'static str, id: usize },
    /// A node-local lock (the test-and-set lock in front of a network lock).
    LocalLock { id: usize },
    /// The other processors of this node at a barrier.
    LocalBarrier { id: usize },
    /// Another processor's turn at a node-wide step (`what`: "release" or "acquire").
    Serialize { what: &'static str },
    /// Every node past the start-up barrier.
    Startup,
    /// An incoming message (the service thread's idle wait).
    Messages,
    /// Acknowledgements of a request of `kind` sent to `nodes` nodes at once.
    Acks { kind: u16, nodes: usize },
    /// A page's lock, held by another processor of this node.
    PageLock { page: PageId },
    /// The flush that ends a recall of a page this node is the home of (non-home
    /// exclusive mode), recalled by another processor or node.
    Flush { page: PageId },
    /// Every transfer this node sent to have landed (an acknowledge request).
    Landed,
    /// The end of a run under MPI: every rank's result (at rank 0), or rank 0's verdict.
    #[cfg(feature = "mpi")]
    Results,
}

impl std::fmt::Display for WaitFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            WaitFor::Reply { to, kind } => match KIND_NAMES.get().and_then(|name| name(kind)) {
                Some(name) => write!(f, "the reply to a {name} request to {to}"),
                None => write!(f, "the reply to a kind-{kind} request to {to}"),
            },
            WaitFor::RingSpace { to } => write!(f, "space in the message ring to {to}"),
            WaitFor::Acks { kind, nodes } => {
                write!(
                    f,
                    "acknowledgements of kind-{kind} requests from {nodes} nodes"
                )
            }
            WaitFor::PageLock { page } => write!(f, "the lock of {page}"),
            WaitFor::Flush { page } => write!(f, "the flush that ends the recall of {page}"),
            WaitFor::Landed => write!(f, "this node's transfers to land (an acknowledge request)"),
            WaitFor::SyncWord { what, id } => write!(f, "{what} {id}"),
            WaitFor::LocalLock { id } => write!(f, "the node-local lock of lock {id}"),
            WaitFor::LocalBarrier { id } => {
                write!(f, "this node's other processors at barrier {id}")
            }
            WaitFor::Serialize { what } => write!(f, "another processor's {what} on this node"),
            WaitFor::Startup => write!(f, "every node past the start-up barrier"),
            WaitFor::Messages => write!(f, "incoming messages"),
            #[cfg(feature = "mpi")]
            WaitFor::Results => write!(f, "the end of the run on every MPI rank"),
        }
    }
}

/// Names message kinds in [`WaitFor`]'s text; the protocol's codec registers its names
/// ([`name_message_kinds`]). Until it does, a kind is shown by number.
static KIND_NAMES: std::sync::OnceLock<fn(u16) -> Option<&'static str>> =
    std::sync::OnceLock::new();

/// Registers the names of message kinds for [`WaitFor`]'s text (the first call wins; the
/// protocol makes it when it builds a node).
pub(crate) fn name_message_kinds(names: fn(u16) -> Option<&'static str>) {
    let _ = KIND_NAMES.set(names);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// Registered, waiting for every activity to register.
    Starting,
    Runnable,
    Running,
    /// `flag`: the address of the waiter flag it counts itself in
    /// (`Seam::until_flagged`), 0 if none; [`wake_flagged`] wakes only its waiters.
    /// `watch`: the network addresses of the words it polls, if it said
    /// (`Seam::until_written`); a remote write elsewhere does not wake it.
    Blocked {
        what: WaitFor,
        serves: bool,
        flag: usize,
        watch: Option<(u64, u64)>,
    },
    Done,
}

struct Act {
    node: usize,
    /// The processor's index in its node; `None` for the node's service.
    local: Option<usize>,
    clock: u64,
    run: Run,
    /// Handler time taken from this processor by its node's service, not yet accounted.
    stolen: u64,
}

/// A write the simulation performs when it reaches the write's arrival time.
struct Delivery {
    node: usize,
    wake: Wake,
    action: Box<dyn FnOnce() + Send>,
}

struct State {
    /// The activities; their `clock` and `run` change only through [`State::set`] (and
    /// its two shorthands), which keeps `runnable` in step.
    acts: Vec<Act>,
    /// The runnable activities by (clock, id): the next to run is the first
    /// ([`Sched::pick`]), found without scanning every activity (a scan made `pick` 8.5%
    /// of a 32 x 4 simulation's host time).
    runnable: BTreeSet<(u64, usize)>,
    registered: usize,
    /// (arrival time, sequence, index into `pending`).
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    pending: Vec<Option<Delivery>>,
    free_slots: Vec<usize>,
    seq: u64,
    finished: bool,
    aborted: bool,
    /// Test knob: wake-ups land this much later ([`WakeJitter`]).
    jitter: Option<Jitter>,
}

/// The state of [`WakeJitter`]'s draws (splitmix64: a draw per wake-up,
/// in the scheduler's own order, so a run repeats from its seed).
struct Jitter {
    state: u64,
    max_ns: u64,
    one_in: u64,
}

impl Jitter {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The delay of one wake-up: 0, or for one in `one_in`, up to `max_ns`.
    fn delay(&mut self) -> u64 {
        if self.next() % self.one_in != 0 {
            return 0;
        }
        self.next() % (self.max_ns + 1)
    }
}

/// The scheduler of one in-process cluster.
pub(crate) struct Sched {
    state: Mutex<State>,
    /// One futex word per activity: bumped to let its thread run.
    go: Box<[AtomicU32]>,
    nodes: usize,
    procs: usize,
    pub(crate) host: HostCosts,
    pub(crate) net: Profile,
    cpu_scale: f64,
    /// Counted computation (`crate::work`): femtoseconds per unit of each kind; `None`:
    /// computation is measured ([`user_burst`]).
    work_fs: Option<Box<[u64]>>,
    /// The cluster's control block (its abort flag; a deadlock or overflow is recorded
    /// there as the run's failure), held through whatever owns its memory.
    control: Arc<dyn AsRef<Control> + Send + Sync>,
    /// The host CPU every activity runs on (module doc, "One host CPU").
    cpu: Option<usize>,
    /// This host's CPU time per delivered protection fault (`sys::fault_delivery_ns`).
    fault_delivery_ns: u64,
}

/// What [`block`] came back with.
pub(crate) enum Resumed {
    /// Woken: check the condition again.
    Woken,
    /// Every processor has finished: wait by the wall-clock policy from now on.
    Finished,
}

/// The run was aborted (another node failed, or the simulation deadlocked).
pub(crate) struct Aborted;

thread_local! {
    static CURRENT: RefCell<Option<(Arc<Sched>, usize)>> = const { RefCell::new(None) };
    /// The running activity's clock (the scheduler's copy is synchronized at hand-overs).
    static CLOCK: Cell<u64> = const { Cell::new(0) };
    /// Thread CPU time when the processor last left the runtime.
    static CPU_MARK: Cell<u64> = const { Cell::new(0) };
    /// Counted work's femtoseconds not yet charged (less than one nanosecond).
    static WORK_FS: Cell<u64> = const { Cell::new(0) };
}

impl Sched {
    /// The scheduler of a cluster of `nodes` x `procs`: the platform's host costs, the
    /// network's profile, the charge for computation (counted work's cost per unit, or
    /// measured CPU time times `cpu_scale`) and the wake-up jitter test knob.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        control: Arc<dyn AsRef<Control> + Send + Sync>,
        nodes: usize,
        procs: usize,
        host: HostCosts,
        net: Profile,
        work_fs: Option<Box<[u64]>>,
        cpu_scale: f64,
        jitter: Option<WakeJitter>,
    ) -> Arc<Sched> {
        let total = nodes * (procs + 1);
        let acts = (0..total)
            .map(|id| {
                let (node, local) = if id < nodes * procs {
                    (id / procs, Some(id % procs))
                } else {
                    (id - nodes * procs, None)
                };
                Act {
                    node,
                    local,
                    clock: 0,
                    run: Run::Starting,
                    stolen: 0,
                }
            })
            .collect();
        Arc::new(Sched {
            state: Mutex::new(State {
                acts,
                runnable: BTreeSet::new(),
                registered: 0,
                events: BinaryHeap::new(),
                pending: Vec::new(),
                free_slots: Vec::new(),
                seq: 0,
                finished: false,
                aborted: false,
                jitter: jitter.map(|j| Jitter {
                    state: j.seed,
                    max_ns: j.max_ns,
                    one_in: u64::from(j.one_in),
                }),
            }),
            go: (0..total).map(|_| AtomicU32::new(0)).collect(),
            nodes,
            procs,
            host,
            net,
            cpu_scale,
            work_fs,
            control,
            cpu: crate::sys::current_cpu(),
            fault_delivery_ns: crate::sys::fault_delivery_ns(),
        })
    }

    fn control(&self) -> &Control {
        (*self.control).as_ref()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The activity id of processor `local` of `node`, or of the node's service.
    fn id_of(&self, node: usize, local: Option<usize>) -> usize {
        match local {
            Some(l) => node * self.procs + l,
            None => self.nodes * self.procs + node,
        }
    }

    /// Makes the calling thread the activity of processor `local` of `node` (or the node's
    /// service, `None`), and returns once the simulation lets it run for the first time.
    pub(crate) fn register(self: &Arc<Sched>, node: usize, local: Option<usize>) {
        let id = self.id_of(node, local);
        CURRENT.with(|c| *c.borrow_mut() = Some((Arc::clone(self), id)));
        CLOCK.with(|c| c.set(0));
        let mut st = self.lock();
        assert_eq!(st.acts[id].run, Run::Starting, "activity {id} registered twice");
        st.set_run(id, Run::Runnable);
        st.registered += 1;
        let seen = self.go[id].load(Ordering::SeqCst);
        if st.registered == st.acts.len() {
            // An abort surfaces at the activity's first wait.
            let _ = self.hand_over(st, id, seen);
        } else {
            drop(st);
            let _ = self.sleep(id, seen);
        }
    }

    /// Ends the calling activity (normally or by unwinding): it will not run again.
    pub(crate) fn exit(&self, id: usize) {
        let mut st = self.lock();
        st.set(id, CLOCK.with(|c| c.get()), Run::Done);
        if st.aborted || st.finished {
            return;
        }
        if self.control().aborted() {
            self.abort_all(&mut st);
            return;
        }
        // Pass the baton on without waiting for it back.
        let next = self.pick(&mut st);
        if let Some(n) = next {
            st.set_run(n, Run::Running);
            self.grant(&mut st, n);
            drop(st);
            self.wake(n);
        }
    }

    /// Picks the next activity to run, performing every delivery due before it. `None`
    /// when none is runnable (then the run has finished, or deadlocked, or aborted: the
    /// state says which).
    fn pick(&self, st: &mut State) -> Option<usize> {
        loop {
            let best = st.runnable.first().map(|&(clock, i)| (i, clock));
            debug_assert_eq!(
                best,
                st.acts
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.run == Run::Runnable)
                    .min_by_key(|(i, a)| (a.clock, *i))
                    .map(|(i, a)| (i, a.clock)),
                "the runnable index is out of step with the activities"
            );
            let due = st.events.peek().map(|Reverse((t, _, _))| *t);
            let deliver_first = match (best, due) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some((_, c)), Some(t)) => t <= c,
            };
            match (best, due) {
                (_, Some(_)) if deliver_first => {
                    let Reverse((t, _, slot)) = st.events.pop().expect("peeked");
                    let d = st.pending[slot].take().expect("a pending delivery");
                    st.free_slots.push(slot);
                    (d.action)();
                    self.wake_locked(st, d.node, d.wake, t);
                }
                (Some((i, _)), _) => return Some(i),
                (None, _) => {
                    if st
                        .acts
                        .iter()
                        .all(|a| a.local.is_none() || a.run == Run::Done)
                    {
                        self.finish(st);
                    } else if !st.aborted {
                        self.deadlock(st);
                    }
                    return None;
                }
            }
        }
    }

    /// Every processor has finished: release the services to the wall-clock policy.
    fn finish(&self, st: &mut State) {
        st.finished = true;
        for id in 0..st.acts.len() {
            if st.acts[id].run != Run::Done {
                st.set_run(id, Run::Runnable);
                self.let_run(st, id);
            }
        }
    }

    fn deadlock(&self, st: &mut State) {
        let mut why = String::from(
            "the modeled-time simulation deadlocked: no activity can run and nothing is in flight;",
        );
        for a in st.acts.iter() {
            if let Run::Blocked { what, .. } = a.run {
                let who = match a.local {
                    Some(l) => format!("processor {l} of node {}", a.node),
                    None => format!("the service of node {}", a.node),
                };
                why += &format!(" {who} (at {} ns) waits for {what};", a.clock);
            }
        }
        why += " if the program cannot wait forever like this (a flag nobody sets, a lock never released), this is a bug in the runtime: please report it with the command that ran";
        self.control().fail(0, &why);
        self.abort_all(st);
    }

    fn abort_all(&self, st: &mut State) {
        st.aborted = true;
        for id in 0..st.acts.len() {
            self.let_run(st, id);
        }
    }

    /// Lets activity `id`'s thread run (or return from its sleep).
    fn let_run(&self, locked: &mut State, id: usize) {
        self.grant(locked, id);
        self.wake(id);
    }

    /// Moves activity `id`'s go word (under the state's lock): from now on its sleep ends.
    fn grant(&self, _locked: &mut State, id: usize) {
        self.go[id].fetch_add(1, Ordering::SeqCst);
    }

    /// Wakes activity `id`'s thread if it sleeps on its go word (after [`Sched::grant`]).
    fn wake(&self, id: usize) {
        crate::sys::futex_wake(&self.go[id], 1);
    }

    /// The ids of `node`'s processors, in order.
    fn processors_of(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.procs).map(move |l| self.id_of(node, Some(l)))
    }

    /// The ids of `node`'s activities: its processors, in order, then its service.
    fn activities_of(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.processors_of(node).chain([self.id_of(node, None)])
    }

    /// Wakes activities of `node` blocked for what `wake` says, at virtual time `t`.
    fn wake_locked(&self, st: &mut State, node: usize, wake: Wake, t: u64) {
        let blocked = |i: usize| matches!(st.acts[i].run, Run::Blocked { .. });
        let chosen: Vec<usize> = match wake {
            Wake::Nobody => Vec::new(),
            Wake::Act(i) => blocked(i).then_some(i).into_iter().collect(),
            Wake::Flag(addr) => self
                .activities_of(node)
                .filter(|&i| matches!(st.acts[i].run, Run::Blocked { flag, .. } if flag == addr))
                .collect(),
            Wake::Slot(slot) => {
                let slot = usize::from(slot);
                let i = self.id_of(node, (slot < self.procs).then_some(slot));
                blocked(i).then_some(i).into_iter().collect()
            }
            Wake::Server => {
                // A processor waiting since no later than the arrival, else the service.
                let waiting = self.processors_of(node).find(|&i| {
                    let a = &st.acts[i];
                    matches!(a.run, Run::Blocked { serves: true, .. }) && a.clock <= t
                });
                let server = waiting.unwrap_or_else(|| self.id_of(node, None));
                let blocked = matches!(st.acts[server].run, Run::Blocked { .. });
                blocked.then_some(server).into_iter().collect()
            }
            Wake::All => self
                .activities_of(node)
                .filter(|&i| blocked(i))
                .collect(),
            Wake::Memory { lo, hi } => self
                .activities_of(node)
                .filter(|&i| match st.acts[i].run {
                    Run::Blocked {
                        what, flag, watch, ..
                    } => {
                        flag == 0
                            && what != WaitFor::Messages
                            && watch.is_none_or(|(a, b)| a < hi && lo < b)
                    }
                    _ => false,
                })
                .collect(),
        };
        for i in chosen {
            let delay = st.jitter.as_mut().map_or(0, Jitter::delay);
            let clock = st.acts[i].clock.max(t) + delay;
            st.set(i, clock, Run::Runnable);
        }
    }

    /// Gives the baton from `me` (whose state the caller has set) to the next activity,
    /// and returns when `me` may run again. `seen` is `me`'s go word read under the lock.
    fn hand_over(&self, mut st: MutexGuard<'_, State>, me: usize, seen: u32) -> Result<(), Aborted> {
        if st.aborted {
            return Err(Aborted);
        }
        let next = self.pick(&mut st);
        match next {
            Some(n) if n == me => {
                st.set_run(me, Run::Running);
                CLOCK.with(|c| c.set(st.acts[me].clock));
                Ok(())
            }
            Some(n) => {
                st.set_run(n, Run::Running);
                self.grant(&mut st, n);
                // Woken after the state is unlocked: a thread woken under the lock would
                // find it held, and sleep on it once more before it could run.
                drop(st);
                self.wake(n);
                self.sleep(me, seen)
            }
            None => {
                let aborted = st.aborted;
                drop(st);
                if aborted {
                    Err(Aborted)
                } else {
                    // Finished: `finish` let every thread go.
                    self.resume_clock(me);
                    Ok(())
                }
            }
        }
    }

    /// Sleeps until `me`'s go word moves from `seen`, then takes up its clock.
    fn sleep(&self, me: usize, seen: u32) -> Result<(), Aborted> {
        loop {
            if self.go[me].load(Ordering::SeqCst) != seen {
                break;
            }
            crate::sys::futex_wait(&self.go[me], seen, Some(ABORT_POLL));
            if self.go[me].load(Ordering::SeqCst) == seen && self.control().aborted() {
                let mut st = self.lock();
                if !st.aborted {
                    self.abort_all(&mut st);
                }
                return Err(Aborted);
            }
        }
        let st = self.lock();
        if st.aborted {
            return Err(Aborted);
        }
        CLOCK.with(|c| c.set(st.acts[me].clock));
        Ok(())
    }

    fn resume_clock(&self, me: usize) {
        let st = self.lock();
        CLOCK.with(|c| c.set(st.acts[me].clock));
    }

    /// Virtual time cannot hold what activity `id` was to be charged: the run stops with
    /// an error that says which figure did it (`what`) and what to do. The first such
    /// error is the run's; the caller goes on with its clock at [`MAX_VIRTUAL_NS`] until
    /// the abort surfaces at its next wait.
    fn overflow(&self, st: &mut State, id: usize, what: &str) {
        if st.aborted {
            return;
        }
        let a = &st.acts[id];
        let who = match a.local {
            Some(l) => format!("processor {l} of node {}", a.node),
            None => format!("the service of node {}", a.node),
        };
        let why = format!(
            "virtual time overflow: {who} would pass the most modeled time a run can represent \
             ({MAX_VIRTUAL_NS} ns, about 104 days) by {what}; the run was stopped; lower that \
             figure (a platform file's cost, --cpu-scale, or the computation a program declares)"
        );
        self.control().fail(a.node, &why);
        self.abort_all(st);
    }

    /// Checks a virtual time computed from `what`'s figures: the time itself if it is at
    /// most [`MAX_VIRTUAL_NS`], else the run stops ([`Sched::overflow`]) and the time is
    /// [`MAX_VIRTUAL_NS`].
    fn checked(
        &self,
        st: &mut State,
        id: usize,
        t: Option<u64>,
        what: impl FnOnce() -> String,
    ) -> u64 {
        match t.filter(|&t| t <= MAX_VIRTUAL_NS) {
            Some(t) => t,
            None => {
                self.overflow(st, id, &what());
                MAX_VIRTUAL_NS
            }
        }
    }
}

/// `ns` as a whole number of nanoseconds if it is one a run can represent.
pub(crate) fn whole_ns(ns: f64) -> Option<u64> {
    (ns.is_finite() && ns >= 0.0 && ns <= MAX_VIRTUAL_NS as f64).then(|| ns.round() as u64)
}

/// The scheduler and activity of the calling thread, while the simulation runs.
fn current() -> Option<(Arc<Sched>, usize)> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Runs `f` with the calling thread's scheduler and activity, if it is a live activity.
fn with_current<T>(f: impl FnOnce(&Sched, usize) -> T) -> Option<T> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(s, id)| f(s, *id)))
}

/// True if the calling thread is an activity of a modeled-time simulation that is still
/// running (not finished, not aborted).
pub(crate) fn active() -> bool {
    with_current(|s, _| {
        let st = s.lock();
        !st.finished && !st.aborted
    })
    .unwrap_or(false)
}

/// The calling activity's virtual time, if it is one.
pub(crate) fn now() -> Option<u64> {
    with_current(|_, _| CLOCK.with(|c| c.get()))
}

/// Advances the calling activity's clock by `ns` (nothing for a thread that is not one).
/// `what` names the figure for the error if the sum cannot be represented
/// ([`MAX_VIRTUAL_NS`]).
pub(crate) fn charge(ns: u64, what: impl FnOnce() -> String) {
    advance(Some(ns), what);
}

/// Advances the calling activity's clock by `ns` (`None`: a figure that cannot be
/// represented), checked against [`MAX_VIRTUAL_NS`].
fn advance(ns: Option<u64>, what: impl FnOnce() -> String) {
    with_current(|s, id| {
        let now = CLOCK.with(|c| c.get());
        let t = ns.and_then(|ns| now.checked_add(ns));
        let t = match t.filter(|&t| t <= MAX_VIRTUAL_NS) {
            Some(t) => t,
            None => {
                let mut st = s.lock();
                let ns = ns.map_or("more than 2^64".to_string(), |ns| ns.to_string());
                s.checked(&mut st, id, None, || {
                    format!("adding {ns} ns at {now} ns for {}", what())
                })
            }
        };
        CLOCK.with(|c| c.set(t));
    });
}

/// Charges the cost `f` computes from the platform's host costs and the network profile;
/// `what` names the platform's figure (`host.fault_ns`) for the error if the cost cannot
/// be represented.
pub(crate) fn charge_cost(what: &'static str, f: impl FnOnce(&HostCosts, &Profile) -> f64) {
    if let Some(ns) = with_current(|s, _| f(&s.host, &s.net)) {
        advance(whole_ns(ns), || {
            format!("a cost of {ns:e} ns from the platform's {what}")
        });
    }
}

/// Starts a processor's counted work with nothing carried (`stats::Clock::start`).
pub(crate) fn reset_work_carry() {
    WORK_FS.with(|c| c.set(0));
}

/// Charges `units` of counted work of `kind` to the calling activity (`crate::work`), if
/// the run counts computation; the femtoseconds below a nanosecond carry to the next call.
pub(crate) fn charge_work(kind: usize, units: u64) {
    let Some(ns) = with_current(|s, _| {
        let fs = s.work_fs.as_ref()?;
        let Some(&per) = fs.get(kind) else {
            panic!(
                "work of kind {kind} counted, but this run gives costs for {} kinds only \
                 (Compute::Counted's ns_per_unit)",
                fs.len()
            );
        };
        let total = u128::from(WORK_FS.with(|c| c.get())) + u128::from(units) * u128::from(per);
        let fs_per_ns = FS_PER_NS;
        WORK_FS.with(|c| c.set((total % fs_per_ns) as u64));
        Some(u64::try_from(total / fs_per_ns).ok())
    })
    .flatten() else {
        return;
    };
    advance(ns, || format!("{units} units of counted work of kind {kind}"));
}

/// Adds the CPU time the calling processor spent since it last left the runtime, scaled,
/// to its clock (User time). Under counted computation the CPU time is not charged.
pub(crate) fn user_burst() {
    with_current(|s, _| {
        if s.work_fs.is_some() {
            crate::sys::take_fault_delivered();
            return;
        }
        let cpu = crate::sys::thread_cpu_ns();
        let mut spent = cpu.saturating_sub(CPU_MARK.with(|m| m.get()));
        if crate::sys::take_fault_delivered() {
            // The host's fault delivery is not the program's computation: the platform's
            // fault cost is charged for it instead (module doc).
            spent = spent.saturating_sub(s.fault_delivery_ns);
        }
        CPU_MARK.with(|m| m.set(cpu));
        let scaled = spent as f64 * s.cpu_scale;
        advance(whole_ns(scaled), || {
            format!(
                "a computation of {spent} ns of this machine's CPU time times the CPU scale \
                 factor {} ({scaled:e} ns)",
                s.cpu_scale
            )
        });
    });
}

/// The handler time stolen from the calling processor ([`steal`]) since it last took it.
/// A processor is stolen from only while it is parked in the scheduler, so inside the
/// runtime (a runtime entry's yield, or a wait): `stats::Clock` takes it there and counts
/// it once, as Message time.
pub(crate) fn take_stolen() -> u64 {
    with_current(|s, id| std::mem::take(&mut s.lock().acts[id].stolen)).unwrap_or(0)
}

/// Marks the point where the calling processor leaves the runtime: its computation is
/// measured from here.
pub(crate) fn left_runtime() {
    if CURRENT.with(|c| c.borrow().is_some()) {
        CPU_MARK.with(|m| m.set(crate::sys::thread_cpu_ns()));
    }
}

/// Lets an activity with a smaller clock run first (a runtime entry).
pub(crate) fn yield_now() {
    let Some((s, me)) = current() else { return };
    let mut st = s.lock();
    if st.finished || st.aborted {
        return;
    }
    st.set(me, CLOCK.with(|c| c.get()), Run::Runnable);
    let seen = s.go[me].load(Ordering::SeqCst);
    // An abort surfaces at the next wait, where it is handled.
    let _ = s.hand_over(st, me, seen);
}

/// Blocks the calling activity until an event may have made its condition true.
/// `serves`: its seam handles the node's messages (it can be a message's server).
pub(crate) fn block(
    what: WaitFor,
    serves: bool,
    flag: usize,
    watch: Option<(u64, u64)>,
) -> Result<Resumed, Aborted> {
    let Some((s, me)) = current() else {
        return Ok(Resumed::Finished);
    };
    let mut st = s.lock();
    if st.aborted {
        return Err(Aborted);
    }
    if st.finished {
        return Ok(Resumed::Finished);
    }
    let blocked = Run::Blocked {
        what,
        serves,
        flag,
        watch,
    };
    st.set(me, CLOCK.with(|c| c.get()), blocked);
    let seen = s.go[me].load(Ordering::SeqCst);
    s.hand_over(st, me, seen)?;
    let st = s.lock();
    Ok(if st.finished {
        Resumed::Finished
    } else {
        Resumed::Woken
    })
}

/// Wakes `node`'s blocked activities now (a local event: an unlock, a barrier, a
/// consumer's flow-control update). Returns false if the caller is not a live activity
/// (then the caller wakes by the wall-clock policy).
pub(crate) fn wake_now(node: usize) -> bool {
    wake_local(node, Wake::All)
}

/// Wakes `node`'s activities blocked with the waiter flag at address `flag` now (a local
/// event that only they wait for: a page unlocked, a local barrier opened). Returns false
/// if the caller is not a live activity.
pub(crate) fn wake_flagged(node: usize, flag: usize) -> bool {
    wake_local(node, Wake::Flag(flag))
}

fn wake_local(node: usize, wake: Wake) -> bool {
    with_current(|s, _| {
        let mut st = s.lock();
        if st.finished || st.aborted {
            return false;
        }
        let t = CLOCK.with(|c| c.get());
        s.wake_locked(&mut st, node, wake, t);
        true
    })
    .unwrap_or(false)
}

/// Takes `ns` of handler time from a processor of `node` (the service handled messages
/// while the processors computed): it is added to that processor's clock and counted as
/// its Message time. Cashmere's processors all poll, so the handling goes where polling
/// would have found the message first: to the processor with the smallest clock among
/// those not waiting, else among those waiting, ties to the lowest id.
pub(crate) fn steal(node: usize, ns: u64) {
    if ns == 0 {
        return;
    }
    with_current(|s, _| {
        let mut st = s.lock();
        let earliest = |waiting: bool| {
            s.processors_of(node)
                .filter(|&i| match st.acts[i].run {
                    Run::Done => false,
                    Run::Blocked { .. } => waiting,
                    _ => !waiting,
                })
                .min_by_key(|&i| (st.acts[i].clock, i))
        };
        let target = earliest(false).or_else(|| earliest(true));
        if let Some(i) = target {
            let clock = st.acts[i].clock;
            let later = s.checked(&mut st, i, clock.checked_add(ns), || {
                format!("{ns} ns of message handling its node's service took from it at {clock} ns")
            });
            st.set_clock(i, later);
            st.acts[i].stolen = st.acts[i].stolen.saturating_add(ns);
        }
    });
}

/// The calling activity's view of the simulation, lent by [`on_timeline`] under the
/// scheduler's lock: its clock, and deliveries it schedules. The network's timing model
/// (`crate::net::timing`) computes its transfers on it; the scheduler knows no network.
pub(crate) struct Timeline<'a> {
    s: &'a Sched,
    st: &'a mut State,
    me: usize,
}

impl Timeline<'_> {
    /// The calling activity's virtual time.
    pub(crate) fn now(&self) -> u64 {
        CLOCK.with(|c| c.get())
    }

    /// Moves the calling activity's clock to `t` (programmed I/O keeps a sender busy).
    pub(crate) fn set_now(&mut self, t: u64) {
        CLOCK.with(|c| c.set(t));
    }

    /// The node of the calling activity.
    pub(crate) fn node(&self) -> usize {
        self.st.acts[self.me].node
    }

    /// The number of nodes of the simulated cluster.
    pub(crate) fn nodes(&self) -> usize {
        self.s.nodes
    }

    /// The network profile the run is modeled on.
    pub(crate) fn profile(&self) -> &Profile {
        &self.s.net
    }

    /// A time computed from `what`'s figures, checked against [`MAX_VIRTUAL_NS`]: past it
    /// the run stops with an error naming them, and the time is [`MAX_VIRTUAL_NS`].
    pub(crate) fn checked(&mut self, t: Option<u64>, what: impl FnOnce() -> String) -> u64 {
        self.s.checked(self.st, self.me, t, what)
    }

    /// Performs `action` (a write into `node`'s memory) when the simulation reaches time
    /// `at`, after everything scheduled for the same time before it, then wakes `wake`.
    pub(crate) fn deliver_at(
        &mut self,
        at: u64,
        node: usize,
        wake: Wake,
        action: Box<dyn FnOnce() + Send>,
    ) {
        self.st.schedule(at, Delivery { node, wake, action });
    }

    /// Wakes the calling activity at time `at` (it then waits until its clock reaches it).
    pub(crate) fn wake_me_at(&mut self, at: u64) {
        let (node, me) = (self.node(), self.me);
        self.st.schedule(
            at,
            Delivery {
                node,
                wake: Wake::Act(me),
                action: Box::new(|| {}),
            },
        );
    }
}

/// Runs `f` on the calling activity's [`Timeline`], under the scheduler's lock. `None`
/// (and `f` is not called) if the caller is not a live activity of a running simulation:
/// then whatever `f` would have deferred happens at once.
pub(crate) fn on_timeline<R>(f: impl FnOnce(&mut Timeline<'_>) -> R) -> Option<R> {
    let (s, me) = current()?;
    let mut st = s.lock();
    if st.finished || st.aborted {
        return None;
    }
    Some(f(&mut Timeline {
        s: &s,
        st: &mut st,
        me,
    }))
}

impl State {
    /// Sets activity `id`'s clock and run state: the one place either changes, so that
    /// the runnable index holds exactly the runnable activities, under their clocks.
    fn set(&mut self, id: usize, clock: u64, run: Run) {
        let a = &mut self.acts[id];
        if a.run == Run::Runnable {
            self.runnable.remove(&(a.clock, id));
        }
        a.clock = clock;
        a.run = run;
        if run == Run::Runnable {
            self.runnable.insert((clock, id));
        }
    }

    /// Sets activity `id`'s run state, its clock unchanged ([`State::set`]).
    fn set_run(&mut self, id: usize, run: Run) {
        self.set(id, self.acts[id].clock, run);
    }

    /// Sets activity `id`'s clock, its run state unchanged ([`State::set`]).
    fn set_clock(&mut self, id: usize, clock: u64) {
        self.set(id, clock, self.acts[id].run);
    }

    /// Queues `d` to be performed at virtual time `at` (after everything queued for the
    /// same time before it).
    fn schedule(&mut self, at: u64, d: Delivery) {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.pending[i] = Some(d);
                i
            }
            None => {
                self.pending.push(Some(d));
                self.pending.len() - 1
            }
        };
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, slot)));
    }
}

/// Ends the calling thread's activity when dropped (also when it unwinds), so that a
/// processor that panics passes the baton on.
pub(crate) struct Activity {
    _private: (),
}

impl Activity {
    /// Registers the calling thread (see [`Sched::register`]); returns when it may run.
    pub(crate) fn start(s: &Arc<Sched>, node: usize, local: Option<usize>) -> Activity {
        if let Some(cpu) = s.cpu {
            // Binding and the batch policy are for speed and steadier CPU times only: a
            // host that refuses them (a restricted container) runs the same simulation,
            // more slowly.
            let _ = crate::sys::pin_thread(cpu);
            let _ = crate::sys::batch_scheduling();
        }
        s.register(node, local);
        CPU_MARK.with(|m| m.set(crate::sys::thread_cpu_ns()));
        Activity { _private: () }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        if let Some((s, id)) = CURRENT.with(|c| c.borrow_mut().take()) {
            s.exit(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_waits_read_as_before_the_page_was_typed() {
        let p = PageId(5);
        assert_eq!(WaitFor::PageLock { page: p }.to_string(), "the lock of page 5");
        assert_eq!(
            WaitFor::Flush { page: p }.to_string(),
            "the flush that ends the recall of page 5"
        );
    }

    /// The wake-up jitter test knob: a seed's draws repeat, about one in `one_in` is
    /// late, by at most `max_ns`, and another seed draws otherwise.
    #[test]
    fn wake_jitter_draws_repeat_from_their_seed_and_stay_in_bounds() {
        let draws = |seed| {
            let mut j = Jitter { state: seed, max_ns: 2_000_000, one_in: 8 };
            (0..8000).map(|_| j.delay()).collect::<Vec<u64>>()
        };
        let a = draws(7);
        assert_eq!(a, draws(7));
        assert_ne!(a, draws(8));
        let late = a.iter().filter(|&&d| d > 0).count();
        assert!((800..1200).contains(&late), "{late} of 8000 wake-ups late, not about 1,000");
        assert!(a.iter().all(|&d| d <= 2_000_000));
        assert!(a.iter().any(|&d| d > 1_000_000), "no delay in the upper half");
    }
}
