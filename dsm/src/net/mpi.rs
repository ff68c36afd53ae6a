//! The MPI transport: one MPI rank per node, explicit messages as MPI two-sided messages
//! (the `mpi` crate, rsmpi, initialized with `MPI_THREAD_MULTIPLE`), behind the same
//! [`Transport`] seam as the simulated fabric.
//!
//! # What it offers
//!
//! Messages, requests and replies, acknowledgements: every operation of the "Messages"
//! part of `transport.rs`. It has no remote write, broadcast, total order or loopback
//! ([`Transport::features`]), so only the protocol variants built on messages alone
//! (CSM-None, CSM-None-Mg) run on it; the others are refused before the engine is built
//! (`Config::validate` for `ExecMode::Mpi`, and `run_node` against this feature set).
//!
//! # One run, two communicators
//!
//! MPI is initialized once per process ([`world`]); every cluster run duplicates
//! `MPI_COMM_WORLD` twice ([`MpiLink::start`], collective), so that nothing of one run is
//! ever taken for a message of another, and keeps both to the end of the process (freeing
//! one let a late message of one run into the next: `Comm`). The *data* communicator
//! carries the protocol's messages, replies and acknowledgements, the *control*
//! communicator the launcher's traffic (heartbeats, start-up, failures, results, the
//! verdict): a result may be megabytes, far more than the receive posted for the protocol
//! holds ("Receiving"), and none of it is urgent. A rank's node still has a local
//! [`Fabric`] of its own: it holds the node's heap (the memfd its application view and
//! its runtime alias map) and the cluster's control block as this rank sees it (abort
//! flag, first failure, doorbells, heartbeat). No other rank maps it.
//!
//! # The progress thread
//!
//! A message from another rank cannot ring a futex of this process, so each rank runs a
//! progress thread that takes arrivals off both communicators ("Receiving") and turns
//! each into what the fabric's writes would have left: a message joins the node's inbox
//! and rings the node's doorbell unless a thread of the node polls (`crate::wait`,
//! "Pollers"); a reply or an acknowledgement fills the mailbox it names and rings the
//! doorbell if its waiter is parked. So every thread of the node waits as on the fabric,
//! through its [`Seam`]. The progress thread polls with the idle policy of
//! [`crate::wait::Poller`], and it does not spin between looks while the rank's running
//! threads use the rank's share of the cores (`Control::cores_taken`: it took 15% of a
//! core from each of 2 ranks of SOR); a thread that waits for a reply or an
//! acknowledgement takes an arrival off MPI itself at every check of its wait, and the
//! idle service thread one at every 8th (`MpiPort::has_messages`; the next check looks
//! again after an arrival), so a reply or a request does not wait for the progress
//! thread's next look. A computing processor takes arrivals off MPI at its poll points,
//! in the work it counts (`crate::wait`, "Polling while computing"), and handles them
//! there. While other threads of the rank look (a poll point within the last 100 us, or a
//! waiter spinning as its node's poller on a host that is not crowded:
//! `MpiLink::spinners_look`) and the rank's threads use its cores, the progress thread
//! sleeps `POLL_SLEEP_BEHIND_POLLERS` (500 us) between looks instead of at most 50 us:
//! each of its wake-ups takes a core from a thread that needs it. (Waking every 50 us
//! beside a waiter that looked at every check, the two progress threads of a 2-rank run
//! switched in 11,000 times in 0.4 s of 64-page releases.) One thread at a time
//! receives. (A send does not wake the progress thread: its sender looks for the reply
//! itself, and a second thread of the rank spinning on MPI took the cores the processors
//! needed: SOR 2048 x 2048 x 50 on 2 ranks ran 3-10 times slower, and a barrier took
//! 70-100 us instead of 6.)
//!
//! # Receiving
//!
//! The data communicator has one receive at a time (`Posted`: `MPI_Irecv` on any source
//! and tag, into a buffer that holds the largest frame). The thread that holds the link's
//! `receiver` lock tests it (`MPI_Test`) and takes the arrival; the next receive is posted
//! at the next look, so that the arrival is handled first. A posted receive is the cheap
//! way to look: a test of a pending receive took 32 ns here where an `MPI_Improbe` that
//! finds nothing took 76, and a two-rank round trip 0.36 us against 0.62 with
//! `MPI_Improbe` and `MPI_Mrecv` (2 ranks, `MPI_THREAD_MULTIPLE`, one thread each; 0.19
//! against 0.59-0.64 at another moment of this host). A thread waiting for a reply or an
//! acknowledgement takes at most one arrival per check of its wait: a message it files
//! for its node is served at its next check (`crate::wait::filed_here`) while it spins
//! and serves, before it takes anything else off MPI. In `bench proto` (CSM-None, 2
//! ranks, 3 interleaved runs against the probing receive) the 2-node barrier went from
//! 1.58 to 1.01 us, the remote lock from 1.50 to 0.88, the page fetch from 10.1 to 9.2.
//! The control communicator is probed (`MPI_Improbe`, `MPI_Mrecv`, any size) by the
//! progress thread alone.
//!
//! # Ordering
//!
//! One receive is posted at a time, on any source and tag, so the messages, replies and
//! acknowledgements one rank sends to another are taken in the order it sent them (MPI's
//! non-overtaking rule) and handled in that order: the per-pair order that `transport.rs`
//! promises. A message to this node itself never goes through MPI. The launcher's traffic
//! is not ordered with the protocol's (it has a communicator of its own), and needs no
//! order with it: a peer sends protocol messages only after this rank's `Ready`, a
//! failure aborts whatever arrives after it, and a rank sends its result only after its
//! node function returned, when its node serves nothing more.
//!
//! # Failures and stalls
//!
//! Besides the protocol's traffic the progress thread carries the launcher's:
//! - heartbeats: every `beat_interval` it sends one to every peer while its node's
//!   heartbeat moves (the service's polls bump it, as on the fabric) or the node is
//!   outside the engine (setting up, or done); a peer silent for the stall limit is
//!   recorded as `stopped responding`, the first failure as this rank sees it;
//! - failures: when this rank's control block records a first failure of its own (a node
//!   function's error or panic, or a stall it found), it sends it to every peer, whose
//!   progress threads record it in turn (a compare-exchange keeps whichever came first)
//!   and abort their node, so every wait of every rank gives up;
//! - the start-up barrier (`Ready`), each rank's result (to rank 0) and rank 0's verdict
//!   (`Done`); see `crate::launch`, "MPI ranks".

