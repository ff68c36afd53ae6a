//! TSP: the travelling salesman problem solved exactly by branch and bound, after the TSP
//! program of the TreadMarks distribution (Rice University), as used in the Cashmere
//! paper (section 3.2; Table 3: 17 cities, `tspfile17`).
//!
//! A priority queue of partial tours, ordered by lower bound, lives in shared memory with
//! a pool of tour records. Workers take the most promising partial tour and split it into
//! its one-city extensions until at most `nodes_from_end` cities (default 12, the original's
//! `NodesFromEnd`) remain off the path; such a tour is solved by a private depth-first
//! search. The best tour length is the global bound: read freely, written under a lock.
//! The shared layout, the pool capacity and the deviations from the original are
//! documented in [`bnb`]; the input format in [`input`].
//!
//! # Sizes
//!
//! - `test`: `tspfile16` with the `cheapest_exit` search bound, 16 ms sequentially, yet
//!   101 splits and 252 subtrees, so four processors share the queue for real.
//!   (`tspfile8` and `tspfile9` are solved by the first subtree and exercise little.)
//! - `small`: `tspfile19b` with the original's search, a few seconds (3 to 5 s here).
//! - `paper`: `tspfile17`, the 17 cities of the paper's Table 3, with the original's search
//!   and `NodesFromEnd` = 12. It takes about 0.6 s here, against 1342 s in Table 3; the
//!   algorithm explores about 9 million search nodes, so the table's time does not come
//!   from this program on this input. `tspfile16`, the size first planned for `small`,
//!   takes 0.15 s. `small` is therefore the longer run of the two.
//!
//! `tspfilegr17` (symmetric, TSPLIB optimum 2085) takes 536.5 s sequentially with the
//! original's search (measured 2026-11-29, release build, idle host; `--param
//! input=tsp/tspfilegr17`), about 900 times `tspfile17`, and 10 s with
//! `dfs_bound=cheapest_exit`. That is the order of Table 3's 1342 s on a 600 MHz 21164A,
//! where `tspfile17` would take seconds, so the paper's 17-city input was more likely this
//! one (or one whose search is as long): charged over `tspfile17`'s edges, Table 3's time
//! is 8.6 us an edge, thousands of cycles for a loop step. It is not the paper size here
//! because the modeled table simulates every parallel search on one host CPU: seven cells
//! of about nine minutes each and the sequential run, over half an hour of CPU against
//! the paper table's 20 minutes (issue 17). With `tspfile17`, the searchers' start before
//! a short tour is known is a large share of the search (1.36 times the sequential work,
//! "Counted work" below) and one long last subtree holds the end (at 8 x 4 one processor
//! counts 9.5 M edges where the others count 6.2-7.1 M), so the speedup at 8 x 4 is 16.0
//! against the paper's 33.9: a consequence of the input, reported, not tuned. `fri26.matrix` is read but refused by
//! `max_cities` (default 20): it did not finish in 30 s even with the cheaper bound.
//!
//! # Synchronization of the parallel version
//!
//! As the original (`tsp.c`), with two locks and two barriers; the code is in `parallel.rs`.
//!
//! - **Start.** Every node reads the input before the run. Processor 0 writes `weights`,
//!   calls [`bnb::init_best`] on `best` and [`bnb::Queue::init`] on the queue arrays (so
//!   node 0 is the home of all shared pages, as the original's master initializes them);
//!   then a barrier. No processor reads shared data before it. Each processor then
//!   computes [`bnb::exit_bounds`] privately from `weights`, which is read-only from here.
//! - **TourLock** guards `queue_ctl`, `prioq`, `tour_stack` and `tours`. Each call of
//!   `WorkQueue::get_tour` acquires it, re-reads `best[MIN_TOUR_LEN]` (the original reads
//!   `MinTourLen` inside this critical section), builds a [`bnb::Queue`] over the DSM
//!   arrays, calls [`bnb::Queue::get_tour`] (which frees the previous subproblem, pops,
//!   splits and pushes), copies the chosen record to private memory, and releases it. The
//!   record stays reserved for that processor (it is on neither the heap nor the free
//!   stack) until its next `get_tour`, so nothing else touches it.
//! - **MinLock** guards writes of `best` (`MinTourLen` and `MinTour`). The depth-first
//!   search reads `best[MIN_TOUR_LEN]` without the lock, as the original does, with
//!   `Shared::get` (a volatile load) at every step, so the compiler re-reads it. This is
//!   the one deliberate data race, on a single aligned `i32`. The DSM propagates writes
//!   only at synchronization, so a processor sees a new bound only at its next acquire (of
//!   either lock), as under TreadMarks; a stale bound is larger and only prunes less.
//!   `Incumbent::offer` acquires MinLock, calls [`bnb::set_best`] (which checks again) and
//!   releases it. The read in `get_tour` is racy with respect to MinLock too, and equally
//!   safe: any value read is the length of a real tour, so the queue only stops when its
//!   best bound reaches a length that some tour has.
//! - **Termination** is the original's `Done` flag, with no waiting: work enters the queue
//!   only inside `get_tour`, under TourLock (a split pushes the children before the lock is
//!   released), never during a private search. So a worker that holds TourLock and finds
//!   the heap empty, or its best bound not below the best length, knows that no processor
//!   can add work any more: the others are searching privately, which adds none, or waiting
//!   for the lock. It sets `Done`, and every later `get_tour` returns `None` at once. (A
//!   count of active workers with re-checks under the lock would be needed if searchers
//!   pushed work back after releasing the lock; this program never does.)
//! - **End.** A worker leaves [`bnb::worker`] when the queue is done; a final barrier,
//!   after which processor 0 reads `best` for the result. Processors still searching when
//!   the queue empties finish their subtree first, so the barrier waits for all results.
//!
//! # Counted work
//!
//! One kind of unit ([`WORK`], [`bnb::EDGE`], `dsm::work`): an **edge** examined. The
//! private depth-first search (the original's `visit_nodes`) counts one per candidate city
//! of its loop, whether the city is skipped as visited, pruned or descended into,
//! counted before each descent and at the end of the node; a bound computation
//! ([`bnb::calc_bound`], the original's `calc_bound`) counts the `2 (u + 1) n` edges it
//! compares for `u` cities off the path; [`bnb::exit_bounds`] counts `n^2` under
//! `cheapest_exit`. Heap and free-stack operations are not counted (a few per split,
//! against thousands of edges). The sequential version counts 155,270,469 edges at the
//! paper's input.
//!
//! The parallel version explores a different tree: a processor searches with the best
//! length it last saw (a stale, larger bound prunes less), a better tour found early by one
//! processor prunes everybody's later subtrees (fewer nodes than the sequential order),
//! and the queue is split in another order. Its processors together counted, under the
//! wall clock (`dsm::work` tallies, two runs each, CSM-DMS): at the test input 1.000 to
//! 1.109 times the sequential edges on 2 x 2 and 1.07 to 1.11 on 8 x 4; at the small
//! input 0.998 to 1.000 on 2 x 2 and 0.995 to 0.999 on 8 x 4. So the search does up to
//! 11% more work when the run is short (the test input's subtrees are small, and a late
//! bound costs a larger share) and about the sequential work, sometimes less, at the
//! small input. At the paper's input on 8 x 4 (modeled clock, four runs, CSM-DMS and
//! CSM-MS-Mg) the processors counted 210.8 to 211.9 million edges, 1.36 times the
//! sequential 155.3 million: with 32 searchers the first subtrees are searched before a
//! short tour is known, and `tspfile17`'s search is short enough (0.5 s here) that this
//! start is a large part of it.
//!
//! `tspfilegr17` on 8 x 4, one cell (CSM-DMS, modeled clock on alphaserver-mc2, measured
//! 2026-11-29 with `cashmere run tsp --size paper --param input=tsp/tspfilegr17 --clock
//! modeled --nodes 8 --procs 4 --variant CSM-DMS`, 892 s sequentially and 947 s of host
//! time for the parallel run beside other work): the sequential search counts 2.47 x 10^11
//! edges, so Table 3's 1342.49 s would be 5.4 ns an edge, about 3 cycles of the 600 MHz
//! 21164A, where `tspfile17`'s count makes it 8.6 us; a further sign that the paper's
//! input searched about as long as `gr17`. The processors together counted 1.002 times
//! the sequential edges (no start-up excess at this length), and the speedup was 23.4
//! (the paper: 33.9; `tspfile17`: 16.0), set by the end of the search: the busiest
//! processor counted 1.053 x 10^10 edges against a mean of 7.73 x 10^9 (1.36 times), its
//! last private subtree running while the others wait (Wait 26.6% of the processors'
//! time). Page transfers 65.4 K and diffs 45.1 K over the run (the paper: 12.6 K and
//! 8.0 K). The cell was charged at `tspfile17`'s 8.6 us an edge, which makes
//! communication weigh about 1,600 times less against computation than at `gr17`'s own
//! rate; at that rate the 65 K transfers (about 220 us each on the platform) would add
//! about 0.5 s a processor to a parallel time near 57 s, so the speedup would stay about
//! 23.

