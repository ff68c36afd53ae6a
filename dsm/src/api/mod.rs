//! The public API: a [`Cluster`] runs an SPMD program. Its setup closure runs identically
//! on every node and makes the shared allocations and synchronization objects; it returns
//! the body every processor runs. A run returns a [`Report`].
//!
//! ```no_run
//! use dsm::{Cluster, Config};
//! # fn protocol() -> dsm::Protocol { unimplemented!() }
//! let config = Config::new(2, 2, protocol());
//! let report = Cluster::new(config).run(|s| {
//!     let sums = s.alloc::<u64>(4);
//!     let lock = s.lock();
//!     let bar = s.barrier();
//!     move |p| {
//!         lock.acquire(p);
//!         sums.set(0, sums.get(0) + 1);
//!         lock.release(p);
//!         bar.wait(p);
//!         sums.get(0)
//!     }
//! })?;
//! assert!(report.results.iter().all(|&n| n == 4));
//! # Ok::<(), dsm::DsmError>(())
//! ```
//!
//! # Safety of shared data
//!
//! Shared data is plain memory: [`Shared::get`] and [`Shared::set`] compile to a load or a
//! store (after the first fault on a page). Programs must be data-race-free: two
//! processors may touch the same location, with at least one of them writing, only if a
//! lock, barrier or flag of this crate orders the two accesses. A racy program does not
//! corrupt the runtime, but may read stale or torn values.

mod homes;
mod node;

pub use homes::MAX_HOMES_FILE_BYTES;

use crate::config::{Compute, Config};
use crate::control::Control;
use crate::engine::{Allocation, Node};
use crate::error::DsmError;
use crate::launch::{launch_with_stall_timeout, LaunchSpec};
use crate::stats::{Breakdown, Counters, Timed};
use crate::sys;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::sync::Arc;

/// Plain data that may live in shared memory: any bit pattern is a valid value, and it
/// holds no pointers.
///
/// # Safety
/// Implementors must be `Copy`, contain no pointers or references, and accept every bit
/// pattern (including all zeros).
pub unsafe trait Plain: Copy + Send + Sync + 'static {}

macro_rules! plain {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numbers accept every bit pattern and hold no pointers.
        unsafe impl Plain for $t {}
    )* };
}
plain!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

/// A shared array of `len` values of `T`, at the same offset of every node's heap.
pub struct Shared<T: Plain> {
    ptr: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Plain> Copy for Shared<T> {}

impl<T: Plain> Shared<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads element `i`.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        assert!(
            i < self.len,
            "index {i} out of bounds of a shared array of {}",
            self.len
        );
        // SAFETY: i is in bounds; the heap view is mapped for the life of the run and a
        // fault on it is resolved by the engine before the load completes; T is Plain.
        unsafe { std::ptr::read_volatile((self.ptr as *const T).add(i)) }
    }

    /// Writes element `i`.
    #[inline]
    pub fn set(&self, i: usize, v: T) {
        assert!(
            i < self.len,
            "index {i} out of bounds of a shared array of {}",
            self.len
        );
        // SAFETY: as in get; the program is data-race-free (module doc).
        unsafe { std::ptr::write_volatile((self.ptr as *mut T).add(i), v) }
    }

    /// The array as a slice.
    ///
    /// # Safety
    /// No other processor may write any element the caller reads through the slice while
    /// it is alive, unless a lock, barrier or flag orders the accesses (data-race freedom).
    pub unsafe fn as_slice(&self) -> &[T] {
        // SAFETY: the caller upholds data-race freedom; the memory is mapped and aligned.
        unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.len) }
    }

    /// The array as a mutable slice. Several processors may hold such views at once (that
    /// is the point of shared memory).
    ///
    /// # Safety
    /// The caller may write only elements no other processor accesses concurrently, and
    /// read only elements no other processor writes concurrently, unless a lock, barrier
    /// or flag orders the accesses. The compiler is told the slice is unique, so the
    /// caller must not keep values read through it across a synchronization operation.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [T] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len) }
    }

    pub fn as_ptr(&self) -> *mut T {
        self.ptr as *mut T
    }

    /// The same bytes as an array of `U`, of `len * size_of::<T>() / size_of::<U>()`
    /// elements: for example a `u64` array's bytes as `u8` and `u16` fields that several
    /// processors own within one word. Every bit pattern is a valid `T` and `U` (both
    /// [`Plain`]), and the rules of the module doc apply to each byte: a program that writes
    /// a `u16` element and reads the `u64` word holding it must order the two.
    ///
    /// # Panics
    /// If the array's bytes are not a whole number of `U`s, or not aligned for `U`
    /// (allocations start on a page, so an array cast to a smaller type always is).
    pub fn cast<U: Plain>(&self) -> Shared<U> {
        let bytes = self.len * std::mem::size_of::<T>();
        let size = std::mem::size_of::<U>();
        assert!(
            size > 0 && bytes % size == 0,
            "a shared array of {bytes} bytes is not a whole number of {size}-byte elements"
        );
        assert!(
            self.ptr % std::mem::align_of::<U>() == 0,
            "a shared array at {:#x} is not aligned for {size}-byte elements",
            self.ptr
        );
        Shared {
            ptr: self.ptr,
            len: bytes / size,
            _t: PhantomData,
        }
    }
}

