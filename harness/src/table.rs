//! `cashmere table`: the paper's Table 4 and Figure 1 reproduced on our cluster. Every
//! app runs under every variant (a *cell*); each cell is written to `OUT/cells/` as it
//! finishes, so an interrupted table resumes where it stopped. At the end the table is
//! printed in Table 4's layout beside the paper's numbers (`paper.rs`), with a summary of
//! the paper's findings (`table/findings.rs`), and written as JSON, CSV, Markdown and an
//! SVG of Figure 1 (`table/output.rs`, `table/figure.rs`).
//!
//! Homes follow the paper's footnote 4: CSM-DMS runs first for each app, and the homes
//! its first touches chose are replayed in the app's other variants.
//!
//! In process mode (`--exec processes`) every node process re-runs this command from the
//! start and must meet the same cluster runs in the same order (see `dsm::launch`); the
//! parent passes it the cells it has run so far (`--node-plan`), since what the parent
//! keeps or runs depends on files that change while the table runs.

mod figure;
mod findings;
mod jobs;
mod output;

use crate::apps;
use crate::run::ClusterArgs;
use crate::scale::{run_sequential, Scale, Sequential};
use anyhow::{bail, Context};
use app_common::{App, AppResult, Params, Size};
use clap::Args;
use dsm::{Breakdown, ClockMode, Config, Counters, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct TableArgs {
    /// Comma-separated applications [default: all ten].
    #[arg(long)]
    pub apps: Option<String>,
    /// Comma-separated protocol variants [env: DSM_VARIANT, one variant] [default: all
    /// seven].
    #[arg(long)]
    pub variants: Option<String>,
    /// Input size for every app: test, small or paper.
    #[arg(long, default_value = "paper")]
    pub size: String,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    /// Processors per node.
    #[arg(long, default_value_t = 4)]
    pub procs: usize,
    /// Network profile [env: DSM_NETWORK] [default: the platform's, mc2].
    #[arg(long)]
    pub network: Option<String>,
    /// Platform profile whose costs the modeled clock charges and whose sequential times
    /// give the CPU scale factors [env: DSM_PLATFORM] [default: alphaserver-mc2].
    #[arg(long, value_name = "NAME_OR_FILE")]
    pub platform: Option<String>,
    /// wall or modeled [env: DSM_CLOCK] [default: modeled].
    #[arg(long)]
    pub clock: Option<String>,
    /// Modeled clock: counted (each app's counted work at the platform's cost per unit;
    /// a cell repeats exactly) or measured (this machine's CPU time times each app's scale
    /// factor) [env: DSM_COMPUTE] [default: counted].
    #[arg(long, value_name = "counted|measured")]
    pub compute: Option<String>,
    /// Coherence page size in KiB, 4 or 8 [env: DSM_PAGE_KB] [default: 8].
    #[arg(long)]
    pub page_kb: Option<String>,
    /// Directory for the cells, the tables and the figure.
    #[arg(long, default_value = "table-out")]
    pub out: PathBuf,
    /// Run every cell again, even those whose results are in OUT/cells.
    #[arg(long)]
    pub force: bool,
    /// captured (replay CSM-DMS's first-touch homes in the other variants, as the paper's
    /// footnote 4) or first-touch.
    #[arg(long, default_value = "captured")]
    pub homes: String,
    /// threads or processes [env: DSM_EXEC] [default: threads].
    #[arg(long)]
    pub exec: Option<String>,
    /// Fault backend: mprotect or userfaultfd [env: DSM_BACKEND] [default: mprotect].
    #[arg(long)]
    pub backend: Option<String>,
    /// Shared heap per node in MiB [env: DSM_HEAP_MB] [default: 1024].
    #[arg(long)]
    pub heap_mb: Option<String>,
    /// Runs of each cell, of which the fastest verified one is kept (the paper reports
    /// the lowest of three, section 3.1); at most 100.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// How many apps run at once, each in a process of its own bound to a CPU of its own
    /// [default: under the modeled clock in threads mode, one per CPU this process may
    /// use (a modeled run uses one); otherwise 1].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// The cells a node process walks (set by the table for its node processes).
    #[arg(long, hide = true)]
    pub node_plan: Option<String>,
    /// Run the cells and write them, without the table (set by the table for the
    /// processes it runs apps in with `--jobs`).
    #[arg(long, hide = true)]
    pub cells_only: bool,
}

/// Where the variants other than CSM-DMS get their homes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HomesMode {
    /// Replay CSM-DMS's first-touch homes (the paper's footnote 4).
    Captured,
    /// Every variant chooses its own homes by first touch.
    FirstTouch,
}

impl std::str::FromStr for HomesMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "captured" => Ok(HomesMode::Captured),
            "first-touch" => Ok(HomesMode::FirstTouch),
            _ => Err(format!(
                "unknown homes mode `{s}`; valid modes: captured, first-touch"
            )),
        }
    }
}

