//! The two SPLASH-2 water programs (Woo et al., "The SPLASH-2 Programs: Characterization
//! and Methodological Considerations", ISCA 1995; used in the Cashmere paper, section 3.2
//! and Table 3, at 9261 molecules): `water-nsq` (Water-nsquared, [`nsq`]) and `water-sp`
//! (Water-spatial, [`sp`]). Both simulate the same system of rigid-lattice-started,
//! flexible water molecules with a sixth-order Gear predictor-corrector; the physics is in
//! [`physics`], the molecule layout in [`layout`], the input files in [`deck`].
//!
//! # Input
//!
//! The SPLASH-2 deck `water/n512-p1.in` and `water/random.in`, read as the originals read
//! them ([`deck`]). Parameters: `molecules` (a cube: 64, 512, 9261), `steps`, and the deck
//! values `tstep` (seconds), `norder`, `nprint` and `cutoff` (angstrom, 0 for half the
//! box), each `deck` by default; `short_random` says what a `random` file with fewer
//! than `1 + 9 * molecules` numbers means: `error` (test and small sizes), or `zero`
//! (the paper size, whose 9261 molecules need more than the shipped file holds): SPLASH-2's
//! zero velocities past its end (see [`deck`]). Every size uses the deck's cutoff 6.212752, which is half
//! the box at 64 molecules and gives 2, 4 and 10 cells per side to Water-spatial at 64,
//! 512 and 9261 molecules. The potential energy is computed every `nprint` steps as in the
//! original, and also after the last step if that is not one of them. Sizes: `test` 64
//! molecules, 3 steps; `small` 512 molecules (the deck's), 20 steps (about 0.3 s
//! sequentially, where the deck's 3 steps take 30 ms; 200 steps made the quick table's
//! two Water cells of 7 variants take most of its time under the modeled clock, some 14
//! minutes a cell at 8 x 4, for the same sharing per step); `paper` 9261 molecules, the
//! deck's 3 steps (the paper does not give its step count).
//!
//! # Result
//!
//! After the last step, in SPLASH-2's units (energies in kT per atom, as printed by
//! `MDMAIN`): `kinetic`, `intra_potential`, `inter_potential` (Coulomb and MCY terms),
//! `reaction_field`, `total` (their sum), `temperature` (kelvin, averaged over the steps
//! run, the original's `AVGT`) and `virial` (averaged likewise, `XVIR`).
//!
//! # Shared data of the parallel versions
//!
//! Water-nsquared: the molecule array `VAR` (`nmol * MOL_STRIDE` f64, [`layout`]; SPLASH-2
//! `water.C` allocates `VAR` as one array of `molecule_type`, each molecule's fields
//! together). Water-spatial: the molecule records (`nmol * LINK_STRIDE` f64, each a
//! molecule and its cell-list link, SPLASH-2's `link_type`, see [`sp`]) in lattice order,
//! and `head` (`bps^3` i64), the list heads of SPLASH-2's `BOX` array. Both: the global sums
//! of [`physics::StepSums`] (`VIR`, `SUM[3]`, `POTA`, `POTR`, `POTRF`: 7 f64).
//! Water-nsquared's per-processor force arrays (`PFORCES`, `nmol * 9` f64 each) are
//! written and read only by their processor; SPLASH-2 allocates them in shared memory,
//! but private memory holds them equally well, and [`parallel`] keeps them there.
//! Processor 0 writes the initial state (and Water-spatial's initial cell lists), as the
//! original's master runs `INITIA` before creating the other processes; with first-touch
//! homes node 0 is then the home of every shared page.
//!
//! # Timed region
//!
//! Both programs time steps 2 to `steps` (one step: that step), as SPLASH-2's `MDMAIN`
//! accumulates `tracktime` "from the 2nd timestep onward" (processor 0 reads the clock at
//! the start of every step `i >= 2`, before it zeroes the sums, and after the step's last
//! barrier): the initial accelerations and the first step are untimed. The sequential
//! version marks the same region (`app_common::timing::start`/`stop` in [`nsq::run`] and
//! [`sp::run`], where the parallel processors call `start_timing`/`stop_timing`).
//!
//! # Sources
//!
//! SPLASH-2's `codes/apps/water-nsquared` and `codes/apps/water-spatial`, read in the copy
//! of repository `mit-carbon/Graphite` (`tests/benchmarks/water-nsquared/{water.C,
//! mdmain.C}`, `tests/benchmarks/water-spatial/{water.C, initia.C, mdmain.C, bndry.C}`;
//! that copy adds the simulator's start/stop hooks and a path to `random.in`), and
//! water-spatial's `interf.C` in a copy found by content. What they say, and what we do:
//! - Allocation and initialization: both masters run `INITIA` (and water-spatial's
//!   `BOX` lists) before `CREATE`; ours: processor 0 writes all shared data before the
//!   first barrier. Water-nsquared's `VAR` is one `G_MALLOC`ed array in molecule order.
//!   Water-spatial's `INITIA` (default, lattice placement) `G_MALLOC`s one `link` record
//!   per lattice point inside its `i, j, k` lattice loops, so the records lie in lattice
//!   order (z fastest), and appends each to its box's list; only the `#ifdef RANDOM`
//!   placement allocates box by box. Ours: the records in lattice order in one array. The
//!   link (`next_mol`) is inside each record, as in `link_type`, so `BNDRY`'s link writes
//!   land on the moved molecules' own pages.
//! - Work division: `StartMol` (`NMOL / NumProcs` molecules each, the last the rest) and
//!   the cyclic half-range partners of `INTERF`; water-spatial's processor grid and
//!   `start_end` box blocks ([`sp::proc_grid`], [`sp::boxes_of`]).
//! - Not followed: water-spatial's `BOX` rows are separate `G_MALLOC`s of `{list, lock}`;
//!   ours is one `i64` array of heads with the locks in the DSM's lock space. Table 3 gives
//!   Water-spatial 16 MB of shared data where the records take 6.3 MB at 9261 molecules;
//!   the sources do not say where the rest was (Cashmere's allocator or locks perhaps), and
//!   nothing here pads records to make it up.
//!
//! # Counters against Table 4 (paper input, 8 x 4, modeled clock, counted work)
//!
//! Page transfers / invalidations / diffs / migrations in thousands, over the timed region
//! (from the second step, as SPLASH-2 times it), ours then the paper's
//! (`harness/results/table4-paper-8x4.md`). Processor 0 writes every record (`INITIA`),
//! then every processor ends initialization (`dsm::Barrier::end_initialization`), so each
//! page's home is its first toucher after it, as the paper's rule says (section 2.3.1).
//! Water-nsquared, CSM-DMS: 19.7 / 16.7 / 252.9 / 0 against 31.5 / 55.1 / 251.1 / 0
//! (speedup 23.6 against 20.6); its diffs come from the `PFORCES` flush, one diff per
//! molecule lock released on a page homed elsewhere. Water-spatial: CSM-DMS 5.1 / 3.8 /
//! 0.90 against 4.0 / 11.8 / 6.2; CSM-MS-Mg 5.5 / 3.8 / 0.50 / 0.41 against 5.2 / 17.6 /
//! 0.1 / 0.3; CSM-None-Mg 5.9 / 4.0 / 0.51 / 0.56 against 5.6 / 17.4 / 0.1 / 0.3 (speedups
//! 13.9, 13.7, 13.1 against 7.7, 12.3, 11.8). Before the DSM had the paper's rule, node 0
//! was every record's home and Water-spatial made 5.9K diffs under CSM-DMS (speedup 10.8),
//! about the paper's count: the paper's run writes more pages from two nodes than this one
//! does under the same rule, and why is open. The records stay as SPLASH-2 allocates them.
//!
//! # Counted work
//!
//! Two kinds of unit ([`WORK_NSQ`], [`WORK_SP`], `dsm::work`), counted in the kernels that
//! the sequential and the parallel versions share ([`nsq`], [`sp`]):
//! - **pair** ([`PAIR`]): one molecule pair evaluated in `INTERF` or `POTENG`: its 14
//!   site-site separations with their periodic images (`CSHIFT`), the cutoff test, and,
//!   within the cutoff, its force or energy terms. Every pair the loops visit counts,
//!   within the cutoff or not, as the programs' loops evaluate them all. Water-nsquared
//!   counts a molecule's partners after its partner loop; Water-spatial the pairs of one
//!   neighbour molecule with the molecules of the processor's cell.
//! - **molecule** ([`MOLECULE`]): one molecule through one per-molecule routine
//!   (`PREDIC`, `INTRAF`, the force scaling that ends `INTERF`, `CORREC`, `BNDRY`,
//!   `KINETI` for its three directions, `POTENG`'s intra-molecular part), counted after
//!   each molecule (`KINETI`, which only reads, after the processor's loops).
//!
//! The fraction of evaluated pairs within the cutoff differs between the programs (by
//! volume, the cutoff sphere over the box, about 0.4% in Water-nsquared at 9261 molecules,
//! and over 27 cells, about 13% in Water-spatial) and with the input, so a pair's average cost is each program's own (each has its own Table 3 time);
//! the molecule kind is a few percent of Water-spatial's time and less of
//! Water-nsquared's. Both versions count the same units: the parallel processors together
//! count exactly the sequential units (the same pairs and the same molecule passes). Work
//! not counted (adding `PFORCES` into the shared forces under the molecule locks, the
//! list moves of `BNDRY`, the global sums) is charged with the counted units at the rates
//! the sequential run gives them; Water-nsquared's parallel flush of `PFORCES` touches
//! about `nmol / 2` molecules per processor, where the sequential run touches `nmol`:
//! uncounted, as its 9 additions per molecule are well under 1% of a processor's pairs.
//!
//! Paper units (sequential, timed region, 9261 molecules, steps 2 and 3): Water-nsquared
//! 128,635,290 pairs and 120,393 molecule passes; Water-spatial 7,030,116 pairs and
//! 120,393 molecule passes (`cashmere calibrate --apps water-nsq,water-sp` checks them and
//! times the units). Host costs (`dsm::work::calibrate`, release build): Water-nsquared
//! 115 ns a pair and 93 ns a molecule pass, Water-spatial 102 and 143 ns, measured on a
//! 2-core host shared with other builds; two more runs gave ratios (molecule over pair) of
//! 1.25 and 0.87 for Water-nsquared, 2.23 and 1.61 for Water-spatial, where these give
//! 0.81 and 1.40. The molecule kind is then
//! 0.1% of Water-nsquared's time at the paper's input and 2.4% of Water-spatial's, so
//! that uncertainty moves a pair's platform cost by about 1%.
//!
//! The kernels that update other processors' data under locks take it through
//! [`Locked`] (and [`sp::CellLists`]), which hand out a fresh view of the DSM arrays after
//! every lock operation.
//!
//! # Synchronization of the parallel Water-nsquared (SPLASH-2 `mdmain.C`, `interf.C`)
//!
//! Processor `id` works on [`nsq::mols_of`]`(id, nprocs, nmol)`; `nmol >= nprocs`.
//! Locks: `IntrafVirLock`, `InterfVirLock`, `KinetiSumLock`, `PotengSumLock`, and
//! `MAXLCKS` = 4096 molecule locks (molecule `m` under lock `m % 4096`). Barriers `start`,
//! `InterfBar`, `PotengBar` (all processors).
//!
//! 1. [`nsq::intraf_range`], its result added to `VIR` under `IntrafVirLock`; **barrier**.
//! 2. `INTERF(ACC)`: [`nsq::interf_private`] into the private array, its virial added to
//!    `VIR` under `InterfVirLock`; then [`nsq::flush_private_forces`] over
//!    [`nsq::flush_ranges`], each molecule's addition under its molecule lock;
//!    **barrier** (`InterfBar`); [`nsq::scale_range`] on its own molecules; **barrier**.
//! 3. Per step: processor 0 zeroes the sums; **barrier**; [`nsq::predic_range`] and
//!    [`nsq::intraf_range`] (lock as in 1); **barrier**; `INTERF(FORCES)` as in 2 (without
//!    the final barrier); [`nsq::correc_bndry_range`], [`nsq::kineti_range`] (each
//!    direction's sum added under `KinetiSumLock`); **barrier**; every processor adds the
//!    sums to its private [`physics::Totals`]. On a potential-energy step:
//!    [`nsq::poteng_intra_range`]; **barrier** (`PotengBar`); [`nsq::poteng_inter_range`];
//!    the three sums added under `PotengSumLock`; **barrier**; the energies are
//!    [`physics::Energies::new`]. **Barrier** at the end of every step.
//!
//! # Synchronization of the parallel Water-spatial (SPLASH-2 water-spatial `mdmain.C`)
//!
//! Processor `id` works on the cells [`sp::own_cells`]`(id, nprocs, grid)`;
//! `nprocs <= bps^3`. The same locks and barriers as Water-nsquared without the molecule
//! locks, plus one lock per cell guarding `head[cell]` and the `next` links of the list.
//! The steps are those of Water-nsquared with the cell kernels ([`sp::intraf_cells`],
//! [`sp::interf_cells`] — no lock: a processor writes only its own molecules' forces —,
//! [`physics::scale_forces`] after `InterfBar`, [`physics::predic`],
//! [`physics::correc`], [`sp::kineti_cells`], [`sp::poteng_intra_cells`],
//! [`sp::poteng_inter_cells`]) with one change: after `CORREC` the processor computes
//! `KINETI` and waits at a **barrier**, then runs [`sp::bndry_cells`], which moves
//! molecules between cells under the cell locks; the step's final barrier follows. The
//! original runs `CORREC`, `BNDRY` and `KINETI` with no barrier between them, so a molecule
//! moved into a cell whose owner has not yet corrected it is corrected twice, and one moved
//! out of a cell before its owner's `KINETI` may be counted twice or not at all; the
//! barrier and the order here make every step deterministic up to summation order.
//!
//! # Checking
//!
//! The parallel versions add the same terms in other orders: the molecule forces in the
//! order the processors take the molecule locks (nsquared) or in the order of the cell
//! lists, which `BNDRY` builds in the order molecules arrive (spatial), and the global sums
//! in lock order. Each reordering changes a result by a few ulps, and this short-time
//! dynamics grows such differences slowly: emulated schedules of 4 and 8 processors differ
//! from the sequential run by about 1e-13 (relative) after 3 steps and 1e-12 after 200
//! steps (the `small` size has 20). The checker uses a relative tolerance of 1e-9 on every field,
//! a thousand times that, with an absolute floor of 1e-9 (the fields are of order 0.01 to
//! 1000 in their units). The test `emulated_parallel_schedules_pass_the_checker`
//! measures the difference of emulated four-processor schedules.

