//! The one place where a thread of the runtime waits.
//!
//! Every blocking point of a node goes through a [`Seam`]: the reply to a request, space in
//! a full message ring, a synchronization word another node writes, a node-local lock or
//! barrier, the serialization of releases and acquires, and the service thread's wait for
//! messages. **No code path blocks a host thread any other way**: no other module calls
//! `futex_wait`, parks, yields or spins, and the `std::sync::Mutex`es that remain guard
//! short critical sections that never wait inside them. This is also the seam the
//! modeled-time scheduler will own (`DESIGN.md`, "Time: two clocks"): every wait says what
//! it waits for ([`WaitFor`]), so a scheduler can switch activities here and a deadlock can
//! be reported as "who waits on what" instead of a hang.
//!
//! # Policy
//!
//! A wait first spins, checking its condition with a spin hint between checks. How long
//! depends on who wants the cores:
//!
//! - **Cores to spare.** The control block counts the cluster's runtime threads that run
//!   or wait to run ([`Running`]: processors and services, less the parked ones) and knows
//!   the host's cores. While the count does not exceed them, nobody of the cluster waits
//!   for a core, so a wait spins on (up to `SPIN_FREE_NS`), as Cashmere's processors spin
//!   at a barrier or for a reply: the answer is seen within a check, and no wake-up is
//!   paid. The idle service thread ([`WaitFor::Messages`]) does the same.
//! - **An MPI rank** cannot count the other ranks' threads, so its block counts its own
//!   threads against its share of the host's cores: the cores divided by the job's ranks
//!   on this host (`MPI_COMM_TYPE_SHARED`), rounded down. With 2 ranks on 2 cores each
//!   rank has one, and a processor waiting for a reply while its service sleeps spins on
//!   it, taking the reply off MPI itself: a 2-node barrier took 3-7 us instead of
//!   36-244 us, an uncontended remote lock 2.3 us instead of 2.4-196 us. A share under
//!   one core (4 ranks on 2 cores) counts as unknown, and then no wait counts the cores
//!   as free: it spins `SPIN_CHECKS` (the idle service `IDLE_SPIN_CHECKS`), yields, and
//!   parks, as below, and no thread counts as a poller. (With the free spin there, 4-rank
//!   random programs under two CPU hogs ran twice as long. One run of three also hung,
//!   most likely from the lost message that `net::mpi`'s `Comm` describes, since fixed.)
//! - **Oversubscribed** (more running threads than cores): a spinner holds a core that
//!   another thread of the cluster needs, perhaps the one it waits for. The idle service
//!   parks at once (the processors need the cores more; a message rings it), and a waiter
//!   spins `SPIN_CHECKS` (a round trip to a polling peer) and then yields between checks
//!   (`YIELD_CHECKS` of them), so that a thread waiting for a core on its run queue (the
//!   home's service with the reply) runs; then it parks on its node's doorbell until
//!   woken, with a `PARK_TIMEOUT` as a safety net only. A yielder that finds the count
//!   back within the cores (every `SERVE_EVERY` checks, the first before its first
//!   yield) spins again, counted as a poller. It used to yield on: a processor at a
//!   barrier, its node's service woken once beside it, then held its core for all 3,600
//!   yields (about 16 ms, no other thread wanting that core) while uncounted as a poller,
//!   so every page fetch from its node rang the service, which ran beside the requester
//!   on its core, two context switches a fetch: 16-20 us instead of 6-8 (`perf sched`,
//!   `bench proto`, 2 x 1).
//! - **Crowded** by other programs, which the count cannot see: a spinner holds a core the
//!   thread it waits for needs, and a yield hands the core to whichever thread the kernel
//!   picks, another program included, for a whole time slice (milliseconds), thousands of
//!   times in one wait. So a wait stops early and parks, and the thread that answers it
//!   rings it:
//!   - a yield that lasts `SWITCHED_OUT_NS` (half a millisecond, longer than the
//!     cluster's own threads hold a core for one message) means another program ran
//!     meanwhile: the host is crowded. (A gap as long between two clock looks of a
//!     spinner is not taken as one: the node's own threads take the core for such
//!     moments too, and a spinner that parked on them made a 2-node barrier 3-6 times
//!     slower in `bench proto`: 5.8-14 us against 1.0-2.7. That check never ran until
//!     this was measured: the spinner's serve, which cleared the last look, came at
//!     every look.) A wait yields only
//!     once its spin is over, which comes soon only where the cluster's threads
//!     outnumber the cores (or the block cannot count them); on a host whose cores the
//!     count leaves free, a spinner beside other programs' hogs spins on, up to
//!     `SPIN_FREE_NS`, unless a yielding waiter of the cluster has marked the host
//!     crowded;
//!   - the waiter that finds it so records it in the control block (for
//!     `CROWDED_FOR_NS`, for every node and process of the cluster: they share the cores)
//!     and parks;
//!   - while the host counts as crowded, every wait, the idle service's too, spins only
//!     `CROWDED_SPIN_CHECKS` (an answer already on its way) before it parks.
//!
//! The count counts spinners too, and that is right: a spinner holds a core. What it must
//! not do is make a spinner on a core nobody else wants park (parking at a 2-node barrier
//! made it 20 times slower): with two processors waiting at a barrier on two cores the
//! count is two, and both spin. A long yield is what shows that another program wanted
//! the core. Beside two CPU hogs on two cores this took a litmus test from 52-77 s to 3 s.
//!
//! # Pollers
//!
//! A thread spinning in a wait that serves its node's messages (a processor with a
//! [`Serve`] hook, or the idle service) counts itself in its node's doorbell as a
//! *poller*. A sender rings the receiver's doorbell for a message only if the node has no
//! poller ([`wake_for_message`]): the poller takes the message within `SPIN_SERVE_EVERY`
//! checks, and a ring would wake the parked service only to have it compete with the
//! processors for a core. A thread counts only while it spins: a yield may give its core
//! away for a time slice, so a yielder is no poller to count on (it still serves between
//! yields). Nothing is lost: a poller that stops polling (it yields, parks, or its wait
//! ends) uncounts itself, issues a SeqCst fence, and then looks at the rings (a processor
//! serves what it finds unless its wait ended holding what it took, and rings its node's
//! service if messages remain and no other poller is counted; the service's park checks
//! for messages after its fence).
//! The sender stores the message, issues a SeqCst fence and reads the poller count: if its
//! fence comes first, the poller's look finds the message; if the poller's does, the
//! sender reads a count without it, and rings if nobody else polls. A stopping poller
//! leaves what remains to another counted one by the same rule, and of two that stop at
//! once at least one reads the other's count gone (each uncounts, fences, then reads), so
//! the last to stop rings. (It used to ring whoever else polled: the two processors of a
//! node waiting at a CSM-None barrier, whose last arriver's request to its own manager
//! the other may serve, then woke the parked service at about every barrier, for nothing,
//! and it took a core from them. SOR 2048 x 2048 x 50 on 1 x 2, processes, 4 interleaved
//! pairs: CSM-None 1.24-1.56 -> 1.80-1.92, Wait 10-24 -> 1-2.5 ms a processor; CSM-DMS,
//! 2 x 1 and `bench proto` within their noise.)
//!
//! A processor's request to a manager on its own node (a lock or barrier it manages)
//! is sent counted as a poller, and served by its sender at once
//! ([`Seam::send_then_serve`]): the ring would wake the idle service, possibly on the core
//! where another node's processor computes, for what the sender, about to wait, does
//! itself. (`perf sched` on a 2 x 1 SOR run: 102 wake-ups of node 0's service by its own
//! processor before, none after. No speed change stood out of this host's noise: a 2-node
//! barrier in `bench proto` took 1.38-1.42 us before and 0.99-1.14 after in one set of 3
//! interleaved runs, 1.41 and 1.43 median in another of 6.)
//!
//! While it spins and after every wake-up it *serves* its node's incoming messages if the
//! seam has a [`Serve`] hook, as Cashmere's processors poll: a waiting processor handles
//! the requests addressed to its node instead of leaving them to a service thread that may
//! be asleep, and two nodes whose rings to each other are full cannot deadlock, because
//! each drains its own while it waits for space in the other's, and each node's service,
//! which a message wakes and which never waits for ring space (handlers only reply),
//! drains its rings whatever its processors do. The cluster's abort flag
//! is checked here, once per park, and nowhere else: a wait gives up with
//! [`Aborted`] within one park of an abort.
//!
//! # Polling while computing
//!
//! Cashmere's processors poll for messages on every loop back-edge (section 2.3, "Message
//! Polling"). Here a node's messages are handled by whichever of its threads waits (above)
//! and, when none does, by its service thread, which a message's ring wakes. Under MPI no
//! ring can cross from another rank: the rank's progress thread looks for arrivals between
//! sleeps, and a request to a rank whose processors compute waited for its next look and
//! then for the service to be scheduled beside them (a page fetch in 2-rank SOR: 220-260
//! us mean; 18-23 us with the poll points below, looking every 2 us). So under a
//! transport whose arrivals ring no doorbell (`crate::net::Transport::rings_on_arrival`),
//! and under the wall clock only, every processor has a *poll point* ([`set_poll_point`])
//! at the work it counts (`crate::work::count`): it reads the clock every few counts
//! (`PollPoint`), and at most once every `POLL_EVERY_NS` it takes what has arrived off
//! the network, counted as the node's poller so that the arrivals ring no bell
//! ([`Seam::look_as_poller`]), and handles it (`Serve::serve_polled`). The look is User
//! time, as Cashmere's polling instructions were part of the program; the handling is
//! Message time, and the count `polled_messages`. While processors look
//! (`pollers_look`) and the rank's threads use its cores, the progress thread sleeps
//! longer between its own looks (`net::mpi`). 2-rank SOR then runs about 1.7 times as
//! fast (ARCHITECTURE.md, "MPI"). Under the simulated network a ring wakes the service at
//! once, and measured there, polling made 2 x 1 SOR slower at the paper's size (median
//! speedup 1.45 -> 1.14): a processor that handles a request on its own core delays its
//! computation, while the woken service runs on the core whose processor waits for the
//! answer. A program that counts no work gets no poll point.
//!
//! # Placement
//!
//! Under the wall clock, when the cluster's processors fit the cores the process may use
//! (`sched_getaffinity`), and unless the configuration says otherwise
//! (`Config::pinning`), each processor is bound to a core of its own ([`placement`]); the
//! service threads are left to the kernel. Unbound, two processors of a 2 x 1 cluster on 2
//! cores were seen sharing one core, taking turns every 30-50 us, while the other core ran
//! the services (`perf sched`). Bound, 2 x 1 SOR at 2048 x 2048 x 50 (processes, 5
//! interleaved runs each) went from a median speedup of 1.35 (runs 0.76-1.57) to 1.49
//! (1.47-1.63) under CSM-None and from 1.24 to 1.53 under CSM-DMS, and beside one CPU hog
//! from 0.17-0.39 to 0.38-0.51; at the paper's size it did not move beyond the noise
//! (1.70 and 1.69, 1.66 and 1.61). `bench proto` (3 interleaved runs) stayed within its
//! noise for most rows, but not all: CSM-None's page fetch 6.75 -> 7.81 us and its remote
//! lock 0.86 -> 0.98, CSM-DMS's contended lock 0.36 -> 0.58; `--pin off` (`DSM_PIN=off`)
//! leaves placement to the kernel. Binding each node's service too, to another node's processor core (where a requester
//! waits for it), did no better for SOR and made `bench proto`'s locks 10-30 times slower:
//! a service woken on a core whose processor is busy waits for it. Under MPI nothing is
//! bound (the ranks may share a host or not); under the modeled clock the scheduler binds
//! its own threads. A node binds only cores that no other node of its process holds
//! ([`CoreClaim`]): of two clusters running at once in one process, the second leaves its
//! processors to the kernel. (Clusters in different processes do not see each other's
//! claims.)
//!
//! A bound processor that rings another node's parked service while no core stands free
//! (the running count, "Policy", is at the cores) first binds that service to its own
//! core (`bring_service_here`): the processor is about to wait for the answer, so its core
//! is the one with room, while the service's own node's processor computes on the other.
//! Left to the kernel, a woken service went to the core it last ran on: in 2 x 1 SOR runs
//! both services ended up beside one node's processor, which then shared its core three
//! ways while the other core stood idle whenever its processor waited (`perf sched`: the
//! services queued 12-18 us behind the computing processor at every message, and the run's
//! speedup over sequential fell to 1.0-1.2), and which run got that placement was chance.
//! Bound so, SOR 2 x 1, processes, interleaved pairs, median (lowest) speedup: 2048 x 2048
//! x 50 (10 pairs) CSM-None 1.52 (1.33) -> 1.53 (1.38), CSM-DMS 1.475 (0.94) -> 1.555
//! (1.36); paper size (8 pairs) CSM-None 1.715 (1.53) -> 1.775 (1.72), CSM-DMS 1.725
//! (1.61) -> 1.715 (1.68): the low runs go, the medians move little. A one-way post (a
//! message no answer follows) binds the service the same way although its sender goes on
//! computing: the service then shares the sender's core instead of its own node's
//! processor's; either way it shares a core with a computing processor. The binding stays
//! until the service, about to spin idle while the running threads (itself among them)
//! do not outnumber the cores, gives it back (`free_service`), or a processor's ring
//! finds a core free (fewer running threads than cores) and gives the service its CPUs
//! back (the CPUs it had, published with its thread id in its doorbell), so that a
//! service whose own node's processor waits runs on the core that processor leaves. The
//! record of the binding (`service_core`) and the kernel's binding change together under
//! the doorbell's `service_binding` word; a thread that finds it taken leaves the binding
//! to the holder (a ring does not wait), and the next ring or idle spin looks again.
//! (Binding
//! whenever a processor rang, free core or not, kept a service on its requester's core
//! after it was no longer needed there: `bench proto`'s remote lock went from 0.4 to 7.6
//! us. Having the requester also yield at once after such a ring, instead of spinning, so
//! that the service gets the core sooner, gained SOR little, 1.535 -> 1.565, and made the
//! contended lock 0.95 -> 12.3 us, since that answer comes from the lock's holder, not
//! the service; it was dropped.)
//!
//! Given its CPUs back, a spinning service stays on the core it runs on (the kernel does
//! not move a running thread to an idle core), which may be a bound processor's: the
//! processor, runnable, then waited for the rest of the service's time slice. So the
//! idle service that has spun `STEP_OFF_AFTER_NS` on a core whose bound processor is not
//! parked (the control block keeps the bound cores and the parked ones) moves to a core
//! of its CPUs that no such processor holds (`step_off`: bound to those, which moves it
//! at once, then to all its CPUs again). `perf sched` on `bench proto` (2 x 1, processes)
//! had shown node 0's idle service spinning 4-10 ms on node 1's processor's core, beside
//! an idle core, while that processor waited with its reply in its mailbox. 12 runs
//! each, interleaved: page fetches of 2-8 ms in 3 of 12 runs before (max over 1,000
//! fetches), none above 150 us after (a second set: 2 of 12 runs with 2.5-2.7 ms, from
//! other events: a woken service queued behind a spinning processor, a kernel thread of
//! this VM taking a core); medians unchanged (CSM-None 5.00 -> 4.91 us,
//! CSM-DMS 5.13 -> 5.19), CSM-None's contended lock 0.94 -> 0.48 us, the rest within
//! noise; SOR 2048 x 2048 x 50 on 2 x 1 (5 pairs) CSM-None 1.52 -> 1.54, CSM-DMS 1.70
//! -> 1.75 (medians). Moving at once, at every free spin, made some runs' fetches 6
//! times slower (a service woken onto the processor's core at each fetch moved each
//! time).
//!
//! # Sleepers and wakers
//!
//! Every node has one doorbell in the cluster's control block (`crate::control`): a futex
//! `word` and a count of `parked` threads, and a second word for the idle service
//! (`service_word`, with its own count `service_parked`). Every parked thread of the node
//! sleeps on `word`, but the service waiting for messages ([`WaitFor::Messages`]) sleeps on
//! `service_word`. Every event that can make a waiter ready rings the doorbell of the
//! waiter's node:
//!
//! | Event                                   | Who rings                   | Whose bell      |
//! |-----------------------------------------|-----------------------------|-----------------|
//! | a reply lands in a mailbox              | the replier                 | the requester's (only if that mailbox's waiter is parked: [`wake_flagged`]) |
//! | a message lands in a ring               | the sender                  | the receiver's service word only (if none of its threads polls, and the service is parked: [`wake_for_message`]) |
//! | a consumer frees ring space             | the consumer                | the producer's  |
//! | a synchronization word is written (a lock, barrier or flag of `sync::network`) | the writer (`Net::ring_bells`) | every receiver's that may wait, its processors only ([`wake_processors`]) |
//! | a [`SeamLock`] is unlocked              | the unlocker                | its own (only if one of its waiters is parked) |
//! | a node-local barrier completes          | the last arriver            | its own (only if one of its waiters is parked) |
//! | a page lock is released                 | the releaser                | its own (its lock's waiters if parked; a recall's flush waiters and the service only as `engine`, "Wake-ups on a page's release", says) |
//! | the service thread is told to stop      | the stopper                 | its own         |
//! | the cluster aborts                      | `Control::abort`            | every node's    |
//!
//! A ring wakes every parked thread of the node, the service included; each re-checks its
//! own condition and parks again if it is not ready. A synchronization word written by
//! another node wakes the processors alone ([`wake_processors`]): the service waits for no
//! such word, and woke only to look and park again, on a core a processor used. Only the
//! variants that synchronize by remote writes (`sync::network`: CSM-DMS, -MS, -S, -MS-Mg, -ADB)
//! write such words; under them every lock release, barrier arrival and flag had rung
//! every node's idle service. Under CSM-DMS, `bench proto`, processes, 4 interleaved
//! runs, median before -> after: a release with a one-word diff (the row times the lock
//! release, whose lock word rang) 10.3 -> 3.2 us, with a whole page 15.3 -> 8.8, a 2-node
//! barrier 2.5 -> 1.4, a 4-node one 54 -> 32; 2 x 1 SOR 2048 x 2048 x 50, 10 pairs, median
//! speedup 1.40 -> 1.645. (CSM-None, which synchronizes by messages and rings no such
//! word, went 1.445 -> 1.52 in the same runs: that is this host's noise.) Diffs, write
//! notices and acknowledgements ring nothing through this path: a diff or a notice is
//! read at the next acquire, and an acknowledgement's waiter is woken by
//! [`wake_flagged`]. A message wakes the service alone:
//! the service handles every message, and the processors parked at a barrier or a lock,
//! woken for it too, each took a core only to look and park again (a page fetch in 2-node
//! `bench proto` woke the home's processor parked at the barrier beside its service: two
//! context switches on the requester's core). (Under the wall clock only: under the
//! modeled clock every wake-up is the scheduler's, which wakes every activity of the node,
//! `crate::sched::wake_now`; a woken activity that is not ready blocks again at the same
//! virtual time, so the extra wake-ups cost no modeled time.) Wake-ups are cheap when nobody is parked: one fence and one load.
//!
//! # Memory ordering: no lost wake-up
//!
//! A sleeper reads the bell `word`, increments `parked` (and the waker's flag, if it waits
//! on one), issues a SeqCst fence, checks its condition, and only then sleeps, on the
//! condition that `word` still holds the value it read. A waker makes the condition true,
//! issues a SeqCst fence, and reads `parked` (or the flag); if it is non-zero it increments
//! `word` and wakes the futex. The two fences are ordered one way or the other in the single
//! total order of SeqCst operations: if the waker's comes first, the sleeper's check sees
//! the condition and does not sleep; if the sleeper's comes first, the waker sees the
//! sleeper counted and increments `word`, so the sleeper's futex wait either returns at once
//! (the word changed since it read it) or is woken. Either way no wake-up is lost, and the
//! timeout is never what makes progress. The service word follows the same protocol with
//! `service_parked`: the service counts itself in both counts before its fence, so a waker
//! for another event that sees it in `parked` also rings the service word
//! (`Doorbell::ring`), and a message's waker reads `service_parked` after its own fence.

