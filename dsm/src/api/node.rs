//! One node of a [`super::Cluster`] run, in the steps [`run_node`] takes: map the
//! application view, run the program's setup, check the mapping limit, attach the
//! protocol's regions on the network, build the engine, pass the start-up barrier, run the
//! processors and the service thread (each processor ends with the engine's final barrier:
//! no acquire after it, nothing sent after it), and report.

use super::{counters_now, NodeOutcome, Proc, ProcReport, RegionCounters, Setup};
use crate::config::{ClockMode, Config, DataStrategy, FaultBackend, MetadataStrategy};
use crate::error::DsmError;
use crate::directory::Directory;
use crate::engine::{Node, Regions};
use crate::fault::Protector;
use crate::launch::{ExecMode, NodeCtx};
use crate::net::{Backing, Fabric, Net};
use crate::stats::Clock;
use crate::sync::{SyncHost, SyncState};
use crate::sys;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;

/// Twins populated when a node starts (`sys::slab`): 8 MiB at 8 KiB pages, about 3 ms of
/// the kernel's page zeroing at start-up instead of 3 us in each of the first write faults
/// (measured on the 2-core development host). Beyond them, a twin's memory is populated 64
/// at a time as the most twins ever live at once grows.
const TWINS_READY: usize = 1024;

/// Fixed address of the application view in node processes, so it is the same on every
/// node (DESIGN.md: "In multi-process mode the app view sits at the same address").
const PROCESS_VIEW_ADDR: usize = 0x5a00_0000_0000;

fn on_fault(ctx: usize, access: sys::FaultAccess) -> bool {
    // SAFETY: ctx is the address of the Node that run_node keeps alive (through an Arc it
    // holds) for as long as the fault registration exists.
    let node = unsafe { &*(ctx as *const Node) };
    let offset = access.addr - node.app_base;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.fault(offset, access.write)
    }));
    match outcome {
        Ok(Ok(())) => true,
        Ok(Err(msg)) => crate::launch::fail_from_fault_handler(
            node.net.fabric(),
            node.id.index(),
            &msg,
        ),
        Err(_) if node.net.aborted() => {
            // The cluster is going down: let the access proceed on whatever the page holds;
            // the processor's next runtime call unwinds with the abort message.
            node.protector.set(
                crate::ids::PageId((offset / node.page_bytes) as u32),
                crate::page::Access::Write,
            );
            true
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            crate::launch::fail_from_fault_handler(
                node.net.fabric(),
                node.id.index(),
                &format!(
                    "protocol failure in a fault handler: {}",
                    msg.unwrap_or_default()
                ),
            )
        }
    }
}

fn is_abort_panic(p: &(dyn std::any::Any + Send)) -> bool {
    let msg = p
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied());
    msg.is_some_and(|m| m.contains(crate::control::ABORT_MESSAGE))
}

