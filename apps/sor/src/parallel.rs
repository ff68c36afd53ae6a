//! The parallel program on the DSM, following the synchronization plan of the crate
//! documentation: row bands, a barrier after initialization and after each colour's sweep,
//! per-row sums in shared memory and a final barrier before processor 0 adds them.
//!
//! Every slice taken of a shared array lives within one phase (between two barriers), so
//! no value read through it is kept across a synchronization call.

use crate::{init_band, init_rows, row_sum, rows_of, sum_rows, summary, sweep, Color, Grid};
use app_common::{AppError, AppResult};

/// Runs `iterations` red-black iterations on grid `g` on the cluster `config` describes.
pub fn run_parallel(
    g: Grid,
    iterations: usize,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let red = s.alloc_named::<f32>(g.entries(), "sor red points");
        let black = s.alloc_named::<f32>(g.entries(), "sor black points");
        let sums = s.alloc_named::<f64>(g.rows + 2, "sor row sums");
        let bar = s.barrier();
        move |p: &dsm::Proc| -> Option<AppResult> {
            let (id, nprocs) = (p.id(), p.nprocs());
            let band = rows_of(id, nprocs, g.rows);
            let mine = init_band(id, nprocs, g.rows);
            // SAFETY: the processors initialize disjoint sets of rows (init_band).
            let (r, b) = unsafe { (red.as_mut_slice(), black.as_mut_slice()) };
            // TreadMarks' `sor.c` (crate doc, "Work distribution"): processor 0 only
            // allocates before the first barrier, so this band initialization by every
            // processor is the first touch after initialization (section 2.3.1): the homes
            // it gives are final, and the program marks no end of initialization that
            // would watch first touch again in the timed sweeps.
            init_rows(g, r, b, mine.clone());
            bar.wait(p);
            // Timed: the sweeps, not the initialization or the checksum.
            p.start_timing();
            for _ in 0..iterations {
                // SAFETY: in the red phase each processor writes the red rows of its own
                // band and reads only black rows, which nobody writes in this phase.
                let (r, b) = unsafe { (red.as_mut_slice(), black.as_slice()) };
                sweep(g, Color::Red, r, b, band.clone());
                bar.wait(p);
                // SAFETY: the same with the colours exchanged.
                let (b, r) = unsafe { (black.as_mut_slice(), red.as_slice()) };
                sweep(g, Color::Black, b, r, band.clone());
                bar.wait(p);
            }
            p.stop_timing();
            // SAFETY: the last barrier ordered every sweep before these reads; each
            // processor writes only the sums of its own rows.
            let (r, b, out) = unsafe { (red.as_slice(), black.as_slice(), sums.as_mut_slice()) };
            for i in mine {
                out[i] = row_sum(g, r, b, i);
            }
            bar.wait(p);
            // SAFETY: every processor wrote its sums before the barrier; nobody writes now.
            let all = unsafe { sums.as_slice() };
            (id == 0).then(|| summary(sum_rows(all)))
        }
    })?;
    app_common::split_report(report)
}
