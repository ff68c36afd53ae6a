//! Randomized data-race-free programs, compared with a sequential model.
//!
//! Each program runs rounds over a small shared heap (a few pages, so every page is
//! shared and falsely shared): in every round each processor writes the words a seeded
//! partition gives it, adds to lock-protected counters, and publishes a block behind a
//! flag; after a barrier every processor checks every word against the sequential model.
//! Two more patterns exercise the variants' optimizations: *solo* pages, each written by
//! one processor for the whole run and read by all after each round (exclusive mode, and
//! under the -Mg variants one migration to the writer), and *wide* pages, written by a
//! rotating processor and then read by every processor at once (adaptive broadcast), and
//! *far* pages, homed by a homes file at a node the seed picks, written in every round by
//! one processor that changes now and then (sometimes joined by one or two others, each
//! writing its share of the words, before or after its lock-protected updates) and read
//! after the round by a seeded few (often none, sometimes the home's), so that a page often
//! has one sharer that is not its home (exclusive mode away from the home, section 2.2),
//! whose writes stay there over several releases until a reader recalls them, or which
//! holds a notice from a writer that left before it went exclusive. The
//! random partition moves every word's owner at every round, so pages ping-pong between
//! writers (many migrations).
//!
//! The classes of issue 16, section 2, each under all seven variants, on both backends,
//! in threads and in processes, on 2-8 nodes x 1-4 processors (one shape per seed):
//! *sub-word* false sharing (u8 and u16 fields of one 8-byte word owned by processors of
//! different nodes, next to u16 counters updated under locks); *split diffs* (16 KiB pages
//! written by two or three nodes, each every second or third byte, so that a diff takes
//! two to four messages, with a release after every page so that under home migration the
//! home moves while a diff is on its way; `split_diff_redirects` counts it, and the litmus
//! test `the_home_moves_in_the_middle_of_a_split_diff` makes it happen every time);
//! *lock chains* (records interleaved over the same pages, record k rewritten under locks
//! k - 1 and k after reading record k - 1, read whole under all the locks, also by the
//! processors of the pages' homes); *notice overflow* (the main program with write-notice
//! rings of 1-8 notices, `Config::test_knobs`, so that receivers invalidate everything;
//! `notice_overflows` must grow); *slot reuse* (the main program with one or two broadcast
//! slots per node, so that CSM-ADB's pages evict each other; `broadcast_evictions` must
//! grow). A sweep prints each variant's counters and asserts the ones that prove its class
//! reached its path (not when replaying one seed).
//!
//! Timing: the host's clock (threads, processes or MPI ranks), the modeled clock, and the
//! modeled clock with jittered wake-ups (`Timing::Jittered`), under which a woken processor
//! or service sometimes runs milliseconds late while the other nodes run on, in an order
//! its seed fixes (a test checks that a case replays exactly).
//!
//! Seeds: by default every sweep runs a few seeds, chosen so that together they cover every
//! class, variant, backend, mode and clock with one and with several processors per node;
//! `DSM_LONG_SWEEPS=1` runs the wide seed ranges (about 20 times as many runs). A failure
//! names its seed, its configuration and the command that replays it: `DSM_SEED=<seed>`
//! replays just that seed (in every sweep of the test), `DSM_BACKEND` one backend. Under the
//! modeled clock, `DSM_CPU_SCALE=0` makes a seed's run deterministic (only the declared
//! computation counts). `DSM_KEEP_GOING=1` reports every failing case, then fails, instead
//! of stopping at the first; `DSM_TRACE_CASES=1` prints every case and its counters.

mod support;
use support::{backends, HomesFile};
use dsm::{ClockMode, Cluster, Config, Counters, ExecMode, FaultBackend, Protocol};
use std::ops::Range;
use protocol_variants::{ALL, CSM_DMS, CSM_MS, CSM_NONE, CSM_S};

const WORDS: usize = 1536; // three 4 KiB pages of u64... plus a bit: 12 KiB
const COUNTERS: usize = 64;
const LOCKS: usize = 8;
const ROUNDS: usize = 4;
/// u64 words in one 4 KiB page.
const PAGE_WORDS: usize = 512;
const WIDE_PAGES: usize = 2;
const FAR_PAGES: usize = 3;

use dsm::testing::SplitMix64 as Rng;

