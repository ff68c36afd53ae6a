//! The Barnes-Hut octree in a table of cell records: its layout, the sequential build that
//! inserts one body per leaf, and the centre-of-mass pass.
//!
//! The tree follows the hack code of Barnes and Hut as SPLASH-1 Barnes uses it: the root
//! cell is the cube that holds every body, every cell has eight children, and a child is
//! empty, a body, or a cell. A body lands in the first empty slot on its way down; when
//! that slot already holds a body, a new cell replaces it and both bodies go one level
//! further down, until they part. Which child a body goes to is decided, as in the
//! original, on integer coordinates: the position scaled to `[0, 2^30)` inside the root
//! cube ([`Cube::intcoord`]), one bit per level ([`subindex`]).

use crate::body;
use std::fmt;

/// Children per cell.
pub const NSUB: usize = 8;

/// The integer coordinates span `[0, IMAX)`; the root cell picks its child with bit
/// `IMAX >> 1` (SPLASH Barnes uses the same 30 bits).
pub const IMAX: u32 = 1 << 30;

/// The bit that marks a cell in a stored child index.
const CELL_BIT: u32 = 1 << 31;

/// A stored child index that names nothing.
pub const EMPTY: u32 = u32::MAX;

/// The most cells a tree may hold: every index below it, with the cell bit set, differs
/// from [`EMPTY`].
pub const MAX_CELLS: usize = (CELL_BIT - 1) as usize;

/// What a stored child index names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Empty,
    Body(usize),
    Cell(usize),
}

impl Node {
    /// The stored form: [`EMPTY`], a body index `b < 2^31`, or a cell index with the top
    /// bit set.
    pub fn encode(self) -> u32 {
        match self {
            Node::Empty => EMPTY,
            Node::Body(b) => {
                assert!(b < CELL_BIT as usize, "body index {b} does not fit 31 bits");
                b as u32
            }
            Node::Cell(c) => {
                assert!(c < MAX_CELLS, "cell index {c} does not fit 31 bits");
                CELL_BIT | c as u32
            }
        }
    }

    pub fn decode(raw: u32) -> Node {
        if raw == EMPTY {
            Node::Empty
        } else if raw & CELL_BIT != 0 {
            Node::Cell((raw & !CELL_BIT) as usize)
        } else {
            Node::Body(raw as usize)
        }
    }
}

/// The root cell: the cube with lowest corner `rmin` and side `rsize`. Stored in shared
/// memory as four `f64` (`rmin` then `rsize`, [`Cube::to_array`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cube {
    pub rmin: [f64; 3],
    pub rsize: f64,
}

impl Cube {
    pub fn to_array(self) -> [f64; 4] {
        [self.rmin[0], self.rmin[1], self.rmin[2], self.rsize]
    }

    pub fn from_array(a: [f64; 4]) -> Cube {
        Cube {
            rmin: [a[0], a[1], a[2]],
            rsize: a[3],
        }
    }

    /// The cube around every body, as SPLASH Barnes sizes it at each step: side 1.00002
    /// times the largest extent of the bodies along an axis, lowest corner `rsize / 10^5`
    /// below their minima, so every body lies strictly inside. A single body (or bodies
    /// that all coincide) gets side 1. Reads position `half` ([`body::POS`]).
    pub fn around(bodies: &[f64], half: usize) -> Cube {
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for r in bodies.chunks_exact(body::BODY_WORDS) {
            let p = &r[body::POS[half]..body::POS[half] + 3];
            for k in 0..3 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
            dsm::work::count(crate::TREE, 1);
        }
        let extent = (0..3).map(|k| hi[k] - lo[k]).fold(0.0f64, f64::max);
        let rsize = if extent > 0.0 { 1.00002 * extent } else { 1.0 };
        Cube {
            rmin: [0, 1, 2].map(|k| lo[k] - rsize / 100_000.0),
            rsize,
        }
    }

    /// The integer coordinates of `p` in `[0, IMAX)^3`, or `None` if `p` lies outside the
    /// cube (or is not finite).
    pub fn intcoord(&self, p: &[f64]) -> Option<[u32; 3]> {
        let mut x = [0u32; 3];
        for k in 0..3 {
            let xsc = (p[k] - self.rmin[k]) / self.rsize;
            if !(0.0..1.0).contains(&xsc) {
                return None;
            }
            x[k] = (xsc * IMAX as f64).floor() as u32;
        }
        Some(x)
    }
}

/// The child slot of a cell at `level` (a single bit) that integer point `x` falls in:
/// x, y, z contribute 4, 2, 1 when their bit `level` is set.
pub fn subindex(x: [u32; 3], level: u32) -> usize {
    let mut i = 0;
    for (k, xk) in x.iter().enumerate() {
        if xk & level != 0 {
            i += NSUB >> (k + 1);
        }
    }
    i
}

