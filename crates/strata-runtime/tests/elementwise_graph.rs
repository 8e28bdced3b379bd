mod common;

use common::*;
use strata_ops::{Attr, Dim};
use strata_runtime::{Graph, InferencePlan, OptimizationProfile, PlanConfig, RuntimeError};

/// y = softmax(relu(x + b) * 2), with a reshape in between.
fn small_graph(dims: Vec<Dim>) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &dims);
    let b = g
        .add_initializer("b", tensor(&[0.5, -1.0, 2.0], &[3]))
        .unwrap();
    let two = g.add_initializer("two", tensor(&[2.0], &[])).unwrap();
    let s = op(&mut g, "Add", &[x, b], &["s"], &[])[0];
    let r = op(&mut g, "Relu", &[s], &["r"], &[])[0];
    let m = op(&mut g, "Mul", &[r, two], &["m"], &[])[0];
    let y = op(&mut g, "Softmax", &[m], &["y"], &[("axis", Attr::Int(-1))])[0];
    g.set_outputs(&[y]);
    g
}

fn reference(x: &[f32]) -> Vec<f32> {
    let b = [0.5, -1.0, 2.0];
    x.chunks(3)
        .flat_map(|row| {
            let m: Vec<f32> = row
                .iter()
                .zip(b)
                .map(|(v, b)| (v + b).max(0.0) * 2.0)
                .collect();
            let max = m.iter().cloned().fold(f32::MIN, f32::max);
            let e: Vec<f32> = m.iter().map(|v| (v - max).exp()).collect();
            let sum: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / sum)
        })
        .collect()
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{a:?} vs {b:?}");
    }
}

#[test]
fn static_graph_runs_and_plans_in_place() {
    let plan = InferencePlan::build(
        small_graph(fixed(&[4, 3])),
        PlanConfig::default().with_threads(1),
    )
    .unwrap();
    let memory = plan.memory_plan().unwrap();
    assert!(
        memory.in_place.iter().any(Option::is_some),
        "Relu/Mul/Softmax should run in place"
    );
    assert!(memory.arena_bytes <= memory.no_reuse_bytes);
    assert!(memory.lower_bound_bytes <= memory.arena_bytes);
    let mut ctx = plan.create_context().unwrap();
    let x = noise(12, 1);
    ctx.set_input("x", &tensor(&x, &[4, 3])).unwrap();
    ctx.execute().unwrap();
    assert_close(
        &ctx.output("y").unwrap().to_vec::<f32>().unwrap(),
        &reference(&x),
    );
    // A second run with other data gives the new answer (inputs and in-place buffers reset).
    let x2 = noise(12, 2);
    ctx.set_input_at(0, &tensor(&x2, &[4, 3])).unwrap();
    ctx.execute().unwrap();
    assert_close(
        &ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(),
        &reference(&x2),
    );
    // Running again without setting the input reuses it unchanged.
    ctx.execute().unwrap();
    assert_close(
        &ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(),
        &reference(&x2),
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let plan = InferencePlan::build(small_graph(fixed(&[4, 3])), PlanConfig::default()).unwrap();
    let mut ctx = plan.create_context().unwrap();
    assert!(matches!(
        ctx.execute(),
        Err(RuntimeError::InputNotSet { .. })
    ));
    assert!(matches!(
        ctx.set_input("nope", &tensor(&[0.0; 12], &[4, 3])),
        Err(RuntimeError::UnknownInput { .. })
    ));
    assert!(matches!(
        ctx.set_input("x", &tensor(&[0.0; 12], &[12])),
        Err(RuntimeError::InputRank { .. })
    ));
    assert!(matches!(
        ctx.set_input("x", &tensor(&[0.0; 6], &[2, 3])),
        Err(RuntimeError::InputDim { axis: 0, .. })
    ));
    let ints = strata_core::Tensor::from_slice(&[0i64; 12], &[4, 3]).unwrap();
    assert!(matches!(
        ctx.set_input("x", &ints),
        Err(RuntimeError::InputDType { .. })
    ));
    assert!(matches!(
        ctx.set_input_at(3, &ints),
        Err(RuntimeError::InputIndex { .. })
    ));
    assert!(ctx.output("y").is_err());
}

#[test]
fn profile_sizes_for_max_and_updates_metadata_only() {
    let profile = OptimizationProfile::new()
        .with_input("x", &[1, 3], &[4, 3], &[8, 3])
        .unwrap();
    let plan = InferencePlan::build(
        small_graph(vec![Dim::Sym("N".into()), Dim::Known(3)]),
        PlanConfig::default().with_profile(profile),
    )
    .unwrap();
    let arena = plan.memory_plan().unwrap().arena_bytes;
    let mut ctx = plan.create_context().unwrap();
    for n in [8, 1, 5, 8, 2] {
        let x = noise(n * 3, n as u64);
        ctx.set_input("x", &tensor(&x, &[n, 3])).unwrap();
        ctx.execute().unwrap();
        let y = ctx.output("y").unwrap();
        assert_eq!(y.dims(), &[n, 3]);
        assert_close(&y.to_vec::<f32>().unwrap(), &reference(&x));
    }
    assert_eq!(ctx.stats().replans, 0);
    assert_eq!(ctx.stats().arena_bytes, arena);
    match ctx.set_input("x", &tensor(&[0.0; 27], &[9, 3])) {
        Err(RuntimeError::OutsideProfile {
            axis: 0,
            actual: 9,
            min: 1,
            max: 8,
            ..
        }) => {}
        other => panic!("expected an out-of-profile error, got {other:?}"),
    }
}

#[test]
fn without_profile_larger_shapes_replan() {
    let plan = InferencePlan::build(
        small_graph(vec![Dim::Sym("N".into()), Dim::Known(3)]),
        PlanConfig::default(),
    )
    .unwrap();
    assert!(plan.memory_plan().is_none());
    let mut ctx = plan.create_context().unwrap();
    for n in [2, 1, 100, 3] {
        let x = noise(n * 3, 7 + n as u64);
        ctx.set_input("x", &tensor(&x, &[n, 3])).unwrap();
        ctx.execute().unwrap();
        assert_close(
            &ctx.output("y").unwrap().to_vec::<f32>().unwrap(),
            &reference(&x),
        );
    }
    assert_eq!(
        ctx.stats().replans,
        1,
        "only growing from 2 to 100 rows (past the 256-byte slot rounding) needs a new plan"
    );
}

#[test]
fn constant_subgraphs_fold() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[2, 3]));
    let a = g
        .add_initializer("a", tensor(&[1.0, 2.0, 3.0], &[3]))
        .unwrap();
    let b = g
        .add_initializer("b", tensor(&[1.0, 1.0, 1.0], &[3]))
        .unwrap();
    let ab = op(&mut g, "Add", &[a, b], &["ab"], &[])[0];
    let shape = op(&mut g, "Shape", &[x], &["shape"], &[])[0];
    let flat = op(&mut g, "Reshape", &[x, shape], &["same"], &[])[0];
    let y = op(&mut g, "Mul", &[flat, ab], &["y"], &[])[0];
    g.set_outputs(&[y]);
    let plan = InferencePlan::build(g, PlanConfig::default()).unwrap();
    assert_eq!(plan.optimize_report().folded, 1);
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]))
        .unwrap();
    ctx.execute().unwrap();
    assert_eq!(
        ctx.output("y").unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 6.0, 12.0, 8.0, 15.0, 24.0]
    );
}

