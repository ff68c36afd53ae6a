//! The joint-locus genetic model: haplotypes, phase-known multilocus genotypes, the
//! genotype probabilities of an individual given its own phenotypes (and, for a founder,
//! the population frequencies), and the gametes a genotype transmits for given
//! recombination fractions.
//!
//! As in LINKAGE (Lathrop et al., PNAS 81:3443, 1984), a multilocus genotype is an
//! unordered pair of haplotypes `{h1, h2}`, so phase between loci is part of the genotype.
//! Loci are taken in chromosome order. With `H` haplotypes there are `H (H + 1) / 2`
//! genotypes; genotype `{a, b}` with `a <= b` has index
//! `a H - a (a - 1) / 2 + (b - a)` (pairs listed by first haplotype).
//!
//! Founders draw their haplotypes independently with frequencies that are products of gene
//! frequencies (linkage equilibrium). A parent `{h1, h2}` transmits a gamete built by
//! starting on either haplotype with probability 1/2 and switching haplotypes between
//! adjacent loci `l` and `l + 1` with probability `theta[l]`, independently across
//! intervals (no interference, equal recombination in both sexes).

use crate::linkage::{DataFile, LocusKind, Person, Phenotype};

/// The haplotype and genotype spaces of a set of loci in chromosome order.
#[derive(Clone, Debug)]
pub struct Model {
    /// Number of alleles of each locus, in chromosome order.
    pub nalleles: Vec<usize>,
    /// Number of haplotypes `H`.
    pub nhap: usize,
    /// Number of genotypes `H (H + 1) / 2`.
    pub ngeno: usize,
    /// `hap_alleles[h * nloci + l]`: the allele (from 0) of haplotype `h` at locus `l`.
    pub hap_alleles: Vec<u32>,
    /// `geno_haps[2 g]`, `geno_haps[2 g + 1]`: the haplotypes `a <= b` of genotype `g`.
    pub geno_haps: Vec<u32>,
    /// `pair[a * H + b]`: the genotype with haplotypes `a` and `b` (either order).
    pub pair: Vec<u32>,
}

impl Model {
    /// The model for loci with the given numbers of alleles (in chromosome order).
    pub fn new(nalleles: &[usize]) -> Model {
        let nloci = nalleles.len();
        let nhap: usize = nalleles.iter().product();
        let ngeno = nhap * (nhap + 1) / 2;
        let mut hap_alleles = vec![0u32; nhap * nloci];
        for h in 0..nhap {
            // Mixed radix with the last locus varying fastest.
            let mut rest = h;
            for l in (0..nloci).rev() {
                hap_alleles[h * nloci + l] = (rest % nalleles[l]) as u32;
                rest /= nalleles[l];
            }
        }
        let mut geno_haps = Vec::with_capacity(2 * ngeno);
        let mut pair = vec![0u32; nhap * nhap];
        for a in 0..nhap {
            for b in a..nhap {
                let g = (geno_haps.len() / 2) as u32;
                geno_haps.push(a as u32);
                geno_haps.push(b as u32);
                pair[a * nhap + b] = g;
                pair[b * nhap + a] = g;
            }
        }
        Model {
            nalleles: nalleles.to_vec(),
            nhap,
            ngeno,
            hap_alleles,
            geno_haps,
            pair,
        }
    }

    pub fn nloci(&self) -> usize {
        self.nalleles.len()
    }

    /// The allele (from 0) of haplotype `h` at locus `l`.
    pub fn allele(&self, h: usize, l: usize) -> usize {
        self.hap_alleles[h * self.nloci() + l] as usize
    }

    /// The two haplotypes of genotype `g`, smaller first.
    pub fn haps(&self, g: usize) -> (usize, usize) {
        (
            self.geno_haps[2 * g] as usize,
            self.geno_haps[2 * g + 1] as usize,
        )
    }

    /// The genotype made of haplotypes `a` and `b`.
    pub fn geno(&self, a: usize, b: usize) -> usize {
        self.pair[a * self.nhap + b] as usize
    }
}