use crate::control::Control;
use crate::sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Checks with a spin hint in between on a host whose cores are wanted (oversubscribed or
/// crowded), before the wait yields: long enough to cover a round trip to a polling peer.
const SPIN_CHECKS: u32 = 400;
/// The longest a wait spins while the host has a core for every running thread of the
/// cluster and nobody else wants them: a processor spins at a barrier or for a reply as
/// Cashmere's do, on a core nobody needs. Beyond it the wait parks (and may be reported).
const SPIN_FREE_NS: u64 = 1_000_000_000;
/// Further checks that yield the core in between, before the thread parks.
const YIELD_CHECKS: u32 = 3_600;
/// Checks of the idle service thread before it parks.
const IDLE_SPIN_CHECKS: u32 = 2_000;
/// A waiter that yields or backs off serves its node's messages once every this many
/// checks.
const SERVE_EVERY: u32 = 16;
/// A spinning waiter serves its node's messages once every this many checks: a request to
/// a node whose processor spins at a barrier or for a reply waits for it. Against every
/// 16th check, in 4 interleaved runs of each on 2 ranks (`bench proto --exec mpi`), a lock
/// contended by 2 nodes took 3.9-6.7 us instead of 6.6-13.5; no other figure moved beyond
/// its noise, nor did processes mode's (3 runs each). Every check gained no more in 2
/// runs, and each serve takes the node's queue lock.
const SPIN_SERVE_EVERY: u32 = 4;
/// A spinning waiter reads the clock once every this many checks, to see whether the host
/// is crowded, the cluster aborted or its spin is over (module doc, "Policy").
const LOOK_EVERY: u32 = 16;
/// A yield this long means the kernel gave the waiter's core to another program for a
/// time slice: the host is crowded. Far above a yield that finds nobody to run (under a
/// microsecond) and above one that hands the core to a thread of the cluster for its
/// short work (a service serving a fetch or a release, a processor's fault): those took
/// 50-430 us in `bench proto` (2 x 1, processes), while beside two CPU hogs a yield took
/// 1.8-4 ms, a time slice of this host's kernel. At 50 us, the cluster's own work marked
/// the host crowded for `CROWDED_FOR_NS` in about one `bench proto` run in five, and
/// every wait parked meanwhile: a page fetch then woke the parked home's service and was
/// woken back, two wake-ups of an idle vCPU (17-20 us each here), 40-55 us a fetch.
const SWITCHED_OUT_NS: u64 = 500_000;

/// Whether a yield that took `took_ns` gave the core away for a time slice (module doc,
/// "Policy"): the host is crowded.
fn switched_out(took_ns: u64) -> bool {
    took_ns >= SWITCHED_OUT_NS
}

/// How long the host counts as crowded after a waiter found it so.
const CROWDED_FOR_NS: u64 = 20_000_000;
/// On a crowded host a wait spins this many checks (a few microseconds: an answer already
/// on its way, a lock's loopback) before it parks.
const CROWDED_SPIN_CHECKS: u32 = 64;
/// How long the idle service spins on a core whose bound processor is not parked before
/// it moves off it (`step_off`): a bound processor that wants the core waits at most
/// about this long, instead of the rest of a time slice (4 ms here).
const STEP_OFF_AFTER_NS: u64 = 100_000;
/// The longest a parked thread sleeps before it looks again: a safety net, never the
/// reason a wait ends (see the module doc).
const PARK_TIMEOUT: Duration = Duration::from_millis(20);
/// A wait that lasts this long is reported once on standard error, naming what it waits
/// for: a hang should say what hangs.
const STALL_REPORT: Duration = Duration::from_secs(30);

pub(crate) use crate::sched::WaitFor;

/// The cores node `node`'s processors run on, one each ("Placement"), given the cores the
/// process may use, in order: processor `l` of node `n` on the `n * procs + l`-th. `None`
/// if the cluster's `nodes * procs` processors do not fit `cpus`, or there is only one.
pub(crate) fn placement(nodes: usize, procs: usize, node: usize, cpus: &[usize]) -> Option<Vec<usize>> {
    let total = nodes.checked_mul(procs)?;
    if total < 2 || total > cpus.len() || node >= nodes {
        return None;
    }
    Some((0..procs).map(|l| cpus[node * procs + l]).collect())
}

/// Cores that a node of a cluster running in this process has bound its processors to
/// ("Placement"): a node binds only cores no other node of the process holds, so that
/// clusters running at once (tests in threads mode) do not pile onto the same cores.
static CLAIMED_CORES: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// A node's hold on the cores its processors are bound to, given back when dropped.
pub(crate) struct CoreClaim(Vec<usize>);

impl CoreClaim {
    /// Claims `cores` if no node of this process holds any of them.
    pub(crate) fn take(cores: Vec<usize>) -> Option<CoreClaim> {
        let mut held = CLAIMED_CORES.lock().unwrap_or_else(|e| e.into_inner());
        if cores.iter().any(|c| held.contains(c)) {
            return None;
        }
        held.extend_from_slice(&cores);
        Some(CoreClaim(cores))
    }

    pub(crate) fn cores(&self) -> &[usize] {
        &self.0
    }
}

impl Drop for CoreClaim {
    fn drop(&mut self) {
        let mut held = CLAIMED_CORES.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|c| !self.0.contains(c));
    }
}