/// A cluster-wide lock.
#[derive(Clone, Copy, Debug)]
pub struct Lock {
    id: usize,
}

/// A cluster-wide barrier over every processor.
#[derive(Clone, Copy, Debug)]
pub struct Barrier {
    id: usize,
}

/// A write-once flag.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    id: usize,
}

impl Lock {
    /// Acquires the lock (an acquire: see the crate's "Memory ordering" for what becomes
    /// visible).
    pub fn acquire(&self, p: &Proc) {
        p.node.sync.lock_acquire(&*p.node, self.id, p.id);
    }

    /// Releases the lock. Panics with a clear message if `p` does not hold it.
    pub fn release(&self, p: &Proc) {
        if let Err(e) = p.node.sync.lock_release(&*p.node, self.id, p.id) {
            panic!("{e}");
        }
    }

    /// Releases the lock, or says why it cannot.
    pub fn try_release(&self, p: &Proc) -> Result<(), crate::sync::SyncError> {
        p.node.sync.lock_release(&*p.node, self.id, p.id)
    }

    /// Acquires the lock and returns a guard that releases it.
    pub fn lock<'a>(&self, p: &'a Proc) -> LockGuard<'a> {
        self.acquire(p);
        LockGuard { lock: *self, p }
    }
}

/// Holds a lock until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<'a> {
    lock: Lock,
    p: &'a Proc,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.lock.release(self.p);
    }
}

impl Barrier {
    /// Waits until every processor of the cluster has arrived.
    pub fn wait(&self, p: &Proc) {
        p.node.sync.barrier(&*p.node, self.id);
    }

    /// The barrier that ends the program's initialization: waits like [`Barrier::wait`],
    /// and then every page's home is chosen again, as the first node to touch the page
    /// from now on (first touch after initialization, the paper's section 2.3.1). A
    /// program whose initialization writes shared data from one processor (SPLASH-2's
    /// master, which fills the data before it creates the other processes) calls it on
    /// every processor where its initialization ends, once per run; otherwise every page
    /// that processor wrote would stay homed on its node. Each node then drops the copies
    /// it holds and unmaps its pages (the first access after it faults), so call it
    /// before the timed region starts ([`Proc::start_timing`]). With a homes file
    /// ([`crate::Config::homes_file`]) the homes stay as the file says.
    ///
    /// # Panics
    ///
    /// If a node ends its initialization twice in a run.
    pub fn end_initialization(&self, p: &Proc) {
        self.wait(p);
        if p.local_id() == 0 {
            p.node.end_initialization();
        }
        self.wait(p);
    }
}

impl Flag {
    /// Sets the flag (a release first). Flags are write-once.
    pub fn set(&self, p: &Proc) {
        p.node.sync.flag_set(&*p.node, self.id);
    }

    /// Waits until the flag is set (an acquire after).
    pub fn wait(&self, p: &Proc) {
        p.node.sync.flag_wait(&*p.node, self.id);
    }
}

