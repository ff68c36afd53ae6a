//! The force walk, the leapfrog integration and the energy sums.
//!
//! The walk is the hack code's `hackgrav` with monopole cells (the SPLASH quadrupole
//! option is left out): starting at the root with `dsq = rsize^2`, a cell is opened when
//! `theta^2 * |com - x|^2 < dsq` and its children are visited in order 0..8 with `dsq / 4`;
//! otherwise the cell, or a body other than the one being pushed, adds
//! `phi -= m / r` and `acc += m dr / r^3`, where `dr` points from the body to the other
//! node and `r^2 = |dr|^2 + eps^2` (Plummer softening). Each such interaction counts one
//! unit of the body's cost, which the next step's partition balances.
//!
//! Integration is the leapfrog of the original `stepsystem`: after the forces at `x(t)` are
//! known, the velocity, which the last step advanced with the old acceleration, is
//! corrected by `dt/2 (a(t) - a_old)`, giving `v(t) = v(t - dt) + dt/2 (a(t - dt) + a(t))`;
//! then `v' = v + dt/2 a`, `x += dt v'`, `v = v' + dt/2 a`.

use crate::body::{self, ACC, COST, KIN, MASS, PHI, VEL};
use crate::tree::{Node, Tree, NSUB};

/// The constants of the force phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForceParams {
    /// Opening angle: a cell of side `s` at distance `d` is opened when `s / d > theta`.
    pub theta: f64,
    /// Softening length.
    pub eps: f64,
    /// Time step.
    pub dtime: f64,
}

/// The acceleration, potential and interaction count of one body.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gravity {
    pub acc: [f64; 3],
    pub phi: f64,
    pub interactions: u64,
}

struct Walk<'a> {
    tree: Tree<'a>,
    bodies: &'a [f64],
    /// The position the walk reads ([`body::POS`]).
    half: usize,
    me: usize,
    x0: [f64; 3],
    tolsq: f64,
    epssq: f64,
    g: Gravity,
}

impl Walk<'_> {
    /// One interaction with mass `m` at offset `dr` (`drsq = |dr|^2`) from the body.
    fn gravsub(&mut self, dr: [f64; 3], drsq: f64, m: f64) {
        let drsq = drsq + self.epssq;
        let drabs = drsq.sqrt();
        let phii = m / drabs;
        self.g.phi -= phii;
        let mor3 = phii / drsq;
        for (a, d) in self.g.acc.iter_mut().zip(dr) {
            *a += d * mor3;
        }
        self.g.interactions += 1;
    }

    fn offset(&self, p: &[f64]) -> ([f64; 3], f64) {
        let dr = [p[0] - self.x0[0], p[1] - self.x0[1], p[2] - self.x0[2]];
        (dr, dr[0] * dr[0] + dr[1] * dr[1] + dr[2] * dr[2])
    }

    fn walk(&mut self, raw: u32, dsq: f64) {
        match Node::decode(raw) {
            Node::Empty => {}
            Node::Body(b) => {
                if b != self.me {
                    let (dr, drsq) = self.offset(&body::pos(self.bodies, b, self.half));
                    self.gravsub(dr, drsq, body::mass(self.bodies, b));
                }
            }
            Node::Cell(c) => {
                let (dr, drsq) = self.offset(&self.tree.com(c));
                if self.tolsq * drsq < dsq {
                    for k in 0..NSUB {
                        self.walk(self.tree.child(c, k), dsq / 4.0);
                    }
                } else {
                    self.gravsub(dr, drsq, self.tree.mass(c));
                }
            }
        }
    }
}

/// The gravity on body `me` of table `bodies`, at position `half`, from the tree.
pub fn gravity(
    tree: Tree<'_>,
    bodies: &[f64],
    half: usize,
    me: usize,
    theta: f64,
    eps: f64,
) -> Gravity {
    let mut w = Walk {
        tree,
        bodies,
        half,
        me,
        x0: body::pos(bodies, me, half),
        tolsq: theta * theta,
        epssq: eps * eps,
        g: Gravity {
            acc: [0.0; 3],
            phi: 0.0,
            interactions: 0,
        },
    };
    w.walk(Node::Cell(0).encode(), tree.cube.rsize * tree.cube.rsize);
    w.g
}

