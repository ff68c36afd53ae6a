//! Water-spatial: the cell-decomposed program (SPLASH-2 `water-spatial`).
//!
//! The box is divided into `bps^3` cells ([`Grid`]) of side at least the cutoff
//! (`bps = floor(BOXL / CUTOFF)`). Each cell holds a linked list of the molecules whose
//! oxygen lies in it. As in SPLASH-2 (`mdvar.h`'s `link_type`, a `molecule_type` and its
//! `next_mol` pointer in one record, allocated by `INITIA`), each molecule is a record of
//! its 84 doubles followed by its link ([`crate::layout::LINK_STRIDE`]): the link is a
//! molecule index (`-1` ending a list), the records sit in one array in the order `INITIA`
//! allocates them (lattice order) and never move, and `head[cell]` (an `i64` array) starts
//! each list (SPLASH-2's `BOX[i][j][k].list`). Processors own rectangular blocks of
//! contiguous cells ([`boxes_of`]). A molecule interacts with every molecule of the 27
//! cells around its own (fewer when `bps` is 1 or 2); each processor computes the forces
//! on its own molecules only, so every pair is computed twice and the virial and potential
//! sums are halved. After each step's correction, molecules whose oxygen has left their
//! cell move to the head of the new cell's list ([`bndry_cells`]).

use crate::layout::*;
use crate::physics::*;
use crate::{Locked, MOLECULE, PAIR};
use dsm::work::count;
use std::ops::Range;

/// End of a cell's molecule list.
pub const END: i64 = -1;

/// The cell grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grid {
    /// Cells per side (`BOX_PER_SIDE`), at least 1.
    pub bps: usize,
    /// Side of a cell (angstrom).
    pub box_length: f64,
}

impl Grid {
    pub fn new(sys: &System) -> Grid {
        let bps = ((sys.boxl / sys.cutoff) as usize).max(1);
        Grid {
            bps,
            box_length: sys.boxl / bps as f64,
        }
    }

    pub fn cells(&self) -> usize {
        self.bps * self.bps * self.bps
    }

    /// Index of cell `(x, y, z)` in `head` (z fastest).
    pub fn id(&self, x: usize, y: usize, z: usize) -> usize {
        (x * self.bps + y) * self.bps + z
    }

    /// The cell of a molecule: that of its oxygen, `floor(x / box_length)` per direction.
    /// SPLASH-2 clamps an index equal to `bps` (an oxygen on the upper face) when placing
    /// molecules initially; it is clamped here after every move as well.
    pub fn cell_of(&self, m: &[f64]) -> usize {
        let idx = |dir| ((m[f(DISP, dir, O)] / self.box_length) as usize).min(self.bps - 1);
        self.id(idx(XDIR), idx(YDIR), idx(ZDIR))
    }
}

/// The processor grid of SPLASH-2 `water.C`: `xprocs * yprocs * zprocs = nprocs`, with
/// `xprocs` the largest factor not above the cube root and `yprocs` the largest factor of
/// the rest not above its square root.
pub fn proc_grid(nprocs: usize) -> [usize; 3] {
    let cbrt = (nprocs as f64).powf(1.0 / 3.0) + 0.00000000000001;
    let mut j = (cbrt as usize).max(1);
    while j > 0 {
        let mut k = (((nprocs / j) as f64).sqrt() as usize).max(1);
        while k > 0 {
            let l = nprocs / (j * k);
            if j * k * l == nprocs {
                return [j, k, l];
            }
            k -= 1;
        }
        j -= 1;
    }
    unreachable!("1 x 1 x nprocs always factors nprocs")
}

/// `n` cells split into `parts` contiguous runs, the first `n % parts` one longer.
fn split(n: usize, parts: usize, i: usize) -> Range<usize> {
    let (inc, left) = (n / parts, n % parts);
    let start = i * inc + i.min(left);
    start..start + inc + usize::from(i < left)
}

/// The cells of processor `id` of `nprocs`: a block of contiguous cell coordinates per
/// direction (SPLASH-2 `start_end`, processors numbered with z fastest).
pub fn boxes_of(id: usize, nprocs: usize, bps: usize) -> [Range<usize>; 3] {
    let [xp, yp, zp] = proc_grid(nprocs);
    let (px, py, pz) = (id / (yp * zp), id / zp % yp, id % zp);
    [split(bps, xp, px), split(bps, yp, py), split(bps, zp, pz)]
}

/// The cells of processor `id` in the order it visits them (x, then y, then z fastest;
/// SPLASH-2 `my_boxes`).
pub fn own_cells(id: usize, nprocs: usize, grid: &Grid) -> Vec<usize> {
    let [xs, ys, zs] = boxes_of(id, nprocs, grid.bps);
    let mut cells = Vec::new();
    for x in xs {
        for y in ys.clone() {
            for z in zs.clone() {
                cells.push(grid.id(x, y, z));
            }
        }
    }
    cells
}

