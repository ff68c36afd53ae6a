//! The work distribution: costzones (Singh et al., "Load balancing and data locality in
//! adaptive hierarchical N-body methods", J. Parallel Distrib. Comput. 27, 1995), the
//! partition SPLASH Barnes uses for the force phase.
//!
//! The bodies are laid out in tree order (a depth-first walk visiting children 0..8, that
//! is Morton order) and each body weighs its cost, the number of interactions its force
//! took in the last step. Processor `id` of `nprocs` takes the bodies whose prefix cost
//! (the cost of the bodies before them in tree order) lies in
//! `[total id / nprocs, total (id + 1) / nprocs)`, the last processor everything from its
//! lower bound on. Every body belongs to exactly one zone, and the zones are contiguous
//! stretches of tree order, so each processor's bodies are close in space; in the body
//! array they are scattered, which is where Barnes' false sharing comes from. SPLASH-2
//! walks the children in a Peano-Hilbert order instead; the zones differ in shape, not in
//! balance, and the forces do not depend on the partition at all.

use crate::body;
use crate::tree::{Node, Tree, NSUB};

/// The prefix costs `[lo, hi)` processor `id` of `nprocs` owns, out of `total`.
pub fn zone(total: u64, id: usize, nprocs: usize) -> (u64, u64) {
    assert!(id < nprocs, "processor {id} of {nprocs}");
    let at = |i: usize| (total as u128 * i as u128 / nprocs as u128) as u64;
    let hi = if id + 1 == nprocs {
        u64::MAX
    } else {
        at(id + 1)
    };
    (at(id), hi)
}

struct Zone<'a> {
    tree: Tree<'a>,
    bodies: &'a [f64],
    lo: u64,
    hi: u64,
    work: u64,
}

impl Zone<'_> {
    fn visit(&mut self, raw: u32, out: &mut Vec<u32>) {
        if self.work >= self.hi {
            return;
        }
        dsm::work::count(crate::TREE, 1);
        match Node::decode(raw) {
            Node::Empty => {}
            Node::Body(b) => {
                if self.work >= self.lo {
                    out.push(b as u32);
                }
                self.work += body::cost(self.bodies, b);
            }
            Node::Cell(c) => {
                let cost = self.tree.cost(c);
                // Every body below has a prefix cost of at most `work + cost`.
                if self.work + cost < self.lo {
                    self.work += cost;
                } else {
                    for k in 0..NSUB {
                        self.visit(self.tree.child(c, k), out);
                    }
                }
            }
        }
    }
}

/// Puts into `out` (cleared first) the bodies of processor `id` of `nprocs`, in tree
/// order. Reads the tree (with cell costs from [`crate::tree::compute_cofm`]) and the
/// bodies' costs, the costs the cell costs were summed from.
pub fn costzone(
    tree: Tree<'_>,
    bodies: &[f64],
    id: usize,
    nprocs: usize,
    out: &mut Vec<u32>,
) {
    out.clear();
    let (lo, hi) = zone(tree.cost(0), id, nprocs);
    let mut z = Zone {
        tree,
        bodies,
        lo,
        hi,
        work: 0,
    };
    z.visit(Node::Cell(0).encode(), out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer::plummer;
    use crate::tree::{build_tree, compute_cofm, Cube, TreeStore};

    #[test]
    fn zones_split_the_total() {
        assert_eq!(zone(10, 0, 3), (0, 3));
        assert_eq!(zone(10, 1, 3), (3, 6));
        assert_eq!(zone(10, 2, 3), (6, u64::MAX));
        assert_eq!(zone(0, 0, 2), (0, 0));
        assert_eq!(zone(0, 1, 2), (0, u64::MAX));
    }

    /// For several processor counts and costs (including zero costs), every body is in
    /// exactly one zone, the zones concatenated are the tree order, and no zone's cost
    /// exceeds its share by more than one body's cost.
    #[test]
    fn costzones_partition_the_bodies_and_balance_cost() {
        let n = 700;
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(3, &mut pos, &mut vel, &mut mass);
        let mut t = body::from_arrays(&pos, &vel, &mass);
        let cube = Cube::around(&t, 0);
        let mut store = TreeStore::new(4 * n);
        let ncell = build_tree(cube, &t, 0, &mut store.as_mut()).unwrap();
        let cost_sets: [Vec<u64>; 3] = [
            vec![1; n],
            (0..n as u64).map(|b| (b * 7919) % 23).collect(),
            (0..n as u64)
                .map(|b| if b % 5 == 0 { 0 } else { 100 + b })
                .collect(),
        ];
        // The tree order, found independently by a plain depth-first walk.
        fn dfs(store: &TreeStore, raw: u32, order: &mut Vec<u32>) {
            match Node::decode(raw) {
                Node::Empty => {}
                Node::Body(b) => order.push(b as u32),
                Node::Cell(c) => (0..NSUB).for_each(|k| {
                    dfs(
                        store,
                        store.view(Cube::from_array([0.0; 4])).child(c, k),
                        order,
                    )
                }),
            }
        }
        let mut order = Vec::new();
        dfs(&store, Node::Cell(0).encode(), &mut order);
        assert_eq!(order.len(), n);

        for cost in &cost_sets {
            for (b, &c) in cost.iter().enumerate() {
                body::rec_mut(&mut t, b)[body::COST] = c as f64;
            }
            compute_cofm(&mut store.as_mut(), ncell, &t, 0);
            let total: u64 = cost.iter().sum();
            assert_eq!(store.view(cube).cost(0), total);
            let max_cost = *cost.iter().max().unwrap();
            for nprocs in [1, 2, 3, 4, 7, 16] {
                let mut all = Vec::new();
                let mut mine = Vec::new();
                for id in 0..nprocs {
                    costzone(store.view(cube), &t, id, nprocs, &mut mine);
                    let zone_cost: u64 = mine.iter().map(|&b| cost[b as usize]).sum();
                    let share = total as f64 / nprocs as f64;
                    assert!(
                        (zone_cost as f64 - share).abs() <= max_cost as f64 + 1.0,
                        "zone {id}/{nprocs} has cost {zone_cost}, share {share}"
                    );
                    all.extend_from_slice(&mine);
                }
                assert_eq!(all, order, "{nprocs} processors");
            }
        }
    }
}
