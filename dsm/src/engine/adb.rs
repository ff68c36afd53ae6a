//! The engine's side of adaptive data broadcast (CSM-ADB, section 2.3.6); the buffers,
//! epochs and heuristics are in `crate::broadcast`. Under any other variant these calls do
//! nothing but copy the page as a plain fetch would.
//!
//! * The home, serving a fetch, counts the request; when the heuristics say the page is
//!   widely read, it publishes its master copy into its broadcast buffer as well as
//!   replying. The copy is tagged with the page's modification epoch read before the
//!   copy was taken.
//! * A node about to fetch looks in the home's buffer first and takes a copy whose tag is
//!   the page's current epoch and whose version word (a seqlock) shows it whole.
//! * A release that modifies the page bumps its epoch (the releaser does it, since under
//!   remote-write data the home never sees the diff arrive), which invalidates every
//!   broadcast copy of the page.
//! * A release at the home starts a new synchronization interval for the heuristics.

use super::Node;
use crate::page::PageState;
use crate::stats::NodeCounters;

impl Node {
    /// At the home, serving a fetch of `p`: the master copy to send, published to the
    /// broadcast buffers too if the page is widely read.
    pub(super) fn broadcast_serve(&self, p: u32, _st: &PageState) -> Vec<u8> {
        let Some(b) = &self.regions.broadcast else {
            // The copy into the reply is the transfer (charged as wire time).
            return self.snapshot_page(p);
        };
        let tag = b.epoch(&self.net, p);
        let data = self.snapshot_page(p);
        if b.note_request(p, self.service.pending_fetches(p)) && b.publish(&self.net, p, tag, &data)
        {
            NodeCounters::bump(&self.counters.pages_broadcast);
        }
        data
    }

    /// Before fetching `p` from `home`: takes a valid broadcast copy if there is one.
    pub(super) fn broadcast_lookup(&self, p: u32, home: usize) -> bool {
        let Some(b) = &self.regions.broadcast else {
            return false;
        };
        let mut buf = vec![0u8; self.page_bytes];
        if !b.lookup(&self.net, home, p, &mut buf) {
            return false;
        }
        self.install_page(p, &buf);
        NodeCounters::bump(&self.counters.broadcast_hits);
        true
    }

    /// A release modified `p`: invalidate its broadcast copies.
    pub(super) fn broadcast_modified(&self, p: u32) {
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