impl std::fmt::Display for HomesMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HomesMode::Captured => "captured",
            HomesMode::FirstTouch => "first-touch",
        })
    }
}

/// The variant whose homes the others replay.
const HOMES_FROM: &str = "CSM-DMS";

/// The most runs of each cell (`--runs`).
const MAX_RUNS: usize = 100;

/// The largest kept cell file read: a cell is a few KiB of JSON.
const MAX_CELL_FILE_BYTES: u64 = 16 << 20;

/// The CPU a table job binds itself to (set by `--jobs` for the processes it starts).
const JOB_CPU_VAR: &str = "CASHMERE_TABLE_CPU";

/// What a cell was run with. A cell on disk is kept only if this matches exactly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellConfig {
    pub app: String,
    pub variant: String,
    pub size: String,
    pub params: BTreeMap<String, String>,
    pub nodes: usize,
    pub procs: usize,
    pub network: String,
    pub platform: String,
    /// FNV-1a of the platform's file text (every cost, and whether subnormals are
    /// flushed), so that a cell follows an edited platform file of the same name.
    pub platform_digest: String,
    /// The build that ran the cell (`scale::build_identity`): a rebuilt binary runs its
    /// cells again rather than mixing its results with another build's.
    pub build: String,
    /// Runs of the cell, the fastest verified one kept (`--runs`).
    pub runs: usize,
    /// The clock asked for (`wall` or `modeled`).
    pub clock: String,
    /// The charge of computation asked for under the modeled clock (`counted` or
    /// `measured`; empty under the wall clock).
    #[serde(default)]
    pub compute: String,
    pub page_bytes: usize,
    /// Where the homes came from: `first-touch`, `captured from CSM-DMS`, or first touch
    /// with the reason no homes were captured.
    pub homes: String,
    /// FNV-1a of the replayed homes file, so that a cell follows new CSM-DMS homes.
    pub homes_digest: Option<String>,
    pub exec: String,
    pub backend: String,
    pub heap_bytes: usize,
}

/// One cell: an app under a variant, and what came of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    pub config: CellConfig,
    /// The app's CPU scale factor (factor 1 under the wall clock); absent when it could
    /// not be measured.
    pub scale: Option<Scale>,
    /// The parallel result matched the sequential one.
    pub verified: bool,
    /// Why the cell failed: the app's or the cluster's error, or the verification
    /// mismatch (with `verified` false and the measurements kept).
    pub error: Option<String>,
    /// The run's figures; absent when the run did not finish.
    pub run: Option<Measurements>,
}

/// What a finished run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurements {
    /// The clock of the times below, as the run's report states it.
    pub clock: String,
    /// Sequential time over parallel time.
    pub speedup: f64,
    /// Sequential time in this clock: wall seconds, or (modeled) this machine's thread
    /// CPU seconds times the scale factor.
    pub seq_s: f64,
    /// Parallel time in this clock (the report's `elapsed_ns`).
    pub par_s: f64,
    pub seq_wall_s: f64,
    pub seq_cpu_s: f64,
    /// The Figure 1 breakdown, summed over the processors.
    pub breakdown: Breakdown,
    /// Over the whole run.
    pub counters: Counters,
    /// Over the timed region, where the app marks one (`dsm::Report::region_counters`).
    #[serde(default)]
    pub region_counters: Option<Counters>,
    pub result: serde_json::Value,
    pub sequential_result: serde_json::Value,
}

impl Measurements {
    /// The counters Table 4 shows: the timed region's, as the speedup's (the paper's
    /// statistics sit beside speedups of the timed computation, section 3.1), else the
    /// whole run's.
    pub fn shown(&self) -> &Counters {
        self.region_counters.as_ref().unwrap_or(&self.counters)
    }
}

impl Cell {
    /// A cell that counts for the findings: finished and verified.
    fn measured(&self) -> Option<&Measurements> {
        self.run.as_ref().filter(|_| self.verified)
    }

    /// A cell whose run ended with an error (not one that ran and failed its check):
    /// these are run again on resume.
    fn errored(&self) -> bool {
        self.run.is_none()
    }

