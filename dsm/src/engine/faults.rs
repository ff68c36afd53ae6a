//! Page faults (section 2.2): the fault entry, read and write faults, fetching a page
//! from its home (with first touch, home migration and the move at the end of
//! initialization), and a node becoming a page's home. The rules they keep are in the
//! module doc of `engine`.

use super::Node;
use super::{PageGuard, Want};
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::Access;
use crate::stats::{Clock, NodeCounters};
use crate::wait::WaitFor;
use crate::wire::{Msg, Reply};

impl Node {
    /// Resolves an access fault at heap offset `offset`. Returns an error message if the
    /// access is outside every allocation.
    pub fn fault(&self, offset: usize, write: bool) -> Result<(), String> {
        if offset >= self.heap_used {
            return Err(self.outside_message(offset));
        }
        let _entry = Clock::enter();
        crate::sched::charge_cost("host.fault_ns", |h, _| h.fault_ns as f64);
        let p = PageId((offset / self.page_bytes) as u32);
        if write {
            NodeCounters::bump(&self.counters.write_faults);
            self.write_fault(p);
        } else {
            NodeCounters::bump(&self.counters.read_faults);
            self.read_fault(p);
        }
        Ok(())
    }

    pub(super) fn outside_message(&self, offset: usize) -> String {
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

    pub(super) fn read_fault(&self, p: PageId) {
        self.learn_home(p);
        let mut st = self.lock_for_fault(p);
        if st.access != Access::Invalid {
            return; // another processor of this node resolved it
        }
        let rehome = self.take_rehome(&mut st);
        self.map_in(
            p,
            &mut st,
            Want {
                rehome,
                ..Want::default()
            },
        );
        st.check(self.id);
    }

    /// Makes an invalid page readable: at the home, just map the master copy; elsewhere,
    /// join the sharing set and fetch the page, asking the home for what `want` says. The
    /// home may have moved here by the time this returns. Returns true if the home
    /// granted exclusive mode.
    pub(super) fn map_in(&self, p: PageId, st: &mut PageGuard<'_>, want: Want) -> bool {
        let mut granted = false;
        if st.at_home(self.id) {
            self.dir.join(&self.net, self.id, p, st);
        } else {
            granted = self.fetch(p, st, want);
        }
        if st.access == Access::Invalid {
            self.protector.set(p, Access::Read);
            st.access = Access::Read;
        }
        granted
    }

    /// Locks `p` for a fault. At the home, a page another node holds in exclusive mode is
    /// first recalled from it (see `service.rs`, "Exclusive mode away from the home"): the
    /// processor releases the home page's lock before it asks (it never waits on the
    /// network holding it), and applies the holder's page under the lock again; if a recall
    /// of the page is under way (by another node, or another processor here), it waits
    /// until the holder's flush lands instead ([`crate::page::PageState::awaits_recall`]),
    /// as a waiter for the page's state (module doc, "Wake-ups on a page's release"), and
    /// then starts over: the page may have been granted anew meanwhile, and then it
    /// recalls it itself. (Waiting for `excl_at` to clear instead hung a run: the recall
    /// ended, the holder was granted the page again before this processor looked, and no
    /// recall was ever sent for that grant; `tests/recall.rs` replays it.) Its look
    /// takes the lock only if it is free and releases it unchanged; a busy lock ends the
    /// wait, and the processor waits for the lock in [`Node::lock_page`] instead, which
    /// every release wakes.
    pub(super) fn lock_for_fault(&self, p: PageId) -> PageGuard<'_> {
        loop {
            let mut st = self.lock_page(p);
            let Some(holder) = st.excl_at.filter(|_| st.at_home(self.id)) else {
                return st;
            };
            if st.awaits_recall() {
                st.release_unchanged();
                crate::testing::waiting_for_recall(self.id, p);
                self.seam()
                    .until_flagged(WaitFor::Flush { page: p }, &self.flush_waiters, || {
                        self.look_at_page(p, |s| !s.awaits_recall())
                            .unwrap_or(true)
                    })
                    .unwrap_or_else(|e| Self::net_err(e));
                continue;
            }
            st.recalling = true;
            st.check(self.id);
            drop(st);
            let data = self.recall(p, holder);
            let mut st = self.lock_page(p);
            assert!(
                st.recalling,
                "{}: {p}'s recall ended by another",
                self.id
            );
            if !self.apply_flush(p, &mut st, holder, &data) {
                // The holder flushed the page itself (it dropped it) before our recall.
                assert!(data.is_empty(), "{}: {p} flushed twice", self.id);
            }
            st.recalling = false;
            st.check(self.id);
            return st;
        }
    }

