//! The simulated fabric: a remote-write network with Memory Channel semantics
//! (`memory-channel-2.txt`, section "MEMORY CHANNEL Address Space Mapping" and the ordering
//! rules), the [`Transport`] of every cluster of threads or node processes (MPI ranks run
//! on `super::mpi` instead, each over a local fabric of its own for its heap and control
//! block).
//!
//! # Model
//!
//! A cluster shares one *fabric*: a memfd that every node process (or, in the in-process
//! mode, every node thread group) maps once, unprotected, as its *wire view*. The fabric
//! holds the receive memory of every node, and only this module ever reads or writes
//! another node's part of it: a write through a node's [`Port`] is copied into every
//! receive mapping of the region, exactly as a Memory Channel adapter would DMA the packet
//! there.
//!
//! The network address space (128 MiB for Memory Channel 2) is divided into receive pages
//! of [`MC_PAGE_BYTES`]. A shared table gives, for each receive page, the set of nodes
//! that have attached a receive mapping and whether the sender's own copy is looped back.
//! A transmit to a page lands in every attached receiver. Explicit messages (`super::msg`)
//! are built on the same remote writes, into rings and mailboxes the fabric lays out below
//! the first region.
//!
//! # Ordering
//!
//! * Rule 1 (single sender): a transmit is complete when [`Port::write`] returns, so the
//!   packets of one sending thread arrive everywhere in the order it sent them.
//! * Rule 2 (multiple senders): a transmit with more than one receiver (a broadcast)
//!   holds the hub lock and the link lock of every receiver while it copies, and a
//!   point-to-point transmit holds its receiver's link lock. So every receiver sees all
//!   broadcasts in one order, and no packet is torn by another.
//! * An acknowledge request ([`Port::ack`]) returns once every packet this node sent
//!   earlier has landed, which under the wall clock is immediately; it is kept as an
//!   explicit operation so that protocols say where they rely on it, and so the modeled
//!   clock can charge it.
//!
//! The fabric can do all of it, whatever network it models; it refuses (panics on) a
//! region write that needs a feature the profile it was created with lacks, which the
//! configuration's check makes unreachable.
//!
//! # Memory ordering
//!
//! Bytes copied by a transmit are visible to a receiver that observes, with Acquire, any
//! word the same thread transmitted later with `Tx::write_u64` (a Release store).

use super::msg::{self, Inbound, MsgError};
use super::transport::Transport;
use super::{
    timing, Backing, NetCounters, NetError, NodeId, NodeSet, Region, MAX_NODES, MC_PAGE_BYTES,
};
use crate::control::Control;
use crate::profile::{Features, Profile};
use crate::sys::{self, Mapping, Prot};
use crate::wait::{self, Seam, WaitFor};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of one message ring (one per ordered pair of nodes).
pub const RING_BYTES: u64 = 64 * 1024;
/// Bytes of one reply mailbox (one per processor and one for the service thread).
pub const MAILBOX_BYTES: u64 = 24 * 1024;
/// Bytes of a node's result area in the fabric.
pub const RESULT_BYTES: usize = 4 * 1024 * 1024;
const HEADER_BYTES: usize = 64 * 1024;
const MAGIC: u64 = 0x4353_4d5f_4641_4231; // "CSM_FAB1"
const LOOPBACK_BIT: u64 = 1 << 32;
const COUNTER_WORDS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub nodes: usize,
    /// Reply mailboxes per node: one per processor plus one for the service thread.
    pub mailboxes: usize,
    pub address_space_bytes: u64,
    pub heap_bytes: usize,
    masks_off: usize,
    pool_off: usize,
    heaps_off: usize,
    results_off: usize,
    trace_off: usize,
    /// Entries of the per-node arrival log (0: no log). Tests use it to check the
    /// ordering rules on every packet a node received.
    pub trace_entries: usize,
    pub total_bytes: usize,
    /// Logical offsets in the network address space of the messaging areas.
    rings_base: u64,
    heads_base: u64,
    mailboxes_base: u64,
    /// First byte of the address space available to [`Net::alloc_region`](super::Net::alloc_region).
    pub user_base: u64,
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// The network address space the fabric itself takes for `nodes` nodes of `procs`
/// processors, before any region: message rings, their heads and the reply mailboxes.
pub fn fixed_space_bytes(nodes: usize, procs: usize) -> u64 {
    let n = nodes as u64;
    let rings = n * n * RING_BYTES;
    let heads = n * round_up(n * 64, MC_PAGE_BYTES);
    let mailboxes = n * round_up((procs as u64 + 1) * MAILBOX_BYTES, MC_PAGE_BYTES);
    rings + heads + mailboxes
}

