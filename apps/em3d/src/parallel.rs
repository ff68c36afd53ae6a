//! The parallel program on the DSM, following the synchronization plan of the crate
//! documentation: each processor builds and updates its own blocks of E and H nodes, with a
//! barrier after initialization and after each half-step; processor 0 adds up the values
//! after the last one.
//!
//! Every slice taken of a shared array lives within one phase (between two barriers), so
//! no value read through it is kept across a synchronization call.

use crate::{checksum, init_nodes, nodes_of, summary, update, Edges, Kind, Spec};
use app_common::{AppError, AppResult};

/// Runs `iterations` E-then-H iterations on the graph of `spec` on the cluster `config`
/// describes.
pub fn run_parallel(
    spec: &Spec,
    iterations: usize,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let spec = *spec;
    let (half, degree) = (spec.half, spec.degree);
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let e_values = s.alloc_named::<f64>(half, "em3d e_values");
        let h_values = s.alloc_named::<f64>(half, "em3d h_values");
        let e_from = s.alloc_named::<u32>(half * degree, "em3d e_from");
        let e_weight = s.alloc_named::<f64>(half * degree, "em3d e_weight");
        let h_from = s.alloc_named::<u32>(half * degree, "em3d h_from");
        let h_weight = s.alloc_named::<f64>(half * degree, "em3d h_weight");
        let bar = s.barrier();
        move |p: &dsm::Proc| -> Option<AppResult> {
            let mine = nodes_of(p.id(), p.nprocs(), half);
            // SAFETY: each processor writes the values and edges of its own nodes only,
            // and reads nothing.
            unsafe {
                let (v, f, w) = (
                    e_values.as_mut_slice(),
                    e_from.as_mut_slice(),
                    e_weight.as_mut_slice(),
                );
                init_nodes(&spec, Kind::E, mine.clone(), v, f, w);
                let (v, f, w) = (
                    h_values.as_mut_slice(),
                    h_from.as_mut_slice(),
                    h_weight.as_mut_slice(),
                );
                init_nodes(&spec, Kind::H, mine.clone(), v, f, w);
            }
            // Every processor builds its own nodes, in parallel, as the Split-C program
            // does; nothing is initialized before the processors start, so this is the
            // first touch after initialization (section 2.3.1; as SOR, crate `app-sor`),
            // and no end of initialization is marked to watch first touch again.
            bar.wait(p);
            // Timed: the iterations, not the graph's construction or the checksum.
            p.start_timing();
            for _ in 0..iterations {
                // SAFETY: in the E phase each processor writes only its own E values and
                // reads H values and edges, which nobody writes in this phase.
                unsafe {
                    let edges = Edges {
                        degree,
                        from: e_from.as_slice(),
                        weight: e_weight.as_slice(),
                    };
                    update(
                        e_values.as_mut_slice(),
                        h_values.as_slice(),
                        edges,
                        mine.clone(),
                    );
                }
                bar.wait(p);
                // SAFETY: the same with E and H exchanged.
                unsafe {
                    let edges = Edges {
                        degree,
                        from: h_from.as_slice(),
                        weight: h_weight.as_slice(),
                    };
                    update(
                        h_values.as_mut_slice(),
                        e_values.as_slice(),
                        edges,
                        mine.clone(),
                    );
                }
                bar.wait(p);
            }
            p.stop_timing();
            if p.id() != 0 {
                return None;
            }
            // SAFETY: after the last barrier nobody writes the values any more.
            let (e, h) = unsafe { (e_values.as_slice(), h_values.as_slice()) };
            Some(summary(checksum(e, h)))
        }
    })?;
    app_common::split_report(report)
}
