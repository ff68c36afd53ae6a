//! Input sizes and named parameters with per-size defaults.

use crate::AppError;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The three input sizes every application provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Size {
    /// A few seconds at most under the DSM on a 2-core machine; used by the test suite.
    Test,
    /// Minutes at most sequentially; used for the first real figures.
    Small,
    /// The sizes of the paper's Table 3.
    Paper,
}

impl Size {
    pub const ALL: [Size; 3] = [Size::Test, Size::Small, Size::Paper];

    fn index(self) -> usize {
        match self {
            Size::Test => 0,
            Size::Small => 1,
            Size::Paper => 2,
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Size::Test => "test",
            Size::Small => "small",
            Size::Paper => "paper",
        })
    }
}

impl FromStr for Size {
    type Err = AppError;
    fn from_str(s: &str) -> Result<Self, AppError> {
        match s {
            "test" => Ok(Size::Test),
            "small" => Ok(Size::Small),
            "paper" => Ok(Size::Paper),
            other => Err(AppError::BadParam {
                name: "size".into(),
                value: other.into(),
                why: "valid sizes are test, small, paper".into(),
            }),
        }
    }
}

/// One parameter of an application: its name, what it means, and its default for each
/// size in the order test, small, paper.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub defaults: [&'static str; 3],
}

impl ParamSpec {
    pub fn default_for(&self, size: Size) -> &'static str {
        self.defaults[size.index()]
    }
}

/// The resolved parameters of one run: the defaults of a size with the user's overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub size: Size,
    values: BTreeMap<String, String>,
}

impl Params {
    /// The defaults of `size` with `overrides` (`KEY=VALUE` pairs already split) applied.
    /// An override naming no parameter is an error that lists the valid names.
    pub fn resolve(
        app: &str,
        specs: &[ParamSpec],
        size: Size,
        overrides: &[(String, String)],
    ) -> Result<Params, AppError> {
        let mut values: BTreeMap<String, String> = specs
            .iter()
            .map(|s| (s.name.to_string(), s.default_for(size).to_string()))
            .collect();
        for (k, v) in overrides {
            match values.get_mut(k) {
                Some(slot) => *slot = v.clone(),
                None => {
                    return Err(AppError::UnknownParam {
                        app: app.to_string(),
                        name: k.clone(),
                        valid: specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
                    })
                }
            }
        }
        Ok(Params { size, values })
    }

    /// Parameters from explicit pairs, for tests: every name must be given.
    pub fn from_pairs(size: Size, pairs: &[(&str, &str)]) -> Params {
        Params {
            size,
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The raw text of a parameter.
    pub fn str(&self, name: &str) -> Result<&str, AppError> {
        self.values
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| AppError::BadParam {
                name: name.into(),
                value: String::new(),
                why: "the application asked for a parameter it does not declare".into(),
            })
    }

    /// A parameter parsed as `T`; a value that does not parse, or a float that is not
    /// finite, is an error naming the parameter and what it expects.
    pub fn get<T: FromStr + fmt::Display>(&self, name: &str) -> Result<T, AppError> {
        let raw = self.str(name)?;
        let bad = |why: String| AppError::BadParam {
            name: name.into(),
            value: raw.into(),
            why,
        };
        let v = raw
            .parse::<T>()
            .map_err(|_| bad(format!("expected {}", expects::<T>())))?;
        if !is_finite(&v) {
            return Err(bad(format!("expected {}", expects::<T>())));
        }
        Ok(v)
    }

    /// Like [`Params::get`], with a bound check: `lo <= value <= hi`.
    pub fn get_in<T>(&self, name: &str, lo: T, hi: T) -> Result<T, AppError>
    where
        T: FromStr + PartialOrd + fmt::Display + Copy,
    {
        let range = || format!("expected {} from {lo} to {hi}", expects::<T>());
        let raw = self.str(name)?;
        let bad = |why: String| AppError::BadParam {
            name: name.into(),
            value: raw.into(),
            why,
        };
        let v: T = self.get(name).map_err(|_| bad(range()))?;
        // Written so that a value unordered with the bounds (NaN) is refused too.
        let inside = matches!(
            v.partial_cmp(&lo),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        ) && matches!(
            v.partial_cmp(&hi),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        );
        if !inside {
            return Err(bad(range()));
        }
        Ok(v)
    }
}

/// What a parameter of type `T` expects, in words.
fn expects<T>() -> &'static str {
    match std::any::type_name::<T>() {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number (0, 1, 2, ...)",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a finite decimal number (such as 0.5 or 1e-3)",
        "bool" => "true or false",
        _ => "a value of the documented form",
    }
}

