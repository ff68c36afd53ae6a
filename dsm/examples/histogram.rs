//! A shared histogram, built by every processor of a DSM cluster.
//!
//! Each processor draws its own share of pseudo-random numbers, counts them locally, and
//! adds its counts into a shared histogram under one lock per group of buckets. After a
//! barrier, processor 0 checks the shared histogram against a sequential count.
//!
//!     cargo run --release -p dsm --example histogram -- [variant] [nodes] [procs]
//!
//! Settings come from the arguments and from `DSM_*` variables (`DSM_EXEC=processes` runs
//! one process per node). Under `mpirun -np N` (a build with `--features dsm/mpi`) every
//! MPI rank runs one node, and rank 0 alone prints.

use dsm::{Cluster, Config};

const BUCKETS: usize = 1024;
const GROUPS: usize = 16; // one lock per 64 buckets
const SAMPLES_PER_PROC: u64 = 200_000;

/// A small deterministic generator: processor `id`'s numbers do not depend on the cluster.
fn samples(id: usize) -> impl Iterator<Item = usize> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ id as u64;
    (0..SAMPLES_PER_PROC).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % BUCKETS as u64) as usize
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variant = protocol_variants::by_name(args.first().map_or("CSM-DMS", String::as_str))?;
    let nodes = args.get(1).map_or(Ok(2), |s| s.parse())?;
    let procs = args.get(2).map_or(Ok(2), |s| s.parse())?;
    let config = Config::new(nodes, procs, variant).apply_env()?;

    let run = Cluster::new(config).run(|s| {
        // Setup runs identically on every node: same allocations, same locks, same order.
        let hist = s.alloc_named::<u64>(BUCKETS, "histogram");
        let locks = s.locks(GROUPS);
        let done = s.barrier();
        move |p| {
            // Count privately first: shared memory is for results, not for every increment.
            let mut mine = vec![0u64; BUCKETS];
            for b in samples(p.id()) {
                mine[b] += 1;
            }
            for (g, lock) in locks.iter().enumerate() {
                let range = g * BUCKETS / GROUPS..(g + 1) * BUCKETS / GROUPS;
                lock.acquire(p); // an acquire: we see every earlier holder's additions
                for b in range {
                    hist.set(b, hist.get(b) + mine[b]);
                }
                lock.release(p); // a release: our additions go home before the next holder
            }
            done.wait(p); // after the barrier every processor sees the whole histogram
            if p.id() != 0 {
                return None;
            }
            let mut expected = vec![0u64; BUCKETS];
            for q in 0..p.nprocs() {
                for b in samples(q) {
                    expected[b] += 1;
                }
            }
            let wrong = (0..BUCKETS).filter(|&b| hist.get(b) != expected[b]).count();
            Some(wrong)
        }
    });
    // Only the launching process (MPI rank 0) reports; every other node process skips.
    let Some(report) = dsm::skip_other_run(run)? else {
        return Ok(());
    };
    let wrong = report.results[0].expect("processor 0 reports");
    let c = &report.counters;
    println!(
        "{} on {} nodes x {} procs: {} buckets wrong; {} page transfers, {} twins, {} diffs, {} lock acquires, {} messages",
        report.protocol, report.nodes, report.procs_per_node, wrong, c.page_transfers, c.twins, c.diffs, c.lock_acquires, c.messages
    );
    if wrong > 0 {
        return Err(format!("{wrong} buckets differ from the sequential count").into());
    }
    Ok(())
}
