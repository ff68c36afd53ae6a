//! Gauss: solves `A x = b` by Gaussian elimination without pivoting and back-substitution,
//! after the solver developed at Rochester for the Cashmere papers (section 3.2, Table 3:
//! 2048 x 2048).
//!
//! # The system
//!
//! The exact solution is known: `x*_i = (i mod 7) - 3`. The off-diagonal entries of `A` are
//! uniform in `[-1, 1)`, from a generator seeded by `(seed, row)`, and the diagonal is `2n`,
//! so `A` is strictly diagonally dominant by rows with margin above `n`: elimination needs
//! no pivoting, its growth factor is at most 2, and the infinity-norm condition number is
//! below 3. `b = A x*` is computed in `f64`. The result is `max_error = max_i |x_i - x*_i|`.
//!
//! # Shared data layout
//!
//! Two shared arrays: the matrix `A`, `n x n` `f64` row-major and unpadded (row `i` at
//! `i * n`), and the right-hand side `b`, `n` `f64` in an array of its own. Row `i` of `A`
//! and `b_i` are written only by the row's owner. At `n = 2048` this is 33.6 MB, the
//! 33 Mbytes of Table 3, which is the size of the unpadded matrix; `b` adds 16 KB.
//!
//! The Cashmere paper calls Gauss "a locally-developed solver for a system of linear
//! equations `Ax = B` using Gaussian Elimination and back-substitution" (section 3.2);
//! its source was not found (searched: the public code index for TreadMarks, Cashmere
//! and Rochester Gauss programs; the TreadMarks distribution's `sor.c` and FASTLINK's
//! parallel sources are there, no Gauss). So the layout is the one Table 3's size implies
//! and the paper's `Ax = B` names: `A` unpadded and `B` apart. Consequences on the DSM:
//! with 8 KiB pages a row of 2048 doubles is exactly two pages, so rows of `A` never share
//! a page at the paper size (at other sizes neighbouring rows, of different owners, do);
//! `b` is two pages that every processor writes, a multi-writer page at each pivot step.
//! The `small` size, n = 1024, keeps that alignment (a row is one page). At its former
//! 1536 every row straddled two pages shared with its neighbours' owners: on 2 x 1
//! (processes) the parallel run made 461K diffs and 167K page transfers and took 30 times
//! the sequential 0.4 s, a false sharing the paper's input does not have.
//! (An earlier version kept `b_i` at the end of row `i` and padded every row to whole
//! pages, 50 MB, so that owners never shared a page; see issue 17, section 4.)
//!
//! # Work distribution and synchronization of the parallel version
//!
//! Rows are distributed cyclically: row `i` belongs to processor [`owner`]`(i, nprocs)`,
//! and [`rows_of`] lists a processor's rows. One **flag** per pivot row. Each processor:
//!
//! 1. initializes its own rows with [`init_row`] (first touch after initialization, as
//!    nothing is written before: no end of initialization is marked, as in SOR; this is
//!    this program's structure, the Rochester source not being available), then a
//!    **barrier**;
//! 2. for each pivot `k` in order: if it owns row `k`, it [`normalize`]s row `k` (already
//!    eliminated by pivots `0..k`) and **sets flag `k`**; otherwise it **waits on flag
//!    `k`**; then it applies [`eliminate`] with pivot row `k` to each of its rows `i > k`;
//! 3. a **barrier**, after which processor 0 runs [`back_substitute`] and [`max_error`].
//!
//! A row is changed only by its owner, one pivot at a time in pivot order, and a pivot row
//! is read only after it is final (normalized, never written again), so every entry sees the
//! sequential arithmetic in the sequential order: `max_error` is exactly the sequential one.
//! Back-substitution is `O(n^2)` against the `O(n^3)` elimination; if it is ever spread over
//! the owners (row `i` computed by its owner after the `x_j`, `j > i`, are flagged), the
//! per-row [`solve_row`] keeps the result identical.
//!
//! # Counted work
//!
//! One kind of unit ([`WORK`], `dsm::work`): an **update**, one multiply-subtract of the
//! elimination's row update (`a_ij -= a_ik a_kj` for `j > k`, and `b_i -= a_ik b_k`),
//! counted by [`eliminate`] after each row (`n - k` units for pivot `k`), in the
//! sequential and the parallel version alike. The elimination counts
//! `(n - 1) n (n + 1) / 3` updates, 2,863,310,848 at `n = 2048`. There is no pivot search
//! (the matrix is diagonally dominant); the pivot row's division ([`normalize`]),
//! `n (n + 1) / 2` divisions in all, is 0.07% of the updates at `n = 2048` and is not
//! counted. The parallel version's processors together count exactly the sequential
//! version's updates (each row is eliminated by its owner only).

