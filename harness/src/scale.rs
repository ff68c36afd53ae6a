//! The CPU scale factor of the modeled clock (`DESIGN.md`, "Time: two clocks"): the
//! platform's sequential time for an app at the paper's input over this machine's
//! sequential thread CPU time on the same input. The modeled clock multiplies every
//! compute burst's CPU time by it, so the paper's ratio of communication to computation
//! (the Memory Channel paper's q-ratio) is kept. Never fitted to the results it is meant to
//! reproduce.
//!
//! # One factor for every size
//!
//! The factor is a property of an app's code on the two machines, not of its input, so
//! it is always measured at the paper's input (the only size the platform has a time
//! for) and a modeled run at `--size small` or `test` uses that same factor. Caches and
//! memory make the true ratio drift somewhat with the input; the paper size is the one
//! the paper's figures are about.
//!
//! # The cache
//!
//! A paper-size sequential run can take tens of seconds (Ilink), so this machine's time is measured
//! once and kept in a JSON file: `$CASHMERE_CACHE_DIR/sequential.json`, else
//! `$XDG_CACHE_HOME/cashmere/sequential.json`, else `~/.cache/cashmere/sequential.json`.
//! An entry is keyed by the app, its parameters (the paper's for the scale factor, the
//! run's own for its sequential time) and a fingerprint of this host and build (the CPU
//! model, the build's optimization level, the executable's size and modification time,
//! and whether subnormals were flushed), so a new machine, new parameters or a new build
//! measure again. Entries are added under a lock on the file (`sequential.lock`), since
//! `table --jobs` has several processes measure at once. A file that does not parse is reported,
//! ignored and rewritten; a file that cannot be written is reported, and the run goes on.
//!
//! Node processes (`--exec processes`) never measure: the launching process measured (and
//! cached) before it started them, and they read its measurement from the cache.

use anyhow::{bail, Context};
use app_common::{App, AppResult, Params, Size};
use dsm::platform::Platform;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The least CPU scale factor a modeled run takes (`--cpu-scale`, or measured).
pub const MIN_FACTOR: f64 = 1e-6;
/// The largest CPU scale factor a modeled run takes: a platform a million times slower
/// than this machine. Real factors are between about 0.1 and a few hundred (EM3D's is
/// 123 at the paper's input); far larger ones only make times no run can represent.
pub const MAX_FACTOR: f64 = 1e6;
/// The range of a sequential CPU time in the cache, seconds: a measurement is at least
/// 1 ns, and none lasts 10,000,000 s (116 days).
const CACHED_S: std::ops::RangeInclusive<f64> = 1e-9..=1e7;

/// How a modeled run charges an app's computation, and where the figures come from:
/// counted work at the platform's cost per unit (the default, `dsm::work`), or this
/// machine's CPU time times a scale factor (`--compute measured`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scale {
    /// Measured: virtual ns per ns of this machine's thread CPU time (0 when counted).
    pub factor: f64,
    /// The platform's sequential time at the paper's input, seconds.
    pub platform_seq_s: f64,
    /// Measured: this machine's sequential CPU time at the paper's input, seconds.
    pub our_seq_s: f64,
    /// How the figures were obtained: `measured now (N s)`, `cached in PATH (measured
    /// DATE)`, `given by --cpu-scale`, or what the counted units are.
    pub how: String,
    /// `counted` or `measured` (`dsm::Compute::name`).
    #[serde(default = "measured")]
    pub compute: String,
    /// Counted: the platform's ns per unit of each kind the app counts (`App::work`).
    #[serde(default)]
    pub ns_per_unit: Vec<f64>,
    /// Counted: the kinds' names, in kind order.
    #[serde(default)]
    pub units: Vec<String>,
}

fn measured() -> String {
    "measured".into()
}

impl Scale {
    /// Whether computation is charged by counted work.
    pub fn counted(&self) -> bool {
        self.compute == "counted"
    }

    /// The charge as the cluster takes it.
    pub fn compute(&self) -> dsm::Compute {
        if self.counted() {
            dsm::Compute::Counted { ns_per_unit: self.ns_per_unit.clone() }
        } else {
            dsm::Compute::Measured
        }
    }

    /// Sets `config`'s charge of computation to this one.
    pub fn apply(&self, config: &mut dsm::Config) {
        config.compute = self.compute();
        config.cpu_scale = self.factor;
    }

    /// The charge of the wall clock, which charges nothing.
    pub fn wall() -> Scale {
        Scale {
            factor: 1.0,
            platform_seq_s: 0.0,
            our_seq_s: 0.0,
            how: "wall clock: no scaling".into(),
            compute: measured(),
            ns_per_unit: Vec::new(),
            units: Vec::new(),
        }
    }
}