/// Runs node `ctx.node` of a cluster: the steps of the module doc. The result is the
/// node's [`NodeOutcome`], encoded for the launcher.
pub(super) fn run_node<S, B, R>(
    cfg: &Config,
    ctx: NodeCtx,
    setup_fn: &S,
    homes: Option<&[(u32, u8)]>,
    sched: Option<Arc<crate::sched::Sched>>,
) -> crate::launch::NodeResult
where
    S: Fn(&mut Setup) -> B + Sync,
    B: Fn(&Proc) -> R + Sync,
    R: Serialize + DeserializeOwned + Send,
{
    let fabric = Arc::clone(&ctx.fabric);
    let view = map_view(cfg, &fabric, ctx.node)?;
    let (setup, body) = run_setup(cfg, ctx.node, &view, setup_fn)?;
    let heap_used = setup.used.max(cfg.page_bytes);
    let npages = heap_used / cfg.page_bytes;
    if npages > u32::MAX as usize {
        return Err("the heap has more pages than the directory can name".into());
    }
    check_map_count(cfg, npages)?;
    let net = ctx.net();
    // The configuration was checked against the network profile; the node's transport
    // may offer less (`crate::net`, "The seam").
    cfg.protocol
        .refuse_without(net.features(), &net.describe())
        .map_err(|e| e.to_string())?;
    let (dir, sync, regions) =
        attach_protocol(cfg, &net, &setup, npages, heap_used).map_err(|e| e.to_string())?;
    let nbarriers = sync.nbarriers;
    let areas = crate::fault::ViewAreas::for_node(cfg.mode != ExecMode::Threads, cfg.backend, npages);
    let protector = Protector::new(
        cfg.backend,
        &view,
        fabric.heap_ptr(ctx.node, 0) as usize,
        cfg.page_bytes,
        heap_used,
        areas,
    )
    .map_err(|e| format!("cannot set up the {} fault backend: {e}", cfg.backend))?;
    // A page has at most one twin at a node. The first TWINS_READY twins cost no
    // populating in the fault (`sys::slab`).
    let twins = sys::Slab::new(cfg.page_bytes, npages, npages.min(TWINS_READY))
        .map_err(|e| format!("cannot reserve address space for {npages} twins: {e}"))?;
    let mut node = Node::new(
        ctx.node,
        cfg.procs_per_node,
        cfg.page_bytes,
        cfg.protocol,
        net,
        view.addr(),
        fabric.heap_ptr(ctx.node, 0) as usize,
        setup.allocations.clone(),
        heap_used,
        dir,
        sync,
        regions,
        protector,
        twins,
    );
    if let Some(b) = cfg.test_knobs.diff_message_bytes {
        node.diff_message_bytes = b;
    }
    let node = Arc::new(node);
    if let Some(homes) = homes {
        for &(p, h) in homes {
            if (p as usize) < node.npages {
                node.preset_home(crate::ids::PageId(p), crate::ids::NodeId::from_usize(h as usize));
            }
        }
    }
    let registration = sys::register_fault_range(
        view.addr(),
        cfg.heap_bytes,
        Arc::as_ptr(&node) as usize,
        on_fault,
    )
    .map_err(|e| e.to_string())?;
    // Every node must have attached its receive regions before anyone transmits.
    ctx.startup_barrier().map_err(|e| e.to_string())?;
    let start = sys::monotonic_ns();
    let region = Arc::new(RegionCounters::default());
    let run = Run {
        cfg,
        node: &node,
        region: &region,
        sched: &sched,
        nbarriers,
    };
    let results = run.processors_and_service(&body);
    let elapsed_ns = match sched {
        // Modeled time: every processor's clock starts at 0 and its breakdown covers it
        // to its end.
        Some(_) => results
            .iter()
            .map(|(pr, _)| pr.run_breakdown.total_ns())
            .max()
            .unwrap_or(0),
        None => sys::monotonic_ns() - start,
    };
    drop(registration);
    let outcome = NodeOutcome {
        results,
        counters: counters_now(&node),
        region_counters: region.counted(),
        elapsed_ns,
        // The outcome carries bare page numbers, as the homes file does.
        homes: node.own_homes().into_iter().map(|p| p.0).collect(),
    };
    let bytes = serde_json::to_vec(&outcome).map_err(|e| e.to_string())?;
    drop(node);
    drop(view);
    Ok(bytes)
}

/// Maps node `node`'s application view of its heap: no access until the protocol opens
/// pages (through PROT_NONE or, under userfaultfd, through absent page table entries).
fn map_view(cfg: &Config, fabric: &Fabric, node: usize) -> Result<sys::Mapping, String> {
    let prot = Protector::initial_prot(cfg.backend);
    let offset = fabric.heap_file_offset(node);
    match cfg.mode {
        // One node per process: the view sits at the same address on every node.
        ExecMode::Processes | ExecMode::Mpi => sys::map_shared_fixed_noreplace(
            fabric.fd(),
            offset,
            cfg.heap_bytes,
            prot,
            PROCESS_VIEW_ADDR,
        ),
        ExecMode::Threads => sys::map_shared(fabric.fd(), offset, cfg.heap_bytes, prot),
    }
    .map_err(|e| {
        format!(
            "cannot map the shared heap: {e}; a memory or address-space limit (`ulimit -v`) is met here first: give a smaller heap with --heap-mb (or DSM_HEAP_MB), or fewer nodes"
        )
    })
}