/// The cell capacity of the shared cell arrays for `nbody` bodies: `fcells * nbody`
/// cells (SPLASH's `fcells`), at least 16. The DSM heap is sized from it at start.
pub fn cell_capacity(nbody: usize, fcells: f64) -> usize {
    ((fcells * nbody as f64).ceil() as usize).clamp(16, MAX_CELLS)
}

/// Words (`f64`) per cell record: the hack code's cell, a node (`type`, `mass`, `pos`)
/// then `subp[NSUB]`, with SPLASH's `cost` after the node's fields (SPLASH-2 `load.C`,
/// `makecell` and `hackcofm`, set and read a cell's type, mass, position, cost and
/// `Subp`; its level, parent, sequence number and lock fields have no use here). Word 0 (`type`) is
/// unused; [`CELL_MASS`], [`CELL_POS`], [`CELL_COST`] and [`CELL_SUBP`] are the others.
pub const CELL_WORDS: usize = 14;
/// Word of a cell's mass.
pub const CELL_MASS: usize = 1;
/// Words of a cell's centre of mass.
pub const CELL_POS: usize = 2;
/// Word of a cell's cost (an integer held in an `f64`).
pub const CELL_COST: usize = 5;
/// Words of a cell's eight stored child indices ([`Node::encode`], the `u32` as the low
/// bits of the word).
pub const CELL_SUBP: usize = 6;

/// The cell table, read-only: what the force walk and the partition read. Cell `c` is the
/// record at `CELL_WORDS c..CELL_WORDS (c + 1)`; cell 0 is the root.
#[derive(Clone, Copy)]
pub struct Tree<'a> {
    pub cube: Cube,
    pub cells: &'a [f64],
}

impl Tree<'_> {
    /// The stored index of child `k` of cell `c`.
    #[inline]
    pub fn child(&self, c: usize, k: usize) -> u32 {
        self.cells[c * CELL_WORDS + CELL_SUBP + k].to_bits() as u32
    }

    /// The mass of cell `c`.
    #[inline]
    pub fn mass(&self, c: usize) -> f64 {
        self.cells[c * CELL_WORDS + CELL_MASS]
    }

    /// The centre of mass of cell `c`.
    #[inline]
    pub fn com(&self, c: usize) -> [f64; 3] {
        let r = &self.cells[c * CELL_WORDS + CELL_POS..];
        [r[0], r[1], r[2]]
    }

    /// The cost of cell `c`: the sum of its bodies' costs (interactions of the last step).
    #[inline]
    pub fn cost(&self, c: usize) -> u64 {
        self.cells[c * CELL_WORDS + CELL_COST] as u64
    }
}

/// The cell table, writable: what processor 0 fills when it builds the tree.
pub struct TreeMut<'a> {
    pub cells: &'a mut [f64],
}

impl TreeMut<'_> {
    /// Cells the table can hold.
    pub fn capacity(&self) -> usize {
        self.cells.len() / CELL_WORDS
    }

    pub fn view(&self, cube: Cube) -> Tree<'_> {
        Tree {
            cube,
            cells: self.cells,
        }
    }

    fn set_child(&mut self, c: usize, k: usize, raw: u32) {
        self.cells[c * CELL_WORDS + CELL_SUBP + k] = f64::from_bits(u64::from(raw));
    }

    fn child(&self, c: usize, k: usize) -> u32 {
        self.cells[c * CELL_WORDS + CELL_SUBP + k].to_bits() as u32
    }

    /// Empties every child slot of cell `c`.
    fn clear_cell(&mut self, c: usize) {
        for k in 0..NSUB {
            self.set_child(c, k, EMPTY);
        }
    }
}

/// An owned cell table, for the sequential version and tests.
#[derive(Clone, Debug)]
pub struct TreeStore {
    pub cells: Vec<f64>,
}

impl TreeStore {
    pub fn new(capacity: usize) -> TreeStore {
        let mut store = TreeStore {
            cells: vec![0.0; CELL_WORDS * capacity],
        };
        let mut t = store.as_mut();
        for c in 0..capacity {
            t.clear_cell(c);
        }
        store
    }

    pub fn as_mut(&mut self) -> TreeMut<'_> {
        TreeMut {
            cells: &mut self.cells,
        }
    }

    pub fn view(&self, cube: Cube) -> Tree<'_> {
        Tree {
            cube,
            cells: &self.cells,
        }
    }
}

