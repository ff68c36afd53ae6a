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
//! A wait spins only while it takes a core from nobody. The launcher records in the
//! control block how many runtime threads the cluster runs (each node's processors and its
//! service thread) and how many cores they may use; every doorbell counts its node's
//! threads `asleep` in the kernel, and a waker takes the threads it wakes off that count
//! at once, so a thread woken but not yet running already counts as wanting a core. The
//! runnable threads are the cluster's threads less those asleep.
//!
//! [`Seam::until`] checks its condition with a spin hint between checks, for up to
//! `SPIN_TIME` (the idle service thread, [`WaitFor::Messages`], for up to
//! `IDLE_SPIN_TIME`), and every `LOOK_EVERY` checks it looks at the load: while the
//! runnable threads outnumber the cores it stops spinning and parks, because a thread it
//! may wait for (the service thread that must answer it, woken by its request) needs that
//! core. One exception: a waiter for a reply or ring space from a node that has a thread
//! spinning and serving there right now (so on a core) spins on for up to
//! `ANSWER_SPIN_TIME`, about a round trip, since parking would cost more than the answer
//! takes. The host may be full for reasons the counts do not see (other programs): a
//! spinner that finds `SWITCHED_OUT` passed between two looks (the kernel took its core
//! away) yields between its checks from then on, up to `YIELD_CHECKS` checks, while the
//! cluster's own threads have cores enough, so that the program shares the host with
//! the others as it did before this policy; then it parks. A
//! parked thread sleeps on its node's doorbell until woken (with a `PARK_TIMEOUT` as a
//! safety net only), then spins again under the same rule. A seam wait never yields: on a full host a
//! yield hands the core to whichever thread the kernel picks, often an idle spinner, while
//! parking hands it to the thread that has work. Without the launcher's counts (a control
//! block of a test) a wait spins its whole budget, then parks.
//!
//! While it spins and after every wake-up it *serves* its node's incoming messages if the
//! seam has a [`Serve`] hook, as Cashmere's processors poll: a waiting processor handles
//! the requests addressed to its node instead of leaving them to a service thread that may
//! be asleep, and two nodes whose rings to each other are full cannot deadlock, because
//! each drains its own while it waits for space in the other's. The cluster's abort flag
//! is checked here, once per park, and nowhere else: a wait gives up with
//! [`Aborted`] within one park of an abort.
//!
//! The modeled clock takes none of this: under it the scheduler owns every wait
//! (`crate::sched`), and the counts above are neither read nor written.
//!
//! # Sleepers and wakers
//!
//! Every node has one doorbell in the cluster's control block (`crate::control`): a futex
//! `word` and a count of `parked` threads, and a second pair, `service_word` and
//! `service_parked`, for its idle service thread alone. Every parked thread of the node
//! sleeps on `word`, except the service thread waiting for messages, which sleeps on
//! `service_word`. Every event that can make a waiter ready rings the doorbell of the
//! waiter's node:
//!
//! | Event                                   | Who rings                   | Whose bell      |
//! |-----------------------------------------|-----------------------------|-----------------|
//! | a reply lands in a mailbox              | the replier                 | the requester's (only if that mailbox's waiter is parked: [`wake_flagged`]) |
//! | a message lands in a ring               | the sender ([`wake_receiver`]) | the receiver's: its service word if the service is parked there, else its main word; nobody's while a thread of the receiver spins and serves |
//! | a consumer frees ring space             | the consumer                | the producer's  |
//! | a synchronization word is written       | the writer (`Net::ring_bells`) | every receiver's that may wait |
//! | a [`SeamLock`] is unlocked              | the unlocker                | its own (only if one of its waiters is parked) |
//! | a node-local barrier completes          | the last arriver            | its own (only if one of its waiters is parked) |
//! | a page lock is released                 | the releaser                | its own (its lock's waiters if parked; a recall's flush waiters and the service only as `engine`, "Wake-ups on a page's release", says) |
//! | the service thread is told to stop      | the stopper                 | its own         |
//! | the cluster aborts                      | `Control::abort`            | every node's    |
//!
//! A ring of a word wakes every thread parked on it; each re-checks its own condition and
//! parks again if it is not ready. [`wake`] rings both words of the bell. Wake-ups are
//! cheap when nobody is parked: one fence and a load or two.
//!
//! # Messages to a node that polls
//!
//! A thread that spins and serves (a processor with a [`Serve`] hook, or the idle service)
//! counts itself in its doorbell's `serving` while it spins. A sender that finds `serving`
//! non-zero after landing its message (and a SeqCst fence) rings nobody: it sets the
//! bell's `mail` flag, and looks at `serving` once more, ringing as usual if it has
//! dropped to zero meanwhile. A spinner swaps `mail` to zero before each time it serves,
//! and when it stops spinning it leaves `serving` (SeqCst) and swaps `mail`: if it was
//! set, it rings its own bell ([`wake`]). In the single total order of those SeqCst
//! operations either the sender's second look comes after the spinner left (the sender
//! rings) or the sender's `mail` store comes before the spinner's last swap (the spinner
//! rings), so a message is never left with nobody serving and nobody woken.
//!
//! # Memory ordering: no lost wake-up
//!
//! A sleeper reads the bell `word` (or `service_word`), increments `parked` (or
//! `service_parked`, and the waker's flag, if it waits on one), issues a SeqCst fence, checks its condition, and only then sleeps, on the
//! condition that `word` still holds the value it read. A waker makes the condition true,
//! issues a SeqCst fence, and reads `parked` (or the flag); if it is non-zero it increments
//! `word` and wakes the futex. The two fences are ordered one way or the other in the single
//! total order of SeqCst operations: if the waker's comes first, the sleeper's check sees
//! the condition and does not sleep; if the sleeper's comes first, the waker sees the
//! sleeper counted and increments `word`, so the sleeper's futex wait either returns at once
//! (the word changed since it read it) or is woken. Either way no wake-up is lost, and the
//! timeout is never what makes progress.

