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
//!   retried at the next poll (the lock holder is a processor of this node that does not
//!   wait on the network for this page while this node is its home, or one that is
//!   waiting for the migration's answer);
//! * this node is the home: the handler takes the lock, checks the home again under it,
//!   and acts on the master copy.
//!
//! So a message for a page is applied only to the master copy, at most once.

use super::{Node, PageGuard};
use crate::config::DataStrategy;
use crate::ids::NodeId;
use crate::page::{Hint, PageState, NO_HOME};
use crate::stats::NodeCounters;
use crate::wire::{kind, Msg, Piggyback, Reply};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A message kept for later: its page was busy.
struct Deferred {
    page: u32,
    from: usize,
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
    waiting: AtomicUsize,
    unlocks: AtomicUsize,
    /// The page of the fetch being served and how many other fetches of it arrived in the
    /// same pass over the rings or wait deferred.
    batch: Mutex<(u32, usize)>,
}

impl Service {
    /// A page lock was released: if messages wait for a page, wake the node's service.
    pub fn page_unlocked(&self, seam: &crate::wait::Seam<'_>) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.unlocks.fetch_add(1, Ordering::AcqRel);
            seam.wake();
        }
    }

    /// How many page unlocks have happened while messages were deferred (the service
    /// loop's wait ends when this moves).
    pub fn unlocks(&self) -> usize {
        self.unlocks.load(Ordering::Acquire)
    }

    /// Fetches of `p` waiting right now (for adaptive broadcast's "several requests at
    /// once"). Read by the serving thread, which holds the queue.
    pub fn pending_fetches(&self, p: u32) -> usize {
        let (page, n) = *self.batch.lock().expect("poisoned");
        if page == p {
            n
        } else {
            0
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
fn page_of(m: &Msg<'_>) -> Option<u32> {
    match *m {
        Msg::Fetch { page, .. } | Msg::Diff { page, .. } | Msg::Drop { page } => Some(page.0),
        _ => None,
    }
}

impl Node {
    /// Handles deferred messages whose page is free again, then every message that has
    /// arrived. Returns how many messages were handled. Only one thread serves at a time;
    /// the others return at once.
    pub(crate) fn serve_once(&self) -> usize {
        let Ok(mut queue) = self.service.deferred.try_lock() else {
            return 0;
        };
        let mut handled = 0;
        let mut fetched: Vec<u32> = Vec::new();
        if !queue.is_empty() {
            let mut busy: Vec<u32> = Vec::new();
            let mut i = 0;
            while i < queue.len() {
                let d = &queue[i];
                if busy.contains(&d.page) {
                    i += 1;
                    continue;
                }
                match self.handle_bytes(d.from, d.kind, d.slot, d.token, &d.payload) {
                    Outcome::Done => {
                        queue.remove(i);
                        handled += 1;
                    }
                    Outcome::Defer => {
                        busy.push(d.page);
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
            let page = Msg::decode(m.kind, m.payload)
                .ok()
                .as_ref()
                .and_then(page_of);
            let queued = page.is_some_and(|p| queue.iter().any(|d| d.page == p));
            if let (Some(p), true) = (page, m.kind == kind::FETCH) {
                let others = fetched.iter().filter(|&&q| q == p).count()
                    + queue
                        .iter()
                        .filter(|d| d.page == p && d.kind == kind::FETCH)
                        .count();
                *self.service.batch.lock().expect("poisoned") = (p, others);
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
                    from: m.from,
                    kind: m.kind,
                    slot: m.slot,
                    token: m.token,
                    payload: m.payload.to_vec(),
                });
            }
        });
        self.service.waiting.store(queue.len(), Ordering::Release);
        handled
    }

    fn reply(&self, from: usize, slot: u16, token: u32, reply: &Reply<'_>) {
        let mut out = Vec::new();
        reply.encode(&mut out);
        self.net
            .reply(from, slot, token, &out)
            .unwrap_or_else(|e| Self::net_err(e));
    }

    fn handle_bytes(&self, from: usize, k: u16, slot: u16, token: u32, payload: &[u8]) -> Outcome {
        super::rules::in_handler(|| self.handle_message(from, k, slot, token, payload))
    }

    fn handle_message(
        &self,
        from: usize,
        k: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Outcome {
        let msg = Msg::decode(k, payload).unwrap_or_else(|e| {
            panic!("node {}: malformed message from node {from}: {e}", self.id)
        });
        let answer = |r: &Reply<'_>| self.reply(from, slot, token, r);
        match msg {
            Msg::HomeQuery { page } => {
                let home = self.dir.assign_home(&self.net, page.0, from);
                answer(&Reply::Home {
                    home: NodeId::from_usize(home),
                });
                Outcome::Done
            }
            Msg::Fetch { page, migrate } => {
                let Some(mut st) = self.lock_as_home(page.0, |h| answer(&Reply::Moved { home: h }))
                else {
                    return Outcome::Defer;
                };
                if let Some(mut st) = st.take() {
                    self.serve_fetch(page.0, &mut st, from, migrate, &answer);
                }
                Outcome::Done
            }
            Msg::Diff { page, runs } => {
                let Some(mut st) = self.lock_as_home(page.0, |h| answer(&Reply::Moved { home: h }))
                else {
                    return Outcome::Defer;
                };
                if let Some(st) = st.take() {
                    runs.check(self.page_bytes).unwrap_or_else(|e| {
                        panic!("node {}: bad diff from node {from}: {e}", self.id)
                    });
                    self.apply_runs(page.0, runs.iter().map(|(o, b)| (o as usize, b)));
                    answer(&Reply::DiffAck {
                        meta: self.piggyback(page.0, &st),
                    });
                }
                Outcome::Done
            }
            Msg::Drop { page } => {
                let Some(mut st) = self.lock_as_home(page.0, |_| {
                    NodeCounters::bump(&self.counters.stale_drops);
                }) else {
                    return Outcome::Defer;
                };
                if let Some(mut st) = st.take() {
                    st.sharers &= !(1u64 << from);
                }
                Outcome::Done
            }
            Msg::Notice { pages } => {
                self.dir.receive_notices(pages.iter().map(|p| p.0));
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

    /// For a handler acting on page `p` at its home: `None` if the message must be
    /// deferred; `Some(None)` if another node is the home (after calling `elsewhere` with
    /// it); `Some(Some(guard))` with the page locked at its home.
    #[allow(clippy::option_option)]
    fn lock_as_home(
        &self,
        p: u32,
        elsewhere: impl FnOnce(NodeId),
    ) -> Option<Option<PageGuard<'_>>> {
        match self.pages.hint(p, self.id) {
            Hint::Pending => None,
            Hint::Elsewhere(h) => {
                elsewhere(NodeId::from_usize(h));
                Some(None)
            }
            Hint::Home | Hint::Unknown => {
                let mut st = self.try_lock_page(p)?;
                if st.home == NO_HOME {
                    // The manager may have told the requester that we are home before its
                    // reply to our own claim reached us: the request itself proves it.
                    let h = self.pages.learn_first_home(p, self.id);
                    assert_eq!(
                        h, self.id,
                        "page {p} asked of node {} but its home is node {h}",
                        self.id
                    );
                    self.pages.set_home(p, &mut st, self.id);
                }
                if !st.at_home(self.id) {
                    elsewhere(NodeId::from_usize(st.home as usize));
                    return Some(None);
                }
                Some(Some(st))
            }
        }
    }

    /// What the home piggybacks on a reply about `p`.
    fn piggyback(&self, p: u32, st: &PageState) -> Piggyback {
        Piggyback {
            sharers: self.dir.sharers(&self.net, p, st),
            home_writing: st.home_writing,
        }
    }

    /// At the home: serves a fetch of `p` by `from`, migrating the home to it if it asks
    /// and this node is not writing the page (section 2.3.5).
    fn serve_fetch(
        &self,
        p: u32,
        st: &mut PageGuard<'_>,
        from: usize,
        migrate: bool,
        answer: &dyn Fn(&Reply<'_>),
    ) {
        if migrate && st.home_writing {
            answer(&Reply::Refused {
                meta: self.piggyback(p, st),
            });
            return;
        }
        if st.exclusive {
            // Downgrade before copying, so every later write here faults and is noticed.
            self.home_stops_writing(p, st);
            NodeCounters::bump(&self.counters.exclusive_exits);
        }
        st.sharers |= 1u64 << from;
        if migrate {
            debug_assert_ne!(self.protocol.data, DataStrategy::RemoteWrite);
            // The copy into the grant is the transfer (charged as wire time).
            let data = self.snapshot_page(p);
            let mut sharers = self.dir.sharers(&self.net, p, st) | 1u64 << from;
            if st.access == super::Access::Invalid {
                sharers &= !(1u64 << self.id);
            }
            self.pages.set_home(p, st, from);
            st.sharers = 0;
            self.dir.publish_home(&self.net, p, from);
            st.check(self.id);
            answer(&Reply::Page {
                data: &data,
                meta: Piggyback {
                    sharers,
                    home_writing: false,
                },
                migrated: true,
            });
            return;
        }
        let data = self.broadcast_serve(p, st);
        st.check(self.id);
        answer(&Reply::Page {
            data: &data,
            meta: self.piggyback(p, st),
            migrated: false,
        });
    }
}
