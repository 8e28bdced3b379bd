//! Conv (N-d, groups, dilations, pads, auto_pad) through im2col + GEMM; the im2col buffer is
//! planned scratch space. f32 and f64 compute natively; f16 and bf16 are widened to f32 in
//! scratch, convolved there and rounded once on store.

use std::marker::PhantomData;

use bytemuck::Pod;

use strata_core::shape::checked_numel;
use strata_core::{DType, Device, Element};

use crate::kernels::error::KernelResult;
use crate::kernels::{resolve_auto_pad, Activation, GemmFloat, Prepacked};
use crate::ops::convolution::conv_kernel::{
    conv, conv_output_dims, conv_scratch_len, prepack_conv_weights, ConvParams,
};
use crate::ops::convolution::depthwise_blocked::{self, BlockedWeights};
use crate::ops::convolution::direct_stride1::{self, DirectWeights};
use crate::ops::convolution::few_channels::{self, FewChannelWeights};
use crate::ops::convolution::winograd::{self, WinogradWeights};
use crate::support::inputs::{optional, required};
use crate::support::numeric::Real;
use crate::support::scratch::{carve, scratch_as};
use crate::{
    Dim, EpilogueStep, Fact, Fused, FusesEpilogue, Kernel, KernelCapabilities, KernelIo,
    OpCapabilities, OpContext, OpError, OpResult, Operator,
};

#[derive(Debug, Clone)]
pub struct Conv {
    auto_pad: String,
    kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    groups: usize,
    /// An activation fused in by the graph optimizer.
    pub post: Activation,
    /// A residual Add fused in by the graph optimizer: input 3, of the output's dims, is added
    /// (after the bias, before `post`).
    pub residual: bool,
}

