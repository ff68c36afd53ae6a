//! Tests of the whole application: the parallel schedule of the crate documentation,
//! played phase by phase on plain arrays, gives the sequential result bit for bit; the
//! checker; parameter and tree errors.

use super::*;
use app_common::Size;

fn params(size: Size, overrides: &[(&str, &str)]) -> Result<Params, AppError> {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Params::resolve("barnes", PARAMS, size, &o)
}

fn config(overrides: &[(&str, &str)]) -> Config {
    Config::from_params(&params(Size::Test, overrides).unwrap()).unwrap()
}

/// The parallel program of the crate documentation with `nprocs` processors. Between two
/// barriers the processors touch disjoint entries, so running them one after another
/// within each phase is one of the interleavings a DSM run can produce.
fn parallel_in_phases(cfg: &Config, nprocs: usize) -> Outcome {
    let n = cfg.nbody;
    let layout = cfg.layout();
    // The shared body records and cells.
    let (mut pos, mut vel, mut mass) = (vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; n]);
    let mut store = TreeStore::new(layout.cells);
    // Processor 0's private record.
    let mut records: Vec<(Energies, u64, usize)> = Vec::new();
    let mut ncell = 0;

    plummer(cfg.seed, &mut pos, &mut vel, &mut mass);
    let mut bodies = body::from_arrays(&pos, &vel, &mass);
    body::set_costs(&mut bodies, 1);
    // barrier
    for step in 0..cfg.nsteps {
        let h = pos_half(step);
        // Phase 1, processor 0 only: the last step's record, then the tree.
        if step > 0 {
            records.push((force::energies(&bodies), body::total_cost(&bodies), ncell));
        }
        let cube = Cube::around(&bodies, h);
        let cube_arr = cube.to_array();
        ncell = tree::build_tree(cube, &bodies, h, &mut store.as_mut()).unwrap();
        tree::compute_cofm(&mut store.as_mut(), ncell, &bodies, h);
        // barrier
        let cube = Cube::from_array(cube_arr);
        let mut mine: Vec<Vec<u32>> = vec![Vec::new(); nprocs];
        for (id, mine) in mine.iter_mut().enumerate() {
            partition::costzone(store.view(cube), &bodies, id, nprocs, mine);
        }
        // barrier
        for mine in &mine {
            force::force_phase(store.view(cube), &mut bodies, mine, step == 0, cfg.force, h);
            force::advance(mine, &mut bodies, cfg.force.dtime, h);
        }
        // barrier
    }
    records.push((force::energies(&bodies), body::total_cost(&bodies), ncell));
    let (last, interactions, cells) = *records.last().unwrap();
    assert_eq!(cells, ncell);
    Outcome {
        first: records[0].0,
        last,
        interactions,
        cells,
    }
}

#[test]
fn parallel_schedule_matches_sequential_bit_for_bit() {
    for cfg in [
        config(&[]),
        config(&[("nbody", "1000"), ("nsteps", "4"), ("seed", "99")]),
    ] {
        let seq = simulate(&cfg).unwrap();
        for nprocs in [1, 2, 3, 4, 8] {
            let par = parallel_in_phases(&cfg, nprocs);
            assert_eq!(par, seq, "{nprocs} processors");
            assert_eq!(BARNES.check(&seq.summary(), &par.summary()), Ok(()));
        }
    }
}

/// The checker is exact: one unit in the last place of any field is a mismatch.
#[test]
fn checker_is_exact() {
    let seq = simulate(&config(&[])).unwrap().summary();
    assert_eq!(BARNES.check(&seq, &seq.clone()), Ok(()));
    for field in ["kinetic", "potential", "energy_drift"] {
        let mut par = seq.clone();
        for (name, v) in par.fields.iter_mut() {
            if name == field {
                if let app_common::Value::F64(x) = v {
                    *x = f64::from_bits(x.to_bits() + 1);
                }
            }
        }
        let e = BARNES.check(&seq, &par).unwrap_err();
        assert_eq!(e.field, field);
        assert_eq!(e.rule, "exact");
    }
    let mut par = seq.clone();
    par.fields.retain(|(n, _)| n != "interactions");
    assert_eq!(BARNES.check(&seq, &par).unwrap_err().field, "interactions");
}

/// The test-size run behaves physically: the energies are those of a Plummer sphere in
/// these units (K near 1/4, W near -1/2; softening and the tree make W a little less
/// negative), the leapfrog keeps the total energy to a small fraction over the run, and
/// the tree code needs far fewer than the n (n - 1) interactions of direct summation.
#[test]
fn test_size_run_is_physical() {
    let cfg = config(&[]);
    let out = simulate(&cfg).unwrap();
    assert!((out.last.kinetic - 0.25).abs() < 0.05, "{out:?}");
    assert!((out.last.potential + 0.5).abs() < 0.1, "{out:?}");
    assert!(out.energy_drift().abs() < 1e-2, "{out:?}");
    let n = cfg.nbody as u64;
    assert!(out.interactions < n * (n - 1) / 2, "{out:?}");
    assert!(out.cells < cfg.layout().cells, "{out:?}");
    let summary = BARNES
        .sequential(&params(Size::Test, &[]).unwrap())
        .unwrap();
    assert_eq!(summary, out.summary());
    let names: Vec<&str> = summary.fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["kinetic", "potential", "energy_drift", "interactions"]
    );
}

/// With one step the first and last energies are the same, so the drift is exactly 0.
#[test]
fn one_step_has_no_drift() {
    let out = simulate(&config(&[("nsteps", "1")])).unwrap();
    assert_eq!(out.energy_drift(), 0.0);
}

#[test]
fn every_size_has_defaults_that_parse() {
    for size in Size::ALL {
        let cfg = Config::from_params(&params(size, &[]).unwrap()).unwrap();
        assert!(cfg.layout().cells >= cfg.nbody);
    }
    assert_eq!(
        Config::from_params(&params(Size::Paper, &[]).unwrap())
            .unwrap()
            .nbody,
        128 * 1024
    );
}

#[test]
fn bad_parameters_are_clear_errors() {
    let bad = |k: &str, v: &str| {
        Config::from_params(&params(Size::Test, &[(k, v)]).unwrap())
            .unwrap_err()
            .to_string()
    };
    assert!(bad("nbody", "1").contains("from 2 to"));
    assert!(bad("dtime", "0").contains("must be positive"));
    assert!(bad("dtime", "x").contains("`dtime` = `x`"));
    assert!(bad("theta", "-1").contains("from 0 to 10"));
    let e = params(Size::Test, &[("tol", "1")]).unwrap_err().to_string();
    assert!(
        e.contains("valid parameters: nbody, seed, nsteps, theta, eps, dtime, fcells"),
        "{e}"
    );
}

/// Too few cells and a time step that throws bodies to infinity are reported, not
/// panics.
#[test]
fn tree_failures_are_reported() {
    let e = simulate(&config(&[("fcells", "0.1")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("raise `fcells`"), "{e}");
    let e = simulate(&config(&[
        ("nbody", "64"),
        ("eps", "0"),
        ("dtime", "1e300"),
        ("nsteps", "3"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("`dtime`"), "{e}");
}