impl std::fmt::Display for Scale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.counted() {
            let costs: Vec<String> = self
                .units
                .iter()
                .zip(&self.ns_per_unit)
                .map(|(u, ns)| format!("{ns:.4} ns per {u}"))
                .collect();
            write!(
                f,
                "counted work, {} ({})",
                costs.join(", "),
                self.how
            )
        } else if self.our_seq_s > 0.0 {
            write!(
                f,
                "measured CPU time x {:.3} ({:.1} s on the platform / {:.2} s CPU here, {})",
                self.factor, self.platform_seq_s, self.our_seq_s, self.how
            )
        } else {
            write!(f, "measured CPU time x {:.3} ({})", self.factor, self.how)
        }
    }
}

/// Which charge of computation a modeled run asks for (`--compute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeChoice {
    /// Counted work where the app counts it, else measured (the default).
    Counted,
    /// This machine's CPU time times the scale factor.
    Measured,
}

impl ComputeChoice {
    /// `counted` or `measured`, as `--compute` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ComputeChoice::Counted => "counted",
            ComputeChoice::Measured => "measured",
        }
    }
}

impl std::str::FromStr for ComputeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "counted" => Ok(ComputeChoice::Counted),
            "measured" => Ok(ComputeChoice::Measured),
            _ => Err("expected counted or measured".to_string()),
        }
    }
}

/// The charge of `app`'s computation on `platform`: counted work at the platform's costs
/// if `choice` is counted and the app counts its work, else measured CPU time (with the
/// `given` factor, or the cached or measured one).
pub fn charge(
    app: &dyn App,
    platform: &Platform,
    given: Option<f64>,
    choice: ComputeChoice,
) -> anyhow::Result<Scale> {
    if choice == ComputeChoice::Measured || app.work().is_empty() {
        let mut s = for_run(app, platform, given)?;
        if choice == ComputeChoice::Counted {
            s.how = format!("{}; {} counts no work, so its CPU time is measured", s.how, app.name());
        }
        return Ok(s);
    }
    let Some(&platform_seq_s) = platform.sequential_s.get(app.name()) else {
        bail!(
            "platform {} has no sequential time for {}, so the modeled clock has no cost per \
             unit of its counted work; add `{} = SECONDS` to the platform file's \
             [sequential_s], or use --compute measured with --cpu-scale",
            platform.name,
            app.name(),
            app.name()
        );
    };
    let Some(ns_per_unit) = app_common::work::ns_per_unit(app.work(), platform_seq_s) else {
        bail!("{}'s declared work at the paper's input weighs nothing; its App::work is wrong", app.name());
    };
    let units: Vec<String> = app.work().iter().map(|k| k.name.to_string()).collect();
    let paper: Vec<String> = app
        .work()
        .iter()
        .map(|k| format!("{} {}s", k.paper_units, k.name))
        .collect();
    Ok(Scale {
        factor: 0.0,
        platform_seq_s,
        our_seq_s: 0.0,
        how: format!(
            "platform {}'s {platform_seq_s} s at the paper's input over its {}",
            platform.name,
            paper.join(" and ")
        ),
        compute: "counted".into(),
        ns_per_unit,
        units,
    })
}

/// Checks a sequential run's counted units against the app's declared paper units, when
/// `params` are the paper's input: a mismatch means the declaration is stale, and the
/// platform's costs per unit would no longer give Table 3's sequential time.
pub fn check_paper_units(app: &dyn App, params: &Params, work: &dsm::work::Tally) -> anyhow::Result<()> {
    let kinds = app.work();
    if kinds.is_empty() {
        return Ok(());
    }
    let paper = Params::resolve(app.name(), app.params(), Size::Paper, &[])?;
    if params_text(&paper) != params_text(params) {
        return Ok(());
    }
    let declared: Vec<u64> = kinds.iter().map(|k| k.paper_units).collect();
    if declared[..] != work[..kinds.len()] {
        bail!(
            "{}'s sequential run at the paper's input counted {:?} units, but the app declares \
             {declared:?} (App::work's paper_units): the declaration is stale; run `cashmere \
             calibrate --apps {}` and update it",
            app.name(),
            &work[..kinds.len()],
            app.name()
        );
    }
    Ok(())
}

/// The scale factor of `app` on `platform`, from the cache or measured now (and cached).
pub fn cpu_scale(app: &dyn App, platform: &Platform) -> anyhow::Result<Scale> {
    let file = cache_file();
    let may_measure = !dsm::host::is_node_process();
    scale_of(app, platform, file.as_deref(), may_measure, &mut |line| {
        dsm::host::report(line)
    })
}

