//! QDQ element-wise chains become lookup tables: `DequantizeLinear → BatchNormalization → Relu
//! → QuantizeLinear` (what onnxruntime's quantizer leaves when a model was not pre-processed)
//! runs as one `QuantizedLookup` whose results equal the float chain's exactly; near misses (a
//! float value with a second reader, per-axis parameters on another axis, a constant varying
//! along a spatial axis) keep the float graph, with the same results.

mod common;

use common::{fixed, input, noise, op, tensor};
use strata_core::Tensor;
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig, ValueId};

const DIMS: [usize; 4] = [2, 3, 5, 7];

fn constant(g: &mut Graph, name: &str, t: Tensor) -> ValueId {
    g.add_initializer(name, t).unwrap()
}

/// How the chain is spoiled, if at all.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    /// The chain as the quantizer writes it.
    Plain,
    /// The BatchNormalization output is also a graph output.
    SecondReader,
    /// The first DequantizeLinear is per axis 2 (not the channel axis).
    WrongAxis,
    /// A Mul by a constant varying along the width.
    SpatialConstant,
}

/// x → Q(u8) → DQ → BatchNormalization → Relu → Mul(c) → Q(i8, per channel) → DQ → out.
fn graph(variant: Variant) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&DIMS));
    let xs = constant(&mut g, "xs", Tensor::scalar(0.03f32).unwrap());
    let xz = constant(&mut g, "xz", Tensor::scalar(120u8).unwrap());
    let xq = op(&mut g, "QuantizeLinear", &[x, xs, xz], &["xq"], &[])[0];
    let xd = if variant == Variant::WrongAxis {
        let s = constant(
            &mut g,
            "ds",
            tensor(&[0.03, 0.02, 0.025, 0.035, 0.03], &[5]),
        );
        let z = constant(&mut g, "dz", Tensor::from_slice(&[120u8; 5], &[5]).unwrap());
        op(
            &mut g,
            "DequantizeLinear",
            &[xq, s, z],
            &["xd"],
            &[("axis", Attr::Int(2))],
        )[0]
    } else {
        op(&mut g, "DequantizeLinear", &[xq, xs, xz], &["xd"], &[])[0]
    };
    let scale = constant(&mut g, "bn_s", tensor(&[1.5, -0.7, 0.9], &[3]));
    let bias = constant(&mut g, "bn_b", tensor(&[0.1, 0.4, -0.3], &[3]));
    let mean = constant(&mut g, "bn_m", tensor(&[0.05, -0.2, 0.3], &[3]));
    let var = constant(&mut g, "bn_v", tensor(&[1.2, 0.5, 2.0], &[3]));
    let bn = op(
        &mut g,
        "BatchNormalization",
        &[xd, scale, bias, mean, var],
        &["bn"],
        &[],
    )[0];
    let relu = op(&mut g, "Relu", &[bn], &["relu"], &[])[0];
    let c = if variant == Variant::SpatialConstant {
        constant(&mut g, "c", tensor(&noise(7, 4), &[1, 1, 1, 7]))
    } else {
        constant(&mut g, "c", tensor(&[1.25, 0.5, 2.0], &[3, 1, 1]))
    };
    let m = op(&mut g, "Mul", &[relu, c], &["m"], &[])[0];
    let ys = constant(&mut g, "ys", tensor(&[0.02, 0.01, 0.05], &[3]));
    let yz = constant(
        &mut g,
        "yz",
        Tensor::from_slice(&[-100i8, 0, -128], &[3]).unwrap(),
    );
    let yq = op(&mut g, "QuantizeLinear", &[m, ys, yz], &["yq"], &[])[0];
    let out = op(&mut g, "DequantizeLinear", &[yq, ys, yz], &["out"], &[])[0];
    if variant == Variant::SecondReader {
        g.set_outputs(&[out, bn]);
    } else {
        g.set_outputs(&[out]);
    }
    g
}

fn run(variant: Variant, optimize: bool) -> (Vec<f32>, usize) {
    let mut config = PlanConfig::default().with_threads(2);
    config.optimize = optimize;
    let plan = InferencePlan::build(graph(variant), config).unwrap();
    let mut ctx = plan.create_context().unwrap();
    let numel = DIMS.iter().product();
    let x: Vec<f32> = noise(numel, 7).iter().map(|v| v * 4.0).collect();
    ctx.set_input("x", &tensor(&x, &DIMS)).unwrap();
    ctx.execute().unwrap();
    let out = ctx.output("out").unwrap().to_vec::<f32>().unwrap();
    (out, plan.optimize_report().quantized)
}

#[test]
fn a_batch_norm_relu_scale_chain_becomes_one_exact_lookup() {
    let (got, quantized) = run(Variant::Plain, true);
    assert_eq!(quantized, 1, "the chain's QuantizeLinear became a lookup");
    let (want, _) = run(Variant::Plain, false);
    assert_eq!(got, want);
    // The values span several steps, so equality says something.
    let distinct: std::collections::BTreeSet<u32> = got.iter().map(|v| v.to_bits()).collect();
    assert!(distinct.len() > 20, "{} distinct outputs", distinct.len());
}

#[test]
fn near_misses_keep_the_float_chain_and_its_results() {
    for variant in [
        Variant::SecondReader,
        Variant::WrongAxis,
        Variant::SpatialConstant,
    ] {
        let (got, quantized) = run(variant, true);
        assert_eq!(quantized, 0, "{variant:?} is left alone");
        let (want, _) = run(variant, false);
        assert_eq!(got, want, "{variant:?}");
    }
}
