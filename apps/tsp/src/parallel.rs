//! The parallel version on the DSM: the original's `Worker` on every processor, over the
//! shared queue behind TourLock and the best tour behind MinLock (crate documentation,
//! "Synchronization of the parallel version").

use crate::bnb::{
    self, Incumbent, Layout, Queue, WorkQueue, WorkStats, MIN_TOUR, MIN_TOUR_LEN, RECORD_LEN,
};
use crate::input::Instance;
use crate::Config;
use app_common::{AppError, AppResult};
use dsm::{Lock, Proc, Shared};

/// The shared arrays of [`Layout`], as allocated on the DSM heap.
#[derive(Clone, Copy)]
struct Arrays {
    weights: Shared<i32>,
    queue_ctl: Shared<i32>,
    prioq: Shared<i32>,
    tour_stack: Shared<i32>,
    tours: Shared<i32>,
    best: Shared<i32>,
}

impl Arrays {
    /// Views of everything TourLock guards.
    ///
    /// # Safety
    /// The caller holds TourLock (or runs before the first barrier as processor 0) and drops
    /// the views before releasing it.
    unsafe fn queue(&self) -> Queue<'_> {
        // SAFETY: by the caller's contract no other processor touches these arrays while the
        // views live.
        unsafe {
            Queue {
                queue_ctl: self.queue_ctl.as_mut_slice(),
                prioq: self.prioq.as_mut_slice(),
                tour_stack: self.tour_stack.as_mut_slice(),
                tours: self.tours.as_mut_slice(),
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
        let best_len = best_len.min(self.arrays.best.get(MIN_TOUR_LEN));
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
    best: Shared<i32>,
    min_lock: Lock,
}

impl Incumbent for SharedBest<'_> {
    /// The one deliberate data race of the original: a volatile load of `MinTourLen`,
    /// re-done at every step of the depth-first search. The DSM makes other processors'
    /// writes visible only at this processor's acquires, so the value may be stale until
    /// its next lock acquire; a stale (larger) bound only prunes less.
    fn best_len(&self) -> i32 {
        self.best.get(MIN_TOUR_LEN)
    }

    /// The original's `set_best`: under MinLock, checks again and records the tour.
    fn offer(&mut self, len: i32, path: &[i32]) {
        self.min_lock.acquire(self.p);
        {
            // SAFETY: MinLock is held: every writer of `best` holds it; the racy readers
            // read only the aligned word MIN_TOUR_LEN. The view is dropped before release.
            let best = unsafe { self.best.as_mut_slice() };
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
        // Each array starts on its own page, so `best`, read at every search step, shares
        // no page with the queue that every get_tour writes.
        let arrays = Arrays {
            weights: s.alloc_named(layout.weights_len(), "tsp weights"),
            queue_ctl: s.alloc_named(layout.queue_ctl_len(), "tsp queue_ctl"),
            prioq: s.alloc_named(layout.prioq_len(), "tsp prioq"),
            tour_stack: s.alloc_named(layout.tour_stack_len(), "tsp tour_stack"),
            tours: s.alloc_named(layout.tours_len(), "tsp tours"),
            best: s.alloc_named(layout.best_len(), "tsp best"),
        };
        let tour_lock = s.lock();
        let min_lock = s.lock();
        let bar = s.barrier();
        move |p: &Proc| -> Option<AppResult> {
            if p.id() == 0 {
                // The master reads the input and initializes everything, as the original.
                // SAFETY: no other processor touches shared data before the barrier.
                unsafe {
                    arrays.weights.as_mut_slice().copy_from_slice(&inst.weights);
                    bnb::init_best(arrays.best.as_mut_slice());
                    arrays.queue().init(arrays.weights.as_slice(), n);
                }
            }
            bar.wait(p);
            // Timed: the search, not reading and setting up the input.
            p.start_timing();
            // SAFETY: nobody writes `weights` after the barrier.
            let weights = unsafe { arrays.weights.as_slice() };
            let exits = bnb::exit_bounds(weights, n, config.dfs_bound);
            let mut queue = SharedQueue {
                p,
                arrays,
                tour_lock,
                weights,
                n,
                nodes_from_end: config.nodes_from_end,
            };
            let mut best = SharedBest {
                p,
                best: arrays.best,
                min_lock,
            };
            bnb::worker(weights, n, &exits, &mut queue, &mut best);
            // Every processor has finished its last subtree and offered its tours.
            bar.wait(p);
            p.stop_timing();
            (p.id() == 0).then(|| {
                let best_len = arrays.best.get(MIN_TOUR_LEN);
                let tour: Vec<i32> = (0..n).map(|k| arrays.best.get(MIN_TOUR + k)).collect();
                crate::summary(config, n, best_len, &tour)
            })
        }
    })?;
    app_common::split_report(report)
}
