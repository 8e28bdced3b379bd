//! The transformer fusions (decomposed LayerNorm and RMS norm, GELU in its erf, tanh and sigmoid
//! (QuickGelu) forms, Add + LayerNorm, MatMul + bias + GELU/residual) on models written with our
//! own builder at opsets 13–21, in the orders and forms exporters use: each fuses, and gives the
//! unfused graph's outputs within rtol 1e-5. Near misses (another axis, epsilon after the Sqrt, a
//! cube for the square, gamma of another shape, an intermediate read twice, a sigmoid gating
//! another tensor) are left unfused and still correct.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig};

const B: usize = 2;
const S: usize = 5;
const H: usize = 24;

/// A deterministic pseudo-random sequence in [-scale, scale).
fn noise(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
        })
        .collect()
}

fn dims(d: &[usize]) -> Vec<Dim> {
    d.iter().map(|&v| Dim::Known(v)).collect()
}

/// A model reading `x` `[B, S, H]` (plus `r` of the same dims when `residual`) and writing `y`.
fn model(opset: i64, residual: bool) -> ModelBuilder {
    let mut m = ModelBuilder::new("fusion")
        .opset(opset)
        .opset_domain("com.microsoft", 1)
        .input("x", DType::F32, &dims(&[B, S, H]));
    if residual {
        m = m.input("r", DType::F32, &dims(&[B, S, H]));
    }
    m
}

/// One-element constant.
fn scalar(m: ModelBuilder, name: &str, v: f32) -> ModelBuilder {
    m.initializer_f32(name, &[v], &[1])
}

/// ReduceMean over the given axes with keepdims, in the opset's form (attribute before 18,
/// input from 18).
fn reduce_mean(m: ModelBuilder, opset: i64, input: &str, out: &str, axes: &[i64]) -> ModelBuilder {
    if opset >= 18 {
        let axes_name = format!("{out}_axes");
        m.initializer_i64(&axes_name, axes, &[axes.len()]).node(
            "ReduceMean",
            &[input, &axes_name],
            &[out],
            Attrs::new(),
        )
    } else {
        m.node(
            "ReduceMean",
            &[input],
            &[out],
            Attrs::new().ints("axes", axes),
        )
    }
}

/// Builds and runs the model fused and unfused on the same inputs; checks the outputs agree
/// within rtol 1e-5 and returns the fused plan's op counts and fusion kinds.
fn fused_vs_unfused(m: ModelBuilder, outputs: &[&str]) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut m = m;
    for o in outputs {
        m = m.output(o, DType::F32, &dims(&[B, S, H]));
    }
    let bytes = m.to_bytes().unwrap();
    let x = Tensor::from_slice(&noise(B * S * H, 7, 3.0), &[B, S, H]).unwrap();
    let r = Tensor::from_slice(&noise(B * S * H, 8, 2.0), &[B, S, H]).unwrap();
    let run = |optimize: bool, threads: usize| {
        let config = PlanConfig {
            optimize,
            ..PlanConfig::default().with_threads(threads)
        };
        let plan: Arc<InferencePlan> =
            strata_onnx::load_bytes(bytes.clone(), "fusion", config).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("x", &x).unwrap();
        if plan.inputs().iter().any(|i| i.name == "r") {
            ctx.set_input("r", &r).unwrap();
        }
        ctx.execute().unwrap();
        let values: Vec<Vec<f32>> = (0..outputs.len())
            .map(|i| ctx.output_at(i).unwrap().to_vec::<f32>().unwrap())
            .collect();
        (plan, values)
    };
    let (_, want) = run(false, 1);
    let mut result = None;
    for threads in [1, 2] {
        let (plan, got) = run(true, threads);
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                // A near miss may compute NaN (the root of a negative mean of cubes): both must.
                assert!(
                    (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-5 * b.abs() + 1e-6,
                    "output {o} element {i}: fused {a} vs unfused {b}"
                );
            }
        }
        let kinds = plan
            .optimize_report()
            .fusions
            .iter()
            .map(|f| f.op_type.clone())
            .collect();
        result = Some((plan.op_counts(), kinds));
    }
    result.unwrap()
}

