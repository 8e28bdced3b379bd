//! Transpose elimination on builder models: cancelling pairs disappear, other pairs become one
//! Transpose, and a last-two-axes Transpose feeding a MatMul is read through strides by a
//! FusedMatMul; outputs equal the unoptimized plan's, and `strata inspect`'s fusion list names
//! each rewrite.

use strata_core::{DType, Tensor};
use strata_onnx::{models, Attrs, Dim, ModelBuilder};
use strata_runtime::PlanConfig;

fn known(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// Runs `model` optimized and not on inputs a [2, 3, 4] and b [2, 5, 4]; checks equal outputs and
/// returns the optimized plan's op counts and fusion list.
fn run(model: ModelBuilder) -> (std::collections::BTreeMap<String, usize>, Vec<String>) {
    let bytes = model.to_bytes().unwrap();
    let a = Tensor::from_slice(&models::seeded_values(24, 1, 1.0), &[2, 3, 4]).unwrap();
    let b = Tensor::from_slice(&models::seeded_values(40, 2, 1.0), &[2, 5, 4]).unwrap();
    let outputs = |optimize: bool| {
        let config = PlanConfig {
            optimize,
            ..PlanConfig::default().with_threads(1)
        };
        let plan = strata_onnx::load_bytes(bytes.clone(), "t", config).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("a", &a).unwrap();
        ctx.set_input("b", &b).unwrap();
        ctx.execute().unwrap();
        let ys: Vec<Vec<f32>> = (0..plan.outputs().len())
            .map(|i| ctx.output_at(i).unwrap().to_vec::<f32>().unwrap())
            .collect();
        (plan, ys)
    };
    let (plan, fused) = outputs(true);
    let (_, plain) = outputs(false);
    for (f, p) in fused.iter().zip(&plain) {
        assert_eq!(f.len(), p.len());
        for (x, y) in f.iter().zip(p) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} vs {y}");
        }
    }
    let fusions = plan
        .optimize_report()
        .fusions
        .iter()
        .map(|f| format!("{} {} <- {}", f.op_type, f.node, f.absorbed.join(", ")))
        .collect();
    (plan.op_counts(), fusions)
}

fn base() -> ModelBuilder {
    ModelBuilder::new("transposes")
        .input("a", DType::F32, &known(&[2, 3, 4]))
        .input("b", DType::F32, &known(&[2, 5, 4]))
}

#[test]
fn cancelling_pairs_vanish_and_other_pairs_merge() {
    let model = base()
        // [1, 0, 2] twice: the identity.
        .node(
            "Transpose",
            &["a"],
            &["t1"],
            Attrs::new().ints("perm", &[1, 0, 2]),
        )
        .node(
            "Transpose",
            &["t1"],
            &["t2"],
            Attrs::new().ints("perm", &[1, 0, 2]),
        )
        .node("Relu", &["t2"], &["y"], Attrs::new())
        // [2, 0, 1] then [0, 2, 1]: one Transpose [2, 1, 0].
        .node(
            "Transpose",
            &["a"],
            &["u1"],
            Attrs::new().ints("perm", &[2, 0, 1]),
        )
        .node(
            "Transpose",
            &["u1"],
            &["u2"],
            Attrs::new().ints("perm", &[0, 2, 1]),
        )
        .node("Neg", &["u2"], &["z"], Attrs::new())
        .output("y", DType::F32, &known(&[2, 3, 4]))
        .output("z", DType::F32, &known(&[4, 3, 2]));
    let (ops, fusions) = run(model);
    assert_eq!(ops.get("Transpose"), Some(&1), "{ops:?} {fusions:?}");
    assert!(
        fusions
            .iter()
            .any(|f| f.starts_with("Transpose pair (cancels)")),
        "{fusions:?}"
    );
    assert!(
        fusions
            .iter()
            .any(|f| f.starts_with("Transpose pair -> Transpose")),
        "{fusions:?}"
    );
}

#[test]
fn a_transposed_matmul_operand_is_read_through_strides() {
    // a [2, 3, 4] · bᵀ [2, 4, 5] and aᵀ [2, 4, 3] · a [2, 3, 4].
    let model = base()
        .node(
            "Transpose",
            &["b"],
            &["bt"],
            Attrs::new().ints("perm", &[0, 2, 1]),
        )
        .node("MatMul", &["a", "bt"], &["y"], Attrs::new())
        .node(
            "Transpose",
            &["a"],
            &["at"],
            Attrs::new().ints("perm", &[0, 2, 1]),
        )
        .node("MatMul", &["at", "a"], &["z"], Attrs::new())
        // Not the last two axes: stays.
        .node(
            "Transpose",
            &["b"],
            &["bp"],
            Attrs::new().ints("perm", &[1, 0, 2]),
        )
        .node("Relu", &["bp"], &["w"], Attrs::new())
        .output("y", DType::F32, &known(&[2, 3, 5]))
        .output("z", DType::F32, &known(&[2, 4, 4]))
        .output("w", DType::F32, &known(&[5, 2, 4]));
    let (ops, fusions) = run(model);
    assert_eq!(ops.get("FusedMatMul"), Some(&2), "{ops:?}");
    assert_eq!(ops.get("Transpose"), Some(&1), "{ops:?}");
    assert_eq!(
        fusions
            .iter()
            .filter(|f| f.starts_with("MatMul -> FusedMatMul"))
            .count(),
        2,
        "{fusions:?}"
    );
}
