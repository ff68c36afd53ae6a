//! The network: what the protocol needs from one, as a seam, and the simulated Memory
//! Channel behind it.
//!
//! # The seam
//!
//! [`Net`] is one node's handle on the network; the engine, the directory, the broadcast
//! buffers and the synchronization strategies hold it and know nothing else of the
//! network. It delegates every operation to a `Transport` (`transport.rs`, whose module
//! doc states what each operation promises: ordering, delivery, waiting), held as an
//! `Endpoint` (`endpoint.rs`, a plain enum of the transports), and adds what
//! every transport shares: the allocation of network address space (every node runs the
//! same setup, so every node gets the same regions in the same order), a request composed
//! of a send and a wait for its reply, the node's wait seam, the heartbeat.
//!
//! The seam names a node as a [`NodeId`] and a set of nodes (the doorbells to ring, the
//! nodes a request to several must hear from) as a [`NodeSet`]; a transport turns them
//! into indexes of its own per-node state.
//!
//! | Operation | `Net` | `Transport` | Feature it needs |
//! |---|---|---|---|
//! | regions | `alloc_region`, `region_at`, `attach_rx`, `detach_rx`, `receives`, `rx` | `address_space`, `attach`, `detach`, `receives`, `receive_memory` | `remote_write` to be written by others |
//! | remote writes | `tx` ([`Tx::write`], `write_runs`, `write_u64`, `write_u32`) | `write`, `write_runs` | `remote_write`; more than one receiver: `broadcast`; the writer's own copy: `loopback` |
//! | ordering | (the writes' order) | (module doc of `transport.rs`) | all-receiver order: `total_order` |
//! | acknowledge request | `ack`, `ack_via` | `ack` | (every transport) |
//! | doorbells | `ring_bells` | `ring_bells` | (every transport) |
//! | message rings | `send`, `send_via`, `try_send`, `poll`, `wait_for_messages` | `send`, `poll`, `has_messages` | (every transport) |
//! | requests and replies | `request`, `request_via`, `request_all_via`, `reply`, `acknowledge` | `next_token`, `reply`, `wait_reply`, `acknowledge`, `wait_acks` | (every transport) |
//! | the feature set | `features` | `features`, `describe` | |
//! | abort, counters | `abort`, `aborted`, `counters`, `seam` | `control`, `counters` | |
//!
//! A protocol variant states the features it needs (`Protocol::needs`); a variant whose
//! needs the transport's feature set lacks is refused before it runs, by the configuration
//! against the network profile it simulates (`Config::validate`) and, once the node's
//! transport exists, against that transport's own [`Net::features`] (`run_node`, `api/node.rs`).
//! Messages are every transport's: the variants built only on them (CSM-None) run on any.
//!
//! # The simulated fabric
//!
//! [`Fabric`] (`fabric.rs`) is the transport of in-process and process-mode clusters: one shared
//! segment that every node maps, in which a remote write is a copy into each receiver's
//! memory under Memory Channel's ordering rules, with explicit messages (`msg.rs`) built on
//! the same writes and, under the modeled clock, the link and hub model of `timing.rs`.
//! The launcher (`crate::launch`) creates it, and still reaches it directly for what is not
//! the network's: the control block, the result areas and the start-up barrier
//! ([`Net::fabric`]).
//!
//! # MPI
//!
//! With the `mpi` feature, `mpi.rs` is the second transport: one MPI rank per node,
//! messages, replies and acknowledgements as MPI two-sided messages taken off the wire by
//! a progress thread (and by waiting threads while they spin), and the launcher's own
//! traffic (heartbeats, the first failure, the start-up barrier, results) beside them.
//! It offers no remote write, broadcast, total order or loopback (`Features::MPI`). Each
//! rank still has a fabric of its own, which no other rank maps: its heap and its view of
//! the control block.

mod endpoint;
mod fabric;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
mod msg;
pub(crate) mod timing;
mod transport;

