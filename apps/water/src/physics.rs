//! The physics both water programs share: the molecule layout, the constants of SPLASH-2
//! `CNSTNT` and `SYSCNS`, the initial state of `INITIA`, and per-molecule and per-pair
//! kernels (intra-molecular forces `INTRAF`, the pair interaction of `INTERF` with its
//! `CSHIFT` periodic boundary and `UPDATE_FORCES` distribution, the pair and molecule
//! terms of `POTENG`, the Gear predictor-corrector `PREDIC`/`CORREC`, `BNDRY` and
//! `KINETI`).
//!
//! The model is the flexible water of Matsuoka, Clementi and Yoshimine (MCY) with the
//! intra-molecular potential of Carravetta and Clementi, as in SPLASH (Singh, Weber and
//! Gupta, "SPLASH: Stanford Parallel Applications for Shared-Memory", 1992). The constants
//! below are the values set in SPLASH-2 `cnstnt.C` and `water.C`; the formulas follow the
//! SPLASH-2 routines named on each kernel, with the same order of floating-point
//! operations, so that a run reproduces the original's arithmetic.
//!
//! Units: lengths in angstrom, masses in atomic mass units, time in units of
//! `UNITT` = 1e-15 s. Derivatives are stored scaled (Nordsieck form): slot `k` of a
//! coordinate holds its `k`-th time derivative times `dt^k / k!`, so the predictor is a
//! Pascal-triangle sum and "velocity" is displacement per step.

use crate::layout::*;
use app_common::AppError;

// Molecular constants (angstrom, radian, a.m.u.), SPLASH-2 cnstnt.C.
pub const ROH: f64 = 0.9572;
pub const ROHI: f64 = 1.0 / ROH;
pub const ROHI2: f64 = ROHI * ROHI;
pub const ANGLE: f64 = 1.824218;
pub const OMAS: f64 = 15.99945;
pub const HMAS: f64 = 1.007825;
pub const WTMOL: f64 = OMAS + 2.0 * HMAS;

// Units (c.g.s.) used to scale variables.
pub const UNITT: f64 = 1.0e-15;
pub const UNITL: f64 = 1.0e-8;
pub const UNITM: f64 = 1.6605655e-24;
pub const BOLTZ: f64 = 1.380662e-16;

// Temperature (K) and density (g/cm^3), SPLASH-2 water.C.
pub const TEMP: f64 = 298.0;
pub const RHO: f64 = 0.9980;

// Intra-molecular force constants, scaled by UNITM / UNITT^2.
const FC11: f64 = 0.512596;
const FC33: f64 = 0.048098;
const FC12: f64 = -0.005823;
const FC13: f64 = 0.016452;
const FC111: f64 = -0.57191;
const FC333: f64 = -0.007636;
const FC112: f64 = -0.001867;
const FC113: f64 = -0.002047;
const FC123: f64 = -0.03083;
const FC133: f64 = -0.0094245;
const FC1111: f64 = 0.8431;
const FC3333: f64 = -0.00193;
const FC1112: f64 = -0.0030;
const FC1122: f64 = 0.0036;
const FC1113: f64 = -0.012;
const FC1123: f64 = 0.0060;
const FC1133: f64 = -0.0048;
const FC1233: f64 = 0.0211;
const FC1333: f64 = 0.006263;

// Water-water (MCY) interaction parameters.
const QQ: f64 = 0.07152158;
const A1: f64 = 455.313100;
const B1: f64 = 5.15271070;
const A2: f64 = 0.27879839;
const B2: f64 = 2.76084370;
const A3: f64 = 0.60895706;
const B3: f64 = 2.96189550;
const A4: f64 = 0.11447336;
const B4: f64 = 2.23326410;
const CM: f64 = 0.45682590;
const AB1: f64 = A1 * B1;
const AB2: f64 = A2 * B2;
const AB3: f64 = A3 * B3;
const AB4: f64 = A4 * B4;
/// Weight of the oxygen in the charge site M = C1 * O + C2 * (H1 + H2).
pub const C1: f64 = 1.0 - CM;
/// Weight of each hydrogen in the charge site M.
pub const C2: f64 = 0.50 * CM;
const QQ2: f64 = 2.00 * QQ;
const QQ4: f64 = 2.00 * QQ2;

