//! Branch and bound over a shared priority queue of partial tours, as TreadMarks TSP
//! (`tsp.c`, `pq.c`, `tsp.h` of the TreadMarks distribution, Rice University).
//!
//! # Shared layout
//!
//! The original keeps everything shared in one `GlobalMemory` struct that the master
//! allocates with one `Tmk_malloc` and initializes (`tsp.h` and `tsp.c` of the TreadMarks
//! program; read here in the JIAJIA port of the same program, repository
//! `Youpen-y/jiajia`, `apps/tsp/src/tsp.h` and `tsp.c`, whose `GlobalMemory` has the
//! TreadMarks fields in the TreadMarks order). This program allocates one shared `i32`
//! record the same way, processor 0 initializes all of it, and the arrays below are its
//! fields, in the original's order, at the word offsets of [`Layout::global`] (every field
//! of the original is an `int`):
//!
//! | field        | words                    | contents                                      | guarded by |
//! |--------------|--------------------------|-----------------------------------------------|------------|
//! | `weights`    | `32 * 32`                | distance matrix, row `from`, column `to` (here the `n * n` matrix at the field's start; the original indexes it `[32][32]`) | read-only |
//! | `queue_ctl`  | [`QUEUE_CTL_LEN`]        | `TourStackTop`, `Done`, `PrioQLast`           | TourLock   |
//! | `best`       | [`BEST_LEN`]             | `MinTourLen`, then `MinTour` (32 cities)      | MinLock for writes; read without it |
//! | (sync)       | [`SYNC_WORDS`]           | the original's `TourLock`, `MinLock`, `barrier` numbers; unused here | |
//! | `prioq`      | `2 * (max_tours + 1)`    | binary min-heap, slots `1..=PrioQLast`, each slot the pair (record index, priority = lower bound); the original has `max_tours` slots, this heap one more so that every record fits | TourLock |
//! | `tour_stack` | `max_tours`              | indices of free tour records                  | TourLock   |
//! | `tours`      | `RECORD_LEN * max_tours` | the pool of tour records, see below           | TourLock   |
//!
//! So, as in the original, the first 8 KB page holds the matrix, the queue's control
//! words, `MinTourLen` (which every step of every depth-first search reads) and the first
//! slots of the heap: every `get_tour` writes that page, and a processor that acquires a
//! lock after another node's `get_tour` sees it invalidated. (Before, each array had
//! pages of its own, `best` alone on one.)
//!
//! Measured at the paper's input on 8 x 4 under the modeled clock (measured computation),
//! page transfers / invalidations / diffs: CSM-DMS, separate arrays 2.07K-2.12K /
//! 2.00K-2.04K / 1.76K-1.78K (two runs), one record 2.08K-2.11K / 2.01K-2.06K /
//! 1.41K-1.42K, Table 4 12.6K / 16.2K / 8.0K; CSM-MS-Mg (with migrations) arrays 3.56K /
//! 2.49K / 0.007K / 1.42K, record 2.96K / 2.24K / 0.022K / 1.08K, Table 4 14.1K / 18.3K /
//! 0.1K / 5.0K. The layout changes little: what is far from the paper is the number of
//! queue operations (697 lock acquires in the whole CSM-DMS run), since this program's
//! search of `tspfile17` is short (crate doc, "Sizes"; its bound is not the original's,
//! "Deviations" below).
//!
//! A tour record has the fields of the original `TourElement` in its order:
//! `prefix[32]` (the path, city indices), `conn` (visited cities as bits), `last` (index of
//! the last city in `prefix`), `prefix_weight` (length of the path), `lower_bound` (bound
//! on every tour completing the path) and `rest_bound` (the original's `mst_weight`: the
//! bound's part for the cities not yet on the path). A record is 37 words, 148 bytes, as in
//! the original, so the pool shares pages the way the original's does.
//!
//! # Capacity of the pool
//!
//! `max_tours` records are allocated once (the DSM heap has a fixed size). The default is
//! the original's `MAX_NUM_TOURS` of 5000: 740 KB of records plus 60 KB of heap and free
//! stack, which with the matrix is the "1 Mbyte" of shared data the Cashmere paper lists
//! for TSP (Table 3). A split needs one free record per city not yet on the path. The
//! original exits when the pool runs out; here, when the free stack holds fewer records
//! than a split needs, the worker takes the tour as it is and solves the whole subtree
//! itself by depth-first search, which is slower but always correct. Any capacity of at
//! least one record (the root) gives the optimum.
//!
//! # Deviations from the original, and why
//!
//! The original's bound adds, for each city not on the path, half the sum of its two
//! cheapest edges, plus one. That is a lower bound only for a symmetric matrix: in an
//! asymmetric one a city may leave by its cheapest edge, below that average, and the
//! shipped 16- to 19-city inputs are asymmetric. Since the queue stops as soon as its best
//! bound reaches the best tour length, an over-estimate could discard the optimum. This
//! program uses the larger of two bounds that hold for any matrix: every city still to
//! leave (the last city on the path and the unvisited ones) leaves by an edge at least as
//! cheap as its cheapest edge to a city still to be entered (the unvisited ones and the
//! start), and symmetrically for the cities still to be entered. A child goes into the
//! queue when its bound is below the best length (the original compares the parent's bound
//! plus the new edge). The private depth-first search is the original's `visit_nodes`:
//! it prunes a path only when it is at least as long as the best tour.

use crate::input::{Instance, MAX_CITIES};