impl Layout {
    pub fn new(
        nodes: usize,
        procs: usize,
        address_space_bytes: u64,
        heap_bytes: usize,
    ) -> Result<Layout, NetError> {
        if nodes == 0 {
            return Err(NetError::NoNodes);
        }
        if nodes > MAX_NODES {
            return Err(NetError::TooManyNodes { nodes });
        }
        let n = nodes as u64;
        let mailboxes = procs + 1;
        let rings_base = 0;
        let heads_base = rings_base + n * n * RING_BYTES;
        // Each node's heads (one word per peer, on its own cache line) fill whole receive pages.
        let heads_per_node = round_up(n * 64, MC_PAGE_BYTES);
        let mailboxes_base = heads_base + n * heads_per_node;
        let mbox_per_node = round_up(mailboxes as u64 * MAILBOX_BYTES, MC_PAGE_BYTES);
        let user_base = mailboxes_base + n * mbox_per_node;
        debug_assert_eq!(user_base, fixed_space_bytes(nodes, procs));
        if user_base > address_space_bytes {
            return Err(NetError::AddressSpaceFull {
                space: address_space_bytes,
                wanted: user_base,
                left: address_space_bytes,
                hint: "; the message rings alone need that much for this many nodes".into(),
            });
        }
        let masks_off = HEADER_BYTES;
        let mask_entries = address_space_bytes.div_ceil(MC_PAGE_BYTES) as usize;
        let pool_off = round_up((masks_off + mask_entries * 8) as u64, 1 << 21) as usize;
        let heaps_off = pool_off + nodes * address_space_bytes as usize;
        let heap_bytes = round_up(heap_bytes as u64, 1 << 21) as usize;
        let results_off = heaps_off + nodes * heap_bytes;
        let trace_off = results_off + nodes * RESULT_BYTES;
        let total_bytes = trace_off;
        Ok(Layout {
            nodes,
            mailboxes,
            address_space_bytes,
            heap_bytes,
            masks_off,
            pool_off,
            heaps_off,
            results_off,
            trace_off,
            trace_entries: 0,
            total_bytes,
            rings_base,
            heads_base,
            mailboxes_base,
            user_base,
        })
    }

    /// The same layout with an arrival log of `entries` packets per node.
    pub fn with_trace(mut self, entries: usize) -> Layout {
        self.trace_entries = entries;
        self.total_bytes = self.trace_off + self.nodes * (entries + 8) * 8;
        self
    }

    fn heads_per_node(&self) -> u64 {
        round_up(self.nodes as u64 * 64, MC_PAGE_BYTES)
    }

    fn mbox_per_node(&self) -> u64 {
        round_up(self.mailboxes as u64 * MAILBOX_BYTES, MC_PAGE_BYTES)
    }
}


#[repr(C)]
struct Header {
    magic: AtomicU64,
    nodes: AtomicU64,
    address_space: AtomicU64,
    heap_bytes: AtomicU64,
    packet_bytes: AtomicU64,
    /// The modeled network's features (`Features::to_bits`).
    features: AtomicU64,
    hub_lock: AtomicU32,
    _pad0: [u64; 2],
    link_lock: [Padded<AtomicU32>; MAX_NODES],
    counters: [Padded<[AtomicU64; COUNTER_WORDS]>; MAX_NODES],
    /// The cluster's control block (abort, first failure, doorbells, node status,
    /// heartbeats): it shares the fabric's mapping so that node processes share it.
    control: Control,
}





#[repr(C, align(64))]
struct Padded<T>(T);

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// The shared segment of one cluster, as mapped in this process.
pub struct Fabric {
    fd: OwnedFd,
    wire: Mapping,
    pub(super) layout: Layout,
    /// The link and hub queues of the modeled clock (in-process clusters only).
    pub(super) links: timing::Links,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("layout", &self.layout)
            .finish()
    }
}

impl AsRef<Control> for Fabric {
    fn as_ref(&self) -> &Control {
        self.control()
    }
}

