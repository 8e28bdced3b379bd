//! Long kernels poll the run's stop token: under a cancelled run (or one past its deadline),
//! recurrent steps, DFT/STFT, TopK, NonMaxSuppression and ConvTranspose end with the cancelled/timed-out error,
//! and GEMM blocks (also on the pool's workers, which have no run control), skinny products and
//! depthwise planes are skipped.

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