    /// Whether the cell's figures could have come from a run: times finite, not negative
    /// and representable (`dsm::MAX_VIRTUAL_NS`), the speedup the sequential time over
    /// the parallel one, and a scale factor in its bounds.
    fn check(&self) -> Result<(), String> {
        if let Some(s) = self.scale.as_ref().filter(|s| !s.counted()) {
            let wall = s.factor == 1.0;
            let bounds = crate::scale::MIN_FACTOR..=crate::scale::MAX_FACTOR;
            if !(wall || bounds.contains(&s.factor)) {
                return Err(format!("CPU scale factor {:e}", s.factor));
            }
        }
        let Some(m) = &self.run else {
            return Ok(());
        };
        let most_s = dsm::MAX_VIRTUAL_NS as f64 / 1e9;
        for (what, v) in [
            ("seq_s", m.seq_s),
            ("par_s", m.par_s),
            ("seq_wall_s", m.seq_wall_s),
            ("seq_cpu_s", m.seq_cpu_s),
        ] {
            if !(v.is_finite() && (0.0..=most_s).contains(&v)) {
                return Err(format!("{what} = {v:e} (a time from 0 to {most_s:e} s)"));
            }
        }
        let speedup = m.seq_s / m.par_s.max(1e-9);
        if !m.speedup.is_finite() || (m.speedup - speedup).abs() > 1e-9 * speedup.max(1.0) {
            return Err(format!(
                "speedup = {:e}, where seq_s / par_s is {speedup:e}",
                m.speedup
            ));
        }
        Ok(())
    }
}

/// The table as asked for, checked.
struct Plan {
    apps: Vec<AppPlan>,
    /// The validated configuration of each selected variant, in the paper's order
    /// (CSM-DMS, whose homes the others may replay, comes first).
    variants: Vec<Config>,
    size: Size,
    clock: ClockMode,
    /// The charge of computation asked for (`--compute`).
    compute: crate::scale::ComputeChoice,
    platform: dsm::platform::Platform,
    homes: HomesMode,
    out: PathBuf,
    force: bool,
    /// Runs of each cell (`--runs`, at least 1).
    runs: usize,
    /// FNV-1a of the platform's file text (`CellConfig::platform_digest`).
    platform_digest: String,
}

struct AppPlan {
    app: &'static dyn App,
    params: Params,
}

/// A cell's run as a node process needs to repeat it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct NodeCell {
    app: String,
    variant: String,
    homes_file: Option<PathBuf>,
    cpu_scale: f64,
    /// Counted computation's costs per unit (`None`: measured).
    #[serde(default)]
    ns_per_unit: Option<Vec<f64>>,
}

pub fn table(a: TableArgs) -> anyhow::Result<()> {
    let plan = plan(&a)?;
    if dsm::host::is_node_process() {
        return serve_node(&plan, a.node_plan.as_deref());
    }
    if a.cells_only {
        if let Some(cpu) = std::env::var(JOB_CPU_VAR).ok().and_then(|v| v.parse().ok()) {
            // Binding is for steadier CPU times only; a host that refuses it runs the same.
            let _ = dsm::host::pin_thread(cpu);
        }
        Runner::new(&plan, false)?.run_all()?;
        return Ok(());
    }
    let jobs = jobs::count(a.jobs, &plan)?;
    // Held until the table is written: one table at a time on an --out.
    let _lock = lock_out(&plan.out)?;
    let mut runner = Runner::new(&plan, true)?;
    if jobs > 1 {
        jobs::run_apps(&plan, jobs)?;
        // The jobs wrote every cell they ran; what they could not run runs here.
        runner.from_jobs = true;
    }
    let cells = runner.run_all()?;
    output::finish(&plan, &cells)
}

/// Takes `OUT/.lock` (flock) for this table, so that two tables never write one `--out`
/// at once (their cells' temporary files have the same names), and removes the temporary
/// files a table that was killed left behind. A second table is refused, naming the
/// first's pid. The jobs of `--jobs` and node processes do not lock: their parent holds it.
fn lock_out(out: &Path) -> anyhow::Result<dsm::host::FileLock> {
    std::fs::create_dir_all(out).with_context(|| {
        format!(
            "--out: cannot create {}; give a writable directory",
            out.display()
        )
    })?;
    let path = out.join(".lock");
    let lock = dsm::host::try_lock_file(&path, &format!("pid {}", std::process::id()))
        .with_context(|| format!("--out: cannot lock {}", path.display()))?;
    let Some(lock) = lock else {
        let holder = dsm::host::read_regular_text(&path, 4096).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "its pid not yet written".to_string(),
            h => h.to_string(),
        };
        bail!(
            "--out {}: another cashmere table ({holder}) is writing there now; wait for it to finish, or give another --out",
            out.display()
        );
    };
    for dir in ["cells", "homes"] {
        if let Ok(entries) = std::fs::read_dir(out.join(dir)) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    Ok(lock)
}

