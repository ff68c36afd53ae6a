//! Networks as a feature set plus a cost profile.
//!
//! A variant states which [`Features`] it needs; a [`Profile`] carries the costs that the
//! modeled clock charges for each network operation. Every figure names its source in a
//! comment; figures that are estimates say so. Profiles are never fitted to the
//! application results they are meant to predict.

use serde::Serialize;
use std::fmt;

/// What a network can do in hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Features {
    /// A store through a transmit mapping lands in remote memory without the remote
    /// processor's help.
    pub remote_write: bool,
    /// One transmit reaches every receiver of a region.
    pub broadcast: bool,
    /// All receivers see all broadcasts in one order (Memory Channel rule 2).
    pub total_order: bool,
    /// A transmit can be reflected back to the sender, in order.
    pub loopback: bool,
    /// A load can be served from remote memory.
    pub remote_read: bool,
}

impl Features {
    /// The names of the features in `needed` that `self` lacks.
    pub fn missing(&self, needed: &Features) -> Vec<&'static str> {
        let mut out = Vec::new();
        let pairs = [
            (needed.remote_write, self.remote_write, "remote write"),
            (needed.broadcast, self.broadcast, "broadcast"),
            (needed.total_order, self.total_order, "total order"),
            (needed.loopback, self.loopback, "loopback"),
            (needed.remote_read, self.remote_read, "remote read"),
        ];
        for (want, have, name) in pairs {
            if want && !have {
                out.push(name);
            }
        }
        out
    }

    /// The features as bits (remote write, broadcast, total order, loopback, remote read
    /// from bit 0), for a word of shared memory.
    pub fn to_bits(&self) -> u64 {
        [
            self.remote_write,
            self.broadcast,
            self.total_order,
            self.loopback,
            self.remote_read,
        ]
        .iter()
        .enumerate()
        .map(|(i, &on)| u64::from(on) << i)
        .sum()
    }

    /// The features [`Features::to_bits`] gave `bits`.
    pub fn from_bits(bits: u64) -> Features {
        let on = |i: u32| bits & (1 << i) != 0;
        Features {
            remote_write: on(0),
            broadcast: on(1),
            total_order: on(2),
            loopback: on(3),
            remote_read: on(4),
        }
    }

    pub const NONE: Features = Features {
        remote_write: false,
        broadcast: false,
        total_order: false,
        loopback: false,
        remote_read: false,
    };

    /// What the MPI transport offers (`ExecMode::Mpi`): two-sided messages only, none of
    /// Memory Channel's features.
    pub const MPI: Features = Features::NONE;
}

/// Why `ExecMode::Mpi` cannot run in a build without the `mpi` feature.
pub const MPI_NOT_BUILT: &str = "this build has no MPI transport: build with `--features dsm/mpi` (it needs an MPI library and libclang: apt-get install openmpi-bin libopenmpi-dev libclang-dev), then start the cluster with `mpirun -np N`";

/// The name the MPI transport goes by in refusals ("... which MPI lacks").
pub const MPI_TITLE: &str = "MPI (two-sided messages between ranks)";

