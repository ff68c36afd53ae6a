//! What every cashmere application shares: input sizes, named parameters, result
//! summaries, the checker that compares a parallel result with the sequential one, and
//! deterministic random-number generators that reproduce the originals' inputs.
//!
//! An application is a type implementing [`App`]. Its sequential version links no DSM code
//! (it is the speedup baseline); its parallel version runs on the public `dsm` API.

mod params;
mod result;
pub mod rng;
pub mod timing;
pub mod work;

pub use params::{ParamSpec, Params, Size};
pub use result::{AppResult, Check, Mismatch, Value};
pub use work::WorkKind;

/// Splits a run's report into processor 0's result and a report without results, the way
/// every app returns from [`App::parallel`]. Processor 0 must return `Some(result)`.
pub fn split_report(
    report: dsm::Report<Option<AppResult>>,
) -> Result<(AppResult, dsm::Report<()>), AppError> {
    let (results, report) = report.take_results();
    let first = results.into_iter().next().flatten();
    first
        .map(|r| (r, report))
        .ok_or_else(|| AppError::Other("processor 0 returned no result".into()))
}

use std::path::PathBuf;

/// Errors an application reports to the user. Every message says what went wrong and,
/// where it can, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("unknown parameter `{name}` for {app}; valid parameters: {valid}")]
    UnknownParam {
        app: String,
        name: String,
        valid: String,
    },
    #[error("parameter `{name}` = `{value}` is not valid: {why}")]
    BadParam {
        name: String,
        value: String,
        why: String,
    },
    #[error("cannot read input file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed input {path}, line {line}: {why}")]
    Malformed {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("input file {path} is not usable: {why}")]
    BadInput { path: PathBuf, why: String },
    #[error("{0}")]
    Other(String),
    #[error(transparent)]
    Dsm(#[from] dsm::DsmError),
}

/// A node process's cluster run before the one it serves: skip it (`dsm::skip_other_run`).
impl dsm::OtherRun for AppError {
    fn is_other_run(&self) -> bool {
        matches!(self, AppError::Dsm(e) if dsm::OtherRun::is_other_run(e))
    }
}

/// The cluster configuration the application tests use: `nodes` x `procs` under
/// `protocol` in `mode`, with a 64 MiB heap and the other defaults of [`dsm::Config::new`].
pub fn test_config(
    protocol: dsm::Protocol,
    nodes: usize,
    procs: usize,
    mode: dsm::ExecMode,
) -> dsm::Config {
    let mut c = dsm::Config::new(nodes, procs, protocol);
    c.heap_bytes = 64 << 20;
    c.mode = mode;
    c
}

/// The directory holding the shipped input data (TSP instances, the water deck,
/// the LINKAGE example). `CASHMERE_DATA` overrides the built-in location.
pub fn data_dir() -> PathBuf {
    match std::env::var_os("CASHMERE_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data")),
    }
}

/// Resolves an input path: absolute or relative to the working directory if that file
/// exists, otherwise relative to [`data_dir`] if it exists there; a path found in neither
/// place is kept as given, so that an error names the path the user wrote.
pub fn resolve_input(path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    if p.is_absolute() || p.exists() {
        return p;
    }
    let shipped = data_dir().join(&p);
    if shipped.exists() {
        shipped
    } else {
        p
    }
}

/// The largest input file an application reads: far above every shipped or published
/// input, and small enough to read into memory at once.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Reads an input file as text. Only regular files of at most [`MAX_INPUT_BYTES`] are
/// read (a device such as `/dev/zero` or a FIFO could be read without end).
pub fn read_input(path: &std::path::Path) -> Result<String, AppError> {
    dsm::host::read_regular_text(path, MAX_INPUT_BYTES).map_err(|e| match e {
        dsm::host::ReadError::Io(source) if source.kind() != std::io::ErrorKind::InvalidData => {
            AppError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
        dsm::host::ReadError::NotRegular => AppError::BadInput {
            path: path.to_path_buf(),
            why: format!("{e}; give the path of an input file"),
        },
        dsm::host::ReadError::TooLarge { .. } => AppError::BadInput {
            path: path.to_path_buf(),
            why: format!("{e} for input files; inputs of this size are not supported"),
        },
        dsm::host::ReadError::Io(_) => AppError::BadInput {
            path: path.to_path_buf(),
            why: e.to_string(),
        },
    })
}

/// One application of the suite, as the harness sees it.
pub trait App: Sync {
    /// Short name used on the command line (`sor`, `lu`, `water-nsq`, ...).
    fn name(&self) -> &'static str;
    /// One line saying what the application computes and where it comes from.
    fn description(&self) -> &'static str;
    /// The parameters with their defaults for each size.
    fn params(&self) -> &'static [ParamSpec];
    /// Bytes of the app's main data set under `params` (one copy), estimated from below,
    /// so that a run that cannot fit this machine's memory is refused before it allocates.
    fn data_bytes(&self, params: &Params) -> Result<u64, AppError>;
    /// What makes the data set under `params` large, when a parameter other than the
    /// input's size does (Water-spatial's cell grid): added to the message that refuses
    /// a data set that cannot fit.
    fn data_note(&self, _params: &Params) -> Option<String> {
        None
    }
    /// Runs the sequential version, which links no DSM code. It marks its timed region
    /// ([`timing::start`], [`timing::stop`]) where the parallel version's processors mark
    /// theirs, so that the speedup compares the same part of both runs.
    fn sequential(&self, params: &Params) -> Result<AppResult, AppError>;
    /// Runs the parallel version on a DSM cluster configured by `config`; returns the
    /// result summary and the run's report (times and counters). Its processors mark the
    /// timed region (`dsm::Proc::start_timing`) that SPLASH-2's programs time: after the
    /// barrier that ends initialization, to the computation's last barrier.
    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError>;
    /// Compares a parallel result with the sequential one: exact where the arithmetic is
    /// the same, within a stated tolerance where the order of summation differs.
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch>;
    /// The kinds of unit the app counts its computation in (`dsm::work`, [`work`]), in
    /// kind order; empty if it counts none (the modeled clock then measures its CPU time).
    fn work(&self) -> &'static [WorkKind] {
        &[]
    }
    /// Why the parallel version counts more work than the sequential one, where it does
    /// by design (a search that explores in another order, a tree built by every
    /// processor): one phrase, which the table prints beside the figure.
    fn extra_work(&self) -> Option<&'static str> {
        None
    }
}
