//! The integer convolution behind ConvInteger and QLinearConv: the Conv attributes (auto_pad,
//! kernel_shape, strides, pads, dilations, group) and `conv(X - x_zero_point, W -
//! w_zero_point) + B`, where X's zero point is a scalar and W's a scalar or one per output
//! channel. Padding is with centered zeros, i.e. with the zero point, as the ONNX reference does.
//!
//! The centered operands are at most 9-bit integers, so the products and their sums are exact in
//! f64: the convolution runs on the project's im2col + f64 GEMM kernel. Its f64 operands,
//! output, im2col buffer and per-channel parameters live in the kernel's planned scratch
//! ([`ConvAttrs::work_len`]).

use strata_core::{DType, Tensor};

use crate::kernels::resolve_auto_pad;
use crate::ops::convolution::conv_kernel::{conv, conv_output_dims, conv_scratch_len, ConvParams};
use crate::ops::quantization::values::{read_f64_into, read_scalar};
use crate::support::scratch::carve;
use crate::{Dim, Fact, OpContext, OpError, OpResult};

/// Kernel parameters and output dims resolved for one pair of input and weight dims (at plan
/// time, so a run with the planned dims resolves nothing).
#[derive(Debug, Clone)]
pub(crate) struct ResolvedConv {
    pub(crate) x_dims: Vec<usize>,
    pub(crate) w_dims: Vec<usize>,
    pub(crate) params: ConvParams,
    pub(crate) out_dims: Vec<usize>,
}

/// Conv's attributes, resolved to kernel parameters once the dims are known.
#[derive(Debug, Clone)]
pub(crate) struct ConvAttrs {
    auto_pad: String,
    kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    groups: usize,
}

impl ConvAttrs {
    /// Conv's attributes as given.
    pub(crate) fn new(
        auto_pad: String,
        kernel_shape: Option<Vec<usize>>,
        strides: Option<Vec<usize>>,
        pads: Option<Vec<usize>>,
        dilations: Option<Vec<usize>>,
        groups: usize,
    ) -> Self {
        ConvAttrs {
            auto_pad,
            kernel_shape,
            strides,
            pads,
            dilations,
            groups,
        }
    }

    pub(crate) fn from_ctx(op: &str, ctx: &OpContext) -> OpResult<Self> {
        let a = ctx.attrs;
        let groups = a.int_or("group", 1)?;
        if groups < 1 {
            return Err(OpError::attribute(
                op,
                "group",
                format!("must be >= 1, got {groups}"),
            ));
        }
        Ok(ConvAttrs {
            auto_pad: a.string_or("auto_pad", "NOTSET")?,
            kernel_shape: a.usizes("kernel_shape")?,
            strides: a.usizes("strides")?,
            pads: a.usizes("pads")?,
            dilations: a.usizes("dilations")?,
            groups: groups as usize,
        })
    }