/// The probability of a person's phenotype at one locus given the two alleles (from 0)
/// there: 1 or 0 for numbered alleles (1 when unknown), the penetrance of the liability
/// class for an affected person, its complement for an unaffected one, 1 when unknown.
pub fn phenotype_probability(
    kind: &LocusKind,
    nalleles: usize,
    phen: Phenotype,
    a: usize,
    b: usize,
) -> f64 {
    match (kind, phen) {
        (LocusKind::Numbered, Phenotype::Alleles(0, 0)) => 1.0,
        (LocusKind::Numbered, Phenotype::Alleles(x, y)) => {
            let (u, v) = ((a.min(b) + 1) as u32, (a.max(b) + 1) as u32);
            if (u, v) == (x, y) {
                1.0
            } else {
                0.0
            }
        }
        (LocusKind::Affection { penetrances }, Phenotype::Affection { status, class }) => {
            let pen = penetrances[class as usize - 1][penetrance_index(a, b, nalleles)];
            match status {
                0 => 1.0,
                2 => pen,
                _ => 1.0 - pen,
            }
        }
        _ => unreachable!("the reader pairs each phenotype with its locus kind"),
    }
}

/// Position of the unordered genotype `{a, b}` (alleles from 0) among the `n (n + 1) / 2`
/// genotypes of `n` alleles listed as LINKAGE lists penetrances: for `i` from 1 to n, for
/// `j` from i to n (LINKAGE user's guide, section 2.6). Rows `0..i` hold
/// `n + (n - 1) + ... + (n - i + 1) = i n - i (i - 1) / 2` entries. [`Model`] numbers
/// haplotype pairs the same way.
pub fn penetrance_index(a: usize, b: usize, n: usize) -> usize {
    let (i, j) = (a.min(b), a.max(b));
    i * n - i * i.saturating_sub(1) / 2 + (j - i)
}

/// Fills `out` (length `ngeno`) with a person's genotype probabilities before any
/// relative is taken into account: the product over loci of the phenotype probabilities,
/// times the population frequency of the genotype for a founder.
pub fn base_array(model: &Model, data: &DataFile, person: &Person, founder: bool, out: &mut [f64]) {
    assert_eq!(out.len(), model.ngeno);
    let nloci = model.nloci();
    // factor[l][a][b] for this person, alleles from 0.
    let mut factors: Vec<Vec<f64>> = Vec::with_capacity(nloci);
    for (l, &input) in data.order.iter().enumerate() {
        let locus = &data.loci[input];
        let n = model.nalleles[l];
        let mut f = vec![0.0; n * n];
        for a in 0..n {
            for b in 0..n {
                f[a * n + b] =
                    phenotype_probability(&locus.kind, n, person.phenotypes[input], a, b);
            }
        }
        factors.push(f);
    }
    let hap_freq: Vec<f64> = (0..model.nhap)
        .map(|h| {
            (0..nloci)
                .map(|l| data.loci[data.order[l]].freqs[model.allele(h, l)])
                .product()
        })
        .collect();
    for (g, slot) in out.iter_mut().enumerate() {
        let (h1, h2) = model.haps(g);
        let mut p = 1.0;
        for (l, f) in factors.iter().enumerate() {
            let n = model.nalleles[l];
            p *= f[model.allele(h1, l) * n + model.allele(h2, l)];
        }
        if founder && p != 0.0 {
            let pair = if h1 == h2 { 1.0 } else { 2.0 };
            p *= pair * hap_freq[h1] * hap_freq[h2];
        }
        *slot = p;
    }
}

/// For every genotype, the distinct gametes it transmits and their probabilities, for
/// one vector of recombination fractions. Flat: the gametes of genotype `g` are entries
/// `start[g]..start[g + 1]` of `hap` and `prob`. Gametes of probability 0 (recombinant
/// gametes when a fraction is 0) are left out.
#[derive(Clone, Debug, Default)]
pub struct Gametes {
    pub start: Vec<u32>,
    pub hap: Vec<u32>,
    pub prob: Vec<f64>,
}

