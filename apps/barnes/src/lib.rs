//! Barnes: a Barnes-Hut N-body simulation, after the Barnes program of the TreadMarks
//! distribution, itself based on SPLASH-1 Barnes (Singh, Weber and Gupta, "SPLASH: Stanford
//! parallel applications for shared memory", 1992), which follows the hack code of Barnes
//! and Hut ("A hierarchical O(N log N) force-calculation algorithm", Nature 324, 1986).
//! The Cashmere paper (section 3.2, Table 3) runs it on 128K bodies.
//!
//! # The computation
//!
//! `nbody` bodies of a Plummer model ([`plummer()`], from a fixed `seed`) move under their
//! mutual gravity for `nsteps` steps of `dtime`. Each step:
//!
//! 1. the root cube is sized around the bodies and the octree is rebuilt from scratch, one
//!    body per leaf ([`tree::build_tree`]), then every cell gets its mass, centre of mass
//!    and cost ([`tree::compute_cofm`]);
//! 2. the bodies are partitioned by costzones ([`partition::costzone`]);
//! 3. each body's acceleration and potential come from a walk of the tree with opening
//!    angle `theta` and softening `eps`, and the leapfrog corrects its velocity
//!    ([`force::force_phase`]); the energies are summed ([`force::energies`]);
//! 4. the bodies advance ([`force::advance`]).
//!
//! The result is the `kinetic` and `potential` energy at the last step, the relative drift
//! of the total energy from the first step to the last, `energy_drift = (E_last - E_first)
//! / |E_first|`, and the number of body-node `interactions` of the last force phase.
//!
//! # Shared data layout
//!
//! The bodies are records, as in SPLASH Barnes, whose `bodytab` is one array of `body`
//! structs (mass, position, cost, velocity, acceleration, potential and tree links
//! together) that the main process allocates and fills before the workers start
//! (SPLASH-2 `codes/apps/barnes/code.C`, `testdata` and `startrun`, and `code.H`; read in
//! the SPLASH-3 copy of repository `ZhengmingHu/SPLASH-3-RISCV`; SPLASH-1 Barnes, which the
//! TreadMarks program follows, keeps its bodies the same way). The record is the 16-word,
//! 128-byte `body` of a 64-bit machine, with this program's fields at the places of
//! SPLASH's ([`body`] lists them). So one 8 KB page holds 64 bodies' positions,
//! velocities, accelerations and costs together, and a body's writer in the force phase
//! (acceleration, velocity, potential, cost) shares the page with the readers of its
//! position and mass. (Before, every field was an array of its own.)
//!
//! The records put every field a processor writes in a step on the pages of its bodies,
//! which the costzones scatter over the body table, so about every body page is written
//! by every node once a step (phase 3 below): 4 steps x 2,048 pages x 7 nodes besides the
//! home is 57.3K diffs. Measured at the paper's input on 8 x 4 under the modeled clock
//! (counted computation), CSM-DMS, page transfers / invalidations / diffs, against Table
//! 4's 66.0K / 214.2K / 60.8K:
//! - 81.5K / 75.4K / 57.3K, speedup 4.14 (the paper's 7.6): one write interval per step;
//! - 138.8K / 132.7K / 114.7K, speedup 3.39, when this program advanced the bodies after
//!   a barrier of its own, in a second write interval;
//! - 71.2K / 62.7K / 51.1K (measured computation) when every field was an array of its
//!   own, as this program first had them.
//!
//! The paper's run had about 2.8 times as many invalidations, which its step count (not
//! stated; 4 here) and its parallel tree build (below) may explain. Processor 0's tree
//! build is this program's serial part: 7.0M of the 9.5M tree units, about 15.4 s of the
//! sequential 120.4 s (Table 3's time, which the units are charged to, split between the
//! kinds by the costs per unit calibrated on this host: a tree unit 4.7 times an
//! interaction; section "Counted work"), so 32 processors cannot pass about 6.4 even with
//! free communication.
//!
//! The cells are records too, as in the hack code and SPLASH (`cell`: the node's `type`,
//! `mass` and `pos`, SPLASH's `cost`, then `subp[NSUB]`): [`tree::CELL_WORDS`] = 14
//! 8-byte words (type, mass, centre of mass, cost, eight children), in one table written
//! by the tree's builder.
//!
//! | array       | type  | length           | contents                                     |
//! |-------------|-------|------------------|----------------------------------------------|
//! | `bodytab`   | `f64` | `16 nbody`       | the record of `b` at `16b..16b+16`, [`body`] |
//! | `cube`      | `f64` | `4`              | the root cube, [`tree::Cube::to_array`]      |
//! | `celltab`   | `f64` | `14 cells`       | the record of `c` at `14c..14c+14`: mass, centre of mass, cost, children ([`tree::Node::encode`], as the low bits of a word) |
//!
//! `cells` is [`tree::cell_capacity`]`(nbody, fcells)`; cell 0 is the root. A child index
//! encodes empty, a body index, or a cell index with the top bit set. A Plummer model needs
//! about 0.5 cells per body with one body per leaf, so the default `fcells = 1` leaves
//! room; at the paper size the shared data is then 31 MB ([`Layout::shared_bytes`]: 16 MB
//! of bodies, 14 MB of cell capacity of which about half is used), against the 26 MB of
//! the paper's Table 3.
//!
//! # The tree build: sequential, as in the TreadMarks program
//!
//! SPLASH Barnes builds the tree in parallel, locking cells as bodies are inserted. The
//! TreadMarks version, as described by the Cashmere group for the same program
//! (Stets et al., "Cashmere-2L", SOSP 1997: "The Barnes-Hut tree construction is performed
//! sequentially, while all other phases are parallelized and dynamically load balanced"),
//! builds it on one processor, so this crate does too: processor 0 sizes the cube,
//! inserts the bodies in index order and computes the centres of mass. The TreadMarks
//! source itself was not available to check this against.
//!
//! # Work distribution and synchronization of the parallel version
//!
//! Processor `id` of `nprocs` computes forces for and advances the bodies
//! [`partition::costzone`]`(tree, bodies, id, nprocs, &mut mine)` gives it (costzones
//! on last step's costs; all bodies cost 1 at the start). Setup: processor 0 draws the
//! bodies ([`plummer()`]) and writes their records' mass, position 0 and velocity, and a
//! cost of 1; **barrier**. Then for each step `k`, with `h = k % 2` ([`pos_half`], the
//! position the step reads; the record holds two, [`body::POS`]):
//!
//! 1. processor 0: if `k > 0`, [`force::energies`] over all bodies (index order) and the
//!    sum of the costs, kept privately as step `k - 1`'s record; then `cube =
//!    Cube::around(bodies, h)`, store it; [`tree::build_tree`]; [`tree::compute_cofm`].
//!    **Barrier** (the tree is visible).
//! 2. every processor: [`partition::costzone`], which reads the tree and the bodies'
//!    costs. **Barrier**: SPLASH-2 has one here, commented out
//!    (`B*RRIER(Global->Barcom,NPROC)` after `find_my_bodies` in `stepsystem`), and its
//!    force phase then resets and writes costs that other processors' partitions may
//!    still read; a data-race-free program keeps it.
//! 3. every processor: [`force::force_phase`] for `mine` (`first_step = k == 0`), which
//!    reads every body's position `h` and mass and the tree, and writes the acceleration,
//!    potential, velocity, kinetic energy and cost of `mine`; then [`force::advance`] for
//!    `mine`, which reads their position `h` and writes their position `1 - h` and
//!    velocity. **Barrier** (the new positions are visible to the next tree build).
//!
//! After the last step processor 0 records it as in phase 1. So each step writes a body's
//! record in one interval, as SPLASH's `stepsystem` does: `ComputeForces`, then "advance
//! my bodies" with no barrier in between, then `BARRIER(Global->Barpos)` (SPLASH-2
//! `code.C`; the same in SPLASH-3). SPLASH's other processors may still be reading the
//! positions the advance overwrites; the second position keeps this program free of that
//! race, and every force walk reads the positions the tree was built from.
//!
//! No locks are needed: the tree has a single writer, and every body a single writer in
//! each phase. Processor 0 reports the result after the last step. The [`parallel`]
//! module implements this schedule; besides the arrays above it allocates one `u32`
//! status word, which processor 0 sets before the tree barrier when the build fails
//! (cells full, a body thrown out of the cube), so that every processor stops after that
//! barrier and the run returns the sequential version's error instead of hanging.
//!
//! # Checking
//!
//! The parallel version performs exactly the sequential arithmetic: the tree is built by
//! one processor in body order (its shape depends only on the positions anyway, one body
//! per leaf), centres of mass are summed in child order, every body's force walks the same
//! tree in the same order whichever processor computes it, and the energies are summed by
//! one processor in body order. So the checker is exact ([`Barnes::check`]). A parallel tree
//! build with cell locks would still give bit-identical results as long as centres of mass
//! are summed over children in child order, since only the cell numbering would change.
//!
//! # What is not as in the original
//!
//! - The tree holds one body per leaf, where SPLASH-2 has leaves of several bodies
//!   (`MAX_BODIES_PER_LEAF`), and SPLASH's cell records carry more fields (level, parent,
//!   locks, quadrupole moments). One processor builds the tree (see above); SPLASH-2
//!   builds it in parallel under cell locks, each processor taking cells from its own part
//!   of the cell table (`load.C`, `maketree`, `makecell`), and computes the centres of mass
//!   in parallel (`hackcofm`).
//! - SPLASH-2 partitions in Peano-Hilbert order ([`partition`]); the TreadMarks source,
//!   which the paper ran, was not available to check either point.
//!
//! # Counted work
//!
//! Two kinds of unit ([`WORK`], `dsm::work`), since the force walk's share of the work
//! grows with the number of bodies (interactions per body grow with `log nbody` and
//! `theta`) while the tree's does not grow the same way:
//!
//! - [`INTERACTION`]: one body-cell or body-body interaction of the force walk (the hack
//!   code's `gravsub`, with the cell openings and distance tests that lead to it), counted
//!   by [`force::force_phase`] after each body's walk: the body's cost.
//! - [`TREE`]: one tree step: a level descended by [`tree::build_tree`] inserting a body
//!   (counted after each body), a child summed into a centre of mass by
//!   [`tree::compute_cofm`], a node visited by [`partition::costzone`], a body bounded by
//!   [`tree::Cube::around`], advanced by [`force::advance`] or summed by
//!   [`force::energies`] (each counted after the body).
//!
//! At the paper's input the sequential version counts 210,870,997 interactions and
//! 9,525,914 tree steps; on this host (release build, loaded) an interaction took about
//! 25 ns and a tree step about 118 ns (the tree's steps miss the cache: insertion and the
//! centres of mass touch bodies in tree order), so the tree is about a sixth of the time.
//!
//! The parallel version counts the same interactions (every body walks the same tree
//! whichever processor computes it) and more tree steps: every processor walks the tree
//! to find its cost zone, where the sequential version walks it once. Its processors
//! together counted (CSM-DMS, sums of `ProcReport::work` against the sequential
//! `Measured::work`): at the test input (512 bodies) 1.013 times the sequential tree steps
//! on 2 x 2 and 1.127 on 8 x 4, that is 0.5% and 4.9% more work weighted by the costs
//! above; at the small input (32768 bodies) 1.0002 times on 2 x 2 and 1.0024 on 8 x 4
//! (under 0.1% more work weighted); at the paper's input on 8 x 4, 1.0006 times.
//! The tree build itself, on processor 0 alone, is the sequential build: not more work,
//! but work the other processors wait for.

