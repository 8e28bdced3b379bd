//! Unique (opset 11): the distinct elements of the flattened input, or the distinct slices along
//! `axis` (compared lexicographically), ascending (`sorted = 1`, the default) or in order of
//! first occurrence, with the index of each first occurrence, the inverse mapping and counts
//! (int64). Equal floats compare equal (`-0.0 == 0.0`) and NaNs collapse into one value, as in
//! numpy. The output sizes depend on the values, so they are computed from a constant input at
//! plan time or on the runtime's dynamic path.

use std::cmp::Ordering;

use strata_core::{bf16, f16, DType, Device, Element, Tensor};

use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_supported;
use crate::{dispatch_arith, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Unique";

#[derive(Debug, Clone, Copy)]
pub struct Unique {
    axis: Option<i64>,
    sorted: bool,
}

/// A comparison that treats NaNs as one value above every number.
trait UniqueOrder: Element + Copy {
    fn order(a: Self, b: Self) -> Ordering;
}

macro_rules! int_order {
    ($($t:ty),*) => {$(
        impl UniqueOrder for $t {
            fn order(a: $t, b: $t) -> Ordering { a.cmp(&b) }
        }
    )*};
}
int_order!(i8, i16, i32, i64, u8, u16, u32, u64);

fn float_order(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

macro_rules! float_order {
    ($($t:ty),*) => {$(
        impl UniqueOrder for $t {
            fn order(a: $t, b: $t) -> Ordering { float_order(f64::from(a), f64::from(b)) }
        }
    )*};
}
float_order!(f32, f64, f16, bf16);

/// The input viewed as `[outer, n, inner]`: `n` slices along the axis.
#[derive(Clone, Copy)]
struct Slices {
    outer: usize,
    n: usize,
    inner: usize,
}

/// Everything Unique returns, before it becomes tensors.
struct Found<T> {
    /// The unique slices, laid out `[outer, unique, inner]`.
    values: Vec<T>,
    first: Vec<i64>,
    inverse: Vec<i64>,
    counts: Vec<i64>,
}

fn find_unique<T: UniqueOrder>(x: &[T], s: Slices, sorted: bool) -> Found<T> {
    let slice_cmp = |a: usize, b: usize| {
        (0..s.outer)
            .flat_map(|o| (0..s.inner).map(move |i| o * s.n * s.inner + i))
            .map(|base| T::order(x[base + a * s.inner], x[base + b * s.inner]))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let mut order: Vec<usize> = (0..s.n).collect();
    // Stable: equal slices stay in input order, so each group starts at its first occurrence.
    order.sort_by(|&a, &b| slice_cmp(a, b));
    // Groups of equal slices in ascending order: (first index, members).
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &j in &order {
        match groups.last_mut() {
            Some((first, members)) if slice_cmp(*first, j).is_eq() => members.push(j),
            _ => groups.push((j, vec![j])),
        }
    }
    if !sorted {
        groups.sort_by_key(|(first, _)| *first);
    }
    let unique = groups.len();
    let mut values = Vec::with_capacity(s.outer * unique * s.inner);
    for o in 0..s.outer {
        for (first, _) in &groups {
            let base = (o * s.n + first) * s.inner;
            values.extend_from_slice(&x[base..base + s.inner]);
        }
    }
    let mut inverse = vec![0i64; s.n];
    for (g, (_, members)) in groups.iter().enumerate() {
        for &m in members {
            inverse[m] = g as i64;
        }
    }
    Found {
        values,
        first: groups.iter().map(|(f, _)| *f as i64).collect(),
        inverse,
        counts: groups.iter().map(|(_, m)| m.len() as i64).collect(),
    }
}

impl Unique {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Unique {
            axis: ctx.attrs.int("axis")?,
            sorted: ctx.attrs.int_or("sorted", 1)? != 0,
        }))
    }

    /// The slice geometry and Y's dims for `unique` distinct slices of `dims`.
    fn geometry(&self, dims: &[usize]) -> OpResult<(Slices, Option<usize>)> {
        match self.axis {
            None => Ok((
                Slices {
                    outer: 1,
                    n: dims.iter().product(),
                    inner: 1,
                },
                None,
            )),
            Some(a) => {
                let axis = normalize_axis(OP, "axis", a, dims.len())?;
                Ok((
                    Slices {
                        outer: dims[..axis].iter().product(),
                        n: dims[axis],
                        inner: dims[axis + 1..].iter().product(),
                    },
                    Some(axis),
                ))
            }
        }
    }

    /// Computes the four outputs for a concrete input.
    fn compute(&self, x: &Tensor) -> OpResult<[Tensor; 4]> {
        let (slices, axis) = self.geometry(x.dims())?;
        dispatch_arith!(x.dtype(), T => {
            let found = find_unique(&x.to_vec::<T>()?, slices, self.sorted);
            let unique = found.first.len();
            let y_dims = match axis {
                None => vec![unique],
                Some(a) => {
                    let mut d = x.dims().to_vec();
                    d[a] = unique;
                    d
                }
            };
            Ok([
                Tensor::from_slice(&found.values, &y_dims)?,
                Tensor::from_slice(&found.first, &[unique])?,
                Tensor::from_slice(&found.inverse, &[slices.n])?,
                Tensor::from_slice(&found.counts, &[unique])?,
            ])
        }, _ => Err(OpError::no_kernel(OP, x.dtype(), Device::Cpu)))
    }
}

