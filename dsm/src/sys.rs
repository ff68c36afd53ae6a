//! The one door to the operating system. Every call into libc or nix lives here:
//! memfd, shared and private mappings, mprotect, futexes on shared memory, signal handlers
//! with alternate stacks, userfaultfd, and re-executing this binary as a node process.
//!
//! Everything above this module is safe Rust. Each `unsafe` block states why it is sound.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, Command};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

/// The host's page size in bytes.
pub fn host_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Creates an anonymous shared-memory file of `len` bytes (sparse: pages are allocated when
/// first touched). The descriptor is close-on-exec; [`spawn_node_process`] hands it on
/// explicitly.
pub fn memfd_create(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::other("memfd name contains NUL"))?;
    // SAFETY: cname is a valid NUL-terminated string; flags are valid.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("memfd too large"))?;
    // SAFETY: fd is a valid memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Takes ownership of a descriptor inherited from the launcher.
///
/// # Safety
/// `fd` must be an open descriptor that nothing else in this process owns.
pub unsafe fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller guarantees that fd is open and unowned.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Page protections the protocol sets on the application's view of the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    None,
    Read,
    ReadWrite,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A mapping owned by this process; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range; sharing the address between threads is sound, and
// every access to the memory goes through raw pointers whose users state their own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping only hands out the address.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and still owns.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Reserves `len` bytes of address space with no access, to pick an address range that
/// later mappings replace with [`map_shared_at`].
pub fn reserve(len: usize) -> io::Result<Mapping> {
    // SAFETY: an anonymous PROT_NONE mapping at a kernel-chosen address has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len })
}

/// Maps `len` bytes of `fd` from `offset`, shared, with protection `prot`, at an address
/// the kernel picks.
pub fn map_shared(fd: &OwnedFd, offset: usize, len: usize, prot: Prot) -> io::Result<Mapping> {
    map_shared_inner(fd, offset, len, prot, None)
}

/// Maps `len` bytes of `fd` from `offset` at exactly `addr`, which must lie inside the
/// reservation `within` (the mapping replaces that part of the reservation).
pub fn map_shared_at(
    fd: &OwnedFd,
    offset: usize,
    len: usize,
    prot: Prot,
    within: &Mapping,
    addr: usize,
) -> io::Result<Mapping> {
    if addr < within.addr() || addr + len > within.addr() + within.len() {
        return Err(io::Error::other("fixed mapping outside its reservation"));
    }
    map_shared_inner(fd, offset, len, prot, Some(addr))
}

/// Maps at exactly `addr`, which must be free (the address was chosen by another process
/// of the same cluster; MAP_FIXED_NOREPLACE refuses to clobber anything).
pub fn map_shared_fixed_noreplace(
    fd: &OwnedFd,
    offset: usize,
    len: usize,
    prot: Prot,
    addr: usize,
) -> io::Result<Mapping> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; fd is valid.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            prot.bits(),
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize != addr {
        // Old kernels ignore the flag and treat it as a hint.
        // SAFETY: p/len is the mapping just created.
        unsafe { libc::munmap(p, len) };
        return Err(io::Error::other(format!("address {addr:#x} is not free in this process")));
    }
    Ok(Mapping { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len })
}

fn map_shared_inner(
    fd: &OwnedFd,
    offset: usize,
    len: usize,
    prot: Prot,
    addr: Option<usize>,
) -> io::Result<Mapping> {
    let (hint, extra) = match addr {
        Some(a) => (a as *mut libc::c_void, libc::MAP_FIXED),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: with MAP_FIXED the caller checked that addr lies inside a reservation this
    // process owns, so no live Rust object is replaced; fd is valid.
    let p = unsafe {
        libc::mmap(hint, len, prot.bits(), libc::MAP_SHARED | extra, fd.as_raw_fd(), offset as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len })
}

/// Forgets a mapping without unmapping it: used for a fixed mapping that replaced part of a
/// reservation, which is unmapped as part of the reservation.
pub fn forget_mapping(m: Mapping) {
    std::mem::forget(m);
}

/// Changes the protection of `[addr, addr + len)`, which must be inside a mapping this
/// process made.
pub fn protect(addr: usize, len: usize, prot: Prot) -> io::Result<()> {
    // SAFETY: changing protections cannot violate Rust's memory safety by itself: the heap
    // view is only accessed through raw pointers, and a fault on it is handled.
    let rc = unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot.bits()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOMEM) {
            return Err(io::Error::other(format!(
                "mprotect failed with ENOMEM: this process has too many memory mappings \
                 (vm.max_map_count = {}); run one node per process or use a smaller heap",
                max_map_count().unwrap_or(0)
            )));
        }
        return Err(e);
    }
    Ok(())
}

