//! A generated linkage study in LINKAGE format, for workloads larger than the shipped
//! example. The text goes through the same readers as files do.
//!
//! # What is generated
//!
//! Loci, in input order and chromosome order alike: `markers` numbered-allele markers with
//! `alleles` alleles each and a dominant disease locus (affection status, 2 alleles,
//! disease allele frequency 0.05) placed after the first `markers / 2` markers (rounded
//! up). Marker gene frequencies are drawn from the seed (`0.5 + u` normalized, six
//! decimals). The disease has two liability classes with penetrances (11, 12, 22) of
//! (0.02, 0.80, 0.80) and (0.01, 0.40, 0.40). The true recombination fractions between
//! adjacent loci cycle through 0.10, 0.05, 0.15, 0.08; the datafile starts ILINK at 0.25
//! for every interval and iterates all of them.
//!
//! Every pedigree has three generations: a founder couple (1, 2) with `sibship` children;
//! the first `min(2, sibship)` children each marry a founder spouse and have `sibship`
//! children of their own. That is `2 + s + 2 (1 + s)` individuals for `s >= 2`. Genotypes
//! are simulated down the pedigree from the true model (founder alleles from the gene
//! frequencies, gametes with the true recombination fractions, affection from the
//! penetrance of a liability class that is 2 with probability 0.2). The founder couple
//! is untyped at the markers (their genotype arrays stay full, which is where the work
//! is: their family costs about `ngeno^2 x sibship` operations); every other individual is
//! typed at each marker with probability 0.85. Affection status is known for everyone
//! except with probability 0.05.
//!
//! All randomness comes from [`SplitMix64`] seeded with `seed`.

use app_common::rng::SplitMix64;
use std::fmt::Write;

/// The size of a generated study.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub pedigrees: usize,
    pub sibship: usize,
    pub alleles: usize,
    pub markers: usize,
    pub seed: u64,
}

const DISEASE_FREQ: [f64; 2] = [0.95, 0.05];
const PENETRANCE: [[f64; 3]; 2] = [[0.02, 0.80, 0.80], [0.01, 0.40, 0.40]];
const TRUE_THETAS: [f64; 4] = [0.10, 0.05, 0.15, 0.08];
const START_THETA: f64 = 0.25;

impl Spec {
    /// The input index of the disease locus.
    pub fn disease_locus(&self) -> usize {
        self.markers.div_ceil(2)
    }

    pub fn nloci(&self) -> usize {
        self.markers + 1
    }

    /// Individuals per pedigree.
    pub fn pedigree_size(&self) -> usize {
        let married = self.sibship.min(2);
        2 + self.sibship + married * (1 + self.sibship)
    }

    /// The true recombination fraction of each interval.
    pub fn true_thetas(&self) -> Vec<f64> {
        (0..self.nloci() - 1)
            .map(|i| TRUE_THETAS[i % TRUE_THETAS.len()])
            .collect()
    }
}

/// One simulated individual: ids within the pedigree, haplotypes as allele numbers from 1.
struct Individual {
    id: usize,
    father: usize,
    mother: usize,
    sex: u8,
    haps: [Vec<usize>; 2],
}

