//! The wire format of every request and reply the engine and the message-based
//! synchronization exchange over the message rings (section 2.3: the variants that use
//! explicit messages instead of Memory Channel features; exclusive mode's `Recall` and
//! `Flush` under every variant). This is the one module that encodes and decodes payloads;
//! nothing else slices them by hand. The transport ([`crate::net`]) carries a request as
//! `kind` plus a byte payload, and a reply as a byte payload in the requester's mailbox.
//!
//! # Format
//!
//! All integers are little-endian. A request is the transport's `kind` and a payload:
//!
//! | kind | message       | payload                                                     |
//! |------|---------------|-------------------------------------------------------------|
//! | 10   | `HomeQuery`   | page u32                                                    |
//! | 11   | `Fetch`       | page u32, migrate u8, exclusive u8, rehome u8,              |
//! |      |               | needs_page u8, version u64, check u64                       |
//! | 12   | `Diff`        | page u32, n u32, n word runs (`crate::diff`): offset u32,   |
//! |      |               | words u32 (bit 31: masked), [words mask bytes], words × 8   |
//! | 13   | `Drop`        | page u32                                                    |
//! | 14   | `Notice`      | n u32, n × page u32                                         |
//! | 15   | `Recall`      | page u32                                                    |
//! | 16   | `Flush`       | page u32, holder u16, fetch u8, n u32, n bytes              |
//! | 20   | `LockAcquire` | lock u32                                                    |
//! | 21   | `LockRelease` | lock u32                                                    |
//! | 22   | `Barrier`     | barrier u32, epoch u64                                      |
//! | 23   | `FlagSet`     | flag u32                                                    |
//! | 24   | `FlagWait`    | flag u32                                                    |
//! | 30   | `Shutdown`    | nothing                                                     |
//!
//! How each is sent, and what answers it:
//!
//! | message       | sent as                                | answered by                |
//! |---------------|----------------------------------------|----------------------------|
//! | `HomeQuery`   | request, to the page's manager         | `Home`                     |
//! | `Fetch`       | request, to the home                   | `Page`, `Granted`,         |
//! |               |                                        | `Refused`, `Moved`,        |
//! |               |                                        | `Holder`                   |
//! | `Diff`        | request, to the home                   | `DiffAck`, `Moved`         |
//! | `Drop`        | one-way, to the home                   | (nothing)                  |
//! | `Notice`      | request to several nodes at once       | an acknowledgement word,   |
//! |               | (`Net::request_all_via`)               | no reply record            |
//! | `Recall`      | request, to the exclusive holder       | `Flushed`                  |
//! | `Flush`       | request, to the home                   | `Ack`; with fetch, `Page`  |
//! | `LockAcquire` | request, to the lock's manager         | `Ack` (the grant)          |
//! | `LockRelease` | one-way, to the lock's manager         | (nothing)                  |
//! | `Barrier`     | request, to the barrier's manager      | `Ack` (all have arrived)   |
//! | `FlagSet`     | request, to the flag's manager         | `Ack`                      |
//! | `FlagWait`    | request, to the flag's manager         | `Ack` (the flag is set)    |
//! | `Shutdown`    | never sent: the run ends with the      | (nothing; a handler takes  |
//! |               | engine's final barrier                 | it for a no-op)            |
//!
//! A reply is a tag byte and a body:
//!
//! | tag | reply     | body                                                          |
//! |-----|-----------|---------------------------------------------------------------|
//! | 0   | `Ack`     | nothing                                                       |
//! | 1   | `Home`    | home u16                                                      |
//! | 2   | `Page`    | sharers u64, home_writing u8, migrated u8, rehomed u8,        |
//! |     |           | exclusive u8, version u64,                                    |
//! |     |           | n u32, n bytes                                                |
//! | 3   | `Refused` | sharers u64, home_writing u8                                  |
//! | 4   | `DiffAck` | sharers u64, home_writing u8                                  |
//! | 5   | `Moved`   | home u16                                                      |
//! | 6   | `Holder`  | holder u16                                                    |
//! | 7   | `Flushed` | n u32, n bytes                                                |
//! | 8   | `Granted` | sharers u64, home_writing u8, version u64                     |
//!
//! Flag bytes are 0 or 1. Every variable-length part carries its count, so a record cut
//! short anywhere is reported as truncated instead of read as a shorter valid record, and a
//! record followed by more bytes is an error. The encoding is canonical: a payload that
//! decodes re-encodes to the same bytes. The tables are checked against the encoders
//! (`tests::the_format_tables_match_the_encoders`): every kind and tag has its row, and
//! each row's fixed fields add up to the encoding of a record with empty variable parts.
//!
//! Decoding never panics: every read goes through [`Reader`], which returns an error where
//! indexing would have panicked, and the borrowed views ([`DiffRuns`], [`PageList`]) are
//! only built over bytes already checked.

use crate::diff;
use crate::ids::{NodeId, NodeSet, PageId};
use crate::net::{MAX_MESSAGE_BYTES, MAX_NODES};
use std::fmt;

/// Message kinds, the u16 the transport carries. The numbers are part of the format: keep
/// them stable.
pub(crate) mod kind {
    pub(crate) const HOME: u16 = 10;
    pub(crate) const FETCH: u16 = 11;
    pub(crate) const DIFF: u16 = 12;
    pub(crate) const DROP: u16 = 13;
    pub(crate) const NOTICE: u16 = 14;
    pub(crate) const RECALL: u16 = 15;
    pub(crate) const FLUSH: u16 = 16;
    pub(crate) const LOCK_ACQ: u16 = 20;
    pub(crate) const LOCK_REL: u16 = 21;
    pub(crate) const BARRIER: u16 = 22;
    pub(crate) const FLAG_SET: u16 = 23;
    pub(crate) const FLAG_WAIT: u16 = 24;
    /// [`super::Msg::Shutdown`].
    pub(crate) const STOP: u16 = 30;
}

/// Reply tags, the first byte of every reply.
mod tag {
    pub(super) const ACK: u8 = 0;
    pub(super) const HOME: u8 = 1;
    pub(super) const PAGE: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
    pub(super) const DIFF_ACK: u8 = 4;
    pub(super) const MOVED: u8 = 5;
    pub(super) const HOLDER: u8 = 6;
    pub(super) const FLUSHED: u8 = 7;
    pub(super) const GRANTED: u8 = 8;
}

/// Bytes a `Diff` message spends before its first run: the page and the run count.
const DIFF_HEADER_BYTES: usize = 8;
/// Bytes each diff run spends before its mask and data: the offset and the word count.
const RUN_HEADER_BYTES: usize = crate::diff::RUN_HEADER_BYTES;
/// Bytes a `Page` reply spends before the page data.
const PAGE_REPLY_HEADER_BYTES: usize = 1 + PIGGYBACK_BYTES + 1 + 1 + 1 + 8 + 4;
/// Bytes of a [`Piggyback`]: the sharing set (u64) and the home-writing flag.
const PIGGYBACK_BYTES: usize = 8 + 1;

/// The largest coherence page (`Config::validate` refuses larger ones): a `Page` reply
/// carries a whole page in one message.
pub(crate) const MAX_PAGE_BYTES: usize = 16 * 1024;

/// The least byte budget a [`DiffWriter`] takes: room for one masked word.
pub(crate) const MIN_DIFF_BUDGET_BYTES: usize =
    DIFF_HEADER_BYTES + RUN_HEADER_BYTES + diff::WORD + 1;

/// The most run data one `Diff` message can carry. [`DiffWriter`] splits longer diffs.
#[cfg(test)]
pub(crate) const MAX_DIFF_DATA_BYTES: usize =
    MAX_MESSAGE_BYTES - DIFF_HEADER_BYTES - RUN_HEADER_BYTES;
/// The largest page a `Page` reply can carry.
const MAX_PAGE_REPLY_BYTES: usize = MAX_MESSAGE_BYTES - PAGE_REPLY_HEADER_BYTES;
const _: () = assert!(
    MAX_PAGE_BYTES <= MAX_PAGE_REPLY_BYTES,
    "a Page reply must carry the largest page in one message"
);

/// What was wrong with a payload that did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error(
        "unknown message kind {0}: the sender runs another version of the protocol, or the \
         ring is corrupt"
    )]
    UnknownKind(u16),
    #[error("truncated {record} record: it needs {needed} bytes, the payload has {got}")]
    Truncated {
        record: &'static str,
        needed: usize,
        got: usize,
    },
    #[error("unknown reply tag {0}: the replier runs another version of the protocol")]
    UnknownReplyTag(u8),
    #[error("{extra} trailing bytes after a complete {record} record")]
    TrailingBytes { record: &'static str, extra: usize },
    #[error("bad flag byte {value} for `{field}` in a {record} record: only 0 or 1 is valid")]
    BadFlag {
        record: &'static str,
        field: &'static str,
        value: u8,
    },
    #[error("{record} record names node {node}, but a cluster has at most {MAX_NODES} nodes")]
    BadNode { record: &'static str, node: u16 },
    #[error(
        "diff run of {len} bytes at offset {offset} lies outside the page of {page_bytes} bytes"
    )]
    RunOutsidePage {
        offset: u32,
        len: usize,
        page_bytes: usize,
    },
    #[error("diff run at offset {offset}, which is not a multiple of the 8-byte word")]
    UnalignedRun { offset: u32 },
    #[error("{record} record names page {page}, but the heap has {pages} pages")]
    PageOutOfRange {
        record: &'static str,
        page: u32,
        pages: usize,
    },
    #[error("{record} record names node {node}, but the cluster has {nodes} nodes")]
    NodeOutOfRange {
        record: &'static str,
        node: u16,
        nodes: usize,
    },
    #[error("{record} record's sharing set {bits:#x} names nodes beyond the cluster's {nodes}")]
    SetOutOfRange {
        record: &'static str,
        bits: u64,
        nodes: usize,
    },
}

