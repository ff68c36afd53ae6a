//! The parallel version on the DSM: the original's `Worker` on every processor, over the
//! shared queue behind TourLock and the best tour behind MinLock (crate documentation,
//! "Synchronization of the parallel version").

use crate::bnb::{
    self, GlobalOffsets, Incumbent, Layout, Queue, WorkQueue, WorkStats, MIN_TOUR, MIN_TOUR_LEN,
    RECORD_LEN,
};
use crate::input::Instance;
use crate::Config;
use app_common::{AppError, AppResult};
use dsm::{Lock, Proc, Shared};

/// The shared data: one `GlobalMemory` record, as the original allocates it, whose
/// fields are the arrays of [`Layout`] at the offsets of [`Layout::global`].
#[derive(Clone)]
struct Arrays {
    global: Shared<i32>,
    offsets: GlobalOffsets,
    n: usize,
}

impl Arrays {
    /// The field at `range` of the record, as a slice.
    ///
    /// # Safety
    /// As [`Shared::as_mut_slice`], for the words of `range`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn field(&self, range: std::ops::Range<usize>) -> &mut [i32] {
        assert!(range.start <= range.end && range.end <= self.global.len());
        // SAFETY: the range lies inside the allocation (checked); the caller upholds
        // data-race freedom for its words.
        unsafe {
            std::slice::from_raw_parts_mut(self.global.as_ptr().add(range.start), range.len())
        }
    }

    /// The distance matrix, `n * n` words at the start of its field.
    ///
    /// # Safety
    /// Nobody writes it concurrently (processor 0 writes it before the first barrier only).
    #[allow(clippy::mut_from_ref)]
    unsafe fn weights(&self) -> &mut [i32] {
        let start = self.offsets.weights.start;
        // SAFETY: forwarded to the caller.
        unsafe { self.field(start..start + self.n * self.n) }
    }

    /// `MinTourLen` and `MinTour`.
    ///
    /// # Safety
    /// The caller holds MinLock (or runs before the first barrier as processor 0).
    #[allow(clippy::mut_from_ref)]
    unsafe fn best(&self) -> &mut [i32] {
        // SAFETY: forwarded to the caller.
        unsafe { self.field(self.offsets.best.clone()) }
    }

    /// `MinTourLen`, read without a lock (a volatile load).
    fn min_tour_len(&self) -> i32 {
        self.global.get(self.offsets.best.start + MIN_TOUR_LEN)
    }

    /// Views of everything TourLock guards.
    ///
    /// # Safety
    /// The caller holds TourLock (or runs before the first barrier as processor 0) and drops
    /// the views before releasing it.
    unsafe fn queue(&self) -> Queue<'_> {
        // SAFETY: by the caller's contract no other processor touches these fields while
        // the views live; the fields are disjoint.
        unsafe {
            Queue {
                queue_ctl: self.field(self.offsets.queue_ctl.clone()),
                prioq: self.field(self.offsets.prioq.clone()),
                tour_stack: self.field(self.offsets.tour_stack.clone()),
                tours: self.field(self.offsets.tours.clone()),
            }
        }
    }
}

/// The shared queue: each call is one critical section of TourLock, as the original's
/// `get_tour`.
struct SharedQueue<'a> {
    p: &'a Proc,
    arrays: Arrays,
    tour_lock: Lock,
    weights: &'a [i32],
    n: usize,
    nodes_from_end: usize,
}

impl WorkQueue for SharedQueue<'_> {
    fn get_tour(
        &mut self,
        finished: Option<usize>,
        best_len: i32,
        stats: &mut WorkStats,
    ) -> Option<(usize, [i32; RECORD_LEN])> {
        self.tour_lock.acquire(self.p);
        // The original reads MinTourLen inside the critical section: after this acquire it
        // is at least as fresh as the caller's value. Still a racy read (MinLock guards the
        // writes); a stale value only stops the queue later, and any value read is the
        // length of a real tour, so the queue never stops before the optimum is queued.
        let best_len = best_len.min(self.arrays.min_tour_len());
        let got = {
            // SAFETY: TourLock is held, and the views are dropped at the end of this block.
            let mut queue = unsafe { self.arrays.queue() };
            queue
                .get_tour(
                    self.weights,
                    self.n,
                    self.nodes_from_end,
                    finished,
                    best_len,
                    stats,
                )
                .map(|index| {
                    let mut record = [0; RECORD_LEN];
                    record.copy_from_slice(&queue.tours[index * RECORD_LEN..][..RECORD_LEN]);
                    (index, record)
                })
        };
        self.tour_lock.release(self.p);
        got
    }
}

