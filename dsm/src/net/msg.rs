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
//! # Sleeping
//!
//! A waiter sets its `parked` flag (SeqCst), re-checks its condition, then sleeps on the
//! futex word. A sender stores its data (SeqCst), then reads `parked` (SeqCst) and wakes
//! if set. With both sides SeqCst, either the waiter sees the data or the sender sees the
//! flag, so no wake-up is lost.

use super::{Fabric, MAILBOX_BYTES, RING_BYTES};
use crate::sys;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const RECORD_HEADER: u64 = 16;
const RING_DATA_OFF: u64 = 64;
const RING_CAPACITY: u64 = RING_BYTES - RING_DATA_OFF;
const MAILBOX_DATA_OFF: u64 = 64;
const WRAP: u32 = u32::MAX;
/// How long a waiter spins before it parks: long enough to cover a round trip to a
/// polling peer, short enough not to steal a core for long.
const SPIN_POLLS: u32 = 4_000;

/// Largest payload of one message or reply.
pub const MAX_MESSAGE_BYTES: usize = (MAILBOX_BYTES - MAILBOX_DATA_OFF) as usize;

const _: () = assert!(MAX_MESSAGE_BYTES as u64 + RECORD_HEADER <= RING_CAPACITY / 2);

#[derive(Debug, Clone, thiserror::Error)]
pub enum MsgError {
    #[error("message of {len} bytes exceeds the largest message of {max} bytes; split it")]
    TooLarge { len: usize, max: usize },
    #[error("node {0} does not exist")]
    NoSuchNode(usize),
    #[error("mailbox {slot} does not exist on this node (it has {slots})")]
    NoSuchMailbox { slot: usize, slots: usize },
    #[error("{}", crate::ABORT_MESSAGE)]
    Aborted,
}

/// A message taken from a ring. The payload borrows the ring until the handler returns.
#[derive(Debug)]
pub struct Inbound<'a> {
    pub from: usize,
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

/// Sleeps on `node`'s doorbell until it rings or `timeout` passes, unless `ready()` is
/// already true once this thread is registered as parked (see the module doc on sleeping).
/// Several threads may park at once: `parked` counts them.
pub(super) fn park_on_bell(
    fabric: &Fabric,
    node: usize,
    timeout: Duration,
    ready: impl Fn() -> bool,
) {
    let bell = fabric.bell(node);
    let seen = bell.word.load(Ordering::SeqCst);
    bell.parked.fetch_add(1, Ordering::SeqCst);
    if !ready() && !fabric.aborted() {
        sys::futex_wait(&bell.word, seen, Some(timeout));
    }
    bell.parked.fetch_sub(1, Ordering::SeqCst);
}

