//! The one door to the operating system. Every call into libc or nix lives here:
//! memfd, shared and private mappings, mprotect, futexes on shared memory, signal handlers
//! with alternate stacks, userfaultfd, and re-executing this binary as a node process.
//!
//! Everything above this module is safe Rust. Each `unsafe` block states why it is sound.
//!
//! The door is split by concern into the files below; this file re-exports what the rest
//! of the crate uses, which names it `sys::X` whichever file holds it:
//!
//! * `memory`: memfds, reserved and shared mappings, protections, populating page tables,
//!   the host's memory limits.
//! * `futex`: futex wait and wake on words in shared memory.
//! * `signals`: the SIGSEGV/SIGBUS fault handler and its registered ranges, alternate
//!   signal stacks, the measured cost of a fault, SIGPIPE's disposition, lines to standard
//!   error written whole.
//! * `userfaultfd` (cargo feature `userfaultfd`): heap views registered with userfaultfd.
//! * `processes`: node processes (spawn, wait, kill, pidfds), signals to processes, exit
//!   hooks.
//! * `cpu`: clocks, floating-point mode, CPU placement and scheduling policy.
//! * `files`: bounded reads of regular files and advisory file locks.

mod cpu;
mod files;
mod futex;
mod memory;
mod processes;
mod signals;
mod slab;
#[cfg(feature = "userfaultfd")]
mod userfaultfd;

#[cfg(feature = "mpi")]
pub use cpu::set_timer_slack_ns;
pub use cpu::{
    allowed_cpus, batch_scheduling, bind_thread, current_cpu, flush_denormals, monotonic_ns,
    pin_thread, set_flush_denormals, thread_cpu_ns, thread_id, FlushGuard,
};
pub use files::{
    lock_file, read_regular_file, read_regular_text, try_lock_file, FileLock, ReadError,
};
pub use futex::{futex_wait, futex_wake};
pub use memory::{
    adopt_fd, map_shared, map_shared_fixed_noreplace, max_map_count, memfd_create,
    one_area_per_page, populate_shared, protect, reserve, total_memory_bytes, Mapping, Prot,
    ENOMEM,
};
#[cfg(feature = "mpi")]
pub use processes::at_exit;
pub use processes::{
    die_with_parent, kill_process, process_exists, raise_kill, raise_stop, signal_name,
    spawn_node_process, terminate_process, wait_node_processes, wait_process_gone, ExecState,
    NodeProcess,
};
pub use slab::{Slab, Slot};
pub use signals::{
    default_sigpipe, drop_alt_stack, ensure_alt_stack, fatal, fault_delivery_ns,
    fault_round_trips_ns, fault_round_trips_within_ns, register_fault_range, report,
    take_fault_delivered, FaultAccess,
};
#[cfg(feature = "userfaultfd")]
pub use userfaultfd::UffdView;

/// The host's page size in bytes.
pub fn host_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}