/// The DATAFILE and PEDFILE text of the study described by `spec`.
pub fn linkage_files(spec: &Spec) -> (String, String) {
    assert!(spec.markers >= 1 && spec.alleles >= 2 && spec.sibship >= 1 && spec.pedigrees >= 1);
    let mut rng = SplitMix64::new(spec.seed);
    let nloci = spec.nloci();
    let disease = spec.disease_locus();
    let freqs: Vec<Vec<f64>> = (0..nloci)
        .map(|l| {
            if l == disease {
                DISEASE_FREQ.to_vec()
            } else {
                marker_freqs(&mut rng, spec.alleles)
            }
        })
        .collect();

    let mut data = String::new();
    let w = &mut data;
    writeln!(
        w,
        "{nloci} 0 0 3 << NO. OF LOCI, RISK LOCUS, SEXLINKED (IF 1) PROGRAM"
    )
    .unwrap();
    writeln!(
        w,
        "0 0.0 0.0 0 << MUT LOCUS, MUT MALE, MUT FEM, HAP FREQ (IF 1)"
    )
    .unwrap();
    let order: Vec<String> = (1..=nloci).map(|l| l.to_string()).collect();
    writeln!(w, "{} << CHROMOSOME ORDER", order.join(" ")).unwrap();
    for (l, f) in freqs.iter().enumerate() {
        let list: Vec<String> = f.iter().map(|x| format!("{x:.6}")).collect();
        if l == disease {
            writeln!(w, "1 2 << AFFECTION, NO. OF ALLELES  Locus disease").unwrap();
            writeln!(w, "{} << GENE FREQUENCIES", list.join(" ")).unwrap();
            writeln!(w, "{} << NO. OF LIABILITY CLASSES", PENETRANCE.len()).unwrap();
            for (c, pens) in PENETRANCE.iter().enumerate() {
                writeln!(
                    w,
                    "{:.4} {:.4} {:.4} << PENETRANCES, CLASS {}",
                    pens[0],
                    pens[1],
                    pens[2],
                    c + 1
                )
                .unwrap();
            }
        } else {
            writeln!(
                w,
                "3 {} << ALLELE NUMBERS, NO. OF ALLELES  Locus marker{}",
                spec.alleles,
                l + 1
            )
            .unwrap();
            writeln!(w, "{} << GENE FREQUENCIES", list.join(" ")).unwrap();
        }
    }
    writeln!(w, "0 0 << SEX DIFFERENCE, INTERFERENCE (IF 1 OR 2)").unwrap();
    let starts: Vec<String> = (1..nloci).map(|_| format!("{START_THETA:.5}")).collect();
    writeln!(w, "{} << RECOMBINATION VALUES", starts.join(" ")).unwrap();
    writeln!(w, "0 << LOCUS WHOSE FREQS ARE ITERATED").unwrap();
    let flags: Vec<&str> = (1..nloci).map(|_| "1").collect();
    writeln!(w, "{} << ITERATE THETA FLAGS", flags.join(" ")).unwrap();

    let thetas = spec.true_thetas();
    let mut ped = String::new();
    for p in 1..=spec.pedigrees {
        let people = simulate_pedigree(spec, &freqs, &thetas, &mut rng);
        write_pedigree(&mut ped, p, &people, spec, &mut rng);
    }
    (data, ped)
}

/// Gene frequencies `0.5 + u`, normalized and rounded to six decimals with the last one
/// making the printed values sum to exactly 1.
fn marker_freqs(rng: &mut SplitMix64, n: usize) -> Vec<f64> {
    let raw: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
    let total: f64 = raw.iter().sum();
    let mut micro: Vec<i64> = raw
        .iter()
        .map(|x| (x / total * 1e6).round() as i64)
        .collect();
    let rest: i64 = micro[..n - 1].iter().sum();
    micro[n - 1] = 1_000_000 - rest;
    micro.iter().map(|&m| m as f64 / 1e6).collect()
}

