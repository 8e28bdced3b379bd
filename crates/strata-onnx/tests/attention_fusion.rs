//! Attention fusion on models written by our builder the ways exporters write attention (BERT's
//! head split with K transposed by the split, GPT-2's fused QKV Split with a causal Where,
//! torch's SDPA export scaling Q and K): the fused plan runs one FusedAttention node per block
//! and gives the unfused plan's outputs; near-misses stay unfused and still correct.

mod alloc_counter;

use strata_core::{DType, Tensor};
use strata_onnx::{models, Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// K split with perm [0, 2, 3, 1] (already transposed), Div by √d after the MatMul.
    Bert,
    /// One QKV projection Split in three, K split like Q then Transpose [0, 1, 3, 2], causal
    /// `Where(tril, s, -1e4)`.
    Gpt2,
    /// Q and K each multiplied by d^-1/4 before the MatMul (torch's SDPA export).
    Sdpa,
}

#[derive(Clone, Debug)]
enum Mask {
    None,
    /// An f32 graph input of these dims, added to the scores.
    Input(Vec<usize>),
    /// An additive lower-triangular constant `[1, 1, S, S]` (0 / -1e9).
    Triangular,
}

#[derive(Clone, Debug)]
struct Spec {
    form: Form,
    batch: usize,
    seq: usize,
    heads: usize,
    head_dim: usize,
    opset: i64,
    mask: Mask,
    /// Softmax axis (-1 unless testing a near-miss).
    axis: i64,
    /// The scale as a constant of these dims with varying values instead of a scalar.
    vector_scale: bool,
    /// The scaled scores are also a graph output.
    scores_output: bool,
    /// The model ends after P·V (no head merge).
    no_merge: bool,
    /// BERT's projections: a bias Add after Q's and V's MatMul (K's has none).
    biases: bool,
}

impl Spec {
    fn new(form: Form, batch: usize, seq: usize, heads: usize, head_dim: usize) -> Spec {
        Spec {
            form,
            batch,
            seq,
            heads,
            head_dim,
            opset: 17,
            mask: Mask::None,
            axis: -1,
            vector_scale: false,
            scores_output: false,
            no_merge: false,
            biases: false,
        }
    }

    fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }
}

fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    models::seeded_values(n, seed, scale)
}