/// The neighbour cells of cell `c`, itself included, in SPLASH-2's order (x, y, z offsets
/// -1, 0, 1, z fastest), with periodic wrap. With 2 cells per side only offsets staying
/// inside the grid are taken; a cell reached twice through wrapping is taken once.
pub fn neighbors(c: usize, grid: &Grid) -> Vec<usize> {
    let bps = grid.bps as i64;
    let (i, j, k) = (
        (c / (grid.bps * grid.bps)) as i64,
        (c / grid.bps % grid.bps) as i64,
        (c % grid.bps) as i64,
    );
    let wrap = |v: i64| {
        if v == -1 {
            v + bps
        } else if v >= bps {
            v - bps
        } else {
            v
        }
    };
    let mut out = Vec::with_capacity(27);
    for xb in i - 1..=i + 1 {
        for yb in j - 1..=j + 1 {
            for zb in k - 1..=k + 1 {
                if bps == 2 && [xb, yb, zb].iter().any(|&v| v < 0 || v == 2) {
                    continue;
                }
                let (x, y, z) = (wrap(xb), wrap(yb), wrap(zb));
                if (x, y, z) == (i, j, k) && (xb, yb, zb) != (i, j, k) {
                    continue;
                }
                out.push(grid.id(x as usize, y as usize, z as usize));
            }
        }
    }
    out
}

/// The molecules of cell `c`, in list order.
/// The molecule part (`MOL_STRIDE` doubles) of record `m` of Water-spatial's record array
/// (`LINK_STRIDE` words a record, [`crate::layout`]).
#[inline]
pub fn rec(recs: &[f64], m: usize) -> &[f64] {
    &recs[m * LINK_STRIDE..m * LINK_STRIDE + MOL_STRIDE]
}

/// The molecule part of record `m`, writable.
#[inline]
pub fn rec_mut(recs: &mut [f64], m: usize) -> &mut [f64] {
    &mut recs[m * LINK_STRIDE..m * LINK_STRIDE + MOL_STRIDE]
}

/// The 9 doubles of slot `slot` of record `m`, writable.
#[inline]
fn rec_slot_mut(recs: &mut [f64], m: usize, slot: usize) -> &mut [f64] {
    let at = m * LINK_STRIDE + f(slot, 0, 0);
    &mut recs[at..at + SLOT]
}

/// The link of record `m`: the next molecule of its cell's list, or [`END`].
#[inline]
pub fn next_of(recs: &[f64], m: usize) -> i64 {
    recs[m * LINK_STRIDE + NEXT].to_bits() as i64
}

/// Sets the link of record `m`.
#[inline]
pub fn set_next(recs: &mut [f64], m: usize, next: i64) {
    recs[m * LINK_STRIDE + NEXT] = f64::from_bits(next as u64);
}

/// The molecules of cell `c`, in list order.
pub fn members<'a>(head: &'a [i64], recs: &'a [f64], c: usize) -> impl Iterator<Item = usize> + 'a {
    let mut cur = head[c];
    std::iter::from_fn(move || {
        (cur != END).then(|| {
            let m = cur as usize;
            cur = next_of(recs, m);
            m
        })
    })
}

/// The molecules of cell `c`, in list order, collected (for loops that write records).
fn member_list(head: &[i64], recs: &[f64], c: usize) -> Vec<usize> {
    members(head, recs, c).collect()
}

/// The initial records and cell lists (SPLASH-2 water-spatial `INITIA`): record `m` holds
/// molecule `m` of `var` (`MOL_STRIDE` doubles a molecule, in lattice order, the order in
/// which `INITIA` allocates a record for each lattice point), and each molecule is appended
/// to its cell's list in that order. Returns `(records, head)`.
pub fn build_records(var: &[f64], grid: &Grid, nmol: usize) -> (Vec<f64>, Vec<i64>) {
    let mut recs = vec![0.0; nmol * LINK_STRIDE];
    let mut head = vec![END; grid.cells()];
    let mut tail = vec![END; grid.cells()];
    for m in 0..nmol {
        rec_mut(&mut recs, m).copy_from_slice(mol(var, m));
        set_next(&mut recs, m, END);
        let c = grid.cell_of(mol(var, m));
        match tail[c] {
            END => head[c] = m as i64,
            t => set_next(&mut recs, t as usize, m as i64),
        }
        tail[c] = m as i64;
    }
    (recs, head)
}

