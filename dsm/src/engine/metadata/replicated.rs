//! Replicated metadata (CSM-DMS, -MS, -MS-Mg, -ADB; section 2.3.1, "Metadata"): the page
//! directory is replicated on every node and changed by broadcast remote writes, and write
//! notices are remote-written into each target's notice ring (`crate::directory`). No
//! acknowledgements: the network's total order stands for them.

use super::Metadata;
use crate::engine::Node;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::PageState;
use crate::stats::NodeCounters;

pub(super) struct Replicated;

impl Metadata for Replicated {
    fn deliver_notices(&self, node: &Node, targets: &[(NodeId, &[PageId])]) {
        for &(n, pages) in targets {
            if !node.dir.send_notices(&node.net, node.id, n, pages) {
                NodeCounters::bump(&node.counters.notice_overflows);
            }
        }
    }

    fn sharers_after_diff(&self, node: &Node, p: PageId, st: &PageState, _: NodeSet) -> NodeSet {
        node.dir.sharers(&node.net, p, st)
    }

    fn home_is_writing(&self, node: &Node, p: PageId, st: &PageState) -> bool {
        node.dir.home_writing(&node.net, p, st.home_node())
    }

    fn leave(&self, node: &Node, p: PageId, _: &PageState) {
        node.dir.leave(&node.net, node.id, p)
    }
}
