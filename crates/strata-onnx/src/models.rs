//! Small models built by our own code with seeded weights: the CLI's built-in default, and the
//! models tests and benchmarks run end to end. Nothing is downloaded.

use strata_core::DType;

use crate::{Attrs, Dim, ModelBuilder};

/// Deterministic weights: xorshift64* mapped to `[-scale, scale)`.
pub fn seeded_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    seeded_stream(seed, scale).take(n).collect()
}

/// The endless stream [`seeded_values`] takes its first `n` values from, for filling memory that
/// is already allocated.
pub fn seeded_stream(seed: u64, scale: f32) -> impl Iterator<Item = f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    })
}

/// A ResNet-style CNN on `[N, 3, size, size]` images: a 3×3 stem with BatchNorm and Relu, a max
/// pool, `blocks` residual blocks (conv-bn-relu-conv-bn + identity, relu), global average pool,
/// flatten and a Gemm classifier with `classes` outputs.
pub fn resnet_like(
    batch: Dim,
    size: usize,
    width: usize,
    blocks: usize,
    classes: usize,
    seed: u64,
) -> ModelBuilder {
    let mut b = ModelBuilder::new("strata-resnet-like")
        .opset(17)
        .input(
            "input",
            DType::F32,
            &[
                batch.clone(),
                Dim::Known(3),
                Dim::Known(size),
                Dim::Known(size),
            ],
        )
        .output("logits", DType::F32, &[batch, Dim::Known(classes)]);
    let mut seed = seed;
    let mut next_seed = || {
        seed += 1;
        seed
    };
    let mut conv_bn =
        |b: ModelBuilder, name: &str, input: &str, cin: usize, cout: usize, relu: bool| {
            let fan_in = (cin * 9) as f32;
            let w = seeded_values(cout * cin * 9, next_seed(), (2.0 / fan_in).sqrt());
            let gamma: Vec<f32> = seeded_values(cout, next_seed(), 0.1)
                .iter()
                .map(|v| 1.0 + v)
                .collect();
            let beta = seeded_values(cout, next_seed(), 0.1);
            let mean = seeded_values(cout, next_seed(), 0.1);
            let var: Vec<f32> = seeded_values(cout, next_seed(), 0.1)
                .iter()
                .map(|v| 1.0 + v.abs())
                .collect();
            let out = if relu {
                format!("{name}_bn")
            } else {
                format!("{name}_out")
            };
            let b = b
                .initializer_f32(&format!("{name}_w"), &w, &[cout, cin, 3, 3])
                .initializer_f32(&format!("{name}_gamma"), &gamma, &[cout])
                .initializer_f32(&format!("{name}_beta"), &beta, &[cout])
                .initializer_f32(&format!("{name}_mean"), &mean, &[cout])
                .initializer_f32(&format!("{name}_var"), &var, &[cout])
                .named_node(
                    &format!("{name}_conv"),
                    "Conv",
                    &[input, &format!("{name}_w")],
                    &[&format!("{name}_c")],
                    Attrs::new().ints("pads", &[1, 1, 1, 1]),
                )
                .named_node(
                    &format!("{name}_batchnorm"),
                    "BatchNormalization",
                    &[
                        &format!("{name}_c"),
                        &format!("{name}_gamma"),
                        &format!("{name}_beta"),
                        &format!("{name}_mean"),
                        &format!("{name}_var"),
                    ],
                    &[&out],
                    Attrs::new().float("epsilon", 1e-5),
                );
            if relu {
                b.named_node(
                    &format!("{name}_relu"),
                    "Relu",
                    &[&out],
                    &[&format!("{name}_out")],
                    Attrs::new(),
                )
            } else {
                b
            }
        };
    b = conv_bn(b, "stem", "input", 3, width, true);
    b = b.named_node(
        "pool",
        "MaxPool",
        &["stem_out"],
        &["block0_in"],
        Attrs::new()
            .ints("kernel_shape", &[2, 2])
            .ints("strides", &[2, 2]),
    );
    for i in 0..blocks {
        let input = format!("block{i}_in");
        b = conv_bn(b, &format!("block{i}_a"), &input, width, width, true);
        b = conv_bn(
            b,
            &format!("block{i}_b"),
            &format!("block{i}_a_out"),
            width,
            width,
            false,
        );
        b = b
            .named_node(
                &format!("block{i}_add"),
                "Add",
                &[&format!("block{i}_b_out"), &input],
                &[&format!("block{i}_sum")],
                Attrs::new(),
            )
            .named_node(
                &format!("block{i}_relu"),
                "Relu",
                &[&format!("block{i}_sum")],
                &[&format!("block{}_in", i + 1)],
                Attrs::new(),
            );
    }
    let fc_w = seeded_values(classes * width, 9_001 + seed, (1.0 / width as f32).sqrt());
    let fc_b = seeded_values(classes, 9_002 + seed, 0.1);
    b.named_node(
        "gap",
        "GlobalAveragePool",
        &[&format!("block{blocks}_in")],
        &["gap_out"],
        Attrs::new(),
    )
    .named_node(
        "flatten",
        "Flatten",
        &["gap_out"],
        &["features"],
        Attrs::new().int("axis", 1),
    )
    .initializer_f32("fc_w", &fc_w, &[classes, width])
    .initializer_f32("fc_b", &fc_b, &[classes])
    .named_node(
        "fc",
        "Gemm",
        &["features", "fc_w", "fc_b"],
        &["logits"],
        Attrs::new().int("transB", 1),
    )
}

/// The CLI's built-in default: a ResNet-style network on one 3×64×64 image.
pub fn default_model() -> ModelBuilder {
    resnet_like(Dim::Known(1), 64, 32, 3, 10, 42)
}

