//! The parallel program on the DSM, following the synchronization plan of the crate
//! documentation (parallel FASTLINK's ILINK): the optimizer runs on the master
//! (processor 0); every likelihood evaluation is peeled by all processors together, the
//! large families split round robin among them.
//!
//! Shared data, allocated in this order:
//!
//! * `genarrays`: `nperson x ngeno` `f64`, the genotype arrays (the master copies them from
//!   `base` before the first evaluation, so node 0 is their home);
//! * `base`: the starting arrays, written once by the master, read-only after;
//! * `contrib`: one contribution row of `ngeno` per processor, unpadded (row `p` at
//!   `p * ngeno`, as FASTLINK's per-processor `arrgene` arrays): neighbouring rows share
//!   the pages at their ends; each processor zeroes its own row at the start (first touch
//!   makes the home of a page the node of whoever touches it first);
//! * `thetas`: the recombination fractions of the current evaluation;
//! * `control`: one word, [`RUN`] or [`DONE`], written by the master before the barrier
//!   that starts an evaluation;
//! * `summary`: the estimate (the thetas, then `-2 ln L`), written by the master before
//!   the final barrier and read back after it.
//!
//! One evaluation:
//!
//! 1. The master writes `thetas`, copies the `base` arrays of every family's connector
//!    back into `genarrays` (only connectors' arrays are ever changed by peeling) and
//!    writes [`RUN`]; **barrier**. The others read `control` (and stop on [`DONE`]) and
//!    build their gamete table from `thetas`.
//! 2. For each family in peeling order, every processor runs [`peel::prepare`]. A family
//!    below [`peel::MASTER_ALONE_WORK`] is peeled by the master alone into its own row,
//!    combined and rescaled. Otherwise, peeling up, each processor runs the kernel over
//!    its [`peel::stripe`] into a private buffer; **barrier**; each stores its stripe's
//!    genotypes into the connector's array; **barrier**; the master rescales it. Peeling
//!    down, each processor runs the kernel into its row; **barrier**; the master combines
//!    the rows in processor order into the connector's array and rescales it. Then
//!    **barrier**: the next family reads the connector, and its kernels overwrite the
//!    rows the master has just read. (An evaluation without families still ends with one
//!    barrier, so that the others have read `control` before the master writes it again.)
//! 3. The master sums each pedigree's root arrays and hands the log-likelihoods to the
//!    optimizer.
//!
//! Every slice of a shared array is taken inside one phase (between two barriers) and
//! dropped before the next synchronization call.

use crate::model::Gametes;
use crate::peel::{self, Scratch, Tables};
use crate::{estimate_with, Problem};
use app_common::{AppError, AppResult, Value};
use dsm::{Barrier, Proc, Shared};

/// `control` value: peel the evaluation that the barrier starts.
pub const RUN: u64 = 1;
/// `control` value: the optimization is over; leave the evaluation loop.
pub const DONE: u64 = 2;

/// The shared arrays and the barrier of a run.
#[derive(Clone, Copy)]
struct Ctx {
    genarrays: Shared<f64>,
    base: Shared<f64>,
    contrib: Shared<f64>,
    thetas: Shared<f64>,
    control: Shared<u64>,
    summary: Shared<f64>,
    bar: Barrier,
}