pub mod deck;
pub mod layout;
pub mod nsq;
pub mod parallel;
pub mod physics;
pub mod sp;

use app_common::{App, AppError, AppResult, Check, Mismatch, ParamSpec, Params};
use physics::System;

/// The molecule array as a kernel sees it when it updates molecules that other processors
/// also update, under locks by index (molecule locks in Water-nsquared, cell locks in
/// Water-spatial). The parallel version implements it over DSM memory and locks
/// ([`parallel`]); the sequential one with [`Unlocked`].
///
/// Kernels take a fresh view with [`Locked::var`] after every lock operation: the DSM
/// array is aliased across processors, so no value read through a view may be kept
/// across an acquire or release, and the borrow of `self` that a view holds makes that so.
pub trait Locked {
    fn acquire(&mut self, index: usize);
    fn release(&mut self, index: usize);
    /// The whole molecule array (`nmol * MOL_STRIDE` f64).
    fn var(&mut self) -> &mut [f64];
}

/// The molecule array of a single processor: nothing to exclude.
#[derive(Debug)]
pub struct Unlocked<'a>(pub &'a mut [f64]);

impl Locked for Unlocked<'_> {
    fn acquire(&mut self, _: usize) {}
    fn release(&mut self, _: usize) {}
    fn var(&mut self) -> &mut [f64] {
        self.0
    }
}