impl Fabric {
    /// Creates the fabric of a new cluster.
    pub fn create(layout: Layout, profile: &Profile) -> Result<Arc<Fabric>, NetError> {
        let fd = sys::memfd_create("cashmere-fabric", layout.total_bytes)?;
        let fabric = Fabric::map(fd, layout)?;
        let h = fabric.header();
        h.nodes.store(layout.nodes as u64, Ordering::Relaxed);
        h.address_space
            .store(layout.address_space_bytes, Ordering::Relaxed);
        h.heap_bytes
            .store(layout.heap_bytes as u64, Ordering::Relaxed);
        h.packet_bytes
            .store(profile.packet_bytes.max(1), Ordering::Relaxed);
        h.features
            .store(profile.features.to_bits(), Ordering::Relaxed);
        h.control.init(layout.nodes);
        // Every node receives its own messaging pages.
        for node in 0..layout.nodes {
            let bit = 1u64 << node;
            for src in 0..layout.nodes {
                let off = fabric.ring_off(node, src);
                fabric.set_receivers(off, RING_BYTES, bit);
            }
            fabric.set_receivers(
                layout.heads_base + node as u64 * layout.heads_per_node(),
                layout.heads_per_node(),
                bit,
            );
            fabric.set_receivers(
                layout.mailboxes_base + node as u64 * layout.mbox_per_node(),
                layout.mbox_per_node(),
                bit,
            );
        }
        h.magic.store(MAGIC, Ordering::Release);
        Ok(Arc::new(fabric))
    }