/// The costs of one network, in nanoseconds and bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Profile {
    /// Short name used on the command line (`mc2`, `qsnet`, ...).
    pub name: &'static str,
    /// Full name and generation.
    pub title: &'static str,
    pub features: Features,
    /// One-way latency of a small remote write or message, process to process.
    pub latency_ns: u64,
    /// Sustained point-to-point bandwidth, process to process.
    pub bandwidth_bytes_per_s: u64,
    /// Largest packet payload; larger writes are split.
    pub packet_bytes: u64,
    /// Processor time to send one explicit message (beyond the wire time).
    pub send_overhead_ns: u64,
    /// Processor time to receive and dispatch one explicit message.
    pub recv_overhead_ns: u64,
    /// Extra time for a broadcast over a point-to-point write (hub take-over).
    pub broadcast_extra_ns: u64,
    /// Size of the remotely writable network address space; `u64::MAX` if unlimited.
    pub address_space_bytes: u64,
    /// Where the figures come from, and which ones are estimates.
    pub source: &'static str,
}

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// The networks cashmere can model.
///
/// Sources, cited once here and by short name below:
/// - Fillo & Gillett, "Architecture and Implementation of MEMORY CHANNEL 2", Digital
///   Technical Journal, 1997 (`memory-channel-2.txt`; it also gives the MC1 figures).
/// - Stets et al., "The Effect of Network Total Order, Broadcast, and Remote-Write Capability
///   on Network-Based Shared Memory Computing", HPCA, 2000 (`cashmere-network-features-hpca2000.txt`).
/// - Brauss et al., "An Efficient Communication Architecture for Commodity Supercomputers",
///   1999 (`swiss-tx-fci-tnet.txt`).
/// - Petrini, Feng, Hoisie, Coll & Frachtenberg, "The Quadrics Network: High-Performance
///   Clustering Technology", IEEE Micro, 2002 (`quadrics-qsnet.txt`; our copy has lost its
///   digits, so figures from it are quoted from the published paper and should be re-checked
///   against the original).
/// - Mehlan & Rehm, "VIA2SISCI – A new library that provides the VIA semantics for SCI
///   connected clusters", TU Chemnitz, 2003 (`via2sisci.txt`).
/// - IEEE Std 1596-1992, Scalable Coherent Interface, 1992.
/// - Myricom, Myrinet-2000 and GM product documentation, 2001.
/// - InfiniBand Trade Association, InfiniBand Architecture Specification Vol. 1, Rel. 1.4, 2020.
/// - IEEE Std 802.3 (Ethernet framing) and RFC 791/793/7323 (IP, TCP, TCP timestamps).
///
/// Conventions. `latency_ns` plus `send_overhead_ns` plus `recv_overhead_ns` is the one-way
/// time of one explicit protocol message; `latency_ns` alone is what a remote write costs on a
/// network that has one. A network without hardware broadcast has `broadcast_extra_ns == 0`:
/// emulating broadcast with point-to-point messages is charged by the protocol, message by
/// message, never through that field. A network without remote write has
/// `address_space_bytes == u64::MAX`, because nothing is placed in a network address space.
pub fn all() -> Vec<Profile> {
    vec![
        Profile {
            name: "mc1",
            title: "DEC Memory Channel 1",
            // Fillo & Gillett: MC1 has broadcast, the two ordering rules and loopback ("local
            // copy on transmit"); Figure 3: "Remote read support: No".
            features: Features { remote_write: true, broadcast: true, total_order: true, loopback: true, remote_read: false },
            // Fillo & Gillett: "Small message latency is 2.9 microseconds (from a sender process
            // STORE instruction to a message LOAD by a receiver process)". The same paper later
            // quotes 2.60 us for an MC1 ping-pong; we keep the figure from the MC1 section.
            latency_ns: 2_900,
            // Fillo & Gillett: "sustained point-to-point bandwidth of 66 megabytes per second".
            bandwidth_bytes_per_s: 66_000_000,
            // Fillo & Gillett, Figure 3: maximum packet size 32 bytes.
            packet_bytes: 32,
            // Estimate: the explicit-message software is Cashmere's, as on mc2, so we charge the
            // mc2 figures (see below). Fillo & Gillett's "less than 150 nanoseconds ... for a
            // 32-byte packet" is the cost of one remote store, not of an explicit message,
            // and is already part of `latency_ns`.
            send_overhead_ns: 2_100,
            recv_overhead_ns: 2_100,
            // Fillo & Gillett: the MC1 hub is "a broadcast-only shared bus"; every transfer
            // occupies the whole hub, and "maximum sustained broadcast bandwidth is also
            // 66 MB/s". A broadcast costs what a point-to-point write costs.
            broadcast_extra_ns: 0,
            // Estimate: Fillo & Gillett give no size; we assume the 128 MiB that Stets et al.
            // (section 2.3.1) report for the Memory Channel, which is software compatible.
            address_space_bytes: 128 * MIB,
            source: "Fillo & Gillett, Digital Technical Journal, 1997 (MC1 section and Figure 3); \
                     message overheads and address space are estimates",
        },
        Profile {
            name: "mc2",
            title: "DEC Memory Channel 2",
            // Stets et al., section 2.3.1: fetching by "a remote read operation ... is not
            // available on the Memory Channel". Fillo & Gillett describe a remote-read
            // primitive "added ... to support research", but the platform we model did not
            // offer it, so a variant that needs remote read must not run on mc2.
            features: Features { remote_write: true, broadcast: true, total_order: true, loopback: true, remote_read: false },
            // Stets et al., section 3.1: "one-way, cache-to-cache latency for a 64-bit
            // remote-write operation of 3.3 usecs" on the 8-node platform. Fillo & Gillett's
            // 2.17 us was measured in virtual hub mode (two nodes, no hub); the hub adds a
            // cut-through delay of "about 0.5 us".
            latency_ns: 3_300,
            // Stets et al., section 3.1: "peak point-to-point bandwidth of 75 MBytes/sec".
            // Fillo & Gillett measured 88 MB/s process to process on an AlphaServer 4100 in
            // virtual hub mode.
            bandwidth_bytes_per_s: 75_000_000,
            // Fillo & Gillett: payloads "of 4 to 256 bytes". An Alpha 21164 issues at most
            // 32-byte PCI writes, which are not aggregated, so programmed-I/O stores travel in
            // 32-byte packets; the bandwidth above already reflects that.
            packet_bytes: 256,
            // Stets et al., section 3.1: "the round-trip latency for a null message in
            // Cashmere is 15 usecs". 15 us = 2 x (3.3 us wire + send + receive), which leaves
            // 8.4 us of software per round trip; the even split between the sender and the
            // receiver is an estimate.
            send_overhead_ns: 2_100,
            recv_overhead_ns: 2_100,
            // Estimate: Fillo & Gillett give the largest broadcast synchronization wait as
            // "about 4 us"; we charge half of it on average.
            broadcast_extra_ns: 2_000,
            // Stets et al., section 2.3.1: "only 128MBytes of Memory Channel address space".
            address_space_bytes: 128 * MIB,
            source: "Stets et al., HPCA, 2000, sections 2.3.1 and 3.1; Fillo & Gillett, Digital \
                     Technical Journal, 1997; send/receive split and broadcast cost are estimates",
        },
        Profile {
            name: "tnet",
            title: "Swiss-Tx T-NET (FCI Remote Store)",
            // Brauss et al.: Remote Store has "remote writes but no remote reads" (2.1);
            // "T-NET offers the ability to perform multicasts directly in hardware" (3.6). The
            // paper promises no common order of multicasts from different senders, nor a
            // reflection of a sender's own writes, so total order and loopback are absent.
            features: Features { remote_write: true, broadcast: true, total_order: false, loopback: false, remote_read: false },
            // Estimate: Brauss et al. have no T-NET measurements ("useful benchmark results
            // cannot be presented"). On EasyNet, with "almost the same communication software",
            // a Remote Store 4-byte packet takes "5 us"; T-NET's adapter adds two
            // store-and-forward delays and each router "less than 0.5 us", so we keep 5 us.
            latency_ns: 5_000,
            // Estimate: Brauss et al. give a peak of "100 Mbyte/s in each direction"; EasyNet
            // reached about 46 of its 48 Mbyte/s (96%), and we assume the same efficiency.
            bandwidth_bytes_per_s: 96_000_000,
            // Estimate: the paper does not give the maximum payload; 256 bytes assumed.
            packet_bytes: 256,
            // Estimate: on EasyNet an MPI message without payload takes "about 10 us" against
            // 5 us for a Remote Store, so the message layer adds about 5 us, split evenly.
            send_overhead_ns: 2_500,
            recv_overhead_ns: 2_500,
            // Estimate: the crossbar routes a multicast "concurrently ... to all required output
            // links", so it costs no more than a unicast when the outputs are free.
            broadcast_extra_ns: 0,
            // Estimate: the paper sets no limit on the Global Communication Space; windows are
            // pinned host memory remapped through the adapter's page table (3.7).
            address_space_bytes: u64::MAX,
            source: "Brauss et al., 1999 (features, link peak, EasyNet measurements); T-NET latency, \
                     bandwidth, packet size, overheads and address space are estimates",
        },
        Profile {
            name: "qsnet",
            title: "Quadrics QsNet (Elan3, Elite)",
            // Petrini et al.: remote DMA into and out of a global virtual address space, with
            // per-page write and read rights, and "hardware support for broadcasts". The paper
            // promises neither a common order of broadcasts from different senders nor
            // loopback.
            features: Features { remote_write: true, broadcast: true, total_order: false, loopback: false, remote_read: true },
            // Petrini et al., unidirectional ping: Elan3lib latency of about 2.4 us for small
            // messages with buffers in main memory (figure quoted from the published paper).
            latency_ns: 2_400,
            // Petrini et al.: asymptotic unidirectional bandwidth in a narrow range of roughly
            // 305-335 MB/s, the top reached only with buffers in Elan memory. Estimate: 305 MB/s
            // for main memory to main memory.
            bandwidth_bytes_per_s: 305_000_000,
            // Estimate: the paper gives no DMA packet size; 320 bytes assumed. (Petrini et al.:
            // messages up to 64 bytes fit one write-block transaction.)
            packet_bytes: 320,
            // Estimate: a user-level DMA needs a descriptor write and a command to the Elan, and
            // the receiver polls a main-memory block; about 0.5 us each.
            send_overhead_ns: 500,
            recv_overhead_ns: 500,
            // Estimate: a broadcast completes only when acknowledgments from the whole group
            // are combined back to the source; about 1 us more than a point-to-point write.
            broadcast_extra_ns: 1_000,
            // Estimate: Elan3 addresses are 32-bit (Petrini et al.: the MMU translates 32-bit
            // Elan virtual addresses), so at most 4 GiB per context is remotely accessible.
            address_space_bytes: 4 * GIB,
            source: "Petrini et al., IEEE Micro, 2002 (features, latency, bandwidth range, 32-bit \
                     Elan addresses); bandwidth point, packet size, overheads and broadcast cost are estimates",
        },
        Profile {
            name: "sci",
            title: "Dolphin SCI (PCI-SCI D33x, SISCI)",
            // Mehlan & Rehm: SISCI maps remote segments for load and store ("the SCI
            // read-operation is not effective", but it exists). Dolphin's PCI-SCI adapters do
            // not implement the optional SCI broadcast, and SCI promises no global order.
            features: Features { remote_write: true, broadcast: false, total_order: false, loopback: false, remote_read: true },
            // Mehlan & Rehm, section 1: "The latency period for transmitting a 4 byte message is
            // considered to be about 1.4 us".
            latency_ns: 1_400,
            // Mehlan & Rehm, section 1: "a single SCI link can transmit up to 320 MByte per
            // second". Estimate: 250 MB/s sustained through the 64-bit/66 MHz PCI adapter.
            bandwidth_bytes_per_s: 250_000_000,
            // IEEE Std 1596-1992: the largest SCI data payload is 64 bytes.
            packet_bytes: 64,
            // Estimate: a message is written with programmed I/O into the receiver's segment and
            // detected by polling local memory; about 0.5 us to send, 0.2 us to receive.
            send_overhead_ns: 500,
            recv_overhead_ns: 200,
            // No hardware broadcast: emulated by the protocol with point-to-point writes.
            broadcast_extra_ns: 0,
            // Estimate: remote segments are reached through the adapter's PCI window and
            // address translation table; we assume 512 MiB of it can be mapped.
            address_space_bytes: 512 * MIB,
            source: "Mehlan & Rehm, TU Chemnitz, 2003 (latency, link rate, remote read); IEEE Std \
                     1596-1992 (packet); sustained bandwidth, overheads and address space are estimates",
        },
        Profile {
            name: "myrinet",
            title: "Myrinet-2000 with GM",
            // GM offers directed sends (remote writes into registered memory) and, from GM 2,
            // gets (remote reads). Myrinet has no hardware broadcast and no global order.
            features: Features { remote_write: true, broadcast: false, total_order: false, loopback: false, remote_read: true },
            // Myricom, GM documentation, 2001: "short-message latencies as low as 7 us".
            latency_ns: 7_000,
            // Myricom, GM documentation, 2001: "sustained, one-way data rates of ~1.96 Gbits/s"
            // between user processes, i.e. 245 MB/s.
            bandwidth_bytes_per_s: 245_000_000,
            // Estimate: GM fragments messages into packets of at most 4 KiB.
            packet_bytes: 4096,
            // Estimate: GM sends and receives by posting to and polling the NIC from user
            // space; about 1 us each on hosts of the period.
            send_overhead_ns: 1_000,
            recv_overhead_ns: 1_000,
            // No hardware broadcast: emulated by the protocol with point-to-point messages.
            broadcast_extra_ns: 0,
            // Estimate: any registered (pinned) memory can be written, so there is no
            // network-wide limit.
            address_space_bytes: u64::MAX,
            source: "Myricom, Myrinet-2000/GM documentation, 2001 (latency, bandwidth); packet \
                     size, overheads and address space are estimates",
        },
        Profile {
            name: "gige-tcp",
            title: "Gigabit Ethernet, TCP sockets",
            // TCP offers messages only.
            features: Features::NONE,
            // Estimate: a small TCP message takes about 30 us one way on a Linux cluster of the
            // 2000s; we charge 18 us here and 4 + 8 us of kernel time below, so that
            // latency + send + receive is that 30 us.
            latency_ns: 18_000,
            // IEEE 802.3 and RFC 791/793/7323: 1 Gbit/s line rate, 1448 payload bytes in a
            // 1538-byte frame slot, so at most 117.7 MB/s of TCP payload.
            bandwidth_bytes_per_s: 117_000_000,
            // 1500-byte MTU minus 20 (IP), 20 (TCP) and 12 (timestamp option) bytes.
            packet_bytes: 1448,
            // Estimate: a send() system call with copy; a receive interrupt, protocol
            // processing, copy and wake-up.
            send_overhead_ns: 4_000,
            recv_overhead_ns: 8_000,
            // No hardware broadcast: emulated by the protocol with point-to-point messages.
            broadcast_extra_ns: 0,
            // No remote write, so no network address space.
            address_space_bytes: u64::MAX,
            source: "IEEE 802.3 and TCP/IP framing (bandwidth, packet); latency and overheads are estimates",
        },
        Profile {
            name: "10gbe-tcp",
            title: "10 Gigabit Ethernet, TCP sockets",
            // TCP offers messages only.
            features: Features::NONE,
            // Estimate: about 12 us one way for a small TCP message with interrupt moderation
            // tuned for latency; 5 us here and 2.5 + 4.5 us of kernel time below.
            latency_ns: 5_000,
            // IEEE 802.3 and RFC 791/793/7323: 10 Gbit/s, 1448 payload bytes per 1538-byte frame
            // slot, at most 1.177 GB/s of TCP payload.
            bandwidth_bytes_per_s: 1_170_000_000,
            // 1500-byte MTU minus 20 (IP), 20 (TCP) and 12 (timestamp option) bytes.
            packet_bytes: 1448,
            // Estimate: system call, copy and protocol processing on each side.
            send_overhead_ns: 2_500,
            recv_overhead_ns: 4_500,
            // No hardware broadcast: emulated by the protocol with point-to-point messages.
            broadcast_extra_ns: 0,
            // No remote write, so no network address space.
            address_space_bytes: u64::MAX,
            source: "IEEE 802.3 and TCP/IP framing (bandwidth, packet); latency and overheads are estimates",
        },
        Profile {
            name: "ib-hdr",
            title: "InfiniBand HDR, verbs RDMA write",
            // IBTA Vol. 1: reliable connections carry RDMA write and RDMA read. Multicast exists
            // only for unreliable datagrams, which cannot carry remote writes, so there is no
            // usable hardware broadcast and no global order.
            features: Features { remote_write: true, broadcast: false, total_order: false, loopback: false, remote_read: true },
            // Estimate: about 1 us for a small RDMA write through one switch, as perftest's
            // ib_write_lat typically reports on HDR adapters.
            latency_ns: 1_000,
            // IBTA Vol. 1, Rel. 1.4: 4x HDR signals 200 Gbit/s with 64b/66b coding, 24.2 GB/s of
            // data. Estimate: 24 GB/s sustained for large RDMA writes.
            bandwidth_bytes_per_s: 24_000_000_000,
            // IBTA Vol. 1: the largest path MTU is 4096 bytes.
            packet_bytes: 4096,
            // Estimate: posting a work request and polling a completion or a flag in memory;
            // about 0.2 us each.
            send_overhead_ns: 200,
            recv_overhead_ns: 200,
            // No reliable hardware broadcast: emulated by the protocol with RDMA writes.
            broadcast_extra_ns: 0,
            // Estimate: any registered memory can be written, so there is no network-wide limit.
            address_space_bytes: u64::MAX,
            source: "IBTA InfiniBand Architecture Specification Vol. 1, Rel. 1.4, 2020 (features, \
                     signalling rate, MTU); latency, sustained bandwidth and overheads are estimates",
        },
        Profile {
            name: "host",
            title: "this host's shared memory",
            features: Features { remote_write: true, broadcast: true, total_order: true, loopback: true, remote_read: true },
            // Measured on the 2-core development machine: a spinning cross-process ping-pong
            // takes 0.13 us one way (issue 2).
            latency_ns: 130,
            // Estimate: memcpy bandwidth of one core, about 10 GB/s.
            bandwidth_bytes_per_s: 10_000_000_000,
            packet_bytes: 4096,
            // Estimate: a ring write plus a dispatch, about 0.1 us each.
            send_overhead_ns: 100,
            recv_overhead_ns: 100,
            broadcast_extra_ns: 0,
            address_space_bytes: 64 * GIB,
            source: "measured on this machine (ping-pong); bandwidth and overheads estimated",
        },
    ]
}

