use super::*;
use app_common::Size;

fn spec(nodes: usize, degree: usize, remote: f64, span: usize, procs: usize) -> Spec {
    Spec::new(nodes, degree, remote, span, procs, 7).unwrap()
}

fn params(nodes: usize, iterations: usize, graph_procs: usize) -> Params {
    let (n, it, gp) = (
        nodes.to_string(),
        iterations.to_string(),
        graph_procs.to_string(),
    );
    Params::from_pairs(
        Size::Test,
        &[
            ("nodes", &n),
            ("degree", "4"),
            ("remote_fraction", "0.3"),
            ("dist_span", "2"),
            ("iterations", &it),
            ("graph_procs", &gp),
            ("seed", "5"),
        ],
    )
}

#[test]
fn one_iteration_on_a_hand_built_graph() {
    let mut g = Graph {
        degree: 2,
        e_values: vec![1.0, 2.0],
        h_values: vec![3.0, 4.0],
        e_from: vec![0, 1, 1, 1],
        e_weight: vec![0.5, 0.25, 1.0, 0.125],
        h_from: vec![1, 0, 0, 0],
        h_weight: vec![0.5, 0.5, 0.25, 0.25],
    };
    step(&mut g);
    // e0 = 1 - 0.5*3 - 0.25*4 = -1.5; e1 = 2 - 1*4 - 0.125*4 = -2.5;
    // h0 = 3 - 0.5*(-2.5) - 0.5*(-1.5) = 5; h1 = 4 - 0.25*(-1.5) * 2 = 4.75.
    assert_eq!(g.e_values, [-1.5, -2.5]);
    assert_eq!(g.h_values, [5.0, 4.75]);
    assert_eq!(checksum(&g.e_values, &g.h_values), 5.75);
}

#[test]
fn a_half_step_is_a_sparse_matrix_vector_product() {
    // E_new = E - A H with A[i][j] the summed weights of the edges from H node j to E node i,
    // computed with a dense matrix; only the order of additions differs.
    let s = spec(200, 6, 0.4, 2, 5);
    let g = Graph::build(&s);
    let n = s.half;
    let mut a = vec![vec![0.0f64; n]; n];
    for (i, row) in a.iter_mut().enumerate() {
        for e in i * s.degree..(i + 1) * s.degree {
            row[g.e_from[e] as usize] += g.e_weight[e];
        }
    }
    let mut e = g.e_values.clone();
    update(
        &mut e,
        &g.h_values,
        Edges {
            degree: 6,
            from: &g.e_from,
            weight: &g.e_weight,
        },
        0..n,
    );
    for i in 0..n {
        let dense = g.e_values[i] - (0..n).map(|j| a[i][j] * g.h_values[j]).sum::<f64>();
        assert!(
            (e[i] - dense).abs() <= 1e-14 * (1.0 + dense.abs()),
            "node {i}"
        );
    }
}

#[test]
fn blocks_match_their_ranges() {
    for n in [5, 17, 64] {
        for blocks in 1..=5 {
            for b in 0..blocks {
                for i in nodes_of(b, blocks, n) {
                    assert_eq!(
                        block_of(i, blocks, n),
                        b,
                        "node {i} of {n} in {blocks} blocks"
                    );
                }
            }
        }
    }
}

/// The distance between two blocks on the ring of `p` blocks.
fn ring_distance(a: usize, b: usize, p: usize) -> usize {
    let d = a.abs_diff(b);
    d.min(p - d)
}

#[test]
fn edges_stay_within_the_span_and_the_remote_fraction_is_as_stated() {
    let (p, span, remote) = (8, 2, 0.25);
    let s = spec(16000, 5, remote, span, p);
    let g = Graph::build(&s);
    let mut remote_edges = 0usize;
    for (from, weight) in [(&g.e_from, &g.e_weight), (&g.h_from, &g.h_weight)] {
        for (e, (&f, &w)) in from.iter().zip(weight.iter()).enumerate() {
            let (me, src) = (
                block_of(e / s.degree, p, s.half),
                block_of(f as usize, p, s.half),
            );
            assert!(
                ring_distance(me, src, p) <= span,
                "edge {e} crosses {me} -> {src}"
            );
            assert!((0.0..0.1 / 5.0).contains(&w), "weight {w}");
            remote_edges += usize::from(me != src);
        }
    }
    // 80000 edges, each remote with probability 0.25: standard deviation about 122, so a
    // count within 5 standard deviations of 20000 is expected unless the generator is wrong.
    assert!(
        remote_edges.abs_diff(20000) < 610,
        "{remote_edges} remote edges"
    );
}