/// Words in one tour record.
pub const RECORD_LEN: usize = MAX_CITIES + 5;
/// Record field: the visited cities, bit `c` for city `c` (stored as the bits of an `i32`).
pub const CONN: usize = MAX_CITIES;
/// Record field: the index in `prefix` of the last city on the path.
pub const LAST: usize = MAX_CITIES + 1;
/// Record field: the length of the path.
pub const PREFIX_WEIGHT: usize = MAX_CITIES + 2;
/// Record field: `prefix_weight + rest_bound`, the priority in the queue.
pub const LOWER_BOUND: usize = MAX_CITIES + 3;
/// Record field: the lower bound on the edges still to add.
pub const REST_BOUND: usize = MAX_CITIES + 4;

/// `queue_ctl` word: index of the top of the free-record stack, -1 when it is empty.
pub const TOUR_STACK_TOP: usize = 0;
/// `queue_ctl` word: 1 once the queue has nothing better than the best tour left.
pub const DONE: usize = 1;
/// `queue_ctl` word: the last used slot of the heap, 0 when the queue is empty.
pub const PRIOQ_LAST: usize = 2;
pub const QUEUE_CTL_LEN: usize = 3;

/// `best` word: the length of the best tour found so far (`MinTourLen`).
pub const MIN_TOUR_LEN: usize = 0;
/// `best` words `MIN_TOUR..MIN_TOUR + n`: the best tour, starting at [`START_CITY`].
pub const MIN_TOUR: usize = 1;
pub const BEST_LEN: usize = 1 + MAX_CITIES;

/// The one kind of unit TSP counts its work in (`dsm::work`, crate doc "Counted work"):
/// an edge examined, by the depth-first search (one candidate city of `visit_nodes`' loop)
/// or by a bound computation.
pub const EDGE: usize = 0;

/// `MinTourLen` before any tour is known.
pub const NO_TOUR: i32 = i32::MAX;
/// Every tour starts and ends here (the original's `StartNode`).
pub const START_CITY: usize = 0;

/// The original's `MAX_NUM_TOURS`, the default pool capacity.
pub const DEFAULT_MAX_TOURS: usize = 5000;

/// Sizes of the shared arrays for `n` cities and a pool of `max_tours` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub n: usize,
    pub max_tours: usize,
}

impl Layout {
    /// Most records a pool may have; the record indices and heap slots are `i32`.
    pub const MAX_TOURS_LIMIT: usize = 1 << 24;

    pub fn new(n: usize, max_tours: usize) -> Result<Layout, String> {
        if !(2..=MAX_CITIES).contains(&n) {
            return Err(format!("{n} cities is out of range 2..={MAX_CITIES}"));
        }
        if !(1..=Self::MAX_TOURS_LIMIT).contains(&max_tours) {
            return Err(format!(
                "a pool of {max_tours} tours is out of range 1..={}",
                Self::MAX_TOURS_LIMIT
            ));
        }
        Ok(Layout { n, max_tours })
    }

    pub fn weights_len(&self) -> usize {
        self.n * self.n
    }
    pub fn queue_ctl_len(&self) -> usize {
        QUEUE_CTL_LEN
    }
    pub fn prioq_len(&self) -> usize {
        2 * (self.max_tours + 1)
    }
    pub fn tour_stack_len(&self) -> usize {
        self.max_tours
    }
    pub fn tours_len(&self) -> usize {
        RECORD_LEN * self.max_tours
    }
    pub fn best_len(&self) -> usize {
        BEST_LEN
    }

    /// Bytes of shared data: the whole `GlobalMemory` record ([`Layout::global`]).
    pub fn shared_bytes(&self) -> usize {
        self.global().len * std::mem::size_of::<i32>()
    }

    /// Where each array lies in the one shared record, in the original's field order
    /// (module doc, "Shared layout").
    pub fn global(&self) -> GlobalOffsets {
        let mut at = 0;
        let mut field = |len: usize| {
            let r = at..at + len;
            at += len;
            r
        };
        // The original's `weights[MAX_TOUR_SIZE][MAX_TOUR_SIZE]`; ours holds the n x n
        // matrix at its start.
        let weights = field(MAX_CITIES * MAX_CITIES);
        let queue_ctl = field(self.queue_ctl_len());
        let best = field(self.best_len());
        // TourLock, MinLock and barrier: the original's lock and barrier numbers.
        let _sync = field(SYNC_WORDS);
        let prioq = field(self.prioq_len());
        let tour_stack = field(self.tour_stack_len());
        let tours = field(self.tours_len());
        GlobalOffsets {
            weights,
            queue_ctl,
            best,
            prioq,
            tour_stack,
            tours,
            len: at,
        }
    }
}

/// Words of the original's `GlobalMemory` between `MinTour` and `PrioQ`: `TourLock`,
/// `MinLock` and `barrier`, the numbers of its locks and barrier. Unused here (the DSM's
/// locks are objects), but kept so the fields after them lie where the original's do.
pub const SYNC_WORDS: usize = 3;

/// The word ranges of the shared arrays inside the one `GlobalMemory` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalOffsets {
    /// The field of the distance matrix (`MAX_CITIES^2` words; the matrix, `n * n` words,
    /// at its start).
    pub weights: std::ops::Range<usize>,
    pub queue_ctl: std::ops::Range<usize>,
    pub best: std::ops::Range<usize>,
    pub prioq: std::ops::Range<usize>,
    pub tour_stack: std::ops::Range<usize>,
    pub tours: std::ops::Range<usize>,
    /// Words of the whole record.
    pub len: usize,
}

/// Counters of one worker, for reports; they differ between runs of the parallel version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkStats {
    /// Partial tours split into children in the queue.
    pub splits: u64,
    /// Subtrees solved by private depth-first search.
    pub subtrees: u64,
    /// Of those, subtrees taken above the `nodes_from_end` depth because the pool was full.
    pub overflow_subtrees: u64,
    /// Calls of the depth-first search (nodes of the search tree below the queue).
    pub dfs_nodes: u64,
}

