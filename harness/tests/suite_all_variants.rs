//! The `cashmere` binary end to end: every application under every protocol variant at test
//! size, each parallel result checked against the sequential one; a row of each of the
//! -Mg and ADB variants in process mode; CSM-ADB on 32 nodes.
//!
//! The runs go through the built binary, as a user would start them, with the `DSM_*`
//! environment cleared so that each test runs exactly the configuration it names.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest any one command may take before the test kills it and fails.
const TIME_LIMIT: Duration = Duration::from_secs(240);

const APPS: [&str; 10] = [
    "barnes",
    "clu",
    "lu",
    "em3d",
    "gauss",
    "ilink",
    "sor",
    "tsp",
    "water-nsq",
    "water-sp",
];

/// Runs `cashmere ARGS`, killing it if it outlives [`TIME_LIMIT`]; returns its output and
/// how long it took.
fn cashmere(args: &[&str]) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cashmere"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DSM_") {
            cmd.env_remove(k);
        }
    }
    let t0 = Instant::now();
    let child = cmd.spawn().expect("cannot start the cashmere binary");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(TIME_LIMIT) {
        Ok(out) => out,
        Err(_) => {
            // Its node processes die with it (they are started with PR_SET_PDEATHSIG).
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let out = rx.recv().expect("the waiter thread reports");
            let out = out.expect("cannot wait for cashmere");
            panic!(
                "cashmere {} took longer than {TIME_LIMIT:?} and was killed\nstdout:\n{}\nstderr:\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    .expect("cannot wait for cashmere");
    waiter.join().expect("waiter thread");
    (out, t0.elapsed())
}

fn show(args: &[&str], out: &Output) -> String {
    format!(
        "cashmere {}\nexit: {}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cashmere run ...` and checks it exits 0 and says the result was verified.
fn run_verified(args: &[&str]) -> String {
    let (out, took) = cashmere(args);
    let text = show(args, &out);
    assert!(out.status.success(), "the run failed:\n{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("verified: the parallel result matches the sequential one"),
        "the run did not say its result was verified:\n{text}"
    );
    eprintln!("cashmere {} took {took:.2?}", args.join(" "));
    stdout.into_owned()
}

#[test]
fn every_app_under_every_variant_is_verified() {
    let variants: Vec<&str> = protocol_variants::ALL.iter().map(|p| p.name).collect();
    assert_eq!(variants.len(), 7);
    let list = variants.join(",");
    let args = [
        "suite",
        "--size",
        "test",
        "--variants",
        &list,
        "--nodes",
        "2",
        "--procs",
        "2",
        "--exec",
        "threads",
    ];
    let (out, took) = cashmere(&args);
    let text = show(&args, &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Rows are `app variant seq par speedup verified ...` or `app variant error: ...`.
    let mut seen = std::collections::BTreeMap::new();
    let mut bad = Vec::new();
    for line in stdout.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 2 || !APPS.contains(&cols[0]) || !variants.contains(&cols[1]) {
            continue;
        }
        let verified = cols.get(5) == Some(&"yes");
        if !verified {
            bad.push(line.to_string());
        }
        if seen.insert((cols[0], cols[1]), verified).is_some() {
            bad.push(format!("(printed twice) {line}"));
        }
    }
    let missing: Vec<String> = APPS
        .iter()
        .flat_map(|a| variants.iter().map(move |v| (*a, *v)))
        .filter(|k| !seen.contains_key(k))
        .map(|(a, v)| format!("{a} under {v}"))
        .collect();
    assert!(
        bad.is_empty() && missing.is_empty(),
        "rows not verified:\n  {}\nrows missing:\n  {}\n\n{text}",
        bad.join("\n  "),
        missing.join("\n  ")
    );
    assert_eq!(seen.len(), 70, "{text}");
    assert!(out.status.success(), "the suite failed:\n{text}");
    eprintln!("suite over 7 variants took {took:.2?}");
}

#[test]
fn migrating_and_broadcast_variants_run_in_process_mode() {
    let out = run_verified(&[
        "run",
        "sor",
        "--size",
        "test",
        "--variant",
        "CSM-None-Mg",
        "--exec",
        "processes",
    ]);
    assert!(out.contains("(processes, "), "{out}");
    assert!(out.contains("migrations "), "{out}");
    let out = run_verified(&[
        "run",
        "water-sp",
        "--size",
        "test",
        "--variant",
        "CSM-ADB",
        "--exec",
        "processes",
    ]);
    assert!(out.contains("(processes, "), "{out}");
    assert!(out.contains("pages broadcast "), "{out}");
}

#[test]
fn adaptive_broadcast_runs_on_32_nodes() {
    for app in ["sor", "em3d"] {
        run_verified(&[
            "run",
            app,
            "--size",
            "test",
            "--variant",
            "CSM-ADB",
            "--nodes",
            "32",
            "--procs",
            "1",
            "--exec",
            "threads",
        ]);
    }
}

/// `suite` with no variant named runs every variant (the README's main command).
#[test]
fn the_default_suite_runs_every_variant() {
    let args = ["suite", "--size", "test", "--apps", "sor"];
    let (out, _) = cashmere(&args);
    let text = show(&args, &out);
    assert!(out.status.success(), "the suite failed:\n{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ran: std::collections::BTreeSet<&str> = stdout
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.first() == Some(&"sor") && cols.get(5) == Some(&"yes")).then(|| cols[1])
        })
        .collect();
    let all: std::collections::BTreeSet<&str> =
        protocol_variants::ALL.iter().map(|p| p.name).collect();
    assert_eq!(ran, all, "{text}");
}
