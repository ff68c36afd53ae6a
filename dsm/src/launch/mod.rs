//! The launcher: runs one SPMD node function on every node of a cluster, either as thread
//! groups of this process or as node processes that re-execute this binary (like
//! `mpirun`), gathers each node's result, and turns the failure of any node into an error
//! that names the node and the cause.
//!
//! # Process mode
//!
//! The launching process creates the fabric (a memfd) and starts one child per node with
//! the descriptor inherited and `DSM_NODE`, `DSM_FABRIC_FD` and `DSM_LAYOUT` in the
//! environment. The child runs the same program; when it reaches the same `launch` call it
//! runs only its node, writes its result into the fabric and exits. The launcher polls
//! the children; when one dies before reporting its result, it marks the fabric aborted
//! (every runtime wait then fails) and kills the others. A child dies with SIGKILL if the
//! launcher dies (PR_SET_PDEATHSIG), so nothing outlives a run.
//!
//! A node process runs the program from the start, so it meets every earlier `launch` call
//! of the program too: the launcher numbers the calls, and in a node process every call
//! before the one it was started for returns [`LaunchError::OtherRun`] at once, which a
//! program that launches several clusters skips with [`skip_other_run`] (the rule is
//! written down there). Inside a libtest test
//! the launcher runs just the current test in the child; other programs get their own
//! arguments unless [`LaunchSpec::child_args`] says otherwise.
//!
//! # The first failure
//!
//! The first node to fail records itself and its cause in the fabric
//! (`Control::fail`: a compare-exchange on the origin word, then the cause, published
//! before the abort flag), before any other node can stop on the abort. In both modes
//! the launcher reports that record, so the report never depends on which process or
//! thread ends first. A node that dies without recording (killed by a signal, an early
//! exit) gets its cause recorded by the launcher, under the same compare-exchange. Panics
//! that are consequences of the abort ([`crate::control::ABORT_MESSAGE`]) print nothing.
//!
//! # Stalled nodes
//!
//! Every [`crate::net::Net::poll`] bumps the node's heartbeat word in the fabric; the
//! service thread polls at least every 50 ms while the node runs, even while its
//! processors compute. The launcher watches the heartbeats, in host time, and when one
//! stands still for the stall limit (`Config::stall_timeout`, 10 s by default) it
//! records `node N stopped responding: no heartbeat for ...` as the failure and stops the
//! run: in process mode it kills every node process; in thread mode it aborts the cluster
//! (a node thread cannot be killed: one stuck outside every abort check keeps the run
//! waiting).
//!
//! Start-up is watched too. The launcher never waits for a child: it forks and goes on,
//! and learns from a close-on-exec pipe when the child has `exec`ed
//! (`sys::spawn_node_process`). A node process that has not reached this cluster run
//! (its launch call) within the start-up limit, three times the stall limit (it runs the
//! program from the start, with no heartbeat yet), is reported as stopped, saying whether
//! it had `exec`ed. From its launch call to the end of the start-up barrier a node process
//! beats its heartbeat from a thread of its own (its service thread does not run yet),
//! so a node stopped while it sets up or while it waits for the others is found by the
//! stall limit, and the nodes waiting in the barrier for it are not taken for stopped. In
//! thread mode (no start-up beat) a node's heartbeat is watched only once every node is
//! past the start-up barrier.
//!
//! # MPI ranks
//!
//! With `ExecMode::Mpi` (a build with the `mpi` feature) the nodes are the ranks of an
//! MPI job that `mpirun -np N` started: this launcher starts nothing and watches no
//! process. Every rank runs the whole program, and at each launch call runs its own node
//! over the MPI transport (`crate::net`, `mpi.rs`), on a local fabric of its own that holds
//! its heap and its view of the control block (`mpi.rs` here). The start-up barrier is a
//! barrier of messages; the results go to rank 0, which returns them, while the other
//! ranks return [`LaunchError::OtherRun`] (the process-mode rule: they skip the run's
//! report). Heartbeats, the stall limit and the first failure travel as messages, and a
//! failed run ends the job with `MPI_Abort`, reported by rank 0 (if rank 0 stopped, by the
//! lowest rank still responding). The job must have as many ranks as the cluster has
//! nodes.
//!
//! Test-only: `DSM_TEST_STOP=N:POINT` (several separated by commas) makes node process
//! `N` stop itself with SIGSTOP at
//! `POINT`: `before-exec` (the launcher's child, between fork and exec), `after-exec`
//! (the node process, at its launch call, before it attaches the fabric) or `before-ready`
//! (attached and beating, before the start-up barrier). It exists so that tests can stop
//! a node at exactly these points; process mode, and under MPI `before-ready` (rank `N`
//! stops once its link to the others has started), `killed` (rank `N` kills itself
//! with SIGKILL there), `after-node` (rank `N` stops after its node's work, before the
//! results are gathered) and `failed` (rank `N`'s node fails at once with a cause of its
//! own instead of running, while the others run into waits for it).

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(test)]
mod tests;

