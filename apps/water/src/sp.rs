//! Water-spatial: the cell-decomposed program (SPLASH-2 `water-spatial`).
//!
//! The box is divided into `bps^3` cells ([`Grid`]) of side at least the cutoff
//! (`bps = floor(BOXL / CUTOFF)`). Each cell holds a linked list of the molecules whose
//! oxygen lies in it: SPLASH-2 links records by pointers; here the list is two `i64`
//! arrays, `head[cell]` and `next[mol]`, with `-1` ending a list, and the molecules stay in
//! the flat molecule array at fixed indices. Processors own rectangular blocks of
//! contiguous cells ([`boxes_of`]). A molecule interacts with every molecule of the 27
//! cells around its own (fewer when `bps` is 1 or 2); each processor computes the forces
//! on its own molecules only, so every pair is computed twice and the virial and potential
//! sums are halved. After each step's correction, molecules whose oxygen has left their
//! cell move to the head of the new cell's list ([`bndry_boxes`]).

use crate::layout::*;
use crate::physics::*;
use crate::Locked;
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
pub fn members<'a>(head: &'a [i64], next: &'a [i64], c: usize) -> impl Iterator<Item = usize> + 'a {
    let mut cur = head[c];
    std::iter::from_fn(move || {
        (cur != END).then(|| {
            let m = cur as usize;
            cur = next[m];
            m
        })
    })
}

/// The initial cell lists (SPLASH-2 `INITIA`): molecules appended to their cell's list in
/// index order. Returns `(head, next)`.
pub fn build_lists(var: &[f64], grid: &Grid, nmol: usize) -> (Vec<i64>, Vec<i64>) {
    let mut head = vec![END; grid.cells()];
    let mut tail = vec![END; grid.cells()];
    let mut next = vec![END; nmol];
    for m in 0..nmol {
        let c = grid.cell_of(mol(var, m));
        match tail[c] {
            END => head[c] = m as i64,
            t => next[t as usize] = m as i64,
        }
        tail[c] = m as i64;
    }
    (head, next)
}

/// `INTRAF` over the molecules of `cells`; returns the processor's virial term.
pub fn intraf_cells(var: &mut [f64], head: &[i64], next: &[i64], cells: &[usize]) -> f64 {
    for &c in cells {
        for m in members(head, next, c) {
            intraf(mol_mut(var, m));
        }
    }
    let mut lvir = 0.0;
    for &c in cells {
        for m in members(head, next, c) {
            intraf_virial(mol(var, m), &mut lvir);
        }
    }
    lvir
}

/// `INTERF` over the molecules of `cells`: adds into slot `dest` of each of them the
/// forces of all molecules in the neighbour cells; returns half the virial (each pair is
/// seen from both sides). Writes only the processor's own molecules, so takes no lock.
pub fn interf_cells(
    var: &mut [f64],
    sys: &System,
    grid: &Grid,
    head: &[i64],
    next: &[i64],
    cells: &[usize],
    dest: usize,
) -> f64 {
    let mut lvir = 0.0;
    for &c in cells {
        for n in neighbors(c, grid) {
            for other in members(head, next, n) {
                for m in members(head, next, c) {
                    if m == other {
                        continue;
                    }
                    if let Some(p) = interf_pair(mol(var, m), mol(var, other), sys, &mut lvir) {
                        p.add_to_first(slot_mut(var, m, dest));
                    }
                }
            }
        }
    }
    lvir / 2.0
}

/// Applies `op` to every molecule of `cells`.
pub fn for_each_in_cells(
    var: &mut [f64],
    head: &[i64],
    next: &[i64],
    cells: &[usize],
    mut op: impl FnMut(&mut [f64]),
) {
    for &c in cells {
        for m in members(head, next, c) {
            op(mol_mut(var, m));
        }
    }
}

/// `KINETI` over the molecules of `cells`.
pub fn kineti_cells(var: &[f64], head: &[i64], next: &[i64], cells: &[usize]) -> [f64; NDIR] {
    let mut s = [0.0; NDIR];
    for (dir, s) in s.iter_mut().enumerate() {
        for &c in cells {
            for m in members(head, next, c) {
                *s += kineti(mol(var, m), dir);
            }
        }
    }
    s
}

/// The first half of `POTENG` over the molecules of `cells`.
pub fn poteng_intra_cells(var: &mut [f64], head: &[i64], next: &[i64], cells: &[usize]) -> f64 {
    let mut pota = 0.0;
    for_each_in_cells(var, head, next, cells, |m| poteng_intra(m, &mut pota));
    pota
}

/// The second half of `POTENG` over the molecules of `cells`: halved sums, as for the
/// virial.
pub fn poteng_inter_cells(
    var: &[f64],
    sys: &System,
    grid: &Grid,
    head: &[i64],
    next: &[i64],
    cells: &[usize],
) -> (f64, f64) {
    let (mut potr, mut ptrf) = (0.0, 0.0);
    for &c in cells {
        for n in neighbors(c, grid) {
            for other in members(head, next, n) {
                for m in members(head, next, c) {
                    if m != other {
                        poteng_pair(mol(var, m), mol(var, other), sys, &mut potr, &mut ptrf);
                    }
                }
            }
        }
    }
    (potr / 2.0, ptrf / 2.0)
}