/// One attention layer on `x [B, S, hidden]`, as `spec` says.
fn model(spec: &Spec) -> ModelBuilder {
    let (b, s, h, d) = (spec.batch, spec.seq, spec.heads, spec.head_dim);
    let hd = spec.hidden();
    let i = |x: usize| x as i64;
    let mut m = ModelBuilder::new("attention")
        .opset(spec.opset)
        .input(
            "x",
            DType::F32,
            &[Dim::Known(b), Dim::Known(s), Dim::Known(hd)],
        )
        .initializer_i64("split_shape", &[i(b), i(s), i(h), i(d)], &[4])
        .initializer_i64("merge_shape", &[i(b), i(s), i(hd)], &[3]);
    let w = 1.0 / (hd as f32).sqrt();
    // Projections.
    if spec.form == Form::Gpt2 {
        m = m
            .initializer_f32("wqkv", &values(hd * 3 * hd, 1, w), &[hd, 3 * hd])
            .initializer_i64("qkv_split", &[i(hd), i(hd), i(hd)], &[3])
            .node("MatMul", &["x", "wqkv"], &["qkv"], Attrs::new())
            .node(
                "Split",
                &["qkv", "qkv_split"],
                &["q", "k", "v"],
                Attrs::new().int("axis", -1),
            );
    } else {
        for (n, name) in ["q", "k", "v"].iter().enumerate() {
            let wname = format!("w{name}");
            m = m.initializer_f32(&wname, &values(hd * hd, 2 + n as u64, w), &[hd, hd]);
            if spec.biases && *name != "k" {
                let (p, bname) = (format!("{name}_product"), format!("b{name}"));
                m = m
                    .initializer_f32(&bname, &values(hd, 20 + n as u64, 1.0), &[hd])
                    .node("MatMul", &["x", &wname], &[&p], Attrs::new())
                    .node("Add", &[&p, &bname], &[name], Attrs::new());
            } else {
                m = m.node("MatMul", &["x", &wname], &[name], Attrs::new());
            }
        }
    }
    // Head split.
    let split = |m: ModelBuilder, name: &str, perm: &[i64]| {
        let r = format!("{name}_4d");
        m.node("Reshape", &[name, "split_shape"], &[&r], Attrs::new())
            .node(
                "Transpose",
                &[&r],
                &[&format!("{name}h")],
                Attrs::new().ints("perm", perm),
            )
    };
    m = split(m, "q", &[0, 2, 1, 3]);
    m = split(m, "v", &[0, 2, 1, 3]);
    let root = (d as f32).sqrt();
    let scores = match spec.form {
        Form::Bert => {
            split(m, "k", &[0, 2, 3, 1]).node("MatMul", &["qh", "kh"], &["raw"], Attrs::new())
        }
        Form::Gpt2 => split(m, "k", &[0, 2, 1, 3])
            .node(
                "Transpose",
                &["kh"],
                &["kt"],
                Attrs::new().ints("perm", &[0, 1, 3, 2]),
            )
            .node("MatMul", &["qh", "kt"], &["raw"], Attrs::new()),
        Form::Sdpa => split(m, "k", &[0, 2, 1, 3])
            .initializer_f32("quarter", &[1.0 / root.sqrt()], &[])
            .node("Mul", &["qh", "quarter"], &["qs"], Attrs::new())
            .node(
                "Transpose",
                &["kh"],
                &["kt"],
                Attrs::new().ints("perm", &[0, 1, 3, 2]),
            )
            .node("Mul", &["kt", "quarter"], &["ks"], Attrs::new())
            .node("MatMul", &["qs", "ks"], &["raw"], Attrs::new()),
    };
    m = scores;
    // Scale (the SDPA form scaled its operands already).
    let mut at = "raw".to_string();
    if spec.form != Form::Sdpa {
        if spec.vector_scale {
            let c: Vec<f32> = (0..s).map(|j| root + j as f32 * 0.5).collect();
            m = m.initializer_f32("root", &c, &[1, 1, 1, s]);
        } else {
            m = m.initializer_f32("root", &[root], &[]);
        }
        m = m.node("Div", &["raw", "root"], &["scaled"], Attrs::new());
        at = "scaled".into();
    }
    match &spec.mask {
        Mask::None => {}
        Mask::Input(dims) => {
            let dims: Vec<Dim> = dims.iter().map(|&x| Dim::Known(x)).collect();
            m = m.input("mask", DType::F32, &dims).node(
                "Add",
                &[&at, "mask"],
                &["masked"],
                Attrs::new(),
            );
            at = "masked".into();
        }
        Mask::Triangular => {
            let tri: Vec<f32> = (0..s * s)
                .map(|x| if x % s <= x / s { 0.0 } else { -1e9 })
                .collect();
            m = m.initializer_f32("tri", &tri, &[1, 1, s, s]).node(
                "Add",
                &["tri", &at],
                &["masked"],
                Attrs::new(),
            );
            at = "masked".into();
        }
    }
    if spec.form == Form::Gpt2 {
        let causal: Vec<bool> = (0..s * s).map(|x| x % s <= x / s).collect();
        m = m
            .initializer(
                "causal",
                &Tensor::from_bools(&causal, &[1, 1, s, s]).unwrap(),
            )
            .initializer_f32("neg", &[-1e4], &[])
            .node(
                "Where",
                &["causal", &at, "neg"],
                &["selected"],
                Attrs::new(),
            );
        at = "selected".into();
    }
    let softmax_attrs = if spec.opset >= 13 || spec.axis != -1 {
        Attrs::new().int("axis", spec.axis)
    } else {
        Attrs::new()
    };
    m = m.node("Softmax", &[&at], &["probs"], softmax_attrs).node(
        "MatMul",
        &["probs", "vh"],
        &["ctx"],
        Attrs::new(),
    );
    let out_dims = if spec.no_merge {
        Vec::new()
    } else {
        m = m
            .node(
                "Transpose",
                &["ctx"],
                &["ctx_t"],
                Attrs::new().ints("perm", &[0, 2, 1, 3]),
            )
            .node(
                "Reshape",
                &["ctx_t", "merge_shape"],
                &["merged"],
                Attrs::new(),
            );
        vec![Dim::Known(b), Dim::Known(s), Dim::Known(hd)]
    };
    let out = if spec.no_merge { "ctx" } else { "merged" };
    m = m.node("Identity", &[out], &["y"], Attrs::new());
    m = if spec.no_merge {
        m.output_unranked("y", DType::F32)
    } else {
        m.output("y", DType::F32, &out_dims)
    };
    if spec.scores_output {
        m = m.output_unranked(&at, DType::F32);
    }
    m
}

