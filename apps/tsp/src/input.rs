//! The TreadMarks TSP instance format: the number of cities on the first line, then the
//! distance matrix, one row per line, `weight[from][to]` in row `from`, column `to`.
//!
//! The original (`read_tsp` in the TreadMarks distribution) reads the count and then
//! `count * count` integers and ignores whatever follows; two of the shipped files carry a
//! "BEST TOUR" note after the matrix. This reader is stricter where a mistake would
//! otherwise go unnoticed: every row must be on its own line with exactly `count` numbers,
//! and a line of numbers after the last row is an error (the count is probably too small).
//! A line that is not all numbers ends the matrix section and is ignored, like the note.
//!
//! Accepted matrices may be asymmetric (the shipped `tspfile16`..`tspfile19b` are): the
//! program uses `weight[from][to]` for the edge leaving `from`. Rejected: negative
//! distances (branch and bound prunes a path once it is as long as the best tour, which
//! assumes extending a path never shortens it), a non-zero diagonal, and a zero between
//! two different cities, which TreadMarks TSP reads as "no road"; this program needs every
//! pair connected.

use app_common::AppError;
use std::path::Path;

/// Most cities a tour may have: a tour record holds its visited set as the bits of one
/// 32-bit word and its path in 32 slots, as the original's `MAX_TOUR_SIZE`.
pub const MAX_CITIES: usize = 32;

/// Largest accepted distance. A tour has at most 32 edges, so every tour length and every
/// lower bound stays below `32 * MAX_WEIGHT < i32::MAX`, the type of the shared fields.
pub const MAX_WEIGHT: i32 = 50_000_000;

/// A TSP instance: `n` cities and the row-major `n * n` distance matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub n: usize,
    /// `weights[from * n + to]`: the length of the road from `from` to `to`.
    pub weights: Vec<i32>,
}

impl Instance {
    /// An instance from a row-major matrix, with the checks of the file reader.
    pub fn from_matrix(n: usize, weights: Vec<i32>) -> Result<Instance, String> {
        check_count(n)?;
        if weights.len() != n * n {
            return Err(format!(
                "a matrix of {} numbers is not {n} x {n}",
                weights.len()
            ));
        }
        for from in 0..n {
            for to in 0..n {
                check_weight(from, to, weights[from * n + to])?;
            }
        }
        Ok(Instance { n, weights })
    }

    /// True when the road from `a` to `b` is as long as the road back, for all pairs.
    pub fn is_symmetric(&self) -> bool {
        let n = self.n;
        (0..n).all(|a| (0..n).all(|b| self.weights[a * n + b] == self.weights[b * n + a]))
    }
}

/// Reads an instance file; see the module documentation for the format.
pub fn read_instance(path: &Path) -> Result<Instance, AppError> {
    let text = app_common::read_input(path)?;
    parse_instance(&text, path)
}

/// Parses the text of an instance file; `path` only names the file in error messages.
pub fn parse_instance(text: &str, path: &Path) -> Result<Instance, AppError> {
    let malformed = |line: usize, why: String| AppError::Malformed {
        path: path.to_path_buf(),
        line,
        why,
    };
    // Non-blank lines with their 1-based line numbers.
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());

    let Some((count_line, count_text)) = lines.next() else {
        return Err(malformed(
            1,
            "the file is empty; expected the number of cities on the first line".into(),
        ));
    };
    let tokens: Vec<&str> = count_text.split_whitespace().collect();
    let n = match tokens.as_slice() {
        [one] => one.parse::<usize>().map_err(|_| {
            malformed(
                count_line,
                format!(
                    "`{one}` is not a city count; the first line must hold one positive integer"
                ),
            )
        })?,
        _ => {
            return Err(malformed(
                count_line,
                format!(
                    "the first line has {} fields; it must hold only the number of cities",
                    tokens.len()
                ),
            ))
        }
    };
    check_count(n).map_err(|why| malformed(count_line, why))?;

    let mut weights = Vec::with_capacity(n * n);
    let mut last_line = count_line;
    for row in 0..n {
        let Some((line, text)) = lines.next() else {
            return Err(malformed(
                last_line + 1,
                format!("the file ends after {row} rows of the distance matrix; the city count {n} needs {n} rows"),
            ));
        };
        last_line = line;
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != n {
            return Err(malformed(
                line,
                format!(
                    "row {row} of the distance matrix has {} numbers, expected {n} (one row per line, {n} cities)",
                    fields.len()
                ),
            ));
        }
        for (col, field) in fields.iter().enumerate() {
            let w = field.parse::<i32>().map_err(|_| {
                malformed(
                    line,
                    format!("`{field}` (row {row}, column {col}) is not an integer distance"),
                )
            })?;
            check_weight(row, col, w).map_err(|why| malformed(line, why))?;
            weights.push(w);
        }
    }

    if let Some((line, text)) = lines.next() {
        if text.split_whitespace().all(|f| f.parse::<i64>().is_ok()) {
            return Err(malformed(
                line,
                format!("numbers follow the {n} rows of the distance matrix; is the city count {n} on line {count_line} too small?"),
            ));
        }
    }
    Ok(Instance { n, weights })
}

fn check_count(n: usize) -> Result<(), String> {
    if (2..=MAX_CITIES).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "{n} cities is out of range: this program solves 2 to {MAX_CITIES} cities \
             (a tour record keeps its visited cities in one 32-bit word, as TreadMarks TSP)"
        ))
    }
}

