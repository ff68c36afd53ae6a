//! ILINK from FASTLINK (Cottingham, Idury and Schaffer, Am. J. Hum. Genet. 53:252, 1993;
//! parallel version by Dwarkadas, Schaffer, Cottingham, Cox, Keleher and Zwaenepoel,
//! Hum. Hered. 44:127, 1994; used in the Cashmere paper, section 3.2 and Table 3, on the
//! CLP data set, 15 MB of shared data): maximum-likelihood estimation of recombination
//! fractions from pedigrees.
//!
//! # The computation
//!
//! The input is a LINKAGE DATAFILE and PEDFILE ([`linkage`]). The likelihood of each
//! pedigree is computed by Elston-Stewart peeling over nuclear families on joint-locus
//! genotype arrays ([`model`], [`peel`]); the likelihood of the data is their product. The
//! recombination fractions flagged for iteration are chosen to minimize `-2 ln L` inside
//! `0 <= theta <= 0.5` by a projected quasi-Newton method with finite-difference
//! gradients ([`optimize`]), standing in for ILINK's GEMINI. The result is the estimated
//! `thetas` (all intervals, in chromosome order, fixed ones included) and `neg2_ln_like`
//! at the estimate.
//!
//! On the shipped example (`ilink_example_*.dat`: markers p105-599Ha and p105-153Ra and a
//! schizophrenia locus, chromosome order 599Ha - 153Ra - disease, in 2 pedigrees of 31
//! individuals) the estimate is `thetas = [0.098698, 0.0]` (the marker-disease fraction on
//! its lower bound) with `neg2_ln_like = 148.448978`, against 150.480106 at the starting
//! values (0.1197, 0.125) and 156.028375 at free recombination. FASTLINK's own output is
//! not available; the likelihood is checked against an independent brute-force sum over
//! genotype assignments (`tests/brute_force.rs`) and the estimate against a grid
//! (`tests/example.rs`).
//!
//! # Sizes
//!
//! `test` is the shipped example (46 likelihood evaluations, under a millisecond).
//! `small` and `paper` are generated studies ([`generate`]): three-generation pedigrees of
//! 19 individuals, two 5-allele markers around a disease locus, so 50 haplotypes and 1275
//! joint genotypes; 5 pedigrees for `small` (about 3 s sequentially) and 38 for `paper`,
//! whose genotype arrays make 15 MB of shared data as the paper's CLP input (Table 3).
//!
//! # Shared data layout
//!
//! * `genarrays`: `nperson x ngeno` `f64`, the genotype array of person `p` at
//!   `p * ngeno ..` — the large shared array, as FASTLINK's pool of genarrays. The master
//!   copies `base` into it before the first evaluation, and before each evaluation
//!   restores from `base` the arrays of the families' connectors, the only ones peeling
//!   changes.
//! * `base`: the starting arrays ([`Problem::base`]), same shape, written once by the
//!   master and read-only after.
//! * `contrib`: one contribution row of `ngeno` `f64` per processor, row `p` at
//!   `p * ngeno`, unpadded: neighbouring processors' rows share the pages at their ends.
//! * `thetas`: the recombination fractions of the evaluation (written by the master).
//! * `control`: run or done, written by the master before the barrier that starts an
//!   evaluation; `summary`: the estimate, written by the master before the final barrier.
//!
//! The peeling schedule ([`peel::Pedigrees`]), the [`model::Model`] tables and the
//! [`model::Gametes`] table of the current thetas are read-only and small: every processor
//! builds its own copy (the gamete table after reading the shared `thetas`).
//!
//! # Work distribution and synchronization of the parallel version
//!
//! Following parallel FASTLINK's ILINK, only the peeling of a nuclear family is split;
//! the optimizer runs on the master ([`parallel`]). For each likelihood evaluation:
//!
//! 1. The master writes `thetas`, restores the connectors' arrays and writes "run";
//!    **barrier**. (After the optimization it writes "done" and the others, seeing it
//!    after that barrier, leave.)
//! 2. Every processor builds its gamete table. Then for each family of each pedigree, in
//!    [`peel::Pedigrees::families`] order:
//!    a. every processor calls [`peel::prepare`] (reads the family's arrays, same answer
//!    everywhere);
//!    b. if [`peel::Job::work`] is below [`peel::MASTER_ALONE_WORK`] the master runs
//!    [`peel::family_kernel`] over all positions alone into its own `contrib` row,
//!    [`peel::combine_strided`]s it into the connector's array and [`peel::rescale`]s it;
//!    c. otherwise, peeling **up** (onto a parent), each processor runs the kernel over
//!    [`peel::stripe`]`(id, nprocs, n_outer)` into a private buffer; **barrier** (all
//!    have read the family's arrays); each writes the genotypes of its stripe straight
//!    into the connector's array in `genarrays`; **barrier**; the master rescales it;
//!    d. otherwise, peeling **down** (onto a child, whose every genotype gets terms from
//!    every stripe), each processor runs the kernel over its stripe into its own
//!    `contrib` row; **barrier**; the master adds the rows in processor order into the
//!    connector's array ([`peel::combine_strided`]) and rescales it;
//!    e. **barrier** (the next family may read the connector, and its kernels overwrite
//!    the rows just read). The kernel zeroes the buffer it writes, so no other clearing
//!    is needed. The rescale's log adds to the pedigree's total.
//! 3. The master sums each pedigree's root array ([`peel::pedigree_ln_likelihoods`] shows
//!    the sequential order) and returns `-2 ln L` to the optimizer; the others wait at the
//!    barrier of the next evaluation.
//!
//! Peeling up, every genotype of the target is computed by one processor with the same
//! arithmetic as sequentially and stored as it is, so the result is exact. Peeling down
//! (onto a child), each processor sums its stripe's terms and the master adds the
//! partial sums: the order of summation differs from the sequential one, so the
//! likelihood differs in the last bits and [`Ilink::check`] uses a tolerance (see
//! there).
//!
//! # Sources for the sharing
//!
//! The paper ran ILINK from FASTLINK 2.3P on the CLP pedigrees; neither is public here:
//! the pedigrees stay generated ([`generate`], 15 MB of shared data as Table 3's CLP).
//! The public code index searched for this layout holds two files of parallel FASTLINK
//! 4.1P (the TreadMarks version), found by their text; the index does not name their
//! repository, and the file names here are inferred from the contents: `commondefs.h`
//! (its globals, among them the shared `GlobalMemory` with each master's parents' and
//! child's array pointers `pgenptr`, `qgenptr`, `rgenptr` and the per-processor bounds
//! `pprocbase`/`pprocfence`, `qprocbase`/`qprocfence` into the parents'
//! nonzero-genotype lists; `arrgene`, per-processor arrays in shared memory;
//! `arrpsumcache`/`arrqsumcache`, "individual global qsumcaches that can be summed")
//! and `comlike.c` (`likelihood` and `allocgen`; in `allocgen` processor 0
//! `Tmk_malloc`s the genotype arrays of the `genbank` one by one, then `arrgene[i]`,
//! `maxfemgen` doubles for each processor `i`, one `Tmk_malloc` each, with no page
//! padding). The nuclear-family routines that write and add those arrays were not in
//! the index. So: the genotype arrays stay one shared pool; the per-processor rows are
//! unpadded and contiguous, as `arrgene`; peeling up, where each genotype of the parent
//! comes from one processor, the processors write their stripes into the shared array
//! themselves (the reading of issue 17, section 4); peeling down, where every stripe
//! adds to every genotype of the child, the master adds the rows, as Lu, Dwarkadas, Cox
//! and Zwaenepoel describe for TreadMarks ILINK ("the master sums up the contributions
//! of each of the processors", JPDC 43(2), 1997). The stripes stay round robin as that
//! paper describes; FASTLINK 4.1P's per-processor bounds (`pprocbase`/`pprocfence`, set
//! from measured row times, `rowfence`) are not followed, since the paper ran 2.3P and
//! how 2.3P divided the list is not known here.
//!
//! # Counted work
//!
//! One kind of unit ([`WORK`], `dsm::work`): a **term**, one multiply-add of the
//! peeling's inner loops, counted by [`peel::family_kernel`] after each outer genotype:
//! per nonzero genotype of each child folded, one per gamete of the outer genotype; per
//! pair of nonzero parental genotypes, one per gamete of the inner genotype for each child
//! visited (and one more per gamete peeling down); peeling down, one per outer gamete and
//! haplotype of the scatter. [`peel::combine_strided`] counts one per genotype and
//! processor row added, [`peel::rescale`] one per genotype. The sequential version counts
//! 18,425,131,166 terms at the paper's input (host 2.1 ns a term). The optimizer's own
//! arithmetic (a few hundred flops per evaluation) is not counted.
//!
//! The parallel version's total differs from the sequential one: for every family peeled
//! down in parallel the master adds `nprocs` rows, not one, and for every family peeled up
//! in parallel it adds none (the stripes are stored in place). Measured at the paper's
//! input on 8 x 4 (CSM-DMS), the processors together count 18,421,895,216 terms, 0.9998 of
//! the sequential count: the two nearly cancel. What the parallel version adds is
//! serialization, not work: the master counts 686.5 M terms against 572.1 M for the
//! average other processor (554-590 M), 114 M terms (0.6% of the total, about 1.3 s of
//! the platform's 212.7 s) that the others wait for: the families below
//! [`peel::MASTER_ALONE_WORK`], the combines and the rescales.

