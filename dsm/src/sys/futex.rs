//! Futexes on shared memory: wait and wake on a 32-bit word, across processes when the
//! word lies in a shared mapping.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

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
