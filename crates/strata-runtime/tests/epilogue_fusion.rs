//! Epilogue fusion end to end: residual Adds, activations and MatMul + bias fused into their
//! producers give the same outputs as the unfused graph, and the report lists every fusion.

mod common;

use common::{fixed, input, noise, op, tensor};
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig};

/// Runs `graph` with and without optimization on `x` and returns (fused plan, fused output,
/// unfused output).
fn run_both(
    graph: Graph,
    x: &[f32],
    dims: &[usize],
    threads: usize,
) -> (std::sync::Arc<InferencePlan>, Vec<f32>, Vec<f32>) {
    let run = |config: PlanConfig| {
        let plan = InferencePlan::build(graph.clone(), config).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("x", &tensor(x, dims)).unwrap();
        ctx.execute().unwrap();
        let y = ctx.output("y").unwrap().to_vec::<f32>().unwrap();
        (plan, y)
    };
    let (fused_plan, fused) = run(PlanConfig::default().with_threads(threads));
    let unfused_config = PlanConfig {
        optimize: false,
        ..PlanConfig::default().with_threads(threads)
    };
    let (_, unfused) = run(unfused_config);
    (fused_plan, fused, unfused)
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * b.abs().max(1.0),
            "element {i}: {a} vs {b}"
        );
    }
}

#[test]
fn residual_adds_activations_and_matmul_bias_fuse_with_the_unfused_results() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[1, 4, 6, 6]));
    let init = |g: &mut Graph, name: &str, dims: &[usize], seed: u64| {
        let n = dims.iter().product();
        g.add_initializer(name, tensor(&noise(n, seed), dims))
            .unwrap()
    };
    let w1 = init(&mut g, "w1", &[8, 4, 3, 3], 1);
    let b1 = init(&mut g, "b1", &[8], 2);
    let w2 = init(&mut g, "w2", &[8, 4, 1, 1], 3);
    let w3 = init(&mut g, "w3", &[6, 8, 3, 3], 4);
    let fc = init(&mut g, "fc", &[6 * 36, 5], 5);
    let fc_bias = init(&mut g, "fc_bias", &[5], 6);
    let lo = g.add_initializer("lo", tensor(&[0.0], &[])).unwrap();
    let hi = g.add_initializer("hi", tensor(&[0.5], &[])).unwrap();
    let pads = ("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let main = op(
        &mut g,
        "Conv",
        &[x, w1, b1],
        &["main"],
        std::slice::from_ref(&pads),
    )[0];
    // The shortcut comes after the main branch in node order: fusing the Add into the main
    // Conv makes it read a value produced later, which the pass must reorder.
    let shortcut = op(&mut g, "Conv", &[x, w2], &["shortcut"], &[])[0];
    let sum = op(&mut g, "Add", &[main, shortcut], &["sum"], &[])[0];
    let clipped = op(&mut g, "Clip", &[sum, lo, hi], &["clipped"], &[])[0];
    let c3 = op(&mut g, "Conv", &[clipped, w3], &["c3"], &[pads])[0];
    let leaky = op(
        &mut g,
        "LeakyRelu",
        &[c3],
        &["leaky"],
        &[("alpha", Attr::Float(0.2))],
    )[0];
    let shape = g
        .add_initializer(
            "flat_shape",
            strata_core::Tensor::from_slice(&[1i64, 6 * 36], &[2]).unwrap(),
        )
        .unwrap();
    let flat = op(&mut g, "Reshape", &[leaky, shape], &["flat"], &[])[0];
    let product = op(&mut g, "MatMul", &[flat, fc], &["product"], &[])[0];
    let biased = op(&mut g, "Add", &[fc_bias, product], &["biased"], &[])[0];
    let y = op(&mut g, "Tanh", &[biased], &["y"], &[])[0];
    g.set_outputs(&[y]);

    let x_data = noise(4 * 36, 7);
    for threads in [1, 2] {
        let (plan, fused, unfused) = run_both(g.clone(), &x_data, &[1, 4, 6, 6], threads);
        assert_close(&fused, &unfused);
        let counts = plan.op_counts();
        for gone in ["Add", "Clip", "LeakyRelu", "Tanh", "MatMul"] {
            assert!(!counts.contains_key(gone), "{gone} left: {counts:?}");
        }
        assert_eq!(counts.get("Conv"), Some(&3));
        assert_eq!(counts.get("Gemm"), Some(&1));
        let fusions: Vec<(String, Vec<String>)> = plan
            .optimize_report()
            .fusions
            .iter()
            .map(|f| {
                let kinds = f
                    .absorbed
                    .iter()
                    .map(|a| a.split(' ').next().unwrap_or_default().to_string())
                    .collect();
                (f.op_type.clone(), kinds)
            })
            .collect();
        let pair = |op: &str, absorbed: &[&str]| {
            (
                op.to_string(),
                absorbed.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        for expected in [
            pair("MatMul -> Gemm", &["Add"]),
            pair("Conv", &["Add", "Clip"]),
            pair("Conv", &["LeakyRelu"]),
            pair("Gemm", &["Tanh"]),
        ] {
            assert!(
                fusions.contains(&expected),
                "{expected:?} not in {fusions:?}"
            );
        }
        assert_eq!(plan.optimize_report().activations, 5);
    }
}

#[test]
fn broadcasting_adds_and_computed_clip_bounds_are_left_alone() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[1, 2, 5, 5]));
    let w = g
        .add_initializer("w", tensor(&noise(4 * 2 * 9, 11), &[4, 2, 3, 3]))
        .unwrap();
    let w2 = g
        .add_initializer("w2", tensor(&noise(3 * 4 * 9, 14), &[3, 4, 3, 3]))
        .unwrap();
    let per_channel = g
        .add_initializer("per_channel", tensor(&noise(4, 12), &[1, 4, 1, 1]))
        .unwrap();
    let lo = g.add_initializer("lo", tensor(&[-0.25], &[])).unwrap();
    let conv = op(&mut g, "Conv", &[x, w], &["conv"], &[])[0];
    // Broadcast over the spatial dims: not a residual of the output's shape.
    let shifted = op(&mut g, "Add", &[conv, per_channel], &["shifted"], &[])[0];
    let conv2 = op(&mut g, "Conv", &[shifted, w2], &["conv2"], &[])[0];
    // A Clip whose upper bound is computed at run time is not a known activation.
    let peak = op(
        &mut g,
        "ReduceMax",
        &[x],
        &["peak"],
        &[("keepdims", Attr::Int(0))],
    )[0];
    let y = op(&mut g, "Clip", &[conv2, lo, peak], &["y"], &[])[0];
    g.set_outputs(&[y]);
    let x_data = noise(2 * 25, 13);
    let (plan, fused, unfused) = run_both(g, &x_data, &[1, 2, 5, 5], 1);
    assert_close(&fused, &unfused);
    let counts = plan.op_counts();
    assert_eq!(counts.get("Add"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("Clip"), Some(&1), "{counts:?}");
    assert!(plan.optimize_report().fusions.is_empty());
}