pub mod generate;
pub mod linkage;
pub mod model;
pub mod optimize;
pub mod parallel;
pub mod peel;

use app_common::{
    resolve_input, App, AppError, AppResult, Check, Mismatch, ParamSpec, Params, Value,
};
use linkage::{DataFile, PedFile};
use model::{Gametes, Model};
use peel::{Pedigrees, Workspace};
use std::path::{Path, PathBuf};

/// A linkage problem ready for likelihood evaluations.
#[derive(Clone, Debug)]
pub struct Problem {
    pub data: DataFile,
    pub peds: PedFile,
    pub model: Model,
    pub pedigrees: Pedigrees,
    /// Starting genotype arrays, `nperson x ngeno`.
    pub base: Vec<f64>,
}

impl Problem {
    /// Reads a DATAFILE and a PEDFILE.
    pub fn from_files(datafile: &Path, pedfile: &Path) -> Result<Problem, AppError> {
        let data = linkage::read_datafile(datafile)?;
        let peds = linkage::read_pedfile(pedfile, &data)?;
        Problem::new(pedfile, data, peds)
    }

    /// Parses LINKAGE text; the paths name the texts in messages.
    pub fn from_text(
        data_path: &Path,
        data: &str,
        ped_path: &Path,
        ped: &str,
    ) -> Result<Problem, AppError> {
        let data = linkage::parse_datafile(data_path, data)?;
        let peds = linkage::parse_pedfile(ped_path, ped, &data)?;
        Problem::new(ped_path, data, peds)
    }

