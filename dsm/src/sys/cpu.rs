//! The CPU: the floating-point mode (flushing subnormals), CPU placement and scheduling
//! policy, timer slack, and the monotonic and thread CPU clocks.

use std::io;

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

/// The calling thread's kernel thread id.
pub fn thread_id() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

/// The kernel's CPU set holding `cpus`.
fn cpu_set(cpus: &[usize]) -> Result<nix::sched::CpuSet, String> {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    }
    Ok(set)
}

/// Lets thread `tid` (of this process or another of this user) run only on `cpus`.
pub fn bind_thread(tid: u32, cpus: &[usize]) -> Result<(), String> {
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid as i32), &cpu_set(cpus)?)
        .map_err(|e| format!("cannot bind thread {tid} to CPUs {cpus:?}: {e}"))
}

/// Binds the calling thread to `cpu` (threads it starts later inherit the binding).
pub fn pin_thread(cpu: usize) -> Result<(), String> {
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpu_set(&[cpu])?)
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

/// Sets the calling thread's timer slack (how late the kernel may end its sleeps, 50 us by
/// default) to `ns`: a thread that sleeps for a few microseconds between looks (the MPI
/// transport's progress thread) then wakes when it asked to.
#[cfg(feature = "mpi")]
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a number and changes only this thread's slack.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
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
        assert!(
            half(tiny) > 0.0,
            "the outer guard gave back IEEE arithmetic"
        );
        let unwound = std::panic::catch_unwind(|| {
            let _g = flush_denormals(true);
            panic!("a sequential run that panics");
        });
        assert!(unwound.is_err());
        assert!(half(tiny) > 0.0, "unwinding restored the mode");
    }
}
