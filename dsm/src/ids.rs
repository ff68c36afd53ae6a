//! Newtypes for the identifiers the protocol passes around, so a page index can never be
//! handed where a node is expected. Their invariants are stated on each type.

//! The wire codec, the engine (its `Node::id` too), the page table, the directory, adaptive
//! broadcast, the wait seam's waits (for a page, a reply, ring space) and the network
//! (`Net`, the `Transport` seam, the synchronization strategies' requests and their
//! `SyncHost::node`) pass pages and nodes as these types, and sharing sets, the nodes whose
//! doorbells ring and the nodes a request awaits as [`NodeSet`]s. [`NodeId`] and
//! [`NodeSet`] are public (`dsm::NodeId`, `dsm::NodeSet`). Bare numbers remain where
//! a page or a node indexes an array (`index()`), in the codec's and the directory's
//! words, inside a transport (the fabric's per-node areas and receiver table, MPI ranks),
//! in the wait seam's doorbells and the control block, in the scheduler's activities and
//! the launcher's reports (`NodeCtx::node`), in the public API (`Proc::node`, the test
//! hooks' `PageHook`), and in a node's outcome (the pages it is home of, as the homes file
//! names them).

use std::fmt;

/// Largest cluster: sets of nodes are bit masks in one word.
pub const MAX_NODES: usize = 32;

/// Index of a coherence page in the shared heap. Invariant: < the heap's page count
/// (checked by the engine, which alone knows the heap's size: for a page from the wire,
/// by `wire::Msg::check` before the message is handled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PageId(pub u32);

impl PageId {
    /// The page's position in per-page arrays and in the heap.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

/// A node of the cluster, 0..nodes (at most [`MAX_NODES`] = 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub(crate) u16);

impl NodeId {
    /// Node `n`, or `None` if no cluster can have it (`n >= MAX_NODES`). Use this for
    /// numbers read from the network; [`NodeId::from_usize`] for the engine's own.
    pub fn new(n: usize) -> Option<NodeId> {
        (n < MAX_NODES).then_some(NodeId(n as u16))
    }

    /// Node `n`, for numbers the engine already knows to be valid (a loop over the
    /// cluster's nodes, a launcher's node number).
    ///
    /// # Panics
    ///
    /// If `n >= MAX_NODES`.
    pub fn from_usize(n: usize) -> NodeId {
        NodeId::new(n)
            .unwrap_or_else(|| panic!("node {n} does not exist: at most {MAX_NODES} nodes"))
    }

    /// The node's number, as a position in per-node arrays.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A set of nodes, one bit per node (bit `n` for node `n`), as the directory and the wire
/// carry sharing sets. Invariant: built from [`NodeId`]s, it holds only nodes below
/// [`MAX_NODES`]; a set read from the network (`NodeSet::from_bits`, inside the crate) may
/// carry other bits, which [`NodeSet::iter`] does not yield.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NodeSet(u64);

impl NodeSet {
    /// No node.
    pub const EMPTY: NodeSet = NodeSet(0);

    /// The set whose word is `bits` (the wire's and the directory's encoding).
    pub(crate) const fn from_bits(bits: u64) -> NodeSet {
        NodeSet(bits)
    }

    /// The set's word, for the wire and the directory.
    pub(crate) const fn bits(self) -> u64 {
        self.0
    }

    /// Nodes `0..nodes`: every node of a cluster of `nodes`.
    ///
    /// # Panics
    ///
    /// If `nodes > MAX_NODES`.
    pub fn first(nodes: usize) -> NodeSet {
        assert!(nodes <= MAX_NODES, "{nodes} nodes: at most {MAX_NODES}");
        NodeSet((1u64 << nodes) - 1)
    }

    /// The set holding only `node`.
    pub fn only(node: NodeId) -> NodeSet {
        NodeSet(Self::bit(node))
    }

    fn bit(node: NodeId) -> u64 {
        1u64 << node.0
    }

    /// Adds `node` to the set.
    pub fn insert(&mut self, node: NodeId) {
        self.0 |= Self::bit(node);
    }

    /// Takes `node` out of the set.
    pub fn remove(&mut self, node: NodeId) {
        self.0 &= !Self::bit(node);
    }

    /// The set holds `node`.
    pub fn contains(self, node: NodeId) -> bool {
        self.0 & Self::bit(node) != 0
    }

    /// This set with `node` inserted.
    pub fn with(mut self, node: NodeId) -> NodeSet {
        self.insert(node);
        self
    }

    /// This set without `node`.
    pub fn without(mut self, node: NodeId) -> NodeSet {
        self.remove(node);
        self
    }

    /// The set holds no bit at all.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many nodes the set holds (bits beyond [`MAX_NODES`] not counted).
    pub fn len(self) -> usize {
        (self.0 & NodeSet::first(MAX_NODES).0).count_ones() as usize
    }

    /// The nodes of the set, in increasing order.
    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_NODES)
            .map(|n| NodeId(n as u16))
            .filter(move |&n| self.contains(n))
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(nodes: I) -> NodeSet {
        let mut set = NodeSet::EMPTY;
        for n in nodes {
            set.insert(n);
        }
        set
    }
}

impl fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeSet({:#x})", self.0)
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

    #[test]
    fn node_sets_hold_what_was_inserted() {
        let (a, b, last) = (NodeId(0), NodeId(5), NodeId(31));
        let mut s = NodeSet::EMPTY;
        assert!(s.is_empty());
        s.insert(b);
        s.insert(last);
        s.insert(a);
        assert_eq!(s.bits(), 1 | 1 << 5 | 1 << 31);
        assert!(s.contains(a) && s.contains(b) && s.contains(last));
        assert!(!s.contains(NodeId(1)));
        assert_eq!(s.iter().collect::<Vec<_>>(), [a, b, last]);
        assert_eq!(s.without(b), NodeSet::from_bits(1 | 1 << 31));
        assert_eq!(s.without(NodeId(2)), s);
        s.remove(a);
        assert_eq!(s, [b, last].into_iter().collect());
        assert_eq!(NodeSet::only(b).with(last), s);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn the_first_nodes_are_a_whole_cluster() {
        assert_eq!(NodeSet::first(0), NodeSet::EMPTY);
        assert_eq!(NodeSet::first(3).bits(), 0b111);
        assert_eq!(NodeSet::first(MAX_NODES).len(), MAX_NODES);
    }

    #[test]
    fn node_sets_from_the_wire_keep_every_bit() {
        let s = NodeSet::from_bits(1 << 40 | 1 << 2);
        assert_eq!(s.bits(), 1 << 40 | 1 << 2);
        assert!(!s.is_empty());
        assert_eq!(s.len(), 1);
        assert_eq!(s.iter().collect::<Vec<_>>(), [NodeId(2)]);
    }
}
