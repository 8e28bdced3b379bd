//! Eager ops against the plan-based kernels' results on the same inputs (the operator test
//! harness runs each op the way the runtime does), plus in-place ops and the version counter,
//! dispatch errors and fallthrough, and type promotion.

use strata_core::{CoreError, DType, DispatchKey, DispatchKeySet, InferenceMode, Tensor};

use crate::prelude::*;
use crate::support::rng::Rng;
use crate::support::test_util::OpRun;
use crate::{Attr, OpError};

fn t(data: &[f32], dims: &[usize]) -> Tensor {
    Tensor::from_slice(data, dims).unwrap()
}

fn random(dims: &[usize], seed: u64) -> Tensor {
    let n = dims.iter().product();
    t(&Rng::new(seed).vec(n), dims)
}

fn i64s(data: &[i64]) -> Tensor {
    Tensor::from_slice(data, &[data.len()]).unwrap()
}

/// Same dtype, dims and bits.
fn same(eager: &Tensor, planned: &Tensor) {
    assert_eq!(eager.dtype(), planned.dtype());
    assert_eq!(eager.dims(), planned.dims());
    let (a, b) = (
        eager
            .contiguous()
            .unwrap()
            .read_bytes("t")
            .unwrap()
            .bytes()
            .to_vec(),
        planned
            .contiguous()
            .unwrap()
            .read_bytes("t")
            .unwrap()
            .bytes()
            .to_vec(),
    );
    assert_eq!(a, b, "{eager:?} differs from the planned kernel's result");
}

fn planned(op: &str, opset: i64, attrs: &[(&str, Attr)], inputs: &[Tensor]) -> Tensor {
    // Inputs as plan-time constants, as the one-operator path sees them (axes and `k` must be).
    OpRun::new(op, opset)
        .attrs(attrs)
        .constant_inputs()
        .run(inputs)
        .unwrap()
        .remove(0)
}

#[test]
fn arithmetic_and_comparisons_match_the_kernels() {
    let a = random(&[2, 3, 4], 1);
    let b = random(&[3, 1], 2);
    let ab = [a.clone(), b.clone()];
    same(&a.add(&b).unwrap(), &planned("Add", 14, &[], &ab));
    same(&a.sub(&b).unwrap(), &planned("Sub", 14, &[], &ab));
    same(&a.mul(&b).unwrap(), &planned("Mul", 14, &[], &ab));
    same(&a.div(&b).unwrap(), &planned("Div", 14, &[], &ab));
    same(&a.pow(&b).unwrap(), &planned("Pow", 15, &[], &ab));
    same(&a.lt(&b).unwrap(), &planned("Less", 13, &[], &ab));
    same(&a.le(&b).unwrap(), &planned("LessOrEqual", 16, &[], &ab));
    same(&a.gt(&b).unwrap(), &planned("Greater", 13, &[], &ab));
    same(&a.ge(&b).unwrap(), &planned("GreaterOrEqual", 16, &[], &ab));
    same(
        &a.eq(&a).unwrap(),
        &planned("Equal", 13, &[], &[a.clone(), a.clone()]),
    );
    assert_eq!(a.ne(&a).unwrap().to_bools().unwrap(), vec![false; 24]);
    // Number forms.
    let x = t(&[1.0, -2.0, 3.0], &[3]);
    assert_eq!(
        x.add_scalar(1.5).unwrap().to_vec::<f32>().unwrap(),
        [2.5, -0.5, 4.5]
    );
    assert_eq!(
        x.mul_scalar(2.0).unwrap().to_vec::<f32>().unwrap(),
        [2.0, -4.0, 6.0]
    );
    assert_eq!(
        x.gt_scalar(0.0).unwrap().to_bools().unwrap(),
        [true, false, true]
    );
    // Broadcast mismatch is a typed error.
    assert!(matches!(
        a.add(&random(&[5], 3)),
        Err(OpError::Shape { .. })
    ));
}

#[test]
fn mixed_dtypes_promote_like_pytorch() {
    let i = Tensor::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let f = t(&[0.5, 0.5, 0.5], &[3]);
    let y = i.add(&f).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.5, 2.5, 3.5]);
    // True division of integers gives floats; an integral number keeps the integer dtype.
    let q = i.div(&Tensor::from_slice(&[2i32], &[1]).unwrap()).unwrap();
    assert_eq!(q.to_vec::<f32>().unwrap(), [0.5, 1.0, 1.5]);
    assert_eq!(i.add_scalar(1.0).unwrap().dtype(), DType::I32);
    assert_eq!(
        i.add_scalar(0.5).unwrap().to_vec::<f32>().unwrap(),
        [1.5, 2.5, 3.5]
    );
    // In place cannot change the tensor's dtype.
    assert!(matches!(i.add_(&f), Err(OpError::DType { .. })));
    // exp of integers computes in f32.
    assert_eq!(i.exp().unwrap().dtype(), DType::F32);
}

