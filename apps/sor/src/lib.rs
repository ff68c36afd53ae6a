//! Red-black successive over-relaxation, after the TreadMarks SOR program (Amza et al.,
//! "TreadMarks: Shared Memory Computing on Networks of Workstations", IEEE Computer 1996;
//! used in the Cashmere paper, section 3.2 and Table 3, at 3072 x 4096).
//!
//! # The computation
//!
//! The grid has `rows` x `cols` interior points surrounded by a one-point edge, so
//! `(rows + 2) x (cols + 2)` points in all. The edge holds 1.0 and the interior starts at
//! 0.0. Each iteration replaces every interior point by the average of its four neighbours
//! (up, down, left, right, summed in that order in single precision, then scaled by 0.25),
//! first all red points, then all black points: a Gauss-Seidel sweep in red-black order.
//! The values converge to 1.0 everywhere, the solution of Laplace's equation with these
//! edges.
//!
//! # Shared data layout
//!
//! As in the original, the checkerboard is split into two arrays so that a sweep writes
//! one array and reads only the other (this avoids false sharing between the colours). Point
//! `(i, c)` of the full grid is red when `i + c` is odd, black otherwise; each colour is a
//! row-major `f32` array of `(rows + 2) x (cols / 2 + 1)` entries ([`Grid`]). In row `i`,
//! the colour whose points sit on the even columns stores column `2j` at index `j`; the
//! other colour stores column `2j + 1` at index `j`. Rows 0 and `rows + 1`, and in every
//! row the one entry of each colour that lies on column 0 or `cols + 1`, are the edge and
//! are never written. At the paper size the two arrays together are 50 MB, as in Table 3.
//!
//! # Work distribution and synchronization of the parallel version
//!
//! Processor `id` of `nprocs` owns the contiguous band of interior rows
//! [`rows_of`]`(id, nprocs, rows)` in both arrays (TreadMarks' row bands). It first writes
//! its band with [`init_rows`] (the first processor also edge row 0, the last processor
//! edge row `rows + 1`: [`init_band`]), so that first touch makes it the home of its band,
//! then a **barrier**, and the timed region begins. This is the TreadMarks program's
//! start (`sor.c`, revision 10.3 of 1997, read in the public code index): its processor
//! 0 only allocates the rows (`Tmk_malloc`, `Tmk_distribute`) before a first barrier,
//! every processor then writes the edge entries of its own rows (the interior is the
//! allocator's zeros; [`init_rows`] writes them too, touching the same pages), a second
//! barrier, then `gettimeofday` and the sweeps. No node touches shared data before the
//! processors' own initialization, so that is the first touch after initialization of
//! the paper's rule (section 2.3.1), and the program marks no later end of initialization
//! (`Barrier::end_initialization`), which would unmap every page and make each node
//! fault on its whole band again in the first timed sweep. Per iteration:
//!
//! 1. [`sweep`] its band with `Color::Red` (writes its red rows, reads black rows of its
//!    band and the one black row above and below it);
//! 2. **barrier** (the red values of the neighbouring bands are now visible);
//! 3. [`sweep`] its band with `Color::Black`;
//! 4. **barrier**.
//!
//! After the last barrier each processor writes [`row_sum`] of the rows it initialized
//! ([`init_band`]) into a shared `f64` array of `rows + 2` entries, a **barrier** follows,
//! and processor 0 adds them up with [`sum_rows`]. Within a sweep no point reads a
//! point of its own colour, so the parallel sweep performs exactly the sequential
//! arithmetic, and the row sums are added in the same order: the checksum is exact.
//!
//! # Counted work
//!
//! One kind of unit ([`WORK`], `dsm::work`): a **point**, one update of an interior
//! point (four loads, three additions and a multiplication), counted by [`sweep`] after
//! each row, in the sequential and the parallel version alike. A run counts `rows x cols x
//! iterations` points; the parallel version's processors together count exactly the
//! sequential version's.

use app_common::{App, AppError, AppResult, Check, Mismatch, ParamSpec, Params};
use std::ops::Range;

mod parallel;
pub use parallel::run_parallel;

/// The shape of the two colour arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Interior rows (the rows of the full grid are `0..rows + 2`).
    pub rows: usize,
    /// Interior columns; even.
    pub cols: usize,
}

/// One of the two colours of the checkerboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Points `(i, c)` with `i + c` odd.
    Red,
    /// Points `(i, c)` with `i + c` even.
    Black,
}

impl Grid {
    /// A grid of `rows` x `cols` interior points; `cols` must be even and both positive.
    pub fn new(rows: usize, cols: usize) -> Result<Grid, AppError> {
        if rows == 0 || cols == 0 || cols % 2 == 1 {
            return Err(AppError::BadParam {
                name: "cols".into(),
                value: format!("{rows} x {cols}"),
                why: "the grid needs at least one row and a positive even number of columns \
                      (each colour holds half of every row)"
                    .into(),
            });
        }
        Ok(Grid { rows, cols })
    }

