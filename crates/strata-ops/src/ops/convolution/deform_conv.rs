//! DeformConv (opsets 19, 22), 2-D: a convolution whose every kernel tap, at every output
//! position, reads the input at its regular place moved by a learned `(dy, dx)` from `offset`
//! (`[N, offset_group * kH * kW * 2, oH, oW]`), bilinearly interpolated with zeros outside the
//! image, and optionally scaled by `mask` (`[N, offset_group * kH * kW, oH, oW]`). Attributes
//! `group`, `offset_group`, `dilations`, `pads`, `strides`, `kernel_shape`; optional bias `B`.
//!
//! Built as a deformable im2col (the sampled, masked taps of one (image, group) written as a
//! `C/group * kH * kW` by `oH * oW` column matrix in planned scratch) followed by the project's
//! GEMM `W_g · col` per group. f32 and f64 compute in place; f16 and bf16 are widened to f32 in
//! scratch (column, weights and the group's result) and rounded once on store.

use std::marker::PhantomData;

use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::kernels::{gemm, GemmFloat};
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "DeformConv";

/// Below this many column elements the column is sampled on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

#[derive(Debug, Clone)]
pub struct DeformConv {
    kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    groups: usize,
    offset_groups: usize,
}

/// Validated dims of one DeformConv call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    offset_groups: usize,
    in_h: usize,
    in_w: usize,
    kernel_h: usize,
    kernel_w: usize,
    stride_h: usize,
    stride_w: usize,
    dilation_h: usize,
    dilation_w: usize,
    pad_top: usize,
    pad_left: usize,
    out_h: usize,
    out_w: usize,
}

impl Geometry {
    fn in_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    fn out_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    fn taps(&self) -> usize {
        self.kernel_h * self.kernel_w
    }

    fn out_len(&self) -> usize {
        self.out_h * self.out_w
    }

    fn output_dims(&self) -> [usize; 4] {
        [self.batch, self.out_channels, self.out_h, self.out_w]
    }

    fn offset_dims(&self) -> [usize; 4] {
        [
            self.batch,
            self.offset_groups * self.taps() * 2,
            self.out_h,
            self.out_w,
        ]
    }

    fn mask_dims(&self) -> [usize; 4] {
        [
            self.batch,
            self.offset_groups * self.taps(),
            self.out_h,
            self.out_w,
        ]
    }

    /// Elements of one group's column matrix.
    fn col_len(&self) -> usize {
        self.in_per_group() * self.taps() * self.out_len()
    }

    /// Scratch elements (of the compute type): the column, plus for 16-bit types the widened
    /// weights and one group's result.
    fn scratch_len(&self, widened: bool) -> OpResult<usize> {
        let parts = if widened {
            [
                self.col_len(),
                self.out_channels * self.in_per_group() * self.taps(),
                checked_product(&[self.out_per_group(), self.out_len()])?,
            ]
        } else {
            [self.col_len(), 0, 0]
        };
        parts
            .iter()
            .try_fold(0usize, |acc, &v| acc.checked_add(v))
            .ok_or_else(|| OpError::shape(OP, "scratch size overflows"))
    }
}

fn checked_product(values: &[usize]) -> OpResult<usize> {
    values
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(v))
        .ok_or_else(|| OpError::shape(OP, format!("size of {values:?} overflows")))
}

