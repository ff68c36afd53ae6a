//! Counted computation: how a program tells the modeled clock how much it computed.
//!
//! The modeled clock needs to know what each processor's computation between two runtime
//! entries would have cost on the platform. Timing it on this host ([`Compute::Measured`],
//! the fallback) pays this host's noise, cold caches and fault-handling leftovers at every
//! synchronization. The direct-execution simulators the Cashmere paper's era used
//! (Tango-lite, Proteus) instead *counted* the work, instructions or basic blocks, and
//! charged it at the target's rate. This module is that counter.
//!
//! A program counts its work in units of its own choosing that follow its instruction
//! count (a grid point updated, a pair of molecules interacting, a tour node expanded),
//! in up to [`MAX_KINDS`] kinds, by calling [`count`] (or [`crate::Proc::count_work`]) as
//! finely as the loops that touch shared memory (a row, a molecule, a body), after the
//! work it counts. The same calls in the program's sequential version (outside any
//! cluster) only tally, so the sequential run says how many units the whole problem takes.
//!
//! Under the modeled clock with [`Compute::Counted`], each call adds `units x ns_per_unit
//! [kind]` to the processor's virtual clock as User time, at once, so a fault or a
//! synchronization that follows happens at the virtual time it would on the platform; the
//! host's CPU time is then not charged at all. The charge is integer arithmetic in
//! femtoseconds with the remainder carried per thread, so the same counts give the same
//! nanoseconds on any host and under any load. Under the wall clock, or with
//! [`Compute::Measured`], a call only tallies; under the wall clock on MPI it is also the
//! processor's *poll point*, where now and then it looks for its node's messages and
//! handles them, as Cashmere's processors poll on loop back-edges (`crate::wait`, "Polling
//! while computing").
//!
//! A processor's tally over its timed region (or its whole run) is in
//! [`crate::ProcReport::work`]; [`tally`] and [`reset`] give a sequential program's.
//!
//! [`Compute::Counted`]: crate::Compute::Counted
//! [`Compute::Measured`]: crate::Compute::Measured

use std::cell::Cell;

/// The most kinds of unit one program counts.
pub const MAX_KINDS: usize = 8;

/// The most a unit may cost on the platform, ns (one second): far above any loop body.
pub const MAX_NS_PER_UNIT: f64 = 1e9;

/// Units counted by one thread, per kind.
pub type Tally = [u64; MAX_KINDS];

thread_local! {
    static TALLY: Cell<Tally> = const { Cell::new([0; MAX_KINDS]) };
    /// While [`calibrate`] runs on this thread: the wall time of the last count (`None`
    /// while paused), and the time spent before each kind's counts.
    static CALIBRATION: Cell<Option<(Option<u64>, Tally)>> = const { Cell::new(None) };
}

/// Counts `units` units of work of kind `kind` (below [`MAX_KINDS`]) done by the calling
/// thread since its previous call: under the modeled clock with counted computation it
/// charges them to the calling processor's clock; otherwise it only adds them to the
/// thread's tally. Call it after the work it counts.
///
/// Panics if `kind` is [`MAX_KINDS`] or more, or (under counted computation) if the run
/// gave no cost for `kind`.
#[inline]
pub fn count(kind: usize, units: u64) {
    assert!(
        kind < MAX_KINDS,
        "work of kind {kind} counted; kinds are 0 to {}",
        MAX_KINDS - 1
    );
    TALLY.with(|t| {
        let mut v = t.get();
        v[kind] = v[kind].wrapping_add(units);
        t.set(v);
    });
    if let Some((Some(last), mut spent)) = CALIBRATION.with(|c| c.get()) {
        let now = crate::sys::monotonic_ns();
        spent[kind] += now.saturating_sub(last);
        CALIBRATION.with(|c| c.set(Some((Some(now), spent))));
    }
    crate::sched::charge_work(kind, units);
    crate::wait::poll_point();
}

/// Runs `f` on this thread and returns, with its result, the host time spent before the
/// counts of each kind: the time from one [`count`] call (or the start) to the next goes
/// to the next call's kind. With the units counted, it gives each kind's host cost per
/// unit (`cashmere calibrate`). Wall time, so run it on a quiet machine. A timed region
/// inside `f` ([`region`]) limits it to the region.
pub fn calibrate<R>(f: impl FnOnce() -> R) -> (R, Tally) {
    let now = crate::sys::monotonic_ns();
    let outer = CALIBRATION.with(|c| c.replace(Some((Some(now), [0; MAX_KINDS]))));
    assert!(outer.is_none(), "work::calibrate called inside itself");
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            CALIBRATION.with(|c| c.set(None));
        }
    }
    let done = Done;
    let r = f();
    let spent = CALIBRATION.with(|c| c.get()).map_or([0; MAX_KINDS], |(_, s)| s);
    drop(done);
    (r, spent)
}

/// Under [`calibrate`], limits the attribution to a timed region: `true` at its start
/// (what was attributed before is dropped), `false` at its end (nothing after it is).
/// Outside [`calibrate`] it does nothing. A sequential program's timed region calls it.
pub fn region(start: bool) {
    CALIBRATION.with(|c| {
        if c.get().is_some() {
            let last = start.then(crate::sys::monotonic_ns);
            let spent = if start { [0; MAX_KINDS] } else { c.get().map_or([0; MAX_KINDS], |(_, s)| s) };
            c.set(Some((last, spent)));
        }
    });
}

/// The calling thread's units so far, per kind.
pub fn tally() -> Tally {
    TALLY.with(|t| t.get())
}

/// Sets the calling thread's tally back to zero (a sequential run's start).
pub fn reset() {
    TALLY.with(|t| t.set([0; MAX_KINDS]));
}

/// `b - a`, kind by kind: the units counted between two tallies of one thread.
pub fn between(a: &Tally, b: &Tally) -> Tally {
    std::array::from_fn(|k| b[k].wrapping_sub(a[k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_tallies_its_own_units_by_kind() {
        reset();
        count(0, 5);
        count(2, 7);
        count(0, 1);
        let a = tally();
        assert_eq!(&a[..3], &[6, 0, 7]);
        std::thread::spawn(|| {
            count(0, 100);
            assert_eq!(tally()[0], 100);
        })
        .join()
        .unwrap();
        assert_eq!(tally(), a, "another thread's units are its own");
        count(1, 3);
        assert_eq!(&between(&a, &tally())[..3], &[0, 3, 0]);
    }

    #[test]
    #[should_panic(expected = "kinds are 0 to 7")]
    fn a_kind_out_of_range_is_refused() {
        count(MAX_KINDS, 1);
    }
}