/// The kind of unit counted for a molecule pair evaluated in `INTERF` or `POTENG` (crate
/// doc, "Counted work").
pub const PAIR: usize = 0;
/// The kind of unit counted for one molecule through one per-molecule routine.
pub const MOLECULE: usize = 1;

/// The first step in the timed region of `steps` (SPLASH-2 `MDMAIN` times from the
/// second step on; a run of one step times that step).
pub fn first_timed_step(steps: usize) -> usize {
    steps.min(2)
}

/// Relative tolerance of the checker; see the crate documentation.
pub const TOLERANCE: f64 = 1e-9;

const FIELDS: [&str; 7] = [
    "kinetic",
    "intra_potential",
    "inter_potential",
    "reaction_field",
    "total",
    "temperature",
    "virial",
];

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "deck",
        help: "SPLASH-2 input deck (10 fields)",
        defaults: ["water/n512-p1.in"; 3],
    },
    ParamSpec {
        name: "random",
        help: "SPLASH-2 random.in (initial velocities)",
        defaults: ["water/random.in"; 3],
    },
    ParamSpec {
        name: "short_random",
        help: "if `random` holds fewer than 1 + 9 x molecules numbers: `error`, or `zero` (SPLASH-2: velocities past its end are 0)",
        defaults: ["error", "error", "zero"],
    },
    ParamSpec {
        name: "molecules",
        help: "number of molecules (a cube), or `deck` (its NMOL; the default when --input or --param deck= gives a deck)",
        defaults: ["64", "512", "9261"],
    },
    ParamSpec {
        name: "steps",
        help: "time steps, or `deck` (its NSTEP; the default when --input or --param deck= gives a deck)",
        defaults: ["3", "20", "3"],
    },
    ParamSpec {
        name: "tstep",
        help: "time step in seconds, or `deck`",
        defaults: ["deck"; 3],
    },
    ParamSpec {
        name: "norder",
        help: "predictor-corrector order (3-6), or `deck`",
        defaults: ["deck"; 3],
    },
    ParamSpec {
        name: "nprint",
        help: "potential energy every nprint steps, or `deck`",
        defaults: ["deck"; 3],
    },
    ParamSpec {
        name: "cutoff",
        help: "cutoff radius in angstrom (0: half the box), or `deck`",
        defaults: ["deck"; 3],
    },
];

