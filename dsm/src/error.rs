//! The errors a user of the DSM can get ([`DsmError`]), in one place: the configuration's
//! checks, a cluster's run and the homes file return them. Every message says what
//! happened and what to do.

use crate::launch::OtherRun;
use std::path::PathBuf;

/// The errors a user of the DSM can get. Every message says what happened and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DsmError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{protocol} needs {missing} from the network, which {network} does not have; choose a protocol that uses explicit messages for that (for example CSM-None) or another network")]
    MissingFeatures {
        protocol: String,
        missing: String,
        network: String,
    },
    #[error("{protocol} is not available: {why}")]
    Unsupported { protocol: String, why: String },
    #[error("data set of {data_mib:.1} MiB does not fit the network address space of {network} ({space_mib} MiB); {protocol} places all shared data there; use CSM-MS or CSM-None, or a smaller input")]
    DataSetTooLarge {
        data_mib: f64,
        space_mib: u64,
        network: String,
        protocol: String,
    },
    #[error("shared allocations of {wanted} bytes ({wanted_mib} MiB) exceed the heap of {heap} bytes ({heap_mib} MiB); raise the heap size: `--heap-mb {wanted_mib}` on the command line, DSM_HEAP_MB={wanted_mib} in the environment, or Config::heap_bytes in a program", wanted_mib = wanted.div_ceil(1 << 20), heap_mib = heap >> 20)]
    HeapExhausted { wanted: usize, heap: usize },
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error("homes file {path}: {why}")]
    HomesFile { path: PathBuf, why: String },
    #[error("a node's result could not be decoded: {0}; a result that holds NaN or an infinity (a computation that overflowed: check the run's parameters) is written as null and cannot be read back")]
    Result(String),
    #[error("the program marked its timed region on {marked} of {procs} processors (not on processor(s) {missing}): every processor must call Proc::start_timing and Proc::stop_timing, or none")]
    PartlyTimed {
        marked: usize,
        procs: usize,
        missing: String,
    },
}

/// A node process's run before the one it serves (see [`crate::launch::skip_other_run`]).
impl OtherRun for DsmError {
    fn is_other_run(&self) -> bool {
        matches!(self, DsmError::Launch(e) if e.is_other_run())
    }
}