/// Runs the program's setup on this node over `view`; returns what it laid out and the
/// body its processors run.
fn run_setup<S, B>(
    cfg: &Config,
    node: usize,
    view: &sys::Mapping,
    setup_fn: &S,
) -> Result<(Setup, B), String>
where
    S: Fn(&mut Setup) -> B,
{
    let mut setup = Setup {
        node,
        nodes: cfg.nodes,
        procs_per_node: cfg.procs_per_node,
        base: view.addr(),
        heap_bytes: cfg.heap_bytes,
        page_bytes: cfg.page_bytes,
        used: 0,
        allocations: Vec::new(),
        nlocks: 0,
        nbarriers: 0,
        nflags: 0,
        error: None,
    };
    let body = setup_fn(&mut setup);
    match setup.error.take() {
        Some(e) => Err(e.to_string()),
        None => Ok((setup, body)),
    }
}

/// Refuses a cluster whose views could need more memory mappings in this process than
/// `vm.max_map_count` allows: only mprotect splits a view into one mapping per page, and
/// only in-process clusters put every node's view in one process.
fn check_map_count(cfg: &Config, npages: usize) -> Result<(), String> {
    if cfg.mode != ExecMode::Threads || cfg.backend != FaultBackend::Mprotect {
        return Ok(());
    }
    let maps_per_node = npages + 16;
    let Some(limit) = sys::max_map_count() else {
        return Ok(());
    };
    if maps_per_node * cfg.nodes <= limit {
        return Ok(());
    }
    let need = maps_per_node * cfg.nodes;
    let others = format!(
        "--backend userfaultfd (one mapping per node; a build with --features dsm/userfaultfd), a larger vm.max_map_count (sysctl -w vm.max_map_count={need}), or fewer pages (fewer nodes, --page-kb 8, or a smaller input)"
    );
    Err(if cfg.clock == ClockMode::Modeled {
        format!(
            "{} nodes x {npages} pages could need {need} memory mappings in one process, above vm.max_map_count = {limit}; the modeled clock runs every node in this process (--exec processes is not available there), so use {others}",
            cfg.nodes
        )
    } else {
        format!(
            "{} nodes x {npages} pages could need {need} memory mappings in one process, above vm.max_map_count = {limit}; use --exec processes (one node per process), {others}",
            cfg.nodes
        )
    })
}