pub use crate::ids::{NodeId, NodeSet, MAX_NODES};
pub use crate::profile::{Features, Profile};
pub use fabric::{fixed_space_bytes, Fabric, Layout, MAILBOX_BYTES, RESULT_BYTES, RING_BYTES};
use fabric::Port;
pub use msg::{Inbound, MsgError, MAX_MESSAGE_BYTES};
pub(crate) use endpoint::Endpoint;
pub(crate) use transport::Transport;

use crate::wait::{Seam, WaitFor};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Granularity of receive mappings in the network address space: the host page (Memory
/// Channel used the 8 KiB Alpha page; 4 KiB lets 4 KiB coherence pages have their own homes).
pub const MC_PAGE_BYTES: u64 = 4096;


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
    #[error("cannot start MPI: {0}")]
    Mpi(String),
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


#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Receive memory of its own, one copy per receiver (the fabric's pool).
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
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// One node's handle on the network: its `Transport`, and the state every transport
/// shares (module doc, "The seam").
pub struct Net {
    port: Endpoint,
    node: NodeId,
    nodes: usize,
    /// The transport's feature set, copied once.
    features: Features,
    address_space_bytes: u64,
    next_region: std::sync::Mutex<u64>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("node", &self.node).finish()
    }
}

impl Net {
    /// Node `node`'s handle on the simulated fabric.
    pub fn new(fabric: Arc<Fabric>, node: NodeId) -> Net {
        Net::over(Endpoint::Fabric(Port::new(fabric, node)))
    }

    /// Node `link`'s handle on the MPI transport (`mpi.rs`).
    #[cfg(feature = "mpi")]
    pub(crate) fn over_mpi(link: Arc<mpi::MpiLink>) -> Net {
        Net::over(Endpoint::Mpi(mpi::MpiPort::new(link)))
    }

    /// A handle on any transport.
    pub(crate) fn over(port: Endpoint) -> Net {
        let (address_space_bytes, user_base) = port.address_space();
        Net {
            node: port.node(),
            nodes: port.nodes(),
            features: port.features(),
            address_space_bytes,
            next_region: std::sync::Mutex::new(user_base),
            port,
        }
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// What the transport can do (module doc, "The seam").
    pub fn features(&self) -> Features {
        self.features
    }

    /// What the transport is, for messages.
    pub fn describe(&self) -> String {
        self.port.describe()
    }

    /// The simulated fabric this node runs on, for the launcher's business (the control
    /// block, the result areas, the start-up barrier): the cluster's shared one, or under
    /// MPI the rank's own local one (`crate::launch`, "MPI ranks").
    pub fn fabric(&self) -> &Arc<Fabric> {
        self.port
            .fabric()
            .unwrap_or_else(|| panic!("{} is not the simulated fabric", self.port.describe()))
    }

    /// The size of the network address space.
    pub fn address_space_bytes(&self) -> u64 {
        self.address_space_bytes
    }

    /// This node's traffic counters.
    pub fn counters(&self) -> NetCounters {
        self.port.counters()
    }

    /// True once the cluster has aborted.
    pub fn aborted(&self) -> bool {
        self.port.control().aborted()
    }

    /// Bytes of network address space not yet allocated by this node's setup.
    pub fn space_left(&self) -> u64 {
        self.address_space_bytes - *self.next_region.lock().expect("poisoned")
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
        let space = self.address_space_bytes;
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
    #[cfg(test)]
    pub fn region_at(&self, offset: u64, len: u64, backing: Backing) -> Result<Region, NetError> {
        let space = self.address_space_bytes;
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
        self.port.attach(region.offset + at, len, loopback);
    }

    /// Removes this node's receive mapping of `region[at, at + len)`.
    pub fn detach_rx(&self, region: &Region, at: u64, len: u64) {
        assert!(at + len <= region.len, "receive range outside the region");
        self.port.detach(region.offset + at, len);
    }

    /// Whether this node receives remote writes to byte `at` of `region` (for assertions).
    pub fn receives(&self, region: &Region, at: u64) -> bool {
        assert!(at < region.len, "receive offset outside the region");
        self.port.receives(region.offset + at)
    }

    /// A transmit handle on `region`.
    pub fn tx(&self, region: Region) -> Tx<'_> {
        Tx { net: self, region }
    }

    /// This node's receive memory for `region`.
    pub fn rx(&self, region: Region) -> Rx<'_> {
        Rx {
            base: self.port.receive_memory(&region),
            region,
            _net: std::marker::PhantomData,
        }
    }

