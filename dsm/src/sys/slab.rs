//! A slab: equal slots in one private anonymous mapping, handed out and taken back, with
//! their memory in place before they are handed out.
//!
//! A node's twins live here (`engine`, write faults). A twin made with the global allocator
//! is made inside the fault handler, and there a fresh 8 KiB block costs what the fault
//! itself costs: the allocator grows its thread's arena with an mprotect (a second one in
//! the fault, beside the page's), and the copy into the block takes two zero-fill page
//! faults. Here a slot's pages are filled in chunks of [`CHUNK`] slots, one
//! `MADV_POPULATE_WRITE` per chunk, the first time the slab grows past them, and a freed
//! slot is handed out again before a new one (last in, first out: its lines may still be
//! in the cache). A slab may populate a number of slots when it is made, so that the first
//! ones taken cost no populating either. The memory it holds is at most that number or the
//! most slots ever live at once, rounded up to a chunk; the address space it reserves is
//! `slots` slots, mapped `MAP_NORESERVE`, so that under the kernel's default overcommit
//! policy only populated slots are charged (under `vm.overcommit_memory=2` the kernel
//! charges the whole mapping when it is made, and a slab too large for the commit limit
//! fails to map: `Node` then reports that it cannot reserve its twins).
//!
//! # Invariants (asserted)
//!
//! * A slot is used only with the slab that made it: each slab has a number no other slab
//!   of the process ever gets (not its address, which a later slab may reuse), and its
//!   slots carry it.
//! * A slot is live from `take` to `give`, and at most one handle names it: `take` hands
//!   out only slots not live, `give` takes the handle by value and refuses a slot that is
//!   not live (the `taken` bitset).

use super::memory::{map_private, populate_writable, Mapping, Prot};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The next slab's number (see the invariants).
static NEXT_SLAB: AtomicU64 = AtomicU64::new(1);

/// Slots populated at a time (64 slots of an 8 KiB page: 512 KiB in one call).
pub const CHUNK: usize = 64;

/// A slab of `slots` slots of `slot_bytes` bytes each.
#[derive(Debug)]
pub struct Slab {
    map: Mapping,
    /// This slab's number, unique in the process (module doc, "Invariants").
    id: u64,
    slot_bytes: usize,
    slots: usize,
    state: Mutex<SlabState>,
}

#[derive(Debug)]
struct SlabState {
    /// Slots given back, the most recent last.
    free: Vec<u32>,
    /// Slots below this were handed out at least once, and their chunks populated.
    fresh: usize,
    /// Slots below this are populated.
    populated: usize,
    /// One bit per slot: set while it is live.
    taken: Vec<u64>,
}

impl SlabState {
    fn is_taken(&self, index: usize) -> bool {
        self.taken[index / 64] & (1 << (index % 64)) != 0
    }

    fn flip(&mut self, index: usize) {
        self.taken[index / 64] ^= 1 << (index % 64);
    }
}

/// One slot of a [`Slab`], owned by whoever holds this handle: it is neither `Clone` nor
/// `Copy`, so the slab's bytes it names are reached only through it, shared through `&Slot`
/// and exclusively through `&mut Slot`. A slot not given back stays taken (memory, not
/// unsoundness).
#[derive(Debug)]
pub struct Slot {
    index: u32,
    /// The number of the slab that made it: a slot is only ever used with that slab.
    slab: u64,
}

impl Slab {
    /// Reserves `slots` slots of `slot_bytes` bytes (read-write, private), and populates
    /// the first `ready` of them now (rounded up to a chunk); the others are committed as
    /// they are first taken.
    pub fn new(slot_bytes: usize, slots: usize, ready: usize) -> io::Result<Slab> {
        assert!(slot_bytes > 0 && slots > 0, "an empty slab");
        assert!(
            u32::try_from(slots).is_ok(),
            "a slab of {slots} slots: slot numbers are 32 bits"
        );
        let len = slot_bytes
            .checked_mul(slots)
            .ok_or_else(|| io::Error::other("slab size overflows"))?;
        let slab = Slab {
            map: map_private(len, Prot::ReadWrite)?,
            id: NEXT_SLAB.fetch_add(1, Ordering::Relaxed),
            slot_bytes,
            slots,
            state: Mutex::new(SlabState {
                free: Vec::new(),
                fresh: 0,
                populated: 0,
                taken: vec![0; slots.div_ceil(64)],
            }),
        };
        if ready > 0 {
            let end = ready.next_multiple_of(CHUNK).min(slots);
            slab.populate(0, end);
            slab.state.lock().unwrap_or_else(|e| e.into_inner()).populated = end;
        }
        Ok(slab)
    }

