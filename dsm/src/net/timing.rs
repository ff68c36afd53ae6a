//! The network's timing model under the modeled clock (`ARCHITECTURE.md`, "Modeled
//! time"): when a transfer leaves its sender and when it lands, given the network profile.
//!
//! A transfer of `b` bytes from `s` starts when `s`'s link is free (and, for a broadcast,
//! the hub), keeps the sender busy for the wire time `b / bandwidth` (programmed I/O), and
//! arrives after the latency once the receiver's link is free: links and the hub queue in
//! virtual time, and arrivals at one receiver keep the order of sending, which gives the
//! Memory Channel's ordering rules. The write itself is deferred: the scheduler performs
//! it when the simulation reaches its arrival time, so a waiter sees exactly what has
//! arrived by its clock.
//!
//! The scheduler (`crate::sched`) lends the calling activity's clock and its queue of
//! deliveries ([`Timeline`]); the link and hub queues are the network's, kept per
//! cluster in its fabric.

use crate::sched::{self, Timeline, Wake};
use std::sync::Mutex;

/// The virtual times at which the links and the hub of one cluster's network are free.
#[derive(Default)]
pub(crate) struct Links {
    state: Mutex<Queues>,
}

#[derive(Default)]
struct Queues {
    tx_free: Vec<u64>,
    rx_free: Vec<u64>,
    /// Per sender, when its last transfer lands.
    landed: Vec<u64>,
    hub_free: u64,
}

impl Queues {
    /// Sizes the queues for the cluster's nodes on first use.
    fn fit(&mut self, nodes: usize) {
        if self.tx_free.len() < nodes {
            self.tx_free.resize(nodes, 0);
            self.rx_free.resize(nodes, 0);
            self.landed.resize(nodes, 0);
        }
    }
}

impl Links {
    fn queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A transfer of `bytes` from the calling activity's node `src` to the nodes in
    /// `receivers` (a broadcast if more than one), under the model of the module doc.
    /// `deliver` makes the write for one receiver; it runs when the simulation reaches the
    /// arrival. Returns false (and defers nothing) if the caller is not a live activity:
    /// the caller then writes at once.
    pub(crate) fn transmit(
        &self,
        src: usize,
        receivers: u64,
        bytes: u64,
        wake: Wake,
        mut deliver: impl FnMut(usize) -> Box<dyn FnOnce() + Send>,
    ) -> bool {
        sched::on_timeline(|tl: &mut Timeline<'_>| {
            let mut q = self.queues();
            q.fit(tl.nodes());
            let p = tl.profile().clone();
            let wire_ns = (bytes.max(1) as f64 * 1e9 / p.bandwidth_bytes_per_s as f64).ceil();
            let transfer = || {
                format!(
                    "a transfer of {bytes} bytes over {} (latency_ns {}, bandwidth_bytes_per_s {}, \
                     broadcast_extra_ns {})",
                    p.name, p.latency_ns, p.bandwidth_bytes_per_s, p.broadcast_extra_ns
                )
            };
            let wire = tl.checked(sched::whole_ns(wire_ns), transfer);
            let now = tl.now();
            let mut start = now.max(q.tx_free[src]);
            let broadcast = receivers.count_ones() > 1;
            let extra = if broadcast { p.broadcast_extra_ns } else { 0 };
            if broadcast {
                start = start.max(q.hub_free);
                let hub = start.checked_add(wire).and_then(|t| t.checked_add(extra));
                q.hub_free = tl.checked(hub, transfer);
            }
            let sent = tl.checked(start.checked_add(wire), transfer);
            q.tx_free[src] = sent;
            // Programmed I/O: the sender is busy until its data has left.
            tl.set_now(sent);
            for r in (0..64).filter(|r| receivers & (1u64 << r) != 0) {
                let earliest = start
                    .checked_add(p.latency_ns)
                    .and_then(|t| t.checked_add(extra))
                    .map(|t| q.rx_free[r].max(t))
                    .and_then(|t| t.checked_add(wire));
                let arrive = tl.checked(earliest, transfer);
                q.rx_free[r] = arrive;
                q.landed[src] = q.landed[src].max(arrive);
                tl.deliver_at(arrive, r, wake, deliver(r));
            }
        })
        .is_some()
    }

    /// The Memory Channel's acknowledge request for the calling activity (`Net::ack_via`):
    /// the virtual time by which every transfer its node has sent has landed, and by which
    /// a marker sent now through its own receive link arrives, so that (total order) every
    /// write ordered before the marker has reached this node too. The caller is woken
    /// then; it waits until its clock reaches that time. `None` if the caller is not a
    /// live activity (every write has landed when it returns).
    pub(crate) fn ack_time(&self) -> Option<u64> {
        sched::on_timeline(|tl: &mut Timeline<'_>| {
            let mut q = self.queues();
            q.fit(tl.nodes());
            let node = tl.node();
            let (name, latency_ns) = (tl.profile().name, tl.profile().latency_ns);
            let marker = tl
                .now()
                .checked_add(latency_ns)
                .map(|t| q.rx_free[node].max(t))
                .and_then(|t| t.checked_add(1));
            let marker = tl.checked(marker, || {
                format!("an acknowledge request over {name} (latency_ns {latency_ns})")
            });
            q.rx_free[node] = marker;
            let t = marker.max(q.landed[node]);
            tl.wake_me_at(t);
            t
        })
    }
}
