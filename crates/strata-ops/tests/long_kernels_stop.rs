//! Long kernels poll the run's stop token: under a cancelled run (or one past its deadline),
//! recurrent steps, DFT/STFT, TopK, NonMaxSuppression and ConvTranspose end with the cancelled/timed-out error,
//! and GEMM blocks (also on the pool's workers, which have no run control), skinny products,
//! depthwise planes and the quantized products of language models and MatMulNBits are skipped.

use std::time::{Duration, Instant};

use strata_core::{Device, MemoryKind, Tensor};
use strata_ops::eval::{run_operator, EvalOptions};
use strata_ops::run_control::RunControl;
use strata_ops::{build_operator, Attr, Attributes, OpContext, OpError};

fn cancelled() -> RunControl {
    let control = RunControl::default();
    control.cancel.cancel();
    control
}

fn timed_out() -> RunControl {
    RunControl {
        deadline: Some((Instant::now(), Duration::from_millis(1))),
        ..RunControl::default()
    }
}

fn run(
    op_type: &str,
    attrs: &[(&str, Attr)],
    inputs: &[&Tensor],
    outputs: usize,
) -> Result<Vec<Tensor>, OpError> {
    run_in(MemoryKind::Workspace, op_type, attrs, inputs, outputs)
}

/// [`run`] with outputs of `kind` (Persistent memory is never recycled, so outputs a skipped
/// kernel leaves alone stay zero).
fn run_in(
    kind: MemoryKind,
    op_type: &str,
    attrs: &[(&str, Attr)],
    inputs: &[&Tensor],
    outputs: usize,
) -> Result<Vec<Tensor>, OpError> {
    let mut a = Attributes::new(op_type);
    for (k, v) in attrs {
        a.insert(k, v.clone());
    }
    let op = build_operator(&OpContext {
        op_type,
        domain: "",
        opset: 20,
        attrs: &a,
        num_inputs: inputs.len(),
        num_outputs: outputs,
    })?;
    let options = EvalOptions {
        device: Device::Cpu,
        kind,
        threads: 2,
        detach_views: false,
    };
    run_operator(op.as_ref(), None, inputs, outputs, &options)
}

/// Operator, attributes, inputs, output count.
type Case<'a> = (&'a str, Vec<(&'a str, Attr)>, Vec<&'a Tensor>, usize);

fn ramp(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|i| ((i * 7919) % 97) as f32 / 97.0).collect();
    Tensor::from_slice(&values, dims).unwrap()
}

/// Each case runs normally outside a run, and stops under a cancelled or timed-out one.
#[test]
fn long_kernels_stop_when_the_run_is_cancelled_or_late() {
    let x_rnn = ramp(&[8, 2, 4]);
    let (w, r) = (ramp(&[1, 3, 4]), ramp(&[1, 3, 3]));
    let signal = ramp(&[2, 64, 1]);
    let scores = ramp(&[1, 2, 16]);
    let boxes = ramp(&[1, 16, 4]);
    let k = Tensor::from_slice(&[3i64], &[1]).unwrap();
    let max_boxes = Tensor::from_slice(&[5i64], &[1]).unwrap();
    let step = Tensor::from_slice(&[16i64], &[]).unwrap();
    let frame = Tensor::from_slice(&[32i64], &[]).unwrap();
    let stft_signal = ramp(&[1, 256, 1]);
    let absent = Tensor::undefined();
    let (x_t, w_t) = (ramp(&[1, 2, 4, 4]), ramp(&[2, 3, 3, 3]));
    let cases: Vec<Case<'_>> = vec![
        ("ConvTranspose", vec![], vec![&x_t, &w_t], 1),
        (
            "RNN",
            vec![("hidden_size", Attr::Int(3))],
            vec![&x_rnn, &w, &r],
            2,
        ),
        ("DFT", vec![], vec![&signal], 1),
        (
            "STFT",
            vec![],
            vec![&stft_signal, &step, &absent, &frame],
            1,
        ),
        ("TopK", vec![], vec![&scores, &k], 2),
        (
            "NonMaxSuppression",
            vec![],
            vec![&boxes, &scores, &max_boxes],
            1,
        ),
    ];
    for (op, attrs, inputs, outputs) in &cases {
        run(op, attrs, inputs, *outputs).unwrap_or_else(|e| panic!("{op}: {e}"));
        let err = cancelled()
            .install(|| run(op, attrs, inputs, *outputs))
            .unwrap_err();
        assert!(
            matches!(err, OpError::Cancelled { ref op } if !op.is_empty()),
            "{op}: {err}"
        );
        let err = timed_out()
            .install(|| run(op, attrs, inputs, *outputs))
            .unwrap_err();
        assert!(matches!(err, OpError::TimedOut { .. }), "{op}: {err}");
    }
}

