//! The parallel version on the DSM (SPLASH-2 `OneSolve`): the matrix is one shared `f64`
//! array laid out by [`Layout`], processor 0 initializes it (`InitA`), every processor
//! then reads its own blocks (`TouchA`) and writes only the blocks it owns, and
//! [`factor_parallel`] runs the steps with the barriers of the crate doc.

use crate::kernels::{factor_parallel, MatrixMemory};
use crate::layout::{Layout, Owners, Variant};
use crate::matrix::{generate, summarize};
use app_common::{AppError, AppResult};

/// A processor's access to the shared matrix: the DSM array and the one barrier.
struct DsmMatrix<'a> {
    a: dsm::Shared<f64>,
    bar: dsm::Barrier,
    p: &'a dsm::Proc,
}

impl MatrixMemory for DsmMatrix<'_> {
    fn view(&mut self) -> &mut [f64] {
        // Data-race freedom: a processor writes only the blocks it owns (`Owners::owner`,
        // one writer per block for the whole run), and reads a block owned by another
        // processor only in a phase that follows, across a barrier, the phase that last
        // wrote it (the schedule of `factor_parallel`, which tests/schedule.rs checks on a
        // model of release consistency). The view is dropped before the next barrier (its
        // borrow of `self` ends before `barrier(&mut self)`), so no value read through it
        // is kept across one.
        // SAFETY: as just said.
        unsafe { self.a.as_mut_slice() }
    }

    fn barrier(&mut self) {
        self.bar.wait(self.p);
    }
}

/// SPLASH-2's `TouchA`: reads every element of the blocks processor `id` owns, block
/// column by block column; returns their sum, so that the reads are not optimized away.
fn touch_own_blocks(a: &[f64], layout: &Layout, owners: &Owners, id: usize) -> f64 {
    let (n, bs, nb) = (layout.n(), layout.block_size(), layout.nblocks());
    let mut tot = 0.0;
    for bj in 0..nb {
        for bi in (0..nb).filter(|&bi| owners.owner(bi, bj) == id) {
            for j in bj * bs..((bj + 1) * bs).min(n) {
                for i in bi * bs..((bi + 1) * bs).min(n) {
                    tot += a[layout.index(i, j)];
                }
            }
        }
    }
    std::hint::black_box(tot)
}

/// The layout of `variant` for `config`'s cluster: processor `p` on node
/// `p / procs_per_node` as the DSM numbers them; CLU's regions aligned to the DSM page.
pub fn parallel_layout(
    variant: Variant,
    n: usize,
    block_size: usize,
    config: &dsm::Config,
) -> Result<(Layout, Owners), AppError> {
    let nprocs = config.nodes * config.procs_per_node;
    let owners = Owners::new(variant, nprocs, config.procs_per_node)?;
    let align_elems = (config.page_bytes / std::mem::size_of::<f64>()).max(1);
    let layout = Layout::new(variant, n, block_size, &owners, align_elems);
    Ok((layout, owners))
}

/// Runs the parallel factorization of `variant` on a cluster configured by `config`.
///
/// Processor 0 writes the matrix (`InitA`; every processor walks the random stream, as
/// [`generate`] does, to compute the right-hand side), initialization ends where the
/// variant's SPLASH-2 program creates its processes (crate doc, "Initialization and
/// homes"), and every processor reads its own blocks (`TouchA`). Processor 0 keeps its
/// right-hand side (private in SPLASH-2 as well) for the final check, which it runs on
/// the shared matrix after the last barrier.
pub fn run_parallel(
    variant: Variant,
    n: usize,
    block_size: usize,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let (layout, owners) = parallel_layout(variant, n, block_size, config)?;
    let (layout, owners) = (&layout, &owners);
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let a = s.alloc_named::<f64>(layout.len(), "matrix");
        let bar = s.barrier();
        move |p: &dsm::Proc| -> Option<AppResult> {
            let id = p.id();
            let mut mem = DsmMatrix { a, bar, p };
            // Where the program creates its processes, its initialization ends (2.3.1):
            // SPLASH-2's non-contiguous LU creates them before its master writes the
            // matrix, the contiguous one after (crate doc, "Initialization and homes").
            if variant == Variant::NonContiguous {
                bar.end_initialization(p);
            }
            // SPLASH-2's master writes the whole matrix (`InitA`); every processor computes
            // the right-hand side, as the master's does.
            let rhs = generate(mem.view(), layout, |_, _| id == 0);
            if variant == Variant::Contiguous {
                bar.end_initialization(p);
            } else {
                // Every processor waits for the master's input (`BARRIER(Global->start)`).
                mem.barrier();
            }
            // `TouchA`: every processor reads its own blocks, so that the homes of their
            // pages are the owners' nodes (where several owners share a page, the first).
            touch_own_blocks(mem.view(), layout, owners, id);
            mem.barrier();
            // SPLASH-2 times the factorization only: not the input, not the check.
            p.start_timing();
            factor_parallel(&mut mem, layout, owners, id); // ends with a barrier
            p.stop_timing();
            (id == 0).then(|| summarize(mem.view(), layout, &rhs))
        }
    })?;
    app_common::split_report(report)
}
