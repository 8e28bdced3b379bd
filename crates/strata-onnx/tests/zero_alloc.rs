//! In steady state `ExecutionContext::execute` performs no heap allocation (R3): a counting
//! global allocator watches this thread while a CNN-like and a transformer-like model run.
//!
//! To find where an allocation comes from, run with `STRATA_ALLOC_BACKTRACE=1`: every counted
//! allocation then prints its size and a backtrace to stderr.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use strata_core::Tensor;
use strata_onnx::{models, Dim};
use strata_runtime::PlanConfig;

struct Counting;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Print a backtrace for every counted allocation (set from `STRATA_ALLOC_BACKTRACE`).
static BACKTRACES: AtomicBool = AtomicBool::new(false);

/// Counts an allocation made while this thread is watched (and reports it when asked to).
fn record(bytes: usize) {
    if WATCHING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if BACKTRACES.load(Ordering::Relaxed) {
            // Capturing and printing allocate: stop watching meanwhile.
            WATCHING.with(|w| w.set(false));
            eprintln!(
                "allocation of {bytes} bytes while watching:\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            WATCHING.with(|w| w.set(true));
        }
    }
}

// SAFETY: forwards every call unchanged to the system allocator; the counter has no effect on
// the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread by `f`.
fn allocations_during(f: impl FnOnce()) -> usize {
    BACKTRACES.store(
        std::env::var_os("STRATA_ALLOC_BACKTRACE").is_some_and(|v| v != "0"),
        Ordering::Relaxed,
    );
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHING.with(|w| w.set(true));
    f();
    WATCHING.with(|w| w.set(false));
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

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
    let cnn = models::resnet_like(Dim::Fixed(2), 32, 16, 2, 10, 5)
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
