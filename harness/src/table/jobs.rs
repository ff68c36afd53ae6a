//! `cashmere table --jobs N`: apps run N at a time, each in a process of its own.
//!
//! A modeled run simulates its whole cluster on one host CPU (`dsm::sched`), so a table
//! of many apps can use every CPU of the host by running apps side by side. Each app's
//! cells run in a child `cashmere table --apps APP --cells-only` bound to a CPU of its
//! own: a separate process, so that two clusters never share one process's limit on
//! memory mappings (`vm.max_map_count`, which per-page protections fill) nor its
//! scheduler. The children write their cells to `OUT/cells` as any table does, and the
//! parent then takes them from there, as a resumed table would, and writes the table.
//! A job dies with the table (SIGKILL on the parent's death, `dsm::host::die_with_parent`),
//! and its node processes with it; the cells it had finished are whole files (each is
//! written beside and renamed), and a temporary file it leaves is removed by the next
//! table on the same `--out`.

use super::Plan;
use anyhow::Context;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::Command;
use std::sync::Mutex;

/// How many jobs to run: the number asked for, else one per CPU this process may use
/// under the modeled clock in threads mode (each job uses one), else one; never more
/// than there are apps.
pub fn count(asked: Option<usize>, plan: &Plan) -> anyhow::Result<usize> {
    let jobs = match asked {
        Some(0) => anyhow::bail!("--jobs must be at least 1"),
        Some(n) => n,
        None => {
            let modeled_threads = plan.clock == dsm::ClockMode::Modeled
                && plan
                    .variants
                    .iter()
                    .all(|c| c.mode == dsm::ExecMode::Threads);
            if modeled_threads {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            } else {
                1
            }
        }
    };
    Ok(jobs.min(plan.apps.len()).max(1))
}

/// Runs every app of the plan in a child process, `jobs` at a time, and waits for all.
/// A child that fails is reported; its app's missing cells are left for the parent.
pub fn run_apps(plan: &Plan, jobs: usize) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find this program to run the jobs")?;
    let args = child_args(std::env::args_os().skip(1));
    let cpus = dsm::host::allowed_cpus();
    let queue: Mutex<VecDeque<&str>> =
        Mutex::new(longest_first(plan.apps.iter().map(|a| a.app.name())));
    eprintln!(
        "table: {} app(s), {jobs} at a time, each in a process of its own on a CPU of its own",
        plan.apps.len()
    );
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for job in 0..jobs {
            let (exe, args, queue, failures) = (&exe, &args, &queue, &failures);
            let cpu = cpus.get(job % cpus.len().max(1)).copied();
            scope.spawn(move || loop {
                let Some(app) = queue.lock().expect("queue").pop_front() else {
                    return;
                };
                let mut cmd = Command::new(exe);
                cmd.args(args).arg("--apps").arg(app);
                // A table ended by a signal takes its jobs with it.
                dsm::host::die_with_parent(&mut cmd);
                if let Some(cpu) = cpu {
                    cmd.env(super::JOB_CPU_VAR, cpu.to_string());
                }
                let outcome = match cmd.status() {
                    Ok(status) if status.success() => continue,
                    Ok(status) => format!("{app}: its job ended with {status}"),
                    Err(e) => format!("{app}: its job could not start: {e}"),
                };
                failures.lock().expect("failures").push(outcome);
            });
        }
    });
    for failure in failures.into_inner().expect("failures") {
        eprintln!("table: {failure}; its missing cells run here");
    }
    Ok(())
}

/// The apps in the order the jobs take them: the longest simulations first, so that no
/// long one starts last while the other CPUs idle (longest processing time first, a
/// makespan within 4/3 of the best). The lengths are this machine's wall times of each
/// app's seven paper-size cells at commit c5791d4 (`harness/results/table4-paper-8x4.md`),
/// in seconds; an app not listed goes last. Only the order of the work changes: the
/// cells and the table are the same whichever job runs what.
fn longest_first<'a>(apps: impl Iterator<Item = &'a str>) -> VecDeque<&'a str> {
    const SECONDS: &[(&str, u32)] = &[
        ("water-nsq", 359),
        ("ilink", 209),
        ("lu", 204),
        ("barnes", 97),
        ("gauss", 51),
        ("clu", 24),
        ("sor", 20),
        ("water-sp", 12),
        ("em3d", 11),
        ("tsp", 8),
    ];
    let length = |app: &str| {
        SECONDS
            .iter()
            .find(|(a, _)| *a == app)
            .map_or(0, |(_, s)| *s)
    };
    let mut apps: Vec<&str> = apps.collect();
    apps.sort_by_key(|&app| std::cmp::Reverse(length(app)));
    apps.into()
}

/// The parent's arguments for a child: the same table, without `--apps` and `--jobs`
/// (the child gets its one app), and `--cells-only`.
fn child_args(parent: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in parent {
        if skip_value {
            skip_value = false;
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--apps" || text == "--jobs" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--apps=") || text.starts_with("--jobs=") {
            continue;
        }
        out.push(arg);
    }
    out.extend(["--jobs", "1", "--cells-only"].map(OsString::from));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_child_gets_the_table_without_apps_and_jobs() {
        let parent = args(&[
            "table", "--apps", "lu,sor", "--size", "small", "--jobs=2", "--force",
        ]);
        assert_eq!(
            child_args(parent.into_iter()),
            args(&[
                "table",
                "--size",
                "small",
                "--force",
                "--jobs",
                "1",
                "--cells-only"
            ])
        );
        let parent = args(&["table", "--apps=lu", "--jobs", "3", "--out", "o"]);
        assert_eq!(
            child_args(parent.into_iter()),
            args(&["table", "--out", "o", "--jobs", "1", "--cells-only"])
        );
    }

    #[test]
    fn the_longest_simulations_are_taken_first_and_unknown_apps_last() {
        let order = super::longest_first(["barnes", "mine", "tsp", "water-nsq", "lu"].into_iter());
        assert_eq!(
            Vec::from(order),
            ["water-nsq", "lu", "barnes", "tsp", "mine"]
        );
    }
}