/// What a receiver knows that the decoder does not: the sizes its ids must fall in. The
/// decoder checks the format's own limits (a node below `MAX_NODES`, runs inside a page);
/// [`Msg::check`] and [`Reply::check`] check a decoded record against the heap and the
/// cluster, so that an id out of range is reported with its sender and record, not met
/// later as an index out of bounds far from the message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    pub pages: usize,
    pub nodes: usize,
}

impl Bounds {
    fn page(self, record: &'static str, page: PageId) -> Result<(), DecodeError> {
        (page.index() < self.pages)
            .then_some(())
            .ok_or(DecodeError::PageOutOfRange { record, page: page.0, pages: self.pages })
    }

    fn node(self, record: &'static str, node: NodeId) -> Result<(), DecodeError> {
        (node.index() < self.nodes).then_some(()).ok_or(DecodeError::NodeOutOfRange {
            record,
            node: node.index() as u16,
            nodes: self.nodes,
        })
    }

    fn set(self, record: &'static str, set: NodeSet) -> Result<(), DecodeError> {
        let bits = set.bits();
        (bits & !NodeSet::first(self.nodes).bits() == 0)
            .then_some(())
            .ok_or(DecodeError::SetOutOfRange { record, bits, nodes: self.nodes })
    }
}

/// A request or one-way message. [`Msg::kind`] is the u16 the transport carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Msg<'a> {
    /// Ask the page's manager who its home is; the first touch claims it for the sender
    /// (first-touch home assignment, section 2.3.1; by message in CSM-S and CSM-None,
    /// sections 2.3.3 and 2.3.4).
    HomeQuery { page: PageId },
    /// Fetch a page from its home (section 2.2); the fetch itself adds the sender to the
    /// sharing set (section 2.3.3). With `migrate`, also ask the home to move to the
    /// sender (section 2.3.5). With `exclusive`, also ask to hold the page in exclusive
    /// mode if no other node shares it (section 2.2, a write fault on an invalid page).
    /// With `rehome`, this is the sender's first touch of the page since the program's
    /// initialization ended: the home moves to the sender if no node has touched the page
    /// since then (first touch after initialization, section 2.3.1; `engine/home.rs`).
    /// `needs_page`: the sender holds no valid copy, so a home that refuses to move sends
    /// the page all the same (the migration request rides on the page update, 2.3.5);
    /// without it a refusal is a [`Reply::Refused`], and a grant to a copy whose
    /// `version` is the master's is a [`Reply::Granted`], with no page. `check`: in a
    /// build with debug assertions, a hash of that copy, which such a home checks against
    /// the master's (0: unchecked).
    Fetch {
        page: PageId,
        migrate: bool,
        exclusive: bool,
        rehome: bool,
        needs_page: bool,
        version: u64,
        check: u64,
    },
    /// A diff for the master copy, sent at a release (section 2.2) when data does not live
    /// in network space (section 2.3.2): runs of changed words (see [`DiffRuns`]).
    Diff { page: PageId, runs: DiffRuns<'a> },
    /// One-way: the sender dropped its copy, so the home-held directory takes it out of the
    /// sharing set (the one explicit directory message of section 2.3.3).
    Drop { page: PageId },
    /// Write notices for these pages, to be invalidated at the receiver's next acquire
    /// (section 2.2).
    Notice { pages: PageList<'a> },
    /// To the node holding a page in exclusive mode: leave it, and answer with the page's
    /// contents (section 2.2, "until another sharer emerges").
    Recall { page: PageId },
    /// To the home: `holder`'s whole page, ending its exclusive mode (`data` is empty if
    /// the holder wrote it into the master copy itself). With `fetch`, the sender also
    /// fetches the page (the reply is a `Page`), else the reply is an `Ack`.
    Flush {
        page: PageId,
        holder: NodeId,
        fetch: bool,
        data: &'a [u8],
    },
    /// Acquire a lock by message (section 2.3.4, no Memory Channel synchronization).
    LockAcquire { lock: u32 },
    /// One-way: release a lock (section 2.3.4).
    LockRelease { lock: u32 },
    /// Arrive at a barrier for its `epoch`-th episode (section 2.3.4).
    Barrier { barrier: u32, epoch: u64 },
    /// Set a write-once flag (section 2.3.4).
    FlagSet { flag: u32 },
    /// Wait for a flag to be set (section 2.3.4).
    FlagWait { flag: u32 },
    /// One-way: the sender has finished the run and sends nothing more (end-of-run
    /// protocol step).
    Shutdown,
}

/// Directory information a home piggybacks on its replies (section 2.3.3): the sharing set
/// and whether the home is writing the page (which decides migration, section 2.3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piggyback {
    pub sharers: NodeSet,
    pub home_writing: bool,
}

/// A reply, carried in the requester's mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply<'a> {
    /// The request was served and there is nothing to say (notices, synchronization).
    Ack,
    /// The page's home, from its manager (answers [`Msg::HomeQuery`]).
    Home { home: NodeId },
    /// The page's master copy (answers [`Msg::Fetch`], section 2.2). `migrated`: the home
    /// moved to the receiver, which is the new home: by a migration (section 2.3.5), or
    /// (`rehomed`) because the receiver is the first to touch the page since initialization
    /// ended (section 2.3.1). A migration the home refused while the receiver has no
    /// valid copy is answered with the page too, `migrated` false.
    Page {
        data: &'a [u8],
        meta: Piggyback,
        migrated: bool,
        rehomed: bool,
        /// The receiver holds the page in exclusive mode from now on (section 2.2).
        exclusive: bool,
        /// The master copy's version, which the receiver's copy now has
        /// (`crate::page::PageState::version`).
        version: u64,
    },
    /// A migration request that was refused because the home is writing the page (section
    /// 2.3.5). No data: the requester already has a valid copy.
    Refused { meta: Piggyback },
    /// A migration granted to a requester whose valid copy has the master's version
    /// (section 2.3.5): the receiver is the new home, and its copy is the master copy, so
    /// no page travels. `version`: the master's, which the receiver's copy has.
    Granted { meta: Piggyback, version: u64 },
    /// The diff is applied; the sharing set rides along so the sender knows where to send
    /// write notices (section 2.3.3).
    DiffAck { meta: Piggyback },
    /// This node is not the page's home (it moved, or never was): retry at `home`
    /// (section 2.3.5).
    Moved { home: NodeId },
    /// The page is exclusive at `holder`: recall it there, then flush it to the home.
    Holder { holder: NodeId },
    /// The recalled page's contents (empty if it was not exclusive here any more, or was
    /// written into the master copy by remote write).
    Flushed { data: &'a [u8] },
}

/// The runs of a diff, a borrowed view over their encoding: `n u32` then `n` runs of
/// changed words, each encoded as [`crate::diff`] says (`offset u32`, `words u32` with
/// the mask bit, the masks if any, the words). Offsets and counts are 32-bit so pages of
/// 64 KiB and more work. Built only by decoding (which checks the structure) or by
/// `DiffRuns::encode_from`, so iterating never fails.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiffRuns<'a> {
    count: u32,
    /// The whole encoding, count included.
    bytes: &'a [u8],
}

/// The name of message kind `kind` (`None` if no message has it).
pub(crate) fn kind_name(kind: u16) -> Option<&'static str> {
    Some(match kind {
        kind::HOME => "HomeQuery",
        kind::FETCH => "Fetch",
        kind::DIFF => "Diff",
        kind::DROP => "Drop",
        kind::NOTICE => "Notice",
        kind::RECALL => "Recall",
        kind::FLUSH => "Flush",
        kind::LOCK_ACQ => "LockAcquire",
        kind::LOCK_REL => "LockRelease",
        kind::BARRIER => "Barrier",
        kind::FLAG_SET => "FlagSet",
        kind::FLAG_WAIT => "FlagWait",
        kind::STOP => "Shutdown",
        _ => return None,
    })
}