use crate::control::{node_state, AbortOrigin};
use crate::net::{Fabric, Layout, Profile, RESULT_BYTES};
use crate::sys;
use std::ffi::OsString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the nodes of a cluster run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExecMode {
    /// Every node is a group of threads in this process (for tests and debugging).
    Threads,
    /// Every node is a process running this binary.
    Processes,
    /// Every node is an MPI rank, started by `mpirun -np N` (a build with the `mpi`
    /// feature; see "MPI ranks" in the module doc).
    Mpi,
}

impl std::str::FromStr for ExecMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "threads" => Ok(ExecMode::Threads),
            "processes" => Ok(ExecMode::Processes),
            "mpi" => Ok(ExecMode::Mpi),
            _ => Err(format!(
                "unknown execution mode `{s}`; valid modes: threads, processes, mpi"
            )),
        }
    }
}

impl std::fmt::Display for ExecMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExecMode::Threads => "threads",
            ExecMode::Processes => "processes",
            ExecMode::Mpi => "mpi",
        })
    }
}

/// What the launcher needs to know about a cluster.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub nodes: usize,
    /// Reply mailboxes per node, beyond the service thread's (one per processor).
    pub procs: usize,
    pub heap_bytes: usize,
    pub profile: Profile,
    pub mode: ExecMode,
    /// Arguments for node processes; `None` means: inside a libtest test, run just that
    /// test; otherwise, this process's own arguments.
    pub child_args: Option<Vec<OsString>>,
    /// Entries of each node's arrival log (0: none); see `Fabric::arrivals` (test builds).
    pub trace_entries: usize,
}

/// Why a cluster run failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("node {node} failed: {cause}")]
    NodeFailed { node: usize, cause: String },
    /// The node's heartbeat stood still for the stall limit (see the module doc).
    #[error("node {node} {cause}")]
    Stalled { node: usize, cause: String },
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error("cannot start node process {node}: {source}")]
    Spawn { node: usize, source: std::io::Error },
    #[error("node {node}'s result is {len} bytes; results are limited to {max} bytes per node")]
    ResultTooLarge { node: usize, len: usize, max: usize },
    #[error("this node process was started with a broken environment: {0}")]
    BadEnvironment(String),
    #[error("{0}")]
    StrayNodeVariable(String),
    /// In a node process, every launch before the one the process was started for returns
    /// this; a program that launches several clusters skips past it (see the module doc).
    #[error("this node process serves a later cluster run; skipping this one")]
    OtherRun,
    /// Under MPI: the job has a different number of ranks than the cluster has nodes.
    #[error("mpirun started {ranks} MPI ranks, but the cluster has {nodes} nodes (one rank per node): start it with `mpirun -np {nodes}`, or give --nodes {ranks} (or Config::nodes)")]
    MpiRanks { ranks: usize, nodes: usize },
    /// `ExecMode::Mpi` in a build without the `mpi` feature.
    #[error("{}", crate::profile::MPI_NOT_BUILT)]
    MpiNotBuilt,
    /// Under MPI: a cluster run after one that failed (its ranks have stopped).
    #[error("an earlier cluster run of this MPI job failed, and its other ranks have stopped: under MPI a program cannot run another cluster after a failed one")]
    MpiAfterFailure,
}

impl OtherRun for LaunchError {
    fn is_other_run(&self) -> bool {
        matches!(self, LaunchError::OtherRun)
    }
}

/// An error that may say "this node process serves another cluster run" (see
/// [`skip_other_run`]). The DSM's errors implement it, and so may a program's own error
/// type that wraps them.
pub trait OtherRun {
    /// True in a node process for a cluster run that is not the one it serves.
    fn is_other_run(&self) -> bool;
}

/// The process-mode rule, in one place: `Ok(None)` for a cluster run this process must
/// skip, else `result` as it is.
///
/// With one process per node (`ExecMode::Processes`), every node process runs the whole
/// program again from the start, SPMD style, and so meets every cluster run the program
/// makes before (and after) the one it was started for. The launcher numbers the runs: in
/// a node process every run before its own returns at once with an error for which
/// [`OtherRun::is_other_run`] holds, and its own run never returns (the process exits
/// when its node is done). A program that makes several cluster runs therefore skips the
/// runs that are not its own and goes on to the next, doing no other work for them (no
/// sequential run to compare with, no output):
///
/// ```no_run
/// # fn cluster_run(i: usize) -> Result<u64, dsm::DsmError> { Ok(0) }
/// for i in 0..3 {
///     let Some(result) = dsm::skip_other_run(cluster_run(i)).expect("run") else {
///         continue; // a node process serving another run
///     };
///     println!("run {i}: {result}");
/// }
/// ```
///
/// In the launching process (and with threads) no run is skipped.
pub fn skip_other_run<T, E: OtherRun>(result: Result<T, E>) -> Result<Option<T>, E> {
    match result {
        Err(e) if e.is_other_run() => Ok(None),
        r => r.map(Some),
    }
}

