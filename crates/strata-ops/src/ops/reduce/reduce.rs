//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
//! ReduceLogSum, ReduceLogSumExp and ReduceSumSquare, with axes as an attribute (older opsets)
//! or an input (ReduceSum from 13, the rest from 18), `keepdims` and `noop_with_empty_axes`.
//!
//! The kernel merges adjacent dims that are all reduced or all kept, so any axis set becomes
//! alternating groups over a contiguous input. When the innermost group is reduced each output
//! folds contiguous runs with independent lane accumulators (vectorizes); when it is kept, a
//! stack chunk of accumulators folds whole rows element-wise (vectorizes too). No allocation.

use smallvec::SmallVec;
use strata_core::{DType, Device};

use crate::support::accumulate::{dispatch_accumulate, max_of, min_of, Accumulate};
use crate::support::axes::{
    dims_input_len, input_len, normalize_axes, read_optional_ints, Axes, Ints,
};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_plain;
use crate::support::strided::StridedWalk;
use crate::{
    int_values, Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator,
};

/// The reduction operators, registered in the ONNX domain.
pub const OPS: &[(&str, Constructor)] = &[
    ("ReduceSum", |c| Reduce::build(ReduceOp::Sum, c)),
    ("ReduceMean", |c| Reduce::build(ReduceOp::Mean, c)),
    ("ReduceMax", |c| Reduce::build(ReduceOp::Max, c)),
    ("ReduceMin", |c| Reduce::build(ReduceOp::Min, c)),
    ("ReduceProd", |c| Reduce::build(ReduceOp::Prod, c)),
    ("ReduceL1", |c| Reduce::build(ReduceOp::L1, c)),
    ("ReduceL2", |c| Reduce::build(ReduceOp::L2, c)),
    ("ReduceLogSum", |c| Reduce::build(ReduceOp::LogSum, c)),
    ("ReduceLogSumExp", |c| Reduce::build(ReduceOp::LogSumExp, c)),
    ("ReduceSumSquare", |c| Reduce::build(ReduceOp::SumSquare, c)),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "ReduceSum",
            ReduceOp::Mean => "ReduceMean",
            ReduceOp::Max => "ReduceMax",
            ReduceOp::Min => "ReduceMin",
            ReduceOp::Prod => "ReduceProd",
            ReduceOp::L1 => "ReduceL1",
            ReduceOp::L2 => "ReduceL2",
            ReduceOp::LogSum => "ReduceLogSum",
            ReduceOp::LogSumExp => "ReduceLogSumExp",
            ReduceOp::SumSquare => "ReduceSumSquare",
        }
    }

    /// Bool inputs only make sense for max and min (opset 20).
    fn accepts(self, dtype: DType) -> bool {
        match dtype {
            DType::Bool => matches!(self, ReduceOp::Max | ReduceOp::Min),
            d => !d.is_quantized(),
        }
    }
}

#[derive(Debug)]
pub struct Reduce {
    op: ReduceOp,
    keepdims: bool,
    noop_with_empty_axes: bool,
    axes_attr: Option<Vec<i64>>,
}

impl Reduce {
    pub fn build(op: ReduceOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Reduce {
            op,
            keepdims: ctx.attrs.int_or("keepdims", 1)? != 0,
            noop_with_empty_axes: ctx.attrs.int_or("noop_with_empty_axes", 0)? != 0,
            axes_attr: ctx.attrs.ints("axes")?,
        }))
    }
}

/// The axes to reduce for `axes` (absent or empty: all, or none with `noop_with_empty_axes`);
/// `None` means the op is an identity.
fn reduced_axes(
    op: ReduceOp,
    axes: Option<&[i64]>,
    noop: bool,
    rank: usize,
) -> OpResult<Option<Axes>> {
    match axes {
        Some(a) if !a.is_empty() => Ok(Some(normalize_axes(op.name(), "axes", a, rank)?)),
        _ if noop => Ok(None),
        _ => Ok(Some((0..rank).collect())),
    }
}