/// Checks everything before any work: names, sizes, every variant's configuration on
/// this network, every app's parameters and memory, and the output directory.
fn plan(a: &TableArgs) -> anyhow::Result<Plan> {
    use crate::run::{parse_setting, setting, Source};
    let size: Size = a.size.parse()?;
    // Each setting from its flag, else its `DSM_*` variable (as `run` and `suite` take
    // them), else the table's default.
    let clock: ClockMode = parse_setting(setting(&a.clock, "--clock", "DSM_CLOCK", "modeled"), |v| {
        v.parse::<ClockMode>()
    })?;
    let compute = parse_setting(setting(&a.compute, "--compute", "DSM_COMPUTE", "counted"), |v| {
        v.parse::<crate::scale::ComputeChoice>()
    })?;
    if clock == ClockMode::Wall && a.compute.is_some() {
        bail!("--compute applies to the modeled clock only, and this table uses the wall clock; add --clock modeled, or leave --compute out");
    }
    let homes: HomesMode = a
        .homes
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--homes: {e}"))?;
    let (platform_name, _) = setting(
        &a.platform,
        "--platform",
        "DSM_PLATFORM",
        dsm::platform::DEFAULT,
    );
    let platform = parse_setting(
        setting(&a.platform, "--platform", "DSM_PLATFORM", dsm::platform::DEFAULT),
        crate::platforms::resolve,
    )?;
    if let (_, Source::Env(..)) = setting(&None, "--cpu-scale", "DSM_CPU_SCALE", "") {
        bail!(
            "environment variable DSM_CPU_SCALE is set, but the table measures each app's CPU \
             scale factor (and records it in its cells); unset DSM_CPU_SCALE, or use cashmere \
             run --cpu-scale for a run with a factor of your own"
        );
    }
    let chosen_apps: Vec<&'static dyn App> = match &a.apps {
        Some(list) => names(list)
            .map(apps::by_name)
            .collect::<anyhow::Result<_>>()?,
        None => apps::all(),
    };
    if let Some(twice) = chosen_apps
        .iter()
        .enumerate()
        .find(|(i, x)| chosen_apps[..*i].iter().any(|y| y.name() == x.name()))
    {
        bail!(
            "--apps names {} twice; name each app once",
            twice.1.name()
        );
    }
    let mut protocols: Vec<Protocol> = match (&a.variants, setting(&None, "--variants", "DSM_VARIANT", "")) {
        (Some(list), _) => names(list)
            .map(protocol_variants::by_name)
            .collect::<Result<_, _>>()?,
        // The one variant DSM_VARIANT names.
        (None, given @ (_, Source::Env(..))) => vec![parse_setting(given, |v| {
            protocol_variants::by_name(v).map_err(|e| e.to_string())
        })?],
        // By default, the variants this clock can run (`ClockMode::refuses`).
        (None, _) => protocol_variants::ALL
            .iter()
            .copied()
            .filter(|p| clock.refuses(p).is_none())
            .collect(),
    };
    if let Some(twice) = protocols
        .iter()
        .enumerate()
        .find(|(i, x)| protocols[..*i].iter().any(|y| y.name == x.name))
    {
        bail!(
            "--variants names {} twice; name each variant once",
            twice.1.name
        );
    }
    let order = |p: &Protocol| protocol_variants::ALL.iter().position(|q| q.name == p.name);
    protocols.sort_by_key(order);

    let mut problems = Vec::new();
    if a.runs == 0 {
        problems.push("--runs must be at least 1".to_string());
    }
    if a.runs > MAX_RUNS {
        problems.push(format!(
            "--runs {}: at most {MAX_RUNS} runs of each cell (the paper takes the lowest of 3)",
            a.runs
        ));
    }
    if chosen_apps.is_empty() || protocols.is_empty() {
        problems.push("--apps and --variants each need at least one name".to_string());
    }
    let mut variants = Vec::new();
    for p in protocols {
        match variant_config(a, &platform_name, &platform, clock, p) {
            Ok(c) => variants.push(c),
            Err(e) => problems.push(format!("{}: {e:#}", p.name)),
        }
    }
    let mut app_plans = Vec::new();
    for app in chosen_apps {
        if clock == ClockMode::Modeled && !platform.sequential_s.contains_key(app.name()) {
            problems.push(format!(
                "{}: platform {} has no sequential time for it, so the modeled clock has no CPU scale factor; add it to the platform's sequential_s or use --clock wall",
                app.name(),
                platform.name
            ));
        }
        match Params::resolve(app.name(), app.params(), size, &[]) {
            Ok(params) => {
                for config in &variants {
                    if let Err(e) = crate::run::check_memory(app, &params, config) {
                        let variant = config.protocol.name;
                        problems.push(format!("{} under {variant}: {e:#}", app.name()));
                    }
                }
                app_plans.push(AppPlan { app, params });
            }
            Err(e) => problems.push(format!("{}: {e}", app.name())),
        }
    }
    if !problems.is_empty() {
        bail!(
            "the table cannot run as asked; nothing was run:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(Plan {
        apps: app_plans,
        variants,
        size,
        clock,
        compute,
        platform_digest: digest(dsm::platform::to_file_text(&platform).as_bytes()),
        platform,
        homes,
        out: a.out.clone(),
        force: a.force,
        runs: a.runs,
    })
}

/// The names in a comma-separated list.
fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|n| !n.is_empty())
}