/// Why a tree could not be built.
#[derive(Clone, Debug, PartialEq)]
pub enum TreeError {
    /// Body `body` lies outside the cube or its position is not finite.
    Outside { body: usize },
    /// Bodies `a` and `b` have the same integer coordinates: no cell separates them.
    Coincide { a: usize, b: usize },
    /// The cell arrays are full.
    Full { capacity: usize },
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Outside { body } => write!(
                f,
                "body {body} lies outside the root cell or has a non-finite position; \
                 the time step `dtime` is probably too large"
            ),
            TreeError::Coincide { a, b } => write!(
                f,
                "bodies {a} and {b} are closer than 2^-30 of the root cell, so no cell \
                 separates them; use another `seed` or fewer bodies"
            ),
            TreeError::Full { capacity } => write!(
                f,
                "the cell arrays ({capacity} cells) are full; raise `fcells`"
            ),
        }
    }
}

/// Builds the tree of the bodies of table `bodies` ([`crate::body`]) at their position
/// `half` in `cube`, inserting them in index order, and returns the number of cells used
/// (cells `0..ncell`).
/// Sequential: in the TreadMarks program one processor builds the whole tree.
///
/// A cell always has a higher index than its parent, which [`compute_cofm`] relies on.
pub fn build_tree(
    cube: Cube,
    bodies: &[f64],
    half: usize,
    tree: &mut TreeMut<'_>,
) -> Result<usize, TreeError> {
    let cap = tree.capacity();
    assert!(cap >= 1, "the cell table holds no cell");
    tree.clear_cell(0);
    let mut ncell = 1;
    for b in 0..body::count(bodies) {
        let xb = cube
            .intcoord(&body::pos(bodies, b, half))
            .ok_or(TreeError::Outside { body: b })?;
        let mut c = 0;
        let mut level = IMAX >> 1;
        // Counted work: one unit per level the body goes down.
        let mut steps = 0;
        loop {
            steps += 1;
            let slot = subindex(xb, level);
            match Node::decode(tree.child(c, slot)) {
                Node::Empty => {
                    tree.set_child(c, slot, Node::Body(b).encode());
                    dsm::work::count(crate::TREE, steps);
                    break;
                }
                Node::Cell(next) => {
                    c = next;
                    level >>= 1;
                }
                Node::Body(other) => {
                    if level == 1 {
                        return Err(TreeError::Coincide { a: other, b });
                    }
                    if ncell == cap {
                        return Err(TreeError::Full { capacity: cap });
                    }
                    let fresh = ncell;
                    ncell += 1;
                    tree.clear_cell(fresh);
                    let xo = cube
                        .intcoord(&body::pos(bodies, other, half))
                        .expect("a body already in the tree lies inside the cube");
                    tree.set_child(fresh, subindex(xo, level >> 1), Node::Body(other).encode());
                    tree.set_child(c, slot, Node::Cell(fresh).encode());
                    c = fresh;
                    level >>= 1;
                }
            }
        }
    }
    Ok(ncell)
}

