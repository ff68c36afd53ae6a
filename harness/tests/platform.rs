//! Platforms and the modeled clock's settings from the command line: `cashmere platforms`,
//! `--dump` files that run, and bad `--clock`, `--platform` and `--cpu-scale` values
//! named with their flag or variable. Also checks that the apps' paper-size parameters are
//! the problem sizes of the paper's Table 3, whose sequential times the platform holds.

use app_common::{App, Params, Size};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Runs the built `cashmere` (`CASHMERE_TEST_BIN` runs another build) with `env` and no
/// other `DSM_*` variable.
fn cashmere(args: &[&str], env: &[(&str, &str)]) -> Output {
    let bin = std::env::var_os("CASHMERE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cashmere")));
    let mut c = Command::new(bin);
    c.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DSM_")) {
        c.env_remove(k);
    }
    c.envs(env.iter().copied()).output().expect("cashmere runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "cashmere-platform-cli-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("a temporary file");
        p.to_str().expect("a UTF-8 path").to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Checks a refusal: exit code 1, every one of `words` on standard error, no panic.
fn refused(args: &[&str], env: &[(&str, &str)], words: &[&str]) {
    let o = cashmere(args, env);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?} {env:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?} {env:?}: `{w}` not in: {err}");
    }
}

#[test]
fn platforms_lists_the_builtins_with_their_sources() {
    let o = cashmere(&["platforms"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("alphaserver-mc2"), "{out}");
    assert!(out.contains("source: Stets et al., HPCA 2000"), "{out}");
    assert!(out.contains("--dump"), "{out}");
}

#[test]
fn a_dumped_platform_reads_back_and_runs_with_its_changes() {
    let dir = TempDir::new("dump");
    let o = cashmere(&["platforms", "--dump", "alphaserver-mc2"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dumped = text(&o.stdout);
    assert!(
        dumped.contains("[host]") && dumped.contains("fault_ns = "),
        "{dumped}"
    );

    // The file dumps back to the same text: nothing was lost on the way.
    let file = dir.file("mc2.toml", &dumped);
    let again = cashmere(&["platforms", "--dump", &file], &[]);
    assert_eq!(text(&again.stdout), dumped);

    // A "what if" edit: a faster network, used by a modeled run.
    let edited = dumped
        .replace("name = \"alphaserver-mc2\"", "name = \"what-if\"")
        .replace("# latency_ns = 3300", "latency_ns = 1000");
    let file = dir.file("what-if.toml", &edited);
    let o = cashmere(
        &["run", "sor", "--clock", "modeled", "--cpu-scale", "2.5"],
        &[("DSM_PLATFORM", &file)],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("clock: modeled, platform what-if (network mc2 (latency_ns = 1000)), computation: measured CPU time x 2.500 (given by --cpu-scale)"),
        "{out}"
    );
}

#[test]
fn a_wall_run_says_its_clock() {
    let o = cashmere(&["run", "sor"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("  clock: wall\n"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn bad_clock_platform_and_scale_settings_name_their_flag_or_variable() {
    refused(
        &["run", "sor", "--clock", "bogus"],
        &[],
        &[
            "--clock `bogus` is not valid",
            "valid clocks: wall, modeled",
        ],
    );
    refused(
        &["run", "sor"],
        &[("DSM_CLOCK", "bogus")],
        &[
            "DSM_CLOCK=`bogus`",
            "--clock",
            "valid clocks: wall, modeled",
        ],
    );
    refused(
        &["run", "sor", "--platform", "alphaserver-mc3"],
        &[],
        &[
            "--platform `alphaserver-mc3`",
            "built-in platforms: alphaserver-mc2",
            "--dump",
        ],
    );
    refused(
        &["run", "sor"],
        &[("DSM_PLATFORM", "/nonexistent/my.toml")],
        &["DSM_PLATFORM=`/nonexistent/my.toml`", "cannot be read"],
    );
    refused(
        &["run", "sor", "--clock", "modeled", "--cpu-scale=0"],
        &[],
        &["--cpu-scale `0` is not valid", "a number from 1e-6 to 1e6"],
    );
    refused(
        &["run", "sor", "--clock", "modeled"],
        &[("DSM_CPU_SCALE", "fast")],
        &["DSM_CPU_SCALE=`fast`", "--cpu-scale"],
    );
    refused(
        &["platforms", "--dump", "nope"],
        &[],
        &["unknown platform `nope`", "alphaserver-mc2"],
    );
}

#[test]
fn a_broken_platform_file_is_named_with_the_line() {
    let dir = TempDir::new("broken");
    let dumped = text(&cashmere(&["platforms", "--dump", "alphaserver-mc2"], &[]).stdout);
    let file = dir.file(
        "broken.toml",
        &dumped.replace("handler_ns = 0", "handler_ns = fast"),
    );
    refused(
        &["run", "sor", "--platform", &file],
        &[],
        &[
            "--platform",
            "platform file",
            "broken.toml",
            "handler_ns = fast",
        ],
    );
}

/// The paper-size parameters against Table 3 of Stets et al. (problem sizes), for the apps
/// where Table 3 names a parameter.
#[test]
fn paper_sizes_are_the_problem_sizes_of_table_3() {
    let paper = |app: &dyn App, name: &str| -> String {
        Params::resolve(app.name(), app.params(), Size::Paper, &[])
            .unwrap()
            .str(name)
            .unwrap()
            .to_string()
    };
    let table_3: [(&dyn App, &str, &str); 10] = [
        (&app_barnes::BARNES, "nbody", "131072"), // 128K bodies
        (&app_lu::CLU, "n", "2048"),              // 2048x2048
        (&app_lu::LU, "n", "2500"),               // 2500x2500
        (&app_em3d::EM3D, "nodes", "64000"),      // 64000 nodes
        (&app_gauss::GAUSS, "n", "2048"),         // 2048x2048
        (&app_sor::SOR, "rows", "3072"),          // 3072x4096
        (&app_sor::SOR, "cols", "4096"),
        (&app_tsp::TSP, "input", "tsp/tspfile17"), // 17 cities
        (&app_water::WATER_NSQ, "molecules", "9261"), // 9261 mols.
        (&app_water::WATER_SP, "molecules", "9261"),
    ];
    for (app, name, want) in table_3 {
        assert_eq!(paper(app, name), want, "{} {name}", app.name());
    }
    let tsp = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../apps/data/tsp/tspfile17"
    ))
    .unwrap();
    assert_eq!(
        tsp.split_whitespace().next(),
        Some("17"),
        "tspfile17's city count"
    );
}