impl WorkStats {
    pub fn add(&mut self, other: &WorkStats) {
        self.splits += other.splits;
        self.subtrees += other.subtrees;
        self.overflow_subtrees += other.overflow_subtrees;
        self.dfs_nodes += other.dfs_nodes;
    }
}

/// Sets `best` to "no tour yet". Processor 0 calls it before the first barrier.
pub fn init_best(best: &mut [i32]) {
    best.fill(0);
    best[MIN_TOUR_LEN] = NO_TOUR;
}

/// Computes `rest_bound` and `lower_bound` of a record whose path fields are set.
///
/// With `U` the cities not on the path, `s` the start and `l` the last city: the tour still
/// needs one edge out of each city of `{l} ∪ U`, into a city of `U ∪ {s}`, and one edge into
/// each city of `U ∪ {s}`, out of a city of `{l} ∪ U`; when `U` is not empty, `l` cannot go
/// straight to `s`. The sum of the cheapest allowed out-edges is a lower bound on the rest
/// of the tour, and so is the sum of the cheapest allowed in-edges; the bound is the larger.
pub fn calc_bound(weights: &[i32], n: usize, rec: &mut [i32]) {
    let last = rec[LAST] as usize;
    let start = rec[0] as usize;
    let end = rec[last] as usize;
    let conn = rec[CONN] as u32;
    let unvisited = |c: usize| conn & (1 << c) == 0;
    let rest: i64 = if (0..n).all(|c| !unvisited(c)) {
        i64::from(weights[end * n + start])
    } else {
        let cheapest =
            |v: usize, allowed: &dyn Fn(usize) -> bool, w: &dyn Fn(usize) -> i32| -> i64 {
                let m = (0..n).filter(|&j| j != v && allowed(j)).map(w).min();
                i64::from(m.expect("a city still to leave or enter has an allowed neighbour"))
            };
        let leaving = std::iter::once(end).chain((0..n).filter(|&c| unvisited(c)));
        let out_sum: i64 = leaving
            .map(|v| {
                cheapest(v, &|j| unvisited(j) || (j == start && v != end), &|j| {
                    weights[v * n + j]
                })
            })
            .sum();
        let entering = std::iter::once(start).chain((0..n).filter(|&c| unvisited(c)));
        let in_sum: i64 = entering
            .map(|v| {
                cheapest(v, &|j| unvisited(j) || (j == end && v != start), &|j| {
                    weights[j * n + v]
                })
            })
            .sum();
        out_sum.max(in_sum)
    };
    // Counted work: the edges this bound examined, `n` for each city still to leave and
    // each city still to be entered (one, the closing edge, when every city is on the path).
    let left = (0..n).filter(|&c| unvisited(c)).count();
    let edges = if left == 0 { 1 } else { 2 * (left + 1) * n };
    dsm::work::count(EDGE, edges as u64);
    let rest = i32::try_from(rest).expect("bounds fit in 32 bits by the weight limit");
    rec[REST_BOUND] = rest;
    rec[LOWER_BOUND] = rec[PREFIX_WEIGHT] + rest;
}

/// The shared queue as slices: everything TourLock protects. The parallel version builds
/// one from its DSM arrays after acquiring TourLock and drops it before releasing.
#[derive(Debug)]
pub struct Queue<'a> {
    pub queue_ctl: &'a mut [i32],
    pub prioq: &'a mut [i32],
    pub tour_stack: &'a mut [i32],
    pub tours: &'a mut [i32],
}

