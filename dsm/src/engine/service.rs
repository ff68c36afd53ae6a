//! The node's message handlers, run by the service thread and by processors while they
//! wait (Cashmere's processors poll for messages, section 2.3 "Message Polling").
//!
//! A handler never blocks. Every handler that acts on a page (fetch, diff, drop) first
//! checks, without the page lock, what this node knows of the page's home:
//!
//! * another node is the home: the request is answered with that node (`Moved`), and the
//!   requester retries there (a one-way drop for a home that moved is dropped: the new
//!   home's sharing set then names the sender needlessly, which costs a notice, never a
//!   missed one);
//! * a migration to this node is in flight, or the page lock is busy: the message is
//!   *deferred*, kept in arrival order with every later message for the same page, and
//!   retried at the next poll and when the lock is released (the lock holder is a
//!   processor of this node that does not wait on the network for this page while this
//!   node is its home, or one that is waiting for the migration's answer, whose release
//!   changes the page; a handler that finds the lock busy, or the migration in flight,
//!   marks the lock wanted, so that its release retries the message even if it changed
//!   nothing, or came before the message was queued);
//! * this node is the home: the handler takes the lock, checks the home again under it,
//!   and acts on the master copy.
//!
//! So a message for a page is applied only to the master copy, at most once.
//!
//! # Exclusive mode away from the home (section 2.2)
//!
//! A node X that write-faults on a page it does not hold asks for it with
//! `Fetch { exclusive: true }` (as does a write fault on a clean copy when the replicated
//! directory shows no other sharer; the grant brings the master copy again). The home
//! grants, under its page lock, when X would be the only sharer: no other node shares
//! the page (the replicated directory's replica, which holds X's join, or the home-held
//! set), the home's own processors have never mapped it
//! (the home is a sharer from its first mapping and never leaves), no holder or recall is
//! recorded, the home does not migrate (-Mg variants: the writer becomes the home instead)
//! and (ADB) the page has never been broadcast. The home records X (`excl_at`) and sends
//! the master copy with the grant: every diff of a node that has left the sharing set
//! landed before its leave, so X's copy lacks nothing. X writes with no twin and no
//! dirty-list entry, and its releases skip the page; the master copy is stale meanwhile.
//!
//! The master copy is made whole by exactly one flush of X's whole page, taken under X's
//! page lock after X write-protects it:
//!
//! * X drops the page (a notice from a writer that released before the grant): X's
//!   processor sends `Flush { holder: X }` with the page; the home applies it and clears
//!   `excl_at`.
//! * A second sharer appears: a fetch from Y (or a fault of the home's own processors,
//!   `Node::lock_for_fault`) finds `excl_at = X`. The home marks the page `recalling` and
//!   answers `Holder { X }`; Y's processor (a requester, never a handler) sends `Recall`
//!   to X, whose handler ends exclusive mode and answers with the page (under remote-write
//!   data it writes the page into the master copy first and answers with nothing: total
//!   order lands the write at the home before anything Y sends after the answer). Y then
//!   sends `Flush { holder: X, fetch: true }` with what it got; the home applies it if
//!   `excl_at` is still X, clears `excl_at` and `recalling`, and serves Y's fetch in the
//!   reply. The home's processors do the same without the messages to the home.
//!
//! While the page is held and being recalled ([`PageState::awaits_recall`]), every fetch
//! (X's own included) and every diff for it waits at the home (deferred, releasing the
//! page lock unchanged so that the retry waits for the next change of a page,
//! [`PageGuard::defer`]; the module doc of `engine`, "Wake-ups on a page's release", says
//! why that cannot loop) until the flush lands: X's writes after the recall start from a
//! copy equal to the flushed page and reach the master after it. A fault of the home's
//! own processors waits for the same (`Node::lock_for_fault`). A deferred message is
//! retried before any fetch queued behind it, and the recaller's flush grants nothing, so
//! it never finds the page granted anew; a home processor can, and then recalls the page
//! itself.
//! While a recall is pending no grant is made, so `excl_at` only clears until the
//! recaller reports: the flush applied is always the current holder's, and at most once
//! (X's data comes only from an exclusive copy, and `excl_at` clears when it lands). A
//! flush is ordered apart from the page's other messages (`order_key`): it must never
//! wait behind a deferred fetch that waits for it. One recall at a time: later fetches of
//! a page being recalled wait at the home rather than going to X. No fetch is served, so
//! nothing is broadcast, while `excl_at` is set.

