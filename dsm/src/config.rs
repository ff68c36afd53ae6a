//! Cluster configuration: shape, protocol strategies, network, pages, fault backend,
//! execution mode, heap size; with `DSM_*` environment overrides, and the checks that
//! refuse a bad configuration with a [`DsmError`].

use crate::error::DsmError;
use crate::launch::ExecMode;
use crate::profile::{self, Features, Profile};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How modified shared data reaches the home node (the paper's "data" column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataStrategy {
    /// Master copies live in network address space; diffs are remote-written into them.
    RemoteWrite,
    /// Diffs travel as explicit messages that the home applies and acknowledges.
    Messages,
}

/// Where the page directory and write notices live (the paper's "metadata" column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataStrategy {
    /// Every node holds the whole directory, updated by broadcast remote writes; write
    /// notices are remote-written into per-node lists.
    Replicated,
    /// The home holds a page's entry; other nodes ask it (piggybacked on fetches and
    /// diffs); write notices are explicit messages.
    HomeHeld,
}

/// How locks, barriers and flags work (the paper's "synchronization" column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncStrategy {
    /// Memory Channel locks, barriers and flags built on remote write, broadcast,
    /// loopback and total order.
    Network,
    /// A manager node per object, reached by explicit messages.
    Messages,
}

/// How a page's home is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HomePolicy {
    /// The first node to touch a page becomes its home, for good.
    FirstTouch,
    /// Homes move to writers (section 2.3.5).
    Migrating,
}

/// A protocol: one strategy per area of communication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protocol {
    pub name: &'static str,
    pub data: DataStrategy,
    pub metadata: MetadataStrategy,
    pub sync: SyncStrategy,
    pub home: HomePolicy,
    /// Adaptive broadcast of widely read pages (section 2.3.6).
    pub adaptive_broadcast: bool,
}

impl Protocol {
    /// The network features this protocol relies on.
    pub fn needs(&self) -> Features {
        let mc = Features {
            remote_write: true,
            broadcast: true,
            total_order: true,
            loopback: false,
            remote_read: false,
        };
        let mut f = Features::NONE;
        if self.data == DataStrategy::RemoteWrite {
            f.remote_write = true;
            f.total_order = true;
        }
        if self.metadata == MetadataStrategy::Replicated {
            f = Features {
                loopback: f.loopback,
                ..mc
            };
        }
        if self.sync == SyncStrategy::Network {
            f = Features {
                loopback: true,
                ..mc
            };
        }
        f
    }

    /// Refuses this protocol on a network (a profile, or a node's transport, named by
    /// `network`) that `offers` less than it needs (`crate::net`, "The seam").
    pub fn refuse_without(&self, offers: Features, network: &str) -> Result<(), DsmError> {
        let missing = offers.missing(&self.needs());
        if missing.is_empty() {
            return Ok(());
        }
        Err(DsmError::MissingFeatures {
            protocol: self.name.into(),
            missing: missing.join(" and "),
            network: network.into(),
        })
    }

    /// Parts of the protocol the engine does not implement yet.
    pub fn unsupported(&self) -> Option<&'static str> {
        if self.home == HomePolicy::Migrating && self.data == DataStrategy::RemoteWrite {
            return Some("home migration cannot be combined with remote-write data: moving a master copy would re-map network address space, which needs a global synchronization (section 2.3.5); use diff messages (CSM-MS-Mg or CSM-None-Mg)");
        }
        if self.adaptive_broadcast && self.data != DataStrategy::RemoteWrite {
            return Some("adaptive data broadcast writes pages into network address space and needs remote-write data (section 2.3.6)");
        }
        if self.data == DataStrategy::RemoteWrite && self.metadata != MetadataStrategy::Replicated {
            return Some("remote-write data needs the replicated directory");
        }
        None
    }
}

