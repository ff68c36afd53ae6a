//! Diffs: the words of a page that differ from its twin, compared word by word as the
//! paper's diffs are (section 2.2), in runs of consecutive changed 8-byte words. A run
//! whose words all changed in every byte carries just the words; a run with a word that
//! changed only in some bytes (a double updated in place usually keeps its high bytes; a
//! `u8` or `u16` field shares its word with others) also carries a byte mask per word,
//! and applying it writes exactly the changed bytes, never wider stores. So concurrent
//! writers of other bytes of the same word, on other nodes (false sharing below the word
//! in a data-race-free program), are never overwritten, while a rewritten page of doubles
//! is one run, not a thousand.
//!
//! Encoding of one run, the same in a diff buffer and in a `Diff` message
//! (`crate::wire`): `offset u32` (bytes, a multiple of [`WORD`]), `words u32` (bit 31 set
//! if a mask follows), then `words` mask bytes if masked (bit `b` of a word's mask: byte
//! `b` changed), then `words * 8` bytes of data (the words as they are in the page).

/// Bytes in a diff word.
pub const WORD: usize = 8;
/// Bytes of a run's header: its offset and its word count.
pub const RUN_HEADER_BYTES: usize = 8;
/// Bit of a run's word count: a mask byte per word follows the header.
pub const MASKED: u32 = 1 << 31;

/// One run of changed words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run<'a> {
    /// Byte offset of the run's first word in the page (a multiple of [`WORD`]).
    pub offset: usize,
    /// The run's words as they are in the writer's page (a multiple of [`WORD`] bytes).
    pub data: &'a [u8],
    /// For a run with a partly changed word: one byte per word, whose bit `b` says byte
    /// `b` of the word changed; `None` if every byte of every word changed.
    pub mask: Option<&'a [u8]>,
}

impl<'a> Run<'a> {
    /// Words in the run.
    pub fn words(&self) -> usize {
        self.data.len() / WORD
    }

    /// Bytes the run takes encoded, header included.
    pub fn encoded_bytes(&self) -> usize {
        RUN_HEADER_BYTES + self.mask.map_or(0, <[u8]>::len) + self.data.len()
    }

    /// Bytes the run takes encoded per word (data, and mask if any).
    pub fn bytes_per_word(&self) -> usize {
        WORD + usize::from(self.mask.is_some())
    }

    /// The number of bytes the run changes (the tests' measure of a diff).
    #[cfg(test)]
    pub fn changed_bytes(&self) -> usize {
        match self.mask {
            None => self.data.len(),
            Some(m) => m.iter().map(|b| b.count_ones() as usize).sum(),
        }
    }

    /// The first `words` words of the run and the rest (a run cut to fit a message; each
    /// part still changes only what the whole did).
    pub fn split_at(&self, words: usize) -> (Run<'a>, Run<'a>) {
        let words = words.min(self.words());
        let (d0, d1) = self.data.split_at(words * WORD);
        let (m0, m1) = match self.mask {
            None => (None, None),
            Some(m) => {
                let (a, b) = m.split_at(words);
                (Some(a), Some(b))
            }
        };
        (
            Run {
                offset: self.offset,
                data: d0,
                mask: m0,
            },
            Run {
                offset: self.offset + words * WORD,
                data: d1,
                mask: m1,
            },
        )
    }

    /// The bytes the run changes, as maximal `(offset, bytes)` ranges in page order:
    /// exactly what an apply writes.
    pub fn ranges(&self) -> impl Iterator<Item = (usize, &'a [u8])> + 'a {
        let Run { offset, data, mask } = *self;
        let changed = move |i: usize| mask.is_none_or(|m| m[i / WORD] & (1 << (i % WORD)) != 0);
        let mut i = 0;
        std::iter::from_fn(move || {
            while i < data.len() && !changed(i) {
                i += 1;
            }
            if i >= data.len() {
                return None;
            }
            let start = i;
            while i < data.len() && changed(i) {
                i += 1;
            }
            Some((offset + start, &data[start..i]))
        })
    }

    /// Appends the run's encoding to `out`.
    ///
    /// # Panics
    ///
    /// If the offset or the word count does not fit its field.
    pub fn put(&self, out: &mut Vec<u8>) {
        let offset = u32::try_from(self.offset).expect("diff run offset exceeds u32");
        let words = u32::try_from(self.words())
            .ok()
            .filter(|w| w & MASKED == 0)
            .expect("diff run of 2^31 words or more");
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(words | if self.mask.is_some() { MASKED } else { 0 }).to_le_bytes());
        if let Some(m) = self.mask {
            out.extend_from_slice(m);
        }
        out.extend_from_slice(self.data);
    }