pub(super) fn ring_bell(fabric: &Fabric, node: usize, always: bool) {
    let bell = fabric.bell(node);
    if always || bell.parked.load(Ordering::SeqCst) != 0 {
        bell.word.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&bell.word, i32::MAX as u32);
    }
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &self,
        fabric: &Fabric,
        to: usize,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
        block: bool,
    ) -> Result<bool, MsgError> {
        if to >= fabric.layout.nodes {
            return Err(MsgError::NoSuchNode(to));
        }
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len: payload.len(),
                max: MAX_MESSAGE_BYTES,
            });
        }
        let record = RECORD_HEADER + (payload.len() as u64).div_ceil(8) * 8;
        let ring = fabric.ring_off(to, self.node);
        let head_word = word64(fabric.pool_ptr(self.node, fabric.head_off(self.node, to)));
        let mut p = self.producers[to].lock().expect("poisoned");
        let at = p.tail % RING_CAPACITY;
        let waste = if at + record > RING_CAPACITY {
            RING_CAPACITY - at
        } else {
            0
        };
        let need = record + waste;
        let mut spins = 0u32;
        while p.tail + need - p.head_seen > RING_CAPACITY {
            p.head_seen = head_word.load(Ordering::Acquire);
            if p.tail + need - p.head_seen <= RING_CAPACITY {
                break;
            }
            if !block {
                return Ok(false);
            }
            if fabric.aborted() {
                return Err(MsgError::Aborted);
            }
            // Back-pressure: the consumer frees space as it polls. Make sure it is awake.
            ring_bell(fabric, to, false);
            spins += 1;
            if spins > 1000 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let base = fabric.pool_ptr(to, ring + RING_DATA_OFF);
        if waste > 0 {
            // SAFETY: at < RING_CAPACITY and at is 8-aligned, so a 4-byte marker fits.
            word32(unsafe { base.add(at as usize) }).store(WRAP, Ordering::Relaxed);
            p.tail += waste;
        }
        let at = (p.tail % RING_CAPACITY) as usize;
        // SAFETY: the record fits between at and the end of the ring (waste handled above),
        // the space is free (flow control above), and base points at the ring in the
        // receiver's memory inside the wire mapping.
        unsafe {
            let rec = base.add(at);
            word32(rec).store(payload.len() as u32, Ordering::Relaxed);
            rec.add(4).cast::<u16>().write_unaligned(kind);
            rec.add(6).cast::<u16>().write_unaligned(slot);
            rec.add(8).cast::<u32>().write_unaligned(token);
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                rec.add(RECORD_HEADER as usize),
                payload.len(),
            );
        }
        p.tail += record;
        word64(fabric.pool_ptr(to, ring)).store(p.tail, Ordering::SeqCst);
        drop(p);
        fabric.count(self.node, 3, 1);
        fabric.count(self.node, 4, record);
        fabric.count(self.node, 0, fabric.packets_for(record));
        fabric.count(self.node, 1, record);
        ring_bell(fabric, to, false);
        Ok(true)
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
                        from: src,
                        kind: rec.add(4).cast::<u16>().read_unaligned(),
                        slot: rec.add(6).cast::<u16>().read_unaligned(),
                        token: rec.add(8).cast::<u32>().read_unaligned(),
                        payload: std::slice::from_raw_parts(
                            rec.add(RECORD_HEADER as usize),
                            len as usize,
                        ),
                    }
                };
                f(msg);
                handled += 1;
                head += RECORD_HEADER + (len as u64).div_ceil(8) * 8;
            }
            heads[src] = head;
            // Flow control: tell the producer how far we have read (a remote write into
            // its memory).
            word64(fabric.pool_ptr(src, fabric.head_off(src, self.node)))
                .store(head, Ordering::Release);
        }
        handled
    }

    fn has_messages(&self, fabric: &Fabric) -> bool {
        let Ok(heads) = self.consumer.try_lock() else {
            return true;
        };
        (0..fabric.layout.nodes).any(|src| {
            word64(fabric.pool_ptr(self.node, fabric.ring_off(self.node, src)))
                .load(Ordering::SeqCst)
                != heads[src]
        })
    }

    pub(super) fn wait_for_messages(&self, fabric: &Fabric, spin: u32, timeout: Duration) {
        for _ in 0..spin {
            if self.has_messages(fabric) || fabric.aborted() {
                return;
            }
            std::hint::spin_loop();
        }
        park_on_bell(fabric, self.node, timeout, || self.has_messages(fabric));
    }

    pub(super) fn reply(
        &self,
        fabric: &Fabric,
        to: usize,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<(), MsgError> {
        if to >= fabric.layout.nodes {
            return Err(MsgError::NoSuchNode(to));
        }
        if slot as usize >= fabric.layout.mailboxes {
            return Err(MsgError::NoSuchMailbox {
                slot: slot as usize,
                slots: fabric.layout.mailboxes,
            });
        }
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len: payload.len(),
                max: MAX_MESSAGE_BYTES,
            });
        }
        let mb = fabric.pool_ptr(to, fabric.mailbox_off(to, slot as usize));
        // SAFETY: the mailbox lies in the receiver's memory; its requester is waiting and
        // does not read the payload before it sees the token stored below.
        unsafe {
            word32(mb.add(8)).store(payload.len() as u32, Ordering::Relaxed);
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                mb.add(MAILBOX_DATA_OFF as usize),
                payload.len(),
            );
        }
        let tok = word32(mb);
        tok.store(token, Ordering::SeqCst);
        // SAFETY: parked flag at offset 4 of the mailbox.
        if word32(unsafe { mb.add(4) }).load(Ordering::SeqCst) != 0 {
            sys::futex_wake(tok, 1);
        }
        let bytes = MAILBOX_DATA_OFF + payload.len() as u64;
        fabric.count(self.node, 3, 1);
        fabric.count(self.node, 4, bytes);
        fabric.count(self.node, 0, fabric.packets_for(bytes));
        fabric.count(self.node, 1, bytes);
        Ok(())
    }

    /// Waits for the reply `token` in mailbox `slot`. While it spins, it calls `poll` now
    /// and then, so a waiting processor serves its node's messages (as Cashmere's
    /// processors poll) instead of leaving them to a service thread that may be asleep.
    pub(super) fn wait_reply(
        &self,
        fabric: &Fabric,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
        poll: &mut dyn FnMut() -> usize,
    ) -> Result<(), MsgError> {
        if slot as usize >= fabric.layout.mailboxes {
            return Err(MsgError::NoSuchMailbox {
                slot: slot as usize,
                slots: fabric.layout.mailboxes,
            });
        }
        let mb = fabric.pool_ptr(self.node, fabric.mailbox_off(self.node, slot as usize));
        let tok = word32(mb);
        // SAFETY: parked flag at offset 4 of our own mailbox.
        let parked = word32(unsafe { mb.add(4) });
        let mut spins = 0;
        while tok.load(Ordering::SeqCst) != token {
            if spins < SPIN_POLLS {
                spins += 1;
                if spins % 64 == 0 {
                    poll();
                }
                // Spin first; then give the core away between checks, so that on a host
                // with more simulated processors than cores the replier gets to run.
                if spins < SPIN_POLLS / 10 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            if fabric.aborted() {
                return Err(MsgError::Aborted);
            }
            let seen = tok.load(Ordering::SeqCst);
            parked.store(1, Ordering::SeqCst);
            if tok.load(Ordering::SeqCst) == seen && seen != token {
                sys::futex_wait(tok, seen, Some(Duration::from_millis(50)));
            }
            parked.store(0, Ordering::SeqCst);
        }
        let len = word32(mb.wrapping_add(8)).load(Ordering::Relaxed) as usize;
        out.clear();
        // SAFETY: the replier wrote len payload bytes before storing the token we saw.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(mb.add(MAILBOX_DATA_OFF as usize), len)
        });
        Ok(())
    }
}