/// Allocates and attaches the protocol's regions of the network address space, in the
/// same order on every node: the directory, the synchronization objects (one barrier
/// more than the program's: the engine's own, at the end of the run), the master copies
/// under remote-write data, and the broadcast buffers under adaptive broadcast.
fn attach_protocol(
    cfg: &Config,
    net: &Net,
    setup: &Setup,
    npages: usize,
    heap_used: usize,
) -> Result<(Directory, SyncState, Regions), DsmError> {
    let proto = cfg.protocol;
    let dir = match proto.metadata {
        MetadataStrategy::Replicated => Directory::replicated(
            net,
            npages,
            proto.home == crate::config::HomePolicy::Migrating,
            cfg.test_knobs.notice_ring_capacity,
        )?,
        MetadataStrategy::HomeHeld => Directory::home_held(npages),
    };
    let sync = SyncState::new(
        proto.sync,
        net,
        setup.nlocks,
        setup.nbarriers + 1,
        setup.nflags,
    )?;
    let data = match proto.data {
        DataStrategy::RemoteWrite => {
            let space = net.space_left();
            if heap_used as u64 > space {
                return Err(DsmError::DataSetTooLarge {
                    data_mib: heap_used as f64 / (1 << 20) as f64,
                    space_mib: cfg
                        .profile
                        .address_space_bytes
                        .min(crate::profile::MAX_SIMULATED_ADDRESS_SPACE)
                        >> 20,
                    network: cfg.profile.title.to_string(),
                    protocol: proto.name.to_string(),
                });
            }
            Some(
                net.alloc_region(
                    heap_used as u64,
                    Backing::Heap { heap_offset: 0 },
                    "master copies of shared data",
                )?
                .unawaited(),
            )
        }
        DataStrategy::Messages => None,
    };
    let broadcast = if proto.adaptive_broadcast {
        Some(crate::broadcast::Broadcast::new(
            net,
            npages,
            cfg.page_bytes,
            cfg.test_knobs
                .broadcast_slots_per_node
                .unwrap_or(npages.clamp(1, 256)),
        )?)
    } else {
        None
    };
    Ok((dir, sync, Regions { data, broadcast }))
}

/// What the threads of one node's run share.
struct Run<'a> {
    cfg: &'a Config,
    node: &'a Arc<Node>,
    region: &'a Arc<RegionCounters>,
    sched: &'a Option<Arc<crate::sched::Sched>>,
    /// The synchronization strategy's barriers; the last is the engine's final one.
    nbarriers: usize,
}

