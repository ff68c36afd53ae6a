//! What several of the DSM's integration tests share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::fmt::Display;
use std::path::PathBuf;

/// A homes file (`Config::homes_file`: one `page home` per line) that pins first homes.
/// It is named after `name` and the launching process, so that the node processes of a
/// process-mode run read the file their launcher wrote; only the launcher writes it, and
/// removes it when dropped.
pub struct HomesFile(pub PathBuf);

impl HomesFile {
    pub fn new<P: Display>(name: &str, homes: &[(P, usize)]) -> HomesFile {
        let node_process = dsm::host::is_node_process();
        let launcher = if node_process {
            std::os::unix::process::parent_id()
        } else {
            std::process::id()
        };
        let path = std::env::temp_dir().join(format!("cashmere-{name}-{launcher}"));
        if !node_process {
            let text: String = homes.iter().map(|(p, h)| format!("{p} {h}\n")).collect();
            std::fs::write(&path, text).expect("cannot write the homes file");
        }
        HomesFile(path)
    }
}

impl Drop for HomesFile {
    fn drop(&mut self) {
        if !dsm::host::is_node_process() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The fault backends this build has, or the one `DSM_BACKEND` names.
pub fn backends() -> Vec<dsm::FaultBackend> {
    match std::env::var("DSM_BACKEND") {
        Ok(b) if !b.is_empty() => vec![b.parse().expect("DSM_BACKEND must name a fault backend")],
        _ if cfg!(feature = "userfaultfd") => {
            vec![dsm::FaultBackend::Mprotect, dsm::FaultBackend::Userfaultfd]
        }
        _ => vec![dsm::FaultBackend::Mprotect],
    }
}