/// What the setup closure uses to lay out shared memory and synchronization objects.
/// Every node runs setup with the same calls in the same order, so every node agrees on
/// offsets and ids.
pub struct Setup {
    node: usize,
    nodes: usize,
    procs_per_node: usize,
    base: usize,
    heap_bytes: usize,
    page_bytes: usize,
    used: usize,
    allocations: Vec<Allocation>,
    nlocks: usize,
    nbarriers: usize,
    nflags: usize,
    error: Option<DsmError>,
}

impl Setup {
    /// Allocates a zero-filled shared array of `len` elements, page-aligned.
    pub fn alloc<T: Plain>(&mut self, len: usize) -> Shared<T> {
        self.alloc_named(len, std::any::type_name::<T>())
    }

    /// Like [`Setup::alloc`], with a name used in error messages.
    pub fn alloc_named<T: Plain>(&mut self, len: usize, name: &str) -> Shared<T> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        let offset = self.used;
        let end = offset
            .saturating_add(bytes)
            .div_ceil(self.page_bytes)
            .saturating_mul(self.page_bytes);
        if end > self.heap_bytes {
            if self.error.is_none() {
                self.error = Some(DsmError::HeapExhausted {
                    wanted: end,
                    heap: self.heap_bytes,
                });
            }
            // Hand out an empty array; the run stops before any processor starts.
            return Shared {
                ptr: self.base,
                len: 0,
                _t: PhantomData,
            };
        }
        self.used = end.max(offset + self.page_bytes.min(bytes.max(1)));
        self.allocations.push(Allocation {
            offset,
            len: bytes,
            what: name.to_string(),
        });
        Shared {
            ptr: self.base + offset,
            len,
            _t: PhantomData,
        }
    }

    pub fn lock(&mut self) -> Lock {
        self.nlocks += 1;
        Lock {
            id: self.nlocks - 1,
        }
    }

    /// `n` locks with consecutive ids (for per-element locks).
    pub fn locks(&mut self, n: usize) -> Vec<Lock> {
        (0..n).map(|_| self.lock()).collect()
    }

    pub fn barrier(&mut self) -> Barrier {
        self.nbarriers += 1;
        Barrier {
            id: self.nbarriers - 1,
        }
    }

    pub fn flag(&mut self) -> Flag {
        self.nflags += 1;
        Flag {
            id: self.nflags - 1,
        }
    }

    pub fn flags(&mut self, n: usize) -> Vec<Flag> {
        (0..n).map(|_| self.flag()).collect()
    }

    /// The node running this setup (setup must not depend on it for layout).
    pub fn node(&self) -> usize {
        self.node
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn procs_per_node(&self) -> usize {
        self.procs_per_node
    }

    pub fn nprocs(&self) -> usize {
        self.nodes * self.procs_per_node
    }

    /// Bytes of shared heap allocated so far.
    pub fn heap_used(&self) -> usize {
        self.used
    }
}

/// A processor: one thread of one node.
pub struct Proc {
    node: Arc<Node>,
    id: usize,
    local: usize,
    /// The node's counters at the start and the end of its timed region.
    region: Arc<RegionCounters>,
}

/// A node's counters where its timed region starts (the first of its processors to mark
/// the start) and ends (the last to mark the end), for [`Report::region_counters`].
#[derive(Default)]
struct RegionCounters {
    marks: std::sync::Mutex<(Option<Counters>, Option<Counters>)>,
}

impl RegionCounters {
    fn mark(&self, node: &Node, which: crate::stats::Mark) {
        let now = counters_now(node);
        let mut m = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        match which {
            crate::stats::Mark::Begin => {
                m.0.get_or_insert(now);
            }
            crate::stats::Mark::End => m.1 = Some(now),
        }
    }

    /// What the node counted in its timed region, if its processors marked both ends.
    fn counted(&self) -> Option<Counters> {
        let m = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        Some(m.1?.since(&m.0?))
    }
}

/// A node's counters now: the engine's and its network's.
fn counters_now(node: &Node) -> Counters {
    let mut counters = node.counters.snapshot();
    let net = node.net.counters();
    counters.messages = net.messages;
    counters.message_bytes = net.message_bytes;
    counters.packets = net.packets;
    counters.net_bytes = net.bytes;
    counters.broadcasts = net.broadcasts;
    counters
}

impl Proc {
    /// Global processor id, `0..nprocs()`: node `n`'s processors are
    /// `n * procs_per_node() ..`.
    pub fn id(&self) -> usize {
        self.id
    }

