//! The integer convolution behind ConvInteger and QLinearConv: the Conv attributes (auto_pad,
//! kernel_shape, strides, pads, dilations, group) and `conv(X - x_zero_point, W -
//! w_zero_point) + B`, where X's zero point is a scalar and W's a scalar or one per output
//! channel. Padding is with centered zeros, i.e. with the zero point, as the ONNX reference does.
//!
//! The centered operands are at most 9-bit integers, so the products and their sums are exact in
//! f64: the convolution runs on the project's im2col + f64 GEMM kernel.

use strata_core::{DType, Tensor};

use super::values::read_f64;
use crate::kernels::{conv, conv_output_dims, conv_scratch_len, resolve_auto_pad, ConvParams};
use crate::{Dim, Fact, OpContext, OpError, OpResult};

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

/// `conv(x - x_zero_point, w - w_zero_point) + bias`, exactly, in the output's row-major order;
/// also returns the output channel count and the elements per channel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn centered_conv(
    op: &str,
    attrs: &ConvAttrs,
    x: &Tensor,
    x_zero_point: &Tensor,
    w: &Tensor,
    w_zero_point: &Tensor,
    bias: &Tensor,
    threads: usize,
) -> OpResult<(Vec<f64>, usize, usize)> {
    let params = attrs.params(op, x.dims(), w.dims())?;
    let out_dims = conv_output_dims(x.dims(), w.dims(), &params)?;
    let channels = w.dims()[0];
    let mut xs = read_f64(op, x)?;
    let mut ws = read_f64(op, w)?;
    if x_zero_point.is_defined() {
        let zp = read_f64(op, x_zero_point)?;
        if zp.len() != 1 {
            return Err(OpError::shape(
                op,
                format!(
                    "x_zero_point must be a scalar, got dims {:?}",
                    x_zero_point.dims()
                ),
            ));
        }
        xs.iter_mut().for_each(|v| *v -= zp[0]);
    }
    if w_zero_point.is_defined() {
        let zp = read_f64(op, w_zero_point)?;
        if zp.len() != 1 && zp.len() != channels {
            return Err(OpError::shape(
                op,
                format!(
                    "w_zero_point must be a scalar or one per output channel ({channels}), got \
                     dims {:?}",
                    w_zero_point.dims()
                ),
            ));
        }
        let per_channel = ws.len() / channels.max(1);
        for (i, v) in ws.iter_mut().enumerate() {
            *v -= if zp.len() == 1 {
                zp[0]
            } else {
                zp[i / per_channel.max(1)]
            };
        }
    }
    let bias = if bias.is_defined() {
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
        Some(read_f64(op, bias)?)
    } else {
        None
    };
    let out_len: usize = out_dims.iter().product();
    let mut out = vec![0.0f64; out_len];
    let mut scratch = vec![0.0f64; conv_scratch_len(x.dims(), w.dims(), &params)];
    conv(
        &xs,
        x.dims(),
        &ws,
        w.dims(),
        bias.as_deref(),
        &params,
        &mut out,
        &mut scratch,
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
        let (out, m, per) = centered_conv(
            "T",
            &attrs(Some(vec![1, 0, 0, 0])),
            &x,
            &xz,
            &w,
            &wz,
            &bias,
            1,
        )
        .unwrap();
        assert_eq!((m, per), (1, 6));
        // The padded row is centered zero: just the bias.
        assert_eq!(out, [10.0, 10.0, 16.0, 16.0, 16.0, 16.0]);
    }

    #[test]
    fn bad_zero_points_and_ranks_are_errors() {
        let x = Tensor::from_slice(&[3u8; 4], &[1, 1, 2, 2]).unwrap();
        let w = Tensor::from_slice(&[5u8], &[1, 1, 1, 1]).unwrap();
        let zp = Tensor::from_slice(&[1u8, 2], &[2]).unwrap();
        let none = Tensor::undefined();
        assert!(centered_conv("T", &attrs(None), &x, &zp, &w, &none, &none, 1).is_err());
        assert!(centered_conv("T", &attrs(None), &x, &none, &w, &zp, &none, 1).is_err());
        let flat = Tensor::from_slice(&[3u8; 4], &[4]).unwrap();
        assert!(centered_conv("T", &attrs(None), &flat, &none, &w, &none, &none, 1).is_err());
    }
}
