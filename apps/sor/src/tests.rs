use super::*;
use app_common::Size;

/// Red-black Gauss-Seidel written directly on the full `(rows + 2) x (cols + 2)` grid,
/// independent of the two-array layout: the reference the split arrays must reproduce.
fn full_grid_reference(rows: usize, cols: usize, iterations: usize) -> Vec<Vec<f32>> {
    let mut a = vec![vec![0.0f32; cols + 2]; rows + 2];
    for (i, row) in a.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            if i == 0 || i == rows + 1 || c == 0 || c == cols + 1 {
                *x = 1.0;
            }
        }
    }
    for _ in 0..iterations {
        for parity in [1, 0] {
            for i in 1..=rows {
                for c in 1..=cols {
                    if (i + c) % 2 == parity {
                        a[i][c] = (a[i - 1][c] + a[i + 1][c] + a[i][c - 1] + a[i][c + 1]) * 0.25;
                    }
                }
            }
        }
    }
    a
}

fn params(rows: usize, cols: usize, iterations: usize) -> Params {
    let (r, c, n) = (rows.to_string(), cols.to_string(), iterations.to_string());
    Params::from_pairs(
        Size::Test,
        &[("rows", &r), ("cols", &c), ("iterations", &n)],
    )
}

#[test]
fn one_iteration_on_the_smallest_grid_matches_a_hand_computation() {
    // Full grid 3 x 4: ten edge points of 1.0, interior (1,1) black and (1,2) red.
    // Red (1,2) = (1 + 1 + 0 + 1) / 4 = 0.75; then black (1,1) = (1 + 1 + 1 + 0.75) / 4.
    let g = Grid::new(1, 2).unwrap();
    let (red, black) = solve(g, 1);
    let (c, k) = g.locate(1, 2);
    assert_eq!((c, red[k]), (Color::Red, 0.75));
    let (c, k) = g.locate(1, 1);
    assert_eq!((c, black[k]), (Color::Black, 0.9375));
    assert_eq!(checksum(g, &red, &black), 10.0 + 0.75 + 0.9375);
}

#[test]
fn initial_grid_has_edges_one_and_interior_zero() {
    let g = Grid::new(3, 6).unwrap();
    let (red, black) = initial(g);
    // Every entry of both arrays is one point of the full grid, and every full-grid point
    // is in exactly one entry; so checksum = number of edge points = 2 * 8 + 2 * 3.
    assert_eq!(checksum(g, &red, &black), 22.0);
    for i in 0..5 {
        for c in 0..8 {
            let (color, k) = g.locate(i, c);
            let x = if color == Color::Red {
                red[k]
            } else {
                black[k]
            };
            let edge = i == 0 || i == 4 || c == 0 || c == 7;
            assert_eq!(x, if edge { 1.0 } else { 0.0 }, "point ({i}, {c})");
        }
    }
}

#[test]
fn split_arrays_reproduce_the_full_grid_bit_for_bit() {
    for (rows, cols, iterations) in [(1, 2, 3), (5, 4, 7), (6, 10, 4), (9, 8, 20)] {
        let g = Grid::new(rows, cols).unwrap();
        let (red, black) = solve(g, iterations);
        let full = full_grid_reference(rows, cols, iterations);
        for (i, row) in full.iter().enumerate() {
            for (c, &want) in row.iter().enumerate() {
                let (color, k) = g.locate(i, c);
                let got = if color == Color::Red {
                    red[k]
                } else {
                    black[k]
                };
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{rows}x{cols}, point ({i}, {c})"
                );
            }
        }
    }
}

#[test]
fn converges_to_the_edge_value() {
    // With every edge at 1.0 the solution of Laplace's equation is 1.0 everywhere, so the
    // checksum tends to the number of points, (4 + 2) * (6 + 2) = 48.
    let g = Grid::new(4, 6).unwrap();
    let (red, black) = solve(g, 300);
    assert!((checksum(g, &red, &black) - 48.0).abs() < 1e-5);
}

