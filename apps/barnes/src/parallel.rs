//! The parallel version on the DSM: the schedule of the crate documentation ("Work
//! distribution and synchronization of the parallel version"), calling the same kernels
//! as [`crate::simulate`] on views of the shared arrays.
//!
//! Every phase takes fresh slice views of the shared arrays and drops them before the next
//! barrier, so no value read through a view is kept across a synchronization call.

use crate::body;
use crate::force::{self, Energies};
use crate::tree::{self, Cube, Tree, TreeMut};
use crate::{partition, plummer, pos_half, Config, Outcome};
use app_common::AppError;
use dsm::{Proc, Shared};
use serde::{Deserialize, Serialize};

/// The shared arrays of the crate documentation's layout table, plus one status word.
#[derive(Clone, Copy)]
struct Arrays {
    /// The body records ([`crate::body`]).
    bodies: Shared<f64>,
    cube: Shared<f64>,
    /// The cell records ([`tree::CELL_WORDS`] words each).
    cells: Shared<f64>,
    /// Written by processor 0 before the tree barrier: 0, or 1 when the tree build failed
    /// (every processor then stops after that barrier).
    status: Shared<u32>,
}

impl Arrays {
    fn alloc(s: &mut dsm::Setup, cfg: &Config) -> Arrays {
        let n = cfg.nbody;
        let cells = cfg.layout().cells;
        Arrays {
            bodies: s.alloc_named(body::BODY_WORDS * n, "bodytab"),
            cube: s.alloc_named(4, "cube"),
            cells: s.alloc_named(tree::CELL_WORDS * cells, "celltab"),
            status: s.alloc_named(1, "status"),
        }
    }

    /// The tree as the force phase and the partition read it.
    ///
    /// # Safety
    /// No processor may write the cell arrays or `cube` while the view is alive.
    unsafe fn tree(&self) -> Tree<'_> {
        // SAFETY: the caller guarantees no concurrent writer (processor 0 writes the tree
        // only in phase 1, which a barrier separates from every reader).
        unsafe {
            let c = self.cube.as_slice();
            Tree {
                cube: Cube::from_array([c[0], c[1], c[2], c[3]]),
                cells: self.cells.as_slice(),
            }
        }
    }
}

/// What processor 0 reports: the outcome with every `f64` as its bits, so that the
/// result crosses the run's serialization (JSON, in process mode through the fabric)
/// without the rounding of a decimal float parser.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Record {
    first: [u64; 2],
    last: [u64; 2],
    interactions: u64,
    cells: u64,
}

impl Record {
    fn new(o: &Outcome) -> Record {
        let bits = |e: Energies| [e.kinetic.to_bits(), e.potential.to_bits()];
        Record {
            first: bits(o.first),
            last: bits(o.last),
            interactions: o.interactions,
            cells: o.cells as u64,
        }
    }

    fn outcome(&self) -> Outcome {
        let e = |b: [u64; 2]| Energies {
            kinetic: f64::from_bits(b[0]),
            potential: f64::from_bits(b[1]),
        };
        Outcome {
            first: e(self.first),
            last: e(self.last),
            interactions: self.interactions,
            cells: self.cells as usize,
        }
    }
}

/// Processor 0's phase 1: sizes the cube around the bodies at their position `h`, builds
/// the tree and computes the centres of mass and costs. Returns the number of cells.
///
/// # Safety
/// Only processor 0 runs it, between barriers during which no other processor touches
/// `cube` or the cell arrays, nor writes the bodies.
unsafe fn build(a: &Arrays, h: usize) -> Result<usize, tree::TreeError> {
    // SAFETY: the caller guarantees processor 0 is the only one touching these arrays
    // (and that nobody writes the bodies) in this phase.
    unsafe {
        let bodies = a.bodies.as_slice();
        let cube = Cube::around(bodies, h);
        a.cube.as_mut_slice().copy_from_slice(&cube.to_array());
        let mut t = TreeMut {
            cells: a.cells.as_mut_slice(),
        };
        let ncell = tree::build_tree(cube, bodies, h, &mut t)?;
        tree::compute_cofm(&mut t, ncell, bodies, h);
        Ok(ncell)
    }
}

/// Processor 0's record of the step whose force phase wrote the bodies last: the energies
/// summed over all bodies (index order), the interactions and the cells of its tree.
///
/// # Safety
/// Nobody writes the bodies while it runs.
unsafe fn record(a: &Arrays, ncell: usize) -> (Energies, u64, usize) {
    // SAFETY: the caller guarantees no writer.
    let bodies = unsafe { a.bodies.as_slice() };
    (force::energies(bodies), body::total_cost(bodies), ncell)
}

