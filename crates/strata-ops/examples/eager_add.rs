//! A fixed-count loop of `add` on 1-element f32 tensors, for instruction counts under callgrind:
//!
//! `valgrind --tool=callgrind target/release/examples/eager_add eager 1000000`
//!
//! Cases: `eager` (`a.add(&b)`), `kernel` (the Add kernel into a preallocated output), `empty`
//! (the Add kernel into a fresh `Tensor::empty` output). Divide the total by the iterations.

use std::hint::black_box;

use strata_core::{DType, Device, MemoryKind, Tensor};
use strata_ops::prelude::*;
use strata_ops::{build_operator, Attributes, Fact, KernelIo, OpContext};

fn main() -> Result<(), strata_ops::OpError> {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "eager".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let a = Tensor::from_slice(&[1.5f32], &[1])?;
    let b = Tensor::from_slice(&[2.5f32], &[1])?;
    let attrs = Attributes::new("Add");
    let op = build_operator(&OpContext {
        op_type: "Add",
        domain: "",
        opset: 14,
        attrs: &attrs,
        num_inputs: 2,
        num_outputs: 1,
    })?;
    let fact = Fact::known(DType::F32, &[1]);
    let kernel = op.kernel(&[&fact, &fact], &[&fact], Device::Cpu)?;
    let run = |out: &Tensor| {
        kernel.run(&KernelIo {
            inputs: &[&a, &b],
            outputs: &[out],
            scratch: None,
            in_place: None,
            threads: 1,
        })
    };
    let out = Tensor::empty(&[1], DType::F32, Device::Cpu, MemoryKind::Default)?;
    // Warm the kernel cache and the thread's block cache.
    drop(a.add(&b)?);
    for _ in 0..n {
        match case.as_str() {
            "eager" => drop(black_box(black_box(&a).add(black_box(&b))?)),
            "kernel" => run(black_box(&out))?,
            "empty" => {
                let fresh = Tensor::empty(&[1], DType::F32, Device::Cpu, MemoryKind::Default)?;
                run(&fresh)?;
                drop(black_box(fresh));
            }
            other => {
                eprintln!("unknown case {other:?}: use eager, kernel or empty");
                std::process::exit(2);
            }
        }
    }
    Ok(())
}
