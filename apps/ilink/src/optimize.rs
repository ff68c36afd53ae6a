//! Bound-constrained quasi-Newton minimization with numerical gradients, standing in for
//! GEMINI, the variable-metric optimizer of ILINK (Lalouel, "GEMINI - a computer program
//! for optimization of general nonlinear functions", University of Utah, 1979).
//!
//! The method is projected BFGS (Nocedal and Wright, "Numerical Optimization", 2nd ed.,
//! sections 6.1 and 16.7, and Bertsekas' projected Newton idea):
//!
//! 1. Gradient by finite differences with step `h`: central where `x +- h` stays inside the
//!    box, otherwise the second-order one-sided formula `(-3 f(x) + 4 f(x + h) - f(x + 2h)) / 2h`
//!    (or its mirror), so both are accurate to `O(h^2)`.
//! 2. Active set: a variable on its lower bound with a positive derivative, or on its upper
//!    bound with a negative one, is held fixed for the iteration.
//! 3. Direction `d = -B g` on the free variables, `B` the BFGS inverse-Hessian
//!    approximation (scaled identity `(s.y / y.y) I` before the first update; a step of at
//!    most [`Options::first_step`] in the first iteration). A direction that is not
//!    downhill resets `B`.
//! 4. Projected backtracking line search: `x(a) = P(x + a d)`, halving `a` from 1 until
//!    `f(x(a)) <= f(x) + 1e-4 g.(x(a) - x)` (Armijo).
//! 5. BFGS update of `B` when the curvature `s.y` is positive.
//!
//! It stops when the projected gradient is below [`Options::gradient_tolerance`] in every
//! variable, when a line search finds no decrease, or when both the step and the decrease
//! of `f` become negligible. The function is evaluated at the same points in the same
//! order on every run: the result is deterministic.

/// Settings of [`minimize`].
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Finite-difference step.
    pub step: f64,
    /// Stop when every component of the projected gradient is below this.
    pub gradient_tolerance: f64,
    /// Stop when no variable moves by more than this and `f` decreases by less than
    /// `f_tolerance (1 + |f|)`.
    pub x_tolerance: f64,
    pub f_tolerance: f64,
    /// Largest move of any variable in the first iteration.
    pub first_step: f64,
    pub max_iterations: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            step: 1e-5,
            gradient_tolerance: 1e-5,
            x_tolerance: 1e-9,
            f_tolerance: 1e-14,
            first_step: 0.05,
            max_iterations: 200,
        }
    }
}

/// The result of [`minimize`].
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub x: Vec<f64>,
    pub f: f64,
    pub iterations: usize,
    pub evaluations: usize,
    /// The projected gradient's largest component at `x`.
    pub projected_gradient: f64,
}