use super::msg::{Inbound, MsgError, MAX_MESSAGE_BYTES};
use super::transport::Transport;
use super::{Fabric, NetCounters, NetError, NodeId, NodeSet, Region};
use crate::control::{AbortOrigin, Control};
use crate::profile::Features;
use crate::wait::{self, Poller, Seam, WaitFor};
use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Message tags of a run's communicator.
mod tag {
    /// A protocol message: `[kind u16 | slot u16 | token u32 | payload]`.
    pub const MESSAGE: i32 = 1;
    /// A reply: `[slot u16 | 0 u16 | token u32 | payload]`.
    pub const REPLY: i32 = 2;
    /// An acknowledgement without payload: `[slot u16 | 0 u16 | token u32]`.
    pub const ACK: i32 = 3;
    /// A heartbeat (empty).
    pub const BEAT: i32 = 4;
    /// The sender passed its setup and waits in the start-up barrier (empty).
    pub const READY: i32 = 5;
    /// A first failure: `[node u32 | cause, UTF-8]`.
    pub const FAIL: i32 = 6;
    /// A rank's result, to rank 0: `[1 | result bytes]` or `[0 | cause, UTF-8]`.
    pub const RESULT: i32 = 7;
    /// Rank 0's verdict on the run: `[1]` every node succeeded, `[0]` it failed.
    pub const DONE: i32 = 8;

    /// Whether `tag` is the protocol's (sent on a run's data communicator) or the
    /// launcher's (its control communicator).
    pub fn is_data(tag: i32) -> bool {
        matches!(tag, MESSAGE | REPLY | ACK)
    }
}

const HEADER: usize = 8;

/// How often [`MpiPort::has_messages`] looks at MPI itself (once every this many calls).
const HAS_MESSAGES_PUMP: u32 = 8;
/// A processor that looked at a poll point this recently still looks: the progress thread
/// leaves arrivals to it (`wait::pollers_look`). A computing processor looks every few
/// microseconds of its work, or at every count where one count covers more.
const POLLERS_LOOK_NS: u64 = 100_000;

/// This process's MPI rank and the number of ranks, once MPI is initialized.
static WORLD: OnceLock<Result<(usize, usize), String>> = OnceLock::new();
/// The MPI environment, kept for the life of the process (dropping it would finalize
/// MPI, which a process may initialize only once); finalized at exit ([`at_exit`]).
static UNIVERSE: OnceLock<mpi::environment::Universe> = OnceLock::new();
/// How many ranks of the job share this process's host (`MPI_Comm_split_type` with
/// `MPI_COMM_TYPE_SHARED`), once MPI is initialized: the wait policy's share of the cores.
static RANKS_HERE: AtomicUsize = AtomicUsize::new(0);
/// Set once a run failed: the process then ends with `MPI_Abort`, which stops every rank,
/// instead of `MPI_Finalize`, which would wait for ranks that may be stopped.
static ABORT_AT_EXIT: AtomicBool = AtomicBool::new(false);

/// Initializes MPI with `MPI_THREAD_MULTIPLE` (once per process) and returns this rank
/// and the number of ranks.
pub fn world() -> Result<(usize, usize), NetError> {
    WORLD
        .get_or_init(|| {
            eager_pages();
            let (universe, threading) =
                mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or_else(|| {
                    "MPI was initialized by someone else in this process".to_string()
                })?;
            if threading != mpi::Threading::Multiple {
                return Err(format!(
                    "the MPI library offers {threading:?} threading; the DSM's processors and \
                     service threads call MPI concurrently and need MPI_THREAD_MULTIPLE (Debian's \
                     OpenMPI has it: apt-get install openmpi-bin libopenmpi-dev)"
                ));
            }
            let w = universe.world();
            let rank = w.rank() as usize;
            let size = w.size() as usize;
            RANKS_HERE.store(w.split_shared(0).size() as usize, Ordering::Relaxed);
            let _ = UNIVERSE.set(universe);
            crate::sys::at_exit(at_exit);
            Ok((rank, size))
        })
        .clone()
        .map_err(NetError::Mpi)
}

/// Open MPI's shared-memory transport (`vader`) sends a message of up to 4 KB eagerly and
/// a larger one by rendezvous: the receiver answers the first fragment and then reads the
/// rest from the sender with a system call (`process_vm_readv`). A page (8 KB) and a large
/// diff are larger, so every fetch paid that handshake. Unless the user set it (in the
/// environment or with `mpirun --mca`), the limit is raised to 32 KB, vader's largest
/// fragment, which holds the largest frame the protocol sends (`MAX_MESSAGE_BYTES` and
/// the header): `bench proto`, CSM-None, 2 ranks, 4 interleaved runs against the default,
/// page fetch 10.9 -> 8.3 us (medians), the first fetch of a page 15.5 -> 12.8, the rest
/// within the noise. Other MPI libraries ignore the variable.
fn eager_pages() {
    const LIMIT: &str = "OMPI_MCA_btl_vader_eager_limit";
    const _: () = assert!(HEADER + MAX_MESSAGE_BYTES + 64 <= 32 * 1024);
    if std::env::var_os(LIMIT).is_none() {
        // Open MPI reads it in `MPI_Init`, just after this; no thread of this process has
        // called MPI yet, and nothing else of the DSM reads the environment meanwhile.
        std::env::set_var(LIMIT, "32768");
    }
}

/// Ends MPI as the process exits: `MPI_Finalize` after runs that succeeded, `MPI_Abort`
/// (every rank stops, the job's status is 1) after one that failed.
extern "C" fn at_exit() {
    if ABORT_AT_EXIT.load(Ordering::Acquire) {
        SimpleCommunicator::world().abort(1);
    }
    // SAFETY: MPI was initialized (this hook is registered after) and every run's
    // progress thread has been joined: no other thread of this process calls MPI now.
    unsafe {
        mpi::ffi::MPI_Finalize();
    }
}

/// Makes this process end with `MPI_Abort` (see [`at_exit`]): a failed run leaves ranks
/// that may be stopped or blocked, which only an abort ends.
pub fn abort_at_exit() {
    ABORT_AT_EXIT.store(true, Ordering::Release);
}

/// Whether a run of this process failed (and so the job must end in `MPI_Abort`).
pub fn failed_before() -> bool {
    ABORT_AT_EXIT.load(Ordering::Acquire)
}

/// Ends the whole MPI job now with status 1 (every rank is killed).
pub fn abort_job() -> ! {
    SimpleCommunicator::world().abort(1)
}

/// A run's communicator, shared by the node's threads. It is never freed: Open MPI gives
/// the next duplicate the context id of a freed communicator, and a message a peer sent on
/// the old one after this rank freed it (a last heartbeat, sent while this rank was
/// already in the next run's start) is kept for a communicator of that id and delivered
/// into the new run, where it takes the sequence number of a real message, which is then
/// never matched: 7 of 30 4-rank jobs of random programs beside two CPU hogs hung (a
/// request sent and never received, every other count of messages matching) or read
/// stale data (a lost write notice), and 0 of 16 once the communicators were kept. The two
/// communicators of a run (module doc, "One run, two communicators") kept to the end of
/// the process cost a few hundred bytes.
struct Comm(std::mem::ManuallyDrop<SimpleCommunicator>);