#[test]
fn unary_and_activations_match_the_kernels() {
    let x = random(&[4, 5], 4);
    let one = |op: &str| planned(op, 14, &[], std::slice::from_ref(&x));
    same(&x.relu().unwrap(), &one("Relu"));
    same(&x.sigmoid().unwrap(), &one("Sigmoid"));
    same(&x.tanh().unwrap(), &one("Tanh"));
    same(&x.exp().unwrap(), &one("Exp"));
    same(&x.abs().unwrap(), &one("Abs"));
    same(&x.neg().unwrap(), &one("Neg"));
    same(&x.erf().unwrap(), &one("Erf"));
    same(&x.softplus().unwrap(), &one("Softplus"));
    same(
        &x.abs().unwrap().sqrt().unwrap(),
        &planned("Sqrt", 13, &[], &[x.abs().unwrap()]),
    );
    same(
        &x.gelu(false).unwrap(),
        &planned("Gelu", 20, &[], std::slice::from_ref(&x)),
    );
    same(
        &x.gelu(true).unwrap(),
        &planned(
            "Gelu",
            20,
            &[("approximate", Attr::String("tanh".into()))],
            std::slice::from_ref(&x),
        ),
    );
    same(
        &x.leaky_relu(0.1).unwrap(),
        &planned(
            "LeakyRelu",
            16,
            &[("alpha", Attr::Float(0.1))],
            std::slice::from_ref(&x),
        ),
    );
    same(
        &x.silu().unwrap(),
        &planned("Swish", 24, &[], std::slice::from_ref(&x)),
    );
    same(
        &x.hardswish().unwrap(),
        &planned("HardSwish", 14, &[], std::slice::from_ref(&x)),
    );
    let flags = Tensor::from_bools(&[true, false], &[2]).unwrap();
    assert_eq!(
        flags.logical_not().unwrap().to_bools().unwrap(),
        [false, true]
    );
}