/// The constants of one run: SPLASH-2 `SYSCNS` and `CNSTNT` for a number of molecules,
/// a time step, an order and a cutoff.
#[derive(Clone, Debug, PartialEq)]
pub struct System {
    pub nmol: usize,
    /// Order of the predictor-corrector (3 to 6).
    pub norder: usize,
    /// Time step in units of `UNITT`.
    pub tstep: f64,
    /// Box side (angstrom).
    pub boxl: f64,
    pub boxh: f64,
    pub cutoff: f64,
    pub cut2: f64,
    ref1: f64,
    ref2: f64,
    ref4: f64,
    /// `dt^2 / 2 / mass` for hydrogen and oxygen: force to scaled acceleration.
    fhm: f64,
    fom: f64,
    /// Scales for potential and kinetic energy (to units of kT per atom).
    pub fpot: f64,
    pub fkin: f64,
    /// `pred[func][k]`: weight of slot `k` in the prediction of slot `func` (binomial).
    pred: [[f64; MAXODR]; MAXODR],
    /// Corrector coefficients (Gear, for a second-order equation).
    pcc: [f64; MAXODR],
}

/// The side of the cubic box of `nmol` molecules, in angstrom.
pub fn box_length(nmol: usize) -> f64 {
    (nmol as f64 * WTMOL * UNITM / RHO).powf(1.00 / 3.00) / UNITL
}

/// The cutoff radius the simulation uses for the parameter `cutoff` (angstrom): half the
/// box for 0, at most 11.
pub fn effective_cutoff(boxl: f64, cutoff: f64) -> f64 {
    let cutoff = if cutoff == 0.0 { boxl * 0.50 } else { cutoff };
    cutoff.min(11.0)
}

impl System {
    /// `tstep_s` in seconds; `cutoff` in angstrom, 0 for half the box (at most 11).
    pub fn new(nmol: usize, tstep_s: f64, norder: usize, cutoff: f64) -> Result<System, AppError> {
        if !(3..=MAXODR - 1).contains(&norder) {
            return Err(AppError::BadParam {
                name: "norder".into(),
                value: norder.to_string(),
                why: format!(
                    "SPLASH-2 water supports orders 3 to {} (MAXODR = {MAXODR})",
                    MAXODR - 1
                ),
            });
        }
        let tstep = tstep_s / UNITT;
        let natmo = (NATOM * nmol) as f64;
        let ul = UNITL / UNITT;
        let fpot = UNITM * (ul * ul) / (BOLTZ * TEMP * natmo);
        let fkin = fpot * 0.50 / (tstep * tstep);
        let boxl = box_length(nmol);
        let boxh = boxl * 0.50;
        let cutoff = effective_cutoff(boxl, cutoff);
        let ref1 = -QQ / (cutoff * cutoff * cutoff);
        let mut pred = [[0.0; MAXODR]; MAXODR];
        for (func, row) in pred.iter_mut().enumerate() {
            for (k, w) in row.iter_mut().enumerate() {
                *w = binomial(k, func);
            }
        }
        // SPLASH-2 cnstnt.C, case NORDER; slot 2 (the acceleration) always has weight 1.
        let pcc: [f64; MAXODR] = match norder {
            3 => [1.0 / 6.00, 5.0 / 6.00, 1.0, 1.0 / 3.00, 0.0, 0.0, 0.0],
            4 => [
                19.00 / 120.00,
                3.00 / 4.00,
                1.0,
                1.0 / 2.00,
                1.0 / 12.00,
                0.0,
                0.0,
            ],
            5 => [
                3.00 / 20.00,
                251.00 / 360.00,
                1.0,
                11.00 / 18.00,
                1.0 / 6.00,
                1.0 / 60.00,
                0.0,
            ],
            _ => [
                863.00 / 6048.00,
                665.00 / 1008.00,
                1.0,
                25.00 / 36.00,
                35.00 / 144.00,
                1.0 / 24.00,
                1.0 / 360.00,
            ],
        };
        Ok(System {
            nmol,
            norder,
            tstep,
            boxl,
            boxh,
            cutoff,
            cut2: cutoff * cutoff,
            ref1,
            ref2: 2.00 * ref1,
            ref4: 2.00 * 2.00 * ref1,
            fhm: (tstep * tstep * 0.50) / HMAS,
            fom: (tstep * tstep * 0.50) / OMAS,
            fpot,
            fkin,
            pred,
            pcc,
        })
    }
}