    fn new(ped_path: &Path, data: DataFile, peds: PedFile) -> Result<Problem, AppError> {
        let nalleles: Vec<usize> = data
            .order
            .iter()
            .map(|&l| data.loci[l].nalleles())
            .collect();
        let model = Model::new(&nalleles);
        let pedigrees = Pedigrees::new(ped_path, &peds)?;
        let g = model.ngeno;
        let mut base = vec![0.0; peds.persons.len() * g];
        for (p, person) in peds.persons.iter().enumerate() {
            model::base_array(
                &model,
                &data,
                person,
                pedigrees.founder[p],
                &mut base[p * g..(p + 1) * g],
            );
        }
        Ok(Problem {
            data,
            peds,
            model,
            pedigrees,
            base,
        })
    }

    /// The natural log of each pedigree's likelihood at recombination fractions `thetas`.
    pub fn pedigree_ln_likelihoods(&self, thetas: &[f64], ws: &mut Workspace) -> Vec<f64> {
        let gam = Gametes::new(&self.model, thetas);
        peel::pedigree_ln_likelihoods(&self.model, &self.pedigrees, &self.base, &gam, ws)
    }

    /// `-2 ln L` at `thetas` (`+inf` where the likelihood is zero).
    pub fn neg2_ln_like(&self, thetas: &[f64], ws: &mut Workspace) -> f64 {
        -2.0 * self.pedigree_ln_likelihoods(thetas, ws).iter().sum::<f64>()
    }

    /// Bytes of shared data of the parallel version with `nprocs` processors:
    /// `genarrays`, `base` and the contribution rows.
    pub fn shared_bytes(&self, nprocs: usize) -> usize {
        let g = self.model.ngeno;
        8 * (2 * g * self.pedigrees.nperson + nprocs * g)
    }
}

