//! Diffs: the bytes of a page that differ from its twin, as runs of `(offset, length,
//! bytes)`. A diff is applied by copying exactly the runs' bytes, never wider stores, so
//! concurrent writers of other bytes of the same page (false sharing in a data-race-free
//! program) are never overwritten.
//!
//! Encoding: a sequence of runs `[offset u16 | len u16 | len bytes]`. Pages are at most
//! 64 KiB, so offsets and lengths fit in 16 bits (a run of 65536 bytes is split).

/// Appends to `out` the runs where `page` differs from `twin`; returns the number of
/// changed bytes. A run holds only differing bytes: merging two runs across bytes that
/// this node left unchanged would write its stale copies of those bytes over another
/// writer's changes at the home (multiple-writer false sharing).
pub fn encode(twin: &[u8], page: &[u8], out: &mut Vec<u8>) -> usize {
    assert_eq!(twin.len(), page.len(), "twin and page differ in size");
    assert!(page.len() <= 1 << 16, "pages are at most 64 KiB");
    let n = page.len();
    let mut changed = 0;
    let mut i = 0;
    while i < n {
        // Skip equal 8-byte words quickly, then find the exact first differing byte.
        while i + 8 <= n && twin[i..i + 8] == page[i..i + 8] {
            i += 8;
        }
        while i < n && twin[i] == page[i] {
            i += 1;
        }
        if i >= n {
            break;
        }
        let start = i;
        let mut end = i + 1; // one past the last differing byte of the run
        while end < n && twin[end] != page[end] {
            end += 1;
        }
        // Split runs longer than a u16 can say.
        let mut s = start;
        while s < end {
            let len = (end - s).min(u16::MAX as usize);
            out.extend_from_slice(&(s as u16).to_le_bytes());
            out.extend_from_slice(&(len as u16).to_le_bytes());
            out.extend_from_slice(&page[s..s + len]);
            changed += len;
            s += len;
        }
        i = end;
    }
    changed
}

/// Iterates over the runs of an encoded diff: `(offset, bytes)`.
pub fn runs(diff: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + 4 > diff.len() {
            assert!(at == diff.len(), "truncated diff");
            return None;
        }
        let off = u16::from_le_bytes([diff[at], diff[at + 1]]) as usize;
        let len = u16::from_le_bytes([diff[at + 2], diff[at + 3]]) as usize;
        let bytes = &diff[at + 4..at + 4 + len];
        at += 4 + len;
        Some((off, bytes))
    })
}

/// Applies an encoded diff to `page`.
pub fn apply(diff: &[u8], page: &mut [u8]) {
    for (off, bytes) in runs(diff) {
        page[off..off + bytes.len()].copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identical_pages_give_an_empty_diff() {
        let a = vec![7u8; 4096];
        let mut out = Vec::new();
        assert_eq!(encode(&a, &a, &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn runs_hold_exactly_the_changed_bytes() {
        let twin = vec![0u8; 64];
        let mut page = twin.clone();
        page[3] = 1;
        page[4] = 1;
        page[6] = 2; // one unchanged byte between: still two runs
        page[40] = 3;
        let mut out = Vec::new();
        assert_eq!(encode(&twin, &page, &mut out), 4);
        let r: Vec<_> = runs(&out).map(|(o, b)| (o, b.to_vec())).collect();
        assert_eq!(r, vec![(3, vec![1, 1]), (6, vec![2]), (40, vec![3])]);
    }

    #[test]
    fn a_diff_writes_only_its_runs() {
        // Another writer's byte between two runs must survive the apply.
        let twin = vec![0u8; 64];
        let mut mine = twin.clone();
        mine[0] = 1;
        mine[30] = 1;
        let mut out = Vec::new();
        encode(&twin, &mine, &mut out);
        let mut home = twin.clone();
        home[1] = 9; // right next to one of our runs
        home[15] = 9;
        apply(&out, &mut home);
        assert_eq!((home[0], home[1], home[15], home[30]), (1, 9, 9, 1));
    }

    proptest! {
        #[test]
        fn apply_of_encode_reproduces_the_page(
            twin in proptest::collection::vec(any::<u8>(), 4096),
            edits in proptest::collection::vec((0usize..4096, any::<u8>()), 0..300),
        ) {
            let mut page = twin.clone();
            for (i, v) in edits { page[i] = v; }
            let mut out = Vec::new();
            let changed = encode(&twin, &page, &mut out);
            let mut rebuilt = twin.clone();
            apply(&out, &mut rebuilt);
            prop_assert_eq!(&rebuilt, &page);
            let differing = twin.iter().zip(&page).filter(|(a, b)| a != b).count();
            prop_assert_eq!(changed, differing);
        }
    }
}
