//! Concat whose inputs are made by earlier nodes gets them written in place (issue 10 item 6):
//! the planner puts each input inside the Concat's output, the Concat copies nothing, and the
//! results equal a plan where the inputs cannot be placed.

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig};

fn known(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.41 + seed).sin()).collect()
}

/// A SqueezeNet "fire" tail: two convolutions of `x`, concatenated on channels, then Relu.
/// With `expose`, the first convolution's output is also a graph output (so it cannot live
/// inside the Concat's output).
fn fire(expose: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("fire")
        .opset(17)
        .input("x", DType::F32, &known(&[1, 4, 6, 6]))
        .initializer_f32("wa", &values(8 * 4, 0.1), &[8, 4, 1, 1])
        .initializer_f32("wb", &values(8 * 4 * 9, 0.7), &[8, 4, 3, 3])
        .node("Conv", &["x", "wa"], &["a"], Attrs::new())
        .node(
            "Conv",
            &["x", "wb"],
            &["b"],
            Attrs::new().ints("pads", &[1, 1, 1, 1]),
        )
        .node("Concat", &["a", "b"], &["c"], Attrs::new().int("axis", 1))
        .node("Relu", &["c"], &["y"], Attrs::new())
        .output("y", DType::F32, &known(&[1, 16, 6, 6]));
    if expose {
        b = b.output("a", DType::F32, &known(&[1, 8, 6, 6]));
    }
    b
}

fn load(builder: &ModelBuilder) -> Arc<InferencePlan> {
    strata_onnx::load_bytes(
        builder.to_bytes().unwrap(),
        "fire",
        PlanConfig::default().with_threads(1),
    )
    .unwrap()
}

fn run(plan: &Arc<InferencePlan>, x: &Tensor) -> Vec<f32> {
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", x).unwrap();
    ctx.execute().unwrap();
    ctx.output("y").unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn concat_inputs_are_written_in_place_and_results_are_unchanged() {
    let x = Tensor::from_slice(&values(4 * 36, 2.0), &[1, 4, 6, 6]).unwrap();
    let placed = load(&fire(false));
    let memory = placed.memory_plan().unwrap();
    let slot = |name: &str| memory.values[placed.graph().value_id(name).unwrap().0].unwrap();
    let (a, b, c) = (slot("a"), slot("b"), slot("c"));
    assert_eq!(a.offset, c.offset, "the first input starts the output");
    assert_eq!(b.offset, c.offset + 8 * 36 * 4, "the second follows it");
    let apart = load(&fire(true));
    let memory = apart.memory_plan().unwrap();
    let slot = |name: &str| memory.values[apart.graph().value_id(name).unwrap().0].unwrap();
    assert_ne!(slot("a").offset, slot("c").offset, "a graph output is not placed");
    let expected = run(&apart, &x);
    assert_eq!(run(&placed, &x), expected);
    // Again, in a second context: nothing of the first run is needed.
    assert_eq!(run(&placed, &x), expected);
}
