//! Data propagation: how a release's modifications reach the master copy (the paper's
//! "data" column of Table 1). What differs between the two strategies is a method of
//! [`Data`], one file each ([`remote_write`], [`messages`]), chosen once when the node is
//! built ([`strategy`]):
//!
//! * Remote write (CSM-DMS, section 2.3.1 "Data"; CSM-ADB, 2.3.6): the master copies live
//!   in network address space, received at each page's home. A diff is transmitted
//!   straight into the home's copy, one transmit per group of runs in a receive page, and
//!   the release completes without an acknowledgement: total order delivers the diff
//!   before anything this node transmits later (the write notices, the lock release).
//! * Diff messages (CSM-MS, -S, -None and the -Mg variants, sections 2.3.2-2.3.5): a diff
//!   travels as explicit messages (several if it outgrows one) that the home applies and
//!   acknowledges; the acknowledgement piggybacks the home's sharing set and whether the
//!   home is writing the page (2.3.3). A home that has moved answers with its successor,
//!   and the rest of the diff goes there: what the old home applied before it moved went
//!   along with the master copy, so nothing is lost and nothing applied twice.

mod messages;
mod remote_write;

use super::{Node, PageGuard};
use crate::config::DataStrategy;
use crate::diff;
use crate::ids::{NodeSet, PageId};
use crate::page::PageState;
use crate::stats::NodeCounters;
use std::sync::atomic::Ordering;

/// What differs between the two data strategies, as the engine asks it.
pub(super) trait Data: Sync {
    /// Sends `node`'s diff `d` (`crate::diff`'s encoding) of page `p` to its home; returns
    /// the page's sharers as the home (or the replicated directory) knows them. The caller
    /// holds the page lock and has write-protected the page.
    fn send_diff(&self, node: &Node, p: PageId, st: &mut PageGuard<'_>, d: &[u8]) -> NodeSet;

    /// The data of page `p` that a recall took out of exclusive mode at `node`, as the
    /// recall's answer carries it.
    fn recalled_data(&self, node: &Node, p: PageId, data: Vec<u8>) -> Vec<u8>;

    /// Whether the master copies live in network address space (remote-write data), where
    /// home migration never moves one (2.3.5).
    fn master_in_network_space(&self) -> bool;
}

/// The strategy a protocol's data column names.
pub(super) fn strategy(d: DataStrategy) -> &'static dyn Data {
    match d {
        DataStrategy::RemoteWrite => &remote_write::RemoteWrite,
        DataStrategy::Messages => &messages::Messages,
    }
}

impl Node {
    /// Remote-write data: attaches (or detaches) this node's receive mapping of page `p`'s
    /// master copy. Nothing to do under diff messages.
    pub(super) fn data_attach(&self, p: PageId, attach: bool) {
        if let Some(data) = self.regions.data {
            let (at, len) = (u64::from(p.0) * self.page_bytes as u64, self.page_bytes as u64);
            if attach {
                self.net.attach_rx(&data, at, len, false);
            } else {
                self.net.detach_rx(&data, at, len);
            }
        }
    }

    /// Remote-write data: asserts the rule of reception (module doc of `engine`, "Rules"):
    /// this node receives remote writes into its copy of page `p` exactly while it is the
    /// page's home. Before the page's home is known here (`st.home` unset) a claim may be
    /// in flight, and the node may already receive: it has learnt that it won.
    pub(super) fn check_reception(&self, p: PageId, st: &PageState) {
        let Some(data) = self.regions.data else {
            return;
        };
        if st.home.is_none() {
            return;
        }
        let receiving = self.net.receives(&data, u64::from(p.0) * self.page_bytes as u64);
        assert_eq!(
            receiving,
            st.at_home(self.id),
            "{}: {p} {} remote writes to its master copy while its home is {:?}: {st:?}",
            self.id,
            if receiving {
                "receives"
            } else {
                "does not receive"
            },
            st.home
        );
    }

    /// The data of page `p` that a recall took out of exclusive mode here, as the recall's
    /// answer carries it ([`Data::recalled_data`]).
    pub(super) fn recalled_data(&self, p: PageId, data: Vec<u8>) -> Vec<u8> {
        self.data.recalled_data(self, p, data)
    }

    /// Sends the diff of page `p` against `twin` to its home; returns the page's sharers
    /// as the home (or the replicated directory) knows them. The caller holds the page
    /// lock and has write-protected the page.
    pub(super) fn send_diff(&self, p: PageId, st: &mut PageGuard<'_>, twin: &[u8]) -> NodeSet {
        let page = self.snapshot_page(p);
        let mut d = Vec::with_capacity(64);
        let changed = diff::encode(twin, &page, &mut d);
        let nruns = diff::runs(&d).count();
        crate::sched::charge_cost("host.diff_scan_ns_per_byte and host.diff_run_ns", |h, _| {
            h.diff_scan_ns_per_byte * self.page_bytes as f64 + h.diff_run_ns as f64 * nruns as f64
        });
        NodeCounters::bump(&self.counters.diffs);
        self.counters
            .diff_bytes
            .fetch_add(changed as u64, Ordering::Relaxed);
        self.counters
            .diff_runs
            .fetch_add(nruns as u64, Ordering::Relaxed);
        self.data.send_diff(self, p, st, &d)
    }
}