#[test]
fn matmul_conv_and_pools_match_the_kernels() {
    let a = random(&[2, 3, 4], 5);
    let b = random(&[4, 5], 6);
    same(
        &a.matmul(&b).unwrap(),
        &planned("MatMul", 13, &[], &[a.clone(), b.clone()]),
    );

    let x = random(&[1, 4, 7, 7], 7);
    let w = random(&[6, 2, 3, 3], 8);
    let bias = random(&[6], 9);
    let args = Conv2d {
        stride: [2, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 2,
    };
    let conv_attrs = [
        ("strides", Attr::Ints(vec![2, 1])),
        ("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ("group", Attr::Int(2)),
    ];
    same(
        &x.conv2d(&w, Some(&bias), args).unwrap(),
        &planned(
            "Conv",
            11,
            &conv_attrs,
            &[x.clone(), w.clone(), bias.clone()],
        ),
    );
    assert!(x.conv2d(&random(&[6, 2, 3], 1), None, args).is_err());

    let window = Pool2d {
        stride: Some([2, 2]),
        padding: [1, 1],
        ..Pool2d::new([3, 3])
    };
    let pool_attrs = [
        ("kernel_shape", Attr::Ints(vec![3, 3])),
        ("strides", Attr::Ints(vec![2, 2])),
        ("pads", Attr::Ints(vec![1, 1, 1, 1])),
    ];
    same(
        &x.max_pool2d(window).unwrap(),
        &planned("MaxPool", 12, &pool_attrs, std::slice::from_ref(&x)),
    );
    let mut avg_attrs = pool_attrs.to_vec();
    avg_attrs.push(("count_include_pad", Attr::Int(1)));
    same(
        &x.avg_pool2d(window).unwrap(),
        &planned("AveragePool", 19, &avg_attrs, std::slice::from_ref(&x)),
    );
    same(
        &x.global_avg_pool2d().unwrap(),
        &planned("GlobalAveragePool", 1, &[], std::slice::from_ref(&x)),
    );
    same(
        &x.global_max_pool2d().unwrap(),
        &planned("GlobalMaxPool", 1, &[], std::slice::from_ref(&x)),
    );
}

#[test]
fn softmax_and_reductions_match_the_kernels() {
    let x = random(&[3, 4, 5], 10);
    let axis = |a: i64| [("axis", Attr::Int(a))];
    same(
        &x.softmax(-1).unwrap(),
        &planned("Softmax", 13, &axis(-1), std::slice::from_ref(&x)),
    );
    same(
        &x.log_softmax(1).unwrap(),
        &planned("LogSoftmax", 13, &axis(1), std::slice::from_ref(&x)),
    );
    for (op, name) in [
        (
            EagerReduce::sum as fn(&Tensor, &[isize], bool) -> _,
            "ReduceSum",
        ),
        (EagerReduce::mean, "ReduceMean"),
        (EagerReduce::amax, "ReduceMax"),
        (EagerReduce::amin, "ReduceMin"),
        (EagerReduce::prod, "ReduceProd"),
    ] {
        for keep in [false, true] {
            let attrs = [("keepdims", Attr::Int(keep as i64))];
            same(
                &op(&x, &[-1, 0], keep).unwrap(),
                &planned(name, 18, &attrs, &[x.clone(), i64s(&[2, 0])]),
            );
            same(
                &op(&x, &[], keep).unwrap(),
                &planned(name, 18, &attrs, std::slice::from_ref(&x)),
            );
        }
    }
    let am = x.argmax(Some(1), false).unwrap();
    same(
        &am,
        &planned(
            "ArgMax",
            13,
            &[("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
            std::slice::from_ref(&x),
        ),
    );
    same(
        &x.argmin(Some(-1), true).unwrap(),
        &planned(
            "ArgMin",
            13,
            &[("axis", Attr::Int(2))],
            std::slice::from_ref(&x),
        ),
    );
    // Without a dim: the index into the flattened tensor.
    let flat = x.to_vec::<f32>().unwrap();
    let best = (0..flat.len()).fold(0, |b, i| if flat[i] > flat[b] { i } else { b });
    let all = x.argmax(None, false).unwrap();
    assert_eq!(
        (all.dims(), all.to_vec::<i64>().unwrap()),
        (&[][..], vec![best as i64])
    );
    assert_eq!(x.argmin(None, true).unwrap().dims(), &[1, 1, 1]);
    assert!(x.sum(&[3], false).is_err());
}

#[test]
fn selection_and_joining_match_the_kernels() {
    let x = t(&[5.0, 1.0, 4.0, 2.0, 9.0, 0.0, 3.0, 8.0], &[2, 4]);
    let (v, i) = x.topk(2, -1, true, true).unwrap();
    let want = OpRun::new("TopK", 11)
        .attrs(&[("axis", Attr::Int(-1))])
        .outputs(2)
        .constant_inputs()
        .run(&[x.clone(), i64s(&[2])])
        .unwrap();
    same(&v, &want[0]);
    same(&i, &want[1]);
    assert_eq!(v.to_vec::<f32>().unwrap(), [5.0, 4.0, 9.0, 8.0]);
    // Unsorted: the same elements in input order.
    let (v, i) = x.topk(2, 1, true, false).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), [5.0, 4.0, 9.0, 8.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), [0, 2, 0, 3]);
    let (v, i) = x.topk(3, 1, false, false).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), [1.0, 4.0, 2.0, 0.0, 3.0, 8.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), [1, 2, 3, 1, 2, 3]);

    let idx = i64s(&[3, 0]);
    same(
        &x.index_select(1, &idx).unwrap(),
        &planned(
            "Gather",
            13,
            &[("axis", Attr::Int(1))],
            &[x.clone(), idx.clone()],
        ),
    );
    let gi = Tensor::from_slice(&[1i64, 0, 0, 1], &[1, 4]).unwrap();
    same(
        &x.gather(0, &gi).unwrap(),
        &planned("GatherElements", 13, &[], &[x.clone(), gi.clone()]),
    );
    let cond = x.gt_scalar(3.0).unwrap();
    let zero = t(&[0.0], &[1]);
    same(
        &where_cond(&cond, &x, &zero).unwrap(),
        &planned("Where", 16, &[], &[cond.clone(), x.clone(), zero.clone()]),
    );
    assert!(where_cond(&x, &x, &x).is_err());

    let y = random(&[2, 3], 11);
    same(
        &cat(&[&x, &y], 1).unwrap(),
        &planned(
            "Concat",
            13,
            &[("axis", Attr::Int(1))],
            &[x.clone(), y.clone()],
        ),
    );
    let s = stack(&[&y, &y, &y], 1).unwrap();
    assert_eq!(s.dims(), &[2, 3, 3]);
    same(&s.select(1, 2).unwrap(), &y);
    assert!(cat(&[], 0).is_err());
}