impl Queue<'_> {
    fn max_tours(&self) -> usize {
        self.tour_stack.len()
    }

    fn record(&self, index: usize) -> &[i32] {
        &self.tours[index * RECORD_LEN..(index + 1) * RECORD_LEN]
    }

    fn record_mut(&mut self, index: usize) -> &mut [i32] {
        &mut self.tours[index * RECORD_LEN..(index + 1) * RECORD_LEN]
    }

    /// Fills the free stack with every record, and queues the root tour (the start city
    /// alone). Processor 0 calls it before the first barrier.
    pub fn init(&mut self, weights: &[i32], n: usize) {
        let max_tours = self.max_tours();
        assert_eq!(
            self.tours.len(),
            RECORD_LEN * max_tours,
            "pool and free stack disagree on the capacity"
        );
        assert_eq!(
            self.prioq.len(),
            2 * (max_tours + 1),
            "heap and free stack disagree on the capacity"
        );
        // Record 0 on top, so records are used from the start of the pool.
        for (slot, index) in self.tour_stack.iter_mut().zip((0..max_tours).rev()) {
            *slot = index as i32;
        }
        self.queue_ctl[TOUR_STACK_TOP] = max_tours as i32 - 1;
        self.queue_ctl[DONE] = 0;
        self.queue_ctl[PRIOQ_LAST] = 0;
        let root = self.alloc().expect("a pool has at least one record");
        let rec = self.record_mut(root);
        rec.fill(0);
        rec[0] = START_CITY as i32;
        rec[CONN] = 1 << START_CITY;
        rec[LAST] = 0;
        rec[PREFIX_WEIGHT] = 0;
        calc_bound(weights, n, rec);
        self.push(root);
    }

    /// The original's `get_tour`: returns record `finished` (the caller's previous
    /// subproblem) to the pool, then takes the most promising partial tour, splitting those
    /// with more than `nodes_from_end` cities left, until one is small enough to solve by
    /// depth-first search. `None` means the search is over: the queue is empty or holds
    /// nothing shorter than `best_len`, the best length the caller knows.
    pub fn get_tour(
        &mut self,
        weights: &[i32],
        n: usize,
        nodes_from_end: usize,
        finished: Option<usize>,
        best_len: i32,
        stats: &mut WorkStats,
    ) -> Option<usize> {
        if let Some(index) = finished {
            self.free(index);
        }
        if self.queue_ctl[DONE] != 0 {
            return None;
        }
        while self.queue_ctl[PRIOQ_LAST] > 0 {
            let (top, priority) = self.slot(1);
            if priority >= best_len {
                self.queue_ctl[DONE] = 1;
                return None;
            }
            self.pop();
            let last = self.record(top)[LAST] as usize;
            let left = n - 1 - last;
            if left <= nodes_from_end {
                stats.subtrees += 1;
                return Some(top);
            }
            if self.free_records() < left {
                stats.subtrees += 1;
                stats.overflow_subtrees += 1;
                return Some(top);
            }
            self.split(weights, n, top, best_len);
            stats.splits += 1;
            self.free(top);
        }
        self.queue_ctl[DONE] = 1;
        None
    }

    /// The original's `split_tour`: queues every one-city extension of record `parent`
    /// whose bound is below `best_len`. The caller has checked that enough records are free.
    fn split(&mut self, weights: &[i32], n: usize, parent: usize, best_len: i32) {
        let mut path = [0i32; RECORD_LEN];
        path.copy_from_slice(self.record(parent));
        let last = path[LAST] as usize;
        let from = path[last] as usize;
        for city in 0..n {
            if path[CONN] as u32 & (1 << city) != 0 {
                continue;
            }
            let child = self
                .alloc()
                .expect("split_tour checked for enough free records");
            let rec = self.record_mut(child);
            rec.copy_from_slice(&path);
            rec[last + 1] = city as i32;
            rec[CONN] = (path[CONN] as u32 | (1 << city)) as i32;
            rec[LAST] = (last + 1) as i32;
            rec[PREFIX_WEIGHT] = path[PREFIX_WEIGHT] + weights[from * n + city];
            calc_bound(weights, n, rec);
            if rec[LOWER_BOUND] < best_len {
                self.push(child);
            } else {
                self.free(child);
            }
        }
    }

    fn free_records(&self) -> usize {
        (self.queue_ctl[TOUR_STACK_TOP] + 1) as usize
    }

    fn alloc(&mut self) -> Option<usize> {
        let top = self.queue_ctl[TOUR_STACK_TOP];
        if top < 0 {
            return None;
        }
        self.queue_ctl[TOUR_STACK_TOP] = top - 1;
        Some(self.tour_stack[top as usize] as usize)
    }

    fn free(&mut self, index: usize) {
        let top = self.queue_ctl[TOUR_STACK_TOP] + 1;
        assert!(
            (top as usize) < self.max_tours(),
            "record {index} freed twice: the free stack is full"
        );
        self.tour_stack[top as usize] = index as i32;
        self.queue_ctl[TOUR_STACK_TOP] = top;
    }

    fn slot(&self, k: usize) -> (usize, i32) {
        (self.prioq[2 * k] as usize, self.prioq[2 * k + 1])
    }

    fn set_slot(&mut self, k: usize, (index, priority): (usize, i32)) {
        self.prioq[2 * k] = index as i32;
        self.prioq[2 * k + 1] = priority;
    }

    /// The original's `less_than`: a lower bound first, and among equal bounds the longer
    /// path, which is closer to a complete tour.
    fn less_than(&self, a: (usize, i32), b: (usize, i32)) -> bool {
        a.1 < b.1 || (a.1 == b.1 && self.record(a.0)[LAST] > self.record(b.0)[LAST])
    }

    fn push(&mut self, index: usize) {
        let entry = (index, self.record(index)[LOWER_BOUND]);
        let mut k = (self.queue_ctl[PRIOQ_LAST] + 1) as usize;
        assert!(
            k <= self.max_tours(),
            "the heap has a slot for every record"
        );
        self.queue_ctl[PRIOQ_LAST] = k as i32;
        while k > 1 && self.less_than(entry, self.slot(k / 2)) {
            self.set_slot(k, self.slot(k / 2));
            k /= 2;
        }
        self.set_slot(k, entry);
    }

    /// Removes the heap's root; the caller has read it.
    fn pop(&mut self) {
        let last = self.queue_ctl[PRIOQ_LAST] as usize;
        let entry = self.slot(last);
        let len = last - 1;
        self.queue_ctl[PRIOQ_LAST] = len as i32;
        if len == 0 {
            return;
        }
        let mut k = 1;
        while 2 * k <= len {
            let mut child = 2 * k;
            if child < len && self.less_than(self.slot(child + 1), self.slot(child)) {
                child += 1;
            }
            if !self.less_than(self.slot(child), entry) {
                break;
            }
            self.set_slot(k, self.slot(child));
            k = child;
        }
        self.set_slot(k, entry);
    }
}

/// Where a depth-first search reads and reports the best tour. The sequential version
/// writes the `best` array directly; the parallel one reads it without a lock (a stale
/// value is only a weaker bound) and writes it under MinLock after checking again.
pub trait Incumbent {
    /// The best tour length known to this processor.
    fn best_len(&self) -> i32;
    /// Reports a complete tour `path` (n cities from the start) of length `len`.
    fn offer(&mut self, len: i32, path: &[i32]);
}

/// The `best` array used directly: the sequential version's incumbent.
#[derive(Debug)]
pub struct Best<'a>(pub &'a mut [i32]);

impl Incumbent for Best<'_> {
    fn best_len(&self) -> i32 {
        self.0[MIN_TOUR_LEN]
    }
    fn offer(&mut self, len: i32, path: &[i32]) {
        set_best(self.0, len, path);
    }
}

/// The original's `set_best` without its lock: records `path` if `len` beats the best.
/// The parallel version calls it holding MinLock.
pub fn set_best(best: &mut [i32], len: i32, path: &[i32]) {
    if len < best[MIN_TOUR_LEN] {
        best[MIN_TOUR_LEN] = len;
        best[MIN_TOUR..MIN_TOUR + path.len()].copy_from_slice(path);
    }
}

