use super::*;
use app_common::Size;

fn params(n: usize, seed: u64) -> Params {
    let (n, seed) = (n.to_string(), seed.to_string());
    Params::from_pairs(Size::Test, &[("n", &n), ("seed", &seed)])
}

#[test]
fn a_three_by_three_system_solved_by_hand() {
    // [4 2 0; 2 5 2; 0 2 5] x = [8; 10; -1] has x = [1; 2; -1]. By hand: row 0 / 4 =
    // [1 .5 0 | 2]; row 1 - 2 row 0 = [0 4 2 | 6], / 4 = [0 1 .5 | 1.5]; row 2 - 2 row 1 =
    // [0 0 4 | -4], / 4 = [0 0 1 | -1]. Every step is exact in binary.
    let mut m = vec![4.0, 2.0, 0.0, 8.0, 2.0, 5.0, 2.0, 10.0, 0.0, 2.0, 5.0, -1.0];
    factor(&mut m, 3);
    assert_eq!(
        m,
        [1.0, 0.5, 0.0, 2.0, 0.0, 1.0, 0.5, 1.5, 0.0, 0.0, 1.0, -1.0]
    );
    assert_eq!(back_substitute(&m, 3), [1.0, 2.0, -1.0]);
}

#[test]
fn the_generated_system_is_dominant_and_consistent_with_the_known_solution() {
    let n = 40;
    let m = system(3, n);
    for (i, row) in m.chunks_exact(n + 1).enumerate() {
        let off: f64 = (0..n).filter(|&j| j != i).map(|j| row[j].abs()).sum();
        assert!(
            row[i] - off > n as f64,
            "row {i} is not dominant by more than n"
        );
        // b_i recomputed with the terms in reverse order: only rounding may differ.
        let b: f64 = (0..n).rev().map(|j| row[j] * exact_solution(j)).sum();
        assert!((row[n] - b).abs() <= 1e-12 * b.abs().max(1.0), "row {i}");
    }
    assert_ne!(system(4, n), m);
}

#[test]
fn the_solution_has_a_tiny_error_and_residual() {
    let n = 100;
    let mut m = system(9, n);
    factor(&mut m, n);
    let x = back_substitute(&m, n);
    assert!(max_error(&x) < 1e-13, "max_error {}", max_error(&x));
    // The residual against the untouched system, a check independent of the known solution.
    let a = system(9, n);
    for (i, row) in a.chunks_exact(n + 1).enumerate() {
        let ax: f64 = (0..n).map(|j| row[j] * x[j]).sum();
        assert!(
            (ax - row[n]).abs() < 1e-10,
            "row {i}: residual {}",
            ax - row[n]
        );
    }
}

#[test]
fn cyclic_rows_partition_the_system() {
    for n in [1, 5, 16, 33] {
        for nprocs in 1..=7 {
            let mut seen = vec![0; n];
            for id in 0..nprocs {
                for i in rows_of(id, nprocs, n) {
                    assert_eq!(owner(i, nprocs), id);
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n {n}, {nprocs} processors");
        }
    }
}

/// Runs the flag-synchronized elimination of the parallel version with `nprocs` simulated
/// processors. Processors take turns in the order `turns`; in its turn a processor runs
/// as many pivot steps as the flags allow, so some run far ahead of others.
fn flag_schedule(seed: u64, n: usize, nprocs: usize, turns: &[usize]) -> Vec<f64> {
    let w = row_len(n);
    let mut m = vec![0.0; n * w];
    for id in 0..nprocs {
        for i in rows_of(id, nprocs, n) {
            init_row(seed, n, i, &mut m[i * w..(i + 1) * w]);
        }
    }
    let mut flag = vec![false; n];
    let mut next = vec![0; nprocs];
    while next.iter().any(|&k| k < n) {
        for &id in turns {
            while next[id] < n {
                let k = next[id];
                if owner(k, nprocs) == id {
                    normalize(&mut m[k * w..(k + 1) * w], k);
                    flag[k] = true;
                } else if !flag[k] {
                    break;
                }
                let pivot = m[k * w..(k + 1) * w].to_vec();
                for i in rows_of(id, nprocs, n).filter(|&i| i > k) {
                    eliminate(&mut m[i * w..(i + 1) * w], &pivot, k);
                }
                next[id] += 1;
            }
        }
    }
    m
}

#[test]
fn flag_schedules_reproduce_the_sequential_elimination_bit_for_bit() {
    let n = 37;
    let mut seq = system(11, n);
    factor(&mut seq, n);
    let seq_result = summary(max_error(&back_substitute(&seq, n)));
    for (nprocs, turns) in [
        (1, vec![0]),
        (2, vec![1, 0]),
        (3, vec![2, 0, 1]),
        (5, vec![4, 3, 2, 1, 0]),
    ] {
        let par = flag_schedule(11, n, nprocs, &turns);
        assert!(
            par.iter()
                .zip(&seq)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{nprocs} processors"
        );
        let par_result = summary(max_error(&back_substitute(&par, n)));
        assert_eq!(GAUSS.check(&seq_result, &par_result), Ok(()));
    }
}

#[test]
fn checker_wants_the_same_error_and_within_the_bound() {
    let seq = GAUSS.sequential(&params(50, 1)).unwrap();
    assert_eq!(GAUSS.check(&seq, &seq), Ok(()));
    assert!(GAUSS
        .check(&seq, &GAUSS.sequential(&params(50, 2)).unwrap())
        .is_err());
    let huge = summary(1.0);
    assert_eq!(GAUSS.check(&huge, &huge).unwrap_err().rule, "upper bound");
}

#[test]
fn every_size_resolves_and_the_paper_size_is_table_3() {
    for size in Size::ALL {
        let p = Params::resolve("gauss", GAUSS.params(), size, &[]).unwrap();
        order_and_seed(&p).unwrap();
    }
    let p = Params::resolve("gauss", GAUSS.params(), Size::Paper, &[]).unwrap();
    let (n, _) = order_and_seed(&p).unwrap();
    // Table 3: 2048 x 2048, 33 Mbytes.
    assert_eq!(n, 2048);
    assert_eq!(n * row_len(n) * 8 / 1_000_000, 33);
}

#[test]
fn shared_rows_start_on_page_boundaries() {
    // 8 KiB pages hold 1024 doubles: a row of n + 1 entries rounds up to whole pages.
    assert_eq!(shared_row_stride(1023, 8192), 1024);
    assert_eq!(shared_row_stride(1024, 8192), 2048);
    assert_eq!(shared_row_stride(2048, 8192), 3072);
    assert_eq!(shared_row_stride(100, 4096), 512);
    // The strided back-substitution of a padded copy gives the same answer.
    let n = 40;
    let mut m = system(7, n);
    factor(&mut m, n);
    let stride = shared_row_stride(n, 4096);
    let mut padded = vec![f64::NAN; n * stride];
    for i in 0..n {
        padded[i * stride..i * stride + row_len(n)]
            .copy_from_slice(&m[i * row_len(n)..(i + 1) * row_len(n)]);
    }
    assert_eq!(
        back_substitute_strided(&padded, n, stride),
        back_substitute(&m, n)
    );
}
