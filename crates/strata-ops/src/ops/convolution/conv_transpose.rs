//! ConvTranspose (opsets 1-22), N-d with groups, strides, dilations, explicit pads,
//! `output_padding`, `output_shape` (spatial dims, or the whole shape as some exporters write it)
//! and `auto_pad` SAME_UPPER / SAME_LOWER / VALID, optional bias; f32 and f64.
//!
//! Per (batch, group) one GEMM `col = W_g^T X_g` (`mg * kernel` rows over the input positions;
//! the transpose is a stride swap, not a copy) into planned scratch, then a col2im fold that
//! scatter-adds each column onto the output started from the bias.

use std::marker::PhantomData;

use strata_core::{DType, Device, Element};

use crate::kernels::{gemm, GemmFloat};
use crate::ops::convolution::col2im_fold::{col2im_add, FoldGeometry};
use crate::support::inputs::{optional, required};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "ConvTranspose";

#[derive(Debug, Clone)]
pub struct ConvTranspose {
    auto_pad: AutoPad,
    kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    output_padding: Option<Vec<usize>>,
    output_shape: Option<Vec<usize>>,
    groups: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Validated dims of one ConvTranspose call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Geometry {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    in_per_group: usize,
    out_per_group: usize,
    fold: FoldGeometry,
}

impl Geometry {
    fn output_dims(&self) -> Vec<usize> {
        let mut dims = vec![self.batch, self.out_channels];
        dims.extend_from_slice(&self.fold.out_dims);
        dims
    }

    /// Elements of one group's column matrix (`out_per_group * kernel` rows of input positions).
    fn col_len(&self) -> OpResult<usize> {
        checked_product(&[self.out_per_group, self.fold.kernel_len, self.fold.in_len])
    }
}

fn checked_product(values: &[usize]) -> OpResult<usize> {
    values
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(v))
        .ok_or_else(|| OpError::shape(OP, format!("size of {values:?} overflows")))
}