/// `INTRAF` over the molecules of `cells`; returns the processor's virial term.
pub fn intraf_cells(recs: &mut [f64], head: &[i64], cells: &[usize]) -> f64 {
    for_each_in_cells(recs, head, cells, intraf);
    let mut lvir = 0.0;
    for &c in cells {
        for m in members(head, recs, c) {
            intraf_virial(rec(recs, m), &mut lvir);
        }
    }
    lvir
}

/// `INTERF` over the molecules of `cells`: adds into slot `dest` of each of them the
/// forces of all molecules in the neighbour cells; returns half the virial (each pair is
/// seen from both sides). Writes only the processor's own molecules, so takes no lock.
pub fn interf_cells(
    recs: &mut [f64],
    sys: &System,
    grid: &Grid,
    head: &[i64],
    cells: &[usize],
    dest: usize,
) -> f64 {
    let mut lvir = 0.0;
    for &c in cells {
        let mine = member_list(head, recs, c);
        for n in neighbors(c, grid) {
            let mut other = head[n];
            while other != END {
                let o = other as usize;
                let mut pairs = 0;
                for &m in &mine {
                    if m == o {
                        continue;
                    }
                    if let Some(p) = interf_pair(rec(recs, m), rec(recs, o), sys, &mut lvir) {
                        p.add_to_first(rec_slot_mut(recs, m, dest));
                    }
                    pairs += 1;
                }
                count(PAIR, pairs);
                other = next_of(recs, o);
            }
        }
    }
    lvir / 2.0
}

/// Applies `op` to every molecule of `cells`.
pub fn for_each_in_cells(
    recs: &mut [f64],
    head: &[i64],
    cells: &[usize],
    mut op: impl FnMut(&mut [f64]),
) {
    for &c in cells {
        let mut cur = head[c];
        while cur != END {
            let m = cur as usize;
            op(rec_mut(recs, m));
            count(MOLECULE, 1);
            cur = next_of(recs, m);
        }
    }
}

/// `KINETI` over the molecules of `cells`.
pub fn kineti_cells(recs: &[f64], head: &[i64], cells: &[usize]) -> [f64; NDIR] {
    let mut s = [0.0; NDIR];
    for (dir, s) in s.iter_mut().enumerate() {
        for &c in cells {
            for m in members(head, recs, c) {
                *s += kineti(rec(recs, m), dir);
            }
        }
    }
    // One unit a molecule for its three directions (the loops only read).
    let mols = cells.iter().map(|&c| members(head, recs, c).count()).sum::<usize>();
    count(MOLECULE, mols as u64);
    s
}

/// The first half of `POTENG` over the molecules of `cells`.
pub fn poteng_intra_cells(recs: &mut [f64], head: &[i64], cells: &[usize]) -> f64 {
    let mut pota = 0.0;
    for_each_in_cells(recs, head, cells, |m| poteng_intra(m, &mut pota));
    pota
}

/// The second half of `POTENG` over the molecules of `cells`: halved sums, as for the
/// virial.
pub fn poteng_inter_cells(
    recs: &[f64],
    sys: &System,
    grid: &Grid,
    head: &[i64],
    cells: &[usize],
) -> (f64, f64) {
    let (mut potr, mut ptrf) = (0.0, 0.0);
    for &c in cells {
        for n in neighbors(c, grid) {
            for other in members(head, recs, n) {
                let mut pairs = 0;
                for m in members(head, recs, c) {
                    if m != other {
                        poteng_pair(rec(recs, m), rec(recs, other), sys, &mut potr, &mut ptrf);
                        pairs += 1;
                    }
                }
                count(PAIR, pairs);
            }
        }
    }
    (potr / 2.0, ptrf / 2.0)
}

/// The cell lists and records as [`bndry_cells`] sees them: the lock of cell `c` is
/// [`Locked`] index `c`, and [`Locked::var`] is the record array (`LINK_STRIDE` words a
/// record, links included). As with [`Locked::var`], every access takes a fresh view.
pub trait CellLists: Locked {
    /// `head` (`bps^3` i64).
    fn head(&mut self) -> &mut [i64];
}

/// The records and cell lists of a single processor.
#[derive(Debug)]
pub struct LocalLists<'a> {
    pub recs: &'a mut [f64],
    pub head: &'a mut [i64],
}

impl Locked for LocalLists<'_> {
    fn acquire(&mut self, _: usize) {}
    fn release(&mut self, _: usize) {}
    fn var(&mut self) -> &mut [f64] {
        self.recs
    }
}

impl CellLists for LocalLists<'_> {
    fn head(&mut self) -> &mut [i64] {
        self.head
    }
}

