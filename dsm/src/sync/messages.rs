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
use crate::net::Inbound;
use crate::wire::kind;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A waiting requester: node, mailbox slot, request token.
type Waiter = (usize, u16, u32);

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

fn object(id: usize) -> [u8; 4] {
    (id as u32).to_le_bytes()
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
        request(host, lock % host.nodes(), kind::LOCK_ACQ, &object(lock));
    }

    pub(crate) fn lock_release<H: SyncHost + ?Sized>(&self, host: &H, lock: usize) {
        host.net()
            .send_via(
                &host.seam(),
                lock % host.nodes(),
                kind::LOCK_REL,
                host.slot(),
                0,
                &object(lock),
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// This node's arrival at barrier `b`, round `epoch`; returns when every node arrived.
    pub(crate) fn barrier<H: SyncHost + ?Sized>(&self, host: &H, b: usize, epoch: u64) {
        let mut p = object(b).to_vec();
        p.extend_from_slice(&epoch.to_le_bytes());
        request(host, b % host.nodes(), kind::BARRIER, &p);
    }

    pub(crate) fn flag_set<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        request(host, f % host.nodes(), kind::FLAG_SET, &object(f));
    }

    pub(crate) fn flag_wait<H: SyncHost + ?Sized>(&self, host: &H, f: usize) {
        request(host, f % host.nodes(), kind::FLAG_WAIT, &object(f));
    }

    /// The manager's side: handles one synchronization message.
    pub(crate) fn handle<H: SyncHost + ?Sized>(&self, host: &H, m: &Inbound<'_>) {
        let id = u32::from_le_bytes(m.payload[..4].try_into().expect("object id")) as usize;
        let me: Waiter = (m.from, m.slot, m.token);
        let grant = |w: Waiter| {
            host.net()
                .reply(w.0, w.1, w.2, &[])
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut g = self.objects.lock().expect("poisoned");
        match m.kind {
            kind::LOCK_ACQ => {
                let (held, queue) = &mut g.locks[id];
                if *held {
                    queue.push_back(me);
                } else {
                    *held = true;
                    grant(me);
                }
            }
            kind::LOCK_REL => {
                let (held, queue) = &mut g.locks[id];
                assert!(*held, "lock {id} released at its manager while free");
                match queue.pop_front() {
                    Some(next) => grant(next),
                    None => *held = false,
                }
            }
            kind::BARRIER => {
                let waiting = &mut g.barriers[id];
                waiting.push(me);
                if waiting.len() == host.nodes() {
                    for w in waiting.drain(..) {
                        grant(w);
                    }
                }
            }
            kind::FLAG_SET => {
                let (set, waiting) = &mut g.flags[id];
                *set = true;
                for w in waiting.drain(..) {
                    grant(w);
                }
                grant(me);
            }
            kind::FLAG_WAIT => {
                let (set, waiting) = &mut g.flags[id];
                if *set {
                    grant(me);
                } else {
                    waiting.push(me);
                }
            }
            k => panic!("not a synchronization message: {k}"),
        }
    }
}