#[test]
fn bands_partition_the_interior_rows() {
    for rows in [1, 7, 64, 100] {
        for nprocs in 1..=9 {
            let mut next = 1;
            for id in 0..nprocs {
                let band = rows_of(id, nprocs, rows);
                assert_eq!(band.start, next);
                assert!(band.len() == rows / nprocs || band.len() == rows / nprocs + 1);
                next = band.end;
            }
            assert_eq!(next, rows + 1);
        }
    }
}

#[test]
fn init_bands_partition_all_rows_and_hold_the_edges_at_the_ends() {
    for rows in [1, 7, 64] {
        for nprocs in 1..=9 {
            let mut next = 0;
            for id in 0..nprocs {
                let mine = init_band(id, nprocs, rows);
                assert_eq!(
                    mine.start, next,
                    "{rows} rows, {nprocs} processors, id {id}"
                );
                next = mine.end;
            }
            assert_eq!(next, rows + 2);
        }
    }
    assert_eq!(init_band(0, 3, 9), 0..4);
    assert_eq!(init_band(1, 3, 9), 4..7);
    assert_eq!(init_band(2, 3, 9), 7..11);
}

/// Runs the parallel schedule with the processors' bands one after another between the
/// barriers, which is a valid execution since a sweep reads only the other colour.
fn banded(g: Grid, iterations: usize, nprocs: usize) -> f64 {
    let (mut red, mut black) = (vec![0.0; g.entries()], vec![0.0; g.entries()]);
    for id in (0..nprocs).rev() {
        init_rows(g, &mut red, &mut black, init_band(id, nprocs, g.rows));
    }
    for _ in 0..iterations {
        for id in (0..nprocs).rev() {
            sweep(g, Color::Red, &mut red, &black, rows_of(id, nprocs, g.rows));
        }
        for id in 0..nprocs {
            sweep(
                g,
                Color::Black,
                &mut black,
                &red,
                rows_of(id, nprocs, g.rows),
            );
        }
    }
    let mut sums = vec![0.0; g.rows + 2];
    for id in 0..nprocs {
        for i in init_band(id, nprocs, g.rows) {
            sums[i] = row_sum(g, &red, &black, i);
        }
    }
    sum_rows(&sums)
}

#[test]
fn banded_schedule_gives_the_sequential_checksum_exactly() {
    let g = Grid::new(37, 24).unwrap();
    let seq = SOR.sequential(&params(37, 24, 15)).unwrap();
    for nprocs in [1, 2, 3, 4, 8, 37] {
        let par = summary(banded(g, 15, nprocs));
        assert_eq!(SOR.check(&seq, &par), Ok(()), "{nprocs} processors");
    }
}

#[test]
fn checker_rejects_a_different_checksum() {
    let seq = SOR.sequential(&params(8, 8, 5)).unwrap();
    let other = SOR.sequential(&params(8, 8, 6)).unwrap();
    assert!(SOR.check(&seq, &other).is_err());
}

#[test]
fn odd_column_counts_are_rejected() {
    let e = SOR.sequential(&params(8, 7, 1)).unwrap_err();
    assert!(e.to_string().contains("even number of columns"), "{e}");
}

#[test]
fn every_size_has_every_parameter_and_the_paper_size_is_table_3() {
    for size in Size::ALL {
        let p = Params::resolve("sor", SOR.params(), size, &[]).unwrap();
        grid_and_iterations(&p).unwrap();
    }
    let p = Params::resolve("sor", SOR.params(), Size::Paper, &[]).unwrap();
    let (g, _) = grid_and_iterations(&p).unwrap();
    // Table 3: 3072 x 4096, 50 Mbytes of shared data (two f32 arrays).
    assert_eq!((g.rows, g.cols), (3072, 4096));
    assert_eq!(2 * g.entries() * 4 / 1_000_000, 50);
}
