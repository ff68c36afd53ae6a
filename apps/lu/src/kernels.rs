//! The arithmetic of SPLASH-2 LU (`lu0`, `bdiv`, `bmodd`, `bmod`, `daxpy` in both
//! `lu.C` versions), with the same loop order, so that every element sees the same
//! sequence of floating-point operations whichever processor does the work and whichever
//! layout holds the matrix.
//!
//! The factorization is `A = L U` without pivoting, `L` lower triangular with the pivots on
//! its diagonal and `U` unit upper triangular (the rows of `U` are divided by the pivot);
//! both overwrite `A`.
//!
//! Each kernel takes the whole matrix array and [`BlockView`]s into it: the same code runs
//! on a `Vec` sequentially and on a DSM array's slice in parallel, and a block may be
//! strided (LU) or dense (CLU). A kernel writes only its destination block.

use crate::layout::{BlockView, Layout, Owners};

/// The one kind of unit the kernels count (`dsm::work`): a **flop** here is one step of
/// an inner loop, either one element of a `daxpy` (a multiply-add) or one division by a
/// pivot. Each kernel counts its block's units once it is done with the block.
pub const FLOP: usize = 0;

/// Units of [`lu0`] on an `n x n` block: for each `k`, each of the `n - k - 1` later
/// columns takes a division and a `daxpy` of `n - k - 1`; summed, `(n^3 - n) / 3`.
pub fn lu0_units(n: usize) -> u64 {
    let n = n as u64;
    (n * n * n - n) / 3
}

/// Units of [`bdiv`]: for each `k < dimk`, `dimk - k - 1` `daxpy`s of `dimi`.
pub fn bdiv_units(dimi: usize, dimk: usize) -> u64 {
    let (dimi, dimk) = (dimi as u64, dimk as u64);
    dimi * (dimk * dimk.saturating_sub(1) / 2)
}

/// Units of [`bmodd`]: for each `k < dimi` and each of the `dimj` columns, a division and
/// a `daxpy` of `dimi - k - 1`, so `dimi - k` units; summed, `dimj * dimi (dimi + 1) / 2`.
pub fn bmodd_units(dimi: usize, dimj: usize) -> u64 {
    let (dimi, dimj) = (dimi as u64, dimj as u64);
    dimj * (dimi * (dimi + 1) / 2)
}

/// Units of [`bmod`]: `dimk x dimj` `daxpy`s of `dimi`.
pub fn bmod_units(dimi: usize, dimj: usize, dimk: usize) -> u64 {
    dimi as u64 * dimj as u64 * dimk as u64
}

/// Units of the whole factorization of an `n x n` matrix, whatever the block size: every
/// pivot `k` divides the `n - k - 1` elements right of it and updates each of them with a
/// column of `n - k - 1` multiply-adds, as unblocked LU does; summed, `(n^3 - n) / 3`.
pub fn factor_units(n: usize) -> u64 {
    lu0_units(n)
}

/// `y[i] += alpha * x[i]` (SPLASH-2 `daxpy`).
#[inline]
pub fn daxpy(y: &mut [f64], x: &[f64], alpha: f64) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// `daxpy` between two ranges `[dst, dst + len)` and `[src, src + len)` of one array.
/// The ranges must not overlap (they are different columns); overlap panics.
#[inline]
fn daxpy_within(a: &mut [f64], dst: usize, src: usize, len: usize, alpha: f64) {
    if len == 0 {
        return;
    }
    if dst < src {
        let (lo, hi) = a.split_at_mut(src);
        daxpy(&mut lo[dst..dst + len], &hi[..len], alpha);
    } else {
        let (lo, hi) = a.split_at_mut(dst);
        daxpy(&mut hi[..len], &lo[src..src + len], alpha);
    }
}

