//! Tests of the water programs: physical properties of the kernels (forces are minus the
//! gradient of the potential, momentum is conserved, the initial state has the
//! equipartition kinetic energy), the work distributions (every pair once, every cell once),
//! the agreement of the two programs, and emulated parallel schedules against the checker.

use super::*;
use crate::layout::*;
use crate::physics::*;
use app_common::Size;

fn params(size: Size, overrides: &[(&str, &str)]) -> Params {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("water-nsq", PARAMS, size, &o).unwrap()
}

#[test]
fn a_random_file_too_short_for_the_molecules_is_refused_unless_zero_fill_is_asked_for() {
    let Err(e) = setup(&params(Size::Test, &[("molecules", "729")])) else {
        panic!("729 molecules need more velocities than the shipped file holds");
    };
    let e = e.to_string();
    assert!(
        e.contains("holds 5299 numbers") && e.contains("729 molecules need 6562"),
        "{e}"
    );
    setup(&params(
        Size::Test,
        &[("molecules", "729"), ("short_random", "zero")],
    ))
    .unwrap();
    // The paper size (9261 molecules) follows SPLASH-2 with the shipped file.
    setup(&params(Size::Paper, &[("steps", "1")])).unwrap();
}

fn test_setup(overrides: &[(&str, &str)]) -> Setup {
    setup(&params(Size::Test, overrides)).unwrap()
}

fn get(r: &AppResult, field: &str) -> f64 {
    match r.get(field) {
        Some(app_common::Value::F64(x)) => *x,
        other => panic!("field {field}: {other:?}"),
    }
}

fn rel_diff(a: &Energies, b: &Energies) -> f64 {
    let (ra, rb) = (a.to_result(), b.to_result());
    FIELDS
        .iter()
        .map(|f| {
            let (x, y) = (get(&ra, f), get(&rb, f));
            (x - y).abs() / x.abs().max(y.abs()).max(1e-9)
        })
        .fold(0.0, f64::max)
}

/// A molecule in equilibrium geometry with its oxygen at `o`, rotated arbitrarily.
fn molecule_at(o: [f64; 3]) -> Vec<f64> {
    let mut m = vec![0.0; MOL_STRIDE];
    let (c, s) = ((ANGLE / 2.0).cos() * ROH, (ANGLE / 2.0).sin() * ROH);
    // Unit vectors u (bisector) and w (in-plane normal to u).
    let u = [0.6, 0.0, 0.8];
    let w = [0.0, 1.0, 0.0];
    for dir in 0..3 {
        m[f(DISP, dir, O)] = o[dir];
        m[f(DISP, dir, H1)] = o[dir] + c * u[dir] + s * w[dir];
        m[f(DISP, dir, H2)] = o[dir] + c * u[dir] - s * w[dir];
    }
    m
}

fn intra_energy(m: &[f64]) -> f64 {
    let mut e = 0.0;
    poteng_intra(&mut m.to_vec(), &mut e);
    e
}

#[test]
fn predictor_is_exact_for_polynomials_of_the_method_order() {
    // x(t) = sum a_k t^k; in Nordsieck form with a unit step, slot k holds a_k. After one
    // prediction slot j must hold x^(j)(1) / j!, computed here from the polynomial.
    let sys = System::new(64, 1e-15, 6, 0.0).unwrap();
    let a = [0.5, -1.25, 2.0, 0.75, -0.5, 0.125, 0.0625];
    let mut m = vec![0.0; MOL_STRIDE];
    for (k, ak) in a.iter().enumerate() {
        m[f(k, YDIR, O)] = *ak;
    }
    predic(&mut m, &sys);
    for j in 0..7 {
        // d^j/dt^j t^k / j! at t = 1 is C(k, j).
        let expected: f64 = (j..7)
            .map(|k| a[k] * (0..j).fold(1.0, |acc, i| acc * (k - i) as f64 / (i + 1) as f64))
            .sum();
        assert!(
            (m[f(j, YDIR, O)] - expected).abs() < 1e-12,
            "slot {j}: {} vs {expected}",
            m[f(j, YDIR, O)]
        );
    }
}

#[test]
fn corrector_makes_the_acceleration_the_computed_one() {
    let sys = System::new(64, 1e-15, 6, 0.0).unwrap();
    let mut m = vec![0.0; MOL_STRIDE];
    m[f(ACC, XDIR, H2)] = 0.25;
    m[f(FORCES, XDIR, H2)] = 0.75;
    let before = m.clone();
    correc(&mut m, &sys);
    assert_eq!(m[f(ACC, XDIR, H2)], 0.75);
    // A prediction that was right is left alone.
    let mut n = before.clone();
    n[f(FORCES, XDIR, H2)] = 0.25;
    let same = n.clone();
    correc(&mut n, &sys);
    assert_eq!(n, same);
}

