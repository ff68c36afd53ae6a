//! Platform profiles for the modeled clock (`DESIGN.md`, "Time: two clocks"): what the
//! simulated machine's host operations cost, which network it has, and how long the
//! paper's sequential runs took on it (for the CPU scale factor).
//!
//! A platform is data: the built-in one is the paper's (AlphaServer 4100 5/600 on Memory
//! Channel 2), and a user can write another as a file and pass it with `--platform FILE`.
//! [`resolve`] takes either; [`to_file_text`] writes a platform as a commented TOML file to
//! start from (`cashmere platforms --dump alphaserver-mc2 > my.toml`).
//!
//! # The file
//!
//! TOML (or JSON, for a path ending in `.json`), with the fields of [`Platform`]:
//!
//! ```toml
//! name = "my-cluster"
//! title = "..."
//! source = "where the figures come from"
//! network = "mc2"             # a profile of `cashmere profiles`
//!
//! [network_overrides]         # optional: any of the network's costs, changed
//! latency_ns = 2_000
//!
//! [host]                      # every field required: see HostCosts
//! fault_ns = 10_000
//! # ...
//!
//! [sequential_s]              # optional: seconds per app at the paper's input
//! sor = 36.2
//! ```
//!
//! Unknown keys are errors (a misspelt cost must not silently keep its default), and so
//! are costs that are negative, NaN or infinite, and figures outside the bounds a model of
//! a real machine needs: operation costs and network times at most [`MAX_OP_NS`] (1 s),
//! per-byte costs at most [`MAX_NS_PER_BYTE`] (1 ms per byte), a bandwidth of at least
//! [`MIN_BANDWIDTH`] (1 kB/s), a packet of at most [`MAX_PACKET_BYTES`], sequential times
//! from [`MIN_SEQUENTIAL_S`] to [`MAX_SEQUENTIAL_S`] (1 ns to 1,000,000 s). Far beyond any
//! real machine, these keep every modeled run's times representable (the scheduler checks
//! them too: `sched::MAX_VIRTUAL_NS`). The name may hold no control characters (it is
//! printed), and a file larger than [`MAX_FILE_BYTES`] is not read.
//!
//! # How the model composes the costs
//!
//! The scheduler charges the basic operations of the protocol from these fields and the
//! network profile (latency `L`, send and receive overheads `S` and `R`, bandwidth `B`):
//! a null message round trip is `2 (S + L + R) + handler`; a page fetch is
//! `fault + (S + L + R + handler) + copy x page + (S + L + page / B + R) + copy x page +
//! mprotect`; a twin is `copy x page`; a diff scans the page (`diff_scan x page`), encodes
//! its runs (`diff_run` each) and either remote-writes the changed bytes or sends them in
//! a message the home applies (`diff_apply` per byte) and acknowledges. The test module
//! composes the paper's Table 2 from the built-in platform this way.
//!
//! Nothing here is fitted to the results the modeled clock is meant to reproduce (the
//! paper's Table 4 and Figure 1).

use crate::profile::{self, Profile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The platform every modeled run uses unless told otherwise.
pub const DEFAULT: &str = "alphaserver-mc2";

/// The most a host operation or a network time (latency, overheads) may cost: 1 s.
pub const MAX_OP_NS: u64 = 1_000_000_000;
/// The most a per-byte cost may be: 1 ms per byte.
pub const MAX_NS_PER_BYTE: f64 = 1e6;
/// The least bandwidth a network may have, bytes per second (1 kB/s).
pub const MIN_BANDWIDTH: u64 = 1_000;
/// The largest packet payload, bytes (1 MiB).
pub const MAX_PACKET_BYTES: u64 = 1 << 20;
/// The shortest sequential time a platform may give an app, seconds (1 ns).
pub const MIN_SEQUENTIAL_S: f64 = 1e-9;
/// The longest sequential time a platform may give an app, seconds (about 11.6 days).
pub const MAX_SEQUENTIAL_S: f64 = 1e6;
/// The largest platform file read (a complete one is about 4 KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// How much of a line of the file an error quotes.
const MAX_QUOTE_CHARS: usize = 160;

/// The costs of a node's host operations, in nanoseconds (per-byte costs as fractions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Taking a page fault into the protocol's handler and returning from it.
    pub fault_ns: u64,
    /// Changing the protection of one page.
    pub mprotect_ns: u64,
    /// Copying memory (a twin, a page into a reply, a fetched page into place), per byte.
    pub copy_ns_per_byte: f64,
    /// Comparing a page with its twin to find a diff, per byte of the page.
    pub diff_scan_ns_per_byte: f64,
    /// Encoding one run into a diff: a run of consecutive changed words, as
    /// `crate::diff::encode` makes them (a word changed in part carries a byte mask). The
    /// charge is per word run, as the paper's diffs compare page and twin word by word;
    /// under remote-write data a run goes out as its changed byte ranges (so other nodes'
    /// bytes of a word survive), still charged as one run, since the modeled wire time
    /// counts bytes, not pieces. `diff_runs` counts the same runs.
    pub diff_run_ns: u64,
    /// Applying a diff at the home, per byte of changed data.
    pub diff_apply_ns_per_byte: f64,
    /// Dispatching one message handler (beyond the network's receive overhead).
    pub handler_ns: u64,
    /// One local step of a lock or barrier inside a node (hardware coherent memory).
    pub local_sync_ns: u64,
}