/// Removes molecule `m` from the list of cell `c` (under the cell's lock), finding its
/// predecessor from the head: another processor may have pushed molecules in front of it
/// since the list was read.
fn unlink(lists: &mut impl CellLists, c: usize, m: usize) {
    let after = next_of(lists.var(), m);
    let mut p = lists.head()[c];
    if p == m as i64 {
        lists.head()[c] = after;
        return;
    }
    let recs = lists.var();
    while p != END && next_of(recs, p as usize) != m as i64 {
        p = next_of(recs, p as usize);
    }
    assert!(p != END, "molecule {m} is not in the list of cell {c}");
    set_next(recs, p as usize, after);
}

/// `BNDRY` over the molecules of `cells`: wraps each molecule into the box and moves it to
/// the head of its new cell's list when its oxygen has left its cell (SPLASH-2 moves the
/// record's link; the record stays where it was allocated). Cell `c`'s list is changed
/// only under lock `c` (the head is also read under it when the traversal starts, since
/// other processors push onto it). The rest of a traversal reads links without a lock: the
/// links of a cell's molecules are written only by that cell's owner until it moves them,
/// and a moved molecule's link is rewritten under its new cell's lock.
pub fn bndry_cells(lists: &mut impl CellLists, sys: &System, grid: &Grid, cells: &[usize]) {
    for &c in cells {
        lists.acquire(c);
        let mut cur = lists.head()[c];
        lists.release(c);
        while cur != END {
            let m = cur as usize;
            cur = next_of(lists.var(), m);
            bndry(rec_mut(lists.var(), m), sys);
            count(MOLECULE, 1);
            let to = grid.cell_of(rec(lists.var(), m));
            if to != c {
                lists.acquire(c);
                unlink(lists, c, m);
                lists.release(c);
                lists.acquire(to);
                let first = lists.head()[to];
                set_next(lists.var(), m, first);
                lists.head()[to] = m as i64;
                lists.release(to);
            }
        }
    }
}

/// Runs `steps` time steps of SPLASH-2 water-spatial `MDMAIN` on the molecules `var`
/// (`MOL_STRIDE` doubles a molecule, copied into records first, [`build_records`]); see
/// [`crate::nsq::run`] for `nprint`, `nprocs` and `schedule`.
pub fn run(
    var: &[f64],
    sys: &System,
    steps: usize,
    nprint: usize,
    nprocs: usize,
    schedule: &[usize],
) -> Energies {
    let grid = Grid::new(sys);
    assert!(nprocs >= 1 && nprocs <= grid.cells() && nprint >= 1);
    let (mut recs, mut head) = build_records(var, &grid, sys.nmol);
    let recs = &mut recs[..];
    let cells: Vec<Vec<usize>> = (0..nprocs).map(|p| own_cells(p, nprocs, &grid)).collect();
    let mut sums = StepSums::default();

    let interf = |recs: &mut [f64], head: &[i64], dest: usize, sums: &mut StepSums| {
        for &p in schedule {
            sums.vir += interf_cells(recs, sys, &grid, head, &cells[p], dest);
        }
        // InterfBar
        for &p in schedule {
            for_each_in_cells(recs, head, &cells[p], |m| scale_forces(m, dest, sys));
        }
    };

    for &p in schedule {
        sums.vir += intraf_cells(recs, &head, &cells[p]);
    }
    interf(recs, &head, ACC, &mut sums);

    let mut totals = Totals::default();
    let mut last = None;
    for i in 1..=steps {
        if i == crate::first_timed_step(steps) {
            app_common::timing::start();
        }
        sums = StepSums::default();
        for &p in schedule {
            for_each_in_cells(recs, &head, &cells[p], |m| predic(m, sys));
            sums.vir += intraf_cells(recs, &head, &cells[p]);
        }
        interf(recs, &head, FORCES, &mut sums);
        // KINETI before BNDRY, and a barrier between them (see the crate documentation).
        for &p in schedule {
            for_each_in_cells(recs, &head, &cells[p], |m| correc(m, sys));
            let k = kineti_cells(recs, &head, &cells[p]);
            for (sum, k) in sums.kin.iter_mut().zip(k) {
                *sum += k;
            }
        }
        for &p in schedule {
            let mut lists = LocalLists {
                recs: &mut *recs,
                head: &mut head,
            };
            bndry_cells(&mut lists, sys, &grid, &cells[p]);
        }
        totals.add_step(&sums);
        if i % nprint == 0 || i == steps {
            for &p in schedule {
                sums.pota += poteng_intra_cells(recs, &head, &cells[p]);
            }
            for &p in schedule {
                let (r, rf) = poteng_inter_cells(recs, sys, &grid, &head, &cells[p]);
                sums.potr += r;
                sums.potrf += rf;
            }
            last = Some(Energies::new(sys, &sums, &totals));
        }
    }
    app_common::timing::stop();
    last.expect("at least one step")
}
