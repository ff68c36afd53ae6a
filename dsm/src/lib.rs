//! cashmere's `dsm` crate: a Cashmere-style software distributed shared memory.
//!
//! # Memory ordering
//!
//! Programs must be data-race-free: conflicting accesses are ordered by the DSM's locks,
//! barriers and flags, which make writes visible as follows (release consistency).
//!
//! * [`Lock::release`] completes a release (every write of this node is at its home and
//!   noticed) before the lock can be granted; [`Lock::acquire`] performs an acquire
//!   (pages named by received notices are invalidated) after the grant. So a processor
//!   that acquires a lock sees every write made before the previous holder released it.
//! * [`Barrier::wait`] is a release by every node followed by an acquire by every node:
//!   after it, every processor sees every write made before any processor arrived.
//! * [`Flag::set`] releases, then sets; [`Flag::wait`] returns after the flag is set and
//!   an acquire: the waiter sees every write made before the set.
//!
//! # Layers
//!
//! Every module imports only from the modules below it (`tests/layers.rs` checks the
//! code against this list; comments may point anywhere). Bottom up:
//!
//! 1. **The host door and plain data**: `sys` (the only door to the operating system),
//!    `ids` (`PageId`, `NodeId`, [`MAX_NODES`]), [`profile`] (networks as data),
//!    [`platform`] (host costs and paper times as data), `testing`.
//! 2. **The cluster's control block**: `control` (abort flag, first failure, doorbells,
//!    node status, heartbeats), in shared memory, known to every layer above.
//! 3. **Time**: `sched` (the modeled clock: an event queue and activities), `wait` (the
//!    one place where a thread blocks), [`work`] (counted computation), `stats` (the
//!    per-processor clock). They know neither the network nor the launcher.
//! 4. **The network**: `net` (the node's handle `Net` over the transport seam
//!    `net::Transport`; the simulated Memory Channel behind it, and `net::timing`, its
//!    timing model under the modeled clock; with the `mpi` feature, the MPI transport).
//! 5. **The launcher**: `launch` (clusters of nodes as threads, processes, or, with the
//!    `mpi` feature, MPI ranks).
//! 6. **The protocol's data**: `page`, `diff`, `wire` (the message codec), `directory`,
//!    `broadcast`.
//! 7. **Configuration**: `error` ([`DsmError`], the errors a user gets), `config`
//!    (checked against the network and the protocol's sizes).
//! 8. **Strategies and engine**: `fault`, `sync`, `engine`.
//! 9. **The public API**: [`host`] (what programs need from the host), `api` (clusters,
//!    processors, locks, barriers, flags, reports), [`netbench`] (the simulated network's
//!    own figures, for `cashmere bench net` and `benches/net.rs`) and this file's
//!    re-exports. The network and the launcher are not public: a program reaches them
//!    only through these.

mod api;
mod broadcast;
mod config;
mod control;
mod diff;
mod directory;
mod engine;
mod error;
mod fault;
pub mod host;
mod ids;
mod launch;
mod net;
pub mod netbench;
mod page;
mod sched;
pub mod platform;
pub mod profile;
mod stats;
mod sync;
mod sys;
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
pub use error::DsmError;
pub use ids::{NodeId, NodeSet};
pub use config::{
    kb_to_bytes, mib_to_bytes, parse_seconds, ClockMode, Compute, Config, DataStrategy, FaultBackend,
    HomePolicy, MetadataStrategy, Pinning, Protocol, SyncStrategy, TestKnobs, DEFAULT_STALL_TIMEOUT,
    MAX_HEAP_BYTES,
};
pub use launch::{skip_other_run, ExecMode, LaunchError, OtherRun};
pub use net::{NetError, MAX_NODES};
pub use sync::SyncError;
pub use sched::{WakeJitter, MAX_VIRTUAL_NS};
pub use stats::{Breakdown, Counters, Timed};