/// Minimizes `f` over the box `lo <= x <= hi` starting from `x0` (clamped into the box).
/// `f` may return `+inf` for points where it is undefined; `x0` must not be one.
pub fn minimize(
    mut f: impl FnMut(&[f64]) -> f64,
    x0: &[f64],
    lo: f64,
    hi: f64,
    opts: &Options,
) -> Result<Outcome, String> {
    let n = x0.len();
    let mut evaluations = 0;
    let mut eval = |x: &[f64]| {
        evaluations += 1;
        let v = f(x);
        if v.is_nan() {
            f64::INFINITY
        } else {
            v
        }
    };
    let mut x: Vec<f64> = x0.iter().map(|&v| v.clamp(lo, hi)).collect();
    let mut fx = eval(&x);
    if !fx.is_finite() {
        return Err(format!(
            "the function is not finite at the starting point {x:?}"
        ));
    }
    if n == 0 {
        return Ok(Outcome {
            x,
            f: fx,
            iterations: 0,
            evaluations,
            projected_gradient: 0.0,
        });
    }
    let mut g = gradient(&mut eval, &x, fx, lo, hi, opts.step);
    let mut b: Option<Vec<f64>> = None; // inverse Hessian, row-major n x n
                                        // `s.y / y.y` of the last accepted step: the scale of a fresh metric.
    let mut scale: Option<f64> = None;
    let mut last_active: Option<Vec<bool>> = None;
    let mut iterations = 0;
    let projected = |x: &[f64], g: &[f64]| -> Vec<bool> {
        (0..n)
            .map(|i| (x[i] <= lo && g[i] > 0.0) || (x[i] >= hi && g[i] < 0.0))
            .collect()
    };
    loop {
        let active = projected(&x, &g);
        let pg = (0..n)
            .filter(|&i| !active[i])
            .map(|i| g[i].abs())
            .fold(0.0, f64::max);
        if pg < opts.gradient_tolerance || iterations >= opts.max_iterations {
            return Ok(Outcome {
                x,
                f: fx,
                iterations,
                evaluations,
                projected_gradient: pg,
            });
        }
        iterations += 1;
        if last_active.as_ref().is_some_and(|a| *a != active) {
            // The free variables changed: the metric learned on the old ones is wrong.
            b = scale.map(|c| {
                (0..n * n)
                    .map(|k| if k % (n + 1) == 0 { c } else { 0.0 })
                    .collect()
            });
        }
        last_active = Some(active.clone());
        let mut d = vec![0.0; n];
        if let Some(bm) = &b {
            for i in (0..n).filter(|&i| !active[i]) {
                d[i] = -(0..n)
                    .filter(|&j| !active[j])
                    .map(|j| bm[i * n + j] * g[j])
                    .sum::<f64>();
            }
        }
        let downhill = d.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>() < 0.0;
        if b.is_none() || !downhill {
            // Steepest descent with the step's length bounded.
            b = None;
            let gmax = (0..n)
                .filter(|&i| !active[i])
                .map(|i| g[i].abs())
                .fold(0.0, f64::max);
            for i in (0..n).filter(|&i| !active[i]) {
                d[i] = -g[i] * opts.first_step / gmax;
            }
        }
        // Projected backtracking line search.
        let mut alpha = 1.0;
        let mut accepted = None;
        for _ in 0..40 {
            let xn: Vec<f64> = (0..n)
                .map(|i| (x[i] + alpha * d[i]).clamp(lo, hi))
                .collect();
            let decrease: f64 = (0..n).map(|i| g[i] * (xn[i] - x[i])).sum();
            let fxn = eval(&xn);
            if fxn.is_finite() && fxn <= fx + 1e-4 * decrease && xn != x {
                accepted = Some((xn, fxn));
                break;
            }
            alpha *= 0.5;
        }
        let Some((xn, fxn)) = accepted else {
            return Ok(Outcome {
                x,
                f: fx,
                iterations,
                evaluations,
                projected_gradient: pg,
            });
        };
        let gn = gradient(&mut eval, &xn, fxn, lo, hi, opts.step);
        // The secant pair of the free variables (held variables did not move).
        let s: Vec<f64> = (0..n).map(|i| xn[i] - x[i]).collect();
        let y: Vec<f64> = (0..n)
            .map(|i| if active[i] { 0.0 } else { gn[i] - g[i] })
            .collect();
        let sy: f64 = s.iter().zip(&y).map(|(a, b)| a * b).sum();
        let yy: f64 = y.iter().map(|a| a * a).sum();
        let ss: f64 = s.iter().map(|a| a * a).sum();
        if sy > 1e-12 * (ss * yy).sqrt() {
            scale = Some(sy / yy);
            let bm = b.get_or_insert_with(|| {
                (0..n * n)
                    .map(|k| if k % (n + 1) == 0 { sy / yy } else { 0.0 })
                    .collect()
            });
            bfgs_update(bm, &s, &y, sy);
        }
        let small_step = s.iter().all(|v| v.abs() <= opts.x_tolerance);
        let small_decrease = fx - fxn <= opts.f_tolerance * (1.0 + fxn.abs());
        x = xn;
        fx = fxn;
        g = gn;
        if small_step && small_decrease {
            let active = projected(&x, &g);
            let pg = (0..n)
                .filter(|&i| !active[i])
                .map(|i| g[i].abs())
                .fold(0.0, f64::max);
            return Ok(Outcome {
                x,
                f: fx,
                iterations,
                evaluations,
                projected_gradient: pg,
            });
        }
    }
}

