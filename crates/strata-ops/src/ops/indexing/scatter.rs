//! ScatterElements (and its opset 9-10 name Scatter) and ScatterND: the output is a copy of
//! `data` with `updates` written (or combined by `reduction`: add, mul, max, min) at the
//! positions `indices` name, in index order. Plain writes move raw words of the dtype's size;
//! reductions are typed. Out-of-range indices are errors naming the index and axis.

use smallvec::SmallVec;
use strata_core::{Device, Tensor};

use crate::ops::indexing::gather_elements::{for_each_index, resolve_index, with_indices, Indices};
use crate::support::accumulate::{dispatch_accumulate, max_of, min_of, Accumulate};
use crate::support::axes::{check_int_input, contiguous_strides, normalize_axis};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[
    ("ScatterElements", |c| Scatter::build(Kind::Elements, c)),
    ("Scatter", |c| Scatter::build(Kind::Elements, c)),
    ("ScatterND", |c| Scatter::build(Kind::Nd, c)),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Elements,
    Nd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

#[derive(Debug, Clone, Copy)]
pub struct Scatter {
    kind: Kind,
    axis: i64,
    reduction: Reduction,
}

impl Scatter {
    pub fn build(kind: Kind, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let reduction = match ctx.attrs.string_or("reduction", "none")?.as_str() {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            other => {
                return Err(OpError::attribute(
                    ctx.op_type,
                    "reduction",
                    format!("unknown reduction {other:?}"),
                ))
            }
        };
        Ok(Box::new(Scatter {
            kind,
            axis: ctx.attrs.int_or("axis", 0)?,
            reduction,
        }))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Elements => "ScatterElements",
            Kind::Nd => "ScatterND",
        }
    }
}

