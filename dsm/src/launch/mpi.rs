//! MPI ranks: one rank per node, started by `mpirun -np N` (module doc of `crate::launch`,
//! "MPI ranks").
//!
//! Every rank runs the whole program, SPMD, as node processes do; each `launch` call is
//! one cluster run on every rank at once. A rank runs its own node: it creates a local
//! fabric (its heap and control block, which no other rank maps), starts its link to the
//! others ([`MpiLink::start`]: the run's own two communicators and a progress thread),
//! and runs the node function on it. At the end:
//!
//! - every rank other than 0 sends its result to rank 0 and waits for rank 0's verdict;
//!   after a run that succeeded it returns [`LaunchError::OtherRun`], so that the program
//!   skips the run's report as a node process does ([`super::skip_other_run`]);
//! - rank 0 gathers the results, sends the verdict, and returns them in node order.
//!
//! A run that fails ends the job. Rank 0 returns the first failure (the first that
//! reached it: its own, or a peer's, sent by that peer's progress thread) for the program
//! to report, and the process ends with `MPI_Abort` instead of `MPI_Finalize`
//! (`net::mpi::abort_at_exit`), which stops every rank, a stopped one included. The
//! other ranks wait for that end without printing. If rank 0 falls silent for the stall
//! limit (it stopped, so it will not report), the lowest rank still responding reports
//! and aborts the job: rank 1, or rank 2 if rank 1 is silent too, and so on. A rank
//! killed outright is reported by `mpirun`, which then ends the others.

use super::{
    asked_at, failure_report, is_secondary, panic_message, record_failure, stop_here_if_asked,
    test_failure_cause, Layout, LaunchError, LaunchSpec, NodeCtx, NodeResult, StopPoint,
};
use crate::control::{node_state, AbortOrigin};
use crate::net::mpi::{self, MpiLink};
use crate::net::Fabric;
use crate::sys;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often a rank that may have to report a silent rank 0's failure looks whether the
/// ranks below it fell silent too.
const REPORTER_LOOK: Duration = Duration::from_millis(20);

/// Runs this rank's node of a cluster run (module doc).
pub(super) fn launch_mpi<F>(
    spec: &LaunchSpec,
    layout: Layout,
    stall_timeout: Duration,
    node_main: &F,
) -> Result<Vec<Vec<u8>>, LaunchError>
where
    F: Fn(NodeCtx) -> NodeResult + Sync,
{
    let (rank, ranks) = mpi::world()?;
    // From here an error on one rank leaves the others waiting for it (in the collective
    // that starts a run, or for its messages): the job must end in `MPI_Abort`, not in an
    // `MPI_Finalize` that waits for them.
    let refuse = |e: LaunchError| {
        mpi::abort_at_exit();
        Err(e)
    };
    if ranks != spec.nodes {
        return refuse(LaunchError::MpiRanks {
            ranks,
            nodes: spec.nodes,
        });
    }
    if mpi::failed_before() {
        return refuse(LaunchError::MpiAfterFailure);
    }
    let fabric = match Fabric::create(layout, &spec.profile) {
        Ok(f) => f,
        Err(e) => return refuse(e.into()),
    };
    fabric
        .control()
        .status(rank)
        .state
        .store(node_state::RUNNING, Ordering::Release);
    let link = match MpiLink::start(Arc::clone(&fabric), rank, ranks, stall_timeout) {
        Ok(l) => l,
        Err(e) => return refuse(e.into()),
    };
    let _stop = link.stop_on_drop();
    stop_here_if_asked(rank, StopPoint::BeforeReady);
    let ctx = NodeCtx {
        node: rank,
        fabric: Arc::clone(&fabric),
        mpi: Some(Arc::clone(&link)),
    };
    let result = if asked_at(rank, StopPoint::Failed) {
        Err(test_failure_cause(rank))
    } else {
        catch_unwind(AssertUnwindSafe(|| node_main(ctx)))
            .unwrap_or_else(|p| Err(panic_message(p.as_ref())))
    };
    link.engine_done();
    stop_here_if_asked(rank, StopPoint::AfterNode);
    if let Err(cause) = &result {
        record_failure(&fabric, rank, cause);
    }
    if rank == 0 {
        finish_rank_0(&fabric, &link, result)
    } else {
        finish_other_rank(&fabric, &link, rank, result)
    }
}

/// Rank 0's end of a run: gather, judge, tell the others (module doc).
fn finish_rank_0(
    fabric: &Fabric,
    link: &MpiLink,
    own: NodeResult,
) -> Result<Vec<Vec<u8>>, LaunchError> {
    let gathered = if fabric.control().aborted() {
        None
    } else {
        link.gather().ok()
    };
    let mut results = Vec::new();
    let mut fallback: Option<(usize, String)> = None;
    if let Some(mut all) = gathered {
        all[0] = Some(own);
        for (node, r) in all.into_iter().enumerate() {
            match r {
                Some(Ok(bytes)) => results.push(bytes),
                Some(Err(cause)) => {
                    if fallback
                        .as_ref()
                        .is_none_or(|(_, c)| is_secondary(c) && !is_secondary(&cause))
                    {
                        fallback = Some((node, cause));
                    }
                }
                None => unreachable!("gathered every result"),
            }
        }
    } else if let Err(cause) = own {
        fallback = Some((0, cause));
    }
    let ok = fallback.is_none() && !fabric.control().aborted() && !results.is_empty();
    link.send_verdict(ok);
    if ok {
        return Ok(results);
    }
    mpi::abort_at_exit();
    Err(failure_report(fabric, fallback))
}

/// The end of a run on a rank other than 0 (module doc).
fn finish_other_rank(
    fabric: &Fabric,
    link: &MpiLink,
    rank: usize,
    own: NodeResult,
) -> Result<Vec<Vec<u8>>, LaunchError> {
    link.send_result(&own);
    if link.verdict() == Some(true) {
        return Err(LaunchError::OtherRun);
    }
    // Rank 0 may have judged the run a success before this rank's abort: then it will
    // not abort the job, and this rank ends its run as after a success.
    let verdict = link.await_verdict_or_silence_of_rank_0();
    if verdict == Some(true) {
        return Err(LaunchError::OtherRun);
    }
    // The run failed. Rank 0 reports it and aborts the job, unless rank 0 fell silent:
    // then the lowest rank still responding does, once the ranks below it are silent too
    // (rank 1 at once; rank 2 if rank 1 was stopped as well; and so on).
    if verdict.is_some() {
        crate::wait::until_killed()
    }
    crate::wait::poll_until(REPORTER_LOOK, || link.ranks_below_silent(rank));
    if !matches!(fabric.control().abort_origin(), AbortOrigin::Recorded { node: 0, .. }) {
        let cause = link.rank_0_silence();
        fabric.control().fail(0, &cause);
    }
    sys::report(failure_report(fabric, None));
    mpi::abort_job()
}