    /// Kernel parameters for input dims `x` and weight dims `w`.
    pub(crate) fn params(&self, op: &str, x: &[usize], w: &[usize]) -> OpResult<ConvParams> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::shape(
                op,
                format!("input {x:?} and weight {w:?} must have the same rank >= 3"),
            ));
        }
        let spatial = x.len() - 2;
        let kernel = self.kernel_shape.clone().unwrap_or_else(|| w[2..].to_vec());
        if kernel.as_slice() != &w[2..] {
            return Err(OpError::attribute(
                op,
                "kernel_shape",
                format!("{kernel:?} does not match weight dims {w:?}"),
            ));
        }
        let ones = vec![1; spatial];
        let strides = self.strides.clone().unwrap_or_else(|| ones.clone());
        let dilations = self.dilations.clone().unwrap_or(ones);
        let (pads_begin, pads_end) = match self.auto_pad.as_str() {
            "" | "NOTSET" => match &self.pads {
                Some(p) if p.len() == 2 * spatial => (p[..spatial].to_vec(), p[spatial..].to_vec()),
                Some(p) => {
                    return Err(OpError::attribute(
                        op,
                        "pads",
                        format!("{p:?} needs {} entries", 2 * spatial),
                    ))
                }
                None => (vec![0; spatial], vec![0; spatial]),
            },
            mode => resolve_auto_pad(mode, &x[2..], &kernel, &strides, &dilations)?,
        };
        Ok(ConvParams {
            kernel,
            strides,
            pads_begin,
            pads_end,
            dilations,
            groups: self.groups,
            ..ConvParams::default()
        })
    }

    /// f64 scratch values [`centered_conv`] carves for facts `x` and `w`, plus `per_channel`
    /// values per output channel for the caller; 0 when the dims are not known yet.
    pub(crate) fn work_len(
        &self,
        op: &str,
        x: &Fact,
        w: &Fact,
        per_channel: usize,
    ) -> OpResult<Option<usize>> {
        let (Some(x), Some(w)) = (x.concrete(), w.concrete()) else {
            return Ok(Some(0));
        };
        let p = self.params(op, &x, &w)?;
        let out = conv_output_dims(&x, &w, &p)?;
        let numel = |dims: &[usize]| dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let channels = w.first().copied().unwrap_or(0);
        // Operands, output, im2col, then bias and zero points (and the caller's values) per
        // output channel.
        Ok((|| {
            numel(&x)?
                .checked_add(numel(&w)?)?
                .checked_add(numel(&out)?)?
                .checked_add(conv_scratch_len(&x, &w, &p))?
                .checked_add(channels.checked_mul(per_channel.checked_add(2)?)?)
        })())
    }

    /// The parameters for input dims `x` and weight dims `w`.
    pub(crate) fn resolve(&self, op: &str, x: &[usize], w: &[usize]) -> OpResult<ResolvedConv> {
        let params = self.params(op, x, w)?;
        let out_dims = conv_output_dims(x, w, &params)?;
        Ok(ResolvedConv {
            x_dims: x.to_vec(),
            w_dims: w.to_vec(),
            params,
            out_dims,
        })
    }

    /// [`ConvAttrs::resolve`] for facts whose dims are known (else `None`).
    pub(crate) fn resolve_facts(
        &self,
        op: &str,
        x: &Fact,
        w: &Fact,
    ) -> OpResult<Option<ResolvedConv>> {
        match (x.concrete(), w.concrete()) {
            (Some(x), Some(w)) => Ok(Some(self.resolve(op, &x, &w)?)),
            _ => Ok(None),
        }
    }

    /// The output dims for facts `x` and `w` (unknown when either is not concrete).
    pub(crate) fn output_dims(&self, op: &str, x: &Fact, w: &Fact) -> OpResult<Vec<Dim>> {
        match (x.concrete(), w.concrete()) {
            (Some(x), Some(w)) => {
                let p = self.params(op, &x, &w)?;
                Ok(conv_output_dims(&x, &w, &p)?
                    .into_iter()
                    .map(Dim::Known)
                    .collect())
            }
            _ => Ok(vec![Dim::Unknown; x.rank()]),
        }
    }
}

