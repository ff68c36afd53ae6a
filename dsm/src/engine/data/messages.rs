//! Diff messages (CSM-MS, -S, -None and the -Mg variants, sections 2.3.2-2.3.5): a diff
//! travels as explicit messages (several if it outgrows one) that the home applies and
//! acknowledges; the acknowledgement piggybacks the home's sharing set and whether the
//! home is writing the page (2.3.3). A home that has moved answers with its successor, and
//! the rest of the diff goes there: what the old home applied before it moved went along
//! with the master copy, so nothing is lost and nothing applied twice.

use super::Data;
use crate::diff;
use crate::engine::{Node, PageGuard};
use crate::ids::{NodeSet, PageId};
use crate::stats::NodeCounters;
use crate::wire::{kind, DiffWriter, Reply};

pub(super) struct Messages;

impl Data for Messages {
    fn send_diff(&self, node: &Node, p: PageId, st: &mut PageGuard<'_>, d: &[u8]) -> NodeSet {
            let mut writer =
                DiffWriter::with_budget(p, diff::runs(d), node.diff_message_bytes);
            let mut msg = Vec::with_capacity(d.len().min(crate::net::MAX_MESSAGE_BYTES));
            let mut out = Vec::new();
            let mut sharers = NodeSet::EMPTY;
            let mut first = true;
            while writer.next_message(&mut msg) {
                loop {
                    let home = st.home_node();
                    NodeCounters::bump(&node.counters.diff_messages);
                    match node.call_encoded(home, kind::DIFF, &msg, &mut out) {
                        Reply::DiffAck { meta } => {
                            sharers = meta.sharers;
                            st.home_writing = meta.home_writing;
                            break;
                        }
                        Reply::Moved { home: to } => {
                            NodeCounters::bump(&node.counters.redirects);
                            if !first {
                                NodeCounters::bump(&node.counters.split_diff_redirects);
                            }
                            assert_ne!(
                                to, home,
                                "{home} redirected {p} to itself"
                            );
                            node.pages.set_home(p, st, to);
                        }
                        r => panic!("{}: unexpected reply to a diff: {r:?}", node.id),
                    }
                }
                first = false;
            }
            node.sharers_after_diff(p, st, sharers)
    }

    /// The recall's answer carries the data to the home.
    fn recalled_data(&self, _: &Node, _: PageId, data: Vec<u8>) -> Vec<u8> {
        data
    }

    fn master_in_network_space(&self) -> bool {
        false
    }
}
