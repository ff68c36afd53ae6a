//! `cashmere run` and `cashmere suite`.

use crate::apps;
use anyhow::{bail, Context};
use app_common::{App, AppResult, Params, Size};
use clap::Args;
use dsm::{ClockMode, Config, ExecMode, FaultBackend};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// Options every run shares: the cluster and the protocol. Each setting comes from its
/// flag, else from its `DSM_*` environment variable, else from its default; a bad value
/// is an error that names where it came from.
#[derive(Args, Clone, Debug)]
pub struct ClusterArgs {
    /// Protocol variant (CSM-DMS, CSM-MS, CSM-S, CSM-None, CSM-MS-Mg, CSM-None-Mg, CSM-ADB)
    /// [env: DSM_VARIANT] [default: CSM-DMS].
    #[arg(long)]
    pub variant: Option<String>,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Processors per node.
    #[arg(long, default_value_t = 2)]
    pub procs: usize,
    /// threads (every node in this process), processes (one process per node) or mpi (one
    /// MPI rank per node, under `mpirun -np N`; a build with `--features dsm/mpi`)
    /// [env: DSM_EXEC] [default: threads, or mpi under mpirun].
    #[arg(long)]
    pub exec: Option<String>,
    /// Network profile (`cashmere profiles` lists them) [env: DSM_NETWORK] [default: the
    /// platform's network, mc2].
    #[arg(long)]
    pub network: Option<String>,
    /// Coherence page size in KiB, 4 or 8 [env: DSM_PAGE_KB] [default: 8].
    #[arg(long)]
    pub page_kb: Option<String>,
    /// Fault backend: mprotect or userfaultfd [env: DSM_BACKEND] [default: mprotect].
    #[arg(long)]
    pub backend: Option<String>,
    /// Shared heap per node in MiB [env: DSM_HEAP_MB] [default: 1024].
    #[arg(long)]
    pub heap_mb: Option<String>,
    /// Replay home assignments from a file (`page home` per line).
    #[arg(long)]
    pub homes: Option<PathBuf>,
    /// Seconds a node may go without a heartbeat before it is reported as stopped and
    /// the run is stopped [env: DSM_STALL_TIMEOUT] [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub stall_timeout: Option<String>,
    /// Wall clock: auto binds each processor to a core of its own when the cluster's
    /// processors fit the cores; off leaves the kernel to place them [env: DSM_PIN]
    /// [default: auto].
    #[arg(long, value_name = "auto|off")]
    pub pin: Option<String>,
    /// Which clock the run's times come from: wall (real time) or modeled (virtual time
    /// on the platform) [env: DSM_CLOCK] [default: wall].
    #[arg(long)]
    pub clock: Option<String>,
    /// The platform the modeled clock charges: a built-in name (`cashmere platforms` lists
    /// them) or a platform file [env: DSM_PLATFORM] [default: alphaserver-mc2].
    #[arg(long, value_name = "NAME|FILE")]
    pub platform: Option<String>,
    /// Modeled clock: how computation is charged. `counted`: the work the app counts, at
    /// the platform's cost per unit (its Table 3 time over the units the sequential
    /// version counts at the paper's input), so a run repeats exactly on any host;
    /// `measured`: this machine's CPU time times the CPU scale factor (what an app that
    /// counts nothing gets) [env: DSM_COMPUTE] [default: counted; measured with
    /// --cpu-scale].
    #[arg(long, value_name = "counted|measured")]
    pub compute: Option<String>,
    /// Modeled clock, measured computation: use this CPU scale factor instead of the
    /// platform's sequential time over this machine's, measured once and cached [env:
    /// DSM_CPU_SCALE].
    #[arg(long, value_name = "FACTOR")]
    pub cpu_scale: Option<String>,
}

/// Where a setting's value came from, for error messages.
pub(crate) enum Source {
    Flag(&'static str),
    Env(&'static str, &'static str),
    Default,
}

/// The value of a setting: its flag, else its environment variable (if set and not
/// empty), else its default.
pub(crate) fn setting(
    flag_value: &Option<String>,
    flag: &'static str,
    var: &'static str,
    default: &str,
) -> (String, Source) {
    if let Some(v) = flag_value {
        return (v.clone(), Source::Flag(flag));
    }
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => (v, Source::Env(var, flag)),
        _ => (default.to_string(), Source::Default),
    }
}