#[test]
fn gemm_blocks_are_skipped_once_the_run_is_cancelled_also_on_pool_workers() {
    let n = 256;
    let a = vec![1.0f32; n * n];
    let product = |threads: usize| {
        let mut c = vec![0.0f32; n * n];
        let row = (n as isize, 1);
        strata_ops::kernels::gemm(n, n, n, &a, row, &a, row, &mut c, row, 1.0, 0.0, threads)
            .unwrap();
        c
    };
    assert!(product(2).iter().all(|&v| v == n as f32));
    let pool = strata_ops::parallel::ThreadPool::new(2).unwrap();
    for threads in [1, 2] {
        let c = strata_ops::parallel::install(&pool, || cancelled().install(|| product(threads)));
        assert!(c.iter().all(|&v| v == 0.0), "threads {threads}");
    }
}

#[test]
fn skinny_products_and_depthwise_planes_are_skipped_once_the_run_is_cancelled() {
    // A batch-1 product (the skinny path).
    let (k, n) = (512, 1024);
    let (a, b) = (vec![1.0f32; k], vec![1.0f32; k * n]);
    let product = || {
        let mut c = vec![0.0f32; n];
        strata_ops::kernels::gemm(
            1,
            n,
            k,
            &a,
            (k as isize, 1),
            &b,
            (n as isize, 1),
            &mut c,
            (n as isize, 1),
            1.0,
            0.0,
            1,
        )
        .unwrap();
        c
    };
    assert!(product().iter().all(|&v| v == k as f32));
    assert!(cancelled().install(product).iter().all(|&v| v == 0.0));
    // A depthwise convolution (32 channels, one group each).
    let x = ramp(&[1, 32, 16, 16]);
    let w = ramp(&[32, 1, 3, 3]);
    let depthwise = || {
        let group = [("group", Attr::Int(32))];
        run_in(MemoryKind::Persistent, "Conv", &group, &[&x, &w], 1)
            .unwrap()
            .remove(0)
            .to_vec::<f32>()
            .unwrap()
    };
    assert!(depthwise().iter().any(|&v| v != 0.0));
    assert!(cancelled().install(depthwise).iter().all(|&v| v == 0.0));
}

#[test]
fn quantized_products_skip_their_rows_once_the_run_is_cancelled_also_on_pool_workers() {
    use strata_core::DType;
    use strata_ops::kernels::quant::{
        pack_group, q4_matmul, quant_matmul_with, Compute, Isa, Q4Weights, Q4Zeros, Q8Block,
        QuantMatrix, Strategy,
    };

    // Every weight is 1 and every activation 1, so each output is k once computed.
    let (n, k) = (1024, 256);
    let q8_0: Vec<u8> = (0..n * k / 32)
        .flat_map(|_| {
            let mut block = vec![0x00, 0x3c]; // scale 1.0 (f16)
            block.extend([1u8; 32]);
            block
        })
        .collect();
    let f32_ones: Vec<u8> = (0..n * k).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let pool = strata_ops::parallel::ThreadPool::new(2).unwrap();
    // Activations are quantized to 8 bits with an f16 scale for the integer dots.
    let is_k = |y: &[f32]| y.iter().all(|&v| (v - k as f32).abs() < 0.01 * k as f32);
    let is_zero = |y: &[f32]| y.iter().all(|&v| v == 0.0);
    // GGUF weight types: integer dots (one row) and dequantized rows (sixteen, and f32).
    for (dtype, bytes, strategy, m) in [
        (DType::Q8_0, &q8_0, Strategy::IntDot, 1),
        (DType::Q8_0, &q8_0, Strategy::Dequant, 16),
        (DType::F32, &f32_ones, Strategy::Dequant, 1),
    ] {
        let w = QuantMatrix::new(dtype, n, k, bytes).unwrap();
        let x = vec![1.0f32; m * k];
        let product = |threads: usize| {
            let mut y = vec![0.0f32; m * n];
            let mut scratch = vec![Q8Block::default(); m * k / 32];
            quant_matmul_with(
                strategy,
                Isa::detect(),
                &w,
                &x,
                m,
                &mut y,
                &mut scratch,
                threads,
            )
            .unwrap();
            y
        };
        assert!(is_k(&product(2)), "{dtype} {strategy:?}");
        for threads in [1, 2] {
            let y =
                strata_ops::parallel::install(&pool, || cancelled().install(|| product(threads)));
            assert!(is_zero(&y), "{dtype} {strategy:?} threads {threads}");
        }
    }
    // 4-bit ONNX weights (MatMulNBits): integer dots, f32 dots, and the panel product.
    let nibbles = pack_group(&[9; 32]); // 9 - 8 = 1
    let qs: Vec<u8> = (0..n * k / 32).flat_map(|_| nibbles).collect();
    let scales = vec![1.0f32; n * k / 32];
    let w = Q4Weights::new(n, k, 32, &qs, &scales, Q4Zeros::Default).unwrap();
    for (compute, m) in [(Compute::Int8, 1), (Compute::F32, 1), (Compute::F32, 8)] {
        let x = vec![1.0f32; m * k];
        let product = |threads: usize| {
            let mut y = vec![0.0f32; m * n];
            q4_matmul(&w, compute, &x, m, &mut y, threads).unwrap();
            y
        };
        assert!(is_k(&product(2)), "{compute:?} m {m}");
        for threads in [1, 2] {
            let y =
                strata_ops::parallel::install(&pool, || cancelled().install(|| product(threads)));
            assert!(is_zero(&y), "{compute:?} m {m} threads {threads}");
        }
    }
}

