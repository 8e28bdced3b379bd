//! Models written as .onnx files by our own builder, loaded through the full path (mapped
//! file → import → plan → context), checked against naive references and against themselves
//! under batching, concurrency and dynamic shapes.

use std::path::PathBuf;
use std::sync::Arc;

use strata_core::{AllocatorRegistry, Device, MemoryKind, Tensor};
use strata_onnx::{models, Attrs, Dim, ModelBuilder, OnnxError};
use strata_runtime::{InferencePlan, OptimizationProfile, PlanConfig, RuntimeError};

/// Tests in this binary run one at a time: `nonzero_takes_the_dynamic_path` reads the global
/// registry's Workspace counters, which another test's contexts would move meanwhile.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-e2e-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn save(builder: &ModelBuilder, name: &str) -> PathBuf {
    let path = temp_dir(name).join("model.onnx");
    builder.save(&path).unwrap();
    path
}

fn run(plan: &Arc<InferencePlan>, input: &str, x: &Tensor) -> Vec<f32> {
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input(input, x).unwrap();
    ctx.execute().unwrap();
    ctx.output_at(0).unwrap().to_vec::<f32>().unwrap()
}

fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-4 + 1e-3 * e.abs(),
            "{what}: element {i}: {a} vs {e}"
        );
    }
}

/// The MLP of `models::mlp`, computed naively.
fn mlp_reference(x: &[f32], n: usize, sizes: (usize, usize, usize), seed: u64) -> Vec<f32> {
    let (inputs, hidden, outputs) = sizes;
    let w1 = models::seeded_values(inputs * hidden, seed, (2.0 / inputs as f32).sqrt());
    let b1 = models::seeded_values(hidden, seed + 1, 0.1);
    let w2 = models::seeded_values(hidden * outputs, seed + 2, (1.0 / hidden as f32).sqrt());
    let b2 = models::seeded_values(outputs, seed + 3, 0.1);
    let mut out = Vec::new();
    for row in x.chunks(inputs).take(n) {
        let h: Vec<f32> = (0..hidden)
            .map(|j| {
                (row.iter()
                    .enumerate()
                    .map(|(i, v)| v * w1[i * hidden + j])
                    .sum::<f32>()
                    + b1[j])
                    .max(0.0)
            })
            .collect();
        let logits: Vec<f32> = (0..outputs)
            .map(|k| {
                h.iter()
                    .enumerate()
                    .map(|(j, v)| v * w2[j * outputs + k])
                    .sum::<f32>()
                    + b2[k]
            })
            .collect();
        let max = logits.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f32> = logits.iter().map(|v| (v - max).exp()).collect();
        let sum: f32 = e.iter().sum();
        out.extend(e.iter().map(|v| v / sum));
    }
    out
}

#[test]
fn mlp_from_file_matches_naive_reference() {
    let _serial = serial();
    let sizes = (24, 40, 7);
    let path = save(
        &models::mlp(Dim::sym("N"), sizes.0, sizes.1, sizes.2, 3),
        "mlp",
    );
    let plan = strata_onnx::load(&path, PlanConfig::default().with_threads(2)).unwrap();
    for n in [1, 5, 3] {
        let x = models::seeded_values(n * sizes.0, n as u64, 1.0);
        let got = run(&plan, "x", &Tensor::from_slice(&x, &[n, sizes.0]).unwrap());
        assert_close(&got, &mlp_reference(&x, n, sizes, 3), "mlp");
    }
}

#[test]
fn weights_are_used_in_place_from_the_mapped_file() {
    let _serial = serial();
    let path = save(
        &models::resnet_like(Dim::Known(1), 16, 8, 1, 4, 1),
        "mapped",
    );
    let graph = strata_onnx::load_graph(&path).unwrap();
    let weights: Vec<&Tensor> = graph
        .values
        .iter()
        .filter_map(|v| match &v.source {
            strata_runtime::ValueSource::Initializer(t) => Some(t),
            _ => None,
        })
        .collect();
    assert!(!weights.is_empty());
    assert!(
        weights.iter().all(|t| strata_onnx::is_zero_copy(t)),
        "builder-aligned initializers must be zero-copy"
    );
}