    /// Acknowledge request: returns once every packet this node sent before has landed
    /// (and every write ordered before them has reached this node). Serves no messages
    /// while it waits; see `Net::ack_via` (inside the crate).
    #[cfg(test)]
    pub fn ack(&self) {
        self.ack_via(&self.seam()).unwrap_or_else(|e| panic!("{e}"));
    }

    /// `Net::ack`, waiting through `seam`.
    pub(crate) fn ack_via(&self, seam: &Seam<'_>) -> Result<(), MsgError> {
        self.port.ack(seam)
    }

    /// This node's wait seam, serving no messages (see [`crate::wait`]).
    pub(crate) fn seam(&self) -> Seam<'_> {
        Seam::new(self.port.control(), self.node.index())
    }

    /// Counts the calling runtime thread among the cluster's running ones while the
    /// result lives (`crate::wait::Running`).
    pub(crate) fn running(&self) -> crate::wait::Running<'_> {
        crate::wait::Running::start(self.port.control())
    }

    /// Records that the calling processor thread is bound to `core` (`crate::wait`,
    /// "Placement").
    pub(crate) fn bound_to(&self, core: usize) {
        crate::wait::bound_to(self.port.control(), core)
    }

    /// Publishes the calling service thread's id, so that a bound processor of another
    /// node that wakes it may bind it to its own core (`crate::wait`, "Placement"), until
    /// the result is dropped.
    pub(crate) fn service_movable(&self) -> crate::wait::ServiceMovable<'_> {
        crate::wait::service_movable(self.port.control().bell(self.node.index()))
    }

    /// serve uses `Net::send_via` (inside the crate) with a serving seam.
    #[cfg(test)]
    pub fn send(
        &self,
        to: NodeId,
        kind: u16,
        from_slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<(), MsgError> {
        self.send_via(&self.seam(), to, kind, from_slot, token, payload)
    }

    /// Like `Net::send`, waiting for ring space through `seam`.
    pub(crate) fn send_via(
        &self,
        seam: &Seam<'_>,
        to: NodeId,
        kind: u16,
        from_slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<(), MsgError> {
        self.port
            .send(Some(seam), to, kind, from_slot, token, payload)
            .map(|_| ())
    }

    /// Hands every waiting inbound message to `f`; returns how many there were.
    ///
    /// Every call is also this node's heartbeat: the launcher takes a node whose heartbeat
    /// stands still for the stall limit for a stopped one.
    pub fn poll(&self, f: impl FnMut(Inbound<'_>)) -> usize {
        self.beat();
        self.port.poll(f)
    }

    /// Bumps this node's heartbeat (the service loop's idle wait does, at every check).
    pub(crate) fn beat(&self) {
        self.port.control().beat(self.node.index());
    }

    /// True if messages wait for this node (`Transport::has_messages` says what it answers
    /// while another thread polls).
    pub(crate) fn has_messages(&self) -> bool {
        self.port.has_messages()
    }

    /// [`Net::has_messages`] after taking what has arrived off the network
    /// (`Transport::has_messages_now`): a processor's poll point.
    pub(crate) fn has_messages_now(&self) -> bool {
        self.port.has_messages_now()
    }

    /// True if a message rings its receiver's doorbell (`Transport::rings_on_arrival`).
    pub(crate) fn rings_on_arrival(&self) -> bool {
        self.port.rings_on_arrival()
    }

    /// Writes a reply into mailbox `slot` of node `to`, completing its request `token`.
    pub fn reply(&self, to: NodeId, slot: u16, token: u32, payload: &[u8]) -> Result<(), MsgError> {
        self.port.reply(to, slot, token, payload, &[])
    }

    /// [`Net::reply`] with the payload `head` followed by `tail`, which are not joined in a
    /// buffer first (a page reply's header and page).
    pub(crate) fn reply_split(
        &self,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError> {
        self.port.reply(to, slot, token, head, tail)
    }

    /// Sends a request and waits for its reply. `slot` is the caller's mailbox; each
    /// mailbox has at most one request outstanding. Serves no messages while it waits (see
    /// `Net::send`).
    pub fn request(
        &self,
        to: NodeId,
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
        to: NodeId,
        kind: u16,
        slot: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        let token = self.port.next_token(slot);
        if to == self.node {
            // A request to this node's own manager (of a lock, a barrier, a directory
            // entry) is handled by its sender at once (`Seam::send_then_serve`).
            seam.send_then_serve(
                || self.port.send(None, to, kind, slot, token, payload),
                || self.send_via(seam, to, kind, slot, token, payload),
            )?;
        } else {
            self.send_via(seam, to, kind, slot, token, payload)?;
        }
        let what = WaitFor::Reply { to, kind };
        self.port.wait_reply(seam, what, slot, token, out)
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
        targets: &[(NodeId, &[u8])],
    ) -> Result<(), MsgError> {
        let token = self.port.next_token(slot);
        let mut from = NodeSet::EMPTY;
        for &(to, payload) in targets {
            assert!(!from.contains(to), "two requests to {to} in one round");
            self.send_via(seam, to, kind, slot, token, payload)?;
            from.insert(to);
        }
        self.port.wait_acks(seam, kind, slot, token, from)
    }

    /// Acknowledges request `token` from `to`'s mailbox `slot` (sent by
    /// `Net::request_all_via`, inside the crate).
    pub fn acknowledge(&self, to: NodeId, slot: u16, token: u32) -> Result<(), MsgError> {
        self.port.acknowledge(to, slot, token)
    }

    /// Waits until a message may have arrived for this node. Fails if the cluster aborts.
    pub fn wait_for_messages(&self) -> Result<(), MsgError> {
        Ok(self.seam().until(WaitFor::Messages, || self.has_messages())?)
    }

    /// Rings the doorbells of the nodes in `nodes` whose threads are parked: the adapter's
    /// receive interrupt, raised after a remote write that someone may be waiting for.
    pub fn ring_bells(&self, nodes: NodeSet) {
        self.port.ring_bells(nodes);
    }

    /// Every node of the cluster.
    pub fn all_nodes(&self) -> NodeSet {
        NodeSet::first(self.nodes)
    }
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
        self.net.port.write(&self.region, at, data);
    }

    /// Stores several runs `(offset from base, bytes)` in order, as [`Tx::write`] would one
    /// after another; the transport may group them (the fabric sends runs that share a
    /// receive page as one group): the path remote-written diffs take.
    pub fn write_runs(&self, base: u64, runs: &[(usize, &[u8])]) {
        self.net.port.write_runs(&self.region, base, runs);
    }

    /// Stores one 8-byte word. Readers that observe it with Acquire also observe every
    /// earlier transmit of this thread.
    pub fn write_u64(&self, at: u64, value: u64) {
        assert!(at % 8 == 0, "unaligned word transmit");
        std::sync::atomic::fence(Ordering::Release);
        self.net.port.write(&self.region, at, &value.to_ne_bytes());
    }

    /// Stores one 4-byte word.
    pub fn write_u32(&self, at: u64, value: u32) {
        assert!(at % 4 == 0, "unaligned word transmit");
        std::sync::atomic::fence(Ordering::Release);
        self.net.port.write(&self.region, at, &value.to_ne_bytes());
    }
}

/// This node's receive mapping of a region.
#[derive(Clone, Copy)]
pub struct Rx<'a> {
    /// The region's first byte in this node's receive memory (`Transport::receive_memory`).
    base: *mut u8,
    region: Region,
    _net: std::marker::PhantomData<&'a Net>,
}

impl Rx<'_> {
    fn ptr(&self, at: u64) -> *mut u8 {
        assert!(at < self.region.len, "receive read outside the region");
        // SAFETY: at < region.len, and the transport's receive memory of the region is
        // region.len bytes from base.
        unsafe { self.base.add(at as usize) }
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
}