use app_common::rng::SplitMix64;
use app_common::{App, AppError, AppResult, Check, Mismatch, ParamSpec, Params};

mod parallel;
pub use parallel::run_parallel;

/// The processor that owns row `i` when `nprocs` processors run: `i mod nprocs`.
pub fn owner(i: usize, nprocs: usize) -> usize {
    i % nprocs
}

/// The rows of processor `id` of `nprocs` in an `n`-row system, in increasing order.
pub fn rows_of(id: usize, nprocs: usize, n: usize) -> impl Iterator<Item = usize> {
    assert!(id < nprocs, "processor {id} out of {nprocs}");
    (id..n).step_by(nprocs)
}

/// The counted work ([`dsm::work`]): one kind, the multiply-subtract of the row update.
pub const WORK: &[app_common::WorkKind] = &[app_common::WorkKind {
    name: "update",
    what: "one multiply-subtract of a row update: a_ij -= a_ik a_kj, or b_i -= a_ik b_k",
    host_ns: 0.0,
    // sum over pivots k of (n - 1 - k) rows x (n - k) entries = (n - 1) n (n + 1) / 3,
    // at n = 2048.
    paper_units: 2_863_310_848,
}];

/// The known solution.
pub fn exact_solution(i: usize) -> f64 {
    (i % 7) as f64 - 3.0
}

/// Fills `row` (length `n`) with row `i` of `A` and returns `b_i`, row `i` of `A x*`.
pub fn init_row(seed: u64, n: usize, i: usize, row: &mut [f64]) -> f64 {
    assert_eq!(row.len(), n, "row {i} has the wrong length");
    // Hashing (seed, row) gives every row its own stream, so any processor can build its
    // rows in any order.
    let key = seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut rng = SplitMix64::new(SplitMix64::new(key).next_u64());
    for (j, a) in row.iter_mut().enumerate() {
        let u = 2.0 * rng.next_f64() - 1.0;
        *a = if j == i { 2.0 * n as f64 } else { u };
    }
    row.iter()
        .enumerate()
        .map(|(j, a)| a * exact_solution(j))
        .sum()
}

/// The whole system: `A` (`n x n`, row-major) and `b`.
pub fn system(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = vec![0.0; n * n];
    let mut b = vec![0.0; n];
    for (i, row) in a.chunks_exact_mut(n.max(1)).enumerate() {
        b[i] = init_row(seed, n, i, row);
    }
    (a, b)
}

/// Makes row `k` (eliminated by pivots `0..k`) a pivot row: divides it and its right-hand
/// side `b_k` by its diagonal entry, which becomes 1.
pub fn normalize(row: &mut [f64], b_k: &mut f64, k: usize) {
    let pivot = row[k];
    assert!(
        pivot != 0.0,
        "zero pivot in row {k}: the matrix is not diagonally dominant"
    );
    row[k] = 1.0;
    for a in &mut row[k + 1..] {
        *a /= pivot;
    }
    *b_k /= pivot;
}

/// Eliminates column `k` from `row` (right-hand side `b_i`) with the normalized pivot row
/// `pivot` (right-hand side `b_k`), and counts its `n - k` multiply-subtracts.
pub fn eliminate(row: &mut [f64], b_i: &mut f64, pivot: &[f64], b_k: f64, k: usize) {
    let factor = row[k];
    row[k] = 0.0;
    for (a, p) in row[k + 1..].iter_mut().zip(&pivot[k + 1..]) {
        *a -= factor * p;
    }
    *b_i -= factor * b_k;
    dsm::work::count(0, (row.len() - k) as u64);
}

