//! Processes: starting this binary again as a node process (fork and exec with inherited
//! descriptors and `PR_SET_PDEATHSIG`), waiting on node processes through pidfds, killing
//! and signalling processes, and exit hooks.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::Duration;

use super::fatal;

/// Starts this binary again as a node process with `args`, the environment plus `env`, and
/// the descriptors `keep` inherited at the same numbers. Never waits for the child: the
/// launcher learns that it has `exec`ed from [`NodeProcess::exec_state`] (a stopped or
/// stuck child cannot block the launcher, as `std::process::Command::spawn`, which waits
/// for the `exec`, would). The child dies with SIGKILL if the launching thread's process
/// dies first (PR_SET_PDEATHSIG, then a check that the parent is still the launcher).
/// `stop_before_exec` (the test-only `DSM_TEST_STOP=N:before-exec`, see
/// [`crate::launch`]) makes the child stop itself with SIGSTOP just before its `exec`.
pub fn spawn_node_process(
    args: &[OsString],
    env: &[(String, String)],
    keep: &[RawFd],
    stop_before_exec: bool,
) -> io::Result<NodeProcess> {
    use std::os::unix::ffi::OsStrExt;
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument or environment variable holds a NUL byte",
            )
        })
    };
    // Everything the child needs is built before the fork: between fork and exec a child of
    // a multithreaded process may only make async-signal-safe calls (no allocation).
    let exe = cstring(std::env::current_exe()?.as_os_str().as_bytes())?;
    let mut argv = vec![exe.clone()];
    for a in args {
        argv.push(cstring(a.as_bytes())?);
    }
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| k.as_bytes() == name.as_bytes()))
        .collect();
    vars.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    let mut envp = Vec::with_capacity(vars.len());
    for (k, v) in &vars {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(cstring(&kv)?);
    }
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let keep: Vec<RawFd> = keep.to_vec();
    let parent = std::process::id() as libc::pid_t;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two descriptors for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child branch below calls only async-signal-safe functions (fcntl, prctl,
    // getppid, sigprocmask, raise, execve, write, _exit) on memory built before the fork
    // (argv, envp, keep, the empty signal set), and never returns into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: as above: the forked child, before exec.
        unsafe {
            let fail = |w: RawFd| -> ! {
                let errno = *libc::__errno_location();
                let _ = libc::write(w, (&errno as *const libc::c_int).cast(), 4);
                libc::_exit(127)
            };
            let w = write_end.as_raw_fd();
            for &fd in &keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    fail(w);
                }
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                fail(w);
            }
            // The launcher may have died before the prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            // The launcher's threads may block signals; the program starts with none blocked.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if stop_before_exec {
                libc::raise(libc::SIGSTOP);
            }
            libc::execve(argv_ptrs[0], argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            fail(w)
        }
    }
    drop(write_end);
    Ok(NodeProcess {
        pid: pid as u32,
        exec_pipe: Some(read_end),
        pidfd: pidfd_open(pid as u32),
        status: None,
    })
}

