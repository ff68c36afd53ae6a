//! `cashmere table` end to end on a tiny table (two apps x two variants at test size on
//! 2 nodes x 1 processor, wall clock): every output is written and readable, a second run
//! keeps every finished cell, `--force` runs them again, and bad names are refused before
//! anything is run. Runs the built binary (`CASHMERE_TEST_BIN` runs another build) with
//! the `DSM_*` variables cleared.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TINY: [&str; 13] = [
    "table",
    "--apps",
    "sor,tsp",
    "--variants",
    "CSM-DMS,CSM-None",
    "--size",
    "test",
    "--nodes",
    "2",
    "--procs",
    "1",
    "--clock",
    "wall",
];

const CELLS: [&str; 4] = [
    "sor__CSM-DMS",
    "sor__CSM-None",
    "tsp__CSM-DMS",
    "tsp__CSM-None",
];

fn table(args: &[&str], out: &Path) -> Output {
    let bin = std::env::var_os("CASHMERE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cashmere")));
    let mut c = Command::new(bin);
    c.args(args).arg("--out").arg(out).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DSM_")) {
        c.env_remove(k);
    }
    c.output().expect("the cashmere binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`, expecting success; returns standard output.
fn succeeds(args: &[&str], out: &Path) -> String {
    let o = table(args, out);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{args:?} failed\n{stdout}\n{stderr}");
    stdout
}

/// Runs `args`, expecting exit code 1 with every one of `words` in the error, no panic,
/// and nothing written to `out`.
fn refused(args: &[&str], out: &Path, words: &[&str]) {
    let o = table(args, out);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: exit code\n{stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for w in words {
        assert!(stderr.contains(w), "{args:?}: `{w}` missing from\n{stderr}");
    }
    assert!(!out.exists(), "{args:?} wrote {}", out.display());
}

fn cell_files(out: &Path) -> Vec<Vec<u8>> {
    CELLS
        .iter()
        .map(|c| std::fs::read(out.join("cells").join(format!("{c}.json"))).unwrap())
        .collect()
}

/// The tiny table with `extra` arguments.
fn tiny_with(extra: &[&'static str]) -> Vec<&'static str> {
    TINY.iter().chain(extra).copied().collect()
}

/// The `table.json` a table wrote to `out`.
fn table_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("table.json")).unwrap()).unwrap()
}

#[test]
fn a_tiny_table_writes_every_output_and_keeps_finished_cells() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let stdout = succeeds(&TINY, &out);
    assert!(stdout.contains("4 cell(s) run, 0 cell(s) kept"), "{stdout}");
    // Table 4's layout with our figures alone: a test-size table on a small cluster is
    // not the paper's configuration, so nothing is set beside the paper's figures.
    assert!(
        stdout.contains("SOR") && stdout.contains("Page Transfers (K)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains(" / 31.2") && stdout.contains("not the paper's configuration"),
        "SOR's CSM-DMS speedup beside the paper's in a table that is not its configuration\n{stdout}"
    );
    assert!(
        stdout.contains("figure1.svg") && stdout.contains("table.md"),
        "{stdout}"
    );
    // Each app's computation beside the sequential program's, from its CSM-DMS cell.
    let computation = stdout
        .lines()
        .find(|l| l.starts_with("- Computation, the processors' total User time"))
        .unwrap_or_else(|| panic!("no computation line\n{stdout}"));
    for app in ["sor", "tsp"] {
        let ratio: f64 = computation
            .split(&format!("{app} "))
            .nth(1)
            .and_then(|rest| rest.split([',', ' ']).next())
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no figure for {app}: {computation}"));
        assert!(ratio > 0.0, "{computation}");
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("table.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], "cashmere-table/1");
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        let name = format!("{}__{}", c["config"]["app"], c["config"]["variant"]);
        assert_eq!(c["verified"], true, "{name}");
        assert!(c["run"]["speedup"].as_f64().unwrap() > 0.0, "{name}");
        assert!(
            c["run"]["counters"]["page_transfers"].as_u64().unwrap() > 0,
            "{name}"
        );
        assert!(
            c["run"]["breakdown"]["user_ns"].as_u64().unwrap() > 0,
            "{name}"
        );
        assert_eq!(
            c["scale"]["factor"], 1.0,
            "{name}: the wall clock is not scaled"
        );
    }
    // CSM-None replays the homes CSM-DMS chose (the paper's footnote 4).
    assert_eq!(cells[0]["config"]["homes"], "first-touch");
    assert_eq!(cells[1]["config"]["homes"], "captured from CSM-DMS");
    assert!(out.join("homes").join("sor.homes").is_file());
    let findings = json["summary"]["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 7);
    // Barnes was not run.
    assert_eq!(findings[0]["verdict"], "not-measured");

    let csv = std::fs::read_to_string(out.join("table.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(rows[0].starts_with("app,variant,verified,"), "{csv}");
    assert!(rows[1].starts_with("sor,CSM-DMS,true,"), "{csv}");
    let md = std::fs::read_to_string(out.join("table.md")).unwrap();
    for part in [
        "| SOR | Speedup |",
        "## Summary",
        "The paper's findings",
        "7. not measured",
    ] {
        assert!(md.contains(part), "`{part}` missing from\n{md}");
    }

    let svg = std::fs::read_to_string(out.join("figure1.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("figure1.svg is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for label in [
        "SOR", "TSP", "User", "Protocol", "Wait", "Message", "DMS", "None",
    ] {
        assert!(
            texts.contains(&label),
            "`{label}` missing from the figure: {texts:?}"
        );
    }
    // CSM-DMS's bars are the unit.
    assert!(texts.contains(&"1.00"), "{texts:?}");

    // A second run keeps every cell as it was; --force runs them all again.
    let before = cell_files(&out);
    let stdout = succeeds(&TINY, &out);
    assert!(stdout.contains("0 cell(s) run, 4 cell(s) kept"), "{stdout}");
    assert_eq!(cell_files(&out), before, "kept cells were rewritten");
    let mut forced = TINY.to_vec();
    forced.push("--force");
    let stdout = succeeds(&forced, &out);
    assert!(stdout.contains("4 cell(s) run, 0 cell(s) kept"), "{stdout}");

    // A missing cell is run again alone; a cell run under other settings is not kept.
    std::fs::remove_file(out.join("cells").join("tsp__CSM-None.json")).unwrap();
    let stdout = succeeds(&TINY, &out);
    assert!(stdout.contains("1 cell(s) run, 3 cell(s) kept"), "{stdout}");
    let mut other = TINY.to_vec();
    other.extend(["--homes", "first-touch"]);
    let stdout = succeeds(&other, &out);
    assert!(
        stdout.contains("2 cell(s) run, 2 cell(s) kept"),
        "only the CSM-None cells change homes\n{stdout}"
    );
}

#[test]
fn bad_names_are_refused_before_anything_is_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let with = |extra: &[&'static str]| {
        let mut args = vec!["table", "--size", "test", "--clock", "wall"];
        args.extend(extra);
        args
    };
    refused(
        &with(&["--apps", "sor,nope"]),
        &out,
        &[
            "unknown application `nope`",
            "valid applications",
            "water-nsq",
        ],
    );
    refused(
        &with(&["--variants", "CSM-DMS,CSM-XYZ"]),
        &out,
        &[
            "unknown protocol variant `CSM-XYZ`",
            "valid variants",
            "CSM-None-Mg",
        ],
    );
    refused(
        &with(&[
            "--apps",
            "sor",
            "--variants",
            "CSM-None,CSM-DMS",
            "--network",
            "gige-tcp",
        ]),
        &out,
        &["CSM-DMS needs remote write", "nothing was run"],
    );
    refused(
        &with(&["--homes", "nearest"]),
        &out,
        &["--homes", "captured, first-touch"],
    );
    refused(
        &["table", "--clock", "sundial"],
        &out,
        &["--clock", "wall, modeled"],
    );
    refused(
        &with(&["--platform", "vax"]),
        &out,
        &["--platform", "alphaserver-mc2"],
    );
    refused(&with(&["--variants", ","]), &out, &["at least one name"]);
}

/// In process mode every node process re-runs the command and must meet the parent's
/// cluster runs in order, though the parent keeps some cells and runs others.
#[test]
fn node_processes_follow_the_cells_the_parent_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p");
    let args = |variants| {
        let mut a = TINY.to_vec();
        a[2] = "sor";
        a[4] = variants;
        a.extend(["--exec", "processes"]);
        a
    };
    let stdout = succeeds(&args("CSM-DMS,CSM-None"), &out);
    assert!(stdout.contains("2 cell(s) run, 0 cell(s) kept"), "{stdout}");
    let stdout = succeeds(&args("CSM-DMS,CSM-MS,CSM-None,CSM-None-Mg"), &out);
    assert!(stdout.contains("2 cell(s) run, 2 cell(s) kept"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("table.json")).unwrap()).unwrap();
    for c in json["cells"].as_array().unwrap() {
        assert_eq!(c["verified"], true, "{}", c["config"]["variant"]);
        assert_eq!(c["config"]["exec"], "processes");
    }
}

/// A cell that fails is recorded with its error, the others go on, and the command ends
/// non-zero naming it.
#[test]
fn a_failed_cell_is_recorded_and_named_and_the_table_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f");
    succeeds(&TINY, &out);
    // Homes for a page beyond the heap: the replaying cell's cluster refuses them.
    std::fs::write(out.join("homes").join("sor.homes"), "999999999 1\n").unwrap();
    let o = table(&TINY, &out);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 cell(s) run, 3 cell(s) kept"), "{stdout}");
    assert!(
        stderr.contains("1 of 4 cell(s) failed") && stderr.contains("sor under CSM-None: ERROR"),
        "{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("table.json")).unwrap()).unwrap();
    let failed = &json["cells"][1];
    assert_eq!(failed["config"]["variant"], "CSM-None");
    assert!(failed["run"].is_null() && failed["verified"] == false);
    assert!(
        failed["error"].as_str().unwrap().contains("homes file"),
        "{failed}"
    );
    assert_eq!(json["cells"][3]["verified"], true, "tsp went on");
}

#[test]
fn jobs_run_apps_side_by_side_and_the_table_takes_their_cells() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("j");
    let jobs = tiny_with(&["--jobs", "2"]);
    let o = table(&jobs, &out);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("2 app(s), 2 at a time"), "{stderr}");
    // Each app ran in a job of its own, which printed its own two cells.
    assert!(stderr.contains("sor under CSM-None") && stderr.contains("tsp under CSM-None"));
    assert!(stdout.contains("4 cell(s) from the jobs"), "{stdout}");
    assert!(stdout.contains("0 run here"), "{stdout}");
    let json = table_json(&out);
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    assert!(cells.iter().all(|c| c["verified"] == true), "{json}");
    assert_eq!(cells[1]["config"]["homes"], "captured from CSM-DMS");

    // A cell that fails in a job is recorded and named, and not run again by the table.
    std::fs::write(out.join("homes").join("sor.homes"), "999999999 1\n").unwrap();
    std::fs::remove_file(out.join("cells").join("sor__CSM-None.json")).unwrap();
    let o = table(&jobs, &out);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("0 run here"), "{stdout}");
    assert!(stderr.contains("sor under CSM-None: ERROR"), "{stderr}");

    refused(
        &tiny_with(&["--jobs", "0"]),
        &dir.path().join("z"),
        &["--jobs must be at least 1"],
    );
}

#[test]
fn runs_keep_the_fastest_of_several_and_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let stdout = succeeds(&tiny_with(&["--runs", "2"]), &out);
    assert!(stdout.contains("4 cell(s) run, 0 cell(s) kept"), "{stdout}");
    let json = table_json(&out);
    for c in json["cells"].as_array().unwrap() {
        assert_eq!(c["config"]["runs"], 2, "{c}");
        assert_eq!(c["verified"], true, "{c}");
    }
    // A table of one run per cell does not keep cells of two.
    let stdout = succeeds(&TINY, &out);
    assert!(stdout.contains("4 cell(s) run, 0 cell(s) kept"), "{stdout}");

    refused(
        &tiny_with(&["--runs", "0"]),
        &dir.path().join("z"),
        &["--runs must be at least 1"],
    );
}
