//! Readers for the LINKAGE input files: the DATAFILE (locus descriptions, recombination
//! values, ILINK's iteration flags) and the PEDFILE (pedigree records after MAKEPED).
//!
//! The format is the one of the LINKAGE user's guide (version 5.2, sections 2.6 and 2.7,
//! <http://linkage.rockefeller.edu/soft/linkage/>) and of its program-specific part for
//! ILINK (section 3.2). Like the original Pascal readers, every line is read for the numbers
//! it must hold and the rest of the line (the `<< COMMENT` text) is ignored. This reader is
//! stricter than the originals in one way: the numbers of one record must be on its line
//! (the originals' `read` would wander onto the next line), so that an error can name the
//! line at fault.
//!
//! Supported: at least two loci (ILINK needs an interval to estimate), autosomal data
//! without mutation or linkage disequilibrium, loci of type
//! 1 (affection status, with liability classes) and 3 (numbered alleles), no sex
//! difference in recombination and no interference, program code 3 (ILINK), estimation
//! of recombination fractions only (iterated locus 0). Everything else is rejected with a
//! message saying what is not supported.

use app_common::AppError;
use std::path::Path;

/// LINKAGE's program code for ILINK (first line of the DATAFILE, fourth number).
pub const ILINK_PROGRAM_CODE: i64 = 3;

/// What is known about one locus.
#[derive(Clone, Debug, PartialEq)]
pub enum LocusKind {
    /// Affection status (locus type 1). `penetrances[class]` holds, for each unordered
    /// genotype in LINKAGE order (11, 12, ..., 1n, 22, 23, ..., nn), the probability that
    /// an individual of that liability class and genotype is affected.
    Affection { penetrances: Vec<Vec<f64>> },
    /// Codominant numbered alleles (locus type 3).
    Numbered,
}

/// One locus of the DATAFILE.
#[derive(Clone, Debug, PartialEq)]
pub struct Locus {
    pub kind: LocusKind,
    /// Gene frequencies, one per allele; positive and summing to one.
    pub freqs: Vec<f64>,
}

impl Locus {
    pub fn nalleles(&self) -> usize {
        self.freqs.len()
    }
}

/// The contents of a DATAFILE.
#[derive(Clone, Debug, PartialEq)]
pub struct DataFile {
    /// The loci in input order (the order of the phenotypes in the PEDFILE).
    pub loci: Vec<Locus>,
    /// The chromosome order: `order[position]` is the input index of the locus at that
    /// position (the third line lists locus numbers from one end of the map to the other).
    pub order: Vec<usize>,
    /// Recombination fractions between loci adjacent in chromosome order.
    pub thetas: Vec<f64>,
    /// ILINK's flags: which recombination fractions are estimated (the rest stay fixed).
    pub iterate: Vec<bool>,
}

/// A phenotype at one locus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phenotype {
    /// Two allele numbers, smaller first; `(0, 0)` is unknown.
    Alleles(u32, u32),
    /// Affection status (0 unknown, 2 affected, any other value unaffected, as in LINKAGE)
    /// and liability class, counted from 1.
    Affection { status: i64, class: u32 },
}

/// One record of the PEDFILE.
#[derive(Clone, Debug, PartialEq)]
pub struct Person {
    pub ped: i64,
    pub id: i64,
    pub father: i64,
    pub mother: i64,
    pub first_offspring: i64,
    pub next_paternal_sib: i64,
    pub next_maternal_sib: i64,
    /// 1 male, 2 female.
    pub sex: u8,
    /// Column 9: 1 marks the proband; values above 1 mark loop breakers.
    pub proband: i64,
    /// One phenotype per locus, in input order.
    pub phenotypes: Vec<Phenotype>,
    /// The line of the PEDFILE holding this record (for messages).
    pub line: usize,
}

/// The contents of a PEDFILE: records in file order, grouped into pedigrees.
#[derive(Clone, Debug, PartialEq)]
pub struct PedFile {
    pub persons: Vec<Person>,
    /// Index ranges into `persons`, one per pedigree, in file order.
    pub pedigrees: Vec<std::ops::Range<usize>>,
}

/// Numbered lines of a file with the blank ones left out.
struct Lines<'a> {
    path: &'a Path,
    lines: Vec<(usize, &'a str)>,
    next: usize,
}