/// The cell lists and molecule array as [`bndry_cells`] sees them: the lock of cell `c` is
/// [`Locked`] index `c`. As with [`Locked::var`], every access takes a fresh view.
pub trait CellLists: Locked {
    /// `head` (`bps^3` i64).
    fn head(&mut self) -> &mut [i64];
    /// `next` (`nmol` i64).
    fn next(&mut self) -> &mut [i64];
}

/// The cell lists of a single processor.
#[derive(Debug)]
pub struct LocalLists<'a> {
    pub var: &'a mut [f64],
    pub head: &'a mut [i64],
    pub next: &'a mut [i64],
}

impl Locked for LocalLists<'_> {
    fn acquire(&mut self, _: usize) {}
    fn release(&mut self, _: usize) {}
    fn var(&mut self) -> &mut [f64] {
        self.var
    }
}

impl CellLists for LocalLists<'_> {
    fn head(&mut self) -> &mut [i64] {
        self.head
    }
    fn next(&mut self) -> &mut [i64] {
        self.next
    }
}

/// Removes molecule `m` from the list of cell `c` (under the cell's lock), finding its
/// predecessor from the head: another processor may have pushed molecules in front of it
/// since the list was read.
fn unlink(lists: &mut impl CellLists, c: usize, m: usize) {
    let after = lists.next()[m];
    let mut p = lists.head()[c];
    if p == m as i64 {
        lists.head()[c] = after;
        return;
    }
    let next = lists.next();
    while p != END && next[p as usize] != m as i64 {
        p = next[p as usize];
    }
    assert!(p != END, "molecule {m} is not in the list of cell {c}");
    next[p as usize] = after;
}

/// `BNDRY` over the molecules of `cells`: wraps each molecule into the box and moves it to
/// the head of its new cell's list when its oxygen has left its cell. Cell `c`'s list is
/// changed only under lock `c` (the head is also read under it when the traversal starts,
/// since other processors push onto it). The rest of a traversal reads `next` without a
/// lock: the links of a cell's molecules are written only by that cell's owner until it
/// moves them, and a moved molecule's link is rewritten under its new cell's lock.
pub fn bndry_cells(lists: &mut impl CellLists, sys: &System, grid: &Grid, cells: &[usize]) {
    for &c in cells {
        lists.acquire(c);
        let mut cur = lists.head()[c];
        lists.release(c);
        while cur != END {
            let m = cur as usize;
            cur = lists.next()[m];
            bndry(mol_mut(lists.var(), m), sys);
            let to = grid.cell_of(mol(lists.var(), m));
            if to != c {
                lists.acquire(c);
                unlink(lists, c, m);
                lists.release(c);
                lists.acquire(to);
                let first = lists.head()[to];
                lists.next()[m] = first;
                lists.head()[to] = m as i64;
                lists.release(to);
            }
        }
    }
}

/// Runs `steps` time steps of SPLASH-2 water-spatial `MDMAIN`; see [`crate::nsq::run`]
/// for `nprint`, `nprocs` and `schedule`.
pub fn run(
    var: &mut [f64],
    sys: &System,
    steps: usize,
    nprint: usize,
    nprocs: usize,
    schedule: &[usize],
) -> Energies {
    let grid = Grid::new(sys);
    assert!(nprocs >= 1 && nprocs <= grid.cells() && nprint >= 1);
    let (mut head, mut next) = build_lists(var, &grid, sys.nmol);
    let cells: Vec<Vec<usize>> = (0..nprocs).map(|p| own_cells(p, nprocs, &grid)).collect();
    let mut sums = StepSums::default();

    let interf = |var: &mut [f64], head: &[i64], next: &[i64], dest: usize, sums: &mut StepSums| {
        for &p in schedule {
            sums.vir += interf_cells(var, sys, &grid, head, next, &cells[p], dest);
        }
        // InterfBar
        for &p in schedule {
            for_each_in_cells(var, head, next, &cells[p], |m| scale_forces(m, dest, sys));
        }
    };

    for &p in schedule {
        sums.vir += intraf_cells(var, &head, &next, &cells[p]);
    }
    interf(var, &head, &next, ACC, &mut sums);

    let mut totals = Totals::default();
    let mut last = None;
    for i in 1..=steps {
        sums = StepSums::default();
        for &p in schedule {
            for_each_in_cells(var, &head, &next, &cells[p], |m| predic(m, sys));
            sums.vir += intraf_cells(var, &head, &next, &cells[p]);
        }
        interf(var, &head, &next, FORCES, &mut sums);
        // KINETI before BNDRY, and a barrier between them (see the crate documentation).
        for &p in schedule {
            for_each_in_cells(var, &head, &next, &cells[p], |m| correc(m, sys));
            let k = kineti_cells(var, &head, &next, &cells[p]);
            for (sum, k) in sums.kin.iter_mut().zip(k) {
                *sum += k;
            }
        }
        for &p in schedule {
            let mut lists = LocalLists {
                var: &mut *var,
                head: &mut head,
                next: &mut next,
            };
            bndry_cells(&mut lists, sys, &grid, &cells[p]);
        }
        totals.add_step(&sums);
        if i % nprint == 0 || i == steps {
            for &p in schedule {
                sums.pota += poteng_intra_cells(var, &head, &next, &cells[p]);
            }
            for &p in schedule {
                let (r, rf) = poteng_inter_cells(var, sys, &grid, &head, &next, &cells[p]);
                sums.potr += r;
                sums.potrf += rf;
            }
            last = Some(Energies::new(sys, &sums, &totals));
        }
    }
    last.expect("at least one step")
}