/// Output dims: reduced axes become 1 (`keepdims`) or disappear.
fn reduced_dims<D: Clone>(dims: &[D], axes: &[usize], keepdims: bool, one: D) -> Vec<D> {
    dims.iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(one.clone()),
            (true, false) => None,
        })
        .collect()
}

impl Operator for Reduce {
    fn op_type(&self) -> &str {
        self.op.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let name = self.op.name();
        let x = required(name, inputs, 0)?;
        if !self.op.accepts(x.dtype) {
            return Err(OpError::DType {
                op: name.into(),
                index: 0,
                expected: "a numeric type".into(),
                actual: x.dtype,
            });
        }
        let rank = x.rank();
        let axes = match (&self.axes_attr, optional(inputs, 1)) {
            (Some(a), _) => Some(a.clone()),
            (None, None) => None,
            (None, Some(f)) => match &f.value {
                Some(v) => Some(int_values(name, v)?),
                None if input_len(inputs, 1) == Some(0) => None,
                // Axes known only at run time: the rank is known, the dims are not.
                None if self.keepdims => {
                    return Ok(vec![Fact::new(x.dtype, vec![Dim::Unknown; rank])])
                }
                None => {
                    let n = dims_input_len(name, inputs, 1)?
                        .filter(|&n| n <= rank)
                        .ok_or_else(|| OpError::shape(name, "the axes input has unknown length"))?;
                    return Ok(vec![Fact::new(x.dtype, vec![Dim::Unknown; rank - n])]);
                }
            },
        };
        let dims = match reduced_axes(self.op, axes.as_deref(), self.noop_with_empty_axes, rank)? {
            Some(axes) => reduced_dims(&x.dims, &axes, self.keepdims, Dim::Known(1)),
            None => x.dims.clone(),
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(self.op.name(), inputs, 0)?.dtype;
        cpu_plain(self.op.name(), dtype, device)?;
        if !self.op.accepts(dtype) {
            return Err(OpError::no_kernel(self.op.name(), dtype, device));
        }
        Ok(Box::new(ReduceKernel {
            op: self.op,
            keepdims: self.keepdims,
            noop_with_empty_axes: self.noop_with_empty_axes,
            axes_attr: self.axes_attr.as_ref().map(|a| a.iter().copied().collect()),
        }))
    }
}

#[derive(Debug)]
struct ReduceKernel {
    op: ReduceOp,
    keepdims: bool,
    noop_with_empty_axes: bool,
    axes_attr: Option<Ints>,
}

impl Kernel for ReduceKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let name = self.op.name();
        let (x, out) = (io.input(0), io.output(0));
        let axes = match &self.axes_attr {
            Some(a) => Some(a.clone()),
            None => read_optional_ints(name, io.inputs, 1)?,
        };
        let Some(axes) = reduced_axes(
            self.op,
            axes.as_deref(),
            self.noop_with_empty_axes,
            x.rank(),
        )?
        else {
            return copy_view(name, out, x);
        };
        let expected: usize = x
            .dims()
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .product();
        if out.numel() != expected || out.dtype() != x.dtype() {
            return Err(OpError::kernel(
                name,
                format!(
                    "output {}{:?} does not match input {}{:?} reduced over {:?} (keepdims {})",
                    out.dtype(),
                    out.dims(),
                    x.dtype(),
                    x.dims(),
                    axes.as_slice(),
                    self.keepdims
                ),
            ));
        }
        if expected == 0 {
            return Ok(());
        }
        let geometry = Geometry::new(x.dims(), &axes);
        let xr_err = || OpError::kernel(name, "input or output is not contiguous");
        dispatch_accumulate!(x.dtype(), bool: true, T => {
            let xr = x.read::<T>()?;
            let xs = xr.as_slice().ok_or_else(xr_err)?;
            let mut ow = out.write::<T>()?;
            let os = ow.as_mut_slice().ok_or_else(xr_err)?;
            reduce_typed::<T>(self.op, xs, os, &geometry);
            Ok(())
        }, _ => Err(OpError::no_kernel(name, x.dtype(), Device::Cpu)))
    }
}