/// A descriptor that becomes readable when process `pid` ends, or `None` if this kernel
/// has no `pidfd_open` (Linux 5.3).
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative fd was just returned to us and is owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Blocks until one of `children` ends or `execs` (its exec-status pipe becomes readable),
/// or `limit` passes: the launcher sleeps in the kernel instead of polling its children.
/// Without pidfds (an old kernel) it just sleeps for `limit`.
pub fn wait_node_processes(children: &[&NodeProcess], limit: Duration) {
    let mut fds: Vec<libc::pollfd> = children
        .iter()
        .flat_map(|c| [c.pidfd.as_ref(), c.exec_pipe.as_ref()])
        .flatten()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = limit.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: fds is a valid array of fds.len() pollfds for the duration of the call; an
    // empty one makes poll a plain sleep.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// Whether a node process has started the program.
#[derive(Debug)]
pub enum ExecState {
    /// Not yet: it is between fork and exec (or stopped there).
    Pending,
    /// It has `exec`ed (or died before; [`NodeProcess::try_wait`] then says how).
    Done,
    /// Its `exec` failed.
    Failed(io::Error),
}

/// A node process started by [`spawn_node_process`]. Dropping one that has not been waited
/// for kills and reaps it, so that no node outlives its launcher's view of it.
#[derive(Debug)]
pub struct NodeProcess {
    pid: u32,
    /// The read end of the exec-status pipe, until the exec is known to have happened.
    exec_pipe: Option<OwnedFd>,
    /// Readable once the process has ended ([`wait_node_processes`]).
    pidfd: Option<OwnedFd>,
    status: Option<std::process::ExitStatus>,
}

impl NodeProcess {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Whether the child has `exec`ed, without waiting.
    pub fn exec_state(&mut self) -> ExecState {
        let Some(pipe) = &self.exec_pipe else {
            return ExecState::Done;
        };
        let mut errno: libc::c_int = 0;
        // SAFETY: errno is a valid 4-byte buffer; the pipe is non-blocking.
        let n = unsafe { libc::read(pipe.as_raw_fd(), (&mut errno as *mut libc::c_int).cast(), 4) };
        match n {
            0 => {
                self.exec_pipe = None;
                ExecState::Done
            }
            4 => {
                self.exec_pipe = None;
                ExecState::Failed(io::Error::from_raw_os_error(errno))
            }
            _ => {
                let e = io::Error::last_os_error();
                if n < 0 && e.kind() == io::ErrorKind::WouldBlock {
                    ExecState::Pending
                } else {
                    self.exec_pipe = None;
                    ExecState::Failed(e)
                }
            }
        }
    }

    /// The child's exit status if it has ended, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        self.wait_inner(libc::WNOHANG)
    }

    /// Kills the child (SIGKILL, which also ends a stopped process) and reaps it.
    pub fn kill_and_wait(&mut self) {
        if self.status.is_some() {
            return;
        }
        kill_process(self.pid);
        let _ = self.wait_inner(0);
    }

    fn wait_inner(&mut self, flags: libc::c_int) -> io::Result<Option<std::process::ExitStatus>> {
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: status is a valid out-pointer; pid is our own child, not yet reaped.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, flags) };
            if r == 0 {
                return Ok(None);
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let status = std::os::unix::process::ExitStatusExt::from_raw(status);
            self.status = Some(status);
            return Ok(Some(status));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

/// Makes a child started by `cmd` die with SIGKILL when the calling thread's process dies
/// (PR_SET_PDEATHSIG, then a check that the parent is still this process, in case it died
/// before the prctl): `table --jobs` starts its jobs so, and a table ended by a signal
/// leaves no job running on.
pub fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Sends SIGKILL to a process (ignoring one that is already gone).
pub fn kill_process(pid: u32) {
    signal_process(pid, nix::sys::signal::Signal::SIGKILL);
}

/// Sends SIGTERM to a process (ignoring one that is already gone): it may clean up, and
/// `mpirun` passes it on to its ranks.
pub fn terminate_process(pid: u32) {
    signal_process(pid, nix::sys::signal::Signal::SIGTERM);
}

fn signal_process(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

/// The name of a signal number, for error messages ("SIGKILL").
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// Stops the calling process with SIGSTOP, every thread of it: used by tests that make a
/// node stop responding on purpose. The launcher's stall watch then kills it.
pub fn raise_stop() {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
}

#[cfg(feature = "mpi")]
/// Runs `f` when the process exits normally (`exit`, or a return from `main`), after
/// every function registered later (`atexit`).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: atexit stores a function pointer that stays valid for the life of the
    // process (a plain `extern "C" fn`); it touches no memory of ours.
    let _ = unsafe { libc::atexit(f) };
}

/// True while a process with this pid exists (a zombie counts until it is reaped).
pub fn process_exists(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

/// Waits until the process `pid` has ended (exited or been killed, reaped or not), at most
/// `limit`; true if it has. Blocks on a pidfd, which becomes readable when the process
/// ends: no polling. A pid that names no process has ended.
pub fn wait_process_gone(pid: u32, limit: std::time::Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let fd = fd as libc::c_int;
    let deadline = std::time::Instant::now() + limit;
    let ended = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: p is one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if r > 0 {
            break true;
        }
        if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break false;
        }
    };
    // SAFETY: fd is the descriptor pidfd_open returned above, closed once.
    unsafe { libc::close(fd) };
    ended
}

/// Sends a signal to the calling process: used by tests that kill a node on purpose.
pub fn raise_kill() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    fatal("SIGKILL did not kill the process");
}
