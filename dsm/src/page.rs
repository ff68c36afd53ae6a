//! Per-page state of one node, in one place (section 2.2): the page's home as this node
//! knows it, how often that changed, the application's access, the twin, the dirty and
//! exclusive flags, the sharing set (kept here at the home under the home-held directory)
//! and whether the home is writing the page (the directory bit home migration reads).
//!
//! Everything lives under the page's lock. One word is mirrored outside it: the home
//! *hint*, an atomic that message handlers read without the lock, because a handler must
//! never block on a page lock (a processor of this node may hold it while it waits on the
//! network, serving messages). The hint is written only under the page lock, except for
//! the first-touch transition from "no home" to a home, which every node learns the same
//! way and which never goes back. Beside it, outside the lock too, each page has a
//! *wanted* mark, which is no state of the page: it says that a handler found the lock
//! busy and deferred a message, which the lock's next release retries ([`PageTable`]).
//!
//! # Invariants (asserted by [`PageState::check`] after every transition)
//!
//! * At the home: no twin; an exclusive page is writable and not dirty; the home is
//!   "writing" exactly when the page is writable there. A page exclusive at another node
//!   (`excl_at`, non-home exclusive mode, see `engine/service.rs`) is invalid here, not
//!   exclusive, not dirty and not written: the home has never mapped it and maps it only
//!   after the holder's flush. While a recall is in flight (`recalling`) the holder may
//!   already have flushed the page itself (then `excl_at` is unset and no grant is made).
//! * Elsewhere: `excl_at` unset and no recall; an exclusive page (this node is the only
//!   sharer, the home recorded it) is writable with no twin and not dirty; any other page
//!   is writable exactly when a twin exists and the page is dirty; `home_writing` there
//!   is only CSM-None-Mg's cached copy of the home's bit (2.3.5), never this node's own.
//! * A page this node is migrating to itself (the hint's `PENDING` bit) is locked by the
//!   processor that asked for it.
//! * First touch after initialization: only the home may give a page away to its first
//!   toucher (`rehome_grant`), and only while its own processors have not mapped it
//!   since initialization ended.

use crate::ids::{NodeId, NodeSet, PageId};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// Debug trace of home changes (set `DSM_TRACE_HOMES=1`), printed when a protocol check
/// about homes fails.
pub(crate) static TRACE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn trace(f: impl FnOnce() -> String) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("DSM_TRACE_HOMES").is_some()) {
        TRACE.lock().unwrap_or_else(|e| e.into_inner()).push(f());
    }
}

/// What the application view may do with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Invalid,
    Read,
    Write,
}

/// A home hint's word when no home is known yet (first touch has not happened, or this
/// node has not heard of it).
const NO_HOME: u16 = u16::MAX;

/// The state of one page at one node.
pub(crate) struct PageState {
    /// The home as this node knows it (`None` if unknown). Exact at the home; possibly
    /// stale elsewhere under the home-held directory (requests then meet a redirect).
    pub home: Option<NodeId>,
    /// How many times this node has seen the page's home move.
    pub home_epoch: u32,
    pub access: Access,
    /// The twin, a slot of the node's slab (`Node::twins`), while the page is dirty.
    pub twin: Option<crate::sys::Slot>,
    pub dirty: bool,
    pub exclusive: bool,
    /// At the home: the home is writing the page (set at its write fault, cleared when its
    /// release downgrades the page or it leaves exclusive mode). Elsewhere: the last value
    /// the home piggybacked on a reply (CSM-None-Mg's cached directory entry, 2.3.5).
    pub home_writing: bool,
    /// Home-held directory, at the home: the nodes sharing the page.
    pub sharers: NodeSet,
    /// At the home: the other node that holds the page in exclusive mode, if one does.
    /// The master copy is stale until that node's flush lands.
    pub excl_at: Option<NodeId>,
    /// At the home: a recaller (another node, or a processor here) is recalling the page
    /// from `excl_at`: no grant is made until it reports, and while `excl_at` is still set
    /// other requests wait for the flush ([`PageState::awaits_recall`]).
    pub recalling: bool,
    /// First touch after initialization (section 2.3.1, `engine/home.rs`), at the home:
    /// no node has touched the page since the program's initialization ended, so the
    /// first node to ask (`Fetch { rehome }`) becomes its home, unless this node's own
    /// processors touch it first and keep it.
    pub rehome_grant: bool,
    /// Elsewhere: this node has not touched the page since initialization ended; its
    /// first fault asks the home to move here.
    pub rehome_ask: bool,
    /// The master copy's version. At the home it grows whenever the master copy may
    /// change: a diff or flush applied, the home starting and stopping to write it (so a
    /// copy served while the home wrote is older than the master after). A copy fetched
    /// here keeps the version its reply carried, and the home moves with it. Under home
    /// migration (diff messages, no exclusive mode away from the home, no broadcast
    /// copies: the only protocols that read it) a valid copy whose version equals the
    /// master's therefore holds the master's bytes, and a migration granted to it sends no
    /// page (`Reply::Granted`, 2.3.5). Remote-write diffs land in the master copy without
    /// the home knowing, so elsewhere the version promises nothing. A `u64`: it cannot
    /// wrap while a stale copy waits.
    pub version: u64,
}

