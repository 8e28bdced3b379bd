//! A counting global allocator for the zero-allocation tests: it counts the allocations made on
//! a watched thread. Each test binary that declares `mod alloc_counter;` gets its own.
//!
//! To find where an allocation comes from, run with `STRATA_ALLOC_BACKTRACE=1`: every counted
//! allocation then prints its size and a backtrace to stderr.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

struct Counting;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    // Per thread: tests of one binary run concurrently, and one test's allocations must not
    // count against another's window.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}
/// Print a backtrace for every counted allocation (set from `STRATA_ALLOC_BACKTRACE`).
static BACKTRACES: AtomicBool = AtomicBool::new(false);

/// Counts an allocation made while this thread is watched (and reports it when asked to).
fn record(bytes: usize) {
    if WATCHING.with(Cell::get) {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
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
pub fn allocations_during(f: impl FnOnce()) -> usize {
    BACKTRACES.store(
        std::env::var_os("STRATA_ALLOC_BACKTRACE").is_some_and(|v| v != "0"),
        Ordering::Relaxed,
    );
    let before = ALLOCATIONS.with(Cell::get);
    WATCHING.with(|w| w.set(true));
    f();
    WATCHING.with(|w| w.set(false));
    ALLOCATIONS.with(Cell::get) - before
}