#[test]
fn cnn_batch_equals_images_one_by_one() {
    let _serial = serial();
    let builder = models::resnet_like(Dim::sym("N"), 32, 16, 2, 10, 8);
    let path = save(&builder, "cnn");
    let profile = OptimizationProfile::new()
        .with_input("input", &[1, 3, 32, 32], &[2, 3, 32, 32], &[4, 3, 32, 32])
        .unwrap();
    let plan = strata_onnx::load(
        &path,
        PlanConfig::default().with_threads(1).with_profile(profile),
    )
    .unwrap();
    let images = models::seeded_values(3 * 3 * 32 * 32, 77, 1.0);
    let batched = run(
        &plan,
        "input",
        &Tensor::from_slice(&images, &[3, 3, 32, 32]).unwrap(),
    );
    assert_eq!(batched.len(), 30);
    for (i, image) in images.chunks(3 * 32 * 32).enumerate() {
        let single = run(
            &plan,
            "input",
            &Tensor::from_slice(image, &[1, 3, 32, 32]).unwrap(),
        );
        assert_close(&single, &batched[i * 10..(i + 1) * 10], "image vs batch");
    }
    let mut ctx = plan.create_context().unwrap();
    let too_big = Tensor::zeros(&[5, 3, 32, 32], strata_core::DType::F32).unwrap();
    assert!(matches!(
        ctx.set_input("input", &too_big),
        Err(RuntimeError::OutsideProfile {
            axis: 0,
            actual: 5,
            ..
        })
    ));
}

#[test]
fn many_threads_share_one_plan_bit_identically() {
    let _serial = serial();
    let path = save(
        &models::resnet_like(Dim::Known(1), 16, 8, 1, 10, 4),
        "threads",
    );
    let plan = strata_onnx::load(&path, PlanConfig::default().with_threads(1)).unwrap();
    let inputs: Vec<Tensor> = (0..8)
        .map(|t| {
            Tensor::from_slice(
                &models::seeded_values(3 * 16 * 16, 100 + t, 1.0),
                &[1, 3, 16, 16],
            )
            .unwrap()
        })
        .collect();
    let serial: Vec<Vec<f32>> = inputs.iter().map(|x| run(&plan, "input", x)).collect();
    assert!(
        serial.windows(2).any(|w| w[0] != w[1]),
        "different inputs must give different outputs"
    );
    std::thread::scope(|scope| {
        for (x, expected) in inputs.iter().zip(&serial) {
            let plan = plan.clone();
            scope.spawn(move || {
                let mut ctx = plan.create_context().unwrap();
                for _ in 0..50 {
                    ctx.set_input("input", x).unwrap();
                    ctx.execute().unwrap();
                    let got = ctx.output("logits").unwrap().to_vec::<f32>().unwrap();
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    );
                }
            });
        }
    });
}

#[test]
fn nonzero_takes_the_dynamic_path() {
    let _serial = serial();
    // y = Transpose(NonZero(x)): its size is only known once x's values are.
    let builder = ModelBuilder::new("nonzero")
        .opset(17)
        .input(
            "x",
            strata_core::DType::F32,
            &[Dim::Known(2), Dim::Known(3)],
        )
        .output("y", strata_core::DType::I64, &[Dim::Unknown, Dim::Known(2)])
        .node("NonZero", &["x"], &["nz"], Attrs::new())
        .node(
            "Transpose",
            &["nz"],
            &["y"],
            Attrs::new().ints("perm", &[1, 0]),
        );
    let plan = strata_onnx::load(save(&builder, "nonzero"), PlanConfig::default()).unwrap();
    let mut ctx = plan.create_context().unwrap();
    let workspace = || {
        AllocatorRegistry::global()
            .stats(Device::Cpu, MemoryKind::Workspace)
            .active_allocations
    };
    for (data, expected) in [
        (vec![0.0f32, 1.0, 0.0, 2.0, 0.0, -0.0], vec![0i64, 1, 1, 0]),
        (
            vec![1.0, 1.0, 1.0, 0.0, 0.0, 3.0],
            vec![0, 0, 0, 1, 0, 2, 1, 2],
        ),
        (vec![0.0; 6], vec![]),
    ] {
        ctx.set_input("x", &Tensor::from_slice(&data, &[2, 3]).unwrap())
            .unwrap();
        ctx.execute().unwrap();
        let y = ctx.output("y").unwrap();
        assert_eq!(y.dims(), &[expected.len() / 2, 2]);
        assert_eq!(y.to_vec::<i64>().unwrap(), expected);
    }
    let live = workspace();
    ctx.execute().unwrap();
    assert_eq!(
        workspace(),
        live,
        "dynamic intermediates are freed after their last consumer"
    );
}

