//! `cashmere calibrate`: the facts behind each app's counted work (`App::work`,
//! `dsm::work`), measured by running its sequential version: the units of each kind it
//! counts in its timed region, checked against the declared `paper_units` at the paper's
//! input, and this host's time per unit of each kind (the relative costs, `host_ns`, that
//! split the platform's sequential time between an app's kinds).
//!
//! The units are a property of the program and its input and repeat exactly; the host
//! costs are wall time on this machine (run it on a quiet one). Neither comes from the
//! results the table reproduces.

use anyhow::bail;
use app_common::{Params, Size};
use clap::Args;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Comma-separated apps (default: every app that counts its work).
    #[arg(long)]
    pub apps: Option<String>,
    /// Input size: the declared units are checked at `paper`, the only size they are for.
    #[arg(long, default_value = "paper")]
    pub size: String,
}

pub fn calibrate(a: CalibrateArgs) -> anyhow::Result<()> {
    let size: Size = a.size.parse()?;
    let chosen: Vec<&dyn app_common::App> = match &a.apps {
        Some(list) => list
            .split(',')
            .map(|n| crate::apps::by_name(n.trim()))
            .collect::<Result<_, _>>()?,
        None => crate::apps::all().into_iter().filter(|a| !a.work().is_empty()).collect(),
    };
    let mut stale = Vec::new();
    for app in chosen {
        let kinds = app.work();
        if kinds.is_empty() {
            outln!("{}: counts no work (its modeled runs measure CPU time)", app.name());
            continue;
        }
        let params = Params::resolve(app.name(), app.params(), size, &[])?;
        // As the platform computes (subnormals flushed), as a modeled run's processors do.
        let flush = dsm::host::flush_denormals(true);
        let ((result, took), spent) = dsm::work::calibrate(|| {
            app_common::timing::measure(|| app.sequential(&params))
        });
        drop(flush);
        result?;
        outln!(
            "{} ({size}, timed region {:.3} s wall):",
            app.name(),
            took.wall_ns as f64 / 1e9
        );
        for (k, kind) in kinds.iter().enumerate() {
            let units = took.work[k];
            let per = if units > 0 { spent[k] as f64 / units as f64 } else { 0.0 };
            let check = match size {
                Size::Paper if kind.paper_units == units => "matches the declared paper_units".to_string(),
                Size::Paper => {
                    stale.push(format!("{} {}", app.name(), kind.name));
                    format!("DIFFERS from the declared paper_units {}", kind.paper_units)
                }
                _ => "(paper_units are checked at --size paper)".to_string(),
            };
            outln!(
                "  kind {k} {:<12} units {units:>16}  host {per:>9.3} ns/unit (declared {:.3})  {check}",
                kind.name,
                kind.host_ns
            );
        }
        if took.work[kinds.len()..].iter().any(|&u| u > 0) {
            stale.push(format!("{} (undeclared kinds)", app.name()));
            outln!("  units of undeclared kinds: {:?}", &took.work[kinds.len()..]);
        }
    }
    if !stale.is_empty() {
        bail!(
            "declared paper units differ from the counts for: {}; update App::work's paper_units",
            stale.join(", ")
        );
    }
    Ok(())
}