    pub(super) fn write_fault(&self, p: PageId) {
        self.learn_home(p);
        let mut st = self.lock_for_fault(p);
        if st.access == Access::Write {
            return;
        }
        let rehome = self.take_rehome(&mut st);
        let mut granted = false;
        let migrate = !st.at_home(self.id) && self.may_migrate(p, &st);
        if migrate || rehome {
            // A write fault away from the home: ask the home to move here (2.3.5), or,
            // on this node's first touch since initialization, to move here if no node
            // has touched the page since (2.3.1). The reply carries the master copy if
            // the home moves, so the page is current. If it does not, ask to write the
            // page exclusively as below.
            let want = Want {
                migrate,
                rehome,
                exclusive: !migrate && st.access == Access::Invalid && self.may_hold_exclusive(),
            };
            granted = if st.access == Access::Invalid {
                self.map_in(p, &mut st, want)
            } else {
                self.fetch(p, &mut st, want)
            };
        } else if st.access == Access::Invalid {
            // Away from the home, ask to write the page exclusively (section 2.2).
            let exclusive = !st.at_home(self.id) && self.may_hold_exclusive();
            granted = self.map_in(
                p,
                &mut st,
                Want {
                    exclusive,
                    ..Want::default()
                },
            );
        } else if !st.at_home(self.id)
            && self.may_hold_exclusive()
            && self.dir.sole_sharer(&self.net, p, self.id)
        {
            // A clean copy, and the replicated directory says no other node (the home
            // included) shares the page: ask for it exclusively. The grant brings the
            // master copy again (our copy is read-only, so nothing of ours is lost).
            granted = self.fetch(
                p,
                &mut st,
                Want {
                    exclusive: true,
                    ..Want::default()
                },
            );
        }
        if st.at_home(self.id) {
            self.home_starts_writing(p, &mut st);
        } else if granted {
            // The only sharer: no twin, no dirty-list entry, no notices until the home
            // recalls the page for a second sharer (or this node drops it).
            st.exclusive = true;
            NodeCounters::bump(&self.counters.exclusive_entries);
        } else {
            st.twin = Some(self.twin_page(p));
            NodeCounters::bump(&self.counters.twins);
            st.dirty = true;
            self.dirty.lock().expect("poisoned").push(p);
            self.dir.join(&self.net, self.id, p, &mut st);
        }
        self.protector.set(p, Access::Write);
        st.access = Access::Write;
        st.check(self.id);
    }