impl<'a> DiffRuns<'a> {
    /// Encodes `runs` into `buf` (cleared first) and returns the view over it. There is no
    /// byte budget here: use [`DiffWriter`] to split a diff over messages.
    ///
    /// # Panics
    ///
    /// If an offset or a word count does not fit its field.
    #[cfg(test)]
    pub(crate) fn encode_from<'r>(
        runs: impl IntoIterator<Item = diff::Run<'r>>,
        buf: &'a mut Vec<u8>,
    ) -> DiffRuns<'a> {
        buf.clear();
        put_u32(buf, 0);
        let mut count = 0u32;
        for run in runs {
            run.put(buf);
            count = count.checked_add(1).expect("more than u32::MAX diff runs");
        }
        buf[..4].copy_from_slice(&count.to_le_bytes());
        DiffRuns { count, bytes: buf }
    }

    fn read(r: &mut Reader<'a>) -> Result<DiffRuns<'a>, DecodeError> {
        let start = r.at;
        let count = r.u32()?;
        // Each run consumes at least its header, so a garbage count ends in a truncation
        // error after at most payload/8 rounds.
        for _ in 0..count {
            r.u32()?;
            let words = r.u32()?;
            let n = (words & !diff::MASKED) as usize;
            if words & diff::MASKED != 0 {
                r.bytes(n)?;
            }
            // Saturating: on a 32-bit host a garbage count must not wrap to a short read.
            r.bytes(n.saturating_mul(diff::WORD))?;
        }
        Ok(DiffRuns {
            count,
            bytes: r.since(start),
        })
    }

    /// The runs, in encoded order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = diff::Run<'a>> + 'a {
        let mut rest = self.bytes.get(4..).unwrap_or_default();
        std::iter::from_fn(move || {
            let (run, tail) = diff::Run::take(rest)?;
            rest = tail;
            Some(run)
        })
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks that every run starts on a word and lies within a page of `page_bytes`,
    /// which `decode` cannot know. The home must call this before applying a received diff.
    pub(crate) fn check(&self, page_bytes: usize) -> Result<(), DecodeError> {
        for run in self.iter() {
            let offset = run.offset as u32;
            if run.offset % diff::WORD != 0 {
                return Err(DecodeError::UnalignedRun { offset });
            }
            // In u64, so a run near u32::MAX cannot wrap around to a small end.
            if run.offset as u64 + run.data.len() as u64 > page_bytes as u64 {
                return Err(DecodeError::RunOutsidePage {
                    offset,
                    len: run.data.len(),
                    page_bytes,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Debug for DiffRuns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|r| (r.offset, r.words(), if r.mask.is_some() { "masked" } else { "whole" })),
            )
            .finish()
    }
}

/// A list of pages, a borrowed view over its encoding: `n u32` then `n` pages as u32.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageList<'a> {
    count: u32,
    /// The whole encoding, count included.
    bytes: &'a [u8],
}

impl<'a> PageList<'a> {
    /// Encodes `pages` into `buf` (cleared first) and returns the view over it.
    pub(crate) fn encode_from(
        pages: impl IntoIterator<Item = PageId>,
        buf: &'a mut Vec<u8>,
    ) -> PageList<'a> {
        buf.clear();
        put_u32(buf, 0);
        let mut count = 0u32;
        for p in pages {
            put_u32(buf, p.0);
            count = count.checked_add(1).expect("more than u32::MAX pages");
        }
        buf[..4].copy_from_slice(&count.to_le_bytes());
        PageList { count, bytes: buf }
    }

    fn read(r: &mut Reader<'a>) -> Result<PageList<'a>, DecodeError> {
        let start = r.at;
        let count = r.u32()?;
        r.bytes((count as usize).saturating_mul(4))?;
        Ok(PageList {
            count,
            bytes: r.since(start),
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = PageId> + 'a {
        self.bytes
            .get(4..)
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| PageId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }
}

impl fmt::Debug for PageList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(|p| p.0)).finish()
    }
}

impl<'a> Msg<'a> {
    /// The kind the transport carries for this message.
    pub(crate) fn kind(&self) -> u16 {
        match self {
            Msg::HomeQuery { .. } => kind::HOME,
            Msg::Fetch { .. } => kind::FETCH,
            Msg::Diff { .. } => kind::DIFF,
            Msg::Drop { .. } => kind::DROP,
            Msg::Notice { .. } => kind::NOTICE,
            Msg::Recall { .. } => kind::RECALL,
            Msg::Flush { .. } => kind::FLUSH,
            Msg::LockAcquire { .. } => kind::LOCK_ACQ,
            Msg::LockRelease { .. } => kind::LOCK_REL,
            Msg::Barrier { .. } => kind::BARRIER,
            Msg::FlagSet { .. } => kind::FLAG_SET,
            Msg::FlagWait { .. } => kind::FLAG_WAIT,
            Msg::Shutdown => kind::STOP,
        }
    }

    /// Decodes a message and checks the ids it names against `b` ([`Msg::check`]).
    pub(crate) fn decode_within(
        kind: u16,
        payload: &'a [u8],
        b: Bounds,
    ) -> Result<Msg<'a>, DecodeError> {
        let msg = Msg::decode(kind, payload)?;
        msg.check(b)?;
        Ok(msg)
    }

    /// Checks the pages and nodes this message names against the receiver's heap and
    /// cluster ([`Bounds`]). Lock, barrier and flag numbers are the synchronization
    /// manager's to check (`crate::sync`).
    pub(crate) fn check(&self, b: Bounds) -> Result<(), DecodeError> {
        let record = kind_name(self.kind()).unwrap_or("message");
        match *self {
            Msg::HomeQuery { page }
            | Msg::Fetch { page, .. }
            | Msg::Diff { page, .. }
            | Msg::Drop { page }
            | Msg::Recall { page } => b.page(record, page),
            Msg::Flush { page, holder, .. } => {
                b.page(record, page)?;
                b.node(record, holder)
            }
            Msg::Notice { pages } => pages.iter().try_for_each(|p| b.page(record, p)),
            Msg::LockAcquire { .. }
            | Msg::LockRelease { .. }
            | Msg::Barrier { .. }
            | Msg::FlagSet { .. }
            | Msg::FlagWait { .. }
            | Msg::Shutdown => Ok(()),
        }
    }

    /// Appends the payload of this message to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Msg::HomeQuery { page } | Msg::Drop { page } | Msg::Recall { page } => {
                put_u32(out, page.0)
            }
            Msg::Fetch {
                page,
                migrate,
                exclusive,
                rehome,
                needs_page,
                version,
                check,
            } => {
                put_u32(out, page.0);
                out.push(u8::from(migrate));
                out.push(u8::from(exclusive));
                out.push(u8::from(rehome));
                out.push(u8::from(needs_page));
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&check.to_le_bytes());
            }
            Msg::Flush {
                page,
                holder,
                fetch,
                data,
            } => {
                put_u32(out, page.0);
                out.extend_from_slice(&holder.0.to_le_bytes());
                out.push(u8::from(fetch));
                put_u32(
                    out,
                    u32::try_from(data.len()).expect("page data exceeds u32"),
                );
                out.extend_from_slice(data);
            }
            Msg::Diff { page, runs } => {
                put_u32(out, page.0);
                out.extend_from_slice(runs.bytes);
            }
            Msg::Notice { pages } => out.extend_from_slice(pages.bytes),
            Msg::LockAcquire { lock: id }
            | Msg::LockRelease { lock: id }
            | Msg::FlagSet { flag: id }
            | Msg::FlagWait { flag: id } => put_u32(out, id),
            Msg::Barrier { barrier, epoch } => {
                put_u32(out, barrier);
                out.extend_from_slice(&epoch.to_le_bytes());
            }
            Msg::Shutdown => {}
        }
    }

    /// Decodes the payload of a message of `kind`. Zero-copy: diff runs and page lists
    /// borrow `payload`.
    pub(crate) fn decode(kind: u16, payload: &'a [u8]) -> Result<Msg<'a>, DecodeError> {
        let record = kind_name(kind).ok_or(DecodeError::UnknownKind(kind))?;
        let mut r = Reader::new(payload, record);
        let msg = match kind {
            kind::HOME => Msg::HomeQuery { page: r.page()? },
            kind::FETCH => Msg::Fetch {
                page: r.page()?,
                migrate: r.flag("migrate")?,
                exclusive: r.flag("exclusive")?,
                rehome: r.flag("rehome")?,
                needs_page: r.flag("needs_page")?,
                version: r.u64()?,
                check: r.u64()?,
            },
            kind::RECALL => Msg::Recall { page: r.page()? },
            kind::FLUSH => {
                let page = r.page()?;
                let holder = r.node()?;
                let fetch = r.flag("fetch")?;
                let len = r.u32()?;
                Msg::Flush {
                    page,
                    holder,
                    fetch,
                    data: r.bytes(len as usize)?,
                }
            }
            kind::DIFF => Msg::Diff {
                page: r.page()?,
                runs: DiffRuns::read(&mut r)?,
            },
            kind::DROP => Msg::Drop { page: r.page()? },
            kind::NOTICE => Msg::Notice {
                pages: PageList::read(&mut r)?,
            },
            kind::LOCK_ACQ => Msg::LockAcquire { lock: r.u32()? },
            kind::LOCK_REL => Msg::LockRelease { lock: r.u32()? },
            kind::BARRIER => Msg::Barrier {
                barrier: r.u32()?,
                epoch: r.u64()?,
            },
            kind::FLAG_SET => Msg::FlagSet { flag: r.u32()? },
            kind::FLAG_WAIT => Msg::FlagWait { flag: r.u32()? },
            _ => Msg::Shutdown,
        };
        r.finish()?;
        Ok(msg)
    }
}

