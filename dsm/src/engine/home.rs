//! The home policy (the paper's "home migration" column of Table 1).
//!
//! * First touch (every variant but the -Mg ones, section 2.3.1): the first node to touch
//!   a page after initialization becomes its home, for good (or the home named by a homes
//!   file, as the paper's footnote 4 replays CSM-DMS's choices).
//! * After initialization. A program marks the end of its initialization with
//!   `Barrier::end_initialization` (SPLASH-2's programs initialize in the master before
//!   they create the other processes). Until then a page's home is the first node to touch
//!   it, as above. At the mark, every node drops its copies of pages homed elsewhere
//!   (flushing exclusive ones home) and unmaps the pages it is home of, marking them
//!   `rehome_grant`; every other page is marked `rehome_ask`. A node's first fault on a
//!   page since then takes its `rehome_ask` mark and asks the home with
//!   `Fetch { rehome }`; the home, under its page lock, grants the first such request
//!   while the page is still marked (it sends the master copy along and publishes the
//!   move as a migration does, and under remote-write data detaches its receive mapping
//!   before it answers, while the new home attaches its own before anything names it),
//!   and its own processors' first fault clears the mark and keeps the page. Every node's
//!   first access faults, so every node's first request reaches the home or is
//!   redirected to the new one: no node can hold a copy, or write a diff, of a page whose
//!   home it learned before the move. Every variant does this, the -Mg ones included
//!   (their migrations then start from these homes); a homes file fixes the homes
//!   instead, and the mark then only synchronizes, as it does on a cluster of one node
//!   (every home is there already, and no first touch is watched).
//! * Migrating (CSM-MS-Mg and CSM-None-Mg, section 2.3.5): on a write fault away from the
//!   home, a node asks the home to move to it unless its copy of the directory says the
//!   home is writing the page. CSM-MS-Mg reads the replicated directory; CSM-None-Mg reads
//!   its locally cached entry, refreshed by what homes piggyback on fetch replies and diff
//!   acknowledgements, so a stale entry makes a useless request that the home refuses: the
//!   paper counts those attempts, and so do we. The request rides on the fault's page
//!   update ("the transfer of data occurs as part of the corresponding page update
//!   operation", 2.3.5): a node without a valid copy gets the page with a refusal, in the
//!   one round trip (`Msg::Fetch`'s `needs_page`). The home grants unless it is writing the
//!   page (checked under its page lock), sends the master copy along unless the
//!   requester's valid copy is the master's version (`PageState::version`; then the grant
//!   is `Reply::Granted`, with no page), so the new home's copy holds every diff applied so
//!   far, and publishes the move: by broadcast under the replicated directory, and by
//!   redirecting later requests under the home-held one.
//!   Migration never combines with remote-write data: moving a master copy would re-map
//!   network address space, which needs a global synchronization (2.3.5).

use super::Node;
use crate::config::HomePolicy;
use crate::ids::PageId;
use crate::page::{Access, PageState};
use std::sync::atomic::Ordering;

impl Node {
    /// Whether a write fault at this node (not `p`'s home) should ask the home to move.
    pub(super) fn may_migrate(&self, p: PageId, st: &PageState) -> bool {
        if self.protocol.home != HomePolicy::Migrating {
            return false;
        }
        !self.home_is_writing(p, st)
    }
}

impl Node {
    /// A fault's first touch of `p` since initialization ended (module doc): whether to
    /// ask the home to move here. At the home, its own first touch keeps the page (no
    /// other node may take it from now on). The caller holds the page lock.
    pub(super) fn take_rehome(&self, st: &mut PageState) -> bool {
        if st.at_home(self.id) {
            st.rehome_grant = false;
            st.rehome_ask = false;
            false
        } else {
            std::mem::take(&mut st.rehome_ask)
        }
    }

    /// The end of the program's initialization at this node (module doc), run by one
    /// processor of the node between two barriers: when it starts, every node's writes of
    /// the initialization are at their homes; until every node is done, no processor runs
    /// the program. Pages this node drops count as invalidations.
    ///
    /// # Panics
    ///
    /// If the program ends its initialization twice.
    pub fn end_initialization(&self) {
        assert!(
            !self.initialized.swap(true, Ordering::Relaxed),
            "the program ended its initialization twice (`Barrier::end_initialization` is called once per run)"
        );
        // A homes file fixed every home; on a cluster of one node every home is here and
        // nobody else can take one, so there is no first touch to watch for.
        if self.homes_fixed.load(Ordering::Relaxed) || self.nodes == 1 {
            return;
        }
        for p in (0..self.npages as u32).map(PageId) {
            if self.pages.known_home(p) == Some(self.id) {
                let mut st = self.lock_page(p);
                assert!(
                    st.at_home(self.id) && !st.dirty,
                    "{}: {p} changed at the end of initialization: {:?}",
                    self.id,
                    *st
                );
                if st.access == Access::Write {
                    if st.exclusive {
                        crate::stats::NodeCounters::bump(&self.counters.exclusive_exits);
                    }
                    self.home_stops_writing(p, &mut st);
                }
                if st.access != Access::Invalid {
                    self.protector.set(p, Access::Invalid);
                    st.access = Access::Invalid;
                }
                st.rehome_grant = true;
                st.rehome_ask = false;
                st.check(self.id);
                continue;
            }
            self.invalidate(p);
            let mut st = self.lock_page(p);
            st.rehome_ask = !st.at_home(self.id);
        }
    }
}