/// Every field; of the twin, only whether there is one.
impl std::fmt::Debug for PageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageState")
            .field("home", &self.home)
            .field("home_epoch", &self.home_epoch)
            .field("access", &self.access)
            .field("twin", &self.twin.is_some())
            .field("dirty", &self.dirty)
            .field("exclusive", &self.exclusive)
            .field("home_writing", &self.home_writing)
            .field("sharers", &self.sharers)
            .field("excl_at", &self.excl_at)
            .field("recalling", &self.recalling)
            .field("rehome_grant", &self.rehome_grant)
            .field("rehome_ask", &self.rehome_ask)
            .field("version", &self.version)
            .finish()
    }
}

impl PageState {
    fn new() -> PageState {
        PageState {
            home: None,
            home_epoch: 0,
            access: Access::Invalid,
            twin: None,
            dirty: false,
            exclusive: false,
            home_writing: false,
            sharers: NodeSet::EMPTY,
            excl_at: None,
            recalling: false,
            rehome_grant: false,
            rehome_ask: false,
            version: 0,
        }
    }

    /// At the home: the master copy may change (or may have changed) from here on.
    pub fn master_changes(&mut self) {
        self.version += 1;
    }

    /// At the home: whether a request for the page waits for a recall under way: another
    /// node holds it exclusively (the master copy is stale) and a recaller has been sent
    /// for it. Once the holder's flush lands (`excl_at` clears; the recaller's report
    /// lands a flush too), nothing more will end the wait: a waiter looks again, and
    /// if the page has been granted anew meanwhile, to the same node or another, with
    /// no recall under way, it recalls the page itself (`Node::lock_for_fault`).
    pub fn awaits_recall(&self) -> bool {
        self.excl_at.is_some() && self.recalling
    }

    /// True if `me` is the page's home.
    pub fn at_home(&self, me: NodeId) -> bool {
        self.home == Some(me)
    }

    /// The page's home, where the caller relies on its being known (the page has been
    /// fetched, or is cached or written here).
    ///
    /// # Panics
    ///
    /// If this node does not know the home: the caller is broken.
    pub fn home_node(&self) -> NodeId {
        self.home
            .unwrap_or_else(|| panic!("the page's home is not known here: {self:?}"))
    }

    /// Asserts the invariants of the module doc.
    pub fn check(&self, me: NodeId) {
        if self.at_home(me) {
            assert!(self.twin.is_none(), "a home page has a twin: {self:?}");
            if self.exclusive {
                assert!(
                    self.access == Access::Write && !self.dirty,
                    "exclusive page not writable or dirty: {self:?}"
                );
            }
            assert_eq!(
                self.home_writing,
                self.access == Access::Write,
                "home-writing bit out of step with the home's access: {self:?}"
            );
            if let Some(holder) = self.excl_at {
                assert!(
                    holder != me
                        && self.access == Access::Invalid
                        && !self.exclusive
                        && !self.dirty,
                    "page exclusive at another node but mapped or written at its home: {self:?}"
                );
            }
            if self.rehome_grant {
                assert!(
                    self.access == Access::Invalid && !self.exclusive && !self.dirty,
                    "a page no node has touched since initialization is mapped at its home: {self:?}"
                );
            }
        } else {
            assert!(
                !self.rehome_grant,
                "a node that is not the page's home may give it away: {self:?}"
            );
            assert!(
                self.excl_at.is_none() && !self.recalling,
                "exclusive holder recorded away from the home: {self:?}"
            );
            let writable = self.access == Access::Write;
            if self.exclusive {
                assert!(
                    writable && self.twin.is_none() && !self.dirty,
                    "non-home exclusive page not writable, or with a twin or dirty: {self:?}"
                );
            } else {
                assert!(
                    writable == self.twin.is_some() && writable == self.dirty,
                    "non-home page state broken: {self:?}"
                );
            }
        }
    }
}