#[test]
fn broken_and_unsupported_models_are_typed_errors() {
    let _serial = serial();
    let dir = temp_dir("broken");
    let good = models::mlp(Dim::Known(1), 4, 4, 2, 1).to_bytes().unwrap();
    for cut in [1, good.len() / 3, good.len() / 2, good.len() - 1] {
        let path = dir.join(format!("cut{cut}.onnx"));
        std::fs::write(&path, &good[..cut]).unwrap();
        let err = strata_onnx::load(&path, PlanConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("cut"),
            "the error names the file: {err}"
        );
    }
    let mut corrupted = good.clone();
    for b in corrupted.iter_mut().step_by(7) {
        *b ^= 0x5A;
    }
    let path = dir.join("corrupted.onnx");
    std::fs::write(&path, &corrupted).unwrap();
    assert!(strata_onnx::load(&path, PlanConfig::default()).is_err());
    assert!(matches!(
        strata_onnx::load(dir.join("missing.onnx"), PlanConfig::default()),
        Err(OnnxError::Io { .. })
    ));

    let unsupported = ModelBuilder::new("unsupported")
        .opset(17)
        .input("x", strata_core::DType::F32, &[Dim::Known(2)])
        .output("z", strata_core::DType::F32, &[Dim::Known(2)])
        .named_node("first", "FancyOp", &["x"], &["a"], Attrs::new())
        .named_node("second", "Relu", &["a"], &["b"], Attrs::new())
        .named_node("third", "FancyOp", &["b"], &["c"], Attrs::new())
        .domain_node(
            "fourth",
            "com.example",
            "Custom",
            &["c"],
            &["z"],
            Attrs::new(),
        );
    match strata_onnx::load(save(&unsupported, "unsupported"), PlanConfig::default()) {
        Err(OnnxError::UnsupportedOperators { ops }) => {
            assert_eq!(ops.len(), 2, "{ops:?}");
            let text = ops.join("; ");
            assert!(
                text.contains("FancyOp") && text.contains("first") && text.contains("third"),
                "{text}"
            );
            assert!(
                text.contains("com.example::Custom") && text.contains("fourth"),
                "{text}"
            );
        }
        other => panic!("expected UnsupportedOperators, got {other:?}"),
    }
}

#[test]
fn wrong_inputs_are_typed_errors() {
    let _serial = serial();
    let plan = strata_onnx::load(
        save(&models::mlp(Dim::Known(2), 4, 4, 2, 1), "inputs"),
        PlanConfig::default(),
    )
    .unwrap();
    let mut ctx = plan.create_context().unwrap();
    let ok = Tensor::zeros(&[2, 4], strata_core::DType::F32).unwrap();
    assert!(matches!(
        ctx.set_input("y", &ok),
        Err(RuntimeError::UnknownInput { .. })
    ));
    let ints = Tensor::zeros(&[2, 4], strata_core::DType::I64).unwrap();
    assert!(matches!(
        ctx.set_input("x", &ints),
        Err(RuntimeError::InputDType { .. })
    ));
    let rank3 = Tensor::zeros(&[2, 4, 1], strata_core::DType::F32).unwrap();
    assert!(matches!(
        ctx.set_input("x", &rank3),
        Err(RuntimeError::InputRank { .. })
    ));
    let wide = Tensor::zeros(&[2, 5], strata_core::DType::F32).unwrap();
    let err = ctx.set_input("x", &wide).unwrap_err();
    assert!(err.to_string().contains("dim 1"), "{err}");
    ctx.set_input("x", &ok).unwrap();
    ctx.execute().unwrap();
}