impl DeformConv {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let count = |name: &str| -> OpResult<usize> {
            let v = a.int_or(name, 1)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| OpError::attribute(OP, name, format!("must be >= 1, got {v}")))
        };
        let list = |name: &str, len: usize, min: usize| -> OpResult<Option<Vec<usize>>> {
            let v = a.usizes(name)?;
            if let Some(v) = &v {
                if v.len() != len || v.iter().any(|&x| x < min) {
                    return Err(OpError::attribute(
                        OP,
                        name,
                        format!("needs {len} values >= {min} (2-d), got {v:?}"),
                    ));
                }
            }
            Ok(v)
        };
        Ok(Box::new(DeformConv {
            kernel_shape: list("kernel_shape", 2, 1)?,
            strides: list("strides", 2, 1)?,
            pads: list("pads", 4, 0)?,
            dilations: list("dilations", 2, 1)?,
            groups: count("group")?,
            offset_groups: count("offset_group")?,
        }))
    }

    /// Resolves attributes against the dims of X (`[N, C, H, W]`) and W (`[M, C/group, kH, kW]`).
    fn geometry(&self, x: &[usize], w: &[usize]) -> OpResult<Geometry> {
        let (&[batch, in_channels, in_h, in_w], &[out_channels, w_in, kernel_h, kernel_w]) = (x, w)
        else {
            return Err(OpError::shape(
                OP,
                format!("X {x:?} and W {w:?} must both be 4-d (only 2-d DeformConv is defined)"),
            ));
        };
        if let Some(k) = &self.kernel_shape {
            if k[..] != [kernel_h, kernel_w] {
                return Err(OpError::attribute(
                    OP,
                    "kernel_shape",
                    format!("{k:?} does not match W dims {w:?}"),
                ));
            }
        }
        if w_in.checked_mul(self.groups) != Some(in_channels) || out_channels % self.groups != 0 {
            return Err(OpError::shape(
                OP,
                format!(
                    "X has {in_channels} channels and W is {w:?}: with group {} W dim 1 must be \
                     C / group and W dim 0 a multiple of group",
                    self.groups
                ),
            ));
        }
        if in_channels % self.offset_groups != 0 {
            return Err(OpError::attribute(
                OP,
                "offset_group",
                format!(
                    "{} does not divide the {in_channels} input channels",
                    self.offset_groups
                ),
            ));
        }
        let pair = |v: &Option<Vec<usize>>, default: usize| {
            v.as_ref().map_or((default, default), |v| (v[0], v[1]))
        };
        let (stride_h, stride_w) = pair(&self.strides, 1);
        let (dilation_h, dilation_w) = pair(&self.dilations, 1);
        let pads = self.pads.clone().unwrap_or(vec![0; 4]);
        // In i128: every term is model data.
        let extent = |input: usize, kernel: usize, dilation: usize, begin: usize, end: usize| {
            input as i128 + begin as i128 + end as i128
                - ((kernel as i128 - 1) * dilation as i128 + 1)
        };
        let span_h = extent(in_h, kernel_h, dilation_h, pads[0], pads[2]);
        let span_w = extent(in_w, kernel_w, dilation_w, pads[1], pads[3]);
        if span_h < 0 || span_w < 0 || kernel_h == 0 || kernel_w == 0 {
            return Err(OpError::shape(
                OP,
                format!(
                    "kernel {:?} (dilated) does not fit the padded input {x:?}",
                    [kernel_h, kernel_w]
                ),
            ));
        }
        let out = |span: i128, stride: usize| {
            usize::try_from(span / stride as i128 + 1)
                .map_err(|_| OpError::shape(OP, "output size overflows"))
        };
        let g = Geometry {
            batch,
            in_channels,
            out_channels,
            groups: self.groups,
            offset_groups: self.offset_groups,
            in_h,
            in_w,
            kernel_h,
            kernel_w,
            stride_h,
            stride_w,
            dilation_h,
            dilation_w,
            pad_top: pads[0],
            pad_left: pads[1],
            out_h: out(span_h, stride_h)?,
            out_w: out(span_w, stride_w)?,
        };
        // Every buffer the kernel indexes must be addressable.
        checked_product(&[batch, in_channels, in_h, in_w])?;
        checked_product(&[batch, out_channels, g.out_h, g.out_w])?;
        checked_product(&[batch, self.offset_groups, g.taps(), 2, g.out_h, g.out_w])?;
        checked_product(&[w_in, g.taps(), g.out_h, g.out_w])?;
        checked_product(&[out_channels, w_in, g.taps()])?;
        Ok(g)
    }

    /// The geometry, with the offset, bias and mask dims checked against it.
    fn checked_geometry(
        &self,
        x: &[usize],
        w: &[usize],
        offset: &[usize],
        bias: Option<&[usize]>,
        mask: Option<&[usize]>,
    ) -> OpResult<Geometry> {
        let g = self.geometry(x, w)?;
        if offset != g.offset_dims() {
            return Err(OpError::shape(
                OP,
                format!(
                    "offset has dims {offset:?}, expected {:?} (offset_group {} x {} taps x 2)",
                    g.offset_dims(),
                    g.offset_groups,
                    g.taps()
                ),
            ));
        }
        if let Some(b) = bias {
            if b != [g.out_channels] {
                return Err(OpError::shape(
                    OP,
                    format!("B has dims {b:?}, expected [{}]", g.out_channels),
                ));
            }
        }
        if let Some(m) = mask {
            if m != g.mask_dims() {
                return Err(OpError::shape(
                    OP,
                    format!("mask has dims {m:?}, expected {:?}", g.mask_dims()),
                ));
            }
        }
        Ok(g)
    }
}