/// How a decomposed LayerNorm or RMS norm is written, or how it misses.
#[derive(Debug, Clone, Copy, Default)]
struct NormForm {
    rms: bool,
    /// `d · d` rather than `Pow(d, 2)`.
    square_by_mul: bool,
    /// `d · Reciprocal(sd)` rather than `d / sd`.
    reciprocal: bool,
    /// `gamma · n` rather than `n · gamma`.
    gamma_first: bool,
    no_beta: bool,
    // Near misses:
    /// Reduce over axis 1 instead of the last.
    other_axis: bool,
    eps_after_sqrt: bool,
    cube: bool,
    /// gamma of dims [S, H].
    gamma_per_position: bool,
    /// The squared deviations are a graph output too.
    second_reader: bool,
}

impl NormForm {
    fn misses(&self) -> bool {
        self.other_axis
            || self.eps_after_sqrt
            || self.cube
            || self.gamma_per_position
            || self.second_reader
    }
}

fn norm_model(opset: i64, f: NormForm) -> (ModelBuilder, Vec<&'static str>) {
    let axis = if f.other_axis { 1 } else { -1 };
    let mut m = model(opset, false);
    let d = if f.rms {
        "x"
    } else {
        m = reduce_mean(m, opset, "x", "mean", &[axis]);
        m = m.node("Sub", &["x", "mean"], &["d"], Attrs::new());
        "d"
    };
    m = if f.square_by_mul {
        m.node("Mul", &[d, d], &["sq"], Attrs::new())
    } else {
        scalar(m, "two", if f.cube { 3.0 } else { 2.0 }).node(
            "Pow",
            &[d, "two"],
            &["sq"],
            Attrs::new(),
        )
    };
    m = reduce_mean(m, opset, "sq", "var", &[axis]);
    m = scalar(m, "eps", 1e-5);
    m = if f.eps_after_sqrt {
        m.node("Sqrt", &["var"], &["root"], Attrs::new()).node(
            "Add",
            &["root", "eps"],
            &["sd"],
            Attrs::new(),
        )
    } else {
        m.node("Add", &["var", "eps"], &["ve"], Attrs::new()).node(
            "Sqrt",
            &["ve"],
            &["sd"],
            Attrs::new(),
        )
    };
    m = if f.reciprocal {
        m.node("Reciprocal", &["sd"], &["inv"], Attrs::new()).node(
            "Mul",
            &[d, "inv"],
            &["n"],
            Attrs::new(),
        )
    } else {
        m.node("Div", &[d, "sd"], &["n"], Attrs::new())
    };
    let gamma = if f.gamma_per_position {
        noise(S * H, 3, 1.0)
    } else {
        noise(H, 3, 1.0)
    };
    let gamma_dims = if f.gamma_per_position {
        vec![S, H]
    } else {
        vec![H]
    };
    m = m.initializer_f32("gamma", &gamma, &gamma_dims);
    let scale_inputs = if f.gamma_first {
        ["gamma", "n"]
    } else {
        ["n", "gamma"]
    };
    let last = if f.rms || f.no_beta { "y" } else { "scaled" };
    m = m.node("Mul", &scale_inputs, &[last], Attrs::new());
    if !(f.rms || f.no_beta) {
        m = m.initializer_f32("beta", &noise(H, 4, 1.0), &[H]).node(
            "Add",
            &["beta", "scaled"],
            &["y"],
            Attrs::new(),
        );
    }
    let mut outputs = vec!["y"];
    if f.second_reader {
        outputs.push("sq");
    }
    (m, outputs)
}

#[test]
fn decomposed_layer_norms_fuse_in_every_form_and_opset() {
    for opset in [13, 17, 18, 21] {
        for variant in 0..8 {
            let f = NormForm {
                square_by_mul: variant & 1 != 0,
                reciprocal: variant & 2 != 0,
                gamma_first: variant & 4 != 0,
                no_beta: variant == 5,
                ..NormForm::default()
            };
            let (m, outputs) = norm_model(opset, f);
            let (counts, kinds) = fused_vs_unfused(m, &outputs);
            let what = format!("opset {opset} {f:?}: {counts:?}");
            assert_eq!(counts.get("LayerNormalization"), Some(&1), "{what}");
            assert_eq!(counts.values().sum::<usize>(), 1, "{what}");
            assert!(kinds.contains(&"LayerNormalization".to_string()), "{what}");
        }
    }
}