/// What a node function gets.
pub struct NodeCtx {
    pub node: usize,
    /// The cluster's fabric; under MPI, this rank's own (its heap and control block).
    pub fabric: Arc<Fabric>,
    /// Under MPI, this rank's link to the others for this run.
    #[cfg(feature = "mpi")]
    pub(crate) mpi: Option<Arc<crate::net::mpi::MpiLink>>,
}

impl NodeCtx {
    fn on_fabric(node: usize, fabric: Arc<Fabric>) -> NodeCtx {
        NodeCtx {
            node,
            fabric,
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    /// This node's handle on the run's network: the simulated fabric, or MPI.
    pub fn net(&self) -> crate::net::Net {
        #[cfg(feature = "mpi")]
        if let Some(link) = &self.mpi {
            return crate::net::Net::over_mpi(Arc::clone(link));
        }
        let node = crate::ids::NodeId::from_usize(self.node);
        crate::net::Net::new(Arc::clone(&self.fabric), node)
    }

    /// Waits until every node of the cluster has reached this point (each has attached
    /// its receive regions): [`startup_barrier`] on the fabric, a barrier of messages
    /// under MPI. Call it once per run. Fails if the cluster aborts meanwhile.
    pub fn startup_barrier(&self) -> Result<(), crate::net::MsgError> {
        #[cfg(feature = "mpi")]
        if let Some(link) = &self.mpi {
            return link.startup_barrier();
        }
        startup_barrier(&self.fabric, self.node)
    }
}

/// What a node function returns: its result bytes, or a description of what went wrong.
pub type NodeResult = Result<Vec<u8>, String>;

const ENV_NODE: &str = "DSM_NODE";
const ENV_FD: &str = "DSM_FABRIC_FD";
const ENV_LAYOUT: &str = "DSM_LAYOUT";
const ENV_RUN: &str = "DSM_RUN";
/// Test-only: `NODE:POINT`, see the module doc.
const ENV_TEST_STOP: &str = "DSM_TEST_STOP";

/// Where `DSM_TEST_STOP` stops a node process (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopPoint {
    BeforeExec,
    AfterExec,
    BeforeReady,
    /// MPI only: the rank kills itself (SIGKILL) where it would stop before the start-up
    /// barrier.
    Killed,
    /// MPI only: the rank stops after its node's work, before it sends its result (or,
    /// rank 0, gathers the others'): a peer then sends it a result larger than MPI sends
    /// without a receiver.
    AfterNode,
    /// MPI only: the rank's node fails at once (its node function is not run) with the
    /// cause `test_failure_cause`, as a node whose program returned an error does.
    Failed,
}

/// The cause a node reports when `DSM_TEST_STOP` asks it to fail (`N:failed`).
#[cfg(feature = "mpi")]
pub(crate) fn test_failure_cause(node: usize) -> String {
    format!("node {node} failed on purpose (DSM_TEST_STOP={node}:failed, a variable for tests only)")
}

/// The nodes and points `DSM_TEST_STOP` names (`NODE:POINT`, several separated by
/// commas), if it is set.
fn test_stops() -> Result<Vec<(usize, StopPoint)>, LaunchError> {
    let Some(v) = std::env::var_os(ENV_TEST_STOP) else {
        return Ok(Vec::new());
    };
    let v = v.to_string_lossy();
    let parse = |one: &str| {
        let (n, p) = one.split_once(':')?;
        let point = match p {
            "before-exec" => StopPoint::BeforeExec,
            "after-exec" => StopPoint::AfterExec,
            "before-ready" => StopPoint::BeforeReady,
            "killed" => StopPoint::Killed,
            "after-node" => StopPoint::AfterNode,
            "failed" => StopPoint::Failed,
            _ => return None,
        };
        Some((n.parse().ok()?, point))
    };
    v.split(',').map(parse).collect::<Option<Vec<_>>>().ok_or_else(|| {
        LaunchError::BadEnvironment(format!(
            "{ENV_TEST_STOP}=`{v}`: expected NODE:POINT[,NODE:POINT...], POINT one of before-exec, after-exec, before-ready, killed, after-node, failed (a variable for tests only: unset it)"
        ))
    })
}

/// Whether `DSM_TEST_STOP` names `node` at `point`.
#[cfg(feature = "mpi")]
fn asked_at(node: usize, point: StopPoint) -> bool {
    test_stops()
        .unwrap_or_default()
        .into_iter()
        .any(|(n, p)| n == node && p == point)
}

/// Stops this node process here if `DSM_TEST_STOP` says so.
fn stop_here_if_asked(node: usize, point: StopPoint) {
    for (n, p) in test_stops().unwrap_or_default() {
        if n == node && p == point {
            sys::raise_stop();
        }
        if n == node && p == StopPoint::Killed && point == StopPoint::BeforeReady {
            sys::raise_kill();
        }
    }
}

/// Set in a node process once it is past the start-up barrier: its start-up beat ends.
static PAST_STARTUP: AtomicBool = AtomicBool::new(false);

/// How often a node process's start-up beat bumps its heartbeat.
const STARTUP_BEAT: Duration = Duration::from_millis(50);

/// Beats `node`'s heartbeat from a thread of its own until the node is past the start-up
/// barrier, where its service thread takes over (see the module doc).
fn start_startup_beat(fabric: &Arc<Fabric>, node: usize) {
    let fabric = Arc::clone(fabric);
    let _ = std::thread::Builder::new()
        .name("dsm-startup-beat".into())
        .spawn(move || {
            while !PAST_STARTUP.load(Ordering::Acquire) {
                fabric.control().beat(node);
                std::thread::sleep(STARTUP_BEAT);
            }
        });
}

thread_local! {
    /// How many clusters this thread has launched (or, in a node process, passed). Counted
    /// per thread so that concurrently running tests number their runs independently.
    static RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// True in a process that must not report a cluster run (print, verify, write files):
/// a node process started by the launcher, or an MPI rank other than 0 (rank 0 reports
/// for the whole job; see "MPI ranks").
pub fn is_node_process() -> bool {
    is_fabric_node_process() || mpi_rank().is_some_and(|r| r != 0)
}

/// True in a node process started by this launcher (process mode).
fn is_fabric_node_process() -> bool {
    std::env::var_os(ENV_NODE).is_some()
}

/// This process's rank, if it was started by an MPI launcher (`mpirun`, `mpiexec`): read
/// from the environment the launcher sets (Open MPI's, MPICH's or PMIx's), without
/// initializing MPI.
pub fn mpi_rank() -> Option<usize> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Refuses an environment that holds the launcher's node variable without the rest that
/// the launcher sets with it (the user's shell exported `DSM_NODE`): the process would
/// take itself for a node process.
pub fn check_environment() -> Result<(), LaunchError> {
    if is_fabric_node_process() && std::env::var_os(ENV_FD).is_none() {
        return Err(LaunchError::StrayNodeVariable(format!(
            "{ENV_NODE} is set in the environment, but it is internal to the node processes a \
             cluster starts (the launcher sets it with {ENV_FD}, {ENV_LAYOUT} and {ENV_RUN}); \
             unset {ENV_NODE} and run again"
        )));
    }
    Ok(())
}

/// Runs `node_main` on every node and returns each node's result, in node order. No stall
/// watch: a node function of its own has no service loop to beat the heartbeat (a
/// `Cluster` run has one, and is watched; see [`launch_with_stall_timeout`]).
pub fn launch<F>(spec: &LaunchSpec, node_main: F) -> Result<Vec<Vec<u8>>, LaunchError>
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    launch_with_stall_timeout(spec, Duration::MAX, node_main)
}

/// Like [`launch`], with the stall limit `stall_timeout`: a node past start-up whose
/// heartbeat ([`crate::net::Net::poll`]) stands still that long is reported as stopped,
/// and the run is stopped.
pub fn launch_with_stall_timeout<F>(
    spec: &LaunchSpec,
    stall_timeout: Duration,
    node_main: F,
) -> Result<Vec<Vec<u8>>, LaunchError>
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    let layout = Layout::new(
        spec.nodes,
        spec.procs,
        spec.profile.fabric_address_space_bytes(),
        spec.heap_bytes,
    )?
    .with_trace(spec.trace_entries);
    quiet_abort_panics();
    let run = RUNS.with(|r| r.replace(r.get() + 1));
    if spec.mode == ExecMode::Mpi {
        return launch_mpi(spec, layout, stall_timeout, &node_main);
    }
    if is_fabric_node_process() {
        check_environment()?;
        if run < env_usize(ENV_RUN)? {
            return Err(LaunchError::OtherRun);
        }
        run_as_node_process(layout, &node_main);
    }
    let fabric = Fabric::create(layout, &spec.profile)?;
    match spec.mode {
        ExecMode::Threads => launch_threads(&fabric, stall_timeout, &node_main),
        ExecMode::Processes => launch_processes(spec, &fabric, run, stall_timeout),
        ExecMode::Mpi => unreachable!("MPI runs are launched above"),
    }
}

