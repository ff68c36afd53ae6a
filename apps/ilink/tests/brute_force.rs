//! The peeling likelihood against an independent brute force: the sum, over every
//! assignment of joint genotypes to the members of a small pedigree, of the product of
//! founder frequencies, transmission probabilities and phenotype probabilities. The brute
//! force shares only the LINKAGE reader with the code under test; it has its own
//! haplotype representation, penetrance lookup and meiosis enumeration.

use app_common::rng::SplitMix64;
use app_ilink::linkage::{DataFile, LocusKind, PedFile, Phenotype};
use app_ilink::peel::Workspace;
use app_ilink::Problem;
use std::path::Path;

/// Joint genotypes as unordered pairs of haplotypes (allele vectors in chromosome order).
struct Space {
    haps: Vec<Vec<usize>>,
    genos: Vec<(usize, usize)>,
}

impl Space {
    fn new(nalleles: &[usize]) -> Space {
        let mut haps: Vec<Vec<usize>> = vec![vec![]];
        for &n in nalleles {
            haps = haps
                .into_iter()
                .flat_map(|h| (0..n).map(move |a| [h.clone(), vec![a]].concat()))
                .collect();
        }
        let mut genos = Vec::new();
        for a in 0..haps.len() {
            for b in a..haps.len() {
                genos.push((a, b));
            }
        }
        Space { haps, genos }
    }
}

/// Every gamete of a parent with haplotypes `h1`, `h2` as (strand choice, probability),
/// by enumerating the strand taken at every locus.
fn meioses(h1: &[usize], h2: &[usize], thetas: &[f64]) -> Vec<(Vec<usize>, f64)> {
    let l = h1.len();
    (0..1usize << l)
        .map(|s| {
            let mut p = 0.5;
            let mut g = Vec::with_capacity(l);
            for k in 0..l {
                let second = (s >> k) & 1 == 1;
                g.push(if second { h2[k] } else { h1[k] });
                if k > 0 {
                    let prev = (s >> (k - 1)) & 1 == 1;
                    p *= if prev != second {
                        thetas[k - 1]
                    } else {
                        1.0 - thetas[k - 1]
                    };
                }
            }
            (g, p)
        })
        .collect()
}

fn phenotype_prob(data: &DataFile, phen: &[Phenotype], space: &Space, g: usize) -> f64 {
    let (a, b) = space.genos[g];
    let mut p = 1.0;
    for (pos, &input) in data.order.iter().enumerate() {
        let (x, y) = (space.haps[a][pos], space.haps[b][pos]);
        let locus = &data.loci[input];
        p *= match (&locus.kind, phen[input]) {
            (_, Phenotype::Alleles(0, 0)) => 1.0,
            (_, Phenotype::Alleles(u, v)) => {
                let mut have = [x as u32 + 1, y as u32 + 1];
                have.sort_unstable();
                f64::from(have == [u, v])
            }
            (LocusKind::Affection { penetrances }, Phenotype::Affection { status, class }) => {
                // Walk LINKAGE's list 11, 12, ..., 1n, 22, ... to find {x, y}.
                let n = locus.freqs.len();
                let mut k = 0;
                let mut found = None;
                for i in 0..n {
                    for j in i..n {
                        if (i, j) == (x.min(y), x.max(y)) {
                            found = Some(k);
                        }
                        k += 1;
                    }
                }
                let pen = penetrances[class as usize - 1][found.unwrap()];
                match status {
                    0 => 1.0,
                    2 => pen,
                    _ => 1.0 - pen,
                }
            }
            _ => unreachable!(),
        };
    }
    p
}

fn founder_prob(data: &DataFile, space: &Space, g: usize) -> f64 {
    let (a, b) = space.genos[g];
    let freq = |h: usize| -> f64 {
        data.order
            .iter()
            .enumerate()
            .map(|(pos, &input)| data.loci[input].freqs[space.haps[h][pos]])
            .product()
    };
    freq(a) * freq(b) * if a == b { 1.0 } else { 2.0 }
}

