//! The units an app counts its computation in (`dsm::work`), and their costs on a
//! platform.
//!
//! An app counts its computation in one or more kinds of unit that follow its instruction
//! count, in its sequential and its parallel version alike (code shared by both calls
//! `dsm::work::count`). Each kind is described by a [`WorkKind`]: what one unit is, how
//! many units the sequential version counts at the paper's input (a fact of the program,
//! checked against every sequential run at that input), and its relative cost measured on
//! a host (`cashmere calibrate`), which only splits the time between kinds.
//!
//! [`ns_per_unit`] then fixes a platform's cost of each unit from the platform's
//! sequential time at the paper's input (the paper's Table 3): the sequential version at
//! the paper's input takes exactly that time, and at every other size the same costs
//! apply. Nothing here comes from the results the table reproduces (Table 4, Figure 1).

/// One kind of unit an app counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkKind {
    /// A short name (`point`, `pair`, `node`).
    pub name: &'static str,
    /// What one unit is, in the program's terms.
    pub what: &'static str,
    /// Relative cost of one unit, ns on the calibrating host (`cashmere calibrate`); only
    /// the ratios between an app's kinds matter. Ignored for an app with one kind.
    pub host_ns: f64,
    /// Units the sequential version counts in its timed region at the paper's input.
    pub paper_units: u64,
}

/// The platform's ns per unit of each kind, given its sequential time at the paper's
/// input (`platform_seq_s`): each kind's share of that time is its paper units times its
/// relative cost. `None` if the app counts nothing, or its paper units weigh nothing.
pub fn ns_per_unit(kinds: &[WorkKind], platform_seq_s: f64) -> Option<Vec<f64>> {
    let weight = |k: &WorkKind| if kinds.len() == 1 { 1.0 } else { k.host_ns };
    let total: f64 = kinds.iter().map(|k| weight(k) * k.paper_units as f64).sum();
    if kinds.is_empty() || total.is_nan() || total <= 0.0 || !total.is_finite() {
        return None;
    }
    let per = platform_seq_s * 1e9 / total;
    Some(kinds.iter().map(|k| weight(k) * per).collect())
}

/// The time `units` take at `ns_per_unit`, seconds.
pub fn seconds(units: &dsm::work::Tally, ns_per_unit: &[f64]) -> f64 {
    units
        .iter()
        .zip(ns_per_unit)
        .map(|(&u, &ns)| u as f64 * ns)
        .sum::<f64>()
        / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn kind(host_ns: f64, paper_units: u64) -> WorkKind {
        WorkKind { name: "k", what: "a unit", host_ns, paper_units }
    }

    #[test]
    fn the_paper_input_takes_the_platform_time_exactly() {
        let kinds = [kind(2.0, 1_000), kind(6.0, 500)];
        let ns = ns_per_unit(&kinds, 10.0).unwrap();
        // Shares 2,000 : 3,000 of 10 s.
        assert!((ns[0] * 1_000.0 - 4e9).abs() < 1.0, "{ns:?}");
        assert!((ns[1] * 500.0 - 6e9).abs() < 1.0, "{ns:?}");
        let mut t = [0; dsm::work::MAX_KINDS];
        t[0] = 1_000;
        t[1] = 500;
        assert!((seconds(&t, &ns) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn one_kind_ignores_its_host_cost_and_nothing_counted_gives_no_costs() {
        let ns = ns_per_unit(&[kind(0.0, 4)], 2.0).unwrap();
        assert_eq!(ns, vec![0.5e9]);
        assert_eq!(ns_per_unit(&[], 2.0), None);
        assert_eq!(ns_per_unit(&[kind(1.0, 0), kind(1.0, 0)], 2.0), None);
    }
}