pub mod body;
pub mod force;
pub mod parallel;
pub mod partition;
pub mod plummer;
pub mod tree;

pub use plummer::plummer;

use app_common::{App, AppError, AppResult, Check, Mismatch, ParamSpec, Params};
use force::{Energies, ForceParams};
use tree::{Cube, TreeStore};

/// The run's parameters, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub nbody: usize,
    pub seed: i64,
    pub nsteps: usize,
    pub force: ForceParams,
    /// Cell capacity per body ([`tree::cell_capacity`]).
    pub fcells: f64,
}

impl Config {
    pub fn from_params(p: &Params) -> Result<Config, AppError> {
        let positive = |name: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(v)
            } else {
                Err(AppError::BadParam {
                    name: name.into(),
                    value: v.to_string(),
                    why: "must be positive".into(),
                })
            }
        };
        Ok(Config {
            nbody: p.get_in("nbody", 2, 1 << 24)?,
            seed: p.get("seed")?,
            nsteps: p.get_in("nsteps", 1, 100_000)?,
            force: ForceParams {
                theta: p.get_in("theta", 0.0, 10.0)?,
                eps: p.get_in("eps", 0.0, 100.0)?,
                dtime: positive("dtime", p.get("dtime")?)?,
            },
            fcells: p.get_in("fcells", 0.1, 1000.0)?,
        })
    }

    pub fn layout(&self) -> Layout {
        Layout {
            nbody: self.nbody,
            cells: tree::cell_capacity(self.nbody, self.fcells),
        }
    }
}