/// A run's inputs: the constants, the initial molecule array, the steps and `nprint`.
#[derive(Clone, Debug)]
pub struct Setup {
    pub sys: System,
    pub var: Vec<f64>,
    pub steps: usize,
    pub nprint: usize,
}

/// The longest time step accepted, seconds: about 67 times SPLASH-2's 1.5e-16 s.
/// Water's integration of molecular motion is only stable for steps of the order of a
/// femtosecond; far longer ones overflow to infinities.
pub const MAX_TSTEP_S: f64 = 1e-14;

/// A parameter that is either `deck` (take the deck's value) or a value.
fn deck_or<T: std::str::FromStr + std::fmt::Display>(
    params: &Params,
    name: &str,
    from_deck: T,
) -> Result<T, AppError> {
    if params.str(name)? == "deck" {
        Ok(from_deck)
    } else {
        params.get(name)
    }
}

/// The number of molecules, for the memory estimate: the parameter, or the deck's NMOL.
fn molecules(params: &Params) -> Result<u64, AppError> {
    if params.str("molecules")? == "deck" {
        let d = deck::read_deck(&app_common::resolve_input(params.str("deck")?))?;
        return Ok(d.nmol.clamp(1, 1 << 20) as u64);
    }
    params.get_in::<u64>("molecules", 1, 1 << 20)
}