/// Which mechanism turns page accesses into protocol entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultBackend {
    /// mprotect on the application view, SIGSEGV handled in the faulting thread.
    Mprotect,
    /// userfaultfd minor and write-protect faults delivered as SIGBUS to the faulting thread.
    Userfaultfd,
}

impl std::str::FromStr for FaultBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mprotect" => Ok(FaultBackend::Mprotect),
            "userfaultfd" | "uffd" => Ok(FaultBackend::Userfaultfd),
            _ => Err(format!(
                "unknown fault backend `{s}`; valid backends: mprotect, userfaultfd"
            )),
        }
    }
}

impl std::fmt::Display for FaultBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultBackend::Mprotect => "mprotect",
            FaultBackend::Userfaultfd => "userfaultfd",
        })
    }
}

/// Why [`FaultBackend::Userfaultfd`] is refused by a build without it.
pub(crate) const UFFD_NOT_BUILT: &str = "the userfaultfd fault backend is not built in; rebuild with \
    `--features dsm/userfaultfd` (its build needs libclang: apt-get install libclang-dev), or use the mprotect backend";

/// Whether a run under the wall clock binds its threads to cores (`crate::wait`,
/// "Placement").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pinning {
    /// Bind each processor to a core of its own when the cluster's processors fit the
    /// cores this process may use.
    #[default]
    Auto,
    /// Never bind: the kernel places every thread.
    Off,
}

impl std::str::FromStr for Pinning {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Pinning::Auto),
            "off" | "none" => Ok(Pinning::Off),
            _ => Err(format!("unknown pinning `{s}`; valid: auto, off")),
        }
    }
}

/// Which clock a run's times come from (`DESIGN.md`, "Time: two clocks").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ClockMode {
    /// Real time: every processor runs freely.
    #[default]
    Wall,
    /// Virtual time: one simulated processor runs at a time, and times come from the
    /// platform profile and the processors' scaled CPU time.
    Modeled,
}

impl std::str::FromStr for ClockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "wall" => Ok(ClockMode::Wall),
            "modeled" | "model" => Ok(ClockMode::Modeled),
            _ => Err(format!("unknown clock `{s}`; valid clocks: wall, modeled")),
        }
    }
}

impl ClockMode {
    /// Why this clock cannot run `protocol`, if it cannot. Both clocks run every variant
    /// now (CSM-ADB was refused under the modeled clock until its lost updates there were
    /// fixed: `broadcast.rs`, "The reader's join"); validation, the table's default variants
    /// and the tests still ask here, the one place a refusal would go.
    pub fn refuses(self, _protocol: &Protocol) -> Option<String> {
        None
    }
}

impl std::fmt::Display for ClockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockMode::Wall => "wall",
            ClockMode::Modeled => "modeled",
        })
    }
}

/// How the modeled clock charges the computation a processor does between runtime
/// entries (`crate::work`). The wall clock ignores it.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Compute {
    /// This host's thread CPU time times [`Config::cpu_scale`]: what a program that counts
    /// nothing gets. It carries this host's noise (module doc of `crate::work`).
    #[default]
    Measured,
    /// The work the program counts ([`crate::work::count`]), at `ns_per_unit[kind]`
    /// virtual nanoseconds a unit; this host's CPU time is not charged, so a run repeats
    /// to the nanosecond.
    Counted { ns_per_unit: Vec<f64> },
}

impl Compute {
    /// `measured` or `counted`, as reports name the charge.
    pub fn name(&self) -> &'static str {
        match self {
            Compute::Measured => "measured",
            Compute::Counted { .. } => "counted",
        }
    }
}

