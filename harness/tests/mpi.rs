//! The `cashmere` command under `mpirun` (a build with `--features harness/mpi`): every
//! application at test size under the two variants that run on messages alone, on 2 and
//! 4 ranks, checked against its sequential version; the refusals (a variant that needs
//! Memory Channel features, a rank count other than the nodes, the modeled clock); and a
//! rank that fails, a rank killed and a rank stopped, each reported, with no rank left
//! running. If `mpirun` is missing these tests fail with the install command.
#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::{Command, Stdio};

const INSTALL: &str = "apt-get install -y openmpi-bin libopenmpi-dev";

/// The longest a job may run before it is stopped and its test fails: far beyond what any
/// takes on a loaded 2-core machine, so it only turns a hang into a failure.
const JOB_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn text(&self) -> String {
        format!("status {:?}\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout, self.stderr)
    }
}

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cashmere"))
}

/// A tag in the environment of one job's ranks, to find any of them left running.
fn tag(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// One job at a time: the tests of this file run on parallel threads, and several MPI
/// jobs of 4 ranks on a busy 2-core machine slow each other down far more than they gain.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `cashmere args` on `np` ranks with `env` (the `DSM_*` variables of this process
/// cleared) and the job's tag; panics with the install command if mpirun is missing.
fn mpirun(np: usize, args: &[&str], env: &[(&str, &str)], tag: &str) -> Outcome {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--bind-to", "none", "-np", &np.to_string()])
        .arg(binary())
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("DSM_") {
            c.env_remove(k);
        }
    }
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("CASHMERE_MPI_TEST_TAG", tag)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let out = match dsm::testing::output_within(c, JOB_LIMIT) {
        Ok(Ok(out)) => out,
        Ok(Err(hung)) => panic!("mpirun -np {np} {}: {hung}", args.join(" ")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("mpirun is missing: the MPI tests need Open MPI: {INSTALL}")
        }
        Err(e) => panic!("cannot start mpirun: {e}"),
    };
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The processes whose environment holds `tag` (ranks of a job that should have ended).
fn left_running(tag: &str) -> Vec<u32> {
    let needle = format!("CASHMERE_MPI_TEST_TAG={tag}\0");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

#[test]
fn every_app_at_test_size_matches_its_sequential_version_on_2_and_4_ranks() {
    for np in [2, 4] {
        let nodes = np.to_string();
        let t = tag(&format!("suite{np}"));
        let args = [
            "suite",
            "--size",
            "test",
            "--variants",
            "CSM-None,CSM-None-Mg",
            "--nodes",
            &nodes,
            "--procs",
            "2",
        ];
        let o = mpirun(np, &args, &[], &t);
        assert_eq!(o.code, Some(0), "{}", o.text());
        // Rank 0 alone prints: one table, one verified row per app and variant.
        assert_eq!(o.stdout.matches("verified").count(), 1, "{}", o.text());
        let rows = o.stdout.lines().filter(|l| l.contains(" yes ")).count();
        assert_eq!(rows, 20, "{}", o.text());
        assert!(left_running(&t).is_empty());
    }
}

#[test]
fn a_variant_that_needs_memory_channel_features_is_refused() {
    let t = tag("refused");
    let o = mpirun(2, &["run", "sor", "--size", "test", "--variant", "CSM-DMS", "--nodes", "2"], &[], &t);
    assert_ne!(o.code, Some(0), "{}", o.text());
    let msg = "CSM-DMS needs remote write and broadcast and total order and loopback from the network, which MPI (two-sided messages between ranks) does not have; choose a protocol that uses explicit messages for that (for example CSM-None)";
    assert_eq!(o.stderr.matches(msg).count(), 1, "rank 0 alone reports:\n{}", o.text());
    assert!(left_running(&t).is_empty());
}

#[test]
fn a_rank_count_other_than_the_nodes_is_refused() {
    let t = tag("ranks");
    let o = mpirun(2, &["run", "sor", "--size", "test", "--variant", "CSM-None", "--nodes", "3"], &[], &t);
    assert_ne!(o.code, Some(0), "{}", o.text());
    assert!(
        o.stderr.contains("mpirun started 2 MPI ranks, but the cluster has 3 nodes (one rank per node): start it with `mpirun -np 3`, or give --nodes 2"),
        "{}",
        o.text()
    );
    assert!(left_running(&t).is_empty());
}

#[test]
fn the_modeled_clock_is_refused_under_mpi() {
    let o = Command::new(binary())
        .args(["run", "sor", "--size", "test", "--variant", "CSM-None", "--exec", "mpi", "--clock", "modeled"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null())
        .output()
        .expect("the cashmere binary runs");
    assert_ne!(o.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("the modeled clock cannot run over MPI"), "{stderr}");
}

/// Runs sor on 2 ranks with `DSM_TEST_STOP=stop` and a stall limit of 3 s.
fn failing_run(stop: &str, name: &str) -> (Outcome, String) {
    failing_run_on(2, stop, name)
}

/// Runs sor on `np` ranks with `DSM_TEST_STOP=stop` and a stall limit of 3 s (with 1 s, a
/// live rank that a loaded host left unscheduled for a second could be reported first).
fn failing_run_on(np: usize, stop: &str, name: &str) -> (Outcome, String) {
    let t = tag(name);
    let nodes = np.to_string();
    let args = ["run", "sor", "--size", "test", "--variant", "CSM-None", "--nodes", &nodes, "--stall-timeout", "3"];
    (mpirun(np, &args, &[("DSM_TEST_STOP", stop)], &t), t)
}

#[test]
fn a_failed_rank_is_the_failure_reported_and_no_rank_is_left_running() {
    // The failing rank's node ends at once, while the others run into waits for it (the
    // start-up barrier, its pages, the first barrier): they must end with the job, and the
    // failure reported must be that rank's own cause, once, and nothing else (not a peer's
    // abort, not a stall).
    for (np, variant, node) in [(2, "CSM-None", 1), (2, "CSM-None-Mg", 0), (4, "CSM-None", 0), (4, "CSM-None-Mg", 3)] {
        let t = tag(&format!("failed{np}-{node}"));
        let (nodes, stop) = (np.to_string(), format!("{node}:failed"));
        let args = ["run", "sor", "--size", "test", "--variant", variant, "--nodes", &nodes, "--procs", "2", "--stall-timeout", "3"];
        let o = mpirun(np, &args, &[("DSM_TEST_STOP", &stop)], &t);
        assert_ne!(o.code, Some(0), "{}", o.text());
        let report = format!(
            "cashmere: parallel sor under {variant}: node {node} failed: node {node} failed on purpose (DSM_TEST_STOP={node}:failed"
        );
        assert_eq!(o.stderr.matches(&report).count(), 1, "{}", o.text());
        let failures = o.stderr.lines().filter(|l| l.starts_with("cashmere: ")).count();
        assert_eq!(failures, 1, "one failure is reported:\n{}", o.text());
        assert!(left_running(&t).is_empty(), "{}", o.text());
    }
}

#[test]
fn a_killed_rank_is_reported_and_no_rank_is_left_running() {
    let (o, t) = failing_run("1:killed", "killed");
    assert_ne!(o.code, Some(0), "{}", o.text());
    // mpirun sees the death first and reports it, naming the rank (the node) and the signal.
    assert!(o.stderr.contains("process rank 1") && o.stderr.contains("signal 9 (Killed)"), "{}", o.text());
    // mpirun ends the other ranks; none reports a failure of its own (an abort, a stall)
    // in place of the death.
    let failures: Vec<&str> = o.stderr.lines().filter(|l| l.starts_with("cashmere: ")).collect();
    assert!(failures.is_empty(), "{failures:?}\n{}", o.text());
    assert!(left_running(&t).is_empty(), "{}", o.text());
}

#[test]
fn a_stopped_rank_is_reported_and_no_rank_is_left_running() {
    // Rank 0 reports a stopped rank 1; rank 1 reports a stopped rank 0. Either ends the job
    // with MPI_Abort, which kills the stopped rank too.
    // After the node's work, a stopped rank 0 leaves rank 1's result (larger than MPI
    // sends without a receiver) unsent: the sender must still see the abort.
    // The MPI_Abort that ends the job may continue a stopped rank 0 (Open MPI sends it
    // SIGCONT before it kills it), which then reports the same failure again before it
    // dies: one report or two, both of the stopped node.
    for (stop, node, reports) in [
        ("1:before-ready", 1, 1..=2),
        ("0:before-ready", 0, 1..=2),
        ("0:after-node", 0, 1..=2),
        ("1:after-node", 1, 1..=2),
    ] {
        let (o, t) = failing_run(stop, &format!("stopped{stop}"));
        assert_ne!(o.code, Some(0), "{}", o.text());
        let report = format!("node {node} stopped responding: no ");
        assert!(reports.contains(&o.stderr.matches(&report).count()), "{}", o.text());
        // No other failure is reported.
        let failures = o.stderr.lines().filter(|l| l.starts_with("cashmere: ")).count();
        assert_eq!(failures, o.stderr.matches(&report).count(), "{}", o.text());
        assert!(left_running(&t).is_empty(), "{}", o.text());
    }
}

#[test]
fn with_rank_0_and_rank_1_stopped_rank_2_reports() {
    // Rank 0 fell silent, so it will not report; rank 1, which would, is silent too: the
    // lowest rank still responding (2) reports rank 0 and ends the job. The MPI_Abort may
    // continue the stopped ranks, which then report the same failure before they die.
    let (o, t) = failing_run_on(3, "0:after-node,1:after-node", "stopped-0-and-1");
    assert_ne!(o.code, Some(0), "{}", o.text());
    let report = "node 0 stopped responding: no ";
    assert!((1..=3).contains(&o.stderr.matches(report).count()), "{}", o.text());
    let failures = o.stderr.lines().filter(|l| l.starts_with("cashmere: ")).count();
    assert_eq!(failures, o.stderr.matches(report).count(), "{}", o.text());
    assert!(left_running(&t).is_empty(), "{}", o.text());
}
