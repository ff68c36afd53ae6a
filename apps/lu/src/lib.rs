//! LU and CLU: SPLASH-2's blocked dense LU factorization without pivoting (Woo, Singh and
//! Hennessy, ASPLOS 1994; SPLASH-2 `kernels/lu`), in its two versions:
//!
//! - `lu`: non-contiguous blocks, the matrix one `n x n` column-major array, with the
//!   paper's change of ownership (a column of tiles stays on one node; footnote 3 of
//!   section 3.2 of the Cashmere paper). Paper size 2500 x 2500.
//! - `clu`: contiguous blocks, each block dense and a processor's blocks together in one
//!   page-aligned region, SPLASH-2's ownership. Paper size 2048 x 2048.
//!
//! Both use 16 x 16 blocks, SPLASH-2's input matrix ([`matrix::generate`]) and the same
//! kernel arithmetic ([`kernels`]), so the factored matrix is bit-for-bit the same for
//! any number of processors, and the same for `lu` and `clu` at equal `n`; the checker is
//! exact. The result has `sum` and `trace` of the factored matrix and `max_error`, the
//! error of SPLASH-2's own test (solve `A x = b` for the `b` whose solution is all ones).
//!
//! # The parallel version
//!
//! Shared: the matrix, one `f64` array of [`Layout::len`] elements ([`Layout::new`] with
//! `align_elems` = the DSM page size / 8 for CLU, so that each processor's region starts
//! on a page). The right-hand side is only needed by the final check and can stay private
//! to processor 0 ([`matrix::generate`] returns it).
//! Ownership: [`Owners::owner`], one writer per block for the whole run.
//!
//! The program of processor `id` (SPLASH-2 `OneSolve` and `lu`), [`run_parallel`]; the
//! loop is [`factor_parallel`], which reaches memory only through a [`MatrixMemory`]
//! (the DSM array and barrier there, a model in `tests/schedule.rs`), taking a fresh view
//! of the array after every barrier:
//!
//! ```text
//! let (layout, owners) = parallel_layout(variant, n, block_size, config)?;
//! LU:  end_initialization; generate(a, .., id == 0); BARRIER   // CREATE, then InitA
//! CLU: generate(a, .., id == 0); end_initialization            // InitA, then CREATE
//! touch_own_blocks(a, layout, owners, id); BARRIER              // TouchA
//! start timing                                        // SPLASH-2 times the factorization
//! for bk in 0..nblocks:                               // factor_parallel(mem, .., id)
//!     if owner(bk, bk) == id: factor_diagonal(a, layout, bk)
//!     BARRIER                                         // diagonal block bk final
//!     divide_perimeter(a, layout, bk, mine)
//!     BARRIER                                         // row and column bk final
//!     update_interior(a, layout, bk, mine)
//! BARRIER                                             // all blocks final
//! stop timing
//! processor 0: summarize(a, layout, &rhs)
//! ```
//!
//! Two barriers per step, as SPLASH-2 has, and one at the end. No barrier is needed
//! between the interior update of step `bk` and the diagonal factorization of step
//! `bk + 1`: the only block the latter touches, `(bk+1, bk+1)`, was last written by its
//! own owner, and the interior update of step `bk` reads only row and column `bk`. (A
//! third barrier there would be harmless, only slower.) No locks and no flags.
//! `tests/schedule.rs` runs [`factor_parallel`] on threads under a model of release
//! consistency, where a processor sees other processors' writes only after a barrier: it
//! gets the sequential result bit for bit, never writes a block it does not own, and
//! differs when a barrier is left out.
//!
//! # Initialization and homes
//!
//! In both SPLASH-2 programs the master writes the whole matrix (`InitA`), every
//! processor then reads its own blocks (`TouchA`), and a barrier precedes the timed part.
//! They differ in *when the master writes*: the contiguous program (`contiguous_blocks/
//! lu.C`, CLU) calls `InitA` in `main` before `CREATE`, while the processes do not exist
//! yet; the non-contiguous one (`non_contiguous_blocks/lu.C`, LU) creates its processes
//! first and calls `InitA` afterwards, while they wait at `OneSolve`'s first barrier.
//! The paper homes a page at "the first node to touch the page after initialization"
//! (section 2.3.1), and a program's initialization is what it does before it creates
//! its processes; so this version ends initialization (`dsm::Barrier::end_initialization`)
//! where each program calls `CREATE`:
//! - CLU after processor 0's `InitA`: the first touch afterwards is `TouchA`, which homes
//!   each page on its owner's node (3,584 of 4,096 pages move at 8 x 4).
//! - LU before it: processor 0's `InitA` is the first touch, so node 0 is every page's
//!   home and holds a copy of it, and the other nodes write their blocks into pages homed
//!   and shared on node 0. Under the first-touch variants those pages are never exclusive
//!   and are diffed at every release; the -Mg variants move each to its writer.
//!
//! (An earlier version, before the DSM had first touch after initialization, had each
//! processor initialize its own blocks instead: with homes by the first touch of the whole
//! run, processor 0's `InitA` made node 0 the home and a sharer of every page, and at the
//! paper's input on 8 x 4 CLU under CSM-DMS made 181.8K diffs against the paper's 0.)
//!
//! # Counted work
//!
//! One kind of unit ([`LU_WORK`], [`CLU_WORK`], `dsm::work`): a **flop**, one step of a
//! kernel's inner loop, either one element of a `daxpy` (a multiply-add, the bulk) or one
//! division by a pivot. Each kernel ([`kernels::lu0`], [`kernels::bdiv`],
//! [`kernels::bmodd`], [`kernels::bmod`]) counts its block's units when it is done with
//! the block (at most 4,096 units, about 0.1 ms on the platform), in the sequential
//! and the parallel version alike. Whatever the blocking, the kernels do the element
//! operations of unblocked LU: each pivot `k` divides the `n - k - 1` elements right of
//! it and updates each with a column of `n - k - 1` multiply-adds, so a factorization
//! counts `(n^3 - n) / 3` units ([`kernels::factor_units`]): 5,208,332,500 at LU's paper
//! input (2500) and 2,863,310,848 at CLU's (2048). The parallel processors together count
//! exactly the sequential units (every block is factored, divided or updated once, by
//! its owner). The input generation and the final check lie outside the timed region
//! and count nothing. Divisions are under 0.1% of the units at the paper inputs,
//! so one kind suffices.