impl Conv {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let groups = a.int_or("group", 1)?;
        if groups < 1 {
            return Err(OpError::attribute(
                "Conv",
                "group",
                format!("must be >= 1, got {groups}"),
            ));
        }
        Ok(Box::new(Conv {
            auto_pad: a.string_or("auto_pad", "NOTSET")?,
            kernel_shape: a.usizes("kernel_shape")?,
            strides: a.usizes("strides")?,
            pads: a.usizes("pads")?,
            dilations: a.usizes("dilations")?,
            groups: groups as usize,
            post: Activation::None,
            residual: false,
        }))
    }

    /// Concrete kernel parameters for input dims `x` and weight dims `w`.
    pub fn params(&self, x: &[usize], w: &[usize]) -> OpResult<ConvParams> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::shape(
                "Conv",
                format!("input {x:?} and weight {w:?} must have the same rank >= 3"),
            ));
        }
        let spatial = x.len() - 2;
        let kernel = self.kernel_shape.clone().unwrap_or_else(|| w[2..].to_vec());
        if kernel.len() != spatial || kernel.as_slice() != &w[2..] {
            return Err(OpError::attribute(
                "Conv",
                "kernel_shape",
                format!("{kernel:?} does not match weight dims {w:?}"),
            ));
        }
        let ones = vec![1; spatial];
        let strides = self.strides.clone().unwrap_or_else(|| ones.clone());
        let dilations = self.dilations.clone().unwrap_or_else(|| ones.clone());
        let (pads_begin, pads_end) = match self.auto_pad.as_str() {
            "" | "NOTSET" => match &self.pads {
                Some(p) if p.len() == 2 * spatial => (p[..spatial].to_vec(), p[spatial..].to_vec()),
                Some(p) => {
                    return Err(OpError::attribute(
                        "Conv",
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
            post: self.post,
        })
    }
}

/// The kernel adds a residual (input 3) and then applies one activation while storing each
/// output tile; a bias input it already adds (input 2).
impl FusesEpilogue for Conv {
    fn fuse(&self, step: EpilogueStep) -> Option<Fused> {
        if self.post != Activation::None {
            return None;
        }
        match step {
            EpilogueStep::Activation(activation) => Some(Fused {
                op: Box::new(Conv {
                    post: activation,
                    ..self.clone()
                }),
                operand_slot: None,
            }),
            EpilogueStep::Residual if !self.residual => Some(Fused {
                op: Box::new(Conv {
                    residual: true,
                    ..self.clone()
                }),
                operand_slot: Some(RESIDUAL_SLOT),
            }),
            _ => None,
        }
    }
}

/// The input a fused residual Add's other operand is read from.
const RESIDUAL_SLOT: usize = 3;

impl crate::HasQLinearForm for Conv {
    fn qlinear(&self) -> Option<Box<dyn Operator>> {
        if self.post != Activation::None || self.residual {
            return None;
        }
        let attrs = crate::ops::convolution::integer_conv_kernel::ConvAttrs::new(
            self.auto_pad.clone(),
            self.kernel_shape.clone(),
            self.strides.clone(),
            self.pads.clone(),
            self.dilations.clone(),
            self.groups,
        );
        Some(crate::ops::convolution::qlinear_conv::QLinearConv::with_attrs(attrs))
    }
}

impl Operator for Conv {
    fn op_type(&self) -> &str {
        "Conv"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Conv", inputs, 0)?;
        let w = required("Conv", inputs, 1)?;
        if x.dtype != w.dtype {
            return Err(OpError::DType {
                op: "Conv".into(),
                index: 1,
                expected: x.dtype.to_string(),
                actual: w.dtype,
            });
        }
        let w_dims = w.concrete_or_err("Conv")?;
        // The batch dim may be symbolic: compute with 1 and put it back.
        let mut x_dims: Vec<usize> = Vec::with_capacity(x.rank());
        for (i, d) in x.dims.iter().enumerate() {
            match d.known() {
                Some(v) => x_dims.push(v),
                None if i == 0 => x_dims.push(1),
                None => {
                    let mut dims = vec![x.dims[0].clone(), Dim::Known(w_dims[0])];
                    dims.extend(std::iter::repeat_n(
                        Dim::Unknown,
                        x.rank().saturating_sub(2),
                    ));
                    return Ok(vec![Fact::new(x.dtype, dims)]);
                }
            }
        }
        let p = self.params(&x_dims, &w_dims)?;
        let mut out: Vec<Dim> = conv_output_dims(&x_dims, &w_dims, &p)?
            .into_iter()
            .map(Dim::Known)
            .collect();
        out[0] = x.dims[0].clone();
        if let Some(b) = optional(inputs, 2) {
            if b.dims != [Dim::Known(w_dims[0])] {
                return Err(OpError::shape(
                    "Conv",
                    format!("bias has dims {:?}, expected [{}]", b.dims, w_dims[0]),
                ));
            }
        }
        if self.residual {
            let r = required("Conv", inputs, RESIDUAL_SLOT)?;
            if r.dtype != x.dtype || r.dims != out {
                return Err(OpError::shape(
                    "Conv",
                    format!(
                        "fused residual is {} {:?}, expected {} {out:?}",
                        r.dtype, r.dims, x.dtype
                    ),
                ));
            }
        }
        Ok(vec![Fact::new(x.dtype, out)])
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            epilogue: Some(self),
            qlinear: Some(self),
            ..OpCapabilities::default()
        }
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(x), Some(w)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let p = self.params(&x, &w)?;
        let unfold = conv_scratch_len(&x, &w, &p);
        // A kernel built for Winograd runs it for whatever dims come (its weight is only kept
        // transformed), so capable f32 geometries plan room for both paths.
        let unfold = match inputs[0].dtype {
            DType::F32 => unfold.max(winograd::scratch_len(&x, &w, &p)),
            _ => unfold,
        };
        match inputs[0].dtype {
            DType::F16 | DType::BF16 => {
                let bias = inputs.get(2).and_then(|b| b.numel()).unwrap_or(0);
                let out = checked_numel(&conv_output_dims(&x, &w, &p)?)?;
                let len = [unfold, checked_numel(&x)?, checked_numel(&w)?, bias, out]
                    .iter()
                    .try_fold(0usize, |acc, &n| acc.checked_add(n))
                    .and_then(|n| n.checked_mul(std::mem::size_of::<f32>()))
                    .ok_or_else(|| OpError::shape("Conv", "f32 working set size overflows"))?;
                Ok(len)
            }
            dtype => unfold
                .checked_mul(dtype.size_in_bytes())
                .ok_or_else(|| OpError::shape("Conv", "unfold buffer size overflows")),
        }
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        // Parameters resolved now for the planned dims; recomputed at run time only if the
        // spatial dims change under SAME_* padding.
        let planned = match (inputs[0].concrete(), inputs[1].concrete()) {
            (Some(x), Some(w)) => Some((x.clone(), self.params(&x, &w)?)),
            _ => None,
        };
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => {
                let few_channels = few_channel_weights(inputs, &planned)?;
                let direct = match few_channels {
                    None => direct_weights(inputs, &planned)?,
                    Some(_) => None,
                };
                let winograd = match (&few_channels, &direct) {
                    (None, None) => winograd_weights(inputs, &planned)?,
                    _ => None,
                };
                let depthwise = depthwise_weights(inputs, &planned)?;
                Ok(Box::new(ConvKernel::<f32> {
                    op: self.clone(),
                    packed: match (&winograd, &few_channels, &direct) {
                        (None, None, None) => prepack(inputs, &planned)?,
                        _ => None,
                    },
                    winograd,
                    few_channels,
                    direct,
                    depthwise,
                    weight_dims: inputs[1].concrete(),
                    planned,
                }))
            }
            (DType::F64, Device::Cpu) => Ok(Box::new(ConvKernel::<f64> {
                op: self.clone(),
                packed: prepack(inputs, &planned)?,
                winograd: None,
                few_channels: None,
                direct: None,
                depthwise: None,
                weight_dims: inputs[1].concrete(),
                planned,
            })),
            // The widened kernels have no room planned for a residual.
            (DType::F16 | DType::BF16, _) if self.residual => {
                Err(OpError::no_kernel("Conv", inputs[0].dtype, device))
            }
            (DType::F16, Device::Cpu) => Ok(Box::new(WidenedConvKernel::<strata_core::f16> {
                op: self.clone(),
                _t: PhantomData,
            })),
            (DType::BF16, Device::Cpu) => Ok(Box::new(WidenedConvKernel::<strata_core::bf16> {
                op: self.clone(),
                _t: PhantomData,
            })),
            (dtype, device) => Err(OpError::no_kernel("Conv", dtype, device)),
        }
    }
}