/// Factors the square diagonal block `d` in place (SPLASH-2 `lu0`): for each `k`, every
/// later column `j` has `d(k, j)` divided by the pivot `d(k, k)` and then updates
/// `d(k+1.., j) -= d(k, j) * d(k+1.., k)`.
pub fn lu0(a: &mut [f64], d: BlockView) {
    assert_eq!(d.rows, d.cols, "a diagonal block is square");
    let n = d.rows;
    for k in 0..n {
        let pivot = d.at(k, k);
        for j in k + 1..n {
            let kj = d.at(k, j);
            a[kj] /= a[pivot];
            let alpha = -a[kj];
            daxpy_within(a, d.at(k + 1, j), d.at(k + 1, k), n - k - 1, alpha);
        }
    }
    dsm::work::count(FLOP, lu0_units(n));
}

/// Divides block `blk` below the diagonal by the factored diagonal block `diag`
/// (SPLASH-2 `bdiv`): `blk := blk * U⁻¹`, `U` the unit upper part of `diag`, column by
/// column.
pub fn bdiv(a: &mut [f64], blk: BlockView, diag: BlockView) {
    assert_eq!(
        blk.cols, diag.rows,
        "bdiv: block columns must match the diagonal block"
    );
    let (dimi, dimk) = (blk.rows, blk.cols);
    for k in 0..dimk {
        for j in k + 1..dimk {
            let alpha = -a[diag.at(k, j)];
            daxpy_within(a, blk.at(0, j), blk.at(0, k), dimi, alpha);
        }
    }
    dsm::work::count(FLOP, bdiv_units(dimi, dimk));
}

/// Divides block `blk` right of the diagonal by the factored diagonal block `diag`
/// (SPLASH-2 `bmodd`): `blk := L⁻¹ blk`, `L` the lower part of `diag` with its pivots,
/// row `k` of `blk` divided by pivot `k`.
pub fn bmodd(a: &mut [f64], diag: BlockView, blk: BlockView) {
    assert_eq!(
        blk.rows, diag.rows,
        "bmodd: block rows must match the diagonal block"
    );
    let (dimi, dimj) = (blk.rows, blk.cols);
    for k in 0..dimi {
        let pivot = diag.at(k, k);
        for j in 0..dimj {
            let kj = blk.at(k, j);
            a[kj] /= a[pivot];
            let alpha = -a[kj];
            daxpy_within(a, blk.at(k + 1, j), diag.at(k + 1, k), dimi - k - 1, alpha);
        }
    }
    dsm::work::count(FLOP, bmodd_units(dimi, dimj));
}

/// Updates interior block `c -= l * u` (SPLASH-2 `bmod`): for each `k`, for each
/// column `j` of `c`, `c(.., j) -= u(k, j) * l(.., k)`.
pub fn bmod(a: &mut [f64], l: BlockView, u: BlockView, c: BlockView) {
    assert!(
        l.rows == c.rows && u.cols == c.cols && l.cols == u.rows,
        "bmod: block shapes do not conform"
    );
    let (dimi, dimj, dimk) = (c.rows, c.cols, l.cols);
    for k in 0..dimk {
        for j in 0..dimj {
            let alpha = -a[u.at(k, j)];
            daxpy_within(a, c.at(0, j), l.at(0, k), dimi, alpha);
        }
    }
    dsm::work::count(FLOP, bmod_units(dimi, dimj, dimk));
}

/// Step `bk`, phase 1: factor the diagonal block. Its owner does this.
pub fn factor_diagonal(a: &mut [f64], layout: &Layout, bk: usize) {
    lu0(a, layout.block(bk, bk));
}

/// Step `bk`, phase 2: divide the perimeter blocks, first those below the diagonal block
/// (column `bk`), then those right of it (row `bk`), each where `mine(bi, bj)` holds.
/// Reads the diagonal block `bk`, writes only perimeter blocks it is given.
pub fn divide_perimeter(
    a: &mut [f64],
    layout: &Layout,
    bk: usize,
    mine: impl Fn(usize, usize) -> bool,
) {
    let diag = layout.block(bk, bk);
    for bi in bk + 1..layout.nblocks() {
        if mine(bi, bk) {
            bdiv(a, layout.block(bi, bk), diag);
        }
    }
    for bj in bk + 1..layout.nblocks() {
        if mine(bk, bj) {
            bmodd(a, diag, layout.block(bk, bj));
        }
    }
}

