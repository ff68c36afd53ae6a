//! The engine's side of adaptive data broadcast (CSM-ADB, section 2.3.6); the buffers,
//! epochs and heuristics are in `crate::broadcast`. Under any other variant these calls do
//! nothing but copy the page as a plain fetch would.
//!
//! * The home, serving a fetch, counts the request; when the heuristics say the page is
//!   widely read, it publishes its master copy into its broadcast buffer as well as
//!   replying. The copy is tagged with the page's modification epoch read before the
//!   copy was taken.
//! * A node about to fetch looks in the home's buffer first and takes a copy whose tag is
//!   the page's current epoch and whose version word (a seqlock) shows it whole. If the
//!   buffer holds a copy of the page at all, it first waits for its join of the page's
//!   sharing set to land (an acknowledge request), so that a concurrent releaser either
//!   names it as a sharer or has its increment counted (`crate::broadcast`, "The reader's
//!   join").
//! * A home that has ever published a page does not write it exclusively, and notifies
//!   every node when it releases it: a node can hold a copy the home never served it
//!   (`crate::broadcast`, "Copies the home's release must reach").
//! * A release that modifies the page bumps its epoch (the releaser does it, since under
//!   remote-write data the home never sees the diff arrive), which invalidates every
//!   broadcast copy of the page.
//! * A release at the home starts a new synchronization interval for the heuristics.

use super::Node;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::PageState;
use crate::stats::NodeCounters;

impl Node {
    /// At the home, serving a fetch of `p`: the master copy to send, published to the
    /// broadcast buffers too if the page is widely read.
    pub(super) fn broadcast_serve(&self, p: PageId, _st: &PageState) -> Vec<u8> {
        let Some(b) = &self.regions.broadcast else {
            // The copy into the reply is the transfer (charged as wire time).
            return self.snapshot_page(p);
        };
        let tag = b.epoch(&self.net, p);
        let data = self.snapshot_page(p);
        if b.note_request(p, self.service.pending_fetches(p)) {
            if let Some(evicted) = b.publish_evicting(&self.net, p, tag, &data) {
                NodeCounters::bump(&self.counters.pages_broadcast);
                if evicted {
                    NodeCounters::bump(&self.counters.broadcast_evictions);
                }
            }
        }
        data
    }

    /// Before fetching `p` from `home`: takes a valid broadcast copy if there is one. The
    /// caller holds the page lock and has joined `p`'s sharing set.
    pub(super) fn broadcast_lookup(&self, p: PageId, home: NodeId, st: &PageState) -> bool {
        let Some(b) = &self.regions.broadcast else {
            return false;
        };
        if !b.holds(&self.net, home, p) {
            return false;
        }
        // Join before snapshot (`crate::broadcast`, "The reader's join"): the snapshot in
        // `lookup` must count every increment transmitted before our join, so our join must
        // have landed here first. Under the wall clock it has already: nothing to wait for.
        self.net
            .ack_via(&self.seam())
            .unwrap_or_else(|e| Self::net_err(e));
        assert!(
            self.dir.sharers(&self.net, p, st).contains(self.id),
            "{}: looking up a broadcast copy of {p} before its join is in its replica",
            self.id
        );
        let mut buf = vec![0u8; self.page_bytes];
        if !b.lookup(&self.net, home, p, &mut buf) {
            return false;
        }
        self.install_page(p, &buf);
        NodeCounters::bump(&self.counters.broadcast_hits);
        true
    }

    /// At the home, under `p`'s page lock: whether another node may hold a copy of `p` that
    /// this node did not serve it, so that its sharing set may not name it. Such a page is
    /// never written exclusively.
    pub(super) fn broadcast_copies_may_exist(&self, p: PageId) -> bool {
        self.regions
            .broadcast
            .as_ref()
            .is_some_and(|b| b.may_have_copies(p))
    }

    /// At the home's release of `p`, under its page lock: the nodes to notify, `sharers`
    /// or, if another node may hold a broadcast copy of `p`, every node.
    pub(super) fn broadcast_notice_targets(&self, p: PageId, sharers: NodeSet) -> NodeSet {
        if self.broadcast_copies_may_exist(p) {
            self.net.all_nodes()
        } else {
            sharers
        }
    }

    /// A release modified `p`: invalidate its broadcast copies.
    pub(super) fn broadcast_modified(&self, p: PageId) {
        if let Some(b) = &self.regions.broadcast {
            b.note_modified(&self.net, p);
        }
    }

    /// A release at this node starts a new synchronization interval.
    pub(super) fn broadcast_new_interval(&self) {
        if let Some(b) = &self.regions.broadcast {
            b.new_interval();
        }
    }
}