/// `conv(x - x_zero_point, w - w_zero_point) + bias`, exactly, in the output's row-major order,
/// in a buffer carved from `work` (see [`ConvAttrs::work_len`]); also returns the output channel
/// count and the elements per channel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn centered_conv<'w>(
    op: &str,
    attrs: &ConvAttrs,
    planned: Option<&ResolvedConv>,
    x: &Tensor,
    x_zero_point: &Tensor,
    w: &Tensor,
    w_zero_point: &Tensor,
    bias: Option<&Tensor>,
    threads: usize,
    work: &mut &'w mut [f64],
) -> OpResult<(&'w [f64], usize, usize)> {
    let fresh;
    let resolved = match planned.filter(|p| p.x_dims == x.dims() && p.w_dims == w.dims()) {
        Some(planned) => planned,
        None => {
            fresh = attrs.resolve(op, x.dims(), w.dims())?;
            &fresh
        }
    };
    let (params, out_dims) = (&resolved.params, &resolved.out_dims);
    let channels = w.dims()[0];
    let xs = carve(op, work, x.numel())?;
    read_f64_into(op, x, xs)?;
    let ws = carve(op, work, w.numel())?;
    read_f64_into(op, w, ws)?;
    if x_zero_point.is_defined() {
        let zp = read_scalar(op, "x_zero_point", x_zero_point)?;
        xs.iter_mut().for_each(|v| *v -= zp);
    }
    if w_zero_point.is_defined() {
        let len = w_zero_point.numel();
        if len != 1 && len != channels {
            return Err(OpError::shape(
                op,
                format!(
                    "w_zero_point must be a scalar or one per output channel ({channels}), got \
                     dims {:?}",
                    w_zero_point.dims()
                ),
            ));
        }
        let zp = carve(op, work, len)?;
        read_f64_into(op, w_zero_point, zp)?;
        let per_channel = ws.len() / channels.max(1);
        for (i, v) in ws.iter_mut().enumerate() {
            *v -= if zp.len() == 1 {
                zp[0]
            } else {
                zp[i / per_channel.max(1)]
            };
        }
    }
    let bias = match bias.filter(|b| b.is_defined()) {
        Some(bias) => {
            if bias.dtype() != DType::I32 || bias.dims() != [channels] {
                return Err(OpError::shape(
                    op,
                    format!(
                        "bias must be int32 of dims [{channels}], got {} {:?}",
                        bias.dtype(),
                        bias.dims()
                    ),
                ));
            }
            let values = carve(op, work, channels)?;
            read_f64_into(op, bias, values)?;
            Some(&*values)
        }
        None => None,
    };
    let out_len: usize = out_dims.iter().product();
    let out = carve(op, work, out_len)?;
    let im2col = carve(op, work, conv_scratch_len(x.dims(), w.dims(), params))?;
    conv(
        xs,
        x.dims(),
        ws,
        w.dims(),
        bias,
        None,
        None,
        params,
        out,
        im2col,
        threads,
    )?;
    let per_channel = out_dims[2..].iter().product();
    Ok((out, channels, per_channel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attributes;

    fn attrs(pads: Option<Vec<i64>>) -> ConvAttrs {
        let mut a = Attributes::new("ConvInteger");
        if let Some(p) = pads {
            a.insert("pads", crate::Attr::Ints(p));
        }
        let ctx = OpContext {
            op_type: "ConvInteger",
            domain: "",
            opset: 10,
            attrs: &a,
            num_inputs: 2,
            num_outputs: 1,
        };
        ConvAttrs::from_ctx("ConvInteger", &ctx).unwrap()
    }

    #[test]
    fn centered_convolution_pads_with_the_zero_point() {
        // x = 2x2 of 3s with zero point 1 (centered: 2s); a 1x1 weight 5 with zero point 2 (3).
        let x = Tensor::from_slice(&[3u8; 4], &[1, 1, 2, 2]).unwrap();
        let w = Tensor::from_slice(&[5u8], &[1, 1, 1, 1]).unwrap();
        let (xz, wz) = (
            Tensor::from_slice(&[1u8], &[]).unwrap(),
            Tensor::from_slice(&[2u8], &[1]).unwrap(),
        );
        let bias = Tensor::from_slice(&[10i32], &[1]).unwrap();
        let a = attrs(Some(vec![1, 0, 0, 0]));
        let (xf, wf) = (Fact::constant(x.clone()), Fact::constant(w.clone()));
        let len = a.work_len("T", &xf, &wf, 0).unwrap().unwrap();
        let mut buf = vec![0.0; len];
        let (out, m, per) = centered_conv(
            "T",
            &a,
            None,
            &x,
            &xz,
            &w,
            &wz,
            Some(&bias),
            1,
            &mut &mut buf[..],
        )
        .unwrap();
        assert_eq!((m, per), (1, 6));
        // The padded row is centered zero: just the bias.
        assert_eq!(out, [10.0, 10.0, 16.0, 16.0, 16.0, 16.0]);
        // One value short of the planned size is refused.
        let short = &mut &mut buf[..len - 1];
        assert!(centered_conv("T", &a, None, &x, &xz, &w, &wz, Some(&bias), 1, short).is_err());
    }

    #[test]
    fn bad_zero_points_and_ranks_are_errors() {
        let x = Tensor::from_slice(&[3u8; 4], &[1, 1, 2, 2]).unwrap();
        let w = Tensor::from_slice(&[5u8], &[1, 1, 1, 1]).unwrap();
        let zp = Tensor::from_slice(&[1u8, 2], &[2]).unwrap();
        let none = Tensor::undefined();
        let mut buf = vec![0.0; 64];
        let mut run = |x: &Tensor, xz: &Tensor, wz: &Tensor| {
            centered_conv(
                "T",
                &attrs(None),
                None,
                x,
                xz,
                &w,
                wz,
                None,
                1,
                &mut &mut buf[..],
            )
            .map(|_| ())
        };
        assert!(run(&x, &zp, &none).is_err());
        assert!(run(&x, &none, &zp).is_err());
        let flat = Tensor::from_slice(&[3u8; 4], &[4]).unwrap();
        assert!(run(&flat, &none, &none).is_err());
    }
}