/// The most network address space the simulation backs with memory: networks whose
/// remote-write space is unlimited (or that have none) get this much for message rings and
/// protocol regions.
pub const MAX_SIMULATED_ADDRESS_SPACE: u64 = 1 << 30;

impl Profile {
    /// The network address space the fabric simulates for this profile.
    pub fn fabric_address_space_bytes(&self) -> u64 {
        self.address_space_bytes.min(MAX_SIMULATED_ADDRESS_SPACE)
    }
}

/// The profile named `name`, or an error listing the valid names.
pub fn by_name(name: &str) -> Result<Profile, UnknownProfile> {
    let all = all();
    all.iter()
        .find(|p| p.name == name)
        .cloned()
        .ok_or_else(|| UnknownProfile {
            name: name.to_string(),
            valid: all.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        })
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown network profile `{name}`; valid profiles: {valid}")]
pub struct UnknownProfile {
    pub name: String,
    pub valid: String,
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = Vec::new();
        if self.remote_write {
            names.push("remote-write");
        }
        if self.broadcast {
            names.push("broadcast");
        }
        if self.total_order {
            names.push("total-order");
        }
        if self.loopback {
            names.push("loopback");
        }
        if self.remote_read {
            names.push("remote-read");
        }
        if names.is_empty() {
            f.write_str("messages only")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_survive_their_bits() {
        for p in all() {
            assert_eq!(Features::from_bits(p.features.to_bits()), p.features, "{}", p.name);
        }
        assert_eq!(Features::NONE.to_bits(), 0);
        assert_eq!(Features { loopback: true, ..Features::NONE }.to_bits(), 1 << 3);
    }

    #[test]
    fn names_are_unique_and_lookup_works() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(by_name("mc2").unwrap().packet_bytes, 256);
        let e = by_name("token-ring").unwrap_err();
        assert!(e
            .to_string()
            .contains("unknown network profile `token-ring`"));
        assert!(e.to_string().contains("mc2"));
    }

    #[test]
    fn every_profile_is_plausible() {
        for p in all() {
            assert!(
                p.latency_ns > 0 && p.bandwidth_bytes_per_s > 0 && p.packet_bytes > 0,
                "{}",
                p.name
            );
            assert!(!p.source.is_empty(), "{} has no source", p.name);
        }
    }

    #[test]
    fn features_match_the_published_capabilities() {
        // (name, remote write, broadcast, total order, loopback, remote read)
        let expected = [
            ("mc1", true, true, true, true, false),
            ("mc2", true, true, true, true, false),
            ("tnet", true, true, false, false, false),
            ("qsnet", true, true, false, false, true),
            ("sci", true, false, false, false, true),
            ("myrinet", true, false, false, false, true),
            ("gige-tcp", false, false, false, false, false),
            ("10gbe-tcp", false, false, false, false, false),
            ("ib-hdr", true, false, false, false, true),
            ("host", true, true, true, true, true),
        ];
        assert_eq!(all().len(), expected.len());
        for (name, remote_write, broadcast, total_order, loopback, remote_read) in expected {
            let want = Features {
                remote_write,
                broadcast,
                total_order,
                loopback,
                remote_read,
            };
            assert_eq!(by_name(name).unwrap().features, want, "{name}");
        }
    }

    #[test]
    fn features_and_costs_agree() {
        for p in all() {
            let f = p.features;
            if !f.remote_write {
                assert_eq!(
                    p.address_space_bytes,
                    u64::MAX,
                    "{}: no remote write, so no address space limit",
                    p.name
                );
                assert_eq!(
                    f,
                    Features::NONE,
                    "{}: hardware features without remote write",
                    p.name
                );
            }
            if !f.broadcast {
                assert_eq!(
                    p.broadcast_extra_ns, 0,
                    "{}: emulated broadcast is not charged here",
                    p.name
                );
                assert!(
                    !f.total_order,
                    "{}: total order is an order of broadcasts",
                    p.name
                );
            }
            if f.loopback {
                assert!(
                    f.remote_write,
                    "{}: loopback reflects a remote write",
                    p.name
                );
            }
        }
    }

    #[test]
    fn mc2_reproduces_the_cashmere_null_message_round_trip() {
        // Stets et al., HPCA 2000, section 3.1: a null message round trip takes 15 us.
        let p = by_name("mc2").unwrap();
        assert_eq!(
            2 * (p.latency_ns + p.send_overhead_ns + p.recv_overhead_ns),
            15_000
        );
    }

    #[test]
    fn mc2_address_space_is_the_cashmere_limit() {
        // Stets et al., HPCA 2000, section 2.3.1: 128 MBytes of Memory Channel address space.
        assert_eq!(by_name("mc2").unwrap().address_space_bytes, 128 * MIB);
    }

    #[test]
    fn missing_features_are_named() {
        let msgs = Features::NONE;
        let dms = Features {
            remote_write: true,
            broadcast: true,
            total_order: true,
            loopback: true,
            remote_read: false,
        };
        assert_eq!(
            msgs.missing(&dms),
            vec!["remote write", "broadcast", "total order", "loopback"]
        );
        assert!(dms.missing(&dms).is_empty());
        let tnet = by_name("tnet").unwrap().features;
        assert_eq!(tnet.missing(&dms), vec!["total order", "loopback"]);
    }
}
