//! The home policy (the paper's "home migration" column of Table 1).
//!
//! * First touch (every variant but the -Mg ones, section 2.3.1): the first node to touch
//!   a page after initialization becomes its home, for good (or the home named by a homes
//!   file, as the paper's footnote 4 replays CSM-DMS's choices).
//! * Migrating (CSM-MS-Mg and CSM-None-Mg, section 2.3.5): on a write fault away from the
//!   home, a node asks the home to move to it unless its copy of the directory says the
//!   home is writing the page. CSM-MS-Mg reads the replicated directory; CSM-None-Mg reads
//!   its locally cached entry, refreshed by what homes piggyback on fetch replies and diff
//!   acknowledgements, so a stale entry makes a useless request that the home refuses: the
//!   paper counts those attempts, and so do we. The home grants unless it is writing the
//!   page (checked under its page lock), sends the master copy along (so the new home's
//!   copy holds every diff applied so far), and publishes the move: by broadcast under the
//!   replicated directory, and by redirecting later requests under the home-held one.
//!   Migration never combines with remote-write data: moving a master copy would re-map
//!   network address space, which needs a global synchronization (2.3.5).

use super::Node;
use crate::config::{HomePolicy, MetadataStrategy};
use crate::page::PageState;

impl Node {
    /// Whether a write fault at this node (not `p`'s home) should ask the home to move.
    pub(super) fn may_migrate(&self, p: u32, st: &PageState) -> bool {
        if self.protocol.home != HomePolicy::Migrating {
            return false;
        }
        match self.protocol.metadata {
            MetadataStrategy::Replicated => !self.dir.home_writing(&self.net, p, st.home_node()),
            MetadataStrategy::HomeHeld => !st.home_writing,
        }
    }
}
