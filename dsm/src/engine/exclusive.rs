//! Exclusive mode (section 2.2: "a page that is shared by only one node is moved into
//! exclusive mode"): whether this node may hold pages exclusively, recalling an exclusive
//! copy for a second sharer, applying and ending it, and the home's own writing of a page
//! (which decides whether it may give the page away). The protocol away from the home is
//! told in `service.rs`, "Exclusive mode away from the home".

use super::Node;
use super::PageGuard;
use crate::ids::{NodeId, PageId};
use crate::page::{Access, PageState};
use crate::stats::NodeCounters;
use crate::wire::{Msg, Reply};

impl Node {
    /// What `f` says of page `p`'s state, if its lock is free (`None` if it is busy); the
    /// lock is released unchanged. The caller is a processor holding no page lock.
    pub(super) fn look_at_page<T>(&self, p: PageId, f: impl FnOnce(&PageState) -> T) -> Option<T> {
        let g = self.guard(p, self.pages.try_lock(p)?, true);
        let seen = f(&g);
        g.release_unchanged();
        Some(seen)
    }

    /// Asks `holder` to leave exclusive mode for `p` and returns its page (empty if it
    /// wrote the page into the master copy itself, or had already flushed it). The caller
    /// is a processor holding no home page's lock.
    pub(super) fn recall(&self, p: PageId, holder: NodeId) -> Vec<u8> {
        let mut out = Vec::new();
        match self.call(holder, &Msg::Recall { page: p }, &mut out) {
            Reply::Flushed { data } => data.to_vec(),
            r => panic!("{}: unexpected reply to a recall: {r:?}", self.id),
        }
    }

    /// Whether this node may ask to hold a page in exclusive mode away from its home: not
    /// under home migration, which moves the home to the writer instead (section 2.3.5;
    /// the writer then writes exclusively as the home).
    pub(super) fn may_hold_exclusive(&self) -> bool {
        self.protocol.home == crate::config::HomePolicy::FirstTouch
    }

    /// At the home: applies `holder`'s flush of `p` (its whole page, or nothing when it
    /// wrote the page into the master copy itself) if `holder` still holds the page
    /// exclusively, and ends its hold. False if it no longer does (it flushed already).
    pub(super) fn apply_flush(
        &self,
        p: PageId,
        st: &mut PageState,
        holder: NodeId,
        data: &[u8],
    ) -> bool {
        if st.excl_at != Some(holder) {
            return false;
        }
        if !data.is_empty() {
            self.install_page(p, data);
        }
        st.master_changes();
        st.excl_at = None;
        true
    }

    /// This node (not `p`'s home) leaves exclusive mode: write-protects the page and
    /// returns its contents for the master copy. The caller holds the page lock.
    pub(super) fn end_exclusive(&self, p: PageId, st: &mut PageState) -> Vec<u8> {
        debug_assert!(st.exclusive && !st.at_home(self.id));
        self.protector.set(p, Access::Read);
        st.access = Access::Read;
        st.exclusive = false;
        NodeCounters::bump(&self.counters.exclusive_exits);
        st.check(self.id);
        self.snapshot_page(p)
    }

    /// The home's processors start writing `p`: the page goes exclusive if no other node
    /// shares it (nor may hold a broadcast copy of it, `adb.rs`), or into the dirty list
    /// (for write notices) otherwise; the directory's
    /// "home is writing" bit is set either way.
    pub(super) fn home_starts_writing(&self, p: PageId, st: &mut PageGuard<'_>) {
        self.dir.join(&self.net, self.id, p, st);
        if self.dir.sharers(&self.net, p, st).without(self.id).is_empty()
            && !self.broadcast_copies_may_exist(p)
        {
            st.exclusive = true;
            NodeCounters::bump(&self.counters.exclusive_entries);
        } else {
            st.dirty = true;
            self.dirty.lock().expect("poisoned").push(p);
        }
        st.home_writing = true;
        st.master_changes();
        self.dir.set_home_writing(&self.net, self.id, p, true);
        // The home writes the master copy in place from now on: copies broadcast before
        // (2.3.6) become invalid now, not only when it stops (an exclusive page may never
        // be released, and a page whose readers all dropped it goes exclusive).
        self.broadcast_modified(p);
    }

    /// The home stops writing `p` (its release downgrades the page, or a fetch ends its
    /// exclusive mode): write-protect it and clear the directory's bit.
    pub(super) fn home_stops_writing(&self, p: PageId, st: &mut PageState) {
        // Every write the home made to the master copy happened since it started writing:
        // copies broadcast meanwhile (2.3.6) may lack some, so they become invalid.
        self.broadcast_modified(p);
        self.protector.set(p, Access::Read);
        st.access = Access::Read;
        st.dirty = false;
        st.exclusive = false;
        st.home_writing = false;
        st.master_changes();
        self.dir.set_home_writing(&self.net, self.id, p, false);
    }
}