/// The force phase for `bodies` of table `t` at their position `half`: gravity from the
/// tree, the leapfrog velocity correction (skipped on the first step, when there is no old
/// acceleration) and the kinetic energy; each body's interactions become its cost. Reads
/// position `half` and the mass of every body and the tree; writes the acceleration,
/// potential, velocity, kinetic energy and cost of `bodies` only.
pub fn force_phase(
    tree: Tree<'_>,
    t: &mut [f64],
    bodies: &[u32],
    first_step: bool,
    fp: ForceParams,
    half: usize,
) {
    let dthf = 0.5 * fp.dtime;
    for &b in bodies {
        let b = b as usize;
        let g = gravity(tree, t, half, b, fp.theta, fp.eps);
        let r = body::rec_mut(t, b);
        if !first_step {
            for k in 0..3 {
                let dacc = g.acc[k] - r[ACC + k];
                r[VEL + k] += dacc * dthf;
            }
        }
        r[ACC..ACC + 3].copy_from_slice(&g.acc);
        r[PHI] = g.phi;
        r[COST] = g.interactions as f64;
        let v = [r[VEL], r[VEL + 1], r[VEL + 2]];
        r[KIN] = 0.5 * r[MASS] * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        dsm::work::count(crate::INTERACTION, g.interactions);
    }
}

/// Advances `bodies` of table `t` by one step with their accelerations: `v' = v + dt/2 a`,
/// `x = x + dt v'`, `v = v' + dt/2 a`, reading position `half` and writing the other.
/// Reads and writes the records of `bodies` only.
pub fn advance(bodies: &[u32], t: &mut [f64], dtime: f64, half: usize) {
    let dthf = 0.5 * dtime;
    let (from, to) = (body::POS[half], body::POS[1 - half]);
    for &b in bodies {
        let r = body::rec_mut(t, b as usize);
        for k in 0..3 {
            let dvel = r[ACC + k] * dthf;
            let vel1 = r[VEL + k] + dvel;
            r[to + k] = r[from + k] + vel1 * dtime;
            r[VEL + k] = vel1 + dvel;
        }
        dsm::work::count(crate::TREE, 1);
    }
}

/// Kinetic and potential energy of the system.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Energies {
    pub kinetic: f64,
    pub potential: f64,
}

impl Energies {
    pub fn total(&self) -> f64 {
        self.kinetic + self.potential
    }
}

