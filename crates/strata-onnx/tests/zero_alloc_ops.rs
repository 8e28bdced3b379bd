//! In steady state `ExecutionContext::execute` performs no heap allocation (R3) for the operators
//! whose kernels carve their working memory out of planned scratch: the recurrent cells (RNN,
//! GRU, LSTM), DFT, the quantization kernels (QLinearConv, QLinearMatMul, ConvInteger,
//! MatMulInteger, DynamicQuantizeLinear, QuantizeLinear, DequantizeLinear), Einsum and Det. Each
//! operator runs in a small model of its own, so a failure names the operator.
//! See `alloc_counter` for how allocations are counted (and `STRATA_ALLOC_BACKTRACE=1`).

mod alloc_counter;

use strata_core::{DType, Tensor};
use strata_onnx::{models, Attrs, Dim, ModelBuilder};
use strata_runtime::PlanConfig;

use alloc_counter::allocations_during;

/// Every output's bytes (copied into fresh tensors, so views of the arena compare by value).
fn snapshot(ctx: &strata_runtime::ExecutionContext) -> Vec<Vec<u8>> {
    ctx.outputs()
        .unwrap()
        .iter()
        .map(|o| {
            let t = o.to_tensor().unwrap();
            let len = t.size_in_bytes().unwrap();
            let bytes = t.read_bytes("test").unwrap().bytes()[..len].to_vec();
            bytes
        })
        .collect()
}

/// Loads `model` (one thread), binds `inputs`, runs it twice to warm up, then counts the
/// allocations of three more runs. The steady runs must repeat the warm-up's outputs.
fn steady_state_allocations(model: ModelBuilder, inputs: &[(&str, Tensor)]) -> usize {
    let bytes = model.to_bytes().unwrap();
    let plan =
        strata_onnx::load_bytes(bytes, "test", PlanConfig::default().with_threads(1)).unwrap();
    let mut ctx = plan.create_context().unwrap();
    for (name, tensor) in inputs {
        ctx.set_input(name, tensor).unwrap();
    }
    ctx.execute().unwrap();
    ctx.execute().unwrap();
    let first = snapshot(&ctx);
    let count = allocations_during(|| {
        for _ in 0..3 {
            for (name, tensor) in inputs {
                ctx.set_input(name, tensor).unwrap();
            }
            ctx.execute().unwrap();
        }
    });
    assert_eq!(snapshot(&ctx), first, "steady runs must repeat the result");
    count
}

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

fn f32_input(dims: &[usize], seed: u64) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_slice(&models::seeded_values(n, seed, 1.0), dims).unwrap()
}

fn u8_input(dims: &[usize], seed: u64) -> Tensor {
    let n = dims.iter().product();
    let values: Vec<u8> = models::seeded_values(n, seed, 1.0)
        .iter()
        .map(|v| ((v + 1.0) * 127.0) as u8)
        .collect();
    Tensor::from_slice(&values, dims).unwrap()
}

/// One recurrent node over X [seq 5, batch 3, input 4] with hidden size 6, bias, initial state
/// and per-entry sequence lengths.
fn recurrent_model(op: &str, gates: usize, attrs: Attrs) -> ModelBuilder {
    let (seq, batch, input, hidden, dirs) = (5, 3, 4, 6, 2);
    let rows = gates * hidden;
    let mut model = ModelBuilder::new(op)
        .opset(21)
        .input("x", DType::F32, &fixed(&[seq, batch, input]))
        .initializer_f32(
            "w",
            &models::seeded_values(dirs * rows * input, 11, 0.5),
            &[dirs, rows, input],
        )
        .initializer_f32(
            "r",
            &models::seeded_values(dirs * rows * hidden, 12, 0.5),
            &[dirs, rows, hidden],
        )
        .initializer_f32(
            "b",
            &models::seeded_values(dirs * 2 * rows, 13, 0.5),
            &[dirs, 2 * rows],
        )
        .initializer_values("lens", &[5i32, 3, 4], &[batch])
        .initializer_f32(
            "h0",
            &models::seeded_values(dirs * batch * hidden, 14, 0.5),
            &[dirs, batch, hidden],
        );
    let mut inputs = vec!["x", "w", "r", "b", "lens", "h0"];
    let mut outputs = vec!["y", "y_h"];
    if op == "LSTM" {
        model = model
            .initializer_f32(
                "c0",
                &models::seeded_values(dirs * batch * hidden, 15, 0.5),
                &[dirs, batch, hidden],
            )
            .initializer_f32(
                "p",
                &models::seeded_values(dirs * 3 * hidden, 16, 0.5),
                &[dirs, 3 * hidden],
            );
        inputs.extend(["c0", "p"]);
        outputs.push("y_c");
    }
    let attrs = attrs
        .int("hidden_size", hidden as i64)
        .string("direction", "bidirectional");
    let mut model = model.node(op, &inputs, &outputs, attrs);
    for name in outputs {
        model = model.output_unranked(name, DType::F32);
    }
    model
}

