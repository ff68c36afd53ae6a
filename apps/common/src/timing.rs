//! The timed region of a sequential run: the sequential counterpart of
//! `dsm::Proc::start_timing` and `dsm::Proc::stop_timing`.
//!
//! SPLASH-2's programs time their computation, not the generation of their input or the
//! check of their result, and the speedup compares the same region of the sequential and
//! the parallel run. An app's sequential version calls [`start`] where its parallel
//! version's processors call `start_timing` (after the input is complete) and [`stop`]
//! where they call `stop_timing`; [`measure`] runs a sequential version and returns the
//! time of its region (of the whole call if it marked none).

use std::cell::Cell;

/// A moment in both of a sequential run's clocks.
#[derive(Clone, Copy, Debug)]
struct Stamp {
    wall_ns: u64,
    cpu_ns: u64,
    work: dsm::work::Tally,
}

impl Stamp {
    fn now() -> Stamp {
        Stamp {
            wall_ns: dsm::host::monotonic_ns(),
            cpu_ns: dsm::host::thread_cpu_ns(),
            work: dsm::work::tally(),
        }
    }
}

/// The marks of the run [`measure`] is timing on this thread (`None` outside [`measure`],
/// where [`start`] and [`stop`] do nothing: a test may call a sequential version directly).
type Marks = Option<(Option<Stamp>, Option<Stamp>)>;

thread_local! {
    static MARKS: Cell<Marks> = const { Cell::new(None) };
}

/// Starts the sequential run's timed region (on the calling thread).
pub fn start() {
    dsm::work::region(true);
    let s = Stamp::now();
    MARKS.with(|m| {
        if let Some((begin, _)) = m.get() {
            assert!(
                begin.is_none(),
                "the sequential run started its timed region twice"
            );
            m.set(Some((Some(s), None)));
        }
    });
}

/// Ends the sequential run's timed region.
pub fn stop() {
    let s = Stamp::now();
    dsm::work::region(false);
    MARKS.with(|m| {
        if let Some((begin, end)) = m.get() {
            assert!(
                begin.is_some(),
                "the sequential run stopped its timed region before starting it"
            );
            assert!(
                end.is_none(),
                "the sequential run stopped its timed region twice"
            );
            m.set(Some((begin, Some(s))));
        }
    });
}

/// The time a sequential run took, in both clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measured {
    /// Wall-clock time.
    pub wall_ns: u64,
    /// CPU time of the calling thread.
    pub cpu_ns: u64,
    /// Whether this is the run's timed region (else the whole call).
    pub region: bool,
    /// The units of work counted in it (`dsm::work`), by kind.
    pub work: dsm::work::Tally,
}

/// Runs `f` (a sequential version, on this thread) and returns its result with the time
/// of its timed region, or of the whole call if it marked none. A region that was started
/// and not stopped is an error in the app, and panics with the reason.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Measured) {
    let outer = MARKS.with(|m| m.replace(Some((None, None))));
    assert!(outer.is_none(), "timing::measure called inside itself");
    // Ends the measurement also if `f` panics.
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            MARKS.with(|m| m.set(None));
        }
    }
    let _done = Done;
    let t0 = Stamp::now();
    let r = f();
    let t1 = Stamp::now();
    let marks = MARKS.with(|m| m.replace(None)).unwrap_or_default();
    let (a, b, region) = match marks {
        (None, None) => (t0, t1, false),
        (Some(a), Some(b)) => (a, b, true),
        _ => panic!("the sequential run started its timed region and never stopped it"),
    };
    let measured = Measured {
        wall_ns: b.wall_ns - a.wall_ns,
        cpu_ns: b.cpu_ns - a.cpu_ns,
        region,
        work: dsm::work::between(&a.work, &b.work),
    };
    (r, measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ns: u64) {
        let t = dsm::host::thread_cpu_ns();
        while dsm::host::thread_cpu_ns() - t < ns {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn the_region_leaves_out_what_lies_outside_it() {
        let (r, whole) = measure(|| {
            spin(20_000_000);
            7
        });
        assert_eq!(r, 7);
        assert!(!whole.region && whole.cpu_ns >= 20_000_000, "{whole:?}");
        let ((), part) = measure(|| {
            spin(20_000_000);
            start();
            spin(5_000_000);
            stop();
            spin(20_000_000);
        });
        assert!(part.region, "{part:?}");
        assert!(
            part.cpu_ns >= 5_000_000 && part.cpu_ns < 20_000_000,
            "{part:?}"
        );
    }

    #[test]
    fn marks_outside_a_measurement_do_nothing() {
        start();
        start();
        stop();
        let ((), m) = measure(|| spin(1_000_000));
        assert!(!m.region, "{m:?}");
    }

    #[test]
    #[should_panic(expected = "never stopped")]
    fn a_region_never_stopped_is_an_error() {
        let _ = measure(start);
    }
}
