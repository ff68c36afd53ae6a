//! Elston-Stewart peeling over nuclear families (Elston and Stewart, Hum. Hered. 21:523,
//! 1971; in LINKAGE and FASTLINK, Lathrop et al. 1984 and Cottingham, Idury and Schaffer,
//! Am. J. Hum. Genet. 53:252, 1993).
//!
//! Every individual has a genotype array ("genarray") of `ngeno` probabilities. It starts
//! as the probability of the individual's own phenotypes given each genotype, times the
//! population frequency for a founder ([`crate::model::base_array`]). A pedigree without
//! loops, seen as a bipartite graph of individuals and nuclear families (a mating pair and
//! its children), is a tree. Rooted at the proband, each family has one member, the
//! *connector*, on the path to the root; all other members' arrays already hold the
//! likelihood of their own branches. Peeling the family folds it into the connector:
//!
//! * onto a parent (`peel up`): `new_f(gf) = A_f(gf) sum_gm A_m(gm) prod_i S_i(gf, gm)`;
//! * onto a child (`peel down`):
//!   `new_c(g) = A_c(g) sum_{gf, gm} A_f(gf) A_m(gm) T(g | gf, gm) prod_{i != c} S_i(gf, gm)`,
//!
//! with `S_i(gf, gm) = sum_g T(g | gf, gm) A_i(g)` and `T` the transmission probability.
//! Families are processed children-first (reverse breadth-first order from the root); the
//! pedigree's likelihood is the sum of the root's array.
//!
//! # The family kernel and its parallel split
//!
//! One parent is the *outer* parent: the kernel loops over its nonzero genotypes `go` and,
//! for each, over the *inner* parent's nonzero genotypes `gi`. For fixed `go` it first
//! folds each child's array over the gametes of `go`:
//! `Q_i(a) = sum_b P(b | go) A_i({a, b})`, so that `S_i(go, gi) = sum_a P(a | gi) Q_i(a)`.
//! Peeling up, the outer parent is the connector and the kernel writes
//! `out(go) = A_o(go) sum_gi A_i(gi) prod_i S_i`. Peeling down, the outer parent is the
//! parent with more nonzero genotypes (the father on a tie) and the kernel adds
//! `A_o(go) P(b | go) V(a)`, with `V(a) = sum_gi A_i(gi) P(a | gi) prod_{i != c} S_i`,
//! into `out({a, b})`.
//!
//! Parallel FASTLINK assigns "the nonzero elements in the parent's genarray to all
//! processors in a round-robin fashion ... the master sums up the contributions of each of
//! the processors" (Lu, Dwarkadas, Cox and Zwaenepoel, "Quantifying the performance
//! differences between PVM and TreadMarks", JPDC 43(2), 1997, on ILINK). Here processor
//! `id` of `nprocs` takes the positions [`stripe`]`(id, nprocs, n)` of the outer parent's
//! nonzero list and writes its own contribution array; peeling down, [`combine`] adds the
//! contributions in processor order into the connector's array (peeling up, where each
//! genotype comes from one processor, the parallel version stores each stripe into the
//! connector's array directly, see [`crate::parallel`]); [`rescale`] divides that array by its
//! largest entry and returns the logarithm of the factor, which keeps long pedigrees from
//! underflowing. Families whose work ([`Job::work`]) is below [`MASTER_ALONE_WORK`] are
//! done by the master alone, as parallel FASTLINK does for small families.

use crate::linkage::{PedFile, Person};
use crate::model::{Gametes, Model};
use app_common::AppError;
use std::ops::Range;
use std::path::Path;

/// A nuclear family in peeling order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// Person indices (into the genotype arrays) of the parents.
    pub father: u32,
    pub mother: u32,
    /// The children's person indices are `Pedigrees::children[children.0 .. children.1]`.
    pub children: (u32, u32),
    /// The connector: the member whose array receives the result.
    pub target: u32,
}

/// The peeling schedule of all pedigrees: read-only after construction, the same on every
/// processor (each can build it from the input files).
#[derive(Clone, Debug, Default)]
pub struct Pedigrees {
    /// Number of individuals over all pedigrees; person `p` is record `p` of the PEDFILE.
    pub nperson: usize,
    /// Whether each individual is a founder (no parents in the pedigree).
    pub founder: Vec<bool>,
    /// All nuclear families, pedigree after pedigree, each pedigree's in peeling order.
    pub families: Vec<Family>,
    /// Children of the families, flat.
    pub children: Vec<u32>,
    /// For each pedigree: its families (a range of `families`) ...
    pub ped_families: Vec<Range<usize>>,
    /// ... and its roots (a range of `roots`): the proband first, then one individual of
    /// each further connected part, whose arrays are summed at the end.
    pub ped_roots: Vec<Range<usize>>,
    pub roots: Vec<u32>,
    /// The pedigree numbers, for messages.
    pub ped_ids: Vec<i64>,
}