/// The counted work ([`dsm::work`]): one kind, a gamete term of the peeling.
pub const WORK: &[app_common::WorkKind] = &[app_common::WorkKind {
    name: "term",
    what: "one gamete term of a family's peeling: a transmission probability times a genotype \
           weight added in (child folds, inner-parent sums, the scatter onto a child), or one \
           entry of the combine or the rescale",
    host_ns: 0.0,
    // Counted by the sequential version at the paper's input (`cashmere calibrate`).
    paper_units: 18_425_131_166,
}];

/// The maximum-likelihood estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// All recombination fractions, in chromosome order.
    pub thetas: Vec<f64>,
    pub neg2_ln_like: f64,
    pub iterations: usize,
    pub evaluations: usize,
}

/// Maximizes the likelihood over the recombination fractions flagged for iteration.
pub fn estimate(problem: &Problem) -> Result<Estimate, AppError> {
    let mut ws = Workspace::default();
    estimate_with(problem, |thetas| {
        problem.pedigree_ln_likelihoods(thetas, &mut ws)
    })
}

/// [`estimate`] with the likelihood computed by `ln_likes`, which returns the natural log
/// of each pedigree's likelihood at the given recombination fractions (all intervals, in
/// chromosome order). The sequential version peels on one processor; the parallel one
/// runs this on the master with a cluster-wide evaluation.
pub fn estimate_with(
    problem: &Problem,
    mut ln_likes: impl FnMut(&[f64]) -> Vec<f64>,
) -> Result<Estimate, AppError> {
    let start = problem.data.thetas.clone();
    let free: Vec<usize> = (0..start.len())
        .filter(|&i| problem.data.iterate[i])
        .collect();
    check_consistent(problem, &start, &mut ln_likes)?;
    let full = |x: &[f64]| {
        let mut t = start.clone();
        for (k, &i) in free.iter().enumerate() {
            t[i] = x[k];
        }
        t
    };
    let x0: Vec<f64> = free.iter().map(|&i| start[i]).collect();
    let outcome = optimize::minimize(
        |x| -2.0 * ln_likes(&full(x)).iter().sum::<f64>(),
        &x0,
        0.0,
        0.5,
        &optimize::Options::default(),
    )
    .map_err(AppError::Other)?;
    Ok(Estimate {
        thetas: full(&outcome.x),
        neg2_ln_like: outcome.f,
        iterations: outcome.iterations,
        evaluations: outcome.evaluations,
    })
}

/// A pedigree whose likelihood is zero at the starting values and at free recombination
/// has data that no genotypes explain (a Mendelian inconsistency): name it.
fn check_consistent(
    problem: &Problem,
    start: &[f64],
    ln_likes: &mut impl FnMut(&[f64]) -> Vec<f64>,
) -> Result<(), AppError> {
    let at_start = ln_likes(start);
    let Some(k) = at_start.iter().position(|l| !l.is_finite()) else {
        return Ok(());
    };
    let free = ln_likes(&vec![0.5; start.len()]);
    let ped = problem.pedigrees.ped_ids[k];
    Err(AppError::Other(if free[k].is_finite() {
        format!(
            "the likelihood of pedigree {ped} is zero at the starting recombination values {start:?}; \
             start from larger values"
        )
    } else {
        format!("pedigree {ped} has a likelihood of zero for any recombination: its phenotypes are inconsistent with Mendelian inheritance")
    }))
}

/// The ILINK application.
#[derive(Debug)]
pub struct Ilink;

/// The instance the harness registers.
pub static ILINK: Ilink = Ilink;

