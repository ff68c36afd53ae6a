//! A simulated remote-write network with Memory Channel semantics
//! (`memory-channel-2.txt`, section "MEMORY CHANNEL Address Space Mapping" and the ordering
//! rules).
//!
//! # Model
//!
//! A cluster shares one *fabric*: a memfd that every node process (or, in the in-process
//! mode, every node thread group) maps once, unprotected, as its *wire view*. The fabric
//! holds the receive memory of every node, and only this module ever reads or writes
//! another node's part of it: a store through a [`Tx`] handle is copied into every receive
//! mapping of the region, exactly as a Memory Channel adapter would DMA the packet there.
//!
//! The network address space (128 MiB for Memory Channel 2) is divided into receive pages
//! of [`MC_PAGE_BYTES`]. A shared table gives, for each receive page, the set of nodes
//! that have attached a receive mapping and whether the sender's own copy is looped back.
//! A transmit to a page lands in every attached receiver.
//!
//! # Ordering
//!
//! * Rule 1 (single sender): a transmit is complete when [`Tx::write`] returns, so the
//!   packets of one sending thread arrive everywhere in the order it sent them.
//! * Rule 2 (multiple senders): a transmit with more than one receiver (a broadcast)
//!   holds the hub lock and the link lock of every receiver while it copies, and a
//!   point-to-point transmit holds its receiver's link lock. So every receiver sees all
//!   broadcasts in one order, and no packet is torn by another.
//! * An acknowledge request ([`Net::ack`]) returns once every packet this node sent
//!   earlier has landed, which here is immediately; it is kept as an explicit operation so
//!   that protocols say where they rely on it, and so the modeled clock can charge it.
//!
//! # Memory ordering
//!
//! Bytes copied by a transmit are visible to a receiver that observes, with Acquire, any
//! word the same thread transmitted later with [`Tx::write_u64`] (a Release store).

mod msg;
pub(crate) mod timing;

pub use crate::profile::{Features, Profile};
pub use msg::{Inbound, MsgError, MAX_MESSAGE_BYTES};
pub use crate::control::AbortOrigin;

use crate::sys::{self, Mapping, Prot};
use crate::control::Control;
use crate::wait::{self, Seam, WaitFor};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::ids::MAX_NODES;
/// Granularity of receive mappings in the network address space: the host page (Memory
/// Channel used the 8 KiB Alpha page; 4 KiB lets 4 KiB coherence pages have their own homes).
pub const MC_PAGE_BYTES: u64 = 4096;
/// Bytes of one message ring (one per ordered pair of nodes).
pub const RING_BYTES: u64 = 64 * 1024;
/// Bytes of one reply mailbox (one per processor and one for the service thread).
pub const MAILBOX_BYTES: u64 = 24 * 1024;
/// Bytes of a node's result area in the fabric.
pub const RESULT_BYTES: usize = 4 * 1024 * 1024;
const HEADER_BYTES: usize = 64 * 1024;
const MAGIC: u64 = 0x4353_4d5f_4641_4231; // "CSM_FAB1"
const LOOPBACK_BIT: u64 = 1 << 32;

/// Per-node traffic counters, kept in the fabric so the launcher can read every node's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetCounters {
    /// Packets transmitted (a write is split into packets of the profile's packet size).
    pub packets: u64,
    /// Payload bytes transmitted, counted once per receiver.
    pub bytes: u64,
    /// Transmits that reached more than one receiver.
    pub broadcasts: u64,
    /// Explicit messages sent (requests, one-way messages and replies).
    pub messages: u64,
    /// Bytes of explicit messages, headers included.
    pub message_bytes: u64,
    /// Acknowledge requests.
    pub acks: u64,
}

const COUNTER_WORDS: usize = 8;

