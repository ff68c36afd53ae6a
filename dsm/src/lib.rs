//! cashmere's `dsm` crate: a Cashmere-style software distributed shared memory.
//!
//! Layers, bottom up: [`sys`] (the only door to the operating system), [`net`] (a
//! simulated Memory Channel network), [`launch`] (clusters of nodes as threads or
//! processes). `wait` is the one place where any of them blocks a thread.

mod api;
mod broadcast;
mod config;
mod control;
pub mod diff;
mod directory;
mod engine;
mod fault;
mod ids;
pub mod launch;
pub mod net;
mod page;
mod sched;
pub mod platform;
pub mod profile;
pub mod stats;
pub mod sync;
pub mod sys;
#[doc(hidden)]
pub mod testing;
mod wait;
mod wire;
pub mod work;

pub use api::{
    Barrier, Cluster, Flag, Lock, LockGuard, Plain, Proc, ProcReport, Report, Setup, Shared,
    MAX_HOMES_FILE_BYTES,
};
pub use control::ABORT_MESSAGE;
pub use config::{
    kb_to_bytes, mib_to_bytes, parse_seconds, ClockMode, Compute, Config, DataStrategy, DsmError, FaultBackend,
    HomePolicy, MetadataStrategy, Protocol, SyncStrategy, TestKnobs, DEFAULT_STALL_TIMEOUT,
    MAX_HEAP_BYTES,
};
pub use launch::ExecMode;
pub use sched::MAX_VIRTUAL_NS;
pub use stats::{Breakdown, Counters, Timed};

