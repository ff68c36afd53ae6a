//! The parallel programs on the DSM, following the synchronization plans of the crate
//! documentation (SPLASH-2 `mdmain.C` and `interf.C` of both programs).
//!
//! Shared: Water-nsquared's molecule array `VAR`, or Water-spatial's molecule records
//! (each with its cell-list link) and list heads `head`; the seven global sums `gl`.
//! Processor 0 initializes them, as the
//! original's master runs `INITIA` before creating the other processes. Water-nsquared's
//! per-processor force arrays (`PFORCES`) are private (see the crate documentation).
//!
//! Every slice taken of a shared array lives within one phase (between two
//! synchronization calls); the kernels that take locks get their views through
//! [`Locked`] and [`sp::CellLists`], which hand out a fresh view after each lock call.

use crate::layout::{ACC, FORCES, LINK_STRIDE, MOL_STRIDE, NDIR, SLOT};
use crate::physics::{self, Energies, StepSums, Totals};
use crate::{nsq, sp, Locked, Setup};
use app_common::{AppError, AppResult, Params};
use dsm::{Barrier, Lock, Proc, Shared};

/// Offsets of the global sums in the shared array `gl` (SPLASH-2's `gl->VIR`,
/// `gl->SUM[3]`, `gl->POTA`, `gl->POTR`, `gl->POTRF`).
struct Gl;

impl Gl {
    const VIR: usize = 0;
    const KIN: usize = 1;
    const POTA: usize = 4;
    const POTR: usize = 5;
    const POTRF: usize = 6;
    const LEN: usize = 7;

    fn read(gl: &Shared<f64>) -> StepSums {
        StepSums {
            vir: gl.get(Gl::VIR),
            kin: [gl.get(Gl::KIN), gl.get(Gl::KIN + 1), gl.get(Gl::KIN + 2)],
            pota: gl.get(Gl::POTA),
            potr: gl.get(Gl::POTR),
            potrf: gl.get(Gl::POTRF),
        }
    }

    fn zero(gl: &Shared<f64>) {
        for i in 0..Gl::LEN {
            gl.set(i, 0.0);
        }
    }
}

/// Adds `terms` to the sums at `at..` under `lock`.
fn add_locked(p: &Proc, lock: Lock, gl: &Shared<f64>, at: usize, terms: &[f64]) {
    lock.acquire(p);
    for (i, t) in terms.iter().enumerate() {
        gl.set(at + i, gl.get(at + i) + t);
    }
    lock.release(p);
}

/// The synchronization objects both programs use (SPLASH-2's `gl` locks and barriers).
#[derive(Clone, Copy)]
struct SyncObjects {
    intraf_vir: Lock,
    interf_vir: Lock,
    kineti_sum: Lock,
    poteng_sum: Lock,
    start: Barrier,
    interf_bar: Barrier,
    poteng_bar: Barrier,
}

impl SyncObjects {
    fn new(s: &mut dsm::Setup) -> SyncObjects {
        SyncObjects {
            intraf_vir: s.lock(),
            interf_vir: s.lock(),
            kineti_sum: s.lock(),
            poteng_sum: s.lock(),
            start: s.barrier(),
            interf_bar: s.barrier(),
            poteng_bar: s.barrier(),
        }
    }

    /// `KINETI`'s additions: each direction's sum under `KinetiSumLock`.
    fn add_kinetic(&self, p: &Proc, gl: &Shared<f64>, k: [f64; NDIR]) {
        for (dir, k) in k.iter().enumerate() {
            add_locked(p, self.kineti_sum, gl, Gl::KIN + dir, &[*k]);
        }
    }
}

/// The molecule array in DSM memory with per-molecule (nsquared) or per-cell (spatial)
/// locks, and for Water-spatial the list heads (the links are in the records).
struct SharedMols<'a> {
    var: Shared<f64>,
    head: Option<Shared<i64>>,
    locks: &'a [Lock],
    p: &'a Proc,
}

impl Locked for SharedMols<'_> {
    fn acquire(&mut self, index: usize) {
        self.locks[index].acquire(self.p);
    }
    fn release(&mut self, index: usize) {
        self.locks[index].release(self.p);
    }
    fn var(&mut self) -> &mut [f64] {
        // SAFETY: the kernels write through this view only the molecules they hold the
        // lock of, or their own; the view is dropped before the next lock call (it
        // borrows self).
        unsafe { self.var.as_mut_slice() }
    }
}

impl sp::CellLists for SharedMols<'_> {
    fn head(&mut self) -> &mut [i64] {
        let head = self.head.as_ref().expect("cell lists");
        // SAFETY: as for `var`: `bndry_cells` reads and writes a cell's head only under
        // the cell's lock (see `sp::bndry_cells` for why its unlocked reads of the links
        // in the records do not race).
        unsafe { head.as_mut_slice() }
    }
}