#[test]
fn initial_state_has_equilibrium_molecules_zero_momentum_and_equipartition() {
    for nmol in [64, 729] {
        // 729 molecules need more velocities than random.in holds (588 molecules' worth):
        // SPLASH-2's zero velocities past its end, asked for explicitly.
        let s = test_setup(&[("molecules", &nmol.to_string()), ("short_random", "zero")]);
        let var = &s.var;
        let mut momentum = [0.0f64; 3];
        let mut kin = [0.0; 3];
        for m in 0..nmol {
            let mm = mol(var, m);
            let d = |a, b| {
                (0..3)
                    .map(|dir| (mm[f(DISP, dir, a)] - mm[f(DISP, dir, b)]).powi(2))
                    .sum::<f64>()
                    .sqrt()
            };
            assert!((d(O, H1) - ROH).abs() < 1e-12 && (d(O, H2) - ROH).abs() < 1e-12);
            // Law of cosines for the H-O-H angle.
            let cos = (2.0 * ROH * ROH - d(H1, H2).powi(2)) / (2.0 * ROH * ROH);
            assert!((cos.acos() - ANGLE).abs() < 1e-9);
            assert!((0..3).all(|dir| mm[f(DISP, dir, O)] > 0.0 && mm[f(DISP, dir, O)] < s.sys.boxl));
            for dir in 0..3 {
                momentum[dir] +=
                    HMAS * (mm[f(VEL, dir, H1)] + mm[f(VEL, dir, H2)]) + OMAS * mm[f(VEL, dir, O)];
                kin[dir] += kineti(mm, dir);
            }
        }
        let scale = kin[0].sqrt();
        assert!(
            momentum
                .iter()
                .all(|p| p.abs() < 1e-12 * scale * nmol as f64),
            "{momentum:?}"
        );
        // Each direction holds NATMO kT / 2, so the kinetic energy is 3/2 kT per atom.
        assert!(
            (kin[0] - kin[1]).abs() < 1e-12 * kin[0] && (kin[0] - kin[2]).abs() < 1e-12 * kin[0]
        );
        assert!(((kin[0] + kin[1] + kin[2]) * s.sys.fkin - 1.5).abs() < 1e-12);
    }
}

#[test]
fn intra_forces_vanish_at_equilibrium_and_are_minus_the_gradient() {
    let mut m = molecule_at([1.0, 2.0, 3.0]);
    intraf(&mut m);
    assert!((0..3).all(|d| (0..3).all(|a| m[f(FORCES, d, a)].abs() < 1e-12)));
    assert!(intra_energy(&m).abs() < 1e-20);
    // Distort, then compare with central differences of the intra potential.
    m[f(DISP, XDIR, H1)] += 0.05;
    m[f(DISP, ZDIR, H2)] -= 0.08;
    m[f(DISP, YDIR, O)] += 0.03;
    intraf(&mut m);
    let h = 1e-6;
    for dir in 0..3 {
        for atom in 0..3 {
            let (mut p, mut q) = (m.clone(), m.clone());
            p[f(DISP, dir, atom)] += h;
            q[f(DISP, dir, atom)] -= h;
            let grad = (intra_energy(&p) - intra_energy(&q)) / (2.0 * h);
            let force = m[f(FORCES, dir, atom)];
            assert!(
                (force + grad).abs() < 1e-7 * (1.0 + force.abs()),
                "dir {dir} atom {atom}: {force} vs {}",
                -grad
            );
        }
    }
}

#[test]
fn inter_forces_are_minus_the_gradient_and_conserve_momentum() {
    let sys = System::new(512, 1.5e-16, 6, 6.212752).unwrap();
    let a0 = molecule_at([5.0, 5.0, 5.0]);
    let mut b0 = molecule_at([7.6, 5.9, 4.4]);
    b0[f(DISP, XDIR, H1)] += 0.1;
    let energy = |a: &[f64], b: &[f64]| {
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        intraf(&mut a);
        intraf(&mut b);
        let (mut r, mut rf) = (0.0, 0.0);
        poteng_pair(&a, &b, &sys, &mut r, &mut rf);
        r + rf
    };
    let (mut a, mut b) = (a0.clone(), b0.clone());
    intraf(&mut a);
    intraf(&mut b);
    let mut vir = 0.0;
    let p = interf_pair(&a, &b, &sys, &mut vir).expect("the molecules interact");
    let (mut fa, mut fb) = ([0.0; SLOT], [0.0; SLOT]);
    p.add_to_first(&mut fa);
    p.add_to_second(&mut fb);
    let h = 1e-6;
    for dir in 0..3 {
        let total: f64 = (0..3)
            .map(|atom| fa[dir * 3 + atom] + fb[dir * 3 + atom])
            .sum();
        assert!(total.abs() < 1e-12, "net force {total}");
        for atom in 0..3 {
            let (mut p, mut q) = (a0.clone(), a0.clone());
            p[f(DISP, dir, atom)] += h;
            q[f(DISP, dir, atom)] -= h;
            let grad = (energy(&p, &b0) - energy(&q, &b0)) / (2.0 * h);
            let force = fa[dir * 3 + atom];
            assert!(
                (force + grad).abs() < 1e-6 * (1.0 + force.abs()),
                "dir {dir} atom {atom}: {force} vs {}",
                -grad
            );
        }
    }
    // Far apart (beyond the cutoff for every site), nothing is computed.
    let far = molecule_at([12.0, 12.0, 12.0]);
    let mut far_m = far.clone();
    intraf(&mut far_m);
    assert!(interf_pair(&a, &far_m, &sys, &mut vir).is_none());
}

