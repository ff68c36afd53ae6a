//! The initial bodies: a Plummer model drawn as SPLASH Barnes' `testdata` does.
//!
//! The algorithm is that of Aarseth, Hénon and Wielen, "A comparison of numerical methods
//! for the study of star cluster dynamics", Astron. Astrophys. 37, 183 (1974), in the units
//! the hack code uses, `G = M = 1` and total energy `E = -1/4`:
//!
//! - every body has mass `1 / nbody`;
//! - the radius in units of the Plummer scale `a` comes from the cumulative mass
//!   `m(r) = r^3 / (1 + r^2)^(3/2)`, inverted at a uniform draw `X` in `[0, MFRAC)`
//!   (`MFRAC = 0.999` cuts off the outermost tenth of a percent of the mass):
//!   `r = (X^(-2/3) - 1)^(-1/2)`;
//! - the speed in units of the local escape speed `sqrt(2) (1 + r^2)^(-1/4)` is a fraction
//!   `q` drawn by rejection from `g(q) = q^2 (1 - q^2)^(7/2)` (a point `(q, y)` uniform in
//!   `[0, 1) x [0, 0.1)` is kept when `y <= g(q)`; the maximum of `g` is about 0.092);
//! - positions and velocities get directions uniform on the sphere (`pickshell`: a point
//!   uniform in the cube `[-1, 1)^3`, kept when inside the unit ball, scaled to length);
//! - lengths are scaled by `a = 3 pi / 16` and speeds by `1 / sqrt(a)`, which makes
//!   `E = -3 pi / (64 a) = -1/4`;
//! - finally the centre of mass and its velocity are moved to the origin.
//!
//! The draws come from `drand48` ([`Rand48`]) seeded with `srand48(seed)` (SPLASH's
//! default seed is 123); the original used its own generator, so the bodies are a
//! different sample of the same distribution. SPLASH-2's version duplicates the sphere into
//! two clusters; SPLASH-1 (which the TreadMarks program follows) draws a single one.

use app_common::rng::Rand48;
use std::f64::consts::PI;

/// The mass fraction kept by the radial cut-off.
pub const MFRAC: f64 = 0.999;

fn xrand(rng: &mut Rand48, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.drand48()
}

/// A vector of length `rad` in a direction uniform on the sphere.
fn pickshell(rng: &mut Rand48, rad: f64) -> [f64; 3] {
    loop {
        let v = [
            xrand(rng, -1.0, 1.0),
            xrand(rng, -1.0, 1.0),
            xrand(rng, -1.0, 1.0),
        ];
        let rsq = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        if rsq <= 1.0 && rsq > 0.0 {
            let s = rad / rsq.sqrt();
            return v.map(|x| x * s);
        }
    }
}

/// Fills `pos`, `vel` (three `f64` per body) and `mass` (one per body) with a Plummer
/// model of `mass.len()` bodies drawn from `seed`.
pub fn plummer(seed: i64, pos: &mut [f64], vel: &mut [f64], mass: &mut [f64]) {
    let n = mass.len();
    assert!(
        n > 0 && pos.len() == 3 * n && vel.len() == 3 * n,
        "arrays of 3n, 3n and n entries"
    );
    let mut rng = Rand48::srand48(seed);
    let rsc = 3.0 * PI / 16.0;
    let vsc = (1.0 / rsc).sqrt();
    for b in 0..n {
        mass[b] = 1.0 / n as f64;
        let r = 1.0 / (xrand(&mut rng, 0.0, MFRAC).powf(-2.0 / 3.0) - 1.0).sqrt();
        pos[3 * b..3 * b + 3].copy_from_slice(&pickshell(&mut rng, rsc * r));
        let q = loop {
            let q = xrand(&mut rng, 0.0, 1.0);
            let y = xrand(&mut rng, 0.0, 0.1);
            if y <= q * q * (1.0 - q * q).powf(3.5) {
                break q;
            }
        };
        let v = 2.0f64.sqrt() * q / (1.0 + r * r).powf(0.25);
        vel[3 * b..3 * b + 3].copy_from_slice(&pickshell(&mut rng, vsc * v));
    }
    for arr in [pos, vel] {
        let mut cm = [0.0f64; 3];
        for p in arr.chunks_exact(3) {
            for k in 0..3 {
                cm[k] += p[k];
            }
        }
        for p in arr.chunks_exact_mut(3) {
            for k in 0..3 {
                p[k] -= cm[k] / n as f64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct-summation kinetic and potential energy (no softening).
    fn energies(pos: &[f64], vel: &[f64], mass: &[f64]) -> (f64, f64) {
        let n = mass.len();
        let mut k = 0.0;
        let mut w = 0.0;
        for i in 0..n {
            k += 0.5 * mass[i] * (0..3).map(|d| vel[3 * i + d].powi(2)).sum::<f64>();
            for j in i + 1..n {
                let r2: f64 = (0..3)
                    .map(|d| (pos[3 * i + d] - pos[3 * j + d]).powi(2))
                    .sum();
                w -= mass[i] * mass[j] / r2.sqrt();
            }
        }
        (k, w)
    }

    /// In these units a Plummer sphere has K = 1/4 and W = -1/2 (virial equilibrium,
    /// E = -1/4); a sample of 2000 bodies meets that within sampling noise of a few
    /// percent (the mass cut-off lowers |W| by well under one percent).
    #[test]
    fn plummer_model_is_in_virial_equilibrium_with_energy_minus_a_quarter() {
        let n = 2000;
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(123, &mut pos, &mut vel, &mut mass);
        let total_mass: f64 = mass.iter().sum();
        assert!((total_mass - 1.0).abs() < 1e-12);
        for arr in [&pos, &vel] {
            for k in 0..3 {
                let cm: f64 = arr.chunks(3).map(|p| p[k]).sum::<f64>() / n as f64;
                assert!(cm.abs() < 1e-12, "centre {cm}");
            }
        }
        let (k, w) = energies(&pos, &vel, &mass);
        assert!((k - 0.25).abs() < 0.025, "kinetic {k}");
        assert!((w + 0.5).abs() < 0.05, "potential {w}");
        assert!(
            (2.0 * k / -w - 1.0).abs() < 0.15,
            "virial ratio {}",
            2.0 * k / -w
        );
    }

    /// Half the mass of a Plummer sphere lies within r = a / sqrt(2^(2/3) - 1) = 1.305 a.
    #[test]
    fn half_mass_radius_matches_the_plummer_profile() {
        let n = 4000;
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(7, &mut pos, &mut vel, &mut mass);
        let a = 3.0 * PI / 16.0;
        let rh = a / (2f64.powf(2.0 / 3.0) - 1.0).sqrt();
        let inside = pos
            .chunks(3)
            .filter(|p| (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt() < rh)
            .count();
        let frac = inside as f64 / n as f64;
        assert!(
            (frac - 0.5).abs() < 0.03,
            "fraction inside the half-mass radius {frac}"
        );
    }

    #[test]
    fn same_seed_same_bodies_other_seed_other_bodies() {
        let gen = |seed| {
            let (mut pos, mut vel, mut mass) = (vec![0.0; 30], vec![0.0; 30], vec![0.0; 10]);
            plummer(seed, &mut pos, &mut vel, &mut mass);
            (pos, vel)
        };
        assert_eq!(gen(123), gen(123));
        assert_ne!(gen(123).0, gen(124).0);
    }
}