impl Pedigrees {
    /// Builds the schedule; rejects pedigrees with loops, naming the record that closes one.
    pub fn new(path: &Path, peds: &PedFile) -> Result<Pedigrees, AppError> {
        let mut out = Pedigrees {
            nperson: peds.persons.len(),
            ..Default::default()
        };
        out.founder = peds.persons.iter().map(|p| p.father == 0).collect();
        for range in &peds.pedigrees {
            schedule_pedigree(
                path,
                &peds.persons[range.clone()],
                range.start as u32,
                &mut out,
            )?;
            out.ped_ids.push(peds.persons[range.start].ped);
        }
        Ok(out)
    }

    pub fn children_of(&self, f: &Family) -> &[u32] {
        &self.children[f.children.0 as usize..f.children.1 as usize]
    }
}

fn schedule_pedigree(
    path: &Path,
    people: &[Person],
    base: u32,
    out: &mut Pedigrees,
) -> Result<(), AppError> {
    let n = people.len();
    let index = |id: i64| {
        people
            .iter()
            .position(|p| p.id == id)
            .expect("the reader checked parent ids")
    };
    // Families in order of their first child in the file; members are local indices.
    let mut fams: Vec<(usize, usize, Vec<usize>)> = Vec::new();
    for (c, p) in people.iter().enumerate() {
        if p.father == 0 {
            continue;
        }
        let (f, m) = (index(p.father), index(p.mother));
        match fams.iter_mut().find(|x| x.0 == f && x.1 == m) {
            Some(x) => x.2.push(c),
            None => fams.push((f, m, vec![c])),
        }
    }
    // A loop is an edge of the person-family graph that joins two already connected nodes.
    let mut parent: Vec<usize> = (0..n + fams.len()).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for (k, (f, m, kids)) in fams.iter().enumerate() {
        for &member in [f, m].into_iter().chain(kids) {
            let (a, b) = (find(&mut parent, member), find(&mut parent, n + k));
            if a == b {
                let p = &people[kids[0].max(member)];
                return Err(AppError::Malformed {
                    path: path.to_path_buf(),
                    line: p.line,
                    why: format!(
                        "pedigree {} has a marriage or consanguinity loop (closed by individual {}); \
                         loops are not supported",
                        p.ped, p.id
                    ),
                });
            }
            parent[a] = b;
        }
    }
    // Breadth-first from each root; families are recorded with the member they were
    // reached from, and peeled in the reverse order.
    let mut person_fams: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, (f, m, kids)) in fams.iter().enumerate() {
        for &member in [f, m].into_iter().chain(kids) {
            person_fams[member].push(k);
        }
    }
    let mut seen_person = vec![false; n];
    let mut seen_fam = vec![false; fams.len()];
    let mut order: Vec<(usize, usize)> = Vec::new();
    let roots_start = out.roots.len();
    let proband = people.iter().position(|p| p.proband == 1).unwrap_or(0);
    let candidates = std::iter::once(proband).chain(0..n);
    for root in candidates {
        if seen_person[root] {
            continue;
        }
        out.roots.push(base + root as u32);
        seen_person[root] = true;
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(p) = queue.pop_front() {
            for &k in &person_fams[p] {
                if seen_fam[k] {
                    continue;
                }
                seen_fam[k] = true;
                order.push((k, p));
                let (f, m, kids) = &fams[k];
                for &member in [f, m].into_iter().chain(kids) {
                    if !seen_person[member] {
                        seen_person[member] = true;
                        queue.push_back(member);
                    }
                }
            }
        }
    }
    let fam_start = out.families.len();
    for &(k, connector) in order.iter().rev() {
        let (f, m, kids) = &fams[k];
        let c0 = out.children.len() as u32;
        out.children.extend(kids.iter().map(|&c| base + c as u32));
        out.families.push(Family {
            father: base + *f as u32,
            mother: base + *m as u32,
            children: (c0, out.children.len() as u32),
            target: base + connector as u32,
        });
    }
    out.ped_families.push(fam_start..out.families.len());
    out.ped_roots.push(roots_start..out.roots.len());
    Ok(())
}