/// The likelihood of each pedigree by summing over all genotype assignments.
fn brute_force(data: &DataFile, peds: &PedFile, thetas: &[f64]) -> Vec<f64> {
    let nalleles: Vec<usize> = data
        .order
        .iter()
        .map(|&l| data.loci[l].freqs.len())
        .collect();
    let space = Space::new(&nalleles);
    let ng = space.genos.len();
    // trans[(c * ng + f) * ng + m] = P(child c | father f, mother m).
    let gametes: Vec<Vec<(Vec<usize>, f64)>> = space
        .genos
        .iter()
        .map(|&(a, b)| meioses(&space.haps[a], &space.haps[b], thetas))
        .collect();
    let hap_index = |h: &[usize]| space.haps.iter().position(|x| x == h).unwrap();
    let gametes: Vec<Vec<(usize, f64)>> = gametes
        .iter()
        .map(|list| list.iter().map(|(h, p)| (hap_index(h), *p)).collect())
        .collect();
    let nh = space.haps.len();
    let mut geno_of = vec![0; nh * nh];
    for (g, &(a, b)) in space.genos.iter().enumerate() {
        geno_of[a * nh + b] = g;
        geno_of[b * nh + a] = g;
    }
    let mut trans = vec![0.0; ng * ng * ng];
    for f in 0..ng {
        for m in 0..ng {
            for &(x, pf) in &gametes[f] {
                for &(y, pm) in &gametes[m] {
                    trans[(geno_of[x * nh + y] * ng + f) * ng + m] += pf * pm;
                }
            }
        }
    }
    peds.pedigrees
        .iter()
        .map(|range| {
            let people = &peds.persons[range.clone()];
            let idx = |id: i64| people.iter().position(|p| p.id == id).unwrap();
            let parents: Vec<Option<(usize, usize)>> = people
                .iter()
                .map(|p| (p.father != 0).then(|| (idx(p.father), idx(p.mother))))
                .collect();
            // Each person's possible genotypes with their own factor (phenotype, founder prior).
            let own: Vec<Vec<(usize, f64)>> = people
                .iter()
                .zip(&parents)
                .map(|(p, par)| {
                    (0..ng)
                        .map(|g| {
                            let prior = if par.is_none() {
                                founder_prob(data, &space, g)
                            } else {
                                1.0
                            };
                            (g, phenotype_prob(data, &p.phenotypes, &space, g) * prior)
                        })
                        .filter(|&(_, w)| w != 0.0)
                        .collect()
                })
                .collect();
            let n = people.len();
            let mut pos = vec![0usize; n];
            let mut total = 0.0;
            if own.iter().any(|o| o.is_empty()) {
                return 0.0;
            }
            loop {
                let geno: Vec<usize> = (0..n).map(|i| own[i][pos[i]].0).collect();
                let mut p = 1.0;
                for i in 0..n {
                    p *= own[i][pos[i]].1;
                    if let Some((f, m)) = parents[i] {
                        p *= trans[(geno[i] * ng + geno[f]) * ng + geno[m]];
                    }
                }
                total += p;
                // Odometer.
                let mut k = 0;
                loop {
                    if k == n {
                        return total;
                    }
                    pos[k] += 1;
                    if pos[k] < own[k].len() {
                        break;
                    }
                    pos[k] = 0;
                    k += 1;
                }
            }
        })
        .collect()
}

/// A LINKAGE datafile for loci given as (number of alleles, affection classes or 0 for a
/// numbered-allele locus), in input order, with chromosome order `order` (1-based).
fn datafile(loci: &[(usize, usize)], order: &[usize], rng: &mut SplitMix64) -> String {
    let n = loci.len();
    let mut s = format!("{n} 0 0 3\n0 0.0 0.0 0\n");
    s += &order
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    s += "\n";
    for &(na, classes) in loci {
        s += &format!("{} {na}\n", if classes > 0 { 1 } else { 3 });
        let raw: Vec<f64> = (0..na).map(|_| 0.3 + rng.next_f64()).collect();
        let sum: f64 = raw.iter().sum();
        s += &raw
            .iter()
            .map(|x| format!("{:.17}", x / sum))
            .collect::<Vec<_>>()
            .join(" ");
        s += "\n";
        if classes > 0 {
            s += &format!("{classes}\n");
            for _ in 0..classes {
                let pens: Vec<String> = (0..na * (na + 1) / 2)
                    .map(|_| format!("{:.17}", rng.next_f64()))
                    .collect();
                s += &pens.join(" ");
                s += "\n";
            }
        }
    }
    s += "0 0\n";
    s += &(1..n).map(|_| "0.1").collect::<Vec<_>>().join(" ");
    s += "\n0\n";
    s += &(1..n).map(|_| "1").collect::<Vec<_>>().join(" ");
    s + "\n"
}

