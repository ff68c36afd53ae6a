//! Water-nsquared: the O(n^2) molecule-partitioned program (SPLASH-2 `water-nsquared`).
//!
//! Processor `id` owns the contiguous molecules [`mols_of`] (SPLASH-2's `StartMol`:
//! `NMOL / NumProcs` each, the last one also the remainder). Each molecule interacts with
//! the next `NMOL / 2` molecules cyclically ([`comp_last`]; for even `NMOL` half of the
//! molecules take one fewer, so that every pair is computed exactly once). A processor
//! accumulates the forces of its pairs, on both molecules, into a private array
//! (`PFORCES[ProcID]`, [`interf_private`]) and then adds it into each touched molecule's
//! shared force slot under that molecule's lock ([`flush_private_forces`],
//! [`flush_ranges`]).

use crate::layout::*;
use crate::physics::*;
use crate::{Locked, MOLECULE, PAIR};
use dsm::work::count;
use std::ops::Range;

/// Size of SPLASH-2's molecule lock array (`MAXLCKS` in `global.h`): molecule `m` is
/// guarded by lock `m % MAXLCKS`.
pub const MAXLCKS: usize = 4096;

/// The molecules of processor `id` of `nprocs` (SPLASH-2 `StartMol`). Every processor
/// gets at least one molecule when `nmol >= nprocs`, which the parallel version requires.
pub fn mols_of(id: usize, nprocs: usize, nmol: usize) -> Range<usize> {
    let per = nmol / nprocs;
    let start = id * per;
    let end = if id + 1 == nprocs { nmol } else { start + per };
    start..end
}

/// The last partner (before wrapping modulo `nmol`) of molecule `mol`: it interacts with
/// `mol + 1 ..= comp_last(mol)`, taken modulo `nmol` (SPLASH-2 `INTERF`).
pub fn comp_last(mol: usize, nmol: usize) -> usize {
    let half = nmol / 2;
    let mut last = mol + half;
    if nmol.is_multiple_of(2) {
        if half <= mol && mol.is_multiple_of(2) {
            last -= 1;
        }
        if mol < half && last % 2 == 1 {
            last -= 1;
        }
    }
    last
}

/// How many partners molecule `mol` has ([`partners`]).
pub fn pair_count(mol: usize, nmol: usize) -> u64 {
    (comp_last(mol, nmol) - mol) as u64
}

/// The partners of molecule `mol`, in SPLASH-2's order.
pub fn partners(mol: usize, nmol: usize) -> impl Iterator<Item = usize> {
    (mol + 1..=comp_last(mol, nmol)).map(move |c| if c >= nmol { c % nmol } else { c })
}

/// `INTRAF` over `mols`: charge sites and intra-molecular forces; returns the
/// processor's virial term (added to the shared `VIR` under `IntrafVirLock`).
pub fn intraf_range(var: &mut [f64], mols: Range<usize>) -> f64 {
    for m in mols.clone() {
        intraf(mol_mut(var, m));
        count(MOLECULE, 1);
    }
    let mut lvir = 0.0;
    for m in mols {
        intraf_virial(mol(var, m), &mut lvir);
    }
    lvir
}

/// The private half of `INTERF` for the molecules `mols`: zeroes `pforces` (`nmol x 9`,
/// `[mol][dir][atom]`), adds the forces of every pair `(mol, partner)` on both molecules,
/// and returns the processor's virial term (added to `VIR` under `InterfVirLock`). Reads
/// the displacements and charge sites of all molecules; writes only `pforces`.
pub fn interf_private(var: &[f64], sys: &System, mols: Range<usize>, pforces: &mut [f64]) -> f64 {
    let nmol = sys.nmol;
    pforces.fill(0.0);
    let mut lvir = 0.0;
    for m in mols {
        for c in partners(m, nmol) {
            if let Some(p) = interf_pair(mol(var, m), mol(var, c), sys, &mut lvir) {
                p.add_to_first(&mut pforces[m * SLOT..(m + 1) * SLOT]);
                p.add_to_second(&mut pforces[c * SLOT..(c + 1) * SLOT]);
            }
        }
        count(PAIR, pair_count(m, nmol));
    }
    lvir
}

/// The molecules whose private forces processor `id` adds into shared memory (SPLASH-2
/// `INTERF`): from its first molecule up to the last partner of its last molecule, wrapping
/// around to the start (but never into its own range again).
pub fn flush_ranges(id: usize, nprocs: usize, nmol: usize) -> [Range<usize>; 2] {
    let mols = mols_of(id, nprocs, nmol);
    if mols.is_empty() {
        return [0..0, 0..0];
    }
    let last = comp_last(mols.end - 1, nmol);
    if last >= nmol {
        [mols.start..nmol, 0..(last % nmol + 1).min(mols.start)]
    } else {
        [mols.start..last + 1, 0..0]
    }
}

/// Adds the private forces of the molecules in `ranges` into slot `dest` of the shared
/// array, each molecule under its lock `m % MAXLCKS` of `mols`.
pub fn flush_private_forces(
    mols: &mut impl Locked,
    dest: usize,
    pforces: &[f64],
    ranges: &[Range<usize>; 2],
) {
    for m in ranges.iter().flat_map(|r| r.clone()) {
        mols.acquire(m % MAXLCKS);
        for (d, p) in slot_mut(mols.var(), m, dest)
            .iter_mut()
            .zip(&pforces[m * SLOT..(m + 1) * SLOT])
        {
            *d += *p;
        }
        mols.release(m % MAXLCKS);
    }
}