/// `n choose k` as a float (exact for the small arguments used here).
fn binomial(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// Side of the cubic lattice of `nmol` molecules, as SPLASH-2 `INITIA` lays it out
/// (`NS = NMOL^(1/3) - 0.00001`, lattice indices `0 <= i < NS`): `nmol` must be a cube.
pub fn lattice_side(nmol: usize) -> Result<usize, AppError> {
    let ns = (nmol as f64).powf(1.0 / 3.0) - 0.00001;
    let side = (0usize..).find(|&i| (i as f64) >= ns).unwrap_or(0);
    if side * side * side != nmol || nmol == 0 {
        return Err(AppError::BadParam {
            name: "molecules".into(),
            value: nmol.to_string(),
            why: "SPLASH-2 water places the molecules on a cubic lattice, so the count must be a \
                  positive cube such as 64, 512 or 9261"
                .into(),
        });
    }
    Ok(side)
}

/// The initial state of SPLASH-2 `INITIA`: molecules on a cubic lattice in the order
/// x, y, z (z fastest), each in its equilibrium geometry (O-H length `ROH`, angle
/// `ANGLE`) in the x-y plane; velocities from `raw` (see [`crate::deck::raw_velocities`]),
/// centred so that the mean atom velocity is zero and scaled so that the kinetic energy
/// per direction is `NATMO kT / 2`, then divided by the atom's mass (so that each direction
/// has zero total momentum); higher derivatives zero.
pub fn initial_state(sys: &System, raw: &[f64]) -> Result<Vec<f64>, AppError> {
    let nmol = sys.nmol;
    let side = lattice_side(nmol)?;
    assert_eq!(
        raw.len(),
        9 * nmol,
        "raw velocities are 3 atoms x 3 directions per molecule"
    );
    let mut var = vec![0.0; nmol * MOL_STRIDE];
    let ns = (nmol as f64).powf(1.0 / 3.0) - 0.00001;
    let xs = sys.boxl / ns;
    let zero = xs * 0.50;
    let wcos = ROH * (ANGLE * 0.5).cos();
    let wsin = ROH * (ANGLE * 0.5).sin();
    let mut mol = 0;
    let mut xo = zero;
    for _ in 0..side {
        let xh = xo + wcos;
        let mut yo = zero;
        for _ in 0..side {
            let (yh1, yh2) = (yo + wsin, yo - wsin);
            let mut z = zero;
            for _ in 0..side {
                let m = &mut var[mol * MOL_STRIDE..(mol + 1) * MOL_STRIDE];
                for (atom, (x, y)) in [(xh, yh1), (xo, yo), (xh, yh2)].into_iter().enumerate() {
                    m[f(DISP, XDIR, atom)] = x;
                    m[f(DISP, YDIR, atom)] = y;
                    m[f(DISP, ZDIR, atom)] = z;
                }
                mol += 1;
                z += xs;
            }
            yo += xs;
        }
        xo += xs;
    }

    let mut mean = [0.0; NDIR];
    for m in 0..nmol {
        for atom in 0..NATOM {
            for dir in 0..NDIR {
                let v = raw[(m * NATOM + atom) * NDIR + dir];
                var[m * MOL_STRIDE + f(VEL, dir, atom)] = v;
                mean[dir] += v;
            }
        }
    }
    for s in &mut mean {
        *s /= (NATOM * nmol) as f64;
    }
    let mut su = [0.0; NDIR];
    for m in 0..nmol {
        let v = |dir, atom| var[m * MOL_STRIDE + f(VEL, dir, atom)];
        for dir in 0..NDIR {
            let sq = |atom| (v(dir, atom) - mean[dir]) * (v(dir, atom) - mean[dir]);
            su[dir] = su[dir] + (sq(H1) + sq(H2)) / HMAS + sq(O) / OMAS;
        }
    }
    let t = UNITT * sys.tstep / UNITL;
    let fac = BOLTZ * TEMP * (NATOM * nmol) as f64 / UNITM * (t * t);
    let scale = su.map(|s| (fac / s).sqrt());
    let xmas = [HMAS, OMAS, HMAS];
    for m in 0..nmol {
        for atom in 0..NATOM {
            for dir in 0..NDIR {
                let v = &mut var[m * MOL_STRIDE + f(VEL, dir, atom)];
                *v = (*v - mean[dir]) * scale[dir] / xmas[atom];
            }
        }
    }
    Ok(var)
}

/// SPLASH-2 `INTRAF` for one molecule: sets its charge site `VM` and the intra-molecular
/// forces of its atoms in `F[FORCES]` (overwriting them).
pub fn intraf(m: &mut [f64]) {
    let (mut sum, mut r1, mut r2) = (0.0, 0.0, 0.0);
    let mut vr1 = [0.0; NDIR];
    let mut vr2 = [0.0; NDIR];
    for dir in 0..NDIR {
        let (h1, o, h2) = (m[f(DISP, dir, H1)], m[f(DISP, dir, O)], m[f(DISP, dir, H2)]);
        m[vm(dir)] = C1 * o + C2 * (h1 + h2);
        vr1[dir] = o - h1;
        r1 += vr1[dir] * vr1[dir];
        vr2[dir] = o - h2;
        r2 += vr2[dir] * vr2[dir];
        sum += vr1[dir] * vr2[dir];
    }
    let r1 = r1.sqrt();
    let r2 = r2.sqrt();
    let cos = sum / (r1 * r2);
    let sin = (1.0 - cos * cos).sqrt();
    let dt = (cos.acos() - ANGLE) * ROH;
    let dts = dt * dt;
    let dr1 = r1 - ROH;
    let dr1s = dr1 * dr1;
    let dr2 = r2 - ROH;
    let dr2s = dr2 * dr2;
    let r1s = ROH / (r1 * sin);
    let r2s = ROH / (r2 * sin);
    let mut dr11 = [0.0; NDIR];
    let mut dr23 = [0.0; NDIR];
    let mut dt1 = [0.0; NDIR];
    let mut dt3 = [0.0; NDIR];
    for dir in 0..NDIR {
        dr11[dir] = vr1[dir] / r1;
        dr23[dir] = vr2[dir] / r2;
        dt1[dir] = (-dr23[dir] + dr11[dir] * cos) * r1s;
        dt3[dir] = (-dr11[dir] + dr23[dir] * cos) * r2s;
    }
    let mut f1 = FC11 * dr1 + FC12 * dr2 + FC13 * dt;
    let mut f2 = FC33 * dt + FC13 * (dr1 + dr2);
    let mut f3 = FC11 * dr2 + FC12 * dr1 + FC13 * dt;
    f1 += (3.0 * FC111 * dr1s
        + FC112 * (2.0 * dr1 + dr2) * dr2
        + 2.0 * FC113 * dr1 * dt
        + FC123 * dr2 * dt
        + FC133 * dts)
        * ROHI;
    f2 += (3.0 * FC333 * dts
        + FC113 * (dr1s + dr2s)
        + FC123 * dr1 * dr2
        + 2.0 * FC133 * (dr1 + dr2) * dt)
        * ROHI;
    f3 += (3.0 * FC111 * dr2s
        + FC112 * (2.0 * dr2 + dr1) * dr1
        + 2.0 * FC113 * dr2 * dt
        + FC123 * dr1 * dt
        + FC133 * dts)
        * ROHI;
    f1 += (4.0 * FC1111 * dr1s * dr1
        + FC1112 * (3.0 * dr1s + dr2s) * dr2
        + 2.0 * FC1122 * dr1 * dr2s
        + 3.0 * FC1113 * dr1s * dt
        + FC1123 * (2.0 * dr1 + dr2) * dr2 * dt
        + (2.0 * FC1133 * dr1 + FC1233 * dr2 + FC1333 * dt) * dts)
        * ROHI2;
    f2 += (4.0 * FC3333 * dts * dt
        + FC1113 * (dr1s * dr1 + dr2s * dr2)
        + FC1123 * (dr1 + dr2) * dr1 * dr2
        + 2.0 * FC1133 * (dr1s + dr2s) * dt
        + 2.0 * FC1233 * dr1 * dr2 * dt
        + 3.0 * FC1333 * (dr1 + dr2) * dts)
        * ROHI2;
    f3 += (4.0 * FC1111 * dr2s * dr2
        + FC1112 * (3.0 * dr2s + dr1s) * dr1
        + 2.0 * FC1122 * dr1s * dr2
        + 3.0 * FC1113 * dr2s * dt
        + FC1123 * (2.0 * dr2 + dr1) * dr1 * dt
        + (2.0 * FC1133 * dr2 + FC1233 * dr1 + FC1333 * dt) * dts)
        * ROHI2;
    for dir in 0..NDIR {
        let t1 = f1 * dr11[dir] + f2 * dt1[dir];
        let t2 = f3 * dr23[dir] + f2 * dt3[dir];
        m[f(FORCES, dir, H1)] = t1;
        m[f(FORCES, dir, H2)] = t2;
        m[f(FORCES, dir, O)] = -(t1 + t2);
    }
}

/// The intra-molecular virial term of one molecule (after [`intraf`]), added to `lvir`
/// in SPLASH-2's order (direction, then atom).
pub fn intraf_virial(m: &[f64], lvir: &mut f64) {
    for dir in 0..NDIR {
        for atom in 0..NATOM {
            *lvir += m[f(DISP, dir, atom)] * m[f(FORCES, dir, atom)];
        }
    }
}

/// SPLASH-2 `CSHIFT` in one direction: the 14 site-site separations between molecules
/// `a` and `b` (M-M, M-H1, M-H2, H1-M, H2-M, H1-H1, H1-H2, H2-H1, H2-H2, O-O, O-H1,
/// O-H2, H1-O, H2-O), each taken to its minimum image when longer than half the box.
fn cshift(a: &[f64], b: &[f64], dir: usize, sys: &System) -> [f64; 14] {
    let xa = |atom| a[f(DISP, dir, atom)];
    let xb = |atom| b[f(DISP, dir, atom)];
    let (xma, xmb) = (a[vm(dir)], b[vm(dir)]);
    let mut xl = [
        xma - xmb,
        xma - xb(H1),
        xma - xb(H2),
        xa(H1) - xmb,
        xa(H2) - xmb,
        xa(H1) - xb(H1),
        xa(H1) - xb(H2),
        xa(H2) - xb(H1),
        xa(H2) - xb(H2),
        xa(O) - xb(O),
        xa(O) - xb(H1),
        xa(O) - xb(H2),
        xa(H1) - xb(O),
        xa(H2) - xb(O),
    ];
    for x in &mut xl {
        if x.abs() > sys.boxh {
            *x -= if *x < 0.0 { -sys.boxl } else { sys.boxl };
        }
    }
    xl
}

/// The separations of a pair in the three directions and their squared lengths.
struct Separations {
    xl: [[f64; 14]; NDIR],
    rs: [f64; 14],
    /// How many of the first nine (charge-site) distances exceed the cutoff.
    kc: usize,
}

fn separations(a: &[f64], b: &[f64], sys: &System) -> Separations {
    let xl = [
        cshift(a, b, XDIR, sys),
        cshift(a, b, YDIR, sys),
        cshift(a, b, ZDIR, sys),
    ];
    let mut rs = [0.0; 14];
    let mut kc = 0;
    for k in 0..9 {
        rs[k] = xl[0][k] * xl[0][k] + xl[1][k] * xl[1][k] + xl[2][k] * xl[2][k];
        if rs[k] > sys.cut2 {
            kc += 1;
        }
    }
    Separations { xl, rs, kc }
}

/// The force terms of one interacting pair (SPLASH-2 `INTERF` and `UPDATE_FORCES`), from
/// which the forces on either molecule follow.
#[derive(Clone, Debug)]
pub struct PairForce {
    /// `gg[k + 1][dir]`: force of site-site term `k` along `dir`.
    gg: [[f64; NDIR]; 15],
    g110: [f64; NDIR],
    g23: [f64; NDIR],
    g45: [f64; NDIR],
    tt: [f64; NDIR],
    tt2: [f64; NDIR],
}

impl PairForce {
    /// Adds the force on the first molecule of the pair to `dest` (a molecule's `F[slot]`
    /// block, indexed `dir * NATOM + atom`).
    pub fn add_to_first(&self, dest: &mut [f64]) {
        let g = &self.gg;
        for dir in 0..NDIR {
            dest[dir * NATOM + H1] += g[6][dir] + g[7][dir] + g[13][dir] + self.tt[dir] + g[4][dir];
            dest[dir * NATOM + O] += self.g110[dir] + g[11][dir] + g[12][dir] + C1 * self.g23[dir];
            dest[dir * NATOM + H2] += g[8][dir] + g[9][dir] + g[14][dir] + self.tt[dir] + g[5][dir];
        }
    }

    /// Adds the force on the second molecule of the pair to `dest`.
    pub fn add_to_second(&self, dest: &mut [f64]) {
        let g = &self.gg;
        for dir in 0..NDIR {
            dest[dir * NATOM + H1] +=
                -g[6][dir] - g[8][dir] - g[11][dir] - self.tt2[dir] - g[2][dir];
            dest[dir * NATOM + O] += -self.g110[dir] - g[13][dir] - g[14][dir] - C1 * self.g45[dir];
            dest[dir * NATOM + H2] +=
                -g[7][dir] - g[9][dir] - g[12][dir] - self.tt2[dir] - g[3][dir];
        }
    }
}

/// The inter-molecular interaction of molecules `a` and `b` (SPLASH-2 `INTERF`): `None`
/// when all nine charge-site distances exceed the cutoff, otherwise the pair's force terms;
/// the pair's virial terms are added to `lvir` in the original's order. Both molecules'
/// charge sites `VM` must be current.
pub fn interf_pair(a: &[f64], b: &[f64], sys: &System, lvir: &mut f64) -> Option<PairForce> {
    let Separations { xl, mut rs, kc } = separations(a, b, sys);
    if kc == 9 {
        return None;
    }
    let cut2 = sys.cut2;
    let mut ff = [0.0; 14];
    let mut rl = [0.0; 14];
    if rs[0] < cut2 {
        ff[0] = QQ4 / (rs[0] * rs[0].sqrt()) + sys.ref4;
        *lvir += ff[0] * rs[0];
    }
    for k in 1..5 {
        if rs[k] < cut2 {
            ff[k] = -QQ2 / (rs[k] * rs[k].sqrt()) - sys.ref2;
            *lvir += ff[k] * rs[k];
        }
        if rs[k + 4] <= cut2 {
            rl[k + 4] = rs[k + 4].sqrt();
            ff[k + 4] = QQ / (rs[k + 4] * rl[k + 4]) + sys.ref1;
            *lvir += ff[k + 4] * rs[k + 4];
        }
    }
    if kc == 0 {
        let sq = |k: usize| xl[0][k] * xl[0][k] + xl[1][k] * xl[1][k] + xl[2][k] * xl[2][k];
        rs[9] = sq(9);
        rl[9] = rs[9].sqrt();
        ff[9] = AB1 * (-B1 * rl[9]).exp() / rl[9];
        *lvir += ff[9] * rs[9];
        for k in 10..14 {
            let ftemp = AB2 * (-B2 * rl[k - 5]).exp() / rl[k - 5];
            ff[k - 5] += ftemp;
            *lvir += ftemp * rs[k - 5];
            rs[k] = sq(k);
            rl[k] = rs[k].sqrt();
            ff[k] = (AB3 * (-B3 * rl[k]).exp() - AB4 * (-B4 * rl[k]).exp()) / rl[k];
            *lvir += ff[k] * rs[k];
        }
    }
    let mut gg = [[0.0; NDIR]; 15];
    for k in 0..14 {
        for dir in 0..NDIR {
            gg[k + 1][dir] = ff[k] * xl[dir][k];
        }
    }
    let mut p = PairForce {
        gg,
        g110: [0.0; 3],
        g23: [0.0; 3],
        g45: [0.0; 3],
        tt: [0.0; 3],
        tt2: [0.0; 3],
    };
    for dir in 0..NDIR {
        let g = &p.gg;
        p.g110[dir] = g[10][dir] + g[1][dir] * C1;
        p.g23[dir] = g[2][dir] + g[3][dir];
        p.g45[dir] = g[4][dir] + g[5][dir];
        let tt1 = g[1][dir] * C2;
        p.tt[dir] = p.g23[dir] * C2 + tt1;
        p.tt2[dir] = p.g45[dir] * C2 + tt1;
    }
    Some(p)
}

/// The inter-molecular potential energy of a pair (SPLASH-2 `POTENG`), added to `potr`
/// (Coulomb and MCY terms) and `ptrf` (reaction field) in the original's order.
pub fn poteng_pair(a: &[f64], b: &[f64], sys: &System, potr: &mut f64, ptrf: &mut f64) {
    let Separations { xl, mut rs, kc } = separations(a, b, sys);
    if kc == 9 {
        return;
    }
    let mut rl = [0.0; 14];
    for k in 0..9 {
        if rs[k] <= sys.cut2 {
            rl[k] = rs[k].sqrt();
        } else {
            rl[k] = sys.cutoff;
            rs[k] = sys.cut2;
        }
    }
    *potr = *potr - QQ2 / rl[1] - QQ2 / rl[2] - QQ2 / rl[3] - QQ2 / rl[4]
        + QQ / rl[5]
        + QQ / rl[6]
        + QQ / rl[7]
        + QQ / rl[8]
        + QQ4 / rl[0];
    *ptrf = *ptrf
        - sys.ref2 * rs[0]
        - sys.ref1 * ((rs[5] + rs[6] + rs[7] + rs[8]) * 0.5 - rs[1] - rs[2] - rs[3] - rs[4]);
    if kc == 0 {
        for k in 9..14 {
            rl[k] = (xl[0][k] * xl[0][k] + xl[1][k] * xl[1][k] + xl[2][k] * xl[2][k]).sqrt();
        }
        let e = |b: f64, k: usize| (-b * rl[k]).exp();
        *potr = *potr
            + A1 * e(B1, 9)
            + A2 * (e(B2, 5) + e(B2, 6) + e(B2, 7) + e(B2, 8))
            + A3 * (e(B3, 10) + e(B3, 11) + e(B3, 12) + e(B3, 13))
            - A4 * (e(B4, 10) + e(B4, 11) + e(B4, 12) + e(B4, 13));
    }
}

/// The intra-molecular potential energy of one molecule (SPLASH-2 `POTENG`), added to
/// `pota`; also refreshes the molecule's charge site `VM` as the original does.
pub fn poteng_intra(m: &mut [f64], pota: &mut f64) {
    let (x, y, z) = (
        |a| m[f(DISP, XDIR, a)],
        |a| m[f(DISP, YDIR, a)],
        |a| m[f(DISP, ZDIR, a)],
    );
    let site = [
        C1 * x(O) + C2 * (x(H1) + x(H2)),
        C1 * y(O) + C2 * (y(H1) + y(H2)),
        C1 * z(O) + C2 * (z(H1) + z(H2)),
    ];
    let (dx1, dy1, dz1) = (x(O) - x(H1), y(O) - y(H1), z(O) - z(H1));
    let (dx2, dy2, dz2) = (x(O) - x(H2), y(O) - y(H2), z(O) - z(H2));
    let r1 = (dx1 * dx1 + dy1 * dy1 + dz1 * dz1).sqrt();
    let r2 = (dx2 * dx2 + dy2 * dy2 + dz2 * dz2).sqrt();
    let rx = dx1 * dx2 + dy1 * dy2 + dz1 * dz2;
    let cos = rx / (r1 * r2);
    let dt = (cos.acos() - ANGLE) * ROH;
    let dr1 = r1 - ROH;
    let dr2 = r2 - ROH;
    let dr1s = dr1 * dr1;
    let dr2s = dr2 * dr2;
    let drp = dr1 + dr2;
    let dts = dt * dt;
    *pota += (FC11 * (dr1s + dr2s) + FC33 * dts) * 0.5
        + FC12 * dr1 * dr2
        + FC13 * drp * dt
        + (FC111 * (dr1s * dr1 + dr2s * dr2)
            + FC333 * dts * dt
            + FC112 * drp * dr1 * dr2
            + FC113 * (dr1s + dr2s) * dt
            + FC123 * dr1 * dr2 * dt
            + FC133 * drp * dts)
            * ROHI;
    *pota += (FC1111 * (dr1s * dr1s + dr2s * dr2s)
        + FC3333 * dts * dts
        + FC1112 * (dr1s + dr2s) * dr1 * dr2
        + FC1122 * dr1s * dr2s
        + FC1113 * (dr1s * dr1 + dr2s * dr2) * dt
        + FC1123 * drp * dr1 * dr2 * dt
        + FC1133 * (dr1s + dr2s) * dts
        + FC1233 * dr1 * dr2 * dts
        + FC1333 * drp * dts * dt)
        * ROHI2;
    m[vm(XDIR)] = site[0];
    m[vm(YDIR)] = site[1];
    m[vm(ZDIR)] = site[2];
}

/// SPLASH-2 `PREDIC` for one molecule: the Taylor (Pascal-triangle) prediction of the
/// displacement and its derivatives up to order `norder - 1`.
pub fn predic(m: &mut [f64], sys: &System) {
    for func in 0..sys.norder {
        for dir in 0..NDIR {
            for atom in 0..NATOM {
                let mut s = 0.0;
                for l in func..sys.norder {
                    s += sys.pred[func][l + 1] * m[f(l + 1, dir, atom)];
                }
                m[f(func, dir, atom)] += s;
            }
        }
    }
}

/// SPLASH-2 `CORREC` for one molecule: corrects every slot by its Gear coefficient times
/// the difference between the computed acceleration (`F[FORCES]`, already scaled) and
/// the predicted one (`F[ACC]`).
pub fn correc(m: &mut [f64], sys: &System) {
    for dir in 0..NDIR {
        for atom in 0..NATOM {
            let y = m[f(FORCES, dir, atom)] - m[f(ACC, dir, atom)];
            for func in 0..=sys.norder {
                m[f(func, dir, atom)] += sys.pcc[func] * y;
            }
        }
    }
}

/// SPLASH-2 `BNDRY` for one molecule: moves the whole molecule back by a box length in
/// each direction where its oxygen has left the box.
pub fn bndry(m: &mut [f64], sys: &System) {
    for dir in 0..NDIR {
        let shift = if m[f(DISP, dir, O)] > sys.boxl {
            -sys.boxl
        } else if m[f(DISP, dir, O)] < 0.00 {
            sys.boxl
        } else {
            continue;
        };
        for atom in [H1, O, H2] {
            m[f(DISP, dir, atom)] += shift;
        }
    }
}

/// One molecule's term of SPLASH-2 `KINETI` in direction `dir`: `sum m v^2` over its atoms.
pub fn kineti(m: &[f64], dir: usize) -> f64 {
    let v = |atom| m[f(VEL, dir, atom)];
    (v(H1) * v(H1) + v(H2) * v(H2)) * HMAS + (v(O) * v(O)) * OMAS
}

/// SPLASH-2 `INTERF`'s last step for one molecule: divides the accumulated forces in slot
/// `dest` by the masses (times `dt^2 / 2`), giving scaled accelerations.
pub fn scale_forces(m: &mut [f64], dest: usize, sys: &System) {
    for dir in 0..NDIR {
        m[f(dest, dir, H1)] *= sys.fhm;
        m[f(dest, dir, O)] *= sys.fom;
        m[f(dest, dir, H2)] *= sys.fhm;
    }
}

/// The global sums of one time step (SPLASH-2's `gl->VIR`, `gl->SUM`, `gl->POTA`, ...),
/// which the parallel version keeps in shared memory and updates under locks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepSums {
    pub vir: f64,
    pub kin: [f64; NDIR],
    pub pota: f64,
    pub potr: f64,
    pub potrf: f64,
}

