//! Exact solvers that share nothing with the branch and bound, for tests: exhaustive
//! search over all tours, and the Held-Karp dynamic program (Held and Karp, "A dynamic
//! programming approach to sequencing problems", J. SIAM 10(1), 1962).

use crate::input::Instance;

/// The optimal length and one optimal tour (from city 0), by trying all `(n-1)!` tours.
pub fn brute_force(inst: &Instance) -> (i64, Vec<i64>) {
    let n = inst.n;
    let w = |a: usize, b: usize| i64::from(inst.weights[a * n + b]);
    let mut rest: Vec<usize> = (1..n).collect();
    let mut best = (i64::MAX, Vec::new());
    permute(&mut rest, 0, &mut |p| {
        let len =
            w(0, p[0]) + p.windows(2).map(|e| w(e[0], e[1])).sum::<i64>() + w(p[p.len() - 1], 0);
        if len < best.0 {
            best = (
                len,
                std::iter::once(0)
                    .chain(p.iter().map(|&c| c as i64))
                    .collect(),
            );
        }
    });
    best
}

/// Calls `visit` with every permutation of `items[k..]` (Heap's order does not matter).
fn permute(items: &mut [usize], k: usize, visit: &mut impl FnMut(&[usize])) {
    if k == items.len() {
        visit(items);
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permute(items, k + 1, visit);
        items.swap(k, i);
    }
}

/// The optimal length by Held-Karp: `cost[S][j]` is the shortest path from city 0 through
/// the cities of `S` (a set of cities 1..n) ending at `j ∈ S`.
pub fn held_karp(inst: &Instance) -> i64 {
    let n = inst.n;
    let w = |a: usize, b: usize| i64::from(inst.weights[a * n + b]);
    let m = n - 1; // cities 1..n are bits 0..m
    let mut cost = vec![i64::MAX; (1usize << m) * m];
    for j in 0..m {
        cost[(1 << j) * m + j] = w(0, j + 1);
    }
    for set in 1usize..1 << m {
        for j in 0..m {
            let here = cost[set * m + j];
            if set & (1 << j) == 0 || here == i64::MAX {
                continue;
            }
            for k in 0..m {
                if set & (1 << k) == 0 {
                    let next = (set | (1 << k)) * m + k;
                    cost[next] = cost[next].min(here + w(j + 1, k + 1));
                }
            }
        }
    }
    let full = (1usize << m) - 1;
    (0..m)
        .map(|j| cost[full * m + j] + w(j + 1, 0))
        .min()
        .expect("at least two cities")
}

/// A random instance of `n` cities with distances in `1..=max`, symmetric or not.
pub fn random_instance(n: usize, max: u64, symmetric: bool, seed: u64) -> Instance {
    let mut rng = app_common::rng::SplitMix64::new(seed);
    let mut w = vec![0i32; n * n];
    for a in 0..n {
        for b in 0..n {
            if a != b && (!symmetric || a < b) {
                w[a * n + b] = 1 + rng.below(max) as i32;
                if symmetric {
                    w[b * n + a] = w[a * n + b];
                }
            }
        }
    }
    Instance::from_matrix(n, w).expect("generated instances are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_karp_agrees_with_exhaustive_search() {
        for seed in 0..40 {
            let n = 2 + (seed as usize % 7);
            let inst = random_instance(n, 30, seed % 2 == 0, seed);
            assert_eq!(
                held_karp(&inst),
                brute_force(&inst).0,
                "seed {seed}, {n} cities"
            );
        }
    }

    #[test]
    fn held_karp_finds_the_published_optimum_of_gr17() {
        // TSPLIB lists 2085 as the optimal tour length of gr17 (Reinelt, TSPLIB 95).
        let inst =
            crate::input::read_instance(&app_common::data_dir().join("tsp/tspfilegr17")).unwrap();
        assert_eq!(held_karp(&inst), 2085);
    }

    #[test]
    fn four_cities_by_hand() {
        // Tours from 0: 0-1-2-3-0 = 1+1+1+1 = 4 and its reverse are the only ones of length 4;
        // 0-1-3-2-0 = 1+9+1+9 = 20 and 0-2-1-3-0 = 9+1+9+1 = 20, etc.
        let inst =
            Instance::from_matrix(4, vec![0, 1, 9, 1, 1, 0, 1, 9, 9, 1, 0, 1, 1, 9, 1, 0]).unwrap();
        assert_eq!(brute_force(&inst).0, 4);
        assert_eq!(held_karp(&inst), 4);
    }
}