/// Constant weights packed once for the products, per group (R1: held by the plan's kernel in
/// Persistent memory, shared by every context). The packing depends on the weight alone, so
/// runs with other input dims use it too; the planned dims only decide whether it pays.
fn prepack<T: Element + GemmFloat>(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
) -> OpResult<Option<Vec<Prepacked<T>>>> {
    let (Some((x_dims, params)), Some(weight)) = (planned, inputs[1].value.as_ref()) else {
        return Ok(None);
    };
    let read = weight.read::<T>()?;
    let Some(values) = read.as_slice() else {
        return Ok(None);
    };
    Ok(prepack_conv_weights(x_dims, values, weight.dims(), params)?)
}

/// The constant f32 weight in a kernel's own layout, made by `make(values, dims, choice)` when
/// `choose` finds that the planned dims pay for that kernel (`Some(choice)`); it then replaces
/// the packed weight for every run. `None` for a weight that is not a constant (or not
/// contiguous) or dims not planned.
fn planned_weights<C, W>(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
    choose: impl FnOnce(&[usize], &[usize], &ConvParams) -> Option<C>,
    make: impl FnOnce(&[f32], &[usize], C) -> KernelResult<W>,
) -> OpResult<Option<W>> {
    let (Some((x_dims, params)), Some(weight)) = (planned, inputs[1].value.as_ref()) else {
        return Ok(None);
    };
    let Some(choice) = choose(x_dims, weight.dims(), params) else {
        return Ok(None);
    };
    let read = weight.read::<f32>()?;
    let Some(values) = read.as_slice() else {
        return Ok(None);
    };
    Ok(Some(make(values, weight.dims(), choice)?))
}

/// A 3x3 stride-1 weight transformed for Winograd's F(2x2, 3x3) or F(4x4, 3x3), when the planned
/// dims make one pay (see `winograd::variant`).
fn winograd_weights(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
) -> OpResult<Option<WinogradWeights>> {
    planned_weights(inputs, planned, winograd::variant, |v, w, variant| {
        WinogradWeights::new(v, w[0], w[1], variant)
    })
}

/// A weight reordered for the direct few-input-channel kernel (see `few_channels::pays`).
fn few_channel_weights(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
) -> OpResult<Option<FewChannelWeights>> {
    let pays = |x: &[usize], w: &[usize], p: &ConvParams| few_channels::pays(x, w, p).then_some(());
    planned_weights(inputs, planned, pays, |v, w, ()| {
        FewChannelWeights::new(v, w)
    })
}

/// A weight reordered for the direct stride-1 kernel (see `direct_stride1::pays`).
fn direct_weights(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
) -> OpResult<Option<DirectWeights>> {
    let pays =
        |x: &[usize], w: &[usize], p: &ConvParams| direct_stride1::pays(x, w, p).then_some(());
    planned_weights(inputs, planned, pays, |v, w, ()| DirectWeights::new(v, w))
}