    /// Fetches `p` from its home into this node's copy, following the home if it has
    /// moved. With `want.migrate` (or `want.rehome`), asks the home to move here; if it
    /// does, this node is the home when this returns. With `want.exclusive`, asks to hold
    /// the page exclusively and returns whether the home granted it. If the home answers
    /// that another node holds the page exclusively, recalls it there and hands its page
    /// to the home with the fetch (`Flush`). The caller holds the page lock.
    pub(super) fn fetch(&self, p: PageId, st: &mut PageGuard<'_>, want: Want) -> bool {
        let Want {
            migrate,
            exclusive,
            rehome,
        } = want;
        // A migration request is counted as an attempt once it is answered, unless the
        // home moved here as its first toucher since initialization instead (2.3.1).
        let mut attempt = migrate;
        let mut need_data = st.access == Access::Invalid;
        // Replicated directory: announce ourselves before asking, so that a release at
        // the home that misses our entry happened before our fetch was served.
        if need_data {
            self.dir.join(&self.net, self.id, p, st);
        }
        let mut out = Vec::with_capacity(self.page_bytes + 64);
        // The holder and page of a recall we owe the home (it waits for our flush).
        let mut flush: Option<(NodeId, Vec<u8>)> = None;
        loop {
            let Some(home) = st.home.filter(|&h| h != self.id) else {
                panic!("{}: fetching {p} with home {:?}", self.id, st.home);
            };
            if need_data
                && !migrate
                && !rehome
                && flush.is_none()
                && self.broadcast_lookup(p, home, st)
            {
                return false;
            }
            if migrate || rehome {
                self.pages.set_pending(p, true);
            }
            let msg = match &flush {
                Some((holder, data)) => Msg::Flush {
                    page: p,
                    holder: *holder,
                    fetch: true,
                    data,
                },
                None => {
                    // A valid copy says which version of the master it is (and, checked
                    // builds, what it holds), so a granted migration need not resend it.
                    let (version, check) = if need_data || !migrate {
                        (0, 0)
                    } else {
                        (st.version, self.page_check(p))
                    };
                    Msg::Fetch {
                        page: p,
                        migrate,
                        exclusive,
                        rehome,
                        needs_page: need_data,
                        version,
                        check,
                    }
                }
            };
            let reply = self.call(home, &msg, &mut out);
            NodeCounters::bump(&self.counters.page_requests);
            // A granted migration turns the pending mark into this node's home in one
            // store (`become_home`); clearing it first would let a handler, for an
            // instant, redirect a request for the page back to the old home.
            if (migrate || rehome)
                && !matches!(reply, Reply::Page { migrated: true, .. } | Reply::Granted { .. })
            {
                self.pages.set_pending(p, false);
            }
            if attempt
                && matches!(
                    reply,
                    Reply::Page { .. } | Reply::Refused { .. } | Reply::Granted { .. }
                )
            {
                attempt = false;
                if !matches!(reply, Reply::Page { rehomed: true, .. }) {
                    NodeCounters::bump(&self.counters.migration_attempts);
                }
            }
            match reply {
                Reply::Page {
                    data,
                    meta,
                    migrated,
                    rehomed,
                    exclusive: granted,
                    version,
                } => {
                    self.install_page(p, data);
                    st.version = version;
                    NodeCounters::bump(&self.counters.page_transfers);
                    assert!(
                        !rehomed || (migrated && rehome),
                        "{}: {p} rehomed here unasked",
                        self.id
                    );
                    if migrated {
                        // The home says which: the first toucher since initialization
                        // (2.3.1), or a migration (2.3.5).
                        let moved = if rehomed {
                            &self.counters.rehomes
                        } else {
                            &self.counters.migrations
                        };
                        NodeCounters::bump(moved);
                        self.become_home(p, st, meta.sharers);
                    } else {
                        st.home_writing = meta.home_writing;
                    }
                    assert!(
                        !granted || (exclusive && flush.is_none()),
                        "{}: {p} granted exclusively unasked",
                        self.id
                    );
                    return granted;
                }
                Reply::Granted { meta, version } => {
                    // Our copy is the master's version: it becomes the master copy.
                    assert!(
                        migrate && !need_data && version == st.version,
                        "{}: {p} granted without a page (migrate {migrate}, version {} here, \
                         {} at the home, state {:?})",
                        self.id,
                        st.version,
                        version,
                        **st
                    );
                    NodeCounters::bump(&self.counters.migrations);
                    self.become_home(p, st, meta.sharers);
                    return false;
                }
                Reply::Holder { holder } => {
                    assert!(
                        !migrate && flush.is_none() && holder != self.id,
                        "{}: {p} answered with holder {holder:?} (migrate {migrate})",
                        self.id
                    );
                    crate::testing::told_holder(self.id, p);
                    let data = self.recall(p, holder);
                    flush = Some((holder, data));
                    continue;
                }
                Reply::Refused { meta } => {
                    // The home keeps the page: it is writing it, so it has touched it
                    // since initialization too. It refuses with no page only a request
                    // that needs none (otherwise the page comes with the refusal).
                    assert!(
                        !need_data,
                        "{}: {p} refused without the page this node lacks",
                        self.id
                    );
                    st.home_writing = meta.home_writing;
                    return false;
                }
                Reply::Moved { home: to } => {
                    NodeCounters::bump(&self.counters.redirects);
                    assert_ne!(to, home, "{home} redirected {p} to itself");
                    self.pages.set_home(p, st, to);
                    if to == self.id {
                        // The home moved here meanwhile: only our own request can do
                        // that, and we hold the lock, so this is a protocol error.
                        for l in crate::page::TRACE
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .filter(|l| l.contains(&format!("{p} ")))
                        {
                            eprintln!("{l}");
                        }
                        panic!(
                            "{}: {p} redirected to this node by {home} (migrate: {migrate}, state {:?})",
                            self.id, **st
                        );
                    }
                }
                r => panic!("{}: unexpected reply to a fetch: {r:?}", self.id),
            }
            need_data = need_data || st.access == Access::Invalid;
        }
    }

    /// This node just became `p`'s home by migration (or as its first toucher since
    /// initialization), with the master copy installed. Under remote-write data it
    /// receives the page's diffs from now on: it attaches its receive mapping before the
    /// hint names it home, and the old home detached its own before it answered.
    pub(super) fn become_home(&self, p: PageId, st: &mut PageGuard<'_>, sharers: NodeSet) {
        self.data_attach(p, true);
        self.pages.set_home(p, st, self.id);
        st.sharers = sharers.with(self.id);
        st.home_writing = false;
        if st.access == Access::Write {
            unreachable!("a node takes a page's home only while it cannot write the page");
        }
        if st.access == Access::Invalid {
            self.protector.set(p, Access::Read);
            st.access = Access::Read;
        }
        self.dir.join(&self.net, self.id, p, st);
    }
}