#[test]
fn decomposed_rms_norms_fuse() {
    for opset in [13, 18, 21] {
        for variant in 0..4 {
            let f = NormForm {
                rms: true,
                square_by_mul: variant & 1 != 0,
                reciprocal: variant & 2 != 0,
                gamma_first: variant == 3,
                ..NormForm::default()
            };
            let (m, outputs) = norm_model(opset, f);
            let (counts, _) = fused_vs_unfused(m, &outputs);
            let what = format!("opset {opset} {f:?}: {counts:?}");
            assert_eq!(counts.get("RMSNormalization"), Some(&1), "{what}");
            assert_eq!(counts.values().sum::<usize>(), 1, "{what}");
        }
    }
}

#[test]
fn near_miss_norms_stay_unfused_and_correct() {
    let misses = [
        NormForm {
            other_axis: true,
            ..NormForm::default()
        },
        NormForm {
            eps_after_sqrt: true,
            ..NormForm::default()
        },
        NormForm {
            cube: true,
            ..NormForm::default()
        },
        NormForm {
            gamma_per_position: true,
            ..NormForm::default()
        },
        NormForm {
            second_reader: true,
            ..NormForm::default()
        },
        NormForm {
            rms: true,
            eps_after_sqrt: true,
            ..NormForm::default()
        },
        NormForm {
            rms: true,
            cube: true,
            ..NormForm::default()
        },
    ];
    for opset in [13, 18] {
        for f in misses {
            assert!(f.misses());
            let (m, outputs) = norm_model(opset, f);
            let (counts, kinds) = fused_vs_unfused(m, &outputs);
            let what = format!("opset {opset} {f:?}: {counts:?} {kinds:?}");
            assert!(!counts.contains_key("LayerNormalization"), "{what}");
            assert!(!counts.contains_key("RMSNormalization"), "{what}");
            assert!(counts.contains_key("Sqrt"), "{what}");
        }
    }
}

/// How a GELU is written after `h = x·W + b`, or how it misses.
#[derive(Debug, Clone, Copy)]
enum GeluForm {
    /// `(h · (1 + erf(h / √2))) · 0.5`
    ErfDivLate,
    /// `(h · 0.5) · (1 + erf(h · 1/√2))`
    ErfMulHalfFirst,
    /// `h · ((1 + erf(h / √2)) · 0.5)`
    ErfHalfGate,
    /// `0.5 · h · (1 + tanh(√(2/π) (h + 0.044715 · h·h·h)))`
    TanhMuls,
    /// the cube as `Pow(h, 3)`
    TanhPow,
    /// `h · (1 + 0.044715 · h²)` inside
    TanhFactored,
    /// `h · sigmoid(1.702 · h)` (QuickGelu)
    QuickGelu,
    /// `sigmoid(h · 1.702) · h`
    QuickGeluSwapped,
    /// `h · sigmoid(h)` (SiLU: QuickGelu with alpha 1)
    Silu,
    // Near misses:
    /// `erf(h / 2)`
    ErfWrongScale,
    /// `1 + erf` is also a graph output.
    ErfSecondReader,
    /// 0.044715 · h²: not the cube.
    TanhSquare,
    /// `x · sigmoid(1.702 · h)`: the gate of one tensor times another.
    SigmoidGatesOther,
    /// `1.702 · h` is also a graph output.
    SigmoidScaleSecondReader,
}

impl GeluForm {
    fn misses(self) -> bool {
        matches!(
            self,
            GeluForm::ErfWrongScale
                | GeluForm::ErfSecondReader
                | GeluForm::TanhSquare
                | GeluForm::SigmoidGatesOther
                | GeluForm::SigmoidScaleSecondReader
        )
    }
}