/// The best tour in shared memory: read without a lock, written under MinLock.
struct SharedBest<'a> {
    p: &'a Proc,
    arrays: Arrays,
    min_lock: Lock,
}

impl Incumbent for SharedBest<'_> {
    /// The one deliberate data race of the original: a volatile load of `MinTourLen`,
    /// re-done at every step of the depth-first search. The DSM makes other processors'
    /// writes visible only at this processor's acquires, so the value may be stale until
    /// its next lock acquire; a stale (larger) bound only prunes less.
    fn best_len(&self) -> i32 {
        self.arrays.min_tour_len()
    }

    /// The original's `set_best`: under MinLock, checks again and records the tour.
    fn offer(&mut self, len: i32, path: &[i32]) {
        self.min_lock.acquire(self.p);
        {
            // SAFETY: MinLock is held: every writer of `best` holds it; the racy readers
            // read only the aligned word MIN_TOUR_LEN. The view is dropped before release.
            let best = unsafe { self.arrays.best() };
            bnb::set_best(best, len, path);
        }
        self.min_lock.release(self.p);
    }
}

/// Runs the parallel version of `config` on `inst`.
pub fn run(
    config: &Config,
    inst: &Instance,
    dsm_config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let layout = Layout::new(inst.n, config.max_tours).map_err(AppError::Other)?;
    let n = inst.n;
    let report = dsm::Cluster::new(dsm_config.clone()).run(|s| {
        // One record holding everything, allocated (and below initialized) by the
        // master, as the original's `GlobalMemory` (bnb, "Shared layout").
        let offsets = layout.global();
        let arrays = Arrays {
            global: s.alloc_named(offsets.len, "tsp GlobalMemory"),
            offsets,
            n,
        };
        let tour_lock = s.lock();
        let min_lock = s.lock();
        let bar = s.barrier();
        move |p: &Proc| -> Option<AppResult> {
            if p.id() == 0 {
                // The master reads the input and initializes everything, as the original.
                // SAFETY: no other processor touches shared data before the barrier.
                unsafe {
                    arrays.weights().copy_from_slice(&inst.weights);
                    bnb::init_best(arrays.best());
                    arrays.queue().init(arrays.weights(), n);
                }
            }
            // Homes go to the first touchers from here (section 2.3.1).
            bar.end_initialization(p);
            // Timed: the search, not reading and setting up the input.
            p.start_timing();
            // SAFETY: nobody writes `weights` after the barrier.
            let weights: &[i32] = unsafe { arrays.weights() };
            let exits = bnb::exit_bounds(weights, n, config.dfs_bound);
            let mut queue = SharedQueue {
                p,
                arrays: arrays.clone(),
                tour_lock,
                weights,
                n,
                nodes_from_end: config.nodes_from_end,
            };
            let mut best = SharedBest {
                p,
                arrays: arrays.clone(),
                min_lock,
            };
            bnb::worker(weights, n, &exits, &mut queue, &mut best);
            // Every processor has finished its last subtree and offered its tours.
            bar.wait(p);
            p.stop_timing();
            (p.id() == 0).then(|| {
                let at = arrays.offsets.best.start;
                let best_len = arrays.global.get(at + MIN_TOUR_LEN);
                let tour: Vec<i32> = (0..n)
                    .map(|k| arrays.global.get(at + MIN_TOUR + k))
                    .collect();
                crate::summary(config, n, best_len, &tour)
            })
        }
    })?;
    app_common::split_report(report)
}
