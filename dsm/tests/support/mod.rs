//! What several of the DSM's integration tests share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::fmt::Display;
use std::path::PathBuf;

/// A homes file (`Config::homes_file`: one `page home` per line) that pins first homes.
/// It is named after `name` and the launching process, so that the node processes of a
/// process-mode run read the file their launcher wrote; only the launcher writes it, and
/// removes it when dropped. Under MPI every rank writes (and removes) its own.
pub struct HomesFile(pub PathBuf);

impl HomesFile {
    pub fn new<P: Display>(name: &str, homes: &[(P, usize)]) -> HomesFile {
        let node_process = dsm::host::is_node_process() && dsm::host::mpi_rank().is_none();
        let launcher = if node_process {
            std::os::unix::process::parent_id()
        } else {
            std::process::id()
        };
        let path = std::env::temp_dir().join(format!("cashmere-{name}-{launcher}"));
        if !node_process {
            let text: String = homes.iter().map(|(p, h)| format!("{p} {h}\n")).collect();
            std::fs::write(&path, text).expect("cannot write the homes file");
        }
        HomesFile(path)
    }
}

impl Drop for HomesFile {
    fn drop(&mut self) {
        if !dsm::host::is_node_process() || dsm::host::mpi_rank().is_some() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The fault backends this build has, or the one `DSM_BACKEND` names.
pub fn backends() -> Vec<dsm::FaultBackend> {
    match std::env::var("DSM_BACKEND") {
        Ok(b) if !b.is_empty() => vec![b.parse().expect("DSM_BACKEND must name a fault backend")],
        _ if cfg!(feature = "userfaultfd") => {
            vec![dsm::FaultBackend::Mprotect, dsm::FaultBackend::Userfaultfd]
        }
        _ => vec![dsm::FaultBackend::Mprotect],
    }
}

/// How Debian installs what the MPI tests need.
#[cfg(feature = "mpi")]
pub const MPI_INSTALL: &str = "apt-get install -y openmpi-bin libopenmpi-dev";

/// The longest an MPI test's job may run before it is stopped and the test fails: far
/// beyond what any takes on a loaded 2-core machine (seconds), so it only turns a hang
/// into a failure.
#[cfg(feature = "mpi")]
pub const MPI_JOB_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `program args` on `np` MPI ranks (`mpirun --oversubscribe --bind-to none`, allowed
/// as root), with `env` added, and returns its status and output. Panics with the install
/// command if `mpirun` is missing: the MPI tests never skip silently.
#[cfg(feature = "mpi")]
pub fn mpirun(
    np: usize,
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = std::process::Command::new("mpirun");
    cmd.args(["--oversubscribe", "--bind-to", "none", "-np", &np.to_string()])
        .arg(program)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    match dsm::testing::output_within(cmd, MPI_JOB_LIMIT) {
        Ok(Ok(out)) => out,
        Ok(Err(hung)) => panic!("mpirun -np {np} {}: {hung}", args.join(" ")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "mpirun is missing: the MPI tests (a build with --features mpi) need Open MPI: {MPI_INSTALL}"
        ),
        Err(e) => panic!("cannot start mpirun: {e}"),
    }
}

/// The number of ranks of the MPI job this process belongs to (from the environment
/// mpirun sets).
#[cfg(feature = "mpi")]
pub fn mpi_ranks() -> usize {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .expect("this test runs under mpirun")
}

/// Waits until a scenario's step word reaches `step` (test hooks, `dsm::testing`), failing
/// with the step it stood at if it does not get there within a minute: a hang is a failure,
/// not a pass. The scenarios' steps take milliseconds.
pub fn wait_step(word: &std::sync::atomic::AtomicU32, step: u32) {
    use std::sync::atomic::Ordering;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while word.load(Ordering::Acquire) < step {
        assert!(
            std::time::Instant::now() < deadline,
            "scenario stuck before step {step} (at step {})",
            word.load(Ordering::Acquire)
        );
        std::thread::yield_now();
    }
}
