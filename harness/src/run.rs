//! `cashmere run` and `cashmere suite`.

use crate::apps;
use anyhow::{bail, Context};
use app_common::{App, AppResult, Params, Size};
use clap::Args;
use dsm::{Config, ExecMode, FaultBackend};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Options every run shares: the cluster and the protocol.
#[derive(Args, Clone, Debug)]
pub struct ClusterArgs {
    /// Protocol variant (CSM-DMS, CSM-MS, CSM-S, CSM-None, CSM-MS-Mg, CSM-None-Mg, CSM-ADB).
    #[arg(long, default_value = "CSM-DMS", env = "DSM_VARIANT")]
    pub variant: String,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Processors per node.
    #[arg(long, default_value_t = 2)]
    pub procs: usize,
    /// threads (every node in this process) or processes (one process per node).
    #[arg(long, default_value = "threads", env = "DSM_EXEC")]
    pub exec: ExecMode,
    /// Network profile (`cashmere profiles` lists them).
    #[arg(long, default_value = "mc2", env = "DSM_NETWORK")]
    pub network: String,
    /// Coherence page size in KiB (4 or 8).
    #[arg(long, default_value_t = 8, env = "DSM_PAGE_KB")]
    pub page_kb: usize,
    /// Fault backend: mprotect or userfaultfd.
    #[arg(long, default_value = "mprotect", env = "DSM_BACKEND")]
    pub backend: FaultBackend,
    /// Shared heap per node in MiB.
    #[arg(long, default_value_t = 1024, env = "DSM_HEAP_MB")]
    pub heap_mb: usize,
    /// Replay home assignments from a file (`page home` per line).
    #[arg(long)]
    pub homes: Option<PathBuf>,
}