/// Step `bk`, phase 3: update the interior blocks `(bi, bj)`, `bi, bj > bk`, where
/// `mine(bi, bj)` holds. Reads perimeter blocks of step `bk`, writes only its own blocks.
pub fn update_interior(
    a: &mut [f64],
    layout: &Layout,
    bk: usize,
    mine: impl Fn(usize, usize) -> bool,
) {
    let nb = layout.nblocks();
    for bi in bk + 1..nb {
        let l = layout.block(bi, bk);
        for bj in bk + 1..nb {
            if mine(bi, bj) {
                bmod(a, l, layout.block(bk, bj), layout.block(bi, bj));
            }
        }
    }
}

/// The memory a parallel factorization runs on: a view of the whole matrix array and the
/// barrier that makes other processors' writes visible. The view is taken afresh after
/// every barrier and never held across one (its borrow of `self` ends before
/// [`MatrixMemory::barrier`] can be called), as the DSM requires of its aliased slices.
pub trait MatrixMemory {
    /// The whole matrix array, valid until the next barrier.
    fn view(&mut self) -> &mut [f64];
    /// Waits until every processor has arrived; afterwards every write made before any
    /// processor's arrival is visible in the next [`MatrixMemory::view`].
    fn barrier(&mut self);
}

/// The factorization as processor `id` of a parallel run does it (SPLASH-2 `lu`), once
/// the input is complete and every processor has passed a barrier: at each step its
/// share of each phase, a barrier between the phases, and a last barrier after which
/// the whole matrix is final. The DSM version's memory is the shared array and a DSM
/// barrier; `tests/schedule.rs` runs it on a model of release consistency.
///
/// Two barriers per step, as SPLASH-2: the diagonal factorization of step `bk + 1` may
/// overlap the interior updates of step `bk`, because it touches only block
/// `(bk+1, bk+1)`, which its own owner updated, and those updates read only row and
/// column `bk`.
pub fn factor_parallel(mem: &mut impl MatrixMemory, layout: &Layout, owners: &Owners, id: usize) {
    let mine = |bi, bj| owners.owner(bi, bj) == id;
    for bk in 0..layout.nblocks() {
        if mine(bk, bk) {
            factor_diagonal(mem.view(), layout, bk);
        }
        mem.barrier(); // diagonal block bk is final
        divide_perimeter(mem.view(), layout, bk, mine);
        mem.barrier(); // row and column bk are final
        update_interior(mem.view(), layout, bk, mine);
    }
    mem.barrier(); // every block is final
}