    /// Takes a slot: the one given back last, else a fresh one (populating its chunk if it
    /// is the chunk's first). Its bytes are what its last holder left, or zero.
    ///
    /// # Panics
    /// If every slot is taken: the caller sized the slab for the most it can hold at once.
    pub fn take(&self) -> Slot {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut chunk = None;
        // Checked before anything changes, so that a failed check leaves the state whole.
        let index = match s.free.last() {
            Some(&i) => i as usize,
            None => {
                assert!(
                    s.fresh < self.slots,
                    "all {} slots of a slab are taken",
                    self.slots
                );
                s.fresh
            }
        };
        assert!(!s.is_taken(index), "slot {index} of a slab handed out twice");
        if s.free.pop().is_none() {
            s.fresh += 1;
            if index >= s.populated {
                let end = (index + CHUNK).min(self.slots);
                s.populated = end;
                chunk = Some((index, end));
            }
        }
        s.flip(index);
        drop(s);
        // Outside the lock: populating half a megabyte must not hold up the node's other
        // faults and releases. A slot of the chunk taken meanwhile fills on first touch.
        if let Some((from, to)) = chunk {
            self.populate(from, to);
        }
        Slot {
            index: index as u32,
            slab: self.id,
        }
    }

    /// Gives `slot` back (its bytes stay as they are).
    ///
    /// # Panics
    /// If `slot` belongs to another slab, or is not live (module doc, "Invariants").
    pub fn give(&self, slot: Slot) {
        self.check(&slot);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let index = slot.index as usize;
        assert!(s.is_taken(index), "slot {index} of a slab given back but not taken");
        s.flip(index);
        s.free.push(slot.index);
    }

    /// How many slots are taken now (counted from the `taken` bits: a rare question, asked
    /// at a node's end).
    pub fn live(&self) -> usize {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.taken.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// How many slots have memory: the most ever taken at once, rounded up to a chunk.
    #[cfg(test)]
    pub fn populated(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).populated
    }

    /// The bytes of `slot`.
    pub fn bytes<'a>(&'a self, slot: &'a Slot) -> &'a [u8] {
        self.check(slot);
        // SAFETY: the slot lies in the mapping, which lives as long as `self` (checked);
        // its one handle is borrowed shared for 'a, so nothing writes its bytes meanwhile.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(slot), self.slot_bytes) }
    }

    /// The bytes of `slot`, to write.
    pub fn bytes_mut<'a>(&'a self, slot: &'a mut Slot) -> &'a mut [u8] {
        self.check(slot);
        // SAFETY: as in `bytes`; its one handle (`take` hands out a slot only while it is
        // not live) is borrowed exclusively for 'a: the only reference to its bytes.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(slot), self.slot_bytes) }
    }

    fn slot_ptr(&self, slot: &Slot) -> *mut u8 {
        // SAFETY: index < slots (made by `take`), so the offset is inside the mapping.
        unsafe { self.map.as_ptr().add(slot.index as usize * self.slot_bytes) }
    }

    fn check(&self, slot: &Slot) {
        assert_eq!(slot.slab, self.id, "a slot used with another slab");
        assert!((slot.index as usize) < self.slots, "a slot outside its slab");
    }