/// The kind of unit ([`crate::WORK`]) the peeling counts: a gamete term.
pub const WORK_TERM: usize = 0;

/// Below this much work (outer x inner nonzero genotypes x children) the master peels a
/// family alone: splitting it would cost more in synchronization than it saves.
pub const MASTER_ALONE_WORK: usize = 20_000;

/// The positions of the outer parent's nonzero list that processor `id` of `nprocs` works
/// on: `id, id + nprocs, id + 2 nprocs, ...` (round robin, as parallel FASTLINK).
pub fn stripe(id: usize, nprocs: usize, n: usize) -> impl Iterator<Item = usize> {
    assert!(id < nprocs, "processor {id} of {nprocs}");
    (id..n).step_by(nprocs)
}

/// How one family is peeled, decided from the current arrays ([`prepare`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub outer: u32,
    pub inner: u32,
    /// The family's children are `Pedigrees::children[children.0 .. children.1]`.
    pub children: (u32, u32),
    /// `Some(i)`: peel down onto the `i`-th child; `None`: peel up onto the outer parent.
    pub down: Option<u32>,
    /// Number of nonzero genotypes of the outer and inner parent.
    pub n_outer: usize,
    pub n_inner: usize,
}

impl Job {
    /// The person whose array receives the result.
    pub fn target(&self, peds: &Pedigrees) -> u32 {
        match self.down {
            Some(i) => peds.children[(self.children.0 + i) as usize],
            None => self.outer,
        }
    }

    /// A measure of the kernel's work, to decide whether to split it.
    pub fn work(&self) -> usize {
        self.n_outer * self.n_inner * ((self.children.1 - self.children.0) as usize).max(1)
    }
}

/// Private per-processor buffers of the kernel.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    /// Nonzero genotypes of the outer and inner parent.
    pub outer_nz: Vec<u32>,
    pub inner_nz: Vec<u32>,
    /// Nonzero genotypes of each child, flat, child `i` at `child_nz_start[i]..[i + 1]`.
    child_nz: Vec<u32>,
    child_nz_start: Vec<usize>,
    /// `q[i * nhap + a]`: child `i`'s array folded over the outer parent's gametes.
    q: Vec<f64>,
    /// `v[a]`: peeling down, the weight of inner gamete `a` for the current outer genotype.
    v: Vec<f64>,
}

fn nonzero(array: &[f64], out: &mut Vec<u32>) {
    out.clear();
    out.extend(
        array
            .iter()
            .enumerate()
            .filter(|(_, &x)| x != 0.0)
            .map(|(g, _)| g as u32),
    );
}

/// The genotype array of person `p` within the flat array of all persons.
pub fn person_array(genarrays: &[f64], ngeno: usize, p: u32) -> &[f64] {
    &genarrays[p as usize * ngeno..(p as usize + 1) * ngeno]
}

/// Decides how to peel `fam` and fills the nonzero lists of `scratch` from the current
/// arrays. Reads only; every processor calls it and gets the same [`Job`].
pub fn prepare(
    model: &Model,
    peds: &Pedigrees,
    fam: &Family,
    genarrays: &[f64],
    scratch: &mut Scratch,
) -> Job {
    let g = model.ngeno;
    let kids = peds.children_of(fam);
    let arr = |p: u32| person_array(genarrays, g, p);
    let (outer, inner, down) = if fam.target == fam.father {
        (fam.father, fam.mother, None)
    } else if fam.target == fam.mother {
        (fam.mother, fam.father, None)
    } else {
        let i = kids
            .iter()
            .position(|&c| c == fam.target)
            .expect("the connector is a member") as u32;
        let nf = arr(fam.father).iter().filter(|&&x| x != 0.0).count();
        let nm = arr(fam.mother).iter().filter(|&&x| x != 0.0).count();
        if nm > nf {
            (fam.mother, fam.father, Some(i))
        } else {
            (fam.father, fam.mother, Some(i))
        }
    };
    nonzero(arr(outer), &mut scratch.outer_nz);
    nonzero(arr(inner), &mut scratch.inner_nz);
    scratch.child_nz.clear();
    scratch.child_nz_start.clear();
    let mut buf = Vec::new();
    for &c in kids {
        scratch.child_nz_start.push(scratch.child_nz.len());
        nonzero(arr(c), &mut buf);
        scratch.child_nz.extend_from_slice(&buf);
    }
    scratch.child_nz_start.push(scratch.child_nz.len());
    scratch.q.resize(kids.len() * model.nhap, 0.0);
    scratch.v.resize(model.nhap, 0.0);
    Job {
        outer,
        inner,
        children: fam.children,
        down,
        n_outer: scratch.outer_nz.len(),
        n_inner: scratch.inner_nz.len(),
    }
}

