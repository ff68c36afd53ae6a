//! The crate's layers (`src/lib.rs`, "Layers"; `ARCHITECTURE.md`), checked against the
//! code: every module of `dsm/src` names (`crate::m`, `use crate::{m, ..}`) only modules
//! that come before it in [`ORDER`], bottom up. A module's own files (`net/msg.rs` is
//! `net`) and its `super::` are its own. Comments are not imports: doc text may point
//! anywhere.

use std::collections::BTreeMap;
use std::path::Path;

/// Every module of the crate, bottom up, in the layers `src/lib.rs` describes. A module
/// may import only modules listed before it (so the imports can hold no circle).
const ORDER: &[(&str, &[&str])] = &[
    (
        "the host door and plain data",
        &["sys", "ids", "profile", "platform", "testing"],
    ),
    ("the cluster's control block", &["control"]),
    ("time", &["sched", "wait", "work", "stats"]),
    ("the network", &["net"]),
    ("the launcher", &["launch"]),
    (
        "the protocol's data",
        &["page", "diff", "wire", "directory", "broadcast"],
    ),
    ("configuration", &["error", "config"]),
    ("strategies and engine", &["fault", "sync", "engine"]),
    ("the public API", &["host", "api", "netbench", "lib"]),
];

/// The module a source file belongs to: its first path component (`net/msg.rs` is
/// `net`), or its stem (`wire.rs` is `wire`, `lib.rs` is `lib`).
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().expect("a path").as_os_str();
    let first = first.to_str().expect("UTF-8 path");
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// `text` without its comments (line and block comments; string and character literals
/// are kept as they are, so a `//` inside a string is not taken for a comment). Raw
/// strings are not recognised: the crate has none.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A character literal ('"', '\''): copied whole, so its quote opens no string.
            let start = i;
            i += if b[i + 1] == b'\\' { 3 } else { 2 };
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str(&text[start..i.min(b.len())]);
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str(&text[start..i.min(b.len())]);
        } else {
            let c = text[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The crate modules `code` (comments stripped) names through `crate::`: `crate::m::..`,
/// `crate::m`, `crate::{m, n::..}`. A name that starts with a capital letter or is a
/// re-export of `lib.rs` (`crate::Config`, `crate::ABORT_MESSAGE`) is `lib`.
fn imports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').expect("a closed use group");
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
        .into_iter()
        .map(|n| {
            if n.starts_with(|c: char| c.is_uppercase()) || n == "self" {
                "lib".to_string()
            } else {
                n
            }
        })
        .collect()
}

fn rank() -> BTreeMap<&'static str, (usize, &'static str)> {
    let mut rank = BTreeMap::new();
    for (layer, modules) in ORDER {
        for m in *modules {
            let r = rank.len();
            assert!(rank.insert(*m, (r, *layer)).is_none(), "{m} listed twice");
        }
    }
    rank
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable source directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every import of `src` that does not point below its module: (file, importer,
/// imported).
fn violations(src: &Path) -> Vec<(String, String, String)> {
    let rank = rank();
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let m = module_of(rel);
        let (mine, _) = *rank.get(m.as_str()).unwrap_or_else(|| {
            panic!(
                "module {m} ({}) is not in ORDER: give it its layer",
                rel.display()
            )
        });
        let code = strip_comments(&std::fs::read_to_string(&f).expect("readable source"));
        for to in imports(&code) {
            if to == m {
                continue;
            }
            let theirs = rank
                .get(to.as_str())
                .unwrap_or_else(|| {
                    panic!("{} names crate::{to}, which is not in ORDER", rel.display())
                })
                .0;
            if theirs >= mine {
                bad.push((rel.display().to_string(), m.clone(), to));
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

#[test]
fn every_module_imports_only_from_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank = rank();
    let bad: Vec<String> = violations(&src)
        .into_iter()
        .map(|(file, from, to)| {
            format!(
                "{file}: {from} ({}) imports {to} ({}), which is not below it",
                rank[from.as_str()].1,
                rank[to.as_str()].1
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "imports against the layer order:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_and_not_comments() {
    let code = strip_comments(
        "use crate::net::{Fabric, Net};\n\
         use crate::{sched, wait::Seam};\n\
         /// See [`crate::engine`].\n\
         let s = \"// crate::api in a string\"; // crate::config\n\
         let q = '\"'; let l: &'static str = \"x\"; // crate::diff\n\
         /* crate::sync /* nested */ crate::fault */ x = crate::Config::default();\n\
         let y = dcrate::lib;",
    );
    let mut found = imports(&code);
    found.sort();
    // The string's text is kept: the reader does not parse strings for paths, and no
    // source names a module in a string.
    assert_eq!(found, ["api", "lib", "net", "sched", "wait"]);
}

#[test]
fn an_upward_import_is_found() {
    let dir = std::env::temp_dir().join(format!("dsm-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("net")).expect("temporary directory");
    std::fs::write(dir.join("sched.rs"), "use crate::control::Control;\n").expect("write");
    std::fs::write(
        dir.join("net/timing.rs"),
        "use crate::sched::Wake;\nuse super::Fabric;\n",
    )
    .expect("write");
    assert!(violations(&dir).is_empty());
    // The scheduler naming the network: time would know the network again.
    std::fs::write(
        dir.join("sched.rs"),
        "fn f() { crate::net::timing::Links::default(); }\n",
    )
    .expect("write");
    let found = violations(&dir);
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert_eq!(
        found,
        [(
            "sched.rs".to_string(),
            "sched".to_string(),
            "net".to_string()
        )]
    );
}
