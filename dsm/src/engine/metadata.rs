//! The metadata strategy (the paper's "metadata" column of Table 1) as the engine sees
//! it: every decision that differs between the two lives here, and the rest of the engine
//! asks these methods.
//!
//! * Replicated directory (CSM-DMS, -MS, -MS-Mg, -ADB, section 2.3.1 "Metadata"): the page's
//!   sharing set, home and home-writing bit are replicated on every node by broadcast
//!   remote writes (`crate::directory`); write notices are remote-written into each
//!   target's notice buffer.
//! * Home-held (CSM-S, -None and -None-Mg, 2.3.2-2.3.3): the home keeps the page's
//!   sharing set; a fetch joins it, a drop leaves it by message, a diff's acknowledgement
//!   returns it with the home-writing bit, and write notices travel as messages.

use super::Node;
use crate::config::MetadataStrategy;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::PageState;
use crate::stats::{Clock, NodeCounters};
use crate::wire::{kind, Msg};

impl Node {
    /// Sends a release's write notices: `targets` pairs each node with the pages it is
    /// told of.
    pub(super) fn deliver_notices(&self, targets: &[(NodeId, &[PageId])]) {
        match self.protocol.metadata {
            MetadataStrategy::Replicated => {
                for &(n, pages) in targets {
                    if !self.dir.send_notices(&self.net, self.id, n, pages) {
                        NodeCounters::bump(&self.counters.notice_overflows);
                    }
                }
            }
            MetadataStrategy::HomeHeld => self.send_notice_messages(targets),
        }
    }

    /// The sharing set of `p` to send write notices to after this node's diff of it
    /// reached the home: the set the home acknowledged with (`from_home`, home-held), or
    /// the replica's, read after the diff has landed (replicated).
    pub(super) fn sharers_after_diff(
        &self,
        p: PageId,
        st: &PageState,
        from_home: NodeSet,
    ) -> NodeSet {
        match self.protocol.metadata {
            MetadataStrategy::HomeHeld => from_home,
            MetadataStrategy::Replicated => self.dir.sharers(&self.net, p, st),
        }
    }

    /// Whether `p`'s home is writing it, as far as this node knows: the replicated bit, or
    /// the one the home's last acknowledgement carried (home-held).
    pub(super) fn home_is_writing(&self, p: PageId, st: &PageState) -> bool {
        match self.protocol.metadata {
            MetadataStrategy::Replicated => self.dir.home_writing(&self.net, p, st.home_node()),
            MetadataStrategy::HomeHeld => st.home_writing,
        }
    }

    /// This node dropped its copy of `p`: leave the sharing set.
    pub(super) fn leave(&self, p: PageId, st: &PageState) {
        match self.protocol.metadata {
            MetadataStrategy::Replicated => self.dir.leave(&self.net, self.id, p),
            // One-way: the ring is FIFO, so a later fetch from us arrives after it. If the
            // home has moved meanwhile, the old home drops the message: the new home's set
            // then still names us, which costs a needless notice, never a missed one.
            MetadataStrategy::HomeHeld => {
                self.post(st.home_node(), &Msg::Drop { page: p })
            }
        }
    }

    /// Home-held metadata: write notices travel as explicit messages, acknowledged before
    /// the release completes. Notices to different nodes overlap (section 3.1): each round
    /// sends one message to every node that still has notices, then waits for all their
    /// acknowledgements.
    pub(super) fn send_notice_messages(&self, targets: &[(NodeId, &[PageId])]) {
        let per_message = (crate::net::MAX_MESSAGE_BYTES - 16) / 4;
        let rounds = targets
            .iter()
            .map(|(_, pages)| pages.len().div_ceil(per_message))
            .max()
            .unwrap_or(0);
        let seam = self.seam();
        for round in 0..rounds {
            let payloads: Vec<(NodeId, Vec<u8>)> = targets
                .iter()
                .filter_map(|&(to, pages)| {
                    let chunk = pages.chunks(per_message).nth(round)?;
                    let mut buf = Vec::new();
                    let list = crate::wire::PageList::encode_from(chunk.iter().copied(), &mut buf);
                    let mut payload = Vec::new();
                    crate::wire::Msg::Notice { pages: list }.encode(&mut payload);
                    Some((to, payload))
                })
                .collect();
            let batch: Vec<(NodeId, &[u8])> =
                payloads.iter().map(|(to, p)| (*to, p.as_slice())).collect();
            self.check_not_finished(kind::NOTICE);
            super::rules::check_may_wait_on_network(self.id, |q| {
                self.pages.known_home(q) == Some(self.id)
            });
            Clock::message(|| {
                self.net
                    .request_all_via(&seam, kind::NOTICE, super::my_slot(self), &batch)
            })
            .unwrap_or_else(|e| Self::net_err(e));
        }
    }
}
