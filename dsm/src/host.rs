//! What a program, or a harness that runs programs, needs from the host: clocks, files,
//! CPUs, child processes and the launcher's view of this process. Everything here goes
//! through the crate's one door to the operating system (`sys`); the door itself is not
//! public.

pub use crate::launch::{check_environment, is_node_process, mpi_rank};
pub use crate::sys::{
    allowed_cpus, current_cpu, default_sigpipe, die_with_parent, fault_round_trips_ns,
    fault_round_trips_within_ns, flush_denormals, lock_file, monotonic_ns, pin_thread,
    read_regular_file, read_regular_text, report, thread_cpu_ns, total_memory_bytes,
    try_lock_file, wait_process_gone, FileLock, FlushGuard, ReadError,
};
