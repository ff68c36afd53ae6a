//! The metadata strategy (the paper's "metadata" column of Table 1) as the engine sees
//! it: every decision that differs between the two is a method of [`Metadata`], one file
//! per strategy ([`replicated`], [`home_held`]), chosen once when the node is built
//! ([`strategy`]); the rest of the engine asks `Node`'s forwarding methods below and never
//! looks at the strategy itself. The strategies' data (the replicated directory and
//! notice rings, the home-held sets) live in `crate::directory`.
//!
//! * Replicated directory (CSM-DMS, -MS, -MS-Mg, -ADB, section 2.3.1 "Metadata"): the page's
//!   sharing set, home and home-writing bit are replicated on every node by broadcast
//!   remote writes (`crate::directory`); write notices are remote-written into each
//!   target's notice buffer.
//! * Home-held (CSM-S, -None and -None-Mg, 2.3.2-2.3.3): the home keeps the page's
//!   sharing set; a fetch joins it, a drop leaves it by message, a diff's acknowledgement
//!   returns it with the home-writing bit, and write notices travel as messages.

mod home_held;
mod replicated;

use super::Node;
use crate::config::MetadataStrategy;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::PageState;

/// What differs between the two metadata strategies, as the engine asks it.
pub(super) trait Metadata: Sync {
    /// Sends a release's write notices: `targets` pairs each node with the pages it is
    /// told of.
    fn deliver_notices(&self, node: &Node, targets: &[(NodeId, &[PageId])]);

    /// The sharing set of `p` to send write notices to after `node`'s diff of it reached
    /// the home: the set the home acknowledged with (`from_home`, home-held), or the
    /// replica's, read after the diff has landed (replicated).
    fn sharers_after_diff(&self, node: &Node, p: PageId, st: &PageState, from_home: NodeSet)
        -> NodeSet;

    /// Whether `p`'s home is writing it, as far as `node` knows: the replicated bit, or
    /// the one the home's last acknowledgement carried (home-held).
    fn home_is_writing(&self, node: &Node, p: PageId, st: &PageState) -> bool;

    /// `node` dropped its copy of `p`: leave the sharing set.
    fn leave(&self, node: &Node, p: PageId, st: &PageState);
}

/// The strategy a protocol's metadata column names.
pub(super) fn strategy(m: MetadataStrategy) -> &'static dyn Metadata {
    match m {
        MetadataStrategy::Replicated => &replicated::Replicated,
        MetadataStrategy::HomeHeld => &home_held::HomeHeld,
    }
}

impl Node {
    /// Sends a release's write notices ([`Metadata::deliver_notices`]).
    pub(super) fn deliver_notices(&self, targets: &[(NodeId, &[PageId])]) {
        self.metadata.deliver_notices(self, targets)
    }

    /// The sharing set to notice after a diff of `p` ([`Metadata::sharers_after_diff`]).
    pub(super) fn sharers_after_diff(&self, p: PageId, st: &PageState, from_home: NodeSet) -> NodeSet {
        self.metadata.sharers_after_diff(self, p, st, from_home)
    }

    /// Whether `p`'s home is writing it ([`Metadata::home_is_writing`]).
    pub(super) fn home_is_writing(&self, p: PageId, st: &PageState) -> bool {
        self.metadata.home_is_writing(self, p, st)
    }

    /// This node dropped its copy of `p` ([`Metadata::leave`]).
    pub(super) fn leave(&self, p: PageId, st: &PageState) {
        self.metadata.leave(self, p, st)
    }
}