/// Runs `spec`'s model fused and unfused on seeded inputs; returns (FusedAttention nodes in the
/// fused plan, the plan's fusion list as text).
fn check(spec: &Spec, threads: usize) -> (usize, String) {
    let (fused, text, _) = check_plan(spec, threads);
    (fused, text)
}

/// As [`check`], with the fused plan's op counts.
fn check_plan(
    spec: &Spec,
    threads: usize,
) -> (usize, String, std::collections::BTreeMap<String, usize>) {
    let bytes = model(spec).to_bytes().unwrap();
    let (b, s) = (spec.batch, spec.seq);
    let x = Tensor::from_slice(
        &values(b * s * spec.hidden(), 42, 1.0),
        &[b, s, spec.hidden()],
    )
    .unwrap();
    let mask = match &spec.mask {
        Mask::Input(dims) => {
            let n = dims.iter().product();
            // Key padding style: zeros and large negatives.
            let v: Vec<f32> = values(n, 7, 1.0)
                .iter()
                .map(|&r| if r > 0.6 { -1e4 } else { r })
                .collect();
            Some(Tensor::from_slice(&v, dims).unwrap())
        }
        _ => None,
    };
    let run = |optimize: bool| {
        let config = PlanConfig {
            optimize,
            ..PlanConfig::default().with_threads(threads)
        };
        let plan = strata_onnx::load_bytes(bytes.clone(), "attention", config).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("x", &x).unwrap();
        if let Some(m) = &mask {
            ctx.set_input("mask", m).unwrap();
        }
        ctx.execute().unwrap();
        let y = ctx.output("y").unwrap().to_vec::<f32>().unwrap();
        (plan, y)
    };
    let (plan, fused) = run(true);
    let (_, plain) = run(false);
    assert_eq!(fused.len(), plain.len());
    for (i, (a, w)) in fused.iter().zip(&plain).enumerate() {
        assert!(
            (a - w).abs() <= 1e-4 * w.abs() + 1e-5,
            "{spec:?}: element {i}: fused {a} vs unfused {w}"
        );
    }
    (fused_count(&plan), fusion_text(&plan), plan.op_counts())
}

fn fused_count(plan: &InferencePlan) -> usize {
    plan.op_counts().get("FusedAttention").copied().unwrap_or(0)
}

fn fusion_text(plan: &InferencePlan) -> String {
    plan.optimize_report()
        .fusions
        .iter()
        .map(|f| format!("{} {} <- {}\n", f.op_type, f.node, f.absorbed.join(", ")))
        .collect()
}

#[test]
fn bert_gpt2_and_sdpa_forms_fuse_and_match_the_unfused_graph() {
    let cases = [
        Spec {
            mask: Mask::Input(vec![2, 1, 1, 16]),
            ..Spec::new(Form::Bert, 2, 16, 4, 8)
        },
        Spec {
            mask: Mask::Input(vec![1, 1, 24, 24]),
            ..Spec::new(Form::Bert, 1, 24, 3, 16)
        },
        Spec {
            mask: Mask::Input(vec![2, 2, 10, 10]),
            ..Spec::new(Form::Bert, 2, 10, 2, 12)
        },
        Spec::new(Form::Gpt2, 1, 20, 4, 16),
        Spec {
            mask: Mask::Input(vec![2, 1, 1, 9]),
            ..Spec::new(Form::Gpt2, 2, 9, 6, 4)
        },
        Spec {
            mask: Mask::Triangular,
            ..Spec::new(Form::Sdpa, 1, 33, 2, 32)
        },
        Spec {
            mask: Mask::Input(vec![12]),
            ..Spec::new(Form::Sdpa, 1, 12, 1, 5)
        },
        Spec {
            no_merge: true,
            ..Spec::new(Form::Bert, 1, 7, 3, 4)
        },
        Spec {
            biases: true,
            mask: Mask::Input(vec![2, 1, 1, 11]),
            ..Spec::new(Form::Bert, 2, 11, 2, 8)
        },
        // Opset 11: Softmax's default axis 1 would differ; axis 3 of a rank-4 input is the last.
        Spec {
            opset: 11,
            axis: 3,
            ..Spec::new(Form::Bert, 1, 8, 2, 4)
        },
        // Longer than one key block (256) and one query block (64).
        Spec {
            mask: Mask::Input(vec![1, 1, 1, 300]),
            ..Spec::new(Form::Bert, 1, 300, 2, 8)
        },
    ];
    for spec in &cases {
        for threads in [1, 2] {
            let (fused, text, counts) = check_plan(spec, threads);
            assert_eq!(fused, 1, "{spec:?} should fuse:\n{text}");
            assert!(text.contains("FusedAttention"), "{text}");
            assert!(text.contains("Softmax"), "{text}");
            // GPT-2's QKV Split is read as three column windows of the projection: it goes.
            // BERT's three projections of x become one product, read the same way.
            match spec.form {
                Form::Gpt2 => assert_eq!(counts.get("Split"), None, "{spec:?}: {counts:?}"),
                Form::Bert => {
                    assert_eq!(counts.get("MatMul"), Some(&1), "{spec:?}: {counts:?}");
                    assert!(text.contains("packed with its Q/K/V peers"), "{text}");
                }
                Form::Sdpa => {}
            }
        }
    }
}