/// The body every processor runs. Processor 0 returns the record (or the tree error that
/// stopped the run); the others return `None`.
fn body(p: &Proc, cfg: &Config, a: &Arrays, bar: dsm::Barrier) -> Option<Result<Record, String>> {
    let (id, nprocs, n) = (p.id(), p.nprocs(), cfg.nbody);
    if id == 0 {
        // Setup, by the master as in the original (`testdata`).
        // The bodies are drawn privately and written into the shared records, as the
        // original's master fills `bodytab`.
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(cfg.seed, &mut pos, &mut vel, &mut mass);
        // SAFETY: before the first barrier only processor 0 touches shared data.
        unsafe {
            let t = a.bodies.as_mut_slice();
            body::fill(t, &pos, &vel, &mass);
            body::set_costs(t, 1);
        }
    }
    // Homes go to the first touchers from here (section 2.3.1).
    bar.end_initialization(p);
    // Timed: the steps, not generating the bodies.
    p.start_timing();
    let mut mine: Vec<u32> = Vec::new();
    // Processor 0's private record of the steps, as in the sequential version.
    let mut first = None;
    let mut last = None;
    let mut ncell = 0;
    let mut failure = None;
    for step in 0..cfg.nsteps {
        let h = pos_half(step);
        // Phase 1: processor 0 records the last step and builds the tree.
        if id == 0 {
            if step > 0 {
                // SAFETY: in phase 1 nobody writes the bodies.
                let r = unsafe { record(a, ncell) };
                first.get_or_insert(r.0);
                last = Some(r);
            }
            // SAFETY: phase 1 is processor 0's alone (the barriers around it).
            match unsafe { build(a, h) } {
                Ok(cells) => ncell = cells,
                Err(e) => {
                    a.status.set(0, 1);
                    failure = Some(format!("barnes: {e}"));
                }
            }
        }
        bar.wait(p);
        if a.status.get(0) != 0 {
            // Every processor ends its timed region, so that the run reports the tree's
            // error rather than an unfinished region.
            p.stop_timing();
            return failure.map(Err);
        }
        // Phase 2: the costzones. Everyone reads the tree and every body's cost.
        // SAFETY: nobody writes shared data in this phase.
        unsafe {
            partition::costzone(a.tree(), a.bodies.as_slice(), id, nprocs, &mut mine);
        }
        // SPLASH-2 has a barrier here, commented out (`B*RRIER(Global->Barcom,NPROC)` after
        // `find_my_bodies`), and its force phase then writes costs that other processors'
        // partitions may still read; a DSM program keeps it.
        bar.wait(p);
        // Phase 3: forces for my bodies, then their advance, in one write interval as in
        // SPLASH's `stepsystem` (`ComputeForces`, then "advance my bodies"). Everyone reads
        // the tree and position `h` and mass of every body; each processor writes the
        // acceleration, potential, velocity, kinetic energy, cost and position `1 - h` of
        // its own bodies only (the costzones are disjoint).
        // SAFETY: no word is written by one processor and read or written by another here.
        unsafe {
            let t = a.tree();
            let bodies = a.bodies.as_mut_slice();
            force::force_phase(t, bodies, &mine, step == 0, cfg.force, h);
            force::advance(&mine, bodies, cfg.force.dtime, h);
        }
        bar.wait(p);
    }
    if id == 0 {
        // SAFETY: after the last barrier nobody writes the bodies.
        let r = unsafe { record(a, ncell) };
        first.get_or_insert(r.0);
        last = Some(r);
    }
    p.stop_timing();
    if id != 0 {
        return None;
    }
    let (last, interactions, cells) = last.expect("at least one step");
    let outcome = Outcome {
        first: first.expect("at least one step"),
        last,
        interactions,
        cells,
    };
    Some(Ok(Record::new(&outcome)))
}

/// Runs the parallel version on a cluster configured by `dsm_config`.
pub fn run(cfg: &Config, dsm_config: &dsm::Config) -> Result<(Outcome, dsm::Report<()>), AppError> {
    let cfg = *cfg;
    let report = dsm::Cluster::new(dsm_config.clone()).run(|s| {
        let arrays = Arrays::alloc(s, &cfg);
        let bar = s.barrier();
        move |p: &Proc| body(p, &cfg, &arrays, bar)
    })?;
    let (results, report) = report.take_results();
    match results.into_iter().next().flatten() {
        Some(Ok(record)) => Ok((record.outcome(), report)),
        Some(Err(e)) => Err(AppError::Other(e)),
        None => Err(AppError::Other(
            "barnes: processor 0 returned no result".into(),
        )),
    }
}
