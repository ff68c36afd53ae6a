//! The transport seam: what the protocol needs from a network, as one trait.
//!
//! A [`Transport`] is one node's endpoint of a cluster's network. [`super::Net`], the
//! handle the engine, the directory, the broadcast buffers and the synchronization
//! strategies hold, owns one (an `Endpoint`, `endpoint.rs`) and adds what every transport shares:
//! the allocation of network address space, the composition of a request from a send and
//! a reply, the node's wait seam. Two transports implement it: the simulated Memory
//! Channel (`super::fabric`), and MPI ranks (`super::mpi`, a build with the `mpi`
//! feature: one rank per node, two-sided messages, none of Memory Channel's features).
//!
//! `Endpoint` dispatches with a plain enum, as crossbeam-channel dispatches its flavors,
//! rather than through `dyn Transport`: with one variant the calls inline and the seam
//! costs nothing (a trait object cost 3 ns a remote write and 9 ns a message round trip
//! in `cashmere bench net`, about 5%); with two, each call is one predictable branch.
//!
//! The promises below are what the protocol relies on. A transport that cannot keep one
//! says so in [`Transport::features`], and the variants that need it are refused before
//! the engine is built (`Config::validate` for the simulated network, `run_node` in `api/node.rs` for the
//! transport a node actually got); the engine never asks a transport for an operation its
//! feature set lacks.
//!
//! # Regions and remote writes (feature `remote_write`)
//!
//! A region is a range of the network address space ([`Region`]), laid out identically on
//! every node. Each node decides which of its pages it *receives* ([`Transport::attach`]);
//! a [`Transport::write`] by any node lands in the receive memory of every node attached
//! to the pages it covers (and in the writer's own only with loopback). A node reads its
//! own receive memory directly ([`Transport::receive_memory`]), never another node's.
//!
//! * **Single sender**: the writes of one thread land at each receiver in the order it
//!   made them, and never torn by another thread's write.
//! * **Broadcast** (feature `broadcast`): a write to pages with more than one receiver
//!   reaches them all in one operation. Without it, no region may have two receivers.
//! * **Total order** (feature `total_order`): every receiver sees all broadcasts, and all
//!   writes to one receiver, in one order; in particular a write made after an
//!   acknowledge request ([`Transport::ack`]) lands after every write that request covered,
//!   at every receiver. CSM-DMS's release without an acknowledgement relies on it.
//! * **Loopback** (feature `loopback`): with [`Transport::attach`]`(.., loopback: true)` the
//!   writer's own receive memory gets its write too, in the same order as the other
//!   receivers (Memory Channel locks bid this way).
//! * **Memory ordering**: bytes a write carries are visible to a receiver that observes,
//!   with Acquire, any word the same thread wrote after them (the word writes are Release).
//!
//! # Messages (every transport)
//!
//! * [`Transport::send`] appends a message to the ring from this node to another; the
//!   messages from one node to another are handled in the order they were sent. A full ring
//!   is back-pressure: the sender waits through the seam it is given (serving its own
//!   node's messages meanwhile) or, given none, returns `Ok(false)`.
//! * [`Transport::poll`] hands every message that has arrived to a handler, on one thread
//!   of the node at a time (a second poller returns at once with 0).
//! * Requests and replies: a processor's *mailbox* (`slot`) has at most one request
//!   outstanding, named by a token ([`Transport::next_token`]). [`Transport::reply`]
//!   completes it with a payload; [`Transport::wait_reply`] returns that payload once it
//!   has arrived. A request sent to several nodes at once is completed by each with
//!   [`Transport::acknowledge`] (no payload) and awaited with [`Transport::wait_acks`].
//!   A reply is visible in full when its token is.
//!
//! Every wait goes through the node's [`Seam`] (`crate::wait`), which serves messages,
//! parks, and gives up when the cluster aborts; a transport rings the receiver's doorbell
//! when something a parked thread may wait for arrives (a message, a reply, ring space; for
//! remote writes, [`Transport::ring_bells`]).
//!
//! # Time
//!
//! Under the modeled clock the simulated fabric times every operation on its link and hub
//! model (`super::timing`) and defers each landing to its arrival; the operations above
//! keep their promises in virtual time. A transport over a real network would run under
//! the wall clock only.

use super::{Inbound, MsgError, NetCounters, NodeId, NodeSet, Region};
use crate::control::Control;
use crate::profile::Features;
use crate::wait::{Seam, WaitFor};

/// One node's endpoint of a cluster's network: the operations the protocol uses (module
/// doc). [`super::Net`] holds one as an `Endpoint` (`endpoint.rs`).
pub(crate) trait Transport: Send + Sync + std::fmt::Debug {
    /// This node.
    fn node(&self) -> NodeId;