/// The energy sums over all bodies in index order (one processor does this in the
/// original's `diagnostics`): kinetic `sum kin`, potential `sum m phi / 2`.
pub fn energies(t: &[f64]) -> Energies {
    let mut e = Energies {
        kinetic: 0.0,
        potential: 0.0,
    };
    for r in t.chunks_exact(body::BODY_WORDS) {
        e.kinetic += r[KIN];
        e.potential += 0.5 * r[MASS] * r[PHI];
        dsm::work::count(crate::TREE, 1);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer::plummer;
    use crate::tree::{build_tree, compute_cofm, Cube, TreeStore};

    /// The tree of table `t` at position `half`.
    fn tree_at(t: &[f64], half: usize) -> (TreeStore, Cube) {
        let n = body::count(t);
        let cube = Cube::around(t, half);
        let mut store = TreeStore::new(4 * n + 16);
        let ncell = build_tree(cube, t, half, &mut store.as_mut()).unwrap();
        compute_cofm(&mut store.as_mut(), ncell, t, half);
        (store, cube)
    }

    fn table(pos: &[f64], mass: &[f64]) -> Vec<f64> {
        let mut t = body::from_arrays(pos, &vec![0.0; pos.len()], mass);
        body::set_costs(&mut t, 1);
        t
    }

    /// Direct summation with the same softening.
    fn direct(pos: &[f64], mass: &[f64], me: usize, eps: f64) -> ([f64; 3], f64) {
        let mut acc = [0.0; 3];
        let mut phi = 0.0;
        for b in (0..mass.len()).filter(|&b| b != me) {
            let dr: Vec<f64> = (0..3).map(|k| pos[3 * b + k] - pos[3 * me + k]).collect();
            let r2 = dr.iter().map(|d| d * d).sum::<f64>() + eps * eps;
            phi -= mass[b] / r2.sqrt();
            for k in 0..3 {
                acc[k] += mass[b] * dr[k] / (r2 * r2.sqrt());
            }
        }
        (acc, phi)
    }

    /// Two bodies of mass 1/2 at distance 3 with eps = 4: r = 5, so phi = -1/10 and the
    /// acceleration has magnitude (1/2) 3 / 125 towards the other body.
    #[test]
    fn two_bodies_by_hand() {
        let pos = [0.0, 0.0, 0.0, 3.0, 0.0, 0.0];
        let mass = [0.5, 0.5];
        let t = table(&pos, &mass);
        let (store, cube) = tree_at(&t, 0);
        for theta in [0.0, 1.0, 1.5] {
            let g0 = gravity(store.view(cube), &t, 0, 0, theta, 4.0);
            let g1 = gravity(store.view(cube), &t, 0, 1, theta, 4.0);
            assert_eq!(g0.phi, -0.1);
            assert_eq!(g1.phi, -0.1);
            assert!((g0.acc[0] - 1.5 / 125.0).abs() < 1e-17);
            assert!((g1.acc[0] + 1.5 / 125.0).abs() < 1e-17);
            assert_eq!(g0.interactions, 1);
        }
    }

    /// With theta = 0 every cell is opened, so the walk is direct summation: n - 1
    /// interactions per body and the same forces up to rounding.
    #[test]
    fn theta_zero_is_direct_summation() {
        let n = 300;
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(5, &mut pos, &mut vel, &mut mass);
        let t = table(&pos, &mass);
        let (store, cube) = tree_at(&t, 0);
        for me in [0, 17, 299] {
            let g = gravity(store.view(cube), &t, 0, me, 0.0, 0.05);
            let (acc, phi) = direct(&pos, &mass, me, 0.05);
            assert_eq!(g.interactions, n as u64 - 1);
            assert!((g.phi - phi).abs() <= 1e-13 * phi.abs());
            let amag = acc.iter().map(|a| a * a).sum::<f64>().sqrt();
            for (tree_acc, direct_acc) in g.acc.iter().zip(acc) {
                assert!((tree_acc - direct_acc).abs() <= 1e-12 * amag);
            }
        }
    }

    /// With theta = 1 (SPLASH's default) the monopole tree force stays within a few
    /// percent of direct summation (RMS over bodies), using far fewer interactions.
    #[test]
    fn theta_one_approximates_direct_summation() {
        let n = 1000;
        let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
        plummer(9, &mut pos, &mut vel, &mut mass);
        let t = table(&pos, &mass);
        let (store, cube) = tree_at(&t, 0);
        let (mut err2, mut norm2, mut inter) = (0.0, 0.0, 0);
        for me in 0..n {
            let g = gravity(store.view(cube), &t, 0, me, 1.0, 0.05);
            let (acc, _) = direct(&pos, &mass, me, 0.05);
            err2 += (0..3).map(|k| (g.acc[k] - acc[k]).powi(2)).sum::<f64>();
            norm2 += acc.iter().map(|a| a * a).sum::<f64>();
            inter += g.interactions;
        }
        let rel = (err2 / norm2).sqrt();
        assert!(rel < 0.05, "RMS relative force error {rel}");
        assert!(inter < (n * (n - 1) / 3) as u64, "{inter} interactions");
    }

    /// Leapfrog on a circular two-body orbit (eps = 0): after a full period the bodies
    /// are back near their start and the energy error is O(dt^2) small.
    #[test]
    fn leapfrog_keeps_a_circular_orbit() {
        // Masses 1/2 at +-1/2 on x: separation 1, each circles the origin at radius 1/2
        // with speed v where v^2 / (1/2) = (1/2) / 1^2, so v = 1/2; period 2 pi (1/2) / v.
        let pos = vec![-0.5, 0.0, 0.0, 0.5, 0.0, 0.0];
        let vel = vec![0.0, -0.5, 0.0, 0.0, 0.5, 0.0];
        let mut t = body::from_arrays(&pos, &vel, &[0.5, 0.5]);
        body::set_costs(&mut t, 1);
        let steps = 400;
        let fp = ForceParams {
            theta: 1.0,
            eps: 0.0,
            dtime: 2.0 * std::f64::consts::PI / steps as f64,
        };
        let mut e = Vec::new();
        for step in 0..=steps {
            let half = step % 2;
            let (store, cube) = tree_at(&t, half);
            force_phase(store.view(cube), &mut t, &[0, 1], step == 0, fp, half);
            e.push(energies(&t));
            if step < steps {
                advance(&[0, 1], &mut t, fp.dtime, half);
            }
        }
        let pos = body::pos(&t, 0, steps % 2);
        // E = K + W = 2 (1/2)(1/2)(1/4) - (1/4) / 1 = -1/8.
        assert!((e[0].total() + 0.125).abs() < 1e-15);
        for x in &e {
            assert!((x.total() + 0.125).abs() < 1e-4, "energy {}", x.total());
        }
        assert!(
            (pos[0] + 0.5).abs() < 1e-3 && pos[1].abs() < 1e-2,
            "body 0 at {pos:?}"
        );
    }
}