/// The owner of each word in a round: a seeded random partition (not blocks), so owners
/// interleave within pages.
fn owners(seed: u64, round: usize, nprocs: usize) -> Vec<usize> {
    let mut r = Rng(seed ^ (round as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    (0..WORDS).map(|_| r.below(nprocs)).collect()
}

fn value(round: usize, word: usize, owner: usize) -> u64 {
    ((round as u64 + 1) << 48) ^ ((owner as u64) << 32) ^ (word as u64 * 2_654_435_761)
}

/// The increments processor `proc` makes to the counters in `round`.
fn increments(seed: u64, round: usize, proc: usize) -> Vec<(usize, u64)> {
    let mut r = Rng(seed ^ 0x5555 ^ ((round * 131 + proc) as u64) << 20);
    (0..1 + r.below(12))
        .map(|_| (r.below(COUNTERS), 1 + r.below(1000) as u64))
        .collect()
}

/// The processors that write far page `f` in `round`, each the words whose index modulo
/// their number is its place in the list: a main writer, seeded and kept from one round to
/// the next two times in three, joined one round in four by one or two others.
fn far_writers(seed: u64, round: usize, f: usize, nprocs: usize) -> Vec<usize> {
    let mut r = Rng(seed ^ 0xFA5 ^ (f as u64) << 24);
    let mut w = r.below(nprocs);
    for _ in 0..round {
        if r.below(3) == 0 {
            w = r.below(nprocs);
        }
    }
    let mut r = Rng(seed ^ 0xFA8 ^ ((round * 64 + f) as u64) << 24);
    let mut out = vec![w];
    if r.below(4) == 0 {
        for _ in 0..1 + r.below(2) {
            let o = r.below(nprocs);
            if !out.contains(&o) {
                out.push(o);
            }
        }
    }
    out
}

/// Whether processor `me` writes its share of far page `f` after its lock-protected
/// updates of `round` rather than before (one in two, seeded).
fn far_late(seed: u64, round: usize, f: usize, me: usize) -> bool {
    Rng(seed ^ 0xFA9 ^ ((round * 64 + f) as u64) << 16 ^ (me as u64) << 40).below(2) == 0
}

/// Whether processor `me` reads far page `f` after `round` (one in five, seeded).
fn far_reads(seed: u64, round: usize, f: usize, me: usize) -> bool {
    Rng(seed ^ 0xFA6 ^ ((round * 64 + f) as u64) << 16 ^ (me as u64) << 40).below(5) == 0
}

/// The far pages' homes (`Config::homes_file`), one seeded node each. The far pages come
/// after the other allocations, whose sizes are fixed (all page-aligned).
fn far_homes(seed: u64, nodes: usize, nprocs: usize) -> Vec<(usize, usize)> {
    let first = (WORDS * 8).div_ceil(4096)
        + (COUNTERS * 8).div_ceil(4096)
        + (ROUNDS * 16 * 8).div_ceil(4096)
        + nprocs
        + WIDE_PAGES;
    let mut r = Rng(seed ^ 0xFA7);
    (0..FAR_PAGES)
        .map(|f| (first + f, r.below(nodes)))
        .collect()
}


#[allow(clippy::needless_range_loop)] // rounds index several arrays and the model
fn run_program(case: &Case, files: &mut Vec<HomesFile>) -> Result<Counters, String> {
    let (nodes, procs, seed) = (case.nodes, case.procs, case.seed);
    let mut c = case.config();
    c.heap_bytes = 1 << 20;
    c.page_bytes = 4096;
    let nprocs = nodes * procs;
    // With an initialization, homes go to the first touchers after it (no homes file).
    let init = case.class == Class::Initialized;
    if !init {
        let homes = HomesFile::new(&case.file_name(), &far_homes(seed, nodes, nprocs));
        c.homes_file = Some(homes.0.clone());
        // Kept until the sweep ends: the node processes of a later case re-run this one
        // (and skip it), reading its homes file again.
        files.push(homes);
    }
    let r = Cluster::new(c).run(|s| {
        let words = s.alloc_named::<u64>(WORDS, "words");
        let counters = s.alloc_named::<u64>(COUNTERS, "counters");
        let published = s.alloc_named::<u64>(ROUNDS * 16, "published");
        let solo = s.alloc_named::<u64>(nprocs * PAGE_WORDS, "solo");
        let wide = s.alloc_named::<u64>(WIDE_PAGES * PAGE_WORDS, "wide");
        let far = s.alloc_named::<u64>(FAR_PAGES * PAGE_WORDS, "far");
        let locks = s.locks(LOCKS);
        let flags = s.flags(ROUNDS);
        let bar = s.barrier();
        or_panic(move |p: &dsm::Proc| -> Result<(), String> {
            let me = p.id();
            let mut expect_counters = vec![0u64; COUNTERS];
            if init {
                initialize(p, seed, [words, counters, solo, wide, far], bar)?;
                expect_counters = (0..COUNTERS).map(|c| init_value(1, c)).collect();
            }
            for round in 0..ROUNDS {
                let own = owners(seed, round, nprocs);
                // Owned writes, in a seeded order.
                let mut mine: Vec<usize> = (0..WORDS).filter(|&w| own[w] == me).collect();
                let mut r = Rng(seed ^ (me as u64) << 8 ^ round as u64);
                for i in (1..mine.len()).rev() {
                    mine.swap(i, r.below(i + 1));
                }
                // Each word written is counted work: under MPI a processor looks for its
                // node's messages there and handles them in the middle of its writes
                // (`dsm::work`; elsewhere a count only tallies).
                for &w in &mine {
                    words.set(w, value(round, w, me));
                    p.count_work(0, 1);
                }
                // Solo page: only this processor ever writes it.
                for k in 0..PAGE_WORDS {
                    solo.set(me * PAGE_WORDS + k, value(round, k, me));
                    p.count_work(0, 1);
                }
                // Wide pages: one writer per round, read by everyone after the barrier.
                if me == (round * 7 + seed as usize) % nprocs {
                    for k in 0..WIDE_PAGES * PAGE_WORDS {
                        wide.set(k, value(round, k, 77));
                    }
                }
                // Far pages: this round's writers write their shares, before or after
                // their lock-protected updates.
                let write_far = |late: bool| {
                    for f in 0..FAR_PAGES {
                        let writers = far_writers(seed, round, f, nprocs);
                        let Some(j) = writers.iter().position(|&w| w == me) else {
                            continue;
                        };
                        if far_late(seed, round, f, me) != late {
                            continue;
                        }
                        for k in (j..PAGE_WORDS).step_by(writers.len()) {
                            far.set(f * PAGE_WORDS + k, value(round, k, 1000 + f));
                        }
                    }
                };
                write_far(false);
                // Lock-protected counters.
                for (c, add) in increments(seed, round, me) {
                    let l = locks[c % LOCKS];
                    // Declared computation (modeled clock only) varies the interleaving
                    // from seed to seed even when no CPU time is counted.
                    p.compute(r.below(20_000) as u64);
                    l.acquire(p);
                    counters.set(c, counters.get(c) + add);
                    l.release(p);
                }
                write_far(true);
                // The round's publisher fills a block and sets the round's flag.
                let publisher = round % nprocs;
                if me == publisher {
                    for k in 0..16 {
                        published.set(round * 16 + k, value(round, k, 99));
                    }
                    flags[round].set(p);
                } else {
                    flags[round].wait(p);
                    for k in 0..16 {
                        let got = published.get(round * 16 + k);
                        if got != value(round, k, 99) {
                            return Err(format!("proc {me}: published[{round}][{k}] = {got:#x} after the flag"));
                        }
                    }
                }
                bar.wait(p);
                for f in 0..FAR_PAGES {
                    if far_reads(seed, round, f, me) {
                        for k in (0..PAGE_WORDS).step_by(7) {
                            let got = far.get(f * PAGE_WORDS + k);
                            if got != value(round, k, 1000 + f) {
                                return Err(format!("proc {me}, round {round}: far page {f}, word {k} = {got:#x}"));
                            }
                        }
                    }
                }
                for k in 0..WIDE_PAGES * PAGE_WORDS {
                    let got = wide.get(k);
                    if got != value(round, k, 77) {
                        return Err(format!("proc {me}, round {round}: wide word {k} = {got:#x}"));
                    }
                }
                for q in 0..nprocs {
                    for k in (0..PAGE_WORDS).step_by(61) {
                        let got = solo.get(q * PAGE_WORDS + k);
                        if got != value(round, k, q) {
                            return Err(format!("proc {me}, round {round}: solo page of proc {q}, word {k} = {got:#x}"));
                        }
                    }
                }
                for (w, &o) in own.iter().enumerate() {
                    let got = words.get(w);
                    if got != value(round, w, o) {
                        return Err(format!("proc {me}, round {round}: word {w} = {got:#x}, expected {:#x} (owner {o})", value(round, w, o)));
                    }
                }
                for q in 0..nprocs {
                    for (c, add) in increments(seed, round, q) {
                        expect_counters[c] += add;
                    }
                }
                for (c, &want) in expect_counters.iter().enumerate() {
                    let got = counters.get(c);
                    if got != want {
                        return Err(format!("proc {me}, round {round}: counter {c} = {got}, expected {want}"));
                    }
                }
                bar.wait(p);
            }
            Ok(())
        })
    });
    finish(r)
}

/// The value the initializer writes into word `i` of array `a` (class `Initialized`).
fn init_value(a: usize, i: usize) -> u64 {
    (a as u64) << 32 | (i as u64 * 7 + 1)
}

/// The initialization of class `Initialized`: one processor (the seed picks it) writes
/// every array of the main program, but for a seeded part of the far pages, which get no
/// home until the rounds touch them; then `Barrier::end_initialization`; then every
/// processor checks a sample of every array, so that the homes the rounds start from are
/// those of the first touchers after initialization, mixed with plain first touches.
fn initialize(
    p: &dsm::Proc,
    seed: u64,
    arrays: [dsm::Shared<u64>; 5],
    bar: dsm::Barrier,
) -> Result<(), String> {
    let untouched = |a: usize, i: usize| a == 4 && (seed >> (i / PAGE_WORDS)) & 1 == 1;
    if p.id() == seed as usize % p.nprocs() {
        for (a, arr) in arrays.iter().enumerate() {
            for i in (0..arr.len()).filter(|&i| !untouched(a, i)) {
                arr.set(i, init_value(a, i));
            }
        }
    }
    bar.end_initialization(p);
    // The initializer's node samples last, so that other nodes touch pages first; each
    // processor starts its sample at its own array and page, so that first touches after
    // initialization come from every node.
    let initializer_node = seed as usize % p.nprocs() / p.procs_per_node();
    if p.node() == initializer_node {
        bar.wait(p);
    }
    for j in 0..arrays.len() {
        let a = (j + p.id()) % arrays.len();
        let arr = arrays[a];
        let start = p.id() * PAGE_WORDS % arr.len();
        for i in (0..arr.len()).step_by(97).map(|k| (k + start) % arr.len()) {
            let want = if untouched(a, i) { 0 } else { init_value(a, i) };
            let got = arr.get(i);
            if got != want {
                return Err(format!(
                    "proc {} after initialization: array {a}, word {i} = {got:#x}, expected {want:#x}",
                    p.id()
                ));
            }
        }
    }
    if p.node() != initializer_node {
        bar.wait(p);
    }
    // The rounds write what the samples read.
    bar.wait(p);
    Ok(())
}

/// A processor's body that panics on a failed check. A processor that returned early
/// would leave the others waiting at the next barrier for ever; a panic fails its node,
/// which aborts the cluster, and the run's error names the node and the check.
fn or_panic(body: impl Fn(&dsm::Proc) -> Result<(), String> + Sync) -> impl Fn(&dsm::Proc) + Sync {
    move |p| body(p).unwrap_or_else(|e| panic!("{e}"))
}

/// A run's outcome: its counters if every processor's checks passed (empty counters for
/// a run a node process skips).
fn finish(r: Result<dsm::Report<()>, dsm::DsmError>) -> Result<Counters, String> {
    match dsm::skip_other_run(r) {
        Ok(None) => Ok(Counters::default()),
        Err(e) => Err(e.to_string()),
        Ok(Some(rep)) => {
            if std::env::var_os("DSM_TRACE_CASES").is_some() {
                let k = &rep.counters;
                eprintln!(
                    "  exclusive entries {} exits {}, flushes before drop {}, deferred {}, \
                     migrations {}, diffs {} in {} messages ({} redirected midway), \
                     broadcast {} (evicting {}), notice overflows {}",
                    k.exclusive_entries,
                    k.exclusive_exits,
                    k.flushes_before_drop,
                    k.deferred_messages,
                    k.migrations,
                    k.diffs,
                    k.diff_messages,
                    k.split_diff_redirects,
                    k.pages_broadcast,
                    k.broadcast_evictions,
                    k.notice_overflows,
                );
            }
            Ok(rep.counters)
        }
    }
}

/// Whether `DSM_LONG_SWEEPS=1` asks for the wide seed ranges.
fn long_sweeps() -> bool {
    std::env::var("DSM_LONG_SWEEPS").is_ok_and(|v| v == "1")
}

/// The seeds a sweep runs: `DSM_SEED` alone if set, else `default`, or `long` under
/// `DSM_LONG_SWEEPS=1`.
fn seeds(default: &[u64], long: Range<u64>) -> Vec<u64> {
    match std::env::var("DSM_SEED") {
        Ok(s) => vec![s.parse().expect("DSM_SEED must be a number")],
        Err(_) if long_sweeps() => long.collect(),
        Err(_) => default.to_vec(),
    }
}

/// Whether this run replays one seed (`DSM_SEED`): a sweep's evidence that a path was
/// reached is then not asserted (one seed need not reach it).
fn replaying() -> bool {
    std::env::var_os("DSM_SEED").is_some()
}


/// The cluster shapes a seed runs: the classic 2-4 nodes x 1 and 2 processors, or with
/// `wide`, 2-8 nodes x 1-4 processors (one shape per seed).
fn shapes(seed: u64, wide: bool) -> Vec<(usize, usize)> {
    if wide {
        vec![(2 + (seed as usize % 7), 1 + (seed as usize / 7) % 4)]
    } else {
        vec![(2 + (seed as usize % 3), 1), (2 + (seed as usize % 3), 2)]
    }
}

/// What a run of the suite exercises: the main program, or one of the classes of
/// section 2 of issue 16 (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// The main program (module doc).
    Main,
    /// The main program with a write-notice ring of a few notices (test knob): releases
    /// overflow it, and the receivers invalidate everything they cache.
    NoticeOverflow,
    /// The main program with one or two broadcast slots per node (test knob), so that
    /// CSM-ADB's pages of one home evict each other from its slots.
    SlotReuse,
    /// u8 and u16 fields of one 8-byte word owned by processors of different nodes.
    SubWord,
    /// 16 KiB pages whose diffs take several messages, written by several nodes in phases
    /// so that under home migration the home moves while a diff is on its way.
    SplitDiffs,
    /// Lock chains over records spanning several pages.
    LockChains,
    /// The main program after an initialization by one processor that ends with
    /// `Barrier::end_initialization`, without a homes file: homes move to the first
    /// toucher after initialization (section 2.3.1).
    Initialized,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Main => "main",
            Class::NoticeOverflow => "notice-overflow",
            Class::SlotReuse => "slot-reuse",
            Class::SubWord => "sub-word",
            Class::SplitDiffs => "split-diffs",
            Class::LockChains => "lock-chains",
            Class::Initialized => "initialized",
        }
    }
}