/// Errors of the network layer. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("a cluster needs at least one node; got 0")]
    NoNodes,
    #[error("{nodes} nodes requested; the network supports at most {MAX_NODES}")]
    TooManyNodes { nodes: usize },
    #[error("region [{offset:#x}, {end:#x}) lies outside the network address space of {space} bytes; use a smaller region or a profile with more address space")]
    OutsideAddressSpace { offset: u64, end: u64, space: u64 },
    #[error("the network address space of {space} bytes is full: {wanted} more bytes were requested with {left} left{hint}; use a network with more address space (--network host has 64 GiB and every feature; `cashmere profiles` lists each network's, column space), fewer nodes or processors per node, or a smaller input")]
    AddressSpaceFull {
        space: u64,
        wanted: u64,
        left: u64,
        hint: String,
    },
    #[error("{0}")]
    Message(#[from] MsgError),
    #[error("cannot set up the fabric: {0}{hint}", hint = fabric_hint(.0))]
    Io(#[from] std::io::Error),
    #[error("the inherited fabric does not match this program's configuration ({0}); run the same binary with the same arguments on every node")]
    Mismatch(String),
}

/// What to do when the fabric's memory cannot be had: it holds every node's shared heap
/// (twice in the in-process mode), so a memory or address-space limit is met first there.
fn fabric_hint(e: &std::io::Error) -> &'static str {
    if e.raw_os_error() == Some(crate::sys::ENOMEM) {
        "; the fabric maps every node's shared heap, so a memory or address-space limit \
         (`ulimit -v`) is met there first: give a smaller heap with --heap-mb (or DSM_HEAP_MB), \
         or fewer nodes"
    } else {
        ""
    }
}

/// How the fabric is laid out; identical in every process of a cluster.
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
    /// First byte of the address space available to [`Net::alloc_region`].
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

