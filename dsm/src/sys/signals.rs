//! Fault signals: the SIGSEGV and SIGBUS handler (`SA_SIGINFO | SA_ONSTACK`), the heap
//! ranges it routes faults to, per-thread alternate signal stacks, the measured cost of
//! a fault's delivery and round trip, the non-unwinding `fatal`, and SIGPIPE's
//! disposition.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{host_page_size, monotonic_ns, protect, reserve, thread_cpu_ns, Mapping, Prot};

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
    fault_round_trips_within_ns(len, len, samples)
}

/// [`fault_round_trips_ns`] on a page of `len` bytes in the middle of a read-write mapping
/// of `within` bytes (at least `len`), as a runtime's heap page is: its `mprotect`s split
/// the mapping around the page and merge it again, where a page that is a mapping of its
/// own changes only its protection.
pub fn fault_round_trips_within_ns(len: usize, within: usize, samples: usize) -> io::Result<Vec<u64>> {
    // The handler's context is the page's length; the write is at its start.
    fn unprotect(len: usize, access: FaultAccess) -> bool {
        protect(access.addr & !(host_page_size() - 1), len, Prot::ReadWrite).is_ok()
    }
    let len = len.max(host_page_size()).next_multiple_of(host_page_size());
    let within = within.max(len).next_multiple_of(host_page_size());
    let scratch = reserve(within)?;
    let base = scratch.addr();
    protect(base, within, Prot::ReadWrite)?;
    // Fill the page tables first: the runtime's views are populated too.
    // SAFETY: the region is this function's own, read-write, `within` bytes long.
    unsafe { std::ptr::write_bytes(base as *mut u8, 1, within) };
    let start = base + ((within - len) / 2).next_multiple_of(host_page_size()).min(within - len);
    let _registration = register_fault_range(start, len, len, unprotect)?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        protect(start, len, Prot::None)?;
        let t0 = monotonic_ns();
        // SAFETY: the page is live; the fault this write takes is handled by `unprotect`,
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

/// Writes a message and a newline to standard error in one call, without allocating, then
/// aborts: for the fault handler, which must never unwind.
pub fn fatal(msg: &str) -> ! {
    let parts = [
        libc::iovec { iov_base: msg.as_ptr().cast_mut().cast(), iov_len: msg.len() },
        libc::iovec { iov_base: b"\n".as_ptr().cast_mut().cast(), iov_len: 1 },
    ];
    // SAFETY: both iovecs point into live buffers of their stated lengths, which writev
    // only reads; writev(2) and abort(3) are async-signal-safe.
    unsafe {
        libc::writev(2, parts.as_ptr(), 2);
        libc::abort();
    }
}

/// Writes `cashmere: {what}` and a newline to standard error in one write.
///
/// Rust's standard error is unbuffered, so `eprintln!` writes a formatted line piece by
/// piece; under `mpirun` every rank's standard error and mpirun's own messages share one
/// stream, and a piece of another message could land inside the line. One write of a line
/// shorter than a pipe's atomic size (4 KiB) arrives whole.
pub fn report(what: impl std::fmt::Display) {
    let line = format!("cashmere: {what}\n");
    // Nothing is left to tell the user that standard error failed.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each sample is one fault handled (the write retried after the handler opened the
    /// page), on a page of its own and on one inside a larger mapping alike.
    #[test]
    fn fault_round_trips_are_measured_alone_and_inside_a_mapping() {
        for within in [0, 8192, 1 << 20] {
            let ns = fault_round_trips_within_ns(8192, within, 50).expect("measured");
            assert_eq!(ns.len(), 50);
            // Every sample is a real round trip (no fault is that cheap); the median is
            // far below a millisecond's order on any host, where one sample may be hit by
            // a preemption on a loaded one.
            assert!(ns.iter().all(|&t| t >= 100), "{within}: {ns:?}");
            let mut sorted = ns.clone();
            sorted.sort_unstable();
            assert!(sorted[ns.len() / 2] < 100_000_000, "{within}: {ns:?}");
            assert!(!take_fault_delivered(), "the faults were left marked");
        }
    }

    #[test]
    fn fault_delivery_is_measured_and_leaves_no_mark() {
        let ns = fault_delivery_ns();
        // A fault's round trip through the kernel costs at least a few hundred ns and far
        // less than a millisecond on any host this runs on.
        assert!((100..1_000_000).contains(&ns), "{ns} ns");
        assert!(
            !take_fault_delivered(),
            "the calibration's faults were left marked"
        );
        assert_eq!(fault_delivery_ns(), ns, "measured once");
    }
}