impl Operator for Unique {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        if let Some(v) = &x.value {
            return Ok(self.compute(v)?.into_iter().map(Fact::constant).collect());
        }
        let (y, n) = match self.axis {
            None => (
                vec![Dim::Unknown],
                x.numel().map_or(Dim::Unknown, Dim::Known),
            ),
            Some(a) => {
                let axis = normalize_axis(OP, "axis", a, x.rank())?;
                let mut y = x.dims.clone();
                y[axis] = Dim::Unknown;
                (y, x.dims[axis].clone())
            }
        };
        let ints = |dims| Fact::new(DType::I64, dims);
        Ok(vec![
            Fact::new(x.dtype, y),
            ints(vec![Dim::Unknown]),
            ints(vec![n]),
            ints(vec![Dim::Unknown]),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        let supported = dispatch_arith!(dtype, T => true, _ => false);
        cpu_supported(OP, dtype, device, supported)?;
        Ok(Box::new(*self))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for Unique {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let results = self.compute(io.input(0))?;
        for (i, result) in results.iter().enumerate() {
            let out = io.output(i);
            if !out.is_defined() {
                continue;
            }
            if out.dims() != result.dims() || out.dtype() != result.dtype() {
                return Err(OpError::kernel(
                    OP,
                    format!(
                        "output {i} is {}{:?}, the result {}{:?}",
                        out.dtype(),
                        out.dims(),
                        result.dtype(),
                        result.dims()
                    ),
                ));
            }
            out.copy_from(result)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique(axis: Option<i64>, sorted: bool, x: Tensor) -> OpResult<Vec<Tensor>> {
        let op = Unique { axis, sorted };
        let outs = op.infer(&[&Fact::constant(x)])?;
        Ok(outs.into_iter().map(|f| f.value.unwrap()).collect())
    }

    fn ints(t: &Tensor) -> Vec<i64> {
        t.to_vec::<i64>().unwrap()
    }

    #[test]
    fn flattened_sorted_and_first_occurrence() {
        let x = Tensor::from_slice(&[2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0], &[6]).unwrap();
        let out = unique(None, true, x.clone()).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(ints(&out[1]), vec![1, 0, 3, 4]);
        assert_eq!(ints(&out[2]), vec![1, 0, 0, 2, 3, 2]);
        assert_eq!(ints(&out[3]), vec![2, 1, 2, 1]);
        let out = unique(None, false, x).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 1.0, 3.0, 4.0]);
        assert_eq!(ints(&out[1]), vec![0, 1, 3, 4]);
        assert_eq!(ints(&out[2]), vec![0, 1, 1, 2, 3, 2]);
        assert_eq!(ints(&out[3]), vec![1, 2, 2, 1]);
    }

    #[test]
    fn rows_along_an_axis() {
        // Rows [1, 0], [0, 1], [1, 0]: two distinct, ascending lexicographically.
        let x = Tensor::from_slice(&[1i32, 0, 0, 1, 1, 0], &[3, 2]).unwrap();
        let out = unique(Some(0), true, x.clone()).unwrap();
        assert_eq!(out[0].dims(), &[2, 2]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 1, 1, 0]);
        assert_eq!(ints(&out[2]), vec![1, 0, 1]);
        // Columns [1, 0, 1] and [0, 1, 0] along axis -1.
        let out = unique(Some(-1), true, x.clone()).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 1, 1, 0, 0, 1]);
        assert!(unique(Some(2), true, x).is_err());
    }
}