/// The factor a modeled run uses: the one the user gave (`--cpu-scale`), else
/// [`cpu_scale`].
pub fn for_run(app: &dyn App, platform: &Platform, given: Option<f64>) -> anyhow::Result<Scale> {
    match given {
        Some(factor) => Ok(Scale {
            factor,
            platform_seq_s: platform
                .sequential_s
                .get(app.name())
                .copied()
                .unwrap_or(0.0),
            our_seq_s: 0.0,
            how: "given by --cpu-scale".into(),
            compute: measured(),
            ns_per_unit: Vec::new(),
            units: Vec::new(),
        }),
        None => cpu_scale(app, platform),
    }
}

/// [`cpu_scale`] with its cache file, whether it may measure, and where its notes go.
fn scale_of(
    app: &dyn App,
    platform: &Platform,
    cache: Option<&Path>,
    may_measure: bool,
    say: &mut dyn FnMut(String),
) -> anyhow::Result<Scale> {
    let Some(&platform_seq_s) = platform.sequential_s.get(app.name()) else {
        bail!(
            "platform {} has no sequential time for {}, so the modeled clock has no CPU scale \
             factor for it; add `{} = SECONDS` to the platform file's [sequential_s], or give \
             the factor with --cpu-scale",
            platform.name,
            app.name(),
            app.name()
        );
    };
    let params = Params::resolve(app.name(), app.params(), Size::Paper, &[])?;
    let flush = platform.flush_denormals;
    let (our_seq_s, how) = cpu_time(app, &params, cache, may_measure, None, true, flush, say)?;
    let factor = platform_seq_s / our_seq_s;
    if !(MIN_FACTOR..=MAX_FACTOR).contains(&factor) {
        bail!(
            "the CPU scale factor of {} would be {factor:e} (platform {}'s {platform_seq_s} s \
             over this machine's {our_seq_s} s, {how}), outside {MIN_FACTOR:e} to \
             {MAX_FACTOR:e}; check the platform's [sequential_s] time for {}, or give the \
             factor with --cpu-scale",
            app.name(),
            platform.name,
            app.name()
        );
    }
    Ok(Scale {
        factor,
        platform_seq_s,
        our_seq_s,
        how,
        compute: measured(),
        ns_per_unit: Vec::new(),
        units: Vec::new(),
    })
}

/// How many times a sequential run is measured; the least CPU time is kept, since
/// interference (another process, a cold cache, the kernel zeroing fresh pages) only ever
/// adds time. Fewer runs are made once [`SAMPLE_BUDGET_S`] of CPU time is spent.
pub const SAMPLES: usize = 3;
/// The CPU time after which no further sample is taken (a paper-size TSP takes minutes).
const SAMPLE_BUDGET_S: f64 = 4.0;

/// A sequential run: its result, the wall time and thread CPU time of its timed region
/// (`app_common::timing`), and the work it counted there (`dsm::work`).
pub struct Sequential {
    pub result: AppResult,
    pub wall_s: f64,
    /// Under the modeled clock with measured computation, this input's cached CPU time
    /// ([`sequential_cpu`]); else this run's.
    pub cpu_s: f64,
    /// Units of work counted in the timed region, by kind.
    pub work: dsm::work::Tally,
}

impl Sequential {
    /// The sequential time in the clock of a run configured as `config`: under the
    /// modeled clock the counted work at the run's costs per unit, or the CPU time times
    /// the scale factor; else the wall time.
    pub fn time_s(&self, config: &dsm::Config) -> f64 {
        match (config.clock, &config.compute) {
            (dsm::ClockMode::Wall, _) => self.wall_s,
            (dsm::ClockMode::Modeled, dsm::Compute::Counted { ns_per_unit }) => {
                app_common::work::seconds(&self.work, ns_per_unit)
            }
            (dsm::ClockMode::Modeled, dsm::Compute::Measured) => self.cpu_s * config.cpu_scale,
        }
    }
}

/// Runs `app`'s sequential version on `params`, as `cashmere run` and `cashmere table`
/// take it. Under the modeled clock (`modeled`) it computes as the platform does
/// (`Platform::flush_denormals`, as the parallel run's processors do). With measured
/// computation (`measured`), its CPU time is this input's cached one, the least of a few
/// runs of which this is one ([`sequential_cpu`]), so that a repeated cell compares
/// against the same sequential time; with counted work, its units are checked against the
/// app's declaration at the paper's input ([`check_paper_units`]).
pub fn run_sequential(
    app: &dyn App,
    params: &Params,
    platform: &Platform,
    modeled: bool,
    measured: bool,
) -> anyhow::Result<Sequential> {
    let mode = dsm::host::flush_denormals(modeled && platform.flush_denormals);
    let (result, took) = app_common::timing::measure(|| app.sequential(params));
    drop(mode);
    let result = result.with_context(|| format!("sequential {}", app.name()))?;
    let this_run = took.cpu_ns as f64 / 1e9;
    let cpu_s = if modeled && measured {
        sequential_cpu(app, params, Some(this_run), platform)?.0
    } else {
        this_run
    };
    if modeled && !measured {
        check_paper_units(app, params, &took.work)?;
    }
    Ok(Sequential {
        result,
        wall_s: took.wall_ns as f64 / 1e9,
        cpu_s,
        work: took.work,
    })
}

