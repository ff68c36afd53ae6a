//! The parallel program ([`factor_parallel`]) run by threads under a model of release
//! consistency: every processor works on its own copy of the matrix, and only at a
//! barrier do the owners' blocks reach everybody. A processor that read a block written
//! by another processor since the last barrier would see a stale value and the result
//! would differ from the sequential one. The program must instead match it bit for bit,
//! and must never write a block it does not own.

use app_lu::{factor, factor_parallel, generate, Layout, MatrixMemory, Owners, Variant};
use std::sync::{Barrier, Mutex};

/// Runs the parallel program on `nprocs` threads, each with a private copy of the matrix.
/// At a barrier each thread publishes its own blocks to the shared matrix, waits for all,
/// then takes the shared matrix as its copy. A barrier numbered `forget` (counting from 0
/// after the input phase) exchanges nothing, as if it were missing.
fn run_model(
    variant: Variant,
    n: usize,
    bs: usize,
    nprocs: usize,
    ppn: usize,
    forget: Option<usize>,
) -> Vec<f64> {
    let owners = Owners::new(variant, nprocs, ppn).unwrap();
    let layout = Layout::new(variant, n, bs, &owners, 64);
    let shared = Mutex::new(vec![0.0; layout.len()]);
    let wait = Barrier::new(nprocs);
    std::thread::scope(|s| {
        for id in 0..nprocs {
            let (layout, owners, shared, wait) = (&layout, &owners, &shared, &wait);
            s.spawn(move || {
                let nb = layout.nblocks();
                let owned: Vec<usize> = (0..nb)
                    .flat_map(|bi| (0..nb).map(move |bj| (bi, bj)))
                    .filter(|&(bi, bj)| owners.owner(bi, bj) == id)
                    .flat_map(|(bi, bj)| {
                        let b = layout.block(bi, bj);
                        (0..b.cols).flat_map(move |c| (0..b.rows).map(move |r| b.at(r, c)))
                    })
                    .collect();
                let mut is_mine = vec![false; layout.len()];
                owned.iter().for_each(|&x| is_mine[x] = true);
                let mut seen = vec![0.0f64; layout.len()];
                let mut count = 0;
                let mut exchange = |a: &mut [f64], number: Option<usize>| {
                    if number.is_some() && number == forget {
                        wait.wait();
                        return;
                    }
                    for (x, (now, then)) in a.iter().zip(&seen).enumerate() {
                        assert!(
                            is_mine[x] || now.to_bits() == then.to_bits(),
                            "processor {id} wrote element {x}"
                        );
                    }
                    {
                        let mut g = shared.lock().unwrap();
                        owned.iter().for_each(|&x| g[x] = a[x]);
                    }
                    wait.wait();
                    a.copy_from_slice(&shared.lock().unwrap());
                    seen.copy_from_slice(a);
                    wait.wait();
                };
                let mut a = vec![0.0; layout.len()];
                generate(&mut a, layout, |bi, bj| owners.owner(bi, bj) == id);
                exchange(&mut a, None);
                let mut mem = Model {
                    a,
                    barrier: |a: &mut [f64]| {
                        exchange(a, Some(count));
                        count += 1;
                    },
                };
                factor_parallel(&mut mem, layout, owners, id);
            });
        }
    });
    let g = shared.into_inner().unwrap();
    (0..n)
        .flat_map(|j| (0..n).map(move |i| (i, j)))
        .map(|(i, j)| g[layout.index(i, j)])
        .collect()
}

/// A processor's private copy of the matrix and the exchange its barriers do.
struct Model<F: FnMut(&mut [f64])> {
    a: Vec<f64>,
    barrier: F,
}

impl<F: FnMut(&mut [f64])> MatrixMemory for Model<F> {
    fn view(&mut self) -> &mut [f64] {
        &mut self.a
    }

    fn barrier(&mut self) {
        (self.barrier)(&mut self.a);
    }
}

/// The sequential factorization, column-major.
fn sequential(n: usize, bs: usize) -> Vec<f64> {
    let layout = Layout::column_major(n, bs);
    let mut a = vec![0.0; layout.len()];
    generate(&mut a, &layout, |_, _| true);
    factor(&mut a, &layout);
    a
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn parallel_program_matches_sequential_bit_for_bit() {
    // n = 70 with 8 x 8 blocks: 9 block rows, the last 6 wide.
    let (n, bs) = (70, 8);
    let expected = bits(&sequential(n, bs));
    for variant in [Variant::NonContiguous, Variant::Contiguous] {
        for (nprocs, ppn) in [(1, 1), (4, 2), (3, 2), (6, 3), (4, 4)] {
            let got = bits(&run_model(variant, n, bs, nprocs, ppn, None));
            assert!(
                got == expected,
                "{variant:?} with {nprocs} processors, {ppn} per node"
            );
        }
    }
}

#[test]
fn the_model_notices_a_missing_barrier() {
    // Barrier 0 makes diagonal block 0 visible to the perimeter; barrier 1 makes the
    // perimeter of step 0 visible to the interior updates.
    let (n, bs) = (70, 8);
    let expected = bits(&sequential(n, bs));
    for forget in [0, 1] {
        let got = bits(&run_model(Variant::Contiguous, n, bs, 4, 2, Some(forget)));
        assert!(
            got != expected,
            "leaving out barrier {forget} went unnoticed"
        );
    }
}