#[test]
fn recurrent_cells_do_not_allocate() {
    let x = f32_input(&[5, 3, 4], 3);
    for (op, gates, attrs) in [
        ("RNN", 1, Attrs::new()),
        ("GRU", 3, Attrs::new()),
        ("GRU", 3, Attrs::new().int("linear_before_reset", 1)),
        ("LSTM", 4, Attrs::new()),
    ] {
        let model = recurrent_model(op, gates, attrs);
        assert_eq!(
            steady_state_allocations(model, &[("x", x.clone())]),
            0,
            "{op}"
        );
    }
}

#[test]
fn dft_does_not_allocate() {
    // 12 is not a power of two (Bluestein's algorithm), 16 is (radix 2).
    for (len, onesided, inverse) in [(12, 1, 0), (16, 0, 0), (12, 0, 1)] {
        let model = ModelBuilder::new("dft")
            .opset(20)
            .input("x", DType::F32, &fixed(&[2, len, 2]))
            .node(
                "DFT",
                &["x"],
                &["y"],
                Attrs::new()
                    .int("onesided", onesided)
                    .int("inverse", inverse),
            )
            .output_unranked("y", DType::F32);
        let x = f32_input(&[2, len, 2], 4);
        assert_eq!(
            steady_state_allocations(model, &[("x", x)]),
            0,
            "DFT of length {len}, onesided {onesided}, inverse {inverse}"
        );
    }
}

/// Scalar quantization parameters as initializers.
fn quant_params(model: ModelBuilder, prefix: &str, scale: f32, zero_point: u8) -> ModelBuilder {
    model
        .initializer_f32(&format!("{prefix}_scale"), &[scale], &[])
        .initializer_values(&format!("{prefix}_zp"), &[zero_point], &[])
}

#[test]
fn quantized_products_do_not_allocate() {
    // QLinearConv with per-channel weight scales and zero points, and a bias.
    let model =
        ModelBuilder::new("qlinear_conv")
            .opset(21)
            .input("x", DType::U8, &fixed(&[1, 3, 8, 8]));
    let model = quant_params(model, "x", 0.05, 120);
    let model = quant_params(model, "y", 0.2, 100)
        .initializer_values(
            "w",
            &u8_input(&[4, 3, 3, 3], 21).to_vec::<u8>().unwrap(),
            &[4, 3, 3, 3],
        )
        .initializer_f32("w_scale", &[0.01, 0.02, 0.03, 0.04], &[4])
        .initializer_values("w_zp", &[120u8, 125, 130, 128], &[4])
        .initializer_values("bias", &[10i32, -20, 30, -40], &[4])
        .node(
            "QLinearConv",
            &[
                "x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias",
            ],
            &["y"],
            Attrs::new().ints("pads", &[1, 1, 1, 1]),
        )
        .output_unranked("y", DType::U8);
    let x = u8_input(&[1, 3, 8, 8], 5);
    assert_eq!(
        steady_state_allocations(model, &[("x", x.clone())]),
        0,
        "QLinearConv"
    );

    // ConvInteger on the same input.
    let model = ModelBuilder::new("conv_integer")
        .opset(21)
        .input("x", DType::U8, &fixed(&[1, 3, 8, 8]))
        .initializer_values(
            "w",
            &u8_input(&[4, 3, 3, 3], 22).to_vec::<u8>().unwrap(),
            &[4, 3, 3, 3],
        )
        .initializer_values("x_zp", &[128u8], &[])
        .initializer_values("w_zp", &[120u8, 125, 130, 128], &[4])
        .node(
            "ConvInteger",
            &["x", "w", "x_zp", "w_zp"],
            &["y"],
            Attrs::new(),
        )
        .output_unranked("y", DType::I32);
    assert_eq!(
        steady_state_allocations(model, &[("x", x)]),
        0,
        "ConvInteger"
    );

    // QLinearMatMul with a batch of A against a shared B, per-column B parameters.
    let model =
        ModelBuilder::new("qlinear_matmul")
            .opset(21)
            .input("a", DType::U8, &fixed(&[2, 5, 7]));
    let model = quant_params(model, "a", 0.05, 120);
    let model = quant_params(model, "y", 0.3, 110)
        .initializer_values("b", &u8_input(&[7, 3], 23).to_vec::<u8>().unwrap(), &[7, 3])
        .initializer_f32("b_scale", &[0.01, 0.02, 0.03], &[3])
        .initializer_values("b_zp", &[120u8, 125, 130], &[3])
        .node(
            "QLinearMatMul",
            &[
                "a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp",
            ],
            &["y"],
            Attrs::new(),
        )
        .output_unranked("y", DType::U8);
    let a = u8_input(&[2, 5, 7], 6);
    assert_eq!(
        steady_state_allocations(model, &[("a", a.clone())]),
        0,
        "QLinearMatMul"
    );

    // MatMulInteger with per-row A zero points.
    let model = ModelBuilder::new("matmul_integer")
        .opset(21)
        .input("a", DType::U8, &fixed(&[2, 5, 7]))
        .initializer_values("b", &u8_input(&[7, 3], 24).to_vec::<u8>().unwrap(), &[7, 3])
        .initializer_values("a_zp", &[120u8, 121, 122, 123, 124], &[5])
        .initializer_values("b_zp", &[128u8], &[])
        .node(
            "MatMulInteger",
            &["a", "b", "a_zp", "b_zp"],
            &["y"],
            Attrs::new(),
        )
        .output_unranked("y", DType::I32);
    assert_eq!(
        steady_state_allocations(model, &[("a", a)]),
        0,
        "MatMulInteger"
    );
}

