//! The transports a node's [`super::Net`] can run on, as a plain enum that forwards the
//! [`Transport`] calls to the one inside (transport.rs says why an enum and not a trait
//! object).

use super::fabric::Port;
use super::transport::Transport;
use super::{Fabric, Inbound, MsgError, NetCounters, NodeId, NodeSet, Region};
use crate::control::Control;
use crate::profile::Features;
use crate::wait::{Seam, WaitFor};
use std::sync::Arc;

/// The transports a node's [`super::Net`] can run on.
#[derive(Debug)]
pub(crate) enum Endpoint {
    /// The simulated Memory Channel (`super::fabric`).
    Fabric(Port),
    /// MPI ranks (`super::mpi`).
    #[cfg(feature = "mpi")]
    Mpi(super::mpi::MpiPort),
}

impl Endpoint {
    /// The launcher's segment: under the simulated fabric the cluster's shared one, where
    /// the launcher (`crate::launch`) reports failures and passes the start-up barrier;
    /// under MPI the rank's own (its heap and control block), which no other rank maps.
    pub(crate) fn fabric(&self) -> Option<&Arc<Fabric>> {
        match self {
            Endpoint::Fabric(port) => Some(port.fabric()),
            #[cfg(feature = "mpi")]
            Endpoint::Mpi(port) => Some(port.fabric()),
        }
    }
}

/// Calls `$call` on the transport inside an [`Endpoint`], named `$t`.
macro_rules! each {
    ($self:expr, $t:ident => $call:expr) => {
        match $self {
            Endpoint::Fabric($t) => $call,
            #[cfg(feature = "mpi")]
            Endpoint::Mpi($t) => $call,
        }
    };
}

impl Transport for Endpoint {
    #[inline]
    fn node(&self) -> NodeId {
        each!(self, t => t.node())
    }

    #[inline]
    fn nodes(&self) -> usize {
        each!(self, t => t.nodes())
    }

    #[inline]
    fn features(&self) -> Features {
        each!(self, t => t.features())
    }

    fn describe(&self) -> String {
        each!(self, t => t.describe())
    }

    #[inline]
    fn address_space(&self) -> (u64, u64) {
        each!(self, t => t.address_space())
    }

    #[inline]
    fn control(&self) -> &Control {
        each!(self, t => t.control())
    }

    #[inline]
    fn counters(&self) -> NetCounters {
        each!(self, t => t.counters())
    }

    #[inline]
    fn attach(&self, offset: u64, len: u64, loopback: bool) {
        each!(self, t => t.attach(offset, len, loopback))
    }

    #[inline]
    fn detach(&self, offset: u64, len: u64) {
        each!(self, t => t.detach(offset, len))
    }

    #[inline]
    fn receives(&self, offset: u64) -> bool {
        each!(self, t => t.receives(offset))
    }

    #[inline]
    fn receive_memory(&self, region: &Region) -> *mut u8 {
        each!(self, t => t.receive_memory(region))
    }

    #[inline]
    fn write(&self, region: &Region, at: u64, data: &[u8]) {
        each!(self, t => t.write(region, at, data))
    }

    #[inline]
    fn write_runs(&self, region: &Region, base: u64, runs: &[(usize, &[u8])]) {
        each!(self, t => t.write_runs(region, base, runs))
    }

    #[inline]
    fn ack(&self, seam: &Seam<'_>) -> Result<(), MsgError> {
        each!(self, t => t.ack(seam))
    }

    #[inline]
    fn ring_bells(&self, nodes: NodeSet) {
        each!(self, t => t.ring_bells(nodes))
    }

    #[inline]
    fn send(
        &self,
        seam: Option<&Seam<'_>>,
        to: NodeId,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError> {
        each!(self, t => t.send(seam, to, kind, slot, token, payload))
    }

    #[inline]
    fn poll(&self, f: impl FnMut(Inbound<'_>)) -> usize {
        each!(self, t => t.poll(f))
    }

    #[inline]
    fn has_messages(&self) -> bool {
        each!(self, t => t.has_messages())
    }

    fn has_messages_now(&self) -> bool {
        each!(self, t => t.has_messages_now())
    }

    #[inline]
    fn rings_on_arrival(&self) -> bool {
        each!(self, t => t.rings_on_arrival())
    }

    #[inline]
    fn next_token(&self, slot: u16) -> u32 {
        each!(self, t => t.next_token(slot))
    }

    #[inline]
    fn reply(
        &self,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError> {
        each!(self, t => t.reply(to, slot, token, head, tail))
    }

    #[inline]
    fn wait_reply(
        &self,
        seam: &Seam<'_>,
        what: WaitFor,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        each!(self, t => t.wait_reply(seam, what, slot, token, out))
    }

    #[inline]
    fn acknowledge(&self, to: NodeId, slot: u16, token: u32) -> Result<(), MsgError> {
        each!(self, t => t.acknowledge(to, slot, token))
    }

    #[inline]
    fn wait_acks(
        &self,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        token: u32,
        from: NodeSet,
    ) -> Result<(), MsgError> {
        each!(self, t => t.wait_acks(seam, kind, slot, token, from))
    }
}
