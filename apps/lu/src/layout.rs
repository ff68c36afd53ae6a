//! Where each block of the matrix lives and which processor owns it.
//!
//! The matrix of order `n` is cut into `nblocks x nblocks` blocks of `block_size` rows
//! and columns; the last block row and column are `n % block_size` wide when that is not
//! zero (SPLASH-2 `lu.C`, the `edge` blocks). Every block is stored column-major; what
//! differs between the two applications is where a block starts and its leading
//! dimension (its column stride):
//!
//! - LU (SPLASH-2 `non_contiguous_blocks`): one `n x n` column-major array, element
//!   `(i, j)` at `i + j * n`; a block is a strided window of it, so blocks of different
//!   owners share cache lines and pages.
//! - CLU (SPLASH-2 `contiguous_blocks`): each block is a dense column-major array whose
//!   leading dimension is its own row count. Each processor's blocks are allocated together
//!   in one region, regions in processor order, each starting on a page boundary; within a
//!   region blocks come in the order block row outer, block column inner (the allocation
//!   loop of SPLASH-2's `main`).

use app_common::AppError;

/// Which of the two SPLASH-2 versions: it fixes the layout and the ownership rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// LU: one column-major array, blocks strided in it.
    NonContiguous,
    /// CLU: every block contiguous, a processor's blocks together.
    Contiguous,
}

/// A block seen inside the matrix array: element `(r, c)` of the block, `r < rows`,
/// `c < cols`, is at `offset + r + c * stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockView {
    pub offset: usize,
    pub stride: usize,
    pub rows: usize,
    pub cols: usize,
}

impl BlockView {
    /// The index in the matrix array of element `(r, c)` of this block.
    #[inline]
    pub fn at(&self, r: usize, c: usize) -> usize {
        self.offset + r + c * self.stride
    }
}

/// Which processor owns block `(bi, bj)` (block row `bi`, block column `bj`). The owner
/// of a block is the only processor that ever writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owners {
    variant: Variant,
    nprocs: usize,
    procs_per_node: usize,
    /// CLU's processor grid, `grid_rows * grid_cols == nprocs`.
    grid_rows: usize,
    grid_cols: usize,
}

impl Owners {
    /// The ownership rule of `variant` for `nprocs` processors, `procs_per_node` of them
    /// on each node (processor `id` runs on node `id / procs_per_node`).
    ///
    /// - CLU keeps SPLASH-2's rule: the processors form a `grid_rows x grid_cols` grid
    ///   (`grid_rows` the largest divisor of `nprocs` not above its square root) and
    ///   block `(bi, bj)` goes to `bj % grid_cols + (bi % grid_rows) * grid_cols`
    ///   (`BlockOwner` in `contiguous_blocks/lu.C`). `procs_per_node` does not matter.
    /// - LU uses the paper's change (footnote 3, section 3.2): SPLASH-2's
    ///   `non_contiguous_blocks` gives block `(bi, bj)` to `bi % grid_cols +
    ///   (bj % grid_rows) * grid_cols`, so a column of tiles goes to `grid_cols`
    ///   consecutive processors, which may span nodes; the paper restricts a column of
    ///   tiles to the processors of one node. Here the grid is one row of processors per
    ///   node: block column `bj` belongs to node `bj % nodes` and its block `bi` to that
    ///   node's processor `bi % procs_on_that_node`.
    pub fn new(variant: Variant, nprocs: usize, procs_per_node: usize) -> Result<Owners, AppError> {
        let bad = |name: &str, value: usize| AppError::BadParam {
            name: name.into(),
            value: value.to_string(),
            why: "must be at least 1".into(),
        };
        if nprocs == 0 {
            return Err(bad("nprocs", nprocs));
        }
        if procs_per_node == 0 {
            return Err(bad("procs_per_node", procs_per_node));
        }
        let (grid_rows, grid_cols) = processor_grid(nprocs);
        Ok(Owners {
            variant,
            nprocs,
            procs_per_node,
            grid_rows,
            grid_cols,
        })
    }

    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// The processor that owns block `(bi, bj)`.
    #[inline]
    pub fn owner(&self, bi: usize, bj: usize) -> usize {
        match self.variant {
            Variant::Contiguous => bj % self.grid_cols + (bi % self.grid_rows) * self.grid_cols,
            Variant::NonContiguous => {
                let nodes = self.nprocs.div_ceil(self.procs_per_node);
                let first = (bj % nodes) * self.procs_per_node;
                // The last node may hold fewer processors when nprocs is not a multiple.
                let width = self.procs_per_node.min(self.nprocs - first);
                first + bi % width
            }
        }
    }
}