/// A depthwise weight interleaved for the blocked kernel (see
/// `depthwise_blocked::prepack_pays`).
fn depthwise_weights(
    inputs: &[&Fact],
    planned: &Option<(Vec<usize>, ConvParams)>,
) -> OpResult<Option<BlockedWeights>> {
    let pays = |x: &[usize], w: &[usize], p: &ConvParams| {
        depthwise_blocked::prepack_pays(x, w, p).then_some(())
    };
    planned_weights(inputs, planned, pays, |v, w, ()| BlockedWeights::new(v, w))
}

#[derive(Debug)]
struct ConvKernel<T> {
    op: Conv,
    planned: Option<(Vec<usize>, ConvParams)>,
    /// One packed weight matrix per group.
    packed: Option<Vec<Prepacked<T>>>,
    /// Or the weight transformed for Winograd (f32 3x3 stride 1 only).
    winograd: Option<WinogradWeights>,
    /// Or the weight reordered for the direct few-input-channel kernel (f32 only).
    few_channels: Option<FewChannelWeights>,
    /// Or the weight reordered for the direct stride-1 kernel (f32 only).
    direct: Option<DirectWeights>,
    /// Or the depthwise weight interleaved for the blocked kernel (f32 only).
    depthwise: Option<BlockedWeights>,
    /// The weight's dims when they were known at plan time: with the weight packed, the plan
    /// frees the original and binds an undefined tensor in its place.
    weight_dims: Option<Vec<usize>>,
}

impl<T> ConvKernel<T> {
    /// Whether the kernel holds its own copy of the weight (packed, transformed or reordered).
    fn holds_weight(&self) -> bool {
        self.packed.is_some()
            || self.winograd.is_some()
            || self.few_channels.is_some()
            || self.direct.is_some()
            || self.depthwise.is_some()
    }
}

impl<T: Element + GemmFloat> Kernel for ConvKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, w, b, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let weight_dims = match (&self.weight_dims, w.is_defined()) {
            (_, true) => w.dims(),
            (Some(dims), false) if self.holds_weight() => dims.as_slice(),
            _ => return Err(OpError::kernel("Conv", "the weight input is missing")),
        };
        let fresh;
        let params = match &self.planned {
            Some((dims, p))
                if dims.as_slice() == x.dims()
                    || matches!(self.op.auto_pad.as_str(), "" | "NOTSET" | "VALID") =>
            {
                p
            }
            _ => {
                fresh = self.op.params(x.dims(), weight_dims)?;
                &fresh
            }
        };
        let not_contiguous = || OpError::kernel("Conv", "operands must be contiguous");
        let rx = x.read::<T>()?;
        let rw = if w.is_defined() {
            Some(w.read::<T>()?)
        } else {
            None
        };
        let weight: &[T] = match &rw {
            Some(r) => r.as_slice().ok_or_else(not_contiguous)?,
            None => &[],
        };
        let rb = if b.is_defined() {
            Some(b.read::<T>()?)
        } else {
            None
        };
        let bias = match &rb {
            Some(r) => Some(r.as_slice().ok_or_else(not_contiguous)?),
            None => None,
        };
        let rr = if self.op.residual {
            Some(io.input(RESIDUAL_SLOT).read::<T>()?)
        } else {
            None
        };
        let residual = match &rr {
            Some(r) => Some(r.as_slice().ok_or_else(not_contiguous)?),
            None => None,
        };
        let mut wo = out.write::<T>()?;
        let mut scratch_guard = match io.scratch {
            Some(s) => Some(s.write_bytes("Conv")?),
            None => None,
        };
        let scratch: &mut [T] = match &mut scratch_guard {
            Some(g) => {
                let bytes = g.bytes();
                let whole = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
                bytemuck::try_cast_slice_mut(&mut bytes[..whole])
                    .map_err(|e| OpError::kernel("Conv", format!("scratch: {e}")))?
            }
            None => &mut [],
        };
        let input = rx.as_slice().ok_or_else(not_contiguous)?;
        let output = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        if self.few_channels.is_some() || self.direct.is_some() || self.depthwise.is_some() {
            fn cast<T: Pod>(v: &[T]) -> Option<&[f32]> {
                bytemuck::try_cast_slice::<T, f32>(v).ok()
            }
            let wrong = || OpError::kernel("Conv", "prepacked direct kernels run on f32 only");
            let input = cast(input).ok_or_else(wrong)?;
            let bias = bias.map(|b| cast(b).ok_or_else(wrong)).transpose()?;
            let residual = residual.map(|r| cast(r).ok_or_else(wrong)).transpose()?;
            let output = bytemuck::try_cast_slice_mut::<T, f32>(output).map_err(|_| wrong())?;
            let (dims, threads) = (x.dims(), io.threads);
            match (&self.few_channels, &self.direct, &self.depthwise) {
                (Some(fc), _, _) => {
                    few_channels::conv(input, dims, fc, params, bias, residual, output, threads)?
                }
                (_, Some(d), _) => {
                    direct_stride1::conv(input, dims, d, params, bias, residual, output, threads)?
                }
                (_, _, Some(dw)) => depthwise_blocked::depthwise_prepacked(
                    input, dims, dw, params, bias, residual, output, threads,
                )?,
                (None, None, None) => {}
            }
            return Ok(());
        }
        if let Some(transformed) = &self.winograd {
            // Built for f32 only, so these casts are identities.
            fn as_f32<T: Pod>(v: &[T]) -> Option<&[f32]> {
                bytemuck::try_cast_slice::<T, f32>(v).ok()
            }
            let (Some(input), Some(bias), Some(residual)) = (
                as_f32(input),
                bias.map_or(Some(None), |b| as_f32(b).map(Some)),
                residual.map_or(Some(None), |r| as_f32(r).map(Some)),
            ) else {
                return Err(OpError::kernel("Conv", "Winograd runs on f32 only"));
            };
            let output = bytemuck::try_cast_slice_mut::<T, f32>(output)
                .map_err(|_| OpError::kernel("Conv", "Winograd runs on f32 only"))?;
            let scratch = bytemuck::try_cast_slice_mut::<T, f32>(scratch)
                .map_err(|_| OpError::kernel("Conv", "Winograd runs on f32 only"))?;
            winograd::conv(
                input,
                x.dims(),
                transformed,
                params,
                bias,
                residual,
                output,
                scratch,
                io.threads,
            )?;
            return Ok(());
        }
        conv(
            input,
            x.dims(),
            weight,
            weight_dims,
            bias,
            residual,
            self.packed.as_deref(),
            params,
            output,
            scratch,
            io.threads,
        )?;
        Ok(())
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            // Every product reads the packed groups, whatever dims a run brings.
            packed_inputs: if self.holds_weight() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }
}