/// Forward elimination of the whole system, pivot by pivot.
pub fn factor(a: &mut [f64], b: &mut [f64], n: usize) {
    for k in 0..n {
        let (done, rest) = a.split_at_mut((k + 1) * n);
        let pivot = &mut done[k * n..];
        let (b_done, b_rest) = b.split_at_mut(k + 1);
        normalize(pivot, &mut b_done[k], k);
        for (row, b_i) in rest.chunks_exact_mut(n).zip(b_rest) {
            eliminate(row, b_i, pivot, b_done[k], k);
        }
    }
}

/// `x_i` from the normalized row `i`, its right-hand side `b_i` and the already known
/// `x_j`, `j > i`: `b_i` minus `a_ij x_j` for `j = i + 1, ..., n - 1` in that order.
pub fn solve_row(row: &[f64], b_i: f64, x: &[f64], i: usize) -> f64 {
    let n = x.len();
    row[i + 1..n]
        .iter()
        .zip(&x[i + 1..])
        .fold(b_i, |acc, (a, xj)| acc - a * xj)
}

/// Back-substitution on the eliminated (unit upper triangular) system.
pub fn back_substitute(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        x[i] = solve_row(&a[i * n..(i + 1) * n], b[i], &x, i);
    }
    x
}

/// The largest distance of `x` from the known solution.
pub fn max_error(x: &[f64]) -> f64 {
    x.iter()
        .enumerate()
        .map(|(i, xi)| (xi - exact_solution(i)).abs())
        .fold(0.0, f64::max)
}

/// An upper bound on `max_error` for every supported `n`. Elimination on a matrix strictly
/// diagonally dominant by rows has growth factor at most 2 (Wilkinson), and with diagonal
/// `2n` the condition number is below 3, so the forward error is of order
/// `n * 2^-53 * growth * cond * |x*| ~ 18 * 2048 * 1.1e-16 * 3 < 2e-11` at the paper size.
/// The bound leaves a factor 50 above that.
pub const ERROR_BOUND: f64 = 1e-9;

/// The system order and seed of a run.
pub fn order_and_seed(params: &Params) -> Result<(usize, u64), AppError> {
    Ok((
        params.get_in::<usize>("n", 1, 8192)?,
        params.get::<u64>("seed")?,
    ))
}

/// The result summary.
pub fn summary(max_error: f64) -> AppResult {
    AppResult::new().f64("max_error", max_error)
}

/// The Gauss application.
#[derive(Debug)]
pub struct Gauss;

/// The Gauss application, for the harness's table of applications.
pub static GAUSS: Gauss = Gauss;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "n",
        help: "order of the linear system",
        defaults: ["128", "1024", "2048"],
    },
    ParamSpec {
        name: "seed",
        help: "seed of the matrix generator",
        defaults: ["1", "1", "1"],
    },
];

impl App for Gauss {
    fn name(&self) -> &'static str {
        "gauss"
    }

    fn description(&self) -> &'static str {
        "Gaussian elimination and back-substitution with cyclic rows (Rochester Gauss)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let (n, _) = order_and_seed(params)?;
        Ok((n as u64 * n as u64 + n as u64) * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let (n, seed) = order_and_seed(params)?;
        let (mut a, mut b) = system(seed, n);
        app_common::timing::start(); // the elimination, not the input or the check
        factor(&mut a, &mut b, n);
        app_common::timing::stop();
        Ok(summary(max_error(&back_substitute(&a, &b, n))))
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let (n, seed) = order_and_seed(params)?;
        run_parallel(n, seed, config)
    }

    /// Exact, and within [`ERROR_BOUND`]: each row sees the sequential arithmetic in the
    /// sequential order, so the parallel error equals the sequential one.
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        Check::new(sequential, parallel)
            .exact("max_error")?
            .at_most("max_error", ERROR_BOUND)?
            .done()
    }
}

#[cfg(test)]
mod tests;