/// Widens the window of a first-touch claim (issue 16's lost update: a claimant that
/// received other nodes' diffs while its claim was in flight): one claim in three yields
/// the host CPU 1 to 64 times before it asks the page's manager, so that meanwhile other
/// processors, of this node and others, learn the winner, fetch the page, write it under
/// locks and release. (A deterministic version of the scenario is `tests/first_touch.rs`.)
fn widen_claim(node: usize, page: usize) {
    static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut r = Rng(n ^ (node as u64) << 40 ^ (page as u64) << 8);
    if r.below(3) == 0 {
        for _ in 0..1 + r.below(64) {
            std::thread::yield_now();
        }
    }
}

/// How a case's time runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Timing {
    /// The host's clock.
    Wall,
    /// The modeled clock: one simulation, one activity at a time (`dsm::sched`).
    Modeled,
    /// The modeled clock with every wake-up delayed by a seeded draw (test knob
    /// `wake_jitter`: none for seven in eight, up to 2 ms of virtual time for the eighth,
    /// several round trips) and no measured computation: each seed runs one deterministic
    /// interleaving of its own, which the seed replays exactly.
    Jittered,
}

impl Timing {
    fn clock(self) -> ClockMode {
        match self {
            Timing::Wall => ClockMode::Wall,
            Timing::Modeled | Timing::Jittered => ClockMode::Modeled,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Timing::Wall => "wall",
            Timing::Modeled => "modeled",
            Timing::Jittered => "jittered",
        }
    }
}

/// One run of a sweep.
struct Case {
    class: Class,
    proto: Protocol,
    backend: FaultBackend,
    nodes: usize,
    procs: usize,
    mode: ExecMode,
    seed: u64,
    timing: Timing,
}

impl Case {
    /// The case in words, with its seed.
    fn describe(&self) -> String {
        format!(
            "class {} under {} on {} with {} nodes x {} procs ({}, {} clock), seed {}",
            self.class.name(),
            self.proto.name,
            self.backend,
            self.nodes,
            self.procs,
            self.mode,
            self.timing.name(),
            self.seed
        )
    }

    /// The command that replays this case's seed (the test's name is the running test's).
    fn replay(&self) -> String {
        format!(
            "replay with: DSM_SEED={} DSM_BACKEND={} cargo test -p dsm{} --test random_drf {} -- --exact",
            self.seed,
            self.backend,
            if self.backend == FaultBackend::Userfaultfd { " --features userfaultfd" } else { "" },
            std::thread::current().name().filter(|&n| n != "main").unwrap_or("TEST_NAME")
        )
    }

    /// The configuration every class starts from.
    fn config(&self) -> Config {
        // Every case's first-touch claims are widened (the hook is the process's, set
        // alike in the node processes, which run this same code).
        dsm::testing::set_claim_hook(Some(widen_claim));
        let mut c = Config::new(self.nodes, self.procs, self.proto);
        c.clock = self.timing.clock();
        if self.timing == Timing::Jittered {
            // The case's own draws: its seed, variant and shape.
            let id = self.seed << 16 ^ (self.nodes as u64) << 8 ^ self.procs as u64;
            let variant = self.proto.name.bytes().fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b));
            c.test_knobs.wake_jitter = Some(dsm::WakeJitter {
                seed: id ^ variant << 24,
                max_ns: 2_000_000,
                one_in: 8,
            });
            c.cpu_scale = 0.0;
        }
        // DSM_CPU_SCALE=0 makes a modeled run deterministic (no measured computation).
        if let Ok(v) = std::env::var("DSM_CPU_SCALE") {
            c.cpu_scale = v.parse().expect("DSM_CPU_SCALE must be a number");
        }
        c.backend = self.backend;
        c.mode = self.mode;
        c.heap_bytes = 1 << 20;
        c.page_bytes = 4096;
        match self.class {
            // 1, 2, 4 or 8 notices per ring: the main program's releases notice many more.
            Class::NoticeOverflow => {
                c.test_knobs.notice_ring_capacity = Some(1 << (self.seed % 4));
            }
            // One or two slots per node for its dozen pages and more.
            Class::SlotReuse => c.test_knobs.broadcast_slots_per_node = Some(1 + self.seed as usize % 2),
            _ => {}
        }
        c
    }

    /// A homes file name unique to this case (and to the launching process).
    fn file_name(&self) -> String {
        format!(
            "drf-{}-{}-{}x{}-{}-{}-{}-{}",
            self.class.name(),
            self.proto.name,
            self.nodes,
            self.procs,
            self.seed,
            self.mode,
            self.timing.name(),
            self.backend
        )
    }

    fn run(&self, files: &mut Vec<HomesFile>) -> Result<Counters, String> {
        match self.class {
            Class::Main | Class::NoticeOverflow | Class::SlotReuse | Class::Initialized => {
                run_program(self, files)
            }
            Class::SubWord => run_sub_word(self),
            Class::SplitDiffs => run_split_diffs(self),
            Class::LockChains => run_lock_chains(self, files),
        }
    }
}