/// A prompt under a cancelled run: its keys and values are cached, but every query row of the
/// language models' cached attention is skipped, so the output is left alone.
#[test]
fn cached_attention_rows_are_skipped_once_the_run_is_cancelled() {
    use strata_core::DType;
    use strata_ops::eval::input_fact;
    use strata_ops::KernelIo;

    let (heads, kv_heads, head_dim, seq) = (4usize, 2usize, 16usize, 40usize);
    let mut attrs = Attributes::new("CachedAttention");
    for (name, value) in [
        ("num_heads", heads),
        ("kv_heads", kv_heads),
        ("head_dim", head_dim),
        ("max_context", 64),
        ("block_tokens", 16),
    ] {
        attrs.insert(name, Attr::Int(value as i64));
    }
    let op = build_operator(&OpContext {
        op_type: "CachedAttention",
        domain: strata_ops::ops::llm::DOMAIN,
        opset: 1,
        attrs: &attrs,
        num_inputs: 4,
        num_outputs: 1,
    })
    .unwrap();
    let (qw, kvw) = (heads * head_dim, kv_heads * head_dim);
    let (q, k, v) = (
        ramp(&[1, seq, qw]),
        ramp(&[1, seq, kvw]),
        ramp(&[1, seq, kvw]),
    );
    let positions: Vec<i64> = (0..seq as i64).collect();
    let positions = Tensor::from_slice(&positions, &[1, seq]).unwrap();
    let inputs = [&q, &k, &v, &positions];
    let facts: Vec<_> = inputs.iter().map(|t| input_fact(t)).collect();
    let fact_refs: Vec<_> = facts.iter().collect();
    let out_facts = op.infer(&fact_refs).unwrap();
    let out_refs: Vec<_> = out_facts.iter().collect();
    let kernel = op.kernel(&fact_refs, &out_refs, Device::Cpu).unwrap();
    let stateful = kernel.capabilities().context_state.unwrap();
    let bytes = op.scratch_bytes(&fact_refs, &out_refs).unwrap();
    let scratch = Tensor::empty(&[bytes], DType::U8, Device::Cpu, MemoryKind::Workspace).unwrap();
    let attend = |threads: usize| {
        let out = Tensor::from_slice(&vec![0.0f32; seq * qw], &[1, seq, qw]).unwrap();
        let mut state = stateful.new_state().unwrap();
        let io = KernelIo {
            inputs: &inputs,
            outputs: &[&out],
            scratch: Some(&scratch),
            in_place: None,
            threads,
        };
        stateful.run_with_state(&io, state.as_mut()).unwrap();
        out.to_vec::<f32>().unwrap()
    };
    let pool = strata_ops::parallel::ThreadPool::new(2).unwrap();
    for threads in [1, 2] {
        assert!(attend(threads).iter().any(|&x| x != 0.0));
        let out = strata_ops::parallel::install(&pool, || cancelled().install(|| attend(threads)));
        assert!(out.iter().all(|&x| x == 0.0), "threads {threads}");
    }
}