impl ConvTranspose {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let groups = a.int_or("group", 1)?;
        if groups < 1 {
            return Err(OpError::attribute(
                OP,
                "group",
                format!("must be >= 1, got {groups}"),
            ));
        }
        let auto_pad = match a.string_or("auto_pad", "NOTSET")?.as_str() {
            "" | "NOTSET" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "auto_pad",
                    format!("{other:?} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
                ))
            }
        };
        let positive = |name: &str| -> OpResult<Option<Vec<usize>>> {
            let v = a.usizes(name)?;
            if let Some(v) = &v {
                if v.contains(&0) {
                    return Err(OpError::attribute(
                        OP,
                        name,
                        format!("values must be >= 1, got {v:?}"),
                    ));
                }
            }
            Ok(v)
        };
        Ok(Box::new(ConvTranspose {
            auto_pad,
            kernel_shape: positive("kernel_shape")?,
            strides: positive("strides")?,
            pads: a.usizes("pads")?,
            dilations: positive("dilations")?,
            output_padding: a.usizes("output_padding")?,
            output_shape: a.usizes("output_shape")?,
            groups: groups as usize,
        }))
    }

    /// Resolves the attributes against input dims `x` and weight dims `w`
    /// (`[C, M / group, kernel...]`).
    fn geometry(&self, x: &[usize], w: &[usize]) -> OpResult<Geometry> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::shape(
                OP,
                format!("input {x:?} and weight {w:?} must have the same rank >= 3"),
            ));
        }
        let spatial = x.len() - 2;
        let (batch, in_channels) = (x[0], x[1]);
        if w[0] != in_channels {
            return Err(OpError::shape(
                OP,
                format!(
                    "weight dim 0 ({}) must equal the input channels ({in_channels})",
                    w[0]
                ),
            ));
        }
        if in_channels % self.groups != 0 {
            return Err(OpError::shape(
                OP,
                format!(
                    "input channels ({in_channels}) are not divisible by group ({})",
                    self.groups
                ),
            ));
        }
        let out_per_group = w[1];
        let out_channels = out_per_group
            .checked_mul(self.groups)
            .ok_or_else(|| OpError::shape(OP, "output channel count overflows"))?;
        let kernel = w[2..].to_vec();
        if let Some(k) = &self.kernel_shape {
            if *k != kernel {
                return Err(OpError::attribute(
                    OP,
                    "kernel_shape",
                    format!("{k:?} does not match weight dims {w:?}"),
                ));
            }
        }
        let per_axis = |name: &str, v: &Option<Vec<usize>>, default: usize| match v {
            None => Ok(vec![default; spatial]),
            Some(v) if v.len() == spatial => Ok(v.clone()),
            Some(v) => Err(OpError::attribute(
                OP,
                name,
                format!("{v:?} needs {spatial} entries"),
            )),
        };
        let strides = per_axis("strides", &self.strides, 1)?;
        let dilations = per_axis("dilations", &self.dilations, 1)?;
        let output_padding = per_axis("output_padding", &self.output_padding, 0)?;
        let in_dims = &x[2..];

        // Sizes in i128: attribute values are model data and must not overflow.
        let natural: Vec<i128> = (0..spatial)
            .map(|a| {
                let extent = (kernel[a] as i128 - 1) * dilations[a] as i128 + 1;
                strides[a] as i128 * (in_dims[a] as i128 - 1) + output_padding[a] as i128 + extent
            })
            .collect();
        let requested = match &self.output_shape {
            None => None,
            // Older exporters give the whole output shape; the spatial dims are its tail.
            Some(s) if s.len() == spatial || s.len() == spatial + 2 => {
                Some(s[s.len() - spatial..].to_vec())
            }
            Some(s) => {
                return Err(OpError::attribute(
                    OP,
                    "output_shape",
                    format!("{s:?} needs {spatial} spatial entries"),
                ))
            }
        };
        let explicit_pads = self.auto_pad == AutoPad::NotSet && requested.is_none();
        let (out_dims, pads_begin): (Vec<i128>, Vec<i128>) = if explicit_pads {
            let (begin, end) = match &self.pads {
                None => (vec![0; spatial], vec![0; spatial]),
                Some(p) if p.len() == 2 * spatial => (p[..spatial].to_vec(), p[spatial..].to_vec()),
                Some(p) => {
                    return Err(OpError::attribute(
                        OP,
                        "pads",
                        format!("{p:?} needs {} entries", 2 * spatial),
                    ));
                }
            };
            (0..spatial)
                .map(|a| {
                    (
                        natural[a] - begin[a] as i128 - end[a] as i128,
                        begin[a] as i128,
                    )
                })
                .unzip()
        } else if self.auto_pad == AutoPad::Valid && requested.is_none() {
            (natural.clone(), vec![0; spatial])
        } else {
            // Pads generated from the target size; the odd unit goes to the end for SAME_UPPER
            // and to the beginning otherwise (the spec's rule, NOTSET included).
            let target: Vec<i128> = match &requested {
                Some(s) => s.iter().map(|&v| v as i128).collect(),
                None => (0..spatial)
                    .map(|a| in_dims[a] as i128 * strides[a] as i128)
                    .collect(),
            };
            let begin = (0..spatial)
                .map(|a| {
                    let total = natural[a] - target[a];
                    let half = total.div_euclid(2);
                    if self.auto_pad == AutoPad::SameUpper {
                        half
                    } else {
                        total - half
                    }
                })
                .collect();
            (target, begin)
        };
        let mut out_spatial = Vec::with_capacity(spatial);
        let mut pads = Vec::with_capacity(spatial);
        for a in 0..spatial {
            let out = usize::try_from(out_dims[a]).map_err(|_| {
                OpError::shape(
                    OP,
                    format!(
                        "output size {} on spatial axis {a} is not a valid size (input {x:?}, \
                         weight {w:?})",
                        out_dims[a]
                    ),
                )
            })?;
            let pad = isize::try_from(pads_begin[a])
                .map_err(|_| OpError::attribute(OP, "pads", "padding overflows"))?;
            out_spatial.push(out);
            pads.push(pad);
        }
        let fold = FoldGeometry {
            in_len: checked_product(in_dims)?,
            out_len: checked_product(&out_spatial)?,
            kernel_len: checked_product(&kernel)?,
            in_dims: in_dims.to_vec(),
            out_dims: out_spatial,
            kernel,
            strides,
            dilations,
            pads_begin: pads,
        };
        // The whole output, and the GEMM's stride over the weight, must be addressable.
        checked_product(&[batch, out_channels, fold.out_len])?;
        checked_product(&[in_channels, out_per_group, fold.kernel_len])?;
        Ok(Geometry {
            batch,
            in_channels,
            out_channels,
            groups: self.groups,
            in_per_group: in_channels / self.groups,
            out_per_group,
            fold,
        })
    }
}