#[test]
fn to_dtype_and_clamp_match_the_kernels() {
    let x = t(&[-1.7, 0.2, 2.5, 300.0], &[4]);
    same(
        &x.to_dtype(DType::I32).unwrap(),
        &planned(
            "Cast",
            21,
            &[("to", Attr::Int(6))],
            std::slice::from_ref(&x),
        ),
    );
    same(
        &x.to_dtype(DType::F16).unwrap(),
        &planned(
            "Cast",
            21,
            &[("to", Attr::Int(10))],
            std::slice::from_ref(&x),
        ),
    );
    let (lo, hi) = (t(&[0.0], &[]), t(&[1.0], &[]));
    same(
        &x.clamp(Some(0.0), Some(1.0)).unwrap(),
        &planned("Clip", 13, &[], &[x.clone(), lo, hi]),
    );
    assert_eq!(
        x.clamp(None, Some(0.0)).unwrap().to_vec::<f32>().unwrap(),
        [-1.7, 0.0, 0.0, 0.0]
    );
    // Block-quantized sources dispatch to the block decoder.
    let values: Vec<f32> = (0..32).map(|i| i as f32 / 4.0).collect();
    let mut block = vec![0u8; DType::Q8_0.size_in_bytes()];
    strata_core::dtype::block::quantize_q8_0(&values, &mut block);
    let q = Tensor::zeros(&[32], DType::Q8_0).unwrap();
    q.write_bytes("t").unwrap().bytes().copy_from_slice(&block);
    let back = q.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    assert!(
        back.iter().zip(&values).all(|(a, b)| (a - b).abs() < 0.04),
        "{back:?}"
    );
}

#[test]
fn in_place_ops_bump_the_version_once_except_in_inference_mode() {
    let a = t(&[1.0, -2.0, 3.0, -4.0], &[2, 2]);
    let b = t(&[10.0, 20.0], &[2]);
    let view = a.view(&[4]).unwrap();
    let v0 = a.version();
    a.add_(&b).unwrap();
    assert_eq!(a.version(), v0 + 1);
    assert_eq!(view.version(), v0 + 1, "views share the counter");
    assert_eq!(a.to_vec::<f32>().unwrap(), [11.0, 18.0, 13.0, 16.0]);
    a.sub_(&b).unwrap().mul_(&b).unwrap();
    assert_eq!(a.version(), v0 + 3);
    assert_eq!(a.to_vec::<f32>().unwrap(), [10.0, -40.0, 30.0, -80.0]);
    a.div_(&b).unwrap();
    a.relu_().unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 0.0]);
    a.clamp_(Some(0.5), Some(2.0)).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 0.5, 2.0, 0.5]);
    assert_eq!(a.version(), v0 + 6);
    // With itself as the operand (same memory).
    a.add_(&a).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [2.0, 1.0, 4.0, 1.0]);
    assert_eq!(a.version(), v0 + 7);
    // A strided target: computed out of place, copied back in one write.
    let tr = a.transpose(0, 1).unwrap();
    tr.add_(&t(&[100.0], &[1])).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [102.0, 101.0, 104.0, 101.0]);
    assert_eq!(a.version(), v0 + 8);
    // The result must keep the tensor's dims.
    assert!(b.add_(&a).is_err());
    assert_eq!(
        b.version(),
        1,
        "from_slice wrote once; the failed add_ did not"
    );
    {
        let _guard = InferenceMode::enter();
        a.add_(&b).unwrap();
        a.relu_().unwrap();
        a.clamp_(None, Some(110.0)).unwrap();
    }
    assert_eq!(a.version(), v0 + 8, "no bumps in inference mode");
    assert_eq!(a.to_vec::<f32>().unwrap(), [110.0, 110.0, 110.0, 110.0]);
}

#[test]
fn dispatch_routes_through_inference_mode_and_names_missing_kernels() {
    let a = t(&[1.0, 2.0], &[2]);
    {
        let _guard = InferenceMode::enter();
        // InferenceMode falls through to the dense CPU kernel.
        assert_eq!(a.add(&a).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0]);
        assert_eq!(a.softmax(0).unwrap().dims(), &[2]);
    }
    let q = Tensor::zeros(&[32], DType::Q4_0).unwrap();
    let err = q.add(&q).unwrap_err();
    let keys =
        DispatchKeySet::from_keys(&[DispatchKey::Cpu, DispatchKey::Dense, DispatchKey::Quantized]);
    assert!(
        matches!(&err, OpError::Core(CoreError::NoKernel { op: "add", keys: k }) if *k == keys),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("add") && err.to_string().contains("Quantized"),
        "{err}"
    );
    assert!(matches!(
        q.softmax(0),
        Err(OpError::Core(CoreError::NoKernel { op: "softmax", .. }))
    ));
    assert!(matches!(
        q.relu(),
        Err(OpError::Core(CoreError::NoKernel { op: "relu", .. }))
    ));
    // A dense dtype without a kernel is the operator's own typed error.
    let b = Tensor::from_bools(&[true], &[1]).unwrap();
    assert!(matches!(b.sub(&b), Err(OpError::NoKernel { .. })));
}

#[test]
fn undefined_and_empty_inputs() {
    let e = Tensor::zeros(&[0, 3], DType::F32).unwrap();
    assert_eq!(e.add(&e).unwrap().dims(), &[0, 3]);
    assert_eq!(e.relu().unwrap().dims(), &[0, 3]);
    assert!(Tensor::undefined().add(&e).is_err());
}