const GENERATE: &str = "generate";

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "datafile",
        help:
            "LINKAGE DATAFILE (relative to the data directory), or `generate` for a generated study",
        defaults: ["ilink/ilink_example_datafile.dat", GENERATE, GENERATE],
    },
    ParamSpec {
        name: "pedfile",
        help: "LINKAGE PEDFILE (relative to the data directory); ignored when generating",
        defaults: ["ilink/ilink_example_pedfile.dat", GENERATE, GENERATE],
    },
    ParamSpec {
        name: "pedigrees",
        help: "generated: number of three-generation pedigrees",
        defaults: ["2", "5", "38"],
    },
    ParamSpec {
        name: "sibship",
        help: "generated: children per nuclear family",
        defaults: ["4", "5", "5"],
    },
    ParamSpec {
        name: "alleles",
        help: "generated: alleles per marker locus",
        defaults: ["3", "5", "5"],
    },
    ParamSpec {
        name: "markers",
        help: "generated: marker loci besides the disease locus",
        defaults: ["2", "2", "2"],
    },
    ParamSpec {
        name: "seed",
        help: "generated: random seed",
        defaults: ["1", "1", "1"],
    },
];

impl Ilink {
    /// The problem the parameters describe (files, or a generated study).
    pub fn problem(&self, params: &Params) -> Result<Problem, AppError> {
        let datafile = params.str("datafile")?;
        if datafile == GENERATE {
            let spec = generate::Spec {
                pedigrees: params.get_in("pedigrees", 1, 100_000)?,
                sibship: params.get_in("sibship", 1, 50)?,
                alleles: params.get_in("alleles", 2, 12)?,
                markers: params.get_in("markers", 1, 4)?,
                seed: params.get("seed")?,
            };
            let (data, ped) = generate::linkage_files(&spec);
            let name =
                |what: &str| PathBuf::from(format!("<generated {what}, seed {}>", spec.seed));
            return Problem::from_text(&name("datafile"), &data, &name("pedfile"), &ped);
        }
        let pedfile = params.str("pedfile")?;
        if pedfile == GENERATE {
            return Err(AppError::BadParam {
                name: "pedfile".into(),
                value: pedfile.into(),
                why: "a PEDFILE is needed when `datafile` names a file".into(),
            });
        }
        Problem::from_files(&resolve_input(datafile), &resolve_input(pedfile))
    }
}

impl App for Ilink {
    fn name(&self) -> &'static str {
        "ilink"
    }

    fn description(&self) -> &'static str {
        "FASTLINK ILINK: maximum-likelihood recombination fractions by Elston-Stewart peeling of LINKAGE pedigrees"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        if params.str("datafile")? != GENERATE {
            // Files are bounded by the input size limit; their data is of that order.
            return Ok(0);
        }
        let pedigrees = params.get_in::<u64>("pedigrees", 1, 100_000)?;
        let sibship = params.get_in::<u64>("sibship", 1, 50)?;
        let alleles = params.get_in::<u64>("alleles", 2, 12)?;
        let markers = params.get_in::<u64>("markers", 1, 4)?;
        // Per person and locus, genotype probabilities over allele pairs.
        Ok(pedigrees * (sibship + 2) * alleles * alleles * (markers + 1) * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let problem = self.problem(params)?;
        // Timed as the parallel run: the estimate, not building the problem.
        app_common::timing::start();
        let est = estimate(&problem);
        app_common::timing::stop();
        let est = est?;
        Ok(AppResult::new()
            .with("thetas", Value::F64s(est.thetas))
            .f64("neg2_ln_like", est.neg2_ln_like))
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        parallel::run_parallel(&self.problem(params)?, config)
    }

    /// The parallel likelihood differs from the sequential one only in the order in which
    /// peeling-down terms are added (see the crate documentation): a relative difference
    /// of order 1e-15 per evaluation. Perturbing every evaluation by 4e-15 relative moves
    /// the estimate by about 1e-9 and `-2 ln L` by about 2e-14 relative (measured on the
    /// test and small sizes). The thetas are checked to 1e-5 absolute (relative with floor
    /// 1; they lie in [0, 0.5]): the optimizer stops when the projected gradient is below
    /// 1e-5, so the stopping point is determined to within `1e-5 / curvature`, and the
    /// curvature of `-2 ln L` in a theta is above 1 for any informative data (about 600 on
    /// the example). `neg2_ln_like` is checked to 1e-10 relative: at the optimum the
    /// function is flat, so a theta difference `d` changes it by `curvature d^2 / 2`, at
    /// most 5e-11 for `d = 1e-5` and curvature 1, below 1e-10 of any `-2 ln L` above 1.
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        Check::new(sequential, parallel)
            .relative("thetas", 1e-5, 1.0)?
            .relative("neg2_ln_like", 1e-10, 1.0)?
            .done()
    }
}
