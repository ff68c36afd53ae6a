//! Counters and the per-processor time breakdown (User / Protocol / Wait / Message, the
//! paper's Figure 1).
//!
//! Every runtime entry (a fault, a lock, a barrier, a flag) goes through [`Clock::enter`],
//! which charges the time since the last entry to User and the time inside to Protocol,
//! except the parts spent blocked on a reply ([`Clock::message`]) or on another processor
//! ([`Clock::wait`]). This is the one place the modeled clock will hook into.

use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Protocol counters of one node (summed over nodes in a report). A report written before
/// a counter existed reads it as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Pages fetched from their home.
    pub page_transfers: u64,
    /// Requests for a page sent to its home (fetches, with or without a migration request,
    /// and a recaller's flush with its fetch), one round trip each: more than
    /// `page_transfers` by those answered without the page (a redirect to the page's new
    /// home, a holder to recall the page from, a migration refused to, or granted to, a
    /// node whose valid copy needs no page).
    pub page_requests: u64,
    /// Pages invalidated because of write notices.
    pub invalidations: u64,
    pub twins: u64,
    pub diffs: u64,
    /// Bytes the diffs changed.
    pub diff_bytes: u64,
    /// Runs of changed words in the diffs (each charged `diff_run_ns` under the modeled
    /// clock).
    pub diff_runs: u64,
    /// Diff messages sent (diff-message data only): more than `diffs` when diffs were
    /// split over several messages, or a message was sent again to a home that moved.
    pub diff_messages: u64,
    /// Diff messages after a diff's first that found its home moved (section 2.3.5): the
    /// home migrated in the middle of a diff split over several messages.
    pub split_diff_redirects: u64,
    /// Write notices sent (one per page per destination node).
    pub write_notices: u64,
    /// Homes that moved to this node (section 2.3.5).
    pub migrations: u64,
    /// Requests this node made for a home to move to it, granted or refused.
    pub migration_attempts: u64,
    /// Homes that moved to this node because it was the first to touch the page after
    /// the program's initialization ended (section 2.3.1; not a migration of 2.3.5).
    pub rehomes: u64,
    /// Requests answered by a node that was no longer (or not yet) the page's home.
    pub redirects: u64,
    /// Messages kept for later because their page was busy at the receiver.
    pub deferred_messages: u64,
    /// Drop messages that reached a node which was no longer the page's home.
    pub stale_drops: u64,
    /// Write-notice rings that overflowed (the receiver then invalidated everything).
    pub notice_overflows: u64,
    /// Pages a home published to its broadcast buffer (CSM-ADB, section 2.3.6).
    pub pages_broadcast: u64,
    /// Fetches served from a broadcast buffer instead of the home.
    pub broadcast_hits: u64,
    /// Publications into a broadcast slot that held another page (CSM-ADB): the slot was
    /// reused, evicting that page's copy.
    pub broadcast_evictions: u64,
    pub read_faults: u64,
    pub write_faults: u64,
    /// Pages flushed to their home before the node dropped them.
    pub flushes_before_drop: u64,
    /// Write faults that took a page into exclusive mode (no twin, no dirty list).
    pub exclusive_entries: u64,
    /// Exclusive pages downgraded: a second sharer appeared, the holder dropped the page,
    /// or the program ended its initialization.
    pub exclusive_exits: u64,
    pub lock_acquires: u64,
    pub barriers: u64,
    pub flag_sets: u64,
    pub flag_waits: u64,
    /// Messages a processor handled at a poll point of its computation (under MPI, whose
    /// arrivals ring no doorbell: `wait`, "Polling while computing").
    pub polled_messages: u64,
    /// From the network layer.
    pub messages: u64,
    pub message_bytes: u64,
    pub packets: u64,
    pub net_bytes: u64,
    pub broadcasts: u64,
}

macro_rules! node_counters {
    ($($f:ident),* $(,)?) => {
        /// The live counters of one node, updated by its processors and service thread.
        #[derive(Debug, Default)]
        pub struct NodeCounters { $(pub $f: AtomicU64,)* }

        impl NodeCounters {
            pub fn snapshot(&self) -> Counters {
                Counters { $($f: self.$f.load(Ordering::Relaxed),)* ..Counters::default() }
            }
        }

        impl Counters {
            /// What was counted between `earlier` and these counters (of the same node).
            pub fn since(&self, earlier: &Counters) -> Counters {
                Counters {
                    $($f: self.$f.saturating_sub(earlier.$f),)*
                    messages: self.messages.saturating_sub(earlier.messages),
                    message_bytes: self.message_bytes.saturating_sub(earlier.message_bytes),
                    packets: self.packets.saturating_sub(earlier.packets),
                    net_bytes: self.net_bytes.saturating_sub(earlier.net_bytes),
                    broadcasts: self.broadcasts.saturating_sub(earlier.broadcasts),
                }
            }

            pub fn add(&mut self, o: &Counters) {
                $(self.$f += o.$f;)*
                self.messages += o.messages;
                self.message_bytes += o.message_bytes;
                self.packets += o.packets;
                self.net_bytes += o.net_bytes;
                self.broadcasts += o.broadcasts;
            }
        }
    };
}