#[test]
fn quantize_and_dequantize_do_not_allocate() {
    let model = ModelBuilder::new("dynamic_quantize")
        .opset(21)
        .input("x", DType::F32, &fixed(&[4, 6]))
        .node(
            "DynamicQuantizeLinear",
            &["x"],
            &["y", "y_scale", "y_zp"],
            Attrs::new(),
        )
        .output_unranked("y", DType::U8)
        .output_unranked("y_scale", DType::F32)
        .output_unranked("y_zp", DType::U8);
    let x = f32_input(&[4, 6], 7);
    assert_eq!(
        steady_state_allocations(model, &[("x", x.clone())]),
        0,
        "DynamicQuantizeLinear"
    );

    // QuantizeLinear per axis 1, then DequantizeLinear back to f32.
    let model = ModelBuilder::new("quantize_dequantize")
        .opset(21)
        .input("x", DType::F32, &fixed(&[4, 6]))
        .initializer_f32("scale", &[0.01, 0.02, 0.03, 0.04, 0.05, 0.06], &[6])
        .initializer_values("zp", &[120u8, 121, 122, 123, 124, 125], &[6])
        .node(
            "QuantizeLinear",
            &["x", "scale", "zp"],
            &["q"],
            Attrs::new().int("axis", 1),
        )
        .node(
            "DequantizeLinear",
            &["q", "scale", "zp"],
            &["y"],
            Attrs::new().int("axis", 1),
        )
        .output_unranked("y", DType::F32);
    assert_eq!(
        steady_state_allocations(model, &[("x", x)]),
        0,
        "QuantizeLinear / DequantizeLinear"
    );
}

#[test]
fn einsum_and_det_do_not_allocate() {
    for equation in ["bij,bjk->bik", "ii->i", "bij,jk,bk->bi"] {
        let (model, inputs) = match equation {
            "bij,bjk->bik" => (
                ModelBuilder::new("einsum")
                    .opset(21)
                    .input("a", DType::F32, &fixed(&[2, 3, 4]))
                    .initializer_f32("b", &models::seeded_values(40, 31, 1.0), &[2, 4, 5])
                    .node(
                        "Einsum",
                        &["a", "b"],
                        &["y"],
                        Attrs::new().string("equation", equation),
                    ),
                vec![("a", f32_input(&[2, 3, 4], 8))],
            ),
            "ii->i" => (
                ModelBuilder::new("einsum")
                    .opset(21)
                    .input("a", DType::F32, &fixed(&[4, 4]))
                    .node(
                        "Einsum",
                        &["a"],
                        &["y"],
                        Attrs::new().string("equation", equation),
                    ),
                vec![("a", f32_input(&[4, 4], 9))],
            ),
            _ => (
                ModelBuilder::new("einsum")
                    .opset(21)
                    .input("a", DType::F32, &fixed(&[2, 3, 4]))
                    .initializer_f32("b", &models::seeded_values(20, 32, 1.0), &[4, 5])
                    .initializer_f32("c", &models::seeded_values(10, 33, 1.0), &[2, 5])
                    .node(
                        "Einsum",
                        &["a", "b", "c"],
                        &["y"],
                        Attrs::new().string("equation", equation),
                    ),
                vec![("a", f32_input(&[2, 3, 4], 10))],
            ),
        };
        let model = model.output_unranked("y", DType::F32);
        assert_eq!(
            steady_state_allocations(model, &inputs),
            0,
            "Einsum {equation}"
        );
    }

    let model = ModelBuilder::new("det")
        .opset(21)
        .input("x", DType::F32, &fixed(&[3, 4, 4]))
        .node("Det", &["x"], &["y"], Attrs::new())
        .output_unranked("y", DType::F32);
    assert_eq!(
        steady_state_allocations(model, &[("x", f32_input(&[3, 4, 4], 11))]),
        0,
        "Det"
    );
}

#[test]
fn the_counter_sees_an_allocation() {
    assert!(allocations_during(|| drop(std::hint::black_box(vec![1u8; 64]))) >= 1);
}