impl Operator for DeformConv {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: x.dtype,
            });
        }
        let present = [
            Some((1, required(OP, inputs, 1)?)),
            Some((2, required(OP, inputs, 2)?)),
            optional(inputs, 3).map(|f| (3, f)),
            optional(inputs, 4).map(|f| (4, f)),
        ];
        for (index, f) in present.into_iter().flatten() {
            if f.dtype != x.dtype {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: x.dtype.to_string(),
                    actual: f.dtype,
                });
            }
        }
        // The batch dim may be symbolic: check with the one known batch size (or 1) and put the
        // original back.
        let offset = required(OP, inputs, 2)?;
        let batch = [x, offset]
            .iter()
            .chain(optional(inputs, 4).as_ref())
            .find_map(|f| f.dims.first().and_then(Dim::known))
            .unwrap_or(1);
        let with_batch = |f: &Fact| -> OpResult<Vec<usize>> {
            let mut dims = f.dims.clone();
            if let Some(first) = dims.first_mut().filter(|d| d.known().is_none()) {
                *first = Dim::Known(batch);
            }
            Fact::new(f.dtype, dims).concrete_or_err(OP)
        };
        let w = required(OP, inputs, 1)?.concrete_or_err(OP)?;
        let bias = match optional(inputs, 3) {
            Some(b) => Some(b.concrete_or_err(OP)?),
            None => None,
        };
        let mask = optional(inputs, 4).map(with_batch).transpose()?;
        let g = self.checked_geometry(
            &with_batch(x)?,
            &w,
            &with_batch(offset)?,
            bias.as_deref(),
            mask.as_deref(),
        )?;
        let mut dims: Vec<Dim> = g.output_dims().into_iter().map(Dim::Known).collect();
        dims[0] = x.dims[0].clone();
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(x), Some(w)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let g = self.geometry(&x, &w)?;
        let dtype = inputs[0].dtype;
        let widened = matches!(dtype, DType::F16 | DType::BF16);
        let wide = if dtype == DType::F64 { 8 } else { 4 };
        checked_product(&[g.scratch_len(widened)?, wide])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => DeformConvKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct DeformConvKernel<T> {
    op: DeformConv,
    _t: PhantomData<T>,
}

/// One bilinear read at a real position of an `h × w` plane: the four corners' flat indices and
/// weights. Corners outside the plane read as 0 (GridSample with `align_corners` and zero
/// padding, which the ONNX reference uses); they are skipped rather than weighted by 0 so that
/// a non-finite value elsewhere in the plane cannot leak in.
#[derive(Debug, Clone, Copy)]
struct Corners<W> {
    index: [usize; 4],
    weight: [W; 4],
    inside: [bool; 4],
    all_inside: bool,
}

impl<W: WideFloat> Corners<W> {
    fn at(h: usize, w: usize, y: W, x: W) -> Self {
        let zero = W::lit(0.0);
        let mut corners = Corners {
            index: [0; 4],
            weight: [zero; 4],
            inside: [false; 4],
            all_inside: false,
        };
        let (hf, wf, minus_one) = (W::lit(h as f64), W::lit(w as f64), W::lit(-1.0));
        // Nothing within reach (NaN lands here too).
        if !(y > minus_one && y < hf && x > minus_one && x < wf) {
            return corners;
        }
        let (y0, x0) = (y.floor(), x.floor());
        let (ly, lx) = (y - y0, x - x0);
        let one = W::lit(1.0);
        // y0 in -1..h and x0 in -1..w: exact as isize.
        let (row0, col0) = (y0.to_isize().unwrap_or(-1), x0.to_isize().unwrap_or(-1));
        let rows = [(row0, one - ly), (row0 + 1, ly)];
        let cols = [(col0, one - lx), (col0 + 1, lx)];
        for (k, ((row, wy), (col, wx))) in [
            (rows[0], cols[0]),
            (rows[0], cols[1]),
            (rows[1], cols[0]),
            (rows[1], cols[1]),
        ]
        .into_iter()
        .enumerate()
        {
            if row >= 0 && col >= 0 && (row as usize) < h && (col as usize) < w {
                corners.index[k] = row as usize * w + col as usize;
                corners.weight[k] = wy * wx;
                corners.inside[k] = true;
            }
        }
        corners.all_inside = corners.inside.iter().all(|&i| i);
        corners
    }

