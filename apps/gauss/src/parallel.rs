//! The parallel program on the DSM, following the synchronization plan of the crate
//! documentation: cyclic rows, one write-once flag per pivot row (set by the row's owner
//! once the row is normalized), a barrier after initialization and one after the
//! elimination, then back-substitution by processor 0.
//!
//! Every slice taken of the shared arrays lives between two synchronization calls, so no
//! value read through it is kept across one.

use crate::{back_substitute, eliminate, init_row, max_error, normalize, owner, rows_of, summary};
use app_common::{AppError, AppResult};

/// Solves the system of order `n` generated from `seed` on the cluster `config` describes.
pub fn run_parallel(
    n: usize,
    seed: u64,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        // The matrix unpadded, row after row, and the right-hand sides in an array of
        // their own (crate documentation, "Shared data layout").
        let m = s.alloc_named::<f64>(n * n, "gauss matrix A");
        let rhs = s.alloc_named::<f64>(n, "gauss right-hand side b");
        let pivot_ready = s.flags(n);
        let bar = s.barrier();
        move |p: &dsm::Proc| -> Option<AppResult> {
            let (id, nprocs) = (p.id(), p.nprocs());
            {
                // SAFETY: each processor writes its own rows and their right-hand sides
                // only, and reads nothing.
                let (a, b) = unsafe { (m.as_mut_slice(), rhs.as_mut_slice()) };
                for i in rows_of(id, nprocs, n) {
                    b[i] = init_row(seed, n, i, &mut a[i * n..(i + 1) * n]);
                }
            }
            // Every processor initializes its own rows, in parallel; nothing is
            // initialized before the processors start, so this is the first touch after
            // initialization (section 2.3.1; as SOR, crate `app-sor`), and no end of
            // initialization is marked to watch first touch again. (This program's own
            // structure: the Rochester source was not found, crate doc.)
            bar.wait(p);
            // Timed: the elimination, not the input or the back substitution (the check).
            p.start_timing();
            for (k, ready) in pivot_ready.iter().enumerate() {
                if owner(k, nprocs) == id {
                    // SAFETY: row k and b_k are this processor's; nobody else reads them
                    // before flag k.
                    let (a, b) = unsafe { (m.as_mut_slice(), rhs.as_mut_slice()) };
                    normalize(&mut a[k * n..(k + 1) * n], &mut b[k], k);
                    ready.set(p);
                } else {
                    ready.wait(p);
                }
                // SAFETY: this processor writes only its own rows below k and their
                // right-hand sides; row k and b_k are final (their owner set flag k after
                // the last write to them) and only read now.
                let (a, b) = unsafe { (m.as_mut_slice(), rhs.as_mut_slice()) };
                let b_k = b[k];
                for i in rows_of(id, nprocs, n).filter(|&i| i > k) {
                    let (done, rest) = a.split_at_mut(i * n);
                    eliminate(&mut rest[..n], &mut b[i], &done[k * n..(k + 1) * n], b_k, k);
                }
            }
            bar.wait(p);
            p.stop_timing();
            if id != 0 {
                return None;
            }
            // SAFETY: after the barrier nobody writes the matrix any more.
            let (a, b) = unsafe { (m.as_slice(), rhs.as_slice()) };
            Some(summary(max_error(&back_substitute(a, b, n))))
        }
    })?;
    app_common::split_report(report)
}