/// The whole factorization on one processor: every step, every block.
pub fn factor(a: &mut [f64], layout: &Layout) {
    for bk in 0..layout.nblocks() {
        factor_diagonal(a, layout, bk);
        divide_perimeter(a, layout, bk, |_, _| true);
        update_interior(a, layout, bk, |_, _| true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Variant;
    use app_common::rng::SplitMix64;

    fn dense(n: usize) -> BlockView {
        BlockView {
            offset: 0,
            stride: n,
            rows: n,
            cols: n,
        }
    }

    #[test]
    fn lu0_of_a_2x2_by_hand() {
        // A = [[4, 2], [2, 3]]: U(0,1) = 2/4 = 0.5, L(1,0) = 2, L(1,1) = 3 - 2 * 0.5 = 2.
        let mut a = vec![4.0, 2.0, 2.0, 3.0]; // column-major
        lu0(&mut a, dense(2));
        assert_eq!(a, vec![4.0, 2.0, 0.5, 2.0]);
    }

    #[test]
    fn lu0_of_a_3x3_by_hand() {
        // A = [[2, 4, 2], [1, 5, 4], [2, 6, 9]] (rows). Crout with unit U:
        // L(:,0) = (2, 1, 2), U(0,:) = (1, 2, 1);
        // L(1,1) = 5 - 1*2 = 3, L(2,1) = 6 - 2*2 = 2, U(1,2) = (4 - 1*1) / 3 = 1;
        // L(2,2) = 9 - 2*1 - 2*1 = 5.
        let mut a = vec![2.0, 1.0, 2.0, 4.0, 5.0, 6.0, 2.0, 4.0, 9.0];
        lu0(&mut a, dense(3));
        assert_eq!(a, vec![2.0, 1.0, 2.0, 2.0, 3.0, 2.0, 1.0, 1.0, 5.0]);
    }

    #[test]
    fn daxpy_within_rejects_overlap() {
        let mut a = vec![0.0; 8];
        daxpy_within(&mut a, 4, 0, 4, 1.0);
        let r = std::panic::catch_unwind(move || daxpy_within(&mut a, 2, 0, 4, 1.0));
        assert!(r.is_err());
    }

    /// `L * U` rebuilt from a factored matrix stored by `layout`.
    fn multiply_back(a: &[f64], layout: &Layout) -> Vec<f64> {
        let n = layout.n();
        let mut prod = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let mut s = 0.0;
                for k in 0..=i.min(j) {
                    let l = a[layout.index(i, k)];
                    let u = if k == j { 1.0 } else { a[layout.index(k, j)] };
                    s += l * u;
                }
                prod[i + j * n] = s;
            }
        }
        prod
    }

    #[test]
    fn every_blocking_counts_the_flops_of_unblocked_lu() {
        // Block sizes with and without edge blocks, and one block for the whole matrix.
        for (n, bs) in [(1, 1), (10, 4), (23, 8), (16, 16), (5, 16), (33, 1), (37, 8)] {
            for variant in [Variant::NonContiguous, Variant::Contiguous] {
                let owners = Owners::new(variant, 1, 1).unwrap();
                let layout = Layout::new(variant, n, bs, &owners, 1);
                let mut a = vec![1.0; layout.len()];
                let before = dsm::work::tally()[FLOP];
                factor(&mut a, &layout);
                let counted = dsm::work::tally()[FLOP] - before;
                assert_eq!(counted, factor_units(n), "{variant:?} n={n} bs={bs}");
            }
        }
        // By hand: a 3 x 3 block takes 2 x (1 + 2) + 1 x (1 + 1) = 8 units.
        assert_eq!(lu0_units(3), 8);
        assert_eq!(bmodd_units(3, 1), 3 + 2 + 1);
        assert_eq!(bdiv_units(5, 3), 5 * (2 + 1));
        assert_eq!(bmod_units(2, 3, 4), 24);
    }

    #[test]
    fn blocked_factors_multiply_back_to_the_matrix() {
        // Diagonally dominant random matrices, block sizes that leave edge blocks, both
        // layouts: L * U must reproduce A to rounding.
        let mut rng = SplitMix64::new(7);
        for (n, bs) in [(10, 4), (23, 8), (16, 16), (5, 16), (33, 1)] {
            for variant in [Variant::NonContiguous, Variant::Contiguous] {
                let owners = Owners::new(variant, 3, 3).unwrap();
                let layout = Layout::new(variant, n, bs, &owners, 1);
                let mut orig = vec![0.0; n * n];
                let mut a = vec![0.0; layout.len()];
                for j in 0..n {
                    for i in 0..n {
                        let v = rng.next_f64() + if i == j { n as f64 } else { 0.0 };
                        orig[i + j * n] = v;
                        a[layout.index(i, j)] = v;
                    }
                }
                factor(&mut a, &layout);
                let prod = multiply_back(&a, &layout);
                for (x, y) in prod.iter().zip(&orig) {
                    assert!(
                        (x - y).abs() <= 1e-12 * n as f64,
                        "{variant:?} n={n} bs={bs}: {x} vs {y}"
                    );
                }
            }
        }
    }
}