/// Parses a setting with `parse`; an error names the flag or the environment variable.
pub(crate) fn parse_setting<T>(
    (value, source): (String, Source),
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> anyhow::Result<T> {
    parse(&value).map_err(|why| match source {
        Source::Flag(flag) => anyhow::anyhow!("{flag} `{value}` is not valid: {why}"),
        Source::Env(var, flag) => anyhow::anyhow!(
            "environment variable {var}=`{value}` (which sets {flag}) is not valid: {why}; fix or unset {var}, or give {flag}"
        ),
        Source::Default => anyhow::anyhow!("the default `{value}` is not valid: {why}"),
    })
}

impl ClusterArgs {
    /// The variant named by `--variant` or `DSM_VARIANT`, if either is given.
    pub fn chosen_variant(&self) -> Option<(String, &'static str)> {
        match setting(&self.variant, "--variant", "DSM_VARIANT", "") {
            (v, Source::Flag(f)) => Some((v, f)),
            (v, Source::Env(var, _)) => Some((v, var)),
            (_, Source::Default) => None,
        }
    }

    pub fn config(&self) -> anyhow::Result<Config> {
        let protocol = parse_setting(
            setting(&self.variant, "--variant", "DSM_VARIANT", "CSM-DMS"),
            |v| protocol_variants::by_name(v).map_err(|e| e.to_string()),
        )?;
        let mut c = Config::new(self.nodes, self.procs, protocol);
        c.clock = parse_setting(setting(&self.clock, "--clock", "DSM_CLOCK", "wall"), |v| {
            v.parse::<ClockMode>()
        })?;
        c.platform = parse_setting(
            setting(
                &self.platform,
                "--platform",
                "DSM_PLATFORM",
                dsm::platform::DEFAULT,
            ),
            crate::platforms::resolve,
        )?;
        c.profile = match setting(&self.network, "--network", "DSM_NETWORK", "") {
            (_, Source::Default) => c
                .platform
                .network_profile()
                .map_err(|e| anyhow::anyhow!("platform {}: {e}", c.platform.name))?,
            given => parse_setting(given, |v| {
                dsm::profile::by_name(v).map_err(|e| e.to_string())
            })?,
        };
        c.page_bytes = parse_setting(
            setting(&self.page_kb, "--page-kb", "DSM_PAGE_KB", "8"),
            |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|kb| [4, 8].contains(kb))
                    .map(|kb| kb * 1024)
                    .ok_or_else(|| "expected a page size in KiB: 4 or 8".to_string())
            },
        )?;
        c.backend = parse_setting(
            setting(&self.backend, "--backend", "DSM_BACKEND", "mprotect"),
            |v| v.parse::<FaultBackend>(),
        )?;
        // Under mpirun every rank runs one node, unless told otherwise.
        let exec = if dsm::host::mpi_rank().is_some() { "mpi" } else { "threads" };
        c.mode = parse_setting(setting(&self.exec, "--exec", "DSM_EXEC", exec), |v| {
            v.parse::<ExecMode>()
        })?;
        c.heap_bytes = parse_setting(
            setting(&self.heap_mb, "--heap-mb", "DSM_HEAP_MB", "1024"),
            |v| {
                let mb = v
                    .parse::<usize>()
                    .map_err(|_| "expected a whole number of MiB, such as 1024".to_string())?;
                dsm::mib_to_bytes(mb)
            },
        )?;
        c.stall_timeout = parse_setting(
            setting(
                &self.stall_timeout,
                "--stall-timeout",
                "DSM_STALL_TIMEOUT",
                "10",
            ),
            dsm::parse_seconds,
        )?;
        c.pinning = parse_setting(setting(&self.pin, "--pin", "DSM_PIN", "auto"), |v| {
            v.parse::<dsm::Pinning>()
        })?;
        c.homes_file = self.homes.clone();
        c.validate()?;
        // Checked whatever the clock, so that a bad value is never ignored.
        let scale = self.given_cpu_scale()?;
        if scale.is_some() && c.clock == ClockMode::Wall && self.cpu_scale.is_some() {
            bail!(
                "--cpu-scale applies to the modeled clock only, and this run uses the wall \
                 clock; add --clock modeled, or leave --cpu-scale out"
            );
        }
        self.compute_choice()?;
        if c.clock == ClockMode::Wall && self.compute.is_some() {
            bail!(
                "--compute applies to the modeled clock only, and this run uses the wall \
                 clock; add --clock modeled, or leave --compute out"
            );
        }
        Ok(c)
    }

    /// The charge of computation asked for: `--compute` or `DSM_COMPUTE`, else measured
    /// if a CPU scale factor is given, else counted. Counted with a given factor is refused.
    pub fn compute_choice(&self) -> anyhow::Result<crate::scale::ComputeChoice> {
        use crate::scale::ComputeChoice;
        let given_scale = self.given_cpu_scale()?.is_some();
        let (value, source) = setting(&self.compute, "--compute", "DSM_COMPUTE", "");
        if matches!(source, Source::Default) {
            return Ok(if given_scale { ComputeChoice::Measured } else { ComputeChoice::Counted });
        }
        let choice = parse_setting((value, source), |v| v.parse::<ComputeChoice>())?;
        if choice == ComputeChoice::Counted && given_scale {
            bail!(
                "a CPU scale factor (--cpu-scale or DSM_CPU_SCALE) applies to measured \
                 computation, and counted computation is asked for; use --compute measured, \
                 or leave the factor out"
            );
        }
        Ok(choice)
    }

    /// The CPU scale factor given by `--cpu-scale` or `DSM_CPU_SCALE`, if either is.
    pub fn given_cpu_scale(&self) -> anyhow::Result<Option<f64>> {
        match setting(&self.cpu_scale, "--cpu-scale", "DSM_CPU_SCALE", "") {
            (_, Source::Default) => Ok(None),
            given => parse_setting(given, |v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| (crate::scale::MIN_FACTOR..=crate::scale::MAX_FACTOR).contains(f))
                    .map(Some)
                    .ok_or_else(|| {
                        format!(
                            "expected a number from {:e} to {:e}: virtual ns per ns of this \
                             machine's CPU time",
                            crate::scale::MIN_FACTOR,
                            crate::scale::MAX_FACTOR
                        )
                    })
            }),
        }
    }
}

