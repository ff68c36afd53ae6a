//! The body records: one shared table of fixed-size records, as SPLASH Barnes keeps its
//! bodies (`bodytab`, an array of `body` structs, SPLASH-2 `codes/apps/barnes/code.C`,
//! `testdata`: `bodytab = G_MALLOC(nbody * sizeof(body))`, filled by the main process).
//!
//! A record is [`BODY_WORDS`] 8-byte words, the size of SPLASH's `body` on a 64-bit
//! machine such as the paper's Alphas (`type`, `mass`, `pos[3]`, `cost`, `level`,
//! `parent`, `child_num`, `vel[3]`, `acc[3]`, `phi`: 16 words, 128 bytes), with this
//! program's fields at the places of SPLASH's:
//!
//! | word  | SPLASH field    | here                                                      |
//! |-------|-----------------|-----------------------------------------------------------|
//! | 0     | `type`          | [`KIN`]: kinetic energy after the velocity correction (SPLASH sums it privately in its diagnostics) |
//! | 1     | `mass`          | [`MASS`]                                                  |
//! | 2-4   | `pos`           | [`POS`]`[0]`: the position of even steps                  |
//! | 5     | `cost`          | [`COST`]: interactions of the last force phase (an integer held in an `f64`) |
//! | 6-8   | `level`, `parent`, `child_num` | [`POS`]`[1]`: the position of odd steps    |
//! | 9-11  | `vel`           | [`VEL`]                                                   |
//! | 12-14 | `acc`           | [`ACC`]                                                   |
//! | 15    | `phi`           | [`PHI`]                                                   |
//!
//! Two positions, because SPLASH advances a processor's bodies right after computing
//! their forces, with no barrier in between (`stepsystem` in SPLASH-2 `code.C`:
//! `ComputeForces`, then "advance my bodies", then `BARRIER(Global->Barpos)`), while
//! other processors' force walks still read those positions: a data race there, which a
//! DSM program may not have. Step `k` reads position [`POS`]`[k % 2]` and its advance
//! writes the other, so a step writes each body's record once, between the same two
//! barriers, as SPLASH does (the crate doc, "Work distribution").

/// Words (`f64`) per body record.
pub const BODY_WORDS: usize = 16;
/// Word of the kinetic energy.
pub const KIN: usize = 0;
/// Word of the mass.
pub const MASS: usize = 1;
/// First words of the two positions: step `k` reads `POS[k % 2]` and writes the other.
pub const POS: [usize; 2] = [2, 6];
/// Word of the cost.
pub const COST: usize = 5;
/// Words of the velocity.
pub const VEL: usize = 9;
/// Words of the acceleration.
pub const ACC: usize = 12;
/// Word of the potential.
pub const PHI: usize = 15;

/// The record of body `b`.
#[inline]
pub fn rec(t: &[f64], b: usize) -> &[f64] {
    &t[b * BODY_WORDS..(b + 1) * BODY_WORDS]
}

/// The record of body `b`, writable.
#[inline]
pub fn rec_mut(t: &mut [f64], b: usize) -> &mut [f64] {
    &mut t[b * BODY_WORDS..(b + 1) * BODY_WORDS]
}

/// Bodies in the table.
pub fn count(t: &[f64]) -> usize {
    t.len() / BODY_WORDS
}

/// Position `half` (0 or 1, [`POS`]) of body `b`.
#[inline]
pub fn pos(t: &[f64], b: usize, half: usize) -> [f64; 3] {
    let r = rec(t, b);
    let at = POS[half];
    [r[at], r[at + 1], r[at + 2]]
}

/// The mass of body `b`.
#[inline]
pub fn mass(t: &[f64], b: usize) -> f64 {
    t[b * BODY_WORDS + MASS]
}

/// The cost of body `b`.
#[inline]
pub fn cost(t: &[f64], b: usize) -> u64 {
    t[b * BODY_WORDS + COST] as u64
}

/// A table of `n` zeroed records.
pub fn table(n: usize) -> Vec<f64> {
    vec![0.0; n * BODY_WORDS]
}

/// Fills position 0, the velocities and the masses of table `t` from separate arrays
/// (three, three and one entries per body).
pub fn fill(t: &mut [f64], pos: &[f64], vel: &[f64], mass: &[f64]) {
    assert_eq!(
        t.len(),
        mass.len() * BODY_WORDS,
        "table and arrays differ in bodies"
    );
    for (b, &m) in mass.iter().enumerate() {
        let r = rec_mut(t, b);
        r[MASS] = m;
        r[POS[0]..POS[0] + 3].copy_from_slice(&pos[3 * b..3 * b + 3]);
        r[VEL..VEL + 3].copy_from_slice(&vel[3 * b..3 * b + 3]);
    }
}

/// A table of the bodies given as separate arrays (tests, and the setup).
pub fn from_arrays(pos: &[f64], vel: &[f64], mass: &[f64]) -> Vec<f64> {
    let mut t = table(mass.len());
    fill(&mut t, pos, vel, mass);
    t
}

/// Sets the cost of every body to `c` (the first step's costs).
pub fn set_costs(t: &mut [f64], c: u64) {
    for r in t.chunks_exact_mut(BODY_WORDS) {
        r[COST] = c as f64;
    }
}

/// The sum of the costs: the interactions of the last force phase.
pub fn total_cost(t: &[f64]) -> u64 {
    t.chunks_exact(BODY_WORDS).map(|r| r[COST] as u64).sum()
}