use super::{CopyVersion, Node, PageGuard, Want};
use crate::config::HomePolicy;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::{Hint, PageState};
use crate::stats::NodeCounters;
use crate::wire::{kind, Msg, Piggyback, Reply};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A message kept for later: its page was busy.
struct Deferred {
    page: PageId,
    /// The ordering class of the message (see [`order_key`]).
    key: u64,
    from: NodeId,
    kind: u16,
    slot: u16,
    token: u32,
    payload: Vec<u8>,
}

/// The service side of a node: the deferred messages.
#[derive(Default)]
pub(crate) struct Service {
    /// Held by the one thread serving messages at a time (the rings have one consumer).
    deferred: Mutex<VecDeque<Deferred>>,
    /// How many messages are deferred, as the serving thread last counted them (at the end
    /// of a pass), plus the deferrals on a page's state it has made since
    /// ([`Service::deferring`]). Written only by the thread that holds `deferred`.
    waiting: AtomicUsize,
    /// Bumped by every page release that asks for a retry of the deferred messages.
    unlocks: AtomicUsize,
    /// The page of the fetch being served and how many other fetches of it arrived in the
    /// same pass over the rings or wait deferred (`None` before the first fetch).
    batch: Mutex<Option<(PageId, usize)>>,
}

impl Service {
    /// A page lock was released: retry the deferred messages (wake the node's service) if
    /// a handler found this lock busy (`wanted`), or if the release may have changed the
    /// page (`changed`) and messages are deferred (module doc of `engine`, "Wake-ups on a
    /// page's release").
    pub fn page_released(&self, seam: &crate::wait::Seam<'_>, wanted: bool, changed: bool) {
        if wanted || (changed && self.waiting.load(Ordering::SeqCst) > 0) {
            self.unlocks.fetch_add(1, Ordering::SeqCst);
            seam.wake();
        }
    }

    /// A handler is about to defer its message on a page's state and release the page:
    /// counted before the release, so that the next change of a page retries it even if it
    /// comes before the message is queued. Called by the serving thread only.
    pub fn deferring(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
    }

    /// How many page releases have asked for a retry (the service loop's wait ends when
    /// this moves).
    pub fn unlocks(&self) -> usize {
        self.unlocks.load(Ordering::SeqCst)
    }

    /// Fetches of `p` waiting right now (for adaptive broadcast's "several requests at
    /// once"). Read by the serving thread, which holds the queue.
    pub fn pending_fetches(&self, p: PageId) -> usize {
        match *self.batch.lock().expect("poisoned") {
            Some((page, n)) if page == p => n,
            _ => 0,
        }
    }
}

/// What a handler did with a message.
enum Outcome {
    Done,
    /// The page is busy: keep the message and retry it later.
    Defer,
}

/// The page a message acts on, if it must be ordered with others for that page.
fn page_of(m: &Msg<'_>) -> Option<PageId> {
    match *m {
        Msg::Fetch { page, .. }
        | Msg::Diff { page, .. }
        | Msg::Drop { page }
        | Msg::Recall { page }
        | Msg::Flush { page, .. } => Some(page),
        _ => None,
    }
}

/// The class within which messages for a page keep their order: the page, except for
/// flushes, which fetches and diffs of the page wait for (module doc, "Exclusive mode
/// away from the home") and so must not queue behind.
fn order_key(m: &Msg<'_>) -> Option<u64> {
    let p = u64::from(page_of(m)?.0);
    Some(if matches!(m, Msg::Flush { .. }) {
        p | 1 << 32
    } else {
        p
    })
}

impl Node {
    /// Handles deferred messages whose page is free again, then every message that has
    /// arrived. Returns how many messages were handled. Only one thread serves at a time;
    /// the others return at once. A release that asks for a retry while a thread serves
    /// (its wake-up may find the queue held and go back to sleep) makes that thread pass
    /// again once it has let the queue go.
    pub(crate) fn serve_once(&self) -> usize {
        let mut handled = 0;
        loop {
            let Ok(mut queue) = self.service.deferred.try_lock() else {
                return handled;
            };
            let unlocks = self.service.unlocks();
            handled += self.serve_pass(&mut queue);
            self.service.waiting.store(queue.len(), Ordering::SeqCst);
            drop(queue);
            if self.service.unlocks() == unlocks {
                return handled;
            }
        }
    }