    /// Maps a fabric inherited from the launcher and checks it matches `layout`.
    pub fn adopt(fd: OwnedFd, layout: Layout) -> Result<Arc<Fabric>, NetError> {
        let fabric = Fabric::map(fd, layout)?;
        let h = fabric.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(NetError::Mismatch("no fabric header".into()));
        }
        let seen = (
            h.nodes.load(Ordering::Relaxed),
            h.address_space.load(Ordering::Relaxed),
            h.heap_bytes.load(Ordering::Relaxed),
        );
        let want = (
            layout.nodes as u64,
            layout.address_space_bytes,
            layout.heap_bytes as u64,
        );
        if seen != want {
            return Err(NetError::Mismatch(format!(
                "fabric has nodes/address space/heap {seen:?}, this process expects {want:?}"
            )));
        }
        Ok(Arc::new(fabric))
    }

    /// Maps the fabric in `fd`, laid out as `layout`, into this process.
    fn map(fd: OwnedFd, layout: Layout) -> Result<Fabric, NetError> {
        let wire = sys::map_shared(&fd, 0, layout.total_bytes, Prot::ReadWrite)?;
        Ok(Fabric {
            fd,
            wire,
            layout,
            links: timing::Links::default(),
        })
    }

    /// The features of the network this fabric models (the profile's it was created with).
    pub fn features(&self) -> Features {
        Features::from_bits(self.header().features.load(Ordering::Relaxed))
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The descriptor node processes inherit.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The memfd itself, for mapping a node's heap.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn header(&self) -> &Header {
        // SAFETY: the wire mapping is at least HEADER_BYTES long, page aligned, and Header
        // consists of atomics, for which any bit pattern (zero at creation) is valid.
        unsafe { &*(self.wire.as_ptr() as *const Header) }
    }

    fn mask(&self, page: u64) -> &AtomicU64 {
        assert!(page < self.layout.address_space_bytes.div_ceil(MC_PAGE_BYTES));
        // SAFETY: the mask table lies inside the wire mapping (see Layout::new) and
        // entries are 8-byte aligned atomics.
        unsafe {
            &*(self
                .wire
                .as_ptr()
                .add(self.layout.masks_off + page as usize * 8) as *const AtomicU64)
        }
    }

    fn set_receivers(&self, offset: u64, len: u64, mask: u64) {
        let first = offset / MC_PAGE_BYTES;
        let last = (offset + len).div_ceil(MC_PAGE_BYTES);
        for p in first..last {
            self.mask(p).store(mask, Ordering::Release);
        }
    }

    fn attach_receiver(&self, offset: u64, len: u64, node: usize, loopback: bool) {
        let first = offset / MC_PAGE_BYTES;
        let last = (offset + len).div_ceil(MC_PAGE_BYTES);
        let bits = (1u64 << node) | if loopback { LOOPBACK_BIT } else { 0 };
        for p in first..last {
            self.mask(p).fetch_or(bits, Ordering::AcqRel);
        }
    }

    fn receives(&self, offset: u64, node: usize) -> bool {
        self.mask(offset / MC_PAGE_BYTES).load(Ordering::Acquire) & (1u64 << node) != 0
    }

    fn detach_receiver(&self, offset: u64, len: u64, node: usize) {
        let first = offset / MC_PAGE_BYTES;
        let last = (offset + len).div_ceil(MC_PAGE_BYTES);
        for p in first..last {
            self.mask(p).fetch_and(!(1u64 << node), Ordering::AcqRel);
        }
    }

    /// Address in this process of `node`'s receive memory for logical `offset` of the
    /// pooled backing.
    pub(super) fn pool_ptr(&self, node: usize, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.layout.address_space_bytes);
        // SAFETY: the pool lies inside the wire mapping: nodes * address_space bytes from
        // pool_off, and offset is within the address space.
        unsafe {
            self.wire.as_ptr().add(
                self.layout.pool_off
                    + node * self.layout.address_space_bytes as usize
                    + offset as usize,
            )
        }
    }

    /// Address in this process (wire view) of byte `offset` of `node`'s heap.
    pub(crate) fn heap_ptr(&self, node: usize, offset: usize) -> *mut u8 {
        assert!(node < self.layout.nodes && offset <= self.layout.heap_bytes);
        // SAFETY: heaps lie inside the wire mapping, heap_bytes each from heaps_off.
        unsafe {
            self.wire
                .as_ptr()
                .add(self.layout.heaps_off + node * self.layout.heap_bytes + offset)
        }
    }

    /// Offset in the memfd of `node`'s heap, for mapping the application's view of it.
    pub(crate) fn heap_file_offset(&self, node: usize) -> usize {
        self.layout.heaps_off + node * self.layout.heap_bytes
    }

    pub(super) fn ring_off(&self, dst: usize, src: usize) -> u64 {
        self.layout.rings_base + (dst * self.layout.nodes + src) as u64 * RING_BYTES
    }

    pub(super) fn head_off(&self, producer: usize, consumer: usize) -> u64 {
        self.layout.heads_base
            + producer as u64 * self.layout.heads_per_node()
            + consumer as u64 * 64
    }

    pub(super) fn mailbox_off(&self, node: usize, slot: usize) -> u64 {
        self.layout.mailboxes_base
            + node as u64 * self.layout.mbox_per_node()
            + slot as u64 * MAILBOX_BYTES
    }

    /// The cluster's control block.
    pub(crate) fn control(&self) -> &Control {
        &self.header().control
    }

    fn counter(&self, node: usize, which: usize) -> &AtomicU64 {
        &self.header().counters[node].0[which]
    }

    /// The traffic counters of `node`.
    pub fn counters(&self, node: usize) -> NetCounters {
        let c = |i| self.counter(node, i).load(Ordering::Relaxed);
        NetCounters {
            packets: c(0),
            bytes: c(1),
            broadcasts: c(2),
            messages: c(3),
            message_bytes: c(4),
            acks: c(5),
        }
    }

    pub(super) fn count(&self, node: usize, which: usize, n: u64) {
        self.counter(node, which).fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn packets_for(&self, bytes: u64) -> u64 {
        bytes
            .div_ceil(self.header().packet_bytes.load(Ordering::Relaxed))
            .max(1)
    }

    fn trace_word(&self, node: usize, i: usize) -> &AtomicU64 {
        let base = self.layout.trace_off + node * (self.layout.trace_entries + 8) * 8;
        // SAFETY: the trace area of each node is (trace_entries + 8) words inside the wire
        // mapping (Layout::with_trace); i <= trace_entries.
        unsafe { &*(self.wire.as_ptr().add(base + i * 8) as *const AtomicU64) }
    }

    /// Appends one arrival to `node`'s log. Called with `node`'s link lock held, so the log
    /// order is the order in which packets landed in `node`'s memory.
    fn trace_arrival(&self, node: usize, tag: u64) {
        let n = self.layout.trace_entries;
        let count = self.trace_word(node, 0).load(Ordering::Relaxed) as usize;
        if count < n {
            self.trace_word(node, count + 1)
                .store(tag, Ordering::Relaxed);
        }
        self.trace_word(node, 0)
            .store(count as u64 + 1, Ordering::Release);
    }

    /// The arrival log of `node`: the first word of every packet it received, in arrival
    /// order (empty without a trace; panics if the log overflowed).
    #[cfg(test)]
    pub fn arrivals(&self, node: usize) -> Vec<u64> {
        if self.layout.trace_entries == 0 {
            return Vec::new();
        }
        let count = self.trace_word(node, 0).load(Ordering::Acquire) as usize;
        assert!(
            count <= self.layout.trace_entries,
            "arrival log overflowed: {count} packets, room for {}",
            self.layout.trace_entries
        );
        (0..count)
            .map(|i| self.trace_word(node, i + 1).load(Ordering::Relaxed))
            .collect()
    }

    /// True once the cluster has aborted.
    pub fn aborted(&self) -> bool {
        self.control().aborted()
    }

    /// The result area of `node` (written by the node, read by the launcher).
    pub(crate) fn result_area(&self, node: usize) -> *mut u8 {
        assert!(node < self.layout.nodes);
        // SAFETY: result areas lie inside the wire mapping, RESULT_BYTES each.
        unsafe {
            self.wire
                .as_ptr()
                .add(self.layout.results_off + node * RESULT_BYTES)
        }
    }

    fn lock<'a>(&'a self, word: &'a AtomicU32) -> SpinGuard<'a> {
        wait::lock_word(word, self.control());
        SpinGuard { word }
    }

    fn hub_lock(&self) -> &AtomicU32 {
        &self.header().hub_lock
    }

    fn link_lock(&self, node: usize) -> &AtomicU32 {
        &self.header().link_lock[node].0
    }
}

