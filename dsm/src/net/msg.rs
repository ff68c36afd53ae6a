//! Explicit messages built on remote writes, as Cashmere builds them: one ring per ordered
//! pair of nodes in the receiver's memory, the consumer's position written back into the
//! producer's memory (flow control), reply mailboxes per processor, and a doorbell per node.
//!
//! # Rings
//!
//! The ring from `S` to `D` lives in `D`'s receive memory: a tail word, then records of
//! `[len u32 | kind u16 | slot u16 | token u32 | pad u32 | payload, padded to 8]`. A record
//! that would cross the end of the ring is preceded by a wrap marker (`len == u32::MAX`).
//! `S`'s processors take a local mutex per destination, so there is one producer; `D`'s
//! poller is the one consumer, and writes how far it has read into `S`'s memory.
//!
//! # Memory ordering
//!
//! A producer copies the record, then stores the tail (SeqCst). A consumer that loads the
//! tail (SeqCst) sees every record below it. The consumer publishes its head only after it
//! has finished with the records below it, so the producer never overwrites a record that
//! is still being read. For mailboxes the token word plays the tail's role.
//!
//! # Waiting
//!
//! Every wait here (a reply, space in a full ring) goes through the node's [`Seam`], and
//! every event that ends one rings the waiter's doorbell (`crate::wait`, "Sleepers and
//! wakers"): a reply rings the requester's node when the mailbox's `parked` word (offset 4)
//! says its waiter sleeps; a consumer that publishes its head rings the producer's node when
//! the ring's `waiting` word (next to the head) says the producer sleeps; a sender rings the
//! receiver's node after storing the tail. No lock is held while waiting: a producer drops
//! its ring's lock before it waits for space, so the messages it serves meanwhile may send.

use super::{Fabric, NodeId, NodeSet, MAILBOX_BYTES, RING_BYTES};
use crate::wait::{self, Seam, WaitFor};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

const RECORD_HEADER: u64 = 16;
const RING_DATA_OFF: u64 = 64;
const RING_CAPACITY: u64 = RING_BYTES - RING_DATA_OFF;
/// Per-source acknowledgement words of a mailbox (one u32 per node), for requests sent to
/// several nodes at once and acknowledged without a payload ([`Messenger::ack`]).
const MAILBOX_ACK_OFF: u64 = 64;
const MAILBOX_DATA_OFF: u64 = MAILBOX_ACK_OFF + 4 * super::MAX_NODES as u64;
const WRAP: u32 = u32::MAX;
/// Offset, in the producer's head line, of the word a producer waiting for space counts
/// itself in while parked.
const HEAD_WAITING_OFF: u64 = 8;

/// Largest payload of one message or reply.
pub const MAX_MESSAGE_BYTES: usize = (MAILBOX_BYTES - MAILBOX_DATA_OFF) as usize;

const _: () = assert!(MAX_MESSAGE_BYTES as u64 + RECORD_HEADER <= RING_CAPACITY / 2);

#[derive(Debug, Clone, thiserror::Error)]
pub enum MsgError {
    #[error("message of {len} bytes exceeds the largest message of {max} bytes; split it")]
    TooLarge { len: usize, max: usize },
    #[error("{0} does not exist")]
    NoSuchNode(NodeId),
    #[error("mailbox {slot} does not exist on this node (it has {slots})")]
    NoSuchMailbox { slot: usize, slots: usize },
    #[error("{}", crate::control::ABORT_MESSAGE)]
    Aborted,
}

/// A wait of the seam that gave up because the cluster aborted.
impl From<wait::Aborted> for MsgError {
    fn from(_: wait::Aborted) -> MsgError {
        MsgError::Aborted
    }
}

/// A message taken from a ring. The payload borrows the ring until the handler returns.
#[derive(Debug)]
pub struct Inbound<'a> {
    pub from: NodeId,
    pub kind: u16,
    /// The sender's mailbox, for the reply.
    pub slot: u16,
    pub token: u32,
    pub payload: &'a [u8],
}

struct Producer {
    tail: u64,
    head_seen: u64,
}

pub(super) struct Messenger {
    node: usize,
    producers: Vec<Mutex<Producer>>,
    /// Read positions per source; the mutex makes the poller the single consumer.
    consumer: Mutex<Vec<u64>>,
    tokens: Vec<AtomicU32>,
}