    pub fn nprocs(&self) -> usize {
        self.node.nodes * self.node.procs
    }

    pub fn node(&self) -> usize {
        self.node.id.index()
    }

    pub fn nodes(&self) -> usize {
        self.node.nodes
    }

    pub fn procs_per_node(&self) -> usize {
        self.node.procs
    }

    /// Index of this processor within its node.
    pub fn local_id(&self) -> usize {
        self.local
    }

    /// Declares `ns` nanoseconds of computation: under the modeled clock they are added
    /// to this processor's virtual clock as User time (a program whose computation is
    /// all declared, run with a CPU scale of 0, has the same times on every run); under
    /// the wall clock it does nothing.
    pub fn compute(&self, ns: u64) {
        crate::sched::charge(ns, || "computation the program declared (Proc::compute)".into());
    }

    /// Counts `units` units of work of kind `kind` done since the last count: under the
    /// modeled clock with counted computation ([`crate::Compute::Counted`]) they are charged
    /// to this processor's clock at the run's cost per unit; otherwise only tallied
    /// ([`ProcReport::work`]). The same as [`crate::work::count`], which code shared with a
    /// sequential version calls (module doc of [`crate::work`]).
    pub fn count_work(&self, kind: usize, units: u64) {
        crate::work::count(kind, units);
    }

    /// Starts the timed region on this processor. A program that measures only part of
    /// its run (SPLASH-2's programs time the parallel computation, not the input's
    /// generation or the result's check) calls it on every processor, right after the
    /// barrier that ends initialization, and [`Proc::stop_timing`] after the computation's
    /// last barrier. [`Report::elapsed_ns`] and each processor's breakdown then cover the
    /// region: from the earliest start to the latest stop. Every processor marks it, or
    /// none does; a mark out of order panics with the reason.
    pub fn start_timing(&self) {
        crate::stats::Clock::mark(crate::stats::Mark::Begin);
        self.region.mark(&self.node, crate::stats::Mark::Begin);
    }

    /// Ends the timed region on this processor ([`Proc::start_timing`]).
    pub fn stop_timing(&self) {
        crate::stats::Clock::mark(crate::stats::Mark::End);
        self.region.mark(&self.node, crate::stats::Mark::End);
    }

    /// This processor's time so far in the run's clock, in nanoseconds: virtual time under
    /// the modeled clock (from 0 at the start of the run), else the wall clock.
    pub fn now_ns(&self) -> u64 {
        crate::sched::now().unwrap_or_else(sys::monotonic_ns)
    }
}

/// What one processor reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcReport {
    pub id: usize,
    pub node: usize,
    /// Where the processor's time went in the timed region if the program marked one
    /// ([`Proc::start_timing`]), else in the whole run.
    pub breakdown: Breakdown,
    /// Where the processor's time went in the whole run.
    pub run_breakdown: Breakdown,
    /// The timed region, if the program marked one.
    pub timed: Option<Timed>,
    /// Units of work the processor counted ([`crate::work`]) in the timed region if the
    /// program marked one, else in the whole run, by kind.
    #[serde(default)]
    pub work: crate::work::Tally,
}

/// What a run returns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report<R> {
    /// Each processor's return value, by processor id.
    pub results: Vec<R>,
    pub procs: Vec<ProcReport>,
    /// Counters per node.
    pub node_counters: Vec<Counters>,
    /// Counters summed over nodes, over the whole run.
    pub counters: Counters,
    /// Counters summed over nodes, over the timed region if the program marked one
    /// ([`Proc::start_timing`]): each node's from the first of its processors to start
    /// the region to the last to stop it.
    #[serde(default)]
    pub region_counters: Option<Counters>,
    /// Time of the parallel part, in the run's clock ([`Report::clock`]): wall time, or
    /// virtual time under the modeled clock. If the program marked a timed region
    /// ([`Proc::start_timing`]), from the earliest start to the latest stop; else the
    /// whole run ([`Report::run_ns`]).
    pub elapsed_ns: u64,
    /// Time of the whole run, from the start barrier to the last processor's end.
    pub run_ns: u64,
    /// Whether the program marked a timed region (on every processor).
    pub timed_region: bool,
    /// `wall` or `modeled`: which clock `elapsed_ns` and the breakdowns come from.
    pub clock: String,
    /// The platform profile the modeled clock charged (empty under the wall clock).
    pub platform: String,
    /// Modeled clock: virtual ns per ns of this machine's CPU time (1 under the wall clock;
    /// unused when `compute` is `counted`).
    pub cpu_scale: f64,
    /// Modeled clock: how computation was charged, `counted` or `measured` (empty under
    /// the wall clock).
    #[serde(default)]
    pub compute: String,
    pub protocol: String,
    pub network: String,
    pub nodes: usize,
    pub procs_per_node: usize,
    pub page_bytes: usize,
    pub backend: String,
    pub mode: String,
    /// The home of every page that got one, as `(page, node)` sorted by page: write it
    /// with [`Report::homes_file`] to replay these homes in another run (the paper's
    /// footnote 4 replays CSM-DMS's first-touch homes in the other variants).
    pub homes: Vec<(u32, u8)>,
}

