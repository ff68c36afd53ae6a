//! The SPLASH-2 input deck and the `random.in` velocity file, read the way the originals
//! read them.
//!
//! The deck holds ten whitespace-separated fields, read in `main()` of SPLASH-2 `water.C`
//! with `scanf("%lf%ld%ld%ld%ld%ld%ld%ld%ld%lf")`: TSTEP (seconds), NMOL, NSTEP, NORDER,
//! NSAVE, NRST, NPRINT, NFMC, NumProcs, CUTOFF (angstrom, 0 meaning "half the box").
//! The shipped `n512-p1.in` is `1.5e-16 512 3 6 -1 3000 3 0 1 6.212752`.
//!
//! `random.in` is a list of numbers. SPLASH-2 `INITIA` reads the first one and discards it
//! (it is read into `SUX`, which is overwritten before use), then three numbers (x, y, z)
//! per atom, atoms H1, O, H2 of molecule 0, then of molecule 1, and so on, with
//! `fscanf("%lf")`. At end of file `fscanf` returns `EOF` and leaves its target unchanged;
//! the targets are the velocity slots of the freshly `G_MALLOC`ed molecule array, which
//! hold 0.0 (an allocation of that size comes from zero-filled pages). So every velocity
//! component past the end of the file is 0.0 before the centring and scaling. The shipped
//! file holds 1 + 5298 numbers: velocities for 1766 atoms, i.e. 588 whole molecules and two
//! atoms of the 589th, enough for 512 molecules but not for 9261.

use app_common::AppError;
use std::path::Path;

/// The ten fields of the deck.
#[derive(Clone, Debug, PartialEq)]
pub struct Deck {
    /// Time step in seconds.
    pub tstep_s: f64,
    pub nmol: i64,
    pub nstep: i64,
    pub norder: i64,
    pub nsave: i64,
    pub nrst: i64,
    /// Potential energy is computed every `nprint` steps.
    pub nprint: i64,
    pub nfmc: i64,
    pub nprocs: i64,
    /// Cutoff radius in angstrom; 0 means half the box length.
    pub cutoff: f64,
}

fn read_text(path: &Path) -> Result<String, AppError> {
    app_common::read_input(path)
}

/// The whitespace-separated tokens of `text` with their 1-based line numbers.
fn tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| line.split_whitespace().map(move |t| (i + 1, t)))
}

/// Parses a deck from its text; `path` only names it in errors.
pub fn parse_deck(text: &str, path: &Path) -> Result<Deck, AppError> {
    const NAMES: [&str; 10] = [
        "TSTEP", "NMOL", "NSTEP", "NORDER", "NSAVE", "NRST", "NPRINT", "NFMC", "NumProcs", "CUTOFF",
    ];
    let malformed = |line: usize, why: String| AppError::Malformed {
        path: path.to_path_buf(),
        line,
        why,
    };
    let toks: Vec<(usize, &str)> = tokens(text).collect();
    if toks.len() < NAMES.len() {
        let line = toks.last().map_or(1, |t| t.0);
        return Err(malformed(
            line,
            format!(
                "the deck has {} fields, SPLASH-2 water reads 10: {}",
                toks.len(),
                NAMES.join(" ")
            ),
        ));
    }
    if let Some(&(line, extra)) = toks.get(NAMES.len()) {
        return Err(malformed(
            line,
            format!("unexpected field `{extra}` after the 10 fields of the deck"),
        ));
    }
    let float = |i: usize| -> Result<f64, AppError> {
        let (line, t) = toks[i];
        t.parse::<f64>()
            .map_err(|_| malformed(line, format!("{} must be a number, found `{t}`", NAMES[i])))
    };
    let int = |i: usize| -> Result<i64, AppError> {
        let (line, t) = toks[i];
        t.parse::<i64>().map_err(|_| {
            malformed(
                line,
                format!("{} must be an integer, found `{t}`", NAMES[i]),
            )
        })
    };
    let deck = Deck {
        tstep_s: float(0)?,
        nmol: int(1)?,
        nstep: int(2)?,
        norder: int(3)?,
        nsave: int(4)?,
        nrst: int(5)?,
        nprint: int(6)?,
        nfmc: int(7)?,
        nprocs: int(8)?,
        cutoff: float(9)?,
    };
    if !(deck.tstep_s > 0.0 && deck.tstep_s.is_finite()) {
        return Err(malformed(
            toks[0].0,
            format!("TSTEP must be positive, found {}", deck.tstep_s),
        ));
    }
    if !(deck.cutoff >= 0.0 && deck.cutoff.is_finite()) {
        return Err(malformed(
            toks[9].0,
            format!("CUTOFF must be 0 or positive, found {}", deck.cutoff),
        ));
    }
    Ok(deck)
}