/// Fixed words at the start of the fabric.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    nodes: AtomicU64,
    address_space: AtomicU64,
    heap_bytes: AtomicU64,
    packet_bytes: AtomicU64,
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
    layout: Layout,
    /// The link and hub queues of the modeled clock (in-process clusters only).
    links: timing::Links,
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
        let wire = sys::map_shared(&fd, 0, layout.total_bytes, Prot::ReadWrite)?;
        let fabric = Fabric {
            fd,
            wire,
            layout,
            links: timing::Links::default(),
        };
        let h = fabric.header();
        h.nodes.store(layout.nodes as u64, Ordering::Relaxed);
        h.address_space
            .store(layout.address_space_bytes, Ordering::Relaxed);
        h.heap_bytes
            .store(layout.heap_bytes as u64, Ordering::Relaxed);
        h.packet_bytes
            .store(profile.packet_bytes.max(1), Ordering::Relaxed);
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
        let wire = sys::map_shared(&fd, 0, layout.total_bytes, Prot::ReadWrite)?;
        let fabric = Fabric {
            fd,
            wire,
            layout,
            links: timing::Links::default(),
        };
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
    fn pool_ptr(&self, node: usize, offset: u64) -> *mut u8 {
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

    fn ring_off(&self, dst: usize, src: usize) -> u64 {
        self.layout.rings_base + (dst * self.layout.nodes + src) as u64 * RING_BYTES
    }

    fn head_off(&self, producer: usize, consumer: usize) -> u64 {
        self.layout.heads_base
            + producer as u64 * self.layout.heads_per_node()
            + consumer as u64 * 64
    }

    fn mailbox_off(&self, node: usize, slot: usize) -> u64 {
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

    fn count(&self, node: usize, which: usize, n: u64) {
        self.counter(node, which).fetch_add(n, Ordering::Relaxed);
    }

    fn packets_for(&self, bytes: u64) -> u64 {
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

    /// Marks the cluster as failed: every runtime wait returns an error from now on
    /// (the control block's `Control::abort`).
    pub fn abort(&self) {
        self.control().abort();
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

/// Where the receive memory of a region lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Receive memory in the fabric's pool, one copy per receiver.
    Pool,
    /// Each receiver's own heap, at the same offset as the region's offset within the
    /// heap's window (for master copies that diffs are remote-written into).
    Heap { heap_offset: usize },
}

/// A range of the network address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset: u64,
    pub len: u64,
    pub backing: Backing,
    /// Whether a thread may wait for a remote write to this region (a synchronization
    /// word, a flow-control index). Under the modeled clock only writes to such regions
    /// wake the receiver's activities that poll memory (`crate::sched::Wake::Memory`);
    /// see [`Region::unawaited`].
    pub awaited: bool,
}

impl Region {
    /// The same region, declared as memory no thread ever waits on (the directory, write
    /// notices, master copies): its readers look at it when they run. Under the modeled
    /// clock a write to it wakes no one, which saves a hand-over per blocked activity per
    /// write. A wait on such memory would then be reported as a deadlock.
    pub fn unawaited(self) -> Region {
        Region {
            awaited: false,
            ..self
        }
    }

    /// The network addresses of bytes `[at, at + len)` of the region (the same on every
    /// node): what a waiter on them watches (`crate::wait::Seam::until_written`).
    pub fn span(&self, at: u64, len: u64) -> (u64, u64) {
        assert!(at + len <= self.len, "span outside the region");
        (self.offset + at, self.offset + at + len)
    }

    fn backing_ptr(&self, fabric: &Fabric, node: usize, at: u64) -> *mut u8 {
        match self.backing {
            Backing::Pool => fabric.pool_ptr(node, self.offset + at),
            Backing::Heap { heap_offset } => fabric.heap_ptr(node, heap_offset + at as usize),
        }
    }
}

/// One node's attachment to the network.
pub struct Net {
    fabric: Arc<Fabric>,
    node: usize,
    next_region: std::sync::Mutex<u64>,
    msg: msg::Messenger,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("node", &self.node).finish()
    }
}

impl Net {
    pub fn new(fabric: Arc<Fabric>, node: usize) -> Net {
        assert!(node < fabric.layout.nodes, "node {node} out of range");
        let user_base = fabric.layout.user_base;
        let msg = msg::Messenger::new(&fabric, node);
        Net {
            fabric,
            node,
            next_region: std::sync::Mutex::new(user_base),
            msg,
        }
    }

    pub fn node(&self) -> usize {
        self.node
    }

    pub fn nodes(&self) -> usize {
        self.fabric.layout.nodes
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Bytes of network address space not yet allocated by this node's setup.
    pub fn space_left(&self) -> u64 {
        self.fabric.layout.address_space_bytes - *self.next_region.lock().expect("poisoned")
    }

    /// Allocates `len` bytes of network address space (rounded to receive pages). Every
    /// node runs the same setup, so every node gets the same offsets in the same order.
    pub fn alloc_region(
        &self,
        len: u64,
        backing: Backing,
        purpose: &str,
    ) -> Result<Region, NetError> {
        let mut next = self.next_region.lock().expect("poisoned");
        let len = round_up(len.max(1), MC_PAGE_BYTES);
        let space = self.fabric.layout.address_space_bytes;
        if *next + len > space {
            return Err(NetError::AddressSpaceFull {
                space,
                wanted: len,
                left: space - *next,
                hint: format!(" (for {purpose})"),
            });
        }
        let region = Region {
            offset: *next,
            len,
            backing,
            awaited: true,
        };
        *next += len;
        Ok(region)
    }

    /// A region at a fixed offset, checked against the address space.
    pub fn region_at(&self, offset: u64, len: u64, backing: Backing) -> Result<Region, NetError> {
        let space = self.fabric.layout.address_space_bytes;
        match offset.checked_add(len) {
            Some(end) if end <= space => Ok(Region {
                offset,
                len,
                backing,
                awaited: true,
            }),
            _ => Err(NetError::OutsideAddressSpace {
                offset,
                end: offset.saturating_add(len),
                space,
            }),
        }
    }

    /// Attaches a receive mapping of `region[at, at + len)` on this node. With `loopback`,
    /// this node's own transmits to that range are reflected into it too.
    pub fn attach_rx(&self, region: &Region, at: u64, len: u64, loopback: bool) {
        assert!(at + len <= region.len, "receive range outside the region");
        self.fabric
            .attach_receiver(region.offset + at, len, self.node, loopback);
    }

    /// Removes this node's receive mapping of `region[at, at + len)`.
    pub fn detach_rx(&self, region: &Region, at: u64, len: u64) {
        assert!(at + len <= region.len, "receive range outside the region");
        self.fabric
            .detach_receiver(region.offset + at, len, self.node);
    }

    /// Whether this node receives remote writes to byte `at` of `region` (for assertions).
    pub fn receives(&self, region: &Region, at: u64) -> bool {
        assert!(at < region.len, "receive offset outside the region");
        self.fabric.receives(region.offset + at, self.node)
    }

    /// A transmit handle on `region`.
    pub fn tx(&self, region: Region) -> Tx<'_> {
        Tx { net: self, region }
    }

    /// This node's receive memory for `region`.
    pub fn rx(&self, region: Region) -> Rx<'_> {
        Rx { net: self, region }
    }

    /// Acknowledge request: returns once every packet this node sent before has landed
    /// (and every write ordered before them has reached this node). Serves no messages
    /// while it waits; see [`Net::ack_via`].
    pub fn ack(&self) {
        self.ack_via(&self.seam()).unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Net::ack`], waiting through `seam`. Under the wall clock every write has landed
    /// when it returns, so there is nothing to wait for; under the modeled clock writes
    /// land after the network's latency (`timing::Links::ack_time`).
    pub(crate) fn ack_via(&self, seam: &Seam<'_>) -> Result<(), MsgError> {
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
        let bytes: u64 = pieces.iter().map(|(_, b)| b.len() as u64).sum();
        let packets: u64 = pieces
            .iter()
            .map(|(_, b)| self.fabric.packets_for(b.len() as u64))
            .sum();
        // Modeled time: every receiver's copy is made when it arrives (`timing`).
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
                let writes: Vec<(usize, Vec<u8>)> = pieces
                    .iter()
                    .map(|&(at, b)| (region.backing_ptr(&self.fabric, r, at) as usize, b.to_vec()))
                    .collect();
                Box::new(move || {
                    for (dst, b) in writes {
                        // SAFETY: dst points into receiver r's backing for this range, in
                        // the wire mapping, which outlives every delivery of the
                        // simulation; the source is an owned buffer.
                        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst as *mut u8, b.len()) };
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
                let dst = region.backing_ptr(&self.fabric, r, at);
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

    /// This node's wait seam, serving no messages (see [`crate::wait`]).
    pub(crate) fn seam(&self) -> Seam<'_> {
        Seam::new(self.fabric.control(), self.node)
    }

    /// Sends a one-way message to `to` (back-pressure: waits while the ring is full). The
    /// caller serves no messages while it waits: a thread that has its node's messages to
    /// serve uses [`Net::send_via`] with a serving seam.
    pub fn send(
        &self,
        to: usize,
        kind: u16,
        from_slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<(), MsgError> {
        self.send_via(&self.seam(), to, kind, from_slot, token, payload)
    }

    /// Like [`Net::send`], waiting for ring space through `seam`.
    pub(crate) fn send_via(
        &self,
        seam: &Seam<'_>,
        to: usize,
        kind: u16,
        from_slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<(), MsgError> {
        self.msg
            .send(
                &self.fabric,
                Some(seam),
                to,
                kind,
                from_slot,
                token,
                payload,
            )
            .map(|_| ())
    }

    /// Like [`Net::send`] but returns `Ok(false)` instead of waiting when the ring is full.
    pub fn try_send(
        &self,
        to: usize,
        kind: u16,
        from_slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError> {
        self.msg
            .send(&self.fabric, None, to, kind, from_slot, token, payload)
    }

    /// Hands every waiting inbound message to `f`; returns how many there were.
    ///
    /// Every call is also this node's heartbeat: the launcher takes a node whose heartbeat
    /// stands still for the stall limit for a stopped one.
    pub fn poll(&self, f: impl FnMut(Inbound<'_>)) -> usize {
        self.beat();
        self.msg.poll(&self.fabric, f)
    }

    /// Bumps this node's heartbeat (the service loop's idle wait does, at every check).
    pub(crate) fn beat(&self) {
        self.fabric.control().beat(self.node);
    }

    /// True if a ring of this node holds unread messages (or another thread is polling).
    pub(crate) fn has_messages(&self) -> bool {
        self.msg.has_messages(&self.fabric)
    }

    /// Writes a reply into mailbox `slot` of node `to`, completing its request `token`.
    pub fn reply(&self, to: usize, slot: u16, token: u32, payload: &[u8]) -> Result<(), MsgError> {
        self.msg.reply(&self.fabric, to, slot, token, payload)
    }

    /// Sends a request and waits for its reply. `slot` is the caller's mailbox; each
    /// mailbox has at most one request outstanding. Serves no messages while it waits (see
    /// [`Net::send`]).
    pub fn request(
        &self,
        to: usize,
        kind: u16,
        slot: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        self.request_via(&self.seam(), to, kind, slot, payload, out)
    }

    /// Like [`Net::request`], waiting (for ring space and for the reply) through `seam`.
    pub(crate) fn request_via(
        &self,
        seam: &Seam<'_>,
        to: usize,
        kind: u16,
        slot: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        let token = self.msg.next_token(slot);
        self.send_via(seam, to, kind, slot, token, payload)?;
        let what = WaitFor::Reply { to, kind };
        self.msg
            .wait_reply(&self.fabric, seam, what, slot, token, out)
    }

    /// Sends a request of `kind` to each of several nodes (one payload each) and waits
    /// until all have acknowledged it with [`Net::acknowledge`]: the requests overlap, so the
    /// wait is about one round trip, not one per node (section 3.1: "write notices sent
    /// to different destinations can be overlapped").
    pub(crate) fn request_all_via(
        &self,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        targets: &[(usize, &[u8])],
    ) -> Result<(), MsgError> {
        let token = self.msg.next_token(slot);
        let mut from = 0u64;
        for &(to, payload) in targets {
            assert!(
                from & (1u64 << to) == 0,
                "two requests to node {to} in one round"
            );
            self.send_via(seam, to, kind, slot, token, payload)?;
            from |= 1u64 << to;
        }
        self.msg
            .wait_acks(&self.fabric, seam, kind, slot, token, from)
    }

    /// Acknowledges request `token` from `to`'s mailbox `slot` (sent by
    /// [`Net::request_all_via`]).
    pub fn acknowledge(&self, to: usize, slot: u16, token: u32) -> Result<(), MsgError> {
        self.msg.ack(&self.fabric, to, slot, token)
    }

    /// Waits until a message may have arrived for this node. Fails if the cluster aborts.
    pub fn wait_for_messages(&self) -> Result<(), MsgError> {
        Ok(self.seam().until(WaitFor::Messages, || self.has_messages())?)
    }

    /// Rings the doorbells of the nodes in `mask` whose threads are parked: the adapter's
    /// receive interrupt, raised after a remote write that someone may be waiting for.
    ///
    /// Under the modeled clock it does nothing: every delivery of a remote write wakes its
    /// receiver when it arrives (`crate::sched`).
    pub fn ring_bells(&self, mask: u64) {
        if crate::sched::active() {
            return;
        }
        for n in bits(mask) {
            wait::wake(self.fabric.control(), n);
        }
    }

    /// A mask with every node of the cluster.
    pub fn all_nodes(&self) -> u64 {
        (1u64 << self.nodes()) - 1
    }
}

fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64usize).filter(move |i| mask & (1u64 << i) != 0)
}

/// A transmit mapping of a region.
#[derive(Clone, Copy)]
pub struct Tx<'a> {
    net: &'a Net,
    region: Region,
}

impl Tx<'_> {
    /// Stores `data` at `at` in every receive mapping of the region.
    pub fn write(&self, at: u64, data: &[u8]) {
        self.net.transmit(&self.region, at, data);
    }

    /// Stores several runs `(offset from base, bytes)` in order, as [`Tx::write`] would one
    /// after another, but runs that share a receive page go out as one group (one lookup
    /// and one lock hold): the path remote-written diffs take.
    pub fn write_runs(&self, base: u64, runs: &[(usize, &[u8])]) {
        let mut group: Vec<(u64, &[u8])> = Vec::with_capacity(runs.len());
        let mut group_page = u64::MAX;
        for &(off, bytes) in runs {
            let at = base + off as u64;
            assert!(
                at + bytes.len() as u64 <= self.region.len,
                "transmit outside the region"
            );
            let start = self.region.offset + at;
            let last = start + bytes.len().max(1) as u64 - 1;
            if start / MC_PAGE_BYTES != last / MC_PAGE_BYTES {
                self.net.transmit_in_page(&self.region, &group);
                group.clear();
                group_page = u64::MAX;
                self.net.transmit(&self.region, at, bytes);
                continue;
            }
            if start / MC_PAGE_BYTES != group_page {
                self.net.transmit_in_page(&self.region, &group);
                group.clear();
                group_page = start / MC_PAGE_BYTES;
            }
            group.push((at, bytes));
        }
        self.net.transmit_in_page(&self.region, &group);
    }

    /// Stores one 8-byte word. Readers that observe it with Acquire also observe every
    /// earlier transmit of this thread.
    pub fn write_u64(&self, at: u64, value: u64) {
        assert!(at % 8 == 0, "unaligned word transmit");
        std::sync::atomic::fence(Ordering::Release);
        self.net.transmit(&self.region, at, &value.to_ne_bytes());
    }

    /// Stores one 4-byte word.
    pub fn write_u32(&self, at: u64, value: u32) {
        assert!(at % 4 == 0, "unaligned word transmit");
        std::sync::atomic::fence(Ordering::Release);
        self.net.transmit(&self.region, at, &value.to_ne_bytes());
    }

    pub fn region(&self) -> Region {
        self.region
    }
}

/// This node's receive mapping of a region.
#[derive(Clone, Copy)]
pub struct Rx<'a> {
    net: &'a Net,
    region: Region,
}

impl Rx<'_> {
    fn ptr(&self, at: u64) -> *mut u8 {
        assert!(at < self.region.len, "receive read outside the region");
        self.region.backing_ptr(&self.net.fabric, self.net.node, at)
    }

    /// Loads a word with Acquire ordering.
    pub fn load_u64(&self, at: u64) -> u64 {
        assert!(at % 8 == 0, "unaligned word load");
        // SAFETY: ptr is 8-aligned (regions are page aligned) and inside this node's
        // receive memory; remote writers store to it, so it is read atomically.
        unsafe { (*(self.ptr(at) as *const AtomicU64)).load(Ordering::Acquire) }
    }

    /// Loads a 4-byte word with Acquire ordering.
    pub fn load_u32(&self, at: u64) -> u32 {
        assert!(at % 4 == 0, "unaligned word load");
        // SAFETY: as in load_u64, for a 4-aligned word.
        unsafe { (*(self.ptr(at) as *const AtomicU32)).load(Ordering::Acquire) }
    }

    /// The word at `at` as an atomic, for local read-modify-write.
    pub fn atomic_u32(&self, at: u64) -> &AtomicU32 {
        assert!(at % 4 == 0, "unaligned word");
        // SAFETY: as in load_u32; the reference lives no longer than the fabric mapping,
        // which the Net (borrowed by self) keeps alive.
        unsafe { &*(self.ptr(at) as *const AtomicU32) }
    }

    /// Copies bytes out of the receive memory.
    pub fn read(&self, at: u64, out: &mut [u8]) {
        assert!(
            at + out.len() as u64 <= self.region.len,
            "receive read outside the region"
        );
        std::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: the range lies in this node's receive memory; out is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(at), out.as_mut_ptr(), out.len()) };
    }

    /// Local store into this node's own receive memory (not transmitted).
    pub fn store_local_u64(&self, at: u64, value: u64) {
        assert!(at % 8 == 0, "unaligned word store");
        // SAFETY: as in load_u64.
        unsafe { (*(self.ptr(at) as *const AtomicU64)).store(value, Ordering::Release) }
    }
}