#[cfg(feature = "mpi")]
use mpi::launch_mpi;

#[cfg(not(feature = "mpi"))]
fn launch_mpi<F>(
    _spec: &LaunchSpec,
    _layout: Layout,
    _stall_timeout: Duration,
    _node_main: &F,
) -> Result<Vec<Vec<u8>>, LaunchError>
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    Err(LaunchError::MpiNotBuilt)
}

/// Installs, once per process, a panic hook that prints nothing for the panics an abort
/// causes (their message holds [`crate::control::ABORT_MESSAGE`]): they are consequences of another
/// node's failure, which the launcher reports, not failures of their own. Every other
/// panic goes to the hook that was installed before.
fn quiet_abort_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if !msg.is_some_and(is_secondary) {
                previous(info);
            }
        }));
    });
}

/// Records `cause` as `node`'s failure: as the origin of the abort if it is a failure of
/// its own and the first, and in any case aborts the cluster.
pub(crate) fn record_failure(fabric: &Fabric, node: usize, cause: &str) {
    if is_secondary(cause) {
        fabric.control().abort();
    } else {
        fabric.control().fail(node, cause);
    }
}

/// The error of a failed run: the origin recorded in the fabric if there is one, else the
/// launcher's own first failure (`fallback`).
fn failure_report(fabric: &Fabric, fallback: Option<(usize, String)>) -> LaunchError {
    match (fabric.control().abort_origin(), fallback) {
        (AbortOrigin::Recorded { node, cause }, _) if cause.starts_with(STALLED) => {
            LaunchError::Stalled { node, cause }
        }
        (AbortOrigin::Recorded { node, cause }, _) => LaunchError::NodeFailed { node, cause },
        (AbortOrigin::Claimed { node }, Some((n, cause))) if n == node => {
            LaunchError::NodeFailed { node, cause }
        }
        (AbortOrigin::Claimed { node }, _) => LaunchError::NodeFailed {
            node,
            cause: "failed first, and ended before it could record why".into(),
        },
        (AbortOrigin::None, Some((node, cause))) => LaunchError::NodeFailed { node, cause },
        (AbortOrigin::None, None) => LaunchError::NodeFailed {
            node: 0,
            cause: "the cluster was aborted without a recorded cause".into(),
        },
    }
}