    /// One pass of [`Node::serve_once`] by the thread that holds the queue.
    fn serve_pass(&self, queue: &mut VecDeque<Deferred>) -> usize {
        let mut handled = 0;
        let mut fetched: Vec<PageId> = Vec::new();
        if !queue.is_empty() {
            let mut busy: Vec<u64> = Vec::new();
            let mut i = 0;
            while i < queue.len() {
                let d = &queue[i];
                if busy.contains(&d.key) {
                    i += 1;
                    continue;
                }
                match self.handle_bytes(d.from, d.kind, d.slot, d.token, &d.payload) {
                    Outcome::Done => {
                        queue.remove(i);
                        handled += 1;
                    }
                    Outcome::Defer => {
                        busy.push(d.key);
                        i += 1;
                    }
                }
            }
        }
        handled += self.net.poll(|m| {
            if matches!(m.kind, kind::LOCK_ACQ..=kind::FLAG_WAIT) {
                super::rules::in_handler(|| self.sync.handle(self, &m));
                return;
            }
            let decoded = Msg::decode(m.kind, m.payload).ok();
            let page = decoded.as_ref().and_then(page_of);
            let key = decoded.as_ref().and_then(order_key);
            let queued = key.is_some_and(|k| queue.iter().any(|d| d.key == k));
            if let (Some(p), true) = (page, m.kind == kind::FETCH) {
                let others = fetched.iter().filter(|&&q| q == p).count()
                    + queue
                        .iter()
                        .filter(|d| d.page == p && d.kind == kind::FETCH)
                        .count();
                *self.service.batch.lock().expect("poisoned") = Some((p, others));
                fetched.push(p);
            }
            if queued
                || matches!(
                    self.handle_bytes(m.from, m.kind, m.slot, m.token, m.payload),
                    Outcome::Defer
                )
            {
                NodeCounters::bump(&self.counters.deferred_messages);
                queue.push_back(Deferred {
                    page: page.expect("only page messages are deferred"),
                    key: key.expect("only page messages are deferred"),
                    from: m.from,
                    kind: m.kind,
                    slot: m.slot,
                    token: m.token,
                    payload: m.payload.to_vec(),
                });
            }
        });
        handled
    }

    /// Sends `reply` to request `token` of `from`'s mailbox `slot`; a page it carries goes
    /// from the reply's buffer straight into the mailbox or frame, not through a second.
    fn reply(&self, from: NodeId, slot: u16, token: u32, reply: &Reply<'_>) {
        let tail = reply.tail();
        let mut head = Vec::with_capacity(reply.encoded_len() - tail.len());
        reply.encode_head(&mut head);
        self.net
            .reply_split(from, slot, token, &head, tail)
            .unwrap_or_else(|e| Self::net_err(e));
    }

    fn handle_bytes(&self, from: NodeId, k: u16, slot: u16, token: u32, payload: &[u8]) -> Outcome {
        super::rules::in_handler(|| self.handle_message(from, k, slot, token, payload))
    }