/// The end of `INTERF` over `mols` (after `InterfBar`): forces to scaled accelerations.
pub fn scale_range(var: &mut [f64], dest: usize, sys: &System, mols: Range<usize>) {
    for m in mols {
        scale_forces(mol_mut(var, m), dest, sys);
        count(MOLECULE, 1);
    }
}

/// `PREDIC` over `mols`.
pub fn predic_range(var: &mut [f64], sys: &System, mols: Range<usize>) {
    for m in mols {
        predic(mol_mut(var, m), sys);
        count(MOLECULE, 1);
    }
}

/// `CORREC` then `BNDRY` over `mols`.
pub fn correc_bndry_range(var: &mut [f64], sys: &System, mols: Range<usize>) {
    for m in mols.clone() {
        correc(mol_mut(var, m), sys);
        count(MOLECULE, 1);
    }
    for m in mols {
        bndry(mol_mut(var, m), sys);
        count(MOLECULE, 1);
    }
}

/// `KINETI` over `mols`: the processor's kinetic sums per direction (each added to the
/// shared `SUM[dir]` under `KinetiSumLock`).
pub fn kineti_range(var: &[f64], mols: Range<usize>) -> [f64; NDIR] {
    let mut s = [0.0; NDIR];
    for (dir, s) in s.iter_mut().enumerate() {
        for m in mols.clone() {
            *s += kineti(mol(var, m), dir);
        }
    }
    // One unit a molecule for its three directions (the loops only read).
    count(MOLECULE, mols.len() as u64);
    s
}

/// The first half of `POTENG` over `mols`: intra-molecular potential energy (and fresh
/// charge sites, which the second half reads for all molecules after `PotengBar`).
pub fn poteng_intra_range(var: &mut [f64], mols: Range<usize>) -> f64 {
    let mut pota = 0.0;
    for m in mols {
        poteng_intra(mol_mut(var, m), &mut pota);
        count(MOLECULE, 1);
    }
    pota
}

/// The second half of `POTENG` over `mols`: inter-molecular potential and reaction-field
/// energy of the same pairs as `INTERF`.
pub fn poteng_inter_range(var: &[f64], sys: &System, mols: Range<usize>) -> (f64, f64) {
    let (mut potr, mut ptrf) = (0.0, 0.0);
    for m in mols {
        for c in partners(m, sys.nmol) {
            poteng_pair(mol(var, m), mol(var, c), sys, &mut potr, &mut ptrf);
        }
        count(PAIR, pair_count(m, sys.nmol));
    }
    (potr, ptrf)
}

/// Runs `steps` time steps of SPLASH-2 `MDMAIN` on `var`, computing the potential energy
/// every `nprint` steps and after the last, and returns the energies of the last step.
///
/// The work is split among `nprocs` processors as the parallel version splits it, and the
/// processors run one after another in the order `schedule` within each phase between two
/// of the original's barriers — one of the interleavings the parallel version allows. The
/// sequential version is `nprocs = 1`.
pub fn run(
    var: &mut [f64],
    sys: &System,
    steps: usize,
    nprint: usize,
    nprocs: usize,
    schedule: &[usize],
) -> Energies {
    let nmol = sys.nmol;
    assert!(nprocs >= 1 && nmol >= nprocs && nprint >= 1);
    let mut pforces = vec![vec![0.0; nmol * SLOT]; nprocs];
    let mols = |p: usize| mols_of(p, nprocs, nmol);
    let mut sums = StepSums::default();

    let interf = |var: &mut [f64], dest: usize, sums: &mut StepSums, pforces: &mut [Vec<f64>]| {
        for &p in schedule {
            sums.vir += interf_private(var, sys, mols(p), &mut pforces[p]);
            flush_private_forces(
                &mut crate::Unlocked(var),
                dest,
                &pforces[p],
                &flush_ranges(p, nprocs, nmol),
            );
        }
        // InterfBar
        for &p in schedule {
            scale_range(var, dest, sys, mols(p));
        }
    };

    // Initial accelerations (only the inter-molecular forces reach F[ACC], as in MDMAIN).
    for &p in schedule {
        sums.vir += intraf_range(var, mols(p));
    }
    interf(var, ACC, &mut sums, &mut pforces);

    let mut totals = Totals::default();
    let mut last = None;
    for i in 1..=steps {
        if i == crate::first_timed_step(steps) {
            app_common::timing::start();
        }
        sums = StepSums::default();
        for &p in schedule {
            predic_range(var, sys, mols(p));
            sums.vir += intraf_range(var, mols(p));
        }
        interf(var, FORCES, &mut sums, &mut pforces);
        for &p in schedule {
            correc_bndry_range(var, sys, mols(p));
            let k = kineti_range(var, mols(p));
            for (sum, k) in sums.kin.iter_mut().zip(k) {
                *sum += k;
            }
        }
        totals.add_step(&sums);
        if i % nprint == 0 || i == steps {
            for &p in schedule {
                sums.pota += poteng_intra_range(var, mols(p));
            }
            // PotengBar
            for &p in schedule {
                let (r, rf) = poteng_inter_range(var, sys, mols(p));
                sums.potr += r;
                sums.potrf += rf;
            }
            last = Some(Energies::new(sys, &sums, &totals));
        }
    }
    app_common::timing::stop();
    last.expect("at least one step")
}