impl<R> Report<R> {
    /// The homes in the format `Config::homes_file` reads: one `page home` per line.
    pub fn homes_file(&self) -> String {
        let mut s = String::from("# page home\n");
        for (p, h) in &self.homes {
            s += &format!("{p} {h}\n");
        }
        s
    }

    /// Separates the processors' results from the rest of the report.
    pub fn take_results(self) -> (Vec<R>, Report<()>) {
        let results = self.results;
        let rest = Report {
            results: vec![(); results.len()],
            procs: self.procs,
            node_counters: self.node_counters,
            counters: self.counters,
            region_counters: self.region_counters,
            elapsed_ns: self.elapsed_ns,
            run_ns: self.run_ns,
            timed_region: self.timed_region,
            clock: self.clock,
            platform: self.platform,
            cpu_scale: self.cpu_scale,
            compute: self.compute,
            protocol: self.protocol,
            network: self.network,
            nodes: self.nodes,
            procs_per_node: self.procs_per_node,
            page_bytes: self.page_bytes,
            backend: self.backend,
            mode: self.mode,
            homes: self.homes,
        };
        (results, rest)
    }
}

#[derive(Serialize, Deserialize)]
struct NodeOutcome<R> {
    results: Vec<(ProcReport, R)>,
    counters: Counters,
    region_counters: Option<Counters>,
    elapsed_ns: u64,
    homes: Vec<u32>,
}

/// The timed region's length, from the earliest start to the latest stop
/// ([`Proc::start_timing`]); `None` if no processor marked it, an error if only some did.
fn timed_elapsed(procs: &[ProcReport]) -> Result<Option<u64>, DsmError> {
    let marked: Vec<Timed> = procs.iter().filter_map(|p| p.timed).collect();
    if marked.is_empty() {
        return Ok(None);
    }
    if marked.len() < procs.len() {
        let missing: Vec<String> = procs
            .iter()
            .filter(|p| p.timed.is_none())
            .map(|p| p.id.to_string())
            .collect();
        return Err(DsmError::PartlyTimed {
            marked: marked.len(),
            procs: procs.len(),
            missing: missing.join(", "),
        });
    }
    let begin = marked.iter().map(|t| t.begin_ns).min().unwrap_or(0);
    let end = marked.iter().map(|t| t.end_ns).max().unwrap_or(0);
    Ok(Some(end.saturating_sub(begin)))
}

/// A cluster configuration ready to run programs.
pub struct Cluster {
    config: Config,
}