/// Reads the input files and builds the initial state from the parameters.
pub fn setup(params: &Params) -> Result<Setup, AppError> {
    let d = deck::read_deck(&app_common::resolve_input(params.str("deck")?))?;
    let randoms = deck::read_randoms(&app_common::resolve_input(params.str("random")?))?;
    let bad = |name: &str, value: String, why: &str| AppError::BadParam {
        name: name.into(),
        value,
        why: why.into(),
    };
    // `deck`: the deck's own figure (the harness asks for it when a deck is given).
    let count = |name: &str, field: &str, from_deck: i64| -> Result<usize, AppError> {
        if params.str(name)? != "deck" {
            return params.get_in::<usize>(name, 1, 1 << 20);
        }
        usize::try_from(from_deck)
            .ok()
            .filter(|v| (1..=1 << 20).contains(v))
            .ok_or_else(|| {
                bad(
                    name,
                    format!("deck ({field} = {from_deck})"),
                    &format!(
                        "the deck's {field} must be from 1 to 1048576; correct the deck or give \
                         --param {name}=N"
                    ),
                )
            })
    };
    let nmol = count("molecules", "NMOL", d.nmol)?;
    let steps = count("steps", "NSTEP", d.nstep)?;
    let tstep = deck_or(params, "tstep", d.tstep_s)?;
    if !(tstep > 0.0 && tstep <= MAX_TSTEP_S) {
        return Err(bad(
            "tstep",
            format!("{tstep:e}"),
            &format!(
                "the time step must be positive and at most {MAX_TSTEP_S:e} s (the deck's is \
                 {:e} s; a step much longer makes the molecules' motion overflow)",
                d.tstep_s
            ),
        ));
    }
    let norder = deck_or(params, "norder", d.norder)?;
    let nprint = deck_or(params, "nprint", d.nprint)?;
    if nprint < 1 {
        return Err(bad("nprint", nprint.to_string(), "must be at least 1"));
    }
    let cutoff = deck_or(params, "cutoff", d.cutoff)?;
    if !(cutoff >= 0.0 && cutoff.is_finite()) {
        return Err(bad(
            "cutoff",
            cutoff.to_string(),
            "must be 0 (half the box) or positive",
        ));
    }
    let norder =
        usize::try_from(norder).map_err(|_| bad("norder", norder.to_string(), "must be 3 to 6"))?;
    let needed = 1 + 9 * nmol;
    let random_path = app_common::resolve_input(params.str("random")?);
    match params.str("short_random")? {
        "zero" => {}
        "error" if randoms.len() >= needed => {}
        "error" => {
            return Err(AppError::BadInput {
                path: random_path,
                why: format!(
                    "it holds {} numbers, and {nmol} molecules need {needed} (one discarded, then x, y, z for each of 3 atoms per molecule); the file looks cut short: give a complete file, or --param short_random=zero to take 0 for the velocities past its end as SPLASH-2 does",
                    randoms.len()
                ),
            })
        }
        other => {
            return Err(AppError::BadParam {
                name: "short_random".into(),
                value: other.into(),
                why: "expected `error` or `zero`".into(),
            })
        }
    }
    let sys = System::new(nmol, tstep, norder, cutoff)?;
    let var = physics::initial_state(&sys, &deck::raw_velocities(&randoms, nmol))?;
    Ok(Setup {
        sys,
        var,
        steps,
        nprint: nprint as usize,
    })
}