/// False for a float parameter that parsed as NaN or an infinity (`nan`, `inf`, `1e999`):
/// ranges and physics are meaningless for them. Decided from the value's text so that it
/// works for every parameter type.
fn is_finite<T: fmt::Display>(v: &T) -> bool {
    let text = v.to_string();
    !matches!(text.as_str(), "NaN" | "inf" | "-inf")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[ParamSpec] = &[
        ParamSpec {
            name: "n",
            help: "matrix order",
            defaults: ["64", "512", "2500"],
        },
        ParamSpec {
            name: "block",
            help: "block size",
            defaults: ["16", "16", "16"],
        },
    ];

    #[test]
    fn defaults_follow_size_and_overrides_win() {
        let p = Params::resolve("lu", SPECS, Size::Small, &[("n".into(), "100".into())]).unwrap();
        assert_eq!(p.get::<usize>("n").unwrap(), 100);
        assert_eq!(p.get::<usize>("block").unwrap(), 16);
        let p = Params::resolve("lu", SPECS, Size::Paper, &[]).unwrap();
        assert_eq!(p.get::<usize>("n").unwrap(), 2500);
    }

    #[test]
    fn unknown_parameter_lists_valid_names() {
        let e = Params::resolve("lu", SPECS, Size::Test, &[("m".into(), "1".into())]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown parameter `m` for lu; valid parameters: n, block"
        );
    }

    #[test]
    fn unparsable_and_out_of_range_values_are_errors() {
        let p = Params::resolve("lu", SPECS, Size::Test, &[("n".into(), "x".into())]).unwrap();
        assert!(p
            .get::<usize>("n")
            .unwrap_err()
            .to_string()
            .contains("`n` = `x` is not valid: expected a whole number"));
        let p = Params::resolve("lu", SPECS, Size::Test, &[("n".into(), "0".into())]).unwrap();
        assert!(p
            .get_in::<usize>("n", 1, 10)
            .unwrap_err()
            .to_string()
            .contains("expected a whole number (0, 1, 2, ...) from 1 to 10"));
    }

    #[test]
    fn negative_fractional_and_non_finite_values_name_what_is_expected() {
        let specs = &[ParamSpec {
            name: "theta",
            help: "",
            defaults: ["1.0"; 3],
        }];
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "1e999"] {
            let p = Params::resolve("barnes", specs, Size::Test, &[("theta".into(), bad.into())])
                .unwrap();
            let e = p.get_in::<f64>("theta", 0.0, 10.0).unwrap_err().to_string();
            assert!(e.contains("`theta`") && e.contains("finite"), "{bad}: {e}");
            let e = p.get::<f64>("theta").unwrap_err().to_string();
            assert!(e.contains("finite"), "{bad}: {e}");
        }
        for bad in ["-5", "1.5", "x", ""] {
            let p = Params::resolve("lu", SPECS, Size::Test, &[("n".into(), bad.into())]).unwrap();
            let e = p.get_in::<usize>("n", 1, 10).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("parameter `n` = `{bad}` is not valid: expected a whole number (0, 1, 2, ...) from 1 to 10")
            );
        }
    }
}