    /// Reads one run from the front of `bytes`; returns it and the rest, or `None` if
    /// `bytes` is too short for what its header says. (Whether the run starts on a word
    /// and lies in the page is the receiver's check: `wire::DiffRuns::check`.)
    pub fn take(bytes: &'a [u8]) -> Option<(Run<'a>, &'a [u8])> {
        let (offset, rest) = bytes.split_first_chunk::<4>()?;
        let (words, rest) = rest.split_first_chunk::<4>()?;
        let offset = u32::from_le_bytes(*offset) as usize;
        let words = u32::from_le_bytes(*words);
        let masked = words & MASKED != 0;
        let n = (words & !MASKED) as usize;
        let (mask, rest) = if masked {
            let (m, rest) = rest.split_at_checked(n)?;
            (Some(m), rest)
        } else {
            (None, rest)
        };
        let (data, rest) = rest.split_at_checked(n.checked_mul(WORD)?)?;
        Some((Run { offset, data, mask }, rest))
    }
}

/// Appends to `out` the runs of words where `page` differs from `twin`; returns the
/// number of changed bytes. A run holds only changed words, and its mask (where a word
/// changed only in part) keeps an apply off the bytes this node left unchanged: writing
/// its stale copies of them would overwrite another writer's changes at the home
/// (multiple-writer false sharing).
pub fn encode(twin: &[u8], page: &[u8], out: &mut Vec<u8>) -> usize {
    assert_eq!(twin.len(), page.len(), "twin and page differ in size");
    assert!(page.len() % WORD == 0, "a page is whole words");
    let words = page.len() / WORD;
    let word = |b: &[u8], w: usize| u64::from_ne_bytes(b[w * WORD..(w + 1) * WORD].try_into().unwrap());
    let mut changed = 0;
    let mut w = 0;
    let mut masks = Vec::new();
    while w < words {
        if word(twin, w) == word(page, w) {
            w += 1;
            continue;
        }
        let start = w;
        masks.clear();
        while w < words {
            let x = word(twin, w) ^ word(page, w);
            if x == 0 {
                break;
            }
            let mask = x
                .to_ne_bytes()
                .iter()
                .enumerate()
                .fold(0u8, |m, (b, &d)| m | (u8::from(d != 0) << b));
            masks.push(mask);
            changed += mask.count_ones() as usize;
            w += 1;
        }
        Run {
            offset: start * WORD,
            data: &page[start * WORD..w * WORD],
            mask: masks.iter().any(|&m| m != 0xFF).then_some(masks.as_slice()),
        }
        .put(out);
    }
    changed
}

/// Iterates over the runs of a diff that [`encode`] wrote.
///
/// # Panics
///
/// If `diff` is not such an encoding.
pub fn runs(diff: &[u8]) -> impl Iterator<Item = Run<'_>> {
    let mut rest = diff;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (run, tail) = Run::take(rest).expect("malformed diff");
        rest = tail;
        Some(run)
    })
}