/// The built-in models by file name, as `strata export` writes them (and the Python package's
/// `strata.export_builtin_models`), for side-by-side runs with other runtimes.
pub fn builtin() -> Vec<(&'static str, ModelBuilder)> {
    vec![
        ("resnet_like.onnx", default_model()),
        (
            "resnet_like_batch.onnx",
            resnet_like(Dim::sym("N"), 64, 32, 3, 10, 42),
        ),
        ("mlp.onnx", mlp(Dim::sym("N"), 256, 512, 10, 7)),
        ("transformer_like.onnx", transformer_like(64, 128, 256, 11)),
    ]
}

/// A two-layer perceptron `[N, inputs] → hidden (Relu) → outputs (Softmax)`.
pub fn mlp(batch: Dim, inputs: usize, hidden: usize, outputs: usize, seed: u64) -> ModelBuilder {
    ModelBuilder::new("strata-mlp")
        .opset(17)
        .input("x", DType::F32, &[batch.clone(), Dim::Known(inputs)])
        .output("probs", DType::F32, &[batch, Dim::Known(outputs)])
        .initializer_f32(
            "w1",
            &seeded_values(inputs * hidden, seed, (2.0 / inputs as f32).sqrt()),
            &[inputs, hidden],
        )
        .initializer_f32("b1", &seeded_values(hidden, seed + 1, 0.1), &[hidden])
        .initializer_f32(
            "w2",
            &seeded_values(hidden * outputs, seed + 2, (1.0 / hidden as f32).sqrt()),
            &[hidden, outputs],
        )
        .initializer_f32("b2", &seeded_values(outputs, seed + 3, 0.1), &[outputs])
        .named_node("fc1", "MatMul", &["x", "w1"], &["h"], Attrs::new())
        .named_node("fc1_bias", "Add", &["h", "b1"], &["hb"], Attrs::new())
        .named_node("relu", "Relu", &["hb"], &["a"], Attrs::new())
        .named_node("fc2", "Gemm", &["a", "w2", "b2"], &["logits"], Attrs::new())
        .named_node(
            "softmax",
            "Softmax",
            &["logits"],
            &["probs"],
            Attrs::new().int("axis", -1),
        )
}

/// One transformer-style block on `[1, seq, dim]`: single-head self-attention
/// (Q/K/V projections, scaled QKᵀ, softmax, ·V, output projection, residual) then a Relu
/// feed-forward layer with a residual.
pub fn transformer_like(seq: usize, dim: usize, hidden: usize, seed: u64) -> ModelBuilder {
    let s = (1.0 / dim as f32).sqrt();
    let mut b = ModelBuilder::new("strata-transformer-like")
        .opset(17)
        .input(
            "x",
            DType::F32,
            &[Dim::Known(1), Dim::Known(seq), Dim::Known(dim)],
        )
        .output(
            "y",
            DType::F32,
            &[Dim::Known(1), Dim::Known(seq), Dim::Known(dim)],
        );
    for (i, name) in ["wq", "wk", "wv", "wo"].iter().enumerate() {
        b = b.initializer_f32(
            name,
            &seeded_values(dim * dim, seed + i as u64, s),
            &[dim, dim],
        );
    }
    b.initializer_f32(
        "w1",
        &seeded_values(dim * hidden, seed + 10, s),
        &[dim, hidden],
    )
    .initializer_f32("b1", &seeded_values(hidden, seed + 11, 0.1), &[hidden])
    .initializer_f32(
        "w2",
        &seeded_values(hidden * dim, seed + 12, (1.0 / hidden as f32).sqrt()),
        &[hidden, dim],
    )
    .initializer_f32("scale", &[1.0 / (dim as f32).sqrt()], &[])
    .initializer_i64("flat_shape", &[seq as i64, dim as i64], &[2])
    .initializer_i64("batched_shape", &[1, seq as i64, dim as i64], &[3])
    .named_node("q", "MatMul", &["x", "wq"], &["q"], Attrs::new())
    .named_node("k", "MatMul", &["x", "wk"], &["k"], Attrs::new())
    .named_node("v", "MatMul", &["x", "wv"], &["v"], Attrs::new())
    .named_node(
        "kt",
        "Transpose",
        &["k"],
        &["kt"],
        Attrs::new().ints("perm", &[0, 2, 1]),
    )
    .named_node("scores", "MatMul", &["q", "kt"], &["scores"], Attrs::new())
    .named_node(
        "scaled",
        "Mul",
        &["scores", "scale"],
        &["scaled"],
        Attrs::new(),
    )
    .named_node(
        "attn",
        "Softmax",
        &["scaled"],
        &["attn"],
        Attrs::new().int("axis", -1),
    )
    .named_node(
        "context",
        "MatMul",
        &["attn", "v"],
        &["context"],
        Attrs::new(),
    )
    .named_node(
        "proj",
        "MatMul",
        &["context", "wo"],
        &["proj"],
        Attrs::new(),
    )
    .named_node("res1", "Add", &["x", "proj"], &["res1"], Attrs::new())
    .named_node(
        "flat",
        "Reshape",
        &["res1", "flat_shape"],
        &["flat"],
        Attrs::new(),
    )
    .named_node("ff1", "Gemm", &["flat", "w1", "b1"], &["ff1"], Attrs::new())
    .named_node("ff_relu", "Relu", &["ff1"], &["ff_act"], Attrs::new())
    .named_node("ff2", "MatMul", &["ff_act", "w2"], &["ff2"], Attrs::new())
    .named_node(
        "unflat",
        "Reshape",
        &["ff2", "batched_shape"],
        &["ff_out"],
        Attrs::new(),
    )
    .named_node("res2", "Add", &["res1", "ff_out"], &["y"], Attrs::new())
}