/// The kernel's limit on mappings per process.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?.trim().parse().ok()
}

// ---------------------------------------------------------------------------------------
// Futexes on shared memory.
// ---------------------------------------------------------------------------------------

/// Sleeps while `*word == expected`, at most `timeout`. Works across processes when the
/// word lies in a shared mapping (the futex is not private). Spurious wake-ups happen;
/// callers re-check their condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word is a valid, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr, 0usize, 0u32);
    }
}

/// Wakes up to `n` waiters on `word`. The kernel reads `n` as a signed int: pass at most
/// `i32::MAX` (larger values wake one waiter).
pub fn futex_wake(word: &AtomicU32, n: u32) {
    let n = n.min(i32::MAX as u32);
    // SAFETY: word is a valid, aligned u32; FUTEX_WAKE does not access it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n, 0usize, 0usize, 0u32);
    }
}

// ---------------------------------------------------------------------------------------
// Clocks.
// ---------------------------------------------------------------------------------------

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic wall-clock time in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

// ---------------------------------------------------------------------------------------
// Fault signals.
// ---------------------------------------------------------------------------------------

/// What the handler learned about a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultAccess {
    pub addr: usize,
    pub write: bool,
}

/// The engine's fault entry point. It returns true when the fault was resolved (the access
/// is retried) and false when the address is not the engine's to handle.
pub type FaultFn = fn(ctx: usize, access: FaultAccess) -> bool;

const MAX_FAULT_RANGES: usize = 64;

/// Registered heap ranges: start, end, handler context, handler. A slot is in use while
/// its end is non-zero. Read by the signal handler without locks or allocation.
struct FaultRange {
    start: AtomicUsize,
    end: AtomicUsize,
    ctx: AtomicUsize,
    func: AtomicUsize,
}

static FAULT_RANGES: [FaultRange; MAX_FAULT_RANGES] = [const {
    FaultRange {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        ctx: AtomicUsize::new(0),
        func: AtomicUsize::new(0),
    }
}; MAX_FAULT_RANGES];

static INSTALL: std::sync::Once = std::sync::Once::new();
static mut PREV_SEGV: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static mut PREV_BUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

/// A registered fault range; unregistered on drop. The owner must make sure no thread can
/// fault in the range any more before dropping it.
#[derive(Debug)]
pub struct FaultRegistration {
    slot: usize,
}

impl Drop for FaultRegistration {
    fn drop(&mut self) {
        let r = &FAULT_RANGES[self.slot];
        r.end.store(0, Ordering::Release);
        r.start.store(0, Ordering::Release);
    }
}

/// Routes faults in `[start, start + len)` to `func(ctx, access)`, installing the SIGSEGV
/// and SIGBUS handlers on first use. `ctx` is an opaque value for `func` (the engine passes
/// the address of a node it keeps alive for as long as the registration lives).
pub fn register_fault_range(start: usize, len: usize, ctx: usize, func: FaultFn) -> io::Result<FaultRegistration> {
    install_handlers()?;
    for (slot, r) in FAULT_RANGES.iter().enumerate() {
        if r.end.compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            r.start.store(start, Ordering::Relaxed);
            r.ctx.store(ctx, Ordering::Relaxed);
            r.func.store(func as usize, Ordering::Relaxed);
            r.end.store(start + len, Ordering::Release);
            return Ok(FaultRegistration { slot });
        }
    }
    Err(io::Error::other(format!("more than {MAX_FAULT_RANGES} heaps registered in one process")))
}

fn install_handlers() -> io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        for (sig, prev) in [(libc::SIGSEGV, &raw mut PREV_SEGV), (libc::SIGBUS, &raw mut PREV_BUS)] {
            // SAFETY: a zeroed sigaction is a valid starting value; we fill the fields we use.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = fault_signal_handler as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            // SAFETY: sa_mask is a valid sigset_t; prev points to static storage written once,
            // inside call_once, before any handler can read it.
            let rc = unsafe {
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, (*prev).as_mut_ptr())
            };
            if rc != 0 {
                result = Err(io::Error::last_os_error());
            }
        }
    });
    result
}

