//! Result summaries with named fields, and the checker that compares two of them.

use serde::Serialize;
use std::fmt;

/// One field of a result summary.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[serde(untagged)]
// Integers come first so that a JSON round trip (results travel from node processes as
// JSON) gives back the same variant: serde_json writes floats with a decimal point.
pub enum Value {
    I64(i64),
    F64(f64),
    Str(String),
    I64s(Vec<i64>),
    F64s(Vec<f64>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::F64(x) => write!(f, "{x:.12e}"),
            Value::I64(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::F64s(v) => write!(f, "{v:?}"),
            Value::I64s(v) => write!(f, "{v:?}"),
        }
    }
}

/// A result summary: named fields in a fixed order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct AppResult {
    pub fields: Vec<(String, Value)>,
}

impl AppResult {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.fields.push((name.to_string(), value));
        self
    }

    pub fn f64(self, name: &str, x: f64) -> Self {
        self.with(name, Value::F64(x))
    }

    pub fn i64(self, name: &str, x: i64) -> Self {
        self.with(name, Value::I64(x))
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// A JSON object with the fields in order.
    pub fn to_json(&self) -> serde_json::Value {
        let map = self
            .fields
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    serde_json::to_value(v).expect("values serialize"),
                )
            })
            .collect::<serde_json::Map<_, _>>();
        serde_json::Value::Object(map)
    }
}

impl fmt::Display for AppResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k} = {v}")?;
        }
        Ok(())
    }
}

/// The first difference between a sequential and a parallel result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("result field `{field}` differs: sequential {expected}, parallel {got} ({rule})")]
pub struct Mismatch {
    pub field: String,
    pub expected: String,
    pub got: String,
    /// The rule that was applied, for example "exact" or "relative tolerance 1e-9".
    pub rule: String,
}

/// A checker built field by field: `Check::new(seq, par).exact("sum")?.relative("energy", 1e-9)?`.
pub struct Check<'a> {
    seq: &'a AppResult,
    par: &'a AppResult,
}

impl<'a> Check<'a> {
    pub fn new(seq: &'a AppResult, par: &'a AppResult) -> Self {
        Check { seq, par }
    }

    fn pair(&self, field: &str) -> Result<(&'a Value, &'a Value), Mismatch> {
        let missing = |which: &str| Mismatch {
            field: field.into(),
            expected: "a value".into(),
            got: format!("nothing in the {which} result"),
            rule: "present".into(),
        };
        Ok((
            self.seq.get(field).ok_or_else(|| missing("sequential"))?,
            self.par.get(field).ok_or_else(|| missing("parallel"))?,
        ))
    }

    /// The field must be bit-for-bit equal.
    pub fn exact(self, field: &str) -> Result<Self, Mismatch> {
        let (a, b) = self.pair(field)?;
        let same = match (a, b) {
            (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
            (Value::F64s(x), Value::F64s(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
            }
            _ => a == b,
        };
        if same {
            Ok(self)
        } else {
            Err(Mismatch {
                field: field.into(),
                expected: a.to_string(),
                got: b.to_string(),
                rule: "exact".into(),
            })
        }
    }

    /// `|a - b| <= tol * max(|a|, |b|, floor)`: a relative tolerance that falls back to an
    /// absolute one of `tol * floor` near zero.
    pub fn relative(self, field: &str, tol: f64, floor: f64) -> Result<Self, Mismatch> {
        let (a, b) = self.pair(field)?;
        let close = |x: f64, y: f64| (x - y).abs() <= tol * x.abs().max(y.abs()).max(floor);
        let ok = match (a, b) {
            (Value::F64(x), Value::F64(y)) => close(*x, *y),
            (Value::F64s(x), Value::F64s(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(*p, *q))
            }
            _ => a == b,
        };
        if ok {
            Ok(self)
        } else {
            Err(Mismatch {
                field: field.into(),
                expected: a.to_string(),
                got: b.to_string(),
                rule: format!("relative tolerance {tol:e}, floor {floor:e}"),
            })
        }
    }

    /// The parallel value must be at most `bound` (for error measures such as `max_error`).
    pub fn at_most(self, field: &str, bound: f64) -> Result<Self, Mismatch> {
        let (_, b) = self.pair(field)?;
        match b {
            Value::F64(y) if *y <= bound => Ok(self),
            _ => Err(Mismatch {
                field: field.into(),
                expected: format!("<= {bound:e}"),
                got: b.to_string(),
                rule: "upper bound".into(),
            }),
        }
    }

    pub fn done(self) -> Result<(), Mismatch> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_relative_checks() {
        let a = AppResult::new().f64("x", 1.0).i64("n", 3);
        let b = AppResult::new().f64("x", 1.0 + 1e-12).i64("n", 3);
        assert!(Check::new(&a, &b)
            .exact("n")
            .and_then(|c| c.relative("x", 1e-9, 1.0))
            .is_ok());
        let e = Check::new(&a, &b).exact("x").err().unwrap();
        assert_eq!(e.field, "x");
        assert!(e.to_string().starts_with("result field `x` differs"));
        let c = AppResult::new().f64("x", 1.1);
        assert!(Check::new(&a, &c).relative("x", 1e-3, 1.0).is_err());
    }

    #[test]
    fn values_survive_a_json_round_trip() {
        let r = AppResult::new()
            .f64("x", 1.0)
            .i64("n", 3)
            .with("v", Value::F64s(vec![0.5, 2.0]))
            .with("t", Value::I64s(vec![1, 2]));
        let back: AppResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn missing_field_is_a_mismatch() {
        let a = AppResult::new().f64("x", 1.0);
        let b = AppResult::new();
        assert!(Check::new(&a, &b)
            .exact("x")
            .err()
            .unwrap()
            .got
            .contains("parallel"));
    }
}
