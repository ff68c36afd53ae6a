//! The coherence engine of one node (section 2.2 of the paper): page faults, twins, diffs,
//! the dirty list, write notices, release and acquire, home migration (2.3.5), and the
//! message handlers. The strategies of section 2.3 are chosen by [`Protocol`] and live in
//! files of their own: data propagation in [`data`] (one file per strategy behind
//! `data::Data`), metadata in `crate::directory` and [`metadata`] (likewise behind
//! `metadata::Metadata`),
//! synchronization in `crate::sync`, the home policy in [`home`], adaptive broadcast in
//! `crate::broadcast`. Per-page state is in [`crate::page`], the handlers in [`service`].
//!
//! This file holds the node's state, its page locks, its copies and messages, and how it
//! learns homes; the rest is split by what it does: page faults and fetches in
//! [`faults`], exclusive mode and the home's own writing in [`exclusive`], release and
//! acquire in [`consistency`], the metadata strategy's decisions in [`metadata`], the move of homes at the end of initialization in
//! [`home`], the rules checked on a page's state in [`rules`].
//!
//! # Page states at a node
//!
//! * At the page's home the application view maps the master copy itself: `Invalid`
//!   until first touched, `Read`, or `Write`. A write at the home puts the page in the
//!   dirty list without a twin (release sends write notices, no diff) unless the home is
//!   the only sharer, in which case the page goes *exclusive*: writable with no dirty-list
//!   entry until a second sharer fetches it, which downgrades it first.
//! * Elsewhere: `Invalid`, `Read` (a clean copy), or `Write` (a twin exists and the page
//!   is in the dirty list), or `Write` in exclusive mode: the home granted this node the
//!   page as its only sharer, so it has no twin and no dirty-list entry until the home
//!   recalls it for a second sharer or this node drops it, flushing the whole page home
//!   either way (`service.rs`, "Exclusive mode away from the home").
//!
//! # Rules (asserted where a check is cheap)
//!
//! * The runtime reads and writes page contents only through the alias (the wire view of
//!   this node's heap), by raw-pointer copies: never a Rust reference over bytes that the
//!   node's processors or remote writers may change at the same time.
//! * A page is write-protected before it is diffed, so no write is lost between the diff
//!   and the downgrade; a dirty page is flushed to its home before the node drops it.
//! * A message handler never blocks: it takes a page lock only with `try_lock`, and a
//!   message that finds its page busy (or a migration to this node in flight) is deferred
//!   and retried, in order per page, when the lock is released (below, "Wake-ups on a
//!   page's release"). A handler never sends a request (it replies, or sends one-way
//!   messages).
//! * A processor waits on the network while holding a page lock only for requests about
//!   that page: to its (believed) home, or (`Recall`, non-home exclusive mode in
//!   `service.rs`) to the node the home named as the page's exclusive holder; and never
//!   while this node is the page's home. So the home's own lock holders never wait on the
//!   network, and a deferred request at the home is retried in bounded time. A recall
//!   cannot deadlock: the holder's handler needs the holder's page lock, which the
//!   holder's processors hold across a network wait only to flush the page home when they
//!   drop it, and the home never defers that flush behind the recall.
//! * The home of a page changes only under the page lock of the home that gives it away
//!   (which must not be writing it) and of the node that takes it (which asked for it).
//! * Reception (remote-write data): a node receives remote writes into its copy of a page
//!   exactly while it is the page's home, and a first-touch claimant starts receiving only
//!   once it learns that it won (`Node::learn_first_home`), never while its claim is in
//!   flight. A node receiving a page it is not home of would take other nodes' diffs into
//!   its working copy; its own next diff, against a twin taken before they landed, would
//!   then carry their words as its own and overwrite later writes at the home (a lost
//!   update). Asserted at every release of a page lock (`Node::check_reception`).
//!
//! # Wake-ups on a page's release
//!
//! Two kinds of waiter wait on a page lock's holder, and they are woken apart:
//!
//! * *For the lock* to be free: a processor in [`Node::lock_page`] (counted in the page's
//!   own waiter flag, `PageTable::lock_waiters`), and a message a handler deferred because
//!   it found the lock busy (the handler marks the lock wanted first,
//!   `PageTable::try_lock_or_want`). **Every** release of the page wakes the first and
//!   takes the mark, retrying the node's deferred messages once per mark.
//! * *For the page's state* to change: a home processor waiting for a recall's flush to
//!   land (`flush_waiters`, [`Node::lock_for_fault`]), and a message a handler deferred
//!   after looking at the page under its lock (a fetch or diff of a page being recalled).
//!   Only a release that may have changed a page (every release but
//!   [`PageGuard::release_unchanged`] and [`PageGuard::defer`]) wakes them, the node's
//!   all at once (they then look again).
//!
//! So a release that changed nothing wakes only waiters for that page's lock, which take
//! it (progress) or find it held again (then its holder's release wakes them), and retries
//! a message deferred on that busy lock once, whose handler then takes the lock; it never
//! wakes a waiter for the state, nor a waiter for another page's lock. The handler that
//! defers a fetch while a recall is under way and the processor that looks for the
//! recall's end therefore cannot wake each other, which under the modeled clock (each
//! wake an event at the same virtual time) would keep time from moving. (Waking every
//! lock waiter of the node would do the same: a woken processor serves the node's
//! messages, so two processors waiting for locks held across network waits would wake
//! each other without end, each retrying a deferred fetch whose unchanged release woke
//! the other.) A handler that defers on the page's state records its deferral before it
//! releases the lock ([`PageGuard::defer`]), so that a change made right after its look
//! retries it; and the thread that serves messages passes again over the deferred ones if
//! a release asked for a retry during its pass, when the retry's wake-up may have found it
//! serving.