/// Holds a hub or link lock of the fabric (see [`wait::lock_word`]).
struct SpinGuard<'a> {
    word: &'a AtomicU32,
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        wait::unlock_word(self.word);
    }
}


/// Where `region`'s byte `at` lives in `node`'s receive memory, in this process.
fn backing_ptr(region: &Region, fabric: &Fabric, node: usize, at: u64) -> *mut u8 {
    match region.backing {
        Backing::Pool => fabric.pool_ptr(node, region.offset + at),
        Backing::Heap { heap_offset } => fabric.heap_ptr(node, heap_offset + at as usize),
    }
}

/// A transmission's pieces, each at its offset from the lowest, shared by the deliveries
/// to its receivers under the modeled clock (`Port::transmit_in_page`).
type SharedPieces = Arc<[(usize, Box<[u8]>)]>;

fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64usize).filter(move |i| mask & (1u64 << i) != 0)
}

/// One node's port on the fabric: its [`Transport`].
pub(crate) struct Port {
    fabric: Arc<Fabric>,
    /// This node, as the index of its areas in the fabric.
    node: usize,
    features: Features,
    /// The network lacks a feature a region write may need (`Port::check_features`).
    restricted: bool,
    msg: msg::Messenger,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port").field("node", &self.node).finish()
    }
}

impl Port {
    /// Node `node`'s port on `fabric`.
    pub(crate) fn new(fabric: Arc<Fabric>, node: NodeId) -> Port {
        assert!(node.index() < fabric.layout.nodes, "{node} out of range");
        let node = node.index();
        let msg = msg::Messenger::new(&fabric, node);
        let features = fabric.features();
        Port {
            restricted: !(features.remote_write && features.broadcast && features.loopback),
            features,
            fabric,
            node,
            msg,
        }
    }

    /// Copies `data` to every receiver of the pages it covers (see the module doc for the
    /// locks that give rules 1 and 2).
    fn transmit(&self, region: &Region, at: u64, data: &[u8]) {
        assert!(
            at + data.len() as u64 <= region.len,
            "transmit outside the region: {at} + {} > {}",
            data.len(),
            region.len
        );
        let mut done = 0usize;
        loop {
            let off = region.offset + at + done as u64;
            let page_end = (off / MC_PAGE_BYTES + 1) * MC_PAGE_BYTES;
            let chunk = ((page_end - off) as usize).min(data.len() - done);
            self.transmit_in_page(region, &[(at + done as u64, &data[done..done + chunk])]);
            done += chunk;
            if done >= data.len() {
                break;
            }
        }
    }