use crate::control::Control;
use crate::sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a waiter spins before it parks, while every runnable thread of the cluster
/// has a core: about as long as the yielding phase this policy replaced lasted on an idle
/// host, long enough to outlast the imbalance at a barrier (waking a thread on an idle
/// core of a virtual machine costs tens of microseconds).
const SPIN_TIME: Duration = Duration::from_millis(2);
/// How long the idle service thread spins before it parks, under the same condition.
const IDLE_SPIN_TIME: Duration = Duration::from_micros(100);
/// How long a waiter spins on a full host when the thread that answers it spins (so has a
/// core): about a round trip to a polling peer.
const ANSWER_SPIN_TIME: Duration = Duration::from_micros(20);
/// A spinner that finds this much time passed between two looks (a few dozen checks,
/// well under a microsecond of work) was switched out: the host's cores are taken, by
/// this cluster or by anything else, and it parks.
const SWITCHED_OUT: Duration = Duration::from_micros(30);
/// Checks a waiter makes yielding its core in between, once it found the host full for
/// reasons of its own (`SWITCHED_OUT`), before it parks.
const YIELD_CHECKS: u32 = 3_600;
/// A spinning waiter looks at the cluster's load once every this many checks.
const LOOK_EVERY: u32 = 16;
/// Tries of a fabric lock word with a spin hint before its waiter yields between tries.
const LOCK_WORD_SPINS: u32 = 400;
/// A spinning waiter serves its node's messages once every this many checks.
const SERVE_EVERY: u32 = 32;
/// The longest a parked thread sleeps before it looks again: a safety net, never the
/// reason a wait ends (see the module doc).
const PARK_TIMEOUT: Duration = Duration::from_millis(20);
/// A wait that lasts this long is reported once on standard error, naming what it waits
/// for: a hang should say what hangs.
const STALL_REPORT: Duration = Duration::from_secs(30);

pub(crate) use crate::sched::WaitFor;

/// A wait gave up: the cluster aborted (another node failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", crate::control::ABORT_MESSAGE)]
pub(crate) struct Aborted;