/// A number in a platform file: whole nanoseconds or bytes, or a fractional cost.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Whole(u64),
    Frac(f64),
}

impl HostCosts {
    /// Every field as (key, meaning, value), in declaration order: the one list that the
    /// file writer and the validation read, so a field added above and forgotten here
    /// fails the round-trip test.
    fn fields(&self) -> [(&'static str, &'static str, Num); 8] {
        use Num::{Frac, Whole};
        [
            (
                "fault_ns",
                "taking a page fault into the protocol's handler and returning from it",
                Whole(self.fault_ns),
            ),
            (
                "mprotect_ns",
                "changing the protection of one page",
                Whole(self.mprotect_ns),
            ),
            (
                "copy_ns_per_byte",
                "copying memory (a twin, a page into a reply, a fetched page into place), per byte",
                Frac(self.copy_ns_per_byte),
            ),
            (
                "diff_scan_ns_per_byte",
                "comparing a page with its twin to find a diff, per byte of the page",
                Frac(self.diff_scan_ns_per_byte),
            ),
            (
                "diff_run_ns",
                "encoding one run of changed bytes into a diff",
                Whole(self.diff_run_ns),
            ),
            (
                "diff_apply_ns_per_byte",
                "applying a diff at the home, per byte of changed data",
                Frac(self.diff_apply_ns_per_byte),
            ),
            (
                "handler_ns",
                "dispatching one message handler, beyond the network's receive overhead",
                Whole(self.handler_ns),
            ),
            (
                "local_sync_ns",
                "one local step of a lock or barrier inside a node (hardware coherent memory)",
                Whole(self.local_sync_ns),
            ),
        ]
    }
}

/// Changes to the named network profile's costs; a field left out keeps the profile's
/// figure. Features and the address space stay the profile's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_bytes_per_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_overhead_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_overhead_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_extra_ns: Option<u64>,
}

/// One field of [`NetworkOverrides`]: key, meaning, the override, and how to read the
/// profile's own figure.
type OverrideField = (&'static str, &'static str, Option<u64>, fn(&Profile) -> u64);

impl NetworkOverrides {
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, _, v, _)| v.is_none())
    }

    /// Every field.
    fn fields(&self) -> [OverrideField; 6] {
        [
            (
                "latency_ns",
                "one-way latency of a small remote write or message",
                self.latency_ns,
                |p| p.latency_ns,
            ),
            (
                "bandwidth_bytes_per_s",
                "sustained point-to-point bandwidth, bytes per second",
                self.bandwidth_bytes_per_s,
                |p| p.bandwidth_bytes_per_s,
            ),
            (
                "packet_bytes",
                "largest packet payload",
                self.packet_bytes,
                |p| p.packet_bytes,
            ),
            (
                "send_overhead_ns",
                "processor time to send one explicit message",
                self.send_overhead_ns,
                |p| p.send_overhead_ns,
            ),
            (
                "recv_overhead_ns",
                "processor time to receive and dispatch one explicit message",
                self.recv_overhead_ns,
                |p| p.recv_overhead_ns,
            ),
            (
                "broadcast_extra_ns",
                "extra time for a broadcast over a point-to-point write",
                self.broadcast_extra_ns,
                |p| p.broadcast_extra_ns,
            ),
        ]
    }
}

/// A platform: host costs, the network it runs on, and the paper's sequential times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// Short name (`alphaserver-mc2`).
    pub name: String,
    pub title: String,
    /// The network profile's name (see `dsm::profile`); `--network` overrides it.
    /// Use [`Platform::network_profile`] for the profile with this platform's overrides.
    pub network: String,
    /// Changes to the named network's costs (none for the built-in platforms).
    #[serde(default, skip_serializing_if = "NetworkOverrides::is_empty")]
    pub network_overrides: NetworkOverrides,
    pub host: HostCosts,
    /// Whether the platform's arithmetic flushes subnormal numbers to zero. Under the
    /// modeled clock the processors and the sequential run then compute that way too:
    /// this host computes subnormals in microcode, about a hundred times slower, which
    /// would charge the platform for work it never did (SOR's bands near its grid's edges,
    /// where values decay through the subnormal range, take four times as long here).
    #[serde(default)]
    pub flush_denormals: bool,
    /// Sequential time in seconds of each application on this platform at the paper's
    /// input (Table 3 for the built-in platform), by application name.
    #[serde(default)]
    pub sequential_s: BTreeMap<String, f64>,
    /// Where the figures come from.
    pub source: String,
}

