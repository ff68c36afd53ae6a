//! The CPU scale factor of the modeled clock (`DESIGN.md`, "Time: two clocks"): the
//! platform's sequential time for an app at the paper's input over this machine's
//! sequential time on the same input. Never fitted to the results it is meant to reproduce.

use app_common::App;
use dsm::platform::Platform;

/// An app's CPU scale factor and where its parts come from.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[allow(dead_code)] // used by `cashmere table` and `run --clock modeled` (in progress)
pub struct Scale {
    /// Virtual ns per ns of this machine's thread CPU time.
    pub factor: f64,
    /// The platform's sequential time at the paper's input, seconds.
    pub platform_seq_s: f64,
    /// This machine's sequential CPU time at the paper's input, seconds.
    pub our_seq_s: f64,
    /// How `our_seq_s` was obtained (measured now, or read from a cache file).
    pub how: String,
}

/// The scale factor of `app` on `platform` (provisional: measures the paper-size
/// sequential run every time; to be cached).
#[allow(dead_code)]
pub fn cpu_scale(app: &dyn App, platform: &Platform) -> anyhow::Result<Scale> {
    let Some(&platform_seq_s) = platform.sequential_s.get(app.name()) else {
        anyhow::bail!(
            "platform {} has no sequential time for {}; add it to the platform file's sequential_s",
            platform.name,
            app.name()
        );
    };
    let params = app_common::Params::resolve(app.name(), app.params(), app_common::Size::Paper, &[])?;
    let t0 = dsm::sys::thread_cpu_ns();
    app.sequential(&params)?;
    let our_seq_s = (dsm::sys::thread_cpu_ns() - t0) as f64 / 1e9;
    Ok(Scale {
        factor: platform_seq_s / our_seq_s,
        platform_seq_s,
        our_seq_s,
        how: "measured now".into(),
    })
}