/// How the private depth-first search prunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DfsBound {
    /// The original's `visit_nodes`: a path is pruned once it is as long as the best tour.
    Path,
    /// Also counts, for every city still to leave, its cheapest edge to another city.
    /// Not in the original; it makes the symmetric TSPLIB inputs (`tspfilegr17`,
    /// `fri26.matrix`), whose distances vary more, tractable.
    CheapestExit,
}

/// Per city, a lower bound on the edge by which a tour leaves it: zero for
/// [`DfsBound::Path`], the cheapest edge to another city for [`DfsBound::CheapestExit`].
/// Each processor computes it privately from `weights`.
pub fn exit_bounds(weights: &[i32], n: usize, bound: DfsBound) -> Vec<i32> {
    if bound == DfsBound::CheapestExit {
        // Counted (after the fact, as it is one short loop): every edge out of every city.
        dsm::work::count(EDGE, (n * n) as u64);
    }
    (0..n)
        .map(|c| match bound {
            DfsBound::Path => 0,
            DfsBound::CheapestExit => (0..n)
                .filter(|&j| j != c)
                .map(|j| weights[c * n + j])
                .min()
                .expect("at least two cities"),
        })
        .collect()
}

/// The original's `recursive_solve`: copies the record's path to private memory and
/// searches every completion depth-first, pruning a path once its length plus the exit
/// bounds ([`exit_bounds`]) of the cities still to leave reaches the best tour. Returns
/// the number of search nodes.
pub fn solve_subtree(
    weights: &[i32],
    n: usize,
    exits: &[i32],
    record: &[i32],
    best: &mut impl Incumbent,
) -> u64 {
    let last = record[LAST] as usize;
    let visited = record[CONN] as u32;
    let rest = (0..n)
        .filter(|&c| visited & (1 << c) == 0)
        .map(|c| exits[c])
        .sum();
    let mut dfs = Dfs {
        weights,
        n,
        exits,
        path: [0; MAX_CITIES],
        len: last + 1,
        visited,
        dist: record[PREFIX_WEIGHT],
        rest,
        nodes: 0,
    };
    dfs.path[..=last].copy_from_slice(&record[..=last]);
    if dfs.len == n {
        dsm::work::count(EDGE, 1);
        let total = dfs.dist + weights[record[last] as usize * n + START_CITY];
        if total < best.best_len() {
            best.offer(total, &dfs.path[..n]);
        }
        return 1;
    }
    dfs.visit(record[last] as usize, best);
    dfs.nodes
}

/// The private state of the original's `visit_nodes`.
struct Dfs<'w> {
    weights: &'w [i32],
    n: usize,
    exits: &'w [i32],
    path: [i32; MAX_CITIES],
    len: usize,
    visited: u32,
    /// Length of the path.
    dist: i32,
    /// Sum of the exit bounds of the unvisited cities: each must still be left once.
    rest: i32,
    nodes: u64,
}

impl Dfs<'_> {
    fn visit(&mut self, from: usize, best: &mut impl Incumbent) {
        self.nodes += 1;
        let n = self.n;
        // Candidate cities examined since the last count: counted before each descent
        // and at the end, so the work is charged in the order it is done.
        let mut examined = 0u64;
        for city in 0..n {
            examined += 1;
            if self.visited & (1 << city) != 0 {
                continue;
            }
            let dist = self.dist + self.weights[from * n + city];
            if dist + self.rest >= best.best_len() {
                continue;
            }
            self.path[self.len] = city as i32;
            if self.len + 1 == n {
                let total = dist + self.weights[city * n + START_CITY];
                if total < best.best_len() {
                    best.offer(total, &self.path[..n]);
                }
            } else {
                let (saved_dist, saved_rest) = (self.dist, self.rest);
                self.visited |= 1 << city;
                self.len += 1;
                self.dist = dist;
                self.rest -= self.exits[city];
                dsm::work::count(EDGE, std::mem::take(&mut examined));
                self.visit(city, best);
                (self.dist, self.rest) = (saved_dist, saved_rest);
                self.len -= 1;
                self.visited &= !(1 << city);
            }
        }
        dsm::work::count(EDGE, examined);
    }
}

/// A source of subproblems: the shared queue behind TourLock in the parallel version,
/// a private one in the sequential version.
pub trait WorkQueue {
    /// Frees `finished`, then returns the next subproblem (its record index and a private
    /// copy of the record), or `None` when the search is over. `best_len` is the caller's
    /// best length.
    fn get_tour(
        &mut self,
        finished: Option<usize>,
        best_len: i32,
        stats: &mut WorkStats,
    ) -> Option<(usize, [i32; RECORD_LEN])>;
}

/// The original's `Worker`: the work distribution. Each processor repeatedly takes the
/// most promising subproblem from the queue and solves it privately until the queue says
/// the search is over. Work is handed out dynamically, so every processor runs this loop.
pub fn worker(
    weights: &[i32],
    n: usize,
    exits: &[i32],
    queue: &mut impl WorkQueue,
    best: &mut impl Incumbent,
) -> WorkStats {
    let mut stats = WorkStats::default();
    let mut finished = None;
    while let Some((index, record)) = queue.get_tour(finished, best.best_len(), &mut stats) {
        stats.dfs_nodes += solve_subtree(weights, n, exits, &record, best);
        finished = Some(index);
    }
    stats
}

/// The shared arrays in private memory, for the sequential version.
#[derive(Clone, Debug)]
pub struct LocalQueue {
    weights: Vec<i32>,
    n: usize,
    nodes_from_end: usize,
    arrays: QueueArrays,
}

/// The arrays behind a [`Queue`], owned.
#[derive(Clone, Debug)]
struct QueueArrays {
    queue_ctl: Vec<i32>,
    prioq: Vec<i32>,
    tour_stack: Vec<i32>,
    tours: Vec<i32>,
}