fn gelu_model(opset: i64, form: GeluForm) -> (ModelBuilder, Vec<&'static str>) {
    let mut m = model(opset, false)
        .initializer_f32("w", &noise(H * H, 11, 0.3), &[H, H])
        .initializer_f32("b", &noise(H, 12, 0.5), &[H])
        .node("MatMul", &["x", "w"], &["p"], Attrs::new())
        .node("Add", &["p", "b"], &["h"], Attrs::new());
    m = scalar(m, "one", 1.0);
    m = scalar(m, "half", 0.5);
    let mut outputs = vec!["y"];
    let erf_gate = |m: ModelBuilder, divisor: f32, by_mul: bool| {
        let m = if by_mul {
            scalar(m, "k", 1.0 / divisor).node("Mul", &["h", "k"], &["u"], Attrs::new())
        } else {
            scalar(m, "k", divisor).node("Div", &["h", "k"], &["u"], Attrs::new())
        };
        m.node("Erf", &["u"], &["e"], Attrs::new())
            .node("Add", &["e", "one"], &["g"], Attrs::new())
    };
    let tanh_gate = |m: ModelBuilder, inner: &str| {
        scalar(m, "s2pi", (2.0f32 / std::f32::consts::PI).sqrt())
            .node("Mul", &["s2pi", inner], &["u"], Attrs::new())
            .node("Tanh", &["u"], &["t"], Attrs::new())
            .node("Add", &["one", "t"], &["g"], Attrs::new())
    };
    let late_half = |m: ModelBuilder| {
        m.node("Mul", &["h", "g"], &["hg"], Attrs::new()).node(
            "Mul",
            &["hg", "half"],
            &["y"],
            Attrs::new(),
        )
    };
    let c = |m: ModelBuilder| scalar(m, "c", 0.044715);
    m = match form {
        GeluForm::ErfDivLate => late_half(erf_gate(m, std::f32::consts::SQRT_2, false)),
        GeluForm::ErfMulHalfFirst => erf_gate(m, std::f32::consts::SQRT_2, true)
            .node("Mul", &["half", "h"], &["hh"], Attrs::new())
            .node("Mul", &["hh", "g"], &["y"], Attrs::new()),
        GeluForm::ErfHalfGate => erf_gate(m, std::f32::consts::SQRT_2, false)
            .node("Mul", &["g", "half"], &["gh"], Attrs::new())
            .node("Mul", &["h", "gh"], &["y"], Attrs::new()),
        GeluForm::ErfWrongScale => late_half(erf_gate(m, 2.0, false)),
        GeluForm::ErfSecondReader => {
            outputs.push("g");
            late_half(erf_gate(m, std::f32::consts::SQRT_2, false))
        }
        GeluForm::TanhMuls => {
            let m = c(m)
                .node("Mul", &["h", "h"], &["h2"], Attrs::new())
                .node("Mul", &["h", "h2"], &["h3"], Attrs::new())
                .node("Mul", &["h3", "c"], &["ch3"], Attrs::new())
                .node("Add", &["h", "ch3"], &["inner"], Attrs::new());
            late_half(tanh_gate(m, "inner"))
        }
        GeluForm::TanhPow => {
            let m = scalar(c(m), "three", 3.0)
                .node("Pow", &["h", "three"], &["h3"], Attrs::new())
                .node("Mul", &["c", "h3"], &["ch3"], Attrs::new())
                .node("Add", &["ch3", "h"], &["inner"], Attrs::new());
            tanh_gate(m, "inner")
                .node("Mul", &["h", "half"], &["hh"], Attrs::new())
                .node("Mul", &["g", "hh"], &["y"], Attrs::new())
        }
        GeluForm::TanhFactored => {
            let m = c(m)
                .node("Mul", &["h", "h"], &["h2"], Attrs::new())
                .node("Mul", &["h2", "c"], &["ch2"], Attrs::new())
                .node("Add", &["one", "ch2"], &["f"], Attrs::new())
                .node("Mul", &["h", "f"], &["inner"], Attrs::new());
            late_half(tanh_gate(m, "inner"))
        }
        GeluForm::QuickGelu => scalar(m, "a", 1.702)
            .node("Mul", &["a", "h"], &["ah"], Attrs::new())
            .node("Sigmoid", &["ah"], &["sg"], Attrs::new())
            .node("Mul", &["h", "sg"], &["y"], Attrs::new()),
        GeluForm::QuickGeluSwapped => scalar(m, "a", 1.702)
            .node("Mul", &["h", "a"], &["ah"], Attrs::new())
            .node("Sigmoid", &["ah"], &["sg"], Attrs::new())
            .node("Mul", &["sg", "h"], &["y"], Attrs::new()),
        GeluForm::Silu => m.node("Sigmoid", &["h"], &["sg"], Attrs::new()).node(
            "Mul",
            &["h", "sg"],
            &["y"],
            Attrs::new(),
        ),
        GeluForm::SigmoidGatesOther => scalar(m, "a", 1.702)
            .node("Mul", &["a", "h"], &["ah"], Attrs::new())
            .node("Sigmoid", &["ah"], &["sg"], Attrs::new())
            .node("Mul", &["x", "sg"], &["y"], Attrs::new()),
        GeluForm::SigmoidScaleSecondReader => {
            outputs.push("ah");
            scalar(m, "a", 1.702)
                .node("Mul", &["a", "h"], &["ah"], Attrs::new())
                .node("Sigmoid", &["ah"], &["sg"], Attrs::new())
                .node("Mul", &["h", "sg"], &["y"], Attrs::new())
        }
        GeluForm::TanhSquare => {
            let m = c(m)
                .node("Mul", &["h", "h"], &["h2"], Attrs::new())
                .node("Mul", &["h2", "c"], &["ch2"], Attrs::new())
                .node("Add", &["h", "ch2"], &["inner"], Attrs::new());
            late_half(tanh_gate(m, "inner"))
        }
    };
    (m, outputs)
}

