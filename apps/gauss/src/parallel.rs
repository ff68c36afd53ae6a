//! The parallel program on the DSM, following the synchronization plan of the crate
//! documentation: cyclic rows, one write-once flag per pivot row (set by the row's owner
//! once the row is normalized), a barrier after initialization and one after the
//! elimination, then back-substitution by processor 0.
//!
//! Every slice taken of the shared matrix lives between two synchronization calls, so no
//! value read through it is kept across one.

use crate::{
    back_substitute_strided, eliminate, init_row, max_error, normalize, owner, row_len, rows_of,
    shared_row_stride, summary,
};
use app_common::{AppError, AppResult};

/// Solves the system of order `n` generated from `seed` on the cluster `config` describes.
pub fn run_parallel(
    n: usize,
    seed: u64,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let w = row_len(n);
    // Each row starts on its own page: rows are written by their owners only, so whole
    // pages per row keep the owners from sharing pages (no false sharing between rows).
    let stride = shared_row_stride(n, config.page_bytes);
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let m = s.alloc_named::<f64>(n * stride, "gauss augmented matrix");
        let pivot_ready = s.flags(n);
        let bar = s.barrier();
        move |p: &dsm::Proc| -> Option<AppResult> {
            let (id, nprocs) = (p.id(), p.nprocs());
            {
                // SAFETY: each processor writes its own rows only, and reads nothing.
                let a = unsafe { m.as_mut_slice() };
                for i in rows_of(id, nprocs, n) {
                    init_row(seed, n, i, &mut a[i * stride..i * stride + w]);
                }
            }
            bar.wait(p);
            // Timed: the elimination, not the input or the back substitution (the check).
            p.start_timing();
            for (k, ready) in pivot_ready.iter().enumerate() {
                if owner(k, nprocs) == id {
                    // SAFETY: row k is this processor's; nobody else reads it before flag k.
                    let a = unsafe { m.as_mut_slice() };
                    normalize(&mut a[k * stride..k * stride + w], k);
                    ready.set(p);
                } else {
                    ready.wait(p);
                }
                // SAFETY: this processor writes only its own rows below k; row k is final
                // (its owner set flag k after the last write to it) and only read now.
                let a = unsafe { m.as_mut_slice() };
                for i in rows_of(id, nprocs, n).filter(|&i| i > k) {
                    let (done, rest) = a.split_at_mut(i * stride);
                    eliminate(&mut rest[..w], &done[k * stride..k * stride + w], k);
                }
            }
            bar.wait(p);
            p.stop_timing();
            if id != 0 {
                return None;
            }
            // SAFETY: after the barrier nobody writes the matrix any more.
            let a = unsafe { m.as_slice() };
            Some(summary(max_error(&back_substitute_strided(a, n, stride))))
        }
    })?;
    app_common::split_report(report)
}