    /// Nodes in the cluster.
    fn nodes(&self) -> usize;

    /// What this transport can do; the protocol variants that need more are refused.
    fn features(&self) -> Features;

    /// What this transport is, for messages ("the simulated Memory Channel over mc2").
    fn describe(&self) -> String;

    /// The size of the network address space, and the first offset regions may use (the
    /// transport's own structures, if it keeps any there, lie below it).
    fn address_space(&self) -> (u64, u64);

    /// The cluster's control block (abort, doorbells, heartbeats) as this node sees it.
    fn control(&self) -> &Control;

    /// This node's traffic counters.
    fn counters(&self) -> NetCounters;

    /// Starts receiving remote writes to `[offset, offset + len)` of the address space
    /// (whole receive pages); with `loopback`, this node's own writes there too.
    fn attach(&self, offset: u64, len: u64, loopback: bool);

    /// Stops receiving remote writes to `[offset, offset + len)`.
    fn detach(&self, offset: u64, len: u64);

    /// Whether this node receives remote writes to byte `offset` of the address space.
    fn receives(&self, offset: u64) -> bool;

    /// This node's receive memory of `region`: `region.len` bytes, valid as long as the
    /// transport lives, written by remote writes (and by this node's own local stores).
    fn receive_memory(&self, region: &Region) -> *mut u8;

    /// Writes `data` at byte `at` of `region` into every receiver's memory (module doc,
    /// "Regions and remote writes").
    fn write(&self, region: &Region, at: u64, data: &[u8]);

    /// Writes several runs `(offset from base, bytes)` of `region`, in order, as
    /// [`Transport::write`] would one after another (a transport may group them).
    fn write_runs(&self, region: &Region, base: u64, runs: &[(usize, &[u8])]);

    /// Acknowledge request: returns once every write this node made before has landed (and,
    /// with total order, every write ordered before them has reached this node), waiting
    /// through `seam`.
    fn ack(&self, seam: &Seam<'_>) -> Result<(), MsgError>;

    /// Rings the doorbells of the nodes in `nodes` whose threads are parked, after a remote
    /// write someone may wait for (the Memory Channel adapter's receive interrupt).
    fn ring_bells(&self, nodes: NodeSet);

    /// Sends a message of `kind` to `to`, from mailbox `slot` with `token` (for a reply).
    /// When the ring is full it waits through `seam`, or returns `Ok(false)` without one.
    fn send(
        &self,
        seam: Option<&Seam<'_>>,
        to: NodeId,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError>;

    /// Hands every message that has arrived to `f`; returns how many there were (0 at once
    /// if another thread of the node is polling).
    fn poll(&self, f: impl FnMut(Inbound<'_>)) -> usize;

    /// True if messages are waiting for a thread to poll them. While another thread
    /// polls, a transport answers either "yes" (the rings: the asker goes round again) or
    /// "no", if that thread rings the node's bell for what it leaves when it stops (MPI).
    fn has_messages(&self) -> bool;

    /// [`Transport::has_messages`] after taking what has arrived off the network, for a
    /// processor's poll point (`crate::wait::poll_point`): a transport whose
    /// `has_messages` looks at the network only now and then (MPI) looks now.
    fn has_messages_now(&self) -> bool {
        self.has_messages()
    }

    /// True if a message rings its receiver's doorbell, so that a parked thread of the
    /// node wakes for it (the rings of the simulated network). MPI's arrivals cannot ring
    /// a futex of another process: someone must look for them, and a node's processors
    /// then look at their poll points while they compute (`crate::wait`, "Polling while
    /// computing").
    fn rings_on_arrival(&self) -> bool {
        true
    }

    /// A fresh token for a request from mailbox `slot` (never 0).
    fn next_token(&self, slot: u16) -> u32;

    /// Completes request `token` of mailbox `slot` of node `to` with the payload `head`
    /// followed by `tail` (a page reply's header and page, written into the mailbox or the
    /// frame without first being joined in a buffer of their own).
    fn reply(
        &self,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError>;

    /// Waits through `seam` for the reply to request `token` of this node's mailbox `slot`
    /// and copies it into `out`; `what` names the wait in deadlock reports.
    fn wait_reply(
        &self,
        seam: &Seam<'_>,
        what: WaitFor,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError>;

    /// Acknowledges request `token` of node `to`'s mailbox `slot` without a payload.
    fn acknowledge(&self, to: NodeId, slot: u16, token: u32) -> Result<(), MsgError>;

    /// Waits through `seam` until every node in `from` has acknowledged request
    /// `token` (of `kind`) of this node's mailbox `slot`.
    fn wait_acks(
        &self,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        token: u32,
        from: NodeSet,
    ) -> Result<(), MsgError>;

}