impl Operator for ConvTranspose {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let w = required(OP, inputs, 1)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: x.dtype,
            });
        }
        if w.dtype != x.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: x.dtype.to_string(),
                actual: w.dtype,
            });
        }
        let w_dims = w.concrete_or_err(OP)?;
        if let Some(b) = optional(inputs, 2) {
            if b.dtype != x.dtype {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: 2,
                    expected: x.dtype.to_string(),
                    actual: b.dtype,
                });
            }
            let channels = w_dims.get(1).map(|&m| m * self.groups);
            if b.rank() != 1 || channels.is_some_and(|m| b.dims[0].known().is_some_and(|d| d != m))
            {
                return Err(OpError::shape(
                    OP,
                    format!("bias has dims {:?}, expected [{channels:?}]", b.dims),
                ));
            }
        }
        // The batch dim may be symbolic: compute with 1 and put it back.
        let mut x_dims = Vec::with_capacity(x.rank());
        for (i, d) in x.dims.iter().enumerate() {
            match d.known() {
                Some(v) => x_dims.push(v),
                None if i == 0 => x_dims.push(1),
                None => {
                    let m = w_dims
                        .get(1)
                        .map_or(Dim::Unknown, |&m| Dim::Known(m.saturating_mul(self.groups)));
                    let mut dims = vec![x.dims[0].clone(), m];
                    dims.extend(std::iter::repeat_n(
                        Dim::Unknown,
                        x.rank().saturating_sub(2),
                    ));
                    return Ok(vec![Fact::new(x.dtype, dims)]);
                }
            }
        }
        let g = self.geometry(&x_dims, &w_dims)?;
        let mut out: Vec<Dim> = g.output_dims().into_iter().map(Dim::Known).collect();
        out[0] = x.dims[0].clone();
        Ok(vec![Fact::new(x.dtype, out)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(x), Some(w)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let g = self.geometry(&x, &w)?;
        checked_product(&[g.col_len()?, inputs[0].dtype.size_in_bytes()])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(OP, inputs, 0)?;
        match (x.dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(ConvTransposeKernel::<f32> {
                op: self.clone(),
                _t: PhantomData,
            })),
            (DType::F64, Device::Cpu) => Ok(Box::new(ConvTransposeKernel::<f64> {
                op: self.clone(),
                _t: PhantomData,
            })),
            (dtype, device) => Err(OpError::no_kernel(OP, dtype, device)),
        }
    }
}

#[derive(Debug)]
struct ConvTransposeKernel<T> {
    op: ConvTranspose,
    _t: PhantomData<T>,
}