#[test]
fn gelu_forms_fuse_into_the_matmul_epilogue() {
    use GeluForm::*;
    for opset in [13, 17, 20] {
        for form in [
            ErfDivLate,
            ErfMulHalfFirst,
            ErfHalfGate,
            TanhMuls,
            TanhPow,
            TanhFactored,
            QuickGelu,
            QuickGeluSwapped,
            Silu,
        ] {
            let (m, outputs) = gelu_model(opset, form);
            let (counts, kinds) = fused_vs_unfused(m, &outputs);
            let what = format!("opset {opset} {form:?}: {counts:?} {kinds:?}");
            // MatMul, bias and GELU: one node.
            assert_eq!(counts.get("MatMul"), Some(&1), "{what}");
            assert_eq!(counts.values().sum::<usize>(), 1, "{what}");
            let gelu = match form {
                ErfDivLate | ErfMulHalfFirst | ErfHalfGate => "Gelu",
                QuickGelu | QuickGeluSwapped | Silu => "QuickGelu",
                _ => "FastGelu",
            };
            assert!(kinds.contains(&gelu.to_string()), "{what}");
            assert!(kinds.contains(&"MatMul".to_string()), "{what}");
        }
    }
}

#[test]
fn near_miss_gelus_stay_unfused_and_correct() {
    for form in [
        GeluForm::ErfWrongScale,
        GeluForm::ErfSecondReader,
        GeluForm::TanhSquare,
        GeluForm::SigmoidGatesOther,
        GeluForm::SigmoidScaleSecondReader,
    ] {
        assert!(form.misses());
        let (m, outputs) = gelu_model(17, form);
        let (counts, kinds) = fused_vs_unfused(m, &outputs);
        let what = format!("{form:?}: {counts:?} {kinds:?}");
        assert!(!kinds.iter().any(|k| k.contains("Gelu")), "{what}");
        assert!(
            ["Erf", "Tanh", "Sigmoid"]
                .iter()
                .any(|k| counts.contains_key(*k)),
            "{what}"
        );
        // The bias still fuses into the MatMul.
        assert_eq!(counts.get("MatMul"), Some(&1), "{what}");
    }
}

/// `s = x + r` (or `x + pos` with a `[S, H]` table), then LayerNorm, with `s` read again
/// when `reuse_sum`.
fn skip_model(
    opset: i64,
    decomposed: bool,
    reuse_sum: bool,
    table: bool,
) -> (ModelBuilder, Vec<&'static str>) {
    let mut m = model(opset, !table);
    let other = if table {
        m = m.initializer_f32("pos", &noise(S * H, 21, 1.0), &[S, H]);
        "pos"
    } else {
        "r"
    };
    m = m
        .node("Add", &["x", other], &["s"], Attrs::new())
        .initializer_f32("gamma", &noise(H, 3, 1.0), &[H])
        .initializer_f32("beta", &noise(H, 4, 1.0), &[H]);
    m = if decomposed {
        let m = reduce_mean(m, opset, "s", "mean", &[-1])
            .node("Sub", &["s", "mean"], &["d"], Attrs::new())
            .node("Mul", &["d", "d"], &["sq"], Attrs::new());
        let m = scalar(reduce_mean(m, opset, "sq", "var", &[-1]), "eps", 1e-6);
        m.node("Add", &["var", "eps"], &["ve"], Attrs::new())
            .node("Sqrt", &["ve"], &["sd"], Attrs::new())
            .node("Div", &["d", "sd"], &["n"], Attrs::new())
            .node("Mul", &["n", "gamma"], &["scaled"], Attrs::new())
            .node("Add", &["scaled", "beta"], &["y"], Attrs::new())
    } else {
        m.node(
            "LayerNormalization",
            &["s", "gamma", "beta"],
            &["y"],
            Attrs::new().float("epsilon", 1e-6),
        )
    };
    let mut outputs = vec!["y"];
    if reuse_sum {
        m = m.node("Add", &["s", "y"], &["z"], Attrs::new());
        outputs.push("z");
    }
    (m, outputs)
}