/// The built-in platforms.
///
/// Sources, cited by short name below:
/// - Stets et al., "The Effect of Network Total Order, Broadcast, and Remote-Write
///   Capability on Network-Based Shared Memory Computing", HPCA 2000
///   (`cashmere-network-features-hpca2000.txt`): section 3.1 (the platform, the null
///   message round trip of 15 us, page fetch 220 us, twin 68 us), Table 2 (diff 31-129 us
///   with Memory Channel features and 70-245 us with explicit messages, lock acquire 10 and
///   33 us, barrier 29 and 53 us, at 32 processors) and Table 3 (sequential times).
/// - Fillo & Gillett, "Architecture and Implementation of MEMORY CHANNEL 2", Digital
///   Technical Journal, 1997 (`memory-channel-2.txt`), through the `mc2` network profile.
///
/// The network's figures (latency 3.3 us, 75 MB/s, 2.1 us to send and to receive a
/// message, 2 us more for a broadcast) are the `mc2` profile's; see `net/profile.rs`.
/// Host costs that Table 2 pins down only in combination are fitted to Table 2 as a whole
/// (each composed operation lands within 21% of its figure; the test module shows
/// the composition); the others are estimates. Each says which.
pub fn builtin() -> Vec<Platform> {
    // Stets et al., Table 3: "Execution times were measured by running each uninstrumented
    // application sequentially without linking it to the protocol library."
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
        name: DEFAULT.into(),
        title: "AlphaServer 4100 5/600 (4 x 21164A, 600 MHz) on Memory Channel 2".into(),
        network: "mc2".into(),
        network_overrides: NetworkOverrides::default(),
        host: HostCosts {
            // Estimate: a SIGSEGV delivered to a user handler and the return from it under
            // Digital Unix 4.0F, about 6,000 cycles at 600 MHz. Stets et al. do not give it
            // separately; the page fetch (220 us) bounds it together with mprotect_ns.
            fault_ns: 10_000,
            // Estimate: one mprotect system call on one page, about 3,000 cycles.
            mprotect_ns: 5_000,
            // Stets et al., section 3.1: "a twin operation requires 68 usecs", a copy of an
            // 8 KiB page: 68 us / 8192 B = 8.3 ns/B. (A page sent to another node is not
            // copied first: on the Memory Channel the home's stores into the transmit region
            // *are* the transmission, charged at the network's bandwidth.)
            copy_ns_per_byte: 8.3,
            // Fitted to the low ends of Table 2's diff ranges: the smallest diff is a scan of
            // the page plus one small run, remote-written (31 us) or sent as a message and
            // acknowledged (70 us). 4.0 ns/B (a 32.8 us scan) puts the two at +17% and -20%.
            diff_scan_ns_per_byte: 4.0,
            // Estimate: appending one (offset, length) header to the diff, about 120 cycles.
            diff_run_ns: 200,
            // Fitted to the high end of Table 2's diff range with explicit messages (245 us for
            // a whole changed page): 245 us less the scan (32.8), the diff's message (7.5 +
            // 109.2) and the acknowledgement round trip (15) leaves 80 us for 8192 bytes.
            diff_apply_ns_per_byte: 9.8,
            // Stets et al., section 3.1: the 15 us null message round trip "includes the
            // transfer of the message header and the invocation of a null handler function",
            // and mc2's send and receive overheads already make up those 15 us; so dispatch
            // costs nothing more, and what a handler does is charged by the fields above.
            handler_ns: 0,
            // Fitted to Table 2's locks and barriers. Beyond its network part, the lock with
            // Memory Channel features (10 us; one broadcast bid with loopback, 5.3 us) leaves
            // 4.7 us for the node's test-and-set step; the barrier (29 us; two broadcasts,
            // 10.6 us) leaves 18.4 us for four processors' arrivals on the node's counter; and
            // the lock by explicit messages (33 us; a 15 us round trip to the manager) leaves
            // 18 us for the requester's and the manager's steps. 5.5 us per step puts all four,
            // and the barrier by messages (53 us), within 21%.
            local_sync_ns: 5_500,
        },
        // The Alpha's default floating-point mode (Digital UNIX compilers without `-ieee`)
        // flushes underflows to zero instead of producing subnormal numbers; software
        // completion of subnormals is taken only with `-ieee`. Alpha Architecture Handbook,
        // section 4.7; Digital UNIX cc(1), `-ieee`.
        flush_denormals: true,
        sequential_s: seq.iter().map(|&(a, s)| (a.to_string(), s)).collect(),
        source: "Stets et al., HPCA 2000: section 3.1 (platform, null message 15 us, page fetch \
                 220 us, twin 68 us), Table 2 (diffs, locks, barriers) and Table 3 (sequential \
                 times); network: the mc2 profile (Stets et al. 3.1; Fillo & Gillett, DTJ 1997). \
                 copy, diff scan, diff apply and local sync costs are fitted to Table 2 as a \
                 whole; fault, mprotect and diff run costs are estimates"
            .into(),
    }]
}