thread_local! {
    /// This thread filed a message in its node's inbox since its last check ([`filed_here`]).
    static FILED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A transport whose arrivals a waiter takes off the network itself (MPI: the waiter's
/// readiness check pumps) says so when such a look filed a message for its node: the
/// spinning waiter then serves at its next check instead of within `SPIN_SERVE_EVERY`,
/// since a check there costs a look at MPI (2-node barrier over MPI, `bench proto`, 3
/// interleaved runs: 1.43-1.44 us before, 1.34-1.38 after).
#[cfg(feature = "mpi")]
pub(crate) fn filed_here() {
    FILED_HERE.with(|f| f.set(true));
}

fn take_filed_here() -> bool {
    FILED_HERE.with(|f| f.replace(false))
}

/// A wait gave up: the cluster aborted (another node failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", crate::control::ABORT_MESSAGE)]
pub(crate) struct Aborted;

/// Handles a node's waiting incoming messages; returns how many there were. The engine
/// implements it; a seam with this hook serves while it waits.
pub(crate) trait Serve {
    fn serve(&self) -> usize;
    /// Whether messages wait (`crate::net::Transport::has_messages`: while another thread
    /// takes them, "yes" or "no" by transport, and then that thread rings for what it
    /// leaves).
    fn has_messages(&self) -> bool;
    /// A processor's poll point in its computation ([`poll_point`]): handles the node's
    /// waiting messages, if any. The engine's looks at the network first
    /// (`crate::net::Net::has_messages_now`), counted as the node's poller
    /// ([`Seam::look_as_poller`]), and charges the handling to the processor's breakdown as
    /// Message time.
    fn serve_polled(&self) -> usize {
        if self.has_messages() {
            self.serve()
        } else {
            0
        }
    }
}

/// A processor computing between runtime calls looks for its node's messages at the work
/// it counts ([`crate::work::count`]) at most once every this long (module doc, "Polling
/// while computing"). A look takes arrivals off MPI, which costs far more than a clock
/// read: 2-rank SOR at the paper's size ran at a median speedup of 1.22 looking every 2
/// us, 1.25 every 10, 1.35 every 20 and 1.27 every 50 (6 runs each).
const POLL_EVERY_NS: u64 = 20_000;
/// The most counts between two clock reads of a poll point. A count may follow as little
/// as one insertion into a tree, and a clock read costs about 20 ns; the stride adapts to
/// how much work a program counts at a time (`PollPoint`).
const POLL_STRIDE_MAX: u32 = 64;

/// When a processor of this process last looked for messages at a poll point
/// (`sys::monotonic_ns`): the MPI progress thread sleeps longer between its own looks
/// while processors look (`pollers_look`, MPI builds).
static LAST_POLL_POINT_NS: AtomicU64 = AtomicU64::new(0);

/// True if a processor of this process looked for messages at a poll point within the
/// last `ns` nanoseconds. (Only the MPI transport asks.)
#[cfg(feature = "mpi")]
pub(crate) fn pollers_look(ns: u64) -> bool {
    let last = LAST_POLL_POINT_NS.load(Ordering::Relaxed);
    last != 0 && sys::monotonic_ns().saturating_sub(last) < ns
}

/// The calling processor's poll point, set while it runs under the wall clock. It reads
/// the clock once every `stride` counts: the stride halves when the counts between two
/// reads took longer than `POLL_EVERY_NS` (coarse counts, such as one per body's force
/// walk, read it at every count) and doubles, up to `POLL_STRIDE_MAX`, when they took
/// under a quarter of it (fine counts), so that a look comes within about `POLL_EVERY_NS`
/// of work at a cost of a clock read per few hundred nanoseconds of it.
struct PollPoint {
    hook: std::sync::Arc<dyn Serve + Send + Sync>,
    /// Counts until the next clock read.
    left: std::cell::Cell<u32>,
    stride: std::cell::Cell<u32>,
    /// The last clock read, and the last look.
    read_ns: std::cell::Cell<u64>,
    look_ns: std::cell::Cell<u64>,
}

thread_local! {
    static POLL_POINT: std::cell::RefCell<Option<PollPoint>> =
        const { std::cell::RefCell::new(None) };
}

/// The calling thread's poll point while it lives ([`set_poll_point`]).
pub(crate) struct PollPointGuard(());

impl Drop for PollPointGuard {
    fn drop(&mut self) {
        POLL_POINT.with(|p| *p.borrow_mut() = None);
    }
}

/// Makes the calling thread poll `hook` at the work it counts ([`poll_point`]) until the
/// guard is dropped (also when the thread panics). A processor sets it for its run under
/// the wall clock on a transport whose arrivals ring no doorbell (MPI); under the modeled
/// clock the scheduler already gives a node's handling to the processor that polling would
/// have found (`crate::sched::steal`), so nothing polls there.
pub(crate) fn set_poll_point(hook: std::sync::Arc<dyn Serve + Send + Sync>) -> PollPointGuard {
    POLL_POINT.with(|p| {
        *p.borrow_mut() = Some(PollPoint {
            hook,
            left: std::cell::Cell::new(1),
            stride: std::cell::Cell::new(1),
            read_ns: std::cell::Cell::new(sys::monotonic_ns()),
            look_ns: std::cell::Cell::new(0),
        })
    });
    PollPointGuard(())
}

/// A poll point in a processor's computation (module doc, "Polling while computing"):
/// looks for the node's messages, and handles them, if at least `POLL_EVERY_NS` passed
/// since the last look. Does nothing on a thread without a poll point.
#[inline]
pub(crate) fn poll_point() {
    POLL_POINT.with(|p| {
        let p = p.borrow();
        let Some(p) = p.as_ref() else { return };
        let left = p.left.get() - 1;
        if left > 0 {
            p.left.set(left);
            return;
        }
        let now = sys::monotonic_ns();
        let took = now.saturating_sub(p.read_ns.get());
        p.read_ns.set(now);
        let stride = p.stride.get();
        let stride = if took > POLL_EVERY_NS {
            (stride / 2).max(1)
        } else if took < POLL_EVERY_NS / 4 {
            (stride * 2).min(POLL_STRIDE_MAX)
        } else {
            stride
        };
        p.stride.set(stride);
        p.left.set(stride);
        if now.saturating_sub(p.look_ns.get()) < POLL_EVERY_NS {
            return;
        }
        p.look_ns.set(now);
        LAST_POLL_POINT_NS.store(now, Ordering::Relaxed);
        p.hook.serve_polled();
    });
}

/// Counts a runtime thread (a processor or a service) among the cluster's running ones
/// while it lives (module doc, "Policy"); its parks count it out meanwhile.
pub(crate) struct Running<'a>(&'a Control);

impl<'a> Running<'a> {
    pub(crate) fn start(control: &'a Control) -> Running<'a> {
        control.count_running(1);
        Running(control)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.count_running(-1);
    }
}

/// One node's wait seam: parks on the node's doorbell, and serves the node's incoming
/// messages while waiting if it has a [`Serve`] hook.
#[derive(Clone, Copy)]
pub(crate) struct Seam<'a> {
    control: &'a Control,
    node: usize,
    serve: Option<&'a dyn Serve>,
}

impl<'a> Seam<'a> {
    /// A seam of `node` that does not serve messages (for threads that are not processors
    /// of an engine: the service thread, tests' clients, start-up).
    pub(crate) fn new(control: &'a Control, node: usize) -> Seam<'a> {
        Seam {
            control,
            node,
            serve: None,
        }
    }

    /// The same seam, serving the node's messages through `hook` while it waits.
    pub(crate) fn serving(self, hook: &'a dyn Serve) -> Seam<'a> {
        Seam {
            serve: Some(hook),
            ..self
        }
    }

    /// Blocks until `ready()` holds (policy in the module doc). `ready` may take what it
    /// waits for (a lock): once it returns true the seam never calls it again. Fails with
    /// [`Aborted`] if the cluster aborts first.
    pub(crate) fn until(&self, what: WaitFor, ready: impl FnMut() -> bool) -> Result<(), Aborted> {
        self.wait(what, None, None, ready)
    }

    /// Like [`Seam::until`], for a condition on words that other nodes write remotely,
    /// which lie at network addresses `watch` (`[start, end)`, `crate::net::Region::span`).
    /// The wall clock waits the same; the modeled clock wakes the waiter only for a remote
    /// write that overlaps them (`crate::sched::Wake::Memory`), so that a node's arrival at
    /// a barrier wakes the one waiter for arrivals, not every node's waiter for the sense.
    pub(crate) fn until_written(
        &self,
        what: WaitFor,
        watch: (u64, u64),
        ready: impl FnMut() -> bool,
    ) -> Result<(), Aborted> {
        self.wait(what, None, Some(watch), ready)
    }

    /// Like [`Seam::until`], but while parked the thread also counts itself in `flag`, so
    /// that its waker can ring only when this particular waiter sleeps ([`wake_flagged`])
    /// rather than whenever any thread of the node does.
    pub(crate) fn until_flagged(
        &self,
        what: WaitFor,
        flag: &AtomicU32,
        ready: impl FnMut() -> bool,
    ) -> Result<(), Aborted> {
        self.wait(what, Some(flag), None, ready)
    }

    /// Lets about `checks` spin hints pass (a back-off between attempts), serving messages
    /// meanwhile. It never yields or parks: a back-off is short by design.
    pub(crate) fn back_off(&self, checks: u32) {
        if crate::sched::active() {
            // Modeled time: a spin hint of the delay loop costs about a nanosecond; then
            // let the activities with smaller clocks run.
            crate::sched::charge(checks as u64, || "a back-off".into());
            crate::sched::yield_now();
            self.serve_now();
            return;
        }
        for check in 1..=checks {
            if check % SERVE_EVERY == 0 {
                self.serve_now();
            }
            std::hint::spin_loop();
        }
    }

    /// A poll point's look (module doc, "Polling while computing"): runs `look` counted
    /// as the node's poller, so that what it takes off the network rings no bell (the
    /// parked service would wake only to find it taken), then stops counting as a
    /// spinning waiter does ("Pollers"): after a fence it rings the node's service if
    /// messages wait.
    pub(crate) fn look_as_poller(&self, look: impl FnOnce() -> usize) -> usize {
        let mut poller = Polling::counted(self);
        let handled = look();
        // The look served already: what remains is rung for, not served again.
        poller.stop(false);
        handled
    }

    /// Sends, through `send`, a message to this seam's own node that its thread then waits
    /// on (a request to a manager that lives here), and handles it at once if this seam
    /// serves: the send is counted as the node's poller, so it rings no bell (the idle
    /// service would wake, possibly on the core of another node's processor, only to do
    /// what the sender does within a few checks of its wait), and the poller stops as a
    /// spinning waiter's does ("Pollers"): it serves, then rings the service for whatever
    /// is left. A seam that does not serve just sends.
    ///
    /// `try_send` must not wait (it returns `Ok(false)` when the ring is full): a thread
    /// counts as a poller only while it spins, so a full ring is waited for by
    /// `send_waiting`, uncounted. A send that fails serves nothing.
    pub(crate) fn send_then_serve<E>(
        &self,
        try_send: impl FnOnce() -> Result<bool, E>,
        send_waiting: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        if self.serve.is_none() || crate::sched::active() {
            return send_waiting();
        }
        let mut poller = Polling::counted(self);
        let sent = try_send();
        poller.stop(sent.is_ok());
        match sent? {
            true => Ok(()),
            false => send_waiting(),
        }
    }

    /// Wakes this node's parked threads (cheap when nobody is parked).
    pub(crate) fn wake(&self) {
        wake(self.control, self.node);
    }

    /// Wakes this node's parked threads if a waiter counted in `flag` is among them (see
    /// [`Seam::until_flagged`]): a node-local event need not wake the idle service thread.
    pub(crate) fn wake_flagged(&self, flag: &AtomicU32) {
        wake_flagged(self.control, self.node, flag);
    }

    fn serve_now(&self) {
        if let Some(s) = self.serve {
            s.serve();
        }
    }

    fn wait(
        &self,
        what: WaitFor,
        flag: Option<&AtomicU32>,
        watch: Option<(u64, u64)>,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), Aborted> {
        if crate::sched::active() {
            // Modeled time: the scheduler owns the wait (crate::sched).
            if ready() {
                return Ok(());
            }
            loop {
                let flag = flag.map_or(0, |f| f as *const AtomicU32 as usize);
                match crate::sched::block(what, self.serve.is_some(), flag, watch) {
                    Ok(crate::sched::Resumed::Woken) => {}
                    Ok(crate::sched::Resumed::Finished) => break,
                    Err(crate::sched::Aborted) => return Err(Aborted),
                }
                self.serve_now();
                if ready() {
                    return Ok(());
                }
            }
        }
        if self.spin_and_yield(what, &mut ready) {
            return Ok(());
        }
        let parked_since = Instant::now();
        let mut reported = false;
        loop {
            if self.control.aborted() {
                return Err(Aborted);
            }
            if self.park(what, flag, &mut ready) {
                return Ok(());
            }
            // A ring may have been for a message to this node: serve it, then look again.
            self.serve_now();
            if ready() {
                return Ok(());
            }
            // An idle service thread waits for messages as long as the program computes:
            // that is no stall, so it is never reported.
            if !reported && what != WaitFor::Messages && parked_since.elapsed() >= STALL_REPORT {
                reported = true;
                sys::report(format_args!(
                    "a thread of node {} has waited {} s for {what}",
                    self.node,
                    parked_since.elapsed().as_secs()
                ));
            }
        }
    }

    /// The wait before parking (module doc, "Policy"): spins while the cores are free,
    /// else spins briefly and yields, checking `ready` between, serving if it polls, and
    /// stops early on a crowded host. Returns true once `ready` holds, false when the
    /// thread should park. A thread that serves (a processor) or waits for messages (the
    /// service) counts as its node's poller while it spins (module doc, "Pollers").
    fn spin_and_yield(&self, what: WaitFor, ready: &mut impl FnMut() -> bool) -> bool {
        let began_ns = sys::monotonic_ns();
        loop {
            let mut poller = Polling::start(self, what);
            let next = self.spin_and_yield_polling(what, ready, &mut poller, began_ns);
            // About to park, it holds nothing and may serve; done, it may hold what it took.
            poller.stop(next != Next::Done);
            match next {
                Next::Done => return true,
                Next::Park => return false,
                Next::Spin => {}
            }
        }
    }

    /// One spin phase and the yields after it, counted as a poller in `poller` while it
    /// spins; `began_ns` is when the wait began spinning, which bounds its free spin.
    fn spin_and_yield_polling(
        &self,
        what: WaitFor,
        ready: &mut impl FnMut() -> bool,
        poller: &mut Polling<'_, '_>,
        began_ns: u64,
    ) -> Next {
        let idle = what == WaitFor::Messages;
        // The checks of the spin phase, and how many it may make as of the last look.
        let mut spins = 0u32;
        let mut limit = self.spin_limit(idle);
        if idle && limit > 0 {
            free_service(self.control.bell(self.node));
        }
        // The idle service moves off a core a bound processor may need once it has spun
        // there this long (`step_off`): at most once a wait, and not at once, since moving
        // costs two affinity calls and a service woken for one message is mostly gone
        // again sooner (moving at every wake made the page fetch 6x slower in some runs).
        let mut step_off_at = if idle { began_ns + STEP_OFF_AFTER_NS } else { u64::MAX };
        while spins < limit {
            if ready() {
                return Next::Done;
            }
            spins += 1;
            if spins % SPIN_SERVE_EVERY == 0 || take_filed_here() {
                self.serve_now();
            }
            if spins % LOOK_EVERY == 0 {
                let now = sys::monotonic_ns();
                if spins >= CROWDED_SPIN_CHECKS && self.control.crowded(now) {
                    return Next::Park;
                }
                if self.control.aborted() || now - began_ns >= SPIN_FREE_NS {
                    return Next::Park;
                }
                limit = self.spin_limit(idle);
                if now >= step_off_at && limit == u32::MAX {
                    self.step_off();
                    step_off_at = u64::MAX;
                }
            }
            std::hint::spin_loop();
        }
        if idle {
            return if ready() { Next::Done } else { Next::Park };
        }
        // Give the core to whoever needs it between checks. A yield may last a time
        // slice: a yielder is no poller a sender can count on.
        poller.stop(true);
        for check in 1..=YIELD_CHECKS {
            if ready() {
                return Next::Done;
            }
            if check % SERVE_EVERY == 0 {
                self.serve_now();
            }
            let before = sys::monotonic_ns();
            // The cores are free again (looked at first before the first yield): spin,
            // counted as a poller, rather than yield on through a core nobody else wants
            // ("Policy").
            if check % SERVE_EVERY == 1
                && self.spin_limit(false) == u32::MAX
                && !self.control.crowded(before)
            {
                return Next::Spin;
            }
            std::thread::yield_now();
            let now = sys::monotonic_ns();
            if switched_out(now - before) {
                // The yield let another thread run for a while: it is better woken by
                // the event than handed the core back and forth.
                self.control.crowd(now, CROWDED_FOR_NS);
                return Next::Park;
            }
        }
        Next::Park
    }

    /// The idle service that has spun `STEP_OFF_AFTER_NS` while the cores stand free gives
    /// back a binding to a processor's core and moves off a core a bound processor may
    /// need ([`step_off`]).
    fn step_off(&self) {
        step_off(self.control, self.control.bell(self.node));
    }

    /// How many checks a wait spins before it yields (a processor) or parks (the idle
    /// service), as the cores stand now (module doc, "Policy"): without end while the
    /// cluster's running threads fit them (`SPIN_FREE_NS` ends it), `SPIN_CHECKS` when
    /// they do not (none for the idle service), and the plain policy's counts where the
    /// block cannot count the threads that share the cores (an MPI rank).
    fn spin_limit(&self, idle: bool) -> u32 {
        if !self.control.cores_known() {
            return if idle { IDLE_SPIN_CHECKS } else { SPIN_CHECKS };
        }
        match (self.control.oversubscribed(), idle) {
            (false, _) => u32::MAX,
            (true, true) => 0,
            (true, false) => SPIN_CHECKS,
        }
    }

    /// Registers as parked, checks `ready` once more, and sleeps on the bell unless it
    /// holds (module doc, "no lost wake-up"). A wait for messages sleeps on the bell's
    /// service word, and counts itself there too ("Sleepers and wakers"). Returns what
    /// `ready` said.
    fn park(
        &self,
        what: WaitFor,
        flag: Option<&AtomicU32>,
        ready: &mut impl FnMut() -> bool,
    ) -> bool {
        let bell = self.control.bell(self.node);
        let service = what == WaitFor::Messages;
        let word = if service {
            &bell.service_word
        } else {
            &bell.word
        };
        let seen = word.load(Ordering::SeqCst);
        if let Some(f) = flag {
            f.fetch_add(1, Ordering::SeqCst);
        }
        if service {
            bell.service_parked.fetch_add(1, Ordering::SeqCst);
        }
        bell.parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let now_ready = ready();
        if !now_ready && !self.control.aborted() {
            self.control.count_running(-1);
            // A bound processor leaves its core to whoever the idle service is ("Placement").
            let core = BOUND_CORE.with(|c| c.get()).checked_sub(1);
            if let Some(core) = core {
                self.control.core_parked(core as usize, true);
            }
            sys::futex_wait(word, seen, Some(PARK_TIMEOUT));
            if let Some(core) = core {
                self.control.core_parked(core as usize, false);
            }
            self.control.count_running(1);
        }
        bell.parked.fetch_sub(1, Ordering::SeqCst);
        if service {
            bell.service_parked.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(f) = flag {
            f.fetch_sub(1, Ordering::SeqCst);
        }
        now_ready
    }
}

/// What a wait does after a spin phase and its yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Its condition holds.
    Done,
    /// It parks.
    Park,
    /// The cores freed up while it yielded: it spins again.
    Spin,
}

/// A spinning thread's count as its node's poller (module doc, "Pollers"): counted from
/// `start` to `stop` if the wait serves messages (a processor's) or waits for them (the
/// service's).
struct Polling<'s, 'a> {
    seam: &'s Seam<'a>,
    counted: bool,
}

/// A poller that unwinds (a panic inside its send or its wait) stops counting, so that
/// the node's senders ring again; it serves nothing on the way out.
impl Drop for Polling<'_, '_> {
    fn drop(&mut self) {
        if self.uncount() {
            wake_service(self.seam.control, self.seam.node, false);
        }
    }
}

impl<'s, 'a> Polling<'s, 'a> {
    /// Takes this thread out of its node's poller count, once; true if it was counted.
    fn uncount(&mut self) -> bool {
        let was = std::mem::take(&mut self.counted);
        if was {
            self.seam.control.bell(self.seam.node).pollers.fetch_sub(1, Ordering::SeqCst);
        }
        was
    }

    fn start(seam: &'s Seam<'a>, what: WaitFor) -> Self {
        // Where the block does not know its cores (an MPI rank with less than one core
        // to itself), the policy is the plain one: nobody counts.
        let counted =
            (seam.serve.is_some() || what == WaitFor::Messages) && seam.control.cores_known();
        if counted {
            seam.control.bell(seam.node).pollers.fetch_add(1, Ordering::SeqCst);
        }
        Polling { seam, counted }
    }

    /// Counts `seam`'s thread as its node's poller whatever the cores (a poll point's
    /// look, [`Seam::look_as_poller`]: it rings for what it leaves when it stops).
    fn counted(seam: &'s Seam<'a>) -> Self {
        seam.control.bell(seam.node).pollers.fetch_add(1, Ordering::SeqCst);
        Polling {
            seam,
            counted: true,
        }
    }

    /// Stops counting (once): a sender that saw this poller did not ring, so look once
    /// more for what it sent, after a fence. A processor serves it if it may (`may_serve`:
    /// it holds nothing) and rings its node's service for what remains unless another
    /// poller is still counted; the service needs no look, as its park checks for messages
    /// after its own fence.
    fn stop(&mut self, may_serve: bool) {
        if !self.uncount() {
            return;
        }
        let seam = self.seam;
        if let Some(s) = seam.serve {
            fence(Ordering::SeqCst);
            if may_serve {
                s.serve();
            }
            // The last poller to stop rings (module doc, "Pollers").
            if s.has_messages()
                && seam.control.bell(seam.node).pollers.load(Ordering::SeqCst) == 0
            {
                wake_service(seam.control, seam.node, false);
            }
        }
    }
}

/// Wakes `node`'s parked threads after an event they may wait for. Call it after making
/// the event visible; it costs a fence and a load when nobody is parked.
pub(crate) fn wake(control: &Control, node: usize) {
    wake_parked(control, node, crate::control::Doorbell::ring);
}

/// Rings `node`'s bell with `ring` if any thread of the node is parked (after a fence);
/// under the modeled clock the scheduler wakes instead.
fn wake_parked(control: &Control, node: usize, ring: fn(&crate::control::Doorbell)) {
    if crate::sched::wake_now(node) {
        return;
    }
    let bell = control.bell(node);
    fence(Ordering::SeqCst);
    if bell.parked.load(Ordering::SeqCst) != 0 {
        ring(bell);
    }
}

/// Wakes `node`'s parked processors, not its idle service, after a synchronization word
/// they may wait for was written (`crate::net::Transport::ring_bells`): the service waits
/// for no such word, and woken it would only take a core to look and park again (under a
/// binding to a processor's core, "Placement", that processor's core).
pub(crate) fn wake_processors(control: &Control, node: usize) {
    wake_parked(control, node, crate::control::Doorbell::ring_word);
}

/// Wakes `node`'s idle service after a message landed in one of its rings, unless a
/// thread of the node polls its rings right now (module doc, "Pollers"): that one takes
/// the message. The node's other parked threads stay asleep ("Sleepers and wakers"): the
/// service handles every message, and a processor parked at a barrier would only take a
/// core to find its own condition unchanged.
pub(crate) fn wake_for_message(control: &Control, node: usize) {
    wake_service(control, node, true);
}

/// Wakes `node`'s idle service, if it is parked, for messages that wait, unless
/// `unless_polled` and a thread of the node polls; only a sender's ring (`unless_polled`)
/// moves the service ("Placement"). A poller that stops reads the count itself and rings
/// without `unless_polled` only when no other poller is left.
fn wake_service(control: &Control, node: usize, unless_polled: bool) {
    if crate::sched::wake_now(node) {
        return;
    }
    let bell = control.bell(node);
    fence(Ordering::SeqCst);
    if (!unless_polled || bell.pollers.load(Ordering::SeqCst) == 0)
        && bell.service_parked.load(Ordering::SeqCst) != 0
    {
        if unless_polled {
            if control.core_free() {
                free_service(bell);
            } else {
                bring_service_here(bell);
            }
        }
        bell.ring_service();
    }
}

thread_local! {
    /// One more than the core this processor thread is bound to ("Placement"), 0 if none.
    static BOUND_CORE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Publishes the calling service thread's id and the CPUs it may use in its node's
/// doorbell, so that a processor bound to a core may bind it to its own ("Placement").
/// Publishes nothing if those CPUs do not fit the bit set. The id is withdrawn when the
/// result is dropped.
pub(crate) fn service_movable(bell: &crate::control::Doorbell) -> ServiceMovable<'_> {
    let cpus = sys::allowed_cpus();
    if !cpus.is_empty() && cpus.iter().all(|&c| c < 64) {
        let set = cpus.iter().fold(0u64, |set, &c| set | 1 << c);
        bell.service_cpus.store(set, Ordering::Relaxed);
        bell.service_core.store(0, Ordering::Relaxed);
        bell.service_tid.store(sys::thread_id(), Ordering::Release);
    }
    ServiceMovable(bell)
}

/// A service thread's published id ([`service_movable`]), withdrawn when dropped.
pub(crate) struct ServiceMovable<'a>(&'a crate::control::Doorbell);

impl Drop for ServiceMovable<'_> {
    fn drop(&mut self) {
        self.0.service_tid.store(0, Ordering::Relaxed);
    }
}

/// Records that the calling processor thread is bound to `core` ("Placement"), here and
/// in the cluster's control block.
pub(crate) fn bound_to(control: &Control, core: usize) {
    BOUND_CORE.with(|c| c.set(core as u32 + 1));
    control.bind_core(core);
}

/// Gives a service that a processor bound to its core ([`bring_service_here`]) its own
/// CPUs back, if it is bound.
fn free_service(bell: &crate::control::Doorbell) {
    if bell.service_core.load(Ordering::Relaxed) != 0 {
        rebind_service(bell, 0, &own_cpus(bell));
    }
}

/// The CPUs the service published as its own ([`service_movable`]).
fn own_cpus(bell: &crate::control::Doorbell) -> Vec<usize> {
    let set = bell.service_cpus.load(Ordering::Relaxed);
    (0..64).filter(|c| set & 1 << c != 0).collect()
}

/// The bell's `service_binding` word, held: the service's binding record and the kernel's
/// binding change together only under it. `None` if another thread holds it: that one
/// decides (a ring does not wait: the next ring or idle spin looks again).
fn hold_binding(bell: &crate::control::Doorbell) -> Option<BindingHeld<'_>> {
    bell.service_binding
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
        .then_some(BindingHeld(bell))
}

