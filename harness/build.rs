//! Records the build's optimization level for `scale.rs`: a cached sequential time is
//! only reused by a build as fast as the one that measured it.

fn main() {
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    let debug = std::env::var("DEBUG").map(|d| d != "false" && d != "0").unwrap_or(false);
    let assertions = std::env::var("CARGO_CFG_DEBUG_ASSERTIONS").is_ok();
    println!(
        "cargo:rustc-env=CASHMERE_BUILD=opt-level {opt}{}{}",
        if assertions { ", debug assertions" } else { "" },
        if debug { ", debug info" } else { "" }
    );
    println!("cargo:rerun-if-changed=build.rs");
}