    /// Transmits `pieces` (region offset, bytes), in order, all inside one receive page:
    /// the receivers are looked up and the locks taken once for the whole group, which is
    /// one packet stream on the wire.
    fn transmit_in_page(&self, region: &Region, pieces: &[(u64, &[u8])]) {
        let Some(&(first, _)) = pieces.first() else {
            return;
        };
        let page = (region.offset + first) / MC_PAGE_BYTES;
        debug_assert!(pieces.iter().all(|(at, b)| {
            let start = region.offset + at;
            start / MC_PAGE_BYTES == page
                && (b.is_empty() || (start + b.len() as u64 - 1) / MC_PAGE_BYTES == page)
        }));
        let entry = self.fabric.mask(page).load(Ordering::Acquire);
        let mut receivers = entry & 0xFFFF_FFFF;
        if entry & LOOPBACK_BIT == 0 {
            receivers &= !(1u64 << self.node);
        }
        let count = receivers.count_ones() as u64;
        if count == 0 {
            return;
        }
        if self.restricted {
            self.check_features(receivers, entry & LOOPBACK_BIT != 0);
        }
        let bytes: u64 = pieces.iter().map(|(_, b)| b.len() as u64).sum();
        let packets: u64 = pieces
            .iter()
            .map(|(_, b)| self.fabric.packets_for(b.len() as u64))
            .sum();
        // Modeled time: every receiver's copy is made when it arrives (`timing`). The
        // group's bytes are copied once, at the first receiver (never under the wall
        // clock, where `transmit` defers nothing), and shared by every receiver's delivery
        // (a broadcast to 31 nodes allocated 93 buffers where it now allocates 31
        // closures); inside one receive page a receiver's backing is one contiguous range,
        // so each piece lands at its offset from the receiver's address of the lowest.
        let mut shared: Option<(u64, SharedPieces)> = None;
        let deferred = self.fabric.links.transmit(
            self.node,
            receivers,
            bytes,
            if region.awaited {
                let lo = pieces.iter().map(|&(at, _)| region.offset + at).min().unwrap_or(0);
                let hi = pieces
                    .iter()
                    .map(|&(at, b)| region.offset + at + b.len() as u64)
                    .max()
                    .unwrap_or(0);
                crate::sched::Wake::Memory { lo, hi }
            } else {
                crate::sched::Wake::Nobody
            },
            |r| {
                let (low, data) = shared.get_or_insert_with(|| {
                    let low = pieces.iter().map(|&(at, _)| at).min().unwrap_or(first);
                    let data = pieces
                        .iter()
                        .map(|&(at, b)| ((at - low) as usize, Box::from(b)))
                        .collect();
                    (low, data)
                });
                let (low, data) = (*low, Arc::clone(data));
                let base = backing_ptr(region, &self.fabric, r, low) as usize;
                debug_assert!(pieces.iter().all(|&(at, _)| {
                    backing_ptr(region, &self.fabric, r, at) as usize
                        == base + (at - low) as usize
                }));
                Box::new(move || {
                    for (off, b) in data.iter() {
                        let dst = (base + off) as *mut u8;
                        // SAFETY: dst is receiver r's address of this piece (contiguous
                        // backing, checked above in debug builds) in the wire mapping,
                        // which outlives every delivery; the source is an owned buffer.
                        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst, b.len()) };
                    }
                })
            },
        );
        if !deferred {
            self.deliver_now(region, pieces, receivers);
        }
        if count > 1 {
            self.fabric.count(self.node, 2, 1);
        }
        self.fabric.count(self.node, 0, packets);
        self.fabric.count(self.node, 1, bytes * count);
    }

    /// Copies `pieces` into every receiver in `receivers` now, under the hub lock (for a
    /// broadcast) and the receivers' link locks: rules 1 and 2 of the module doc.
    fn deliver_now(&self, region: &Region, pieces: &[(u64, &[u8])], receivers: u64) {
        let deliver = |r: usize| {
            for &(at, bytes) in pieces {
                let dst = backing_ptr(region, &self.fabric, r, at);
                // SAFETY: dst points into receiver r's backing for this range, inside the
                // wire mapping; the source is a distinct local buffer.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
                if self.fabric.layout.trace_entries > 0 {
                    let tag = bytes
                        .get(..8)
                        .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
                    self.fabric.trace_arrival(r, tag);
                    // Tracing also perturbs the schedule between receivers, so that a
                    // missing lock shows up as a reordering in the ordering tests.
                    wait::perturb_schedule();
                }
            }
        };
        if receivers.count_ones() > 1 {
            let _hub = self.fabric.lock(self.fabric.hub_lock());
            let guards: Vec<_> = bits(receivers)
                .map(|r| self.fabric.lock(self.fabric.link_lock(r)))
                .collect();
            bits(receivers).for_each(deliver);
            drop(guards);
        } else {
            let r = receivers.trailing_zeros() as usize;
            let _link = self.fabric.lock(self.fabric.link_lock(r));
            deliver(r);
        }
    }


    /// The fabric this port is on.
    pub(crate) fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Refuses a region write that needs a feature the modeled network lacks: the protocol
    /// variant should have been refused before it ran (`Config::validate`).
    fn check_features(&self, receivers: u64, loopback: bool) {
        let f = &self.features;
        let others = receivers & !(1u64 << self.node);
        let lacking = [
            (others != 0 && !f.remote_write, "remote write"),
            (receivers.count_ones() > 1 && !f.broadcast, "broadcast"),
            (loopback && receivers & (1u64 << self.node) != 0 && !f.loopback, "loopback"),
        ];
        if let Some((_, name)) = lacking.iter().find(|(lacks, _)| *lacks) {
            panic!(
                "node {} made a region write that needs {name}, which this network lacks: \
                 the protocol variant should have been refused at configuration",
                self.node
            );
        }
    }
}

