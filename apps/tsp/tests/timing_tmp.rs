use app_common::{App, Params, Size};
#[test]
#[ignore]
fn timing() {
    for size in Size::ALL {
        let p = Params::resolve("tsp", app_tsp::TSP.params(), size, &[]).unwrap();
        let t = std::time::Instant::now();
        let r = app_tsp::TSP.sequential(&p).unwrap();
        eprintln!("{size}: {r} in {:.3}s", t.elapsed().as_secs_f64());
    }
}