/// The held `service_binding` word ([`hold_binding`]), let go when dropped.
struct BindingHeld<'a>(&'a crate::control::Doorbell);

impl Drop for BindingHeld<'_> {
    fn drop(&mut self) {
        self.0.service_binding.store(0, Ordering::Release);
    }
}

/// The idle service about to spin (the running threads fit the cores) gives back a
/// binding to a processor's core (`bring_service_here`), and if it runs on a core whose
/// bound processor is not parked (that processor computes, or waits spinning and may need
/// the core any moment), it moves to one of its CPUs that no such processor holds: it
/// binds itself to those CPUs, which moves it before the call returns, and then to all
/// its CPUs, which leaves it where it landed. The kernel does not move a running thread
/// to an idle core: `perf sched` on `bench proto` (2 x 1, processes) showed node 0's idle
/// service spinning 4-10 ms on node 1's processor's core beside an idle core (node 0's
/// processor was parked at a barrier), while that processor waited its turn with its
/// reply already in its mailbox: page fetches of 6-8 ms in a quarter of the runs. Only
/// the service itself moves; called from another thread this only gives the binding
/// back. Under the `service_binding` word ([`hold_binding`]), as [`rebind_service`].
fn step_off(control: &Control, bell: &crate::control::Doorbell) {
    let tid = bell.service_tid.load(Ordering::Acquire);
    if tid == 0 {
        return; // processors unbound: the kernel places everything
    }
    let mine = tid == sys::thread_id();
    let core = bell.service_core.load(Ordering::Relaxed);
    let (bound, parked) = control.core_use();
    let cpu = if mine { sys::current_cpu().filter(|&c| c < 64) } else { None };
    let crowding = cpu.filter(|&c| bound & 1 << c != 0 && parked & 1 << c == 0);
    if core == 0 && crowding.is_none() {
        return;
    }
    let Some(_held) = hold_binding(bell) else {
        return;
    };
    let own = own_cpus(bell);
    // Best effort: a binding that fails leaves the thread where it is.
    let moved = crowding.is_some_and(|here| {
        let room: Vec<usize> = own
            .iter()
            .copied()
            .filter(|&c| c != here && (bound & 1 << c == 0 || parked & 1 << c != 0))
            .collect();
        !room.is_empty() && sys::bind_thread(tid, &room).is_ok()
    });
    if (moved || bell.service_core.load(Ordering::Relaxed) != 0) && sys::bind_thread(tid, &own).is_ok() {
        bell.service_core.store(0, Ordering::Relaxed);
    }
}