fn word64(ptr: *mut u8) -> &'static AtomicU64 {
    // SAFETY: callers pass 8-aligned pointers into the fabric's wire mapping, which lives
    // as long as the process uses the network (the Net holds the Arc<Fabric>).
    unsafe { &*(ptr as *const AtomicU64) }
}

fn word32(ptr: *mut u8) -> &'static AtomicU32 {
    // SAFETY: as in word64, for 4-aligned pointers.
    unsafe { &*(ptr as *const AtomicU32) }
}

/// Checks that node `to` and its mailbox `slot` exist.
fn check_mailbox(fabric: &Fabric, to: NodeId, slot: u16) -> Result<(), MsgError> {
    if to.index() >= fabric.layout.nodes {
        return Err(MsgError::NoSuchNode(to));
    }
    if slot as usize >= fabric.layout.mailboxes {
        return Err(MsgError::NoSuchMailbox {
            slot: slot as usize,
            slots: fabric.layout.mailboxes,
        });
    }
    Ok(())
}

impl Messenger {
    pub(super) fn new(fabric: &Fabric, node: usize) -> Messenger {
        let n = fabric.layout.nodes;
        Messenger {
            node,
            producers: (0..n)
                .map(|_| {
                    Mutex::new(Producer {
                        tail: 0,
                        head_seen: 0,
                    })
                })
                .collect(),
            consumer: Mutex::new(vec![0; n]),
            tokens: (0..fabric.layout.mailboxes)
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }

    pub(super) fn next_token(&self, slot: u16) -> u32 {
        let t = &self.tokens[slot as usize];
        let mut v = t.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if v == 0 {
            v = t.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        }
        v
    }

    /// Appends a message to the ring to `to`. When the ring is full it waits for space
    /// through `seam` (serving this node's messages meanwhile), or returns `Ok(false)` at
    /// once without a seam.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &self,
        fabric: &Fabric,
        seam: Option<&Seam<'_>>,
        to: NodeId,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError> {
        let dst = to.index();
        if dst >= fabric.layout.nodes {
            return Err(MsgError::NoSuchNode(to));
        }
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len: payload.len(),
                max: MAX_MESSAGE_BYTES,
            });
        }
        let record = RECORD_HEADER + (payload.len() as u64).div_ceil(8) * 8;
        // Modeled time: the sender's software overhead comes before the wire.
        crate::sched::charge_cost("network send_overhead_ns", |_, net| net.send_overhead_ns as f64);
        let ring = fabric.ring_off(dst, self.node);
        let head_line = fabric.pool_ptr(self.node, fabric.head_off(self.node, dst));
        let head_word = word64(head_line);
        let (mut p, at, waste) = loop {
            let mut p = self.producers[dst].lock().expect("poisoned");
            let at = p.tail % RING_CAPACITY;
            let waste = if at + record > RING_CAPACITY {
                RING_CAPACITY - at
            } else {
                0
            };
            let need = record + waste;
            if p.tail + need > p.head_seen + RING_CAPACITY {
                p.head_seen = head_word.load(Ordering::Acquire);
            }
            if p.tail + need <= p.head_seen + RING_CAPACITY {
                break (p, at, waste);
            }
            let Some(seam) = seam else {
                return Ok(false);
            };
            // Back-pressure: wait, without the ring's lock, until the consumer has read
            // far enough. It frees space as it polls, and our last send rang its bell.
            let tail = p.tail;
            drop(p);
            // SAFETY: the head line is 64 bytes in this node's receive memory; the waiting
            // word at offset 8 is 4-aligned inside it.
            let waiting = word32(unsafe { head_line.add(HEAD_WAITING_OFF as usize) });
            seam.until_flagged(WaitFor::RingSpace { to }, waiting, || {
                tail + need <= head_word.load(Ordering::Acquire) + RING_CAPACITY
            })?;
        };
        // Where the record goes: after a wrap marker if it would cross the ring's end.
        let place = Placement {
            base: fabric.pool_ptr(dst, ring + RING_DATA_OFF) as usize,
            wrap_at: (waste > 0).then_some(at as usize),
            at: ((p.tail + waste) % RING_CAPACITY) as usize,
            tail_word: fabric.pool_ptr(dst, ring) as usize,
            tail: p.tail + waste + record,
        };
        p.tail = place.tail;
        // Modeled time: the record and its tail are written when they arrive (the deferred
        // deliveries of one ring keep their order, so its tail only grows).
        let deferred =
            fabric.links.transmit(self.node, 1 << dst, record, crate::sched::Wake::Server, |_| {
                let payload = payload.to_vec();
                // SAFETY: as below; the ring lives in the wire mapping, which outlives
                // every delivery of the simulation.
                Box::new(move || unsafe { place.land(kind, slot, token, &payload) })
            });
        if !deferred {
            // The record fits between `at` and the end of the ring (the wrap marker fills
            // the rest), and the producer lock is held, so tails are stored in order.
            // SAFETY: the space is free (flow control above) and base points at the ring
            // in the receiver's memory inside the wire mapping.
            unsafe { place.land(kind, slot, token, payload) };
        }
        drop(p);
        self.count_sent(fabric, record);
        if !deferred {
            wait::wake_for_message(fabric.control(), dst);
        }
        Ok(true)
    }

    fn count_sent(&self, fabric: &Fabric, bytes: u64) {
        fabric.count(self.node, 3, 1);
        fabric.count(self.node, 4, bytes);
        fabric.count(self.node, 0, fabric.packets_for(bytes));
        fabric.count(self.node, 1, bytes);
    }

    pub(super) fn poll(&self, fabric: &Fabric, mut f: impl FnMut(Inbound<'_>)) -> usize {
        let Ok(mut heads) = self.consumer.try_lock() else {
            return 0;
        };
        let mut handled = 0;
        for src in 0..fabric.layout.nodes {
            let ring = fabric.ring_off(self.node, src);
            let tail = word64(fabric.pool_ptr(self.node, ring)).load(Ordering::SeqCst);
            let mut head = heads[src];
            if head == tail {
                continue;
            }
            let base = fabric.pool_ptr(self.node, ring + RING_DATA_OFF);
            while head < tail {
                let at = (head % RING_CAPACITY) as usize;
                // SAFETY: at is 8-aligned inside the ring; records below tail are complete
                // (module doc, memory ordering).
                let rec = unsafe { base.add(at) };
                let len = word32(rec).load(Ordering::Relaxed);
                if len == WRAP {
                    head += RING_CAPACITY - at as u64;
                    continue;
                }
                // SAFETY: the producer wrote a full header and `len` payload bytes here, and
                // will not overwrite them until this consumer publishes a head beyond them.
                let msg = unsafe {
                    Inbound {
                        from: NodeId::from_usize(src),
                        kind: rec.add(4).cast::<u16>().read_unaligned(),
                        slot: rec.add(6).cast::<u16>().read_unaligned(),
                        token: rec.add(8).cast::<u32>().read_unaligned(),
                        payload: std::slice::from_raw_parts(
                            rec.add(RECORD_HEADER as usize),
                            len as usize,
                        ),
                    }
                };
                // Modeled time: receiving and dispatching the message.
                crate::sched::charge_cost("network recv_overhead_ns and host.handler_ns", |host, net| {
                    net.recv_overhead_ns as f64 + host.handler_ns as f64
                });
                f(msg);
                handled += 1;
                head += RECORD_HEADER + (len as u64).div_ceil(8) * 8;
            }
            heads[src] = head;
            // Flow control: tell the producer how far we have read (a remote write into
            // its memory), and wake it if it sleeps waiting for that space.
            let head_line = fabric.pool_ptr(src, fabric.head_off(src, self.node));
            word64(head_line).store(head, Ordering::Release);
            // SAFETY: as in send, for the producer's head line.
            let waiting = word32(unsafe { head_line.add(HEAD_WAITING_OFF as usize) });
            wait::wake_flagged(fabric.control(), src, waiting);
        }
        handled
    }

    /// True if a ring holds unread messages (or another thread is polling right now).
    pub(super) fn has_messages(&self, fabric: &Fabric) -> bool {
        let Ok(heads) = self.consumer.try_lock() else {
            return true;
        };
        (0..fabric.layout.nodes).any(|src| {
            word64(fabric.pool_ptr(self.node, fabric.ring_off(self.node, src)))
                .load(Ordering::SeqCst)
                != heads[src]
        })
    }

    pub(super) fn reply(
        &self,
        fabric: &Fabric,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError> {
        check_mailbox(fabric, to, slot)?;
        let dst = to.index();
        let len = head.len() + tail.len();
        if len > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len,
                max: MAX_MESSAGE_BYTES,
            });
        }
        let mb = fabric.pool_ptr(dst, fabric.mailbox_off(dst, slot as usize));
        let bytes = MAILBOX_DATA_OFF + len as u64;
        crate::sched::charge_cost("network send_overhead_ns", |_, net| net.send_overhead_ns as f64);
        let addr = mb as usize;
        let deferred =
            fabric.links.transmit(self.node, 1 << dst, bytes, crate::sched::Wake::Slot(slot), |_| {
                let owned = [head, tail].concat();
                Box::new(move || {
                    // SAFETY: as below; the mailbox lies in the wire mapping, which
                    // outlives every delivery of the simulation.
                    unsafe { write_reply(addr as *mut u8, token, &owned, &[]) }
                })
            });
        if !deferred {
            // SAFETY: the mailbox lies in the receiver's memory; its requester is waiting
            // and does not read the payload before it sees the token stored last.
            unsafe { write_reply(mb, token, head, tail) };
            // SAFETY: the mailbox's parked word at offset 4, 4-aligned inside the mailbox.
            wait::wake_flagged(fabric.control(), dst, word32(unsafe { mb.add(4) }));
        }
        self.count_sent(fabric, bytes);
        Ok(())
    }

    /// Acknowledges request `token` of `to`'s mailbox `slot` without a payload: writes the
    /// token into this node's acknowledgement word there. Several nodes may acknowledge
    /// one request this way (see [`Messenger::wait_acks`]).
    pub(super) fn ack(
        &self,
        fabric: &Fabric,
        to: NodeId,
        slot: u16,
        token: u32,
    ) -> Result<(), MsgError> {
        check_mailbox(fabric, to, slot)?;
        let dst = to.index();
        let mb = fabric.pool_ptr(dst, fabric.mailbox_off(dst, slot as usize));
        // SAFETY: this node's acknowledgement word lies inside the mailbox (MAILBOX_ACK_OFF
        // plus 4 per node, below MAILBOX_DATA_OFF), 4-aligned.
        let word = unsafe { mb.add((MAILBOX_ACK_OFF + 4 * self.node as u64) as usize) };
        crate::sched::charge_cost("network send_overhead_ns", |_, net| net.send_overhead_ns as f64);
        let addr = word as usize;
        let deferred =
            fabric.links.transmit(self.node, 1 << dst, 8, crate::sched::Wake::Slot(slot), |_| {
                Box::new(move || word32(addr as *mut u8).store(token, Ordering::SeqCst))
            });
        if !deferred {
            word32(word).store(token, Ordering::SeqCst);
            // SAFETY: the mailbox's parked word at offset 4, 4-aligned inside the mailbox.
            wait::wake_flagged(fabric.control(), dst, word32(unsafe { mb.add(4) }));
        }
        self.count_sent(fabric, 8);
        Ok(())
    }

    /// Waits through `seam` until every node in `from` has acknowledged request `token` of
    /// mailbox `slot` (of requests of `kind`).
    pub(super) fn wait_acks(
        &self,
        fabric: &Fabric,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        token: u32,
        from: NodeSet,
    ) -> Result<(), MsgError> {
        let mb = fabric.pool_ptr(self.node, fabric.mailbox_off(self.node, slot as usize));
        // SAFETY: the parked word at offset 4 of our own mailbox.
        let parked = word32(unsafe { mb.add(4) });
        let acked = |n: NodeId| {
            // SAFETY: node n's acknowledgement word, inside our own mailbox (see ack).
            word32(unsafe { mb.add((MAILBOX_ACK_OFF + 4 * n.index() as u64) as usize) })
                .load(Ordering::SeqCst)
                == token
        };
        let what = WaitFor::Acks {
            kind,
            nodes: from.len(),
        };
        seam.until_flagged(what, parked, || from.iter().all(acked))?;
        crate::sched::charge_cost("network recv_overhead_ns", |_, net| net.recv_overhead_ns as f64);
        Ok(())
    }

    /// Waits through `seam` for the reply `token` in mailbox `slot` (of a request `what`
    /// names) and copies it into `out`.
    pub(super) fn wait_reply(
        &self,
        fabric: &Fabric,
        seam: &Seam<'_>,
        what: WaitFor,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        if slot as usize >= fabric.layout.mailboxes {
            return Err(MsgError::NoSuchMailbox {
                slot: slot as usize,
                slots: fabric.layout.mailboxes,
            });
        }
        let mb = fabric.pool_ptr(self.node, fabric.mailbox_off(self.node, slot as usize));
        let tok = word32(mb);
        // SAFETY: the parked word at offset 4 of our own mailbox.
        let parked = word32(unsafe { mb.add(4) });
        seam.until_flagged(what, parked, || tok.load(Ordering::SeqCst) == token)?;
        crate::sched::charge_cost("network recv_overhead_ns", |_, net| net.recv_overhead_ns as f64);
        let len = word32(mb.wrapping_add(8)).load(Ordering::Relaxed) as usize;
        out.clear();
        // SAFETY: the replier wrote len payload bytes before storing the token we saw.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(mb.add(MAILBOX_DATA_OFF as usize), len)
        });
        Ok(())
    }
}

