//! The molecule array, laid out as SPLASH-2's `VAR` (`molecule_type` in `mdvar.h`):
//! per molecule `MOL_STRIDE` = 84 doubles, first the charge site `VM[dir]`, then
//! `F[slot][dir][atom]` for `MXOD2` = 9 slots (slot 0 the displacement, 1 the velocity,
//! 2 the acceleration, 3..=6 higher derivatives, 7 the force accumulator `FORCES`, 8
//! unused), 3 directions and 3 atoms (H1, O, H2). At 9261 molecules the array is 6.2 MB,
//! the 6 MB of the paper's Table 3 for Water-nsquared.
//!
//! Water-spatial's records (SPLASH-2 water-spatial `link_type`, `mdvar.h`: a
//! `molecule_type` followed by the list pointer `next_mol`) are `LINK_STRIDE` = 85 words:
//! the molecule's 84 doubles, then its cell-list link ([`NEXT`], a molecule index as the
//! bits of an `i64`, -1 ending the list).

pub const NDIR: usize = 3;
pub const NATOM: usize = 3;
pub const XDIR: usize = 0;
pub const YDIR: usize = 1;
pub const ZDIR: usize = 2;
pub const H1: usize = 0;
pub const O: usize = 1;
pub const H2: usize = 2;
/// Slots of `F`.
pub const DISP: usize = 0;
pub const VEL: usize = 1;
pub const ACC: usize = 2;
pub const FORCES: usize = 7;
/// Order of the predictor-corrector plus one: slots `0..MAXODR` are derivatives.
pub const MAXODR: usize = 7;
/// Slots per coordinate (`MAXODR + 2`, as in SPLASH-2 `parameters.h`).
pub const MXOD2: usize = MAXODR + 2;
/// Doubles per slot: 3 directions x 3 atoms.
pub const SLOT: usize = NDIR * NATOM;
/// Doubles per molecule.
pub const MOL_STRIDE: usize = NDIR + MXOD2 * SLOT;

/// Words per Water-spatial record: the molecule, then its link.
pub const LINK_STRIDE: usize = MOL_STRIDE + 1;
/// Offset of the link (`next_mol`) in a Water-spatial record.
pub const NEXT: usize = MOL_STRIDE;

/// Offset of `F[slot][dir][atom]` within a molecule.
#[inline]
pub const fn f(slot: usize, dir: usize, atom: usize) -> usize {
    NDIR + (slot * NDIR + dir) * NATOM + atom
}

/// Offset of `VM[dir]` within a molecule.
#[inline]
pub const fn vm(dir: usize) -> usize {
    dir
}

/// The 84 doubles of molecule `m`.
#[inline]
pub fn mol(var: &[f64], m: usize) -> &[f64] {
    &var[m * MOL_STRIDE..(m + 1) * MOL_STRIDE]
}

/// The 84 doubles of molecule `m`, writable.
#[inline]
pub fn mol_mut(var: &mut [f64], m: usize) -> &mut [f64] {
    &mut var[m * MOL_STRIDE..(m + 1) * MOL_STRIDE]
}

/// The 9 doubles of slot `slot` (`[dir][atom]`) of molecule `m`, writable.
#[inline]
pub fn slot_mut(var: &mut [f64], m: usize, slot: usize) -> &mut [f64] {
    let at = m * MOL_STRIDE + f(slot, 0, 0);
    &mut var[at..at + SLOT]
}