/// A PEDFILE for one pedigree given as (id, father, mother, sex), parents listed before
/// their children, with the pointer columns filled in and `proband` marked. Marker
/// genotypes follow Mendel's laws (each child takes a random allele of each parent at each
/// locus) and a quarter of them are then hidden; affection status and class are random.
fn pedfile(
    members: &[(i64, i64, i64, u8)],
    proband: i64,
    loci: &[(usize, usize)],
    rng: &mut SplitMix64,
) -> String {
    let kids = |id: i64, male: bool| -> Vec<i64> {
        members
            .iter()
            .filter(|m| if male { m.1 == id } else { m.2 == id })
            .map(|m| m.0)
            .collect()
    };
    let next = |list: Vec<i64>, id: i64| {
        list.iter()
            .position(|&c| c == id)
            .and_then(|i| list.get(i + 1).copied())
            .unwrap_or(0)
    };
    let mut alleles: Vec<Vec<[u64; 2]>> = Vec::new();
    for &(_, fa, mo, _) in members {
        let row = loci
            .iter()
            .enumerate()
            .map(|(l, &(na, _))| {
                if fa == 0 {
                    [1 + rng.below(na as u64), 1 + rng.below(na as u64)]
                } else {
                    let pick = |p: i64, rng: &mut SplitMix64| {
                        let i = members.iter().position(|m| m.0 == p).unwrap();
                        alleles[i][l][rng.below(2) as usize]
                    };
                    [pick(fa, rng), pick(mo, rng)]
                }
            })
            .collect();
        alleles.push(row);
    }
    let mut s = String::new();
    for (i, &(id, fa, mo, sex)) in members.iter().enumerate() {
        let first = kids(id, sex == 1).first().copied().unwrap_or(0);
        let (np, nm) = if fa == 0 {
            (0, 0)
        } else {
            (next(kids(fa, true), id), next(kids(mo, false), id))
        };
        s += &format!(
            "7 {id} {fa} {mo} {first} {np} {nm} {sex} {}",
            i64::from(id == proband)
        );
        for (l, &(_, classes)) in loci.iter().enumerate() {
            let unknown = rng.next_f64() < 0.25;
            if classes > 0 {
                let status = if unknown { 0 } else { 1 + rng.below(2) };
                let class = 1 + rng.below(classes as u64);
                if classes > 1 {
                    s += &format!("  {status} {class}");
                } else {
                    s += &format!("  {status}");
                }
            } else if unknown {
                s += "  0 0";
            } else {
                s += &format!("  {} {}", alleles[i][l][0], alleles[i][l][1]);
            }
        }
        s += "\n";
    }
    s
}

fn compare(data: &str, ped: &str, thetas: &[f64]) -> usize {
    let problem = Problem::from_text(Path::new("bf.dat"), data, Path::new("bf.ped"), ped).unwrap();
    let want = brute_force(&problem.data, &problem.peds, thetas);
    let got = problem.pedigree_ln_likelihoods(thetas, &mut Workspace::default());
    assert_eq!(want.len(), got.len());
    let mut nonzero = 0;
    for (w, g) in want.iter().zip(&got) {
        if *w == 0.0 {
            assert_eq!(*g, f64::NEG_INFINITY, "brute force gives zero, peeling {g}");
            continue;
        }
        nonzero += 1;
        let rel = (g.exp() - w).abs() / w;
        assert!(
            rel < 1e-12,
            "peeling {} vs brute force {w}: relative difference {rel:e}\n{ped}",
            g.exp()
        );
    }
    nonzero
}

