//! The input matrix of SPLASH-2 LU and the summary of a factored one.

use crate::layout::Layout;
use app_common::rng::Rand48;
use app_common::AppResult;

/// SPLASH-2 `lu.C`: `#define MAXRAND 32767.0`, the divisor of every `lrand48()` value.
const MAXRAND: f64 = 32767.0;

/// Writes the input matrix of SPLASH-2 `InitA` and returns its right-hand side.
///
/// `InitA` calls `srand48(1)` and, column `j` outer, row `i` inner, sets
/// `a(i, j) = lrand48() / 32767.0`, multiplied by 10 on the diagonal. It then sets
/// `rhs[i]` to the sum of row `i` in column order, so the solution of `A x = rhs` is all
/// ones (SPLASH-2's `CheckResult` tests that).
///
/// Only the elements of blocks `(bi, bj)` where `mine(bi, bj)` holds are stored, so each
/// processor can fill its own blocks; every call still walks the whole random stream and
/// returns the whole right-hand side.
pub fn generate(a: &mut [f64], layout: &Layout, mine: impl Fn(usize, usize) -> bool) -> Vec<f64> {
    let (n, bs) = (layout.n(), layout.block_size());
    let mut rng = Rand48::srand48(1);
    let mut rhs = vec![0.0; n];
    for j in 0..n {
        for (i, r) in rhs.iter_mut().enumerate() {
            let mut v = rng.lrand48() as f64 / MAXRAND;
            if i == j {
                v *= 10.0;
            }
            *r += v;
            if mine(i / bs, j / bs) {
                a[layout.index(i, j)] = v;
            }
        }
    }
    rhs
}

/// The sum of all elements of the factored matrix (column `j` outer, row `i` inner, so
/// the same for every layout) and its trace (`i` increasing).
pub fn sum_and_trace(a: &[f64], layout: &Layout) -> (f64, f64) {
    let n = layout.n();
    let mut sum = 0.0;
    for j in 0..n {
        for i in 0..n {
            sum += a[layout.index(i, j)];
        }
    }
    let trace = (0..n)
        .map(|i| a[layout.index(i, i)])
        .fold(0.0, |t, x| t + x);
    (sum, trace)
}

/// SPLASH-2's `CheckResult`: solves `L U x = rhs` with the factored matrix (forward
/// substitution dividing by the pivots, column by column; back substitution with the
/// unit upper factor, column by column from the last) and returns `max |x_i - 1|`.
/// SPLASH-2 prints "TEST FAILED" when some `|x_i - 1|` exceeds `1e-5`.
pub fn max_solve_error(a: &[f64], layout: &Layout, rhs: &[f64]) -> f64 {
    let n = layout.n();
    assert_eq!(rhs.len(), n, "right-hand side of the wrong length");
    let mut y = rhs.to_vec();
    for j in 0..n {
        y[j] /= a[layout.index(j, j)];
        let yj = y[j];
        for (i, yi) in y.iter_mut().enumerate().skip(j + 1) {
            *yi -= a[layout.index(i, j)] * yj;
        }
    }
    for j in (0..n).rev() {
        let yj = y[j];
        for (i, yi) in y.iter_mut().enumerate().take(j) {
            *yi -= a[layout.index(i, j)] * yj;
        }
    }
    // A NaN anywhere must show, not vanish in `max`.
    y.iter()
        .map(|x| (x - 1.0).abs())
        .fold(0.0, |m, d| if d > m || d.is_nan() { d } else { m })
}

