//! The one door to the operating system. Every call into libc or nix lives here:
//! memfd, shared and private mappings, mprotect, futexes on shared memory, signal handlers
//! with alternate stacks, userfaultfd, and re-executing this binary as a node process.
//!
//! Everything above this module is safe Rust. Each `unsafe` block states why it is sound.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

/// The error number of an allocation or mapping that ran out of memory.
pub const ENOMEM: i32 = libc::ENOMEM;

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

    /// The mapping's length in bytes (the userfaultfd backend registers the whole view;
    /// the mprotect backend populates the used part of it).
    pub fn len(&self) -> usize {
        self.len
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
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
}

/// Maps `len` bytes of `fd` from `offset`, shared, with protection `prot`, at an address
/// the kernel picks.
pub fn map_shared(fd: &OwnedFd, offset: usize, len: usize, prot: Prot) -> io::Result<Mapping> {
    map_shared_inner(fd, offset, len, prot, None)
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
        return Err(io::Error::other(format!(
            "address {addr:#x} is not free in this process"
        )));
    }
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
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
        libc::mmap(
            hint,
            len,
            prot.bits(),
            libc::MAP_SHARED | extra,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: NonNull::new(p.cast()).expect("mmap returned null"),
        len,
    })
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

/// `MADV_POPULATE_WRITE` (Linux 5.14), not in the libc crate.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Fills the page tables of `[addr, addr + len)`, a shared mapping of a memfd that this
/// process made, as writes would, without changing any byte: pages of the file nobody
/// touched yet are allocated (zero-filled, as they read anyway). The runtime's first
/// access to each page then takes no page fault. A mapping with no access is opened
/// for the call and closed again; its page table entries stay filled, so opening a page
/// later with [`protect`] needs no fault either.
pub fn populate_shared(addr: usize, len: usize, prot: Prot) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if prot != Prot::ReadWrite {
        protect(addr, len, Prot::ReadWrite)?;
    }
    // SAFETY: the range is inside a shared read-write mapping of this process (the caller's
    // word, and opened just above); populating faults pages in and never changes contents.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
    let populated = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    if prot != Prot::ReadWrite {
        protect(addr, len, prot)?;
    }
    populated
}

/// Why [`read_regular_file`] read nothing.
#[derive(Debug)]
pub enum ReadError {
    /// Opening or reading failed (the file is missing, unreadable, ...).
    Io(io::Error),
    /// A directory, device, FIFO or socket: something that could block or never end.
    NotRegular,
    /// Larger than the caller's limit (bytes).
    TooLarge { limit: u64 },
}

