use app_common::{App, Params, Size};
use app_ilink::ILINK;
fn main() {
    let size: Size = std::env::args().nth(1).unwrap_or("test".into()).parse().unwrap();
    let overrides: Vec<(String, String)> = std::env::args().skip(2).map(|a| { let (k, v) = a.split_once('=').unwrap(); (k.into(), v.into()) }).collect();
    let params = Params::resolve("ilink", ILINK.params(), size, &overrides).unwrap();
    let t = std::time::Instant::now();
    let problem = ILINK.problem(&params).unwrap();
    println!("persons {} ngeno {} families {} shared {:.1} MB (4 procs) setup {:?}", problem.pedigrees.nperson, problem.model.ngeno, problem.pedigrees.families.len(), problem.shared_bytes(4) as f64 / 1e6, t.elapsed());
    let mut ws = app_ilink::peel::Workspace::default();
    let t = std::time::Instant::now();
    let f0 = problem.neg2_ln_like(&problem.data.thetas, &mut ws);
    println!("f(start) = {f0} in {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let e = app_ilink::estimate(&problem).unwrap();
    println!("{e:?} in {:?}", t.elapsed());
}