fn builtin_names() -> String {
    builtin()
        .into_iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The built-in platform named `name`.
pub fn by_name(name: &str) -> Result<Platform, String> {
    builtin()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            format!(
            "unknown platform `{name}`; built-in platforms: {}; a platform file's path is also \
             accepted (TOML, or JSON if it ends in .json): `cashmere platforms --dump {DEFAULT} > \
             my.toml` writes one to edit",
            builtin_names()
        )
        })
}

/// A built-in platform by name, else the platform file at that path.
pub fn resolve(name_or_path: &str) -> Result<Platform, String> {
    if let Ok(p) = by_name(name_or_path) {
        return Ok(p);
    }
    let path = Path::new(name_or_path);
    let looks_like_a_path = name_or_path.contains(std::path::MAIN_SEPARATOR)
        || path.extension().is_some_and(|e| e == "toml" || e == "json");
    if path.exists() || looks_like_a_path {
        load_file(path)
    } else {
        by_name(name_or_path)
    }
}

/// Reads, parses and checks the platform file at `path` (JSON if its name ends in
/// `.json`, else TOML).
pub fn load_file(path: &Path) -> Result<Platform, String> {
    let text = crate::sys::read_regular_text(path, MAX_FILE_BYTES).map_err(|e| {
        format!(
            "platform file {} cannot be read: {e}; give the path of a platform file, or a \
             built-in platform ({})",
            path.display(),
            builtin_names()
        )
    })?;
    let json = path.extension().is_some_and(|e| e == "json");
    parse(&text, json).map_err(|e| format!("platform file {}: {e}", path.display()))
}