pub mod bnb;
pub mod input;
mod parallel;
#[cfg(test)]
mod reference;

use app_common::{
    resolve_input, App, AppError, AppResult, Check, Mismatch, ParamSpec, Params, Value,
};

/// TSP's counted work (crate doc, "Counted work"): one kind, [`bnb::EDGE`].
pub const WORK: &[app_common::WorkKind] = &[app_common::WorkKind {
    name: "edge",
    what: "one edge examined: a candidate city of the depth-first search's loop, or an edge a \
           bound computation compares",
    host_ns: 0.0,
    paper_units: PAPER_EDGES,
}];

/// Edges the sequential version examines at the paper's input (`tspfile17`, the
/// original's search, `NodesFromEnd` 12): measured, exact.
const PAPER_EDGES: u64 = 155_270_469;

/// The TSP application.
#[derive(Debug)]
pub struct Tsp;

/// The TSP application, for the harness.
pub static TSP: Tsp = Tsp;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "input",
        help: "instance file (city count, then the distance matrix one row per line), relative to the data directory",
        defaults: ["tsp/tspfile16", "tsp/tspfile19b", "tsp/tspfile17"],
    },
    ParamSpec {
        name: "nodes_from_end",
        help: "split partial tours in the shared queue until at most this many cities remain, then search privately (TreadMarks NodesFromEnd)",
        defaults: ["12", "12", "12"],
    },
    ParamSpec {
        name: "max_tours",
        help: "capacity of the shared pool of partial tours (TreadMarks MAX_NUM_TOURS); when full, a worker searches the tour itself",
        defaults: ["5000", "5000", "5000"],
    },
    ParamSpec {
        name: "dfs_bound",
        help: "pruning of the private search: `path` (the original: path length only) or `cheapest_exit` (adds each remaining city's cheapest edge)",
        defaults: ["cheapest_exit", "path", "path"],
    },
    ParamSpec {
        name: "max_cities",
        help: "refuse larger instances, whose exhaustive search would run for hours (at most 32)",
        defaults: ["20", "20", "20"],
    },
];