/// The validated configuration of variant `p`, as `cashmere run` would build it, with the
/// table's clock and platform. The network defaults to the platform's.
fn variant_config(
    a: &TableArgs,
    platform_name: &str,
    platform: &dsm::platform::Platform,
    clock: ClockMode,
    p: Protocol,
) -> anyhow::Result<Config> {
    let network_from_env = std::env::var("DSM_NETWORK").is_ok_and(|v| !v.is_empty());
    let cluster = ClusterArgs {
        variant: Some(p.name.to_string()),
        nodes: a.nodes,
        procs: a.procs,
        exec: a.exec.clone(),
        network: a
            .network
            .clone()
            .or_else(|| (!network_from_env).then(|| platform.network.clone())),
        page_kb: a.page_kb.clone(),
        backend: a.backend.clone(),
        heap_mb: a.heap_mb.clone(),
        homes: None,
        stall_timeout: None,
        pin: None,
        clock: Some(clock.to_string()),
        platform: Some(platform_name.to_string()),
        compute: None,
        cpu_scale: None,
    };
    let mut config = cluster.config()?;
    config.clock = clock;
    config.platform = platform.clone();
    Ok(config)
}

impl Plan {
    /// Whether this table's cells are the paper's configuration, so that their figures
    /// can be set beside Table 4's: the paper's inputs on 8 nodes x 4 processors under the
    /// modeled clock on the built-in platform (its costs unchanged, by digest), its network
    /// and 8 KiB pages.
    pub(crate) fn comparable_to_paper(&self) -> bool {
        let builtin = dsm::platform::by_name(dsm::platform::DEFAULT).expect("built in");
        let c = &self.variants[0];
        self.size == Size::Paper
            && self.clock == ClockMode::Modeled
            && self.platform_digest == digest(dsm::platform::to_file_text(&builtin).as_bytes())
            && c.nodes == 8
            && c.procs_per_node == 4
            && c.profile.name == builtin.network
            && c.page_bytes == 8192
    }

    fn cell_path(&self, app: &str, variant: &str) -> PathBuf {
        self.out
            .join("cells")
            .join(format!("{app}__{variant}.json"))
    }

    fn homes_path(&self, app: &str) -> PathBuf {
        self.out.join("homes").join(format!("{app}.homes"))
    }

    fn has_variant(&self, name: &str) -> bool {
        self.variants.iter().any(|c| c.protocol.name == name)
    }

    /// Where `variant` of `app` takes its homes from now: the description, and the file
    /// to replay.
    fn homes_for(&self, app: &str, variant: &str) -> (String, Option<PathBuf>) {
        if variant == HOMES_FROM || self.homes == HomesMode::FirstTouch {
            return ("first-touch".into(), None);
        }
        if !self.has_variant(HOMES_FROM) {
            return (
                format!("first-touch ({HOMES_FROM} not among the variants, so no homes to replay)"),
                None,
            );
        }
        let path = self.homes_path(app);
        if path.is_file() {
            (format!("captured from {HOMES_FROM}"), Some(path))
        } else {
            (
                format!("first-touch ({HOMES_FROM} captured no homes: its run failed)"),
                None,
            )
        }
    }

    /// The configuration a cell is run with now.
    fn cell_config(&self, app: &AppPlan, config: &Config) -> anyhow::Result<CellConfig> {
        let variant = config.protocol.name;
        let (homes, file) = self.homes_for(app.app.name(), variant);
        let homes_digest = match &file {
            Some(path) => Some(digest(
                &dsm::host::read_regular_file(path, dsm::MAX_HOMES_FILE_BYTES)
                    .with_context(|| format!("cannot read the homes file {}", path.display()))?,
            )),
            None => None,
        };
        Ok(CellConfig {
            app: app.app.name().to_string(),
            variant: variant.to_string(),
            size: self.size.to_string(),
            params: app
                .params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nodes: config.nodes,
            procs: config.procs_per_node,
            network: config.profile.name.to_string(),
            platform: self.platform.name.clone(),
            platform_digest: self.platform_digest.clone(),
            build: crate::scale::build_identity().to_string(),
            runs: self.runs,
            clock: self.clock.to_string(),
            compute: match self.clock {
                ClockMode::Wall => String::new(),
                ClockMode::Modeled => self.compute.name().into(),
            },
            page_bytes: config.page_bytes,
            homes,
            homes_digest,
            exec: config.mode.to_string(),
            backend: config.backend.to_string(),
            heap_bytes: config.heap_bytes,
        })
    }

    /// The configuration of one run: the variant's, with the cell's homes and the app's
    /// CPU scale factor.
    fn run_config(&self, base: &Config, cell: &NodeCell) -> Config {
        let mut config = base.clone();
        config.homes_file = cell.homes_file.clone();
        config.cpu_scale = cell.cpu_scale;
        config.compute = match &cell.ns_per_unit {
            Some(ns) => dsm::Compute::Counted { ns_per_unit: ns.clone() },
            None => dsm::Compute::Measured,
        };
        config
    }
}