    fn handle_message(
        &self,
        from: NodeId,
        k: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Outcome {
        let msg = Msg::decode_within(k, payload, self.bounds()).unwrap_or_else(|e| {
            panic!("{}: malformed message from {from}: {e}", self.id)
        });
        let answer = |r: &Reply<'_>| self.reply(from, slot, token, r);
        match msg {
            Msg::HomeQuery { page } => {
                let home = self.dir.assign_home(&self.net, page, from);
                answer(&Reply::Home { home });
                Outcome::Done
            }
            Msg::Fetch {
                page,
                migrate,
                exclusive,
                rehome,
                needs_page,
                version,
                check,
            } => {
                let want = Want {
                    migrate,
                    exclusive,
                    rehome,
                };
                // A copy the requester holds valid, if it does (for a migration).
                let copy = (!needs_page).then_some(CopyVersion { version, check });
                self.handle_fetch(from, page, want, copy, &answer)
            }
            Msg::Diff { page, runs } => self.handle_diff(from, page, runs, &answer),
            Msg::Drop { page } => self.handle_drop(from, page),
            Msg::Recall { page } => self.handle_recall(page, &answer),
            Msg::Flush {
                page,
                holder,
                fetch,
                data,
            } => self.handle_flush(from, page, holder, fetch, data, &answer),
            Msg::Notice { pages } => {
                self.dir.receive_notices(pages.iter());
                self.net
                    .acknowledge(from, slot, token)
                    .unwrap_or_else(|e| Self::net_err(e));
                Outcome::Done
            }
            Msg::Shutdown => Outcome::Done,
            Msg::LockAcquire { .. }
            | Msg::LockRelease { .. }
            | Msg::Barrier { .. }
            | Msg::FlagSet { .. }
            | Msg::FlagWait { .. } => {
                unreachable!("synchronization messages are handled by the sync strategy")
            }
        }
    }

    /// `Fetch` at the page's home: the page (or the home, for a migration), or the name of
    /// the exclusive holder to recall it from (2.3.1, 2.3.5; "Exclusive mode" above).
    fn handle_fetch(
        &self,
        from: NodeId,
        page: PageId,
        want: Want,
        copy: Option<CopyVersion>,
        answer: &dyn Fn(&Reply<'_>),
    ) -> Outcome {
        let Some(mut st) = self.lock_as_home(page, |h| answer(&Reply::Moved { home: h })) else {
            return Outcome::Defer;
        };
        let Some(mut st) = st.take() else {
            return Outcome::Done;
        };
        if let Some(holder) = st.excl_at {
            if st.recalling {
                // The recall's flush has not landed: wait for it.
                st.defer();
                return Outcome::Defer;
            }
            assert_ne!(
                holder, from,
                "{}: {page} fetched by its exclusive holder",
                self.id
            );
            st.recalling = true;
            st.check(self.id);
            answer(&Reply::Holder { holder });
            return Outcome::Done;
        }
        self.serve_fetch(page, &mut st, from, want, copy, answer);
        Outcome::Done
    }

    /// `Diff` at the page's home: the runs applied to the master copy, acknowledged with
    /// the page's metadata (diff messages, 2.3.2).
    fn handle_diff(
        &self,
        from: NodeId,
        page: PageId,
        runs: crate::wire::DiffRuns<'_>,
        answer: &dyn Fn(&Reply<'_>),
    ) -> Outcome {
        let Some(mut st) = self.lock_as_home(page, |h| answer(&Reply::Moved { home: h })) else {
            return Outcome::Defer;
        };
        let Some(mut st) = st.take() else {
            return Outcome::Done;
        };
        if let Some(holder) = st.excl_at {
            // Only the holder can have written, after a recall ended its exclusive mode:
            // its diff follows the flush.
            assert!(
                st.recalling,
                "{}: a diff of {page} from {from} while {} holds it exclusively",
                self.id, holder
            );
            st.defer();
            return Outcome::Defer;
        }
        runs.check(self.page_bytes)
            .unwrap_or_else(|e| panic!("{}: bad diff from {from}: {e}", self.id));
        self.apply_runs(page, runs.iter().flat_map(|r| r.ranges()));
        st.master_changes();
        answer(&Reply::DiffAck {
            meta: self.piggyback(page, &st),
        });
        Outcome::Done
    }

    /// `Drop` at the page's home (home-held metadata): the sender left the sharing set. A
    /// drop that finds the home moved is stale and counted.
    fn handle_drop(&self, from: NodeId, page: PageId) -> Outcome {
        let Some(mut st) = self.lock_as_home(page, |_| {
            NodeCounters::bump(&self.counters.stale_drops);
        }) else {
            return Outcome::Defer;
        };
        if let Some(mut st) = st.take() {
            st.sharers.remove(from);
        }
        Outcome::Done
    }

    /// `Recall` at the page's exclusive holder (not the home): exclusive mode ends and the
    /// page's data goes to the master copy ([`Node::recalled_data`]).
    fn handle_recall(&self, page: PageId, answer: &dyn Fn(&Reply<'_>)) -> Outcome {
        // The page lock is held only by processors that do not wait for this recall to
        // finish.
        let Some(mut st) = self.try_lock_page(page) else {
            return Outcome::Defer;
        };
        let data = if st.exclusive {
            let data = self.end_exclusive(page, &mut st);
            self.recalled_data(page, data)
        } else {
            Vec::new()
        };
        answer(&Reply::Flushed { data: &data });
        Outcome::Done
    }

    /// `Flush` at the page's home: a recalled page's data from its holder, or the
    /// recaller's report that the recall is over (then its fetch is served).
    fn handle_flush(
        &self,
        from: NodeId,
        page: PageId,
        holder: NodeId,
        fetch: bool,
        data: &[u8],
        answer: &dyn Fn(&Reply<'_>),
    ) -> Outcome {
        let Some(mut st) = self.lock_as_home(page, |h| {
            panic!(
                "{}: a flush of {page} from {from}, whose home is {h}",
                self.id
            )
        }) else {
            return Outcome::Defer;
        };
        let Some(mut st) = st.take() else {
            return Outcome::Done;
        };
        let p = page;
        assert_eq!(
            fetch,
            from != holder,
            "{}: flush of {p} from {from}",
            self.id
        );
        if !self.apply_flush(p, &mut st, holder, data) {
            assert!(
                fetch && data.is_empty(),
                "{}: a flush of {p} held by {holder}, recorded at {:?}",
                self.id,
                st.excl_at
            );
        }
        if fetch {
            // The recaller reports: the recall is over; serve its fetch.
            assert!(
                st.recalling,
                "{}: {p} flushed unrecalled",
                self.id
            );
            st.recalling = false;
            self.serve_fetch(p, &mut st, from, Want::default(), None, answer);
        } else {
            st.check(self.id);
            answer(&Reply::Ack);
        }
        Outcome::Done
    }

    /// For a handler acting on page `p` at its home: `None` if the message must be
    /// deferred; `Some(None)` if another node is the home (after calling `elsewhere` with
    /// it); `Some(Some(guard))` with the page locked at its home.
    #[allow(clippy::option_option)]
    fn lock_as_home(
        &self,
        p: PageId,
        elsewhere: impl FnOnce(NodeId),
    ) -> Option<Option<PageGuard<'_>>> {
        match self.pages.hint(p, self.id) {
            Hint::Pending => {
                // The processor migrating the page here holds its lock until the answer,
                // and its release clears the mark (`set_home` or `set_pending`): marked
                // wanted, that release retries the message; the look after the mark sees
                // a migration that ended before it.
                self.pages.want(p);
                if matches!(self.pages.hint(p, self.id), Hint::Pending) {
                    None
                } else {
                    self.lock_as_home(p, elsewhere)
                }
            }
            Hint::Elsewhere(h) => {
                elsewhere(h);
                Some(None)
            }
            Hint::Home | Hint::Unknown => {
                let mut st = self.try_lock_page(p)?;
                if st.home.is_none() {
                    // The manager may have told the requester that we are home before its
                    // reply to our own claim reached us: the request itself proves it.
                    let h = self.learn_first_home(p, self.id);
                    assert_eq!(
                        h,
                        self.id,
                        "{p} asked of {} but its home is {h}",
                        self.id
                    );
                    self.pages.set_home(p, &mut st, self.id);
                }
                if !st.at_home(self.id) {
                    elsewhere(
                        st.home
                            .expect("a page whose home is not here has a known home"),
                    );
                    return Some(None);
                }
                Some(Some(st))
            }
        }
    }

    /// What the home piggybacks on a reply about `p`.
    fn piggyback(&self, p: PageId, st: &PageState) -> Piggyback {
        Piggyback {
            sharers: self.dir.sharers(&self.net, p, st),
            home_writing: st.home_writing,
        }
    }

    /// At the home: serves a fetch of `p` by `from`, moving the home to it if this is its
    /// first touch since initialization and no node has touched the page since (section
    /// 2.3.1, `home.rs`), or if it asks to migrate and this node is not writing the page
    /// (section 2.3.5); or letting it hold the page exclusively if it asks and will be the
    /// only sharer (module doc). No other node holds the page exclusively. `copy`: the
    /// requester's valid copy, if it has one. A migration refused while the home writes
    /// the page is answered with the page if the requester has no valid copy (the request
    /// rode on its page update, 2.3.5), else with `Refused`; one granted to a copy of the
    /// master's version, with `Granted` and no page.
    fn serve_fetch(
        &self,
        p: PageId,
        st: &mut PageGuard<'_>,
        from: NodeId,
        want: Want,
        copy: Option<CopyVersion>,
        answer: &dyn Fn(&Reply<'_>),
    ) {
        debug_assert_eq!(st.excl_at, None);
        let Want {
            mut migrate,
            exclusive,
            rehome,
        } = want;
        let rehome = rehome && std::mem::take(&mut st.rehome_grant);
        if !rehome && migrate && st.home_writing {
            if copy.is_some() {
                answer(&Reply::Refused {
                    meta: self.piggyback(p, st),
                });
                return;
            }
            // Served as the plain fetch the requester would send next (a home writing in
            // exclusive mode stops below, as for any fetch).
            migrate = false;
        }
        if st.exclusive {
            // Downgrade before copying, so every later write here faults and is noticed.
            self.home_stops_writing(p, st);
            NodeCounters::bump(&self.counters.exclusive_exits);
        }
        st.sharers.insert(from);
        if migrate || rehome {
            // Home migration never moves a master copy in network space (2.3.5); the
            // first touch after initialization may, as first touch attaches one.
            debug_assert!(rehome || !self.data.master_in_network_space());
            // A requester whose copy is the master's version gets no page; otherwise the
            // copy into the grant is the transfer (charged as wire time).
            // (Only home migration keeps versions true: `PageState::version`.)
            let current = migrate
                && !rehome
                && self.protocol.home == HomePolicy::Migrating
                && !self.data.master_in_network_space()
                && copy.is_some_and(|c| {
                    c.version == st.version && {
                        assert!(
                            c.check == 0 || c.check == self.page_check(p),
                            "{}: {p} at version {} differs from {from}'s copy of it",
                            self.id,
                            st.version
                        );
                        true
                    }
                });
            let data = (!current).then(|| self.snapshot_page(p));
            // The first request since initialization ended: every node dropped its copy
            // at the end, and none has fetched it since, so the requester is the only
            // sharer (a home-held set may still name nodes whose drops arrive late).
            let mut sharers = if rehome {
                NodeSet::only(from)
            } else {
                self.dir.sharers(&self.net, p, st).with(from)
            };
            if st.access == super::Access::Invalid {
                sharers.remove(self.id);
                if rehome {
                    // This node has not mapped the page since initialization: it shares
                    // it no more, and must not hold the new home out of exclusive mode.
                    self.dir.leave(&self.net, self.id, p);
                }
            }
            st.rehome_ask = false;
            // Remote-write data: nothing is written to this copy from now on (every
            // node's first touch since initialization asks this node first, and it
            // now redirects), and the new home attaches its own before it is named.
            self.data_attach(p, false);
            self.pages.set_home(p, st, from);
            st.sharers = NodeSet::EMPTY;
            self.dir.publish_home(&self.net, p, from);
            st.check(self.id);
            let meta = Piggyback {
                sharers,
                home_writing: false,
            };
            let version = st.version;
            match &data {
                Some(data) => answer(&Reply::Page {
                    data,
                    meta,
                    migrated: true,
                    rehomed: rehome,
                    exclusive: false,
                    version,
                }),
                None => answer(&Reply::Granted { meta, version }),
            }
            return;
        }
        if exclusive
            && !st.recalling
            && st.access == super::Access::Invalid
            && self.dir.sharers(&self.net, p, st).without(from).is_empty()
            && !self.broadcast_copies_may_exist(p)
        {
            // The only sharer: grant, with the master copy (never broadcast meanwhile).
            st.excl_at = Some(from);
            st.check(self.id);
            let data = self.snapshot_page(p);
            answer(&Reply::Page {
                data: &data,
                meta: self.piggyback(p, st),
                migrated: false,
                rehomed: false,
                exclusive: true,
                version: st.version,
            });
            return;
        }
        let data = self.broadcast_serve(p, st);
        st.check(self.id);
        answer(&Reply::Page {
            data: &data,
            meta: self.piggyback(p, st),
            migrated: false,
            rehomed: false,
            exclusive: false,
            version: st.version,
        });
    }
}