/// SPLASH-2's processor grid: `rows` starts at the integer square root of `nprocs` and
/// decreases until it divides `nprocs`; `cols = nprocs / rows`.
pub fn processor_grid(nprocs: usize) -> (usize, usize) {
    assert!(nprocs > 0, "a processor grid needs at least one processor");
    let mut rows = 1;
    while (rows + 1) * (rows + 1) <= nprocs {
        rows += 1;
    }
    while nprocs % rows != 0 {
        rows -= 1;
    }
    (rows, nprocs / rows)
}

/// Where every block of the matrix is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    variant: Variant,
    n: usize,
    block_size: usize,
    nblocks: usize,
    /// The start of block `(bi, bj)` at `bi + bj * nblocks`.
    offsets: Vec<usize>,
    len: usize,
}

impl Layout {
    /// The layout of `variant`. For CLU the regions follow `owners` and each starts at a
    /// multiple of `align_elems` elements (the DSM page size over 8; 1 when it does not
    /// matter). LU ignores both: it is one `n x n` array.
    pub fn new(
        variant: Variant,
        n: usize,
        block_size: usize,
        owners: &Owners,
        align_elems: usize,
    ) -> Layout {
        match variant {
            Variant::NonContiguous => Layout::column_major(n, block_size),
            Variant::Contiguous => Layout::contiguous(n, block_size, owners, align_elems),
        }
    }

    /// LU's layout: element `(i, j)` at `i + j * n`.
    pub fn column_major(n: usize, block_size: usize) -> Layout {
        let nblocks = block_count(n, block_size);
        let mut offsets = vec![0; nblocks * nblocks];
        for bj in 0..nblocks {
            for bi in 0..nblocks {
                offsets[bi + bj * nblocks] = bi * block_size + bj * block_size * n;
            }
        }
        Layout {
            variant: Variant::NonContiguous,
            n,
            block_size,
            nblocks,
            offsets,
            len: n * n,
        }
    }