/// How long one case may run before the sweep calls it hung: a case takes well under a
/// second on an idle host, so this is only a bound on a busy one. `DSM_CASE_LIMIT_S`
/// overrides it.
const CASE_LIMIT_S: u64 = 600;

/// Ends the test process with the hung case's seed and replay command if a case runs
/// longer than [`CASE_LIMIT_S`]: a protocol deadlock must fail the sweep with its seed, not
/// stall CI until its own limit. (The wait seam reports every stalled wait after 30 s;
/// this names the case.)
struct Watchdog {
    tell: std::sync::mpsc::Sender<Option<(String, String)>>,
}

impl Watchdog {
    fn start() -> Watchdog {
        let limit = std::env::var("DSM_CASE_LIMIT_S")
            .map(|v| v.parse().expect("DSM_CASE_LIMIT_S must be a number of seconds"))
            .unwrap_or(CASE_LIMIT_S);
        let (tell, told) = std::sync::mpsc::channel::<Option<(String, String)>>();
        let test = std::thread::current().name().unwrap_or("the test").to_string();
        std::thread::spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            let mut running: Option<(String, String)> = None;
            loop {
                let next = match &running {
                    Some(_) => told.recv_timeout(std::time::Duration::from_secs(limit)),
                    None => told.recv().map_err(|_| RecvTimeoutError::Disconnected),
                };
                match next {
                    Ok(case) => running = case,
                    Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => {
                        let (what, replay) = running.take().expect("a case runs");
                        // Past the test harness's capture of `eprintln!`, which exit
                        // would discard.
                        use std::io::Write;
                        let _ = writeln!(
                            std::io::stderr(),
                            "{test}: {what} has run for over {limit} s: hung\n{replay}"
                        );
                        std::process::exit(101);
                    }
                }
            }
        });
        Watchdog { tell }
    }

    fn running(&self, case: &Case) {
        let _ = self.tell.send(Some((case.describe(), case.replay())));
    }

    fn done(&self) {
        let _ = self.tell.send(None);
    }
}

