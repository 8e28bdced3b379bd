//! Models that declare impossible sizes or endless work (the classes an outside fuzzer found):
//! each must end in a typed error that says what was wrong, never a panic, an abort or a hang.
//! `scripts/hostile_models.py` tries the same cases against the `strata` binary.

use std::time::{Duration, Instant};

use strata_core::{DType, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder};
use strata_runtime::PlanConfig;

const BIG: usize = 1 << 62;
const HUGE: usize = 1 << 40;

/// Loads `builder` and runs it once on zero-filled inputs of its declared dims (symbolic ones 1);
/// the error message of the first step that failed, or `None` if everything ran.
fn outcome(builder: &ModelBuilder, config: PlanConfig) -> Option<String> {
    let bytes = builder.to_bytes().expect("the builder writes the model");
    let plan = match strata_onnx::load_bytes(bytes, "hostile", config) {
        Ok(plan) => plan,
        Err(err) => return Some(err.to_string()),
    };
    let mut ctx = match plan.create_context() {
        Ok(ctx) => ctx,
        Err(err) => return Some(err.to_string()),
    };
    for info in plan.inputs() {
        let dims: Vec<usize> = info.dims.iter().map(|d| d.known().unwrap_or(1)).collect();
        let tensor = match Tensor::zeros(&dims, info.dtype) {
            Ok(t) => t,
            Err(err) => return Some(err.to_string()),
        };
        if let Err(err) = ctx.set_input(&info.name, &tensor) {
            return Some(err.to_string());
        }
    }
    ctx.execute().err().map(|e| e.to_string())
}

fn fails_with(builder: ModelBuilder, needle: &str) {
    let message = outcome(&builder, PlanConfig::default().with_threads(1))
        .unwrap_or_else(|| panic!("expected an error mentioning {needle:?}, but the model ran"));
    assert!(
        message.contains(needle),
        "expected {needle:?} in the error, got: {message}"
    );
}

fn model() -> ModelBuilder {
    ModelBuilder::new("hostile").opset(18)
}