// SAFETY: MPI was initialized with MPI_THREAD_MULTIPLE (`world` refuses anything less), so
// any thread may call MPI on this communicator, concurrently with the others; the handle
// itself is never changed after creation.
unsafe impl Send for Comm {}
// SAFETY: as for Send.
unsafe impl Sync for Comm {}

/// The receive posted on a run's data communicator (module doc, "Receiving"): one at a
/// time, on any source and tag, into a buffer that holds the largest frame; taken and
/// posted again by the thread that holds the link's `receiver` lock.
struct Posted {
    /// `HEADER + MAX_MESSAGE_BYTES` bytes, leaked for MPI's static scope; freed by `Drop`
    /// once no receive uses it.
    buffer: *mut [u8],
    /// The receive in progress; `None` from a `take` that found an arrival to the next
    /// `take` (which posts first), and after a `withdraw` that completed it (one that gave
    /// up leaves it here, for `Drop` to give up).
    request: Option<Request<'static, [u8], StaticScope>>,
    /// Set by `withdraw`: nothing is posted or taken any more.
    withdrawn: bool,
}

// SAFETY: `buffer` and the request are used only by the holder of the `Mutex<Posted>`
// (`MpiLink::receiver`), one thread at a time; MPI, initialized with
// MPI_THREAD_MULTIPLE, lets any thread test or cancel a request.
unsafe impl Send for Posted {}

impl Posted {
    /// Allocates the buffer and posts the first receive on `comm`.
    fn new(comm: &SimpleCommunicator) -> Posted {
        let buffer = Box::into_raw(vec![0u8; HEADER + MAX_MESSAGE_BYTES].into_boxed_slice());
        let mut posted = Posted {
            buffer,
            request: None,
            withdrawn: false,
        };
        posted.post(comm);
        posted
    }

    /// Posts the next receive into the buffer, which MPI then has until the receive
    /// completes. No receive uses it now (none is posted), and no slice of it is alive:
    /// `take`'s borrows `&mut self`, so it ended before this call.
    fn post(&mut self, comm: &SimpleCommunicator) {
        debug_assert!(self.request.is_none(), "a receive is already posted");
        // SAFETY: the box leaked in `new`, freed only by `Drop`, unused now (doc above).
        let buffer: &'static mut [u8] = unsafe { &mut *self.buffer };
        self.request = Some(comm.any_process().immediate_receive_into(StaticScope, buffer));
    }

    /// The arrival in the buffer if the receive has completed (posting it first on `comm`
    /// if none is): its source rank, tag and bytes. The next call posts the next receive.
    fn take(&mut self, comm: &SimpleCommunicator) -> Option<(usize, i32, &[u8])> {
        if self.withdrawn {
            return None;
        }
        if self.request.is_none() {
            self.post(comm);
        }
        let request = self.request.take()?;
        match request.test() {
            Err(pending) => {
                self.request = Some(pending);
                None
            }
            Ok(status) => {
                let len = (status.count(u8::equivalent_datatype()).max(0) as usize)
                    .min(HEADER + MAX_MESSAGE_BYTES);
                // SAFETY: the receive into `buffer` has completed, so MPI no longer
                // writes it, and it is lent again only by `post`, which needs `&mut self`
                // and so comes after this slice's last use.
                let bytes = unsafe { &(&*self.buffer)[..len] };
                Some((status.source_rank() as usize, status.tag(), bytes))
            }
        }
    }

    /// Withdraws the posted receive as the link stops: cancels it and waits until MPI
    /// lets go of it, unless the run has aborted or that takes the stall limit (a
    /// receive that matched a large message from a stopped rank would never complete):
    /// then the request and the buffer are left to the job's end (`Drop`).
    fn withdraw(&mut self, control: &Control, stall_timeout: Duration) {
        self.withdrawn = true;
        let Some(mut request) = self.request.take() else {
            return;
        };
        request.cancel();
        let began = Instant::now();
        let mut poller = Poller::default();
        loop {
            match request.test() {
                Ok(_) => return,
                Err(pending) => request = pending,
            }
            if control.aborted() || began.elapsed() >= stall_timeout {
                self.request = Some(request);
                return;
            }
            poller.idle();
        }
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        match self.request.take() {
            // SAFETY: `into_raw` gives the request up without completing it (its drop
            // would panic); MPI may still write `buffer`, which stays leaked for it.
            Some(request) => drop(unsafe { request.into_raw() }),
            // SAFETY: `buffer` is the box leaked in `new`, and no receive uses it.
            None => drop(unsafe { Box::from_raw(self.buffer) }),
        }
    }
}

/// A message taken off the wire, waiting in the inbox for the node's poller.
struct Envelope {
    from: usize,
    kind: u16,
    slot: u16,
    token: u32,
    payload: Payload,
}

/// An envelope's payload: a synchronization message's few bytes are kept in place (no
/// allocation on the way to its handler), anything longer on the heap.
enum Payload {
    Inline { len: u8, bytes: [u8; Payload::INLINE] },
    Heap(Vec<u8>),
}

impl Payload {
    const INLINE: usize = 32;