/// Bit of a home hint: this node has asked the home to migrate to it and awaits the answer.
pub(crate) const PENDING: u32 = 1 << 16;

/// The pages of one node: a lock, a home hint, a waiter flag and a *wanted* mark per page.
///
/// # Memory ordering: a busy lock's release is not missed
///
/// A message handler that finds a page's lock busy defers its message, and the lock's
/// release must retry it. The handler marks the lock wanted, issues a SeqCst fence and
/// tries the lock once more ([`PageTable::try_lock_or_want`]); every releaser unlocks,
/// issues a SeqCst fence and takes the mark ([`PageTable::take_wanted`]). The two fences
/// are ordered one way or the other: if the releaser's comes first, the second try sees
/// the lock free (or held by a later holder, whose own release then sees the mark); if the
/// handler's comes first, the releaser sees the mark and retries the deferred message. It
/// is the wait seam's sleeper/waker argument (`crate::wait`), with the second try as the
/// sleeper's last check. A handler that finds a migration to this node in flight (the
/// hint's `PENDING` bit, whose processor holds the lock until the answer and clears the
/// bit before it releases) marks the lock wanted the same way and looks at the hint again
/// as its last check ([`PageTable::want`]).
pub(crate) struct PageTable {
    states: Box<[Mutex<PageState>]>,
    hints: Box<[AtomicU32]>,
    /// Processors of this node parked on the page's lock (the waiter flag of
    /// `Seam::until_flagged`): every release of the lock wakes them, and only them.
    lock_waiters: Box<[AtomicU32]>,
    /// A message handler found the page's lock busy and deferred its message since the
    /// lock's last release.
    wanted: Box<[AtomicBool]>,
}

/// What a message handler learns about a page without taking its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hint {
    /// This node is (or, having no record, must be: see `Node::serve_fetch`) the home.
    Home,
    /// This node is waiting for a migration of the page to itself.
    Pending,
    /// Another node is the home, as far as this node knows.
    Elsewhere(NodeId),
    /// No home known.
    Unknown,
}

