//! A fixed-count loop of tensor creation, views or clones, for instruction counts under
//! callgrind (stable on a loaded machine, unlike wall time):
//!
//! `valgrind --tool=callgrind target/release/examples/tensor_churn create 1000000`
//!
//! Cases: `create` (f32 [2, 3] create + drop), `large` (f32 [32, 32] create + drop: 4 KiB, too
//! large for the thread cache of whole blocks, so it reaches the caching allocator and reuses a
//! header), `view`, `clone`. Divide the total instruction count by the iterations (the fixed
//! start-up cost is a few hundred thousand instructions).

use std::hint::black_box;

use strata_core::{DType, Device, MemoryKind, Tensor};

/// The dims go through `black_box`, as in the criterion bench: a caller's dims are rarely
/// constants the compiler can fold into the shape.
fn small() -> Tensor {
    Tensor::empty(
        black_box(&[2, 3]),
        DType::F32,
        Device::Cpu,
        MemoryKind::Default,
    )
    .expect("small tensor")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "create".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let t = small();
    match case.as_str() {
        "create" => {
            for _ in 0..n {
                drop(black_box(small()));
            }
        }
        "large" => {
            for _ in 0..n {
                drop(black_box(
                    Tensor::empty(
                        black_box(&[32, 32]),
                        DType::F32,
                        Device::Cpu,
                        MemoryKind::Default,
                    )
                    .expect("4 KiB tensor"),
                ));
            }
        }
        "view" => {
            for _ in 0..n {
                drop(black_box(
                    black_box(&t).view(black_box(&[3, 2])).expect("view"),
                ));
            }
        }
        "clone" => {
            for _ in 0..n {
                drop(black_box(black_box(&t).clone()));
            }
        }
        other => {
            eprintln!("unknown case {other:?}: use create, large, view or clone");
            std::process::exit(2);
        }
    }
}