/// What the family kernel reads besides the genotype arrays: the model, the gamete table
/// of the current recombination fractions and the schedule (all read-only).
#[derive(Clone, Copy, Debug)]
pub struct Tables<'a> {
    pub model: &'a Model,
    pub gam: &'a Gametes,
    pub peds: &'a Pedigrees,
}

/// The family kernel over the outer genotypes at `positions` of the outer nonzero list
/// (all of them sequentially, a [`stripe`] in parallel). Zeroes `out` (this processor's
/// contribution array, `ngeno` long) and writes the contributions there. Reads the
/// parents' and children's arrays only.
pub fn family_kernel(
    tables: &Tables<'_>,
    job: &Job,
    genarrays: &[f64],
    positions: impl Iterator<Item = usize>,
    scratch: &mut Scratch,
    out: &mut [f64],
) {
    let Tables { model, gam, peds } = *tables;
    let (g, h) = (model.ngeno, model.nhap);
    out.fill(0.0);
    let kids = &peds.children[job.children.0 as usize..job.children.1 as usize];
    let a_outer = person_array(genarrays, g, job.outer);
    let a_inner = person_array(genarrays, g, job.inner);
    let down = job.down.map(|i| i as usize);
    let Scratch {
        outer_nz,
        inner_nz,
        child_nz,
        child_nz_start,
        q,
        v,
    } = scratch;
    for pos in positions {
        let go = outer_nz[pos] as usize;
        let w_outer = a_outer[go];
        let (o_haps, o_probs) = gam.of(go);
        // Counted work: gamete terms of this outer genotype (crate documentation).
        let mut terms = 0u64;
        // Fold each child (but the target) over the outer parent's gametes, scattering
        // from the child's nonzero genotypes {x, y}: gamete b = x leaves a = y and b = y
        // leaves a = x.
        for (i, &c) in kids.iter().enumerate() {
            if Some(i) == down {
                continue;
            }
            let qi = &mut q[i * h..(i + 1) * h];
            qi.fill(0.0);
            let a_child = person_array(genarrays, g, c);
            let nz = &child_nz[child_nz_start[i]..child_nz_start[i + 1]];
            terms += (nz.len() * o_haps.len()) as u64;
            for &gc in nz {
                let (x, y) = model.haps(gc as usize);
                let w = a_child[gc as usize];
                for (&b, &pb) in o_haps.iter().zip(o_probs) {
                    let b = b as usize;
                    if b == x {
                        qi[y] += pb * w;
                    }
                    if b == y && x != y {
                        qi[x] += pb * w;
                    }
                }
            }
        }
        let mut acc = 0.0;
        for &gi in inner_nz.iter() {
            let gi = gi as usize;
            let (i_haps, i_probs) = gam.of(gi);
            let mut prod = a_inner[gi];
            for i in 0..kids.len() {
                if Some(i) == down {
                    continue;
                }
                let qi = &q[i * h..(i + 1) * h];
                terms += i_haps.len() as u64;
                let s: f64 = i_haps
                    .iter()
                    .zip(i_probs)
                    .map(|(&a, &pa)| pa * qi[a as usize])
                    .sum();
                prod *= s;
                if prod == 0.0 {
                    break;
                }
            }
            if prod == 0.0 {
                continue;
            }
            if down.is_some() {
                terms += i_haps.len() as u64;
                for (&a, &pa) in i_haps.iter().zip(i_probs) {
                    v[a as usize] += prod * pa;
                }
            } else {
                acc += prod;
            }
        }
        if down.is_some() {
            terms += (o_haps.len() * h) as u64;
            for (&b, &pb) in o_haps.iter().zip(o_probs) {
                let wb = w_outer * pb;
                for (a, va) in v.iter().enumerate() {
                    if *va != 0.0 {
                        out[model.geno(a, b as usize)] += wb * va;
                    }
                }
            }
            v.fill(0.0);
        } else {
            out[go] = w_outer * acc;
        }
        dsm::work::count(WORK_TERM, terms);
    }
}