/// Everything needed to start a cluster.
#[derive(Clone, Debug)]
pub struct Config {
    pub nodes: usize,
    pub procs_per_node: usize,
    pub protocol: Protocol,
    pub profile: Profile,
    /// Coherence page size: a power-of-two multiple of the host page (4 or 8 KiB).
    pub page_bytes: usize,
    pub backend: FaultBackend,
    pub mode: ExecMode,
    /// Virtual size of the shared heap per node.
    pub heap_bytes: usize,
    /// A file of page-to-home assignments to replay (one `page home` pair per line).
    pub homes_file: Option<PathBuf>,
    /// Arguments for node processes (the launcher's module doc, `dsm/src/launch/mod.rs`).
    pub child_args: Option<Vec<OsString>>,
    /// How long a node's heartbeat may stand still before the launcher declares it stopped
    /// (the launcher's module doc, "Stalled nodes"); default [`DEFAULT_STALL_TIMEOUT`].
    pub stall_timeout: Duration,
    /// Wall or modeled time.
    pub clock: ClockMode,
    /// Under the wall clock, whether the node's threads are bound to cores
    /// (`crate::wait`, "Placement"); default [`Pinning::Auto`].
    pub pinning: Pinning,
    /// The platform whose host costs the modeled clock charges (unused by the wall clock).
    pub platform: crate::platform::Platform,
    /// Modeled clock: how a processor's computation is charged (counted work, or this
    /// host's CPU time times [`Config::cpu_scale`]).
    pub compute: Compute,
    /// Modeled clock, [`Compute::Measured`]: virtual nanoseconds per nanosecond of this
    /// machine's thread CPU time (the app's CPU scale factor: the platform's sequential
    /// time over ours). Unused under [`Compute::Counted`].
    pub cpu_scale: f64,
    /// Test-only limits that shrink protocol resources so that small test programs reach
    /// paths a real run reaches only at scale. The default changes nothing.
    #[doc(hidden)]
    pub test_knobs: TestKnobs,
}

/// Test-only limits on protocol resources ([`Config::test_knobs`]), so that tests reach
/// the paths that run when a resource is used up. `None` keeps the engine's own size.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestKnobs {
    /// Broadcast-buffer slots per node (CSM-ADB; `crate::broadcast`): fewer slots than
    /// broadcast pages make pages of one home evict each other from its slots. At least 1.
    pub broadcast_slots_per_node: Option<usize>,
    /// Write notices one ring holds (replicated directory; `crate::directory`): a release
    /// that notices more pages than fit overflows the ring, and the receiver invalidates
    /// every page it caches. At least 1, at most the ring's own capacity.
    pub notice_ring_capacity: Option<usize>,
    /// The most bytes one `Diff` message may take (diff messages; `crate::wire`): smaller
    /// than a page's diff, it splits the diff over several messages, which a page of at
    /// most 16 KiB never needs with word runs under the message limit. From 33 (room for
    /// one masked word) up to the message limit.
    pub diff_message_bytes: Option<usize>,
    /// Modeled clock only (`crate::sched`): every wake-up of a blocked activity (a
    /// processor or a service) lands a seeded random delay later, so that a test explores
    /// other interleavings of the protocol's messages and waits than the scheduler's own,
    /// each replayable from its seed (with counted or no measured computation, the run is
    /// deterministic). A correct protocol gives the same results under any delays.
    pub wake_jitter: Option<crate::sched::WakeJitter>,
}

/// The default of [`Config::stall_timeout`]: long enough that a slow but live node (its
/// service thread polls at least every 50 ms) is never taken for a stopped one.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest heap per node: 1 TiB, so that 32 nodes' heaps, each mapped twice in the
/// in-process mode, fit a 47-bit address space.
pub const MAX_HEAP_BYTES: usize = 1 << 40;

/// `mb` MiB in bytes, or why that does not fit a `usize`.
pub fn mib_to_bytes(mb: usize) -> Result<usize, String> {
    mb.checked_mul(1 << 20).ok_or_else(|| {
        format!(
            "{mb} MiB is more bytes than this machine can address; the limit is {} MiB",
            MAX_HEAP_BYTES >> 20
        )
    })
}

/// `kb` KiB in bytes, or why that does not fit a `usize`.
pub fn kb_to_bytes(kb: usize) -> Result<usize, String> {
    kb.checked_mul(1 << 10)
        .ok_or_else(|| format!("{kb} KiB is more bytes than this machine can address"))
}