/// The parameters of one run, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub input: String,
    pub nodes_from_end: usize,
    pub max_tours: usize,
    pub dfs_bound: bnb::DfsBound,
    pub max_cities: usize,
}

impl Config {
    pub fn from_params(params: &Params) -> Result<Config, AppError> {
        Ok(Config {
            input: params.str("input")?.to_string(),
            nodes_from_end: params.get_in("nodes_from_end", 1, input::MAX_CITIES)?,
            max_tours: params.get_in("max_tours", 1, bnb::Layout::MAX_TOURS_LIMIT)?,
            dfs_bound: match params.str("dfs_bound")? {
                "path" => bnb::DfsBound::Path,
                "cheapest_exit" => bnb::DfsBound::CheapestExit,
                other => {
                    return Err(AppError::BadParam {
                        name: "dfs_bound".into(),
                        value: other.into(),
                        why: "valid values are path and cheapest_exit".into(),
                    })
                }
            },
            max_cities: params.get_in("max_cities", 2, input::MAX_CITIES)?,
        })
    }

    /// Reads the input, refusing instances above `max_cities`.
    pub fn instance(&self) -> Result<input::Instance, AppError> {
        let inst = input::read_instance(&resolve_input(&self.input))?;
        if inst.n > self.max_cities {
            return Err(AppError::Other(format!(
                "{} has {} cities; the exhaustive search of TreadMarks TSP grows about n-fold per city \
                 and would run for hours beyond {} cities (tspfile19b, 19 cities, takes seconds); \
                 raise max_cities (at most {}) to try anyway",
                self.input,
                inst.n,
                self.max_cities,
                input::MAX_CITIES
            )));
        }
        Ok(inst)
    }
}