impl Cluster {
    pub fn new(config: Config) -> Cluster {
        Cluster { config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs an SPMD program: `setup` on every node, then its returned body on every
    /// processor. Returns when every processor has finished, or with an error naming the
    /// node that failed. With one process per node, a program that runs several clusters
    /// skips in each node process the runs that are not its own: see
    /// [`skip_other_run`](crate::skip_other_run).
    pub fn run<S, B, R>(&self, setup: S) -> Result<Report<R>, DsmError>
    where
        S: Fn(&mut Setup) -> B + Sync,
        B: Fn(&Proc) -> R + Sync,
        R: Serialize + DeserializeOwned + Send,
    {
        let cfg = &self.config;
        cfg.validate()?;
        let homes = cfg.homes()?;
        let spec = LaunchSpec {
            nodes: cfg.nodes,
            procs: cfg.procs_per_node,
            heap_bytes: cfg.heap_bytes,
            profile: cfg.profile.clone(),
            mode: cfg.mode,
            child_args: cfg.child_args.clone(),
            trace_entries: 0,
        };
        let modeled = cfg.clock == crate::config::ClockMode::Modeled;
        // Modeled time: one scheduler for the cluster, made by the first node to start
        // (every node of an in-process cluster shares the fabric it needs).
        let sched: std::sync::OnceLock<Arc<crate::sched::Sched>> = std::sync::OnceLock::new();
        // A node waits in the scheduler while others run: its heartbeat stands still for
        // as long as the rest of the cluster computes, so only a deadlock (which the
        // scheduler reports) stops a modeled run.
        let stall = if modeled {
            std::time::Duration::MAX
        } else {
            cfg.stall_timeout
        };
        let outcomes = launch_with_stall_timeout(&spec, stall, |ctx| {
            let s = modeled.then(|| {
                Arc::clone(sched.get_or_init(|| {
                    let work_fs = match &cfg.compute {
                        Compute::Measured => None,
                        Compute::Counted { ns_per_unit } => {
                            let fs = ns_per_unit.iter().map(|&ns| crate::sched::fs_per_unit(ns));
                            Some(fs.collect())
                        }
                    };
                    crate::sched::Sched::new(
                        Arc::clone(&ctx.fabric) as Arc<dyn AsRef<Control> + Send + Sync>,
                        cfg.nodes,
                        cfg.procs_per_node,
                        cfg.platform.host.clone(),
                        cfg.profile.clone(),
                        work_fs,
                        cfg.cpu_scale,
                        cfg.test_knobs.wake_jitter,
                    )
                }))
            });
            node::run_node(cfg, ctx, &setup, homes.as_deref(), s)
        })?;
        let mut report = Report {
            results: Vec::new(),
            procs: Vec::new(),
            node_counters: Vec::new(),
            counters: Counters::default(),
            region_counters: None,
            elapsed_ns: 0,
            run_ns: 0,
            timed_region: false,
            clock: cfg.clock.to_string(),
            platform: match cfg.clock {
                crate::config::ClockMode::Wall => String::new(),
                crate::config::ClockMode::Modeled => cfg.platform.name.clone(),
            },
            cpu_scale: match cfg.clock {
                crate::config::ClockMode::Wall => 1.0,
                crate::config::ClockMode::Modeled => cfg.cpu_scale,
            },
            compute: match cfg.clock {
                crate::config::ClockMode::Wall => String::new(),
                crate::config::ClockMode::Modeled => cfg.compute.name().to_string(),
            },
            protocol: cfg.protocol.name.to_string(),
            network: match cfg.mode {
                crate::launch::ExecMode::Mpi => "mpi".to_string(),
                _ => cfg.profile.name.to_string(),
            },
            nodes: cfg.nodes,
            procs_per_node: cfg.procs_per_node,
            page_bytes: cfg.page_bytes,
            backend: cfg.backend.to_string(),
            mode: cfg.mode.to_string(),
            homes: Vec::new(),
        };
        for (node, bytes) in outcomes.into_iter().enumerate() {
            let o: NodeOutcome<R> =
                serde_json::from_slice(&bytes).map_err(|e| DsmError::Result(e.to_string()))?;
            report.counters.add(&o.counters);
            // Summed only while every node so far marked a region.
            report.region_counters = match (report.region_counters, o.region_counters) {
                (Some(mut t), Some(c)) => {
                    t.add(&c);
                    Some(t)
                }
                (None, Some(c)) if node == 0 => Some(c),
                _ => None,
            };
            report.node_counters.push(o.counters);
            report.run_ns = report.run_ns.max(o.elapsed_ns);
            report
                .homes
                .extend(o.homes.iter().map(|&p| (p, node as u8)));
            for (pr, r) in o.results {
                report.procs.push(pr);
                report.results.push(r);
            }
        }
        report.homes.sort_unstable();
        let timed = timed_elapsed(&report.procs)?;
        report.timed_region = timed.is_some();
        report.elapsed_ns = timed.unwrap_or(report.run_ns);
        Ok(report)
    }
}