/// How a stalled node's cause begins ("node 1 stopped responding: ...").
const STALLED: &str = "stopped responding: ";

/// Watches the nodes' start-up and heartbeats (see the module doc).
struct StallWatch {
    limit: Duration,
    /// How long a node process may take to reach its launch call.
    startup_limit: Duration,
    /// Process mode: nodes beat during start-up, and their start-up is limited.
    processes: bool,
    /// When the nodes were started.
    started: Instant,
    /// Per node: the last heartbeat count seen and when it last changed.
    seen: Vec<Option<(u64, Instant)>>,
}

impl StallWatch {
    fn new(nodes: usize, limit: Duration, processes: bool) -> StallWatch {
        StallWatch {
            limit,
            startup_limit: limit.saturating_mul(3),
            processes,
            started: Instant::now(),
            seen: vec![None; nodes],
        }
    }

    /// The first node among `live` that has stalled, with the cause to report. In process
    /// mode, `exec_pending(node)`: the node's process has not `exec`ed yet.
    fn check(
        &mut self,
        fabric: &Fabric,
        live: impl Fn(usize) -> bool,
        exec_pending: impl Fn(usize) -> bool,
    ) -> Option<(usize, String)> {
        let now = Instant::now();
        let nodes = self.seen.len();
        let state = |n: usize| fabric.control().status(n).state.load(Ordering::Acquire);
        let all_ready = (0..nodes).all(|n| !live(n) || state(n) >= node_state::READY);
        let advice = "the other nodes were stopped; raise the limit with --stall-timeout or DSM_STALL_TIMEOUT if the node is only slow";
        for node in 0..nodes {
            let s = state(node);
            let pid = fabric.control().status(node).pid.load(Ordering::Relaxed);
            let pid = if pid == 0 {
                String::new()
            } else {
                format!(", pid {pid}")
            };
            if !live(node) {
                self.seen[node] = None;
                continue;
            }
            if s < node_state::RUNNING {
                self.seen[node] = None;
                if self.processes && now.duration_since(self.started) >= self.startup_limit {
                    let what = if exec_pending(node) {
                        "it had not started the program: stopped or stuck between fork and exec"
                    } else {
                        "it runs the program but had not reached this cluster run: stopped, swapped out or stuck before it"
                    };
                    return Some((
                        node,
                        format!(
                            "{STALLED}not started within {} s, the start-up limit (3 times the stall limit; state: starting{pid}; {what}); {advice}",
                            secs(self.startup_limit)
                        ),
                    ));
                }
                continue;
            }
            let starting = s == node_state::RUNNING || (s == node_state::READY && !all_ready);
            let watched = if self.processes {
                s == node_state::RUNNING || s == node_state::READY
            } else {
                s == node_state::READY && all_ready
            };
            if !watched {
                self.seen[node] = None;
                continue;
            }
            let beat = fabric.control().heartbeat(node);
            match self.seen[node] {
                Some((last, since)) if last == beat => {
                    if now.duration_since(since) >= self.limit {
                        let state = if starting {
                            format!("starting up, before the start-up barrier{pid}; its start-up beat stopped: the node is stopped or swapped out")
                        } else {
                            format!("past start-up, running the program{pid}; its service thread stopped polling for messages: the node is stopped, swapped out, deadlocked or looping inside the runtime")
                        };
                        return Some((
                            node,
                            format!(
                                "{STALLED}no heartbeat for {} s (state: {state}); {advice}",
                                secs(self.limit)
                            ),
                        ));
                    }
                }
                _ => self.seen[node] = Some((beat, now)),
            }
        }
        None
    }
}