/// The sizes of the shared arrays (see the crate documentation for each array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub nbody: usize,
    /// Cell capacity.
    pub cells: usize,
}

impl Layout {
    /// Bytes of shared data.
    pub fn shared_bytes(&self) -> usize {
        let per_body = body::BODY_WORDS * 8;
        let per_cell = tree::CELL_WORDS * 8;
        self.nbody * per_body + self.cells * per_cell + 4 * 8
    }
}

/// The position of each body record ([`body::POS`]) that step `step` reads; its advance
/// writes the other.
pub fn pos_half(step: usize) -> usize {
    step % 2
}

/// What a run produces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub first: Energies,
    pub last: Energies,
    /// Interactions of the last force phase.
    pub interactions: u64,
    /// Cells of the last tree.
    pub cells: usize,
}

impl Outcome {
    pub fn energy_drift(&self) -> f64 {
        (self.last.total() - self.first.total()) / self.first.total().abs()
    }

    pub fn summary(&self) -> AppResult {
        AppResult::new()
            .f64("kinetic", self.last.kinetic)
            .f64("potential", self.last.potential)
            .f64("energy_drift", self.energy_drift())
            .i64("interactions", self.interactions as i64)
    }
}

fn tree_error(e: tree::TreeError) -> AppError {
    AppError::Other(format!("barnes: {e}"))
}