    fn new(bytes: &[u8]) -> Payload {
        if bytes.len() <= Payload::INLINE {
            let mut inline = [0; Payload::INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Payload::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            Payload::Heap(bytes.to_vec())
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Inline { len, bytes } => &bytes[..*len as usize],
            Payload::Heap(v) => v,
        }
    }
}

/// A processor's (or the service's) reply mailbox.
struct Mailbox {
    /// The token of the last reply, stored after its payload (SeqCst).
    token: AtomicU32,
    /// The waiter of this mailbox counts itself here while parked (`Seam::until_flagged`).
    parked: AtomicU32,
    payload: Mutex<Vec<u8>>,
    /// Per-source acknowledgement words (the token each node last acknowledged).
    acks: Vec<AtomicU32>,
}

/// A rank's result as rank 0 receives it: its bytes, or why it failed.
pub type RankResult = Result<Vec<u8>, String>;

/// What rank 0 gathers at the end of a run.
struct Gather {
    results: Vec<Option<RankResult>>,
    verdict: Option<bool>,
}

/// One rank's link to the others for one cluster run: the run's communicator, the state
/// the progress thread fills, and the thread itself.
pub struct MpiLink {
    /// The protocol's messages, replies and acknowledgements.
    data: Comm,
    /// The launcher's traffic: heartbeats, start-up, failures, results, verdict.
    ctl: Comm,
    node: usize,
    nodes: usize,
    fabric: Arc<Fabric>,
    inbox: Mutex<VecDeque<Envelope>>,
    /// The inbox's length, stored under its lock at each change: an idle thread's look
    /// reads this word, not the two locks.
    filed: AtomicUsize,
    /// The receive posted on `data`, held by the one thread that takes messages off MPI
    /// at a time (`MpiLink::pump`).
    receiver: Mutex<Posted>,
    /// Held by the node's one poller at a time: the messages it took from the inbox to
    /// handle (empty between polls; swapped with the inbox, so both keep their capacity).
    consumer: Mutex<VecDeque<Envelope>>,
    mailboxes: Vec<Mailbox>,
    tokens: Vec<AtomicU32>,
    /// messages, message bytes, acknowledge requests (as `NetCounters`).
    sent: [AtomicU64; 3],
    /// Peers whose `Ready` has arrived.
    ready: AtomicUsize,
    gather: Mutex<Gather>,
    /// Per peer: it sent its result (its silence is no stall any more).
    finished: Vec<AtomicBool>,
    /// The node runs its engine (between the start-up barrier and its node function's
    /// end): the progress thread beats only while the node's heartbeat moves.
    engine: AtomicBool,
    /// This rank's first failure came from a peer: it is not sent on again.
    remote_origin: AtomicBool,
    stall_timeout: Duration,
    /// Per peer: when a message from it last arrived, as of the last look at `heard`.
    last_heard: Mutex<Vec<Instant>>,
    /// Per peer: a message arrived since the last look (the receive path reads no clock).
    heard: Vec<AtomicBool>,
    stop: AtomicBool,
    kicked: AtomicBool,
    /// Calls of `has_messages` (see there).
    asked: AtomicU32,
    progress: Mutex<Option<std::thread::JoinHandle<()>>>,
    progress_thread: OnceLock<std::thread::Thread>,
}

impl std::fmt::Debug for MpiLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiLink")
            .field("node", &self.node)
            .field("nodes", &self.nodes)
            .finish()
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

thread_local! {
    /// The calling thread's frame buffer for protocol sends ([`MpiLink::send_frame`]).
    static SEND_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl MpiLink {
    /// Starts rank `node`'s link for a new run (collective: every rank calls it for the
    /// same run, in the same order) and its progress thread.
    pub fn start(
        fabric: Arc<Fabric>,
        node: usize,
        nodes: usize,
        stall_timeout: Duration,
    ) -> Result<Arc<MpiLink>, NetError> {
        let data = Comm(std::mem::ManuallyDrop::new(SimpleCommunicator::world().duplicate()));
        let ctl = Comm(std::mem::ManuallyDrop::new(SimpleCommunicator::world().duplicate()));
        let receiver = Mutex::new(Posted::new(&data.0));
        let layout = *fabric.layout();
        // The rank's control block counts only its own threads, and the other ranks of
        // the job on this host share its cores: the wait policy counts this rank's
        // threads against its share (`crate::wait`, "Policy").
        fabric.control().share_cores(RANKS_HERE.load(Ordering::Relaxed));
        let link = Arc::new(MpiLink {
            data,
            ctl,
            node,
            nodes,
            inbox: Mutex::new(VecDeque::new()),
            filed: AtomicUsize::new(0),
            receiver,
            consumer: Mutex::new(VecDeque::new()),
            mailboxes: (0..layout.mailboxes)
                .map(|_| Mailbox {
                    token: AtomicU32::new(0),
                    parked: AtomicU32::new(0),
                    payload: Mutex::new(Vec::new()),
                    acks: (0..nodes).map(|_| AtomicU32::new(0)).collect(),
                })
                .collect(),
            tokens: (0..layout.mailboxes).map(|_| AtomicU32::new(0)).collect(),
            sent: Default::default(),
            ready: AtomicUsize::new(0),
            gather: Mutex::new(Gather {
                results: (0..nodes).map(|_| None).collect(),
                verdict: None,
            }),
            finished: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            engine: AtomicBool::new(false),
            remote_origin: AtomicBool::new(false),
            stall_timeout,
            last_heard: Mutex::new(vec![Instant::now(); nodes]),
            heard: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            stop: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            asked: AtomicU32::new(0),
            progress: Mutex::new(None),
            progress_thread: OnceLock::new(),
            fabric,
        });
        let runner = Arc::clone(&link);
        let handle = std::thread::Builder::new()
            .name(format!("dsm-mpi-progress-{node}"))
            .spawn(move || runner.progress())
            .map_err(NetError::Io)?;
        let _ = link.progress_thread.set(handle.thread().clone());
        *link.progress.lock().expect("poisoned") = Some(handle);
        Ok(link)
    }

    fn control(&self) -> &Control {
        self.fabric.control()
    }

    fn seam(&self) -> Seam<'_> {
        Seam::new(self.control(), self.node)
    }

    /// Sends `bytes` to rank `to` with `tag`. Open MPI's shared memory sends a message
    /// under its eager limit (32 KB here, `eager_pages`) at once, but a larger one (a
    /// result) only once the receiver takes it, which a stopped rank never does: a blocking
    /// `MPI_Send` there would never return, and its thread would never see the abort. So
    /// the send is immediate, on `bytes`, which MPI owns until it completes, and polled
    /// until it completes or the run aborts; then the job ends in `MPI_Abort`, and the
    /// request and its buffer are left to it.
    fn send_raw(&self, to: usize, tag: i32, bytes: Vec<u8>) {
        let buffer: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if self.send_static(to, tag, buffer) {
            // SAFETY: `buffer` is the box leaked above, and the send that read it has
            // completed, so nothing uses it any more.
            drop(unsafe { Box::from_raw(buffer as *const [u8] as *mut [u8]) });
        }
    }

    /// Sends a frame (`[a u16 | b u16 | token u32 | head | tail]`: the payload may come in
    /// two parts, a page reply's header and page) to rank `to` with `tag`, as
    /// [`MpiLink::send_raw`] does, from a buffer of the calling thread's that every send
    /// reuses (a protocol message costs no allocation of its own). The buffer outlives
    /// every read MPI makes of it: `send_static` returns once the send has completed, the
    /// `RefCell` borrow keeps every other use out until then (a send handles nothing, so
    /// it never sends again from within), and a send given up on an abort, which MPI may
    /// still read, leaves its buffer forgotten, never freed or reused.
    #[allow(clippy::too_many_arguments)]
    fn send_frame(
        &self,
        to: usize,
        tag: i32,
        a: u16,
        b: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) {
        SEND_BUFFER.with(|cell| {
            let mut buffer = cell.borrow_mut();
            buffer.clear();
            buffer.extend_from_slice(&a.to_ne_bytes());
            buffer.extend_from_slice(&b.to_ne_bytes());
            buffer.extend_from_slice(&token.to_ne_bytes());
            buffer.extend_from_slice(head);
            buffer.extend_from_slice(tail);
            let (ptr, len) = (buffer.as_ptr(), buffer.len());
            // SAFETY: the buffer outlives every read MPI makes of it (doc above).
            let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(ptr, len) };
            if !self.send_static(to, tag, bytes) {
                std::mem::forget(std::mem::take(&mut *buffer));
            }
        });
    }