    /// CLU's layout: each processor's blocks in one region starting at a multiple of
    /// `align_elems`, regions in processor order, blocks in a region in the order block
    /// row outer, block column inner.
    pub fn contiguous(n: usize, block_size: usize, owners: &Owners, align_elems: usize) -> Layout {
        assert!(align_elems > 0, "alignment must be at least one element");
        let nblocks = block_count(n, block_size);
        let rows = |b: usize| block_size.min(n - b * block_size);
        let mut region_len = vec![0usize; owners.nprocs()];
        for bi in 0..nblocks {
            for bj in 0..nblocks {
                region_len[owners.owner(bi, bj)] += rows(bi) * rows(bj);
            }
        }
        let mut next = Vec::with_capacity(region_len.len());
        let mut end = 0usize;
        for len in &region_len {
            let start = end.next_multiple_of(align_elems);
            next.push(start);
            end = start + len;
        }
        let mut offsets = vec![0; nblocks * nblocks];
        for bi in 0..nblocks {
            for bj in 0..nblocks {
                let p = owners.owner(bi, bj);
                offsets[bi + bj * nblocks] = next[p];
                next[p] += rows(bi) * rows(bj);
            }
        }
        Layout {
            variant: Variant::Contiguous,
            n,
            block_size,
            nblocks,
            offsets,
            len: end,
        }
    }

    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The order of the matrix.
    pub fn n(&self) -> usize {
        self.n
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in each dimension: `ceil(n / block_size)`.
    pub fn nblocks(&self) -> usize {
        self.nblocks
    }

    /// Elements of the array that holds the matrix (the size of the DSM allocation).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows of block row `b` (equally, columns of block column `b`).
    #[inline]
    pub fn block_dim(&self, b: usize) -> usize {
        self.block_size.min(self.n - b * self.block_size)
    }

    /// The view of block `(bi, bj)`.
    #[inline]
    pub fn block(&self, bi: usize, bj: usize) -> BlockView {
        let rows = self.block_dim(bi);
        BlockView {
            offset: self.offsets[bi + bj * self.nblocks],
            stride: match self.variant {
                Variant::NonContiguous => self.n,
                Variant::Contiguous => rows,
            },
            rows,
            cols: self.block_dim(bj),
        }
    }

    /// The index in the array of matrix element `(i, j)` (row `i`, column `j`).
    #[inline]
    pub fn index(&self, i: usize, j: usize) -> usize {
        let bs = self.block_size;
        self.block(i / bs, j / bs).at(i % bs, j % bs)
    }
}

fn block_count(n: usize, block_size: usize) -> usize {
    assert!(
        n > 0 && block_size > 0,
        "matrix order and block size must be positive"
    );
    n.div_ceil(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_grid_matches_splash2_rule() {
        // Hand-worked: sqrt(32) = 5, 5 does not divide 32, 4 does: 4 x 8.
        assert_eq!(processor_grid(32), (4, 8));
        assert_eq!(processor_grid(1), (1, 1));
        assert_eq!(processor_grid(6), (2, 3));
        assert_eq!(processor_grid(7), (1, 7));
        assert_eq!(processor_grid(16), (4, 4));
    }

    #[test]
    fn clu_owner_is_the_splash2_grid_rule() {
        // 32 processors, grid 4 x 8: owner(bi, bj) = bj % 8 + (bi % 4) * 8.
        let o = Owners::new(Variant::Contiguous, 32, 4).unwrap();
        assert_eq!(o.owner(5, 10), 2 + 8);
        assert_eq!(o.owner(3, 7), 7 + 24);
        assert_eq!(o.owner(4, 8), 0);
    }

    #[test]
    fn lu_column_of_tiles_stays_on_one_node() {
        // 8 processors on 2 nodes of 4: column bj goes to node bj % 2, row bi to bi % 4.
        let o = Owners::new(Variant::NonContiguous, 8, 4).unwrap();
        assert_eq!(o.owner(5, 3), 1 + 4);
        assert_eq!(o.owner(2, 4), 2);
        for bj in 0..12 {
            let node = |p: usize| p / 4;
            let owners: Vec<usize> = (0..12).map(|bi| o.owner(bi, bj)).collect();
            assert!(
                owners.iter().all(|&p| node(p) == bj % 2),
                "column {bj}: {owners:?}"
            );
            // Every processor of that node gets a share of the column.
            for p in 0..4 {
                assert!(owners.contains(&(4 * (bj % 2) + p)));
            }
        }
    }

    #[test]
    fn lu_owner_with_a_partial_last_node() {
        // 5 processors, 2 per node: nodes {0,1}, {2,3}, {4}.
        let o = Owners::new(Variant::NonContiguous, 5, 2).unwrap();
        assert_eq!(o.owner(3, 2), 4);
        assert_eq!(o.owner(3, 1), 3);
        assert_eq!(o.owner(3, 3), 1);
    }

    #[test]
    fn zero_processors_is_an_error() {
        assert!(Owners::new(Variant::Contiguous, 0, 1)
            .unwrap_err()
            .to_string()
            .contains("nprocs"));
        assert!(Owners::new(Variant::NonContiguous, 4, 0)
            .unwrap_err()
            .to_string()
            .contains("procs_per_node"));
    }

    #[test]
    fn column_major_index_is_i_plus_j_n() {
        let l = Layout::column_major(20, 16);
        assert_eq!(l.nblocks(), 2);
        assert_eq!(l.len(), 400);
        for (i, j) in [(0, 0), (17, 0), (2, 18), (19, 19), (15, 16)] {
            assert_eq!(l.index(i, j), i + 20 * j);
        }
        assert_eq!(
            l.block(1, 0),
            BlockView {
                offset: 16,
                stride: 20,
                rows: 4,
                cols: 16
            }
        );
    }

    #[test]
    fn contiguous_single_processor_offsets_by_hand() {
        // n = 20, block 16: blocks (0,0) 16x16 at 0, (0,1) 16x4 at 256, (1,0) 4x16 at 320,
        // (1,1) 4x4 at 384; 400 elements.
        let o = Owners::new(Variant::Contiguous, 1, 1).unwrap();
        let l = Layout::contiguous(20, 16, &o, 1);
        assert_eq!(l.len(), 400);
        assert_eq!(
            l.block(0, 1),
            BlockView {
                offset: 256,
                stride: 16,
                rows: 16,
                cols: 4
            }
        );
        assert_eq!(
            l.block(1, 0),
            BlockView {
                offset: 320,
                stride: 4,
                rows: 4,
                cols: 16
            }
        );
        // (17, 0): block (1,0), local (1, 0), leading dimension 4.
        assert_eq!(l.index(17, 0), 321);
        // (2, 18): block (0,1), local (2, 2), leading dimension 16.
        assert_eq!(l.index(2, 18), 256 + 2 + 2 * 16);
        // (19, 19): block (1,1), local (3, 3), leading dimension 4.
        assert_eq!(l.index(19, 19), 384 + 3 + 3 * 4);
    }

    #[test]
    fn every_layout_is_a_bijection_onto_its_elements() {
        for (nprocs, ppn) in [(1, 1), (4, 2), (6, 3), (5, 2)] {
            for variant in [Variant::NonContiguous, Variant::Contiguous] {
                let o = Owners::new(variant, nprocs, ppn).unwrap();
                let l = Layout::new(variant, 37, 8, &o, 64);
                let mut seen = vec![false; l.len()];
                for j in 0..37 {
                    for i in 0..37 {
                        let x = l.index(i, j);
                        assert!(!seen[x], "{variant:?} P={nprocs}: ({i},{j}) collides");
                        seen[x] = true;
                    }
                }
                // Only alignment padding is left unused.
                let used = seen.iter().filter(|&&s| s).count();
                assert_eq!(used, 37 * 37);
            }
        }
    }

    #[test]
    fn clu_regions_are_aligned_and_hold_only_their_owners_blocks() {
        let (nprocs, align) = (6, 512);
        let o = Owners::new(Variant::Contiguous, nprocs, 3).unwrap();
        let l = Layout::contiguous(100, 16, &o, align);
        let nb = l.nblocks();
        for p in 0..nprocs {
            let mut spans: Vec<(usize, usize)> = (0..nb)
                .flat_map(|bi| (0..nb).map(move |bj| (bi, bj)))
                .filter(|&(bi, bj)| o.owner(bi, bj) == p)
                .map(|(bi, bj)| {
                    let b = l.block(bi, bj);
                    (b.offset, b.offset + b.rows * b.cols)
                })
                .collect();
            spans.sort();
            assert_eq!(
                spans[0].0 % align,
                0,
                "region of processor {p} is not aligned"
            );
            for w in spans.windows(2) {
                assert_eq!(
                    w[0].1, w[1].0,
                    "processor {p}'s blocks are not back to back"
                );
            }
        }
    }
}