impl PageTable {
    pub fn new(npages: usize) -> PageTable {
        PageTable {
            states: (0..npages).map(|_| Mutex::new(PageState::new())).collect(),
            hints: (0..npages)
                .map(|_| AtomicU32::new(NO_HOME as u32))
                .collect(),
            lock_waiters: (0..npages).map(|_| AtomicU32::new(0)).collect(),
            wanted: (0..npages).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The waiter flag of processors parked on `p`'s lock.
    pub fn lock_waiters(&self, p: PageId) -> &AtomicU32 {
        &self.lock_waiters[p.index()]
    }

    /// Locks page `p` if it is free.
    pub fn try_lock(&self, p: PageId) -> Option<MutexGuard<'_, PageState>> {
        match self.states[p.index()].try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Locks page `p` for a message handler if it is free. If it is busy, marks it wanted,
    /// so that its holder's release retries the deferred message, and tries once more
    /// (type doc, "Memory ordering"). The mark may outlive a second try that succeeds:
    /// the handler's own release then takes it, at the cost of one needless retry.
    pub fn try_lock_or_want(&self, p: PageId) -> Option<MutexGuard<'_, PageState>> {
        if let Some(g) = self.try_lock(p) {
            return Some(g);
        }
        self.want(p);
        self.try_lock(p)
    }

    /// Marks `p`'s lock wanted: its next release retries the node's deferred messages.
    /// The caller looks again after this (its second try, or its second look at the hint
    /// of a migration in flight, whose processor holds the lock until the answer); see
    /// the type doc, "Memory ordering".
    pub fn want(&self, p: PageId) {
        self.wanted[p.index()].store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Called by every releaser of `p`'s lock once it has unlocked it: whether a handler
    /// marked the lock wanted since the last release (the mark is cleared, so one release
    /// answers it).
    pub fn take_wanted(&self, p: PageId) -> bool {
        fence(Ordering::SeqCst);
        let w = &self.wanted[p.index()];
        w.load(Ordering::Relaxed) && w.swap(false, Ordering::SeqCst)
    }

    /// The home hint of `p`, read without its lock.
    pub fn hint(&self, p: PageId, me: NodeId) -> Hint {
        let h = self.hints[p.index()].load(Ordering::Acquire);
        if h & PENDING != 0 {
            Hint::Pending
        } else if h as u16 == NO_HOME {
            Hint::Unknown
        } else if h == u32::from(me.0) {
            Hint::Home
        } else {
            Hint::Elsewhere(NodeId::from_usize(h as usize))
        }
    }

    /// The known home of `p` (`None` if unknown), without its lock.
    pub fn known_home(&self, p: PageId) -> Option<NodeId> {
        let h = self.hints[p.index()].load(Ordering::Acquire) as u16;
        (h != NO_HOME).then_some(NodeId(h))
    }

    /// Records `home` as `p`'s home in the page state and its hint, clearing a pending
    /// migration mark in the same store. The caller holds the page lock (`st` is its
    /// guard's state).
    pub fn set_home(&self, p: PageId, st: &mut PageState, home: NodeId) {
        trace(|| {
            format!(
                "set_home {p} : {:?} -> {home} (hint {:#x}) at {:?}",
                st.home,
                self.hints[p.index()].load(Ordering::Relaxed),
                std::thread::current().name()
            )
        });
        if st.home.is_some_and(|h| h != home) {
            st.home_epoch += 1;
        }
        st.home = Some(home);
        self.hints[p.index()].store(u32::from(home.0), Ordering::Release);
    }

    /// First touch: `p`'s home is `home`, learned without the page lock. Only moves the hint
    /// from "unknown"; returns the home the hint holds afterwards.
    pub fn learn_first_home(&self, p: PageId, home: NodeId) -> NodeId {
        trace(|| {
            format!(
                "learn_first {p} : {home} (hint {:#x}) at {:?}",
                self.hints[p.index()].load(Ordering::Relaxed),
                std::thread::current().name()
            )
        });
        match self.hints[p.index()].compare_exchange(
            NO_HOME as u32,
            u32::from(home.0),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => home,
            Err(h) => NodeId((h & !PENDING) as u16),
        }
    }

    /// Marks (or clears) a migration of `p` to this node in flight. The caller holds the
    /// page lock for as long as the mark is set.
    pub fn set_pending(&self, p: PageId, pending: bool) {
        if pending {
            self.hints[p.index()].fetch_or(PENDING, Ordering::AcqRel);
        } else {
            self.hints[p.index()].fetch_and(!PENDING, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The states a recall passes through at the home, and whether a request waits in
    /// each. The last is the one that hung a run (random_drf, notice-overflow, seed 7036,
    /// CSM-DMS, 3 x 1 threads): a home processor that waited for `excl_at` to clear slept
    /// through a recall's end, and the holder's next grant left it waiting for a flush
    /// that nobody would ask for.
    #[test]
    fn a_request_waits_for_a_recall_only_while_one_is_under_way() {
        let home = NodeId(1);
        let mut st = PageState::new();
        st.home = Some(home);
        st.excl_at = Some(NodeId(2));
        st.check(home);
        assert!(!st.awaits_recall(), "held, no recall sent: the request recalls");
        st.recalling = true;
        st.check(home);
        assert!(st.awaits_recall(), "held and being recalled: the request waits");
        // The holder flushed the page itself: the master copy is whole again.
        st.excl_at = None;
        st.check(home);
        assert!(!st.awaits_recall(), "flushed, recaller not yet back: the master is current");
        // The recaller reported, then the page was granted to the holder again.
        st.recalling = false;
        st.excl_at = Some(NodeId(2));
        st.check(home);
        assert!(!st.awaits_recall(), "granted anew, no recall sent: the request recalls");
    }
}