/// Where one ring record lands: the ring's data area, a wrap marker if the record would
/// cross the ring's end, the record's offset, and the tail word with its new value.
#[derive(Clone, Copy)]
struct Placement {
    base: usize,
    wrap_at: Option<usize>,
    at: usize,
    tail_word: usize,
    tail: u64,
}

impl Placement {
    /// Writes the wrap marker, the record, then the tail (SeqCst), which publishes it.
    ///
    /// # Safety
    ///
    /// The placement must come from flow control over a live ring in the wire mapping: the
    /// space from `wrap_at` (or `at`) to the record's end is free and 8-aligned.
    unsafe fn land(self, kind: u16, slot: u16, token: u32, payload: &[u8]) {
        let base = self.base as *mut u8;
        if let Some(w) = self.wrap_at {
            // SAFETY: w < RING_CAPACITY and 8-aligned, so a 4-byte marker fits.
            word32(unsafe { base.add(w) }).store(WRAP, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract.
        unsafe { write_record(base.add(self.at), kind, slot, token, payload) };
        word64(self.tail_word as *mut u8).store(self.tail, Ordering::SeqCst);
    }
}

/// Writes a ring record (header and payload) at `rec`.
///
/// # Safety
///
/// `rec` must point at `RECORD_HEADER + payload.len()` writable bytes of a ring, 8-aligned,
/// that no consumer reads until the tail is moved past them.
unsafe fn write_record(rec: *mut u8, kind: u16, slot: u16, token: u32, payload: &[u8]) {
    // SAFETY: the caller's contract.
    unsafe {
        word32(rec).store(payload.len() as u32, Ordering::Relaxed);
        rec.add(4).cast::<u16>().write_unaligned(kind);
        rec.add(6).cast::<u16>().write_unaligned(slot);
        rec.add(8).cast::<u32>().write_unaligned(token);
        std::ptr::copy_nonoverlapping(payload.as_ptr(), rec.add(RECORD_HEADER as usize), payload.len());
    }
}

/// Writes a reply into the mailbox at `mb`: length, payload, then the token (SeqCst), which
/// completes it.
///
/// # Safety
///
/// `mb` must point at a mailbox in the wire mapping whose requester waits for `token` and
/// reads nothing before it sees it; the payload fits (checked by the caller).
unsafe fn write_reply(mb: *mut u8, token: u32, head: &[u8], tail: &[u8]) {
    let data = MAILBOX_DATA_OFF as usize;
    // SAFETY: the caller's contract; the length word at offset 8 and the data area, which
    // holds `head` and `tail` one after the other, lie inside the mailbox.
    unsafe {
        word32(mb.add(8)).store((head.len() + tail.len()) as u32, Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(head.as_ptr(), mb.add(data), head.len());
        std::ptr::copy_nonoverlapping(tail.as_ptr(), mb.add(data + head.len()), tail.len());
    }
    word32(mb).store(token, Ordering::SeqCst);
}
