//! Data propagation: how a release's modifications reach the master copy (the paper's
//! "data" column of Table 1).
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

use super::{Node, PageGuard};
use crate::config::DataStrategy;
use crate::diff;
use crate::ids::{NodeSet, PageId};
use crate::page::PageState;
use crate::stats::NodeCounters;
use crate::wire::{kind, DiffWriter, Reply};
use std::sync::atomic::Ordering;

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
    /// answer carries it: under remote-write data it is written into the home's master
    /// copy now, ordered before the answer, which then carries nothing; under diff
    /// messages the answer carries it.
    pub(super) fn recalled_data(&self, p: PageId, data: Vec<u8>) -> Vec<u8> {
        match self.protocol.data {
            DataStrategy::RemoteWrite => {
                let region = self
                    .regions
                    .data
                    .expect("remote-write data needs the data region");
                self.net
                    .tx(region)
                    .write(u64::from(p.0) * self.page_bytes as u64, &data);
                Vec::new()
            }
            DataStrategy::Messages => data,
        }
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
        match self.protocol.data {
            DataStrategy::RemoteWrite => {
                let data = self
                    .regions
                    .data
                    .expect("remote-write data needs the data region");
                // Exactly the changed bytes go on the wire: a word changed in part is
                // written in part (crate::diff), so other nodes' bytes of it survive.
                let runs: Vec<(usize, &[u8])> = diff::runs(&d).flat_map(|r| r.ranges()).collect();
                self.net
                    .tx(data)
                    .write_runs(u64::from(p.0) * self.page_bytes as u64, &runs);
                // Adaptive broadcast: the home never sees this diff arrive, so the
                // releaser invalidates the page's broadcast copies (2.3.6).
                self.broadcast_modified(p);
                // An acknowledge request between the diff and the read of the sharers. A
                // node whose fetch reached the home before our diff announced itself as a
                // sharer before that fetch; once our transfers have landed (and everything
                // ordered before them has reached us), our replica names it and it gets
                // our write notice. Without it, a diff still in flight (the modeled clock
                // delays every write by the latency) leaves a window in which the fetch
                // returns the page without our diff and our read misses the fetcher. Under
                // the wall clock every write has landed when it returns: nothing to wait for.
                self.net
                    .ack_via(&self.seam())
                    .unwrap_or_else(|e| Self::net_err(e));
                self.dir.sharers(&self.net, p, st)
            }
            DataStrategy::Messages => {
                let mut writer =
                    DiffWriter::with_budget(p, diff::runs(&d), self.diff_message_bytes);
                let mut msg = Vec::with_capacity(d.len().min(crate::net::MAX_MESSAGE_BYTES));
                let mut out = Vec::new();
                let mut sharers = NodeSet::EMPTY;
                let mut first = true;
                while writer.next_message(&mut msg) {
                    loop {
                        let home = st.home_node();
                        NodeCounters::bump(&self.counters.diff_messages);
                        match self.call_encoded(home, kind::DIFF, &msg, &mut out) {
                            Reply::DiffAck { meta } => {
                                sharers = meta.sharers;
                                st.home_writing = meta.home_writing;
                                break;
                            }
                            Reply::Moved { home: to } => {
                                NodeCounters::bump(&self.counters.redirects);
                                if !first {
                                    NodeCounters::bump(&self.counters.split_diff_redirects);
                                }
                                assert_ne!(
                                    to, home,
                                    "{home} redirected {p} to itself"
                                );
                                self.pages.set_home(p, st, to);
                            }
                            r => panic!("{}: unexpected reply to a diff: {r:?}", self.id),
                        }
                    }
                    first = false;
                }
                self.sharers_after_diff(p, st, sharers)
            }
        }
    }
}