#[test]
fn nsquared_computes_every_pair_once_and_flushes_every_touched_molecule() {
    for nmol in [2, 7, 8, 27, 64] {
        for nprocs in 1..=5.min(nmol) {
            let mut seen = vec![vec![0; nmol]; nmol];
            for id in 0..nprocs {
                let flushed: Vec<usize> = nsq::flush_ranges(id, nprocs, nmol)
                    .iter()
                    .flat_map(|r| r.clone())
                    .collect();
                for m in nsq::mols_of(id, nprocs, nmol) {
                    for c in nsq::partners(m, nmol) {
                        seen[m.min(c)][m.max(c)] += 1;
                        assert!(
                            flushed.contains(&m) && flushed.contains(&c),
                            "nmol {nmol} procs {nprocs} id {id}"
                        );
                    }
                }
            }
            for (i, row) in seen.iter().enumerate() {
                for (j, &times) in row.iter().enumerate().skip(i + 1) {
                    assert_eq!(
                        times, 1,
                        "pair ({i}, {j}) with nmol {nmol}, nprocs {nprocs}"
                    );
                }
            }
            let covered: usize = (0..nprocs)
                .map(|p| nsq::mols_of(p, nprocs, nmol).len())
                .sum();
            assert_eq!(covered, nmol);
        }
    }
}

#[test]
fn cells_are_partitioned_among_processors() {
    assert_eq!(sp::proc_grid(1), [1, 1, 1]);
    assert_eq!(sp::proc_grid(4), [1, 2, 2]);
    assert_eq!(sp::proc_grid(8), [2, 2, 2]);
    assert_eq!(sp::proc_grid(12), [2, 2, 3]);
    assert_eq!(sp::proc_grid(7), [1, 1, 7]);
    for bps in [2, 4, 10] {
        let grid = sp::Grid {
            bps,
            box_length: 1.0,
        };
        for nprocs in [1, 2, 3, 4, 8, 16, 32] {
            if nprocs > grid.cells() {
                continue;
            }
            let mut owner = vec![usize::MAX; grid.cells()];
            for id in 0..nprocs {
                for c in sp::own_cells(id, nprocs, &grid) {
                    assert_eq!(owner[c], usize::MAX, "cell {c} owned twice");
                    owner[c] = id;
                }
            }
            assert!(owner.iter().all(|&o| o != usize::MAX));
        }
    }
}

#[test]
fn neighbour_cells_are_those_within_one_cell_periodically() {
    for bps in [1usize, 2, 3, 5] {
        let grid = sp::Grid {
            bps,
            box_length: 1.0,
        };
        for c in 0..grid.cells() {
            let mut got = sp::neighbors(c, &grid);
            let n = got.len();
            got.sort_unstable();
            got.dedup();
            assert_eq!(got.len(), n, "a neighbour listed twice");
            let coords = |c: usize| [c / (bps * bps), c / bps % bps, c % bps];
            let near = |a: usize, b: usize| {
                let d = a.abs_diff(b);
                d <= 1 || d == bps - 1
            };
            let brute: Vec<usize> = (0..grid.cells())
                .filter(|&o| (0..3).all(|k| near(coords(c)[k], coords(o)[k])))
                .collect();
            assert_eq!(got, brute, "bps {bps} cell {c}");
        }
    }
}