extern "C" fn fault_signal_handler(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // On x86-64 the page-fault error code is in the signal context; bit 1 means write.
    // SAFETY: uctx is the ucontext_t the kernel built for this signal.
    let err = unsafe { (*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    let access = FaultAccess { addr, write: err & 2 != 0 };
    for r in FAULT_RANGES.iter() {
        let end = r.end.load(Ordering::Acquire);
        if end == 0 || end == usize::MAX {
            continue;
        }
        let start = r.start.load(Ordering::Relaxed);
        if addr >= start && addr < end {
            let ctx = r.ctx.load(Ordering::Relaxed);
            // SAFETY: func was stored from a valid FaultFn in register_fault_range.
            let func: FaultFn = unsafe { std::mem::transmute::<usize, FaultFn>(r.func.load(Ordering::Relaxed)) };
            if func(ctx, access) {
                return;
            }
            break;
        }
    }
    chain_to_previous(sig, info, uctx);
}

fn chain_to_previous(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    let prev = if sig == libc::SIGSEGV { &raw const PREV_SEGV } else { &raw const PREV_BUS };
    // SAFETY: prev was initialised by install_handlers before this handler was installed.
    let prev = unsafe { (*prev).assume_init_ref() };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Restore the default action and return: the access faults again and the process
        // dies with the signal, as it would have without us.
        // SAFETY: resetting a signal to its default disposition has no preconditions.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: a handler without SA_SIGINFO takes only the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Writes a message to standard error without allocating, then aborts: for the fault
/// handler, which must never unwind.
pub fn fatal(msg: &str) -> ! {
    // SAFETY: msg is a valid buffer; write(2) is async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
        libc::abort();
    }
}

/// Size of the per-thread alternate signal stack: the fault handler runs protocol code
/// (messages, diffs), so it is generous.
const ALT_STACK_BYTES: usize = 512 * 1024;

thread_local! {
    static ALT_STACK: std::cell::RefCell<Option<Mapping>> = const { std::cell::RefCell::new(None) };
}

/// Gives the calling thread an alternate signal stack (with a guard page below it) if it
/// has none, so the fault handler never runs on a stack it may have overflowed.
pub fn ensure_alt_stack() -> io::Result<()> {
    ALT_STACK.with(|cell| {
        if cell.borrow().is_some() {
            return Ok(());
        }
        let guard = host_page_size();
        let total = ALT_STACK_BYTES + guard;
        // SAFETY: anonymous private mapping at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let m = Mapping { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len: total };
        protect(m.addr(), guard, Prot::None)?;
        let ss = libc::stack_t { ss_sp: (m.addr() + guard) as *mut libc::c_void, ss_flags: 0, ss_size: ALT_STACK_BYTES };
        // SAFETY: ss describes memory owned by this thread's ALT_STACK for its lifetime;
        // the stack is disabled again in the thread-local destructor below before unmapping.
        if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        *cell.borrow_mut() = Some(m);
        Ok(())
    })
}

/// Turns the alternate stack off before its memory goes away at thread exit.
pub fn drop_alt_stack() {
    ALT_STACK.with(|cell| {
        if let Some(m) = cell.borrow_mut().take() {
            let ss = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
            // SAFETY: disabling the alternate stack has no preconditions.
            unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) };
            drop(m);
        }
    });
}

// ---------------------------------------------------------------------------------------
// Node processes.
// ---------------------------------------------------------------------------------------

/// Starts this binary again as a node process with `args`, the environment plus `env`, and
/// the descriptors `keep` inherited at the same numbers. The child dies with SIGKILL if the
/// launching thread's process dies first.
pub fn spawn_node_process(args: &[OsString], env: &[(String, String)], keep: &[RawFd]) -> io::Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let keep: Vec<RawFd> = keep.to_vec();
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (fcntl, prctl, getppid, _exit) on descriptors that stay open.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            for &fd in &keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Sends SIGKILL to a process (ignoring one that is already gone).
pub fn kill_process(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
}

/// The name of a signal number, for error messages ("SIGKILL").
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("signal {sig}"))
}

/// Sends a signal to the calling process: used by tests that kill a node on purpose.
pub fn raise_kill() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    fatal("SIGKILL did not kill the process");
}