/// Conv for 16-bit floats: operands widened to f32 in scratch (after the im2col tile), the
/// f32 convolution, then one rounding per output element.
#[derive(Debug)]
struct WidenedConvKernel<H> {
    op: Conv,
    _t: PhantomData<H>,
}

impl<H: Element + Real<Wide = f32>> Kernel for WidenedConvKernel<H> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, w, b, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let params = self.op.params(x.dims(), w.dims())?;
        let not_contiguous = || OpError::kernel("Conv", "operands must be contiguous");
        let (rx, rw) = (x.read::<H>()?, w.read::<H>()?);
        let rb = if b.is_defined() {
            Some(b.read::<H>()?)
        } else {
            None
        };
        let mut wo = out.write::<H>()?;
        let mut guard = match io.scratch {
            Some(s) => s.write_bytes("Conv")?,
            None => return Err(OpError::kernel("Conv", "f16 convolution needs scratch")),
        };
        let mut rest: &mut [f32] = scratch_as("Conv", guard.bytes())?;
        let unfold = carve(
            "Conv",
            &mut rest,
            conv_scratch_len(x.dims(), w.dims(), &params),
        )?;
        let mut widen = |src: &[H]| -> OpResult<&mut [f32]> {
            let dst = carve("Conv", &mut rest, src.len())?;
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v.widen();
            }
            Ok(dst)
        };
        let xf = widen(rx.as_slice().ok_or_else(not_contiguous)?)?;
        let wf = widen(rw.as_slice().ok_or_else(not_contiguous)?)?;
        let bf = match &rb {
            Some(r) => Some(&*widen(r.as_slice().ok_or_else(not_contiguous)?)?),
            None => None,
        };
        let out_h = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        let out_f = carve("Conv", &mut rest, out_h.len())?;
        conv(
            xf,
            x.dims(),
            wf,
            w.dims(),
            bf,
            None,
            None,
            &params,
            out_f,
            unfold,
            io.threads,
        )?;
        for (d, &v) in out_h.iter_mut().zip(out_f.iter()) {
            *d = H::narrow(v);
        }
        Ok(())
    }
}