    #[inline(always)]
    fn read<T: Real<Wide = W>>(&self, plane: &[T]) -> W {
        let term = |k: usize| self.weight[k] * plane[self.index[k]].widen();
        if self.all_inside {
            return term(0) + term(1) + term(2) + term(3);
        }
        (0..4)
            .filter(|&k| self.inside[k])
            .fold(W::lit(0.0), |acc, k| acc + term(k))
    }
}

/// Input slices of one image, each contiguous.
struct Image<'a, T> {
    x: &'a [T],
    offset: &'a [T],
    mask: Option<&'a [T]>,
}

/// Fills the column rows of input channels `channels` (all in offset group `og`; `dst` starts at
/// the first one's rows). Each sample's corners are found once and read for every channel.
fn fill_channels<T: Real>(
    g: &Geometry,
    image: &Image<'_, T>,
    og: usize,
    channels: std::ops::Range<usize>,
    dst: &mut [T::Wide],
) {
    let (taps, out_len, plane) = (g.taps(), g.out_len(), g.in_h * g.in_w);
    for tap in 0..taps {
        let (ki, kj) = (tap / g.kernel_w, tap % g.kernel_w);
        let dy = &image.offset[((og * taps + tap) * 2) * out_len..][..out_len];
        let dx = &image.offset[((og * taps + tap) * 2 + 1) * out_len..][..out_len];
        let mask = image
            .mask
            .map(|m| &m[(og * taps + tap) * out_len..][..out_len]);
        // The tap's regular place at output (0, 0); each output step moves it by the stride.
        let base_y = (ki * g.dilation_h) as f64 - g.pad_top as f64;
        let base_x = (kj * g.dilation_w) as f64 - g.pad_left as f64;
        for oh in 0..g.out_h {
            let y0 = T::Wide::lit(base_y + (oh * g.stride_h) as f64);
            for ow in 0..g.out_w {
                let p = oh * g.out_w + ow;
                let x0 = T::Wide::lit(base_x + (ow * g.stride_w) as f64);
                let corners = Corners::at(g.in_h, g.in_w, y0 + dy[p].widen(), x0 + dx[p].widen());
                let scale = mask.map_or(T::Wide::lit(1.0), |m| m[p].widen());
                for (i, channel) in channels.clone().enumerate() {
                    let src = &image.x[channel * plane..][..plane];
                    dst[(i * taps + tap) * out_len + p] = corners.read(src) * scale;
                }
            }
        }
    }
}

/// Fills `col` (`C/group * kH * kW` rows of `oH * oW`, row `(channel, tap)`) for group `grp` of
/// one image. Threads take blocks of channels.
fn deformable_im2col<T: Real>(
    g: &Geometry,
    image: &Image<'_, T>,
    grp: usize,
    col: &mut [T::Wide],
    threads: usize,
) {
    let cg = g.in_per_group();
    let rows_per_channel = g.taps() * g.out_len();
    let per_offset_group = g.in_channels / g.offset_groups;
    let col = &mut col[..cg * rows_per_channel];
    // Channels `first..` of the group into `dst`, split where the offset group changes.
    let fill_block = |first: usize, dst: &mut [T::Wide]| {
        let end = first + dst.len() / rows_per_channel;
        let mut c = first;
        while c < end {
            let og = (grp * cg + c) / per_offset_group;
            let segment_end = end.min((og + 1) * per_offset_group - grp * cg);
            fill_channels(
                g,
                image,
                og,
                grp * cg + c..grp * cg + segment_end,
                &mut dst[(c - first) * rows_per_channel..(segment_end - first) * rows_per_channel],
            );
            c = segment_end;
        }
    };
    if threads > 1 && cg > 1 && col.len() >= PARALLEL_MIN_ELEMENTS {
        let block = cg.div_ceil(threads);
        crate::parallel::for_each_chunk_mut(col, block * rows_per_channel, 1, |b, dst| {
            fill_block(b * block, dst)
        });
    } else {
        fill_block(0, col);
    }
}