/// Fills mass, centre of mass and cost of cells `0..ncell` from their children, summed in
/// child order 0..8 as the hack code's `hackcofm` does, with each body at its position
/// `half` and weighing its cost (the interactions of its last force phase). Children have
/// higher indices than their parents, so one pass from the last cell down to the root
/// sees every child before its parent.
pub fn compute_cofm(tree: &mut TreeMut<'_>, ncell: usize, bodies: &[f64], half: usize) {
    for c in (0..ncell).rev() {
        let mut m = 0.0;
        let mut mx = [0.0f64; 3];
        let mut cost = 0u64;
        for k in 0..NSUB {
            let (qm, qpos, qcost) = match Node::decode(tree.child(c, k)) {
                Node::Empty => continue,
                Node::Body(b) => (
                    body::mass(bodies, b),
                    body::pos(bodies, b, half),
                    body::cost(bodies, b),
                ),
                Node::Cell(q) => {
                    debug_assert!(q > c, "a child cell has a higher index than its parent");
                    // The cube plays no part in reading a cell's fields.
                    let v = tree.view(Cube::from_array([0.0; 4]));
                    (v.mass(q), v.com(q), v.cost(q))
                }
            };
            m += qm;
            for (s, q) in mx.iter_mut().zip(qpos) {
                *s += qm * q;
            }
            cost += qcost;
            dsm::work::count(crate::TREE, 1);
        }
        let r = &mut tree.cells[c * CELL_WORDS..(c + 1) * CELL_WORDS];
        r[CELL_MASS] = m;
        for (dst, s) in r[CELL_POS..CELL_POS + 3].iter_mut().zip(mx) {
            *dst = s / m;
        }
        r[CELL_COST] = cost as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body table with positions `pos` and unit masses.
    fn bodies(pos: &[f64]) -> Vec<f64> {
        let n = pos.len() / 3;
        body::from_arrays(pos, &vec![0.0; 3 * n], &vec![1.0; n])
    }

    #[test]
    fn node_encoding_round_trips() {
        for n in [
            Node::Empty,
            Node::Body(0),
            Node::Body(12345),
            Node::Cell(0),
            Node::Cell(77),
        ] {
            assert_eq!(Node::decode(n.encode()), n);
        }
        assert_ne!(Node::Cell(0).encode(), Node::Body(0).encode());
    }

    #[test]
    fn subindex_gives_x_4_y_2_z_1() {
        let l = 1 << 5;
        assert_eq!(subindex([0, 0, 0], l), 0);
        assert_eq!(subindex([l, 0, 0], l), 4);
        assert_eq!(subindex([0, l, 0], l), 2);
        assert_eq!(subindex([0, 0, l], l), 1);
        assert_eq!(subindex([l | 1, l, l], l), 7);
        assert_eq!(subindex([l >> 1, 0, 0], l), 0);
    }

    #[test]
    fn cube_holds_every_body_strictly() {
        let pos = [-1.0, 0.0, 2.0, 3.0, 0.5, -2.0, 0.0, 0.0, 0.0];
        let cube = Cube::around(&bodies(&pos), 0);
        // The largest extent is 4 (x from -1 to 3, z from -2 to 2).
        assert_eq!(cube.rsize, 4.0 * 1.00002);
        for p in pos.chunks(3) {
            assert!(cube.intcoord(p).is_some());
        }
        assert!(cube.intcoord(&[3.1, 0.0, 0.0]).is_none());
        assert!(cube.intcoord(&[f64::NAN, 0.0, 0.0]).is_none());
        assert_eq!(Cube::from_array(cube.to_array()), cube);
    }

    /// Two bodies in opposite octants of the root go straight into the root; two bodies in
    /// the same octant but different sub-octants need one extra cell.
    #[test]
    fn small_trees_have_the_expected_shape() {
        let cube = Cube {
            rmin: [0.0; 3],
            rsize: 8.0,
        };
        let mut store = TreeStore::new(16);
        let pos = [1.0, 1.0, 1.0, 7.0, 7.0, 7.0];
        assert_eq!(build_tree(cube, &bodies(&pos), 0, &mut store.as_mut()), Ok(1));
        let t = store.view(cube);
        assert_eq!(Node::decode(t.child(0, 0)), Node::Body(0));
        assert_eq!(Node::decode(t.child(0, 7)), Node::Body(1));

        // Both in octant 0 (below 4 on every axis); body 1 in sub-octant 4 (x >= 2).
        let pos = [1.0, 1.0, 1.0, 3.0, 1.0, 1.0];
        assert_eq!(build_tree(cube, &bodies(&pos), 0, &mut store.as_mut()), Ok(2));
        let t = store.view(cube);
        assert_eq!(Node::decode(t.child(0, 0)), Node::Cell(1));
        assert_eq!(Node::decode(t.child(1, 0)), Node::Body(0));
        assert_eq!(Node::decode(t.child(1, 4)), Node::Body(1));
        let mut t = body::from_arrays(&pos, &[0.0; 6], &[0.25, 0.75]);
        t[body::COST] = 3.0;
        t[body::BODY_WORDS + body::COST] = 4.0;
        compute_cofm(&mut store.as_mut(), 2, &t, 0);
        let t = store.view(cube);
        assert_eq!([t.mass(0), t.mass(1)], [1.0, 1.0]);
        assert_eq!([t.com(0), t.com(1)], [[2.5, 1.0, 1.0], [2.5, 1.0, 1.0]]);
        assert_eq!([t.cost(0), t.cost(1)], [7, 7]);
    }

    #[test]
    fn bad_trees_are_errors() {
        let cube = Cube {
            rmin: [0.0; 3],
            rsize: 8.0,
        };
        let mut store = TreeStore::new(64);
        let pos = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(
            build_tree(cube, &bodies(&pos), 0, &mut store.as_mut()),
            Err(TreeError::Coincide { a: 0, b: 1 })
        );
        let pos = [1.0, 1.0, 1.0, 9.0, 1.0, 1.0];
        assert_eq!(
            build_tree(cube, &bodies(&pos), 0, &mut store.as_mut()),
            Err(TreeError::Outside { body: 1 })
        );
        // Two bodies 2^-10 apart inside octant 0 need about ten nested cells.
        let pos = [1.0, 1.0, 1.0, 1.0 + 1.0 / 1024.0, 1.0, 1.0];
        let mut small = TreeStore::new(4);
        assert_eq!(
            build_tree(cube, &bodies(&pos), 0, &mut small.as_mut()),
            Err(TreeError::Full { capacity: 4 })
        );
        assert!(build_tree(cube, &bodies(&pos), 0, &mut store.as_mut()).is_ok());
    }
}