#[test]
fn no_remote_fraction_means_no_remote_edges() {
    let s = spec(400, 3, 0.0, 1, 4);
    let g = Graph::build(&s);
    for (e, &f) in g.e_from.iter().enumerate() {
        assert_eq!(block_of(e / 3, 4, 200), block_of(f as usize, 4, 200));
    }
}

#[test]
fn the_graph_does_not_depend_on_who_builds_which_nodes() {
    let s = spec(300, 4, 0.3, 1, 6);
    let whole = Graph::build(&s);
    for nprocs in [1, 4, 7] {
        let mut g = Graph::zeroed(&s);
        for id in (0..nprocs).rev() {
            let r = nodes_of(id, nprocs, s.half);
            init_nodes(
                &s,
                Kind::H,
                r.clone(),
                &mut g.h_values,
                &mut g.h_from,
                &mut g.h_weight,
            );
            init_nodes(
                &s,
                Kind::E,
                r,
                &mut g.e_values,
                &mut g.e_from,
                &mut g.e_weight,
            );
        }
        assert_eq!(g, whole, "built by {nprocs} processors");
    }
    let other_seed = Graph::build(&Spec { seed: 8, ..s });
    assert_ne!(other_seed.e_from, whole.e_from);
}

/// The parallel schedule with each processor's block run one after another between the
/// barriers: a valid execution, since a half-step reads only the other kind's values.
fn blocked(s: &Spec, iterations: usize, nprocs: usize) -> f64 {
    let mut g = Graph::zeroed(s);
    for id in 0..nprocs {
        let r = nodes_of(id, nprocs, s.half);
        init_nodes(
            s,
            Kind::E,
            r.clone(),
            &mut g.e_values,
            &mut g.e_from,
            &mut g.e_weight,
        );
        init_nodes(
            s,
            Kind::H,
            r,
            &mut g.h_values,
            &mut g.h_from,
            &mut g.h_weight,
        );
    }
    for _ in 0..iterations {
        for id in (0..nprocs).rev() {
            let edges = Edges {
                degree: s.degree,
                from: &g.e_from,
                weight: &g.e_weight,
            };
            update(
                &mut g.e_values,
                &g.h_values,
                edges,
                nodes_of(id, nprocs, s.half),
            );
        }
        for id in 0..nprocs {
            let edges = Edges {
                degree: s.degree,
                from: &g.h_from,
                weight: &g.h_weight,
            };
            update(
                &mut g.h_values,
                &g.e_values,
                edges,
                nodes_of(id, nprocs, s.half),
            );
        }
    }
    checksum(&g.e_values, &g.h_values)
}

#[test]
fn blocked_schedule_gives_the_sequential_checksum_exactly() {
    let p = params(600, 12, 4);
    let seq = EM3D.sequential(&p).unwrap();
    let (s, iterations) = spec_and_iterations(&p).unwrap();
    for nprocs in [1, 2, 3, 4, 8] {
        let par = summary(blocked(&s, iterations, nprocs));
        assert_eq!(EM3D.check(&seq, &par), Ok(()), "{nprocs} processors");
    }
}

#[test]
fn checker_rejects_a_different_checksum() {
    let seq = EM3D.sequential(&params(600, 12, 4)).unwrap();
    let other = EM3D.sequential(&params(600, 11, 4)).unwrap();
    assert!(EM3D.check(&seq, &other).is_err());
}

#[test]
fn too_few_nodes_for_the_graph_processors_is_an_error() {
    let e = EM3D.sequential(&params(6, 1, 4)).unwrap_err();
    assert!(
        e.to_string().contains("at least one node of each kind"),
        "{e}"
    );
    assert!(EM3D.sequential(&params(601, 1, 4)).is_err());
}

#[test]
fn every_size_resolves_and_the_paper_size_is_table_3() {
    for size in Size::ALL {
        let p = Params::resolve("em3d", EM3D.params(), size, &[]).unwrap();
        spec_and_iterations(&p).unwrap();
    }
    let p = Params::resolve("em3d", EM3D.params(), Size::Paper, &[]).unwrap();
    let (s, _) = spec_and_iterations(&p).unwrap();
    assert_eq!((2 * s.half, s.graph_procs), (64000, 32));
}