pub mod kernels;
pub mod layout;
pub mod matrix;
pub mod parallel;

pub use kernels::{
    divide_perimeter, factor, factor_diagonal, factor_parallel, factor_units, update_interior,
    MatrixMemory, FLOP,
};
pub use layout::{BlockView, Layout, Owners, Variant};
pub use matrix::{generate, summarize};
pub use parallel::{parallel_layout, run_parallel};

use app_common::{App, AppError, AppResult, Check, Mismatch, ParamSpec, Params};

/// One flop of the kernels, `paper_units` of them at the paper's input.
const fn flops(paper_units: u64) -> app_common::WorkKind {
    app_common::WorkKind {
        name: "flop",
        what: "one inner-loop step of the kernels: a daxpy element (multiply-add) or a \
               division by a pivot",
        host_ns: 0.0,
        paper_units,
    }
}

/// LU's counted work at its paper input, 2500 x 2500 (crate doc, "Counted work"): (n^3 -
/// n) / 3 flops at n = 2500 (kernels::factor_units).
pub const LU_WORK: &[app_common::WorkKind] = &[flops(5_208_332_500)];

/// CLU's counted work at its paper input, 2048 x 2048 (crate doc, "Counted work"): (n^3 -
/// n) / 3 flops at n = 2048.
pub const CLU_WORK: &[app_common::WorkKind] = &[flops(2_863_310_848)];

/// SPLASH-2's pass mark for `CheckResult`: every component of the solution within this
/// of 1.
pub const MAX_ERROR_BOUND: f64 = 1e-5;