/// Whether step `i` of `steps` computes the potential energy.
fn poteng_step(i: usize, steps: usize, nprint: usize) -> bool {
    i.is_multiple_of(nprint) || i == steps
}

/// The parallel Water-nsquared.
pub fn water_nsq(
    params: &Params,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let Setup {
        sys,
        var: init,
        steps,
        nprint,
    } = crate::setup(params)?;
    let nmol = sys.nmol;
    let nprocs = config.nodes * config.procs_per_node;
    if nmol < nprocs {
        return Err(AppError::BadParam {
            name: "molecules".into(),
            value: nmol.to_string(),
            why: format!(
                "Water-nsquared needs at least one molecule per processor ({nprocs} processors)"
            ),
        });
    }
    let (sys, init) = (&sys, &init);
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let var = s.alloc_named::<f64>(nmol * MOL_STRIDE, "water molecules (VAR)");
        let gl = s.alloc_named::<f64>(Gl::LEN, "water global sums");
        let sync = SyncObjects::new(s);
        // SPLASH-2's MolLock[MAXLCKS]; molecule m takes lock m % MAXLCKS, so with fewer
        // molecules than that the locks past nmol would never be taken.
        let mol_locks = s.locks(nmol.min(nsq::MAXLCKS));
        move |p: &Proc| -> Option<AppResult> {
            let (id, np) = (p.id(), p.nprocs());
            let mine = nsq::mols_of(id, np, nmol);
            let flush = nsq::flush_ranges(id, np, nmol);
            let mut pforces = vec![0.0; nmol * SLOT];
            let mut mols = SharedMols {
                var,
                head: None,
                locks: &mol_locks,
                p,
            };
            // For every use of `v`: in each phase a processor writes only its own molecules
            // `mine` and reads other molecules only in phases where nobody writes them
            // (barriers separate the phases); the view is used within its phase.
            // SAFETY: as just said.
            let v = || unsafe { var.as_mut_slice() };

            let mut interf = |dest: usize| {
                let lvir = nsq::interf_private(v(), sys, mine.clone(), &mut pforces);
                add_locked(p, sync.interf_vir, &gl, Gl::VIR, &[lvir]);
                nsq::flush_private_forces(&mut mols, dest, &pforces, &flush);
                sync.interf_bar.wait(p);
                nsq::scale_range(v(), dest, sys, mine.clone());
            };

            if id == 0 {
                v().copy_from_slice(init);
            }
            // Homes go to the first touchers from here (section 2.3.1).
            sync.start.end_initialization(p);
            // Initial accelerations.
            let lvir = nsq::intraf_range(v(), mine.clone());
            add_locked(p, sync.intraf_vir, &gl, Gl::VIR, &[lvir]);
            sync.start.wait(p);
            interf(ACC);
            sync.start.wait(p);

            let mut totals = Totals::default();
            let mut last = None;
            for i in 1..=steps {
                // Timed from the second step on (SPLASH-2 `MDMAIN`'s `tracktime`, whose
                // clock processor 0 reads before it zeroes the sums).
                if i == crate::first_timed_step(steps) {
                    p.start_timing();
                }
                if id == 0 {
                    Gl::zero(&gl);
                }
                sync.start.wait(p);
                nsq::predic_range(v(), sys, mine.clone());
                let lvir = nsq::intraf_range(v(), mine.clone());
                add_locked(p, sync.intraf_vir, &gl, Gl::VIR, &[lvir]);
                sync.start.wait(p);
                interf(FORCES);
                nsq::correc_bndry_range(v(), sys, mine.clone());
                let k = nsq::kineti_range(v(), mine.clone());
                sync.add_kinetic(p, &gl, k);
                sync.start.wait(p);
                totals.add_step(&Gl::read(&gl));
                if poteng_step(i, steps, nprint) {
                    let pota = nsq::poteng_intra_range(v(), mine.clone());
                    sync.poteng_bar.wait(p);
                    let (potr, potrf) = nsq::poteng_inter_range(v(), sys, mine.clone());
                    add_locked(p, sync.poteng_sum, &gl, Gl::POTA, &[pota, potr, potrf]);
                    sync.start.wait(p);
                    last = Some(Energies::new(sys, &Gl::read(&gl), &totals));
                }
                sync.start.wait(p);
            }
            p.stop_timing();
            (id == 0).then(|| last.expect("at least one step").to_result())
        }
    })?;
    app_common::split_report(report)
}