mod adb;
mod consistency;
mod data;
mod exclusive;
mod faults;
mod home;
mod metadata;
mod rules;
mod service;

use crate::config::Protocol;
use crate::directory::Directory;
use crate::fault::Protector;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::net::{MsgError, Net, Region};
pub(crate) use crate::page::Access;
use crate::page::{PageState, PageTable};
use crate::stats::{Clock, NodeCounters};
use crate::sync::SyncState;
use crate::wait::{Seam, SeamLock, Serve, WaitFor};
use crate::wire::{Msg, Reply};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A shared allocation, for error messages.
#[derive(Clone, Debug)]
pub(crate) struct Allocation {
    pub offset: usize,
    pub len: usize,
    pub what: String,
}

/// Network regions of the protocol, allocated in the same order on every node.
pub(crate) struct Regions {
    /// Master copies (remote-write data): the heap, received at each page's home.
    pub data: Option<Region>,
    /// Adaptive data broadcast (CSM-ADB): the broadcast buffers and page epochs.
    pub broadcast: Option<crate::broadcast::Broadcast>,
}

/// One node's engine.
pub(crate) struct Node {
    /// This node, as homes, holders and sharing sets name it.
    pub id: NodeId,
    pub nodes: usize,
    pub procs: usize,
    pub page_bytes: usize,
    pub npages: usize,
    pub protocol: Protocol,
    /// The protocol's metadata strategy ([`metadata::strategy`]), chosen once.
    metadata: &'static dyn metadata::Metadata,
    /// The protocol's data strategy ([`data::strategy`]), chosen once.
    data: &'static dyn data::Data,
    pub net: Net,
    /// Address of the application view of the heap in this process.
    pub app_base: usize,
    /// Address of this node's heap in the wire view (the runtime's alias).
    alias: usize,
    pages: PageTable,
    dirty: Mutex<Vec<PageId>>,
    /// Pages flushed before being dropped, whose write notices are owed at the next release,
    /// with the sharers to notify.
    owed: Mutex<Vec<(PageId, NodeSet)>>,
    releasing: SeamLock<()>,
    acquiring: SeamLock<()>,
    pub dir: Directory,
    pub sync: SyncState,
    pub regions: Regions,
    pub counters: NodeCounters,
    pub allocations: Vec<Allocation>,
    pub heap_used: usize,
    pub protector: Protector,
    /// The twins of this node's dirty pages: a slot per twin, none made in a fault with
    /// the global allocator (`sys::slab`).
    twins: crate::sys::Slab,
    pub stopping: AtomicBool,
    /// Set once this node has passed the run's final barrier: it sends nothing after it.
    finished: AtomicBool,
    service: service::Service,
    /// Home processors of this node parked until a recall's flush lands (see
    /// [`Node::lock_for_fault`]): only a release that may have changed a page wakes them.
    flush_waiters: std::sync::atomic::AtomicU32,
    /// The most bytes a `Diff` message takes: the message limit, or less by a test knob
    /// (`crate::config::TestKnobs::diff_message_bytes`).
    pub diff_message_bytes: usize,
    /// A homes file named the homes ([`Node::preset_home`]): the end of initialization
    /// chooses none (`home.rs`).
    homes_fixed: AtomicBool,
    /// The program has ended its initialization (`home.rs`).
    initialized: AtomicBool,
}