/// The largest matrix order accepted: 8192 is 512 MiB of `f64`.
const MAX_N: usize = 8192;

/// The sizes: `test` 100 leaves 4-row edge blocks as the paper's 2500 does; `small` takes
/// a few seconds sequentially.
const LU_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "n",
        help: "matrix order",
        defaults: ["100", "1500", "2500"],
    },
    ParamSpec {
        name: "block_size",
        help: "block order (SPLASH-2 -b)",
        defaults: ["16", "16", "16"],
    },
];

const CLU_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "n",
        help: "matrix order",
        defaults: ["128", "1536", "2048"],
    },
    ParamSpec {
        name: "block_size",
        help: "block order (SPLASH-2 -b)",
        defaults: ["16", "16", "16"],
    },
];

/// The matrix order and block size of a run.
pub fn sizes(params: &Params) -> Result<(usize, usize), AppError> {
    let n = params.get_in("n", 1, MAX_N)?;
    let block_size = params.get_in("block_size", 1, n)?;
    Ok((n, block_size))
}

/// The sequential run of `variant`: one processor, every block.
pub fn run_sequential(variant: Variant, params: &Params) -> Result<AppResult, AppError> {
    let (n, block_size) = sizes(params)?;
    let owners = Owners::new(variant, 1, 1)?;
    let layout = Layout::new(variant, n, block_size, &owners, 1);
    let mut a = vec![0.0; layout.len()];
    let rhs = generate(&mut a, &layout, |_, _| true);
    app_common::timing::start();
    factor(&mut a, &layout);
    app_common::timing::stop();
    Ok(summarize(&a, &layout, &rhs))
}

/// The same arithmetic in the same order on every element: all fields exact. The solve
/// error must also pass SPLASH-2's own test.
fn check_result(sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
    Check::new(sequential, parallel)
        .exact("n")?
        .exact("sum")?
        .exact("trace")?
        .exact("max_error")?
        .at_most("max_error", MAX_ERROR_BOUND)?
        .done()
}

/// SPLASH-2 LU with non-contiguous blocks.
#[derive(Debug)]
pub struct Lu;

/// SPLASH-2 LU with contiguous blocks.
#[derive(Debug)]
pub struct Clu;

pub static LU: Lu = Lu;
pub static CLU: Clu = Clu;

impl App for Lu {
    fn name(&self) -> &'static str {
        "lu"
    }

    fn description(&self) -> &'static str {
        "SPLASH-2 blocked LU factorization, non-contiguous blocks (one column-major array), \
         a column of tiles per node"
    }

    fn params(&self) -> &'static [ParamSpec] {
        LU_PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let (n, _) = sizes(params)?;
        Ok(n as u64 * n as u64 * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        run_sequential(Variant::NonContiguous, params)
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let (n, block_size) = sizes(params)?;
        run_parallel(Variant::NonContiguous, n, block_size, config)
    }

    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        check_result(sequential, parallel)
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        LU_WORK
    }
}