/// The sequential version: the steps of the crate documentation on one processor, with
/// every body in the single cost zone.
pub fn simulate(cfg: &Config) -> Result<Outcome, AppError> {
    let n = cfg.nbody;
    let layout = cfg.layout();
    let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
    plummer(cfg.seed, &mut pos, &mut vel, &mut mass);
    let mut bodies = body::from_arrays(&pos, &vel, &mass);
    body::set_costs(&mut bodies, 1);
    let mut store = TreeStore::new(layout.cells);
    let mut mine = Vec::with_capacity(n);
    let mut first = None;
    let mut last = None;
    // Timed as the parallel run: the steps, not generating the bodies. The region ends
    // also when a step fails (the tree's error is then the run's).
    app_common::timing::start();
    let steps = (|| -> Result<(), AppError> {
        for step in 0..cfg.nsteps {
            let h = pos_half(step);
            let cube = Cube::around(&bodies, h);
            let ncell =
                tree::build_tree(cube, &bodies, h, &mut store.as_mut()).map_err(tree_error)?;
            tree::compute_cofm(&mut store.as_mut(), ncell, &bodies, h);
            partition::costzone(store.view(cube), &bodies, 0, 1, &mut mine);
            force::force_phase(
                store.view(cube),
                &mut bodies,
                &mine,
                step == 0,
                cfg.force,
                h,
            );
            let e = force::energies(&bodies);
            first.get_or_insert(e);
            last = Some((e, body::total_cost(&bodies), ncell));
            force::advance(&mine, &mut bodies, cfg.force.dtime, h);
        }
        Ok(())
    })();
    app_common::timing::stop();
    steps?;
    let (last, interactions, cells) = last.expect("at least one step");
    Ok(Outcome {
        first: first.expect("at least one step"),
        last,
        interactions,
        cells,
    })
}