impl Operator for Scatter {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.name();
        let data = required(op, inputs, 0)?;
        let indices = required(op, inputs, 1)?;
        let updates = required(op, inputs, 2)?;
        check_int_input(op, inputs, 1)?;
        if updates.dtype != data.dtype {
            return Err(OpError::DType {
                op: op.into(),
                index: 2,
                expected: data.dtype.to_string(),
                actual: updates.dtype,
            });
        }
        match self.kind {
            Kind::Elements => {
                normalize_axis(op, "axis", self.axis, data.rank())?;
                if indices.rank() != data.rank() || updates.dims != indices.dims {
                    return Err(OpError::shape(
                        op,
                        format!(
                            "indices {:?} and updates {:?} must have equal dims and data's rank {}",
                            indices.dims,
                            updates.dims,
                            data.rank()
                        ),
                    ));
                }
            }
            Kind::Nd => {
                if indices.rank() == 0 {
                    return Err(OpError::shape(op, "indices must have rank 1 or more"));
                }
            }
        }
        if self.reduction != Reduction::None && data.dtype == strata_core::DType::Bool {
            return Err(OpError::DType {
                op: op.into(),
                index: 0,
                expected: "a numeric type for a reduction".into(),
                actual: data.dtype,
            });
        }
        Ok(vec![Fact::new(data.dtype, data.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain(self.name(), required(self.name(), inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }

    /// The output starts as a copy of `data`: when `data` dies here it can be updated in place.
    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

/// Where each update goes: `f(update_position, output_position)` for every update element.
/// Positions are element indices into the (contiguous) updates and output.
fn for_each_target(
    s: &Scatter,
    out: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    idx: Indices<'_>,
    mut f: impl FnMut(usize, usize),
) -> OpResult<()> {
    let op = s.name();
    let od = out.dims();
    let strides = contiguous_strides(od);
    match s.kind {
        Kind::Elements => {
            let axis = normalize_axis(op, "axis", s.axis, od.len())?;
            let id = indices.dims();
            if id != updates.dims() || id.len() != od.len() {
                return Err(OpError::kernel(
                    op,
                    format!("indices {id:?} vs updates {:?}", updates.dims()),
                ));
            }
            if let Some(a) = (0..od.len()).find(|&a| a != axis && id[a] > od[a]) {
                return Err(OpError::kernel(
                    op,
                    format!("indices {id:?} exceed data {od:?} on axis {a}"),
                ));
            }
            let mut pos: SmallVec<[isize; 8]> = strides.iter().map(|&s| s as isize).collect();
            pos[axis] = 0;
            let n = od[axis];
            for_each_index(id, &pos, &pos, |p, _, flat| {
                let i = resolve_index(op, idx.get(flat), n, axis)?;
                f(flat, p as usize + i * strides[axis]);
                Ok(())
            })
        }
        Kind::Nd => {
            let id = indices.dims();
            let q = id.len();
            let m = id[q - 1];
            let tuples: usize = id[..q - 1].iter().product();
            let slice: usize = od.get(m..).map_or(0, |d| d.iter().product());
            let mut expected: SmallVec<[usize; 8]> = SmallVec::from_slice(&id[..q - 1]);
            expected.extend_from_slice(od.get(m..).unwrap_or(&[]));
            if m > od.len() || updates.dims() != expected.as_slice() {
                return Err(OpError::kernel(
                    op,
                    format!(
                        "updates {:?} do not fit indices {id:?} into data {od:?}",
                        updates.dims()
                    ),
                ));
            }
            for t in 0..tuples {
                let mut at = 0;
                for k in 0..m {
                    at += resolve_index(op, idx.get(t * m + k), od[k], k)? * strides[k];
                }
                for e in 0..slice {
                    f(t * slice + e, at + e);
                }
            }
            Ok(())
        }
    }
}

fn scatter_raw<T: bytemuck::Pod>(
    s: &Scatter,
    out: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    idx: Indices<'_>,
) -> OpResult<()> {
    let u = updates.read_raw::<T>(s.name())?;
    let mut o = out.write_raw::<T>(s.name())?;
    let not_contiguous = || OpError::kernel(s.name(), "updates or output are not contiguous");
    let (us, os) = (
        u.as_slice().ok_or_else(not_contiguous)?,
        o.as_mut_slice().ok_or_else(not_contiguous)?,
    );
    for_each_target(s, out, indices, updates, idx, |from, to| os[to] = us[from])
}

fn scatter_reduce<T: Accumulate>(
    s: &Scatter,
    out: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    idx: Indices<'_>,
) -> OpResult<()> {
    let u = updates.read::<T>()?;
    let mut o = out.write::<T>()?;
    let not_contiguous = || OpError::kernel(s.name(), "updates or output are not contiguous");
    let (us, os) = (
        u.as_slice().ok_or_else(not_contiguous)?,
        o.as_mut_slice().ok_or_else(not_contiguous)?,
    );
    let combine: fn(T::Acc, T::Acc) -> T::Acc = match s.reduction {
        Reduction::Add => T::add,
        Reduction::Mul => T::mul,
        Reduction::Max => max_of,
        Reduction::Min => min_of,
        Reduction::None => |_, b| b,
    };
    for_each_target(s, out, indices, updates, idx, |from, to| {
        os[to] = T::narrow(combine(os[to].widen(), us[from].widen()))
    })
}

impl Kernel for Scatter {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.name();
        let (data, indices, updates, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        if io.in_place != Some(0) {
            copy_view(op, out, data)?;
        }
        with_indices(op, indices, |idx| {
            if self.reduction == Reduction::None {
                return match data.dtype().size_in_bytes() {
                    1 => scatter_raw::<u8>(self, out, indices, updates, idx),
                    2 => scatter_raw::<u16>(self, out, indices, updates, idx),
                    4 => scatter_raw::<u32>(self, out, indices, updates, idx),
                    8 => scatter_raw::<u64>(self, out, indices, updates, idx),
                    _ => Err(OpError::no_kernel(op, data.dtype(), Device::Cpu)),
                };
            }
            dispatch_accumulate!(data.dtype(), bool: false, T => {
                scatter_reduce::<T>(self, out, indices, updates, idx)
            }, _ => Err(OpError::no_kernel(op, data.dtype(), Device::Cpu)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: Scatter, data: &Tensor, idx: &Tensor, upd: &Tensor) -> OpResult<Tensor> {
        let facts = [
            Fact::constant(data.clone()),
            Fact::constant(idx.clone()),
            Fact::constant(upd.clone()),
        ];
        let f = s.infer(&[&facts[0], &facts[1], &facts[2]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), data.dtype())?;
        s.run(&KernelIo {
            inputs: &[data, idx, upd],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn elements_with_reductions_and_negative_indices() {
        let data = Tensor::from_slice(&[1.0f32, 2., 3., 4., 5.], &[1, 5]).unwrap();
        let idx = Tensor::from_slice(&[1i64, -2, 1], &[1, 3]).unwrap();
        let upd = Tensor::from_slice(&[10.0f32, 20., 30.], &[1, 3]).unwrap();
        let s = |reduction| Scatter {
            kind: Kind::Elements,
            axis: 1,
            reduction,
        };
        assert_eq!(
            run(s(Reduction::None), &data, &idx, &upd)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1., 30., 3., 20., 5.]
        );
        assert_eq!(
            run(s(Reduction::Add), &data, &idx, &upd)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1., 42., 3., 24., 5.]
        );
        assert_eq!(
            run(s(Reduction::Mul), &data, &idx, &upd)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1., 600., 3., 80., 5.]
        );
        assert_eq!(
            run(s(Reduction::Min), &data, &idx, &upd)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1., 2., 3., 4., 5.]
        );
        let bad = Tensor::from_slice(&[5i64, 0, 0], &[1, 3]).unwrap();
        let err = run(s(Reduction::None), &data, &bad, &upd).unwrap_err();
        assert!(
            err.to_string().contains("index 5") && err.to_string().contains("axis 1"),
            "{err}"
        );
    }

    #[test]
    fn nd_elements_and_slices() {
        let data = Tensor::from_slice(&[1i64, 2, 3, 4], &[2, 2]).unwrap();
        let s = |reduction| Scatter {
            kind: Kind::Nd,
            axis: 0,
            reduction,
        };
        let idx = Tensor::from_slice(&[1i64], &[1, 1]).unwrap();
        let upd = Tensor::from_slice(&[7i64, 8], &[1, 2]).unwrap();
        assert_eq!(
            run(s(Reduction::None), &data, &idx, &upd)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![1, 2, 7, 8]
        );
        let idx = Tensor::from_slice(&[0i32, 1, 0, 1], &[2, 2]).unwrap();
        let upd = Tensor::from_slice(&[5i64, 6], &[2]).unwrap();
        assert_eq!(
            run(s(Reduction::Add), &data, &idx, &upd)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![1, 13, 3, 4]
        );
        assert_eq!(
            run(s(Reduction::Max), &data, &idx, &upd)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![1, 6, 3, 4]
        );
        let bad = Tensor::from_slice(&[0i64, 2], &[1, 2]).unwrap();
        let upd = Tensor::from_slice(&[5i64], &[1]).unwrap();
        assert!(run(s(Reduction::None), &data, &bad, &upd).is_err());
    }
}
