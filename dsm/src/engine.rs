//! The coherence engine of one node: page states, twins, diffs, the dirty list, write
//! notices, release and acquire, and the service thread's message handlers.
//! (Paper section 2.2; the strategies of section 2.3 are chosen by [`Protocol`].)
//!
//! # Page states at a node
//!
//! * At the page's home the application view maps the master copy itself: `Invalid`
//!   until first touched, `Read`, or `Write`. A write at the home puts the page in the
//!   dirty list without a twin (release sends write notices, no diff) unless the home is
//!   the only sharer, in which case the page goes *exclusive*: writable with no dirty-list
//!   entry until a second sharer fetches it, which downgrades it first.
//! * Elsewhere: `Invalid`, `Read` (a clean copy), or `Write` (a twin exists and the page
//!   is in the dirty list).
//!
//! # Invariants (asserted)
//!
//! * A non-home page is `Write` exactly when it has a twin and is marked dirty.
//! * A home page never has a twin.
//! * An exclusive page is a home page in `Write` that is not dirty.
//! * The runtime reads and writes page contents only through the alias (the wire view of
//!   this node's heap), never through the application view.
//! * A page is write-protected before it is diffed, so no write is lost between the diff
//!   and the downgrade; a dirty page is flushed to its home before the node drops it.
//! * A service thread never waits for a reply (it would deadlock with a peer doing the
//!   same); processors may, holding at most one page lock while they do, and never the
//!   lock of a page this node is (or is claiming to become) home of, because a waiting
//!   processor serves its node's messages, whose handlers take home pages' locks.

use crate::config::{DataStrategy, MetadataStrategy, Protocol};
use crate::diff;
use crate::directory::Directory;
use crate::fault::Protector;
use crate::net::{Inbound, MsgError, Net, Region, Tx};
use crate::stats::{Clock, NodeCounters};
use crate::sync::SyncState;
use crate::wait::{Seam, SeamLock, Serve, WaitFor};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Message kinds of the engine and the message-based strategies.
pub(crate) use crate::kinds as kind;

pub(crate) const NO_HOME: u8 = u8::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Invalid,
    Read,
    Write,
}

#[derive(Debug)]
pub(crate) struct PageState {
    pub access: Access,
    pub twin: Option<Box<[u8]>>,
    pub dirty: bool,
    pub exclusive: bool,
}

impl PageState {
    fn check(&self, at_home: bool) {
        if at_home {
            assert!(self.twin.is_none(), "a home page has a twin");
            if self.exclusive {
                assert!(
                    self.access == Access::Write && !self.dirty,
                    "exclusive page not writable or dirty: {self:?}"
                );
            }
        } else {
            assert!(!self.exclusive, "exclusive page away from its home");
            let writable = self.access == Access::Write;
            assert!(
                writable == self.twin.is_some() && writable == self.dirty,
                "non-home page state broken: {self:?}"
            );
        }
    }
}

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
}

/// One node's engine.
pub(crate) struct Node {
    pub id: usize,
    pub nodes: usize,
    pub procs: usize,
    pub page_bytes: usize,
    pub npages: usize,
    pub protocol: Protocol,
    pub net: Net,
    /// Address of the application view of the heap in this process.
    pub app_base: usize,
    /// Address of this node's heap in the wire view (the runtime's alias).
    alias: usize,
    pages: Box<[Mutex<PageState>]>,
    homes: Box<[AtomicU8]>,
    dirty: Mutex<Vec<u32>>,
    /// Pages flushed before being dropped, whose write notices are owed at the next release,
    /// with the sharers to notify.
    owed: Mutex<Vec<(u32, u64)>>,
    releasing: SeamLock<()>,
    acquiring: SeamLock<()>,
    pub dir: Directory,
    pub sync: SyncState,
    pub regions: Regions,
    pub counters: NodeCounters,
    pub allocations: Vec<Allocation>,
    pub heap_used: usize,
    pub protector: Protector,
    pub stopping: AtomicBool,
}