impl ClusterArgs {
    pub fn config(&self) -> anyhow::Result<Config> {
        let protocol = protocol_variants::by_name(&self.variant)?;
        let mut c = Config::new(self.nodes, self.procs, protocol);
        c.profile = dsm::net::profile::by_name(&self.network)?;
        c.page_bytes = self.page_kb * 1024;
        c.backend = self.backend;
        c.mode = self.exec;
        c.heap_bytes = self.heap_mb << 20;
        c.homes_file = self.homes.clone();
        c.validate()?;
        Ok(c)
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
            Some(name) => out.push((name.to_string(), file.clone())),
            None => bail!("{} reads no input file; its inputs are generated from parameters (see `cashmere run {} --help`)", app.name(), app.name()),
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

/// A progress line on standard error for runs that take a while.
struct Progress {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(what: String) -> Progress {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut shown = false;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::park_timeout(std::time::Duration::from_millis(250));
                if t0.elapsed().as_secs() >= 2 {
                    eprint!("\r{what}: {:.0} s", t0.elapsed().as_secs_f64());
                    let _ = std::io::stderr().flush();
                    shown = true;
                }
            }
            if shown {
                eprintln!();
            }
        });
        Progress {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
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
) -> anyhow::Result<Outcome> {
    let node = dsm::launch::is_node_process();
    let (seq, seq_s) = if node {
        (AppResult::new(), 0.0)
    } else {
        let _p = (!quiet).then(|| Progress::start(format!("{} sequential", app.name())));
        let t = Instant::now();
        let r = app
            .sequential(params)
            .with_context(|| format!("sequential {}", app.name()))?;
        (r, t.elapsed().as_secs_f64())
    };
    let _p = (!quiet && !node).then(|| {
        Progress::start(format!(
            "{} parallel ({})",
            app.name(),
            config.protocol.name
        ))
    });
    let t = Instant::now();
    let (par, report) = app
        .parallel(params, config)
        .with_context(|| format!("parallel {} under {}", app.name(), config.protocol.name))?;
    let par_s = t.elapsed().as_secs_f64();
    let verified = app.check(&seq, &par);
    Ok(Outcome {
        seq,
        par,
        seq_s,
        par_s,
        verified,
        report,
    })
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let Some(name) = a.app.as_deref() else {
        if a.help {
            println!("Usage: cashmere run <APP> [options]\n\nApplications:");
            for app in apps::all() {
                println!("  {:<10} {}", app.name(), app.description());
            }
            println!("\nOptions: --size test|small|paper, --param KEY=VALUE, --input FILE, --variant NAME, --nodes N,\n  --procs P, --exec threads|processes, --network NAME, --page-kb 4|8, --backend mprotect|userfaultfd,\n  --heap-mb N, --homes FILE, --json FILE");
            return Ok(());
        }
        bail!("name an application: cashmere run <APP> (cashmere run --help lists them)");
    };
    let app = apps::by_name(name)?;
    if a.help {
        print!("{}", app_help(app));
        return Ok(());
    }
    let size: Size = a.size.parse()?;
    let params = Params::resolve(
        app.name(),
        app.params(),
        size,
        &parse_params(app, &a.params, &a.input)?,
    )?;
    let config = a.cluster.config()?;
    let o = run_app(app, &params, &config, false)?;
    let speedup = if o.par_s > 0.0 {
        o.seq_s / o.par_s
    } else {
        0.0
    };
    println!(
        "{} ({size}) on {} nodes x {} procs, {} over {} ({}, {}):",
        app.name(),
        config.nodes,
        config.procs_per_node,
        config.protocol.name,
        config.profile.name,
        config.mode,
        config.backend
    );
    println!(
        "  sequential {:.3} s, parallel {:.3} s, speedup {speedup:.2}",
        o.seq_s, o.par_s
    );
    println!("  result: {}", o.par);
    let c = &o.report.counters;
    println!(
        "  page transfers {}, invalidations {}, twins {}, diffs {} ({} bytes), write notices {}, messages {}, broadcasts {}",
        c.page_transfers, c.invalidations, c.twins, c.diffs, c.diff_bytes, c.write_notices, c.messages, c.broadcasts
    );
    println!(
        "  migrations {} ({} attempts), redirects {}, pages broadcast {} / broadcast hits {}, notice overflows {}, deferred messages {}, stale drops {}",
        c.migrations,
        c.migration_attempts,
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
            t.user_ns += p.breakdown.user_ns;
            t.protocol_ns += p.breakdown.protocol_ns;
            t.wait_ns += p.breakdown.wait_ns;
            t.message_ns += p.breakdown.message_ns;
            t
        });
    let pct = |x: u64| 100.0 * x as f64 / total.total_ns().max(1) as f64;
    println!(
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
            "verified": o.verified.is_ok(),
            "result": o.par.to_json(),
            "sequential_result": o.seq.to_json(),
            "seq_time_s": o.seq_s,
            "par_time_s": o.par_s,
            "speedup": speedup,
            "counters": o.report.counters,
            "node_counters": o.report.node_counters,
            "breakdown": o.report.procs,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match o.verified {
        Ok(()) => {
            println!("  verified: the parallel result matches the sequential one");
            Ok(())
        }
        Err(m) => bail!("verification failed: {m}"),
    }
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
    let variants: Vec<dsm::Protocol> = match &a.variants {
        Some(list) => list
            .split(',')
            .map(|v| protocol_variants::by_name(v.trim()))
            .collect::<Result<_, _>>()?,
        None => protocol_variants::implemented(),
    };
    let chosen: Vec<&dyn App> = match &a.apps {
        Some(list) => list
            .split(',')
            .map(|n| apps::by_name(n.trim()))
            .collect::<Result<_, _>>()?,
        None => apps::all(),
    };
    let node = dsm::launch::is_node_process();
    if !node {
        println!(
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
    for app in chosen {
        let params = Params::resolve(app.name(), app.params(), size, &[])?;
        for proto in &variants {
            let mut cluster = a.cluster.clone();
            cluster.variant = proto.name.to_string();
            let config = cluster.config()?;
            match run_app(app, &params, &config, true) {
                Err(e) => {
                    if e.downcast_ref::<app_common::AppError>()
                        .is_some_and(|ae| ae.is_other_run())
                    {
                        continue;
                    }
                    if !node {
                        println!("{:<10} {:<11} error: {e:#}", app.name(), proto.name);
                    }
                    failures.push(format!("{} under {}: {e:#}", app.name(), proto.name));
                }
                Ok(o) => {
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
                    println!(
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
