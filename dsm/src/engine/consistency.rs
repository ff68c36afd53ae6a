//! Release and acquire (section 2.2): at a release every dirty page is write-protected,
//! its diff sent home and write notices sent to its sharers; at an acquire the pages named
//! by the notices received are invalidated. Also the drop of a page a node leaves.

use super::Node;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::page::Access;
use crate::stats::NodeCounters;
use crate::wait::{SeamLock, WaitFor};
use crate::wire::{Msg, Reply};
use std::sync::atomic::Ordering;

impl Node {
    /// Release: write-protect every dirty page, send its diff home, then send write
    /// notices to the other sharers (section 2.2). When this returns, every write this
    /// node made before the call is at its home and noticed.
    pub fn release(&self) {
        // One release at a time per node: a processor whose writes another processor's
        // release is flushing must not complete its own release before that flush and its
        // notices are done.
        let _one = self.serialize(&self.releasing, "release");
        self.broadcast_new_interval();
        let pages = std::mem::take(&mut *self.dirty.lock().expect("poisoned"));
        let mut noticed = Vec::with_capacity(pages.len());
        for p in pages {
            let mut st = self.lock_page(p);
            if !st.dirty {
                continue;
            }
            let (sharers, home) = if st.at_home(self.id) {
                self.home_stops_writing(p, &mut st);
                let sharers = self.dir.sharers(&self.net, p, &st);
                (self.broadcast_notice_targets(p, sharers), self.id)
            } else {
                self.protector.set(p, Access::Read);
                st.access = Access::Read;
                st.dirty = false;
                let twin = st.twin.take().expect("dirty non-home page without twin");
                let sharers = self.send_diff(p, &mut st, self.twins.bytes(&twin));
                self.twins.give(twin);
                (sharers, st.home_node())
            };
            st.check(self.id);
            drop(st);
            noticed.push((p, sharers.without(home)));
        }
        // Taken after the pages: a page that an acquire flushed while we waited for its
        // lock is owed a notice, and we must send it before this release completes.
        noticed.extend(std::mem::take(&mut *self.owed.lock().expect("poisoned")));
        self.send_notices(&noticed);
    }

    pub(super) fn send_notices(&self, noticed: &[(PageId, NodeSet)]) {
        let mut per_node: Vec<Vec<PageId>> = vec![Vec::new(); self.nodes];
        for &(p, sharers) in noticed {
            for n in sharers.without(self.id).iter() {
                per_node[n.index()].push(p);
            }
        }
        let targets: Vec<(NodeId, &[PageId])> = per_node
            .iter()
            .enumerate()
            .filter(|(_, pages)| !pages.is_empty())
            .map(|(n, pages)| (NodeId::from_usize(n), pages.as_slice()))
            .collect();
        for &(_, pages) in &targets {
            self.counters
                .write_notices
                .fetch_add(pages.len() as u64, Ordering::Relaxed);
        }
        self.deliver_notices(&targets);
    }

    /// Takes one of the node-wide serialization locks (`what` names it in wait reports).
    pub(super) fn serialize<'a>(
        &'a self,
        lock: &'a SeamLock<()>,
        what: &'static str,
    ) -> crate::wait::SeamGuard<'a, ()> {
        lock.lock(&self.seam(), WaitFor::Serialize { what })
            .unwrap_or_else(|e| Self::net_err(e))
    }

    /// Acquire: invalidate every page named by a write notice received so far.
    pub fn acquire(&self) {
        // One acquire at a time per node: notices are taken node-wide, so a second acquirer
        // must not return before the first has invalidated what it took.
        let _one = self.serialize(&self.acquiring, "acquire");
        let (pages, all) = self.dir.take_notices(&self.net, self.id);
        if all {
            for p in (0..self.npages as u32).map(PageId) {
                self.invalidate(p);
            }
        } else {
            for p in pages {
                self.invalidate(p);
            }
        }
    }

    pub(super) fn invalidate(&self, p: PageId) {
        if self.pages.known_home(p) == Some(self.id) {
            return; // the home keeps the master copy (checked again under the lock)
        }
        let mut st = self.lock_page(p);
        if st.access == Access::Invalid || st.at_home(self.id) {
            return;
        }
        if st.exclusive {
            // Flush before drop, in exclusive mode: the whole page, since there is no twin
            // (a write notice from a writer that released before our grant got here).
            let data = self.end_exclusive(p, &mut st);
            let mut out = Vec::new();
            match self.call(
                st.home_node(),
                &Msg::Flush {
                    page: p,
                    holder: self.id,
                    fetch: false,
                    data: &data,
                },
                &mut out,
            ) {
                Reply::Ack => {}
                r => panic!("{}: unexpected reply to a flush: {r:?}", self.id),
            }
            NodeCounters::bump(&self.counters.flushes_before_drop);
        }
        if st.dirty {
            // Flush before drop: another processor of this node wrote it.
            self.protector.set(p, Access::Read);
            let twin = st.twin.take().expect("dirty page without twin");
            st.dirty = false;
            st.access = Access::Read;
            let sharers = self.send_diff(p, &mut st, self.twins.bytes(&twin));
            self.twins.give(twin);
            let home = st.home_node();
            self.owed
                .lock()
                .expect("poisoned")
                .push((p, sharers.without(home)));
            NodeCounters::bump(&self.counters.flushes_before_drop);
        }
        self.protector.set(p, Access::Invalid);
        st.access = Access::Invalid;
        st.check(self.id);
        // Leave the sharing set while still holding the page lock: otherwise another
        // processor of this node could fault the page back in, and its join could reach
        // the directory before our leave, leaving the node out of the set while it holds
        // a copy (and so out of later write notices).
        self.leave(p, &st);
        drop(st);
        NodeCounters::bump(&self.counters.invalidations);
    }
}