fn draw(rng: &mut SplitMix64, probs: &[f64]) -> usize {
    let u = rng.next_f64();
    let mut acc = 0.0;
    for (i, p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    probs.len() - 1
}

fn founder(rng: &mut SplitMix64, id: usize, sex: u8, freqs: &[Vec<f64>]) -> Individual {
    let mut hap = || freqs.iter().map(|f| draw(rng, f) + 1).collect::<Vec<_>>();
    let haps = [hap(), hap()];
    Individual {
        id,
        father: 0,
        mother: 0,
        sex,
        haps,
    }
}

fn gamete(rng: &mut SplitMix64, parent: &Individual, thetas: &[f64]) -> Vec<usize> {
    let mut strand = (rng.next_u64() & 1) as usize;
    let mut out = Vec::with_capacity(parent.haps[0].len());
    for l in 0..parent.haps[0].len() {
        if l > 0 && rng.next_f64() < thetas[l - 1] {
            strand ^= 1;
        }
        out.push(parent.haps[strand][l]);
    }
    out
}

fn child(
    rng: &mut SplitMix64,
    id: usize,
    sex: u8,
    pa: &Individual,
    ma: &Individual,
    thetas: &[f64],
) -> Individual {
    let haps = [gamete(rng, pa, thetas), gamete(rng, ma, thetas)];
    Individual {
        id,
        father: pa.id,
        mother: ma.id,
        sex,
        haps,
    }
}

fn simulate_pedigree(
    spec: &Spec,
    freqs: &[Vec<f64>],
    thetas: &[f64],
    rng: &mut SplitMix64,
) -> Vec<Individual> {
    let mut people = vec![founder(rng, 1, 1, freqs), founder(rng, 2, 2, freqs)];
    let sex_of = |k: usize| 1 + (k % 2) as u8;
    for k in 0..spec.sibship {
        let c = child(rng, 3 + k, sex_of(k), &people[0], &people[1], thetas);
        people.push(c);
    }
    for k in 0..spec.sibship.min(2) {
        let own = 2 + k;
        let spouse_sex = 3 - people[own].sex;
        let spouse = founder(rng, people.len() + 1, spouse_sex, freqs);
        people.push(spouse);
        let sp = people.len() - 1;
        let (pa, ma) = if people[own].sex == 1 {
            (own, sp)
        } else {
            (sp, own)
        };
        for j in 0..spec.sibship {
            let c = child(
                rng,
                people.len() + 1,
                sex_of(j),
                &people[pa],
                &people[ma],
                thetas,
            );
            people.push(c);
        }
    }
    people
}

fn write_pedigree(
    out: &mut String,
    ped: usize,
    people: &[Individual],
    spec: &Spec,
    rng: &mut SplitMix64,
) {
    let disease = spec.disease_locus();
    let children_of = |id: usize, male: bool| -> Vec<usize> {
        people
            .iter()
            .filter(|c| if male { c.father == id } else { c.mother == id })
            .map(|c| c.id)
            .collect()
    };
    let next_in = |list: Vec<usize>, id: usize| -> usize {
        list.iter()
            .position(|&c| c == id)
            .and_then(|i| list.get(i + 1).copied())
            .unwrap_or(0)
    };
    for p in people {
        let first = children_of(p.id, p.sex == 1).first().copied().unwrap_or(0);
        let (next_pa, next_ma) = if p.father == 0 {
            (0, 0)
        } else {
            (
                next_in(children_of(p.father, true), p.id),
                next_in(children_of(p.mother, false), p.id),
            )
        };
        let proband = u8::from(p.id == 1);
        write!(
            out,
            "{ped:4} {:3} {:3} {:3} {first:3} {next_pa:3} {next_ma:3} {} {proband}",
            p.id, p.father, p.mother, p.sex
        )
        .unwrap();
        let untyped_founder = p.id <= 2;
        for l in 0..spec.nloci() {
            let (a, b) = (p.haps[0][l], p.haps[1][l]);
            if l == disease {
                let class = if rng.next_f64() < 0.2 { 2 } else { 1 };
                let g = a + b - 2; // 0 = 11, 1 = 12, 2 = 22
                let affected = rng.next_f64() < PENETRANCE[class - 1][g];
                let status = if rng.next_f64() < 0.05 {
                    0
                } else if affected {
                    2
                } else {
                    1
                };
                write!(out, "  {status} {class}").unwrap();
            } else if untyped_founder || rng.next_f64() >= 0.85 {
                write!(out, "  0 0").unwrap();
            } else {
                write!(out, "  {} {}", a.min(b), a.max(b)).unwrap();
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linkage::{parse_datafile, parse_pedfile};
    use std::path::Path;

    #[test]
    fn generated_files_parse_and_have_the_documented_shape() {
        let spec = Spec {
            pedigrees: 3,
            sibship: 4,
            alleles: 5,
            markers: 3,
            seed: 7,
        };
        let (data, ped) = linkage_files(&spec);
        let d = parse_datafile(Path::new("gen.dat"), &data).unwrap();
        assert_eq!(d.loci.len(), 4);
        assert_eq!(spec.disease_locus(), 2);
        assert!(matches!(
            d.loci[2].kind,
            crate::linkage::LocusKind::Affection { .. }
        ));
        assert_eq!(d.thetas, vec![0.25; 3]);
        let p = parse_pedfile(Path::new("gen.ped"), &ped, &d).unwrap();
        assert_eq!(p.pedigrees.len(), 3);
        assert_eq!(spec.pedigree_size(), 2 + 4 + 2 * 5);
        assert!(p.pedigrees.iter().all(|r| r.len() == spec.pedigree_size()));
        // The same seed gives the same text; another seed another.
        assert_eq!(linkage_files(&spec), (data, ped.clone()));
        assert_ne!(linkage_files(&Spec { seed: 8, ..spec }).1, ped);
    }
}