/// The result summary: the input, its size, the optimal length and one optimal tour.
pub fn summary(config: &Config, n: usize, best_len: i32, tour: &[i32]) -> AppResult {
    AppResult::new()
        .with("input", Value::Str(config.input.clone()))
        .i64("cities", n as i64)
        .i64("best_len", i64::from(best_len))
        .with(
            "tour",
            Value::I64s(tour.iter().map(|&c| i64::from(c)).collect()),
        )
}

impl App for Tsp {
    fn name(&self) -> &'static str {
        "tsp"
    }

    fn description(&self) -> &'static str {
        "travelling salesman by branch and bound with a shared queue of partial tours (TreadMarks TSP)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK
    }

    fn extra_work(&self) -> Option<&'static str> {
        Some("the searchers explore before a short tour is known, so they expand more of the tree than the sequential search (crate doc, \"Counted work\")")
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let max_tours =
            params.get_in::<u64>("max_tours", 1, bnb::Layout::MAX_TOURS_LIMIT as u64)?;
        Ok(max_tours * bnb::RECORD_LEN as u64 * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let config = Config::from_params(params)?;
        let inst = config.instance()?;
        let sol = bnb::solve(
            &inst,
            config.nodes_from_end,
            config.max_tours,
            config.dfs_bound,
        )
        .map_err(AppError::Other)?;
        Ok(summary(&config, inst.n, sol.best_len, &sol.tour))
    }

    /// The original's workers on every processor, sharing the queue under TourLock and
    /// the best tour under MinLock (see the crate documentation).
    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let app_config = Config::from_params(params)?;
        let inst = app_config.instance()?;
        parallel::run(&app_config, &inst, config)
    }

    /// `best_len` is exact: the optimum length is unique. The tours may differ, since which
    /// of several optimal tours is found first depends on timing; the parallel tour must
    /// visit every city once and have length `best_len` in the instance, read again here.
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        Check::new(sequential, parallel)
            .exact("input")?
            .exact("cities")?
            .exact("best_len")?
            .done()?;
        let tour_mismatch = |got: String, rule: &str| Mismatch {
            field: "tour".into(),
            expected: "a tour through every city of length best_len".into(),
            got,
            rule: rule.into(),
        };
        let (Some(Value::Str(path)), Some(Value::I64(best_len))) =
            (parallel.get("input"), parallel.get("best_len"))
        else {
            return Err(tour_mismatch(
                "a result without input or best_len".into(),
                "well-formed result",
            ));
        };
        let Some(Value::I64s(tour)) = parallel.get("tour") else {
            return Err(tour_mismatch("no list of cities".into(), "present"));
        };
        let inst = input::read_instance(&resolve_input(path))
            .map_err(|e| tour_mismatch(e.to_string(), "input readable"))?;
        bnb::check_tour(&inst.weights, inst.n, tour, *best_len)
            .map_err(|why| tour_mismatch(why, "valid optimal tour"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app_common::Size;

    fn params(input: &str, nodes_from_end: &str, max_tours: &str) -> Params {
        Params::from_pairs(
            Size::Test,
            &[
                ("input", input),
                ("nodes_from_end", nodes_from_end),
                ("max_tours", max_tours),
                ("dfs_bound", "path"),
                ("max_cities", "20"),
            ],
        )
    }

    #[test]
    fn every_size_has_every_default_and_the_inputs_exist() {
        for size in Size::ALL {
            let p = Params::resolve("tsp", TSP.params(), size, &[]).unwrap();
            let config = Config::from_params(&p).unwrap();
            assert!(config.instance().is_ok(), "{size}: {}", config.input);
        }
    }

    #[test]
    fn test_size_runs_and_checks_against_itself() {
        let p = Params::resolve("tsp", TSP.params(), Size::Test, &[]).unwrap();
        let seq = TSP.sequential(&p).unwrap();
        // The optimum by the Held-Karp dynamic program, which shares no code with the search.
        let inst = Config::from_params(&p).unwrap().instance().unwrap();
        assert_eq!(
            seq.get("best_len"),
            Some(&Value::I64(reference::held_karp(&inst)))
        );
        TSP.check(&seq, &seq).unwrap();
    }

    #[test]
    fn checker_accepts_another_optimal_tour_and_rejects_wrong_ones() {
        // tspfile8 is symmetric, so the reversed optimal tour is optimal too.
        let seq = TSP
            .sequential(&params("tsp/tspfile8", "12", "5000"))
            .unwrap();
        let Some(Value::I64s(tour)) = seq.get("tour") else {
            panic!("no tour")
        };
        let mut reversed = tour.clone();
        reversed[1..].reverse();
        assert_ne!(&reversed, tour);
        let with_tour = |t: Vec<i64>, len: i64| {
            let mut r = seq.clone();
            for (name, v) in &mut r.fields {
                match name.as_str() {
                    "tour" => *v = Value::I64s(t.clone()),
                    "best_len" => *v = Value::I64(len),
                    _ => {}
                }
            }
            r
        };
        let Some(Value::I64(best)) = seq.get("best_len") else {
            panic!("no length")
        };
        assert!(TSP.check(&seq, &with_tour(reversed, *best)).is_ok());
        // From the note in tspfile8: 0-2-6-5-7-1-3-4-0 has length 2+3+1+3+2+1+1+2 = 15.
        assert_eq!(*best, 15);
        // A repeated city, and a valid tour that is not optimal: 0-1-...-7-0 has length
        // 3+5+9+1+3+1+4+9 = 35 by hand from the matrix.
        let mut repeated = tour.clone();
        repeated[1] = repeated[2];
        assert!(TSP
            .check(&seq, &with_tour(repeated, *best))
            .unwrap_err()
            .got
            .contains("visited twice"));
        let e = TSP
            .check(&seq, &with_tour((0..8).collect(), *best))
            .unwrap_err();
        assert!(e.got.contains("length is 35"), "{e}");
        assert_eq!(
            TSP.check(&seq, &with_tour(tour.clone(), best + 1))
                .unwrap_err()
                .field,
            "best_len"
        );
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let e = TSP
            .sequential(&params("tsp/tspfile8", "0", "5000"))
            .unwrap_err();
        assert!(e.to_string().contains("nodes_from_end"));
        let e = TSP
            .sequential(&params("tsp/tspfile8", "3", "0"))
            .unwrap_err();
        assert!(e.to_string().contains("max_tours"));
        let e = TSP
            .sequential(&params("tsp/no-such-file", "3", "10"))
            .unwrap_err();
        assert!(matches!(e, AppError::Io { .. }));
        let e = TSP
            .sequential(&params("tsp/fri26.matrix", "12", "5000"))
            .unwrap_err();
        assert!(e.to_string().contains("fri26.matrix has 26 cities"), "{e}");
        let mut p = params("tsp/tspfile8", "3", "10")
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>();
        p.retain(|(k, _)| k != "dfs_bound");
        p.push(("dfs_bound".into(), "mst".into()));
        let e = Params::resolve("tsp", TSP.params(), Size::Test, &p)
            .and_then(|p| TSP.sequential(&p))
            .unwrap_err();
        assert!(e.to_string().contains("path and cheapest_exit"), "{e}");
    }
}
