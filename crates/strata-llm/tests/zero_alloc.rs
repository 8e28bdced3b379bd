//! A decode step in steady state allocates nothing: after the first step (which plans the
//! one-token dims) and inside one KV cache block, `Session::step` makes no heap allocation.

// The same counting allocator as strata-onnx's zero-allocation tests, not a copy of it.
#[path = "../../strata-onnx/tests/alloc_counter/mod.rs"]
mod alloc_counter;
mod common;

use common::{open, Tiny};
use strata_core::DType;
use strata_llm::{LanguageModel, LoadOptions};

#[test]
fn decode_steps_allocate_nothing() {
    for dtype in [DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::F16] {
        let mut t = Tiny::new("llama", dtype);
        t.context = 128;
        let options = LoadOptions {
            threads: 1,
            ..Default::default()
        };
        let model = LanguageModel::from_gguf(&open(&t), options).unwrap();
        let mut session = model.session().unwrap();
        session.prefill(&[1, 2, 3, 4]).unwrap();
        // Warm up: the first steps specialize the plan for one token and warm thread-local rows.
        session.step(5).unwrap();
        session.step(6).unwrap();
        let mut last = 0.0;
        let allocations = alloc_counter::allocations_during(|| {
            for i in 0..20u32 {
                last = session.step(i % 64).unwrap()[0];
            }
        });
        assert!(last.is_finite());
        assert_eq!(
            allocations, 0,
            "{dtype:?}: decode steps allocated {allocations} times"
        );
    }
}