impl<T: Real> Kernel for DeformConvKernel<T>
where
    T::Wide: GemmFloat + bytemuck::Pod,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, w, offset, b, mask, out) = (
            io.input(0),
            io.input(1),
            io.input(2),
            io.input(3),
            io.input(4),
            io.output(0),
        );
        let g = self.op.checked_geometry(
            x.dims(),
            w.dims(),
            offset.dims(),
            b.is_defined().then(|| b.dims()),
            mask.is_defined().then(|| mask.dims()),
        )?;
        if out.dims() != g.output_dims() {
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
        let (rx, rw, roff) = (x.read::<T>()?, w.read::<T>()?, offset.read::<T>()?);
        let rb = b.is_defined().then(|| b.read::<T>()).transpose()?;
        let rm = mask.is_defined().then(|| mask.read::<T>()).transpose()?;
        let xs = rx.as_slice().ok_or_else(not_contiguous)?;
        let ws = rw.as_slice().ok_or_else(not_contiguous)?;
        let offs = roff.as_slice().ok_or_else(not_contiguous)?;
        let bias = rb
            .as_ref()
            .map(|r| r.as_slice().ok_or_else(not_contiguous))
            .transpose()?;
        let masks = rm
            .as_ref()
            .map(|r| r.as_slice().ok_or_else(not_contiguous))
            .transpose()?;
        let mut wo = out.write::<T>()?;
        let ys = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        if ys.is_empty() {
            return Ok(());
        }

        // f32 / f64 compute in their own type; the 16-bit types in f32 scratch copies.
        let widened = std::mem::size_of::<T>() != std::mem::size_of::<T::Wide>();
        let mut guard = match io.scratch {
            Some(s) => Some(s.write_bytes(OP)?),
            None => None,
        };
        let mut rest: &mut [T::Wide] = match &mut guard {
            Some(guard) => scratch_as(OP, guard.bytes())?,
            None => &mut [],
        };
        let col = carve(OP, &mut rest, g.col_len())?;
        let (cg, mg, taps, out_len) = (g.in_per_group(), g.out_per_group(), g.taps(), g.out_len());
        let k = cg * taps;
        let (weights, mut group_out): (&[T::Wide], Option<&mut [T::Wide]>) = if widened {
            let wide_w = carve(OP, &mut rest, ws.len())?;
            for (d, s) in wide_w.iter_mut().zip(ws) {
                *d = s.widen();
            }
            (wide_w, Some(carve(OP, &mut rest, mg * out_len)?))
        } else {
            // Same size means the same type (f32 or f64): view the weights as it.
            let view = bytemuck::try_cast_slice(ws)
                .map_err(|e| OpError::kernel(OP, format!("weights: {e}")))?;
            (view, None)
        };
        let stride = |v: usize| {
            isize::try_from(v).map_err(|_| OpError::kernel(OP, "matrix stride overflows isize"))
        };
        let (k_stride, n_stride) = (stride(k)?, stride(out_len)?);
        let image_len = g.in_channels * g.in_h * g.in_w;
        let offset_len = g.offset_dims()[1..].iter().product::<usize>();
        let mask_len = g.mask_dims()[1..].iter().product::<usize>();
        for n in 0..g.batch {
            let image = Image {
                x: &xs[n * image_len..][..image_len],
                offset: &offs[n * offset_len..][..offset_len],
                mask: masks.map(|m| &m[n * mask_len..][..mask_len]),
            };
            for grp in 0..g.groups {
                let y = &mut ys[(n * g.out_channels + grp * mg) * out_len..][..mg * out_len];
                let wg = &weights[grp * mg * k..][..mg * k];
                let bias_of =
                    |oc: usize| bias.map_or(T::Wide::lit(0.0), |b| b[grp * mg + oc].widen());
                if k == 0 {
                    for (oc, plane) in y.chunks_mut(out_len).enumerate() {
                        plane.fill(T::narrow(bias_of(oc)));
                    }
                    continue;
                }
                deformable_im2col(&g, &image, grp, col, io.threads);
                // The result starts as the bias and the product is added on top.
                let target: &mut [T::Wide] = match group_out.as_deref_mut() {
                    Some(buf) => buf,
                    None => bytemuck::try_cast_slice_mut(y)
                        .map_err(|e| OpError::kernel(OP, format!("output: {e}")))?,
                };
                for (oc, plane) in target.chunks_mut(out_len).enumerate() {
                    plane.fill(bias_of(oc));
                }
                gemm(
                    mg,
                    out_len,
                    k,
                    wg,
                    (k_stride, 1),
                    col,
                    (n_stride, 1),
                    target,
                    (n_stride, 1),
                    T::Wide::lit(1.0),
                    T::Wide::lit(1.0),
                    io.threads,
                )?;
                if let Some(buf) = group_out.as_deref() {
                    for (d, &s) in y.iter_mut().zip(buf.iter()) {
                        *d = T::narrow(s);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::{assert_close, run_checked};
    use crate::{Attr, Attributes};
    use strata_core::{f16, Tensor};

    struct Case<'a> {
        x: (&'a [usize], Vec<f32>),
        w: (&'a [usize], Vec<f32>),
        offset: (&'a [usize], Vec<f32>),
        bias: Option<Vec<f32>>,
        mask: Option<(&'a [usize], Vec<f32>)>,
    }

    fn run(attrs: &[(&str, Attr)], case: &Case) -> Result<(Vec<usize>, Vec<f32>), OpError> {
        let t = |(dims, v): (&[usize], &Vec<f32>)| Tensor::from_slice(v, dims);
        let mut inputs = vec![
            t((case.x.0, &case.x.1))?,
            t((case.w.0, &case.w.1))?,
            t((case.offset.0, &case.offset.1))?,
        ];
        if case.bias.is_some() || case.mask.is_some() {
            inputs.push(match &case.bias {
                Some(b) => Tensor::from_slice(b, &[b.len()])?,
                None => Tensor::undefined(),
            });
        }
        if let Some((dims, m)) = &case.mask {
            inputs.push(t((dims, m))?);
        }
        let out = run_checked("DeformConv", 22, attrs, &inputs, false)?;
        Ok((out.dims().to_vec(), out.to_vec::<f32>()?))
    }

    /// Zero-padded bilinear read, written out corner by corner.
    fn bilinear(plane: &[f32], h: usize, w: usize, y: f64, x: f64) -> f64 {
        let (y0, x0) = (y.floor(), x.floor());
        let mut v = 0.0;
        for (yy, wy) in [(y0, 1.0 - (y - y0)), (y0 + 1.0, y - y0)] {
            for (xx, wx) in [(x0, 1.0 - (x - x0)), (x0 + 1.0, x - x0)] {
                if yy >= 0.0 && xx >= 0.0 && (yy as usize) < h && (xx as usize) < w {
                    v += wy * wx * plane[yy as usize * w + xx as usize] as f64;
                }
            }
        }
        v
    }

    /// The definition, one output element at a time, in f64.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        case: &Case,
        group: usize,
        offset_group: usize,
        stride: [usize; 2],
        dilation: [usize; 2],
        pads: [usize; 2],
        out_hw: [usize; 2],
    ) -> Vec<f32> {
        let &[n, c, h, w] = case.x.0 else { panic!() };
        let &[m, cg, kh, kw] = case.w.0 else { panic!() };
        let (mg, cog, taps) = (m / group, c / offset_group, kh * kw);
        let [oh_n, ow_n] = out_hw;
        let mut out = Vec::new();
        for b in 0..n {
            for oc in 0..m {
                for oh in 0..oh_n {
                    for ow in 0..ow_n {
                        let mut acc = case.bias.as_ref().map_or(0.0, |bias| bias[oc] as f64);
                        for cl in 0..cg {
                            let ch = oc / mg * cg + cl;
                            let og = ch / cog;
                            for i in 0..kh {
                                for j in 0..kw {
                                    let tap = i * kw + j;
                                    let at = |chan: usize, total: usize| {
                                        ((b * total + chan) * oh_n + oh) * ow_n + ow
                                    };
                                    let total = offset_group * taps * 2;
                                    let dy = case.offset.1[at((og * taps + tap) * 2, total)];
                                    let dx = case.offset.1[at((og * taps + tap) * 2 + 1, total)];
                                    let y = (oh * stride[0] + i * dilation[0]) as f64
                                        - pads[0] as f64
                                        + dy as f64;
                                    let x = (ow * stride[1] + j * dilation[1]) as f64
                                        - pads[1] as f64
                                        + dx as f64;
                                    let plane = &case.x.1[(b * c + ch) * h * w..][..h * w];
                                    let mask = case.mask.as_ref().map_or(1.0, |(_, mv)| {
                                        mv[at(og * taps + tap, offset_group * taps)] as f64
                                    });
                                    let wv = case.w.1[((oc * cg + cl) * kh + i) * kw + j] as f64;
                                    acc += wv * mask * bilinear(plane, h, w, y, x);
                                }
                            }
                        }
                        out.push(acc as f32);
                    }
                }
            }
        }
        out
    }

    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
            .collect()
    }

    #[test]
    fn half_pixel_offsets_interpolate_and_fade_out_at_the_border() {
        // x[i][j] = 3i + j, 1x1 kernel of weight 1, every tap moved down by half a pixel:
        // rows 0 and 1 read 3i + 1.5 + j; row 2 reads half of row 2 and half of the zero row
        // below the image.
        let x: Vec<f32> = (0..9).map(|v| v as f32).collect();
        let mut offset = vec![0.5f32; 9];
        offset.extend([0.0; 9]);
        let case = Case {
            x: (&[1, 1, 3, 3], x),
            w: (&[1, 1, 1, 1], vec![1.0]),
            offset: (&[1, 2, 3, 3], offset),
            bias: None,
            mask: None,
        };
        let (dims, out) = run(&[], &case).unwrap();
        assert_eq!(dims, [1, 1, 3, 3]);
        assert_close(
            &out,
            &[1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 3.0, 3.5, 4.0],
            "output",
        );
        // A mask of 0.5 and a bias of 1 on the same case.
        let case = Case {
            bias: Some(vec![1.0]),
            mask: Some((&[1, 1, 3, 3], vec![0.5; 9])),
            ..case
        };
        let (_, out) = run(&[], &case).unwrap();
        assert_close(
            &out,
            &[1.75, 2.25, 2.75, 3.25, 3.75, 4.25, 2.5, 2.75, 3.0],
            "output",
        );
    }

    #[test]
    fn zero_offsets_give_a_plain_convolution_and_general_offsets_match_the_definition() {
        // (x dims, w dims, group, offset_group, strides, dilations, pads [t, l, b, r])
        type Config<'a> = (
            &'a [usize],
            &'a [usize],
            usize,
            usize,
            [usize; 2],
            [usize; 2],
            [usize; 4],
        );
        let configs: &[Config] = &[
            (&[1, 1, 3, 3], &[1, 1, 2, 2], 1, 1, [1, 1], [1, 1], [0; 4]),
            (
                &[2, 4, 5, 4],
                &[6, 2, 3, 2],
                2,
                2,
                [2, 1],
                [1, 2],
                [1, 0, 2, 1],
            ),
            (
                &[1, 6, 4, 5],
                &[3, 2, 2, 3],
                3,
                6,
                [1, 2],
                [2, 1],
                [1, 1, 1, 1],
            ),
            (
                &[1, 4, 6, 6],
                &[2, 4, 3, 3],
                1,
                2,
                [2, 2],
                [1, 1],
                [1, 1, 1, 1],
            ),
        ];
        for &(xd, wd, group, og, stride, dilation, pads) in configs {
            let taps = wd[2] * wd[3];
            let out_hw = [0, 1].map(|a| {
                (xd[2 + a] + pads[a] + pads[2 + a] - (wd[2 + a] - 1) * dilation[a] - 1) / stride[a]
                    + 1
            });
            let off_dims = [xd[0], og * taps * 2, out_hw[0], out_hw[1]];
            let mask_dims = [xd[0], og * taps, out_hw[0], out_hw[1]];
            let attrs = [
                ("group", Attr::Int(group as i64)),
                ("offset_group", Attr::Int(og as i64)),
                ("strides", Attr::Ints(stride.map(|v| v as i64).to_vec())),
                ("dilations", Attr::Ints(dilation.map(|v| v as i64).to_vec())),
                ("pads", Attr::Ints(pads.map(|v| v as i64).to_vec())),
                ("kernel_shape", Attr::Ints(vec![wd[2] as i64, wd[3] as i64])),
            ];
            let numel = |d: &[usize]| d.iter().product::<usize>();
            for offsets_scale in [0.0, 0.37] {
                let case = Case {
                    x: (xd, ramp(numel(xd), 0.25)),
                    w: (wd, ramp(numel(wd), 0.5)),
                    // Offsets span about ±2 pixels: samples land inside, across and outside.
                    offset: (&off_dims, ramp(numel(&off_dims), offsets_scale)),
                    bias: Some(ramp(wd[0], 1.0)),
                    mask: Some((&mask_dims, ramp(numel(&mask_dims), 0.2))),
                };
                let (dims, out) = run(&attrs, &case).unwrap();
                assert_eq!(dims, [xd[0], wd[0], out_hw[0], out_hw[1]]);
                let expected = reference(
                    &case,
                    group,
                    og,
                    stride,
                    dilation,
                    [pads[0], pads[1]],
                    out_hw,
                );
                for (i, (a, e)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{xd:?} at {i}: {a} vs {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn half_precision_is_widened_and_rounded_once() {
        let x: Vec<f16> = (0..9).map(|v| f16::from_f32(v as f32)).collect();
        let w = [f16::from_f32(1.0)];
        let mut offset = vec![f16::from_f32(0.5); 9];
        offset.extend([f16::from_f32(0.0); 9]);
        let inputs = [
            Tensor::from_slice(&x, &[1, 1, 3, 3]).unwrap(),
            Tensor::from_slice(&w, &[1, 1, 1, 1]).unwrap(),
            Tensor::from_slice(&offset, &[1, 2, 3, 3]).unwrap(),
        ];
        let out = run_checked("DeformConv", 19, &[], &inputs, false).unwrap();
        let values: Vec<f32> = out
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(values, [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 3.0, 3.5, 4.0]);
    }

    #[test]
    fn a_symbolic_batch_is_carried_through() {
        let a = Attributes::new("DeformConv");
        let op = DeformConv::build(&OpContext {
            op_type: "DeformConv",
            domain: "",
            opset: 19,
            attrs: &a,
            num_inputs: 3,
            num_outputs: 1,
        })
        .unwrap();
        let n = Dim::Sym("N".into());
        let with_batch = |batch: &Dim, rest: &[usize]| {
            let mut dims = vec![batch.clone()];
            dims.extend(rest.iter().map(|&d| Dim::Known(d)));
            Fact::new(DType::F32, dims)
        };
        let w = Fact::known(DType::F32, &[4, 1, 2, 2]);
        // Batch symbolic everywhere, then known on X only.
        for x_batch in [n.clone(), Dim::Known(2)] {
            let x = with_batch(&x_batch, &[1, 3, 3]);
            let offset = with_batch(&n, &[8, 2, 2]);
            let out = op.infer(&[&x, &w, &offset]).unwrap().remove(0);
            let mut expected = vec![x_batch.clone()];
            expected.extend([4, 2, 2].map(Dim::Known));
            assert_eq!(out.dims, expected);
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let base = || Case {
            x: (&[1, 2, 3, 3], vec![0.0; 18]),
            w: (&[2, 2, 2, 2], vec![0.0; 16]),
            offset: (&[1, 8, 2, 2], vec![0.0; 32]),
            bias: None,
            mask: None,
        };
        assert!(run(&[], &base()).is_ok());
        let err = run(
            &[],
            &Case {
                offset: (&[1, 4, 2, 2], vec![0.0; 16]),
                ..base()
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("offset has dims [1, 4, 2, 2]"),
            "{err}"
        );
        let mask = Some((&[1, 8, 2, 2][..], vec![0.0; 32]));
        let err = run(&[], &Case { mask, ..base() }).unwrap_err();
        assert!(err.to_string().contains("mask has dims"), "{err}");
        let err = run(
            &[],
            &Case {
                bias: Some(vec![0.0; 3]),
                ..base()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("B has dims [3]"), "{err}");
        let err = run(&[("group", Attr::Int(2))], &base()).unwrap_err();
        assert!(err.to_string().contains("group 2"), "{err}");
        let err = run(&[("offset_group", Attr::Int(3))], &base()).unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        let err = run(&[("kernel_shape", Attr::Ints(vec![3, 3]))], &base()).unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        let err = run(&[("pads", Attr::Ints(vec![1, 1]))], &base()).unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        // A dilated kernel larger than the input.
        let err = run(&[("dilations", Attr::Ints(vec![3, 3]))], &base()).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
        // 1-d input.
        let case = Case {
            x: (&[1, 2, 9], vec![0.0; 18]),
            ..base()
        };
        let err = run(&[], &case).unwrap_err();
        assert!(err.to_string().contains("4-d"), "{err}");
        // Integer data.
        let inputs = [
            Tensor::from_slice(&[0i32; 9], &[1, 1, 3, 3]).unwrap(),
            Tensor::from_slice(&[0i32; 1], &[1, 1, 1, 1]).unwrap(),
            Tensor::from_slice(&[0i32; 18], &[1, 2, 3, 3]).unwrap(),
        ];
        let err = run_checked("DeformConv", 22, &[], &inputs, false).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 0, .. }), "{err}");
    }
}