node_counters!(
    page_transfers,
    page_requests,
    invalidations,
    twins,
    diffs,
    diff_bytes,
    diff_runs,
    diff_messages,
    split_diff_redirects,
    write_notices,
    migrations,
    migration_attempts,
    rehomes,
    redirects,
    deferred_messages,
    stale_drops,
    notice_overflows,
    pages_broadcast,
    broadcast_hits,
    broadcast_evictions,
    read_faults,
    write_faults,
    flushes_before_drop,
    exclusive_entries,
    exclusive_exits,
    lock_acquires,
    barriers,
    flag_sets,
    flag_waits,
    polled_messages,
);

impl NodeCounters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where a processor's time went, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breakdown {
    pub user_ns: u64,
    pub protocol_ns: u64,
    pub wait_ns: u64,
    pub message_ns: u64,
}

impl Breakdown {
    pub fn total_ns(&self) -> u64 {
        self.user_ns + self.protocol_ns + self.wait_ns + self.message_ns
    }
}

thread_local! {
    static CLOCK: Cell<Option<ClockState>> = const { Cell::new(None) };
}

#[derive(Clone, Copy, Debug)]
struct ClockState {
    /// When the current runtime entry began (0 outside any entry).
    entered_at: u64,
    /// When the processor last left the runtime.
    left_at: u64,
    /// Nesting depth of runtime entries.
    depth: u32,
    /// Time inside the current entry already charged to Wait or Message.
    excluded: u64,
    b: Breakdown,
    /// The program's timed region ([`Clock::mark`]): when it began and ended, with the
    /// breakdown at each mark.
    begin: Option<(u64, Breakdown)>,
    end: Option<(u64, Breakdown)>,
    /// The thread's counted work (`crate::work`) at the clock's start and at each mark.
    work_start: crate::work::Tally,
    work_begin: crate::work::Tally,
    work_end: crate::work::Tally,
}

/// The timed region of one processor: where a program marked the start and the end of the
/// part it measures (SPLASH-2's programs time their parallel part from the barrier that
/// ends initialization to the last barrier of the computation), in the run's clock, and
/// where the processor's time went in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timed {
    pub begin_ns: u64,
    pub end_ns: u64,
    pub breakdown: Breakdown,
}

/// Which end of the timed region [`Clock::mark`] marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Begin,
    End,
}

/// Now, in the clock of the run: the calling processor's virtual clock under the modeled
/// clock (`crate::sched`), else the wall clock.
fn now() -> u64 {
    crate::sched::now().unwrap_or_else(crate::sys::monotonic_ns)
}

/// The per-processor clock (wall or modeled). Each processor thread starts one with
/// [`Clock::start`].
pub struct Clock;

impl Clock {
    pub fn start() {
        // Handler time stolen before the processor's clock starts is outside its run.
        crate::sched::take_stolen();
        crate::sched::reset_work_carry();
        let now = now();
        CLOCK.with(|c| {
            c.set(Some(ClockState {
                entered_at: 0,
                left_at: now,
                depth: 0,
                excluded: 0,
                b: Breakdown::default(),
                begin: None,
                end: None,
                work_start: crate::work::tally(),
                work_begin: [0; crate::work::MAX_KINDS],
                work_end: [0; crate::work::MAX_KINDS],
            }))
        });
    }

    /// Stops the clock and returns the breakdown of the whole run, and of the timed
    /// region if the program marked both of its ends, with the work the processor counted
    /// in the region (else in the whole run).
    pub fn stop() -> (Breakdown, Option<Timed>, crate::work::Tally) {
        crate::sched::user_burst();
        assert_eq!(
            crate::sched::take_stolen(),
            0,
            "handler time stolen from a processor outside the runtime"
        );
        let now = now();
        CLOCK.with(|c| match c.take() {
            Some(mut s) => {
                s.b.user_ns += now - s.left_at;
                let timed = match (s.begin, s.end) {
                    (Some((begin_ns, b0)), Some((end_ns, b1))) => Some(Timed {
                        begin_ns,
                        end_ns,
                        breakdown: Breakdown {
                            user_ns: b1.user_ns - b0.user_ns,
                            protocol_ns: b1.protocol_ns - b0.protocol_ns,
                            wait_ns: b1.wait_ns - b0.wait_ns,
                            message_ns: b1.message_ns - b0.message_ns,
                        },
                    }),
                    _ => None,
                };
                let work = if timed.is_some() {
                    crate::work::between(&s.work_begin, &s.work_end)
                } else {
                    crate::work::between(&s.work_start, &crate::work::tally())
                };
                (s.b, timed, work)
            }
            None => (Breakdown::default(), None, [0; crate::work::MAX_KINDS]),
        })
    }