fn check_fields(sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
    FIELDS
        .iter()
        .try_fold(Check::new(sequential, parallel), |c, f| {
            c.relative(f, TOLERANCE, 1e-9)
        })?
        .done()
}

/// Bytes of Water-spatial's cell grid per cell, from below: the list head (an i64 in the
/// shared heap and in the sequential run's lists) and the cell's lock.
const GRID_BYTES_PER_CELL: u64 = 16;

/// Water-spatial's cell grid as the parameters give it, in floating point (so that a
/// tiny cutoff's grid is measured, not overflowed).
struct GridSize {
    cutoff: f64,
    boxl: f64,
    per_side: f64,
}

impl GridSize {
    fn cells(&self) -> f64 {
        self.per_side.powi(3)
    }

    fn bytes(&self) -> f64 {
        self.cells() * GRID_BYTES_PER_CELL as f64
    }
}

/// The grid of `params` (the deck is read for a `deck` cutoff); `None` for a cutoff that
/// [`setup`] refuses, which then says why.
fn grid_of(params: &Params) -> Result<Option<GridSize>, AppError> {
    let nmol = molecules(params)? as usize;
    let cutoff = if params.str("cutoff")? == "deck" {
        deck::read_deck(&app_common::resolve_input(params.str("deck")?))?.cutoff
    } else {
        params.get::<f64>("cutoff")?
    };
    if !(cutoff >= 0.0 && cutoff.is_finite()) {
        return Ok(None);
    }
    let boxl = physics::box_length(nmol);
    let used = physics::effective_cutoff(boxl, cutoff);
    Ok(Some(GridSize {
        cutoff,
        boxl,
        // As `sp::Grid::new`: floor(BOXL / CUTOFF), at least 1.
        per_side: (boxl / used).floor().max(1.0),
    }))
}

/// SPLASH-2 Water-nsquared.
#[derive(Debug)]
pub struct WaterNsq;

/// SPLASH-2 Water-spatial.
#[derive(Debug)]
pub struct WaterSp;

pub static WATER_NSQ: WaterNsq = WaterNsq;
pub static WATER_SP: WaterSp = WaterSp;

