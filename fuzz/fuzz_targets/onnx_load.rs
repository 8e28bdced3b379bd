//! ONNX bytes → load and plan; when that succeeds, one run with small inputs. Anything but a
//! typed error (a panic, an abort, a hang, a huge allocation) is a finding.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use strata_core::Tensor;
use strata_ops::run_control::RunControl;
use strata_ops::Dim;
use strata_runtime::PlanConfig;

/// Inputs larger than this many elements are not made: the run is skipped.
const MAX_INPUT_ELEMENTS: usize = 1 << 16;

/// Bounds on work a model may legitimately ask for (an endless Loop ends at the trip bound or
/// the deadline with a typed error): far below libFuzzer's `-timeout`, so a timeout it reports
/// is work strata failed to bound, not a bounded loop running slowly under the sanitizer.
const MAX_LOOP_TRIPS: u64 = 4096;
const DEADLINE: Duration = Duration::from_secs(2);

fuzz_target!(|data: &[u8]| {
    // Under the fuzzer's RSS limit: a model that asks for more is a typed error, not a finding.
    let mut config = PlanConfig::default()
        .with_threads(1)
        .with_memory_limit(1 << 30);
    config.max_loop_iterations = MAX_LOOP_TRIPS;
    // Loading folds constants, which may run a Loop: the bounds hold there too (as in the CLI).
    let control = RunControl {
        deadline: Some((Instant::now() + DEADLINE, DEADLINE)),
        max_loop_iterations: MAX_LOOP_TRIPS,
        ..RunControl::default()
    };
    let loaded = control.install(|| strata_onnx::load_bytes(data.to_vec(), "fuzz.onnx", config));
    let Ok(plan) = loaded else {
        return;
    };
    let Ok(mut ctx) = plan.create_context() else {
        return;
    };
    ctx.set_timeout(Some(DEADLINE));
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