/// Which mailbox the calling thread uses for requests: processors have their own; every
/// other thread of the node (setup, the fault path outside processors) uses the spare one.
pub(crate) fn my_slot(node: &Node) -> u16 {
    crate::api::current_slot().unwrap_or(node.procs as u16)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
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
    ) -> Node {
        let nodes = net.nodes();
        let npages = heap_used.div_ceil(page_bytes);
        Node {
            id,
            nodes,
            procs,
            page_bytes,
            npages,
            protocol,
            net,
            app_base,
            alias,
            pages: (0..npages)
                .map(|_| {
                    Mutex::new(PageState {
                        access: Access::Invalid,
                        twin: None,
                        dirty: false,
                        exclusive: false,
                    })
                })
                .collect(),
            homes: (0..npages).map(|_| AtomicU8::new(NO_HOME)).collect(),
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
            stopping: AtomicBool::new(false),
        }
    }

    fn page(&self, p: u32) -> MutexGuard<'_, PageState> {
        self.pages[p as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// This node's copy of page `p`, through the alias.
    #[allow(clippy::mut_from_ref)] // exclusive by the page lock the caller holds
    fn alias_page(&self, p: u32) -> &mut [u8] {
        assert!((p as usize) < self.npages);
        // The alias maps this node's whole heap for the life of the node; the caller holds
        // page p's lock, so no other runtime thread touches these bytes; application
        // threads reach them only through the app view, data-race-free by the model.
        // SAFETY: as just said.
        unsafe {
            std::slice::from_raw_parts_mut(
                (self.alias + p as usize * self.page_bytes) as *mut u8,
                self.page_bytes,
            )
        }
    }

    fn net_err(e: MsgError) -> ! {
        panic!("{e}")
    }

    // -------------------------------------------------------------------------------
    // Homes.
    // -------------------------------------------------------------------------------

    pub fn manager_of(&self, p: u32) -> usize {
        p as usize % self.nodes
    }

    /// The home of `p`, assigning this node by first touch if it has none yet.
    fn home_of(&self, p: u32) -> usize {
        let known = self.homes[p as usize].load(Ordering::Acquire);
        if known != NO_HOME {
            return known as usize;
        }
        if let Some(h) = self.dir.replicated_home(self, p) {
            self.homes[p as usize].store(h as u8, Ordering::Release);
            return h;
        }
        // Remote-write data: receive the page before claiming it, so no diff can miss us.
        if let Some(data) = self.regions.data {
            self.net.attach_rx(
                &data,
                p as u64 * self.page_bytes as u64,
                self.page_bytes as u64,
                false,
            );
        }
        let home = if self.manager_of(p) == self.id {
            self.assign_home(p, self.id)
        } else {
            let mut out = Vec::new();
            Clock::message(|| {
                self.request(self.manager_of(p), kind::HOME, &p.to_le_bytes(), &mut out)
            })
            .unwrap_or_else(|e| Self::net_err(e));
            out[0] as usize
        };
        if home != self.id {
            if let Some(data) = self.regions.data {
                self.net.detach_rx(
                    &data,
                    p as u64 * self.page_bytes as u64,
                    self.page_bytes as u64,
                );
            }
        }
        self.homes[p as usize].store(home as u8, Ordering::Release);
        home
    }

    /// At the manager: the home of `p`, which becomes `claimant` if it has none.
    fn assign_home(&self, p: u32, claimant: usize) -> usize {
        self.dir.assign_home(self, p, claimant)
    }

    /// Installs a home assignment read from a file (same on every node).
    pub fn preset_home(&self, p: u32, home: usize) {
        self.homes[p as usize].store(home as u8, Ordering::Release);
        self.dir.preset_home(self, p, home);
        if home == self.id {
            if let Some(data) = self.regions.data {
                self.net.attach_rx(
                    &data,
                    p as u64 * self.page_bytes as u64,
                    self.page_bytes as u64,
                    false,
                );
            }
        }
    }

    /// The pages this node is home of, for a homes file that replays them.
    pub fn own_homes(&self) -> Vec<u32> {
        (0..self.npages as u32)
            .filter(|&p| self.is_home(p))
            .collect()
    }

    // -------------------------------------------------------------------------------
    // Faults.
    // -------------------------------------------------------------------------------

    /// Resolves an access fault at heap offset `offset`. Returns an error message if the
    /// access is outside every allocation.
    pub fn fault(&self, offset: usize, write: bool) -> Result<(), String> {
        if offset >= self.heap_used {
            return Err(self.outside_message(offset));
        }
        let _entry = Clock::enter();
        let p = (offset / self.page_bytes) as u32;
        if write {
            NodeCounters::bump(&self.counters.write_faults);
            self.write_fault(p);
        } else {
            NodeCounters::bump(&self.counters.read_faults);
            self.read_fault(p);
        }
        Ok(())
    }

    fn outside_message(&self, offset: usize) -> String {
        let addr = self.app_base + offset;
        let nearest = self.allocations.iter().min_by_key(|a| {
            if offset < a.offset {
                a.offset - offset
            } else {
                offset.saturating_sub(a.offset + a.len)
            }
        });
        match nearest {
            Some(a) => format!(
                "access to address {addr:#x} is outside every shared allocation; the nearest is `{}` at [{:#x}, {:#x})",
                a.what,
                self.app_base + a.offset,
                self.app_base + a.offset + a.len
            ),
            None => format!("access to address {addr:#x} in the shared heap, which has no allocations"),
        }
    }

    fn read_fault(&self, p: u32) {
        // Learn (or claim) the home before taking the page lock: a claimant that held the
        // lock while it waited for the manager could be asked for the page it is becoming
        // home of, by a processor that already sees the new home, and (serving messages
        // while it waits) would then wait for its own lock.
        self.home_of(p);
        let mut st = self.page(p);
        if st.access != Access::Invalid {
            return; // another processor of this node resolved it
        }
        self.map_in(p, &mut st);
        st.check(self.home_of(p) == self.id);
    }

    /// Makes an invalid page readable: at the home, just map the master copy; elsewhere,
    /// join the sharing set and fetch the page.
    fn map_in(&self, p: u32, st: &mut PageState) {
        let home = self.home_of(p);
        if home == self.id {
            self.dir.join(self, p, false);
        } else {
            self.fetch(p, home);
        }
        self.protector.set(p, Access::Read);
        st.access = Access::Read;
    }

    fn fetch(&self, p: u32, home: usize) {
        // Replicated directory: announce ourselves before asking, so that a release at
        // the home that misses our entry happened before our fetch was served.
        self.dir.join(self, p, false);
        let mut out = Vec::with_capacity(self.page_bytes);
        Clock::message(|| self.request(home, kind::FETCH, &p.to_le_bytes(), &mut out))
            .unwrap_or_else(|e| Self::net_err(e));
        assert_eq!(out.len(), self.page_bytes, "page reply of the wrong size");
        self.alias_page(p).copy_from_slice(&out);
        NodeCounters::bump(&self.counters.page_transfers);
    }

    fn write_fault(&self, p: u32) {
        self.home_of(p); // before the page lock, as in read_fault
        let mut st = self.page(p);
        if st.access == Access::Write {
            return;
        }
        if st.access == Access::Invalid {
            self.map_in(p, &mut st);
        }
        let at_home = self.home_of(p) == self.id;
        if at_home {
            if self.dir.sharers(self, p) & !(1u64 << self.id) == 0 {
                st.exclusive = true;
                NodeCounters::bump(&self.counters.exclusive_entries);
            } else {
                st.dirty = true;
                self.dirty.lock().expect("poisoned").push(p);
            }
        } else {
            st.twin = Some(self.alias_page(p).to_vec().into_boxed_slice());
            NodeCounters::bump(&self.counters.twins);
            st.dirty = true;
            self.dirty.lock().expect("poisoned").push(p);
        }
        self.dir.join(self, p, true);
        self.protector.set(p, Access::Write);
        st.access = Access::Write;
        st.check(at_home);
    }

    // -------------------------------------------------------------------------------
    // Release and acquire.
    // -------------------------------------------------------------------------------

    /// Release: write-protect every dirty page, send its diff home, then send write
    /// notices to the other sharers (section 2.2). When this returns, every write this
    /// node made before the call is at its home and noticed.
    pub fn release(&self) {
        // One release at a time per node: a processor whose writes another processor's
        // release is flushing must not complete its own release before that flush and its
        // notices are done.
        let seam = self.seam();
        let _one = self
            .releasing
            .lock(&seam, WaitFor::Serialize { what: "release" })
            .unwrap_or_else(|e| Self::net_err(e));
        let pages = std::mem::take(&mut *self.dirty.lock().expect("poisoned"));
        let mut noticed = Vec::with_capacity(pages.len());
        for p in pages {
            let mut st = self.page(p);
            if !st.dirty {
                continue;
            }
            let home = self.home_of(p);
            self.protector.set(p, Access::Read);
            st.access = Access::Read;
            st.dirty = false;
            let sharers = if home == self.id {
                self.dir.sharers(self, p)
            } else {
                let twin = st.twin.take().expect("dirty non-home page without twin");
                self.send_diff(p, home, &twin)
            };
            st.check(home == self.id);
            drop(st);
            noticed.push((p, sharers));
        }
        // Taken after the pages: a page that an acquire flushed while we waited for its
        // lock is owed a notice, and we must send it before this release completes.
        noticed.extend(std::mem::take(&mut *self.owed.lock().expect("poisoned")));
        self.send_notices(&noticed);
    }

    /// Sends the diff of page `p` against `twin` to `home`; returns the page's sharers as
    /// the home (or the replicated directory) knows them.
    fn send_diff(&self, p: u32, home: usize, twin: &[u8]) -> u64 {
        let mut d = Vec::with_capacity(64);
        d.extend_from_slice(&p.to_le_bytes());
        let changed = diff::encode(twin, self.alias_page(p), &mut d);
        NodeCounters::bump(&self.counters.diffs);
        self.counters
            .diff_bytes
            .fetch_add(changed as u64, Ordering::Relaxed);
        match self.protocol.data {
            DataStrategy::RemoteWrite => {
                let data = self
                    .regions
                    .data
                    .expect("remote-write data needs the data region");
                let tx: Tx<'_> = self.net.tx(data);
                let runs: Vec<(usize, &[u8])> = diff::runs(&d[4..]).collect();
                tx.write_runs(p as u64 * self.page_bytes as u64, &runs);
                // No acknowledgement: total order delivers the diff before anything this
                // node transmits later (the write notices, the lock release).
                self.dir.sharers(self, p)
            }
            DataStrategy::Messages => {
                // A diff of scattered bytes can outgrow one message: split it at run
                // boundaries. The last acknowledgement carries the sharing set.
                let mut out = Vec::new();
                let mut msg = Vec::with_capacity(d.len().min(crate::net::MAX_MESSAGE_BYTES));
                let mut runs = diff::runs(&d[4..]).peekable();
                loop {
                    msg.clear();
                    msg.extend_from_slice(&p.to_le_bytes());
                    while let Some(&(off, bytes)) = runs.peek() {
                        if msg.len() + 4 + bytes.len() > crate::net::MAX_MESSAGE_BYTES
                            && msg.len() > 4
                        {
                            break;
                        }
                        msg.extend_from_slice(&(off as u16).to_le_bytes());
                        msg.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
                        msg.extend_from_slice(bytes);
                        runs.next();
                    }
                    Clock::message(|| self.request(home, kind::DIFF, &msg, &mut out))
                        .unwrap_or_else(|e| Self::net_err(e));
                    if runs.peek().is_none() {
                        break;
                    }
                }
                match self.protocol.metadata {
                    MetadataStrategy::HomeHeld => {
                        u64::from_le_bytes(out[..8].try_into().expect("sharers in ack"))
                    }
                    MetadataStrategy::Replicated => self.dir.sharers(self, p),
                }
            }
        }
    }

    fn send_notices(&self, noticed: &[(u32, u64)]) {
        let mut per_node: Vec<Vec<u32>> = vec![Vec::new(); self.nodes];
        for &(p, sharers) in noticed {
            for (n, list) in per_node.iter_mut().enumerate() {
                if n != self.id && sharers & (1u64 << n) != 0 {
                    list.push(p);
                }
            }
        }
        for (n, pages) in per_node.iter().enumerate() {
            if !pages.is_empty() {
                self.counters
                    .write_notices
                    .fetch_add(pages.len() as u64, Ordering::Relaxed);
                self.dir.send_notices(self, n, pages);
            }
        }
    }

    /// Acquire: invalidate every page named by a write notice received so far.
    pub fn acquire(&self) {
        // One acquire at a time per node: notices are taken node-wide, so a second acquirer
        // must not return before the first has invalidated what it took.
        let seam = self.seam();
        let _one = self
            .acquiring
            .lock(&seam, WaitFor::Serialize { what: "acquire" })
            .unwrap_or_else(|e| Self::net_err(e));
        let (pages, all) = self.dir.take_notices(self);
        if all {
            for p in 0..self.npages as u32 {
                self.invalidate(p);
            }
        } else {
            for p in pages {
                self.invalidate(p);
            }
        }
    }

    fn invalidate(&self, p: u32) {
        if self.homes[p as usize].load(Ordering::Acquire) == self.id as u8 {
            return; // the home keeps the master copy
        }
        let mut st = self.page(p);
        if st.access == Access::Invalid {
            return;
        }
        let home = self.home_of(p);
        if st.dirty {
            // Flush before drop: another processor of this node wrote it.
            self.protector.set(p, Access::Read);
            let twin = st.twin.take().expect("dirty page without twin");
            st.dirty = false;
            let sharers = self.send_diff(p, home, &twin);
            self.owed.lock().expect("poisoned").push((p, sharers));
            NodeCounters::bump(&self.counters.flushes_before_drop);
        }
        self.protector.set(p, Access::Invalid);
        st.access = Access::Invalid;
        st.check(false);
        // Leave the sharing set while still holding the page lock: otherwise another
        // processor of this node could fault the page back in, and its join could reach
        // the directory before our leave, leaving the node out of the set while it holds
        // a copy (and so out of later write notices).
        self.dir.leave(self, p, home);
        drop(st);
        NodeCounters::bump(&self.counters.invalidations);
    }

    // -------------------------------------------------------------------------------
    // The service thread.
    // -------------------------------------------------------------------------------

    /// This node's wait seam for a processor: it serves the node's incoming messages while
    /// it waits (see [`crate::wait`]).
    pub fn seam(&self) -> Seam<'_> {
        self.net.seam().serving(self)
    }

    /// Sends a request and waits for its reply, serving this node's incoming messages
    /// while it waits. Safe because handlers take only home pages' locks (never held by a
    /// processor that waits on the network) and never wait themselves.
    pub fn request(
        &self,
        to: usize,
        k: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        self.net
            .request_via(&self.seam(), to, k, my_slot(self), payload, out)
    }

    /// Runs the service loop until [`Node::stop_service`]: handles messages as they come,
    /// and waits for more through the seam (which gives up if the cluster aborts).
    pub fn serve(&self) {
        let seam = self.net.seam();
        while !self.stopping.load(Ordering::Acquire) {
            if self.net.poll(|m| self.handle(m)) > 0 {
                continue;
            }
            let more = seam.until(WaitFor::Messages, || {
                self.stopping.load(Ordering::Acquire) || self.net.has_messages()
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

    fn reply(&self, m: &Inbound<'_>, payload: &[u8]) {
        self.net
            .reply(m.from, m.slot, m.token, payload)
            .unwrap_or_else(|e| Self::net_err(e));
    }

    fn handle(&self, m: Inbound<'_>) {
        match m.kind {
            kind::HOME => {
                let p = u32_at(m.payload, 0);
                let home = self.assign_home(p, m.from);
                self.reply(&m, &[home as u8]);
            }
            kind::FETCH => {
                let p = u32_at(m.payload, 0);
                let page = self.serve_fetch(p, m.from);
                self.reply(&m, &page);
            }
            kind::DIFF => {
                let p = u32_at(m.payload, 0);
                let sharers = {
                    let _st = self.page(p);
                    diff::apply(&m.payload[4..], self.alias_page(p));
                    self.dir.sharers(self, p)
                };
                self.reply(&m, &sharers.to_le_bytes());
            }
            kind::DROP => {
                let p = u32_at(m.payload, 0);
                self.dir.home_leave(self, p, m.from);
            }
            kind::NOTICE => {
                self.dir.receive_notices(m.payload);
                self.reply(&m, &[]);
            }
            kind::STOP => {}
            k if (kind::LOCK_ACQ..=kind::FLAG_WAIT).contains(&k) => self.sync.handle(self, &m),
            k => panic!(
                "node {}: unknown message kind {k} from node {}",
                self.id, m.from
            ),
        }
    }

    /// At the home: serves a fetch of `p` by `from`: records the new sharer, leaves
    /// exclusive mode first if needed, and returns the master copy.
    fn serve_fetch(&self, p: u32, from: usize) -> Vec<u8> {
        let mut st = self.page(p);
        // The manager may have told the requester that we are home before its reply to our
        // own claim reached us: the request itself proves the assignment.
        let known = self.homes[p as usize].compare_exchange(
            NO_HOME,
            self.id as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if let Err(h) = known {
            assert_eq!(
                h, self.id as u8,
                "fetch of page {p} at node {}, but its home is node {h}",
                self.id
            );
        }
        if st.exclusive {
            // Downgrade before copying, so every later write here faults and is noticed.
            self.protector.set(p, Access::Read);
            st.exclusive = false;
            st.access = Access::Read;
            NodeCounters::bump(&self.counters.exclusive_exits);
        }
        self.dir.home_join(self, p, from);
        st.check(true);
        self.alias_page(p).to_vec()
    }

    /// True if this node is known to be `p`'s home.
    pub fn is_home(&self, p: u32) -> bool {
        self.homes[p as usize].load(Ordering::Acquire) == self.id as u8
    }
}

impl Serve for Node {
    /// Handles this node's waiting messages: what a processor does while it waits.
    fn serve(&self) -> usize {
        self.net.poll(|m| self.handle(m))
    }
}
