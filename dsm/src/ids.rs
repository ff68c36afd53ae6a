//! Newtypes for the identifiers the protocol passes around, so a page index can never be
//! handed where a node is expected. Their invariants are stated on each type.

//! The wire codec carries pages and nodes as these types; the engine still passes them as
//! bare `u32` and `usize` inside a node, and converts at the codec.

use std::fmt;

/// Largest cluster: sets of nodes are bit masks in one word.
pub const MAX_NODES: usize = 32;

/// Index of a coherence page in the shared heap. Invariant: < the heap's page count
/// (checked by the engine, which alone knows the heap's size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PageId(pub u32);

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

/// A node of the cluster, 0..nodes (at most [`MAX_NODES`] = 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct NodeId(pub u16);

impl NodeId {
    /// Node `n`, or `None` if no cluster can have it (`n >= MAX_NODES`). Use this for
    /// numbers read from the network; [`NodeId::from_usize`] for the engine's own.
    pub(crate) fn new(n: usize) -> Option<NodeId> {
        (n < MAX_NODES).then_some(NodeId(n as u16))
    }

    /// Node `n`, for numbers the engine already knows to be valid.
    ///
    /// # Panics
    ///
    /// If `n >= MAX_NODES`.
    pub(crate) fn from_usize(n: usize) -> NodeId {
        NodeId::new(n)
            .unwrap_or_else(|| panic!("node {n} does not exist: at most {MAX_NODES} nodes"))
    }

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_stop_at_the_network_limit() {
        assert_eq!(NodeId::new(MAX_NODES - 1), Some(NodeId(31)));
        assert_eq!(NodeId::new(MAX_NODES), None);
        assert_eq!(NodeId::from_usize(3).index(), 3);
    }

    #[test]
    fn ids_display_what_they_name() {
        assert_eq!(PageId(12).to_string(), "page 12");
        assert_eq!(NodeId(3).to_string(), "node 3");
    }
}