#[test]
fn near_misses_stay_unfused_and_correct() {
    let base = || Spec {
        mask: Mask::Input(vec![1, 1, 1, 6]),
        ..Spec::new(Form::Bert, 1, 6, 2, 4)
    };
    let cases = [
        // Softmax over the query axis.
        Spec { axis: 2, ..base() },
        // Opset 11's default axis 1 (flattening heads and rows).
        Spec {
            opset: 11,
            ..base()
        },
        // A mask that widens the scores (rank 5): broadcasting, but not an attention mask.
        Spec {
            mask: Mask::Input(vec![2, 1, 1, 1, 6]),
            no_merge: true,
            ..base()
        },
        // A scale that differs per key.
        Spec {
            vector_scale: true,
            ..base()
        },
        // The scores are read by something else too (a graph output).
        Spec {
            scores_output: true,
            ..base()
        },
    ];
    for spec in &cases {
        let (fused, text) = check(spec, 1);
        assert_eq!(fused, 0, "{spec:?} must not fuse:\n{text}");
    }
}

#[test]
fn fused_attention_runs_without_allocating() {
    for spec in [
        Spec {
            mask: Mask::Input(vec![1, 1, 1, 40]),
            ..Spec::new(Form::Bert, 1, 40, 4, 8)
        },
        Spec::new(Form::Gpt2, 1, 70, 2, 16),
    ] {
        let bytes = model(&spec).to_bytes().unwrap();
        let plan =
            strata_onnx::load_bytes(bytes, "attention", PlanConfig::default().with_threads(1))
                .unwrap();
        assert_eq!(fused_count(&plan), 1);
        let mut ctx = plan.create_context().unwrap();
        let x = Tensor::from_slice(
            &values(spec.seq * spec.hidden(), 5, 1.0),
            &[1, spec.seq, spec.hidden()],
        )
        .unwrap();
        let mask = match &spec.mask {
            Mask::Input(dims) => {
                Some(Tensor::from_slice(&values(dims.iter().product(), 6, 1.0), dims).unwrap())
            }
            _ => None,
        };
        let feed = |ctx: &mut strata_runtime::ExecutionContext| {
            ctx.set_input("x", &x).unwrap();
            if let Some(m) = &mask {
                ctx.set_input("mask", m).unwrap();
            }
            ctx.execute().unwrap();
        };
        feed(&mut ctx);
        feed(&mut ctx);
        let count = alloc_counter::allocations_during(|| {
            for _ in 0..3 {
                feed(&mut ctx);
            }
        });
        assert_eq!(count, 0, "{spec:?}");
    }
}