/// Before a processor bound to a core rings a parked service when no core stands free,
/// binds that service to the processor's own core ("Placement": the processor is about to
/// wait, so its core is the one with room). Does nothing on a thread bound to no core or
/// for a service that published no thread id.
fn bring_service_here(bell: &crate::control::Doorbell) {
    let here = BOUND_CORE.with(|c| c.get());
    if here != 0 && bell.service_core.load(Ordering::Relaxed) != here {
        rebind_service(bell, here, &[here as usize - 1]);
    }
}

/// Binds the service that published its id in `bell` to `cpus` and records `core` (one
/// more than the core it is bound to, 0 for its own CPUs) in `service_core`, unless it is
/// recorded there already. The record and the kernel's binding change together under the
/// bell's `service_binding` word; a thread that finds the word taken leaves the binding to
/// the one that holds it (a ring does not wait: the next ring or idle spin looks again).
fn rebind_service(bell: &crate::control::Doorbell, core: u32, cpus: &[usize]) {
    let Some(_held) = hold_binding(bell) else {
        return;
    };
    let tid = bell.service_tid.load(Ordering::Acquire);
    // A binding that fails leaves the service where it is, and the record as it was.
    if tid != 0
        && bell.service_core.load(Ordering::Relaxed) != core
        && sys::bind_thread(tid, cpus).is_ok()
    {
        bell.service_core.store(core, Ordering::Relaxed);
    }
}

/// Wakes `node`'s parked threads if the waiter that counts itself in `flag` is parked
/// (see [`Seam::until_flagged`]).
pub(crate) fn wake_flagged(control: &Control, node: usize, flag: &AtomicU32) {
    if crate::sched::wake_flagged(node, flag as *const AtomicU32 as usize) {
        return;
    }
    fence(Ordering::SeqCst);
    if flag.load(Ordering::SeqCst) != 0 {
        // Flagged waiters are processors (a reply, a lock, a barrier, ring space): the
        // idle service waits for none of these and sleeps on.
        control.bell(node).ring_word();
    }
}