impl Run<'_> {
    /// Runs the node's processors on `body` and its service thread until every processor
    /// has finished; returns each processor's report and result. A processor that panics
    /// is reported (the first real failure, not one the abort stopped) by unwinding.
    fn processors_and_service<B, R>(&self, body: &B) -> Vec<(ProcReport, R)>
    where
        B: Fn(&Proc) -> R + Sync,
        R: Send,
    {
        let node = self.node;
        // Wall clock: the cores the node's processors run on (`wait`, "Placement").
        let proc_cores = (self.sched.is_none()
            && self.cfg.pinning == crate::config::Pinning::Auto
            && self.cfg.mode != ExecMode::Mpi)
            .then(|| {
                let cpus = sys::allowed_cpus();
                crate::wait::placement(self.cfg.nodes, self.cfg.procs_per_node, node.id.index(), &cpus)
            })
            .flatten()
            .and_then(crate::wait::CoreClaim::take);
        let proc_cores = &proc_cores;
        std::thread::scope(|s| {
            let service = {
                let node = Arc::clone(node);
                let sched = self.sched.clone();
                std::thread::Builder::new()
                    .name(format!("dsm-service-{}", node.id.index()))
                    .spawn_scoped(s, move || {
                        let _activity = sched
                            .as_ref()
                            .map(|s| crate::sched::Activity::start(s, node.id.index(), None));
                        // Wall clock: the wait policy counts the threads that want cores.
                        let _running = sched.is_none().then(|| node.net.running());
                        let _movable = proc_cores.is_some().then(|| node.net.service_movable());
                        node.serve()
                    })
                    .expect("cannot start the service thread")
            };
            let handles: Vec<_> = (0..self.cfg.procs_per_node)
                .map(|local| {
                    std::thread::Builder::new()
                        .name(format!("dsm-proc-{}-{local}", node.id.index()))
                        .spawn_scoped(s, move || {
                            if let Some(claim) = proc_cores {
                                // A binding that fails leaves the kernel to place the thread.
                                if sys::pin_thread(claim.cores()[local]).is_ok() {
                                    node.net.bound_to(claim.cores()[local]);
                                }
                            }
                            self.processor(local, body)
                        })
                        .expect("cannot start a processor thread")
                })
                .collect();
            let mut out = Vec::new();
            let mut panic: Option<Box<dyn std::any::Any + Send>> = None;
            for h in handles {
                match h.join() {
                    Ok(r) => out.push(r),
                    // Report the processor that failed first, not one the abort stopped.
                    Err(p) => {
                        if panic.as_ref().is_none_or(|first| {
                            is_abort_panic(first.as_ref()) && !is_abort_panic(p.as_ref())
                        }) {
                            panic = Some(p);
                        }
                    }
                }
            }
            node.stop_service();
            let _ = service.join();
            if let Some(p) = panic {
                std::panic::resume_unwind(p);
            }
            out
        })
    }

    /// Processor `local`'s thread: runs `body`, then the engine's final barrier (no node
    /// stops serving while others may still need its pages).
    fn processor<B, R>(&self, local: usize, body: &B) -> (ProcReport, R)
    where
        B: Fn(&Proc) -> R,
    {
        let node = self.node;
        sys::ensure_alt_stack().expect("cannot set up the signal stack");
        // Modeled time on a platform whose arithmetic flushes subnormals: compute as it
        // does (`Platform::flush_denormals`; the harness's sequential run does the same).
        if self.sched.is_some() && self.cfg.platform.flush_denormals {
            sys::set_flush_denormals(true);
        }
        crate::engine::set_current_slot(Some(local as u16));
        // Modeled time: this processor becomes an activity of the scheduler; it ends (and
        // passes the baton on) when dropped, also when the processor panics.
        let activity = self
            .sched
            .as_ref()
            .map(|s| crate::sched::Activity::start(s, node.id.index(), Some(local)));
        let _running = self.sched.is_none().then(|| node.net.running());
        // Wall clock, on a transport whose arrivals ring no doorbell: the processor looks
        // for its node's messages at the work it counts, as Cashmere's processors poll on
        // loop back-edges (`wait`, "Polling while computing").
        let _poll_point = (self.sched.is_none() && !node.net.rings_on_arrival()).then(|| {
            let hook: Arc<dyn crate::wait::Serve + Send + Sync> = node.clone();
            crate::wait::set_poll_point(hook)
        });
        let p = Proc {
            id: node.id.index() * node.procs + local,
            local,
            node: Arc::clone(node),
            region: Arc::clone(self.region),
        };
        Clock::start();
        // A processor that panics stops the whole cluster at once: the others may be
        // waiting for it (a lock it holds, a barrier), and this node cannot report until
        // they finish.
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&p))) {
            Ok(r) => r,
            Err(payload) => {
                // The first real failure is recorded as the origin of the abort before
                // anyone else can stop on it.
                crate::launch::record_failure(
                    p.node.net.fabric(),
                    p.node.id.index(),
                    &crate::launch::panic_message(payload.as_ref()),
                );
                std::panic::resume_unwind(payload);
            }
        };
        p.node.sync.final_barrier(&*p.node, self.nbarriers - 1);
        p.node.finish();
        let (run_breakdown, timed, work) = Clock::stop();
        drop(activity);
        crate::engine::set_current_slot(None);
        sys::drop_alt_stack();
        (
            ProcReport {
                id: p.id,
                node: p.node.id.index(),
                breakdown: timed.map_or(run_breakdown, |t| t.breakdown),
                run_breakdown,
                timed,
                work,
            },
            r,
        )
    }
}

/// The engine as the synchronization strategies see it (`crate::sync`, "The engine's
/// interface").
impl SyncHost for Node {
    fn net(&self) -> &crate::net::Net {
        &self.net
    }
    fn node(&self) -> crate::ids::NodeId {
        self.id
    }
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn procs(&self) -> usize {
        self.procs
    }
    fn counters(&self) -> &crate::stats::NodeCounters {
        &self.counters
    }
    fn slot(&self) -> u16 {
        crate::engine::my_slot(self)
    }
    fn seam(&self) -> crate::wait::Seam<'_> {
        Node::seam(self)
    }
    fn release(&self) {
        Node::release(self)
    }
    fn acquire(&self) {
        Node::acquire(self)
    }
}