/// The running totals of `MDMAIN` (private to each processor in the original, which all
/// compute the same values from the shared sums).
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    ttmv: f64,
    tkin: f64,
    tvir: f64,
}

impl Totals {
    /// Adds one step's kinetic sums and virial (after the step's last barrier).
    pub fn add_step(&mut self, s: &StepSums) {
        self.ttmv += 1.00;
        self.tkin = self.tkin + s.kin[0] + s.kin[1] + s.kin[2];
        self.tvir -= s.vir;
    }
}

/// The printed quantities of `MDMAIN` after a potential-energy step, in units of kT per
/// atom (energies) and kelvin (temperature averaged over the steps so far).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Energies {
    pub kinetic: f64,
    pub intra_potential: f64,
    pub inter_potential: f64,
    pub reaction_field: f64,
    pub total: f64,
    pub temperature: f64,
    pub virial: f64,
}

impl Energies {
    pub fn new(sys: &System, s: &StepSums, t: &Totals) -> Energies {
        let pota = s.pota * sys.fpot;
        let potr = s.potr * sys.fpot;
        let potrf = s.potrf * sys.fpot;
        let ten = (s.kin[0] + s.kin[1] + s.kin[2]) * sys.fkin;
        Energies {
            kinetic: ten,
            intra_potential: pota,
            inter_potential: potr,
            reaction_field: potrf,
            total: pota + potr + potrf + ten,
            temperature: t.tkin * sys.fkin * TEMP * 2.00 / (3.00 * t.ttmv),
            virial: t.tvir * sys.fpot * 0.50 / t.ttmv,
        }
    }

    pub fn to_result(self) -> app_common::AppResult {
        app_common::AppResult::new()
            .f64("kinetic", self.kinetic)
            .f64("intra_potential", self.intra_potential)
            .f64("inter_potential", self.inter_potential)
            .f64("reaction_field", self.reaction_field)
            .f64("total", self.total)
            .f64("temperature", self.temperature)
            .f64("virial", self.virial)
    }
}
