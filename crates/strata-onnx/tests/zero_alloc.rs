//! In steady state `ExecutionContext::execute` performs no heap allocation (R3): a counting
//! global allocator watches this thread while a CNN-like and a transformer-like model run.
//! See `alloc_counter` for how allocations are counted (and `STRATA_ALLOC_BACKTRACE=1`).

mod alloc_counter;

use strata_core::Tensor;
use strata_onnx::{models, Dim};
use strata_runtime::PlanConfig;

use alloc_counter::allocations_during;

fn steady_state_allocations(bytes: Vec<u8>, input: &str, dims: &[usize]) -> usize {
    let plan =
        strata_onnx::load_bytes(bytes, "test", PlanConfig::default().with_threads(1)).unwrap();
    let mut ctx = plan.create_context().unwrap();
    let n: usize = dims.iter().product();
    let x = Tensor::from_slice(&models::seeded_values(n, 3, 1.0), dims).unwrap();
    ctx.set_input(input, &x).unwrap();
    ctx.execute().unwrap();
    ctx.execute().unwrap();
    let first = ctx.output_at(0).unwrap().to_vec::<f32>().unwrap();
    let count = allocations_during(|| {
        for _ in 0..3 {
            ctx.set_input(input, &x).unwrap();
            ctx.execute().unwrap();
        }
    });
    assert_eq!(
        ctx.output_at(0).unwrap().to_vec::<f32>().unwrap(),
        first,
        "steady runs must repeat the result"
    );
    count
}

#[test]
fn steady_state_execute_does_not_allocate() {
    // One test function: the counter watches only this thread, but keeping both models in one
    // test keeps the check independent of the harness's threads.
    let cnn = models::resnet_like(Dim::Known(2), 32, 16, 2, 10, 5)
        .to_bytes()
        .unwrap();
    assert_eq!(
        steady_state_allocations(cnn, "input", &[2, 3, 32, 32]),
        0,
        "CNN-like model"
    );
    let transformer = models::transformer_like(16, 32, 64, 9).to_bytes().unwrap();
    assert_eq!(
        steady_state_allocations(transformer, "x", &[1, 16, 32]),
        0,
        "transformer-like model"
    );
    // The counter itself works: a Vec allocates.
    assert!(allocations_during(|| drop(std::hint::black_box(vec![1u8; 64]))) >= 1);
}
