//! Test-only hooks: points in the engine where a test may hold a thread, so that a race
//! window opens every time rather than when the host happens to deschedule a thread. A
//! hook runs on the engine's own thread inside the fault path, in the process that set it
//! (in-process clusters: `ExecMode::Threads`); programs have no use for them. Also the
//! host calls by which a test makes a node process stop or die, or checks that it is gone.

pub use crate::sys::{process_exists, raise_kill, raise_stop};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// A hook called with (node, page).
pub type PageHook = fn(usize, usize);

static CLAIM_ARMED: AtomicBool = AtomicBool::new(false);
static CLAIM_HOOK: RwLock<Option<PageHook>> = RwLock::new(None);

/// Sets (or with `None` clears) the hook that a node's processor calls when it is about
/// to claim a page by first touch (it found no home for the page and is about to ask the
/// page's manager), with the node and the page. The hook may block: the claim waits.
pub fn set_claim_hook(hook: Option<PageHook>) {
    *CLAIM_HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
    CLAIM_ARMED.store(hook.is_some(), Ordering::Release);
}

/// Called by the engine before it claims `page` for `node`.
pub(crate) fn claiming(node: usize, page: u32) {
    if !CLAIM_ARMED.load(Ordering::Acquire) {
        return;
    }
    let hook = *CLAIM_HOOK.read().unwrap_or_else(|e| e.into_inner());
    if let Some(hook) = hook {
        hook(node, page as usize);
    }
}