impl Transport for Port {
    fn node(&self) -> NodeId {
        NodeId::from_usize(self.node)
    }

    fn nodes(&self) -> usize {
        self.fabric.layout.nodes
    }

    fn features(&self) -> Features {
        self.features
    }

    fn describe(&self) -> String {
        "the simulated fabric".into()
    }

    fn address_space(&self) -> (u64, u64) {
        (self.fabric.layout.address_space_bytes, self.fabric.layout.user_base)
    }

    fn control(&self) -> &Control {
        self.fabric.control()
    }

    fn counters(&self) -> NetCounters {
        self.fabric.counters(self.node)
    }

    fn attach(&self, offset: u64, len: u64, loopback: bool) {
        self.fabric.attach_receiver(offset, len, self.node, loopback);
    }

    fn detach(&self, offset: u64, len: u64) {
        self.fabric.detach_receiver(offset, len, self.node);
    }

    fn receives(&self, offset: u64) -> bool {
        self.fabric.receives(offset, self.node)
    }

    fn receive_memory(&self, region: &Region) -> *mut u8 {
        let limit = match region.backing {
            Backing::Pool => self.fabric.layout.address_space_bytes - region.offset,
            Backing::Heap { heap_offset } => (self.fabric.layout.heap_bytes - heap_offset) as u64,
        };
        assert!(region.len <= limit, "region {region:?} outside its backing");
        backing_ptr(region, &self.fabric, self.node, 0)
    }

    fn write(&self, region: &Region, at: u64, data: &[u8]) {
        self.transmit(region, at, data);
    }

    /// Runs that share a receive page go out as one group (one lookup and one lock hold):
    /// the path remote-written diffs take.
    fn write_runs(&self, region: &Region, base: u64, runs: &[(usize, &[u8])]) {
        let mut group: Vec<(u64, &[u8])> = Vec::with_capacity(runs.len());
        let mut group_page = u64::MAX;
        for &(off, bytes) in runs {
            let at = base + off as u64;
            assert!(
                at + bytes.len() as u64 <= region.len,
                "transmit outside the region"
            );
            let start = region.offset + at;
            let last = start + bytes.len().max(1) as u64 - 1;
            if start / MC_PAGE_BYTES != last / MC_PAGE_BYTES {
                self.transmit_in_page(region, &group);
                group.clear();
                group_page = u64::MAX;
                self.transmit(region, at, bytes);
                continue;
            }
            if start / MC_PAGE_BYTES != group_page {
                self.transmit_in_page(region, &group);
                group.clear();
                group_page = start / MC_PAGE_BYTES;
            }
            group.push((at, bytes));
        }
        self.transmit_in_page(region, &group);
    }

    /// Under the wall clock every write has landed when it returns, so there is nothing to
    /// wait for; under the modeled clock writes land after the network's latency
    /// (`timing::Links::ack_time`).
    fn ack(&self, seam: &Seam<'_>) -> Result<(), MsgError> {
        self.fabric.count(self.node, 5, 1);
        if let Some(t) = self.fabric.links.ack_time() {
            seam.until(WaitFor::Landed, || crate::sched::now().is_some_and(|n| n >= t))?;
            // Reaching `t` is not enough: the messages this wait served may have carried
            // the clock past `t` before the simulation made the deliveries due by then
            // (the marker's among them). Letting the simulation catch up makes them.
            crate::sched::yield_now();
        }
        Ok(())
    }

    /// Under the modeled clock it does nothing: every delivery of a remote write wakes its
    /// receiver when it arrives (`crate::sched`).
    fn ring_bells(&self, nodes: NodeSet) {
        if crate::sched::active() {
            return;
        }
        for n in nodes.iter() {
            wait::wake_processors(self.fabric.control(), n.index());
        }
    }

