//! `cashmere platforms`: the platforms the modeled clock can charge, and `--dump` to start
//! a platform file of one's own.

use clap::Args;
use dsm::platform::{self, Platform};

#[derive(Args, Debug)]
pub struct PlatformsArgs {
    /// Print this platform (a built-in name or a platform file) as a platform file to
    /// edit: `cashmere platforms --dump alphaserver-mc2 > my.toml`, then `--platform
    /// my.toml`.
    #[arg(long, value_name = "NAME|FILE")]
    pub dump: Option<String>,
}

/// A built-in platform or a platform file ([`platform::resolve`]) whose sequential times
/// name only applications of the suite (a misspelt one would silently never be used).
pub fn resolve(name_or_path: &str) -> Result<Platform, String> {
    let p = platform::resolve(name_or_path)?;
    let apps: Vec<&str> = crate::apps::all().iter().map(|a| a.name()).collect();
    if let Some(key) = p.sequential_s.keys().find(|k| !apps.contains(&k.as_str())) {
        let file = if platform::by_name(name_or_path).is_ok() {
            format!("platform {name_or_path}")
        } else {
            format!("platform file {name_or_path}")
        };
        return Err(format!(
            "{file}: [sequential_s] names `{}`, which is not an application; valid names: \
             {}; correct or remove that line",
            key.escape_debug(),
            apps.join(", ")
        ));
    }
    Ok(p)
}

pub fn platforms(a: PlatformsArgs) -> anyhow::Result<()> {
    if let Some(which) = a.dump {
        let p = resolve(&which).map_err(anyhow::Error::msg)?;
        out!("{}", platform::to_file_text(&p));
        return Ok(());
    }
    let all = platform::builtin();
    outln!(
        "{:<16} {:<9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8}  apps timed",
        "name",
        "network",
        "fault us",
        "mprot us",
        "copy/B",
        "scan/B",
        "run us",
        "apply/B",
        "hndlr us",
        "sync us"
    );
    for p in &all {
        print_row(p);
    }
    outln!();
    for p in &all {
        outln!("{}: {}", p.name, p.title);
        outln!("  source: {}", p.source);
    }
    outln!(
        "\nPer-byte costs are ns per byte. `cashmere platforms --dump NAME > my.toml` writes a \
         platform as a file to edit; run with `--clock modeled --platform my.toml`."
    );
    Ok(())
}

fn print_row(p: &Platform) {
    let h = &p.host;
    let us = |ns: u64| ns as f64 / 1e3;
    outln!(
        "{:<16} {:<9} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>7.2} {:>8.2} {:>8.1} {:>8.1}  {}",
        p.name,
        p.network_summary(),
        us(h.fault_ns),
        us(h.mprotect_ns),
        h.copy_ns_per_byte,
        h.diff_scan_ns_per_byte,
        us(h.diff_run_ns),
        h.diff_apply_ns_per_byte,
        us(h.handler_ns),
        us(h.local_sync_ns),
        p.sequential_s.len()
    );
}