impl QueueArrays {
    fn view(&mut self) -> Queue<'_> {
        Queue {
            queue_ctl: &mut self.queue_ctl,
            prioq: &mut self.prioq,
            tour_stack: &mut self.tour_stack,
            tours: &mut self.tours,
        }
    }
}

impl LocalQueue {
    pub fn new(inst: &Instance, layout: Layout, nodes_from_end: usize) -> LocalQueue {
        assert_eq!(inst.n, layout.n, "layout for another instance");
        let mut arrays = QueueArrays {
            queue_ctl: vec![0; layout.queue_ctl_len()],
            prioq: vec![0; layout.prioq_len()],
            tour_stack: vec![0; layout.tour_stack_len()],
            tours: vec![0; layout.tours_len()],
        };
        arrays.view().init(&inst.weights, inst.n);
        LocalQueue {
            weights: inst.weights.clone(),
            n: inst.n,
            nodes_from_end,
            arrays,
        }
    }
}

impl WorkQueue for LocalQueue {
    fn get_tour(
        &mut self,
        finished: Option<usize>,
        best_len: i32,
        stats: &mut WorkStats,
    ) -> Option<(usize, [i32; RECORD_LEN])> {
        let mut view = self.arrays.view();
        let index = view.get_tour(
            &self.weights,
            self.n,
            self.nodes_from_end,
            finished,
            best_len,
            stats,
        )?;
        let mut record = [0; RECORD_LEN];
        record.copy_from_slice(view.record(index));
        Some((index, record))
    }
}

/// The optimum found by [`solve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    pub best_len: i32,
    /// The n cities of the best tour, from [`START_CITY`].
    pub tour: Vec<i32>,
    pub stats: WorkStats,
}

/// The sequential program: one worker on a private queue.
pub fn solve(
    inst: &Instance,
    nodes_from_end: usize,
    max_tours: usize,
    dfs_bound: DfsBound,
) -> Result<Solution, String> {
    let layout = Layout::new(inst.n, max_tours)?;
    let mut queue = LocalQueue::new(inst, layout, nodes_from_end);
    let mut best = vec![0; layout.best_len()];
    init_best(&mut best);
    // Timed as the parallel run: the search, not reading and setting up the input.
    app_common::timing::start();
    let exits = exit_bounds(&inst.weights, inst.n, dfs_bound);
    let stats = worker(
        &inst.weights,
        inst.n,
        &exits,
        &mut queue,
        &mut Best(&mut best),
    );
    app_common::timing::stop();
    assert!(
        best[MIN_TOUR_LEN] < NO_TOUR,
        "a complete graph always has a tour"
    );
    Ok(Solution {
        best_len: best[MIN_TOUR_LEN],
        tour: best[MIN_TOUR..MIN_TOUR + inst.n].to_vec(),
        stats,
    })
}

/// The length of the closed tour through `tour` (back to its first city).
pub fn tour_length(weights: &[i32], n: usize, tour: &[i32]) -> i64 {
    (0..tour.len())
        .map(|k| i64::from(weights[tour[k] as usize * n + tour[(k + 1) % tour.len()] as usize]))
        .sum()
}

