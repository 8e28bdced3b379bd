//! ONNX bytes → load and plan; when that succeeds, one run with small inputs. Anything but a
//! typed error (a panic, an abort, a hang, a huge allocation) is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_core::Tensor;
use strata_ops::Dim;
use strata_runtime::PlanConfig;

/// Inputs larger than this many elements are not made: the run is skipped.
const MAX_INPUT_ELEMENTS: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    // Under the fuzzer's RSS limit: a model that asks for more is a typed error, not a finding.
    let config = PlanConfig::default()
        .with_threads(1)
        .with_memory_limit(1 << 30);
    let Ok(plan) = strata_onnx::load_bytes(data.to_vec(), "fuzz.onnx", config) else {
        return;
    };
    let Ok(mut ctx) = plan.create_context() else {
        return;
    };
    for (index, input) in plan.inputs().iter().enumerate() {
        let dims: Vec<usize> = input
            .dims
            .iter()
            .map(|d| match d {
                Dim::Known(n) => *n,
                _ => 2,
            })
            .collect();
        let numel = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if numel.is_none_or(|n| n > MAX_INPUT_ELEMENTS) || input.dtype.is_string() {
            return;
        }
        let Ok(tensor) = Tensor::zeros(&dims, input.dtype) else {
            return;
        };
        if ctx.set_input_at(index, &tensor).is_err() {
            return;
        }
    }
    let _ = ctx.execute();
});
