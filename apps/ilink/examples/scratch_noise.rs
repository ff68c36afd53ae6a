use app_common::{App, Params, Size};
use app_ilink::{ILINK, optimize};
fn main() {
    let size: Size = std::env::args().nth(1).unwrap().parse().unwrap();
    let overrides: Vec<(String, String)> = std::env::args().skip(2).map(|a| { let (k, v) = a.split_once('=').unwrap(); (k.into(), v.into()) }).collect();
    let params = Params::resolve("ilink", ILINK.params(), size, &overrides).unwrap();
    let problem = ILINK.problem(&params).unwrap();
    let mut ws = app_ilink::peel::Workspace::default();
    for k in 0..4u64 {
        let o = optimize::minimize(|x| {
            let f = problem.neg2_ln_like(x, &mut ws);
            let h = x.iter().fold(k.wrapping_mul(0x9E3779B97F4A7C15), |a, v| (a ^ v.to_bits()).wrapping_mul(0xBF58476D1CE4E5B9));
            f * (1.0 + 4e-15 * (((h >> 40) % 9) as f64 - 4.0) * if k == 0 { 0.0 } else { 1.0 })
        }, &problem.data.thetas, 0.0, 0.5, &optimize::Options::default()).unwrap();
        println!("{:?} {:.15} it {} ev {} pg {:e}", o.x, o.f, o.iterations, o.evaluations, o.projected_gradient);
    }
}