impl<'a> Lines<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i + 1, l))
            .collect();
        Lines {
            path,
            lines,
            next: 0,
        }
    }

    /// The next non-blank line; `what` says what was expected, for the message at the end
    /// of the file.
    fn take(&mut self, what: &str) -> Result<Record<'a>, AppError> {
        match self.lines.get(self.next) {
            Some(&(number, text)) => {
                self.next += 1;
                Ok(Record {
                    path: self.path,
                    number,
                    fields: text.split_whitespace().collect(),
                    used: 0,
                })
            }
            None => {
                let last = self.lines.last().map_or(1, |&(n, _)| n + 1);
                Err(malformed(
                    self.path,
                    last,
                    format!("the file ends where {what} was expected"),
                ))
            }
        }
    }
}

/// The whitespace-separated fields of one line, read left to right.
struct Record<'a> {
    path: &'a Path,
    number: usize,
    fields: Vec<&'a str>,
    used: usize,
}

impl<'a> Record<'a> {
    fn err(&self, why: String) -> AppError {
        malformed(self.path, self.number, why)
    }

    fn field(&mut self, what: &str) -> Result<&'a str, AppError> {
        let f = self.fields.get(self.used).copied().ok_or_else(|| {
            self.err(format!(
                "expected {what} as field {} but the line has only {} fields",
                self.used + 1,
                self.used
            ))
        })?;
        self.used += 1;
        Ok(f)
    }

    fn int(&mut self, what: &str) -> Result<i64, AppError> {
        let f = self.field(what)?;
        f.parse::<i64>()
            .map_err(|_| self.err(format!("expected {what} (an integer) but found `{f}`")))
    }

    fn real(&mut self, what: &str) -> Result<f64, AppError> {
        let f = self.field(what)?;
        match f.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(self.err(format!("expected {what} (a number) but found `{f}`"))),
        }
    }

    fn int_in(&mut self, what: &str, lo: i64, hi: i64) -> Result<i64, AppError> {
        let v = self.int(what)?;
        if v < lo || v > hi {
            return Err(self.err(format!("{what} is {v}; it must be between {lo} and {hi}")));
        }
        Ok(v)
    }
}

fn malformed(path: &Path, line: usize, why: String) -> AppError {
    AppError::Malformed {
        path: path.to_path_buf(),
        line,
        why,
    }
}

fn read_text(path: &Path) -> Result<String, AppError> {
    app_common::read_input(path)
}

/// Reads and parses a DATAFILE.
pub fn read_datafile(path: &Path) -> Result<DataFile, AppError> {
    parse_datafile(path, &read_text(path)?)
}

/// Reads and parses a PEDFILE whose loci are described by `data`.
pub fn read_pedfile(path: &Path, data: &DataFile) -> Result<PedFile, AppError> {
    parse_pedfile(path, &read_text(path)?, data)
}

