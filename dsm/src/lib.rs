//! cashmere's `dsm` crate: a Cashmere-style software distributed shared memory.
//!
//! # Layers
//!
//! Every module imports only from the modules below it (`tests/layers.rs` checks the
//! code against this list; comments may point anywhere). Bottom up:
//!
//! 1. **The host door and plain data**: [`sys`] (the only door to the operating system),
//!    `ids` (`PageId`, `NodeId`, [`net::MAX_NODES`]), [`profile`] (networks as data),
//!    [`platform`] (host costs and paper times as data), `testing`.
//! 2. **The cluster's control block**: `control` (abort flag, first failure, doorbells,
//!    node status, heartbeats), in shared memory, known to every layer above.
//! 3. **Time**: `sched` (the modeled clock: an event queue and activities), `wait` (the
//!    one place where a thread blocks), [`work`] (counted computation), [`stats`] (the
//!    per-processor clock). They know neither the network nor the launcher.
//! 4. **The network**: [`net`] (a simulated Memory Channel; `net::timing`, its timing
//!    model under the modeled clock).
//! 5. **The launcher**: [`launch`] (clusters of nodes as threads or processes).
//! 6. **The protocol's data**: `page`, [`diff`], `wire` (the message codec), `directory`,
//!    `broadcast`.
//! 7. **Configuration**: `config` (checked against the network and the protocol's sizes).
//! 8. **Strategies and engine**: `fault`, [`sync`], `engine`.
//! 9. **The public API**: `api` and this file's re-exports.

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
pub use launch::{skip_other_run, ExecMode, OtherRun};
pub use sched::MAX_VIRTUAL_NS;
pub use stats::{Breakdown, Counters, Timed};