    /// Sends `bytes` (module doc of `send_raw`) and polls the send until it completes
    /// (true) or the run aborts (false: the request is given up, and MPI may still read
    /// `bytes`).
    fn send_static(&self, to: usize, tag: i32, bytes: &'static [u8]) -> bool {
        let comm = if tag::is_data(tag) { &self.data } else { &self.ctl };
        let mut request = comm.0.process_at_rank(to as i32).immediate_send_with_tag(
            mpi::request::StaticScope,
            bytes,
            tag,
        );
        let mut poller = Poller::default();
        loop {
            match request.test() {
                Ok(_) => return true,
                Err(pending) => request = pending,
            }
            if self.control().aborted() {
                // SAFETY: `into_raw` only gives up the request without completing it (its
                // drop would panic); the caller leaves `bytes` to MPI.
                let _ = unsafe { request.into_raw() };
                return false;
            }
            poller.idle();
        }
    }

    fn to_peers(&self, tag: i32, bytes: &[u8]) {
        for n in (0..self.nodes).filter(|&n| n != self.node) {
            self.send_raw(n, tag, bytes.to_vec());
        }
    }

    /// An arrival is due (the start-up barrier's), or the thread must stop: the progress
    /// thread looks at once and closely for a while.
    fn kick(&self) {
        self.kicked.store(true, Ordering::Release);
        if let Some(t) = self.progress_thread.get() {
            Poller::kick(t);
        }
    }

    /// The start-up barrier: tells every peer this node is ready and waits (through the
    /// seam: it gives up if the cluster aborts) until every peer has said so.
    pub fn startup_barrier(&self) -> Result<(), MsgError> {
        self.to_peers(tag::READY, &[]);
        self.kick();
        self.seam().until(WaitFor::Startup, || {
            self.ready.load(Ordering::Acquire) == self.nodes - 1
        })?;
        self.engine.store(true, Ordering::Release);
        Ok(())
    }

    /// The node function has returned: the node's heartbeat stops moving, which is no
    /// stall.
    pub fn engine_done(&self) {
        self.engine.store(false, Ordering::Release);
    }

    /// Sends this rank's result to rank 0.
    pub fn send_result(&self, result: &RankResult) {
        let mut bytes = Vec::new();
        match result {
            Ok(b) => {
                bytes.push(1);
                bytes.extend_from_slice(b);
            }
            Err(cause) => {
                bytes.push(0);
                bytes.extend_from_slice(cause.as_bytes());
            }
        }
        self.send_raw(0, tag::RESULT, bytes);
    }

    /// Rank 0: waits for every other rank's result, or for the cluster to abort. Returns
    /// them in node order (`None` for this rank's own place).
    pub fn gather(&self) -> Result<Vec<Option<RankResult>>, wait::Aborted> {
        self.seam().until(WaitFor::Results, || {
            let g = self.gather.lock().expect("poisoned");
            g.results.iter().skip(1).all(Option::is_some)
        })?;
        let mut g = self.gather.lock().expect("poisoned");
        Ok(std::mem::take(&mut g.results))
    }

    /// Rank 0: tells every other rank how the run ended.
    pub fn send_verdict(&self, ok: bool) {
        self.to_peers(tag::DONE, &[ok as u8]);
    }

    /// Another rank: waits for rank 0's verdict. Returns it, or `None` once the cluster
    /// has aborted and no verdict came.
    pub fn verdict(&self) -> Option<bool> {
        let got = || self.gather.lock().expect("poisoned").verdict;
        match self.seam().until(WaitFor::Results, || got().is_some()) {
            Ok(()) => got(),
            Err(wait::Aborted) => got(),
        }
    }

    /// After a failed run, on a rank other than 0: waits for rank 0's verdict (`Some`), or
    /// until rank 0 has been silent for the stall limit (`None`: it will not report). A
    /// failure of rank 0's that reached this rank is no reason to stop waiting: rank 0
    /// reports it itself, unless it stopped, and then it falls silent too (reporting it
    /// here as well made two reports of one failure). This wait does not give up on the
    /// abort, which has happened already.
    pub fn await_verdict_or_silence_of_rank_0(&self) -> Option<bool> {
        let mut poller = Poller::default();
        loop {
            if let Some(v) = self.gather.lock().expect("poisoned").verdict {
                return Some(v);
            }
            if self.silence(0) >= self.stall_timeout {
                return None;
            }
            poller.idle();
        }
    }

    /// Whether every rank from 1 to `rank - 1` has been silent for the stall limit: after
    /// rank 0 fell silent, the lowest rank still responding reports the run's failure
    /// (`crate::launch`, "MPI ranks"), so rank `rank` does once the ranks below it are
    /// silent too.
    pub fn ranks_below_silent(&self, rank: usize) -> bool {
        (1..rank).all(|n| self.silence(n) >= self.stall_timeout)
    }

    /// How long `node` has been silent.
    fn silence(&self, node: usize) -> Duration {
        self.heard_lately()[node].elapsed()
    }

    /// The cause to report for rank 0's silence.
    pub fn rank_0_silence(&self) -> String {
        format!(
            "stopped responding: no message for {:.1} s after the run failed (the stall limit is {:.1} s)",
            self.silence(0).as_secs_f64(),
            self.stall_timeout.as_secs_f64()
        )
    }