#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct RunArgs {
    /// Application name (`cashmere run --help` lists them).
    pub app: Option<String>,
    /// Input size: test, small or paper.
    #[arg(long, default_value = "test")]
    pub size: String,
    /// Override a parameter of the size: KEY=VALUE (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// The app's primary input file (TSP instance, water deck, LINKAGE datafile).
    #[arg(long)]
    pub input: Option<String>,
    /// Write a JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the homes the run assigned here (replay them in another run with --homes).
    #[arg(long)]
    pub save_homes: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Show help (with the app's parameters when an app is named).
    #[arg(long, short = 'h', action = clap::ArgAction::SetTrue)]
    pub help: bool,
}

fn parse_params(
    app: &dyn App,
    raw: &[String],
    input: &Option<String>,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for kv in raw {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--param expects KEY=VALUE, got `{kv}`");
        };
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    if let Some(file) = input {
        match apps::input_param(app) {
            Some(name) => {
                if let Some((_, v)) = out.iter().find(|(k, _)| k == name) {
                    bail!(
                        "--input {file} and --param {name}={v} both set {}'s `{name}`; give one \
                         of them",
                        app.name()
                    );
                }
                out.push((name.to_string(), file.clone()));
            }
            None => bail!("{} reads no input file; its inputs are generated from parameters (see `cashmere run {} --help`)", app.name(), app.name()),
        }
    }
    // A water deck the user gives is run as it says: its NMOL and NSTEP, unless the
    // molecules or steps are given too (the sizes' defaults are for the shipped deck).
    if apps::input_param(app) == Some("deck") && out.iter().any(|(k, _)| k == "deck") {
        for name in ["molecules", "steps"] {
            if !out.iter().any(|(k, _)| k == name) {
                out.push((name.to_string(), "deck".to_string()));
            }
        }
    }
    Ok(out)
}

