//! Dispatch overhead of eager ops: `a.add(&b)` on 1-element f32 tensors against the Add kernel
//! called directly (the kernel chosen once, outside the loop), with a preallocated output and
//! with a fresh output per call (`Tensor::empty`, what the eager call does too).
//!
//! `cargo bench -p strata-ops --bench eager -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use strata_core::{DType, Device, MemoryKind, Tensor};
use strata_ops::prelude::*;
use strata_ops::{build_operator, Attributes, Fact, KernelIo, OpContext};

fn add(c: &mut Criterion) {
    let a = Tensor::from_slice(&[1.5f32], &[1]).unwrap();
    let b = Tensor::from_slice(&[2.5f32], &[1]).unwrap();
    let attrs = Attributes::new("Add");
    let op = build_operator(&OpContext {
        op_type: "Add",
        domain: "",
        opset: 14,
        attrs: &attrs,
        num_inputs: 2,
        num_outputs: 1,
    })
    .unwrap();
    let fact = Fact::known(DType::F32, &[1]);
    let kernel = op.kernel(&[&fact, &fact], &[&fact], Device::Cpu).unwrap();
    let out = Tensor::empty(&[1], DType::F32, Device::Cpu, MemoryKind::Default).unwrap();
    let run = |out: &Tensor| {
        kernel
            .run(&KernelIo {
                inputs: &[&a, &b],
                outputs: &[out],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap()
    };

    let mut group = c.benchmark_group("add 1 element");
    group.bench_function("eager a.add(&b)", |bench| {
        bench.iter(|| black_box(black_box(&a).add(black_box(&b)).unwrap()))
    });
    group.bench_function("Add kernel, preallocated output", |bench| {
        bench.iter(|| run(black_box(&out)))
    });
    group.bench_function("Add kernel + Tensor::empty output", |bench| {
        bench.iter(|| {
            let out = Tensor::empty(&[1], DType::F32, Device::Cpu, MemoryKind::Default).unwrap();
            run(&out);
            black_box(out)
        })
    });
    group.bench_function("eager a.add_(&b) in place", |bench| {
        bench.iter(|| {
            black_box(&a).add_(black_box(&b)).unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, add);
criterion_main!(benches);