/// Runs `class` over `protos` x the backends x `seeds` x `shapes(seed)`, in `mode` and
/// under `clock`; panics at the first failure with the command that replays it (or with
/// `DSM_KEEP_GOING`, reports every failure and panics at the end). Returns the counters
/// of each protocol, summed over its runs.
fn sweep_cases(
    class: Class,
    protos: &[Protocol],
    mode: ExecMode,
    seeds: &[u64],
    shapes: impl Fn(u64) -> Vec<(usize, usize)>,
    timing: Timing,
) -> Vec<(Protocol, Counters)> {
    let mut files = Vec::new();
    let mut sums: Vec<(Protocol, Counters)> =
        protos.iter().map(|&p| (p, Counters::default())).collect();
    let mut failures = Vec::new();
    let watchdog = Watchdog::start();
    for backend in backends() {
        for &seed in seeds {
            for (i, &proto) in protos.iter().enumerate() {
                for (nodes, procs) in shapes(seed) {
                    let case = Case { class, proto, backend, nodes, procs, mode, seed, timing };
                    if std::env::var_os("DSM_TRACE_CASES").is_some() {
                        eprintln!(
                            "case: {} seed {seed} {} {nodes}x{procs} {mode} {backend}",
                            class.name(),
                            proto.name
                        );
                    }
                    watchdog.running(&case);
                    let outcome = case.run(&mut files);
                    watchdog.done();
                    match outcome {
                        Ok(k) => sums[i].1.add(&k),
                        Err(e) => {
                            let what = format!("{} failed: {e}\n{}", case.describe(), case.replay());
                            if std::env::var_os("DSM_KEEP_GOING").is_none() {
                                panic!("{what}");
                            }
                            eprintln!("FAIL {what}");
                            failures.push(what);
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failing cases:\n{}", failures.len(), failures.join("\n"));
    sums
}

fn sweep(protos: &[Protocol], mode: ExecMode, default: &[u64], long: Range<u64>) {
    sweep_clock(protos, mode, default, long, false, Timing::Wall)
}

fn sweep_shapes(protos: &[Protocol], mode: ExecMode, default: &[u64], long: Range<u64>) {
    sweep_clock(protos, mode, default, long, true, Timing::Wall)
}

fn sweep_clock(
    protos: &[Protocol],
    mode: ExecMode,
    default: &[u64],
    long: Range<u64>,
    wide: bool,
    timing: Timing,
) {
    sweep_cases(Class::Main, protos, mode, &seeds(default, long), |s| shapes(s, wide), timing);
}

// The sweeps of the main program. Each default range is small: together they run every
// variant on both backends in both modes, with one and two processors per node, and under
// the modeled clock; DSM_LONG_SWEEPS=1 runs the wide ranges.

#[test]
fn random_programs_match_the_model_with_threads() {
    sweep(&[CSM_DMS, CSM_NONE], ExecMode::Threads, &[0, 1, 2, 3], 0..100);
}

#[test]
fn random_programs_match_the_model_with_processes() {
    sweep(&[CSM_DMS, CSM_NONE], ExecMode::Processes, &[1000], 1000..1030);
}

#[test]
fn random_programs_match_the_model_under_the_mixed_variants() {
    sweep(&[CSM_MS, CSM_S], ExecMode::Threads, &[2000, 2001], 2000..2050);
}

#[test]
fn random_programs_match_the_model_under_all_seven_variants_with_threads() {
    // Seed s runs 2 + s % 7 nodes of 1 + (s / 7) % 4 processors: 3000 is 6 x 1, 3004 3 x 2.
    sweep_shapes(&ALL, ExecMode::Threads, &[3000, 3004], 3000..3042);
}

#[test]
fn random_programs_match_the_model_under_all_seven_variants_with_processes() {
    // 4005 is 3 x 1, 4012 3 x 2 (see `shapes`).
    sweep_shapes(&ALL, ExecMode::Processes, &[4005, 4012], 3990..4018);
}

#[test]
fn random_programs_match_the_model_under_migration_and_broadcast() {
    use protocol_variants::{CSM_ADB, CSM_MS_MG, CSM_NONE_MG};
    sweep(&[CSM_MS_MG, CSM_NONE_MG, CSM_ADB], ExecMode::Threads, &[5000, 5001], 5000..5040);
}

/// The variants the modeled clock runs (`ClockMode::refuses`: all seven today).
fn modeled_variants() -> Vec<Protocol> {
    ALL.iter().copied().filter(|p| ClockMode::Modeled.refuses(p).is_none()).collect()
}

/// The same programs as one simulation under the modeled clock (`dsm::sched`): deferred
/// network writes, one processor at a time, handlers run by waiting processors or the
/// node's service activity.
#[test]
fn random_programs_match_the_model_under_the_modeled_clock() {
    // 5994 is 4 x 1, 6000 3 x 2 (see `shapes`).
    sweep_clock(&modeled_variants(), ExecMode::Threads, &[5994, 6000], 5990..6040, true, Timing::Modeled);
}

/// The same programs under the modeled clock with jittered wake-ups (`Timing::Jittered`):
/// a processor or service that a message, a release or a flag wakes sometimes runs
/// milliseconds late, so that the other nodes' protocol runs on meanwhile, as it does on
/// a loaded host, in an order that the seed fixes and replays exactly.
#[test]
fn random_programs_match_the_model_under_jittered_wake_ups() {
    // 6100 is 6 x 1, 6104 3 x 2 (see `shapes`).
    sweep_clock(&modeled_variants(), ExecMode::Threads, &[6100, 6104], 6100..6160, true, Timing::Jittered);
}

/// A jittered case replays exactly: the same seed gives the same counters every time
/// (what makes a failing seed worth printing).
#[test]
fn a_jittered_case_replays_exactly() {
    let mut files = Vec::new();
    for (seed, nodes, procs) in [(7201, 3, 2), (7204, 6, 1)] {
        let case = Case {
            class: Class::NoticeOverflow,
            proto: CSM_DMS,
            backend: FaultBackend::Mprotect,
            nodes,
            procs,
            mode: ExecMode::Threads,
            seed,
            timing: Timing::Jittered,
        };
        let first = case.run(&mut files).unwrap_or_else(|e| panic!("{}: {e}", case.describe()));
        let again = case.run(&mut files).unwrap_or_else(|e| panic!("{}: {e}", case.describe()));
        assert_eq!(first, again, "{} ran two ways", case.describe());
        assert!(first.notice_overflows > 0 && first.page_transfers > 0, "{first:?}");
    }
}

/// The notice-overflow class under jittered wake-ups: receivers that invalidate
/// everything, with exclusive holders flushing before they drop, recalls and fresh grants
/// interleaved by late wake-ups. (A home processor that waited for a recall's flush slept
/// through the recall's end and a fresh grant once in 38 long sweeps of
/// `write_notice_ring_overflow_with_threads`; this sweep, with the long seeds and four
/// settings of the jitter, did not catch that one: the fresh grant needs the holder to
/// drop the page and fault it again within the window. `tests/recall.rs` opens that
/// window every time.)
#[test]
fn write_notice_ring_overflow_under_jittered_wake_ups() {
    let seeds = seeds(&[7200, 7201, 7202, 7203], 7200..7284);
    let sums = sweep_cases(Class::NoticeOverflow, &modeled_variants(), ExecMode::Threads, &seeds, class_shape, Timing::Jittered);
    overflow_evidence(&sums);
}

// -----------------------------------------------------------------------------------
// The classes of issue 16, section 2: each runs every variant on both backends, in
// threads and in processes, on 2-8 nodes x 1-4 processors (one shape per seed).
// -----------------------------------------------------------------------------------

/// The shape a class runs for `seed`: 2 + seed % 7 nodes of 1 + seed % 4 processors, so
/// that 28 consecutive seeds run every shape from 2 x 1 to 8 x 4 once.
fn class_shape(seed: u64) -> Vec<(usize, usize)> {
    vec![(2 + seed as usize % 7, 1 + seed as usize % 4)]
}

/// Runs `class` under all seven variants in `mode`; returns each variant's counters
/// summed over the sweep. The default seeds run 1 and 2+ processors per node.
fn sweep_class(class: Class, mode: ExecMode, default: &[u64], long: Range<u64>) -> Vec<(Protocol, Counters)> {
    let sums = sweep_cases(class, &ALL, mode, &seeds(default, long), class_shape, Timing::Wall);
    for (proto, k) in &sums {
        eprintln!(
            "{} {mode} {}: diffs {} in {} messages ({} redirected midway), migrations {}, \
             rehomes {}, broadcast {} (evicting {}), notice overflows {}, invalidations {}",
            class.name(),
            proto.name,
            k.diffs,
            k.diff_messages,
            k.split_diff_redirects,
            k.migrations,
            k.rehomes,
            k.pages_broadcast,
            k.broadcast_evictions,
            k.notice_overflows,
            k.invalidations
        );
    }
    sums
}

// ---- Sub-word false sharing -------------------------------------------------------

/// Words of the sub-word class whose fields are owned per round (two 4 KiB pages).
const SW_WORDS: usize = 1024;
/// Words (one page) whose bytes 0-1 are a u16 counter under a lock and whose other six
/// bytes are u8 fields owned per round.
const SW_MIXED: usize = 512;
const SW_ROUNDS: usize = 4;

/// The fields of word `w` in `round`: `(byte offset, size 1 or 2, owner)`, covering the
/// word; a u16 field is 2-aligned. A field's owner is on another node than the previous
/// field's whenever the cluster has two nodes.
fn sw_fields(seed: u64, round: usize, w: usize, procs: usize, nprocs: usize) -> Vec<(usize, usize, usize)> {
    let mut r = Rng(seed ^ 0x5B5B ^ ((round * SW_WORDS + w) as u64) << 12);
    let mut out = Vec::with_capacity(8);
    let mut last_node = usize::MAX;
    let mut off = 0;
    while off < 8 {
        let size = if off % 2 == 0 && r.below(2) == 0 { 2 } else { 1 };
        let mut owner = r.below(nprocs);
        if nprocs > procs && owner / procs == last_node {
            owner = (owner + procs) % nprocs;
        }
        last_node = owner / procs;
        out.push((off, size, owner));
        off += size;
    }
    out
}

/// The mixed words' u8 fields in `round` (bytes 2-7): owners as in [`sw_fields`].
fn sw_mixed_owners(seed: u64, round: usize, m: usize, procs: usize, nprocs: usize) -> [usize; 6] {
    let mut r = Rng(seed ^ 0x3C3C ^ ((round * SW_MIXED + m) as u64) << 12);
    let mut out = [0; 6];
    let mut last_node = usize::MAX;
    for o in &mut out {
        let mut owner = r.below(nprocs);
        if nprocs > procs && owner / procs == last_node {
            owner = (owner + procs) % nprocs;
        }
        last_node = owner / procs;
        *o = owner;
    }
    out
}

/// The u16 counter increments processor `me` makes in `round`: (mixed word, amount).
fn sw_increments(seed: u64, round: usize, me: usize) -> Vec<(usize, u16)> {
    let mut r = Rng(seed ^ 0x7E7E ^ ((round * 257 + me) as u64) << 20);
    (0..1 + r.below(8))
        .map(|_| (r.below(SW_MIXED), 1 + r.below(60_000) as u16))
        .collect()
}

/// Replaces the bytes `[off, off + size)` of `word` with the low bytes of `v`, changed if
/// they would equal the word's previous bytes there (so that every field changes every
/// round); returns the new word.
fn sw_put(word: u64, off: usize, size: usize, v: u64) -> u64 {
    let mask: u64 = (if size == 1 { 0xff } else { 0xffff }) << (8 * off);
    let mut field = (v << (8 * off)) & mask;
    if field == word & mask {
        field ^= 0xa5a5 << (8 * off) & mask;
    }
    (word & !mask) | field
}

/// The expected words after each round: `(words, mixed)`, the mixed words' counters
/// included.
fn sw_model(seed: u64, procs: usize, nprocs: usize) -> Vec<(Vec<u64>, Vec<u64>)> {
    let mut words = vec![0u64; SW_WORDS];
    let mut mixed = vec![0u64; SW_MIXED];
    let mut out = Vec::with_capacity(SW_ROUNDS);
    for round in 0..SW_ROUNDS {
        let mut r = Rng(seed ^ 0x9A9A ^ (round as u64) << 32);
        for (w, word) in words.iter_mut().enumerate() {
            for (off, size, _) in sw_fields(seed, round, w, procs, nprocs) {
                *word = sw_put(*word, off, size, r.next_u64());
            }
        }
        for word in mixed.iter_mut() {
            for off in 2..8 {
                *word = sw_put(*word, off, 1, r.next_u64());
            }
        }
        for q in 0..nprocs {
            for (m, add) in sw_increments(seed, round, q) {
                let c = (mixed[m] as u16).wrapping_add(add);
                mixed[m] = (mixed[m] & !0xffff) | c as u64;
            }
        }
        out.push((words.clone(), mixed.clone()));
    }
    out
}

/// Sub-word false sharing: in every round the bytes of each 8-byte word are split into
/// u8 and u16 fields, seeded, each owned by a processor of another node than its
/// neighbour's, which writes it with a store of its size (some before their lock-protected
/// updates, some after); a page of words holds a u16 counter under a lock next to six u8
/// fields owned per round. After a barrier every processor checks every word, read whole.
fn run_sub_word(case: &Case) -> Result<Counters, String> {
    let (procs, seed) = (case.procs, case.seed);
    let nprocs = case.nodes * procs;
    let r = Cluster::new(case.config()).run(|s| {
        let words = s.alloc_named::<u64>(SW_WORDS, "sub-word words");
        let mixed = s.alloc_named::<u64>(SW_MIXED, "sub-word mixed words");
        let locks = s.locks(LOCKS);
        let bar = s.barrier();
        or_panic(move |p: &dsm::Proc| -> Result<(), String> {
            let me = p.id();
            let (bytes, halves) = (words.cast::<u8>(), words.cast::<u16>());
            let (mbytes, mhalves) = (mixed.cast::<u8>(), mixed.cast::<u16>());
            let model = sw_model(seed, procs, nprocs);
            for (round, (want, want_mixed)) in model.iter().enumerate() {
                let late = Rng(seed ^ 0x1A7E ^ ((round * 64 + me) as u64) << 8).below(2) == 0;
                let write_own = |late_half: bool| {
                    // Half the words before the lock-protected updates, half after, in an
                    // order rotated per processor.
                    for i in 0..SW_WORDS {
                        let w = (i + me * 97) % SW_WORDS;
                        if (w % 2 == 0) != (late_half == late) {
                            continue;
                        }
                        for (off, size, owner) in sw_fields(seed, round, w, procs, nprocs) {
                            if owner != me {
                                continue;
                            }
                            let v = want[w] >> (8 * off);
                            match size {
                                1 => bytes.set(w * 8 + off, v as u8),
                                _ => halves.set((w * 8 + off) / 2, v as u16),
                            }
                        }
                    }
                    for (m, &x) in want_mixed.iter().enumerate() {
                        for (j, &owner) in sw_mixed_owners(seed, round, m, procs, nprocs).iter().enumerate() {
                            if owner == me && (m % 2 == 0) == (late_half == late) {
                                mbytes.set(m * 8 + 2 + j, (x >> (8 * (2 + j))) as u8);
                            }
                        }
                    }
                };
                write_own(false);
                for (m, add) in sw_increments(seed, round, me) {
                    let l = locks[m % LOCKS];
                    l.acquire(p);
                    mhalves.set(m * 4, mhalves.get(m * 4).wrapping_add(add));
                    l.release(p);
                }
                write_own(true);
                bar.wait(p);
                for (w, &x) in want.iter().enumerate() {
                    let got = words.get(w);
                    if got != x {
                        return Err(format!(
                            "proc {me}, round {round}: word {w} = {got:#018x}, expected {x:#018x} (fields {:?})",
                            sw_fields(seed, round, w, procs, nprocs)
                        ));
                    }
                }
                for (m, &x) in want_mixed.iter().enumerate() {
                    let got = mixed.get(m);
                    if got != x {
                        return Err(format!(
                            "proc {me}, round {round}: mixed word {m} = {got:#018x}, expected {x:#018x} (byte owners {:?})",
                            sw_mixed_owners(seed, round, m, procs, nprocs)
                        ));
                    }
                }
                bar.wait(p);
            }
            Ok(())
        })
    });
    finish(r)
}

#[test]
fn sub_word_false_sharing_with_threads() {
    let sums = sweep_class(Class::SubWord, ExecMode::Threads, &[7000, 7001], 7000..7056);
    if !replaying() {
        for (proto, k) in sums {
            assert!(k.diffs > 0 && k.twins > 0, "{}: no diffs of falsely shared words: {k:?}", proto.name);
        }
    }
}

#[test]
fn sub_word_false_sharing_with_processes() {
    sweep_class(Class::SubWord, ExecMode::Processes, &[7004, 7005], 7100..7128);
}

// ---- Diffs split over several messages ----------------------------------------------

/// The split-diff class's page size: 16 KiB, the largest coherence page.
const SPLIT_PAGE: usize = 16384;
const SPLIT_PAGES: usize = 3;
const SPLIT_ROUNDS: usize = 3;
/// Writes of each page per round, each ended by a release.
const SPLIT_PHASES: usize = 3;

/// The processors that write split page `f` in `round`, each the bytes whose index modulo
/// their number is its place in the list: two or three, on different nodes where the
/// cluster has them. Every second or third byte a writer changes, so a diff of a 16 KiB
/// page is one run of 2,048 masked words (about 18 KB), which a diff message of at most
/// [`split_budget`] bytes (a test knob) carries in four to ten pieces.
fn split_writers(seed: u64, round: usize, f: usize, procs: usize, nprocs: usize) -> Vec<usize> {
    let mut r = Rng(seed ^ 0x5917 ^ ((round * 16 + f) as u64) << 24);
    let n = (2 + r.below(2)).min(nprocs);
    let (nodes, start) = (nprocs / procs, r.below(nprocs));
    // Candidate i = a * nodes + b is processor start + b * procs + a: the first `nodes`
    // candidates are on different nodes, and the first nprocs are all the processors.
    (0..n)
        .map(|i| (start + (i % nodes) * procs + i / nodes) % nprocs)
        .collect()
}

/// The most bytes a diff message takes in the split-diff class (seeded, 2 to 5 KB): word
/// runs put a 16 KiB page's whole diff in one message of the network's 24 KiB otherwise.
fn split_budget(seed: u64) -> usize {
    2048 + Rng(seed ^ 0x5918).below(3072)
}

/// Byte `i` of split page `f` after `phase` of `round`: changes at every phase.
fn split_value(round: usize, phase: usize, f: usize, i: usize) -> u8 {
    ((round * SPLIT_PHASES + phase + 1) as u8) ^ (i.wrapping_mul(13) + f * 7) as u8
}

/// Diffs split over several messages: 16 KiB pages, each written in every round by two
/// or three processors of different nodes (each every second or third byte), in phases
/// that each end with a release through a lock, so that the diffs of one writer are
/// on their way while another writer faults. Under home migration every such fault asks
/// the home to move (granted when the home is not writing), which moves it while another
/// writer's diff is half sent: the rest of that diff must follow it. After a barrier
/// every processor checks every byte.
fn run_split_diffs(case: &Case) -> Result<Counters, String> {
    let (procs, seed) = (case.procs, case.seed);
    let nprocs = case.nodes * procs;
    let mut c = case.config();
    c.page_bytes = SPLIT_PAGE;
    c.test_knobs.diff_message_bytes = Some(split_budget(seed));
    let r = Cluster::new(c).run(|s| {
        let pages = s.alloc_named::<u8>(SPLIT_PAGES * SPLIT_PAGE, "split pages");
        let locks = s.locks(LOCKS);
        let bar = s.barrier();
        or_panic(move |p: &dsm::Proc| -> Result<(), String> {
            let me = p.id();
            let words = pages.cast::<u64>();
            for round in 0..SPLIT_ROUNDS {
                let writers: Vec<Vec<usize>> = (0..SPLIT_PAGES)
                    .map(|f| split_writers(seed, round, f, procs, nprocs))
                    .collect();
                let mut order: Vec<usize> = (0..SPLIT_PAGES).collect();
                let mut r = Rng(seed ^ 0x0DE7 ^ ((round * 64 + me) as u64) << 16);
                for i in (1..order.len()).rev() {
                    order.swap(i, r.below(i + 1));
                }
                for phase in 0..SPLIT_PHASES {
                    for &f in &order {
                        let Some(j) = writers[f].iter().position(|&w| w == me) else {
                            continue;
                        };
                        let k = writers[f].len();
                        for i in (j..SPLIT_PAGE).step_by(k) {
                            pages.set(f * SPLIT_PAGE + i, split_value(round, phase, f, i));
                        }
                        // A release after each page: its diff goes now, while the other
                        // writers fault on the page.
                        let l = locks[r.below(LOCKS)];
                        l.acquire(p);
                        l.release(p);
                    }
                }
                bar.wait(p);
                for (f, writers) in writers.iter().enumerate() {
                    for w in 0..SPLIT_PAGE / 8 {
                        let got = words.get(f * SPLIT_PAGE / 8 + w);
                        let want = u64::from_ne_bytes(std::array::from_fn(|b| {
                            split_value(round, SPLIT_PHASES - 1, f, w * 8 + b)
                        }));
                        if got != want {
                            return Err(format!(
                                "proc {me}, round {round}: split page {f}, word {w} = {got:#018x}, expected {want:#018x} (writers {writers:?})"
                            ));
                        }
                    }
                }
                bar.wait(p);
            }
            Ok(())
        })
    });
    finish(r)
}

/// The evidence a split-diff sweep must show: diffs of several messages under every
/// variant with diff messages, and (over a sweep of several seeds) a home that moved in
/// the middle of one under the migrating variants.
fn split_evidence(sums: &[(Protocol, Counters)], midway: bool) {
    if replaying() {
        return;
    }
    for (proto, k) in sums {
        if proto.data == dsm::DataStrategy::Messages {
            assert!(
                k.diff_messages > k.diffs,
                "{}: no diff took more than one message: {k:?}",
                proto.name
            );
        }
        if midway && proto.home == dsm::HomePolicy::Migrating {
            assert!(
                k.split_diff_redirects > 0,
                "{}: no home moved in the middle of a diff: {k:?}",
                proto.name
            );
        }
    }
}

#[test]
fn split_diffs_with_migration_with_threads() {
    let sums = sweep_class(Class::SplitDiffs, ExecMode::Threads, &[7000, 7001], 7000..7056);
    // A home moving in the middle of a diff is a race a few seeds of many win (litmus
    // `the_home_moves_in_the_middle_of_a_split_diff` makes it happen every time).
    split_evidence(&sums, long_sweeps());
}

#[test]
fn split_diffs_with_migration_with_processes() {
    let sums = sweep_class(Class::SplitDiffs, ExecMode::Processes, &[7004, 7005], 7100..7128);
    split_evidence(&sums, false);
}

// ---- Lock chains ---------------------------------------------------------------------

/// Records of the lock-chain class, each guarded by its own lock.
const CHAIN_RECORDS: usize = 3;
/// Pages every record spans (4 KiB each): the records interleave on the same pages.
const CHAIN_PAGES: usize = 3;
const CHAIN_WORDS: usize = CHAIN_PAGES * PAGE_WORDS;
const CHAIN_ROUNDS: usize = 4;
const CHAIN_STEPS: usize = 4;

/// Where record `k` keeps its version (the number of writes it has had) and `seen`, the
/// version of record `k - 1` its last writer read; its data are the words `i` with
/// `i % 8 == k`, across all the pages.
fn chain_version_at(k: usize) -> usize {
    8 * k + 3
}
fn chain_seen_at(k: usize) -> usize {
    8 * k + 4
}
fn chain_data_words(k: usize) -> impl Iterator<Item = usize> {
    (k..CHAIN_WORDS).step_by(8)
}
fn chain_value(k: usize, version: u64, i: usize) -> u64 {
    if version == 0 {
        0
    } else {
        ((k as u64 + 1) << 56) ^ (version << 24) ^ (i as u64 * 0x9E37)
    }
}

/// One step of a processor in the lock-chain class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChainStep {
    /// Under the locks of records `k - 1` and `k` (in that order): read record `k - 1`,
    /// then rewrite record `k`, noting the version of `k - 1` it read.
    Write(usize),
    /// Under every record's lock: read every record.
    ReadAll,
    /// Under record `k`'s lock: read it.
    Read(usize),
}

/// The steps processor `me` takes in `round`. The processors of the records' pages'
/// homes end every round reading every record inside the critical sections.
fn chain_steps(seed: u64, round: usize, me: usize, home_proc: bool) -> Vec<ChainStep> {
    let mut r = Rng(seed ^ 0xC4A1 ^ ((round * 131 + me) as u64) << 20);
    let mut out: Vec<ChainStep> = (0..CHAIN_STEPS)
        .map(|_| match r.below(6) {
            0..=3 => ChainStep::Write(r.below(CHAIN_RECORDS)),
            4 => ChainStep::ReadAll,
            _ => ChainStep::Read(r.below(CHAIN_RECORDS)),
        })
        .collect();
    if home_proc {
        out.push(ChainStep::ReadAll);
    }
    out
}

/// The records' pages' homes, one seeded node each (the records are the first
/// allocation, so pages 0 to CHAIN_PAGES - 1).
fn chain_homes(seed: u64, nodes: usize) -> Vec<(usize, usize)> {
    let mut r = Rng(seed ^ 0xC4A2);
    (0..CHAIN_PAGES).map(|pg| (pg, r.below(nodes))).collect()
}

/// Lock chains across nodes: three records of words interleaved over the same three
/// pages, record `k` guarded by lock `k`. A writer of record `k` holds lock `k - 1` as it
/// reads record `k - 1` and lock `k` as it rewrites record `k` (A writes under L1, B reads
/// it and writes under L2), readers take every lock and read every record (C reads both),
/// and the processors of the pages' homes (pinned at seeded nodes) read every record
/// inside the critical sections too. Every read checks that the record is whole (every
/// word of its version), that no version goes back for the reader, and that record `k`'s
/// writer never saw a later version of record `k - 1` than the reader sees now; after each
/// round's barrier every record must hold the model's count of writes.
fn run_lock_chains(case: &Case, files: &mut Vec<HomesFile>) -> Result<Counters, String> {
    let (procs, seed) = (case.procs, case.seed);
    let nprocs = case.nodes * procs;
    let mut c = case.config();
    let homes_list = chain_homes(seed, case.nodes);
    let homes = HomesFile::new(&case.file_name(), &homes_list);
    c.homes_file = Some(homes.0.clone());
    files.push(homes);
    let home_nodes: Vec<usize> = homes_list.iter().map(|&(_, h)| h).collect();
    let r = Cluster::new(c).run(|s| {
        let chain = s.alloc_named::<u64>(CHAIN_WORDS, "chained records");
        let locks = s.locks(CHAIN_RECORDS);
        let bar = s.barrier();
        let home_nodes = home_nodes.clone();
        or_panic(move |p: &dsm::Proc| -> Result<(), String> {
            let me = p.id();
            let home_proc = |q: usize| home_nodes.contains(&(q / procs));
            let mut last = [0u64; CHAIN_RECORDS];
            let mut expect = [0u64; CHAIN_RECORDS];
            // Reads record k whole; returns its version.
            let read = |k: usize, last: &mut [u64; CHAIN_RECORDS], round: usize, step: usize| -> Result<u64, String> {
                let v = chain.get(chain_version_at(k));
                if v < last[k] {
                    return Err(format!("proc {me}, round {round}, step {step}: record {k} went back from version {} to {v}", last[k]));
                }
                last[k] = v;
                for i in chain_data_words(k) {
                    let got = chain.get(i);
                    if got != chain_value(k, v, i) {
                        return Err(format!(
                            "proc {me}, round {round}, step {step}: record {k} at version {v} has word {i} = {got:#x}, expected {:#x}",
                            chain_value(k, v, i)
                        ));
                    }
                }
                Ok(v)
            };
            // Record k's writer saw a version of k - 1 no later than the one seen now.
            let seen_ok = |k: usize, prev: u64, round: usize, step: usize| -> Result<(), String> {
                let seen = chain.get(chain_seen_at(k));
                if seen > prev {
                    return Err(format!(
                        "proc {me}, round {round}, step {step}: record {k}'s writer read version {seen} of record {}, but its lock holder now reads {prev}",
                        k - 1
                    ));
                }
                Ok(())
            };
            for round in 0..CHAIN_ROUNDS {
                for (step, &st) in chain_steps(seed, round, me, home_proc(me)).iter().enumerate() {
                    match st {
                        ChainStep::Write(k) => {
                            if k > 0 {
                                locks[k - 1].acquire(p);
                            }
                            locks[k].acquire(p);
                            let prev = if k > 0 { read(k - 1, &mut last, round, step)? } else { 0 };
                            let v = read(k, &mut last, round, step)?;
                            if k > 0 {
                                seen_ok(k, prev, round, step)?;
                            }
                            for i in chain_data_words(k) {
                                chain.set(i, chain_value(k, v + 1, i));
                            }
                            chain.set(chain_seen_at(k), prev);
                            chain.set(chain_version_at(k), v + 1);
                            last[k] = v + 1;
                            locks[k].release(p);
                            if k > 0 {
                                locks[k - 1].release(p);
                            }
                        }
                        ChainStep::ReadAll => {
                            for l in &locks {
                                l.acquire(p);
                            }
                            let mut prev = 0;
                            for k in 0..CHAIN_RECORDS {
                                let v = read(k, &mut last, round, step)?;
                                if k > 0 {
                                    seen_ok(k, prev, round, step)?;
                                }
                                prev = v;
                            }
                            for l in locks.iter().rev() {
                                l.release(p);
                            }
                        }
                        ChainStep::Read(k) => {
                            locks[k].acquire(p);
                            read(k, &mut last, round, step)?;
                            locks[k].release(p);
                        }
                    }
                }
                for q in 0..nprocs {
                    for st in chain_steps(seed, round, q, home_proc(q)) {
                        if let ChainStep::Write(k) = st {
                            expect[k] += 1;
                        }
                    }
                }
                bar.wait(p);
                for (k, &want) in expect.iter().enumerate() {
                    let v = read(k, &mut last, round, usize::MAX)?;
                    if v != want {
                        return Err(format!(
                            "proc {me}, round {round}: record {k} has version {v} after the barrier, expected {want}"
                        ));
                    }
                }
                bar.wait(p);
            }
            Ok(())
        })
    });
    finish(r)
}

#[test]
fn lock_chains_with_threads() {
    let sums = sweep_class(Class::LockChains, ExecMode::Threads, &[7000, 7001], 7000..7056);
    if !replaying() {
        for (proto, k) in sums {
            assert!(
                k.invalidations > 0 && k.diffs + k.exclusive_entries > 0,
                "{}: the chains moved no data: {k:?}",
                proto.name
            );
        }
    }
}

#[test]
fn lock_chains_with_processes() {
    sweep_class(Class::LockChains, ExecMode::Processes, &[7004, 7005], 7100..7128);
}

// ---- Write-notice ring overflow and broadcast slot reuse ------------------------------

/// The evidence a notice-overflow sweep must show: every variant with notice rings (the
/// replicated directory) overflowed them, and its nodes then invalidated pages.
fn overflow_evidence(sums: &[(Protocol, Counters)]) {
    if replaying() {
        return;
    }
    for (proto, k) in sums {
        if proto.metadata == dsm::MetadataStrategy::Replicated {
            assert!(
                k.notice_overflows > 0 && k.invalidations > 0,
                "{}: no write-notice ring overflowed: {k:?}",
                proto.name
            );
        }
    }
}

#[test]
fn write_notice_ring_overflow_with_threads() {
    let sums = sweep_class(Class::NoticeOverflow, ExecMode::Threads, &[7000, 7001], 7000..7056);
    overflow_evidence(&sums);
}

#[test]
fn write_notice_ring_overflow_with_processes() {
    let sums = sweep_class(Class::NoticeOverflow, ExecMode::Processes, &[7004, 7005], 7100..7128);
    overflow_evidence(&sums);
}

/// The evidence a slot-reuse sweep must show: CSM-ADB published pages into slots that
/// held other pages. (Hits on the reused slots depend on timing: some runs have none.)
fn slot_reuse_evidence(sums: &[(Protocol, Counters)]) {
    if replaying() {
        return;
    }
    for (proto, k) in sums {
        if proto.adaptive_broadcast {
            assert!(
                k.broadcast_evictions > 0,
                "{}: no broadcast slot was reused: {k:?}",
                proto.name
            );
        }
    }
}

#[test]
fn broadcast_slot_reuse_with_threads() {
    let sums = sweep_class(Class::SlotReuse, ExecMode::Threads, &[7000, 7001], 7000..7056);
    slot_reuse_evidence(&sums);
}

#[test]
fn broadcast_slot_reuse_with_processes() {
    let sums = sweep_class(Class::SlotReuse, ExecMode::Processes, &[7004, 7005], 7100..7128);
    slot_reuse_evidence(&sums);
}

// ---- First touch after initialization ---------------------------------------------

/// The evidence a sweep of class `Initialized` must show: under every variant, homes moved
/// to their first toucher after initialization.
fn rehome_evidence(sums: &[(Protocol, Counters)]) {
    if replaying() {
        return;
    }
    for (proto, k) in sums {
        assert!(
            k.rehomes > 0,
            "{}: no home moved to its first toucher after initialization",
            proto.name
        );
    }
}

#[test]
fn first_touch_after_initialization_with_threads() {
    // 8000 is 8 x 1, 8001 2 x 2 (see `class_shape`).
    let sums = sweep_class(Class::Initialized, ExecMode::Threads, &[8000, 8001], 8000..8056);
    rehome_evidence(&sums);
}

#[test]
fn first_touch_after_initialization_with_processes() {
    // 8008 is 2 x 1, 8009 3 x 2.
    let sums = sweep_class(Class::Initialized, ExecMode::Processes, &[8008, 8009], 8100..8128);
    rehome_evidence(&sums);
}

#[test]
fn first_touch_after_initialization_under_the_modeled_clock() {
    // 8010 is 4 x 3, 8011 5 x 4.
    let sums = sweep_cases(
        Class::Initialized,
        &modeled_variants(),
        ExecMode::Threads,
        &seeds(&[8010, 8011], 8200..8240),
        class_shape,
        Timing::Modeled,
    );
    rehome_evidence(&sums);
}

/// Under MPI: the main program and the lock chains, under the two variants that run on
/// messages alone, on 2 and then 4 MPI ranks (one per node, oversubscribed on this
/// host), 1 and 2 processors per node, both backends. One `mpirun` per rank count runs
/// the whole sweep ([`mpi_ranks_run_random_programs`] on every rank).
#[cfg(feature = "mpi")]
#[test]
fn random_programs_match_the_model_under_mpi() {
    let me = std::env::current_exe().expect("the test binary");
    for np in [2, 4] {
        // Each rank that passes leaves a file here (the ranks' printed lines may be
        // interleaved mid-line by mpirun, so they are not counted).
        let done = std::env::temp_dir().join(format!("dsm-mpi-drf-{}-{np}", std::process::id()));
        let _ = std::fs::remove_dir_all(&done);
        std::fs::create_dir_all(&done).expect("a directory for the ranks' marks");
        let out = support::mpirun(
            np,
            &me,
            &["mpi_ranks_run_random_programs", "--exact", "--ignored", "--nocapture", "--test-threads=1"],
            &[(RANKS_DONE_DIR, done.to_str().expect("a UTF-8 temporary path"))],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let passed = std::fs::read_dir(&done).map_or(0, |d| d.count());
        let _ = std::fs::remove_dir_all(&done);
        assert!(out.status.success(), "the sweep on {np} MPI ranks failed:\n{text}");
        // Every rank ran the one test and passed it.
        assert_eq!(passed, np, "ranks that passed, of {np}:\n{text}");
    }
}

/// Where each rank of [`random_programs_match_the_model_under_mpi`]'s jobs marks that it
/// passed.
#[cfg(feature = "mpi")]
const RANKS_DONE_DIR: &str = "DSM_TEST_RANKS_DONE_DIR";

/// What every rank of [`random_programs_match_the_model_under_mpi`]'s jobs runs: rank 0
/// checks each run, the others serve their node and skip the report.
#[cfg(feature = "mpi")]
#[test]
#[ignore = "runs on the ranks of the mpirun jobs that random_programs_match_the_model_under_mpi starts"]
fn mpi_ranks_run_random_programs() {
    use protocol_variants::CSM_NONE_MG;
    let np = support::mpi_ranks();
    let protos = [CSM_NONE, CSM_NONE_MG];
    let shapes = |_| vec![(np, 1), (np, 2)];
    let wall = Timing::Wall;
    let main = sweep_cases(Class::Main, &protos, ExecMode::Mpi, &seeds(&[0, 1], 0..40), shapes, wall);
    let chains = sweep_cases(Class::LockChains, &protos, ExecMode::Mpi, &seeds(&[2], 0..20), shapes, wall);
    if dsm::host::mpi_rank() == Some(0) && !replaying() {
        for (p, k) in main.iter().chain(&chains) {
            assert!(k.page_transfers > 0 && k.lock_acquires > 0, "{} fetched no page or took no lock: {k:?}", p.name);
        }
        assert!(main[0].1.diffs > 0, "CSM-None sent no diff: {:?}", main[0].1);
        assert!(main[1].1.migrations > 0, "CSM-None-Mg never migrated a home: {:?}", main[1].1);
        // Processors look for messages at their counted work under MPI: some arrive then
        // (34 to 83 in all, in runs on a quiet machine and beside two CPU hogs).
        let polled: u64 = main.iter().chain(&chains).map(|(_, k)| k.polled_messages).sum();
        assert!(polled > 0, "no processor handled a message at a poll point: {main:?}");
    }
    if let Some(dir) = std::env::var_os(RANKS_DONE_DIR) {
        let rank = dsm::host::mpi_rank().expect("under mpirun");
        std::fs::write(std::path::Path::new(&dir).join(format!("rank-{rank}")), b"passed")
            .expect("the rank's mark");
    }
}