/// Reads a deck file.
pub fn read_deck(path: &Path) -> Result<Deck, AppError> {
    parse_deck(&read_text(path)?, path)
}

/// Parses the numbers of a `random.in` text, in file order (the discarded first one
/// included).
pub fn parse_randoms(text: &str, path: &Path) -> Result<Vec<f64>, AppError> {
    tokens(text)
        .map(|(line, t)| {
            t.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| AppError::Malformed {
                    path: path.to_path_buf(),
                    line,
                    why: format!("expected a finite number, found `{t}`"),
                })
        })
        .collect()
}

/// Reads a `random.in` file.
pub fn read_randoms(path: &Path) -> Result<Vec<f64>, AppError> {
    let numbers = parse_randoms(&read_text(path)?, path)?;
    if numbers.is_empty() {
        return Err(AppError::Malformed {
            path: path.to_path_buf(),
            line: 1,
            why: "the file holds no numbers".into(),
        });
    }
    Ok(numbers)
}

/// The initial velocity components as SPLASH-2 `INITIA` obtains them: the numbers after
/// the first, three per atom, three atoms per molecule, and 0.0 for every component past
/// the end of the file (see the module documentation). The result has `9 * nmol` entries
/// ordered molecule, atom, direction.
pub fn raw_velocities(randoms: &[f64], nmol: usize) -> Vec<f64> {
    let mut v = vec![0.0; 9 * nmol];
    let available = randoms.len().saturating_sub(1).min(v.len());
    v[..available].copy_from_slice(&randoms[1..1 + available]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("deck.in")
    }

    #[test]
    fn shipped_deck_reads_as_documented() {
        let d = read_deck(&app_common::data_dir().join("water/n512-p1.in")).unwrap();
        assert_eq!(
            d,
            Deck {
                tstep_s: 1.5e-16,
                nmol: 512,
                nstep: 3,
                norder: 6,
                nsave: -1,
                nrst: 3000,
                nprint: 3,
                nfmc: 0,
                nprocs: 1,
                cutoff: 6.212752
            }
        );
    }

    #[test]
    fn malformed_decks_are_rejected_with_the_line() {
        let short = parse_deck("1e-15 64 3 6\n0 0 3 0\n", p())
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("line 2") && short.contains("has 8 fields"),
            "{short}"
        );
        let bad = parse_deck("1e-15 64 3 6\n0 0 x 0\n1 0\n", p())
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("line 2") && bad.contains("NPRINT must be an integer"),
            "{bad}"
        );
        let extra = parse_deck("1e-15 64 3 6 0 0 3 0 1 0 9\n", p())
            .unwrap_err()
            .to_string();
        assert!(extra.contains("unexpected field `9`"), "{extra}");
        let neg = parse_deck("-1e-15 64 3 6 0 0 3 0 1 0\n", p())
            .unwrap_err()
            .to_string();
        assert!(neg.contains("TSTEP must be positive"), "{neg}");
        let io = read_deck(Path::new("/nonexistent/deck.in"))
            .unwrap_err()
            .to_string();
        assert!(
            io.contains("cannot read input file /nonexistent/deck.in"),
            "{io}"
        );
    }

    #[test]
    fn randoms_reject_non_numbers_and_empty_files() {
        let e = parse_randoms("0.1\n 0.2 abc 0.3\n", p())
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("`abc`"), "{e}");
        assert_eq!(
            parse_randoms(" 0.5e+00\n-0.25E1 ", p()).unwrap(),
            vec![0.5, -2.5]
        );
    }

    // The literals are the file's text, digit for digit.
    #[allow(clippy::excessive_precision)]
    #[test]
    fn shipped_random_file_has_1766_atoms_of_velocities() {
        // 1767 lines: one number, then 1766 lines of three (counted with `wc -l`).
        let r = read_randoms(&app_common::data_dir().join("water/random.in")).unwrap();
        assert_eq!(r.len(), 1 + 3 * 1766);
        assert_eq!(r[0], 0.141882295971771490);
        assert_eq!(
            r[1..4],
            [
                0.280382784491876420,
                -0.881537501773088090,
                0.818489629751621650
            ]
        );
    }

    #[test]
    fn velocities_past_the_end_of_the_file_are_zero() {
        // The first number is skipped; 7 numbers give two atoms and one component.
        let r = [9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        let v = raw_velocities(&r, 2);
        assert_eq!(
            v,
            [
                1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0
            ]
        );
        assert_eq!(raw_velocities(&r, 0), Vec::<f64>::new());
    }
}