/// Takes a lock word of the fabric (0 free, 1 held) that guards a short copy (the hub and
/// link locks of a transmit). Its holder never waits while holding it, so a waiter spins,
/// then yields, and never parks. Panics with the abort message if the cluster aborts
/// meanwhile: the holder may be a process that died holding it, and callers unwind.
pub(crate) fn lock_word(word: &AtomicU32, control: &Control) {
    let mut tries = 0u32;
    while word
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        tries += 1;
        if tries < SPIN_CHECKS {
            std::hint::spin_loop();
        } else {
            if control.aborted() {
                panic!("{}", crate::control::ABORT_MESSAGE);
            }
            std::thread::yield_now();
        }
    }
}

/// Releases a lock word taken with [`lock_word`].
pub(crate) fn unlock_word(word: &AtomicU32) {
    word.store(0, Ordering::Release);
}

/// The longest delay of [`perturb_schedule`], in spin hints (about 6 us on the EPYC cores
/// this was measured on).
const PERTURB_MAX_CHECKS: u64 = 256;

/// Delays the caller by a pseudo-random 0 to `PERTURB_MAX_CHECKS` spin hints, to shake up
/// the interleaving of threads: the ordering tests' traced transmits do it between
/// receivers, inside the hub and link locks, so that a missing lock shows as a reordering
/// (with the broadcast's locks taken out, both ordering tests fail at their first seed). It
/// keeps its core and waits for nothing. It used to yield instead; beside two CPU hogs on
/// two cores that handed the core to a hog for a whole time slice while the senders waited
/// for the lock the yielder held (the processes ordering test: 0.45 s idle, 90 s loaded).
pub(crate) fn perturb_schedule() {
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    // SplitMix64's finalizer over a counter: cheap, and different for every call.
    let mut z = DRAWS
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    for _ in 0..(z ^ (z >> 31)) % (PERTURB_MAX_CHECKS + 1) {
        std::hint::spin_loop();
    }
}

/// The longest the launcher sleeps between looks at its node processes: what it must
/// notice without a wake-up (a stalled heartbeat, a failure recorded before the node
/// exits) is noticed within this.
const LAUNCHER_LOOK: Duration = Duration::from_millis(50);

/// The launcher's wait between looks at its node processes: it sleeps in the kernel until
/// one of them ends or `exec`s, or [`LAUNCHER_LOOK`] passes. It is not a node's thread and
/// takes no core from the nodes while they run.
pub(crate) fn launcher_wait(children: &[&sys::NodeProcess]) {
    sys::wait_node_processes(children, LAUNCHER_LOOK);
}

/// The waits of the MPI transport, whose arrivals cannot ring a doorbell.
#[cfg(feature = "mpi")]
mod polling {
    use std::time::Duration;

    /// Looks of a [`Poller`] that spin before it sleeps between looks.
    const POLL_SPINS: u32 = 256;
    /// A [`Poller`]'s first sleep between looks; each further one doubles, up to
    /// [`POLL_SLEEP_MAX`].
    const POLL_SLEEP_MIN: Duration = Duration::from_micros(10);
    /// The longest a [`Poller`] sleeps between looks: the most an idle node adds to the
    /// latency of a message that finds it asleep.
    const POLL_SLEEP_MAX: Duration = Duration::from_micros(50);
    /// A [`Poller`]'s sleep between looks while processors of its process look for
    /// messages themselves ([`Poller::idle_behind_pollers`]): the most a message waits for
    /// it if they all stop looking at once.
    const POLL_SLEEP_BEHIND_POLLERS: Duration = Duration::from_micros(500);

    /// The idle policy of a thread that must look for arrivals because none of them can
    /// ring a doorbell: the MPI transport's progress thread (`crate::net`), since a message
    /// from another MPI rank cannot wake a futex of this process. After an arrival it looks
    /// again at once; after `POLL_SPINS` empty looks it sleeps between looks, 10 us at
    /// first and twice as long each time up to 50 us (with a timer slack of 1 us). It
    /// never yields instead: on a loaded host a yield can give the core away for a whole
    /// time slice of another program, and every message would pay it, while a thread
    /// woken from a short sleep runs at once. A thread that expects an arrival soon (the
    /// start-up barrier's) ends the sleep with [`Poller::kick`]. The sleep only bounds
    /// how often an idle poller looks; no arrival waits for it longer than
    /// `POLL_SLEEP_MAX`, or `POLL_SLEEP_BEHIND_POLLERS` while processors of its process
    /// look for arrivals themselves ([`Poller::idle_behind_pollers`]).
    pub struct Poller {
        empty: u32,
        sleep: Duration,
    }

    impl Default for Poller {
        fn default() -> Self {
            Poller {
                empty: 0,
                sleep: POLL_SLEEP_MIN,
            }
        }
    }

    impl Poller {
        /// Something arrived: look again at once, and closely for a while.
        pub fn busy(&mut self) {
            self.empty = 0;
            self.sleep = POLL_SLEEP_MIN;
        }

        /// Nothing arrived: spin, yield or sleep before the next look (the type's doc).
        pub fn idle(&mut self) {
            self.empty = self.empty.saturating_add(1);
            if self.empty < POLL_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::park_timeout(self.sleep);
                self.sleep = (self.sleep * 2).min(POLL_SLEEP_MAX);
            }
        }

        /// Nothing arrived, and a processor of this process looks for messages at its
        /// poll points ([`super::pollers_look`]): it takes what arrives, so sleep
        /// `POLL_SLEEP_BEHIND_POLLERS` before the next look.
        pub fn idle_behind_pollers(&mut self) {
            self.empty = self.empty.max(POLL_SPINS);
            std::thread::park_timeout(POLL_SLEEP_BEHIND_POLLERS);
        }

        /// Nothing arrived, and the threads of the poller's process use every core it
        /// has (`cores_taken`, `crate::control::Control::cores_taken`): sleep before the
        /// next look without spinning first. A spinning poller would take a core from the
        /// processor computing on it (with 2 ranks of SOR on 2 cores, the progress thread
        /// took 15% of each core, and the processors' User time grew by half), and a
        /// thread that waits for an arrival looks at MPI itself.
        pub fn idle_sharing(&mut self, cores_taken: bool) {
            if cores_taken {
                self.empty = self.empty.max(POLL_SPINS);
            }
            self.idle();
        }

        /// True once the poller sleeps between looks (its spins are over): the time to do
        /// what it does now and then (a clock read costs as much as a look).
        pub fn sleeping(&self) -> bool {
            self.empty >= POLL_SPINS
        }

        /// Ends the sleep of the poller running on `thread`, and its next one if it is not
        /// asleep yet (the thread's park token).
        pub fn kick(thread: &std::thread::Thread) {
            thread.unpark();
        }
    }

    /// Looks at `done` every `every` until it holds, sleeping in between: for a rare
    /// wait of the launcher's that no event can end (a peer's silence).
    pub fn poll_until(every: Duration, mut done: impl FnMut() -> bool) {
        while !done() {
            std::thread::park_timeout(every);
        }
    }

    /// Sleeps until the process is killed: an MPI rank whose run failed waits here for the
    /// `MPI_Abort` of the rank that reports the failure (`crate::launch`, "MPI ranks"). It
    /// takes no core meanwhile.
    pub fn until_killed() -> ! {
        poll_until(Duration::from_secs(1), || false);
        unreachable!("a wait for nothing ended")
    }
}

#[cfg(feature = "mpi")]
pub(crate) use polling::{poll_until, until_killed, Poller};

/// A node-local lock whose waiters wait through the [`Seam`] (and so serve messages, give
/// up on abort, and are visible to the modeled-time scheduler).
///
/// # Memory ordering
///
/// Unlocking happens-before the next successful lock: everything the holder did is
/// visible to the next holder. Unlock wakes parked waiters: it stores `held = false`, then
/// rings the node's bell only if a waiter of this lock is parked (`parked`, the flag of
/// [`Seam::until_flagged`]), so an unlock costs one store, one fence and one load unless
/// somebody sleeps on it.
pub(crate) struct SeamLock<T> {
    held: AtomicBool,
    /// Waiters of this lock parked on the bell right now.
    parked: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and `held` admits one guard at a
// time (Acquire on lock, Release on unlock), as for std's Mutex.
unsafe impl<T: Send> Sync for SeamLock<T> {}

impl<T: Default> Default for SeamLock<T> {
    fn default() -> Self {
        SeamLock::new(T::default())
    }
}

impl<T> SeamLock<T> {
    pub(crate) fn new(value: T) -> SeamLock<T> {
        SeamLock {
            held: AtomicBool::new(false),
            parked: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    fn take(&self) -> bool {
        self.held
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock if it is free; `None` if another holds it. The guard rings `seam`'s
    /// bell when it unlocks with waiters.
    pub(crate) fn try_lock<'s>(&'s self, seam: &Seam<'s>) -> Option<SeamGuard<'s, T>> {
        // Build the guard only on success: a guard unlocks when dropped.
        if self.take() {
            Some(SeamGuard {
                lock: self,
                seam: *seam,
            })
        } else {
            None
        }
    }

    /// Takes the lock, waiting through `seam` while another holds it.
    pub(crate) fn lock<'s>(
        &'s self,
        seam: &Seam<'s>,
        what: WaitFor,
    ) -> Result<SeamGuard<'s, T>, Aborted> {
        if let Some(g) = self.try_lock(seam) {
            return Ok(g);
        }
        let r = seam.until_flagged(what, &self.parked, || self.take());
        r.map(|()| SeamGuard {
            lock: self,
            seam: *seam,
        })
    }

    /// Frees the lock and wakes parked waiters if any are registered.
    fn unlock(&self, seam: &Seam<'_>) {
        self.held.store(false, Ordering::SeqCst);
        seam.wake_flagged(&self.parked);
    }
}

/// A lock that guards no data can be held across calls without a guard: a network lock's
/// node-local lock is taken in one call (acquire) and freed in another (release).
impl SeamLock<()> {
    /// Takes the lock as [`SeamLock::lock`] does, and keeps it until [`SeamLock::unhold`].
    pub(crate) fn hold(&self, seam: &Seam<'_>, what: WaitFor) -> Result<(), Aborted> {
        self.lock(seam, what).map(std::mem::forget)
    }

    /// Frees a lock taken with [`SeamLock::hold`]; only its holder may call it.
    pub(crate) fn unhold(&self, seam: &Seam<'_>) {
        debug_assert!(self.held.load(Ordering::Relaxed), "unhold of a free lock");
        self.unlock(seam);
    }
}

/// Holds a [`SeamLock`]; unlocks (and wakes its waiters) when dropped.
pub(crate) struct SeamGuard<'s, T> {
    lock: &'s SeamLock<T>,
    seam: Seam<'s>,
}

impl<T> std::ops::Deref for SeamGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (SeamLock's Sync comment).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for SeamGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref, and &mut self makes this the only borrow through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SeamGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock(&self.seam);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric() -> Box<Control> {
        Control::new_local(1)
    }

