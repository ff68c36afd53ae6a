//! Home-held metadata (CSM-S, -None, -None-Mg; sections 2.3.2-2.3.3): the home keeps the
//! page's sharing set; a fetch joins it, a drop leaves it by message, a diff's
//! acknowledgement returns it with the home-writing bit, and write notices travel as
//! messages, acknowledged before the release completes.

use super::Metadata;
use crate::engine::Node;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::PageState;
use crate::stats::Clock;
use crate::wire::{kind, Msg, PageList};

pub(super) struct HomeHeld;

impl Metadata for HomeHeld {
    /// Notices to different nodes overlap (section 3.1): each round sends one message to
    /// every node that still has notices, then waits for all their acknowledgements.
    fn deliver_notices(&self, node: &Node, targets: &[(NodeId, &[PageId])]) {
        let per_message = (crate::net::MAX_MESSAGE_BYTES - 16) / 4;
        let rounds = targets
            .iter()
            .map(|(_, pages)| pages.len().div_ceil(per_message))
            .max()
            .unwrap_or(0);
        let seam = node.seam();
        for round in 0..rounds {
            let payloads: Vec<(NodeId, Vec<u8>)> = targets
                .iter()
                .filter_map(|&(to, pages)| {
                    let chunk = pages.chunks(per_message).nth(round)?;
                    let mut buf = Vec::new();
                    let list = PageList::encode_from(chunk.iter().copied(), &mut buf);
                    let mut payload = Vec::new();
                    Msg::Notice { pages: list }.encode(&mut payload);
                    Some((to, payload))
                })
                .collect();
            let batch: Vec<(NodeId, &[u8])> =
                payloads.iter().map(|(to, p)| (*to, p.as_slice())).collect();
            node.check_not_finished(kind::NOTICE);
            crate::engine::rules::check_may_wait_on_network(node.id, |q| {
                node.pages.known_home(q) == Some(node.id)
            });
            Clock::message(|| {
                node.net
                    .request_all_via(&seam, kind::NOTICE, crate::engine::my_slot(node), &batch)
            })
            .unwrap_or_else(|e| Node::net_err(e));
        }
    }

    fn sharers_after_diff(&self, _: &Node, _: PageId, _: &PageState, from_home: NodeSet) -> NodeSet {
        from_home
    }

    fn home_is_writing(&self, _: &Node, _: PageId, st: &PageState) -> bool {
        st.home_writing
    }

    /// One-way: the ring is FIFO, so a later fetch from this node arrives after it. If the
    /// home has moved meanwhile, the old home drops the message: the new home's set then
    /// still names this node, which costs a needless notice, never a missed one.
    fn leave(&self, node: &Node, p: PageId, st: &PageState) {
        node.post(st.home_node(), &Msg::Drop { page: p })
    }
}