/// Sizes and element strides of merged dims, outermost first.
#[derive(Debug, Default)]
struct Groups {
    dims: SmallVec<[usize; 8]>,
    strides: SmallVec<[isize; 8]>,
}

impl Groups {
    fn push(&mut self, dim: usize, stride: usize) {
        self.dims.push(dim);
        self.strides.push(stride as isize);
    }

    fn reverse(&mut self) {
        self.dims.reverse();
        self.strides.reverse();
    }
}

/// A contiguous input seen as merged groups: the innermost group (reduced or kept) and the
/// outer kept and reduced groups.
#[derive(Debug)]
struct Geometry {
    inner: usize,
    inner_reduced: bool,
    kept: Groups,
    reduced: Groups,
    /// Elements folded into each output.
    count: usize,
}

impl Geometry {
    fn new(dims: &[usize], axes: &[usize]) -> Geometry {
        let mut groups: SmallVec<[(usize, bool); 8]> = SmallVec::new();
        let mut count = 1;
        for (i, &d) in dims.iter().enumerate() {
            let reduced = axes.contains(&i);
            if reduced {
                count *= d;
            }
            if d == 1 {
                continue;
            }
            match groups.last_mut() {
                Some(last) if last.1 == reduced => last.0 *= d,
                _ => groups.push((d, reduced)),
            }
        }
        let (inner, inner_reduced) = groups.pop().unwrap_or((1, false));
        let (mut kept, mut reduced) = (Groups::default(), Groups::default());
        let mut stride = inner;
        for &(d, r) in groups.iter().rev() {
            if r {
                reduced.push(d, stride);
            } else {
                kept.push(d, stride);
            }
            stride *= d;
        }
        kept.reverse();
        reduced.reverse();
        Geometry {
            inner,
            inner_reduced,
            kept,
            reduced,
            count,
        }
    }
}

/// Calls `f(offset)` for every index of `groups` in row-major order (once when empty, never
/// when a group is empty).
#[inline(always)]
fn for_each_offset(groups: &Groups, mut f: impl FnMut(usize)) {
    for [offset] in StridedWalk::new(&groups.dims, [&groups.strides], [0]) {
        f(offset as usize);
    }
}

const LANES: usize = 8;
const CHUNK: usize = 64;

/// Folds `f(v)` over a contiguous run with independent lane accumulators (so the loop
/// vectorizes), starting from the identity `ident`.
#[inline(always)]
fn fold_run<T: Copy, A: Copy>(
    run: &[T],
    ident: A,
    f: impl Fn(T) -> A,
    comb: impl Fn(A, A) -> A,
) -> A {
    let mut lanes = [ident; LANES];
    let mut chunks = run.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = comb(*l, f(v));
        }
    }
    let mut acc = ident;
    for l in lanes {
        acc = comb(acc, l);
    }
    for &v in chunks.remainder() {
        acc = comb(acc, f(v));
    }
    acc
}

