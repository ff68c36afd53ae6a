//! The application registry: every app of the suite, by name.

use app_common::App;

/// All ten applications in the paper's order (Table 3).
pub fn all() -> Vec<&'static dyn App> {
    vec![
        &app_barnes::BARNES,
        &app_lu::CLU,
        &app_lu::LU,
        &app_em3d::EM3D,
        &app_gauss::GAUSS,
        &app_ilink::ILINK,
        &app_sor::SOR,
        &app_tsp::TSP,
        &app_water::WATER_NSQ,
        &app_water::WATER_SP,
    ]
}

/// The app called `name`, or an error listing the valid names.
pub fn by_name(name: &str) -> anyhow::Result<&'static dyn App> {
    let all = all();
    all.iter()
        .copied()
        .find(|a| a.name() == name)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown application `{name}`; valid applications: {}",
                all.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            )
        })
}

/// The parameter that `--input FILE` sets: the app's primary input file.
pub fn input_param(app: &dyn App) -> Option<&'static str> {
    ["input", "deck", "datafile"]
        .into_iter()
        .find(|n| app.params().iter().any(|p| p.name == *n))
}