fn known(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

#[test]
fn ranks_read_from_declared_lengths_are_bounded() {
    for (op, inputs) in [
        ("Unsqueeze", vec!["x", "n"]),
        ("Reshape", vec!["x", "n"]),
        ("ConstantOfShape", vec!["n"]),
    ] {
        let b = model()
            .input("x", DType::F32, &known(&[2]))
            .input("n", DType::I64, &known(&[BIG]))
            .node(op, &inputs, &["y"], Attrs::new())
            .output_unranked("y", DType::F32);
        fails_with(b, "strata handles tensors of at most 64 dims");
    }
    let b = model()
        .input("x", DType::F32, &known(&[1, 4, 4]))
        .input("i", DType::I64, &known(&[BIG]))
        .input("k", DType::I64, &known(&[BIG]))
        .node("Col2Im", &["x", "i", "k"], &["y"], Attrs::new())
        .output_unranked("y", DType::F32);
    fails_with(b, "at most 64 dims");
}

#[test]
fn split_counts_must_match_the_outputs() {
    let b = model()
        .input("x", DType::F32, &known(&[4]))
        .node(
            "Split",
            &["x"],
            &["a", "b"],
            Attrs::new().int("num_outputs", BIG as i64),
        )
        .output_unranked("a", DType::F32)
        .output_unranked("b", DType::F32);
    fails_with(b, "but the node has 2 outputs");
    let b = model()
        .input("x", DType::F32, &known(&[4]))
        .input("s", DType::I64, &known(&[BIG]))
        .node("SplitToSequence", &["x", "s"], &["y"], Attrs::new())
        .node(
            "ConcatFromSequence",
            &["y"],
            &["z"],
            Attrs::new().int("axis", 0),
        )
        .output_unranked("z", DType::F32);
    fails_with(
        b,
        "sequences are unrolled while importing, into at most 4096",
    );
}

#[test]
fn impossible_sizes_from_values_are_size_or_memory_errors() {
    let huge = |name: &str, values: &[usize]| {
        Tensor::from_slice(
            &values.iter().map(|&v| v as i64).collect::<Vec<_>>(),
            &[values.len()],
        )
        .map(|t| (name.to_string(), t))
        .unwrap()
    };
    let cases = [
        (
            "ConstantOfShape",
            vec!["s"],
            huge("s", &[HUGE, HUGE]),
            DType::F32,
        ),
        (
            "Expand",
            vec!["x", "s"],
            huge("s", &[HUGE, HUGE]),
            DType::I64,
        ),
        ("Tile", vec!["x", "s"], huge("s", &[HUGE]), DType::I64),
        ("HannWindow", vec!["s"], huge("s", &[HUGE]), DType::F32),
    ];
    for (op, inputs, (name, value), dtype) in cases {
        let value = if op == "HannWindow" {
            value.reshape(&[]).unwrap().contiguous().unwrap()
        } else {
            value
        };
        let b = model()
            .input("x", dtype, &known(&[1]))
            .initializer(&name, &value)
            .node(op, &inputs, &["y"], Attrs::new())
            .output_unranked(
                "y",
                if op == "HannWindow" {
                    DType::F32
                } else {
                    dtype
                },
            );
        let message = outcome(&b, PlanConfig::default().with_threads(1))
            .unwrap_or_else(|| panic!("{op}: a {HUGE}-sized output ran"));
        assert!(
            message.contains("out of memory")
                || message.contains("size overflow")
                || message.contains("memory limit exceeded"),
            "{op}: {message}"
        );
        // Under a limit the allocator is never asked: found by the `onnx_load` fuzzer, whose
        // sanitizer allocator aborted on HannWindow's 2^40 host values under a 1 GiB limit.
        let config = PlanConfig::default()
            .with_threads(1)
            .with_memory_limit(1 << 30);
        let message = outcome(&b, config).unwrap_or_else(|| panic!("{op}: ran"));
        assert!(
            message.contains("size overflow") || message.contains("memory limit exceeded"),
            "{op} under a 1 GiB limit: {message}"
        );
    }
}

#[test]
fn element_counts_of_declared_dims_are_checked_in_shape_inference() {
    // 2^32 × 2^32 elements overflow a usize: Reshape to [-1] and Flatten used to multiply them
    // unchecked (a panic in debug builds, a wrong count in release builds).
    let flat = Tensor::from_slice(&[-1i64], &[1]).unwrap();
    let b = model()
        .input("x", DType::F32, &known(&[1 << 32, 1 << 32]))
        .initializer("s", &flat)
        .node("Reshape", &["x", "s"], &["y"], Attrs::new())
        .output_unranked("y", DType::F32);
    fails_with(b, "size overflow");
    let b = model()
        .input("x", DType::F32, &known(&[1 << 32, 1 << 32, 2]))
        .node("Flatten", &["x"], &["y"], Attrs::new().int("axis", 2))
        .output_unranked("y", DType::F32);
    fails_with(b, "size overflow");
    let b = model()
        .input("x", DType::F32, &known(&[1 << 32, 1 << 32]))
        .node("Size", &["x"], &["y"], Attrs::new())
        .output_unranked("y", DType::I64);
    assert!(outcome(&b, PlanConfig::default().with_threads(1)).is_some());
}

#[test]
fn huge_declared_inputs_fail_before_anything_is_filled() {
    for dtype in [DType::F32, DType::I64, DType::F16, DType::String] {
        let b = model()
            .input("x", dtype, &known(&[HUGE, HUGE]))
            .node("Identity", &["x"], &["y"], Attrs::new())
            .output_unranked("y", dtype);
        let message = outcome(&b, PlanConfig::default().with_threads(1))
            .unwrap_or_else(|| panic!("{dtype}: a {HUGE}×{HUGE} input ran"));
        assert!(
            message.contains("out of memory")
                || message.contains("size overflow")
                || message.contains("memory limit exceeded"),
            "{dtype}: {message}"
        );
    }
}

#[test]
fn nodes_whose_outputs_are_empty_do_not_run_their_kernels() {
    // LinearAttention with a zero-width value used to cut its state into rows of 0 and panic.
    let b = ModelBuilder::new("hostile")
        .opset(27)
        .input(
            "q",
            DType::F32,
            &[Dim::sym("N"), Dim::Known(2), Dim::Known(4)],
        )
        .input(
            "k",
            DType::F32,
            &[Dim::sym("N"), Dim::Known(2), Dim::Known(4)],
        )
        .input(
            "v",
            DType::F32,
            &[Dim::sym("N"), Dim::Known(2), Dim::Known(0)],
        )
        .node(
            "LinearAttention",
            &["q", "k", "v"],
            &["y"],
            Attrs::new()
                .int("q_num_heads", 1)
                .int("kv_num_heads", 1)
                .string("update_rule", "linear"),
        )
        .output_unranked("y", DType::F32);
    assert_eq!(outcome(&b, PlanConfig::default().with_threads(1)), None);
}

/// A Loop whose condition never turns false: `Loop(M absent, cond = true, v)`.
fn endless_loop() -> ModelBuilder {
    let body = ModelBuilder::new("body")
        .input("i", DType::I64, &[])
        .input("c", DType::Bool, &[])
        .input("v", DType::F32, &known(&[1]))
        .node("Identity", &["c"], &["c_out"], Attrs::new())
        .node("Neg", &["v"], &["v_out"], Attrs::new())
        .output("c_out", DType::Bool, &[])
        .output("v_out", DType::F32, &known(&[1]))
        .to_model()
        .unwrap()
        .graph
        .unwrap();
    model()
        .input("cond", DType::Bool, &[])
        .input("v0", DType::F32, &known(&[1]))
        .node(
            "Loop",
            &["", "cond", "v0"],
            &["v"],
            Attrs::new().graph("body", body),
        )
        .output("v", DType::F32, &known(&[1]))
}

fn endless_plan(config: PlanConfig) -> strata_runtime::ExecutionContext {
    let plan = strata_onnx::load_bytes(endless_loop().to_bytes().unwrap(), "loop", config).unwrap();
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("cond", &Tensor::from_bools(&[true], &[]).unwrap())
        .unwrap();
    ctx.set_input("v0", &Tensor::from_slice(&[1.0f32], &[1]).unwrap())
        .unwrap();
    ctx
}

#[test]
fn an_endless_loop_stops_at_the_trip_bound() {
    let config = PlanConfig {
        max_loop_iterations: 100,
        ..PlanConfig::default().with_threads(1)
    };
    let err = endless_plan(config).execute().unwrap_err();
    assert!(
        err.to_string()
            .contains("still running after 100 iterations"),
        "{err}"
    );
}

#[test]
fn an_endless_loop_stops_at_the_timeout_and_the_context_runs_again() {
    let mut ctx = endless_plan(PlanConfig::default().with_threads(1));
    ctx.set_timeout(Some(Duration::from_millis(50)));
    let started = Instant::now();
    let err = ctx.execute().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(!err.is_cancelled());
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    // The same context, with a condition that ends the loop at once, runs normally.
    ctx.set_input("cond", &Tensor::from_bools(&[false], &[]).unwrap())
        .unwrap();
    ctx.execute().unwrap();
    assert_eq!(ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(), [1.0]);
}

#[test]
fn an_endless_loop_is_cancelled_from_another_thread() {
    let mut ctx = endless_plan(PlanConfig::default().with_threads(1));
    let flag = ctx.cancel_flag();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        flag.cancel();
    });
    let err = ctx.execute().unwrap_err();
    canceller.join().unwrap();
    assert!(err.is_cancelled(), "{err}");
    // The flag is lowered after the cancelled run: the next run is not cancelled at once.
    assert!(!ctx.cancel_flag().is_cancelled());
}