/// Pedigree shapes: a trio; three generations with a marry-in; a man with two wives; a
/// nuclear family of four children.
const SHAPES: &[&[(i64, i64, i64, u8)]] = &[
    &[(1, 0, 0, 1), (2, 0, 0, 2), (3, 1, 2, 2)],
    &[
        (1, 0, 0, 1),
        (2, 0, 0, 2),
        (3, 1, 2, 1),
        (4, 1, 2, 2),
        (5, 0, 0, 2),
        (6, 3, 5, 1),
        (7, 3, 5, 2),
    ],
    &[
        (1, 0, 0, 1),
        (2, 0, 0, 2),
        (3, 0, 0, 2),
        (4, 1, 2, 1),
        (5, 1, 3, 2),
        (6, 1, 3, 1),
    ],
    &[
        (1, 0, 0, 1),
        (2, 0, 0, 2),
        (3, 1, 2, 1),
        (4, 1, 2, 2),
        (5, 1, 2, 2),
        (6, 1, 2, 1),
    ],
];

#[test]
fn peeling_matches_brute_force_on_two_locus_pedigrees() {
    let mut rng = SplitMix64::new(2024);
    let loci = [(2, 2), (2, 0)];
    let mut checked = 0;
    for shape in SHAPES {
        // Every member as proband: peeling up, down and through multiple marriages.
        for &(proband, ..) in shape.iter() {
            let data = datafile(&loci, &[1, 2], &mut rng);
            let ped = pedfile(shape, proband, &loci, &mut rng);
            let theta = 0.5 * rng.next_f64();
            checked += compare(&data, &ped, &[theta]);
        }
    }
    assert_eq!(
        checked, 22,
        "every generated pedigree should have a nonzero likelihood"
    );
}

#[test]
fn peeling_matches_brute_force_on_three_locus_pedigrees() {
    let mut rng = SplitMix64::new(99);
    // Input order: numbered (3 alleles), affection (1 class), numbered (2 alleles); the
    // chromosome order puts the affection locus last, as in the shipped example.
    let loci = [(3, 0), (2, 1), (2, 0)];
    let mut checked = 0;
    // (The seven-member shape is left to the two-locus test: 36^7 assignments are slow.)
    for shape in [SHAPES[0], SHAPES[2], SHAPES[3]] {
        for &proband in &[shape[0].0, shape[shape.len() - 1].0] {
            let data = datafile(&loci, &[1, 3, 2], &mut rng);
            let ped = pedfile(shape, proband, &loci, &mut rng);
            let thetas = [0.5 * rng.next_f64(), 0.5 * rng.next_f64()];
            checked += compare(&data, &ped, &thetas);
        }
    }
    // Recombination fractions on the bounds.
    let data = datafile(&loci, &[1, 3, 2], &mut rng);
    let ped = pedfile(SHAPES[2], 5, &loci, &mut rng);
    for thetas in [[0.0, 0.5], [0.5, 0.0], [0.0, 0.0]] {
        compare(&data, &ped, &thetas);
    }
    assert_eq!(
        checked, 6,
        "every generated pedigree should have a nonzero likelihood"
    );
}

#[test]
fn peeling_matches_brute_force_on_a_family_of_the_example() {
    // The family of individuals 10 and 11 of pedigree 1 and their four children, with the
    // example's loci and phenotypes, as a pedigree of its own.
    let dir = app_common::data_dir().join("ilink");
    let data = std::fs::read_to_string(dir.join("ilink_example_datafile.dat")).unwrap();
    let ped = std::fs::read_to_string(dir.join("ilink_example_pedfile.dat")).unwrap();
    let rows: Vec<&str> = ped
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[0] == "1" && ["10", "11", "14", "15", "16", "17"].contains(&f[1])
        })
        .collect();
    let family: String = rows
        .iter()
        .map(|l| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            if f[1] == "10" {
                // Individual 10 becomes a founder whose children chain is unchanged.
                f[2] = "0".into();
                f[3] = "0".into();
                f[5] = "0".into();
                f[6] = "0".into();
            }
            f.join(" ") + "\n"
        })
        .collect();
    for thetas in [[0.1197, 0.125], [0.02, 0.4], [0.5, 0.5]] {
        assert_eq!(compare(&data, &family, &thetas), 1);
    }
}