/// Estimates the recombination fractions of `problem` on the cluster `config` describes.
pub fn run_parallel(
    problem: &Problem,
    config: &dsm::Config,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let g = problem.model.ngeno;
    let nthetas = problem.data.thetas.len();
    let report = dsm::Cluster::new(config.clone()).run(|s| {
        let ctx = Ctx {
            genarrays: s.alloc_named::<f64>(problem.pedigrees.nperson * g, "ilink genarrays"),
            base: s.alloc_named::<f64>(problem.pedigrees.nperson * g, "ilink starting arrays"),
            contrib: s.alloc_named::<f64>(s.nprocs() * g, "ilink contributions"),
            thetas: s.alloc_named::<f64>(nthetas, "ilink thetas"),
            control: s.alloc_named::<u64>(1, "ilink control"),
            summary: s.alloc_named::<f64>(nthetas + 1, "ilink estimate"),
            bar: s.barrier(),
        };
        move |p: &Proc| -> Option<Result<AppResult, String>> {
            if p.id() == 0 {
                // SAFETY: the master alone writes base and genarrays before the barrier
                // that ends initialization; nobody else touches them before it.
                let (base, arrays) =
                    unsafe { (ctx.base.as_mut_slice(), ctx.genarrays.as_mut_slice()) };
                base.copy_from_slice(&problem.base);
                arrays.copy_from_slice(base);
            }
            // Homes go to the first touchers from here (section 2.3.1).
            ctx.bar.end_initialization(p);
            // Timed: the estimate (the problem is built before the run).
            p.start_timing();
            let mut scratch = Scratch::default();
            let mut private = Vec::new();
            // SAFETY: each processor writes only its own row; nobody reads rows before
            // the first barrier.
            let rows = unsafe { ctx.contrib.as_mut_slice() };
            rows[p.id() * g..][..g].fill(0.0);
            if p.id() != 0 {
                loop {
                    ctx.bar.wait(p);
                    if ctx.control.get(0) == DONE {
                        p.stop_timing();
                        return None;
                    }
                    peel_evaluation(p, problem, &ctx, &mut scratch, &mut private);
                }
            }
            let outcome = estimate_with(problem, |thetas| {
                start_evaluation(p, problem, &ctx, thetas);
                peel_evaluation(p, problem, &ctx, &mut scratch, &mut private)
            });
            if let Ok(est) = &outcome {
                // SAFETY: between the last evaluation's final barrier and the next one,
                // only the master accesses these arrays.
                let out = unsafe { ctx.summary.as_mut_slice() };
                out[..nthetas].copy_from_slice(&est.thetas);
                out[nthetas] = est.neg2_ln_like;
            }
            ctx.control.set(0, DONE);
            ctx.bar.wait(p);
            p.stop_timing();
            Some(
                outcome
                    .map(|_| summary_of(&ctx, nthetas))
                    .map_err(|e| e.to_string()),
            )
        }
    })?;
    let (results, report) = report.take_results();
    match results.into_iter().next().flatten() {
        Some(Ok(result)) => Ok((result, report)),
        Some(Err(why)) => Err(AppError::Other(why)),
        None => Err(AppError::Other("processor 0 returned no result".into())),
    }
}

/// The result summary, read from shared memory after the final barrier.
fn summary_of(ctx: &Ctx, nthetas: usize) -> AppResult {
    // SAFETY: the final barrier ordered the master's writes; nobody writes any more.
    let s = unsafe { ctx.summary.as_slice() };
    AppResult::new()
        .with("thetas", Value::F64s(s[..nthetas].to_vec()))
        .f64("neg2_ln_like", s[nthetas])
}

/// The master's part of step 1: publish `thetas`, restore the connectors' arrays, and
/// start the evaluation with a barrier.
fn start_evaluation(p: &Proc, problem: &Problem, ctx: &Ctx, thetas: &[f64]) {
    let g = problem.model.ngeno;
    // SAFETY: the previous evaluation ended with a barrier after which the others only
    // wait at the next one; until it, only the master accesses these arrays (base is
    // read-only).
    let (t, arrays, base) = unsafe {
        (
            ctx.thetas.as_mut_slice(),
            ctx.genarrays.as_mut_slice(),
            ctx.base.as_slice(),
        )
    };
    t.copy_from_slice(thetas);
    for fam in &problem.pedigrees.families {
        let r = fam.target as usize * g..(fam.target as usize + 1) * g;
        arrays[r.clone()].copy_from_slice(&base[r]);
    }
    ctx.control.set(0, RUN);
    ctx.bar.wait(p);
}