    /// Fills the page tables of slots `[from, to)`. A failure (an old kernel without
    /// `MADV_POPULATE_WRITE`, or memory short) is no error: the slots then fill on first
    /// touch, as any memory does.
    fn populate(&self, from: usize, to: usize) {
        let _ = populate_writable(
            self.map.addr() + from * self.slot_bytes,
            (to - from) * self.slot_bytes,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_reused_last_first_and_keep_their_bytes() {
        let slab = Slab::new(4096, 3 * CHUNK, 0).unwrap();
        let mut a = slab.take();
        let mut b = slab.take();
        assert_eq!(slab.bytes(&a), &[0u8; 4096][..], "a fresh slot reads zero");
        slab.bytes_mut(&mut a).fill(1);
        slab.bytes_mut(&mut b).fill(2);
        assert!(slab.bytes(&a).iter().all(|&x| x == 1), "b's bytes overlap a's");
        assert_eq!((slab.live(), slab.populated()), (2, CHUNK));
        let b_index = b.index;
        slab.give(b);
        let c = slab.take();
        assert_eq!(c.index, b_index, "the slot given back last is taken first");
        assert!(slab.bytes(&c).iter().all(|&x| x == 2));
        slab.give(c);
        slab.give(a);
        assert_eq!(slab.live(), 0);
    }

    #[test]
    fn populates_a_chunk_at_a_time_up_to_the_most_live() {
        let slab = Slab::new(64, CHUNK + 5, 0).unwrap();
        let mut held: Vec<Slot> = (0..CHUNK).map(|_| slab.take()).collect();
        assert_eq!(slab.populated(), CHUNK);
        held.push(slab.take());
        assert_eq!(slab.populated(), CHUNK + 5, "the last chunk stops at the slab's end");
        for s in held.drain(..) {
            slab.give(s);
        }
        let again: Vec<Slot> = (0..CHUNK + 1).map(|_| slab.take()).collect();
        assert_eq!(slab.populated(), CHUNK + 5, "given-back slots are reused");
        for s in again {
            slab.give(s);
        }
    }

    #[test]
    fn slots_made_ready_at_the_start_are_populated_before_any_is_taken() {
        let slab = Slab::new(64, 3 * CHUNK, CHUNK + 1).unwrap();
        assert_eq!(slab.populated(), 2 * CHUNK, "ready slots round up to a chunk");
        let s = slab.take();
        assert_eq!((slab.populated(), slab.live()), (2 * CHUNK, 1));
        slab.give(s);
        assert_eq!(Slab::new(64, 5, 1000).unwrap().populated(), 5);
    }

    #[test]
    #[should_panic(expected = "all 2 slots of a slab are taken")]
    fn taking_more_than_there_are_panics() {
        let slab = Slab::new(64, 2, 0).unwrap();
        let _a = slab.take();
        let _b = slab.take();
        let _c = slab.take();
    }

    #[test]
    #[should_panic(expected = "a slot used with another slab")]
    fn a_slot_belongs_to_its_slab() {
        let one = Slab::new(64, 2, 0).unwrap();
        let other = Slab::new(64, 2, 0).unwrap();
        let s = one.take();
        other.give(s);
    }

    /// A slab made where a dropped one was mapped may get its address, but never its
    /// number: a slot the old slab handed out (the same number as a slot the new one holds
    /// live) is refused, so no slot can have two holders.
    #[test]
    #[should_panic(expected = "a slot used with another slab")]
    fn a_slot_of_a_dropped_slab_is_refused() {
        let old = Slab::new(4096, CHUNK, 0).unwrap();
        let stale = old.take();
        drop(old);
        let new = Slab::new(4096, CHUNK, 0).unwrap();
        let held = new.take();
        assert_eq!(held.index, stale.index, "the same slot number is live again");
        new.give(stale);
    }

    #[test]
    #[should_panic(expected = "slot 1 of a slab given back but not taken")]
    fn a_slot_not_live_is_refused() {
        let slab = Slab::new(64, 4, 0).unwrap();
        let _held = slab.take();
        slab.give(Slot { index: 1, slab: slab.id });
    }

    #[test]
    fn the_taken_bits_follow_take_and_give() {
        let slab = Slab::new(64, 130, 0).unwrap();
        let held: Vec<Slot> = (0..130).map(|_| slab.take()).collect();
        {
            let s = slab.state.lock().unwrap();
            assert!((0..130).all(|i| s.is_taken(i)));
        }
        for h in held {
            slab.give(h);
        }
        assert!((0..130).all(|i| !slab.state.lock().unwrap().is_taken(i)));
        assert_eq!(slab.live(), 0);
    }
}