/// Handles a node's waiting incoming messages; returns how many there were. The engine
/// implements it; a seam with this hook serves while it waits.
pub(crate) trait Serve {
    fn serve(&self) -> usize;
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
        let budget = match what {
            WaitFor::Messages => IDLE_SPIN_TIME,
            _ => SPIN_TIME,
        };
        let parked_since = Instant::now();
        let mut reported = false;
        loop {
            if self.spin(what, budget, &mut ready) {
                return Ok(());
            }
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
                eprintln!(
                    "cashmere: a thread of node {} has waited {} s for {what}",
                    self.node,
                    parked_since.elapsed().as_secs()
                );
            }
        }
    }

    /// The spin phase of a wait: checks `ready` for up to `budget` while the policy lets it
    /// spin (module doc, "Policy"), serving the node's messages. True once `ready` holds.
    fn spin(&self, what: WaitFor, budget: Duration, ready: &mut impl FnMut() -> bool) -> bool {
        // A processor that serves, or the idle service, handles its node's messages while
        // it spins: count it, so that a sender need not wake anybody and a waiter for this
        // node's answer knows the answer needs no wake-up.
        let _serving = (self.serve.is_some() || what == WaitFor::Messages)
            .then(|| Serving::new(self.control, self.node));
        let start = Instant::now();
        let mut last = start;
        let mut yielding = false;
        for check in 1u32.. {
            if ready() {
                return true;
            }
            if check % SERVE_EVERY == 0 {
                self.take_mail();
                self.serve_now();
                // Serving is work, not a switch-out: the next look measures from here.
                last = Instant::now();
            }
            if yielding {
                if check > YIELD_CHECKS || !self.may_spin(what, Duration::ZERO, budget) {
                    return false;
                }
                std::thread::yield_now();
                continue;
            }
            if check % LOOK_EVERY == 1 {
                let now = Instant::now();
                let switched_out = now - last >= SWITCHED_OUT;
                last = now;
                if !self.may_spin(what, now - start, budget) {
                    return false;
                }
                // Something outside the cluster wants the cores too (a spin of a round
                // trip's length is still worth it): the idle service parks; a waiter
                // gives its core away between checks for a while, as long as the
                // cluster's own threads have cores enough, then parks.
                let host_full = switched_out
                    || (now - start >= ANSWER_SPIN_TIME
                        && self.control.load().is_some_and(|(cores, _)| host_full(cores)));
                if host_full {
                    if what == WaitFor::Messages {
                        return false;
                    }
                    yielding = true;
                }
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Clears the node's mail flag before serving (module doc, "Messages to a node that
    /// polls"): what the flag announced is served next.
    fn take_mail(&self) {
        if self.serve.is_some() {
            self.control.bell(self.node).mail.swap(0, Ordering::SeqCst);
        }
    }

    /// Whether a waiter that has spun for `spun` of its `budget` may go on spinning
    /// (module doc, "Policy").
    fn may_spin(&self, what: WaitFor, spun: Duration, budget: Duration) -> bool {
        if spun >= budget {
            return false;
        }
        let Some((cores, runnable)) = self.control.load() else {
            // The launcher did not say how many threads share how many cores.
            return true;
        };
        if runnable <= cores {
            return true;
        }
        // Every core is wanted. A waiter whose answer comes from a thread that is spinning
        // at the other node now (so on a core) still spins a round trip's worth: parking
        // would cost more than the answer takes.
        match what {
            WaitFor::Reply { to, .. } | WaitFor::RingSpace { to } => {
                spun < ANSWER_SPIN_TIME
                    && self.control.bell(to).serving.load(Ordering::Relaxed) > 0
            }
            _ => false,
        }
    }

    /// Registers as parked, checks `ready` once more, and sleeps on the bell unless it
    /// holds (module doc, "no lost wake-up"). The idle service sleeps on the bell's service
    /// word, every other waiter on its main word. Returns what `ready` said.
    fn park(
        &self,
        what: WaitFor,
        flag: Option<&AtomicU32>,
        ready: &mut impl FnMut() -> bool,
    ) -> bool {
        let bell = self.control.bell(self.node);
        let (word, parked) = match what {
            WaitFor::Messages => (&bell.service_word, &bell.service_parked),
            _ => (&bell.word, &bell.parked),
        };
        let seen = word.load(Ordering::SeqCst);
        if let Some(f) = flag {
            f.fetch_add(1, Ordering::SeqCst);
        }
        parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let now_ready = ready();
        if !now_ready && !self.control.aborted() {
            bell.asleep.fetch_add(1, Ordering::SeqCst);
            // A waker that woke this thread took it off `asleep` already.
            if !sys::futex_wait(word, seen, Some(PARK_TIMEOUT)) {
                bell.leave_sleep(1);
            }
        }
        parked.fetch_sub(1, Ordering::SeqCst);
        if let Some(f) = flag {
            f.fetch_sub(1, Ordering::SeqCst);
        }
        now_ready
    }
}

/// How often a process looks again at the host's runnable threads (`host_full`).
const HOST_LOOK: Duration = Duration::from_millis(5);

/// Whether more threads of the whole host are runnable than `cores` (other programs
/// included), as `/proc/loadavg` said at most `HOST_LOOK` ago: read once per process per
/// `HOST_LOOK`, by whichever waiter asks first.
fn host_full(cores: u32) -> bool {
    use std::sync::atomic::AtomicU64;
    static READ_AT_NS: AtomicU64 = AtomicU64::new(0);
    static RUNNABLE: AtomicU32 = AtomicU32::new(0);
    let now = sys::monotonic_ns();
    let at = READ_AT_NS.load(Ordering::Relaxed);
    if now.saturating_sub(at) >= HOST_LOOK.as_nanos() as u64
        && READ_AT_NS
            .compare_exchange(at, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        RUNNABLE.store(sys::host_runnable_threads().unwrap_or(0), Ordering::Relaxed);
    }
    RUNNABLE.load(Ordering::Relaxed) > cores
}

/// A thread counted among its node's serving spinners while it lives. When it stops, it
/// rings its node's bell if a sender left a message to the spinners meanwhile (module doc,
/// "Messages to a node that polls").
struct Serving<'a> {
    control: &'a Control,
    node: usize,
}

impl<'a> Serving<'a> {
    fn new(control: &'a Control, node: usize) -> Serving<'a> {
        control.bell(node).serving.fetch_add(1, Ordering::SeqCst);
        Serving { control, node }
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let bell = self.control.bell(self.node);
        bell.serving.fetch_sub(1, Ordering::SeqCst);
        if bell.mail.swap(0, Ordering::SeqCst) != 0 {
            wake(self.control, self.node);
        }
    }
}

/// Wakes `node` after a message landed in its ring, as [`wake`] does, unless a thread of
/// the node spins and serves its messages: that one handles it, and nobody need be woken
/// (module doc, "Messages to a node that polls").
pub(crate) fn wake_receiver(control: &Control, node: usize) {
    if crate::sched::wake_now(node) {
        return;
    }
    let bell = control.bell(node);
    fence(Ordering::SeqCst);
    if bell.serving.load(Ordering::SeqCst) > 0 {
        bell.mail.store(1, Ordering::SeqCst);
        if bell.serving.load(Ordering::SeqCst) > 0 {
            return;
        }
    }
    if bell.service_parked.load(Ordering::SeqCst) != 0 {
        // The idle service handles it; the processors parked for their own conditions
        // need not wake.
        bell.ring_service();
    } else if bell.parked.load(Ordering::SeqCst) != 0 {
        // The service is busy, or waits for something else (ring space): wake the
        // processors, which serve after every wake-up, as before.
        bell.ring();
    }
}

/// Wakes `node`'s parked threads after an event they may wait for. Call it after making
/// the event visible; it costs a fence and a load when nobody is parked.
pub(crate) fn wake(control: &Control, node: usize) {
    if crate::sched::wake_now(node) {
        return;
    }
    let bell = control.bell(node);
    fence(Ordering::SeqCst);
    if bell.parked.load(Ordering::SeqCst) != 0 {
        bell.ring();
    }
    if bell.service_parked.load(Ordering::SeqCst) != 0 {
        bell.ring_service();
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
        control.bell(node).ring();
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
        if tries < LOCK_WORD_SPINS {
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

/// Gives the core away once, to shake up the interleaving of threads: the ordering tests'
/// traced transmits do it between receivers, so that a missing lock shows as a reordering.
/// It waits for nothing.
pub(crate) fn perturb_schedule() {
    std::thread::yield_now();
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

    #[test]
    fn woken_sleepers_leave_the_asleep_count_and_the_load_comes_back() {
        let f = fabric();
        // One node of 2 threads on 1 core: a waiter finds the cores taken and parks.
        f.set_threads(2, 1);
        let go = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                Seam::new(&f, 0).until(WaitFor::LocalLock { id: 0 }, || go.load(Ordering::SeqCst))
            });
            // Until the waiter sleeps. A seam wait here would park too (its own load says
            // the one core is taken) and come back only on the park timeout.
            while f.bell(0).asleep.load(Ordering::SeqCst) != 1 {
                std::hint::spin_loop();
            }
            assert_eq!(f.load(), Some((1, 1)), "an asleep thread is not runnable");
            go.store(true, Ordering::SeqCst);
            wake(&f, 0);
            waiter.join().unwrap().unwrap();
        });
        assert_eq!(f.bell(0).asleep.load(Ordering::SeqCst), 0);
        assert_eq!(f.load(), Some((1, 2)));
    }

    #[test]
    fn a_message_left_to_a_spinner_that_stops_rings_the_bell() {
        let f = fabric();
        let bell = f.bell(0);
        // A serving spinner is counted; a sender finds it and leaves the message.
        let spinner = Serving::new(&f, 0);
        bell.parked.fetch_add(1, Ordering::SeqCst);
        let seen = bell.word.load(Ordering::SeqCst);
        wake_receiver(&f, 0);
        assert_eq!(bell.word.load(Ordering::SeqCst), seen, "nobody rung while one serves");
        assert_eq!(bell.mail.load(Ordering::SeqCst), 1);
        // The spinner stops: the message must not be left with nobody woken.
        drop(spinner);
        assert_ne!(bell.word.load(Ordering::SeqCst), seen, "the stopping spinner rang");
        assert_eq!(bell.mail.load(Ordering::SeqCst), 0);
        bell.parked.fetch_sub(1, Ordering::SeqCst);
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
}