    /// Stops the link when dropped: the launcher's one place to stop it, on every way out
    /// of a run (a panic included: its progress thread must not be inside MPI while the
    /// process finalizes it).
    pub fn stop_on_drop(&self) -> StopOnDrop<'_> {
        StopOnDrop(self)
    }

    /// Stops the progress thread and withdraws the receive posted on the data
    /// communicator (`Posted::withdraw`; the run's communicators are kept: `Comm`). It
    /// runs on every way out of a run, an unwinding one included, so a lock poisoned by a
    /// panic does not stop it.
    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
        if let Some(h) = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = h.join();
        }
        self.receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .withdraw(self.control(), self.stall_timeout);
    }

    /// The progress thread (module doc).
    fn progress(&self) {
        let mut poller = Poller::default();
        let beat_interval = (self.stall_timeout / 4).min(Duration::from_millis(500));
        let mut last_beat_sent: Option<Instant> = None;
        let mut last_heartbeat = u64::MAX;
        let mut forwarded = false;
        let mut looks = 0u32;
        crate::sys::set_timer_slack_ns(1_000);
        while !self.stop.load(Ordering::Acquire) {
            // `None`: a waiting thread of the node receives now; this thread backs off
            // as if nothing had come (two threads of a rank spinning on MPI would take
            // the cores the processors compute on).
            let arrived =
                self.try_pump(usize::MAX).is_some_and(|n| n > 0) | (self.pump_control() > 0);
            if arrived || self.kicked.swap(false, Ordering::AcqRel) {
                poller.busy();
            }
            looks = looks.wrapping_add(1);
            let cores_taken = self.control().cores_taken();
            // The periodic work (failures, heartbeats, stalls) runs every 256th look
            // even while arrivals keep coming, and at every look once the poller sleeps.
            if looks % 256 != 0 && (arrived || (!poller.sleeping() && !cores_taken)) {
                if !arrived {
                    poller.idle();
                }
                continue;
            }
            let now = Instant::now();
            if !forwarded {
                forwarded = self.forward_failure();
            }
            if last_beat_sent.is_none_or(|t| now.duration_since(t) >= beat_interval) {
                let hb = self.control().heartbeat(self.node);
                if hb != last_heartbeat || !self.engine.load(Ordering::Acquire) {
                    self.to_peers(tag::BEAT, &[]);
                }
                last_heartbeat = hb;
                // This thread itself did not run for the stall limit (the rank was
                // stopped, and continued by the job's abort): its peers' silence says
                // nothing about them, so it blames none of them.
                let stopped_here = last_beat_sent.is_some_and(|t| now.duration_since(t) >= self.stall_timeout);
                last_beat_sent = Some(now);
                if stopped_here {
                    self.heard_lately().fill(now);
                } else {
                    self.watch(now);
                }
            }
            if !arrived {
                if cores_taken && (self.spinners_look() || wait::pollers_look(POLLERS_LOOK_NS)) {
                    poller.idle_behind_pollers();
                } else {
                    poller.idle_sharing(cores_taken);
                }
            }
        }
    }

    /// Whether a thread of the node spins in a wait that looks at MPI at every check (a
    /// counted poller, `crate::wait`, "Pollers") on a host that does not count as
    /// crowded: it takes what arrives, and the progress thread may sleep longer. (On a
    /// crowded host such a spin is short and ends in a park, which the arrival would then
    /// wait behind the progress thread's long sleep.)
    fn spinners_look(&self) -> bool {
        self.control().bell(self.node).pollers.load(Ordering::Relaxed) > 0
            && !self.control().crowded(crate::sys::monotonic_ns())
    }

    /// Takes every message that has arrived off MPI and handles it (module doc), unless
    /// another thread of the node is doing so; returns how many there were. The progress
    /// thread pumps all the time; a poll point and a poll that finds the inbox empty pump
    /// too, the idle service takes one arrival at every 8th check (`MpiPort::has_messages`),
    /// and a thread that waits for a reply or an acknowledgement takes one at each check
    /// (`try_pump(1)`), so that what it waits for does not wait for the progress thread's
    /// next look. One thread receives at a time, so arrivals are handled in order.
    fn pump(&self) -> usize {
        self.try_pump(usize::MAX).unwrap_or(0)
    }

    /// True if the inbox holds messages and no thread is handling it (while one is, it
    /// rings for what it leaves: [`MpiPort::poll`]).
    fn inbox_unhandled(&self) -> bool {
        // SeqCst: read after a parking thread's fence (`crate::wait`, "no lost wake-up").
        self.filed.load(Ordering::SeqCst) > 0 && self.consumer.try_lock().is_ok()
    }

    /// [`MpiLink::pump`] for at most `max` arrivals, or `None` if another thread of the
    /// node is receiving.
    fn try_pump(&self, max: usize) -> Option<usize> {
        let Ok(mut posted) = self.receiver.try_lock() else {
            return None;
        };
        let mut n = 0;
        while n < max {
            let Some((from, t, bytes)) = posted.take(&self.data.0) else {
                break;
            };
            self.heard[from].store(true, Ordering::Relaxed);
            self.arrived(from, t, bytes);
            n += 1;
        }
        Some(n)
    }

    /// Takes the launcher's arrivals off the control communicator (the progress thread's
    /// alone: none of them is urgent); returns how many there were.
    fn pump_control(&self) -> usize {
        let mut n = 0;
        while let Some(probed) = self.ctl.0.any_process().immediate_matched_probe() {
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            let from = status.source_rank() as usize;
            self.heard[from].store(true, Ordering::Relaxed);
            self.arrived(from, status.tag(), &bytes);
            n += 1;
        }
        n
    }

    /// `last_heard`, brought up to date with the arrivals noted in `heard` since the last
    /// look (they are dated now: a peer's silence is never overstated).
    fn heard_lately(&self) -> std::sync::MutexGuard<'_, Vec<Instant>> {
        let mut last = self.last_heard.lock().expect("poisoned");
        let now = Instant::now();
        for (n, h) in self.heard.iter().enumerate() {
            if h.swap(false, Ordering::Relaxed) {
                last[n] = now;
            }
        }
        last
    }

    /// Records a peer that has been silent for the stall limit as this rank's first
    /// failure (unless the cluster has already aborted).
    fn watch(&self, now: Instant) {
        if self.control().aborted() {
            return;
        }
        let last_heard = self.heard_lately().clone();
        for n in (0..self.nodes).filter(|&n| n != self.node) {
            if self.finished[n].load(Ordering::Acquire) {
                continue;
            }
            let silent = now.duration_since(last_heard[n]);
            if silent >= self.stall_timeout {
                let cause = format!(
                    "stopped responding: no heartbeat for {:.1} s (the stall limit is {:.1} s; --stall-timeout or DSM_STALL_TIMEOUT)",
                    silent.as_secs_f64(),
                    self.stall_timeout.as_secs_f64()
                );
                self.control().fail(n, &cause);
                return;
            }
        }
    }

    /// Sends this rank's own first failure to every peer, once it is recorded; returns
    /// true once there is nothing more to send.
    fn forward_failure(&self) -> bool {
        if !self.control().aborted() {
            return false;
        }
        match self.control().abort_origin() {
            AbortOrigin::Recorded { node, cause } => {
                if !self.remote_origin.load(Ordering::Acquire) {
                    let mut bytes = (node as u32).to_ne_bytes().to_vec();
                    bytes.extend_from_slice(cause.as_bytes());
                    self.to_peers(tag::FAIL, &bytes);
                }
                true
            }
            // The claimant publishes its cause in a moment.
            AbortOrigin::Claimed { .. } => false,
            // An abort with no failure of this rank's (a consequence of one elsewhere).
            AbortOrigin::None => true,
        }
    }

    /// Handles one arrival from `from` (module doc).
    fn arrived(&self, from: usize, t: i32, bytes: &[u8]) {
        match t {
            tag::MESSAGE if bytes.len() >= HEADER => {
                self.deliver(Envelope {
                    from,
                    kind: u16_at(bytes, 0),
                    slot: u16_at(bytes, 2),
                    token: u32_at(bytes, 4),
                    payload: Payload::new(&bytes[HEADER..]),
                });
            }
            tag::REPLY if bytes.len() >= HEADER => {
                self.land_reply(u16_at(bytes, 0), u32_at(bytes, 4), &bytes[HEADER..], &[]);
            }
            tag::ACK if bytes.len() >= HEADER => {
                self.land_ack(from, u16_at(bytes, 0), u32_at(bytes, 4));
            }
            tag::BEAT => {}
            tag::READY => {
                self.ready.fetch_add(1, Ordering::AcqRel);
                wait::wake(self.control(), self.node);
            }
            tag::FAIL if bytes.len() >= 4 => {
                let node = u32_at(bytes, 0) as usize;
                let cause = String::from_utf8_lossy(&bytes[4..]).into_owned();
                if self.control().fail(node.min(self.nodes - 1), &cause) {
                    self.remote_origin.store(true, Ordering::Release);
                }
            }
            tag::RESULT if !bytes.is_empty() => {
                let result = if bytes[0] == 1 {
                    Ok(bytes[1..].to_vec())
                } else {
                    Err(String::from_utf8_lossy(&bytes[1..]).into_owned())
                };
                self.finished[from].store(true, Ordering::Release);
                self.gather.lock().expect("poisoned").results[from] = Some(result);
                wait::wake(self.control(), self.node);
            }
            tag::DONE if !bytes.is_empty() => {
                self.gather.lock().expect("poisoned").verdict = Some(bytes[0] == 1);
                wait::wake(self.control(), self.node);
            }
            _ => {
                let cause = format!(
                    "received a malformed MPI message from rank {from} (tag {t}, {} bytes): every rank must run the same build of the same program",
                    bytes.len()
                );
                self.control().fail(self.node, &cause);
            }
        }
    }

    /// Files a message in the inbox and rings the node's service unless one of its threads
    /// polls (`crate::wait`, "Pollers": a poller serves, which takes arrivals off MPI and
    /// empties the inbox, within `SPIN_SERVE_EVERY` checks).
    fn deliver(&self, env: Envelope) {
        {
            let mut inbox = self.inbox.lock().expect("poisoned");
            inbox.push_back(env);
            self.filed.store(inbox.len(), Ordering::SeqCst);
        }
        wait::filed_here();
        wait::wake_for_message(self.control(), self.node);
    }

    /// Fills mailbox `slot` with the reply `token`, whose payload is `head` followed by
    /// `tail`, and wakes its waiter if it is parked.
    fn land_reply(&self, slot: u16, token: u32, head: &[u8], tail: &[u8]) {
        let Some(mb) = self.mailboxes.get(slot as usize) else {
            return;
        };
        {
            let mut p = mb.payload.lock().expect("poisoned");
            p.clear();
            p.extend_from_slice(head);
            p.extend_from_slice(tail);
        }
        mb.token.store(token, Ordering::SeqCst);
        wait::wake_flagged(self.control(), self.node, &mb.parked);
    }

    fn land_ack(&self, from: usize, slot: u16, token: u32) {
        let Some(mb) = self.mailboxes.get(slot as usize) else {
            return;
        };
        mb.acks[from].store(token, Ordering::SeqCst);
        wait::wake_flagged(self.control(), self.node, &mb.parked);
    }

    fn count_sent(&self, bytes: usize) {
        self.sent[0].fetch_add(1, Ordering::Relaxed);
        self.sent[1].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn check_mailbox(&self, to: NodeId, slot: u16) -> Result<(), MsgError> {
        if to.index() >= self.nodes {
            return Err(MsgError::NoSuchNode(to));
        }
        if slot as usize >= self.mailboxes.len() {
            return Err(MsgError::NoSuchMailbox {
                slot: slot as usize,
                slots: self.mailboxes.len(),
            });
        }
        Ok(())
    }
}