    /// Entries per row of one colour array: `cols / 2 + 1`.
    pub fn width(&self) -> usize {
        self.cols / 2 + 1
    }

    /// Entries of one colour array: `(rows + 2) * width()`.
    pub fn entries(&self) -> usize {
        (self.rows + 2) * self.width()
    }

    /// True if `color` occupies the even columns (0, 2, ...) of row `i`.
    fn on_even_columns(color: Color, i: usize) -> bool {
        (color == Color::Red) == (i % 2 == 1)
    }

    /// The colour and the index in its array of full-grid point `(i, c)`.
    pub fn locate(&self, i: usize, c: usize) -> (Color, usize) {
        let color = if (i + c) % 2 == 1 {
            Color::Red
        } else {
            Color::Black
        };
        (color, i * self.width() + c / 2)
    }

    /// The interior entries of row `i` in the array of `color`.
    fn interior(&self, color: Color, i: usize) -> Range<usize> {
        if Self::on_even_columns(color, i) {
            1..self.width()
        } else {
            0..self.width() - 1
        }
    }
}

/// The initial arrays: 1.0 on the edge, 0.0 inside. Returns `(red, black)`.
pub fn initial(g: Grid) -> (Vec<f32>, Vec<f32>) {
    let mut red = vec![0.0f32; g.entries()];
    let mut black = vec![0.0f32; g.entries()];
    init_rows(g, &mut red, &mut black, 0..g.rows + 2);
    (red, black)
}

/// Writes the initial values of rows `rows` into both arrays (so that in the parallel
/// version each processor first-touches its own band; processor 0 also does the edge rows).
pub fn init_rows(g: Grid, red: &mut [f32], black: &mut [f32], rows: Range<usize>) {
    let w = g.width();
    for i in rows {
        for (color, a) in [(Color::Red, &mut *red), (Color::Black, &mut *black)] {
            let row = &mut a[i * w..(i + 1) * w];
            if i == 0 || i == g.rows + 1 {
                row.fill(1.0);
            } else {
                row.fill(0.0);
                // The one entry of this colour outside the interior range is on the edge.
                let edge = if Grid::on_even_columns(color, i) {
                    0
                } else {
                    w - 1
                };
                row[edge] = 1.0;
            }
        }
    }
}

/// The interior rows (indices into the full grid, within `1..=rows`) that processor `id`
/// of `nprocs` updates: contiguous bands, the first `rows % nprocs` bands one row longer.
pub fn rows_of(id: usize, nprocs: usize, rows: usize) -> Range<usize> {
    assert!(id < nprocs, "processor {id} out of {nprocs}");
    let base = rows / nprocs;
    let extra = rows % nprocs;
    let start = id * base + id.min(extra);
    let len = base + usize::from(id < extra);
    1 + start..1 + start + len
}

/// The full-grid rows processor `id` of `nprocs` initializes and sums: its band of
/// [`rows_of`], with edge row 0 for the first processor and edge row `rows + 1` for the
/// last, so that each edge row's home is the node that reads it.
pub fn init_band(id: usize, nprocs: usize, rows: usize) -> Range<usize> {
    let band = rows_of(id, nprocs, rows);
    let start = if id == 0 { 0 } else { band.start };
    let end = if id == nprocs - 1 { rows + 2 } else { band.end };
    start..end
}

/// Updates the points of `color` in the interior rows `band`: `target` is that colour's
/// array, `other` the other colour's. Each point becomes `(up + down + left + right) * 0.25`
/// in `f32`, the original's arithmetic (it divides the float sum by 4.0, which is exact).
pub fn sweep(g: Grid, color: Color, target: &mut [f32], other: &[f32], band: Range<usize>) {
    assert!(
        band.start >= 1 && band.end <= g.rows + 1,
        "band {band:?} leaves the interior"
    );
    assert!(
        target.len() == g.entries() && other.len() == g.entries(),
        "arrays do not match the grid"
    );
    let w = g.width();
    for i in band {
        let up = &other[(i - 1) * w..i * w];
        let mid = &other[i * w..(i + 1) * w];
        let down = &other[(i + 1) * w..(i + 2) * w];
        let row = &mut target[i * w..(i + 1) * w];
        // On even columns the horizontal neighbours of entry j are the other colour's
        // entries j - 1 and j; on odd columns they are j and j + 1.
        let js = g.interior(color, i);
        let left = js.start - usize::from(Grid::on_even_columns(color, i));
        let n = js.len();
        let (lefts, rights) = (&mid[left..left + n], &mid[left + 1..left + 1 + n]);
        let points = row[js.clone()]
            .iter_mut()
            .zip(&up[js.clone()])
            .zip(&down[js]);
        for (((x, u), d), (l, r)) in points.zip(lefts.iter().zip(rights)) {
            *x = (u + d + l + r) * 0.25;
        }
        dsm::work::count(POINT, n as u64);
    }
}