impl<'a> Reply<'a> {
    /// The encoding of [`Reply::Ack`] (what `encode_head` appends for it), for a handler
    /// that grants without building a buffer.
    pub(crate) const ACK_BYTES: &'static [u8] = &[tag::ACK];

    /// The length of this reply's encoding: its head ([`Reply::encode_head`]) and its tail.
    pub(crate) fn encoded_len(&self) -> usize {
        match *self {
            Reply::Ack => 1,
            Reply::Home { .. } | Reply::Moved { .. } | Reply::Holder { .. } => 3,
            Reply::Page { data, .. } => PAGE_REPLY_HEADER_BYTES + data.len(),
            Reply::Refused { .. } | Reply::DiffAck { .. } => 1 + PIGGYBACK_BYTES,
            Reply::Granted { .. } => 1 + PIGGYBACK_BYTES + 8,
            Reply::Flushed { data } => 5 + data.len(),
        }
    }

    /// Appends the encoding of this reply, tag first, to `out`: its head, then its tail
    /// (the engine hands the two to the transport apart, `Net::reply_split`).
    ///
    /// # Panics
    ///
    /// If page data is longer than u32::MAX bytes.
    #[cfg(test)]
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.encode_head(out);
        out.extend_from_slice(self.tail());
    }

    /// The page data this reply's encoding ends with (empty for a reply without any).
    pub(crate) fn tail(&self) -> &'a [u8] {
        match *self {
            Reply::Page { data, .. } | Reply::Flushed { data } => data,
            _ => &[],
        }
    }

    /// Appends the encoding of this reply up to its [`Reply::tail`], which a transport
    /// writes after it without joining the two first.
    ///
    /// # Panics
    ///
    /// If page data is longer than u32::MAX bytes.
    pub(crate) fn encode_head(&self, out: &mut Vec<u8>) {
        match *self {
            Reply::Ack => out.push(tag::ACK),
            Reply::Home { home } => {
                out.push(tag::HOME);
                out.extend_from_slice(&home.0.to_le_bytes());
            }
            Reply::Page {
                data,
                meta,
                migrated,
                rehomed,
                exclusive,
                version,
            } => {
                out.push(tag::PAGE);
                put_piggyback(out, meta);
                out.push(u8::from(migrated));
                out.push(u8::from(rehomed));
                out.push(u8::from(exclusive));
                out.extend_from_slice(&version.to_le_bytes());
                put_u32(
                    out,
                    u32::try_from(data.len()).expect("page data exceeds u32"),
                );
            }
            Reply::Refused { meta } => {
                out.push(tag::REFUSED);
                put_piggyback(out, meta);
            }
            Reply::DiffAck { meta } => {
                out.push(tag::DIFF_ACK);
                put_piggyback(out, meta);
            }
            Reply::Granted { meta, version } => {
                out.push(tag::GRANTED);
                put_piggyback(out, meta);
                out.extend_from_slice(&version.to_le_bytes());
            }
            Reply::Moved { home } => {
                out.push(tag::MOVED);
                out.extend_from_slice(&home.0.to_le_bytes());
            }
            Reply::Holder { holder } => {
                out.push(tag::HOLDER);
                out.extend_from_slice(&holder.0.to_le_bytes());
            }
            Reply::Flushed { data } => {
                out.push(tag::FLUSHED);
                put_u32(
                    out,
                    u32::try_from(data.len()).expect("page data exceeds u32"),
                );
            }
        }
    }

    /// Decodes a reply and checks the nodes it names against `b` ([`Reply::check`]).
    pub(crate) fn decode_within(bytes: &'a [u8], b: Bounds) -> Result<Reply<'a>, DecodeError> {
        let reply = Reply::decode(bytes)?;
        reply.check(b)?;
        Ok(reply)
    }

    /// Checks the nodes this reply names (a home, a holder, a sharing set) against the
    /// receiver's cluster ([`Bounds`]).
    pub(crate) fn check(&self, b: Bounds) -> Result<(), DecodeError> {
        let record = "reply";
        match *self {
            Reply::Ack | Reply::Flushed { .. } => Ok(()),
            Reply::Home { home } | Reply::Moved { home } => b.node(record, home),
            Reply::Holder { holder } => b.node(record, holder),
            Reply::Page { meta, .. }
            | Reply::Refused { meta }
            | Reply::Granted { meta, .. }
            | Reply::DiffAck { meta } => b.set(record, meta.sharers),
        }
    }

    /// Decodes a reply. Zero-copy: page data borrows `bytes`.
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<Reply<'a>, DecodeError> {
        let mut r = Reader::new(bytes, "reply");
        let t = r.u8()?;
        r.record = match t {
            tag::ACK => "Ack reply",
            tag::HOME => "Home reply",
            tag::PAGE => "Page reply",
            tag::REFUSED => "Refused reply",
            tag::DIFF_ACK => "DiffAck reply",
            tag::MOVED => "Moved reply",
            tag::HOLDER => "Holder reply",
            tag::FLUSHED => "Flushed reply",
            tag::GRANTED => "Granted reply",
            _ => return Err(DecodeError::UnknownReplyTag(t)),
        };
        let reply = match t {
            tag::ACK => Reply::Ack,
            tag::HOME => Reply::Home { home: r.node()? },
            tag::PAGE => {
                let meta = r.piggyback()?;
                let migrated = r.flag("migrated")?;
                let rehomed = r.flag("rehomed")?;
                let exclusive = r.flag("exclusive")?;
                let version = r.u64()?;
                let len = r.u32()?;
                Reply::Page {
                    data: r.bytes(len as usize)?,
                    meta,
                    migrated,
                    rehomed,
                    exclusive,
                    version,
                }
            }
            tag::HOLDER => Reply::Holder { holder: r.node()? },
            tag::FLUSHED => {
                let len = r.u32()?;
                Reply::Flushed {
                    data: r.bytes(len as usize)?,
                }
            }
            tag::REFUSED => Reply::Refused {
                meta: r.piggyback()?,
            },
            tag::DIFF_ACK => Reply::DiffAck {
                meta: r.piggyback()?,
            },
            tag::GRANTED => Reply::Granted {
                meta: r.piggyback()?,
                version: r.u64()?,
            },
            _ => Reply::Moved { home: r.node()? },
        };
        r.finish()?;
        Ok(reply)
    }
}

/// Encodes one page's diff as a sequence of `Diff` payloads, each at most a byte budget
/// ([`MAX_MESSAGE_BYTES`] unless told otherwise), so a release can send a diff of any size
/// as explicit messages (sections 2.2 and 2.3.2). Runs are kept whole where they fit a
/// message of their own; a run longer than that is cut between words, which is safe
/// because each piece still changes only what the whole did (see [`crate::diff`]). Empty
/// runs carry nothing and are dropped.
pub(crate) struct DiffWriter<'r, I: Iterator<Item = diff::Run<'r>>> {
    page: PageId,
    runs: I,
    /// The run (or rest of a cut run) that goes into the next message.
    pending: Option<diff::Run<'r>>,
    budget_bytes: usize,
    wrote_one: bool,
}

impl<'r, I: Iterator<Item = diff::Run<'r>>> DiffWriter<'r, I> {
    /// A writer of messages that fit [`MAX_MESSAGE_BYTES`].
    #[cfg(test)]
    pub(crate) fn new(page: PageId, runs: I) -> Self {
        Self::with_budget(page, runs, MAX_MESSAGE_BYTES)
    }

    /// A writer of messages of at most `budget_bytes`.
    ///
    /// # Panics
    ///
    /// If the budget exceeds [`MAX_MESSAGE_BYTES`], or leaves no room for a masked word
    /// after the headers (then no diff could make progress).
    pub(crate) fn with_budget(page: PageId, runs: I, budget_bytes: usize) -> Self {
        let least = MIN_DIFF_BUDGET_BYTES;
        assert!(
            budget_bytes >= least && budget_bytes <= MAX_MESSAGE_BYTES,
            "diff budget of {budget_bytes} bytes outside {least}..={MAX_MESSAGE_BYTES}",
        );
        DiffWriter {
            page,
            runs,
            pending: None,
            budget_bytes,
            wrote_one: false,
        }
    }

    /// Writes the next `Diff` payload (kind [`kind::DIFF`]) into `out`, cleared first;
    /// returns false, writing nothing, once the diff is all written. The first call always
    /// writes a message, even for an empty diff, because the release needs the sharing set
    /// that the acknowledgement piggybacks (section 2.3.3).
    ///
    /// # Panics
    ///
    /// If an offset does not fit in 32 bits.
    pub(crate) fn next_message(&mut self, out: &mut Vec<u8>) -> bool {
        self.advance_if_idle();
        if self.pending.is_none() && self.wrote_one {
            return false;
        }
        self.wrote_one = true;
        out.clear();
        put_u32(out, self.page.0);
        put_u32(out, 0);
        let mut count = 0u32;
        while let Some(run) = self.pending {
            let room = self.budget_bytes - out.len();
            let fits_here = run.encoded_bytes() <= room;
            let fits_alone = run.encoded_bytes() <= self.budget_bytes - DIFF_HEADER_BYTES;
            // Keep a run whole if a fresh message can hold it; cut only runs that no
            // message can hold, and only when this one has room for a word of theirs.
            if !fits_here
                && ((fits_alone && count > 0) || room < RUN_HEADER_BYTES + run.bytes_per_word())
            {
                break;
            }
            let (head, rest) = run.split_at((room - RUN_HEADER_BYTES) / run.bytes_per_word());
            head.put(out);
            count += 1;
            self.pending = Some(rest);
            self.advance_if_idle();
        }
        out[4..8].copy_from_slice(&count.to_le_bytes());
        true
    }

    /// Moves to the next non-empty run if the pending one is used up.
    fn advance_if_idle(&mut self) {
        while self.pending.is_none_or(|run| run.data.is_empty()) {
            self.pending = self.runs.next();
            if self.pending.is_none() {
                return;
            }
        }
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}


