//! The engine's locking rules, asserted on every thread (see the module doc of
//! [`super`]):
//!
//! * a message handler never sends a request (it replies, or sends one-way messages), so
//!   no handler ever waits for another node;
//! * a processor waits on the network while holding a page lock only for a page this node
//!   is not the home of, so the home's own lock holders never wait on the network and a
//!   request deferred at the home is retried in bounded time;
//! * a processor holds at most one page lock (handlers that run while it waits may take
//!   others, only with `try_lock`).
//!
//! Each thread keeps the pages whose locks it holds and whether it is inside a handler.

use crate::ids::{NodeId, PageId};
use std::cell::{Cell, RefCell};

thread_local! {
    static HELD: RefCell<Vec<PageId>> = const { RefCell::new(Vec::new()) };
    static IN_HANDLER: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread took page `p`'s lock; `processor` if it may wait for it (not a
/// handler's `try_lock`).
pub(super) fn locked(p: PageId, processor: bool) {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        if processor {
            assert!(
                h.is_empty() || IN_HANDLER.with(Cell::get) > 0,
                "a processor took the lock of {p} while holding page {:?}'s",
                h.first()
            );
        }
        h.push(p);
    });
}

/// The calling thread released page `p`'s lock.
pub(super) fn unlocked(p: PageId) {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let at = h
            .iter()
            .rposition(|&q| q == p)
            .expect("unlocking a page lock not held");
        h.remove(at);
    });
}

/// Runs a message handler.
pub(super) fn in_handler<T>(f: impl FnOnce() -> T) -> T {
    IN_HANDLER.with(|c| c.set(c.get() + 1));
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_HANDLER.with(|c| c.set(c.get() - 1));
        }
    }
    let _leave = Leave;
    f()
}

/// Checks, before a request, that the calling thread may wait on the network: it is not in
/// a handler, and holds no lock of a page `is_home` says this node is the home of.
pub(super) fn check_may_wait_on_network(me: NodeId, is_home: impl Fn(PageId) -> bool) {
    assert!(
        IN_HANDLER.with(Cell::get) == 0,
        "{me}: a message handler sent a request"
    );
    HELD.with(|h| {
        for &p in h.borrow().iter() {
            assert!(
                !is_home(p),
                "{me}: a processor waits on the network holding the lock of {p}, which this node is the home of"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "a message handler sent a request")]
    fn a_handler_may_not_send_a_request() {
        in_handler(|| check_may_wait_on_network(NodeId(0), |_| false));
    }

    #[test]
    #[should_panic(expected = "which this node is the home of")]
    fn a_processor_may_not_wait_holding_a_home_page() {
        locked(PageId(7), true);
        check_may_wait_on_network(NodeId(0), |p| p == PageId(7));
    }

    #[test]
    fn a_processor_may_wait_holding_a_page_homed_elsewhere() {
        locked(PageId(7), true);
        check_may_wait_on_network(NodeId(0), |p| p == PageId(8));
        unlocked(PageId(7));
        HELD.with(|h| assert!(h.borrow().is_empty()));
    }

    #[test]
    #[should_panic(expected = "while holding page")]
    fn a_processor_holds_one_page_lock() {
        locked(PageId(1), true);
        locked(PageId(2), true);
    }

    #[test]
    fn a_handler_may_try_a_second_page() {
        locked(PageId(1), true);
        in_handler(|| {
            locked(PageId(2), true);
            unlocked(PageId(2));
        });
        unlocked(PageId(1));
    }
}
