//! cashmere's `dsm` crate: a Cashmere-style software distributed shared memory.
//!
//! Layers, bottom up: [`sys`] (the only door to the operating system), [`net`] (a
//! simulated Memory Channel network), [`launch`] (clusters of nodes as threads or
//! processes).

pub mod launch;
pub mod net;
pub mod sys;

/// The message every runtime wait gives when another node of the cluster failed.
pub const ABORT_MESSAGE: &str = "cluster aborted: another node failed (see the launcher's error for which and why)";