impl Gametes {
    /// The gamete table of `model` for recombination fractions `thetas` (one per
    /// interval between adjacent loci).
    pub fn new(model: &Model, thetas: &[f64]) -> Gametes {
        let nloci = model.nloci();
        assert_eq!(
            thetas.len() + 1,
            nloci,
            "one recombination fraction per interval"
        );
        // Probability of each strand pattern: bit l set = locus l taken from the second
        // haplotype. Patterns are listed in increasing order, so the table is deterministic.
        let npat = 1usize << nloci;
        let pattern_prob: Vec<f64> = (0..npat)
            .map(|s| {
                let mut p = 0.5;
                for l in 1..nloci {
                    let switch = ((s >> l) & 1) != ((s >> (l - 1)) & 1);
                    p *= if switch {
                        thetas[l - 1]
                    } else {
                        1.0 - thetas[l - 1]
                    };
                }
                p
            })
            .collect();
        let mut g = Gametes {
            start: Vec::with_capacity(model.ngeno + 1),
            ..Default::default()
        };
        let mut strides = vec![1usize; nloci];
        for l in (0..nloci.saturating_sub(1)).rev() {
            strides[l] = strides[l + 1] * model.nalleles[l + 1];
        }
        for geno in 0..model.ngeno {
            g.start.push(g.hap.len() as u32);
            let first = g.hap.len();
            let (h1, h2) = model.haps(geno);
            for (s, &p) in pattern_prob.iter().enumerate() {
                if p == 0.0 {
                    continue;
                }
                let h: usize = (0..nloci)
                    .map(|l| {
                        let from = if (s >> l) & 1 == 0 { h1 } else { h2 };
                        model.allele(from, l) * strides[l]
                    })
                    .sum();
                match g.hap[first..].iter().position(|&x| x as usize == h) {
                    Some(i) => g.prob[first + i] += p,
                    None => {
                        g.hap.push(h as u32);
                        g.prob.push(p);
                    }
                }
            }
        }
        g.start.push(g.hap.len() as u32);
        g
    }

    /// The gametes of genotype `g` as (haplotypes, probabilities).
    pub fn of(&self, g: usize) -> (&[u32], &[f64]) {
        let r = self.start[g] as usize..self.start[g + 1] as usize;
        (&self.hap[r.clone()], &self.prob[r])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genotype_indexing_is_a_bijection_on_unordered_pairs() {
        let m = Model::new(&[3, 2, 2]);
        assert_eq!((m.nhap, m.ngeno), (12, 78));
        for g in 0..m.ngeno {
            let (a, b) = m.haps(g);
            assert!(a <= b);
            assert_eq!(m.geno(a, b), g);
            assert_eq!(m.geno(b, a), g);
            assert_eq!(g, penetrance_index(a, b, m.nhap));
        }
        // Haplotype 7 of 3 x 2 x 2 loci is alleles (1, 1, 1) counted from 0: 7 = 1*4 + 1*2 + 1.
        assert_eq!((m.allele(7, 0), m.allele(7, 1), m.allele(7, 2)), (1, 1, 1));
    }

    #[test]
    fn penetrance_order_follows_linkage() {
        // Three alleles: 11 12 13 22 23 33.
        let expected = [
            ((0, 0), 0),
            ((0, 1), 1),
            ((0, 2), 2),
            ((1, 1), 3),
            ((1, 2), 4),
            ((2, 2), 5),
        ];
        for ((a, b), i) in expected {
            assert_eq!(penetrance_index(a, b, 3), i);
            assert_eq!(penetrance_index(b, a, 3), i);
        }
        assert_eq!(penetrance_index(3, 3, 4), 9);
        assert_eq!(penetrance_index(2, 3, 4), 8);
    }

    #[test]
    fn gametes_of_a_double_heterozygote() {
        // Two biallelic loci; parent AB/ab (haplotypes 0 = (0,0) and 3 = (1,1)).
        let m = Model::new(&[2, 2]);
        let t = 0.2;
        let gam = Gametes::new(&m, &[t]);
        let g = m.geno(0, 3);
        let (haps, probs) = gam.of(g);
        let mut pairs: Vec<(u32, f64)> = haps.iter().copied().zip(probs.iter().copied()).collect();
        pairs.sort_by_key(|p| p.0);
        let want = [
            (0, (1.0 - t) / 2.0),
            (1, t / 2.0),
            (2, t / 2.0),
            (3, (1.0 - t) / 2.0),
        ];
        assert_eq!(pairs.len(), 4);
        for ((h, p), (wh, wp)) in pairs.iter().zip(want) {
            assert_eq!(*h, wh);
            assert!((p - wp).abs() < 1e-15);
        }
        // A homozygote transmits its only haplotype with probability 1.
        let (haps, probs) = gam.of(m.geno(2, 2));
        assert_eq!(haps, &[2]);
        assert!((probs[0] - 1.0).abs() < 1e-15);
        // Every genotype's gamete probabilities sum to 1.
        for g in 0..m.ngeno {
            let s: f64 = gam.of(g).1.iter().sum();
            assert!((s - 1.0).abs() < 1e-14);
        }
    }

    #[test]
    fn zero_recombination_drops_recombinant_gametes() {
        let m = Model::new(&[2, 2, 2]);
        let gam = Gametes::new(&m, &[0.0, 0.0]);
        let (haps, probs) = gam.of(m.geno(0, 7));
        assert_eq!(haps, &[0, 7]);
        assert_eq!(probs, &[0.5, 0.5]);
    }
}