fn app_help(app: &dyn App) -> String {
    let mut s = format!(
        "{}: {}\n\nParameters (defaults for test / small / paper):\n",
        app.name(),
        app.description()
    );
    for p in app.params() {
        s += &format!(
            "  {:<16} {}\n  {:<16} [{} / {} / {}]\n",
            p.name, p.help, "", p.defaults[0], p.defaults[1], p.defaults[2]
        );
    }
    if let Some(i) = apps::input_param(app) {
        s += &format!("\n--input FILE sets `{i}`.\n");
    }
    s
}

/// Progress on standard error for runs that take a while: a spinner with the elapsed
/// time when standard error is a terminal, and otherwise one plain line at the end for
/// steps that took [`plain_line_after`] or more (so logs get no carriage-return clutter).
struct Progress {
    what: String,
    start: Instant,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn start(what: String) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}: {elapsed}")
                    .expect("a valid template"),
            );
            bar.set_message(what.clone());
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
            bar
        });
        Progress {
            what,
            start: Instant::now(),
            bar,
        }
    }
}

/// How long a step must take for its plain progress line: 2 s, or
/// `CASHMERE_PROGRESS_AFTER_S` seconds (0 logs every step). A value that is not such a
/// number is refused before any work ([`check_progress_env`]).
fn plain_line_after() -> std::time::Duration {
    progress_after()
        .ok()
        .flatten()
        .unwrap_or(std::time::Duration::from_secs(2))
}

/// `CASHMERE_PROGRESS_AFTER_S` if it is set (and not empty), or why it is not valid.
fn progress_after() -> anyhow::Result<Option<std::time::Duration>> {
    const VAR: &str = "CASHMERE_PROGRESS_AFTER_S";
    match std::env::var(VAR) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && (0.0..=1e9).contains(s))
            .map(|s| Some(std::time::Duration::from_secs_f64(s)))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "environment variable {VAR}=`{v}` is not valid: expected a number of seconds \
                     from 0 up (0 logs every step; such as 2 or 0.5); fix or unset {VAR}"
                )
            }),
        _ => Ok(None),
    }
}

/// Refuses a `CASHMERE_PROGRESS_AFTER_S` that is not a number of seconds.
pub fn check_progress_env() -> anyhow::Result<()> {
    progress_after().map(|_| ())
}

/// Refuses two output flags naming one file (the second write would replace the first).
fn check_distinct(outputs: &[(&str, &Option<PathBuf>)]) -> anyhow::Result<()> {
    let same = |a: &std::path::Path, b: &std::path::Path| {
        let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        abs(a) == abs(b)
            || match (std::fs::metadata(a), std::fs::metadata(b)) {
                (Ok(x), Ok(y)) => {
                    use std::os::unix::fs::MetadataExt;
                    (x.dev(), x.ino()) == (y.dev(), y.ino())
                }
                _ => false,
            }
    };
    for (i, (flag_a, a)) in outputs.iter().enumerate() {
        for (flag_b, b) in &outputs[i + 1..] {
            if let (Some(a), Some(b)) = (a, b) {
                if same(a, b) {
                    bail!(
                        "{flag_a} and {flag_b} both name {}; one would overwrite the other: give \
                         each its own file",
                        a.display()
                    );
                }
            }
        }
    }
    Ok(())
}

impl Drop for Progress {
    fn drop(&mut self) {
        match self.bar.take() {
            Some(bar) => bar.finish_and_clear(),
            None if self.start.elapsed() >= plain_line_after() => {
                eprintln!("{}: {:.1} s", self.what, self.start.elapsed().as_secs_f64())
            }
            None => {}
        }
    }
}