/// Single-head attention as a plain block writes it, without a head split: `[B, S, D]`
/// projections, `MatMul(q, Transpose(k, [0, 2, 1]))`, a scalar `Mul`, an optional additive
/// mask input of `mask` dims, Softmax on `axis`, `MatMul(p, v)`. Returns (FusedAttention nodes,
/// fusion text) after checking the fused plan against the unfused one.
fn check_single_head(
    batch: usize,
    seq: usize,
    dim: usize,
    mask: Option<&[usize]>,
    axis: i64,
) -> (usize, String) {
    let w = 1.0 / (dim as f32).sqrt();
    let mut m = ModelBuilder::new("single_head")
        .opset(17)
        .input(
            "x",
            DType::F32,
            &[Dim::Known(batch), Dim::Known(seq), Dim::Known(dim)],
        )
        .initializer_f32("scale", &[w], &[]);
    for (n, name) in ["q", "k", "v"].iter().enumerate() {
        let wname = format!("w{name}");
        m = m
            .initializer_f32(&wname, &values(dim * dim, 40 + n as u64, w), &[dim, dim])
            .node("MatMul", &["x", &wname], &[name], Attrs::new());
    }
    m = m
        .node(
            "Transpose",
            &["k"],
            &["kt"],
            Attrs::new().ints("perm", &[0, 2, 1]),
        )
        .node("MatMul", &["q", "kt"], &["scores"], Attrs::new())
        .node("Mul", &["scores", "scale"], &["scaled"], Attrs::new());
    let mut at = "scaled";
    if let Some(dims) = mask {
        let known: Vec<Dim> = dims.iter().map(|&d| Dim::Known(d)).collect();
        m = m.input("mask", DType::F32, &known).node(
            "Add",
            &["scaled", "mask"],
            &["masked"],
            Attrs::new(),
        );
        at = "masked";
    }
    let bytes = m
        .node("Softmax", &[at], &["p"], Attrs::new().int("axis", axis))
        .node("MatMul", &["p", "v"], &["y"], Attrs::new())
        .output(
            "y",
            DType::F32,
            &[Dim::Known(batch), Dim::Known(seq), Dim::Known(dim)],
        )
        .to_bytes()
        .unwrap();
    let x = Tensor::from_slice(&values(batch * seq * dim, 42, 1.0), &[batch, seq, dim]).unwrap();
    let mask = mask.map(|dims| {
        let v: Vec<f32> = values(dims.iter().product(), 7, 1.0)
            .iter()
            .map(|&r| if r > 0.6 { -1e4 } else { r })
            .collect();
        Tensor::from_slice(&v, dims).unwrap()
    });
    let mut fused_plan = None;
    let mut outputs = Vec::new();
    for (optimize, threads) in [(false, 1), (true, 1), (true, 2)] {
        let config = PlanConfig {
            optimize,
            ..PlanConfig::default().with_threads(threads)
        };
        let plan = strata_onnx::load_bytes(bytes.clone(), "single_head", config).unwrap();
        let mut ctx = plan.create_context().unwrap();
        ctx.set_input("x", &x).unwrap();
        if let Some(mask) = &mask {
            ctx.set_input("mask", mask).unwrap();
        }
        ctx.execute().unwrap();
        outputs.push(ctx.output("y").unwrap().to_vec::<f32>().unwrap());
        if optimize {
            fused_plan = Some(plan);
        }
    }
    for got in &outputs[1..] {
        for (i, (a, w)) in got.iter().zip(&outputs[0]).enumerate() {
            assert!(
                (a - w).abs() <= 1e-4 * w.abs() + 1e-5,
                "mask {mask:?}, axis {axis}: element {i}: fused {a} vs unfused {w}"
            );
        }
    }
    let plan = fused_plan.unwrap();
    (fused_count(&plan), fusion_text(&plan))
}

#[test]
fn single_head_attention_fuses_and_its_near_misses_do_not() {
    // (batch, seq, dim, mask dims): masks with no batch axis of their own.
    for (b, s, d, mask) in [
        (1, 64, 32, None),
        (2, 20, 16, Some(&[20usize, 20][..])),
        (2, 9, 8, Some(&[1, 9, 9][..])),
        (3, 70, 8, None),
    ] {
        let (fused, text) = check_single_head(b, s, d, mask, -1);
        assert_eq!(
            fused, 1,
            "[{b}, {s}, {d}] mask {mask:?} should fuse:\n{text}"
        );
        assert!(text.contains("packed with its Q/K/V peers"), "{text}");
    }
    // A per-batch mask [B, S, S]: the fused node would read its first axis as the heads'.
    let (fused, text) = check_single_head(2, 10, 8, Some(&[2, 10, 10]), -1);
    assert_eq!(fused, 0, "a per-batch mask must not fuse:\n{text}");
    // Softmax over the query axis.
    let (fused, text) = check_single_head(1, 12, 8, None, 1);
    assert_eq!(fused, 0, "softmax over queries must not fuse:\n{text}");
}