/// `B <- (I - r s y') B (I - r y s') + r s s'` with `r = 1 / s.y`.
fn bfgs_update(b: &mut [f64], s: &[f64], y: &[f64], sy: f64) {
    let n = s.len();
    let r = 1.0 / sy;
    let by: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| b[i * n + j] * y[j]).sum())
        .collect();
    let yby: f64 = y.iter().zip(&by).map(|(a, b)| a * b).sum();
    for i in 0..n {
        for j in 0..n {
            b[i * n + j] += -r * (s[i] * by[j] + by[i] * s[j]) + (r * r * yby + r) * s[i] * s[j];
        }
    }
}

/// The finite-difference gradient of `f` at `x` (where `f(x) = fx`), inside `[lo, hi]`.
fn gradient(
    f: &mut impl FnMut(&[f64]) -> f64,
    x: &[f64],
    fx: f64,
    lo: f64,
    hi: f64,
    h: f64,
) -> Vec<f64> {
    let mut p = x.to_vec();
    let mut at = |p: &mut Vec<f64>, i: usize, v: f64| {
        p[i] = v;
        let r = f(p);
        p[i] = x[i];
        r
    };
    (0..x.len())
        .map(|i| {
            if x[i] - h >= lo && x[i] + h <= hi {
                (at(&mut p, i, x[i] + h) - at(&mut p, i, x[i] - h)) / (2.0 * h)
            } else if x[i] + 2.0 * h <= hi {
                (-3.0 * fx + 4.0 * at(&mut p, i, x[i] + h) - at(&mut p, i, x[i] + 2.0 * h))
                    / (2.0 * h)
            } else {
                (3.0 * fx - 4.0 * at(&mut p, i, x[i] - h) + at(&mut p, i, x[i] - 2.0 * h))
                    / (2.0 * h)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_an_interior_minimum_of_a_quadratic() {
        // f = (x - 0.2)^2 + 10 (y - 0.3)^2 + (x - 0.2)(y - 0.3): minimum at (0.2, 0.3).
        let f = |v: &[f64]| {
            let (a, b) = (v[0] - 0.2, v[1] - 0.3);
            a * a + 10.0 * b * b + a * b
        };
        let o = minimize(f, &[0.45, 0.01], 0.0, 0.5, &Options::default()).unwrap();
        assert!(
            (o.x[0] - 0.2).abs() < 1e-6 && (o.x[1] - 0.3).abs() < 1e-6,
            "{o:?}"
        );
    }

    #[test]
    fn stops_on_the_bounds() {
        // Unconstrained minimum at (-0.1, 0.7): the box solution is (0, 0.5).
        let f = |v: &[f64]| 50.0 * (v[0] + 0.1).powi(2) + 30.0 * (v[1] - 0.7).powi(2);
        let o = minimize(f, &[0.25, 0.25], 0.0, 0.5, &Options::default()).unwrap();
        assert_eq!(o.x, vec![0.0, 0.5], "{o:?}");
    }

    #[test]
    fn follows_a_curved_valley() {
        // A Rosenbrock valley scaled into the box: minimum at (0.25, 0.25).
        let f = |v: &[f64]| {
            let (a, b) = (4.0 * v[0], 4.0 * v[1]);
            (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2)
        };
        let o = minimize(f, &[0.05, 0.45], 0.0, 0.5, &Options::default()).unwrap();
        assert!(
            (o.x[0] - 0.25).abs() < 1e-5 && (o.x[1] - 0.25).abs() < 1e-5,
            "{o:?}"
        );
    }

    #[test]
    fn an_infinite_start_is_an_error() {
        assert!(minimize(|_| f64::INFINITY, &[0.1], 0.0, 0.5, &Options::default()).is_err());
    }
}
