//! Remote-write data (CSM-DMS, section 2.3.1 "Data"; CSM-ADB, 2.3.6): the master copies
//! live in network address space, received at each page's home. A diff is transmitted
//! straight into the home's copy, one transmit per group of runs in a receive page, and
//! the release completes without an acknowledgement: total order delivers the diff before
//! anything this node transmits later (the write notices, the lock release).

use super::Data;
use crate::diff;
use crate::engine::{Node, PageGuard};
use crate::ids::{NodeSet, PageId};

pub(super) struct RemoteWrite;

impl Data for RemoteWrite {
    fn send_diff(&self, node: &Node, p: PageId, st: &mut PageGuard<'_>, d: &[u8]) -> NodeSet {
            let data = node
                .regions
                .data
                .expect("remote-write data needs the data region");
            // Exactly the changed bytes go on the wire: a word changed in part is
            // written in part (crate::diff), so other nodes' bytes of it survive.
            let runs: Vec<(usize, &[u8])> = diff::runs(d).flat_map(|r| r.ranges()).collect();
            node.net
                .tx(data)
                .write_runs(u64::from(p.0) * node.page_bytes as u64, &runs);
            // Adaptive broadcast: the home never sees this diff arrive, so the
            // releaser invalidates the page's broadcast copies (2.3.6).
            node.broadcast_modified(p);
            // An acknowledge request between the diff and the read of the sharers. A
            // node whose fetch reached the home before our diff announced itself as a
            // sharer before that fetch; once our transfers have landed (and everything
            // ordered before them has reached us), our replica names it and it gets
            // our write notice. Without it, a diff still in flight (the modeled clock
            // delays every write by the latency) leaves a window in which the fetch
            // returns the page without our diff and our read misses the fetcher. Under
            // the wall clock every write has landed when it returns: nothing to wait for.
            node.net
                .ack_via(&node.seam())
                .unwrap_or_else(|e| Node::net_err(e));
            node.dir.sharers(&node.net, p, st)
    }

    /// Into the master copy now, ordered before the recall's answer, which then carries
    /// nothing.
    fn recalled_data(&self, node: &Node, p: PageId, data: Vec<u8>) -> Vec<u8> {
        let region = node
            .regions
            .data
            .expect("remote-write data needs the data region");
        node.net
            .tx(region)
            .write(u64::from(p.0) * node.page_bytes as u64, &data);
        Vec::new()
    }

    fn master_in_network_space(&self) -> bool {
        true
    }
}