/// A duration in seconds as a person writes it: `10`, `2.5`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

fn is_secondary(cause: &str) -> bool {
    cause.contains(crate::control::ABORT_MESSAGE)
}

fn launch_threads<F>(
    fabric: &Arc<Fabric>,
    stall_timeout: Duration,
    node_main: &F,
) -> Result<Vec<Vec<u8>>, LaunchError>
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    let nodes = fabric.layout().nodes;
    let first_failure: Mutex<Option<(usize, String)>> = Mutex::new(None);
    let finished: Vec<AtomicBool> = (0..nodes).map(|_| AtomicBool::new(false)).collect();
    let all_finished = AtomicBool::new(false);
    let results: Vec<Option<Vec<u8>>> = std::thread::scope(|s| {
        // The stall watch: a node thread cannot be killed, so a stalled node is recorded
        // as the failure and the cluster aborted; the others unwind from their waits.
        let watcher = std::thread::Builder::new()
            .name("dsm-stall-watch".into())
            .spawn_scoped(s, || {
                let mut watch = StallWatch::new(nodes, stall_timeout, false);
                while !all_finished.load(Ordering::Acquire) && !fabric.control().aborted() {
                    if let Some((node, cause)) =
                        watch.check(fabric, |n| !finished[n].load(Ordering::Acquire), |_| false)
                    {
                        fabric.control().fail(node, &cause);
                        break;
                    }
                    std::thread::park_timeout(WATCH_INTERVAL);
                }
            })
            .expect("cannot spawn the stall watch");
        let handles: Vec<_> = (0..nodes)
            .map(|node| {
                let fabric = Arc::clone(fabric);
                let first_failure = &first_failure;
                let finished = &finished;
                std::thread::Builder::new()
                    .name(format!("dsm-node-{node}"))
                    .spawn_scoped(s, move || {
                        let ctx = NodeCtx::on_fabric(node, Arc::clone(&fabric));
                        let outcome = catch_unwind(AssertUnwindSafe(|| node_main(ctx)))
                            .unwrap_or_else(|p| Err(panic_message(p.as_ref())));
                        finished[node].store(true, Ordering::Release);
                        match outcome {
                            Ok(bytes) => Some(bytes),
                            Err(cause) => {
                                let mut first = first_failure.lock().expect("poisoned");
                                let replace = match &*first {
                                    None => true,
                                    Some((_, c)) => is_secondary(c) && !is_secondary(&cause),
                                };
                                record_failure(&fabric, node, &cause);
                                if replace {
                                    *first = Some((node, cause));
                                }
                                None
                            }
                        }
                    })
                    .expect("cannot spawn a node thread")
            })
            .collect();
        let results = handles
            .into_iter()
            .map(|h| h.join().unwrap_or(None))
            .collect();
        all_finished.store(true, Ordering::Release);
        watcher.thread().unpark();
        let _ = watcher.join();
        results
    });
    let first = first_failure.into_inner().expect("poisoned");
    if first.is_some() || fabric.control().aborted() {
        return Err(failure_report(fabric, first));
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every node succeeded"))
        .collect())
}

fn default_child_args() -> Vec<OsString> {
    match std::thread::current().name() {
        // libtest names each test's thread after the test.
        Some(name) if name != "main" && !name.starts_with("dsm-") => {
            vec![
                name.into(),
                "--exact".into(),
                "--nocapture".into(),
                "--test-threads=1".into(),
            ]
        }
        _ => std::env::args_os().skip(1).collect(),
    }
}

fn layout_string(l: &Layout) -> String {
    format!(
        "{},{},{},{},{}",
        l.nodes, l.mailboxes, l.address_space_bytes, l.heap_bytes, l.trace_entries
    )
}