impl App for Clu {
    fn name(&self) -> &'static str {
        "clu"
    }

    fn description(&self) -> &'static str {
        "SPLASH-2 blocked LU factorization, contiguous blocks (each processor's blocks \
         together)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        CLU_PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let (n, _) = sizes(params)?;
        Ok(n as u64 * n as u64 * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        run_sequential(Variant::Contiguous, params)
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let (n, block_size) = sizes(params)?;
        run_parallel(Variant::Contiguous, n, block_size, config)
    }

    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        check_result(sequential, parallel)
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        CLU_WORK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app_common::{Size, Value};

    fn params(app: &dyn App, size: Size, overrides: &[(&str, &str)]) -> Params {
        let o: Vec<(String, String)> = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Params::resolve(app.name(), app.params(), size, &o).unwrap()
    }

    #[test]
    fn test_size_passes_splash2_check_and_lu_equals_clu() {
        // Same n for both: the arithmetic per element is the same, so the results are
        // equal bit for bit although the layouts differ.
        let lu = LU
            .sequential(&params(&LU, Size::Test, &[("n", "100")]))
            .unwrap();
        let clu = CLU
            .sequential(&params(&CLU, Size::Test, &[("n", "100")]))
            .unwrap();
        assert_eq!(lu, clu);
        LU.check(&lu, &clu).unwrap();
        match lu.get("max_error") {
            Some(Value::F64(e)) => assert!(*e <= MAX_ERROR_BOUND, "max_error {e}"),
            other => panic!("max_error missing: {other:?}"),
        }
    }

    #[test]
    fn one_by_one_matrix_is_its_first_random_value() {
        // With n = 1 the factored matrix is the input: 10 * 89400484 / 32767 (glibc's
        // first lrand48() after srand48(1)), and the solve is exact.
        let r = LU
            .sequential(&params(&LU, Size::Test, &[("n", "1"), ("block_size", "1")]))
            .unwrap();
        let x = 89400484.0 / 32767.0 * 10.0;
        assert_eq!(r.get("sum"), Some(&Value::F64(x)));
        assert_eq!(r.get("trace"), Some(&Value::F64(x)));
        assert_eq!(r.get("max_error"), Some(&Value::F64(0.0)));
    }

    #[test]
    fn checker_is_exact_and_enforces_the_splash2_bound() {
        let seq = AppResult::new()
            .i64("n", 4)
            .f64("sum", 1.0)
            .f64("trace", 2.0)
            .f64("max_error", 1e-9);
        assert!(CLU.check(&seq, &seq.clone()).is_ok());
        let off = AppResult::new()
            .i64("n", 4)
            .f64("sum", f64::from_bits(1.0f64.to_bits() + 1))
            .f64("trace", 2.0)
            .f64("max_error", 1e-9);
        assert_eq!(CLU.check(&seq, &off).unwrap_err().field, "sum");
        let bad = AppResult::new()
            .i64("n", 4)
            .f64("sum", 1.0)
            .f64("trace", 2.0)
            .f64("max_error", 1e-3);
        assert_eq!(
            LU.check(&bad, &bad.clone()).unwrap_err().rule,
            "upper bound"
        );
    }

    #[test]
    fn bad_parameters_are_clear_errors() {
        let e = LU
            .sequential(&params(&LU, Size::Test, &[("n", "0")]))
            .unwrap_err();
        assert!(e.to_string().contains("from 1 to 8192"), "{e}");
        let e = CLU
            .sequential(&params(&CLU, Size::Test, &[("block_size", "200")]))
            .unwrap_err();
        assert!(e.to_string().contains("`block_size` = `200`"), "{e}");
    }

    #[test]
    fn paper_units_are_the_flops_of_the_paper_inputs() {
        for (app, work) in [(&LU as &dyn App, LU_WORK), (&CLU, CLU_WORK)] {
            let n: usize = params(app, Size::Paper, &[]).get("n").unwrap();
            assert_eq!(work[0].paper_units, kernels::factor_units(n), "{}", app.name());
            assert_eq!(app.work(), work);
        }
    }

    #[test]
    fn sequential_counts_the_flops_of_its_timed_region() {
        // The test sizes leave edge blocks (100 = 6 x 16 + 4); CLU's 128 does not.
        for (app, n) in [(&LU as &dyn App, 100u64), (&CLU, 128)] {
            let p = params(app, Size::Test, &[]);
            let (_, measured) = app_common::timing::measure(|| app.sequential(&p).unwrap());
            assert_eq!(measured.work[kernels::FLOP], (n * n * n - n) / 3, "{}", app.name());
        }
    }

    #[test]
    fn paper_sizes_are_table_3() {
        assert_eq!(
            params(&LU, Size::Paper, &[]).get::<usize>("n").unwrap(),
            2500
        );
        assert_eq!(
            params(&CLU, Size::Paper, &[]).get::<usize>("n").unwrap(),
            2048
        );
        assert_eq!(
            params(&CLU, Size::Paper, &[])
                .get::<usize>("block_size")
                .unwrap(),
            16
        );
    }
}