fn put_piggyback(out: &mut Vec<u8>, meta: Piggyback) {
    out.extend_from_slice(&meta.sharers.bits().to_le_bytes());
    out.push(u8::from(meta.home_writing));
}

/// Reads a record front to back, turning every short read into [`DecodeError::Truncated`]
/// (with the bytes the record needs so far) instead of a panic.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    record: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], record: &'static str) -> Self {
        Reader { buf, at: 0, record }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.saturating_add(n);
        let Some(b) = self.buf.get(self.at..end) else {
            return Err(DecodeError::Truncated {
                record: self.record,
                needed: end,
                got: self.buf.len(),
            });
        };
        self.at = end;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn page(&mut self) -> Result<PageId, DecodeError> {
        self.u32().map(PageId)
    }

    fn node(&mut self) -> Result<NodeId, DecodeError> {
        let n = u16::from_le_bytes(self.array()?);
        NodeId::new(n as usize).ok_or(DecodeError::BadNode {
            record: self.record,
            node: n,
        })
    }

    fn flag(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::BadFlag {
                record: self.record,
                field,
                value,
            }),
        }
    }

    fn piggyback(&mut self) -> Result<Piggyback, DecodeError> {
        Ok(Piggyback {
            sharers: NodeSet::from_bits(self.u64()?),
            home_writing: self.flag("home_writing")?,
        })
    }

    /// The bytes read since position `start`.
    fn since(&self, start: usize) -> &'a [u8] {
        self.buf.get(start..self.at).unwrap_or_default()
    }

    fn finish(self) -> Result<(), DecodeError> {
        match self.buf.len() - self.at {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                record: self.record,
                extra,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rows of the module doc's table whose header starts with `header`, as cells; a
    /// row whose first cell is empty continues the row above, cell by cell.
    fn doc_table(header: &str) -> Vec<Vec<String>> {
        let doc: Vec<&str> = include_str!("wire.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").trim())
            .collect();
        let start = doc
            .iter()
            .position(|l| l.starts_with(header))
            .unwrap_or_else(|| panic!("no table `{header}` in the module doc"));
        let mut rows: Vec<Vec<String>> = Vec::new();
        for line in doc[start + 2..].iter().take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            match rows.last_mut() {
                Some(row) if cells[0].is_empty() => {
                    for (have, more) in row.iter_mut().zip(&cells).filter(|(_, m)| !m.is_empty()) {
                        have.push(' ');
                        have.push_str(more);
                    }
                }
                _ => rows.push(cells.iter().map(|c| c.to_string()).collect()),
            }
        }
        rows
    }

    /// The bytes of a documented payload's fields up to its first repeated part ("n bytes",
    /// "n × page u32", "n word runs"): the encoding of a record whose variable parts are
    /// empty.
    fn fixed_bytes(payload: &str) -> usize {
        if payload == "nothing" {
            return 0;
        }
        let mut total = 0;
        for field in payload.split(", ") {
            let words: Vec<&str> = field.split_whitespace().collect();
            if words[0] == "n" && words.get(1) != Some(&"u32") {
                break;
            }
            total += match words.get(1) {
                Some(&"u8") => 1,
                Some(&"u16") => 2,
                Some(&"u32") => 4,
                Some(&"u64") => 8,
                _ => panic!("cannot read the field `{field}` of `{payload}`"),
            };
        }
        total
    }

    /// A message of `kind` with empty variable parts.
    fn sample_message(k: u16) -> Msg<'static> {
        let page = PageId(1);
        match k {
            kind::HOME => Msg::HomeQuery { page },
            kind::FETCH => Msg::Fetch {
                page,
                migrate: true,
                exclusive: false,
                rehome: false,
                needs_page: true,
                version: 0,
                check: 0,
            },
            kind::DIFF => Msg::Diff {
                page,
                runs: DiffRuns {
                    count: 0,
                    bytes: &[0; 4],
                },
            },
            kind::DROP => Msg::Drop { page },
            kind::NOTICE => Msg::Notice {
                pages: PageList {
                    count: 0,
                    bytes: &[0; 4],
                },
            },
            kind::RECALL => Msg::Recall { page },
            kind::FLUSH => Msg::Flush {
                page,
                holder: NodeId::from_usize(2),
                fetch: true,
                data: &[],
            },
            kind::LOCK_ACQ => Msg::LockAcquire { lock: 3 },
            kind::LOCK_REL => Msg::LockRelease { lock: 3 },
            kind::BARRIER => Msg::Barrier {
                barrier: 4,
                epoch: 5,
            },
            kind::FLAG_SET => Msg::FlagSet { flag: 6 },
            kind::FLAG_WAIT => Msg::FlagWait { flag: 6 },
            kind::STOP => Msg::Shutdown,
            _ => panic!("message kind {k} has a name but no sample here: add one"),
        }
    }

    /// A reply with tag `t` and empty variable parts.
    fn sample_reply(t: u8) -> Reply<'static> {
        let meta = Piggyback {
            sharers: NodeSet::from_bits(0b101),
            home_writing: true,
        };
        let node = NodeId::from_usize(1);
        match t {
            tag::ACK => Reply::Ack,
            tag::HOME => Reply::Home { home: node },
            tag::PAGE => Reply::Page {
                data: &[],
                meta,
                migrated: false,
                rehomed: false,
                exclusive: true,
                version: 3,
            },
            tag::REFUSED => Reply::Refused { meta },
            tag::DIFF_ACK => Reply::DiffAck { meta },
            tag::MOVED => Reply::Moved { home: node },
            tag::HOLDER => Reply::Holder { holder: node },
            tag::FLUSHED => Reply::Flushed { data: &[] },
            tag::GRANTED => Reply::Granted { meta, version: 3 },
            _ => panic!("reply tag {t} decodes but has no sample here: add one"),
        }
    }

    /// The variant's name, from its `Debug` text.
    fn variant_name(debug: &str) -> String {
        debug
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect()
    }

    #[test]
    fn the_format_tables_match_the_encoders() {
        let tags: Vec<u8> = (0..=u8::MAX)
            .filter(|&t| !matches!(Reply::decode(&[t]), Err(DecodeError::UnknownReplyTag(_))))
            .collect();
        let replies = doc_table("| tag ");
        assert_eq!(replies.len(), tags.len(), "one row per reply tag: {replies:?}");
        let mut reply_names = Vec::new();
        for t in tags {
            let reply = sample_reply(t);
            let mut bytes = Vec::new();
            reply.encode(&mut bytes);
            assert_eq!(bytes[0], t);
            assert_eq!(Reply::decode(&bytes), Ok(reply));
            let name = format!("`{}`", variant_name(&format!("{reply:?}")));
            let row = replies
                .iter()
                .find(|r| r[0] == t.to_string())
                .unwrap_or_else(|| panic!("no row for reply tag {t} ({name})"));
            assert_eq!(row[1], name, "reply tag {t}");
            assert_eq!(1 + fixed_bytes(&row[2]), bytes.len(), "the body of {name}: `{}`", row[2]);
            reply_names.push(name);
        }

        let kinds: Vec<u16> = (0..=u16::MAX).filter(|&k| kind_name(k).is_some()).collect();
        let payloads = doc_table("| kind ");
        let sent = doc_table("| message ");
        assert_eq!(payloads.len(), kinds.len(), "one row per message kind: {payloads:?}");
        assert_eq!(sent.len(), kinds.len(), "one row per message: {sent:?}");
        for k in kinds {
            let msg = sample_message(k);
            assert_eq!(msg.kind(), k);
            let name = format!("`{}`", kind_name(k).expect("named"));
            assert_eq!(format!("`{}`", variant_name(&format!("{msg:?}"))), name);
            let mut payload = Vec::new();
            msg.encode(&mut payload);
            assert_eq!(Msg::decode(k, &payload), Ok(msg));
            let row = payloads
                .iter()
                .find(|r| r[0] == k.to_string())
                .unwrap_or_else(|| panic!("no row for message kind {k} ({name})"));
            assert_eq!(row[1], name, "message kind {k}");
            assert_eq!(fixed_bytes(&row[2]), payload.len(), "the payload of {name}: `{}`", row[2]);
            let how = sent
                .iter()
                .find(|r| r[0] == name)
                .unwrap_or_else(|| panic!("{name} has no row saying how it is sent"));
            for answer in how[2].split('`').skip(1).step_by(2) {
                assert!(
                    reply_names.contains(&format!("`{answer}`")),
                    "{name} is answered by `{answer}`, which is no reply"
                );
            }
        }
    }

    /// An owned diff run: offset, whole words, and a mask byte per word if masked.
    type OwnedRun = (u32, Vec<u8>, Option<Vec<u8>>);

    fn run_view(r: &OwnedRun) -> diff::Run<'_> {
        diff::Run {
            offset: r.0 as usize,
            data: &r.1,
            mask: r.2.as_deref(),
        }
    }

    fn owned_run(r: diff::Run<'_>) -> OwnedRun {
        (r.offset as u32, r.data.to_vec(), r.mask.map(<[u8]>::to_vec))
    }

    const ALL_KINDS: [u16; 13] = [
        kind::HOME,
        kind::FETCH,
        kind::DIFF,
        kind::DROP,
        kind::NOTICE,
        kind::RECALL,
        kind::FLUSH,
        kind::LOCK_ACQ,
        kind::LOCK_REL,
        kind::BARRIER,
        kind::FLAG_SET,
        kind::FLAG_WAIT,
        kind::STOP,
    ];

    /// An owned mirror of [`Msg`], so proptest can generate values whose borrowed parts
    /// need a buffer to live in.
    #[derive(Clone, Debug)]
    enum OwnedMsg {
        HomeQuery(u32),
        Fetch(u32, [bool; 4], u64, u64),
        Diff(u32, Vec<OwnedRun>),
        Recall(u32),
        Flush(u32, u16, bool, Vec<u8>),
        Drop(u32),
        Notice(Vec<u32>),
        LockAcquire(u32),
        LockRelease(u32),
        Barrier(u32, u64),
        FlagSet(u32),
        FlagWait(u32),
        Shutdown,
    }

    impl OwnedMsg {
        /// The borrowed message, its views encoded into `buf`.
        fn view<'a>(&'a self, buf: &'a mut Vec<u8>) -> Msg<'a> {
            match self {
                OwnedMsg::HomeQuery(p) => Msg::HomeQuery { page: PageId(*p) },
                OwnedMsg::Fetch(p, [migrate, exclusive, rehome, needs_page], version, check) => {
                    Msg::Fetch {
                        page: PageId(*p),
                        migrate: *migrate,
                        exclusive: *exclusive,
                        rehome: *rehome,
                        needs_page: *needs_page,
                        version: *version,
                        check: *check,
                    }
                }
                OwnedMsg::Recall(p) => Msg::Recall { page: PageId(*p) },
                OwnedMsg::Flush(p, holder, fetch, data) => Msg::Flush {
                    page: PageId(*p),
                    holder: NodeId(*holder),
                    fetch: *fetch,
                    data,
                },
                OwnedMsg::Diff(p, runs) => Msg::Diff {
                    page: PageId(*p),
                    runs: DiffRuns::encode_from(runs.iter().map(run_view), buf),
                },
                OwnedMsg::Drop(p) => Msg::Drop { page: PageId(*p) },
                OwnedMsg::Notice(pages) => Msg::Notice {
                    pages: PageList::encode_from(pages.iter().map(|&p| PageId(p)), buf),
                },
                OwnedMsg::LockAcquire(l) => Msg::LockAcquire { lock: *l },
                OwnedMsg::LockRelease(l) => Msg::LockRelease { lock: *l },
                OwnedMsg::Barrier(b, e) => Msg::Barrier {
                    barrier: *b,
                    epoch: *e,
                },
                OwnedMsg::FlagSet(f) => Msg::FlagSet { flag: *f },
                OwnedMsg::FlagWait(f) => Msg::FlagWait { flag: *f },
                OwnedMsg::Shutdown => Msg::Shutdown,
            }
        }
    }

    fn owned_msg() -> impl Strategy<Value = OwnedMsg> {
        let runs = prop::collection::vec(
            (
                any::<u32>(),
                prop::collection::vec(any::<u64>(), 0..5),
                any::<bool>(),
                any::<u8>(),
            )
                .prop_map(|(offset, words, masked, seed)| {
                    let data = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    let mask = masked
                        .then(|| (0..words.len()).map(|i| seed.wrapping_add(i as u8)).collect());
                    (offset, data, mask)
                }),
            0..8,
        );
        prop_oneof![
            any::<u32>().prop_map(OwnedMsg::HomeQuery),
            (any::<u32>(), any::<[bool; 4]>(), any::<u64>(), any::<u64>())
                .prop_map(|(p, f, v, c)| OwnedMsg::Fetch(p, f, v, c)),
            any::<u32>().prop_map(OwnedMsg::Recall),
            (
                any::<u32>(),
                0..MAX_NODES as u16,
                any::<bool>(),
                prop::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(p, h, f, d)| OwnedMsg::Flush(p, h, f, d)),
            (any::<u32>(), runs).prop_map(|(p, r)| OwnedMsg::Diff(p, r)),
            any::<u32>().prop_map(OwnedMsg::Drop),
            prop::collection::vec(any::<u32>(), 0..20).prop_map(OwnedMsg::Notice),
            any::<u32>().prop_map(OwnedMsg::LockAcquire),
            any::<u32>().prop_map(OwnedMsg::LockRelease),
            (any::<u32>(), any::<u64>()).prop_map(|(b, e)| OwnedMsg::Barrier(b, e)),
            any::<u32>().prop_map(OwnedMsg::FlagSet),
            any::<u32>().prop_map(OwnedMsg::FlagWait),
            Just(OwnedMsg::Shutdown),
        ]
    }

    /// An owned mirror of [`Reply`].
    #[derive(Clone, Debug)]
    enum OwnedReply {
        Ack,
        Home(u16),
        Page(Vec<u8>, Piggyback, [bool; 3], u64),
        Holder(u16),
        Flushed(Vec<u8>),
        Refused(Piggyback),
        DiffAck(Piggyback),
        Granted(Piggyback, u64),
        Moved(u16),
    }

    impl OwnedReply {
        fn view(&self) -> Reply<'_> {
            match self {
                OwnedReply::Ack => Reply::Ack,
                OwnedReply::Home(n) => Reply::Home { home: NodeId(*n) },
                OwnedReply::Page(data, meta, [migrated, rehomed, exclusive], version) => {
                    Reply::Page {
                        data,
                        meta: *meta,
                        migrated: *migrated,
                        rehomed: *rehomed,
                        exclusive: *exclusive,
                        version: *version,
                    }
                }
                OwnedReply::Holder(n) => Reply::Holder { holder: NodeId(*n) },
                OwnedReply::Flushed(data) => Reply::Flushed { data },
                OwnedReply::Refused(meta) => Reply::Refused { meta: *meta },
                OwnedReply::DiffAck(meta) => Reply::DiffAck { meta: *meta },
                OwnedReply::Granted(meta, version) => Reply::Granted {
                    meta: *meta,
                    version: *version,
                },
                OwnedReply::Moved(n) => Reply::Moved { home: NodeId(*n) },
            }
        }
    }

    fn owned_reply() -> impl Strategy<Value = OwnedReply> {
        let meta = (any::<u64>(), any::<bool>()).prop_map(|(sharers, home_writing)| Piggyback {
            sharers: NodeSet::from_bits(sharers),
            home_writing,
        });
        let node = 0..MAX_NODES as u16;
        prop_oneof![
            Just(OwnedReply::Ack),
            node.clone().prop_map(OwnedReply::Home),
            (
                prop::collection::vec(any::<u8>(), 0..300),
                meta.clone(),
                any::<[bool; 3]>(),
                any::<u64>()
            )
                .prop_map(|(d, m, f, v)| OwnedReply::Page(d, m, f, v)),
            (0..MAX_NODES as u16).prop_map(OwnedReply::Holder),
            prop::collection::vec(any::<u8>(), 0..300).prop_map(OwnedReply::Flushed),
            meta.clone().prop_map(OwnedReply::Refused),
            meta.clone().prop_map(OwnedReply::DiffAck),
            (meta, any::<u64>()).prop_map(|(m, v)| OwnedReply::Granted(m, v)),
            node.prop_map(OwnedReply::Moved),
        ]
    }

    fn encode_msg(m: &Msg<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        m.encode(&mut out);
        out
    }

    fn encode_reply(r: &Reply<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        r.encode(&mut out);
        out
    }

    /// Runs laid out left to right from `(gap, words, masked)` triples (in words), with
    /// data and masks that differ between runs, so a run moved or merged by mistake shows.
    fn lay_out(shape: &[(usize, usize, bool)]) -> Vec<OwnedRun> {
        let mut at = 0;
        shape
            .iter()
            .map(|&(gap, words, masked)| {
                let offset = (at + gap) * diff::WORD;
                at += gap + words;
                let data = (0..words * diff::WORD).map(|i| (offset + i * 7) as u8).collect();
                let mask =
                    masked.then(|| (0..words).map(|i| (offset / 8 + i) as u8 | 1).collect());
                (offset as u32, data, mask)
            })
            .collect()
    }

    /// Every byte a list of runs writes, as (page offset, value), in order.
    fn bytes_written(runs: &[OwnedRun]) -> Vec<(usize, u8)> {
        runs.iter()
            .flat_map(|r| run_view(r).ranges().collect::<Vec<_>>())
            .flat_map(|(o, d)| d.iter().enumerate().map(move |(i, &b)| (o + i, b)))
            .collect()
    }

    /// Splits `runs` with the budget; checks that each message fits and decodes as a diff of
    /// `page`, and returns the decoded runs of all messages in order.
    fn split(page: PageId, runs: &[OwnedRun], budget: usize) -> Vec<OwnedRun> {
        let mut w = DiffWriter::with_budget(page, runs.iter().map(run_view), budget);
        let mut out = Vec::new();
        let mut decoded = Vec::new();
        let mut messages = 0;
        while w.next_message(&mut out) {
            messages += 1;
            assert!(
                out.len() <= budget,
                "{} bytes over a budget of {budget}",
                out.len()
            );
            let Ok(Msg::Diff { page: p, runs }) = Msg::decode(kind::DIFF, &out) else {
                panic!("the writer's message does not decode as a diff");
            };
            assert_eq!(p, page);
            assert!(
                messages == 1 || !runs.is_empty(),
                "an empty message after the first"
            );
            decoded.extend(runs.iter().map(owned_run));
        }
        assert!(messages >= 1, "even an empty diff is one message");
        decoded
    }

    #[test]
    fn messages_have_these_bytes() {
        let mut runs_buf = Vec::new();
        let mut pages_buf = Vec::new();
        let cases: [(Msg<'_>, u16, &[u8]); 7] = [
            (
                Msg::Fetch {
                    page: PageId(0x0102_0304),
                    migrate: true,
                    exclusive: false,
                    rehome: true,
                    needs_page: false,
                    version: 0x0a0b_0c0d,
                    check: 0x0102_0304_0506_0708,
                },
                11,
                &[
                    4, 3, 2, 1, 1, 0, 1, 0, 0xd, 0xc, 0xb, 0xa, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3,
                    2, 1,
                ],
            ),
            (Msg::Recall { page: PageId(7) }, 15, &[7, 0, 0, 0]),
            (
                Msg::Flush {
                    page: PageId(2),
                    holder: NodeId(3),
                    fetch: true,
                    data: &[9, 8],
                },
                16,
                &[2, 0, 0, 0, 3, 0, 1, 2, 0, 0, 0, 9, 8],
            ),
            (
                Msg::Barrier {
                    barrier: 5,
                    epoch: 0x0807_0605_0403_0201,
                },
                22,
                &[5, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            ),
            (
                Msg::Diff {
                    page: PageId(2),
                    runs: DiffRuns::encode_from(
                        [
                            diff::Run {
                                offset: 8,
                                data: &[1, 2, 3, 4, 5, 6, 7, 8],
                                mask: None,
                            },
                            diff::Run {
                                offset: 24,
                                data: &[9, 9, 0, 0, 0, 0, 0, 0],
                                mask: Some(&[0b11]),
                            },
                        ],
                        &mut runs_buf,
                    ),
                },
                12,
                &[
                    2, 0, 0, 0, // page
                    2, 0, 0, 0, // runs
                    8, 0, 0, 0, 1, 0, 0, 0, // offset 8, 1 word
                    1, 2, 3, 4, 5, 6, 7, 8, // the word
                    24, 0, 0, 0, 1, 0, 0, 0x80, // offset 24, 1 word, masked
                    0b11, // its mask: bytes 0 and 1
                    9, 9, 0, 0, 0, 0, 0, 0, // the word
                ],
            ),
            (
                Msg::Notice {
                    pages: PageList::encode_from([PageId(1), PageId(258)], &mut pages_buf),
                },
                14,
                &[2, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0],
            ),
            (Msg::Shutdown, 30, &[]),
        ];
        for (msg, kind, bytes) in cases {
            assert_eq!(msg.kind(), kind, "{msg:?}");
            assert_eq!(encode_msg(&msg), bytes, "{msg:?}");
            assert_eq!(Msg::decode(kind, bytes), Ok(msg));
        }
    }

    #[test]
    fn ids_beyond_the_heap_or_the_cluster_are_refused_with_the_record() {
        let b = Bounds { pages: 4, nodes: 3 };
        let mut buf = Vec::new();
        // Inside: the last page, the last node, a set of every node.
        assert_eq!(Msg::Drop { page: PageId(3) }.check(b), Ok(()));
        let flush = |page, holder| Msg::Flush {
            page: PageId(page),
            holder: NodeId(holder),
            fetch: false,
            data: &[],
        };
        assert_eq!(flush(3, 2).check(b), Ok(()));
        let meta = |bits| Piggyback {
            sharers: NodeSet::from_bits(bits),
            home_writing: false,
        };
        assert_eq!(Reply::DiffAck { meta: meta(0b111) }.check(b), Ok(()));
        // One beyond, in each place an id travels.
        let page4 = Err(DecodeError::PageOutOfRange {
            record: "Fetch",
            page: 4,
            pages: 4,
        });
        let fetch = Msg::Fetch {
            page: PageId(4),
            migrate: false,
            exclusive: false,
            rehome: false,
            needs_page: false,
            version: 0,
            check: 0,
        };
        assert_eq!(fetch.check(b), page4);
        assert_eq!(
            flush(0, 3).check(b),
            Err(DecodeError::NodeOutOfRange {
                record: "Flush",
                node: 3,
                nodes: 3
            })
        );
        let notice = Msg::Notice {
            pages: PageList::encode_from([PageId(0), PageId(9)], &mut buf),
        };
        assert_eq!(
            notice.check(b),
            Err(DecodeError::PageOutOfRange {
                record: "Notice",
                page: 9,
                pages: 4
            })
        );
        assert_eq!(
            Reply::Moved { home: NodeId(5) }.check(b),
            Err(DecodeError::NodeOutOfRange {
                record: "reply",
                node: 5,
                nodes: 3
            })
        );
        let err = Reply::DiffAck { meta: meta(0b1011) }.check(b).unwrap_err();
        assert_eq!(
            err.to_string(),
            "reply record's sharing set 0xb names nodes beyond the cluster's 3"
        );
    }

    #[test]
    fn the_ack_constant_is_the_encoding_of_an_ack() {
        let mut out = Vec::new();
        Reply::Ack.encode(&mut out);
        assert_eq!(out, Reply::ACK_BYTES);
        assert!(matches!(Reply::decode(Reply::ACK_BYTES), Ok(Reply::Ack)));
    }

    #[test]
    fn replies_have_these_bytes() {
        let meta = Piggyback {
            sharers: NodeSet::from_bits(0b101),
            home_writing: true,
        };
        let version = 0x0102_0304_0506_0708;
        let cases: [(Reply<'_>, &[u8]); 7] = [
            (Reply::Ack, &[0]),
            (Reply::Home { home: NodeId(3) }, &[1, 3, 0]),
            (
                Reply::Page {
                    data: &[9, 9],
                    meta,
                    migrated: true,
                    rehomed: true,
                    exclusive: false,
                    version,
                },
                &[
                    2, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 8, 7, 6, 5, 4, 3, 2, 1, 2, 0, 0,
                    0, 9, 9,
                ],
            ),
            (Reply::Holder { holder: NodeId(4) }, &[6, 4, 0]),
            (Reply::Flushed { data: &[1] }, &[7, 1, 0, 0, 0, 1]),
            (Reply::DiffAck { meta }, &[4, 5, 0, 0, 0, 0, 0, 0, 0, 1]),
            (
                Reply::Granted { meta, version },
                &[8, 5, 0, 0, 0, 0, 0, 0, 0, 1, 8, 7, 6, 5, 4, 3, 2, 1],
            ),
        ];
        for (reply, bytes) in cases {
            assert_eq!(encode_reply(&reply), bytes, "{reply:?}");
            assert_eq!(Reply::decode(bytes), Ok(reply));
        }
    }

    #[test]
    fn bad_messages_say_what_is_wrong() {
        use DecodeError::*;
        let cases: [(u16, &[u8], DecodeError); 7] = [
            (99, &[], UnknownKind(99)),
            (
                kind::FETCH,
                &[1, 0, 0, 0],
                Truncated {
                    record: "Fetch",
                    needed: 5,
                    got: 4,
                },
            ),
            (
                kind::FETCH,
                &[1, 0, 0, 0, 2],
                BadFlag {
                    record: "Fetch",
                    field: "migrate",
                    value: 2,
                },
            ),
            (
                kind::DROP,
                &[1, 0, 0, 0, 0],
                TrailingBytes {
                    record: "Drop",
                    extra: 1,
                },
            ),
            (
                kind::STOP,
                &[0],
                TrailingBytes {
                    record: "Shutdown",
                    extra: 1,
                },
            ),
            (
                kind::NOTICE,
                &[2, 0, 0, 0, 1, 0, 0, 0],
                Truncated {
                    record: "Notice",
                    needed: 12,
                    got: 8,
                },
            ),
            // One run that claims a word and has 1 byte of it.
            (
                kind::DIFF,
                &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1],
                Truncated {
                    record: "Diff",
                    needed: 24,
                    got: 17,
                },
            ),
        ];
        for (kind, bytes, err) in cases {
            assert_eq!(Msg::decode(kind, bytes), Err(err), "kind {kind}, {bytes:?}");
        }
        assert_eq!(
            Msg::decode(kind::FETCH, &[1, 0, 0, 0])
                .unwrap_err()
                .to_string(),
            "truncated Fetch record: it needs 5 bytes, the payload has 4"
        );
    }

    #[test]
    fn bad_replies_say_what_is_wrong() {
        use DecodeError::*;
        let cases: [(&[u8], DecodeError); 5] = [
            (
                &[],
                Truncated {
                    record: "reply",
                    needed: 1,
                    got: 0,
                },
            ),
            (&[9], UnknownReplyTag(9)),
            (
                &[5, 32, 0],
                BadNode {
                    record: "Moved reply",
                    node: 32,
                },
            ),
            (
                &[0, 0],
                TrailingBytes {
                    record: "Ack reply",
                    extra: 1,
                },
            ),
            (
                &[3, 0, 0, 0, 0, 0, 0, 0, 0, 7],
                BadFlag {
                    record: "Refused reply",
                    field: "home_writing",
                    value: 7,
                },
            ),
        ];
        for (bytes, err) in cases {
            assert_eq!(Reply::decode(bytes), Err(err), "{bytes:?}");
        }
    }

    #[test]
    fn check_rejects_runs_outside_the_page_or_off_a_word() {
        let run = |offset: usize, data: &'static [u8]| diff::Run {
            offset,
            data,
            mask: None,
        };
        let mut buf = Vec::new();
        let edge = DiffRuns::encode_from([run(4088, &[1u8; 8])], &mut buf);
        assert_eq!(edge.check(4096), Ok(()));
        let over = DiffRuns::encode_from([run(0, &[]), run(4088, &[1u8; 16])], &mut buf);
        assert_eq!(
            over.check(4096),
            Err(DecodeError::RunOutsidePage {
                offset: 4088,
                len: 16,
                page_bytes: 4096
            })
        );
        let unaligned = DiffRuns::encode_from([run(4, &[1u8; 8])], &mut buf);
        assert_eq!(
            unaligned.check(4096),
            Err(DecodeError::UnalignedRun { offset: 4 })
        );
        // An offset near u32::MAX must not wrap around to a small end.
        let far = DiffRuns::encode_from([run(u32::MAX as usize - 7, &[1u8; 8])], &mut buf);
        assert!(far.check(1 << 16).is_err());
    }

    #[test]
    fn a_whole_64k_page_diff_fits_the_messages() {
        let runs: Vec<OwnedRun> = vec![(0, vec![0x5a; 1 << 16], None)];
        let decoded = split(PageId(1), &runs, MAX_MESSAGE_BYTES);
        // The run is longer than a message can hold, so it is cut into the fewest pieces.
        let words_per_message = MAX_DIFF_DATA_BYTES / diff::WORD;
        assert_eq!(
            decoded.len(),
            ((1usize << 16) / diff::WORD).div_ceil(words_per_message)
        );
        assert_eq!(bytes_written(&decoded), bytes_written(&runs));
    }

    #[test]
    fn an_empty_diff_is_one_empty_message() {
        let mut w = DiffWriter::new(PageId(7), std::iter::empty());
        let mut out = Vec::new();
        assert!(w.next_message(&mut out));
        assert_eq!(out, [7, 0, 0, 0, 0, 0, 0, 0]);
        assert!(!w.next_message(&mut out));
    }

    proptest! {
        #[test]
        fn messages_round_trip(owned in owned_msg()) {
            let mut buf = Vec::new();
            let msg = owned.view(&mut buf);
            let bytes = encode_msg(&msg);
            let back = Msg::decode(msg.kind(), &bytes);
            prop_assert_eq!(&back, &Ok(msg));
            // The views iterate back to the owned values.
            match (&owned, back) {
                (OwnedMsg::Diff(_, runs), Ok(Msg::Diff { runs: view, .. })) => {
                    let got: Vec<_> = view.iter().map(owned_run).collect();
                    prop_assert_eq!(&got, runs);
                    prop_assert_eq!(view.len(), runs.len());
                }
                (OwnedMsg::Notice(pages), Ok(Msg::Notice { pages: view })) => {
                    let got: Vec<u32> = view.iter().map(|p| p.0).collect();
                    prop_assert_eq!(&got, pages);
                    prop_assert_eq!(view.len(), pages.len());
                }
                _ => {}
            }
        }

        #[test]
        fn replies_round_trip(owned in owned_reply()) {
            let reply = owned.view();
            let bytes = encode_reply(&reply);
            prop_assert_eq!(Reply::decode(&bytes), Ok(reply));
        }

        #[test]
        fn a_replys_encoded_len_is_the_length_of_its_encoding(owned in owned_reply()) {
            let reply = owned.view();
            prop_assert_eq!(reply.encoded_len(), encode_reply(&reply).len());
        }

        #[test]
        fn every_strict_prefix_of_a_message_is_truncated(owned in owned_msg()) {
            let mut buf = Vec::new();
            let msg = owned.view(&mut buf);
            let bytes = encode_msg(&msg);
            for cut in 0..bytes.len() {
                let got = Msg::decode(msg.kind(), &bytes[..cut]);
                prop_assert!(
                    matches!(got, Err(DecodeError::Truncated { .. })),
                    "{:?} cut at {}: {:?}", msg, cut, got
                );
            }
        }

        #[test]
        fn every_strict_prefix_of_a_reply_is_truncated(owned in owned_reply()) {
            let reply = owned.view();
            let bytes = encode_reply(&reply);
            for cut in 0..bytes.len() {
                let got = Reply::decode(&bytes[..cut]);
                prop_assert!(
                    matches!(got, Err(DecodeError::Truncated { .. })),
                    "{:?} cut at {}: {:?}", reply, cut, got
                );
            }
        }

        #[test]
        fn garbage_messages_never_panic(
            kind in prop_oneof![any::<u16>(), prop::sample::select(&ALL_KINDS[..])],
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            if let Ok(msg) = Msg::decode(kind, &bytes) {
                // What decodes is canonical, and its views are safe to walk.
                prop_assert_eq!(msg.kind(), kind);
                prop_assert_eq!(&encode_msg(&msg), &bytes);
                match msg {
                    Msg::Diff { runs, .. } => {
                        prop_assert_eq!(runs.iter().count(), runs.len());
                        let _ = runs.check(4096);
                    }
                    Msg::Notice { pages } => prop_assert_eq!(pages.iter().count(), pages.len()),
                    _ => {}
                }
            }
        }

        #[test]
        fn corrupted_messages_never_panic(
            owned in owned_msg(),
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            // Random bytes rarely get past a count field; a valid record with one byte
            // changed reaches the deeper paths of the decoder.
            let mut buf = Vec::new();
            let msg = owned.view(&mut buf);
            let mut bytes = encode_msg(&msg);
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            if let Ok(Msg::Diff { runs, .. }) = Msg::decode(msg.kind(), &bytes) {
                prop_assert_eq!(runs.iter().count(), runs.len());
                let _ = runs.check(1 << 16);
            }
        }

        #[test]
        fn garbage_replies_never_panic(
            tag in prop_oneof![any::<u8>(), 0u8..6],
            rest in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes = vec![tag];
            bytes.extend(rest);
            if let Ok(reply) = Reply::decode(&bytes) {
                prop_assert_eq!(&encode_reply(&reply), &bytes);
            }
        }

        #[test]
        fn a_split_diff_round_trips_and_fits(
            shape in prop::collection::vec((0usize..400, 1usize..4000, any::<bool>()), 0..6),
            budget in prop_oneof![25usize..300, Just(MAX_MESSAGE_BYTES)],
        ) {
            let runs = lay_out(&shape);
            let decoded = split(PageId(3), &runs, budget);
            prop_assert_eq!(bytes_written(&decoded), bytes_written(&runs));
            // Runs that a message can hold whole arrive whole.
            let room = budget - DIFF_HEADER_BYTES;
            if runs.iter().all(|r| run_view(r).encoded_bytes() <= room) {
                prop_assert_eq!(decoded, runs);
            }
        }
    }
}