/// Stops its link when dropped ([`MpiLink::stop_on_drop`]).
pub struct StopOnDrop<'a>(&'a MpiLink);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// One node's endpoint on the MPI transport: its [`Transport`].
#[derive(Debug)]
pub(crate) struct MpiPort {
    link: Arc<MpiLink>,
}

impl MpiPort {
    pub(crate) fn new(link: Arc<MpiLink>) -> MpiPort {
        MpiPort { link }
    }

    /// The rank's local fabric (its heap and control block).
    pub(crate) fn fabric(&self) -> &Arc<Fabric> {
        &self.link.fabric
    }

    fn refuse(&self, what: &str) -> ! {
        panic!(
            "node {} asked the MPI transport for {what}, which it lacks: the protocol variant should have been refused at configuration",
            self.link.node
        )
    }
}

impl Transport for MpiPort {
    fn node(&self) -> NodeId {
        NodeId::from_usize(self.link.node)
    }

    fn nodes(&self) -> usize {
        self.link.nodes
    }

    fn features(&self) -> Features {
        Features::MPI
    }

    fn describe(&self) -> String {
        crate::profile::MPI_TITLE.into()
    }

    /// No region is ever written remotely; regions get this node's local memory (the
    /// fabric's pool) for the variants that keep words there for themselves.
    fn address_space(&self) -> (u64, u64) {
        let l = self.link.fabric.layout();
        (l.address_space_bytes, l.user_base)
    }

    fn control(&self) -> &Control {
        self.link.control()
    }

    fn counters(&self) -> NetCounters {
        let s = &self.link.sent;
        NetCounters {
            packets: s[0].load(Ordering::Relaxed),
            bytes: s[1].load(Ordering::Relaxed),
            broadcasts: 0,
            messages: s[0].load(Ordering::Relaxed),
            message_bytes: s[1].load(Ordering::Relaxed),
            acks: s[2].load(Ordering::Relaxed),
        }
    }

    fn attach(&self, _offset: u64, _len: u64, loopback: bool) {
        if loopback {
            self.refuse("loopback");
        }
    }

    fn detach(&self, _offset: u64, _len: u64) {}

    fn receives(&self, _offset: u64) -> bool {
        false
    }

    fn receive_memory(&self, region: &Region) -> *mut u8 {
        self.link
            .fabric
            .pool_ptr(self.link.node, region.offset)
    }

    fn write(&self, _region: &Region, _at: u64, _data: &[u8]) {
        self.refuse("a remote write");
    }

    fn write_runs(&self, _region: &Region, _base: u64, _runs: &[(usize, &[u8])]) {
        self.refuse("a remote write");
    }