    /// "Placement": a bound processor that rings a parked service binds it to its own core
    /// only while no core stands free; the binding is given back when the service is about
    /// to spin idle on a free core, or when a ring finds a core free.
    #[test]
    fn a_woken_service_is_bound_to_its_waker_core_only_while_no_core_is_free() {
        let control = Control::new_local(2);
        assert!(control.cores_known(), "the block found no cores to count against");
        let all = sys::allowed_cpus();
        let target = *all.last().expect("the kernel names this thread's CPUs");
        let bell = control.bell(1);
        let (ask, asked) = std::sync::mpsc::channel::<bool>();
        let (tell, told) = std::sync::mpsc::channel::<Vec<usize>>();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _movable = service_movable(bell);
                // Each request: free the binding first (true) or not, then say where it may
                // run. The first answer follows the publication.
                tell.send(sys::allowed_cpus()).unwrap();
                for free in asked {
                    if free {
                        Seam::new(&control, 1).step_off();
                    }
                    tell.send(sys::allowed_cpus()).unwrap();
                }
            });
            assert_eq!(told.recv().unwrap(), all);
            if bell.service_tid.load(Ordering::SeqCst) == 0 {
                // Only CPUs beyond the bit set keep a service from being movable.
                assert!(all.iter().any(|&c| c >= 64), "a service on CPUs {all:?} was not published");
                return;
            }
            // Where the service may run after a message ring (or, `free`, its own free). On a
            // host with one CPU, `all` is `[target]` and only the recorded core tells.
            let cpus_after = |ring: bool, free: bool| {
                if ring {
                    wake_for_message(&control, 1);
                }
                ask.send(free).unwrap();
                told.recv().unwrap()
            };
            bound_to(&control, target);
            // The service counts as parked, so a message rings it.
            bell.service_parked.store(1, Ordering::SeqCst);

            // A core stands free: the ring binds nothing.
            assert_eq!(cpus_after(true, false), all, "a service was bound while a core was free");
            assert_eq!(bell.service_core.load(Ordering::SeqCst), 0);

            // Every core runs a thread of the cluster: the ring binds it to the waker's core.
            let mut taken = 0;
            while control.core_free() {
                control.count_running(1);
                taken += 1;
            }
            assert_eq!(cpus_after(true, false), vec![target], "the woken service was not brought");
            assert_eq!(bell.service_core.load(Ordering::SeqCst), target as u32 + 1);

            // A core is free again: the idle service gives the binding back.
            control.count_running(-1);
            assert_eq!(cpus_after(false, true), all, "the service kept its binding");
            assert_eq!(bell.service_core.load(Ordering::SeqCst), 0);

            // Bound again, then rung while a core is free: the waker gives it its CPUs back.
            control.count_running(1);
            assert!(!control.core_free());
            assert_eq!(cpus_after(true, false), vec![target], "the woken service was not brought");
            assert_eq!(bell.service_core.load(Ordering::SeqCst), target as u32 + 1);
            control.count_running(-1);
            assert_eq!(cpus_after(true, false), all, "a ring with a core free left the service bound");
            assert_eq!(bell.service_core.load(Ordering::SeqCst), 0);
            control.count_running(1 - taken);
            bell.service_parked.store(0, Ordering::SeqCst);
            drop(ask);
        });
    }

    /// The idle service spinning on a core whose bound processor is not parked moves off
    /// it, with its own CPUs given back; on a core whose processor is parked it stays.
    #[test]
    fn an_idle_service_moves_off_a_core_whose_processor_may_need_it() {
        let control = fabric();
        let all = sys::allowed_cpus();
        let bell = control.bell(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _movable = service_movable(bell);
                if bell.service_tid.load(Ordering::SeqCst) == 0 {
                    // Only CPUs beyond the bit set keep a service from being movable.
                    assert!(all.iter().any(|&c| c >= 64), "a service on CPUs {all:?} was not published");
                    return;
                }
                let busy = all[0];
                control.bind_core(busy);
                // On the core of a processor that is parked: nothing to leave.
                control.core_parked(busy, true);
                sys::pin_thread(busy).unwrap();
                Seam::new(&control, 0).step_off();
                assert_eq!(sys::current_cpu(), Some(busy));
                assert_eq!(sys::allowed_cpus(), vec![busy], "a service beside a parked processor moved");
                // The processor runs again: the service leaves its core if it has another.
                control.core_parked(busy, false);
                Seam::new(&control, 0).step_off();
                if all.len() > 1 {
                    assert_ne!(sys::current_cpu(), Some(busy), "the service stayed beside the processor");
                    assert_eq!(sys::allowed_cpus(), all, "the service did not get its CPUs back");
                } else {
                    assert_eq!(sys::current_cpu(), Some(busy));
                }
            });
        });
    }

    #[test]
    fn a_failed_try_lock_leaves_the_lock_held() {
        let f = fabric();
        let seam = Seam::new(&f, 0);
        let lock = SeamLock::new(5u32);
        let g = lock.try_lock(&seam).expect("free at first");
        assert!(lock.try_lock(&seam).is_none());
        assert!(
            lock.try_lock(&seam).is_none(),
            "a failed try_lock released the lock"
        );
        drop(g);
        assert_eq!(*lock.try_lock(&seam).expect("free after unlock"), 5);
    }

    #[test]
    fn contended_lock_excludes_and_wakes_parked_waiters() {
        let f = fabric();
        let lock = SeamLock::new(0u64);
        let rounds = 2_000u64;
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let seam = Seam::new(&f, 0);
                    for _ in 0..rounds {
                        let mut g = lock.lock(&seam, WaitFor::LocalLock { id: 0 }).unwrap();
                        // A non-atomic read-modify-write: lost updates if two hold it.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                });
            }
        });
        let seam = Seam::new(&f, 0);
        assert_eq!(*lock.try_lock(&seam).unwrap(), 3 * rounds);
    }

    /// Runs a wait for `what` on `f`'s node 0 until it parks, and returns how many times it
    /// checked its condition by then; then lets it end (its condition holds, and it is
    /// woken) and checks that it did.
    fn checks_before_parking(f: &Control, what: WaitFor) -> u32 {
        let go = AtomicBool::new(false);
        let checks = AtomicU32::new(0);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                Seam::new(f, 0).until(what, || {
                    checks.fetch_add(1, Ordering::SeqCst);
                    go.load(Ordering::SeqCst)
                })
            });
            while f.bell(0).parked.load(Ordering::SeqCst) == 0 {
                std::hint::spin_loop();
            }
            let before = checks.load(Ordering::SeqCst);
            go.store(true, Ordering::SeqCst);
            wake(f, 0);
            waiter.join().unwrap().unwrap();
            before
        })
    }

    #[test]
    fn a_wait_on_a_crowded_host_parks_after_a_few_checks_and_is_woken() {
        let f = fabric();
        // Crowded for an hour: longer than any run of this test.
        f.crowd(sys::monotonic_ns(), 3_600_000_000_000);
        // Until the waiter is registered as parked (it parks without a yield phase): its
        // spin and the park's own check (module doc, "no lost wake-up"): 65, and two more
        // for each park timeout since. Uncrowded it parks after 4,000.
        let checks = checks_before_parking(&f, WaitFor::LocalLock { id: 0 });
        assert!(checks < SPIN_CHECKS, "a crowded wait made {checks} checks before it parked");
    }

    /// "Policy": a waiter that yields because the cluster's threads outnumbered the cores
    /// spins again, counted as its node's poller, once they no longer do. (Yielding on, it
    /// held a core nobody else wanted for 3,600 yields, about 16 ms, and every message to
    /// its node woke the service meanwhile.)
    #[test]
    fn a_yielding_waiter_spins_again_as_a_poller_once_the_cores_free_up() {
        let f = fabric();
        assert!(f.cores_known(), "the block found no cores to count against");
        let bell = f.bell(0);
        // Other threads of the cluster run until the cores are outnumbered.
        let mut extra = 0;
        while !f.oversubscribed() {
            f.count_running(1);
            extra += 1;
        }
        let hook = OneMessage::none();
        let (mut counted, mut yielding, mut counted_again) = (false, false, false);
        let mut yield_checks = 0;
        Seam::new(&f, 0)
            .serving(&hook)
            .until(WaitFor::LocalLock { id: 0 }, || {
                let polls = bell.pollers.load(Ordering::SeqCst) == 1;
                if !counted {
                    counted = polls;
                } else if !yielding && !polls {
                    // Its spin is over and it yields: the other threads park.
                    yielding = true;
                    f.count_running(-extra);
                } else if yielding && polls {
                    counted_again = true;
                }
                yield_checks += u32::from(yielding && !polls);
                // It looks at the cores before its first yield: give up well after that.
                counted_again || yield_checks > 2 * SERVE_EVERY
            })
            .unwrap();
        assert!(yielding, "the wait never yielded with the cores outnumbered");
        assert!(counted_again, "a yielder did not spin again as a poller once the cores freed up");
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 0, "a finished wait still counts");
    }

    #[test]
    fn the_host_counts_as_crowded_for_the_time_given_and_no_longer() {
        let f = fabric();
        assert!(!f.crowded(sys::monotonic_ns()), "a new cluster's host is not crowded");
        f.crowd(1_000, 500);
        assert!(f.crowded(1_499));
        assert!(!f.crowded(1_500));
        // A shorter mark does not cut a longer one.
        f.crowd(1_100, 100);
        assert!(f.crowded(1_499));
    }

    /// The longest yields measured while only the cluster's own threads ran (a service
    /// serving, 50-430 us) are no sign of another program; the shortest beside CPU hogs
    /// (a time slice, 1.8 ms) are.
    #[test]
    fn only_a_yield_as_long_as_a_time_slice_shows_a_crowded_host() {
        for own_work_us in [50, 120, 430] {
            assert!(!switched_out(own_work_us * 1_000), "a {own_work_us} us yield");
        }
        for slice_us in [1_800, 4_000] {
            assert!(switched_out(slice_us * 1_000), "a {slice_us} us yield");
        }
    }

    /// Counts `bell`'s service as parked, by hand (nobody sleeps here), and returns its
    /// word as it stands.
    fn park_service_by_hand(bell: &crate::control::Doorbell) -> u32 {
        bell.parked.store(1, Ordering::SeqCst);
        bell.service_parked.store(1, Ordering::SeqCst);
        bell.service_word.load(Ordering::SeqCst)
    }

    #[test]
    fn a_message_for_a_node_with_a_poller_rings_no_bell() {
        let f = fabric();
        let bell = f.bell(0);
        let before = park_service_by_hand(bell);
        bell.pollers.store(1, Ordering::SeqCst);
        wake_for_message(&f, 0);
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before, "rang although a poller polls");
        bell.pollers.store(0, Ordering::SeqCst);
        wake_for_message(&f, 0);
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "no ring without a poller");
    }

    /// A message wakes the parked service and no other parked thread of the node; any
    /// other event's ring wakes both.
    #[test]
    fn a_message_wakes_the_service_alone() {
        let f = fabric();
        let bell = f.bell(0);
        let message = AtomicBool::new(false);
        let other = AtomicBool::new(false);
        std::thread::scope(|s| {
            let service = s.spawn(|| {
                Seam::new(&f, 0).until(WaitFor::Messages, || message.load(Ordering::SeqCst))
            });
            let processor = s.spawn(|| {
                Seam::new(&f, 0).until(WaitFor::LocalLock { id: 0 }, || other.load(Ordering::SeqCst))
            });
            while bell.parked.load(Ordering::SeqCst) < 2 || bell.service_parked.load(Ordering::SeqCst) < 1 {
                std::hint::spin_loop();
            }
            let word = bell.word.load(Ordering::SeqCst);
            message.store(true, Ordering::SeqCst);
            wake_for_message(&f, 0);
            service.join().unwrap().unwrap();
            assert_eq!(bell.word.load(Ordering::SeqCst), word, "a message rang the node's word");
            // The processor sleeps on (its park timeout aside); a lock's ring wakes it.
            other.store(true, Ordering::SeqCst);
            wake(&f, 0);
            processor.join().unwrap().unwrap();
        });
        assert_eq!(bell.service_parked.load(Ordering::SeqCst), 0);
    }

    /// A ring for another event reaches the idle service too (it waits for a stop, or for
    /// a page lock that deferred a message), though it sleeps on its own word; a flagged
    /// waiter's ring (a processor's event) does not.
    #[test]
    fn a_ring_reaches_the_parked_service_and_a_flagged_ring_does_not() {
        let f = fabric();
        let bell = f.bell(0);
        // A parked service and a flagged processor (counted by hand: nobody sleeps here).
        bell.parked.store(2, Ordering::SeqCst);
        bell.service_parked.store(1, Ordering::SeqCst);
        let flag = AtomicU32::new(1);
        let (word, service) = (bell.word.load(Ordering::SeqCst), bell.service_word.load(Ordering::SeqCst));
        wake_flagged(&f, 0, &flag);
        assert_eq!(bell.word.load(Ordering::SeqCst), word + 1, "the flagged waiter was not rung");
        assert_eq!(bell.service_word.load(Ordering::SeqCst), service, "a flagged ring woke the service");
        wake(&f, 0);
        assert_eq!(bell.word.load(Ordering::SeqCst), word + 2);
        assert_eq!(bell.service_word.load(Ordering::SeqCst), service + 1, "the ring missed the service");
        // No service parked: its word is left alone.
        bell.service_parked.store(0, Ordering::SeqCst);
        wake(&f, 0);
        assert_eq!(bell.service_word.load(Ordering::SeqCst), service + 1);
    }

    /// A serve hook that has a message waiting until served once.
    struct OneMessage {
        waiting: AtomicBool,
        served: AtomicU32,
    }

    impl OneMessage {
        /// A hook whose message waits.
        fn waiting() -> OneMessage {
            OneMessage {
                waiting: AtomicBool::new(true),
                served: AtomicU32::new(0),
            }
        }

        /// A hook with no message.
        fn none() -> OneMessage {
            OneMessage {
                waiting: AtomicBool::new(false),
                served: AtomicU32::new(0),
            }
        }
    }

    impl Serve for OneMessage {
        fn serve(&self) -> usize {
            self.served.fetch_add(1, Ordering::SeqCst);
            usize::from(self.waiting.swap(false, Ordering::SeqCst))
        }
        fn has_messages(&self) -> bool {
            self.waiting.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_poller_that_stops_leaves_no_message_unrung() {
        let f = fabric();
        let bell = f.bell(0);
        let before = park_service_by_hand(bell);
        // The wait ends at its first check, holding what it waited for: it must not serve
        // then, so the message it finds is rung for.
        let hook = OneMessage::waiting();
        Seam::new(&f, 0)
            .serving(&hook)
            .until(WaitFor::LocalLock { id: 0 }, || true)
            .unwrap();
        assert_eq!(hook.served.load(Ordering::SeqCst), 0, "served holding the lock");
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "a waiting message was not rung for");
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 0, "the poller stayed counted");
        // Nothing waits: no ring.
        hook.waiting.store(false, Ordering::SeqCst);
        Seam::new(&f, 0)
            .serving(&hook)
            .until(WaitFor::LocalLock { id: 0 }, || true)
            .unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "rang for nothing");
    }

    /// A poller that stops while another is still counted leaves what it did not take to
    /// that one, as a sender does; the last to stop rings for it.
    #[test]
    fn a_poller_that_stops_beside_another_leaves_the_message_to_it() {
        let f = fabric();
        let bell = f.bell(0);
        let before = park_service_by_hand(bell);
        let hook = OneMessage::waiting();
        // Another thread of the node spins in a serving wait (counted by hand).
        bell.pollers.store(1, Ordering::SeqCst);
        Seam::new(&f, 0)
            .serving(&hook)
            .until(WaitFor::LocalLock { id: 0 }, || true)
            .unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before, "rang beside a poller");
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 1, "the other poller's count changed");
        // That one stops too, its message still waiting: now it is rung for.
        bell.pollers.store(0, Ordering::SeqCst);
        Seam::new(&f, 0)
            .serving(&hook)
            .until(WaitFor::LocalLock { id: 0 }, || true)
            .unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "the last poller did not ring");
    }

    #[test]
    fn placement_binds_each_processor_to_a_core_of_its_own() {
        let cpus = [0, 1, 2, 3];
        assert_eq!(placement(2, 1, 0, &cpus[..2]), Some(vec![0]));
        assert_eq!(placement(2, 1, 1, &cpus[..2]), Some(vec![1]));
        assert_eq!(placement(2, 2, 1, &cpus), Some(vec![2, 3]));
        assert_eq!(placement(1, 2, 0, &cpus[..2]), Some(vec![0, 1]));
        // The cores a process may use need not start at 0.
        assert_eq!(placement(2, 1, 1, &[4, 6]), Some(vec![6]));
        // More processors than cores, a single processor, a node out of range: unbound.
        assert_eq!(placement(2, 2, 0, &cpus[..2]), None);
        assert_eq!(placement(1, 1, 0, &cpus), None);
        assert_eq!(placement(2, 1, 2, &cpus), None);
        assert_eq!(placement(usize::MAX, 2, 0, &cpus), None);
    }

    #[test]
    fn a_core_claimed_by_one_node_is_not_claimed_by_another_until_given_back() {
        // Cores far beyond any test host's, so that no running cluster holds them.
        let a = CoreClaim::take(vec![9_000, 9_001]).expect("free cores");
        assert_eq!(a.cores(), &[9_000, 9_001]);
        assert!(CoreClaim::take(vec![9_001, 9_002]).is_none(), "a held core was claimed again");
        let b = CoreClaim::take(vec![9_002]).expect("a free core");
        drop(a);
        let c = CoreClaim::take(vec![9_000, 9_001]).expect("cores given back");
        drop((b, c));
    }

    /// A serve hook whose message stays: serving it leaves it waiting.
    struct StuckMessage {
        served: AtomicU32,
    }

    impl Serve for StuckMessage {
        fn serve(&self) -> usize {
            self.served.fetch_add(1, Ordering::SeqCst);
            0
        }
        fn has_messages(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_request_to_the_own_node_is_served_by_its_sender_and_rings_no_bell() {
        let f = fabric();
        let bell = f.bell(0);
        let before = park_service_by_hand(bell);
        let hook = OneMessage::waiting();
        hook.waiting.store(false, Ordering::SeqCst);
        let seam = Seam::new(&f, 0).serving(&hook);
        // The "send": the message lands, and its sender rings as every send does.
        seam.send_then_serve(
            || {
                hook.waiting.store(true, Ordering::SeqCst);
                wake_for_message(&f, 0);
                Ok::<_, ()>(true)
            },
            || unreachable!("the ring had room"),
        )
        .unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before, "the sender's own message woke the service");
        assert_eq!(hook.served.load(Ordering::SeqCst), 1, "the sender did not serve its message");
        assert!(!hook.has_messages());
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 0, "the sender stayed counted as a poller");
        // What the sender cannot take is rung for.
        let stuck = StuckMessage { served: AtomicU32::new(0) };
        let sent = |ok: bool| {
            wake_for_message(&f, 0);
            Ok::<_, ()>(ok)
        };
        Seam::new(&f, 0).serving(&stuck).send_then_serve(|| sent(true), || unreachable!()).unwrap();
        assert_eq!(stuck.served.load(Ordering::SeqCst), 1);
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "a message left behind was not rung for");
        // A seam that does not serve sends as any sender does: the message rings.
        Seam::new(&f, 0).send_then_serve(|| unreachable!(), || sent(true).map(|_| ())).unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 2, "a plain send rang no bell");
        // A full ring: the waiting send runs uncounted, so its own ring goes out.
        hook.waiting.store(false, Ordering::SeqCst);
        let seam = Seam::new(&f, 0).serving(&hook);
        seam.send_then_serve(
            || Ok::<_, ()>(false),
            || {
                assert_eq!(bell.pollers.load(Ordering::SeqCst), 0, "counted while it may wait");
                sent(true).map(|_| ())
            },
        )
        .unwrap();
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 3, "the waiting send rang no bell");
        // A failed send serves nothing and leaves no count.
        let served = hook.served.load(Ordering::SeqCst);
        assert_eq!(seam.send_then_serve(|| Err::<bool, _>(7), || unreachable!()), Err(7));
        assert_eq!(hook.served.load(Ordering::SeqCst), served, "served after a failed send");
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_oversubscribed_host_parks_the_idle_service_at_once() {
        let f = fabric();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as i32;
        // More running threads than cores.
        f.count_running(cores + 1);
        assert!(f.oversubscribed());
        // The look on entry and the park's own check, and two more per park timeout.
        let checks = checks_before_parking(&f, WaitFor::Messages);
        assert!(
            checks < LOOK_EVERY,
            "an idle service made {checks} checks on an oversubscribed host"
        );
        f.count_running(-(cores + 1));
        assert!(!f.oversubscribed());
    }

    #[test]
    fn a_wait_gives_up_when_the_cluster_aborts() {
        let f = fabric();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| Seam::new(&f, 0).until(WaitFor::Messages, || false));
            f.abort();
            assert!(matches!(waiter.join().unwrap(), Err(Aborted)));
        });
    }

    /// A processor's poll point serves its node's waiting message within a bounded amount
    /// of counted work, marks that pollers look, and serves nothing once its guard is gone.
    #[test]
    fn a_poll_point_serves_what_waits_and_stops_with_its_guard() {
        let hook = std::sync::Arc::new(OneMessage::waiting());
        // No poll point on this thread yet: counted work serves nothing.
        for _ in 0..10_000 {
            poll_point();
        }
        assert_eq!(hook.served.load(Ordering::SeqCst), 0);
        let guard = set_poll_point(hook.clone());
        // Ten million counts take far longer than POLL_EVERY_NS on any host.
        (0..10_000_000u32)
            .find(|_| {
                poll_point();
                hook.served.load(Ordering::SeqCst) > 0
            })
            .expect("the poll point never served the waiting message");
        assert!(!hook.waiting.load(Ordering::SeqCst), "the message is still waiting");
        #[cfg(feature = "mpi")]
        assert!(pollers_look(u64::MAX / 2), "the look was not recorded");
        // Nothing waits now: looks find nothing and serve nothing.
        let served = hook.served.load(Ordering::SeqCst);
        for _ in 0..100_000 {
            poll_point();
        }
        assert_eq!(hook.served.load(Ordering::SeqCst), served);
        drop(guard);
        hook.waiting.store(true, Ordering::SeqCst);
        for _ in 0..1_000_000 {
            poll_point();
        }
        assert_eq!(hook.served.load(Ordering::SeqCst), served, "served with no poll point");
    }

    /// A poll point's look counts as the node's poller while it runs (no sender rings), and
    /// rings for what waits when it stops counting.
    #[test]
    fn a_poll_point_looks_as_the_poller_and_rings_for_what_it_leaves() {
        let f = fabric();
        let bell = f.bell(0);
        let before = park_service_by_hand(bell);
        let hook = OneMessage::waiting();
        let seam = Seam::new(&f, 0).serving(&hook);
        // The look leaves the message (it handles nothing): it is rung for afterwards.
        let handled = seam.look_as_poller(|| {
            assert_eq!(bell.pollers.load(Ordering::SeqCst), 1, "the look is no poller");
            0
        });
        assert_eq!(handled, 0);
        assert_eq!(bell.pollers.load(Ordering::SeqCst), 0, "the poller stayed counted");
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "a waiting message was not rung for");
        // The look takes the message: no ring.
        seam.look_as_poller(|| hook.serve());
        assert_eq!(bell.service_word.load(Ordering::SeqCst), before + 1, "rang for nothing");
    }
}