/// Folds the contributions of `nprocs` processors (`contribs[p * ngeno ..]`) into the
/// target's array, adding them in processor order: peeling up the target becomes their
/// sum (each genotype was written by one processor), peeling down it is multiplied by it.
pub fn combine(job: &Job, target: &mut [f64], contribs: &[f64], nprocs: usize) {
    combine_strided(job, target, contribs, target.len(), nprocs);
}

/// [`combine`] with processor `p`'s contributions at `contribs[p * stride ..]`.
pub fn combine_strided(
    job: &Job,
    target: &mut [f64],
    contribs: &[f64],
    stride: usize,
    nprocs: usize,
) {
    let g = target.len();
    assert!(stride >= g && nprocs >= 1 && contribs.len() >= (nprocs - 1) * stride + g);
    for (k, t) in target.iter_mut().enumerate() {
        let mut s = 0.0;
        for p in 0..nprocs {
            s += contribs[p * stride + k];
        }
        *t = if job.down.is_some() { *t * s } else { s };
    }
    dsm::work::count(WORK_TERM, (g * nprocs) as u64);
}

/// Divides `array` by its largest entry and returns the natural logarithm of that entry
/// (`-inf`, leaving the array as it is, when the array is all zero).
pub fn rescale(array: &mut [f64]) -> f64 {
    let max = array.iter().fold(0.0f64, |m, &x| m.max(x));
    if max == 0.0 {
        return f64::NEG_INFINITY;
    }
    let inv = 1.0 / max;
    for x in array.iter_mut() {
        *x *= inv;
    }
    dsm::work::count(WORK_TERM, array.len() as u64);
    max.ln()
}

/// Genotype arrays and buffers of the sequential likelihood.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    /// `nperson x ngeno` genotype arrays (the shared data of the parallel version).
    pub genarrays: Vec<f64>,
    /// One contribution array (`nprocs x ngeno` in the parallel version).
    pub contrib: Vec<f64>,
    pub scratch: Scratch,
}

/// The natural logarithm of each pedigree's likelihood for the gamete table `gam`
/// (`-inf` for a pedigree whose likelihood is zero), peeling sequentially. `base` holds
/// the starting arrays, `nperson x ngeno`.
pub fn pedigree_ln_likelihoods(
    model: &Model,
    peds: &Pedigrees,
    base: &[f64],
    gam: &Gametes,
    ws: &mut Workspace,
) -> Vec<f64> {
    let g = model.ngeno;
    ws.genarrays.clear();
    ws.genarrays.extend_from_slice(base);
    ws.contrib.resize(g, 0.0);
    let mut result = Vec::with_capacity(peds.ped_families.len());
    for (fams, roots) in peds.ped_families.iter().zip(&peds.ped_roots) {
        let mut ln_like = 0.0;
        for fam in &peds.families[fams.clone()] {
            let job = prepare(model, peds, fam, &ws.genarrays, &mut ws.scratch);
            let n = job.n_outer;
            family_kernel(
                &Tables { model, gam, peds },
                &job,
                &ws.genarrays,
                0..n,
                &mut ws.scratch,
                &mut ws.contrib,
            );
            let t = job.target(peds) as usize;
            let target = &mut ws.genarrays[t * g..(t + 1) * g];
            combine(&job, target, &ws.contrib, 1);
            ln_like += rescale(target);
        }
        for &r in &peds.roots[roots.clone()] {
            let s: f64 = person_array(&ws.genarrays, g, r).iter().sum();
            ln_like += s.ln();
        }
        result.push(if ln_like.is_nan() {
            f64::NEG_INFINITY
        } else {
            ln_like
        });
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_partition_the_list_round_robin() {
        let all: Vec<Vec<usize>> = (0..3).map(|id| stripe(id, 3, 8).collect()).collect();
        assert_eq!(all, vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
        assert_eq!(stripe(0, 1, 4).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn rescale_divides_by_the_maximum() {
        let mut a = [0.5, 2.0, 0.0, 1.0];
        let l = rescale(&mut a);
        assert_eq!(a, [0.25, 1.0, 0.0, 0.5]);
        assert!((l - 2f64.ln()).abs() < 1e-15);
        let mut z = [0.0; 3];
        assert_eq!(rescale(&mut z), f64::NEG_INFINITY);
    }
}