/// Refuses, before anything is allocated, a run whose data set cannot fit: not in the
/// shared heap, or (once for the sequential run and once per node) not in this machine's
/// memory. The app's estimate is from below, so what is refused surely does not fit.
pub(crate) fn check_memory(app: &dyn App, params: &Params, config: &Config) -> anyhow::Result<()> {
    let data = app.data_bytes(params)?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mib = |b: u64| b.div_ceil(1 << 20);
    let note = app
        .data_note(params)
        .map_or(String::new(), |n| format!("; {n}"));
    if data > dsm::MAX_HEAP_BYTES as u64 {
        bail!(
            "{} with these parameters has a data set of about {:.1} GiB, more than the largest shared heap a node can have ({} MiB){note}; choose a smaller size or parameters",
            app.name(),
            gib(data),
            dsm::MAX_HEAP_BYTES >> 20
        );
    }
    if data > config.heap_bytes as u64 {
        let or = if note.is_empty() { "" } else { "or " };
        bail!(
            "{} with these parameters has a data set of about {} MiB, more than the shared heap of {} MiB per node{note}; {or}raise it with --heap-mb {} (or DSM_HEAP_MB), or choose a smaller size or parameters",
            app.name(),
            mib(data),
            config.heap_bytes >> 20,
            mib(data).next_power_of_two().max(1024)
        );
    }
    let copies = 1 + config.nodes as u64;
    let need = data.saturating_mul(copies);
    if let Some(total) = dsm::host::total_memory_bytes() {
        if need > total {
            bail!(
                "{} with these parameters needs about {:.1} GiB of memory (a data set of {:.1} GiB, once for the sequential run and once per node), more than this machine's {:.1} GiB{note}; choose a smaller --size or smaller parameters",
                app.name(),
                gib(need),
                gib(data),
                gib(total)
            );
        }
    }
    Ok(())
}