    /// Messages land when they are received; there are no remote writes to wait for.
    fn ack(&self, _seam: &Seam<'_>) -> Result<(), MsgError> {
        self.link.sent[2].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Another rank's words are written by messages, which wake their waiters when they
    /// land; a word of this rank wakes its parked processors, as on the fabric.
    fn ring_bells(&self, nodes: NodeSet) {
        if nodes.contains(self.node()) {
            wait::wake_processors(self.link.control(), self.link.node);
        }
    }

    /// A send never waits for ring space (MPI queues what the receiver has not taken yet);
    /// a large one waits only until the receiver takes it, or the run aborts (`send_raw`).
    fn send(
        &self,
        _seam: Option<&Seam<'_>>,
        to: NodeId,
        kind: u16,
        slot: u16,
        token: u32,
        payload: &[u8],
    ) -> Result<bool, MsgError> {
        let link = &self.link;
        let rank = to.index();
        if rank >= link.nodes {
            return Err(MsgError::NoSuchNode(to));
        }
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len: payload.len(),
                max: MAX_MESSAGE_BYTES,
            });
        }
        if link.control().aborted() {
            return Err(MsgError::Aborted);
        }
        if rank == link.node {
            link.deliver(Envelope {
                from: rank,
                kind,
                slot,
                token,
                payload: Payload::new(payload),
            });
        } else {
            link.send_frame(rank, tag::MESSAGE, kind, slot, token, payload, &[]);
        }
        link.count_sent(HEADER + payload.len());
        Ok(true)
    }

    /// Handles the inbox's messages unless another thread does so now. The thread that
    /// polled looks at the inbox once more after it lets go, and rings for what it finds
    /// (unless the node has a poller): [`MpiPort::has_messages`] answers "no" while a
    /// thread polls, so a message that arrived after that thread's last look waits for
    /// this ring.
    fn poll(&self, mut f: impl FnMut(Inbound<'_>)) -> usize {
        let link = &self.link;
        let Ok(mut batch) = link.consumer.try_lock() else {
            return 0;
        };
        // What a waiter's readiness check has just filed is handled first; the next check
        // takes what came since.
        if link.filed.load(Ordering::SeqCst) == 0 {
            link.pump();
        }
        if link.filed.load(Ordering::SeqCst) > 0 {
            let mut inbox = link.inbox.lock().expect("poisoned");
            // Only the messages there now: under a steady stream a processor that serves
            // while it waits would otherwise never get back to its own wait.
            std::mem::swap(&mut *inbox, &mut *batch);
            link.filed.store(0, Ordering::SeqCst);
        }
        let mut handled = 0;
        while let Some(env) = batch.pop_front() {
            f(Inbound {
                from: NodeId::from_usize(env.from),
                kind: env.kind,
                slot: env.slot,
                token: env.token,
                payload: env.payload.bytes(),
            });
            handled += 1;
        }
        drop(batch);
        // Pairs with the fence of a thread that found `consumer` taken and parks
        // (`crate::wait`, "no lost wake-up"): either it sees the lock free, or this look
        // sees it parked.
        std::sync::atomic::fence(Ordering::SeqCst);
        if link.filed.load(Ordering::SeqCst) > 0 {
            wait::wake_for_message(link.control(), link.node);
        }
        handled
    }

    /// Takes an arrival off MPI itself once every `HAS_MESSAGES_PUMP` calls: the idle
    /// service thread asks thousands of times before it parks, and a look at MPI costs
    /// far more than a look at a ring. One arrival, so that the service handles it before
    /// the next receive is posted (which costs about as much as the look); after one, the
    /// next call looks again, for the message that often follows (a release, then the
    /// next acquire). Then whether the inbox holds messages that no thread is handling:
    /// while one polls, the answer is "no", and that thread rings for what it leaves
    /// ([`MpiPort::poll`]). (Answering "yes" while another thread polls, as the rings do,
    /// kept the service thread going round its loop for as long as a processor polled,
    /// and a processor polls while it sends a page, until its receiver takes it: 51,000
    /// to 58,000 rounds in a SOR run of 0.2 to 0.5 s.)
    fn has_messages(&self) -> bool {
        let link = &self.link;
        if link.asked.fetch_add(1, Ordering::Relaxed) % HAS_MESSAGES_PUMP == 0
            && link.try_pump(1) == Some(1)
        {
            link.asked.store(0, Ordering::Relaxed);
        }
        link.inbox_unhandled()
    }

    /// Takes arrivals off MPI (unless another thread of the rank is doing so), then
    /// answers as [`MpiPort::has_messages`].
    fn has_messages_now(&self) -> bool {
        self.link.pump();
        self.link.inbox_unhandled()
    }

    fn rings_on_arrival(&self) -> bool {
        false
    }

    fn next_token(&self, slot: u16) -> u32 {
        let t = &self.link.tokens[slot as usize];
        let mut v = t.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if v == 0 {
            v = t.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        }
        v
    }

    fn reply(
        &self,
        to: NodeId,
        slot: u16,
        token: u32,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), MsgError> {
        let link = &self.link;
        link.check_mailbox(to, slot)?;
        let len = head.len() + tail.len();
        if len > MAX_MESSAGE_BYTES {
            return Err(MsgError::TooLarge {
                len,
                max: MAX_MESSAGE_BYTES,
            });
        }
        if to.index() == link.node {
            link.land_reply(slot, token, head, tail);
        } else {
            link.send_frame(to.index(), tag::REPLY, slot, 0, token, head, tail);
        }
        link.count_sent(HEADER + len);
        Ok(())
    }

    fn wait_reply(
        &self,
        seam: &Seam<'_>,
        what: WaitFor,
        slot: u16,
        token: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), MsgError> {
        let link = &self.link;
        link.check_mailbox(self.node(), slot)?;
        let mb = &link.mailboxes[slot as usize];
        seam.until_flagged(what, &mb.parked, || {
            mb.token.load(Ordering::SeqCst) == token || {
                let _ = link.try_pump(1);
                mb.token.load(Ordering::SeqCst) == token
            }
        })?;
        let p = mb.payload.lock().expect("poisoned");
        out.clear();
        out.extend_from_slice(&p);
        Ok(())
    }

    fn acknowledge(&self, to: NodeId, slot: u16, token: u32) -> Result<(), MsgError> {
        let link = &self.link;
        link.check_mailbox(to, slot)?;
        if to.index() == link.node {
            link.land_ack(link.node, slot, token);
        } else {
            link.send_frame(to.index(), tag::ACK, slot, 0, token, &[], &[]);
        }
        link.count_sent(HEADER);
        Ok(())
    }

    fn wait_acks(
        &self,
        seam: &Seam<'_>,
        kind: u16,
        slot: u16,
        token: u32,
        from: NodeSet,
    ) -> Result<(), MsgError> {
        let link = &self.link;
        link.check_mailbox(self.node(), slot)?;
        let mb = &link.mailboxes[slot as usize];
        let what = WaitFor::Acks {
            kind,
            nodes: from.len(),
        };
        let acked = || {
            from.iter()
                .all(|n| mb.acks[n.index()].load(Ordering::SeqCst) == token)
        };
        seam.until_flagged(what, &mb.parked, || {
            acked() || {
                let _ = link.try_pump(1);
                acked()
            }
        })?;
        Ok(())
    }
}
