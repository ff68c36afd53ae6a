use app_common::{App, Params, Size};
use app_ilink::ILINK;
fn main() {
    let params = Params::resolve("ilink", ILINK.params(), Size::Test, &[]).unwrap();
    let problem = ILINK.problem(&params).unwrap();
    let mut ws = app_ilink::peel::Workspace::default();
    let mut best = (f64::INFINITY, 0.0, 0.0);
    for i in 0..=500 { for j in 0..=100 {
        let t = [i as f64 * 0.001, j as f64 * 0.005];
        let f = problem.neg2_ln_like(&t, &mut ws);
        if f < best.0 { best = (f, t[0], t[1]); }
    }}
    println!("grid best {best:?}");
    for t1 in [0.0986, 0.0987, 0.0988] { for t2 in [0.0, 1e-4] {
        println!("{t1} {t2} {:.12}", problem.neg2_ln_like(&[t1, t2], &mut ws));
    }}
    let l = problem.pedigree_ln_likelihoods(&[0.5,0.5], &mut ws);
    println!("ln L per ped at 0.5: {l:?}");
}