impl<T: Element + GemmFloat> Kernel for ConvTransposeKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, w, b, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let g = self.op.geometry(x.dims(), w.dims())?;
        if out.dims() != g.output_dims().as_slice() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output bound with dims {:?}, expected {:?}",
                    out.dims(),
                    g.output_dims()
                ),
            ));
        }
        let not_contiguous = || OpError::kernel(OP, "operands must be contiguous");
        let (rx, rw) = (x.read::<T>()?, w.read::<T>()?);
        let rb = if b.is_defined() {
            Some(b.read::<T>()?)
        } else {
            None
        };
        let bias = match &rb {
            Some(r) => Some(r.as_slice().ok_or_else(not_contiguous)?),
            None => None,
        };
        let mut wo = out.write::<T>()?;
        let mut scratch_guard = match io.scratch {
            Some(s) => Some(s.write_bytes(OP)?),
            None => None,
        };
        let scratch: &mut [T] = match &mut scratch_guard {
            Some(guard) => {
                let bytes = guard.bytes();
                let whole = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
                bytemuck::try_cast_slice_mut(&mut bytes[..whole])
                    .map_err(|e| OpError::kernel(OP, format!("scratch: {e}")))?
            }
            None => &mut [],
        };
        conv_transpose(
            &g,
            rx.as_slice().ok_or_else(not_contiguous)?,
            rw.as_slice().ok_or_else(not_contiguous)?,
            bias,
            wo.as_mut_slice().ok_or_else(not_contiguous)?,
            scratch,
            io.threads,
        )
    }
}

fn check_len(what: &str, actual: usize, expected: usize) -> OpResult<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(OpError::kernel(
            OP,
            format!("{what} has {actual} elements but {expected} are required"),
        ))
    }
}