fn launch_processes(
    spec: &LaunchSpec,
    fabric: &Arc<Fabric>,
    run: usize,
    stall_timeout: Duration,
) -> Result<Vec<Vec<u8>>, LaunchError> {
    let nodes = fabric.layout().nodes;
    let args = spec.child_args.clone().unwrap_or_else(default_child_args);
    let stops = test_stops()?;
    let fd = fabric.raw_fd();
    let mut children: Vec<Option<sys::NodeProcess>> = Vec::with_capacity(nodes);
    for node in 0..nodes {
        let env = vec![
            (ENV_NODE.to_string(), node.to_string()),
            (ENV_FD.to_string(), fd.to_string()),
            (ENV_LAYOUT.to_string(), layout_string(fabric.layout())),
            (ENV_RUN.to_string(), run.to_string()),
        ];
        let stop_before_exec = stops.contains(&(node, StopPoint::BeforeExec));
        match sys::spawn_node_process(&args, &env, &[fd], stop_before_exec) {
            Ok(child) => {
                fabric
                    .control()
                    .status(node)
                    .pid
                    .store(child.id(), Ordering::Relaxed);
                children.push(Some(child));
            }
            Err(source) => {
                stop_all(fabric, &mut children);
                return Err(LaunchError::Spawn { node, source });
            }
        }
    }
    let mut exec_done = vec![false; nodes];
    let mut done = vec![false; nodes];
    let mut exited = vec![false; nodes];
    // The launcher's own view of the first failure, used only if no node recorded one.
    let mut failure: Option<(usize, String)> = None;
    let mut aborted_at: Option<Instant> = None;
    let mut watch = StallWatch::new(nodes, stall_timeout, true);
    loop {
        for node in 0..nodes {
            if exited[node] {
                continue;
            }
            let Some(child) = children[node].as_mut() else {
                continue;
            };
            if !exec_done[node] {
                match child.exec_state() {
                    sys::ExecState::Pending => {}
                    sys::ExecState::Done => exec_done[node] = true,
                    sys::ExecState::Failed(source) => {
                        stop_all(fabric, &mut children);
                        return Err(LaunchError::Spawn { node, source });
                    }
                }
            }
            let cause = match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(status)) => {
                    exited[node] = true;
                    children[node] = None;
                    let state = fabric.control().status(node).state.load(Ordering::Acquire);
                    if state == node_state::DONE && status.success() {
                        done[node] = true;
                        continue;
                    }
                    if state == node_state::FAILED {
                        read_result(fabric, node)
                            .map(|b| String::from_utf8_lossy(&b).into_owned())
                            .unwrap_or_default()
                    } else if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status)
                    {
                        format!("killed by {}", sys::signal_name(sig))
                    } else {
                        format!(
                            "exited with status {} before reporting a result",
                            status.code().unwrap_or(-1)
                        )
                    }
                }
                Err(e) => format!("cannot wait for it: {e}"),
            };
            // A node that died without recording why (killed, exited early) gets its
            // cause recorded here; the compare-exchange keeps an earlier origin.
            record_failure(fabric, node, &cause);
            if failure
                .as_ref()
                .is_none_or(|(_, c)| is_secondary(c) && !is_secondary(&cause))
            {
                failure = Some((node, cause));
            }
        }
        if done.iter().all(|d| *d) {
            break;
        }
        if !fabric.control().aborted() {
            if let Some((node, cause)) = watch.check(fabric, |n| !exited[n], |n| !exec_done[n]) {
                fabric.control().fail(node, &cause);
            }
        }
        if fabric.control().aborted() {
            // The report is the origin the fabric recorded, whichever process exits first;
            // wait for it to be published, or for every node to be gone, within a bound.
            let since = *aborted_at.get_or_insert_with(Instant::now);
            let recorded = matches!(
                fabric.control().abort_origin(),
                AbortOrigin::Recorded { .. }
            );
            if recorded || exited.iter().all(|e| *e) || since.elapsed() > ORIGIN_WAIT {
                stop_all(fabric, &mut children);
                return Err(failure_report(fabric, failure));
            }
        }
        let live: Vec<&sys::NodeProcess> = children.iter().flatten().collect();
        crate::wait::launcher_wait(&live);
    }
    (0..nodes).map(|node| read_result(fabric, node)).collect()
}

/// How often the in-process stall watch looks at the heartbeats.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// How long the launcher waits, after an abort, for the first failure's record.
const ORIGIN_WAIT: Duration = Duration::from_secs(2);

fn stop_all(fabric: &Fabric, children: &mut [Option<sys::NodeProcess>]) {
    fabric.control().abort();
    for c in children.iter_mut().flatten() {
        sys::kill_process(c.id());
    }
    for c in children.iter_mut().flatten() {
        c.kill_and_wait();
    }
}

fn read_result(fabric: &Fabric, node: usize) -> Result<Vec<u8>, LaunchError> {
    let len = fabric
        .control()
        .status(node)
        .result_len
        .load(Ordering::Acquire) as usize;
    if len > RESULT_BYTES {
        return Err(LaunchError::ResultTooLarge {
            node,
            len,
            max: RESULT_BYTES,
        });
    }
    let mut out = vec![0u8; len];
    // SAFETY: the result area is RESULT_BYTES long and the node finished writing len bytes
    // before it stored result_len (Release) and exited.
    unsafe { std::ptr::copy_nonoverlapping(fabric.result_area(node), out.as_mut_ptr(), len) };
    Ok(out)
}