/// A valid copy's version of the master copy (`PageState::version`) and, in a build with
/// debug assertions, a hash of its bytes (0 otherwise): what a migration request says of
/// the requester's copy.
#[derive(Clone, Copy, Debug)]
struct CopyVersion {
    version: u64,
    check: u64,
}

/// What a fetch asks of the page's home beyond the page.
#[derive(Clone, Copy, Debug, Default)]
struct Want {
    /// Move the home here (home migration, section 2.3.5).
    migrate: bool,
    /// Let this node hold the page in exclusive mode (section 2.2).
    exclusive: bool,
    /// Move the home here if no node has touched the page since initialization ended
    /// (first touch after initialization, section 2.3.1; `home.rs`).
    rehome: bool,
}

/// Which mailbox the calling thread uses for requests: processors have their own; every
/// other thread of the node (setup, the fault path outside processors) uses the spare one.
pub(crate) fn my_slot(node: &Node) -> u16 {
    SLOT.with(Cell::get).unwrap_or(node.procs as u16)
}

thread_local! {
    /// The calling processor's mailbox slot (its index within its node), if it is one.
    static SLOT: Cell<Option<u16>> = const { Cell::new(None) };
}

/// Marks the calling thread as processor `local` of its node (its mailbox slot), or as no
/// processor with `None`.
pub(crate) fn set_current_slot(local: Option<u16>) {
    SLOT.with(|c| c.set(local));
}

/// A locked page: the guard wakes what waits on the page when it is released (module
/// doc, "Wake-ups on a page's release").
pub(crate) struct PageGuard<'a> {
    node: &'a Node,
    page: PageId,
    st: Option<MutexGuard<'a, PageState>>,
    /// Released with nothing changed: wakes only what waits for the lock itself (see
    /// [`PageGuard::release_unchanged`]).
    unchanged: bool,
}

impl PageGuard<'_> {
    /// Releases the page having changed nothing: wakes the processors waiting for its lock
    /// and retries a message deferred because the lock was busy, but wakes no waiter for
    /// the page's state and retries no message deferred on it. (Waking those would make
    /// them look again, find nothing changed, and wake this holder's kind in turn: under
    /// the modeled clock, time would never move.)
    pub(crate) fn release_unchanged(mut self) {
        self.unchanged = true;
    }

    /// A handler defers its message after looking at the page (a recall is under way):
    /// records the deferral before it releases the page unchanged, so that whoever
    /// changes the page next, even before the message is queued, retries it.
    pub(crate) fn defer(self) {
        self.node.service.deferring();
        self.release_unchanged();
    }
}

impl std::ops::Deref for PageGuard<'_> {
    type Target = PageState;
    fn deref(&self) -> &PageState {
        self.st.as_ref().expect("page guard")
    }
}

impl std::ops::DerefMut for PageGuard<'_> {
    fn deref_mut(&mut self) -> &mut PageState {
        self.st.as_mut().expect("page guard")
    }
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        if let Some(st) = self.st.as_ref() {
            if !std::thread::panicking() {
                self.node.check_reception(self.page, st);
            }
        }
        drop(self.st.take());
        rules::unlocked(self.page);
        let seam = self.node.net.seam();
        // The lock is free, whatever changed.
        seam.wake_flagged(self.node.pages.lock_waiters(self.page));
        let wanted = self.node.pages.take_wanted(self.page);
        let changed = !self.unchanged;
        if changed {
            seam.wake_flagged(&self.node.flush_waiters);
        }
        self.node.service.page_released(&seam, wanted, changed);
    }
}