/// `out[o] = fin(fold of f(x, out[o]) over the elements reduced into o, out[o])`. Passing the
/// previous output to `f` and `fin` lets log-sum-exp shift by a max computed in a first pass.
#[inline(always)]
fn reduce_core<T: Copy, A: Copy>(
    x: &[T],
    out: &mut [T],
    g: &Geometry,
    ident: A,
    f: impl Fn(T, T) -> A + Copy,
    comb: impl Fn(A, A) -> A + Copy,
    fin: impl Fn(A, T) -> T,
) {
    if g.inner_reduced {
        let run = g.inner;
        let mut o = 0;
        for_each_offset(&g.kept, |base| {
            let s = out[o];
            let mut acc = ident;
            for_each_offset(&g.reduced, |off| {
                let start = base + off;
                acc = comb(
                    acc,
                    fold_run(&x[start..start + run], ident, |v| f(v, s), comb),
                );
            });
            out[o] = fin(acc, s);
            o += 1;
        });
    } else {
        let k = g.inner;
        let mut row = 0;
        for_each_offset(&g.kept, |base| {
            let mut c = 0;
            while c < k {
                let w = CHUNK.min(k - c);
                let dst = &mut out[row + c..row + c + w];
                let mut acc = [ident; CHUNK];
                for_each_offset(&g.reduced, |off| {
                    let start = base + off + c;
                    let src = &x[start..start + w];
                    for ((a, &v), &s) in acc.iter_mut().zip(src).zip(dst.iter()) {
                        *a = comb(*a, f(v, s));
                    }
                });
                for (d, &a) in dst.iter_mut().zip(&acc) {
                    *d = fin(a, *d);
                }
                c += w;
            }
            row += k;
        });
    }
}

