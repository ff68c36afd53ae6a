//! Test-only hooks: points in the engine where a test may hold a thread, so that a race
//! window opens every time rather than when the host happens to deschedule a thread. A
//! hook runs on the engine's own thread inside the fault path, in the process that set it
//! (in-process clusters: `ExecMode::Threads`); programs have no use for them. Also the
//! host calls by which a test makes a node process stop or die, or checks that it is gone.

pub use crate::sys::{process_exists, raise_kill, raise_stop};

use crate::ids::{NodeId, PageId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// A hook called with (node, page).
pub type PageHook = fn(usize, usize);

/// One hook point: unarmed, it costs the engine one atomic load.
struct Hook {
    armed: AtomicBool,
    hook: RwLock<Option<PageHook>>,
}

impl Hook {
    const fn new() -> Hook {
        Hook {
            armed: AtomicBool::new(false),
            hook: RwLock::new(None),
        }
    }

    fn set(&self, hook: Option<PageHook>) {
        *self.hook.write().unwrap_or_else(|e| e.into_inner()) = hook;
        self.armed.store(hook.is_some(), Ordering::Release);
    }

    fn call(&self, node: NodeId, page: PageId) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        let hook = *self.hook.read().unwrap_or_else(|e| e.into_inner());
        if let Some(hook) = hook {
            hook(node.index(), page.index());
        }
    }
}

static CLAIM: Hook = Hook::new();
static HOLDER: Hook = Hook::new();
static RECALL_WAIT: Hook = Hook::new();

/// Sets (or with `None` clears) the hook that a node's processor calls when it is about
/// to claim a page by first touch (it found no home for the page and is about to ask the
/// page's manager), with the node and the page. The hook may block: the claim waits.
pub fn set_claim_hook(hook: Option<PageHook>) {
    CLAIM.set(hook);
}

/// Called by the engine before it claims `page` for `node`.
pub(crate) fn claiming(node: NodeId, page: PageId) {
    CLAIM.call(node, page);
}

/// Sets (or clears) the hook that a node's processor calls when the home has answered its
/// fetch with the page's exclusive holder, before it sends the holder its recall (exclusive
/// mode away from the home, `engine/service.rs`). The hook may block: the recall waits, and
/// the home holds the page as being recalled.
pub fn set_holder_hook(hook: Option<PageHook>) {
    HOLDER.set(hook);
}

/// Called by the engine when `node` is told the holder of `page`, before it recalls it.
pub(crate) fn told_holder(node: NodeId, page: PageId) {
    HOLDER.call(node, page);
}

/// Sets (or clears) the hook that a processor of a page's home calls when it finds a recall
/// of the page under way (by another node or another processor of its own), after it let
/// go of the page's lock and before it waits for the recall to end. The hook may block:
/// the processor looks at the page only once it returns, whatever happened meanwhile.
pub fn set_recall_wait_hook(hook: Option<PageHook>) {
    RECALL_WAIT.set(hook);
}

/// Called by the engine before a home processor of `node` waits for a recall of `page`.
pub(crate) fn waiting_for_recall(node: NodeId, page: PageId) {
    RECALL_WAIT.call(node, page);
}

/// Runs `cmd` to its end and collects its output, as `Command::output` does, but for at
/// most `limit`: a command still running then gets SIGTERM (mpirun passes it to its ranks),
/// and SIGKILL five seconds later, and the result is `Err` saying so, with what it had
/// printed. Tests that start a whole job (`mpirun`) use it, so that a job that hangs
/// fails its test instead of hanging the suite. The limit is a deadline, not a wait for
/// anything: a job that ends sooner returns at once.
pub fn output_within(
    mut cmd: std::process::Command,
    limit: std::time::Duration,
) -> std::io::Result<Result<std::process::Output, String>> {
    use std::process::Stdio;
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let pid = child.id();
    let (done, ended) = channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if ended.recv_timeout(limit) != Err(RecvTimeoutError::Timeout) {
            return false;
        }
        crate::sys::terminate_process(pid);
        if ended.recv_timeout(std::time::Duration::from_secs(5)) == Err(RecvTimeoutError::Timeout) {
            crate::sys::kill_process(pid);
        }
        true
    });
    let out = child.wait_with_output();
    drop(done);
    let timed_out = watchdog.join().expect("the watchdog does not panic");
    let out = out?;
    Ok(if timed_out {
        Err(format!(
            "still running after {limit:?}, so it was stopped (SIGTERM); status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    } else {
        Ok(out)
    })
}

/// SplitMix64 (Steele, Lea and Flood's generator, as in `java.util.SplittableRandom`):
/// the tests' reproducible random numbers, the same sequence for the same seed everywhere.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (at least 1).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
