//! The `cashmere` command on bad input: every case gets a non-zero exit and a message that
//! names what was wrong and what to do, before any work is done. Each case runs the built
//! binary (`CASHMERE_TEST_BIN` runs them against another build) with the `DSM_*`
//! variables cleared.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    std::env::var_os("CASHMERE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cashmere")))
}

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(binary());
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("DSM_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn cashmere(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let out = command(args, env)
        .stdin(Stdio::null())
        .output()
        .expect("the cashmere binary runs");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A file in the temporary directory, unique to this test process.
fn temp(name: &str, contents: &str) -> String {
    let p = std::env::temp_dir().join(format!("cashmere-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, contents).unwrap();
    p.to_str().unwrap().to_string()
}

fn temp_path(name: &str) -> String {
    let p = std::env::temp_dir().join(format!("cashmere-cli-{}-{name}", std::process::id()));
    p.to_str().unwrap().to_string()
}

/// Runs one bad input and checks the exit code 1, a single `cashmere:` error line holding
/// every one of `words`, and no panic.
fn refused(args: &[&str], env: &[(&str, &str)], words: &[&str]) {
    let o = cashmere(args, env);
    let what = format!("cashmere {} with {env:?}", args.join(" "));
    assert_eq!(o.code, Some(1), "{what}: exit code\n{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{what}: {}", o.stderr);
    for w in words {
        assert!(
            o.stderr.contains(w),
            "{what}: `{w}` missing from\n{}",
            o.stderr
        );
    }
}

#[test]
fn sizes_from_user_input_never_wrap() {
    refused(
        &["run", "sor", "--heap-mb", "17592186044417"],
        &[],
        &["--heap-mb", "17592186044417", "limit is 1048576 MiB"],
    );
    refused(
        &["run", "sor", "--heap-mb", "17592186044416"],
        &[],
        &["--heap-mb", "limit is 1048576 MiB"],
    );
    refused(
        &["run", "sor", "--heap-mb", "2000000"],
        &[],
        &["2000000 MiB", "above the limit", "--heap-mb"],
    );
    refused(
        &["run", "sor"],
        &[("DSM_HEAP_MB", "17592186044417")],
        &["DSM_HEAP_MB", "--heap-mb", "limit"],
    );
    refused(
        &["run", "sor", "--heap-mb", "0"],
        &[],
        &["heap size 0", "--heap-mb"],
    );
}

#[test]
fn a_homes_file_must_fit_the_cluster() {
    let outside = temp("homes-outside", "# page home\n0 0\n99999 1\n");
    refused(
        &["run", "sor", "--heap-mb", "1", "--homes", &outside],
        &[],
        &[
            "line 3",
            "page 99999",
            "outside the heap",
            "128 pages",
            "--save-homes",
        ],
    );
    let huge = temp("homes-huge", "4294967295 0\n");
    refused(
        &["run", "sor", "--homes", &huge],
        &[],
        &["line 1", "page 4294967295", "outside the heap"],
    );
    let twice = temp("homes-twice", "3 0\n4 1\n3 1\n");
    refused(
        &["run", "sor", "--homes", &twice],
        &[],
        &["line 3", "page 3", "second home", "line 1"],
    );
    let node = temp("homes-node", "3 5\n");
    refused(
        &["run", "sor", "--homes", &node],
        &[],
        &["line 1", "node 5 does not exist"],
    );
    let garbage = temp("homes-garbage", "three 0\n");
    refused(
        &["run", "sor", "--homes", &garbage],
        &[],
        &["line 1", "`three` is not a page number"],
    );
    // Refused before the sequential run: nothing is printed on standard output.
    let o = cashmere(&["run", "sor", "--homes", &twice], &[]);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
}

#[test]
fn suite_takes_the_variant_from_its_flag_or_the_environment() {
    refused(
        &["suite", "--apps", "sor"],
        &[("DSM_VARIANT", "garbage")],
        &["DSM_VARIANT=`garbage`", "valid variants", "nothing was run"],
    );
    let o = cashmere(&["suite", "--apps", "sor", "--variant", "CSM-None"], &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("CSM-None"), "{}", o.stdout);
    assert!(
        !o.stdout.contains("CSM-DMS"),
        "ran other variants:\n{}",
        o.stdout
    );
    let o = cashmere(&["suite", "--apps", "sor"], &[("DSM_VARIANT", "CSM-S")]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stdout.contains("CSM-S ") && !o.stdout.contains("CSM-DMS"),
        "{}",
        o.stdout
    );
    refused(
        &[
            "suite",
            "--apps",
            "sor",
            "--variant",
            "CSM-None",
            "--variants",
            "CSM-S",
        ],
        &[],
        &["either --variants", "or --variant"],
    );
}

#[test]
fn suite_checks_the_whole_matrix_before_running_any_of_it() {
    let o = cashmere(
        &[
            "suite",
            "--apps",
            "sor",
            "--variants",
            "CSM-None,CSM-DMS",
            "--network",
            "gige-tcp",
        ],
        &[],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("nothing was run") && o.stderr.contains("CSM-DMS needs remote write"),
        "{}",
        o.stderr
    );
    assert!(
        !o.stdout.contains("sor "),
        "ran part of the matrix:\n{}",
        o.stdout
    );
    refused(
        &["suite", "--apps", "sor,nope"],
        &[],
        &["unknown application `nope`"],
    );
    refused(
        &[
            "suite",
            "--apps",
            "sor",
            "--variants",
            "CSM-None,CSM-MS-Mg,CSM-ADB",
            "--network",
            "gige-tcp",
        ],
        &[],
        &["CSM-MS-Mg", "CSM-ADB", "nothing was run"],
    );
}

#[test]
fn float_parameters_must_be_finite() {
    for v in ["nan", "inf", "-inf", "1e999"] {
        refused(
            &["run", "barnes", "--param", &format!("theta={v}")],
            &[],
            &["`theta`", "finite"],
        );
    }
    refused(
        &["run", "em3d", "--param", "remote_fraction=nan"],
        &[],
        &["`remote_fraction`", "finite", "from 0 to 1"],
    );
    refused(
        &["run", "barnes", "--param", "dtime=nan"],
        &[],
        &["`dtime`", "finite"],
    );
}

#[test]
fn numeric_parameters_name_the_parameter_and_what_it_expects() {
    for (p, v) in [
        ("rows", "-5"),
        ("rows", "1.5"),
        ("cols", "x"),
        ("rows", "0"),
        ("iterations", "99999999999999999999999"),
    ] {
        refused(
            &["run", "sor", "--param", &format!("{p}={v}")],
            &[],
            &[&format!("`{p}` = `{v}`"), "expected a whole number", "from"],
        );
    }
    refused(
        &["run", "water-nsq", "--param", "steps=-1"],
        &[],
        &["`steps` = `-1`", "expected a whole number"],
    );
    refused(
        &["run", "ilink", "--size", "small", "--param", "seed=nan"],
        &[],
        &["`seed` = `nan`", "expected a whole number"],
    );
}

#[test]
fn a_data_set_that_cannot_fit_is_refused_before_allocating() {
    refused(
        &[
            "run",
            "sor",
            "--param",
            "rows=65536",
            "--param",
            "cols=65536",
        ],
        &[],
        &["sor", "MiB", "shared heap", "--heap-mb"],
    );
    refused(
        &[
            "run",
            "sor",
            "--param",
            "rows=65536",
            "--param",
            "cols=65536",
            "--heap-mb",
            "65536",
        ],
        &[],
        &["sor", "GiB of memory", "this machine's"],
    );
}

#[test]
fn output_paths_are_checked_before_the_run() {
    let dir = temp_path("no-such-dir");
    let json = format!("{dir}/report.json");
    refused(
        &["run", "sor", "--json", &json],
        &[],
        &["--json", "does not exist"],
    );
    let o = cashmere(&["run", "sor", "--json", &json], &[]);
    assert!(o.stdout.is_empty(), "ran before refusing:\n{}", o.stdout);
    refused(
        &["run", "sor", "--save-homes", "/proc/cashmere-homes"],
        &[],
        &[
            "--save-homes",
            "/proc/cashmere-homes",
            "cannot be created or written",
        ],
    );
    let d = std::env::temp_dir();
    refused(
        &["run", "sor", "--json", d.to_str().unwrap()],
        &[],
        &["--json", "is a directory"],
    );
}

#[test]
fn environment_errors_name_the_variable_and_the_flag() {
    for (var, value, flag) in [
        ("DSM_EXEC", "foo", "--exec"),
        ("DSM_HEAP_MB", "abc", "--heap-mb"),
        ("DSM_HEAP_MB", "-1", "--heap-mb"),
        ("DSM_PAGE_KB", "3", "--page-kb"),
        ("DSM_NETWORK", "nope", "--network"),
        ("DSM_BACKEND", "nope", "--backend"),
        ("DSM_VARIANT", "nope", "--variant"),
    ] {
        refused(
            &["run", "sor"],
            &[(var, value)],
            &[&format!("{var}=`{value}`"), flag, "unset"],
        );
    }
    // A flag wins over its variable.
    let o = cashmere(
        &[
            "run", "sor", "--exec", "threads", "--nodes", "1", "--procs", "1",
        ],
        &[("DSM_EXEC", "foo")],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
}

#[test]
fn heap_and_page_advice_name_the_flag_the_variable_and_kib() {
    refused(
        &[
            "run",
            "sor",
            "--param",
            "rows=4000",
            "--param",
            "cols=4000",
            "--heap-mb",
            "64",
        ],
        &[],
        &["--heap-mb", "DSM_HEAP_MB"],
    );
    refused(
        &["run", "sor", "--page-kb", "3"],
        &[],
        &["--page-kb", "4 or 8"],
    );
    refused(
        &["run", "sor", "--page-kb", "8192"],
        &[],
        &["--page-kb", "KiB: 4 or 8"],
    );
    refused(
        &["run", "sor", "--page-kb", "18446744073709551615"],
        &[],
        &["--page-kb", "KiB"],
    );
}

#[test]
fn an_os_error_is_printed_once() {
    let o = cashmere(&["run", "tsp", "--input", "/nonexistent/cities"], &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.stderr.matches("(os error 2)").count(), 1, "{}", o.stderr);
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    // The reader is gone before the command starts (as `head -1`'s is once it has read its
    // line and the command writes on): every write finds no reader, whatever the pipe's
    // buffer would have held.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = command(&["profiles"], &[])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "the command said something: {stderr}");
    assert!(
        out.status.success()
            || std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(13),
        "{:?} {stderr}",
        out.status
    );
}

#[test]
fn an_unknown_pinning_is_refused_by_flag_and_variable() {
    refused(
        &["run", "sor", "--pin", "sometimes"],
        &[],
        &["--pin `sometimes`", "auto, off"],
    );
    refused(
        &["run", "sor"],
        &[("DSM_PIN", "sometimes")],
        &["DSM_PIN=`sometimes`", "auto, off"],
    );
}

#[test]
fn the_stall_limit_must_be_a_positive_number_of_seconds() {
    for v in ["0", "-1", "nan", "inf", "ten"] {
        refused(
            &["run", "sor", &format!("--stall-timeout={v}")],
            &[],
            &[&format!("--stall-timeout `{v}`"), "seconds"],
        );
    }
    refused(
        &["run", "sor"],
        &[("DSM_STALL_TIMEOUT", "0")],
        &["DSM_STALL_TIMEOUT=`0`", "--stall-timeout", "seconds"],
    );
    let o = cashmere(
        &[
            "run",
            "sor",
            "--stall-timeout",
            "2.5",
            "--nodes",
            "1",
            "--procs",
            "1",
        ],
        &[],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
}

#[test]
fn bench_needs_at_least_one_iteration() {
    refused(
        &["bench", "net", "--iters", "0"],
        &[],
        &["--iters", "at least 1"],
    );
}

#[test]
fn inputs_are_bounded_regular_files() {
    refused(
        &["run", "tsp", "--input", "/dev/zero"],
        &[],
        &["/dev/zero", "not a regular file"],
    );
    let fifo = temp_path("fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    refused(
        &["run", "tsp", "--input", &fifo],
        &[],
        &["not a regular file"],
    );
    let _ = std::fs::remove_file(&fifo);
    let big = temp_path("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    refused(
        &["run", "water-nsq", "--input", &big],
        &[],
        &["larger than the limit of 64 MiB"],
    );
    let _ = std::fs::remove_file(&big);
    refused(
        &[
            "run",
            "tsp",
            "--input",
            std::env::temp_dir().to_str().unwrap(),
        ],
        &[],
        &["not a regular file"],
    );
}

#[test]
fn a_water_random_file_cut_short_is_an_error() {
    let short = temp("random-short", &"0.5\n".repeat(100));
    refused(
        &["run", "water-nsq", "--param", &format!("random={short}")],
        &[],
        &[
            "holds 100 numbers",
            "64 molecules need 577",
            "cut short",
            "short_random=zero",
        ],
    );
    let nan = temp("random-nan", &"nan\n".repeat(600));
    refused(
        &["run", "water-nsq", "--param", &format!("random={nan}")],
        &[],
        &["line 1", "finite number"],
    );
}

#[test]
fn other_bad_settings_are_refused_with_the_valid_choices() {
    refused(
        &["run", "nope"],
        &[],
        &["unknown application `nope`", "sor"],
    );
    refused(
        &["run", "sor", "--param", "nope=1"],
        &[],
        &["unknown parameter `nope`", "valid parameters"],
    );
    refused(
        &["run", "sor", "--param", "rows"],
        &[],
        &["--param expects KEY=VALUE"],
    );
    refused(&["run", "sor", "--size", "huge"], &[], &["valid sizes"]);
    refused(&["run", "sor", "--nodes", "0"], &[], &["at least one node"]);
    refused(&["run", "sor", "--nodes", "33"], &[], &["at most 32"]);
    refused(
        &["run", "sor", "--procs", "0"],
        &[],
        &["at least one processor"],
    );
    refused(
        &["run", "sor", "--exec", "foo"],
        &[],
        &["--exec `foo`", "threads, processes"],
    );
    refused(
        &[
            "run",
            "sor",
            "--variant",
            "CSM-ADB",
            "--network",
            "gige-tcp",
        ],
        &[],
        &["CSM-ADB", "Gigabit Ethernet"],
    );
    refused(
        &[
            "run",
            "sor",
            "--variant",
            "CSM-DMS",
            "--network",
            "gige-tcp",
        ],
        &[],
        &["CSM-DMS needs remote write"],
    );
    refused(
        &["run", "sor", "--input", "x"],
        &[],
        &["sor reads no input file"],
    );
}

/// Standard error is a pipe here: progress comes as plain lines (no carriage returns),
/// one per step that took `CASHMERE_PROGRESS_AFTER_S` or more (2 s by default).
#[test]
fn progress_is_plain_lines_when_standard_error_is_not_a_terminal() {
    let args = ["run", "sor", "--nodes", "1", "--procs", "2"];
    let every = cashmere(&args, &[("CASHMERE_PROGRESS_AFTER_S", "0")]);
    assert_eq!(every.code, Some(0), "{}", every.stderr);
    assert!(!every.stderr.contains('\r'), "{:?}", every.stderr);
    for step in ["sor sequential: ", "sor parallel (CSM-DMS): "] {
        assert!(
            every.stderr.lines().any(|l| l.starts_with(step) && l.ends_with(" s")),
            "no `{step}` line: {:?}",
            every.stderr
        );
    }
    let none = cashmere(&args, &[("CASHMERE_PROGRESS_AFTER_S", "100000")]);
    assert_eq!(none.code, Some(0), "{}", none.stderr);
    assert!(!none.stderr.contains("sor sequential: "), "{:?}", none.stderr);
}

/// `bench proto --clock modeled` composes the protocol's basic operations from the
/// built-in platform's costs through the real protocol code and the scheduler: every row
/// lands within 25% of the paper's Table 2 (the bench itself counts the rows that miss).
#[test]
fn modeled_basic_operations_land_within_a_quarter_of_table_2() {
    let o = cashmere(
        &[
            "bench",
            "proto",
            "--clock",
            "modeled",
            "--iters",
            "20",
            "--adb-nodes",
            "",
            "--no-migration",
        ],
        &[],
    );
    assert_eq!(o.code, Some(0), "bench failed: {}", o.stderr);
    assert!(
        o.stdout.contains("Beside Stets et al., Table 2"),
        "no comparison printed: {}",
        o.stdout
    );
    let rows = o.stdout.lines().filter(|l| l.contains("  CSM-")).count();
    assert_eq!(rows, 12, "six rows for each of CSM-DMS and CSM-None: {}", o.stdout);
    assert!(
        o.stdout.contains("0 row(s) more than 25% off the paper"),
        "{}",
        o.stdout
    );
}

/// Runs `cashmere` with standard output and error to pipes, and fails the test (after
/// killing it) if it has not ended within `limit`: a case that would hang fails instead.
fn cashmere_within(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Outcome {
    let mut child = command(args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the cashmere binary runs");
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut child = Launched::new(child);
    let status = child.wait(limit).unwrap_or_else(|| {
        child.kill();
        panic!(
            "cashmere {} did not end within {limit:?}: it hangs",
            args.join(" ")
        )
    });
    Outcome {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// A spawned `cashmere` whose end arrives on a channel (a thread waits for it), so that a
/// test waits for events, never for time to pass.
struct Launched {
    pid: u32,
    ended: std::sync::mpsc::Receiver<std::process::ExitStatus>,
    status: Option<std::process::ExitStatus>,
}

impl Launched {
    fn new(mut child: std::process::Child) -> Launched {
        let (tx, ended) = std::sync::mpsc::channel();
        let pid = child.id();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send(status);
            }
        });
        Launched {
            pid,
            ended,
            status: None,
        }
    }

    /// Its exit status once it ends, waiting at most `limit` (`None` if it has not).
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        if self.status.is_none() {
            self.status = self.ended.recv_timeout(limit).ok();
        }
        self.status
    }

    /// Kills it (if it still runs) and reaps it.
    fn kill(&mut self) {
        if self.status.is_none() {
            signal(self.pid, "-KILL");
            assert!(self.wait(Duration::from_secs(30)).is_some(), "SIGKILL did not end {}", self.pid);
        }
    }

    /// Looks at `ready` (a state in /proc, of which the kernel gives no notice) until it
    /// gives a value, at most `limit`: again each time 10 ms pass with this process still
    /// running, and once more, for the last time, as soon as it ends.
    fn watch<T>(&mut self, limit: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = ready() {
                return Some(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.status.is_some() {
                return None;
            }
            self.status = self.ended.recv_timeout(left.min(Duration::from_millis(10))).ok();
        }
    }
}

/// As [`refused`], bounded in time.
fn refused_within(args: &[&str], env: &[(&str, &str)], words: &[&str]) {
    let o = cashmere_within(args, env, Duration::from_secs(60));
    let what = format!("cashmere {} with {env:?}", args.join(" "));
    assert_eq!(o.code, Some(1), "{what}: exit code\n{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{what}: {}", o.stderr);
    for w in words {
        assert!(
            o.stderr.contains(w),
            "{what}: `{w}` missing from\n{}",
            o.stderr
        );
    }
}

/// A FIFO at `path` (made anew).
fn fifo(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success());
}

#[test]
fn platform_and_homes_files_are_bounded_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("pipe.toml");
    fifo(&pipe);
    let pipe = pipe.to_str().unwrap();
    for file in [pipe, "/dev/zero", "/dev/urandom"] {
        refused_within(
            &["run", "sor", "--clock", "modeled", "--platform", file],
            &[],
            &["platform file", file, "not a regular file"],
        );
        refused_within(
            &["table", "--size", "test", "--platform", file, "--out", pipe],
            &[],
            &["--platform", file, "not a regular file"],
        );
        refused_within(
            &["run", "sor", "--homes", file],
            &[],
            &["homes file", file, "not a regular file"],
        );
    }
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    refused_within(
        &[
            "run",
            "sor",
            "--clock",
            "modeled",
            "--platform",
            big.to_str().unwrap(),
        ],
        &[],
        &["platform file", "larger than the limit of 1 MiB"],
    );
    let big_homes = dir.path().join("big.homes");
    std::fs::File::create(&big_homes)
        .unwrap()
        .set_len(257 << 20)
        .unwrap();
    refused_within(
        &["run", "sor", "--homes", big_homes.to_str().unwrap()],
        &[],
        &["homes file", "larger than the limit of 256 MiB"],
    );
}

#[test]
fn a_kept_cell_that_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    std::fs::create_dir_all(out.join("cells")).unwrap();
    let cell = out.join("cells").join("sor__CSM-None.json");
    fifo(&cell);
    let args = tiny_table(&out, &[]);
    refused_within(
        &args,
        &[],
        &[
            "kept cell",
            cell.to_str().unwrap(),
            "not a regular file",
            "--force",
        ],
    );
    std::fs::remove_file(&cell).unwrap();
    std::fs::File::create(&cell)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    refused_within(
        &args,
        &[],
        &["kept cell", "larger than the limit of 16 MiB", "--force"],
    );
}

#[test]
fn water_spatial_counts_its_cell_grid_before_allocating() {
    for cutoff in ["0.01", "0.0001", "1e-300"] {
        refused_within(
            &["run", "water-sp", "--param", &format!("cutoff={cutoff}")],
            &[],
            &["water-sp", "cells", "cutoff", "larger cutoff"],
        );
    }
    // The cutoff from a deck.
    let deck = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../apps/data/water/n512-p1.in"
    ))
    .unwrap();
    assert!(deck.contains("6.212752"));
    let deck = temp("deck-cutoff", &deck.replace("6.212752", "0.01"));
    refused_within(
        &["run", "water-sp", "--param", &format!("deck={deck}")],
        &[],
        &["water-sp", "the deck's", "cells", "larger cutoff"],
    );
    let _ = std::fs::remove_file(&deck);
}

#[test]
fn runs_of_a_cell_are_bounded() {
    refused_within(
        &["table", "--size", "test", "--runs", "18446744073709551615"],
        &[],
        &["--runs 18446744073709551615", "at most 100"],
    );
    refused_within(
        &["table", "--size", "test", "--runs", "101"],
        &[],
        &["at most 100"],
    );
}

#[test]
fn a_time_step_that_blows_up_fails_the_run_cleanly() {
    refused_within(
        &["run", "barnes", "--param", "dtime=1e300"],
        &[],
        &["barnes", "dtime", "too large"],
    );
}

#[test]
fn a_full_standard_output_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let table = tiny_table(&out, &[]);
    let run = ["run", "sor", "--nodes", "1", "--procs", "1"];
    for args in [&["profiles"][..], &run, &table, &["platforms"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = command(args, &[])
            .stdin(Stdio::null())
            .stdout(full)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write standard output: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` for stopped, `Z`...), `None` if it is
/// gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Gone, or a zombie (ended; its new parent may not reap it).
fn gone(pid: u32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// The live descendants of `root`, with their states, from /proc.
fn descendants(root: u32) -> Vec<(u32, char)> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        parent_of.push((pid, ppid, state));
    }
    let mut family = vec![root];
    let mut out = Vec::new();
    while let Some(p) = family.pop() {
        for &(pid, ppid, state) in &parent_of {
            if ppid == p && !matches!(state, 'Z' | 'X') {
                family.push(pid);
                out.push((pid, state));
            }
        }
    }
    out
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Waits until every one of `pids` is gone; on the limit, kills the ones left (so that a
/// failing test leaves nothing running) and fails.
fn all_gone(pids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ended = pids.iter().all(|&p| {
        dsm::host::wait_process_gone(p, deadline.saturating_duration_since(Instant::now()))
    });
    if !ended {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
        for &p in &left {
            signal(p, "-KILL");
        }
        panic!("{what}: processes {left:?} were left running");
    }
}

/// `cashmere run sor` in process mode on 4 nodes with node `node` stopped by the test-only
/// `DSM_TEST_STOP` at `point`: the run fails within its limits with a report that names
/// that node (and its pid, once it has one), and no node process is left. The stall limit
/// is 3 s (start-up 9 s): with 1 s, a live node whose heartbeat thread a loaded host left
/// unscheduled for a second could be reported first.
fn stopped_node_is_reported(node: usize, point: &str, words: &[&str]) {
    let started = Instant::now();
    let mut child = command(
        &[
            "run",
            "sor",
            "--exec",
            "processes",
            "--nodes",
            "4",
            "--procs",
            "1",
            "--stall-timeout",
            "3",
        ],
        &[("DSM_TEST_STOP", &format!("{node}:{point}"))],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let err = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { err }, &mut s);
        s
    });
    let mut child = Launched::new(child);
    let pid = child.pid;
    // The four node processes, one of them stopped.
    let family = child.watch(Duration::from_secs(60), || {
        let d = descendants(pid);
        (d.len() == 4 && d.iter().any(|&(_, s)| s == 'T')).then_some(d)
    });
    let Some(family) = family else {
        let left: Vec<u32> = descendants(pid).iter().map(|d| d.0).collect();
        child.kill();
        for p in left {
            signal(p, "-KILL");
        }
        panic!("{point}: no node process stopped (is DSM_TEST_STOP honoured?)");
    };
    let stopped = family.iter().find(|d| d.1 == 'T').unwrap().0;
    let status = child.wait(Duration::from_secs(60));
    let pids: Vec<u32> = family.iter().map(|d| d.0).collect();
    if status.is_none() {
        child.kill();
        all_gone(&pids, point);
        panic!("{point}: the launcher did not end: it hangs on the stopped node");
    }
    let stderr = err.join().unwrap();
    assert_eq!(status.unwrap().code(), Some(1), "{point}: {stderr}");
    assert!(!stderr.contains("panicked"), "{point}: {stderr}");
    let first = format!(": node {node} stopped responding: ");
    assert!(
        stderr.contains(&first),
        "{point}: `{first}` missing from\n{stderr}"
    );
    for w in words {
        assert!(stderr.contains(w), "{point}: `{w}` missing from\n{stderr}");
    }
    assert!(stderr.contains("--stall-timeout"), "{point}: {stderr}");
    // The report names the process that was stopped (before the exec, the launcher's fork).
    assert!(
        stderr.contains(&format!("pid {stopped};")),
        "{point}: the stopped process is {stopped}:\n{stderr}"
    );
    all_gone(&pids, point);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{point}: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_node_stopped_before_it_execs_is_reported_within_the_start_up_limit() {
    stopped_node_is_reported(
        0,
        "before-exec",
        &["not started within 9 s", "between fork and exec"],
    );
}

#[test]
fn a_node_stopped_after_exec_is_reported_within_the_start_up_limit() {
    stopped_node_is_reported(
        1,
        "after-exec",
        &["not started within 9 s", "had not reached this cluster run"],
    );
}

#[test]
fn a_node_stopped_before_it_is_ready_is_the_one_reported() {
    stopped_node_is_reported(
        2,
        "before-ready",
        &[
            "no heartbeat for 3 s",
            "starting up, before the start-up barrier",
        ],
    );
}

#[test]
fn the_test_stop_variable_is_checked() {
    refused_within(
        &[
            "run",
            "sor",
            "--exec",
            "processes",
            "--nodes",
            "2",
            "--procs",
            "1",
        ],
        &[("DSM_TEST_STOP", "0:later")],
        &[
            "DSM_TEST_STOP=`0:later`",
            "before-exec, after-exec, before-ready",
        ],
    );
}

/// A table of two jobs in process mode whose clusters are held in start-up (each job's
/// node 0 stopped before its exec): it runs until it is ended. Returns it and its
/// processes (the jobs and their node processes).
fn blocked_table(out: &std::path::Path) -> (Launched, Vec<u32>) {
    let child = command(
        &[
            "table",
            "--apps",
            "sor,tsp",
            "--variants",
            "CSM-None",
            "--size",
            "test",
            "--nodes",
            "2",
            "--procs",
            "1",
            "--clock",
            "wall",
            "--exec",
            "processes",
            "--jobs",
            "2",
            "--force",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            ("DSM_TEST_STOP", "0:before-exec"),
            ("DSM_STALL_TIMEOUT", "100"),
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut child = Launched::new(child);
    let pid = child.pid;
    let family = child.watch(Duration::from_secs(120), || {
        let d = descendants(pid);
        (d.len() == 6 && d.iter().filter(|&&(_, s)| s == 'T').count() == 2).then_some(d)
    });
    let Some(family) = family else {
        let left: Vec<u32> = descendants(pid).iter().map(|d| d.0).collect();
        child.kill();
        for p in left {
            signal(p, "-KILL");
        }
        panic!("the table's jobs never held a stopped node (is DSM_TEST_STOP honoured?)");
    };
    (child, family.iter().map(|d| d.0).collect())
}

#[test]
fn a_table_ended_by_sigterm_takes_its_jobs_and_their_nodes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let (mut table, family) = blocked_table(&out);
    // Two jobs, each with its two node processes.
    assert_eq!(family.len(), 6, "{family:?}");
    signal(table.pid, "-TERM");
    let status = table.wait(Duration::from_secs(30));
    if status.is_none() {
        table.kill();
    }
    all_gone(&family, "after SIGTERM to the table");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status.expect("the table ended")),
        Some(15)
    );
    // Nothing half-written: every cell file there is whole JSON.
    for e in std::fs::read_dir(out.join("cells")).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        assert!(
            e.path().extension().is_some_and(|x| x == "json")
                && text.parse::<serde_json::Value>().is_ok(),
            "{}",
            e.path().display()
        );
    }
}

#[test]
fn a_second_table_on_the_same_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let (mut first, family) = blocked_table(&out);
    let second = cashmere_within(
        &tiny_table(&out, &["--force"]),
        &[],
        Duration::from_secs(60),
    );
    first.kill();
    all_gone(&family, "after the first table was killed");
    assert_eq!(second.code, Some(1), "{}", second.stderr);
    for w in [
        "another cashmere table",
        &format!("pid {}", first.pid),
        "wait for it to finish, or give another --out",
    ] {
        assert!(
            second.stderr.contains(w),
            "`{w}` missing from\n{}",
            second.stderr
        );
    }
    // Once the first is gone, the same table runs.
    let third = cashmere_within(
        &tiny_table(&out, &["--force"]),
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(third.code, Some(0), "{}", third.stderr);
}

/// The smallest table: SOR under CSM-None at the test size on 1 x 1, wall clock, writing
/// to `out`, with `extra` flags.
fn tiny_table<'a>(out: &'a std::path::Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "table", "--apps", "sor", "--variants", "CSM-None", "--size", "test", "--nodes", "1",
        "--procs", "1", "--clock", "wall",
    ];
    args.extend_from_slice(extra);
    args.extend(["--out", out.to_str().unwrap()]);
    args
}

/// The text of the built-in platform as a file, to edit.
fn platform_text() -> String {
    let o = cashmere(&["platforms", "--dump", "alphaserver-mc2"], &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    o.stdout
}

/// Issue 16, section 3: figures that would make virtual time wrap, or print believable
/// nonsense, are refused when they are read, naming where they came from.
#[test]
fn modeled_time_inputs_are_bounded_when_read() {
    for scale in ["1e15", "1e20", "0", "abc"] {
        refused(
            &["run", "sor", "--clock", "modeled", "--cpu-scale", scale],
            &[],
            &[&format!("--cpu-scale `{scale}`"), "from 1e-6 to 1e6"],
        );
    }
    let good = platform_text();
    for (name, from, to, words) in [
        (
            "fault-max.toml",
            "fault_ns = 10_000",
            "fault_ns = 18446744073709551615",
            &["host.fault_ns", "above the bound", "from 0 to 1000000000"][..],
        ),
        (
            "fault-1e18.toml",
            "fault_ns = 10_000",
            "fault_ns = 1_000_000_000_000_000_000",
            &["host.fault_ns = 1000000000000000000", "above the bound"][..],
        ),
        (
            "copy.toml",
            "copy_ns_per_byte = 8.3",
            "copy_ns_per_byte = 1e300",
            &["host.copy_ns_per_byte = 1e300", "above the bound"][..],
        ),
        (
            "latency.toml",
            "# latency_ns = 3300",
            "latency_ns = 18446744073709551615",
            &["network_overrides.latency_ns", "above the bound"][..],
        ),
        (
            "seq.toml",
            "sor = 36.2",
            "sor = 1e300",
            &["sequential_s.sor = 1e300", "outside the bounds"][..],
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let file = temp(name, &good.replace(from, to));
        let o = cashmere(
            &["run", "sor", "--clock", "modeled", "--cpu-scale", "1", "--platform", &file],
            &[],
        );
        assert_eq!(o.code, Some(1), "{name}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{name}: ran before refusing:\n{}", o.stdout);
        for w in words.iter().chain(&[file.as_str()]) {
            assert!(o.stderr.contains(w), "{name}: `{w}` missing from\n{}", o.stderr);
        }
    }
}

/// A cached sequential time that no measurement gives (edited, or from a broken build)
/// is refused before any run, naming the cache file and saying to delete it.
#[test]
fn an_impossible_cached_sequential_time_names_the_cache() {
    for time in ["1e308", "5e-324"] {
        let dir = temp_path(&format!("cache-{time}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = format!("{dir}/sequential.json");
        std::fs::write(
            &file,
            format!(
                "{{\"schema\": 2, \"entries\": {{\"sor [n=1] on here\": {{\"app\": \"sor\", \
                 \"params\": \"n=1\", \"host\": \"here\", \"our_seq_s\": {time}, \
                 \"measured\": \"2026-01-01 00:00 UTC\"}}}}}}"
            ),
        )
        .unwrap();
        let o = cashmere(
            &["run", "sor", "--clock", "modeled", "--compute", "measured"],
            &[("CASHMERE_CACHE_DIR", &dir)],
        );
        assert_eq!(o.code, Some(1), "{time}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{time}: ran:\n{}", o.stdout);
        for w in [file.as_str(), "impossible", "delete the file"] {
            assert!(o.stderr.contains(w), "{time}: `{w}` missing from\n{}", o.stderr);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Issue 16, section 6: input that was silently ignored or taken one way of two.
#[test]
fn inputs_once_silently_ignored_are_refused() {
    refused(
        &["run", "sor", "--cpu-scale", "abc"],
        &[],
        &["--cpu-scale `abc`", "not valid"],
    );
    refused(
        &["run", "sor", "--cpu-scale", "5"],
        &[],
        &["--cpu-scale", "modeled clock only", "--clock modeled"],
    );
    refused(
        &["run", "sor"],
        &[("CASHMERE_PROGRESS_AFTER_S", "abc")],
        &["CASHMERE_PROGRESS_AFTER_S=`abc`", "unset"],
    );
    let both = temp_path("json-and-homes");
    let _ = std::fs::remove_file(&both);
    refused(
        &["run", "sor", "--json", &both, "--save-homes", &both],
        &[],
        &["--json and --save-homes", "give each its own file"],
    );
    assert!(!std::path::Path::new(&both).exists(), "a file was written");
    refused(
        &["run", "tsp", "--input", "a", "--param", "input=b"],
        &[],
        &["--input a and --param input=b", "give one"],
    );
    let file = temp(
        "seq-foo.toml",
        &platform_text().replace("sor = 36.2", "sor = 36.2\nfoo = 3"),
    );
    refused(
        &["run", "sor", "--clock", "modeled", "--cpu-scale", "1", "--platform", &file],
        &[],
        &[&file, "[sequential_s] names `foo`", "not an application"],
    );
    let file = temp(
        "control-name.toml",
        &platform_text().replace("name = \"alphaserver-mc2\"", "name = \"mc\\u001b[31mred\""),
    );
    let o = cashmere(
        &["run", "sor", "--clock", "modeled", "--cpu-scale", "1", "--platform", &file],
        &[],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(!o.stderr.contains('\u{1b}') && !o.stdout.contains('\u{1b}'), "{:?}", o.stderr);
    assert!(o.stderr.contains("control character"), "{}", o.stderr);
    // A 100 MB platform file of one line is not read, let alone quoted whole.
    let big = temp_path("one-line.toml");
    std::fs::write(&big, format!("name = \"{}\"", "x".repeat(100 << 20))).unwrap();
    let o = cashmere(&["run", "sor", "--clock", "modeled", "--platform", &big], &[]);
    let _ = std::fs::remove_file(&big);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.len() < 2000, "a message of {} bytes", o.stderr.len());
    assert!(o.stderr.contains("larger than the limit of 1 MiB"), "{}", o.stderr);
}

/// A small wall-clock table of SOR under CSM-DMS and CSM-None in `out`.
fn small_table(out: &str, env: &[(&str, &str)]) -> Outcome {
    cashmere(
        &[
            "table", "--apps", "sor", "--variants", "CSM-DMS,CSM-None", "--size", "test",
            "--nodes", "1", "--procs", "2", "--clock", "wall", "--out", out,
        ],
        env,
    )
}

/// A kept cell whose figures no run gives is refused on resume, naming the file and
/// --force, and --force runs it again; so are CSM-DMS homes in --out that cannot be
/// replayed.
#[test]
fn a_resumed_table_refuses_impossible_cells_and_homes_naming_force() {
    let out = temp_path("table-kept");
    let _ = std::fs::remove_dir_all(&out);
    let first = small_table(&out, &[]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let cell = format!("{out}/cells/sor__CSM-None.json");
    let text = std::fs::read_to_string(&cell).unwrap();
    let start = text.find("\"speedup\": ").expect("a speedup") + "\"speedup\": ".len();
    let end = start + text[start..].find(',').unwrap();
    std::fs::write(&cell, format!("{}1e308{}", &text[..start], &text[end..])).unwrap();
    let o = small_table(&out, &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    for w in [cell.as_str(), "impossible figure", "speedup = 1e308", "--force"] {
        assert!(o.stderr.contains(w), "`{w}` missing from\n{}", o.stderr);
    }
    assert!(!o.stdout.contains("1e308") && !o.stdout.contains("e308"), "{}", o.stdout);
    let o = cashmere(
        &[
            "table", "--apps", "sor", "--variants", "CSM-DMS,CSM-None", "--size", "test",
            "--nodes", "1", "--procs", "2", "--clock", "wall", "--out", &out, "--force",
        ],
        &[],
    );
    assert_eq!(o.code, Some(0), "--force did not run it again: {}", o.stderr);
    // Garbage in place of the homes CSM-DMS captured: the replaying cell is refused.
    let homes = format!("{out}/homes/sor.homes");
    std::fs::write(&homes, "three 0\n").unwrap();
    let o = small_table(&out, &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    for w in [homes.as_str(), "cannot be replayed", "--force"] {
        assert!(o.stderr.contains(w), "`{w}` missing from\n{}", o.stderr);
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `table` takes the same `DSM_*` variables as `run` and `suite` (a flag wins), and
/// names each app once.
#[test]
fn table_honours_the_environment_and_refuses_repeated_apps() {
    let out = temp_path("table-env");
    let _ = std::fs::remove_dir_all(&out);
    let args = |extra: &[&'static str]| {
        let mut v = vec!["table", "--apps", "sor", "--size", "test", "--nodes", "1", "--procs", "1"];
        v.extend_from_slice(extra);
        v
    };
    let mut bad = args(&["--out"]);
    bad.push(&out);
    refused(&bad, &[("DSM_VARIANT", "bogus")], &["DSM_VARIANT=`bogus`", "unset"]);
    refused(&bad, &[("DSM_CLOCK", "bogus")], &["DSM_CLOCK=`bogus`", "unset"]);
    refused(&bad, &[("DSM_PLATFORM", "vax")], &["DSM_PLATFORM=`vax`", "unset"]);
    let mut dup = vec!["table", "--apps", "sor,sor", "--clock", "wall", "--out"];
    dup.push(&out);
    refused(&dup, &[], &["--apps names sor twice"]);
    // DSM_CLOCK=wall and DSM_VARIANT=CSM-None are honoured: one wall-clock cell.
    let o = cashmere(&bad, &[("DSM_CLOCK", "wall"), ("DSM_VARIANT", "CSM-None")]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let cells: Vec<_> = std::fs::read_dir(format!("{out}/cells"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(cells, vec!["sor__CSM-None.json".to_string()]);
    let cell = std::fs::read_to_string(format!("{out}/cells/sor__CSM-None.json")).unwrap();
    assert!(cell.contains("\"clock\": \"wall\""), "{cell}");
    // The flag wins over the variable.
    let mut flag = bad.clone();
    flag.extend(["--clock", "wall", "--variants", "CSM-S"]);
    let o = cashmere(&flag, &[("DSM_CLOCK", "bogus"), ("DSM_VARIANT", "bogus")]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&out);
}

/// A water deck given by the user is run as it says (its NMOL and NSTEP), unless
/// --param molecules= or steps= say otherwise; a missing input is reported under the
/// path the user gave; a water parameter that makes no sense is blamed by name.
#[test]
fn water_decks_and_inputs_are_taken_as_given() {
    // 729 molecules need more velocities than the shipped random.in holds: the deck's
    // NMOL was taken (it used to be replaced by the test size's 64, and the run passed).
    let big = temp("deck-729.in", "1.5e-16 729 2 6 -1 3000 3 0 1 6.212752\n");
    refused(
        &["run", "water-nsq", "--input", &big],
        &[],
        &["729 molecules need", "short_random=zero"],
    );
    let no_steps = temp("deck-0-steps.in", "1.5e-16 216 0 6 -1 3000 3 0 1 6.212752\n");
    refused(
        &["run", "water-sp", "--param", &format!("deck={no_steps}")],
        &[],
        &["`steps` = `deck (NSTEP = 0)`", "--param steps="],
    );
    // A flag still wins over the deck.
    let o = cashmere(
        &["run", "water-nsq", "--input", &big, "--param", "molecules=64", "--nodes", "1", "--procs", "1"],
        &[],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let o = cashmere(&["run", "tsp", "--input", "no-such-cities"], &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("cannot read input file no-such-cities:"),
        "{}",
        o.stderr
    );
    refused(
        &["run", "water-sp", "--param", "cutoff=1e300"],
        &[],
        &["`cutoff` = `1e300`", "at least one cell per processor", "--param cutoff="],
    );
    refused(
        &["run", "water-nsq", "--param", "tstep=1e300"],
        &[],
        &["`tstep` = `1e300`", "at most 1e-14 s"],
    );
}

/// Issue 16, section 6: messages that now say what to do.
#[test]
fn refusals_say_what_to_do() {
    // The write-notice lists do not fit mc2's address space: refused before the
    // sequential run, with networks that have the room.
    let o = cashmere(&["run", "sor", "--nodes", "32", "--procs", "64"], &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "ran before refusing:\n{}", o.stdout);
    for w in ["network address space", "write-notice lists", "--network host", "CSM-None"] {
        assert!(o.stderr.contains(w), "`{w}` missing from\n{}", o.stderr);
    }
    refused(
        &["run", "sor"],
        &[("DSM_NODE", "1")],
        &["DSM_NODE is set in the environment", "internal", "unset DSM_NODE"],
    );
    let o = cashmere(
        &["bench", "proto", "--adb-nodes", "99", "--iters", "1"],
        &[],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "measured before refusing:\n{}", o.stdout);
    assert!(o.stderr.contains("--adb-nodes") && o.stderr.contains("from 2 to 32"), "{}", o.stderr);
    // An address-space limit: the advice names --heap-mb.
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" run sor")
        .arg(binary())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--heap-mb") && stderr.contains("ulimit -v"), "{stderr}");
}

/// Too many mappings for vm.max_map_count under the modeled clock: the advice is what
/// works there (not --exec processes, which the modeled clock refuses).
#[test]
fn too_many_mappings_under_the_modeled_clock_says_what_works_there() {
    let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(usize::MAX);
    // SOR small on 32 nodes: 2057 pages of 8 KiB each, 66,336 mappings in all.
    let o = cashmere(
        &[
            "run", "sor", "--size", "small", "--param", "iterations=1", "--clock", "modeled",
            "--cpu-scale", "1", "--nodes", "32", "--procs", "4",
        ],
        &[],
    );
    if limit >= 66_336 {
        // A host whose limit holds the run: it runs, and is not refused for mappings.
        assert_eq!(o.code, Some(0), "vm.max_map_count = {limit}: {}", o.stderr);
        assert!(!o.stderr.contains("vm.max_map_count"), "{}", o.stderr);
        return;
    }
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    for w in ["vm.max_map_count", "--backend userfaultfd", "sysctl -w vm.max_map_count", "fewer pages"] {
        assert!(o.stderr.contains(w), "`{w}` missing from\n{}", o.stderr);
    }
    assert!(!o.stderr.contains("use --exec processes"), "{}", o.stderr);
}

/// Issue 17: the charge of computation is chosen with `--compute`; a bad value, a factor
/// with counted computation, and `--compute` under the wall clock are refused.
#[test]
fn the_charge_of_computation_is_chosen_and_bad_choices_are_refused() {
    refused(
        &["run", "sor", "--clock", "modeled", "--compute", "guessed"],
        &[],
        &["--compute `guessed` is not valid", "counted or measured"],
    );
    refused(
        &["run", "sor", "--clock", "modeled", "--compute", "counted", "--cpu-scale", "2"],
        &[],
        &["applies to measured computation", "--compute measured"],
    );
    refused(&["run", "sor", "--compute", "counted"], &[], &["--compute applies to the modeled clock only"]);
    refused(
        &["table", "--apps", "sor", "--clock", "wall", "--compute", "measured", "--out", "/tmp/unused-table"],
        &[],
        &["--compute applies to the modeled clock only"],
    );
    refused(
        &["run", "sor", "--clock", "modeled"],
        &[("DSM_COMPUTE", "timed")],
        &["DSM_COMPUTE=`timed`", "--compute"],
    );
    let o = cashmere(&["run", "sor", "--clock", "modeled", "--nodes", "2", "--procs", "2"], &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("computation: counted work") && o.stdout.contains("ns per point"), "{}", o.stdout);
}

/// `cashmere calibrate` counts an app's units and times them; at the paper's input it
/// checks the declared units (not run here: too long for a test), elsewhere it says so.
#[test]
fn calibrate_counts_an_apps_units() {
    let o = cashmere(&["calibrate", "--apps", "sor", "--size", "test"], &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    // 128 x 256 interior points, 10 iterations.
    assert!(o.stdout.contains("units           327680"), "{}", o.stdout);
    assert!(o.stdout.contains("checked at --size paper"), "{}", o.stdout);
}