impl App for WaterNsq {
    fn name(&self) -> &'static str {
        "water-nsq"
    }

    fn description(&self) -> &'static str {
        "SPLASH-2 Water-nsquared: O(n^2) molecular dynamics of water, per-molecule locks"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        // Three atoms, three directions, the predictor-corrector's derivatives and forces.
        Ok(molecules(params)? * 600)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let Setup {
            sys,
            mut var,
            steps,
            nprint,
        } = setup(params)?;
        // Timed from the second step on, as the parallel run (`nsq::run`).
        let e = nsq::run(&mut var, &sys, steps, nprint, 1, &[0]);
        Ok(e.to_result())
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        parallel::water_nsq(params, config)
    }

    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        check_fields(sequential, parallel)
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK_NSQ
    }
}

impl App for WaterSp {
    fn name(&self) -> &'static str {
        "water-sp"
    }

    fn description(&self) -> &'static str {
        "SPLASH-2 Water-spatial: molecular dynamics of water on a grid of cells of cutoff size"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let nmol = molecules(params)?;
        // Three atoms, three directions, the predictor-corrector's derivatives and forces;
        // and the cell grid.
        let grid = grid_of(params)?.map_or(0.0, |g| g.bytes());
        Ok((nmol * 600).saturating_add(grid as u64))
    }

    fn data_note(&self, params: &Params) -> Option<String> {
        let g = grid_of(params).ok()??;
        let mols = molecules(params).ok()? as f64 * 600.0;
        let short = |x: f64| {
            if x < 1e6 {
                format!("{x:.0}")
            } else {
                format!("{x:.3e}")
            }
        };
        let cutoff = params.str("cutoff").ok()?;
        let cutoff = if cutoff == "deck" {
            format!("{} (the deck's)", g.cutoff)
        } else {
            cutoff.to_string()
        };
        (g.bytes() > mols).then(|| {
            format!(
                "the cutoff {cutoff} angstrom divides the box of {:.3} angstrom into {}^3 = {} cells, {} GiB of cell lists and locks at {GRID_BYTES_PER_CELL} bytes a cell at least: choose a larger cutoff (the shipped deck's is 6.212752; 0 takes half the box)",
                g.boxl,
                short(g.per_side),
                short(g.cells()),
                short(g.bytes() / (1u64 << 30) as f64),
            )
        })
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let Setup {
            sys,
            var,
            steps,
            nprint,
        } = setup(params)?;
        // Timed from the second step on, as the parallel run (`sp::run`).
        let e = sp::run(&var, &sys, steps, nprint, 1, &[0]);
        Ok(e.to_result())
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        parallel::water_sp(params, config)
    }

    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        check_fields(sequential, parallel)
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK_SP
    }
}

const PAIR_WHAT: &str = "a molecule pair evaluated in INTERF or POTENG: the 14 site-site separations \
     with their periodic images (CSHIFT) and the cutoff test, and the pair's forces or energies \
     when within the cutoff";
const MOLECULE_WHAT: &str = "one molecule through one per-molecule routine: PREDIC, INTRAF, the \
     force scaling that ends INTERF, CORREC, BNDRY, KINETI (its 3 directions) or POTENG's \
     intra-molecular part";

/// Water-nsquared's counted work (crate doc, "Counted work").
pub const WORK_NSQ: &[app_common::WorkKind] = &[
    app_common::WorkKind {
        name: "pair",
        what: PAIR_WHAT,
        host_ns: 115.0,
        // Steps 2 and 3 at 9261 molecules: 3 passes (2 INTERF, 1 POTENG) over the
        // 9261 x 4630 pairs.
        paper_units: 128_635_290,
    },
    app_common::WorkKind {
        name: "molecule",
        what: MOLECULE_WHAT,
        host_ns: 93.0,
        // 9261 molecules x (6 routines in each of 2 steps + POTENG's intra part).
        paper_units: 120_393,
    },
];

/// Water-spatial's counted work (crate doc, "Counted work").
pub const WORK_SP: &[app_common::WorkKind] = &[
    app_common::WorkKind {
        name: "pair",
        what: PAIR_WHAT,
        host_ns: 102.0,
        // Steps 2 and 3 at 9261 molecules: the pairs of neighbouring cells, each seen from
        // both molecules, in 3 passes (2 INTERF, 1 POTENG).
        paper_units: 7_030_116,
    },
    app_common::WorkKind {
        name: "molecule",
        what: MOLECULE_WHAT,
        host_ns: 143.0,
        paper_units: 120_393,
    },
];

#[cfg(test)]
mod tests;