/// A positive, finite number of seconds (`10`, `2.5`).
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds, such as 10 or 2.5".to_string())?;
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err("expected a positive, finite number of seconds, such as 10 or 2.5".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Config {
    /// A configuration with the given shape and protocol and sensible defaults: Memory
    /// Channel 2, 8 KiB pages, mprotect faults, threads, 256 MiB heap. `DSM_*`
    /// environment variables override the defaults (see [`Config::apply_env`]).
    pub fn new(nodes: usize, procs_per_node: usize, protocol: Protocol) -> Config {
        Config {
            nodes,
            procs_per_node,
            protocol,
            profile: profile::by_name("mc2").expect("mc2 exists"),
            page_bytes: 8192,
            backend: FaultBackend::Mprotect,
            mode: ExecMode::Threads,
            heap_bytes: 256 << 20,
            homes_file: None,
            child_args: None,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            clock: ClockMode::Wall,
            pinning: Pinning::Auto,
            platform: crate::platform::by_name("alphaserver-mc2").expect("built in"),
            compute: Compute::Measured,
            cpu_scale: 1.0,
            test_knobs: TestKnobs::default(),
        }
    }

    /// Applies `DSM_NETWORK`, `DSM_PAGE_KB`, `DSM_BACKEND`, `DSM_EXEC`, `DSM_HEAP_MB`,
    /// `DSM_STALL_TIMEOUT` and `DSM_PIN`. A value that does not parse is an error naming the variable.
    /// Without `DSM_EXEC`, a process started by `mpirun` (`launch::mpi_rank`) runs its
    /// node as an MPI rank (`ExecMode::Mpi`).
    pub fn apply_env(mut self) -> Result<Config, DsmError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let bad = |k: &str, v: &str, why: &str| {
            DsmError::Config(format!(
                "environment variable {k}=`{v}` is not valid: {why}; fix it or unset it"
            ))
        };
        if let Some(v) = var("DSM_NETWORK") {
            self.profile =
                profile::by_name(&v).map_err(|e| bad("DSM_NETWORK", &v, &e.to_string()))?;
        }
        if let Some(v) = var("DSM_PAGE_KB") {
            self.page_bytes = v
                .parse::<usize>()
                .ok()
                .and_then(|kb| kb_to_bytes(kb).ok())
                .ok_or_else(|| bad("DSM_PAGE_KB", &v, "expected a page size in KiB: 4 or 8"))?;
        }
        if let Some(v) = var("DSM_BACKEND") {
            self.backend = v.parse().map_err(|e: String| bad("DSM_BACKEND", &v, &e))?;
        }
        if let Some(v) = var("DSM_EXEC") {
            self.mode = v.parse().map_err(|e: String| bad("DSM_EXEC", &v, &e))?;
        } else if crate::launch::mpi_rank().is_some() {
            // Started by mpirun: one rank per node.
            self.mode = ExecMode::Mpi;
        }
        if let Some(v) = var("DSM_HEAP_MB") {
            self.heap_bytes = v
                .parse::<usize>()
                .map_err(|_| bad("DSM_HEAP_MB", &v, "expected a whole number of MiB"))
                .and_then(|mb| mib_to_bytes(mb).map_err(|e| bad("DSM_HEAP_MB", &v, &e)))?;
        }
        if let Some(v) = var("DSM_CLOCK") {
            self.clock = v.parse().map_err(|e: String| bad("DSM_CLOCK", &v, &e))?;
        }
        if let Some(v) = var("DSM_STALL_TIMEOUT") {
            self.stall_timeout = parse_seconds(&v).map_err(|e| bad("DSM_STALL_TIMEOUT", &v, &e))?;
        }
        if let Some(v) = var("DSM_PIN") {
            self.pinning = v.parse().map_err(|e: String| bad("DSM_PIN", &v, &e))?;
        }
        Ok(self)
    }

    /// What only `ExecMode::Mpi` needs: a build with MPI, the wall clock, and a protocol
    /// built on messages alone (the MPI transport's feature set, `Features::MPI`).
    fn validate_mpi(&self) -> Result<(), DsmError> {
        if !cfg!(feature = "mpi") {
            return Err(DsmError::Config(profile::MPI_NOT_BUILT.into()));
        }
        // MPI starts here, before any other check, so that a rank refused here (as every
        // rank is) ends through MPI_Finalize and rank 0 can report first.
        #[cfg(feature = "mpi")]
        crate::net::mpi::world().map_err(|e| DsmError::Config(e.to_string()))?;
        if self.clock == ClockMode::Modeled {
            return Err(DsmError::Config("the modeled clock cannot run over MPI: it simulates the whole cluster in one process, one activity at a time, and MPI ranks are separate processes that run freely; use the wall clock under mpirun (--clock wall), or --exec threads for modeled time".into()));
        }
        self.protocol
            .refuse_without(crate::profile::Features::MPI, profile::MPI_TITLE)
    }

    /// Checks everything that can be checked before starting.
    pub fn validate(&self) -> Result<(), DsmError> {
        let bad = |m: String| Err(DsmError::Config(m));
        if self.nodes == 0 {
            return bad("a cluster needs at least one node; got 0".into());
        }
        if self.nodes > crate::net::MAX_NODES {
            return bad(format!(
                "{} nodes requested; at most {} are supported",
                self.nodes,
                crate::net::MAX_NODES
            ));
        }
        if self.procs_per_node == 0 {
            return bad("each node needs at least one processor; got 0".into());
        }
        if self.procs_per_node > 64 {
            return bad(format!(
                "{} processors per node requested; at most 64 are supported",
                self.procs_per_node
            ));
        }
        let host = crate::sys::host_page_size();
        let most = crate::wire::MAX_PAGE_BYTES;
        if !self.page_bytes.is_power_of_two() || self.page_bytes < host || self.page_bytes > most {
            return bad(format!(
                "page size {} bytes ({} KiB) is not a power-of-two multiple of the host page ({} KiB) of at most 16 KiB; use 4 or 8 KiB (--page-kb 4 or --page-kb 8, or DSM_PAGE_KB)",
                self.page_bytes,
                self.page_bytes as f64 / 1024.0,
                host / 1024
            ));
        }
        if self.heap_bytes == 0 || self.heap_bytes % self.page_bytes != 0 {
            return bad(format!(
                "heap size {} bytes is not a positive multiple of the page size ({} KiB); give the heap in whole MiB (--heap-mb or DSM_HEAP_MB)",
                self.heap_bytes,
                self.page_bytes / 1024
            ));
        }
        if self.heap_bytes > MAX_HEAP_BYTES {
            return bad(format!(
                "a heap of {} MiB per node is above the limit of {} MiB; use a smaller --heap-mb (or DSM_HEAP_MB)",
                self.heap_bytes >> 20,
                MAX_HEAP_BYTES >> 20
            ));
        }
        if self.stall_timeout.is_zero() {
            return bad("the stall timeout is 0 s; give a positive number of seconds (--stall-timeout or DSM_STALL_TIMEOUT)".into());
        }
        if self.backend == FaultBackend::Userfaultfd && !cfg!(feature = "userfaultfd") {
            return bad(UFFD_NOT_BUILT.into());
        }
        if self.mode == ExecMode::Mpi {
            self.validate_mpi()?;
        }
        if self.clock == ClockMode::Modeled && self.mode != ExecMode::Threads {
            return bad("the modeled clock runs every node as threads of one process (its scheduler lives in this process); use --exec threads (DSM_EXEC=threads), or the wall clock".into());
        }
        if let Some(why) = self.clock.refuses(&self.protocol) {
            return bad(why);
        }
        if self.clock == ClockMode::Modeled && !(self.cpu_scale.is_finite() && self.cpu_scale >= 0.0) {
            return bad(format!("the CPU scale factor {} is not a finite number >= 0", self.cpu_scale));
        }
        if let Compute::Counted { ns_per_unit } = &self.compute {
            if ns_per_unit.len() > crate::work::MAX_KINDS {
                return bad(format!(
                    "counted computation has costs for {} kinds of work; a program counts at most {}",
                    ns_per_unit.len(),
                    crate::work::MAX_KINDS
                ));
            }
            if let Some((k, ns)) = ns_per_unit
                .iter()
                .enumerate()
                .find(|(_, ns)| !(ns.is_finite() && (0.0..=crate::work::MAX_NS_PER_UNIT).contains(*ns)))
            {
                return bad(format!(
                    "the cost of a unit of work of kind {k} is {ns} ns; give a number from 0 to {:e}",
                    crate::work::MAX_NS_PER_UNIT
                ));
            }
        }
        if self.test_knobs.broadcast_slots_per_node == Some(0) {
            return bad("the test knob broadcast_slots_per_node is 0; a node needs at least one broadcast slot".into());
        }
        if self.test_knobs.notice_ring_capacity == Some(0) {
            return bad("the test knob notice_ring_capacity is 0; a write-notice ring holds at least one notice".into());
        }
        if let Some(j) = self.test_knobs.wake_jitter {
            if self.clock != ClockMode::Modeled {
                return bad("the test knob wake_jitter delays the modeled clock's wake-ups; run with the modeled clock".into());
            }
            if j.one_in == 0 || j.max_ns > crate::sched::MAX_WAKE_JITTER_NS {
                return bad(format!(
                    "the test knob wake_jitter is {j:?}; one_in must be at least 1 and max_ns at most {}",
                    crate::sched::MAX_WAKE_JITTER_NS
                ));
            }
        }
        if let Some(b) = self.test_knobs.diff_message_bytes {
            let most = crate::net::MAX_MESSAGE_BYTES;
            if !(crate::wire::MIN_DIFF_BUDGET_BYTES..=most).contains(&b) {
                return bad(format!(
                    "the test knob diff_message_bytes is {b}; a diff message takes from {} to {most} bytes",
                    crate::wire::MIN_DIFF_BUDGET_BYTES
                ));
            }
        }
        if let Some(why) = self.protocol.unsupported() {
            return Err(DsmError::Unsupported {
                protocol: self.protocol.name.into(),
                why: why.into(),
            });
        }
        // The simulated fabric offers what the network profile it models has.
        self.protocol
            .refuse_without(self.profile.features, self.profile.title)?;
        // The fabric's own structures and, under the replicated directory, the write-notice
        // lists take address space before any shared data: refuse now a cluster whose
        // network cannot hold them, rather than at the run's setup.
        let mut fixed = crate::net::fixed_space_bytes(self.nodes, self.procs_per_node);
        if self.protocol.metadata == MetadataStrategy::Replicated {
            fixed += crate::directory::replicated_fixed_bytes(self.nodes);
        }
        let space = self.profile.address_space_bytes;
        if fixed > space {
            return bad(format!(
                "{} nodes x {} processors need {} MiB of network address space for the message \
                 rings, mailboxes{} before any shared data, more than the {} MiB of {} ({}); use \
                 a network with more address space (--network host has 64 GiB and every \
                 feature; `cashmere profiles` lists each network's, column space), fewer nodes \
                 or processors per node{}",
                self.nodes,
                self.procs_per_node,
                fixed.div_ceil(1 << 20),
                if self.protocol.metadata == MetadataStrategy::Replicated {
                    " and write-notice lists"
                } else {
                    ""
                },
                space >> 20,
                self.profile.name,
                self.profile.title,
                if self.protocol.metadata == MetadataStrategy::Replicated {
                    ", or a variant with the home-held directory (CSM-S, CSM-None)"
                } else {
                    ""
                }
            ));
        }
        Ok(())
    }
}