/// This machine's sequential CPU time of `app` on `params`, for a modeled run's
/// sequential time (`run::run_app`): the cached measurement, else the least of up to
/// [`SAMPLES`] runs, of which `first` (a run the caller made anyway) is one, then cached.
/// A repeated cell therefore has the same sequential time, and at the paper's input it is
/// the very measurement behind the scale factor, so the modeled sequential time is the
/// platform's.
pub fn sequential_cpu(
    app: &dyn App,
    params: &Params,
    first: Option<f64>,
    platform: &Platform,
) -> anyhow::Result<(f64, String)> {
    let file = cache_file();
    let may_measure = !dsm::host::is_node_process();
    let flush = platform.flush_denormals;
    cpu_time(app, params, file.as_deref(), may_measure, first, false, flush, &mut |line| {
        dsm::host::report(line)
    })
}

/// The cached sequential CPU time of `app` on `params`, else measured (announced through
/// `say` if `announce`) and cached; with how it was obtained. `flush`: measured with
/// subnormals flushed to zero (`Platform::flush_denormals`), a key of its own.
#[allow(clippy::too_many_arguments)]
fn cpu_time(
    app: &dyn App,
    params: &Params,
    cache: Option<&Path>,
    may_measure: bool,
    first: Option<f64>,
    announce: bool,
    flush: bool,
    say: &mut dyn FnMut(String),
) -> anyhow::Result<(f64, String)> {
    let key = Key {
        app: app.name().to_string(),
        params: params_text(params),
        host: host_fingerprint(flush),
    };
    if let Some(path) = cache {
        if let Some(e) = Cache::load(path, say)?.get(&key) {
            return Ok((
                e.our_seq_s,
                format!("cached in {} (measured {})", path.display(), e.measured),
            ));
        }
    }
    let place = match cache {
        Some(path) => format!("caches it in {}", path.display()),
        None => "cannot cache it (no HOME, XDG_CACHE_HOME or CASHMERE_CACHE_DIR)".into(),
    };
    if !may_measure {
        bail!(
            "node process: this machine's sequential time of {} on {} is not in the cache; \
             the launching process measures it and {place}; make that place writable (or set \
             CASHMERE_CACHE_DIR), or give the factor with --cpu-scale",
            app.name(),
            key.params
        );
    }
    if announce {
        say(format!(
            "measuring {}'s sequential CPU time at the paper's input ({}) on this machine, \
             once: the modeled clock's CPU scale factor is the platform's time over this one; \
             this can take minutes, and cashmere {place}",
            app.name(),
            key.params
        ));
    }
    let mut samples: Vec<f64> = first.into_iter().collect();
    while samples.len() < SAMPLES
        && (samples.is_empty() || samples.iter().sum::<f64>() < SAMPLE_BUDGET_S)
    {
        samples.push(measure(app, params, flush)?);
    }
    let our_seq_s = samples.iter().copied().fold(f64::INFINITY, f64::min);
    if let Some(path) = cache {
        let entry = Entry {
            app: key.app.clone(),
            params: key.params.clone(),
            host: key.host.clone(),
            our_seq_s,
            measured: utc_time(now_unix_s()),
        };
        Cache::add(path, key.text(), entry, say);
    }
    let runs = samples.len();
    Ok((
        our_seq_s,
        format!("measured now ({our_seq_s:.2} s, the least of {runs} run(s))"),
    ))
}

/// The thread CPU time of `app`'s sequential run, in seconds.
/// With `flush`, subnormal numbers are flushed to zero meanwhile.
pub fn measure(app: &dyn App, params: &Params, flush: bool) -> anyhow::Result<f64> {
    let data = app.data_bytes(params)?;
    if let Some(total) = dsm::host::total_memory_bytes() {
        if data > total {
            bail!(
                "{} at the paper's input needs about {:.1} GiB, more than this machine's {:.1} \
                 GiB, so its sequential time cannot be measured here; give the CPU scale factor \
                 with --cpu-scale",
                app.name(),
                data as f64 / (1u64 << 30) as f64,
                total as f64 / (1u64 << 30) as f64
            );
        }
    }
    let mode = dsm::host::flush_denormals(flush);
    // The timed region the app marks (`app_common::timing`), as the parallel run's.
    let (r, took) = app_common::timing::measure(|| app.sequential(params));
    let ns = took.cpu_ns;
    drop(mode);
    r.with_context(|| format!("sequential {}", app.name()))?;
    if ns == 0 {
        bail!(
            "{}'s sequential run took no measurable CPU time, so it gives no scale factor",
            app.name()
        );
    }
    Ok(ns as f64 / 1e9)
}