impl ReadError {
    /// True if the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular => {
                f.write_str("it is not a regular file (a directory, device or pipe)")
            }
            ReadError::TooLarge { limit } => {
                write!(f, "it is larger than the limit of {}", size_text(*limit))
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// A byte count as a limit is written: `64 MiB`, `512 KiB`, `100 bytes`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads the whole of `path` if it is a regular file of at most `limit` bytes. The file is
/// opened with `O_NONBLOCK`, so that a FIFO does not block the open (it is then refused by
/// its type, checked on the open descriptor, so a file swapped between a check and the
/// open cannot slip through); a device such as `/dev/zero` is refused the same way, and a
/// file that grows past the limit while it is read is refused too.
pub fn read_regular_file(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read_regular_file`] as UTF-8 text.
pub fn read_regular_text(path: &std::path::Path, limit: u64) -> Result<String, ReadError> {
    let bytes = read_regular_file(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is not text (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// The kernel's limit on mappings per process.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The machine's physical memory (`MemTotal` in /proc/meminfo), if it can be read.
pub fn total_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Restores the default action of SIGPIPE (end the process quietly), as a command-line
/// tool whose output goes into `head` wants: Rust ignores SIGPIPE, so a write to a closed
/// pipe would fail, and `println!` would panic.
pub fn default_sigpipe() {
    // SAFETY: SIG_DFL is a valid disposition for SIGPIPE; no handler code is installed.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
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
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word is a valid, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            0usize,
            0u32,
        );
    }
}

/// Wakes up to `n` waiters on `word`. The kernel reads `n` as a signed int: pass at most
/// `i32::MAX` (larger values wake one waiter).
pub fn futex_wake(word: &AtomicU32, n: u32) {
    let n = n.min(i32::MAX as u32);
    // SAFETY: word is a valid, aligned u32; FUTEX_WAKE does not access it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            0usize,
            0usize,
            0u32,
        );
    }
}

// ---------------------------------------------------------------------------------------
// Floating point.
// ---------------------------------------------------------------------------------------

/// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits.
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

/// The calling thread's MXCSR (the SSE control and status register).
#[cfg(target_arch = "x86_64")]
fn mxcsr() -> u32 {
    let mut csr: u32 = 0;
    // SAFETY: stmxcsr stores the 32-bit MXCSR into csr, a valid, aligned u32 that lives
    // across the instruction.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr as *mut u32, options(nostack)) };
    csr
}

/// Loads the calling thread's MXCSR from `csr`, a value [`mxcsr`] read, with at most its
/// FTZ and DAZ bits changed (no reserved bit set).
#[cfg(target_arch = "x86_64")]
fn set_mxcsr(csr: u32) {
    // SAFETY: csr is a register value read by stmxcsr with only defined bits changed, as
    // the callers guarantee, so ldmxcsr cannot fault.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &csr as *const u32, options(nostack)) };
}

/// Makes the calling thread's floating-point arithmetic flush subnormal results and
/// operands to zero (`on`), or compute them (IEEE, the default). Returns the previous
/// setting. On hosts other than x86-64 it changes nothing and returns `on`.
pub fn set_flush_denormals(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let csr = mxcsr();
        set_mxcsr(if on { csr | FTZ_DAZ } else { csr & !FTZ_DAZ });
        csr & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        on
    }
}

/// The floating-point mode of the calling thread, restored when dropped (also when the
/// thread unwinds): see [`flush_denormals`].
#[must_use = "the mode is restored when the guard is dropped"]
pub struct FlushGuard {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

/// Makes the calling thread flush subnormals to zero (`on`) or compute them, until the
/// guard is dropped, which restores the thread's previous MXCSR exactly (both bits as they
/// were, whatever else the thread had set).
pub fn flush_denormals(on: bool) -> FlushGuard {
    #[cfg(target_arch = "x86_64")]
    {
        let saved = mxcsr();
        set_flush_denormals(on);
        FlushGuard { saved }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        FlushGuard {}
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        set_mxcsr(self.saved);
    }
}

/// An exclusive advisory lock on a file (`flock`), held until dropped: serializes the
/// read-modify-write of a file that several processes update.
pub struct FileLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the exclusive lock on `path` (created if missing), waiting for another holder.
pub fn lock_file(path: &std::path::Path) -> io::Result<FileLock> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map(|lock| FileLock { _lock: lock })
        .map_err(|(_, e)| io::Error::from(e))
}

/// Takes the exclusive lock on `path` (created if missing) if nobody holds it, without
/// waiting: `None` if another process holds it. The holder's `note` (its pid, say) is
/// then written into the file, where another process that finds the lock taken can read
/// it ([`read_regular_text`]).
pub fn try_lock_file(path: &std::path::Path, note: &str) -> io::Result<Option<FileLock>> {
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0)?;
            lock.write_all(note.as_bytes())?;
            Ok(Some(FileLock { _lock: lock }))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

// ---------------------------------------------------------------------------------------
// CPU placement.
// ---------------------------------------------------------------------------------------

/// The CPU the calling thread runs on now, if the kernel says.
pub fn current_cpu() -> Option<usize> {
    nix::sched::sched_getcpu().ok()
}

/// The CPUs the calling thread may run on, in increasing order (empty if the kernel does
/// not say).
pub fn allowed_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Puts the calling thread under the kernel's batch policy (`SCHED_BATCH`): a thread it
/// wakes does not preempt it. The modeled clock's hand-over wakes the next activity and
/// then sleeps; under the default policy the woken thread, on the same CPU, would run
/// first and the waker would need one more switch just to go to sleep.
pub fn batch_scheduling() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param for the call's duration; pid 0 is the calling
    // thread; SCHED_BATCH with priority 0 needs no privilege.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        return Err(format!(
            "cannot set the batch scheduling policy: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Binds the calling thread to `cpu` (threads it starts later inherit the binding).
pub fn pin_thread(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("cannot bind this thread to CPU {cpu}: {e}"))
}

// ---------------------------------------------------------------------------------------
// Clocks.
// ---------------------------------------------------------------------------------------

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
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
pub fn register_fault_range(
    start: usize,
    len: usize,
    ctx: usize,
    func: FaultFn,
) -> io::Result<FaultRegistration> {
    install_handlers()?;
    for (slot, r) in FAULT_RANGES.iter().enumerate() {
        if r.end
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            r.start.store(start, Ordering::Relaxed);
            r.ctx.store(ctx, Ordering::Relaxed);
            r.func.store(func as usize, Ordering::Relaxed);
            r.end.store(start + len, Ordering::Release);
            return Ok(FaultRegistration { slot });
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_FAULT_RANGES} heaps registered in one process"
    )))
}

fn install_handlers() -> io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        for (sig, prev) in [
            (libc::SIGSEGV, &raw mut PREV_SEGV),
            (libc::SIGBUS, &raw mut PREV_BUS),
        ] {
            // SAFETY: a zeroed sigaction is a valid starting value; we fill the fields we use.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = fault_signal_handler as *const () as usize;
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

thread_local! {
    /// Set when a protection fault was delivered to this thread since the modeled clock
    /// last looked ([`take_fault_delivered`]).
    static FAULT_DELIVERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a protection fault was delivered to the calling thread since the last call.
pub fn take_fault_delivered() -> bool {
    FAULT_DELIVERED.with(|f| f.replace(false))
}

/// The thread CPU time this host spends delivering one protection fault to the handler
/// and returning from it (kernel entry, signal frame, handler dispatch, `sigreturn`),
/// less the handler's own work: measured once per process, the least of 25 rounds of
/// 200 faults on a scratch page less the least of 25 rounds of the same `mprotect`
/// calls without the fault.
/// The modeled clock takes it out of a processor's measured computation, since the
/// platform's own fault cost (`HostCosts::fault_ns`) is charged instead. 0 if it cannot
/// be measured.
pub fn fault_delivery_ns() -> u64 {
    static MEASURED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // A fault costs something: a measurement of 0 (or a failed one) was swamped by noise
    // from the rest of the process (a clean-clone CI run once got 0), so measure again.
    *MEASURED.get_or_init(|| {
        (0..5)
            .map(|_| measure_fault_delivery().unwrap_or(0))
            .find(|&ns| ns > 0)
            .unwrap_or(0)
    })
}

fn measure_fault_delivery() -> io::Result<u64> {
    // Enough rounds that each loop has a quiet one on a busy machine (a full test process
    // once left five rounds with under 100 ns between the loops' minima).
    const ROUNDS: usize = 25;
    const FAULTS: u64 = 200;
    fn unprotect(page: usize, _: FaultAccess) -> bool {
        protect(page, host_page_size(), Prot::ReadWrite).is_ok()
    }
    let ps = host_page_size();
    let scratch = reserve(ps)?;
    let page = scratch.addr();
    protect(page, ps, Prot::ReadWrite)?;
    let _registration = register_fault_range(page, ps, page, unprotect)?;
    let touch = || {
        // SAFETY: page is a live, writable (after the fault is handled) anonymous page of
        // this process, used by no one else.
        unsafe { std::ptr::write_volatile(page as *mut u8, 1) }
    };
    // The least time of each loop over the rounds, not the least difference: noise (TLB
    // shootdowns from other threads of the process, preemption charged to this thread)
    // only adds time, so each minimum tends to the loop's quiet cost, while the least
    // difference picks the round where noise hit the loop without faults hardest and
    // can come out as zero (a loaded CI machine did).
    let (mut with_faults, mut without) = (u64::MAX, u64::MAX);
    for _ in 0..ROUNDS {
        let t0 = thread_cpu_ns();
        for _ in 0..FAULTS {
            protect(page, ps, Prot::None)?;
            touch();
        }
        let t1 = thread_cpu_ns();
        for _ in 0..FAULTS {
            protect(page, ps, Prot::None)?;
            protect(page, ps, Prot::ReadWrite)?;
            touch();
        }
        let t2 = thread_cpu_ns();
        with_faults = with_faults.min(t1 - t0);
        without = without.min(t2 - t1);
    }
    FAULT_DELIVERED.with(|f| f.set(false));
    Ok(with_faults.saturating_sub(without) / FAULTS)
}

/// Wall-clock nanoseconds of `samples` protection-fault round trips on a scratch region of
/// `len` bytes, one sample each: a write to the region while it has no access, the
/// SIGSEGV delivered to the handler, the handler's `mprotect` to read-write, `sigreturn`
/// and the retried write. The `mprotect` that closes the region before each sample is not
/// timed. It is what a page fault of the runtime costs this host before any protocol
/// work, the yardstick `cashmere bench proto` prints its figures against.
pub fn fault_round_trips_ns(len: usize, samples: usize) -> io::Result<Vec<u64>> {
    // The handler's context is the region's length; the write is at its start.
    fn unprotect(len: usize, access: FaultAccess) -> bool {
        protect(access.addr & !(host_page_size() - 1), len, Prot::ReadWrite).is_ok()
    }
    let len = len.max(host_page_size()).next_multiple_of(host_page_size());
    let scratch = reserve(len)?;
    let start = scratch.addr();
    protect(start, len, Prot::ReadWrite)?;
    // Fill the page tables first: the runtime's views are populated too.
    // SAFETY: the region is this function's own, read-write, len bytes long.
    unsafe { std::ptr::write_bytes(start as *mut u8, 1, len) };
    let _registration = register_fault_range(start, len, len, unprotect)?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        protect(start, len, Prot::None)?;
        let t0 = monotonic_ns();
        // SAFETY: the region is live; the fault this write takes is handled by `unprotect`,
        // which opens it, and the write is retried.
        unsafe { std::ptr::write_volatile(start as *mut u8, 2) };
        out.push(monotonic_ns() - t0);
    }
    FAULT_DELIVERED.with(|f| f.set(false));
    Ok(out)
}

extern "C" fn fault_signal_handler(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uctx: *mut libc::c_void,
) {
    FAULT_DELIVERED.with(|f| f.set(true));
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // On x86-64 the page-fault error code is in the signal context; bit 1 means write.
    // SAFETY: uctx is the ucontext_t the kernel built for this signal.
    let err =
        unsafe { (*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    let access = FaultAccess {
        addr,
        write: err & 2 != 0,
    };
    for r in FAULT_RANGES.iter() {
        let end = r.end.load(Ordering::Acquire);
        if end == 0 || end == usize::MAX {
            continue;
        }
        let start = r.start.load(Ordering::Relaxed);
        if addr >= start && addr < end {
            let ctx = r.ctx.load(Ordering::Relaxed);
            // SAFETY: func was stored from a valid FaultFn in register_fault_range.
            let func: FaultFn =
                unsafe { std::mem::transmute::<usize, FaultFn>(r.func.load(Ordering::Relaxed)) };
            if func(ctx, access) {
                return;
            }
            break;
        }
    }
    chain_to_previous(sig, info, uctx);
}

fn chain_to_previous(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    let prev = if sig == libc::SIGSEGV {
        &raw const PREV_SEGV
    } else {
        &raw const PREV_BUS
    };
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
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
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
        let m = Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len: total,
        };
        protect(m.addr(), guard, Prot::None)?;
        let ss = libc::stack_t {
            ss_sp: (m.addr() + guard) as *mut libc::c_void,
            ss_flags: 0,
            ss_size: ALT_STACK_BYTES,
        };
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
            let ss = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
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

/// Sets the calling thread's timer slack (how late the kernel may end its sleeps, 50 us by
/// default) to `ns`: a thread that sleeps for a few microseconds between looks (the MPI
/// transport's progress thread) then wakes when it asked to.
#[cfg(feature = "mpi")]
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a number and changes only this thread's slack.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
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

// ---------------------------------------------------------------------------------------
// userfaultfd (cargo feature `userfaultfd`).
// ---------------------------------------------------------------------------------------

/// A heap view registered with userfaultfd for missing, minor and write-protect faults.
///
/// With `UFFD_FEATURE_SIGBUS` the kernel raises SIGBUS in the faulting thread instead of
/// queueing an event for a handler thread, so the fault reaches the same signal handler
/// as the mprotect backend's (see [`register_fault_range`]). On x86-64 the page-fault error
/// code in the signal context tells reads from writes for these faults too: verified on
/// Linux 6.18, a read of an absent page gives 0x4, a write to an absent page 0x6 and a
/// write to a write-protected present page 0x7 (see the tests below).
///
/// Page states map to page-table states: no PTE (a fault), a PTE installed write-protected
/// by `UFFDIO_CONTINUE` in `MODE_WP` (reads pass, writes fault), a writable PTE. Page
/// contents always come from the memfd's page cache, which the runtime fills through its
/// alias; a page the alias never touched is allocated (zero-filled) through the alias
/// before it is installed.
#[cfg(feature = "userfaultfd")]
#[derive(Debug)]
pub struct UffdView {
    uffd: userfaultfd::Uffd,
    view: usize,
    len: usize,
    alias: usize,
}

#[cfg(feature = "userfaultfd")]
mod uffd_abi {
    //! The parts of `include/uapi/linux/userfaultfd.h` the crate does not expose.
    pub const UFFD_API: u64 = 0xAA;
    pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
    pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
    pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
    /// Bit of `UFFDIO_CONTINUE` in the `ioctls` a registration returns.
    pub const UFFDIO_CONTINUE_BIT: u64 = 1 << 0x07;
    pub const UFFDIO_CONTINUE_MODE_DONTWAKE: u64 = 1 << 0;
    pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
    /// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
    pub const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
    /// `_IOWR(0xAA, 0x07, struct uffdio_continue)`.
    pub const UFFDIO_CONTINUE: libc::c_ulong = 0xC020_AA07;

    #[repr(C)]
    pub struct UffdioApi {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }

    #[repr(C)]
    pub struct UffdioRange {
        pub start: u64,
        pub len: u64,
    }

    #[repr(C)]
    pub struct UffdioContinue {
        pub range: UffdioRange,
        pub mode: u64,
        pub mapped: i64,
    }
}

#[cfg(feature = "userfaultfd")]
fn uffd_error(e: userfaultfd::Error) -> io::Error {
    match e {
        userfaultfd::Error::SystemError(errno) => io::Error::from_raw_os_error(errno as i32),
        e => io::Error::other(e.to_string()),
    }
}

/// Opens a userfaultfd and performs the API handshake with `features`.
#[cfg(feature = "userfaultfd")]
fn uffd_open(features: u64) -> io::Result<(OwnedFd, u64)> {
    use uffd_abi::*;
    // User-mode-only descriptors are allowed to every user whatever
    // vm.unprivileged_userfaultfd says. Kernel-mode accesses to the range still fail (with
    // EFAULT, as under mprotect): with UFFD_FEATURE_SIGBUS the kernel never resolves them.
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
    // SAFETY: the userfaultfd system call takes flags only and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::other(format!(
            "the kernel refused to create a userfaultfd ({e}); it needs CONFIG_USERFAULTFD, and container \
             seccomp profiles often block the system call; use the mprotect backend (DSM_BACKEND=mprotect)"
        )));
    }
    // SAFETY: fd was just returned by the system call and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: fd is a fresh userfaultfd and api is a valid uffdio_api for the duration.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fd, api.features))
}

#[cfg(feature = "userfaultfd")]
impl UffdView {
    /// Registers `view`, a read-write shared mapping of a memfd whose same contents the
    /// runtime maps at `alias`, for missing, minor and write-protect faults raised as
    /// SIGBUS. Zaps every page table entry of the view, so every page starts absent.
    pub fn register(view: &Mapping, alias: usize) -> io::Result<UffdView> {
        use uffd_abi::*;
        use userfaultfd::RegisterMode;
        let wanted = [
            (UFFD_FEATURE_SIGBUS, "SIGBUS delivery (Linux 4.14)"),
            (
                UFFD_FEATURE_MINOR_SHMEM,
                "minor faults on shared memory (Linux 5.14)",
            ),
            (
                UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
                "write-protection of shared memory (Linux 5.19, CONFIG_PTE_MARKER_UFFD_WP)",
            ),
        ];
        // A first descriptor learns what the kernel offers, so that a refusal names what is
        // missing; the handshake can be done once per descriptor.
        let (_, offered) = uffd_open(0)?;
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|(bit, _)| offered & bit == 0)
            .map(|(_, what)| *what)
            .collect();
        if !missing.is_empty() {
            return Err(io::Error::other(format!(
                "this kernel's userfaultfd lacks {}; use the mprotect backend (DSM_BACKEND=mprotect)",
                missing.join(" and ")
            )));
        }
        let (fd, _) = uffd_open(wanted.iter().map(|(bit, _)| bit).fold(0, |a, b| a | b))?;
        // SAFETY: fd is an open userfaultfd that the Uffd takes over (it closes it on drop).
        let uffd =
            unsafe { userfaultfd::Uffd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(fd)) };
        let mode = RegisterMode::MISSING | RegisterMode::MINOR | RegisterMode::WRITE_PROTECT;
        let ioctls = uffd
            .register_with_mode(view.as_ptr().cast(), view.len(), mode)
            .map_err(|e| {
                io::Error::other(format!(
                    "cannot register the heap view with userfaultfd: {}",
                    uffd_error(e)
                ))
            })?;
        let needed = UFFDIO_CONTINUE_BIT | userfaultfd::IoctlFlags::WRITE_PROTECT.bits();
        if ioctls.bits() & needed != needed {
            return Err(io::Error::other(format!(
                "userfaultfd on the heap view offers {ioctls:?}, without UFFDIO_CONTINUE or UFFDIO_WRITEPROTECT; \
                 use the mprotect backend (DSM_BACKEND=mprotect)"
            )));
        }
        let v = UffdView {
            uffd,
            view: view.addr(),
            len: view.len(),
            alias,
        };
        v.zap(0, v.len)?;
        Ok(v)
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset + len <= self.len,
            "range [{offset:#x}, {:#x}) outside the view of {:#x} bytes",
            offset + len,
            self.len
        );
    }

    /// Removes the page table entries of `[offset, offset + len)` of the view: the next
    /// access takes a minor fault. The contents stay in the page cache.
    pub fn zap(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: the range lies inside the view, which is a shared file mapping; dropping
        // its page table entries loses no data (the page cache keeps it) and the view is
        // only ever accessed through raw pointers whose faults are handled.
        if unsafe {
            libc::madvise(
                (self.view + offset) as *mut libc::c_void,
                len,
                libc::MADV_DONTNEED,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Maps the absent pages `[offset, offset + len)` of the view from the page cache,
    /// writable or write-protected (atomically: a write-protected page is never writable,
    /// not even for an instant). Fails with `ErrorKind::AlreadyExists` if a page of the
    /// range is already mapped.
    pub fn install(&self, offset: usize, len: usize, writable: bool) -> io::Result<()> {
        self.check(offset, len);
        let mut done = 0;
        let mut populated = false;
        while done < len {
            match self.continue_once(offset + done, len - done, writable) {
                Ok(mapped) => done += mapped,
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) && !populated => {
                    // A page the alias never touched is not in the page cache yet.
                    self.populate_alias(offset + done, len - done)?;
                    populated = true;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One `UFFDIO_CONTINUE`; returns how many bytes it mapped.
    fn continue_once(&self, offset: usize, len: usize, writable: bool) -> io::Result<usize> {
        use uffd_abi::*;
        let start = self.view + offset;
        if writable {
            let mapped = self
                .uffd
                .r#continue(start as *mut libc::c_void, len, false)
                .map_err(uffd_error)?;
            return Ok(mapped as usize);
        }
        // The crate has no MODE_WP for UFFDIO_CONTINUE (Linux 6.4).
        let mut arg = UffdioContinue {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: UFFDIO_CONTINUE_MODE_WP | UFFDIO_CONTINUE_MODE_DONTWAKE,
            mapped: 0,
        };
        // SAFETY: the range lies inside the registered view; arg is a valid
        // uffdio_continue for the duration of the call.
        let rc = unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_CONTINUE, &mut arg) };
        if rc == 0
            || (arg.mapped > 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN))
        {
            return Ok(arg.mapped.max(0) as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            return Err(io::Error::other(
                "UFFDIO_CONTINUE refused MODE_WP; the userfaultfd backend needs Linux 6.4 or later",
            ));
        }
        Err(e)
    }

    /// Allocates the pages of `[offset, offset + len)` in the page cache, zero-filled,
    /// without changing pages already there.
    fn populate_alias(&self, offset: usize, len: usize) -> io::Result<()> {
        // SAFETY: the alias maps the same file range as the view, read-write, for as long
        // as the view exists; populating only faults pages in and never changes contents.
        let rc = unsafe {
            libc::madvise(
                (self.alias + offset) as *mut libc::c_void,
                len,
                MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Write-protects the mapped pages of `[offset, offset + len)` (`on`), or makes them
    /// writable again.
    pub fn write_protect(&self, offset: usize, len: usize, on: bool) -> io::Result<()> {
        self.check(offset, len);
        let start = (self.view + offset) as *mut libc::c_void;
        if on {
            self.uffd.write_protect(start, len).map_err(uffd_error)
        } else {
            self.uffd
                .remove_write_protection(start, len, false)
                .map_err(uffd_error)
        }
    }
}

#[cfg(all(test, feature = "userfaultfd"))]
mod uffd_tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// What the test's fault function sees and how it answers.
    struct Probe {
        view: UffdView,
        base: usize,
        faults: AtomicU32,
        last_write: AtomicBool,
    }

    /// Opens the faulting page: write-protected on a read, writable on a write.
    fn on_fault(ctx: usize, access: FaultAccess) -> bool {
        // SAFETY: ctx is the address of the Probe the test keeps alive while registered.
        let probe = unsafe { &*(ctx as *const Probe) };
        probe.faults.fetch_add(1, Ordering::SeqCst);
        probe.last_write.store(access.write, Ordering::SeqCst);
        let page = host_page_size();
        let offset = (access.addr - probe.base) / page * page;
        let r = match probe.view.install(offset, page, access.write) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                probe.view.write_protect(offset, page, false)
            }
            r => r,
        };
        r.is_ok()
    }

    /// Missing, minor and write-protect faults arrive as SIGBUS in the faulting thread,
    /// with the error code telling reads from writes; contents come from the page cache.
    #[test]
    fn userfaultfd_faults_reach_the_handler_as_reads_and_writes() {
        let page = host_page_size();
        let fd = memfd_create("uffd-test", 4 * page).unwrap();
        let alias = map_shared(&fd, 0, 4 * page, Prot::ReadWrite).unwrap();
        let view = map_shared(&fd, 0, 4 * page, Prot::ReadWrite).unwrap();
        let probe = Box::new(Probe {
            view: UffdView::register(&view, alias.addr()).unwrap(),
            base: view.addr(),
            faults: AtomicU32::new(0),
            last_write: AtomicBool::new(false),
        });
        let _reg = register_fault_range(
            view.addr(),
            view.len(),
            &*probe as *const Probe as usize,
            on_fault,
        )
        .unwrap();
        let at = |i: usize| (view.addr() + i * page) as *mut u64;
        let faults = || probe.faults.load(Ordering::SeqCst);
        let last_write = || probe.last_write.load(Ordering::SeqCst);
        // SAFETY: every pointer accessed below lies in the view or the alias, which outlive
        // the block; faults on the view are resolved by on_fault.
        unsafe {
            // Page 0 was never touched: a missing fault, resolved read-only.
            assert_eq!(std::ptr::read_volatile(at(0)), 0);
            assert_eq!((faults(), last_write()), (1, false));
            std::ptr::write_volatile(at(0), 7); // write-protect fault
            assert_eq!((faults(), last_write()), (2, true));
            std::ptr::write_volatile(at(0), 8); // writable now: no fault
            assert_eq!(faults(), 2);
            assert_eq!(*(alias.addr() as *const u64), 8);
            // Zapped, the page takes a minor fault and keeps its contents.
            probe.view.zap(0, page).unwrap();
            *(alias.addr() as *mut u64) = 9;
            assert_eq!(std::ptr::read_volatile(at(0)), 9);
            assert_eq!((faults(), last_write()), (3, false));
            // A write to an absent page is a write fault, from any thread.
            let p1 = at(1) as usize;
            std::thread::spawn(move || std::ptr::write_volatile(p1 as *mut u64, 5))
                .join()
                .unwrap();
            assert_eq!((faults(), last_write()), (4, true));
            probe.view.write_protect(page, page, true).unwrap();
            assert_eq!(std::ptr::read_volatile(at(1)), 5);
            assert_eq!(faults(), 4, "a write-protected page stays readable");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn flushing_denormals_makes_a_subnormal_result_zero_and_is_undone() {
        let tiny = std::hint::black_box(f32::MIN_POSITIVE);
        let half = |x: f32| std::hint::black_box(x) / std::hint::black_box(2.0f32);
        assert!(half(tiny) > 0.0, "IEEE arithmetic gives a subnormal");
        let before = set_flush_denormals(true);
        assert!(!before);
        let flushed = half(tiny);
        assert!(set_flush_denormals(before));
        assert_eq!(flushed, 0.0);
        assert!(half(tiny) > 0.0, "the previous mode came back");
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_flush_guard_restores_the_mode_it_found_even_on_unwinding() {
        let tiny = std::hint::black_box(f32::MIN_POSITIVE);
        let half = |x: f32| std::hint::black_box(x) / std::hint::black_box(2.0f32);
        {
            let _g = flush_denormals(true);
            assert_eq!(half(tiny), 0.0);
            {
                let _inner = flush_denormals(false);
                assert!(half(tiny) > 0.0);
            }
            assert_eq!(half(tiny), 0.0, "the inner guard gave back flushing");
        }
        assert!(half(tiny) > 0.0, "the outer guard gave back IEEE arithmetic");
        let unwound = std::panic::catch_unwind(|| {
            let _g = flush_denormals(true);
            panic!("a sequential run that panics");
        });
        assert!(unwound.is_err());
        assert!(half(tiny) > 0.0, "unwinding restored the mode");
    }

    #[test]
    fn fault_delivery_is_measured_and_leaves_no_mark() {
        let ns = fault_delivery_ns();
        // A fault's round trip through the kernel costs at least a few hundred ns and far
        // less than a millisecond on any host this runs on.
        assert!((100..1_000_000).contains(&ns), "{ns} ns");
        assert!(!take_fault_delivered(), "the calibration's faults were left marked");
        assert_eq!(fault_delivery_ns(), ns, "measured once");
    }
}