/// Parses the text of a DATAFILE; `path` names it in messages.
pub fn parse_datafile(path: &Path, text: &str) -> Result<DataFile, AppError> {
    let mut lines = Lines::new(path, text);

    let mut r = lines.take("the line with the number of loci")?;
    let nloci = r.int_in("the number of loci", 2, 16)? as usize;
    let risk_locus = r.int_in("the risk locus", 0, nloci as i64)? as usize;
    if r.int("the sex-linked flag")? != 0 {
        return Err(r.err("sex-linked data are not supported (the third number must be 0)".into()));
    }
    let program = r.int("the program code")?;
    if program != ILINK_PROGRAM_CODE {
        return Err(r.err(format!(
            "program code {program} is not ILINK's ({ILINK_PROGRAM_CODE}); this reader takes ILINK datafiles"
        )));
    }

    let mut r = lines.take("the line with the mutation and disequilibrium settings")?;
    if r.int("the mutation locus")? != 0 {
        return Err(
            r.err("mutation models are not supported (the mutation locus must be 0)".into())
        );
    }
    r.real("the male mutation rate")?;
    r.real("the female mutation rate")?;
    if r.int("the linkage disequilibrium flag")? != 0 {
        return Err(r.err("linkage disequilibrium (haplotype frequencies) is not supported".into()));
    }

    let mut r = lines.take("the chromosome order of the loci")?;
    let mut order = Vec::with_capacity(nloci);
    for position in 1..=nloci {
        let locus = r.int_in(
            &format!("the locus at chromosome position {position}"),
            1,
            nloci as i64,
        )? as usize;
        if let Some(p) = order.iter().position(|&l| l == locus - 1) {
            return Err(r.err(format!(
                "locus {locus} is repeated in positions {} and {position} of the order",
                p + 1
            )));
        }
        order.push(locus - 1);
    }

    let mut loci = Vec::with_capacity(nloci);
    for number in 1..=nloci {
        loci.push(parse_locus(&mut lines, number)?);
        if number == risk_locus {
            let n = loci[number - 1].nalleles() as i64;
            lines
                .take("the risk allele")?
                .int_in("the risk allele", 1, n)?;
        }
    }

    let mut r = lines.take("the sex difference and interference line")?;
    if r.int("the sex difference flag")? != 0 {
        return Err(r.err(
            "sex-specific recombination is not supported (the sex difference flag must be 0)"
                .into(),
        ));
    }
    if r.int("the interference flag")? != 0 {
        return Err(r.err("interference is not supported (the interference flag must be 0)".into()));
    }

    let mut r = lines.take("the recombination values")?;
    let mut thetas = Vec::with_capacity(nloci - 1);
    for i in 1..nloci {
        let t = r.real(&format!("recombination value {i}"))?;
        if !(0.0..=0.5).contains(&t) {
            return Err(r.err(format!(
                "recombination value {i} is {t}; it must be between 0 and 0.5"
            )));
        }
        thetas.push(t);
    }

    let mut r = lines.take("ILINK's iterated locus")?;
    if r.int("the iterated locus")? != 0 {
        return Err(r.err(
            "estimating gene frequencies or penetrances is not supported (the iterated locus must be 0)".into(),
        ));
    }
    let mut r = lines.take("ILINK's iterate flags")?;
    let mut iterate = Vec::with_capacity(nloci - 1);
    for i in 1..nloci {
        iterate.push(r.int_in(&format!("iterate flag {i}"), 0, 1)? == 1);
    }
    if r.fields.len() > r.used && r.fields[r.used].parse::<i64>().is_ok() {
        return Err(r.err(format!(
            "found more than {} iterate flags; only recombination fractions can be estimated",
            nloci - 1
        )));
    }

    Ok(DataFile {
        loci,
        order,
        thetas,
        iterate,
    })
}