/// The default cache file (module doc), if there is a place for it.
pub fn cache_file() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = var("CASHMERE_CACHE_DIR")
        .or_else(|| {
            var("XDG_CACHE_HOME")
                .filter(|d| d.is_absolute())
                .map(|d| d.join("cashmere"))
        })
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("cashmere")))?;
    Some(dir.join("sequential.json"))
}

/// What a measurement depends on.
struct Key {
    app: String,
    params: String,
    host: String,
}

impl Key {
    fn text(&self) -> String {
        format!("{} [{}] on {}", self.app, self.params, self.host)
    }
}

/// `key=value` pairs in the app's order.
fn params_text(params: &Params) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// This host's CPU model, the build's optimization level (from `build.rs`), the build
/// itself (the executable's size and modification time: a rebuilt app measures again, as
/// its code may have changed) and whether subnormals were flushed: what makes a
/// measurement reusable.
fn host_fingerprint(flush: bool) -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let fp = if flush { ", subnormals flushed to zero" } else { "" };
    format!("{model}, {}, {}{fp}", env!("CASHMERE_BUILD"), build_identity())
}

/// The running executable as `build <size>-<modification time in ns>`, or `build unknown`.
pub(crate) fn build_identity() -> &'static str {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IDENTITY.get_or_init(|| {
        let meta = std::env::current_exe().and_then(std::fs::metadata);
        match meta.as_ref().map(|m| (m.len(), m.modified())) {
            Ok((len, Ok(modified))) => {
                let ns = modified
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                format!("build {len}-{ns}")
            }
            _ => "build unknown".into(),
        }
    })
}

/// One measurement in the cache file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    app: String,
    params: String,
    host: String,
    our_seq_s: f64,
    /// When, in UTC (`2026-11-23 16:00 UTC`).
    measured: String,
}

/// The largest cache file read: an entry is some 300 bytes.
const MAX_CACHE_FILE_BYTES: u64 = 16 << 20;

/// The cache file's contents.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    /// [`SCHEMA`]; a file with another schema is ignored.
    schema: u32,
    /// By [`Key::text`].
    entries: BTreeMap<String, Entry>,
}

/// 2: an entry is the least of up to [`SAMPLES`] runs, for any input (1 was one run at
/// the paper's input).
const SCHEMA: u32 = 2;

impl Cache {
    /// The cache at `path`: empty if there is none; a file that cannot be read or parsed,
    /// or that another version wrote, is reported through `say` and taken as empty. A file
    /// of this version that holds an impossible time (not from 1 ns to 1e7 s: edited, or
    /// written by a broken build) is an error naming the file: every figure of a modeled
    /// run would follow from it.
    fn load(path: &Path, say: &mut dyn FnMut(String)) -> anyhow::Result<Cache> {
        let text = match dsm::host::read_regular_text(path, MAX_CACHE_FILE_BYTES) {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Ok(Cache::default()),
            Err(e) => {
                say(format!(
                    "cannot read the cache file {}: {e}; measuring again",
                    path.display()
                ));
                return Ok(Cache::default());
            }
        };
        match serde_json::from_str::<Cache>(&text) {
            Ok(c) if c.schema == SCHEMA => {
                if let Some((key, e)) = c.entries.iter().find(|(_, e)| !CACHED_S.contains(&e.our_seq_s)) {
                    bail!(
                        "the cache file {} holds an impossible sequential CPU time, {:e} s, for \
                         {key} (a measurement is from {:e} to {:e} s); delete the file, and \
                         cashmere measures again",
                        path.display(),
                        e.our_seq_s,
                        CACHED_S.start(),
                        CACHED_S.end()
                    );
                }
                Ok(c)
            }
            Ok(_) => {
                say(format!(
                    "ignoring the cache file {}: another version of cashmere wrote it; it will \
                     be rewritten",
                    path.display()
                ));
                Ok(Cache::default())
            }
            Err(e) => {
                say(format!(
                    "ignoring the cache file {}: it is not valid ({e}); it will be rewritten",
                    path.display()
                ));
                Ok(Cache::default())
            }
        }
    }

