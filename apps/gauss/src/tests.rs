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
    let mut a = vec![4.0, 2.0, 0.0, 2.0, 5.0, 2.0, 0.0, 2.0, 5.0];
    let mut b = vec![8.0, 10.0, -1.0];
    dsm::work::reset();
    factor(&mut a, &mut b, 3);
    assert_eq!(a, [1.0, 0.5, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 1.0]);
    assert_eq!(b, [2.0, 1.5, -1.0]);
    assert_eq!(back_substitute(&a, &b, 3), [1.0, 2.0, -1.0]);
    // Pivot 0 updates rows 1 and 2 (3 entries each), pivot 1 row 2 (2 entries):
    // (n - 1) n (n + 1) / 3 = 8.
    assert_eq!(dsm::work::tally()[0], 8);
}

#[test]
fn the_generated_system_is_dominant_and_consistent_with_the_known_solution() {
    let n = 40;
    let (a, b) = system(3, n);
    for (i, row) in a.chunks_exact(n).enumerate() {
        let off: f64 = (0..n).filter(|&j| j != i).map(|j| row[j].abs()).sum();
        assert!(
            row[i] - off > n as f64,
            "row {i} is not dominant by more than n"
        );
        // b_i recomputed with the terms in reverse order: only rounding may differ.
        let bi: f64 = (0..n).rev().map(|j| row[j] * exact_solution(j)).sum();
        assert!((b[i] - bi).abs() <= 1e-12 * bi.abs().max(1.0), "row {i}");
    }
    assert_ne!(system(4, n).0, a);
}

#[test]
fn the_solution_has_a_tiny_error_and_residual() {
    let n = 100;
    let (mut a, mut b) = system(9, n);
    factor(&mut a, &mut b, n);
    let x = back_substitute(&a, &b, n);
    assert!(max_error(&x) < 1e-13, "max_error {}", max_error(&x));
    // The residual against the untouched system, a check independent of the known solution.
    let (a, b) = system(9, n);
    for (i, row) in a.chunks_exact(n).enumerate() {
        let ax: f64 = (0..n).map(|j| row[j] * x[j]).sum();
        assert!((ax - b[i]).abs() < 1e-10, "row {i}: residual {}", ax - b[i]);
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
fn flag_schedule(seed: u64, n: usize, nprocs: usize, turns: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let mut m = vec![0.0; n * n];
    let mut b = vec![0.0; n];
    for id in 0..nprocs {
        for i in rows_of(id, nprocs, n) {
            b[i] = init_row(seed, n, i, &mut m[i * n..(i + 1) * n]);
        }
    }
    let mut flag = vec![false; n];
    let mut next = vec![0; nprocs];
    while next.iter().any(|&k| k < n) {
        for &id in turns {
            while next[id] < n {
                let k = next[id];
                if owner(k, nprocs) == id {
                    normalize(&mut m[k * n..(k + 1) * n], &mut b[k], k);
                    flag[k] = true;
                } else if !flag[k] {
                    break;
                }
                let pivot = m[k * n..(k + 1) * n].to_vec();
                let b_k = b[k];
                for i in rows_of(id, nprocs, n).filter(|&i| i > k) {
                    eliminate(&mut m[i * n..(i + 1) * n], &mut b[i], &pivot, b_k, k);
                }
                next[id] += 1;
            }
        }
    }
    (m, b)
}

#[test]
fn flag_schedules_reproduce_the_sequential_elimination_bit_for_bit() {
    let n = 37;
    let (mut seq, mut seq_b) = system(11, n);
    factor(&mut seq, &mut seq_b, n);
    let seq_result = summary(max_error(&back_substitute(&seq, &seq_b, n)));
    for (nprocs, turns) in [
        (1, vec![0]),
        (2, vec![1, 0]),
        (3, vec![2, 0, 1]),
        (5, vec![4, 3, 2, 1, 0]),
    ] {
        let (par, par_b) = flag_schedule(11, n, nprocs, &turns);
        assert!(
            par.iter()
                .chain(&par_b)
                .zip(seq.iter().chain(&seq_b))
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{nprocs} processors"
        );
        let par_result = summary(max_error(&back_substitute(&par, &par_b, n)));
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
    // Table 3: 2048 x 2048, 33 Mbytes: the unpadded matrix (and b).
    assert_eq!(n, 2048);
    assert_eq!(GAUSS.data_bytes(&p).unwrap() / 1_000_000, 33);
    assert_eq!(WORK[0].paper_units, ((n - 1) * n * (n + 1) / 3) as u64);
}