fn check_weight(from: usize, to: usize, w: i32) -> Result<(), String> {
    if from == to && w != 0 {
        Err(format!(
            "the distance from city {from} to itself is {w}; the diagonal must be 0"
        ))
    } else if from != to && w == 0 {
        Err(format!(
            "the distance from city {from} to city {to} is 0, which TreadMarks TSP reads as \
             \"no road\"; this program needs a positive distance between every two cities"
        ))
    } else if w < 0 {
        Err(format!("the distance from city {from} to city {to} is negative ({w}); distances must be positive"))
    } else if w > MAX_WEIGHT {
        Err(format!(
            "the distance from city {from} to city {to} is {w}, above the limit {MAX_WEIGHT} \
             that keeps tour lengths within 32 bits"
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Instance, AppError> {
        parse_instance(text, Path::new("t.tsp"))
    }

    /// The line and message of a `Malformed` error.
    fn malformed(text: &str) -> (usize, String) {
        match parse(text) {
            Err(AppError::Malformed { line, why, .. }) => (line, why),
            other => panic!("expected a malformed-input error, got {other:?}"),
        }
    }

    #[test]
    fn reads_an_asymmetric_matrix_and_ignores_a_trailing_note() {
        let inst =
            parse("3\n0 1 2\n3 0 4\n5 6 0\n\n\nBEST TOUR:\n0 - 1 - 2 - 0\tLength: 11\n").unwrap();
        assert_eq!(inst.n, 3);
        assert_eq!(inst.weights, vec![0, 1, 2, 3, 0, 4, 5, 6, 0]);
        assert!(!inst.is_symmetric());
    }

    #[test]
    fn leading_and_row_padding_whitespace_is_allowed() {
        let inst = parse("\n  2 \n  0  7 \n 7 0\n").unwrap();
        assert_eq!(inst.weights, vec![0, 7, 7, 0]);
        assert!(inst.is_symmetric());
    }

    #[test]
    fn every_shipped_file_is_read() {
        // (file, cities, symmetric): counted and checked by hand from the files.
        let expected = [
            ("tspfile8", 8, true),
            ("tspfile9", 9, true),
            ("tspfile16", 16, false),
            ("tspfile17", 17, false),
            ("tspfile18", 18, false),
            ("tspfile19b", 19, false),
            ("tspfilegr17", 17, true),
            ("fri26.matrix", 26, true),
        ];
        for (file, n, symmetric) in expected {
            let inst = read_instance(&app_common::data_dir().join("tsp").join(file)).unwrap();
            assert_eq!((inst.n, inst.is_symmetric()), (n, symmetric), "{file}");
        }
        // Spot values: tspfile17 row 0 starts `0 39 47`, row 1 starts `17 0 33`.
        let inst = read_instance(&app_common::data_dir().join("tsp/tspfile17")).unwrap();
        assert_eq!(&inst.weights[0..3], &[0, 39, 47]);
        assert_eq!(&inst.weights[17..20], &[17, 0, 33]);
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let e = read_instance(Path::new("/nonexistent/tspfile")).unwrap_err();
        assert!(matches!(e, AppError::Io { .. }));
        assert!(e.to_string().contains("/nonexistent/tspfile"));
    }

    #[test]
    fn malformed_counts_are_rejected() {
        assert_eq!(malformed("").0, 1);
        assert!(malformed("").1.contains("empty"));
        assert!(malformed("x\n").1.contains("`x` is not a city count"));
        assert!(malformed("3 3\n").1.contains("only the number of cities"));
        assert!(malformed("-3\n").1.contains("`-3` is not a city count"));
        assert!(malformed("1\n0\n").1.contains("out of range"));
        assert!(malformed("33\n").1.contains("out of range"));
    }

    #[test]
    fn rows_must_match_the_count() {
        // Too few rows: the error points past the last row read.
        assert_eq!(
            malformed("3\n0 1 2\n1 0 3\n"),
            (
                4,
                "the file ends after 2 rows of the distance matrix; the city count 3 needs 3 rows"
                    .into()
            )
        );
        // A short row and a long row.
        let (line, why) = malformed("3\n0 1 2\n1 0\n2 3 0\n");
        assert_eq!(line, 3);
        assert!(
            why.contains("row 1 of the distance matrix has 2 numbers, expected 3"),
            "{why}"
        );
        assert_eq!(malformed("2\n0 1 5\n1 0\n").0, 2);
        // More rows than the count says.
        let (line, why) = malformed("2\n0 1\n1 0\n1 1\n");
        assert_eq!(line, 4);
        assert!(why.contains("too small"), "{why}");
    }

    #[test]
    fn non_numeric_negative_and_zero_distances_are_rejected() {
        let (line, why) = malformed("2\n0 a\n1 0\n");
        assert_eq!(line, 2);
        assert!(
            why.contains("`a` (row 0, column 1) is not an integer"),
            "{why}"
        );
        assert!(malformed("2\n0 1.5\n1 0\n").1.contains("`1.5`"));
        assert!(malformed("2\n0 -4\n1 0\n").1.contains("negative (-4)"));
        assert!(malformed("2\n0 1\n0 0\n").1.contains("\"no road\""));
        assert!(malformed("2\n1 1\n1 0\n")
            .1
            .contains("the diagonal must be 0"));
        assert!(malformed("2\n0 50000001\n1 0\n")
            .1
            .contains("above the limit"));
        assert!(malformed("2\n0 99999999999\n1 0\n")
            .1
            .contains("is not an integer"));
    }

    #[test]
    fn from_matrix_applies_the_same_checks() {
        assert!(Instance::from_matrix(2, vec![0, 1, 1, 0]).is_ok());
        assert!(Instance::from_matrix(2, vec![0, 1, 1])
            .unwrap_err()
            .contains("not 2 x 2"));
        assert!(Instance::from_matrix(2, vec![0, -1, 1, 0])
            .unwrap_err()
            .contains("negative"));
    }
}