/// The parallel Water-spatial.
pub fn water_sp(
    params: &Params,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let Setup {
        sys,
        var: init,
        steps,
        nprint,
    } = crate::setup(params)?;
    let nmol = sys.nmol;
    let grid = sp::Grid::new(&sys);
    let nprocs = config.nodes * config.procs_per_node;
    if grid.cells() < nprocs {
        // The cells per side are the box over the cutoff: blame the cutoff if the run
        // set one, else the molecules (whose count sets the box).
        let (name, value) = match params.str("cutoff")? {
            "deck" => ("molecules".to_string(), nmol.to_string()),
            cutoff => ("cutoff".to_string(), cutoff.to_string()),
        };
        return Err(AppError::BadParam {
            name,
            value,
            why: format!(
                "Water-spatial needs at least one cell per processor; {nmol} molecules (a box \
                 of {:.3} angstrom) with a cutoff of {:.3} angstrom in effect give {} cell(s) \
                 for {nprocs} processors; give a cutoff of at most {:.3} (--param cutoff=), \
                 more molecules, or fewer processors",
                sys.boxl,
                sys.cutoff,
                grid.cells(),
                sys.boxl / (nprocs as f64).cbrt().ceil()
            ),
        });
    }
    let (sys, init, grid) = (&sys, &init, &grid);
    // The records as INITIA leaves them (lattice order, lists built), which processor 0
    // copies into shared memory.
    let (init, init_head) = sp::build_records(init, grid, nmol);
    let (init, init_head) = (&init, &init_head);
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let var = s.alloc_named::<f64>(nmol * LINK_STRIDE, "water molecule records (link_type)");
        let gl = s.alloc_named::<f64>(Gl::LEN, "water global sums");
        let head = s.alloc_named::<i64>(grid.cells(), "water cell list heads (BOX)");
        let sync = SyncObjects::new(s);
        let cell_locks = s.locks(grid.cells());
        move |p: &Proc| -> Option<AppResult> {
            let (id, np) = (p.id(), p.nprocs());
            let cells = sp::own_cells(id, np, grid);
            let mut lists = SharedMols {
                var,
                head: Some(head),
                locks: &cell_locks,
                p,
            };
            // For every use of `v` and `h`: outside BNDRY (which goes through `lists`)
            // the cell lists are only read, and each processor writes only the molecules
            // of its own cells, reading others only in phases where nobody writes them.
            // SAFETY: as just said; each view is used within the phase it is taken in.
            let v = || unsafe { var.as_mut_slice() };
            // SAFETY: see above.
            let h = || unsafe { head.as_slice() };
            let mine = |op: &mut dyn FnMut(&mut [f64])| {
                sp::for_each_in_cells(v(), h(), &cells, op);
            };
            let interf = |dest: usize| {
                let lvir = sp::interf_cells(v(), sys, grid, h(), &cells, dest);
                add_locked(p, sync.interf_vir, &gl, Gl::VIR, &[lvir]);
                sync.interf_bar.wait(p);
                mine(&mut |m| physics::scale_forces(m, dest, sys));
            };

            if id == 0 {
                // SPLASH-2's master runs INITIA, which writes every record and list head,
                // before it creates the other processes.
                v().copy_from_slice(init);
                // SAFETY: only processor 0 touches the lists before the barrier.
                unsafe { head.as_mut_slice().copy_from_slice(init_head) };
            }
            // Homes go to the first touchers from here (section 2.3.1).
            sync.start.end_initialization(p);
            let lvir = sp::intraf_cells(v(), h(), &cells);
            add_locked(p, sync.intraf_vir, &gl, Gl::VIR, &[lvir]);
            sync.start.wait(p);
            interf(ACC);
            sync.start.wait(p);

            let mut totals = Totals::default();
            let mut last = None;
            for i in 1..=steps {
                // Timed from the second step on (SPLASH-2 `MDMAIN`'s `tracktime`, whose
                // clock processor 0 reads before it zeroes the sums).
                if i == crate::first_timed_step(steps) {
                    p.start_timing();
                }
                if id == 0 {
                    Gl::zero(&gl);
                }
                sync.start.wait(p);
                mine(&mut |m| physics::predic(m, sys));
                let lvir = sp::intraf_cells(v(), h(), &cells);
                add_locked(p, sync.intraf_vir, &gl, Gl::VIR, &[lvir]);
                sync.start.wait(p);
                interf(FORCES);
                mine(&mut |m| physics::correc(m, sys));
                let k = sp::kineti_cells(v(), h(), &cells);
                sync.add_kinetic(p, &gl, k);
                // KINETI before BNDRY, with a barrier between (see the crate documentation).
                sync.start.wait(p);
                sp::bndry_cells(&mut lists, sys, grid, &cells);
                sync.start.wait(p);
                totals.add_step(&Gl::read(&gl));
                if poteng_step(i, steps, nprint) {
                    let pota = sp::poteng_intra_cells(v(), h(), &cells);
                    sync.poteng_bar.wait(p);
                    let (potr, potrf) = sp::poteng_inter_cells(v(), sys, grid, h(), &cells);
                    add_locked(p, sync.poteng_sum, &gl, Gl::POTA, &[pota, potr, potrf]);
                    sync.start.wait(p);
                    last = Some(Energies::new(sys, &Gl::read(&gl), &totals));
                }
                sync.start.wait(p);
            }
            p.stop_timing();
            (id == 0).then(|| last.expect("at least one step").to_result())
        }
    })?;
    app_common::split_report(report)
}