#[test]
fn residual_adds_fuse_into_skip_layer_norm() {
    for (opset, decomposed) in [(13, true), (17, false), (18, true), (21, false)] {
        for reuse_sum in [false, true] {
            for table in [false, true] {
                let (m, outputs) = skip_model(opset, decomposed, reuse_sum, table);
                let (counts, kinds) = fused_vs_unfused(m, &outputs);
                let what = format!("opset {opset} reuse {reuse_sum} table {table}: {counts:?}");
                assert_eq!(counts.get("SkipLayerNormalization"), Some(&1), "{what}");
                assert!(!counts.contains_key("LayerNormalization"), "{what}");
                assert_eq!(
                    counts.get("Add").copied().unwrap_or(0),
                    usize::from(reuse_sum),
                    "{what}"
                );
                assert!(
                    kinds.contains(&"SkipLayerNormalization".to_string()),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn a_layer_norm_over_other_axes_takes_no_skip() {
    let m = model(17, true)
        .node("Add", &["x", "r"], &["s"], Attrs::new())
        .initializer_f32("gamma", &noise(S * H, 3, 1.0), &[S, H])
        .node(
            "LayerNormalization",
            &["s", "gamma"],
            &["y"],
            Attrs::new().int("axis", 1),
        );
    let (counts, _) = fused_vs_unfused(m, &["y"]);
    assert_eq!(counts.get("LayerNormalization"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("Add"), Some(&1), "{counts:?}");
}

#[test]
fn matmul_with_bias_and_residual_on_3d_input_is_one_node() {
    let m = model(17, true)
        .initializer_f32("w", &noise(H * H, 31, 0.3), &[H, H])
        .initializer_f32("b", &noise(H, 32, 0.5), &[1, H])
        .node("MatMul", &["x", "w"], &["p"], Attrs::new())
        .node("Add", &["b", "p"], &["h"], Attrs::new())
        .node("Add", &["h", "r"], &["y"], Attrs::new());
    let (counts, kinds) = fused_vs_unfused(m, &["y"]);
    assert_eq!(counts.get("MatMul"), Some(&1), "{counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 1, "{counts:?}");
    assert_eq!(kinds, vec!["MatMul".to_string()]);
}

#[test]
fn gemm_from_a_2d_matmul_applies_bias_and_gelu_on_its_tiles() {
    let flat = [(B * S) as i64, H as i64];
    let back = [B as i64, S as i64, H as i64];
    let mut m = model(17, false)
        .initializer_i64("flat", &flat, &[2])
        .initializer_i64("back", &back, &[3])
        .initializer_f32("w", &noise(H * H, 41, 0.3), &[H, H])
        .initializer_f32("b", &noise(H, 42, 0.5), &[H])
        .node("Reshape", &["x", "flat"], &["x2"], Attrs::new())
        .node("MatMul", &["x2", "w"], &["p"], Attrs::new())
        .node("Add", &["p", "b"], &["h"], Attrs::new());
    m = scalar(
        scalar(scalar(m, "one", 1.0), "half", 0.5),
        "k",
        std::f32::consts::SQRT_2,
    )
    .node("Div", &["h", "k"], &["u"], Attrs::new())
    .node("Erf", &["u"], &["e"], Attrs::new())
    .node("Add", &["e", "one"], &["g"], Attrs::new())
    .node("Mul", &["h", "g"], &["hg"], Attrs::new())
    .node("Mul", &["hg", "half"], &["z"], Attrs::new())
    .node("Reshape", &["z", "back"], &["y"], Attrs::new());
    let (counts, kinds) = fused_vs_unfused(m, &["y"]);
    assert_eq!(counts.get("Gemm"), Some(&1), "{counts:?}");
    assert!(
        !counts.contains_key("Erf") && !counts.contains_key("Gelu"),
        "{counts:?}"
    );
    assert!(kinds.contains(&"Gemm".to_string()), "{kinds:?}");
}