/// Applies an encoded diff to `page`: writes exactly the bytes its runs changed. The
/// tests' reference: the engine applies the runs a message carries (`wire::DiffRuns`).
#[cfg(test)]
pub fn apply(diff: &[u8], page: &mut [u8]) {
    for run in runs(diff) {
        for (off, bytes) in run.ranges() {
            page[off..off + bytes.len()].copy_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decoded(d: &[u8]) -> Vec<(usize, usize, Option<Vec<u8>>)> {
        runs(d)
            .map(|r| (r.offset, r.words(), r.mask.map(<[u8]>::to_vec)))
            .collect()
    }

    #[test]
    fn identical_pages_give_an_empty_diff() {
        let a = vec![7u8; 4096];
        let mut out = Vec::new();
        assert_eq!(encode(&a, &a, &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn runs_are_of_changed_words_with_masks_where_a_word_changed_in_part() {
        let twin = vec![0u8; 64];
        let mut page = twin.clone();
        page[3] = 1; // word 0, bytes 3 and 4
        page[4] = 1;
        page[8..16].fill(2); // word 1, every byte: the same run
        page[40] = 3; // word 5 alone
        page[48..56].fill(4); // word 6, every byte: the same run as word 5
        let mut out = Vec::new();
        assert_eq!(encode(&twin, &page, &mut out), 2 + 8 + 1 + 8);
        assert_eq!(
            decoded(&out),
            vec![(0, 2, Some(vec![0b0001_1000, 0xFF])), (40, 2, Some(vec![0b1, 0xFF]))]
        );
        let r: Vec<Vec<(usize, Vec<u8>)>> = runs(&out)
            .map(|r| r.ranges().map(|(o, b)| (o, b.to_vec())).collect())
            .collect();
        assert_eq!(
            r,
            vec![
                vec![(3, vec![1, 1]), (8, vec![2; 8])],
                vec![(40, vec![3]), (48, vec![4; 8])]
            ]
        );
    }

    #[test]
    fn a_rewritten_page_of_doubles_is_one_run() {
        // Doubles updated in place keep their high bytes: every word changes in part.
        let twin: Vec<u8> = (0..512).flat_map(|i| (1.0 + i as f64).to_ne_bytes()).collect();
        let page: Vec<u8> = (0..512)
            .flat_map(|i| (1.0 + i as f64 + 1e-9).to_ne_bytes())
            .collect();
        let mut out = Vec::new();
        encode(&twin, &page, &mut out);
        let r: Vec<_> = runs(&out).collect();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].words(), 512);
        assert!(r[0].mask.is_some());
        assert_eq!(out.len(), RUN_HEADER_BYTES + 512 + 4096);
    }

    #[test]
    fn unmasked_runs_carry_no_mask() {
        let twin = vec![0u8; 64];
        let page = vec![0xEEu8; 64];
        let mut out = Vec::new();
        assert_eq!(encode(&twin, &page, &mut out), 64);
        assert_eq!(decoded(&out), vec![(0, 8, None)]);
        assert_eq!(out.len(), RUN_HEADER_BYTES + 64);
    }

    #[test]
    fn a_diff_writes_only_the_bytes_it_changed() {
        // Other writers' bytes inside our words, and between our runs, survive the apply.
        let twin = vec![0u8; 64];
        let mut mine = twin.clone();
        mine[0] = 1;
        mine[30] = 1;
        let mut out = Vec::new();
        encode(&twin, &mine, &mut out);
        let mut home = twin.clone();
        home[1] = 9; // in our word 0
        home[15] = 9;
        home[31] = 9; // in our word 3
        apply(&out, &mut home);
        assert_eq!((home[0], home[1], home[15], home[30], home[31]), (1, 9, 9, 1, 9));
    }

    #[test]
    fn a_run_split_keeps_its_words_and_masks() {
        let twin = vec![0u8; 64];
        let mut page = twin.clone();
        page[0..24].fill(5);
        page[25] = 6;
        let mut out = Vec::new();
        encode(&twin, &page, &mut out);
        let run = runs(&out).next().unwrap();
        let (a, b) = run.split_at(2);
        assert_eq!((a.offset, a.words(), b.offset, b.words()), (0, 2, 16, 2));
        assert_eq!((a.mask, b.mask), (Some(&[0xFF, 0xFF][..]), Some(&[0xFF, 0b10][..])));
        assert_eq!(a.changed_bytes() + b.changed_bytes(), run.changed_bytes());
    }

    #[test]
    fn take_refuses_truncated_runs() {
        let mut out = Vec::new();
        Run {
            offset: 8,
            data: &[1; 16],
            mask: Some(&[1, 2]),
        }
        .put(&mut out);
        assert!(Run::take(&out).is_some());
        for cut in 0..out.len() {
            assert!(Run::take(&out[..cut]).is_none(), "cut at {cut}");
        }
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
            prop_assert_eq!(runs(&out).map(|r| r.changed_bytes()).sum::<usize>(), differing);
        }

        /// Two writers of disjoint bytes of the same words, applied in either order to the
        /// home, leave both writers' bytes: no byte outside a writer's changes is written.
        #[test]
        fn disjoint_writers_of_one_word_both_survive(
            base in proptest::collection::vec(any::<u8>(), 256),
            owner in proptest::collection::vec(0u8..3, 256),
            a_first in any::<bool>(),
        ) {
            let mut a = base.clone();
            let mut b = base.clone();
            let mut want = base.clone();
            for i in 0..256 {
                match owner[i] {
                    1 => { a[i] = base[i].wrapping_add(1); want[i] = a[i]; }
                    2 => { b[i] = base[i].wrapping_add(2); want[i] = b[i]; }
                    _ => {}
                }
            }
            let (mut da, mut db) = (Vec::new(), Vec::new());
            encode(&base, &a, &mut da);
            encode(&base, &b, &mut db);
            let mut home = base.clone();
            if a_first { apply(&da, &mut home); apply(&db, &mut home); }
            else { apply(&db, &mut home); apply(&da, &mut home); }
            prop_assert_eq!(home, want);
        }
    }
}