#[test]
fn broadcast_inputs_are_never_overwritten_in_place() {
    // s = relu(x)[scalar-shaped] * y[3,4]: the scalar dies at Mul, but its 4 bytes share a
    // 256-byte slot size with the 48-byte output; it must not be reused in place.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[]));
    let y = input(&mut g, "y", &fixed(&[3, 4]));
    let r = op(&mut g, "Relu", &[x], &["r"], &[])[0];
    let m = op(&mut g, "Mul", &[r, y], &["m"], &[])[0];
    g.set_outputs(&[m]);
    let plan = InferencePlan::build(g, PlanConfig::default()).unwrap();
    assert_eq!(
        plan.memory_plan()
            .unwrap()
            .in_place
            .iter()
            .flatten()
            .count(),
        0
    );
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &tensor(&[2.0], &[])).unwrap();
    let ys: Vec<f32> = (0..12).map(|v| v as f32).collect();
    ctx.set_input("y", &tensor(&ys, &[3, 4])).unwrap();
    ctx.execute().unwrap();
    let expected: Vec<f32> = ys.iter().map(|v| v * 2.0).collect();
    assert_eq!(ctx.output("m").unwrap().to_vec::<f32>().unwrap(), expected);
}

/// Dropout outside training passes its input through: with nothing reading its mask its
/// readers read the input and the node goes; when it cannot go (its output is the graph's) an
/// unread mask is still left out (neither planned nor filled on every run); a mask the graph
/// returns is kept, all true.
#[test]
fn inference_dropout_is_bypassed_and_an_unread_mask_dropped() {
    // (Relu after the Dropout, the mask among the outputs): outputs the Dropout node keeps.
    for (relu_after, mask_is_output, kept) in [
        (true, false, None),
        (false, false, Some(1)),
        (true, true, Some(2)),
    ] {
        let mut g = Graph::new();
        let x = input(&mut g, "x", &fixed(&[2, 3]));
        let out = op(&mut g, "Dropout", &[x], &["d", "mask"], &[]);
        let y = if relu_after {
            op(&mut g, "Relu", &[out[0]], &["y"], &[])[0]
        } else {
            out[0]
        };
        let outputs = if mask_is_output {
            vec![y, out[1]]
        } else {
            vec![y]
        };
        g.set_outputs(&outputs);
        let plan = InferencePlan::build(g, PlanConfig::default().with_threads(1)).unwrap();
        let dropout = plan
            .graph()
            .nodes
            .iter()
            .find(|n| n.op.op_type() == "Dropout");
        assert_eq!(
            dropout.map(|n| n.outputs.len()),
            kept,
            "{relu_after} {mask_is_output}"
        );
        let x = noise(6, 3);
        let expected: Vec<f32> = if relu_after {
            x.iter().map(|v| v.max(0.0)).collect()
        } else {
            x.clone()
        };
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("x", &tensor(&x, &[2, 3])).unwrap();
        ctx.execute().unwrap();
        assert_close(
            &ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(),
            &expected,
        );
        if mask_is_output {
            let mask = ctx.output("mask").unwrap().to_vec::<u8>().unwrap();
            assert_eq!(mask, vec![1; 6]);
        }
    }
}
