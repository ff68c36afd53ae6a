//! The README's example program (`examples/histogram.rs`) under `mpirun` (a build with
//! `--features mpi`): on 2 and on 4 ranks, under CSM-None and CSM-None-Mg, rank 0 alone
//! prints its line, with no bucket wrong. If `mpirun` is missing the test fails with the
//! install command.
#![cfg(feature = "mpi")]

mod support;

/// The example's binary, which `cargo test` builds beside the test binaries.
fn histogram() -> std::path::PathBuf {
    let me = std::env::current_exe().expect("the test binary");
    let debug = me.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let path = debug.join("examples").join("histogram");
    assert!(
        path.is_file(),
        "{} is missing: build the examples (`cargo test -p dsm --features mpi` builds them)",
        path.display()
    );
    path
}

#[test]
fn the_readme_example_runs_on_mpi_ranks() {
    for (np, variant) in [(2, "CSM-None"), (2, "CSM-None-Mg"), (4, "CSM-None"), (4, "CSM-None-Mg")] {
        let nodes = np.to_string();
        let out = support::mpirun(np, &histogram(), &[variant, &nodes, "2"], &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{np} ranks, {variant}:\n{text}");
        let line = format!("{variant} on {np} nodes x 2 procs: 0 buckets wrong;");
        assert_eq!(stdout.matches(&line).count(), 1, "rank 0 alone prints:\n{text}");
        assert_eq!(stdout.lines().count(), 1, "{text}");
    }
}