/// The transposed convolution on contiguous slices; every length is checked first.
fn conv_transpose<T: GemmFloat>(
    g: &Geometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
    scratch: &mut [T],
    threads: usize,
) -> OpResult<()> {
    let f = &g.fold;
    let (cg, mg) = (g.in_per_group, g.out_per_group);
    // Rows of one group's column matrix: (output channel, kernel tap).
    let taps = mg * f.kernel_len;
    check_len("input", x.len(), g.batch * g.in_channels * f.in_len)?;
    check_len("weight", w.len(), g.in_channels * taps)?;
    check_len("output", out.len(), g.batch * g.out_channels * f.out_len)?;
    if let Some(bias) = bias {
        check_len("bias", bias.len(), g.out_channels)?;
    }
    let col_len = g.col_len()?;
    if scratch.len() < col_len {
        return Err(OpError::kernel(
            OP,
            format!(
                "scratch has {} elements but {col_len} are required",
                scratch.len()
            ),
        ));
    }
    let col = &mut scratch[..col_len];
    let stride = |v: usize| {
        isize::try_from(v).map_err(|_| OpError::kernel(OP, "matrix stride overflows isize"))
    };
    let (taps_stride, in_stride) = (stride(taps)?, stride(f.in_len)?);
    // Cancellation: one poll per (batch, group) product, which ends the run with its error.
    let stop = crate::run_control::stop_token();
    for n in 0..g.batch {
        for grp in 0..g.groups {
            stop.poll(n * g.groups + grp, OP)?;
            let y = &mut out[(n * g.out_channels + grp * mg) * f.out_len..][..mg * f.out_len];
            for (oc, plane) in y.chunks_mut(f.out_len.max(1)).enumerate() {
                plane.fill(bias.map_or(T::ZERO, |bias| bias[grp * mg + oc]));
            }
            if cg == 0 || taps == 0 || f.in_len == 0 {
                continue;
            }
            let xg = &x[(n * g.in_channels + grp * cg) * f.in_len..][..cg * f.in_len];
            let wg = &w[grp * cg * taps..][..cg * taps];
            // W_g is [cg, taps] row-major; read as its transpose [taps, cg] by swapping strides.
            gemm(
                taps,
                f.in_len,
                cg,
                wg,
                (1, taps_stride),
                xg,
                (in_stride, 1),
                col,
                (in_stride, 1),
                T::ONE,
                T::ZERO,
                threads,
            )?;
            col2im_add(col, mg, f, y, threads);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    fn build(attrs: &[(&str, Attr)]) -> OpResult<Box<dyn Operator>> {
        let mut a = Attributes::new(OP);
        for (name, value) in attrs {
            a.insert(name, value.clone());
        }
        ConvTranspose::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 22,
            attrs: &a,
            num_inputs: 3,
            num_outputs: 1,
        })
    }

    /// Runs the operator through infer / scratch / kernel on f32 data.
    fn run(
        attrs: &[(&str, Attr)],
        x: (&[usize], &[f32]),
        w: (&[usize], &[f32]),
        b: Option<&[f32]>,
    ) -> OpResult<(Vec<usize>, Vec<f32>)> {
        let op = build(attrs)?;
        let xt = Tensor::from_slice(x.1, x.0)?;
        let wt = Tensor::from_slice(w.1, w.0)?;
        let bt = match b {
            Some(b) => Tensor::from_slice(b, &[b.len()])?,
            None => Tensor::undefined(),
        };
        let facts = [
            Fact::known(DType::F32, x.0),
            Fact::known(DType::F32, w.0),
            match b {
                Some(b) => Fact::known(DType::F32, &[b.len()]),
                None => Fact::absent(),
            },
        ];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out_fact = op.infer(&refs)?.remove(0);
        let dims = out_fact.concrete().expect("known dims");
        let out = Tensor::zeros(&dims, DType::F32)?;
        let scratch = Tensor::zeros(&[op.scratch_bytes(&refs, &[&out_fact])?], DType::U8)?;
        let kernel = op.kernel(&refs, &[&out_fact], Device::Cpu)?;
        kernel.run(&KernelIo {
            inputs: &[&xt, &wt, &bt],
            outputs: &[&out],
            scratch: Some(&scratch),
            in_place: None,
            threads: 1,
        })?;
        let values = out.to_vec::<f32>()?;
        Ok((dims, values))
    }

    /// Direct definition: every input element times every kernel tap scattered onto the
    /// output at `i * stride + k * dilation - pad`, accumulated in f64.
    fn reference(
        x: (&[usize], &[f32]),
        w: (&[usize], &[f32]),
        groups: usize,
        strides: &[usize],
        dilations: &[usize],
        pads_begin: &[isize],
        out_spatial: &[usize],
    ) -> Vec<f32> {
        let (n, c) = (x.0[0], x.0[1]);
        let mg = w.0[1];
        let m = mg * groups;
        let cg = c / groups;
        let in_sp = &x.0[2..];
        let k_sp = &w.0[2..];
        let count = |d: &[usize]| d.iter().product::<usize>();
        let unravel = |mut i: usize, dims: &[usize]| {
            let mut v = vec![0; dims.len()];
            for a in (0..dims.len()).rev() {
                v[a] = i % dims[a];
                i /= dims[a];
            }
            v
        };
        let out_len = count(out_spatial);
        let mut out = vec![0f64; n * m * out_len];
        for b in 0..n {
            for ic in 0..c {
                let grp = ic / cg;
                for i in 0..count(in_sp) {
                    let ii = unravel(i, in_sp);
                    for om in 0..mg {
                        for t in 0..count(k_sp) {
                            let kk = unravel(t, k_sp);
                            let mut off = 0usize;
                            let mut inside = true;
                            for a in 0..ii.len() {
                                let o = (ii[a] * strides[a] + kk[a] * dilations[a]) as isize
                                    - pads_begin[a];
                                inside &= o >= 0 && (o as usize) < out_spatial[a];
                                off = off * out_spatial[a] + o.max(0) as usize;
                            }
                            if inside {
                                let xv = x.1[(b * c + ic) * count(in_sp) + i] as f64;
                                let wv = w.1[(ic * mg + om) * count(k_sp) + t] as f64;
                                out[(b * m + grp * mg + om) * out_len + off] += xv * wv;
                            }
                        }
                    }
                }
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "at {i}: {x} vs {y}"
            );
        }
    }

    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
            .collect()
    }

    #[test]
    fn onnx_doc_example_1d() {
        // ONNX convtranspose_1d: x = [0, 1, 2], W = ones(1, 2, 3) -> each channel is the
        // running sum over a window of 3: [0, 1, 3, 3, 2].
        let (dims, out) = run(
            &[],
            (&[1, 1, 3], &[0.0, 1.0, 2.0]),
            (&[1, 2, 3], &[1.0; 6]),
            None,
        )
        .unwrap();
        assert_eq!(dims, [1, 2, 5]);
        assert_eq!(out, [0.0, 1.0, 3.0, 3.0, 2.0, 0.0, 1.0, 3.0, 3.0, 2.0]);
    }

    #[test]
    fn strides_pads_output_padding_and_bias() {
        // 1 -> 1 channel, width 2, kernel [1, 2], stride 3, pads 1/0, output_padding 1:
        // natural = 3 * 1 + 1 + 2 = 6, minus pad 1 -> 5; x0 lands at -1, 0; x1 at 2, 3.
        let attrs = [
            ("strides", Attr::Ints(vec![3])),
            ("pads", Attr::Ints(vec![1, 0])),
            ("output_padding", Attr::Ints(vec![1])),
        ];
        let (dims, out) = run(
            &attrs,
            (&[1, 1, 2], &[2.0, 5.0]),
            (&[1, 1, 2], &[1.0, 10.0]),
            Some(&[0.5]),
        )
        .unwrap();
        assert_eq!(dims, [1, 1, 5]);
        assert_eq!(out, [20.5, 0.5, 5.5, 50.5, 0.5]);
    }

    #[test]
    fn matches_the_definition_over_many_configurations() {
        type Config<'a> = (
            &'a [usize],
            &'a [usize],
            usize,
            &'a [usize],
            &'a [usize],
            &'a [usize],
        );
        let configs: &[Config] = &[
            // (x dims, w dims, group, strides, dilations, pads)
            (&[2, 2, 4], &[2, 3, 3], 1, &[2], &[1], &[1, 0]),
            (
                &[1, 4, 3, 5],
                &[4, 1, 2, 3],
                2,
                &[1, 2],
                &[2, 1],
                &[0, 1, 1, 2],
            ),
            (
                &[1, 3, 3, 3],
                &[3, 2, 3, 3],
                3,
                &[3, 2],
                &[1, 1],
                &[1, 2, 1, 2],
            ),
            (
                &[1, 1, 2, 3, 2],
                &[1, 2, 2, 2, 2],
                1,
                &[1, 2, 1],
                &[1, 1, 2],
                &[0; 6],
            ),
        ];
        for &(xd, wd, group, strides, dilations, pads) in configs {
            let x = ramp(xd.iter().product(), 0.25);
            let w = ramp(wd.iter().product(), 0.5);
            let sp = xd.len() - 2;
            let to_i64 = |v: &[usize]| v.iter().map(|&v| v as i64).collect::<Vec<_>>();
            let attrs = [
                ("group", Attr::Int(group as i64)),
                ("strides", Attr::Ints(to_i64(strides))),
                ("dilations", Attr::Ints(to_i64(dilations))),
                ("pads", Attr::Ints(to_i64(pads))),
            ];
            let (dims, out) = run(&attrs, (xd, &x), (wd, &w), None).unwrap();
            let expect_dims: Vec<usize> = (0..sp)
                .map(|a| {
                    strides[a] * (xd[a + 2] - 1) + (wd[a + 2] - 1) * dilations[a] + 1
                        - pads[a]
                        - pads[a + sp]
                })
                .collect();
            assert_eq!(dims[2..], expect_dims[..], "{xd:?} {wd:?}");
            let pads_begin: Vec<isize> = pads[..sp].iter().map(|&p| p as isize).collect();
            let expected = reference(
                (xd, &x),
                (wd, &w),
                group,
                strides,
                dilations,
                &pads_begin,
                &expect_dims,
            );
            assert_close(&out, &expected);
        }
    }

    #[test]
    fn output_shape_and_auto_pad_generate_pads() {
        let x = ramp(9, 1.0);
        let w = ramp(18, 0.5);
        // ONNX convtranspose_output_shape: 3x3, stride [3, 2], output_shape [10, 8]: natural
        // [9, 7], total padding -1 on each axis -> begin pad 0, the extra row/column at the end.
        let attrs = [
            ("strides", Attr::Ints(vec![3, 2])),
            ("output_shape", Attr::Ints(vec![10, 8])),
        ];
        let (dims, out) = run(&attrs, (&[1, 1, 3, 3], &x), (&[1, 2, 3, 3], &w), None).unwrap();
        assert_eq!(dims, [1, 2, 10, 8]);
        let expected = reference(
            (&[1, 1, 3, 3], &x),
            (&[1, 2, 3, 3], &w),
            1,
            &[3, 2],
            &[1, 1],
            &[0, 0],
            &[10, 8],
        );
        assert_close(&out, &expected);
        // SAME_UPPER, stride 2: output 6x6, natural 7x7, total 1 -> begin 0 (UPPER), 1 for LOWER.
        for (mode, begin) in [("SAME_UPPER", 0), ("SAME_LOWER", 1)] {
            let attrs = [
                ("strides", Attr::Ints(vec![2, 2])),
                ("auto_pad", Attr::String(mode.into())),
            ];
            let (dims, out) = run(&attrs, (&[1, 1, 3, 3], &x), (&[1, 2, 3, 3], &w), None).unwrap();
            assert_eq!(dims, [1, 2, 6, 6]);
            let expected = reference(
                (&[1, 1, 3, 3], &x),
                (&[1, 2, 3, 3], &w),
                1,
                &[2, 2],
                &[1, 1],
                &[begin, begin],
                &[6, 6],
            );
            assert_close(&out, &expected);
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let x = [1.0f32; 9];
        let w = [1.0f32; 18];
        // Weight dim 0 must be the input channels.
        let err = run(&[], (&[1, 1, 3, 3], &x), (&[2, 1, 3, 3], &w), None).unwrap_err();
        assert!(err.to_string().contains("weight dim 0 (2)"), "{err}");
        // Rank mismatch.
        let err = run(&[], (&[1, 1, 9], &x), (&[1, 2, 3, 3], &w), None).unwrap_err();
        assert!(err.to_string().contains("same rank"), "{err}");
        // Pads that eat the whole output.
        let attrs = [("pads", Attr::Ints(vec![3, 3, 3, 3]))];
        let err = run(&attrs, (&[1, 1, 3, 3], &x), (&[1, 2, 3, 3], &w), None).unwrap_err();
        assert!(err.to_string().contains("not a valid size"), "{err}");
        // Wrong attribute arity, bad values, bad bias.
        let attrs = [("strides", Attr::Ints(vec![1, 1, 1]))];
        assert!(run(&attrs, (&[1, 1, 3, 3], &x), (&[1, 2, 3, 3], &w), None).is_err());
        assert!(build(&[("strides", Attr::Ints(vec![0, 1]))]).is_err());
        assert!(build(&[("group", Attr::Int(0))]).is_err());
        assert!(build(&[("auto_pad", Attr::String("SAME".into()))]).is_err());
        let err = run(
            &[],
            (&[1, 1, 3, 3], &x),
            (&[1, 2, 3, 3], &w),
            Some(&[0.0; 3]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("bias"), "{err}");
        // Integer inputs have no ConvTranspose.
        let op = build(&[]).unwrap();
        let facts = [
            Fact::known(DType::I32, &[1, 1, 3]),
            Fact::known(DType::I32, &[1, 1, 3]),
        ];
        let refs: Vec<&Fact> = facts.iter().collect();
        assert!(matches!(op.infer(&refs), Err(OpError::DType { .. })));
    }
}