impl Node {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        procs: usize,
        page_bytes: usize,
        protocol: Protocol,
        net: Net,
        app_base: usize,
        alias: usize,
        allocations: Vec<Allocation>,
        heap_used: usize,
        dir: Directory,
        sync: SyncState,
        regions: Regions,
        protector: Protector,
        twins: crate::sys::Slab,
    ) -> Node {
        // Stall and deadlock reports name the kinds of the messages waited for.
        crate::sched::name_message_kinds(crate::wire::kind_name);
        let nodes = net.nodes();
        let npages = heap_used.div_ceil(page_bytes);
        Node {
            id: NodeId::from_usize(id),
            nodes,
            procs,
            page_bytes,
            npages,
            protocol,
            metadata: metadata::strategy(protocol.metadata),
            data: data::strategy(protocol.data),
            net,
            app_base,
            alias,
            pages: PageTable::new(npages),
            dirty: Mutex::new(Vec::new()),
            owed: Mutex::new(Vec::new()),
            releasing: SeamLock::new(()),
            acquiring: SeamLock::new(()),
            dir,
            sync,
            regions,
            counters: NodeCounters::default(),
            allocations,
            heap_used,
            protector,
            twins,
            stopping: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            service: service::Service::default(),
            flush_waiters: std::sync::atomic::AtomicU32::new(0),
            diff_message_bytes: crate::net::MAX_MESSAGE_BYTES,
            homes_fixed: AtomicBool::new(false),
            initialized: AtomicBool::new(false),
        }
    }

    /// Locks page `p` for a processor, bringing its home up to date with what this node
    /// knows outside the lock (a first-touch home learned meanwhile; under the replicated
    /// directory, the directory's home word, which a migration rewrites).
    fn lock_page(&self, p: PageId) -> PageGuard<'_> {
        let mut st = self.pages.try_lock(p);
        if st.is_none() {
            self.seam()
                .until_flagged(
                    WaitFor::PageLock { page: p },
                    self.pages.lock_waiters(p),
                    || {
                        st = self.pages.try_lock(p);
                        st.is_some()
                    },
                )
                .unwrap_or_else(|e| Self::net_err(e));
        }
        let mut g = self.guard(p, st.expect("the wait ends with the lock taken"), true);
        self.refresh_home(p, &mut g);
        g
    }

    /// The guard of page `p`'s lock, just taken (`st`) by a processor or (`by_processor`
    /// false) a message handler.
    fn guard<'a>(
        &'a self,
        p: PageId,
        st: MutexGuard<'a, PageState>,
        by_processor: bool,
    ) -> PageGuard<'a> {
        rules::locked(p, by_processor);
        PageGuard {
            node: self,
            page: p,
            st: Some(st),
            unchanged: false,
        }
    }

    /// Locks page `p` for a message handler, if it is free; if not, marks it wanted, so
    /// that its release retries the message the handler defers.
    fn try_lock_page(&self, p: PageId) -> Option<PageGuard<'_>> {
        let mut g = self.guard(p, self.pages.try_lock_or_want(p)?, false);
        self.refresh_home(p, &mut g);
        Some(g)
    }

    fn refresh_home(&self, p: PageId, st: &mut PageState) {
        if st.at_home(self.id) {
            return; // the home is the authority on its own pages
        }
        let known = match self.dir.home_word(&self.net, p) {
            Some(h) => Some(h),
            None => self.pages.known_home(p),
        };
        if let Some(h) = known {
            if st.home != Some(h) && (h != self.id || st.home.is_none()) {
                if st.home.is_none() {
                    // First touch, won by this node (or another) meanwhile.
                    self.learn_first_home(p, h);
                }
                self.pages.set_home(p, st, h);
            }
        }
    }

    /// The first byte of page `p` in the alias.
    fn alias_ptr(&self, p: PageId) -> *mut u8 {
        assert!(p.index() < self.npages, "{p} outside the heap");
        (self.alias + p.index() * self.page_bytes) as *mut u8
    }

    /// A twin of this node's page `p`: a slot of the node's slab (`sys::slab`) holding a
    /// copy taken through the alias by a raw copy. The caller holds the page lock and the
    /// page is not yet writable here, so no processor of the node writes it meanwhile.
    ///
    /// Modeled time: a copy of a page.
    pub(super) fn twin_page(&self, p: PageId) -> crate::sys::Slot {
        crate::sched::charge_cost("host.copy_ns_per_byte", |h, _| h.copy_ns_per_byte * self.page_bytes as f64);
        let mut twin = self.twins.take();
        self.copy_page_into(p, self.twins.bytes_mut(&mut twin));
        twin
    }

    /// A copy of this node's page `p`, taken as a twin is, without a modeled cost: the
    /// modeled platform does not copy there (the diff scan reads the page in place, at the
    /// scan's cost; a page sent to another node is stored straight into the network, at
    /// the wire's cost).
    pub(super) fn snapshot_page(&self, p: PageId) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.page_bytes);
        // SAFETY: as in `copy_page_into`, and `out` has room for the page, whose bytes
        // are all written before `set_len` makes them its contents (no zeroing first).
        unsafe {
            std::ptr::copy_nonoverlapping(self.alias_ptr(p), out.as_mut_ptr(), self.page_bytes);
            out.set_len(self.page_bytes);
        }
        out
    }

    /// In a build with debug assertions, a hash of this node's page `p` (never 0); else 0.
    /// A home granting a migration without a page checks that the requester's copy hashes
    /// as the master copy does (`PageState::version`'s promise).
    fn page_check(&self, p: PageId) -> u64 {
        if !cfg!(debug_assertions) {
            return 0;
        }
        // FNV-1a over the page's bytes.
        let h = self
            .snapshot_page(p)
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        h | 1
    }

    /// Copies this node's page `p` through the alias into `out`, a buffer of one page.
    fn copy_page_into(&self, p: PageId, out: &mut [u8]) {
        assert_eq!(out.len(), self.page_bytes, "a page copy into a buffer of the wrong size");
        // SAFETY: the alias maps this node's whole heap for the life of the node, p is in
        // the heap (alias_ptr asserts it), and out is a distinct buffer of page_bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.alias_ptr(p), out.as_mut_ptr(), out.len()) };
    }

    /// Overwrites this node's page `p` with `bytes` (a fetched master copy).
    fn install_page(&self, p: PageId, bytes: &[u8]) {
        crate::sched::charge_cost("host.copy_ns_per_byte", |h, _| h.copy_ns_per_byte * bytes.len() as f64);
        assert_eq!(bytes.len(), self.page_bytes, "page reply of the wrong size");
        // SAFETY: as in copy_page_into; the caller holds the page lock, and the application
        // cannot write the page (it is invalid or read-only here while a copy arrives).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.alias_ptr(p), bytes.len()) };
    }

    /// Copies the runs of a diff into this node's page `p` (the master copy, at the home).
    fn apply_runs<'a>(&self, p: PageId, runs: impl Iterator<Item = (usize, &'a [u8])>) {
        let base = self.alias_ptr(p);
        for (off, bytes) in runs {
            crate::sched::charge_cost("host.diff_apply_ns_per_byte", |h, _| h.diff_apply_ns_per_byte * bytes.len() as f64);
            assert!(
                off + bytes.len() <= self.page_bytes,
                "diff run outside {p}"
            );
            // SAFETY: the run lies inside page p of the alias (asserted); exactly its bytes
            // are written, so other writers' bytes of the page are untouched.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(off), bytes.len()) };
        }
    }

    fn net_err(e: impl std::fmt::Display) -> ! {
        panic!("{e}")
    }

    /// Sends `msg` to `to` and waits for the reply, which is decoded from `out`'s bytes.
    fn call<'o>(&self, to: NodeId, msg: &Msg<'_>, out: &'o mut Vec<u8>) -> Reply<'o> {
        let mut payload = Vec::new();
        msg.encode(&mut payload);
        self.call_encoded(to, msg.kind(), &payload, out)
    }

    /// Like [`Node::call`], for a message already encoded (a diff from `DiffWriter`).
    fn call_encoded<'o>(
        &self,
        to: NodeId,
        kind: u16,
        payload: &[u8],
        out: &'o mut Vec<u8>,
    ) -> Reply<'o> {
        Clock::message(|| self.request(to, kind, payload, out))
            .unwrap_or_else(|e| Self::net_err(e));
        Reply::decode_within(out, self.bounds()).unwrap_or_else(|e| {
            panic!(
                "{}: malformed reply from {to} to a message of kind {kind}: {e}",
                self.id
            )
        })
    }

    /// The heap's pages and the cluster's nodes, which every id a message names must fall
    /// in.
    pub(super) fn bounds(&self) -> crate::wire::Bounds {
        crate::wire::Bounds {
            pages: self.npages,
            nodes: self.nodes,
        }
    }

    /// Sends a one-way message.
    fn post(&self, to: NodeId, msg: &Msg<'_>) {
        let mut payload = Vec::new();
        msg.encode(&mut payload);
        self.check_not_finished(msg.kind());
        self.net
            .send_via(&self.seam(), to, msg.kind(), my_slot(self), 0, &payload)
            .unwrap_or_else(|e| Self::net_err(e));
    }

    // -------------------------------------------------------------------------------
    // Homes.
    // -------------------------------------------------------------------------------

    pub fn manager_of(&self, p: PageId) -> NodeId {
        NodeId::from_usize(p.index() % self.nodes)
    }

    /// The home of `p` as far as this node knows, assigning it by first touch (through
    /// the page's manager) if nobody has it yet. Called without the page lock: a claimant
    /// that held the lock while it waited for the manager could be asked for the page it is
    /// becoming home of, by a processor that already sees the new home.
    ///
    /// A claim in flight receives nothing (module doc, "Rules": reception): this node
    /// starts receiving the page's master copy only once it learns that it won, from the
    /// manager's answer, the replicated home word, or a request that names it home
    /// (`service.rs`, `lock_as_home`), whichever comes first.
    fn learn_home(&self, p: PageId) -> NodeId {
        if let Some(h) = self.dir.home_word(&self.net, p) {
            return self.learn_first_home(p, h);
        }
        if let Some(h) = self.pages.known_home(p) {
            return h;
        }
        crate::testing::claiming(self.id, p);
        let home = if self.manager_of(p) == self.id {
            self.dir.assign_home(&self.net, p, self.id)
        } else {
            let mut out = Vec::new();
            match self.call(
                self.manager_of(p),
                &Msg::HomeQuery { page: p },
                &mut out,
            ) {
                Reply::Home { home } => home,
                r => panic!("{}: unexpected reply to a home query: {r:?}", self.id),
            }
        };
        self.learn_first_home(p, home)
    }

    /// First touch: records `home`, learned from an authority (the page's manager, the
    /// replicated home word, a request naming this node home), as `p`'s home in the hint
    /// unless the hint holds one already; returns the home the hint holds afterwards. If
    /// this node is the home, it attaches its receive mapping of the master copy first,
    /// before anything here can name it home: no other node can remote-write a diff of the
    /// page before this node has served it a fetch, and a fetch is served only once the
    /// hint or the page's state names this node. A hint that names a home already wins:
    /// a stale record naming this node (its own broadcast of a home it gave away, not yet
    /// back in its replica, `home.rs`) attaches nothing.
    fn learn_first_home(&self, p: PageId, home: NodeId) -> NodeId {
        if home == self.id && self.pages.known_home(p).is_none() {
            self.data_attach(p, true);
        }
        self.pages.learn_first_home(p, home)
    }

    /// Installs a home assignment read from a file (same on every node).
    pub fn preset_home(&self, p: PageId, home: NodeId) {
        // Before the start-up barrier: no other thread of this node runs yet.
        let mut st = self.pages.try_lock(p).expect("page locked during set-up");
        self.homes_fixed.store(true, Ordering::Relaxed);
        self.pages.set_home(p, &mut st, home);
        self.dir.preset_home(&self.net, p, home);
        if home == self.id {
            self.data_attach(p, true);
        }
    }

    /// The pages this node is home of, for a homes file that replays them.
    pub fn own_homes(&self) -> Vec<PageId> {
        (0..self.npages as u32)
            .map(PageId)
            .filter(|&p| self.pages.known_home(p) == Some(self.id))
            .collect()
    }

    // -------------------------------------------------------------------------------
    // Faults.
    // -------------------------------------------------------------------------------

    // -------------------------------------------------------------------------------
    // Release and acquire.
    // -------------------------------------------------------------------------------

    // -------------------------------------------------------------------------------
    // Requests and the service loop.
    // -------------------------------------------------------------------------------

    /// This node's wait seam for a processor: it serves the node's incoming messages while
    /// it waits (see [`crate::wait`]).
    pub fn seam(&self) -> Seam<'_> {
        self.net.seam().serving(self)
    }

    /// This node has passed the run's final barrier (see `SyncState::final_barrier`). Its
    /// release diffed every dirty page, and no processor faults after it: no twin is left.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        assert_eq!(
            self.twins.live(),
            0,
            "{}: twins live after the run's final release",
            self.id
        );
    }

    /// Asserts the end-of-run rule: nothing is sent after the final barrier, when peers may
    /// have stopped serving.
    fn check_not_finished(&self, k: u16) {
        assert!(
            !self.finished.load(Ordering::Acquire),
            "{}: a message of kind {k} sent after the run's final barrier",
            self.id
        );
    }

    /// Sends a request and waits for its reply, serving this node's incoming messages
    /// while it waits (handlers never block, see the module rules).
    pub fn request(
        &self,
        to: NodeId,
        k: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        self.check_not_finished(k);
        rules::check_may_wait_on_network(self.id, |p| {
            self.pages.known_home(p) == Some(self.id)
        });
        self.net
            .request_via(&self.seam(), to, k, my_slot(self), payload, out)
    }

    /// Runs the service loop until [`Node::stop_service`]: handles messages as they come
    /// (and deferred ones once their page is free), and waits for more through the seam,
    /// which gives up if the cluster aborts.
    pub fn serve(&self) {
        let seam = self.net.seam();
        while !self.stopping.load(Ordering::Acquire) {
            let unlocks = self.service.unlocks();
            let began = crate::sched::now();
            if self.serve_once() > 0 {
                // Modeled time: what the service handled was taken from a processor of
                // this node that was computing (Cashmere polls; there is no service thread).
                if let (Some(b), Some(e)) = (began, crate::sched::now()) {
                    crate::sched::steal(self.id.index(), e.saturating_sub(b));
                }
                continue;
            }
            let more = seam.until(WaitFor::Messages, || {
                // The node is alive while its service loop runs (see `launch`, stalls).
                self.net.beat();
                self.stopping.load(Ordering::Acquire)
                    || self.net.has_messages()
                    || self.service.unlocks() != unlocks
            });
            if more.is_err() {
                return;
            }
        }
    }

    pub fn stop_service(&self) {
        self.stopping.store(true, Ordering::Release);
        self.net.seam().wake();
    }
}

impl Serve for Node {
    /// Handles this node's waiting messages: what a processor does while it waits.
    fn serve(&self) -> usize {
        self.serve_once()
    }

    fn has_messages(&self) -> bool {
        self.net.has_messages()
    }

    /// A processor's poll point: looks at the network as the node's poller, and if
    /// messages wait handles them in a runtime entry whose time is Message time (Cashmere's
    /// processors branch to a handler from their loops).
    fn serve_polled(&self) -> usize {
        self.seam().look_as_poller(|| {
            if !self.net.has_messages_now() {
                return 0;
            }
            let _entry = Clock::enter();
            let handled = Clock::message(|| self.serve_once());
            self.counters
                .polled_messages
                .fetch_add(handled as u64, Ordering::Relaxed);
            handled
        })
    }
}