/// Fails now, before a run, if `path` cannot be written at its end: its directory must
/// exist and the file must be writable (an existing file is not changed here; a new one
/// is created and removed again).
fn check_writable(path: &std::path::Path, flag: &str) -> anyhow::Result<()> {
    let fail = |why: String| {
        anyhow::anyhow!(
            "{flag} {}: {why}; give a writable file path",
            path.display()
        )
    };
    if path.is_dir() {
        return Err(fail("is a directory".into()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(fail(format!(
                "its directory {} does not exist",
                dir.display()
            )));
        }
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| fail(format!("cannot be created or written: {e}")))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The outcome of one app run.
pub struct Outcome {
    pub seq: AppResult,
    pub par: AppResult,
    pub seq_s: f64,
    pub par_s: f64,
    pub verified: Result<(), app_common::Mismatch>,
    pub report: dsm::Report<()>,
}

pub fn run_app(
    app: &dyn App,
    params: &Params,
    config: &Config,
    quiet: bool,
) -> anyhow::Result<Option<Outcome>> {
    let node = dsm::host::is_node_process();
    // Under the modeled clock the sequential time is this machine's CPU time scaled to the
    // platform, and the parallel time is the report's virtual time: speedups compare times
    // of one clock.
    let modeled = config.clock == ClockMode::Modeled;
    let (seq, seq_s) = if node {
        (AppResult::new(), 0.0)
    } else {
        let _p = (!quiet).then(|| Progress::start(format!("{} sequential", app.name())));
        // The sequential run's timed region, the part the parallel run's region
        // (`Report::elapsed_ns`) matches.
        let measured = config.compute == dsm::Compute::Measured;
        let s = crate::scale::run_sequential(app, params, &config.platform, modeled, measured)?;
        let seq_s = s.time_s(config);
        (s.result, seq_s)
    };
    let _p = (!quiet && !node).then(|| {
        Progress::start(format!(
            "{} parallel ({})",
            app.name(),
            config.protocol.name
        ))
    });
    // The process-mode rule (`dsm::skip_other_run`): a run that is another process's own
    // (an MPI rank other than 0, a node process serving another cluster) reports nothing.
    let Some((par, report)) = dsm::skip_other_run(app.parallel(params, config))
        .with_context(|| format!("parallel {} under {}", app.name(), config.protocol.name))?
    else {
        return Ok(None);
    };
    // The timed region of the parallel run (the whole run if the app marked none), in the
    // run's clock: virtual time, or wall time from the start barrier (not the launch).
    let par_s = report.elapsed_ns as f64 / 1e9;
    let verified = app.check(&seq, &par);
    Ok(Some(Outcome {
        seq,
        par,
        seq_s,
        par_s,
        verified,
        report,
    }))
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let Some(name) = a.app.as_deref() else {
        if a.help {
            outln!("Usage: cashmere run <APP> [options]\n\nApplications:");
            for app in apps::all() {
                outln!("  {:<10} {}", app.name(), app.description());
            }
            outln!("\nOptions: --size test|small|paper, --param KEY=VALUE, --input FILE, --variant NAME, --nodes N,\n  --procs P, --exec threads|processes|mpi, --network NAME, --page-kb 4|8, --backend mprotect|userfaultfd,\n  --heap-mb N, --homes FILE, --json FILE, --clock wall|modeled, --platform NAME|FILE,\n  --compute counted|measured, --cpu-scale FACTOR");
            return Ok(());
        }
        bail!("name an application: cashmere run <APP> (cashmere run --help lists them)");
    };
    let app = apps::by_name(name)?;
    if a.help {
        out!("{}", app_help(app));
        return Ok(());
    }
    let size: Size = a.size.parse()?;
    let params = Params::resolve(
        app.name(),
        app.params(),
        size,
        &parse_params(app, &a.params, &a.input)?,
    )?;
    let mut config = a.cluster.config()?;
    config.homes()?;
    check_memory(app, &params, &config)?;
    check_distinct(&[("--json", &a.json), ("--save-homes", &a.save_homes)])?;
    check_distinct(&[("--json", &a.json), ("--homes", &a.cluster.homes)])?;
    if let Some(path) = &a.save_homes {
        check_writable(path, "--save-homes")?;
    }
    if let Some(path) = &a.json {
        check_writable(path, "--json")?;
    }
    let scale = modeled_scale(app, &mut config, &a.cluster)?;
    // An MPI rank other than 0 gets no outcome: rank 0 reports the run.
    let Some(o) = run_app(app, &params, &config, false)? else {
        return Ok(());
    };
    let speedup = if o.par_s > 0.0 {
        o.seq_s / o.par_s
    } else {
        0.0
    };
    outln!(
        "{} ({size}) on {} nodes x {} procs, {} over {} ({}, {}):",
        app.name(),
        config.nodes,
        config.procs_per_node,
        config.protocol.name,
        if config.mode == ExecMode::Mpi {
            "MPI"
        } else {
            config.profile.name
        },
        config.mode,
        config.backend
    );
    match &scale {
        None => outln!("  clock: wall"),
        Some(s) => outln!(
            "  clock: modeled, platform {} (network {}), computation: {s}",
            config.platform.name,
            config.platform.network_summary()
        ),
    }
    outln!(
        "  sequential {:.3} s, parallel {:.3} s, speedup {speedup:.2}",
        o.seq_s,
        o.par_s
    );
    outln!("  result: {}", o.par);
    let c = &o.report.counters;
    if let Some(r) = &o.report.region_counters {
        outln!(
            "  timed region: page transfers {}, invalidations {}, diffs {}, migrations {} ({} attempts); whole run:",
            r.page_transfers, r.invalidations, r.diffs, r.migrations, r.migration_attempts
        );
    }
    outln!(
        "  page transfers {} ({} requests), invalidations {}, twins {}, diffs {} ({} bytes in {} word runs), write notices {}, messages {}, broadcasts {}",
        c.page_transfers, c.page_requests, c.invalidations, c.twins, c.diffs, c.diff_bytes, c.diff_runs, c.write_notices, c.messages, c.broadcasts
    );
    outln!(
        "  migrations {} ({} attempts), homes moved to their first toucher after initialization {}, redirects {}, pages broadcast {} / broadcast hits {}, notice overflows {}, deferred messages {}, stale drops {}",
        c.migrations,
        c.migration_attempts,
        c.rehomes,
        c.redirects,
        c.pages_broadcast,
        c.broadcast_hits,
        c.notice_overflows,
        c.deferred_messages,
        c.stale_drops
    );
    let total = o
        .report
        .procs
        .iter()
        .fold(dsm::Breakdown::default(), |mut t, p| {
            t.user_ns = t.user_ns.saturating_add(p.breakdown.user_ns);
            t.protocol_ns = t.protocol_ns.saturating_add(p.breakdown.protocol_ns);
            t.wait_ns = t.wait_ns.saturating_add(p.breakdown.wait_ns);
            t.message_ns = t.message_ns.saturating_add(p.breakdown.message_ns);
            t
        });
    let pct = |x: u64| 100.0 * x as f64 / total.total_ns().max(1) as f64;
    outln!(
        "  time: user {:.1}%, protocol {:.1}%, wait {:.1}%, message {:.1}%",
        pct(total.user_ns),
        pct(total.protocol_ns),
        pct(total.wait_ns),
        pct(total.message_ns)
    );
    if let Some(path) = &a.save_homes {
        std::fs::write(path, o.report.homes_file())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &a.json {
        let json = serde_json::json!({
            "schema": 1,
            "app": app.name(),
            "variant": config.protocol.name,
            "network": config.profile.name,
            "nodes": config.nodes,
            "procs": config.procs_per_node,
            "size": size.to_string(),
            "params": params.iter().collect::<std::collections::BTreeMap<_, _>>(),
            "exec": config.mode.to_string(),
            "backend": config.backend.to_string(),
            "page_bytes": config.page_bytes,
            "clock": config.clock.to_string(),
            "platform": scale.as_ref().map(|_| config.platform.name.clone()),
            "cpu_scale": scale,
            "verified": o.verified.is_ok(),
            "result": o.par.to_json(),
            "sequential_result": o.seq.to_json(),
            "seq_time_s": o.seq_s,
            "par_time_s": o.par_s,
            "speedup": speedup,
            "counters": o.report.counters,
            "region_counters": o.report.region_counters,
            "node_counters": o.report.node_counters,
            "breakdown": o.report.procs,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match &o.verified {
        Ok(()) => outln!("  verified: the parallel result matches the sequential one"),
        Err(m) => outln!("  verified: NO: {m}"),
    }
    if let Err(m) = o.verified {
        bail!("verification failed: {m}");
    }
    Ok(())
}

/// Under the modeled clock, the charge of `app`'s computation (counted work, or the CPU
/// scale factor given, cached or measured now), set in `config`; `None` under the wall
/// clock.
fn modeled_scale(
    app: &dyn App,
    config: &mut Config,
    cluster: &ClusterArgs,
) -> anyhow::Result<Option<crate::scale::Scale>> {
    if config.clock != ClockMode::Modeled {
        return Ok(None);
    }
    let s = crate::scale::charge(
        app,
        &config.platform,
        cluster.given_cpu_scale()?,
        cluster.compute_choice()?,
    )?;
    s.apply(config);
    Ok(Some(s))
}

#[derive(Args, Debug)]
pub struct SuiteArgs {
    /// Input size for every app.
    #[arg(long, default_value = "test")]
    pub size: String,
    /// Comma-separated variants (default: every variant the engine implements).
    #[arg(long)]
    pub variants: Option<String>,
    /// Comma-separated apps (default: all ten).
    #[arg(long)]
    pub apps: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

pub fn suite(a: SuiteArgs) -> anyhow::Result<()> {
    let size: Size = a.size.parse()?;
    let names: Vec<String> = match (&a.variants, a.cluster.chosen_variant()) {
        (Some(_), Some((_, "--variant"))) => {
            bail!("give either --variants (a list) or --variant (one), not both")
        }
        // The list on the command line wins over the environment's single variant.
        (Some(list), _) => list.split(',').map(|v| v.trim().to_string()).collect(),
        (None, Some((one, _))) => vec![one],
        (None, None) => protocol_variants::implemented()
            .iter()
            .map(|p| p.name.to_string())
            .collect(),
    };
    let chosen: Vec<&dyn App> = match &a.apps {
        Some(list) => list
            .split(',')
            .map(|n| apps::by_name(n.trim()))
            .collect::<Result<_, _>>()?,
        None => apps::all(),
    };
    // The whole matrix is checked before any of it runs: every variant against the
    // network and the other settings, every app's parameters and memory.
    let mut configs = Vec::new();
    let mut problems = Vec::new();
    let from_env =
        a.variants.is_none() && matches!(a.cluster.chosen_variant(), Some((_, "DSM_VARIANT")));
    for name in &names {
        let mut cluster = a.cluster.clone();
        if from_env {
            // The one variant DSM_VARIANT names: read it from there, so that an error
            // names the variable.
        } else {
            cluster.variant = Some(name.clone());
        }
        match cluster.config() {
            Ok(c) => configs.push(c),
            Err(e) => problems.push(format!("{name}: {e:#}")),
        }
    }
    let given_scale = a.cluster.given_cpu_scale()?;
    let choice = a.cluster.compute_choice()?;
    let mut runs = Vec::new();
    for app in chosen {
        match Params::resolve(app.name(), app.params(), size, &[]) {
            Ok(params) => {
                // One factor per app: every variant runs the same code.
                let scale = match configs.first() {
                    Some(c) if c.clock == ClockMode::Modeled => {
                        match crate::scale::charge(app, &c.platform, given_scale, choice) {
                            Ok(s) => Some(s),
                            Err(e) => {
                                problems.push(format!("{}: {e:#}", app.name()));
                                continue;
                            }
                        }
                    }
                    _ => None,
                };
                for config in &configs {
                    let mut config = config.clone();
                    if let Some(s) = &scale {
                        s.apply(&mut config);
                    }
                    match check_memory(app, &params, &config) {
                        Ok(()) => runs.push((app, params.clone(), config)),
                        Err(e) => problems.push(format!(
                            "{} under {}: {e:#}",
                            app.name(),
                            config.protocol.name
                        )),
                    }
                }
            }
            Err(e) => problems.push(format!("{}: {e}", app.name())),
        }
    }
    if !problems.is_empty() {
        bail!(
            "the suite cannot run as asked; nothing was run:\n  {}",
            problems.join("\n  ")
        );
    }
    let node = dsm::host::is_node_process();
    if let (false, Some((_, _, c))) = (node, runs.first()) {
        if c.clock == ClockMode::Modeled {
            outln!(
                "clock: modeled, platform {} (network {}); seq s and par s are virtual",
                c.platform.name,
                c.platform.network_summary()
            );
        }
    }
    if !node {
        outln!(
            "{:<10} {:<11} {:>8} {:>8} {:>7} {:>8} {:>6} {:>6} {:>6} {:>8} {:>12} {:>10}  result",
            "app",
            "variant",
            "seq s",
            "par s",
            "speedup",
            "verified",
            "pages",
            "invals",
            "diffs",
            "messages",
            "migr (att)",
            "bcast/hits"
        );
    }
    let mut failures = Vec::new();
    for (app, params, config) in runs {
        let proto = config.protocol;
        match run_app(app, &params, &config, true) {
            Ok(None) => continue, // another process's run: that process reports it
            Err(e) => {
                if !node {
                    outln!("{:<10} {:<11} error: {e:#}", app.name(), proto.name);
                }
                failures.push(format!("{} under {}: {e:#}", app.name(), proto.name));
            }
            Ok(Some(o)) => {
                let c = &o.report.counters;
                let ok = o.verified.is_ok();
                // "-" where the variant cannot migrate homes or broadcast pages.
                let migr = if proto.home == dsm::HomePolicy::Migrating {
                    format!("{} ({})", c.migrations, c.migration_attempts)
                } else {
                    "-".to_string()
                };
                let bcast = if proto.adaptive_broadcast {
                    format!("{}/{}", c.pages_broadcast, c.broadcast_hits)
                } else {
                    "-".to_string()
                };
                outln!(
                    "{:<10} {:<11} {:>8.3} {:>8.3} {:>7.2} {:>8} {:>6} {:>6} {:>6} {:>8} {:>12} {:>10}  {}",
                    app.name(),
                    proto.name,
                    o.seq_s,
                    o.par_s,
                    o.seq_s / o.par_s.max(1e-9),
                    if ok { "yes" } else { "NO" },
                    c.page_transfers,
                    c.invalidations,
                    c.diffs,
                    c.messages,
                    migr,
                    bcast,
                    o.par
                );
                if let Err(m) = o.verified {
                    failures.push(format!("{} under {}: {m}", app.name(), proto.name));
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        bail!(
            "{} run(s) failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        )
    }
}