    fn send(
        &self,
        seam: Option<&Seam<'_>>,
        to: NodeId,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError> {
        self.msg
            .send(&self.fabric, seam, to, kind, slot, token, payload)
    }

    fn poll(&self, f: impl FnMut(Inbound<'_>)) -> usize {
        self.msg.poll(&self.fabric, f)
    }

    fn has_messages(&self) -> bool {
        self.msg.has_messages(&self.fabric)
    }

    fn next_token(&self, slot: u16) -> u32 {
        self.msg.next_token(slot)
    }

    fn reply(
        &self,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError> {
        self.msg.reply(&self.fabric, to, slot, token, head, tail)
    }

    fn wait_reply(
        &self,
        seam: &Seam<'_>,
        what: WaitFor,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        self.msg
            .wait_reply(&self.fabric, seam, what, slot, token, out)
    }

    fn acknowledge(&self, to: NodeId, slot: u16, token: u32) -> Result<(), MsgError> {
        self.msg.ack(&self.fabric, to, slot, token)
    }

    fn wait_acks(
        &self,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        token: u32,
        from: NodeSet,
    ) -> Result<(), MsgError> {
        self.msg
            .wait_acks(&self.fabric, seam, kind, slot, token, from)
    }

}

#[cfg(test)]
mod tests {
    use super::super::Net;
    use super::*;

    /// Three nodes on a fabric modeling `network`; node 0 has a region that nodes
    /// `receivers` receive (node 0 itself with loopback).
    fn written_by_node_0(network: &str, receivers: &[usize]) -> (Vec<Net>, Region) {
        let profile = crate::profile::by_name(network).unwrap();
        let layout = Layout::new(3, 1, 16 << 20, 1 << 20).unwrap();
        let fabric = Fabric::create(layout, &profile).unwrap();
        let nets: Vec<Net> = (0..3)
            .map(|n| Net::new(Arc::clone(&fabric), NodeId::from_usize(n)))
            .collect();
        assert_eq!(nets[0].features(), profile.features);
        let region = nets[0].alloc_region(8, Backing::Pool, "a test").unwrap();
        for &r in receivers {
            nets[r].attach_rx(&region, 0, 8, r == 0);
        }
        (nets, region)
    }

    /// A synchronization word written to another node (`Net::ring_bells`) wakes its
    /// parked processors, not its idle service, which waits for no such word.
    #[test]
    fn a_written_synchronization_word_wakes_the_processors_not_the_service() {
        let (nets, _) = written_by_node_0("myrinet", &[1]);
        let bell = nets[0].fabric().control().bell(1);
        // A parked service and a parked processor (counted by hand: nobody sleeps here).
        bell.parked.store(2, Ordering::SeqCst);
        bell.service_parked.store(1, Ordering::SeqCst);
        let word = bell.word.load(Ordering::SeqCst);
        let service = bell.service_word.load(Ordering::SeqCst);
        nets[0].ring_bells(NodeSet::only(NodeId::from_usize(1)));
        assert_eq!(bell.word.load(Ordering::SeqCst), word + 1, "the parked processor was not rung");
        assert_eq!(bell.service_word.load(Ordering::SeqCst), service, "the service was woken");
        // Nobody parked: no ring at all.
        bell.parked.store(0, Ordering::SeqCst);
        bell.service_parked.store(0, Ordering::SeqCst);
        nets[0].ring_bells(NodeSet::only(NodeId::from_usize(1)));
        assert_eq!(bell.word.load(Ordering::SeqCst), word + 1, "rang with nobody parked");
    }

    #[test]
    fn a_write_the_network_can_make_lands() {
        let (nets, region) = written_by_node_0("myrinet", &[2]);
        nets[0].tx(region).write_u64(0, 7);
        assert_eq!(nets[2].rx(region).load_u64(0), 7);
        assert_eq!(nets[1].rx(region).load_u64(0), 0);
    }

    #[test]
    #[should_panic(expected = "needs broadcast")]
    fn a_broadcast_without_broadcast_is_refused() {
        let (nets, region) = written_by_node_0("myrinet", &[1, 2]);
        nets[0].tx(region).write_u64(0, 7);
    }

    #[test]
    #[should_panic(expected = "needs remote write")]
    fn a_remote_write_over_messages_only_is_refused() {
        let (nets, region) = written_by_node_0("gige-tcp", &[1]);
        nets[0].tx(region).write_u64(0, 7);
    }

    #[test]
    #[should_panic(expected = "needs loopback")]
    fn a_loopback_without_loopback_is_refused() {
        let (nets, region) = written_by_node_0("tnet", &[0]);
        nets[0].tx(region).write_u64(0, 7);
    }
}