#[test]
fn cell_lists_hold_each_molecule_once_in_its_cell() {
    let s = test_setup(&[("molecules", "512")]);
    let grid = sp::Grid::new(&s.sys);
    assert_eq!(grid.bps, 4);
    let (mut recs, mut head) = sp::build_records(&s.var, &grid, 512);
    // Push every molecule across a face, then let BNDRY move them.
    for m in 0..512 {
        for atom in 0..3 {
            sp::rec_mut(&mut recs, m)[f(DISP, XDIR, atom)] += grid.box_length * 0.6;
        }
    }
    let all: Vec<usize> = (0..grid.cells()).collect();
    let mut lists = sp::LocalLists {
        recs: &mut recs,
        head: &mut head,
    };
    sp::bndry_cells(&mut lists, &s.sys, &grid, &all);
    let mut count = vec![0; 512];
    for c in 0..grid.cells() {
        for m in sp::members(&head, &recs, c) {
            count[m] += 1;
            assert_eq!(grid.cell_of(sp::rec(&recs, m)), c);
        }
    }
    assert!(count.iter().all(|&n| n == 1));
}

#[test]
fn the_two_programs_agree_when_spatial_examines_every_pair() {
    // With 2 cells per side every cell neighbours every other, so both programs sum the
    // same pair terms, only in other orders.
    let s = test_setup(&[]);
    assert_eq!(sp::Grid::new(&s.sys).bps, 2);
    let a = nsq::run(&mut s.var.clone(), &s.sys, s.steps, s.nprint, 1, &[0]);
    let b = sp::run(&s.var, &s.sys, s.steps, s.nprint, 1, &[0]);
    let d = rel_diff(&a, &b);
    assert!(d < 1e-11, "relative difference {d:e}");
}

#[test]
fn emulated_parallel_schedules_pass_the_checker() {
    let s = test_setup(&[("molecules", "216")]);
    let seq_n = nsq::run(&mut s.var.clone(), &s.sys, 3, 3, 1, &[0]);
    let par_n = nsq::run(&mut s.var.clone(), &s.sys, 3, 3, 4, &[3, 1, 2, 0]);
    let seq_s = sp::run(&s.var, &s.sys, 3, 3, 1, &[0]);
    let par_s = sp::run(&s.var, &s.sys, 3, 3, 4, &[2, 0, 3, 1]);
    for (seq, par) in [(seq_n, par_n), (seq_s, par_s)] {
        let d = rel_diff(&seq, &par);
        assert!(d < TOLERANCE / 1000.0, "relative difference {d:e}");
        assert!(check_fields(&seq.to_result(), &par.to_result()).is_ok());
    }
}

#[test]
fn total_energy_is_conserved_once_the_integrator_has_started() {
    // The run starts with zero higher derivatives, so the first few steps carry a startup
    // error of about 1e-3 kT; after it the total energy holds to better than 1e-6 while
    // kinetic and potential energy exchange a hundred thousand times more.
    let s = test_setup(&[("molecules", "216")]);
    let e8 = nsq::run(&mut s.var.clone(), &s.sys, 8, 1, 1, &[0]);
    let e12 = nsq::run(&mut s.var.clone(), &s.sys, 12, 1, 1, &[0]);
    assert!(
        (e12.kinetic - e8.kinetic).abs() > 0.1,
        "{} vs {}",
        e8.kinetic,
        e12.kinetic
    );
    assert!(
        (e8.total - e12.total).abs() < 1e-6,
        "{} vs {}",
        e8.total,
        e12.total
    );
}

#[test]
fn checker_accepts_reordering_and_rejects_real_differences() {
    let a = AppResult::new();
    let build = |x: f64| FIELDS.iter().fold(a.clone(), |r, f| r.f64(f, x));
    assert!(WATER_NSQ
        .check(&build(-12.5), &build(-12.5 * (1.0 + 1e-12)))
        .is_ok());
    let e = WATER_SP
        .check(&build(-12.5), &build(-12.5 * (1.0 + 1e-6)))
        .unwrap_err();
    assert_eq!(e.field, "kinetic");
}

#[test]
fn bad_parameters_are_rejected() {
    let e = setup(&params(Size::Test, &[("molecules", "100")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("must be a") && e.contains("cube"), "{e}");
    let e = setup(&params(Size::Test, &[("norder", "7")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("orders 3 to 6"), "{e}");
    let e = setup(&params(Size::Test, &[("nprint", "0")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 1"), "{e}");
    let e = setup(&params(Size::Test, &[("deck", "/nonexistent.in")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read input file"), "{e}");
}

#[test]
fn sequential_runs_report_the_fields() {
    for app in [&WATER_NSQ as &dyn App, &WATER_SP] {
        let r = app
            .sequential(&params(Size::Test, &[("steps", "1")]))
            .unwrap();
        let names: Vec<&str> = r.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, FIELDS);
        // One step from a 298 K start: the running temperature is still near 298 K.
        assert!((get(&r, "temperature") - 298.0).abs() < 30.0, "{r}");
        assert!(get(&r, "total").is_finite());
    }
}