/// The kind of unit of the force walk: one body-cell or body-body interaction.
pub const INTERACTION: usize = 0;
/// The kind of unit of the rest: one level descended while inserting a body, one child
/// summed into a cell's centre of mass, one node visited by the partition, or one body
/// bounded by the root cube, advanced, or summed into the energies.
pub const TREE: usize = 1;

/// Barnes' counted work (crate doc, "Counted work").
pub const WORK: &[app_common::WorkKind] = &[
    app_common::WorkKind {
        name: "interaction",
        what: "one body-cell or body-body interaction of the force walk (gravsub), with the \
               cell openings that lead to it",
        // `cashmere calibrate`-style measurement at the paper input, release build, on a
        // loaded 2-core host (two runs gave 25 and 79 ns; the ratio to `tree`, 4.7 and 5.7,
        // is what matters).
        host_ns: 25.4,
        // 131072 bodies, 4 steps, theta 1.
        paper_units: 210_870_997,
    },
    app_common::WorkKind {
        name: "tree",
        what: "one tree step: a level descended inserting a body, a child summed into a \
               centre of mass, a node visited by the partition, a body bounded, advanced or \
               summed into the energies",
        host_ns: 118.3,
        paper_units: 9_525_914,
    },
];

/// The Barnes application.
#[derive(Debug)]
pub struct Barnes;

pub static BARNES: Barnes = Barnes;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "nbody",
        help: "number of bodies",
        defaults: ["512", "32768", "131072"],
    },
    ParamSpec {
        name: "seed",
        help: "seed of the Plummer model (srand48)",
        defaults: ["123", "123", "123"],
    },
    ParamSpec {
        name: "nsteps",
        help: "time steps",
        defaults: ["3", "4", "4"],
    },
    ParamSpec {
        name: "theta",
        help: "opening angle (tol in SPLASH)",
        defaults: ["1.0", "1.0", "1.0"],
    },
    ParamSpec {
        name: "eps",
        help: "softening length",
        defaults: ["0.05", "0.05", "0.05"],
    },
    ParamSpec {
        name: "dtime",
        help: "time step",
        defaults: ["0.025", "0.025", "0.025"],
    },
    ParamSpec {
        name: "fcells",
        help: "cell capacity per body",
        defaults: ["1.0", "1.0", "1.0"],
    },
];

impl App for Barnes {
    fn name(&self) -> &'static str {
        "barnes"
    }

    fn description(&self) -> &'static str {
        "Barnes-Hut N-body simulation of a Plummer model (TreadMarks Barnes, after SPLASH-1)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK
    }

    fn extra_work(&self) -> Option<&'static str> {
        Some("every processor walks the tree to find its cost zone (crate doc, \"Counted work\")")
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let nbody = params.get_in::<u64>("nbody", 2, 1 << 24)?;
        // A body (position, velocity, acceleration, mass, cost) and its share of cells.
        Ok(nbody * 200)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        Ok(simulate(&Config::from_params(params)?)?.summary())
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let (outcome, report) = parallel::run(&Config::from_params(params)?, config)?;
        Ok((outcome.summary(), report))
    }

    /// Exact on every field: the parallel version performs the same arithmetic in the
    /// same order (see the crate documentation, "Checking").
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        Check::new(sequential, parallel)
            .exact("kinetic")?
            .exact("potential")?
            .exact("energy_drift")?
            .exact("interactions")?
            .done()
    }
}

#[cfg(test)]
mod tests;