/// Checks that `tour` visits each of the `n` cities once and has length `best_len`.
pub fn check_tour(weights: &[i32], n: usize, tour: &[i64], best_len: i64) -> Result<(), String> {
    if tour.len() != n {
        return Err(format!(
            "the tour has {} cities, the instance {n}",
            tour.len()
        ));
    }
    let mut seen = vec![false; n];
    for &c in tour {
        let ok = usize::try_from(c).ok().filter(|&c| c < n && !seen[c]);
        match ok {
            Some(c) => seen[c] = true,
            None => return Err(format!("city {c} is out of range or visited twice")),
        }
    }
    let as_i32: Vec<i32> = tour.iter().map(|&c| c as i32).collect();
    let len = tour_length(weights, n, &as_i32);
    if len != best_len {
        return Err(format!("the tour's length is {len}, not {best_len}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::read_instance;
    use crate::reference::{brute_force, held_karp, random_instance};
    use app_common::rng::SplitMix64;

    fn record_for(inst: &Instance, path: &[usize]) -> [i32; RECORD_LEN] {
        let n = inst.n;
        let mut rec = [0i32; RECORD_LEN];
        let mut conn = 0u32;
        for (k, &c) in path.iter().enumerate() {
            rec[k] = c as i32;
            conn |= 1 << c;
        }
        rec[CONN] = conn as i32;
        rec[LAST] = (path.len() - 1) as i32;
        rec[PREFIX_WEIGHT] = path.windows(2).map(|e| inst.weights[e[0] * n + e[1]]).sum();
        calc_bound(&inst.weights, n, &mut rec);
        rec
    }

    /// The shortest tour that starts with `path`, by trying every order of the other cities.
    fn best_completion(inst: &Instance, path: &[usize]) -> i64 {
        let n = inst.n;
        let rest: Vec<usize> = (0..n).filter(|c| !path.contains(c)).collect();
        let mut best = i64::MAX;
        let mut order = rest.clone();
        let mut try_all = |order: &mut Vec<usize>| {
            let full: Vec<i32> = path.iter().chain(order.iter()).map(|&c| c as i32).collect();
            best = best.min(tour_length(&inst.weights, n, &full));
        };
        permutations(&mut order, 0, &mut try_all);
        best
    }

    fn permutations(items: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&mut Vec<usize>)) {
        if k >= items.len() {
            f(items);
            return;
        }
        for i in k..items.len() {
            items.swap(k, i);
            permutations(items, k + 1, f);
            items.swap(k, i);
        }
    }

    #[test]
    fn bound_takes_the_larger_of_exits_and_entries() {
        // City 2 is cheap to enter (1) but costly to leave (40 at least): by hand, the
        // cheapest exits sum to 1 + 1 + 40 + 1 = 43 and the cheapest entries to 4. Every
        // tour leaves city 2 once, and 0-3-2-1-0 = 1 + 1 + 40 + 1 = 43 is optimal.
        let m = vec![0, 1, 1, 1, 1, 0, 1, 1, 50, 40, 0, 60, 1, 1, 1, 0];
        let inst = Instance::from_matrix(4, m.clone()).unwrap();
        let rec = record_for(&inst, &[0]);
        assert_eq!((rec[REST_BOUND], rec[LOWER_BOUND]), (43, 43));
        assert_eq!(brute_force(&inst).0, 43);
        // The transpose swaps exits and entries; the bound is the same.
        let t: Vec<i32> = (0..16).map(|k| m[(k % 4) * 4 + k / 4]).collect();
        let inst = Instance::from_matrix(4, t).unwrap();
        assert_eq!(record_for(&inst, &[0])[LOWER_BOUND], 43);
        assert_eq!(brute_force(&inst).0, 43);
        // A full path: the bound is the closing edge. In the transpose, 0-1-2-3 costs
        // m[1][0] + m[2][1] + m[3][2] = 1 + 40 + 1 = 42 and closing 3->0 costs m[0][3] = 1.
        let rec = record_for(&inst, &[0, 1, 2, 3]);
        assert_eq!((rec[PREFIX_WEIGHT], rec[REST_BOUND]), (42, 1));
    }

    #[test]
    fn bound_never_exceeds_the_best_completion() {
        let mut rng = SplitMix64::new(7);
        for seed in 0..200 {
            let n = 3 + (seed as usize % 6);
            let inst = random_instance(n, 40, seed % 3 == 0, seed);
            let depth = 1 + rng.below(n as u64) as usize;
            let mut path = vec![START_CITY];
            while path.len() < depth {
                let c = rng.below(n as u64) as usize;
                if !path.contains(&c) {
                    path.push(c);
                }
            }
            let rec = record_for(&inst, &path);
            let exact = best_completion(&inst, &path);
            assert!(
                i64::from(rec[LOWER_BOUND]) <= exact,
                "seed {seed}, path {path:?}: bound {} > {exact}",
                rec[LOWER_BOUND]
            );
            assert!(rec[REST_BOUND] >= 0);
        }
    }

    #[test]
    fn heap_pops_by_bound_then_by_longer_path() {
        let (mut ctl, mut prioq, mut stack, mut tours) = (
            vec![0; 3],
            vec![0; 2 * 9],
            vec![0; 8],
            vec![0; 8 * RECORD_LEN],
        );
        let mut q = Queue {
            queue_ctl: &mut ctl,
            prioq: &mut prioq,
            tour_stack: &mut stack,
            tours: &mut tours,
        };
        // (bound, last) per record; the expected order sorts by bound, then by last descending.
        let entries = [
            (30, 1),
            (10, 2),
            (20, 1),
            (10, 5),
            (40, 3),
            (20, 4),
            (5, 1),
            (30, 2),
        ];
        for (index, &(bound, last)) in entries.iter().enumerate() {
            let rec = q.record_mut(index);
            rec[LOWER_BOUND] = bound;
            rec[LAST] = last;
            q.push(index);
        }
        let mut order = Vec::new();
        while q.queue_ctl[PRIOQ_LAST] > 0 {
            order.push(q.slot(1).0);
            q.pop();
        }
        assert_eq!(order, vec![6, 3, 1, 5, 2, 7, 0, 4]);
    }

    #[test]
    fn solve_matches_exhaustive_search_on_random_instances() {
        for seed in 0..60 {
            let n = 2 + (seed as usize % 8);
            let inst = random_instance(n, 25, seed % 2 == 1, 1000 + seed);
            let (exact, _) = brute_force(&inst);
            for (nfe, max_tours) in [(1, 5000), (2, 3), (3, 1), (12, 5000), (1, 2)] {
                for bound in [DfsBound::Path, DfsBound::CheapestExit] {
                    let sol = solve(&inst, nfe, max_tours, bound).unwrap();
                    let tour: Vec<i64> = sol.tour.iter().map(|&c| i64::from(c)).collect();
                    assert_eq!(
                        i64::from(sol.best_len),
                        exact,
                        "seed {seed}, n {n}, nfe {nfe}, pool {max_tours}, {bound:?}"
                    );
                    check_tour(&inst.weights, n, &tour, exact).unwrap();
                    assert_eq!(sol.tour[0], START_CITY as i32);
                }
            }
        }
    }

    #[test]
    fn a_full_pool_hands_out_whole_subtrees() {
        let inst = random_instance(9, 30, false, 5);
        let roomy = solve(&inst, 1, 5000, DfsBound::Path).unwrap();
        assert_eq!(roomy.stats.overflow_subtrees, 0);
        // Splitting the root needs 8 free records; a pool of 4 cannot split at all.
        let tight = solve(&inst, 1, 4, DfsBound::Path).unwrap();
        assert_eq!(
            (
                tight.stats.splits,
                tight.stats.subtrees,
                tight.stats.overflow_subtrees
            ),
            (0, 1, 1)
        );
        assert_eq!(tight.best_len, roomy.best_len);
    }

    /// A queue that checks every subproblem it hands out.
    struct Checked {
        inner: LocalQueue,
        n: usize,
        nodes_from_end: usize,
    }

    impl WorkQueue for Checked {
        fn get_tour(
            &mut self,
            finished: Option<usize>,
            best_len: i32,
            stats: &mut WorkStats,
        ) -> Option<(usize, [i32; RECORD_LEN])> {
            let overflows = stats.overflow_subtrees;
            let got = self.inner.get_tour(finished, best_len, stats);
            if let Some((_, rec)) = &got {
                let left = self.n - 1 - rec[LAST] as usize;
                assert!(
                    left <= self.nodes_from_end || stats.overflow_subtrees > overflows,
                    "{left} cities left"
                );
                assert!(
                    rec[LOWER_BOUND] < best_len,
                    "a subproblem that cannot beat the best tour"
                );
            }
            got
        }
    }

    #[test]
    fn subproblems_respect_nodes_from_end_and_the_pool_is_conserved() {
        let inst = read_instance(&app_common::data_dir().join("tsp/tspfile9")).unwrap();
        for (nfe, max_tours) in [(2, 5000), (4, 5000), (3, 20)] {
            let layout = Layout::new(inst.n, max_tours).unwrap();
            let mut queue = Checked {
                inner: LocalQueue::new(&inst, layout, nfe),
                n: inst.n,
                nodes_from_end: nfe,
            };
            let mut best = vec![0; BEST_LEN];
            init_best(&mut best);
            let exits = exit_bounds(&inst.weights, inst.n, DfsBound::Path);
            let stats = worker(
                &inst.weights,
                inst.n,
                &exits,
                &mut queue,
                &mut Best(&mut best),
            );
            assert!(stats.splits > 0 && stats.subtrees > 0, "{stats:?}");
            // Every record is free or still queued: none leaked, none freed twice.
            let a = &queue.inner.arrays;
            assert_eq!(
                (a.queue_ctl[TOUR_STACK_TOP] + 1 + a.queue_ctl[PRIOQ_LAST]) as usize,
                max_tours
            );
            assert_eq!(a.queue_ctl[DONE], 1);
            assert_eq!(i64::from(best[MIN_TOUR_LEN]), brute_force(&inst).0);
        }
    }

    #[test]
    fn shipped_instances_match_held_karp() {
        // tspfile8 and tspfile9 by exhaustive search; the larger ones by Held-Karp, with
        // the cheap search bound to keep the test short (the bound only prunes).
        for (file, bound) in [
            ("tspfile8", DfsBound::Path),
            ("tspfile9", DfsBound::Path),
            ("tspfile16", DfsBound::CheapestExit),
            ("tspfile17", DfsBound::CheapestExit),
            ("tspfile18", DfsBound::CheapestExit),
            ("tspfile19b", DfsBound::CheapestExit),
        ] {
            let inst = read_instance(&app_common::data_dir().join("tsp").join(file)).unwrap();
            let sol = solve(&inst, 12, DEFAULT_MAX_TOURS, bound).unwrap();
            let exact = if inst.n <= 9 {
                brute_force(&inst).0
            } else {
                held_karp(&inst)
            };
            assert_eq!(i64::from(sol.best_len), exact, "{file}");
            let tour: Vec<i64> = sol.tour.iter().map(|&c| i64::from(c)).collect();
            check_tour(&inst.weights, inst.n, &tour, exact).unwrap();
        }
        // The note at the end of tspfile18 gives a best tour; it is optimal.
        let inst = read_instance(&app_common::data_dir().join("tsp/tspfile18")).unwrap();
        let noted = [0, 9, 3, 17, 4, 8, 15, 13, 1, 7, 14, 5, 6, 11, 16, 2, 10, 12];
        assert_eq!(tour_length(&inst.weights, 18, &noted), held_karp(&inst));
    }

    #[test]
    fn check_tour_rejects_wrong_tours() {
        let inst = Instance::from_matrix(3, vec![0, 1, 10, 5, 0, 2, 3, 7, 0]).unwrap();
        // 0-1-2-0 = 1 + 2 + 3 = 6 by hand; 0-2-1-0 = 10 + 7 + 5 = 22.
        assert!(check_tour(&inst.weights, 3, &[0, 1, 2], 6).is_ok());
        assert!(check_tour(&inst.weights, 3, &[1, 2, 0], 6).is_ok());
        assert!(check_tour(&inst.weights, 3, &[0, 2, 1], 6)
            .unwrap_err()
            .contains("22"));
        assert!(check_tour(&inst.weights, 3, &[0, 1], 6)
            .unwrap_err()
            .contains("2 cities"));
        assert!(check_tour(&inst.weights, 3, &[0, 1, 1], 6)
            .unwrap_err()
            .contains("twice"));
        assert!(check_tour(&inst.weights, 3, &[0, 1, 3], 6)
            .unwrap_err()
            .contains("out of range"));
        assert!(check_tour(&inst.weights, 3, &[0, 1, -1], 6).is_err());
    }

    #[test]
    fn layout_matches_the_original_footprint() {
        // The original's GlobalMemory: the 32 x 32 matrix, 3 control words, 33 best words,
        // 3 lock and barrier numbers, the heap (here 5001 pairs), the stack of 5000 and
        // 5000 records of 37 words.
        let layout = Layout::new(17, DEFAULT_MAX_TOURS).unwrap();
        assert_eq!(
            layout.shared_bytes(),
            (1024 + 3 + 33 + 3 + 10_002 + 5_000 + 185_000) * 4
        );
        let g = layout.global();
        assert_eq!(g.weights, 0..1024);
        assert_eq!(g.queue_ctl, 1024..1027);
        assert_eq!(g.best, 1027..1060);
        assert_eq!(g.prioq, 1063..1063 + 10_002);
        assert_eq!(g.tour_stack.len(), 5_000);
        assert_eq!(g.tours.end, g.len);
        // MinTourLen shares the first 8 KB page with the matrix and the queue's control.
        assert_eq!(
            (g.best.start + MIN_TOUR_LEN) * 4 / 8192,
            g.queue_ctl.start * 4 / 8192
        );
        assert!(Layout::new(33, 10).is_err());
        assert!(Layout::new(17, 0).is_err());
    }
}
