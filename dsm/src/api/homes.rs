//! The homes file (`--homes`, and a table's `OUT/homes`): one `page home` line per page
//! whose home a run replays, read and checked against the cluster before any work.

use crate::config::Config;
use crate::error::DsmError;
use crate::sys;

impl Config {
    /// The home assignments of [`Config::homes_file`], read and checked against this
    /// cluster (every page inside the heap, every node in the cluster, one home per page).
    /// A program may call it to refuse a bad file before any work; [`Cluster::run`](super::Cluster::run) does.
    pub fn homes(&self) -> Result<Option<Vec<(u32, u8)>>, DsmError> {
        match &self.homes_file {
            Some(path) => read_homes(path, self.nodes, self.heap_bytes / self.page_bytes).map(Some),
            None => Ok(None),
        }
    }
}

/// The largest homes file read (`--homes`, and a table's `OUT/homes`): at 14 bytes a line
/// at most, room for the homes of some 19 million pages (150 GiB of 8 KiB pages touched).
pub const MAX_HOMES_FILE_BYTES: u64 = 256 << 20;

/// Reads a homes file (`page home` per line, `#` comments) for a cluster of `nodes` nodes
/// whose heap has `heap_pages` pages. Every line must name a page inside the heap and a
/// node of the cluster, and no page may be given twice.
fn read_homes(
    path: &std::path::Path,
    nodes: usize,
    heap_pages: usize,
) -> Result<Vec<(u32, u8)>, DsmError> {
    let err = |why: String| DsmError::HomesFile {
        path: path.to_path_buf(),
        why,
    };
    let text =
        sys::read_regular_text(path, MAX_HOMES_FILE_BYTES).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    let mut first_line: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(p), Some(h), None) = (it.next(), it.next(), it.next()) else {
            return Err(err(format!(
                "line {n}: expected `page home` (two whole numbers), got `{line}`"
            )));
        };
        let p: u32 = p.parse().map_err(|_| {
            err(format!(
                "line {n}: `{p}` is not a page number (a whole number from 0 to {})",
                heap_pages.saturating_sub(1)
            ))
        })?;
        let h: u8 = h.parse().map_err(|_| {
            err(format!(
                "line {n}: `{h}` is not a node number (0 to {})",
                nodes - 1
            ))
        })?;
        if h as usize >= nodes {
            return Err(err(format!(
                "line {n}: node {h} does not exist in a {nodes}-node cluster; run with the node count the file was written for, or write it again with --save-homes"
            )));
        }
        if p as usize >= heap_pages {
            return Err(err(format!(
                "line {n}: page {p} lies outside the heap, which has {heap_pages} pages (0 to {}); run with the heap and page size the file was written for (--heap-mb, --page-kb), or write it again with --save-homes",
                heap_pages.saturating_sub(1)
            )));
        }
        if let Some(first) = first_line.insert(p, n) {
            return Err(err(format!(
                "line {n}: page {p} is given a second home (line {first} gave it one already); a page has one home: remove one of the two lines"
            )));
        }
        out.push((p, h));
    }
    Ok(out)
}