fn parse_locus(lines: &mut Lines<'_>, number: usize) -> Result<Locus, AppError> {
    let mut r = lines.take(&format!("the description of locus {number}"))?;
    let kind = r.int(&format!("the type of locus {number}"))?;
    let nalleles = r.int_in(&format!("the number of alleles of locus {number}"), 1, 64)? as usize;
    match kind {
        1 | 3 => {}
        0 => {
            return Err(r.err(format!(
                "locus {number} is quantitative (type 0), which is not supported"
            )))
        }
        2 => {
            return Err(r.err(format!(
                "locus {number} uses binary factors (type 2), which are not supported"
            )))
        }
        t => {
            return Err(r.err(format!(
                "locus {number} has type {t}; LINKAGE locus types are 0 to 3"
            )))
        }
    }

    let mut r = lines.take(&format!("the gene frequencies of locus {number}"))?;
    let mut freqs = Vec::with_capacity(nalleles);
    for a in 1..=nalleles {
        let f = r.real(&format!("the frequency of allele {a}"))?;
        if !(f > 0.0 && f <= 1.0) {
            return Err(r.err(format!(
                "the frequency of allele {a} is {f}; it must be above 0 and at most 1"
            )));
        }
        freqs.push(f);
    }
    let sum: f64 = freqs.iter().sum();
    if (sum - 1.0).abs() > 1e-4 {
        return Err(r.err(format!(
            "the gene frequencies of locus {number} sum to {sum}, not 1"
        )));
    }

    if kind == 3 {
        return Ok(Locus {
            kind: LocusKind::Numbered,
            freqs,
        });
    }
    let mut r = lines.take(&format!(
        "the number of liability classes of locus {number}"
    ))?;
    let nclass = r.int_in("the number of liability classes", 1, 100)? as usize;
    let ngeno = nalleles * (nalleles + 1) / 2;
    let mut penetrances = Vec::with_capacity(nclass);
    for class in 1..=nclass {
        let mut r = lines.take(&format!("the penetrances of liability class {class}"))?;
        let mut pens = Vec::with_capacity(ngeno);
        for g in 1..=ngeno {
            let p = r.real(&format!("penetrance {g} of liability class {class}"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(r.err(format!(
                    "penetrance {g} of liability class {class} is {p}; it must be in [0, 1]"
                )));
            }
            pens.push(p);
        }
        penetrances.push(pens);
    }
    Ok(Locus {
        kind: LocusKind::Affection { penetrances },
        freqs,
    })
}

/// Parses the text of a PEDFILE (MAKEPED output: pedigree, individual, father, mother,
/// first offspring, next paternal sib, next maternal sib, sex, proband, then the
/// phenotypes in locus input order). Checks that every pedigree is contiguous, ids are
/// unique, parents exist with the right sex, and the offspring/sib pointers agree with the
/// parent columns.
pub fn parse_pedfile(path: &Path, text: &str, data: &DataFile) -> Result<PedFile, AppError> {
    let mut lines = Lines::new(path, text);
    let mut persons: Vec<Person> = Vec::new();
    while lines.next < lines.lines.len() {
        let mut r = lines.take("a pedigree record")?;
        let ped = r.int("the pedigree number")?;
        let id = r.int("the individual id")?;
        if id <= 0 {
            return Err(r.err(format!("the individual id is {id}; ids must be positive")));
        }
        let father = r.int_in("the father id", 0, i64::MAX)?;
        let mother = r.int_in("the mother id", 0, i64::MAX)?;
        let first_offspring = r.int_in("the first offspring id", 0, i64::MAX)?;
        let next_paternal_sib = r.int_in("the next paternal sib id", 0, i64::MAX)?;
        let next_maternal_sib = r.int_in("the next maternal sib id", 0, i64::MAX)?;
        let sex = r.int("the sex")?;
        if sex != 1 && sex != 2 {
            return Err(r.err(format!(
                "the sex code is {sex}; it must be 1 (male) or 2 (female)"
            )));
        }
        let proband = r.int_in("the proband field", 0, i64::MAX)?;
        if proband > 1 {
            return Err(r.err(format!(
                "proband field {proband} marks a loop breaker; pedigrees with loops are not supported"
            )));
        }
        let mut phenotypes = Vec::with_capacity(data.loci.len());
        for (l, locus) in data.loci.iter().enumerate() {
            phenotypes.push(parse_phenotype(&mut r, l + 1, locus)?);
        }
        persons.push(Person {
            ped,
            id,
            father,
            mother,
            first_offspring,
            next_paternal_sib,
            next_maternal_sib,
            sex: sex as u8,
            proband,
            phenotypes,
            line: r.number,
        });
    }
    if persons.is_empty() {
        return Err(malformed(
            path,
            1,
            "the pedigree file holds no records".into(),
        ));
    }

    let mut pedigrees = Vec::new();
    let mut start = 0;
    for i in 1..=persons.len() {
        if i == persons.len() || persons[i].ped != persons[start].ped {
            if let Some(earlier) = pedigrees.iter().find(|r: &&std::ops::Range<usize>| {
                i < persons.len() && persons[r.start].ped == persons[i].ped
            }) {
                let p = &persons[i];
                return Err(malformed(path, p.line, format!(
                    "pedigree {} continues here after other pedigrees (it starts on line {}); the records of a pedigree must be together",
                    p.ped, persons[earlier.start].line
                )));
            }
            pedigrees.push(start..i);
            start = i;
        }
    }
    for range in &pedigrees {
        check_pedigree(path, &persons[range.clone()])?;
    }
    Ok(PedFile { persons, pedigrees })
}

fn parse_phenotype(
    r: &mut Record<'_>,
    number: usize,
    locus: &Locus,
) -> Result<Phenotype, AppError> {
    match &locus.kind {
        LocusKind::Numbered => {
            let n = locus.nalleles() as i64;
            let a = r.int_in(&format!("the first allele at locus {number}"), 0, n)? as u32;
            let b = r.int_in(&format!("the second allele at locus {number}"), 0, n)? as u32;
            if (a == 0) != (b == 0) {
                return Err(r.err(format!(
                    "locus {number} has one allele 0 and one known ({a} {b}); write 0 0 for an unknown genotype"
                )));
            }
            Ok(Phenotype::Alleles(a.min(b), a.max(b)))
        }
        LocusKind::Affection { penetrances } => {
            let status = r.int(&format!("the affection status at locus {number}"))?;
            let class = if penetrances.len() == 1 {
                1
            } else {
                r.int_in(
                    &format!("the liability class at locus {number}"),
                    1,
                    penetrances.len() as i64,
                )? as u32
            };
            Ok(Phenotype::Affection { status, class })
        }
    }
}

fn check_pedigree(path: &Path, people: &[Person]) -> Result<(), AppError> {
    let find = |id: i64| people.iter().find(|p| p.id == id);
    for (i, p) in people.iter().enumerate() {
        if let Some(q) = people[..i].iter().find(|q| q.id == p.id) {
            return Err(malformed(
                path,
                p.line,
                format!(
                    "individual {} of pedigree {} is listed twice (also on line {})",
                    p.id, p.ped, q.line
                ),
            ));
        }
    }
    for p in people {
        let bad = |why: String| Err(malformed(path, p.line, why));
        if (p.father == 0) != (p.mother == 0) {
            return bad(format!(
                "individual {} has one parent given and the other 0; give both or neither",
                p.id
            ));
        }
        for (what, id, sex) in [("father", p.father, 1u8), ("mother", p.mother, 2u8)] {
            if id == 0 {
                continue;
            }
            match find(id) {
                None => {
                    return bad(format!(
                        "{what} {id} of individual {} is not in pedigree {}",
                        p.id, p.ped
                    ))
                }
                Some(q) if q.sex != sex => {
                    return bad(format!(
                        "{what} {id} of individual {} has sex code {}",
                        p.id, q.sex
                    ))
                }
                Some(_) if id == p.id => {
                    return bad(format!("individual {} is its own {what}", p.id))
                }
                Some(_) => {}
            }
        }
        for (what, id) in [
            ("first offspring", p.first_offspring),
            ("next paternal sib", p.next_paternal_sib),
            ("next maternal sib", p.next_maternal_sib),
        ] {
            if id != 0 && find(id).is_none() {
                return bad(format!(
                    "{what} {id} of individual {} is not in pedigree {}",
                    p.id, p.ped
                ));
            }
        }
    }
    // The offspring chains (first offspring, then next paternal or maternal sib) must list
    // exactly the individuals whose parent column names this parent.
    for p in people {
        let mut chain = Vec::new();
        let mut next = p.first_offspring;
        while next != 0 {
            if chain.contains(&next) || chain.len() > people.len() {
                return Err(malformed(
                    path,
                    p.line,
                    format!("the offspring chain of individual {} loops", p.id),
                ));
            }
            chain.push(next);
            let c = find(next).expect("pointers were checked above");
            next = if p.sex == 1 {
                c.next_paternal_sib
            } else {
                c.next_maternal_sib
            };
        }
        let parent_of = |c: &Person| {
            if p.sex == 1 {
                c.father == p.id
            } else {
                c.mother == p.id
            }
        };
        let mut named: Vec<i64> = people
            .iter()
            .filter(|c| parent_of(c))
            .map(|c| c.id)
            .collect();
        chain.sort_unstable();
        named.sort_unstable();
        if chain != named {
            return Err(malformed(path, p.line, format!(
                "the first offspring / next sib pointers of individual {} list children {:?}, but the parent columns name children {:?}",
                p.id, chain, named
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: &str = "\
2 0 0 3 << NO. OF LOCI, RISK LOCUS, SEXLINKED (IF 1) PROGRAM
0 0.0 0.0 0 << MUT LOCUS, MUT MALE, MUT FEM, HAP FREQ (IF 1)
1 2
1 2 << AFFECTION, NO. OF ALLELES
0.99 0.01 << GENE FREQUENCIES
2 << NO. OF LIABILITY CLASSES
0.0 0.9 0.9
0.0 0.5 0.5
3 3 << ALLELE NUMBERS, NO. OF ALLELES
0.5 0.25 0.25
0 0 << SEX DIFFERENCE, INTERFERENCE
0.1 << RECOMBINATION VALUES
0 << LOCUS WHOSE FREQS ARE ITERATED
1 << ITERATE THETA FLAGS
";

    const PED: &str = "\
1 1 0 0 3 0 0 1 1 2 1 1 2 text after the phenotypes
1 2 0 0 3 0 0 2 0 1 2 0 0
1 3 1 2 0 0 0 2 0 2 1 1 3
";

    fn p() -> &'static Path {
        Path::new("x.dat")
    }

    fn data_err(text: &str) -> (usize, String) {
        match parse_datafile(p(), text).unwrap_err() {
            AppError::Malformed { path, line, why } => {
                assert_eq!(path, p());
                (line, why)
            }
            e => panic!("expected a Malformed error, got {e}"),
        }
    }

    fn ped_err(text: &str) -> (usize, String) {
        let data = parse_datafile(p(), DATA).unwrap();
        match parse_pedfile(Path::new("x.ped"), text, &data).unwrap_err() {
            AppError::Malformed { path, line, why } => {
                assert_eq!(path, Path::new("x.ped"));
                (line, why)
            }
            e => panic!("expected a Malformed error, got {e}"),
        }
    }

    #[test]
    fn reads_a_well_formed_datafile() {
        let d = parse_datafile(p(), DATA).unwrap();
        assert_eq!(d.loci.len(), 2);
        assert_eq!(d.order, vec![0, 1]);
        assert_eq!(
            d.loci[0].kind,
            LocusKind::Affection {
                penetrances: vec![vec![0.0, 0.9, 0.9], vec![0.0, 0.5, 0.5]]
            }
        );
        assert_eq!(d.loci[1].freqs, vec![0.5, 0.25, 0.25]);
        assert_eq!(d.thetas, vec![0.1]);
        assert_eq!(d.iterate, vec![true]);
    }

    #[test]
    fn reads_the_shipped_example() {
        let dir = app_common::data_dir().join("ilink");
        let d = read_datafile(&dir.join("ilink_example_datafile.dat")).unwrap();
        assert_eq!(d.order, vec![0, 2, 1]);
        assert_eq!(d.thetas, vec![0.1197, 0.125]);
        assert_eq!(d.iterate, vec![true, true]);
        let peds = read_pedfile(&dir.join("ilink_example_pedfile.dat"), &d).unwrap();
        assert_eq!(peds.persons.len(), 31);
        assert_eq!(peds.pedigrees, vec![0..17, 17..31]);
        // Individual 1 of pedigree 1: marker 1 3, affected in class 3, marker 1 2.
        assert_eq!(
            peds.persons[0].phenotypes,
            vec![
                Phenotype::Alleles(1, 3),
                Phenotype::Affection {
                    status: 2,
                    class: 3
                },
                Phenotype::Alleles(1, 2)
            ]
        );
    }

    #[test]
    fn malformed_datafiles_name_the_line() {
        let cases: &[(&str, &str, usize, &str)] = &[
            ("2 0 0 3", "2 0 0 5", 1, "program code 5"),
            ("2 0 0 3", "2 0 1 3", 1, "sex-linked"),
            ("2 0 0 3", "1 0 0 3", 1, "between 2 and 16"),
            ("1 2 << AFF", "0 2 << AFF", 4, "quantitative"),
            ("1 2\n1 2 <<", "1 1\n1 2 <<", 3, "repeated"),
            ("0.99 0.01", "0.99 0.02", 5, "sum to"),
            ("0.99 0.01", "0.99 x", 5, "found `x`"),
            ("0.0 0.5 0.5", "0.0 0.5", 8, "penetrance 3"),
            ("0.0 0.9 0.9", "0.0 1.9 0.9", 7, "must be in [0, 1]"),
            ("3 3 <<", "2 3 <<", 9, "binary factors"),
            ("0.1 <<", "0.7 <<", 12, "between 0 and 0.5"),
            ("1 << ITERATE", "2 << ITERATE", 14, "iterate flag 1"),
            ("0 << LOCUS", "2 << LOCUS", 13, "iterated locus"),
        ];
        for &(from, to, line, needle) in cases {
            let text = DATA.replacen(from, to, 1);
            assert_ne!(text, DATA, "case {to} did not change the input");
            let (l, why) = data_err(&text);
            assert_eq!(l, line, "case {to}: {why}");
            assert!(why.contains(needle), "case {to}: `{why}` lacks `{needle}`");
        }
        let truncated: String = DATA.lines().take(10).map(|l| format!("{l}\n")).collect();
        let (l, why) = data_err(&truncated);
        assert_eq!(l, 11);
        assert!(why.contains("the file ends"), "{why}");
    }

    #[test]
    fn reads_a_well_formed_pedfile() {
        let data = parse_datafile(p(), DATA).unwrap();
        let peds = parse_pedfile(Path::new("x.ped"), PED, &data).unwrap();
        assert_eq!(
            peds.persons[1].phenotypes,
            vec![
                Phenotype::Affection {
                    status: 1,
                    class: 2
                },
                Phenotype::Alleles(0, 0)
            ]
        );
        assert_eq!(peds.persons[2].phenotypes[1], Phenotype::Alleles(1, 3));
    }

    #[test]
    fn malformed_pedfiles_name_the_line() {
        let cases: &[(&str, &str, usize, &str)] = &[
            (
                "1 2 0 0 3 0 0 2 0 1 2 0 0",
                "1 2 0 0 3 0 0 3 0 1 2 0 0",
                2,
                "sex code is 3",
            ),
            (
                "1 2 0 0 3 0 0 2 0 1 2 0 0",
                "1 2 0 0 3 0 0 2 0 1 3 0 0",
                2,
                "liability class",
            ),
            (
                "1 2 0 0 3 0 0 2 0 1 2 0 0",
                "1 2 0 0 3 0 0 2 0 1 2 0 4",
                2,
                "second allele",
            ),
            (
                "1 2 0 0 3 0 0 2 0 1 2 0 0",
                "1 2 0 0 3 0 0 2 0 1 2 1 0",
                2,
                "one allele 0",
            ),
            (
                "1 2 0 0 3 0 0 2 0 1 2 0 0",
                "1 2 0 0 3 0 0 2 0 1 2 0",
                2,
                "only 12 fields",
            ),
            (
                "1 3 1 2 0 0 0 2 0 2 1 1 3",
                "1 3 1 5 0 0 0 2 0 2 1 1 3",
                3,
                "mother 5",
            ),
            (
                "1 3 1 2 0 0 0 2 0 2 1 1 3",
                "1 3 2 1 0 0 0 2 0 2 1 1 3",
                3,
                "sex code",
            ),
            (
                "1 3 1 2 0 0 0 2 0 2 1 1 3",
                "1 1 1 2 0 0 0 2 0 2 1 1 3",
                3,
                "listed twice",
            ),
            (
                "1 3 1 2 0 0 0 2 0 2 1 1 3",
                "1 3 1 0 0 0 0 2 0 2 1 1 3",
                3,
                "one parent",
            ),
            ("1 2 0 0 3 0 0 2 0", "1 2 0 0 0 0 0 2 0", 2, "pointers"),
            ("1 1 0 0 3 0 0 1 1", "1 1 0 0 3 0 0 1 2", 1, "loop breaker"),
        ];
        for &(from, to, line, needle) in cases {
            let text = PED.replacen(from, to, 1);
            assert_ne!(text, PED, "case {to} did not change the input");
            let (l, why) = ped_err(&text);
            assert_eq!(l, line, "case {to}: {why}");
            assert!(why.contains(needle), "case {to}: `{why}` lacks `{needle}`");
        }
        let split = format!("{PED}2 1 0 0 0 0 0 1 0 1 1 0 0\n1 9 0 0 0 0 0 1 0 1 1 0 0\n");
        let (l, why) = ped_err(&split);
        assert_eq!(l, 5);
        assert!(why.contains("continues here"), "{why}");
    }

    #[test]
    fn missing_files_are_io_errors_naming_the_file() {
        let e = read_datafile(Path::new("/nonexistent/ilink.dat")).unwrap_err();
        assert!(matches!(e, AppError::Io { .. }));
        assert!(e.to_string().contains("/nonexistent/ilink.dat"));
    }
}