/// FNV-1a (64 bits) of `bytes`, in hex.
fn digest(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}")
}

/// A node process: repeats the parent's runs up to the one it was started for, which
/// ends the process inside `App::parallel`.
fn serve_node(plan: &Plan, node_plan: Option<&str>) -> anyhow::Result<()> {
    let cells: Vec<NodeCell> = serde_json::from_str(
        node_plan.context("a node process of `cashmere table` needs --node-plan")?,
    )
    .context("--node-plan")?;
    for cell in &cells {
        let app = plan
            .apps
            .iter()
            .find(|a| a.app.name() == cell.app)
            .with_context(|| format!("--node-plan names app {}, not in the table", cell.app))?;
        let base = plan
            .variants
            .iter()
            .find(|c| c.protocol.name == cell.variant)
            .with_context(|| format!("--node-plan names {}, not in the table", cell.variant))?;
        match app.app.parallel(&app.params, &plan.run_config(base, cell)) {
            // A run before this process's own: skipped at its launch, or failed before
            // it, as it did in the parent.
            Err(_) => continue,
            Ok(_) => bail!("a node process returned from its run"),
        }
    }
    bail!("this node process's run is not in its --node-plan")
}

/// Runs the cells, keeping finished ones, and shows progress.
struct Runner<'a> {
    plan: &'a Plan,
    progress: Progress,
    /// The cells run so far, for node processes.
    node_plan: Vec<NodeCell>,
    /// The arguments node processes are started with (before `--node-plan`).
    args: Vec<std::ffi::OsString>,
    kept: usize,
    ran: usize,
    /// The cells on disk were just written by `--jobs`: they are taken as they are (an
    /// errored one is not run again, and `--force` has already been applied by the jobs).
    from_jobs: bool,
}