/// The result summary of a factored matrix: `n`, `sum`, `trace`, and `max_error`, the
/// largest error of the solution of SPLASH-2's test system.
pub fn summarize(a: &[f64], layout: &Layout, rhs: &[f64]) -> AppResult {
    let (sum, trace) = sum_and_trace(a, layout);
    AppResult::new()
        .i64("n", layout.n() as i64)
        .f64("sum", sum)
        .f64("trace", trace)
        .f64("max_error", max_solve_error(a, layout, rhs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Owners, Variant};

    #[test]
    fn first_elements_follow_glibc_lrand48() {
        // glibc: srand48(1); lrand48() gives 89400484, 976015093, 1792756325 (the values
        // app_common's generator is tested against). They fill column 0 from the top; the
        // first is on the diagonal.
        let layout = Layout::column_major(3, 16);
        let mut a = vec![0.0; 9];
        let rhs = generate(&mut a, &layout, |_, _| true);
        assert_eq!(a[0], 89400484.0 / 32767.0 * 10.0);
        assert_eq!(a[1], 976015093.0 / 32767.0);
        assert_eq!(a[2], 1792756325.0 / 32767.0);
        // rhs[i] is row i summed left to right.
        for (i, r) in rhs.iter().enumerate() {
            assert_eq!(*r, a[i] + a[i + 3] + a[i + 6]);
        }
    }

    #[test]
    fn whole_matrix_matches_a_glibc_run() {
        // Computed with glibc (2.36 here) by a C program independent of this crate: srand48(1);
        // for j < 37, for i < 37: a = (double) lrand48() / 32767.0, times 10 if i == j;
        // s += a (in that order); the last row summed in column order. Printed with %a.
        let layout = Layout::column_major(37, 16);
        let mut a = vec![0.0; layout.len()];
        let rhs = generate(&mut a, &layout, |_, _| true);
        let sum = a.iter().fold(0.0, |s, x| s + x);
        // 0x1.9b78dceb27d65p+25 = 53932473.837153234
        assert_eq!(sum.to_bits(), 0x4189_b78d_ceb2_7d65);
        // 0x1.4b0d0fe6dfcdcp+20 = 1355984.9938657796
        assert_eq!(rhs[36].to_bits(), 0x4134_b0d0_fe6d_fcdc);
    }

    #[test]
    fn same_matrix_in_every_layout_and_only_owned_blocks_written() {
        let (n, bs) = (37, 8);
        let flat = Layout::column_major(n, bs);
        let mut reference = vec![0.0; flat.len()];
        let rhs = generate(&mut reference, &flat, |_, _| true);
        let owners = Owners::new(Variant::Contiguous, 4, 2).unwrap();
        let blocked = Layout::contiguous(n, bs, &owners, 1);
        let mut a = vec![f64::NAN; blocked.len()];
        for p in 0..4 {
            let rhs_p = generate(&mut a, &blocked, |bi, bj| owners.owner(bi, bj) == p);
            assert_eq!(rhs_p, rhs);
        }
        for j in 0..n {
            for i in 0..n {
                assert_eq!(
                    a[blocked.index(i, j)].to_bits(),
                    reference[i + j * n].to_bits()
                );
            }
        }
        let mut partial = vec![0.0; flat.len()];
        generate(&mut partial, &flat, |bi, bj| (bi, bj) == (1, 2));
        let written = (0..n * n).filter(|&x| partial[x] != 0.0).count();
        assert_eq!(written, 8 * 8);
    }

    #[test]
    fn solve_error_of_a_hand_factored_system() {
        // The 3x3 of the kernel test: L = [[2,0,0],[1,3,0],[2,2,5]], U = [[1,2,1],[0,1,1],
        // [0,0,1]]; A = L U = [[2,4,2],[1,5,4],[2,6,9]], row sums 8, 10, 17.
        let layout = Layout::column_major(3, 16);
        let factored = [2.0, 1.0, 2.0, 2.0, 3.0, 2.0, 1.0, 1.0, 5.0];
        assert_eq!(max_solve_error(&factored, &layout, &[8.0, 10.0, 17.0]), 0.0);
        // rhs + A e_0 has solution (2, 1, 1): the error is 1.
        assert_eq!(
            max_solve_error(&factored, &layout, &[10.0, 11.0, 19.0]),
            1.0
        );
        let nan = [f64::NAN, 1.0, 2.0, 2.0, 3.0, 2.0, 1.0, 1.0, 5.0];
        assert!(max_solve_error(&nan, &layout, &[8.0, 10.0, 17.0]).is_nan());
    }

    #[test]
    fn sum_and_trace_by_hand() {
        let layout = Layout::column_major(2, 1);
        assert_eq!(sum_and_trace(&[1.0, 2.0, 3.0, 4.0], &layout), (10.0, 5.0));
    }
}