/// Steps 2 and 3 on processor `p`, after the barrier that started the evaluation. The
/// master returns each pedigree's log-likelihood; the others an empty vector.
fn peel_evaluation(
    p: &Proc,
    problem: &Problem,
    ctx: &Ctx,
    scratch: &mut Scratch,
    private: &mut Vec<f64>,
) -> Vec<f64> {
    let (model, peds) = (&problem.model, &problem.pedigrees);
    let g = model.ngeno;
    let (id, nprocs) = (p.id(), p.nprocs());
    let master = id == 0;
    private.resize(g, 0.0);
    // SAFETY: the master wrote the thetas before the starting barrier and writes them
    // again only after the evaluation's last barrier.
    let gam = Gametes::new(model, unsafe { ctx.thetas.as_slice() });
    let tables = Tables {
        model,
        gam: &gam,
        peds,
    };
    let mut result = Vec::new();
    for (fams, roots) in peds.ped_families.iter().zip(&peds.ped_roots) {
        let mut ln_like = 0.0;
        for fam in &peds.families[fams.clone()] {
            let job = {
                // SAFETY: nobody writes genarrays between the barrier before this family
                // and the first barrier after its kernels.
                let genarrays = unsafe { ctx.genarrays.as_slice() };
                peel::prepare(model, peds, fam, genarrays, scratch)
            };
            let t = job.target(peds) as usize;
            let alone = job.work() < peel::MASTER_ALONE_WORK;
            if alone {
                if master {
                    // SAFETY: the master alone works on this family; the others wait at
                    // the barrier below, and nobody reads the master's row meanwhile.
                    let (arrays, rows) =
                        unsafe { (ctx.genarrays.as_mut_slice(), ctx.contrib.as_mut_slice()) };
                    let row = &mut rows[..g];
                    peel::family_kernel(&tables, &job, arrays, 0..job.n_outer, scratch, row);
                    let target = &mut arrays[t * g..(t + 1) * g];
                    peel::combine_strided(&job, target, &rows[..g], g, 1);
                    ln_like += peel::rescale(target);
                }
            } else if job.down.is_none() {
                // Peeling up: every genotype of the connector is computed by one
                // processor, which writes its stripe straight into the connector's array.
                {
                    // SAFETY: nobody writes genarrays until the barrier below.
                    let arrays = unsafe { ctx.genarrays.as_slice() };
                    let mine = peel::stripe(id, nprocs, job.n_outer);
                    peel::family_kernel(&tables, &job, arrays, mine, scratch, private);
                }
                // Everyone has read the parents' and children's arrays.
                ctx.bar.wait(p);
                {
                    // SAFETY: each processor writes only the connector's genotypes of its
                    // own stripe; nobody reads the connector until the next barrier.
                    let arrays = unsafe { ctx.genarrays.as_mut_slice() };
                    let target = &mut arrays[t * g..(t + 1) * g];
                    for pos in peel::stripe(id, nprocs, job.n_outer) {
                        let go = scratch.outer_nz[pos] as usize;
                        target[go] = private[go];
                    }
                }
                ctx.bar.wait(p);
                if master {
                    // SAFETY: the stripes were written before the barrier above; the
                    // others wait at the next one.
                    let arrays = unsafe { ctx.genarrays.as_mut_slice() };
                    ln_like += peel::rescale(&mut arrays[t * g..(t + 1) * g]);
                }
            } else {
                // Peeling down: every processor's stripe adds to every genotype of the
                // child, so each writes its own row of `contrib` and the master adds them.
                {
                    // SAFETY: nobody writes genarrays until the barrier below; each
                    // processor writes only its own row.
                    let (arrays, rows) =
                        unsafe { (ctx.genarrays.as_slice(), ctx.contrib.as_mut_slice()) };
                    let mine = peel::stripe(id, nprocs, job.n_outer);
                    let row = &mut rows[id * g..(id + 1) * g];
                    peel::family_kernel(&tables, &job, arrays, mine, scratch, row);
                }
                ctx.bar.wait(p);
                if master {
                    // SAFETY: the others wrote their rows before the barrier above and
                    // wait at the next one; the master alone writes the connector.
                    let (arrays, rows) =
                        unsafe { (ctx.genarrays.as_mut_slice(), ctx.contrib.as_slice()) };
                    let target = &mut arrays[t * g..(t + 1) * g];
                    peel::combine_strided(&job, target, rows, g, nprocs);
                    ln_like += peel::rescale(target);
                }
            }
            // The next family may read the connector, and its kernels overwrite the rows
            // the master has just read.
            ctx.bar.wait(p);
        }
        if master {
            // SAFETY: only the master writes genarrays, and it is the master reading.
            let arrays = unsafe { ctx.genarrays.as_slice() };
            for &r in &peds.roots[roots.clone()] {
                let s: f64 = peel::person_array(arrays, g, r).iter().sum();
                ln_like += s.ln();
            }
            result.push(if ln_like.is_nan() {
                f64::NEG_INFINITY
            } else {
                ln_like
            });
        }
    }
    if peds.families.is_empty() {
        ctx.bar.wait(p);
    }
    result
}