impl<'a> Runner<'a> {
    /// `bar`: show a progress bar when standard error is a terminal (a job's process
    /// prints plain lines, as several share the terminal).
    fn new(plan: &'a Plan, bar: bool) -> anyhow::Result<Runner<'a>> {
        for dir in ["cells", "homes"] {
            let dir = plan.out.join(dir);
            std::fs::create_dir_all(&dir).with_context(|| {
                format!(
                    "--out: cannot create {}; give a writable directory",
                    dir.display()
                )
            })?;
        }
        let cells = plan.apps.len() * plan.variants.len();
        Ok(Runner {
            plan,
            progress: Progress::new(cells, bar),
            node_plan: Vec::new(),
            args: std::env::args_os().skip(1).collect(),
            kept: 0,
            ran: 0,
            from_jobs: false,
        })
    }

    /// Every cell, in table order (apps, then variants in the paper's order).
    fn run_all(mut self) -> anyhow::Result<Vec<Cell>> {
        let mut cells = Vec::new();
        for app in &self.plan.apps {
            let mut seq: Option<Result<Sequential, String>> = None;
            let mut scale: Option<Result<Scale, String>> = None;
            for base in &self.plan.variants {
                let config = self.plan.cell_config(app, base)?;
                let label = format!("{} under {}", app.app.name(), base.protocol.name);
                if let Some(cell) = self.kept_cell(&config)? {
                    self.kept += 1;
                    self.progress
                        .kept(&format!("{label}: kept, {}", output::cell_outcome(&cell)));
                    cells.push(cell);
                    continue;
                }
                let scale = scale.get_or_insert_with(|| {
                    self.progress
                        .step(&format!("{}: charge of computation", app.app.name()));
                    self.scale(app.app)
                        .map_err(|e| format!("charge of computation: {e:#}"))
                });
                let measured = scale.as_ref().map_or(true, |s| !s.counted());
                let seq = seq.get_or_insert_with(|| {
                    self.progress
                        .step(&format!("{}: sequential", app.app.name()));
                    let modeled = self.plan.clock == ClockMode::Modeled;
                    run_sequential(app.app, &app.params, &self.plan.platform, modeled, measured)
                        .map_err(|e| format!("sequential run: {e:#}"))
                });
                self.progress.step(&label);
                let started = Instant::now();
                let cell = self.run_cell(app, base, config, seq, scale)?;
                self.ran += 1;
                self.progress.ran(&format!(
                    "{label}: {} ({:.1} s)",
                    output::cell_outcome(&cell),
                    started.elapsed().as_secs_f64()
                ));
                cells.push(cell);
            }
        }
        self.progress.finish();
        if !self.from_jobs {
            outln!(
                "{} cell(s) run, {} cell(s) kept from {} (--force runs them again)",
                self.ran,
                self.kept,
                self.plan.out.join("cells").display()
            );
        } else {
            outln!(
                "{} cell(s) from the jobs in {}, {} run here",
                self.kept,
                self.plan.out.join("cells").display(),
                self.ran
            );
        }
        Ok(cells)
    }

    /// The cell on disk for `config`, if it finished under exactly this configuration
    /// (and, for the cell whose homes the others replay, its homes file is there).
    /// A cell file that cannot be read (missing, unreadable, not JSON) is run again; one
    /// that is not a regular file or is larger than [`MAX_CELL_FILE_BYTES`] is an error
    /// (it is not one this program wrote), and so is a cell file of this configuration
    /// whose figures are impossible (edited, or written by a broken build): it would be
    /// printed as it is.
    fn kept_cell(&self, config: &CellConfig) -> anyhow::Result<Option<Cell>> {
        if self.plan.force && !self.from_jobs {
            return Ok(None);
        }
        let path = self.plan.cell_path(&config.app, &config.variant);
        let text = match dsm::host::read_regular_text(&path, MAX_CELL_FILE_BYTES) {
            Ok(text) => text,
            Err(e @ (dsm::host::ReadError::NotRegular | dsm::host::ReadError::TooLarge { .. })) => {
                bail!(
                    "kept cell {}: {e} for a cell file; this table did not write it: remove it, or run with --force to run every cell again",
                    path.display()
                )
            }
            Err(dsm::host::ReadError::Io(_)) => return Ok(None),
        };
        let Ok(cell) = serde_json::from_str::<Cell>(&text) else {
            return Ok(None);
        };
        if cell.config == *config {
            if let Err(why) = cell.check() {
                bail!(
                    "the kept cell {} holds an impossible figure: {why}; run the table with \
                     --force to run its cells again, or delete that file",
                    path.display()
                );
            }
        }
        let homes_needed = config.variant == HOMES_FROM && self.plan.homes == HomesMode::Captured;
        let keep = if cell.errored() {
            // Run again, unless a job has just run it (and removed its homes).
            self.from_jobs
        } else {
            !homes_needed || self.plan.homes_path(&config.app).is_file()
        };
        Ok((cell.config == *config && keep).then_some(cell))
    }

    /// The app's CPU scale factor: measured for the modeled clock, 1 for the wall clock.
    fn scale(&self, app: &dyn App) -> anyhow::Result<Scale> {
        match self.plan.clock {
            ClockMode::Modeled => {
                crate::scale::charge(app, &self.plan.platform, None, self.plan.compute)
            }
            ClockMode::Wall => Ok(Scale::wall()),
        }
    }

    /// Runs one cell and writes it (and, for CSM-DMS, the homes it chose) to disk.
    fn run_cell(
        &mut self,
        app: &AppPlan,
        base: &Config,
        config: CellConfig,
        seq: &Result<Sequential, String>,
        scale: &Result<Scale, String>,
    ) -> anyhow::Result<Cell> {
        let scale_factor = scale.as_ref().map_or(1.0, |s| s.factor);
        let failed = |error: String| Cell {
            config: config.clone(),
            scale: scale.as_ref().ok().cloned(),
            verified: false,
            error: Some(error),
            run: None,
        };
        let homes_out =
            (base.protocol.name == HOMES_FROM).then(|| self.plan.homes_path(&config.app));
        // CSM-DMS homes in --out that cannot be replayed fail the cell, every resume alike,
        // until --force has CSM-DMS capture them again: say so.
        let homes_problem = self
            .plan
            .homes_for(&config.app, &config.variant)
            .1
            .and_then(|homes| {
                let mut replay = base.clone();
                replay.homes_file = Some(homes.clone());
                replay.homes().err().map(|e| {
                    format!(
                        "the homes {HOMES_FROM} captured, {}, cannot be replayed ({e}); run the \
                         table with --force ({HOMES_FROM} runs again and captures its homes \
                         anew), or delete that file",
                        homes.display()
                    )
                })
            });
        let cell = match (seq, scale, homes_problem) {
            (Err(e), _, _) | (_, Err(e), _) => failed(e.clone()),
            (_, _, Some(why)) => failed(why),
            (Ok(seq), Ok(_), None) => {
                let node_cell = NodeCell {
                    app: config.app.clone(),
                    variant: config.variant.clone(),
                    homes_file: self.plan.homes_for(&config.app, &config.variant).1,
                    cpu_scale: scale_factor,
                    ns_per_unit: scale
                        .as_ref()
                        .ok()
                        .filter(|s| s.counted())
                        .map(|s| s.ns_per_unit.clone()),
                };
                // The paper's "lowest values of three runs" (section 3.1), with `--runs`:
                // the fastest verified run is kept; a run that fails ends the cell.
                let mut best: Option<(Cell, String)> = None;
                for _ in 0..self.plan.runs {
                    let mut run_config = self.plan.run_config(base, &node_cell);
                    self.node_plan.push(node_cell.clone());
                    if run_config.mode == dsm::ExecMode::Processes {
                        let mut args = self.args.clone();
                        args.push("--node-plan".into());
                        args.push(serde_json::to_string(&self.node_plan)?.into());
                        run_config.child_args = Some(args);
                    }
                    let (cell, homes) = match app.app.parallel(&app.params, &run_config) {
                        Err(e) => (failed(format!("{e:#}")), String::new()),
                        Ok((par, report)) => {
                            let check = app.app.check(&seq.result, &par);
                            let run = measure(seq, &par, &report, &run_config);
                            let cell = Cell {
                                config: config.clone(),
                                scale: scale.as_ref().ok().cloned(),
                                verified: check.is_ok(),
                                error: check.err().map(|m| format!("verification failed: {m}")),
                                run: Some(run),
                            };
                            (cell, report.homes_file())
                        }
                    };
                    let par_s = |c: &Cell| c.run.as_ref().map_or(f64::INFINITY, |r| r.par_s);
                    let failed_run = !cell.verified;
                    if failed_run || best.as_ref().is_none_or(|(b, _)| par_s(&cell) < par_s(b)) {
                        best = Some((cell, homes));
                    }
                    if failed_run {
                        break;
                    }
                }
                let (cell, homes) = best.expect("at least one run");
                if let (Some(path), false) = (&homes_out, cell.errored()) {
                    write_file(path, homes.as_bytes())?;
                }
                cell
            }
        };
        if let (Some(path), true) = (&homes_out, cell.errored()) {
            // The others must not replay homes from an earlier table.
            let _ = std::fs::remove_file(path);
        }
        let path = self.plan.cell_path(&config.app, &config.variant);
        write_file(&path, serde_json::to_string_pretty(&cell)?.as_bytes())?;
        Ok(cell)
    }
}

/// A finished run's figures; the sequential time is taken in the clock the report states.
fn measure(
    seq: &Sequential,
    par: &AppResult,
    report: &dsm::Report<()>,
    config: &Config,
) -> Measurements {
    let seq_s = seq.time_s(config);
    let par_s = report.elapsed_ns as f64 / 1e9;
    let breakdown = report.procs.iter().fold(Breakdown::default(), |mut t, p| {
        t.user_ns = t.user_ns.saturating_add(p.breakdown.user_ns);
        t.protocol_ns = t.protocol_ns.saturating_add(p.breakdown.protocol_ns);
        t.wait_ns = t.wait_ns.saturating_add(p.breakdown.wait_ns);
        t.message_ns = t.message_ns.saturating_add(p.breakdown.message_ns);
        t
    });
    Measurements {
        clock: report.clock.clone(),
        speedup: seq_s / par_s.max(1e-9),
        seq_s,
        par_s,
        seq_wall_s: seq.wall_s,
        seq_cpu_s: seq.cpu_s,
        breakdown,
        counters: report.counters,
        region_counters: report.region_counters,
        result: par.to_json(),
        sequential_result: seq.result.to_json(),
    }
}

/// Writes `bytes` to `path` whole: into a temporary file beside it, then renamed, so an
/// interrupted table never leaves half a file.
fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Progress on standard error: on a terminal a bar with the current step, the elapsed
/// time and an estimate of the rest (over the cells that run, not those kept), and
/// otherwise one plain line per cell.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    cells: usize,
    seen: usize,
}

