//! Synchronization over explicit messages (CSM-None): the paper's section 2.3.4.
//!
//! Each object has a manager node, its number modulo the node count. The manager grants
//! locks in request order, counts barrier arrivals (one per node: the last processor of
//! each node to arrive acts for it) and records flags. A processor asks its manager with a
//! request and waits, through its node's seam, for the reply that grants what it asked;
//! a lock release is a one-way message. The manager's side runs where the node's messages
//! are served and never waits: a grant is a reply written into the waiter's mailbox.
//!
//! # Memory ordering
//!
//! Each node's ring to the manager is FIFO, and a reply is written after the manager
//! handled every earlier message from the requester: a release's `LOCK_REL` reaches the
//! manager before any later request of the same node, and a grant follows the release it
//! succeeds. The release and acquire around each operation (`super`) carry the data.

use super::{request, SyncHost};
use crate::ids::NodeId;
use crate::net::Inbound;
use crate::wire::{Msg, Reply};
use std::collections::VecDeque;
use std::sync::Mutex;

/// A waiting requester: node, mailbox slot, request token.
type Waiter = (NodeId, u16, u32);

/// What a manager knows of the objects it manages.
#[derive(Default)]
struct Objects {
    /// Held, and the requests waiting for it in arrival order.
    locks: Vec<(bool, VecDeque<Waiter>)>,
    /// The nodes arrived at each barrier this round.
    barriers: Vec<Vec<Waiter>>,
    /// Set, and the waiters to grant when it is.
    flags: Vec<(bool, Vec<Waiter>)>,
}

/// The manager's state. The mutex guards a short critical section that never waits (and
/// is never contended: one thread at a time polls a node's messages).
pub(crate) struct Managed {
    objects: Mutex<Objects>,
}

/// The manager node of object `id` (module doc).
fn manager<H: SyncHost + ?Sized>(host: &H, id: usize) -> NodeId {
    NodeId::from_usize(id % host.nodes())
}

/// Sends `msg` to `to` and waits for the grant.
fn ask<H: SyncHost + ?Sized>(host: &H, to: NodeId, msg: Msg<'_>) {
    let mut payload = Vec::new();
    msg.encode(&mut payload);
    request(host, to, msg.kind(), &payload);
}

impl Managed {
    pub(crate) fn new(nlocks: usize, nbarriers: usize, nflags: usize) -> Managed {
        Managed {
            objects: Mutex::new(Objects {
                locks: (0..nlocks).map(|_| (false, VecDeque::new())).collect(),
                barriers: (0..nbarriers).map(|_| Vec::new()).collect(),
                flags: (0..nflags).map(|_| (false, Vec::new())).collect(),
            }),
        }
    }

    pub(crate) fn lock_acquire<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        // Modeled time: the requester's local step (as the Memory Channel lock's).
        crate::sched::charge_cost("host.local_sync_ns", |h, _| h.local_sync_ns as f64);
        ask(
            host,
            manager(host, lock),
            Msg::LockAcquire { lock: lock as u32 },
        );
    }

    pub(crate) fn lock_release<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        let msg = Msg::LockRelease { lock: lock as u32 };
        let mut payload = Vec::new();
        msg.encode(&mut payload);
        host.net()
            .send_via(
                &host.seam(),
                manager(host, lock),
                msg.kind(),
                host.slot(),
                0,
                &payload,
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// This node's arrival at barrier `b`, round `epoch`; returns when every node arrived.
    pub(crate) fn barrier<H: SyncHost + ?Sized>(&self, host: &H, b: usize, epoch: u64) {
        let msg = Msg::Barrier {
            barrier: b as u32,
            epoch,
        };
        ask(host, manager(host, b), msg);
    }

    pub(crate) fn flag_set<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        ask(host, manager(host, f), Msg::FlagSet { flag: f as u32 });
    }

    pub(crate) fn flag_wait<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        ask(host, manager(host, f), Msg::FlagWait { flag: f as u32 });
    }

    /// The manager's side: handles one synchronization message.
    pub(crate) fn handle<H: SyncHost + ?Sized>(&self, host: &H, m: &Inbound<'_>) {
        let msg = Msg::decode(m.kind, m.payload)
            .unwrap_or_else(|e| panic!("malformed synchronization message from {}: {e}", m.from));
        let me: Waiter = (m.from, m.slot, m.token);
        let grant = |w: Waiter| {
            host.net()
                .reply(w.0, w.1, w.2, Reply::ACK_BYTES)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut g = self.objects.lock().expect("poisoned");
        if matches!(msg, Msg::LockAcquire { .. }) {
            // Modeled time: the manager's step on its lock record.
            crate::sched::charge_cost("host.local_sync_ns", |h, _| h.local_sync_ns as f64);
        }
        match msg {
            Msg::LockAcquire { lock } => {
                let (held, queue) = object(&mut g.locks, "lock", lock, m.from);
                if *held {
                    queue.push_back(me);
                } else {
                    *held = true;
                    grant(me);
                }
            }
            Msg::LockRelease { lock } => {
                let (held, queue) = object(&mut g.locks, "lock", lock, m.from);
                assert!(*held, "lock {lock} released at its manager while free");
                match queue.pop_front() {
                    Some(next) => grant(next),
                    None => *held = false,
                }
            }
            Msg::Barrier { barrier, .. } => {
                let waiting = object(&mut g.barriers, "barrier", barrier, m.from);
                waiting.push(me);
                if waiting.len() == host.nodes() {
                    for w in waiting.drain(..) {
                        grant(w);
                    }
                }
            }
            Msg::FlagSet { flag } => {
                let (set, waiting) = object(&mut g.flags, "flag", flag, m.from);
                *set = true;
                for w in waiting.drain(..) {
                    grant(w);
                }
                grant(me);
            }
            Msg::FlagWait { flag } => {
                let (set, waiting) = object(&mut g.flags, "flag", flag, m.from);
                if *set {
                    grant(me);
                } else {
                    waiting.push(me);
                }
            }
            other => panic!("not a synchronization message: {other:?}"),
        }
    }
}

/// The synchronization object `id` of `objects`, named in a message from `from`; an id the
/// program never created is reported with its sender (the message is malformed), not met
/// as a bare index out of bounds.
fn object<'g, T>(objects: &'g mut [T], what: &str, id: u32, from: crate::ids::NodeId) -> &'g mut T {
    let count = objects.len();
    objects.get_mut(id as usize).unwrap_or_else(|| {
        panic!("malformed synchronization message from {from}: {what} {id}, but the program has {count}")
    })
}

#[cfg(test)]
mod tests {
    use super::object;
    use crate::ids::NodeId;

    #[test]
    fn an_object_the_program_never_created_is_reported_with_its_sender() {
        let mut locks = vec![10, 20];
        *object(&mut locks, "lock", 1, NodeId::from_usize(2)) += 1;
        assert_eq!(locks, [10, 21]);
        let err = std::panic::catch_unwind(move || {
            *object(&mut locks, "lock", 2, NodeId::from_usize(2)) += 1;
        })
        .unwrap_err();
        let text = err.downcast_ref::<String>().expect("a formatted panic");
        assert_eq!(
            text,
            "malformed synchronization message from node 2: lock 2, but the program has 2"
        );
    }
}