fn reduce_typed<T: Accumulate>(op: ReduceOp, x: &[T], out: &mut [T], g: &Geometry) {
    let add = T::add;
    let narrow = |a: T::Acc, _: T| T::narrow(a);
    let float_fin =
        |h: fn(f64) -> f64| move |a: T::Acc, _: T| T::narrow(T::from_f64(h(T::to_f64(a))));
    match op {
        ReduceOp::Sum => reduce_core(x, out, g, T::zero(), |v, _| v.widen(), add, narrow),
        ReduceOp::Mean => {
            let n = g.count as f64;
            reduce_core(
                x,
                out,
                g,
                T::zero(),
                |v, _| v.widen(),
                add,
                |a, _| T::narrow(T::from_f64(T::to_f64(a) / n)),
            )
        }
        ReduceOp::Max => reduce_core(x, out, g, T::lowest(), |v, _| v.widen(), max_of, narrow),
        ReduceOp::Min => reduce_core(x, out, g, T::highest(), |v, _| v.widen(), min_of, narrow),
        ReduceOp::Prod => reduce_core(x, out, g, T::one(), |v, _| v.widen(), T::mul, narrow),
        ReduceOp::L1 => reduce_core(x, out, g, T::zero(), |v, _| T::abs(v.widen()), add, narrow),
        ReduceOp::SumSquare => reduce_core(
            x,
            out,
            g,
            T::zero(),
            |v, _| T::mul(v.widen(), v.widen()),
            add,
            narrow,
        ),
        ReduceOp::L2 => reduce_core(
            x,
            out,
            g,
            T::zero(),
            |v, _| T::mul(v.widen(), v.widen()),
            add,
            float_fin(f64::sqrt),
        ),
        ReduceOp::LogSum => reduce_core(
            x,
            out,
            g,
            T::zero(),
            |v, _| v.widen(),
            add,
            float_fin(f64::ln),
        ),
        ReduceOp::LogSumExp => {
            // Pass 1 leaves the max in `out`; pass 2 sums exp(x - max) in f64. An infinite max
            // (all -inf, or an empty set) shifts by 0 so no inf - inf appears.
            reduce_core(x, out, g, T::lowest(), |v, _| v.widen(), max_of, narrow);
            let shift = |s: T| {
                let s = T::to_f64(s.widen());
                if s.is_finite() {
                    s
                } else {
                    0.0
                }
            };
            reduce_core(
                x,
                out,
                g,
                0.0f64,
                |v, s| (T::to_f64(v.widen()) - shift(s)).exp(),
                |a, b| a + b,
                |a, s| T::narrow(T::from_f64(shift(s) + a.ln())),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    fn build(op: ReduceOp, opset: i64, attrs: &[(&str, Attr)]) -> Box<dyn Operator> {
        let mut a = Attributes::new(op.name());
        for (k, v) in attrs {
            a.insert(k, v.clone());
        }
        Reduce::build(
            op,
            &OpContext {
                op_type: op.name(),
                domain: "",
                opset,
                attrs: &a,
                num_inputs: 2,
                num_outputs: 1,
            },
        )
        .unwrap()
    }

    /// Runs `op` through infer + kernel like the runtime's dynamic path.
    fn run(op: &dyn Operator, inputs: &[Tensor]) -> OpResult<Tensor> {
        let facts: Vec<Fact> = inputs
            .iter()
            .map(|t| {
                if t.is_defined() {
                    Fact::constant(t.clone())
                } else {
                    Fact::absent()
                }
            })
            .collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let out = op.infer(&refs)?.remove(0);
        let o = Tensor::zeros(&out.concrete().unwrap(), out.dtype)?;
        let kernel = op.kernel(&refs, &[&out], Device::Cpu)?;
        let ins: Vec<&Tensor> = inputs.iter().collect();
        kernel.run(&KernelIo {
            inputs: &ins,
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    fn data() -> Tensor {
        // [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]]
        let v: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        Tensor::from_slice(&v, &[3, 2, 2]).unwrap()
    }

    #[test]
    fn sum_over_each_axis_and_all() {
        let op = build(ReduceOp::Sum, 13, &[("keepdims", Attr::Int(0))]);
        let axes = |a: &[i64]| Tensor::from_slice(a, &[a.len()]).unwrap();
        let y = run(op.as_ref(), &[data(), axes(&[1])]).unwrap();
        assert_eq!(y.dims(), &[3, 2]);
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![4., 6., 12., 14., 20., 22.]);
        let y = run(op.as_ref(), &[data(), axes(&[-1])]).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 7., 11., 15., 19., 23.]);
        let y = run(op.as_ref(), &[data(), axes(&[0, 2])]).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![33., 45.]);
        let y = run(op.as_ref(), &[data(), Tensor::undefined()]).unwrap();
        assert_eq!(y.dims(), &[] as &[usize]);
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![78.]);
    }

    #[test]
    fn noop_with_empty_axes_copies() {
        let op = build(ReduceOp::Sum, 13, &[("noop_with_empty_axes", Attr::Int(1))]);
        let empty = Tensor::from_slice::<i64>(&[], &[0]).unwrap();
        let y = run(op.as_ref(), &[data(), empty]).unwrap();
        assert_eq!(y.dims(), &[3, 2, 2]);
        assert_eq!(y.to_vec::<f32>().unwrap(), data().to_vec::<f32>().unwrap());
    }

    #[test]
    fn every_op_on_a_middle_axis() {
        let attrs = [("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(1))];
        let case = |op, expected: Vec<f32>| {
            let y = run(build(op, 11, &attrs).as_ref(), &[data()]).unwrap();
            assert_eq!(y.dims(), &[3, 1, 2]);
            let got = y.to_vec::<f32>().unwrap();
            for (g, e) in got.iter().zip(&expected) {
                assert!((g - e).abs() < 1e-4, "{op:?}: {got:?} vs {expected:?}");
            }
        };
        case(ReduceOp::Mean, vec![2., 3., 6., 7., 10., 11.]);
        case(ReduceOp::Max, vec![3., 4., 7., 8., 11., 12.]);
        case(ReduceOp::Min, vec![1., 2., 5., 6., 9., 10.]);
        case(ReduceOp::Prod, vec![3., 8., 35., 48., 99., 120.]);
        case(ReduceOp::SumSquare, vec![10., 20., 74., 100., 202., 244.]);
        case(
            ReduceOp::L2,
            vec![
                10f32.sqrt(),
                20f32.sqrt(),
                74f32.sqrt(),
                10.,
                202f32.sqrt(),
                244f32.sqrt(),
            ],
        );
        case(
            ReduceOp::LogSum,
            vec![
                4f32.ln(),
                6f32.ln(),
                12f32.ln(),
                14f32.ln(),
                20f32.ln(),
                22f32.ln(),
            ],
        );
        let lse = |a: f32, b: f32| (a.exp() + b.exp()).ln();
        case(
            ReduceOp::LogSumExp,
            vec![
                lse(1., 3.),
                lse(2., 4.),
                lse(5., 7.),
                lse(6., 8.),
                lse(9., 11.),
                lse(10., 12.),
            ],
        );
    }

    #[test]
    fn integers_bools_and_empty_sets() {
        let x = Tensor::from_slice(&[-3i32, 4, -5, 6], &[2, 2]).unwrap();
        let op = build(ReduceOp::L1, 11, &[("axes", Attr::Ints(vec![0]))]);
        assert_eq!(
            run(op.as_ref(), std::slice::from_ref(&x))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![8, 10]
        );
        let op = build(ReduceOp::Mean, 11, &[("keepdims", Attr::Int(0))]);
        assert_eq!(
            run(op.as_ref(), &[x]).unwrap().to_vec::<i32>().unwrap(),
            vec![0]
        );
        let b = Tensor::from_bools(&[true, false, false, false], &[2, 2]).unwrap();
        let op = build(ReduceOp::Max, 20, &[("keepdims", Attr::Int(0))]);
        let axes = Tensor::from_slice(&[1i64], &[1]).unwrap();
        assert_eq!(
            run(op.as_ref(), &[b, axes]).unwrap().to_bools().unwrap(),
            vec![true, false]
        );
        // Reducing an empty axis yields the identity of the reduction.
        let e = Tensor::zeros(&[2, 0, 4], DType::F32).unwrap();
        let axes = Tensor::from_slice(&[1i64], &[1]).unwrap();
        for (op, v) in [
            (ReduceOp::Sum, 0.0),
            (ReduceOp::Prod, 1.0),
            (ReduceOp::Max, f32::NEG_INFINITY),
            (ReduceOp::Min, f32::INFINITY),
            (ReduceOp::LogSumExp, f32::NEG_INFINITY),
        ] {
            let y = run(build(op, 18, &[]).as_ref(), &[e.clone(), axes.clone()]).unwrap();
            assert_eq!(y.dims(), &[2, 1, 4]);
            assert!(y.to_vec::<f32>().unwrap().iter().all(|&g| g == v), "{op:?}");
        }
    }

    #[test]
    fn long_rows_use_lanes_and_chunks() {
        let n = 1000;
        let v: Vec<f32> = (0..2 * n).map(|i| (i % 7) as f32).collect();
        let x = Tensor::from_slice(&v, &[2, n]).unwrap();
        let sum = |a: i64| {
            let op = build(ReduceOp::Sum, 13, &[("keepdims", Attr::Int(0))]);
            run(
                op.as_ref(),
                &[x.clone(), Tensor::from_slice(&[a], &[1]).unwrap()],
            )
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
        };
        let rows = sum(1);
        assert_eq!(rows[0], v[..n].iter().sum::<f32>());
        assert_eq!(rows[1], v[n..].iter().sum::<f32>());
        let cols = sum(0);
        assert_eq!(cols.len(), n);
        assert!(cols.iter().enumerate().all(|(j, &c)| c == v[j] + v[n + j]));
    }

    #[test]
    fn bad_axes_are_errors() {
        let op = build(ReduceOp::Sum, 13, &[]);
        let axes = Tensor::from_slice(&[3i64], &[1]).unwrap();
        let err = run(op.as_ref(), &[data(), axes]).unwrap_err();
        assert!(err.to_string().contains("axes"), "{err}");
        let op = build(ReduceOp::Sum, 13, &[]);
        let b = Tensor::from_bools(&[true], &[1]).unwrap();
        assert!(run(op.as_ref(), &[b]).is_err());
    }
}