impl Progress {
    fn new(cells: usize, bar: bool) -> Progress {
        let bar = (bar && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(cells as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "[{bar:24}] {pos}/{len} cells to run, {elapsed} so far, about {eta} to go: {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
            bar
        });
        Progress {
            bar,
            cells,
            seen: 0,
        }
    }

    fn step(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }

    /// A cell kept from an earlier table: it leaves the estimate.
    fn kept(&mut self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.dec_length(1);
        }
        self.line(line);
    }

    fn ran(&mut self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        self.line(line);
    }

    fn line(&mut self, line: &str) {
        self.seen += 1;
        let line = format!("[{}/{}] {line}", self.seen, self.cells);
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> TableArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            table: TableArgs,
        }
        let mut argv = vec!["table", "--out", "/tmp/cashmere-unused-table-out"];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv).unwrap().table
    }

    /// Issue 17, section 5: ratios to the paper only for its configuration: its inputs on
    /// 8 x 4 under the modeled clock on the built-in platform, its network and pages.
    #[test]
    fn only_the_papers_configuration_is_compared_with_it() {
        let paper = plan(&args(&["--apps", "sor", "--variants", "CSM-DMS"])).unwrap();
        assert!(paper.comparable_to_paper());
        for other in [
            &["--size", "small"][..],
            &["--nodes", "4"],
            &["--procs", "2"],
            &["--clock", "wall"],
            &["--network", "mc1"],
            &["--page-kb", "4"],
        ] {
            let mut a = vec!["--apps", "sor", "--variants", "CSM-DMS"];
            a.extend_from_slice(other);
            let p = plan(&args(&a)).unwrap();
            assert!(!p.comparable_to_paper(), "{other:?}");
        }
    }
}