/// `text` with every line cut to [`MAX_QUOTE_CHARS`] characters (a parser's error quotes
/// the offending line, which may be the whole file).
fn cap_lines(text: &str) -> String {
    text.lines()
        .map(|l| match l.char_indices().nth(MAX_QUOTE_CHARS) {
            Some((i, _)) => format!("{}... (line cut)", &l[..i]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses and checks a platform from the text of a file, TOML or JSON.
pub fn parse(text: &str, json: bool) -> Result<Platform, String> {
    let dump =
        format!("`cashmere platforms --dump {DEFAULT}` prints a complete file to start from");
    let hint = |e: &dyn std::fmt::Display| {
        let e = cap_lines(&e.to_string());
        let e = e.trim_end();
        if e.contains("expected u64") {
            format!("{e} (times in ns and sizes in bytes are whole numbers, 0 or more; {dump})")
        } else {
            format!("{e} ({dump})")
        }
    };
    let platform: Platform = if json {
        serde_json::from_str(text).map_err(|e| hint(&e))?
    } else {
        toml::from_str(text).map_err(|e| hint(&e))?
    };
    platform.validate()?;
    Ok(platform)
}

impl Platform {
    /// The network profile this platform names, with its overrides applied.
    pub fn network_profile(&self) -> Result<Profile, String> {
        let mut p = profile::by_name(&self.network).map_err(|e| format!("network: {e}"))?;
        let o = &self.network_overrides;
        let set = |field: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        set(&mut p.latency_ns, o.latency_ns);
        set(&mut p.bandwidth_bytes_per_s, o.bandwidth_bytes_per_s);
        set(&mut p.packet_bytes, o.packet_bytes);
        set(&mut p.send_overhead_ns, o.send_overhead_ns);
        set(&mut p.recv_overhead_ns, o.recv_overhead_ns);
        set(&mut p.broadcast_extra_ns, o.broadcast_extra_ns);
        if p.bandwidth_bytes_per_s == 0 {
            return Err(
                "network_overrides.bandwidth_bytes_per_s is 0; give the sustained \
                        bandwidth in bytes per second (more than 0)"
                    .into(),
            );
        }
        if p.packet_bytes == 0 {
            return Err(
                "network_overrides.packet_bytes is 0; give the largest packet payload \
                        in bytes (more than 0)"
                    .into(),
            );
        }
        if !p.features.broadcast && p.broadcast_extra_ns != 0 {
            return Err(format!(
                "network_overrides.broadcast_extra_ns is {} but {} has no hardware broadcast \
                 (the protocol sends one message per node instead); leave it out or set it to 0",
                p.broadcast_extra_ns, p.name
            ));
        }
        Ok(p)
    }

    /// The network as a report states it: `mc2`, or `mc2 (latency_ns = 2000, ...)`.
    pub fn network_summary(&self) -> String {
        let changed: Vec<String> = self
            .network_overrides
            .fields()
            .iter()
            .filter_map(|(k, _, v, _)| v.map(|v| format!("{k} = {v}")))
            .collect();
        if changed.is_empty() {
            self.network.clone()
        } else {
            format!("{} ({})", self.network, changed.join(", "))
        }
    }

    /// Checks what the types do not: a name, finite non-negative costs, positive
    /// sequential times, a known network and sensible overrides.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` is empty; give the platform a short name".into());
        }
        if let Some(c) = self.name.chars().find(|c| c.is_control()) {
            return Err(format!(
                "`name` holds the control character {:?}, which would reach the terminal \
                 raw; give the platform a short name of printable characters",
                c
            ));
        }
        for (key, _, value) in self.host.fields() {
            match value {
                Num::Frac(v) => {
                    if !v.is_finite() || v < 0.0 {
                        return Err(format!(
                            "host.{key} = {v} is not a cost; give a finite number of \
                             nanoseconds, 0 or more"
                        ));
                    }
                    if v > MAX_NS_PER_BYTE {
                        return Err(format!(
                            "host.{key} = {v:e} is above the bound of {MAX_NS_PER_BYTE:e} ns per \
                             byte (1 ms) a modeled platform may charge; give a cost from 0 to \
                             {MAX_NS_PER_BYTE:e}"
                        ));
                    }
                }
                Num::Whole(v) => {
                    if v > MAX_OP_NS {
                        return Err(format!(
                            "host.{key} = {v} is above the bound of {MAX_OP_NS} ns (1 s) a \
                             modeled platform may charge for one operation; give a cost from 0 \
                             to {MAX_OP_NS}"
                        ));
                    }
                }
            }
        }
        let o = &self.network_overrides;
        for (key, value) in [
            ("latency_ns", o.latency_ns),
            ("send_overhead_ns", o.send_overhead_ns),
            ("recv_overhead_ns", o.recv_overhead_ns),
            ("broadcast_extra_ns", o.broadcast_extra_ns),
        ] {
            if let Some(v) = value.filter(|&v| v > MAX_OP_NS) {
                return Err(format!(
                    "network_overrides.{key} = {v} is above the bound of {MAX_OP_NS} ns (1 s); \
                     give a time from 0 to {MAX_OP_NS}, or leave it out for the profile's own"
                ));
            }
        }
        if let Some(v) = o.bandwidth_bytes_per_s.filter(|&v| v > 0 && v < MIN_BANDWIDTH) {
            return Err(format!(
                "network_overrides.bandwidth_bytes_per_s = {v} is below the bound of \
                 {MIN_BANDWIDTH} bytes per second; give a bandwidth of at least {MIN_BANDWIDTH}, \
                 or leave it out for the profile's own"
            ));
        }
        if let Some(v) = o.packet_bytes.filter(|&v| v > MAX_PACKET_BYTES) {
            return Err(format!(
                "network_overrides.packet_bytes = {v} is above the bound of {MAX_PACKET_BYTES} \
                 bytes; give a payload from 1 to {MAX_PACKET_BYTES}, or leave it out"
            ));
        }
        for (app, s) in &self.sequential_s {
            if !s.is_finite() || *s <= 0.0 {
                return Err(format!(
                    "sequential_s.{app} = {s} is not a time; give the sequential run's \
                     seconds, more than 0"
                ));
            }
            if !(MIN_SEQUENTIAL_S..=MAX_SEQUENTIAL_S).contains(s) {
                return Err(format!(
                    "sequential_s.{app} = {s:e} is outside the bounds of {MIN_SEQUENTIAL_S:e} \
                     to {MAX_SEQUENTIAL_S:e} seconds a sequential time may have; give the \
                     app's sequential seconds at the paper's input on this platform"
                ));
            }
        }
        self.network_profile().map(|_| ())
    }
}

/// `platform` as a commented TOML platform file that [`resolve`] reads back as an equal
/// platform.
pub fn to_file_text(platform: &Platform) -> String {
    let p = platform;
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        out.push('\n');
    };
    line(&format!(
        "# cashmere platform `{}`: what the modeled clock charges.",
        p.name
    ));
    line("# Use it with `cashmere run APP --clock modeled --platform THIS_FILE`. Edit any figure");
    line("# for a \"what if\" run; times are nanoseconds (whole numbers unless the key says");
    line("# per_byte), and every key below is required except [network_overrides] and");
    line("# [sequential_s].");
    line("");
    line(&format!("name = {}", toml_string(&p.name)));
    line(&format!("title = {}", toml_string(&p.title)));
    line(&format!("source = {}", toml_string(&p.source)));
    line("");
    line("# The network profile by name (`cashmere profiles` lists them).");
    line(&format!("network = {}", toml_string(&p.network)));
    line("");
    line("# Whether the platform's arithmetic flushes subnormal numbers to zero (modeled runs");
    line("# then compute that way on this host, sequential and parallel alike).");
    line(&format!("flush_denormals = {}", p.flush_denormals));
    line("");
    line("# Changes to that network's costs: uncomment a key to change it. The commented");
    line("# values are the profile's own.");
    line("[network_overrides]");
    let base = profile::by_name(&p.network).ok();
    for (key, help, value, of_profile) in p.network_overrides.fields() {
        line(&format!("# {help}"));
        match (value, &base) {
            (Some(v), _) => line(&format!("{key} = {}", whole(v))),
            (None, Some(b)) => line(&format!("# {key} = {}", whole(of_profile(b)))),
            (None, None) => line(&format!("# {key} = ")),
        }
    }
    line("");
    line("[host]");
    for (key, help, value) in p.host.fields() {
        line(&format!("# {help}"));
        let v = match value {
            Num::Whole(v) => whole(v),
            Num::Frac(v) => frac(v),
        };
        line(&format!("{key} = {v}"));
    }
    line("");
    line("# Each application's sequential time at the paper's input on this platform, in");
    line("# seconds: the CPU scale factor of the modeled clock is this over this machine's.");
    line("[sequential_s]");
    for (app, s) in &p.sequential_s {
        line(&format!("{} = {}", toml_key(app), frac(*s)));
    }
    out
}

/// A whole number, grouped by thousands from 10,000 up (`10_000`).
fn whole(v: u64) -> String {
    let digits = v.to_string();
    if digits.len() < 5 {
        return digits;
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// A float that reads back as the same float (`7.0`, `1342.49`, `nan`).
fn frac(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{v:?}")
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare if it can be, else quoted.
fn toml_key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        k.to_string()
    } else {
        toml_string(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A directory of its own under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("cashmere-platform-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            TempDir(dir)
        }

        fn write(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).expect("a temporary file");
            path.to_str().expect("a UTF-8 path").to_string()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn builtins_are_valid_and_resolve_by_name() {
        let all = builtin();
        for p in &all {
            p.validate().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert!(!p.source.is_empty());
            assert_eq!(resolve(&p.name).unwrap(), *p);
        }
        let mut names: Vec<_> = all.iter().map(|p| p.name.clone()).collect();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let mc2 = resolve(DEFAULT).unwrap();
        assert_eq!(
            mc2.network_profile().unwrap(),
            profile::by_name("mc2").unwrap()
        );
        assert_eq!(mc2.sequential_s.len(), 10);
    }

    #[test]
    fn an_unknown_name_lists_the_builtins_and_mentions_files() {
        let e = resolve("alphaserver-mc3").unwrap_err();
        assert!(e.contains("unknown platform `alphaserver-mc3`"), "{e}");
        assert!(e.contains("built-in platforms: alphaserver-mc2"), "{e}");
        assert!(e.contains("path") && e.contains("--dump"), "{e}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = resolve("/nonexistent/cashmere/my.toml").unwrap_err();
        assert!(
            e.contains("platform file /nonexistent/cashmere/my.toml cannot be read"),
            "{e}"
        );
        assert!(e.contains("alphaserver-mc2"), "{e}");
    }

    #[test]
    fn the_file_text_reads_back_as_the_same_platform() {
        let dir = TempDir::new("roundtrip");
        let mc2 = by_name(DEFAULT).unwrap();
        let path = dir.write("mc2.toml", &to_file_text(&mc2));
        assert_eq!(resolve(&path).unwrap(), mc2);

        // Overrides, odd strings and keys, and fractional figures survive too.
        let mut odd = mc2.clone();
        odd.name = "what-if \"fast\" network".into();
        odd.title = "tab\there, back\\slash, newline\nand \u{1} control".into();
        odd.network_overrides.latency_ns = Some(1_000);
        odd.network_overrides.broadcast_extra_ns = Some(0);
        odd.host.copy_ns_per_byte = 0.1 + 0.2;
        odd.host.fault_ns = 123_456_789;
        odd.sequential_s.insert("my app".into(), 1e-7);
        let text = to_file_text(&odd);
        assert!(text.contains("latency_ns = 1000\n"), "{text}");
        assert!(text.contains("# send_overhead_ns = 2100\n"), "{text}");
        let path = dir.write("odd.toml", &text);
        assert_eq!(resolve(&path).unwrap(), odd);

        // JSON, by extension.
        let path = dir.write("odd.json", &serde_json::to_string_pretty(&odd).unwrap());
        assert_eq!(resolve(&path).unwrap(), odd);
    }

    #[test]
    fn overrides_change_a_copy_of_the_named_profile() {
        let mut p = by_name(DEFAULT).unwrap();
        p.network_overrides = NetworkOverrides {
            latency_ns: Some(1_000),
            bandwidth_bytes_per_s: Some(1_000_000_000),
            send_overhead_ns: Some(500),
            ..NetworkOverrides::default()
        };
        let net = p.network_profile().unwrap();
        let mc2 = profile::by_name("mc2").unwrap();
        assert_eq!(
            (
                net.latency_ns,
                net.bandwidth_bytes_per_s,
                net.send_overhead_ns
            ),
            (1_000, 1_000_000_000, 500)
        );
        assert_eq!(net.recv_overhead_ns, mc2.recv_overhead_ns);
        assert_eq!((net.name, net.features), (mc2.name, mc2.features));
        assert_eq!(
            p.network_summary(),
            "mc2 (latency_ns = 1000, bandwidth_bytes_per_s = 1000000000, send_overhead_ns = 500)"
        );
    }

    /// Each bad file and what its error must say.
    #[test]
    fn bad_files_say_what_is_wrong() {
        let dir = TempDir::new("bad");
        let good = to_file_text(&by_name(DEFAULT).unwrap());
        let cases: Vec<(&str, String, &[&str])> = vec![
            (
                "syntax.toml",
                good.replace("fault_ns = 10_000", "fault_ns = = 10_000"),
                &["syntax.toml", "line 3"],
            ),
            (
                "missing.toml",
                good.replace("mprotect_ns = 5000\n", ""),
                &[
                    "missing.toml",
                    "missing field `mprotect_ns`",
                    "--dump alphaserver-mc2",
                ],
            ),
            (
                "typo.toml",
                good.replace("fault_ns =", "fualt_ns ="),
                &["typo.toml", "unknown field `fualt_ns`", "fault_ns"],
            ),
            (
                "negative.toml",
                good.replace("fault_ns = 10_000", "fault_ns = -10"),
                &[
                    "negative.toml",
                    "fault_ns",
                    "-10",
                    "whole numbers, 0 or more",
                ],
            ),
            (
                "nan.toml",
                good.replace("copy_ns_per_byte = 8.3", "copy_ns_per_byte = nan"),
                &["nan.toml", "host.copy_ns_per_byte = NaN is not a cost"],
            ),
            (
                "below-zero.toml",
                good.replace(
                    "diff_scan_ns_per_byte = 4.0",
                    "diff_scan_ns_per_byte = -4.0",
                ),
                &["host.diff_scan_ns_per_byte = -4 is not a cost", "0 or more"],
            ),
            (
                "seq.toml",
                good.replace("sor = 36.2", "sor = 0.0"),
                &["sequential_s.sor = 0 is not a time"],
            ),
            (
                "network.toml",
                good.replace("network = \"mc2\"", "network = \"mc3\""),
                &[
                    "network.toml",
                    "unknown network profile `mc3`",
                    "valid profiles: mc1, mc2",
                ],
            ),
            (
                "bcast.toml",
                good.replace("network = \"mc2\"", "network = \"myrinet\"")
                    .replace("# broadcast_extra_ns = 2000", "broadcast_extra_ns = 2000"),
                &["broadcast_extra_ns is 2000", "no hardware broadcast"],
            ),
            (
                "bandwidth.json",
                serde_json::to_string(&by_name(DEFAULT).unwrap())
                    .unwrap()
                    .replace(
                        "\"network\":\"mc2\"",
                        "\"network\":\"mc2\",\"network_overrides\":{\"bandwidth_bytes_per_s\":0}",
                    ),
                &["bandwidth.json", "bandwidth_bytes_per_s is 0"],
            ),
            (
                "truncated.json",
                "{\"name\": \"x\",".to_string(),
                &["truncated.json", "line 1"],
            ),
            (
                "fault-max.toml",
                good.replace("fault_ns = 10_000", "fault_ns = 18446744073709551615"),
                &["fault-max.toml", "host.fault_ns", "above the bound", "from 0 to"],
            ),
            (
                "fault-1e18.toml",
                good.replace("fault_ns = 10_000", "fault_ns = 1_000_000_000_000_000_000"),
                &["host.fault_ns = 1000000000000000000", "above the bound"],
            ),
            (
                "copy.toml",
                good.replace("copy_ns_per_byte = 8.3", "copy_ns_per_byte = 1e300"),
                &["host.copy_ns_per_byte = 1e300", "above the bound"],
            ),
            (
                "latency.toml",
                good.replace("# latency_ns = 3300", "latency_ns = 18446744073709551615"),
                &["network_overrides.latency_ns", "above the bound"],
            ),
            (
                "bandwidth-low.toml",
                good.replace("# bandwidth_bytes_per_s = 75_000_000", "bandwidth_bytes_per_s = 1"),
                &["network_overrides.bandwidth_bytes_per_s = 1", "at least 1000"],
            ),
            (
                "seq-huge.toml",
                good.replace("sor = 36.2", "sor = 1e300"),
                &["sequential_s.sor = 1e300", "outside the bounds"],
            ),
            (
                "control.toml",
                good.replace("name = \"alphaserver-mc2\"", "name = \"mc\\u001b[31mred\""),
                &["control character", "printable"],
            ),
            (
                "long-line.toml",
                format!("name = \"{}\" junk", "x".repeat(500_000)),
                &["long-line.toml", "(line cut)"],
            ),
            (
                "huge.toml",
                format!("# {}\n", "x".repeat(2 << 20)),
                &["huge.toml", "cannot be read", "larger than the limit of 1 MiB"],
            ),
        ];
        for (file, text, wanted) in cases {
            let path = dir.write(file, &text);
            let e = resolve(&path).expect_err(file);
            for w in wanted {
                assert!(e.contains(w), "{file}: `{w}` not in: {e}");
            }
            assert!(e.len() < 2000, "{file}: a message of {} bytes", e.len());
            assert!(!e.contains('\u{1b}'), "{file}: a raw control character: {e:?}");
        }
    }

    /// Stets et al., section 3.1 and Table 2, composed from the built-in platform the way the
    /// modeled clock charges each operation (module doc), for the paper's 8 nodes x 4
    /// processors: every figure within 25%. This checks the profile's arithmetic, not the
    /// scheduler; `cashmere bench proto --clock modeled` checks the two together.
    #[test]
    fn alphaserver_mc2_composes_table_2() {
        let p = by_name(DEFAULT).unwrap();
        let net = p.network_profile().unwrap();
        let h = &p.host;
        let (lat, send, recv) = (
            net.latency_ns as f64,
            net.send_overhead_ns as f64,
            net.recv_overhead_ns as f64,
        );
        let wire = |bytes: f64| bytes * 1e9 / net.bandwidth_bytes_per_s as f64;
        let handler = h.handler_ns as f64;
        let local = h.local_sync_ns as f64;
        let run = h.diff_run_ns as f64;
        let page = 8192.0;
        let (nodes, procs) = (8.0, 4.0);
        // One explicit message without payload, and a request with its reply.
        let message = send + lat + recv;
        let round_trip = 2.0 * message + handler;
        // A broadcast remote write seen by everyone (and by its writer, through loopback).
        let broadcast = lat + net.broadcast_extra_ns as f64;
        let copy = |bytes: f64| h.copy_ns_per_byte * bytes;
        let scan = h.diff_scan_ns_per_byte * page;
        // A diff of `bytes` changed bytes in `runs` runs: remote-written into the home's
        // copy (CSM-DMS), or sent to the home, applied there and acknowledged (CSM-MS).
        let diff_remote_write = |bytes: f64, runs: f64| scan + runs * run + wire(bytes) + lat;
        let diff_message = |bytes: f64, runs: f64| {
            scan + runs * run
                + (message + wire(bytes) + handler)
                + h.diff_apply_ns_per_byte * bytes
                + round_trip
        };
        // The home's stores of the page into the requester's ring are the reply's wire
        // time; the requester copies it into place.
        let fetch = h.fault_ns as f64
            + (message + handler)
            + (message + wire(page))
            + copy(page)
            + h.mprotect_ns as f64;
        // Memory Channel lock: the node's test-and-set step, then a broadcast bid that
        // loops back. By messages: a request the manager handles with a step of its own,
        // and the grant.
        let lock_network = local + broadcast;
        let lock_messages = local + (message + handler) + local + message;
        // Barrier: the node's processors arrive one after another on its counter; then
        // under Memory Channel features each node broadcasts its arrival (the hub carries
        // the other nodes' 8-byte arrivals one after another) and the master broadcasts the
        // sense; by messages the manager receives the other nodes' arrivals one after
        // another and sends each a release.
        let barrier_network = procs * local + broadcast + (nodes - 1.0) * wire(8.0) + broadcast;
        let barrier_messages = procs * local
            + (send + lat)
            + (nodes - 1.0) * (recv + handler)
            + (nodes - 1.0) * send
            + (lat + recv);
        let table = [
            ("null message round trip", round_trip, 15.0),
            ("page fetch", fetch, 220.0),
            ("twin", copy(page), 68.0),
            (
                "diff, MC features, one 8-byte run",
                diff_remote_write(8.0, 1.0),
                31.0,
            ),
            (
                "diff, MC features, whole page",
                diff_remote_write(page, 1.0),
                129.0,
            ),
            (
                "diff, messages, one 8-byte run",
                diff_message(8.0, 1.0),
                70.0,
            ),
            ("diff, messages, whole page", diff_message(page, 1.0), 245.0),
            ("lock acquire, MC features", lock_network, 10.0),
            ("lock acquire, messages", lock_messages, 33.0),
            ("barrier, MC features", barrier_network, 29.0),
            ("barrier, messages", barrier_messages, 53.0),
        ];
        let mut off = Vec::new();
        for (what, ns, paper_us) in table {
            let us = ns / 1e3;
            let error = us / paper_us - 1.0;
            println!(
                "{what:<36} {us:>8.1} us  Table 2: {paper_us:>6.1} us  {:>+6.1}%",
                100.0 * error
            );
            if error.abs() > 0.25 {
                off.push(format!("{what}: {us:.1} us against {paper_us} us"));
            }
        }
        assert!(off.is_empty(), "more than 25% off Table 2: {off:?}");
    }
}