/// The kind of unit [`sweep`] counts: one point updated.
pub const POINT: usize = 0;

/// SOR's counted work (crate doc, "Counted work").
pub const WORK: &[app_common::WorkKind] = &[app_common::WorkKind {
    name: "point",
    what: "one interior point updated: (up + down + left + right) x 0.25 in f32",
    host_ns: 0.0,
    // 3072 x 4096 x 100.
    paper_units: 1_258_291_200,
}];

/// The sum of the points of full-grid row `i` (both colours), in `f64`, red entries
/// first then black, each in index order.
pub fn row_sum(g: Grid, red: &[f32], black: &[f32], i: usize) -> f64 {
    let w = g.width();
    let r = &red[i * w..(i + 1) * w];
    let b = &black[i * w..(i + 1) * w];
    r.iter().chain(b).map(|&x| f64::from(x)).sum()
}

/// The checksum from per-row sums, added in row order.
pub fn sum_rows(row_sums: &[f64]) -> f64 {
    row_sums.iter().sum()
}

/// The checksum of the whole grid: [`row_sum`] of every row, added in row order.
pub fn checksum(g: Grid, red: &[f32], black: &[f32]) -> f64 {
    let sums: Vec<f64> = (0..g.rows + 2).map(|i| row_sum(g, red, black, i)).collect();
    sum_rows(&sums)
}

/// The sequential program: `iterations` red then black sweeps over all interior rows.
pub fn solve(g: Grid, iterations: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut red, mut black) = initial(g);
    let all = 1..g.rows + 1;
    app_common::timing::start(); // the sweeps only, as the parallel run times them
    for _ in 0..iterations {
        sweep(g, Color::Red, &mut red, &black, all.clone());
        sweep(g, Color::Black, &mut black, &red, all.clone());
    }
    app_common::timing::stop();
    (red, black)
}

/// The grid and iteration count of a run.
pub fn grid_and_iterations(params: &Params) -> Result<(Grid, usize), AppError> {
    let rows = params.get_in::<usize>("rows", 1, 1 << 16)?;
    let cols = params.get_in::<usize>("cols", 2, 1 << 16)?;
    let iterations = params.get_in::<usize>("iterations", 0, 1 << 20)?;
    Ok((Grid::new(rows, cols)?, iterations))
}

/// The result summary.
pub fn summary(checksum: f64) -> AppResult {
    AppResult::new().f64("checksum", checksum)
}

/// The SOR application.
#[derive(Debug)]
pub struct Sor;

/// The SOR application, for the harness's table of applications.
pub static SOR: Sor = Sor;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "rows",
        help: "interior rows of the grid",
        defaults: ["128", "2048", "3072"],
    },
    ParamSpec {
        name: "cols",
        help: "interior columns of the grid (even; each colour holds half)",
        defaults: ["256", "2048", "4096"],
    },
    // The paper does not state the iteration count; 100 is the TreadMarks program's default.
    ParamSpec {
        name: "iterations",
        help: "red-black iterations",
        defaults: ["10", "300", "100"],
    },
];

impl App for Sor {
    fn name(&self) -> &'static str {
        "sor"
    }

    fn description(&self) -> &'static str {
        "red-black successive over-relaxation on a 2-D grid (TreadMarks SOR)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn data_bytes(&self, params: &Params) -> Result<u64, AppError> {
        let (g, _) = grid_and_iterations(params)?;
        // Both colours together cover the grid with its boundary rows and columns.
        Ok((g.rows as u64 + 2) * (g.cols as u64 + 2) * 8)
    }

    fn sequential(&self, params: &Params) -> Result<AppResult, AppError> {
        let (g, iterations) = grid_and_iterations(params)?;
        let (red, black) = solve(g, iterations);
        Ok(summary(checksum(g, &red, &black)))
    }

    fn parallel(
        &self,
        params: &Params,
        config: &dsm::Config,
    ) -> Result<(AppResult, dsm::Report<()>), AppError> {
        let (g, iterations) = grid_and_iterations(params)?;
        run_parallel(g, iterations, config)
    }

    /// Exact: the parallel sweeps do the sequential arithmetic point by point and the
    /// checksum adds the same row sums in the same order.
    fn check(&self, sequential: &AppResult, parallel: &AppResult) -> Result<(), Mismatch> {
        Check::new(sequential, parallel).exact("checksum")?.done()
    }

    fn work(&self) -> &'static [app_common::WorkKind] {
        WORK
    }
}

#[cfg(test)]
mod tests;