    /// Marks one end of the program's timed region at this moment: the computation since
    /// the last runtime entry is charged first (a mark is a runtime entry, and under the
    /// modeled clock a point where other processors may run), so the breakdown at the
    /// mark is complete. Panics with the reason if the marks come out of order.
    pub fn mark(which: Mark) {
        drop(Self::enter());
        let now = now();
        CLOCK.with(|c| {
            let Some(mut s) = c.get() else {
                return;
            };
            match which {
                Mark::Begin => {
                    assert!(
                        s.begin.is_none(),
                        "the timed region was started twice on this processor: call \
                         Proc::start_timing once, after the barrier that ends initialization"
                    );
                    s.begin = Some((now, s.b));
                    s.work_begin = crate::work::tally();
                }
                Mark::End => {
                    assert!(
                        s.begin.is_some(),
                        "the timed region was stopped before it was started: call \
                         Proc::start_timing before Proc::stop_timing"
                    );
                    assert!(
                        s.end.is_none(),
                        "the timed region was stopped twice on this processor: call \
                         Proc::stop_timing once, after the computation's last barrier"
                    );
                    s.end = Some((now, s.b));
                    s.work_end = crate::work::tally();
                }
            }
            c.set(Some(s));
        });
    }

    /// Enters the runtime; the returned guard leaves it.
    ///
    /// Under the modeled clock, the first entry adds the processor's computation since it
    /// last left the runtime to its clock, and lets any processor whose clock is now
    /// smaller run first (`crate::sched`). Handler time the node's service took from this
    /// processor meanwhile counts as Message time.
    ///
    /// # Time adds up
    ///
    /// Every nanosecond of a processor's clock between [`Clock::start`] and
    /// [`Clock::stop`] is counted in exactly one category: outside the runtime as User;
    /// inside an entry as Wait or Message where a section says so ([`Clock::wait`],
    /// [`Clock::message`]), as Message where it is handler time stolen from it while it
    /// was parked (`crate::sched::steal`, taken at each section's ends), and as Protocol
    /// for the rest of the entry. So a processor's breakdown sums to its elapsed time.
    pub fn enter() -> Entry {
        let outer = CLOCK.with(|c| c.get().is_some_and(|s| s.depth == 0));
        if outer {
            crate::sched::user_burst();
        }
        let now = now();
        CLOCK.with(|c| {
            if let Some(mut s) = c.get() {
                if s.depth == 0 {
                    s.b.user_ns += now - s.left_at;
                    s.entered_at = now;
                    s.excluded = 0;
                }
                s.depth += 1;
                c.set(Some(s));
            }
        });
        if outer {
            crate::sched::yield_now();
            Self::take_stolen();
        }
        Entry { _private: () }
    }

    /// Counts the handler time stolen from this processor since it was last taken as
    /// Message time of the current runtime entry.
    fn take_stolen() -> u64 {
        let stolen = crate::sched::take_stolen();
        if stolen > 0 {
            CLOCK.with(|c| {
                if let Some(mut s) = c.get() {
                    s.b.message_ns += stolen;
                    s.excluded += stolen;
                    c.set(Some(s));
                }
            });
        }
        stolen
    }

    /// Charges the section that began at `start` (handler time stolen before it already
    /// taken): what `f` names, less the handler time stolen during it, which is Message.
    fn charge(f: impl FnOnce(&mut Breakdown, u64), start: u64) {
        let stolen = crate::sched::take_stolen();
        let now = now();
        let d = now - start;
        assert!(
            stolen <= d,
            "{stolen} ns of handler time stolen in a section of {d} ns"
        );
        CLOCK.with(|c| {
            if let Some(mut s) = c.get() {
                f(&mut s.b, d - stolen);
                s.b.message_ns += stolen;
                s.excluded += d;
                c.set(Some(s));
            }
        });
    }

    /// Runs `f`, charging its time to Message (blocked on the network).
    pub fn message<T>(f: impl FnOnce() -> T) -> T {
        Self::take_stolen();
        let start = now();
        let r = f();
        Self::charge(|b, d| b.message_ns += d, start);
        r
    }

    /// Runs `f`, charging its time to Wait (blocked on another processor).
    pub fn wait<T>(f: impl FnOnce() -> T) -> T {
        Self::take_stolen();
        let start = now();
        let r = f();
        Self::charge(|b, d| b.wait_ns += d, start);
        r
    }
}

/// An open runtime entry; dropping it leaves the runtime.
#[must_use]
pub struct Entry {
    _private: (),
}

impl Drop for Entry {
    fn drop(&mut self) {
        let now = now();
        CLOCK.with(|c| {
            if let Some(mut s) = c.get() {
                s.depth -= 1;
                if s.depth == 0 {
                    let stolen = crate::sched::take_stolen();
                    s.b.message_ns += stolen;
                    s.excluded += stolen;
                    let inside = now - s.entered_at;
                    assert!(
                        s.excluded <= inside,
                        "{} ns of a runtime entry of {inside} ns charged to Wait and Message",
                        s.excluded
                    );
                    s.b.protocol_ns += inside - s.excluded;
                    s.left_at = now;
                    crate::sched::left_runtime();
                }
                c.set(Some(s));
            }
        });
    }
}
