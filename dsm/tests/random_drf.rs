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
//! A failure names its seed; `DSM_SEED=<seed>` replays just that seed. Under the modeled
//! clock, `DSM_CPU_SCALE=0` makes a seed's run deterministic (only the declared
//! computation counts), and `DSM_KEEP_GOING=1` reports every failing case instead of
//! stopping at the first (for sweeps).

mod support;
use support::HomesFile;
use dsm::{ClockMode, Cluster, Config, ExecMode, FaultBackend, Protocol};
use protocol_variants::{ALL, CSM_DMS, CSM_MS, CSM_NONE, CSM_S};

const WORDS: usize = 1536; // three 4 KiB pages of u64... plus a bit: 12 KiB
const COUNTERS: usize = 64;
const LOCKS: usize = 8;
const ROUNDS: usize = 4;
/// u64 words in one 4 KiB page.
const PAGE_WORDS: usize = 512;
const WIDE_PAGES: usize = 2;
const FAR_PAGES: usize = 3;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

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
#[allow(clippy::too_many_arguments)]
fn run_program(
    proto: Protocol,
    backend: FaultBackend,
    nodes: usize,
    procs: usize,
    mode: ExecMode,
    seed: u64,
    clock: ClockMode,
    files: &mut Vec<HomesFile>,
) -> Result<(), String> {
    let mut c = Config::new(nodes, procs, proto);
    c.clock = clock;
    // DSM_CPU_SCALE=0 makes a modeled run deterministic (no measured computation).
    if let Ok(v) = std::env::var("DSM_CPU_SCALE") {
        c.cpu_scale = v.parse().expect("DSM_CPU_SCALE must be a number");
    }
    c.backend = backend;
    c.heap_bytes = 1 << 20;
    c.page_bytes = 4096;
    c.mode = mode;
    let nprocs = nodes * procs;
    let homes = HomesFile::new(
        &format!("drf-{}-{nodes}x{procs}-{seed}-{mode}-{clock}", proto.name),
        &far_homes(seed, nodes, nprocs),
    );
    c.homes_file = Some(homes.0.clone());
    // Kept until the sweep ends: the node processes of a later case re-run this one (and
    // skip it), reading its homes file again.
    files.push(homes);
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
        move |p| -> Result<(), String> {
            let me = p.id();
            let mut expect_counters = vec![0u64; COUNTERS];
            for round in 0..ROUNDS {
                let own = owners(seed, round, nprocs);
                // Owned writes, in a seeded order.
                let mut mine: Vec<usize> = (0..WORDS).filter(|&w| own[w] == me).collect();
                let mut r = Rng(seed ^ (me as u64) << 8 ^ round as u64);
                for i in (1..mine.len()).rev() {
                    mine.swap(i, r.below(i + 1));
                }
                for &w in &mine {
                    words.set(w, value(round, w, me));
                }
                // Solo page: only this processor ever writes it.
                for k in 0..PAGE_WORDS {
                    solo.set(me * PAGE_WORDS + k, value(round, k, me));
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
        }
    });
    match r {
        Err(e) if e.is_other_run() => Ok(()),
        Err(e) => Err(e.to_string()),
        Ok(rep) => {
            if std::env::var_os("DSM_TRACE_CASES").is_some() {
                let k = &rep.counters;
                eprintln!(
                    "  exclusive entries {} exits {}, flushes before drop {}, deferred {}",
                    k.exclusive_entries,
                    k.exclusive_exits,
                    k.flushes_before_drop,
                    k.deferred_messages
                );
            }
            rep.results.into_iter().collect()
        }
    }
}

fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("DSM_SEED") {
        Ok(s) => vec![s.parse().expect("DSM_SEED must be a number")],
        Err(_) => default.collect(),
    }
}

/// The fault backends this build has, or the one `DSM_BACKEND` names.
fn backends() -> Vec<FaultBackend> {
    match std::env::var("DSM_BACKEND") {
        Ok(b) if !b.is_empty() => vec![b.parse().expect("DSM_BACKEND must name a fault backend")],
        _ if cfg!(feature = "userfaultfd") => {
            vec![FaultBackend::Mprotect, FaultBackend::Userfaultfd]
        }
        _ => vec![FaultBackend::Mprotect],
    }
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

fn sweep(protos: &[Protocol], mode: ExecMode, seed_range: std::ops::Range<u64>) {
    sweep_shapes(protos, mode, seed_range, false)
}

fn sweep_shapes(protos: &[Protocol], mode: ExecMode, seed_range: std::ops::Range<u64>, wide: bool) {
    sweep_clock(protos, mode, seed_range, wide, ClockMode::Wall)
}

fn sweep_clock(
    protos: &[Protocol],
    mode: ExecMode,
    seed_range: std::ops::Range<u64>,
    wide: bool,
    clock: ClockMode,
) {
    let mut files = Vec::new();
    for backend in backends() {
        for seed in seeds(seed_range.clone()) {
            for &proto in protos {
                for (nodes, procs) in shapes(seed, wide) {
                    if std::env::var_os("DSM_TRACE_CASES").is_some() {
                        eprintln!(
                            "case: seed {seed} {} {nodes}x{procs} {mode} {backend}",
                            proto.name
                        );
                    }
                    if let Err(e) =
                        run_program(proto, backend, nodes, procs, mode, seed, clock, &mut files)
                    {
                        if std::env::var_os("DSM_KEEP_GOING").is_some() {
                            eprintln!("FAIL {} {nodes}x{procs} seed {seed}: {e}", proto.name);
                            continue;
                        }
                        panic!(
                            "{} on {backend} with {nodes} nodes x {procs} procs ({mode}, {clock} clock) failed for seed {seed}: {e}\n\
                             replay with DSM_SEED={seed} DSM_BACKEND={backend}",
                            proto.name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn random_programs_match_the_model_with_threads() {
    sweep(&[CSM_DMS, CSM_NONE], ExecMode::Threads, 0..40);
}

#[test]
fn random_programs_match_the_model_with_processes() {
    sweep(&[CSM_DMS, CSM_NONE], ExecMode::Processes, 1000..1010);
}

#[test]
fn random_programs_match_the_model_under_the_mixed_variants() {
    sweep(&[CSM_MS, CSM_S], ExecMode::Threads, 2000..2016);
}

#[test]
fn random_programs_match_the_model_under_all_seven_variants_with_threads() {
    sweep_shapes(&ALL, ExecMode::Threads, 3000..3014, true);
}

#[test]
fn random_programs_match_the_model_under_all_seven_variants_with_processes() {
    sweep_shapes(&ALL, ExecMode::Processes, 4000..4004, true);
}

#[test]
fn random_programs_match_the_model_under_migration_and_broadcast() {
    use protocol_variants::{CSM_ADB, CSM_MS_MG, CSM_NONE_MG};
    sweep(
        &[CSM_MS_MG, CSM_NONE_MG, CSM_ADB],
        ExecMode::Threads,
        5000..5012,
    );
}

/// The same programs as one simulation under the modeled clock (`dsm::sched`): deferred
/// network writes, one processor at a time, handlers run by waiting processors or the
/// node's service activity.
#[test]
fn random_programs_match_the_model_under_the_modeled_clock() {
    // The variants the modeled clock runs (`ClockMode::refuses`: all seven today).
    let protos: Vec<Protocol> = ALL
        .iter()
        .copied()
        .filter(|p| ClockMode::Modeled.refuses(p).is_none())
        .collect();
    sweep_clock(&protos, ExecMode::Threads, 6000..6014, true, ClockMode::Modeled);
}