fn write_result(fabric: &Fabric, node: usize, bytes: &[u8]) -> Result<(), LaunchError> {
    if bytes.len() > RESULT_BYTES {
        return Err(LaunchError::ResultTooLarge {
            node,
            len: bytes.len(),
            max: RESULT_BYTES,
        });
    }
    // SAFETY: the result area of this node is RESULT_BYTES long and written only by it.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), fabric.result_area(node), bytes.len()) };
    fabric
        .control()
        .status(node)
        .result_len
        .store(bytes.len() as u64, Ordering::Release);
    Ok(())
}

fn env_usize(name: &str) -> Result<usize, LaunchError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| LaunchError::BadEnvironment(format!("{name} is missing or not a number")))
}

/// Runs this process's node and exits; never returns.
fn run_as_node_process<F>(layout: Layout, node_main: &F) -> !
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    let outcome = (|| -> Result<(Arc<Fabric>, usize, NodeResult), LaunchError> {
        let node = env_usize(ENV_NODE)?;
        stop_here_if_asked(node, StopPoint::AfterExec);
        let fd = env_usize(ENV_FD)? as i32;
        let expected = std::env::var(ENV_LAYOUT).unwrap_or_default();
        if expected != layout_string(&layout) {
            return Err(LaunchError::BadEnvironment(format!(
                "the launcher's cluster is {expected}, this process configured {}; every node must run the same program with the same arguments",
                layout_string(&layout)
            )));
        }
        // SAFETY: the launcher passed this descriptor for us to own; nothing else uses it.
        let fd = unsafe { sys::adopt_fd(fd) };
        let fabric = Fabric::adopt(fd, layout)?;
        fabric
            .control()
            .status(node)
            .state
            .store(node_state::RUNNING, Ordering::Release);
        start_startup_beat(&fabric, node);
        stop_here_if_asked(node, StopPoint::BeforeReady);
        let ctx = NodeCtx::on_fabric(node, Arc::clone(&fabric));
        let result = catch_unwind(AssertUnwindSafe(|| node_main(ctx)))
            .unwrap_or_else(|p| Err(panic_message(p.as_ref())));
        Ok((fabric, node, result))
    })();
    match outcome {
        Ok((fabric, node, Ok(bytes))) => match write_result(&fabric, node, &bytes) {
            Ok(()) => {
                fabric
                    .control()
                    .status(node)
                    .state
                    .store(node_state::DONE, Ordering::Release);
                std::process::exit(0)
            }
            Err(e) => fail_node(&fabric, node, &e.to_string()),
        },
        Ok((fabric, node, Err(cause))) => fail_node(&fabric, node, &cause),
        Err(e) => {
            eprintln!("cashmere node process: {e}");
            std::process::exit(102)
        }
    }
}

fn fail_node(fabric: &Fabric, node: usize, cause: &str) -> ! {
    mark_failed(fabric, node, cause);
    std::process::exit(101)
}

/// Called from a fault handler that found an access the program may not make: records the
/// message as this node's failure (so the launcher reports it) and ends the process.
pub(crate) fn fail_from_fault_handler(fabric: &Fabric, node: usize, msg: &str) -> ! {
    mark_failed(fabric, node, msg);
    sys::fatal(&format!("cashmere: node {node}: {msg}"))
}

/// Leaves `cause` as this node's result, its state failed, and the failure recorded, for
/// the launcher to report once the process has ended.
fn mark_failed(fabric: &Fabric, node: usize, cause: &str) {
    let _ = write_result(fabric, node, cause.as_bytes());
    fabric
        .control()
        .status(node)
        .state
        .store(node_state::FAILED, Ordering::Release);
    record_failure(fabric, node, cause);
}

/// Waits until every node of the cluster has reached this point (each has attached its
/// receive regions). Call it at most once per run, after attaching and before
/// transmitting. Fails if the cluster aborts meanwhile.
pub fn startup_barrier(fabric: &Fabric, node: usize) -> Result<(), crate::net::MsgError> {
    fabric
        .control()
        .status(node)
        .state
        .store(node_state::READY, Ordering::Release);
    // Nodes parked in this barrier wait for our state: wake them.
    let nodes = fabric.layout().nodes;
    for n in 0..nodes {
        crate::wait::wake(fabric.control(), n);
    }
    let ready = || {
        (0..nodes)
            .all(|n| fabric.control().status(n).state.load(Ordering::Acquire) >= node_state::READY)
    };
    crate::wait::Seam::new(fabric.control(), node).until(crate::wait::WaitFor::Startup, ready)?;
    // A node process's start-up beat ends: its service thread beats from here on.
    PAST_STARTUP.store(true, Ordering::Release);
    Ok(())
}