    fn get(&self, key: &Key) -> Option<&Entry> {
        self.entries
            .get(&key.text())
            .filter(|e| e.app == key.app && e.params == key.params && e.host == key.host)
    }

    /// Adds `entry` to the file at `path` (re-read just before, under an exclusive lock on
    /// `path.lock`, so that what another process added meanwhile stays, as `table --jobs`
    /// has several processes measure at once), writing a temporary file and renaming it so
    /// that a reader never sees half a file. A failure is reported through `say`, not
    /// returned: the measurement is still good for this run.
    fn add(path: &Path, key: String, entry: Entry, say: &mut dyn FnMut(String)) {
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let _lock = dsm::host::lock_file(&path.with_extension("lock"))?;
            let mut cache = Cache::load(path, &mut |_| {}).map_err(std::io::Error::other)?;
            cache.schema = SCHEMA;
            cache.entries.insert(key, entry);
            let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
            let text = serde_json::to_string_pretty(&cache).map_err(std::io::Error::other)?;
            std::fs::write(&tmp, text + "\n")?;
            std::fs::rename(&tmp, path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
        };
        if let Err(e) = write() {
            say(format!(
                "cannot write the cache file {}: {e}; the next modeled run will measure again \
                 (set CASHMERE_CACHE_DIR to a writable directory)",
                path.display()
            ));
        }
    }
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `secs` since the Unix epoch as `YYYY-MM-DD HH:MM UTC` (the civil-from-days algorithm of
/// H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
fn utc_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

#[cfg(test)]
mod tests {

    /// A sequential run at the paper's input whose counts differ from the app's
    /// declaration is refused (the costs per unit would no longer give Table 3's time);
    /// at any other input, counts are not compared.
    #[test]
    fn stale_paper_units_are_refused_at_the_paper_input_only() {
        let app: &dyn App = &app_sor::SOR;
        let paper = Params::resolve("sor", app.params(), Size::Paper, &[]).unwrap();
        let mut work = [0u64; dsm::work::MAX_KINDS];
        work[0] = app.work()[0].paper_units;
        check_paper_units(app, &paper, &work).unwrap();
        work[0] += 1;
        let e = check_paper_units(app, &paper, &work).unwrap_err().to_string();
        assert!(e.contains("stale") && e.contains("cashmere calibrate --apps sor"), "{e}");
        let small = Params::resolve("sor", app.params(), Size::Small, &[]).unwrap();
        check_paper_units(app, &small, &work).unwrap();
    }

    use super::*;
    use app_common::{AppError, AppResult, Mismatch, ParamSpec};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A stand-in app whose sequential run is a short loop, counted.
    struct Fake {
        runs: AtomicUsize,
    }

    const FAKE_PARAMS: &[ParamSpec] = &[ParamSpec {
        name: "n",
        help: "loop length",
        defaults: ["10", "100", "200000"],
    }];

    impl App for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn description(&self) -> &'static str {
            "a loop"
        }
        fn params(&self) -> &'static [ParamSpec] {
            FAKE_PARAMS
        }
        fn data_bytes(&self, _: &Params) -> Result<u64, AppError> {
            Ok(0)
        }
        fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            let n: u64 = params.str("n")?.parse().expect("a number");
            let sum = (0..n).fold(0u64, |s, i| std::hint::black_box(s.wrapping_add(i * i)));
            std::hint::black_box(sum);
            Ok(AppResult::new())
        }
        fn parallel(
            &self,
            _: &Params,
            _: &dsm::Config,
        ) -> Result<(AppResult, dsm::Report<()>), AppError> {
            Err(AppError::Other(
                "the fake app has no parallel version".into(),
            ))
        }
        fn check(&self, _: &AppResult, _: &AppResult) -> Result<(), Mismatch> {
            Ok(())
        }
    }

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("cashmere-scale-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn platform() -> Platform {
        let mut p = dsm::platform::by_name(dsm::platform::DEFAULT).unwrap();
        p.sequential_s.insert("fake".into(), 2.0);
        p
    }

    /// Runs `scale_of` and returns the scale and what it said.
    fn scale(
        app: &Fake,
        cache: Option<&Path>,
        may_measure: bool,
    ) -> (anyhow::Result<Scale>, Vec<String>) {
        let mut said = Vec::new();
        let s = scale_of(app, &platform(), cache, may_measure, &mut |l| said.push(l));
        (s, said)
    }

    #[test]
    fn the_second_call_reads_the_cache() {
        let dir = TempDir::new("second");
        let file = dir.0.join("sub").join("sequential.json");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let (first, said) = scale(&app, Some(&file), true);
        let first = first.unwrap();
        assert_eq!(app.runs.load(Ordering::SeqCst), SAMPLES);
        assert!(first.how.starts_with("measured now ("), "{}", first.how);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0]
                .contains("measuring fake's sequential CPU time at the paper's input (n=200000)"),
            "{said:?}"
        );
        assert!(said[0].contains(&file.display().to_string()), "{said:?}");
        assert_eq!(first.factor, 2.0 / first.our_seq_s);

        let (second, said) = scale(&app, Some(&file), true);
        let second = second.unwrap();
        assert_eq!(
            app.runs.load(Ordering::SeqCst),
            SAMPLES,
            "the second call measured again"
        );
        assert!(said.is_empty(), "{said:?}");
        assert_eq!(second.our_seq_s, first.our_seq_s);
        assert_eq!(second.factor, first.factor);
        assert!(
            second
                .how
                .starts_with(&format!("cached in {} (measured 20", file.display())),
            "{}",
            second.how
        );

        // A node process finds the launcher's measurement and measures nothing.
        let (third, _) = scale(&app, Some(&file), false);
        assert_eq!(third.unwrap().our_seq_s, first.our_seq_s);
        assert_eq!(app.runs.load(Ordering::SeqCst), SAMPLES);
    }

    #[test]
    fn a_run_of_any_input_is_one_sample_and_the_least_is_kept() {
        let dir = TempDir::new("any-input");
        let file = dir.0.join("sequential.json");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let params = Params::resolve("fake", FAKE_PARAMS, Size::Small, &[]).unwrap();
        let cpu = |first| cpu_time(&app, &params, Some(&file), true, first, false, false, &mut |_| {});
        // A first sample far above any real run (but within the budget): the least of the
        // samples is a real one.
        let (s, how) = cpu(Some(SAMPLE_BUDGET_S / 2.0)).unwrap();
        assert_eq!(app.runs.load(Ordering::SeqCst), SAMPLES - 1);
        assert!(s < SAMPLE_BUDGET_S / 2.0, "{s}");
        assert!(how.contains(&format!("the least of {SAMPLES} run(s)")), "{how}");
        // Cached for this input: a repetition gets the same time and measures nothing.
        let (again, how) = cpu(Some(2e6)).unwrap();
        assert_eq!((again, app.runs.load(Ordering::SeqCst)), (s, SAMPLES - 1));
        assert!(how.starts_with("cached in "), "{how}");
        // Another input is another entry.
        let paper = Params::resolve("fake", FAKE_PARAMS, Size::Paper, &[]).unwrap();
        cpu_time(&app, &paper, Some(&file), true, None, false, false, &mut |_| {}).unwrap();
        assert_eq!(app.runs.load(Ordering::SeqCst), 2 * SAMPLES - 1);
        // A sample over the budget is the only one.
        let test = Params::resolve("fake", FAKE_PARAMS, Size::Test, &[]).unwrap();
        let (long, _) =
            cpu_time(&app, &test, Some(&file), true, Some(SAMPLE_BUDGET_S), false, false, &mut |_| {})
                .unwrap();
        assert_eq!((long, app.runs.load(Ordering::SeqCst)), (SAMPLE_BUDGET_S, 2 * SAMPLES - 1));
    }

    #[test]
    fn a_corrupt_cache_is_reported_ignored_and_rewritten() {
        let dir = TempDir::new("corrupt");
        std::fs::create_dir_all(&dir.0).unwrap();
        let file = dir.0.join("sequential.json");
        for garbage in [
            "{ not json",
            "{\"schema\": 7, \"entries\": {}}",
            "[1, 2, 3]",
        ] {
            std::fs::write(&file, garbage).unwrap();
            let app = Fake {
                runs: AtomicUsize::new(0),
            };
            let (s, said) = scale(&app, Some(&file), true);
            assert!(s.is_ok(), "{garbage}: {s:?}");
            assert_eq!(app.runs.load(Ordering::SeqCst), SAMPLES, "{garbage}");
            assert!(
                said[0].starts_with(&format!("ignoring the cache file {}", file.display())),
                "{said:?}"
            );
            assert!(said[0].contains("rewritten"), "{said:?}");
            let mut quiet = Vec::new();
            let reread = Cache::load(&file, &mut |l| quiet.push(l)).unwrap();
            assert!(
                quiet.is_empty(),
                "{garbage}: the cache was not rewritten: {quiet:?}"
            );
            assert_eq!(reread.entries.len(), 1);
        }
    }

    #[test]
    fn a_cache_that_is_not_a_bounded_regular_file_is_not_read() {
        let dir = TempDir::new("fifo");
        std::fs::create_dir_all(&dir.0).unwrap();
        let fifo = dir.0.join("sequential.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let big = dir.0.join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(17 << 20)
            .unwrap();
        for (file, want) in [
            (fifo, "not a regular file"),
            (big, "larger than the limit of 16 MiB"),
        ] {
            // In a thread, so that a read that blocks fails the test instead of hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            let path = file.clone();
            std::thread::spawn(move || {
                let mut said = Vec::new();
                let cache = Cache::load(&path, &mut |l| said.push(l)).unwrap();
                let _ = tx.send((cache.entries.len(), said));
            });
            let (entries, said) = rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("reading {} blocked", file.display()));
            assert_eq!(entries, 0);
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].contains(&file.display().to_string()), "{said:?}");
            assert!(said[0].contains(want), "{said:?}");
        }
    }

    #[test]
    fn an_impossible_cached_time_is_an_error_naming_the_file() {
        let dir = TempDir::new("impossible");
        std::fs::create_dir_all(&dir.0).unwrap();
        let file = dir.0.join("sequential.json");
        for time in ["1e308", "5e-324", "0.0", "-1.0"] {
            std::fs::write(
                &file,
                format!(
                    "{{\"schema\": {SCHEMA}, \"entries\": {{\"k\": {{\"app\": \"fake\", \
                     \"params\": \"n=1\", \"host\": \"h\", \"our_seq_s\": {time}, \
                     \"measured\": \"then\"}}}}}}"
                ),
            )
            .unwrap();
            let app = Fake {
                runs: AtomicUsize::new(0),
            };
            let e = scale(&app, Some(&file), true).0.unwrap_err().to_string();
            assert!(e.contains(&file.display().to_string()), "{time}: {e}");
            assert!(e.contains("impossible") && e.contains("delete the file"), "{time}: {e}");
            assert_eq!(app.runs.load(Ordering::SeqCst), 0, "{time}: measured anyway");
        }
    }

    #[test]
    fn a_factor_out_of_bounds_is_an_error() {
        let dir = TempDir::new("factor");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let mut p = platform();
        p.sequential_s.insert("fake".into(), 1e6);
        let file = dir.0.join("sequential.json");
        let e = scale_of(&app, &p, Some(&file), true, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("CPU scale factor of fake") && e.contains("--cpu-scale"), "{e}");
    }

    #[test]
    fn an_unwritable_cache_is_reported_and_the_run_goes_on() {
        let dir = TempDir::new("unwritable");
        std::fs::create_dir_all(&dir.0).unwrap();
        // A regular file where the cache's directory should be.
        let blocker = dir.0.join("not-a-dir");
        std::fs::write(&blocker, "").unwrap();
        let file = blocker.join("sequential.json");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let (s, said) = scale(&app, Some(&file), true);
        assert!(s.is_ok(), "{s:?}");
        assert!(
            said.iter()
                .any(|l| l.starts_with("cannot write the cache file")),
            "{said:?}"
        );
    }

    #[test]
    fn a_node_process_never_measures() {
        let dir = TempDir::new("node");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let (s, _) = scale(&app, Some(&dir.0.join("sequential.json")), false);
        let e = s.unwrap_err().to_string();
        assert!(
            e.contains("node process") && e.contains("--cpu-scale"),
            "{e}"
        );
        assert_eq!(app.runs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_entry_of_another_host_does_not_count() {
        let dir = TempDir::new("keys");
        let file = dir.0.join("sequential.json");
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        scale(&app, Some(&file), true).0.unwrap();
        let mut said = Vec::new();
        let mut cache = Cache::load(&file, &mut |l| said.push(l)).unwrap();
        let (key, entry) = cache.entries.pop_first().unwrap();
        let mut other_host = entry.clone();
        other_host.host = "Alpha 21164A, release build".into();
        cache.entries.insert(key, other_host);
        std::fs::write(&file, serde_json::to_string(&cache).unwrap()).unwrap();
        scale(&app, Some(&file), true).0.unwrap();
        assert_eq!(
            app.runs.load(Ordering::SeqCst),
            2 * SAMPLES,
            "an entry of another host was used"
        );
    }

    #[test]
    fn an_app_the_platform_has_no_time_for_is_an_error() {
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let p = dsm::platform::by_name(dsm::platform::DEFAULT).unwrap();
        let e = scale_of(&app, &p, None, true, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no sequential time for fake") && e.contains("[sequential_s]"),
            "{e}"
        );
    }

    #[test]
    fn a_given_factor_is_used_as_is() {
        let app = Fake {
            runs: AtomicUsize::new(0),
        };
        let s = for_run(&app, &platform(), Some(3.5)).unwrap();
        assert_eq!((s.factor, s.how.as_str()), (3.5, "given by --cpu-scale"));
        assert_eq!(app.runs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_time(1_700_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(utc_time(4_102_444_799), "2099-12-31 23:59 UTC");
    }
}
