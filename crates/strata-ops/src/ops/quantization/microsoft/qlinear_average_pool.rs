//! com.microsoft QLinearAveragePool: AveragePool on a quantized tensor (1 to 3 spatial axes,
//! NCHW or NHWC with `channels_last`), with `kernel_shape`, `strides`, `pads`, `auto_pad`,
//! `ceil_mode` and `count_include_pad`, computed exactly as onnxruntime's CPU kernel does:
//! every input byte dequantized to `x_scale · (x − x_zero)` in f32, the window's in-bounds values
//! summed in f32 in row-major order, divided by their count (the whole kernel size with
//! `count_include_pad`, even where a ceil-mode window runs past the padding), and quantized as
//! `clamp(round_half_even(avg / y_scale + y_zero))`. A window covering the whole unpadded input is
//! onnxruntime's global-average fallback, which works on the integer sum instead. Output planes
//! (NCHW) or output positions (NHWC) are spread over the intra-op pool.

use strata_core::{DType, Device};

use super::qparams::{eight_bit, with_bytes, with_bytes_mut, QParam};
use crate::kernels::igemm::round_half_even;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearAveragePool";

/// Output elements below which the pool is not used.
const PARALLEL_MIN_OUTPUTS: usize = 4096;

#[derive(Debug, Clone)]
pub struct QLinearAveragePool {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    /// Explicit pads (begin..., end...), empty for zeros.
    pads: Vec<usize>,
    auto_pad: String,
    ceil_mode: bool,
    count_include_pad: bool,
    channels_last: bool,
}

impl QLinearAveragePool {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let kernel = a
            .usizes("kernel_shape")?
            .ok_or_else(|| OpError::attribute(OP, "kernel_shape", "is required"))?;
        if kernel.is_empty() || kernel.len() > 3 || kernel.contains(&0) {
            return Err(OpError::attribute(
                OP,
                "kernel_shape",
                format!("{kernel:?}: 1 to 3 positive sizes"),
            ));
        }
        let r = kernel.len();
        let strides = a.usizes("strides")?.unwrap_or_else(|| vec![1; r]);
        if strides.len() != r || strides.contains(&0) {
            return Err(OpError::attribute(
                OP,
                "strides",
                format!("{strides:?}: {r} positive values"),
            ));
        }
        let pads = a.usizes("pads")?.unwrap_or_default();
        if !pads.is_empty() && pads.len() != 2 * r {
            return Err(OpError::attribute(
                OP,
                "pads",
                format!("{pads:?}: {} values", 2 * r),
            ));
        }
        let auto_pad = a.string_or("auto_pad", "NOTSET")?;
        if !matches!(
            auto_pad.as_str(),
            "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER"
        ) {
            return Err(OpError::attribute(OP, "auto_pad", auto_pad));
        }
        Ok(Box::new(QLinearAveragePool {
            kernel,
            strides,
            pads,
            auto_pad,
            ceil_mode: a.int_or("ceil_mode", 0)? != 0,
            count_include_pad: a.int_or("count_include_pad", 0)? != 0,
            channels_last: a.int_or("channels_last", 0)? != 0,
        }))
    }

    /// The spatial axes of `dims` (in NCHW or NHWC order).
    fn spatial<'d>(&self, dims: &'d [usize]) -> &'d [usize] {
        if self.channels_last {
            &dims[1..dims.len() - 1]
        } else {
            &dims[2..]
        }
    }

    /// Per spatial axis: (output size, begin pad), as onnxruntime sizes them.
    fn axes(&self, spatial: &[usize]) -> OpResult<Vec<(usize, usize)>> {
        if spatial.len() != self.kernel.len() {
            return Err(OpError::shape(
                OP,
                format!(
                    "{} spatial axes, kernel_shape has {}",
                    spatial.len(),
                    self.kernel.len()
                ),
            ));
        }
        (0..spatial.len())
            .map(|i| self.axis(i, spatial[i]))
            .collect()
    }

    /// (output size, begin pad) of spatial axis `i` of size `input`.
    fn axis(&self, i: usize, input: usize) -> OpResult<(usize, usize)> {
        let r = self.kernel.len();
        let (k, s) = (self.kernel[i], self.strides[i]);
        let (begin, end) = match self.auto_pad.as_str() {
            "VALID" => (0, 0),
            "SAME_UPPER" | "SAME_LOWER" => {
                let target = input.div_ceil(s);
                let needed = ((target.max(1) - 1) * s + k).saturating_sub(input);
                let head = if self.auto_pad == "SAME_UPPER" {
                    needed / 2
                } else {
                    needed.div_ceil(2)
                };
                (head, needed - head)
            }
            _ if self.pads.is_empty() => (0, 0),
            _ => (self.pads[i], self.pads[r + i]),
        };
        let span = (input + begin + end).checked_sub(k).ok_or_else(|| {
            OpError::shape(
                OP,
                format!("kernel {k} is larger than the padded input {input} on axis {i}"),
            )
        })?;
        let mut out = if self.ceil_mode {
            span.div_ceil(s) + 1
        } else {
            span / s + 1
        };
        // A last ceil-mode window that would start in the end padding is dropped.
        if self.ceil_mode && (out - 1) * s >= input + begin {
            out -= 1;
        }
        Ok((out, begin))
    }
}

impl Operator for QLinearAveragePool {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = eight_bit(OP, inputs, 0)?;
        for index in [1, 3] {
            let f = required(OP, inputs, index)?;
            if f.dtype != DType::F32 {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: "float32".into(),
                    actual: f.dtype,
                });
            }
        }
        if x.rank() != self.kernel.len() + 2 {
            return Err(OpError::shape(
                OP,
                format!(
                    "input {:?} needs {} spatial axes for kernel_shape {:?}",
                    x.dims,
                    self.kernel.len(),
                    self.kernel
                ),
            ));
        }
        let mut dims = x.dims.clone();
        let first = if self.channels_last { 1 } else { 2 };
        for (i, d) in dims[first..first + self.kernel.len()]
            .iter_mut()
            .enumerate()
        {
            *d = match d.known() {
                Some(input) => Dim::Known(self.axis(i, input)?.0),
                None => Dim::Unknown,
            };
        }
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

/// One spatial axis of the window walk, padded to three axes with size-1 ones.
#[derive(Clone, Copy, Debug)]
struct Axis {
    input: usize,
    output: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
}

impl Axis {
    /// The in-bounds input range of output position `o`.
    #[inline]
    fn window(&self, o: usize) -> (usize, usize) {
        let start = (o * self.stride) as isize - self.pad as isize;
        let end = (start + self.kernel as isize).min(self.input as isize);
        (start.max(0) as usize, end.max(0) as usize)
    }
}

/// The whole walk: three axes (outermost first), the divisor rule and the parameters.
struct Walk {
    axes: [Axis; 3],
    kernel_size: usize,
    count_include_pad: bool,
    table: [f32; 256],
    y: QParam,
}

impl Walk {
    fn in_len(&self) -> usize {
        self.axes.iter().map(|a| a.input).product()
    }

    fn out_len(&self) -> usize {
        self.axes.iter().map(|a| a.output).product()
    }

    /// The byte of a finished window sum over `count` values.
    #[inline]
    fn finish(&self, sum: f32, count: usize) -> u8 {
        let divisor = if self.count_include_pad {
            self.kernel_size
        } else {
            count
        };
        let avg = sum / divisor as f32;
        let (lo, hi) = if self.y.signed {
            (-128.0, 127.0)
        } else {
            (0.0, 255.0)
        };
        let q = round_half_even(avg / self.y.scale + self.y.zero as f32).clamp(lo, hi);
        (q as i32) as u8
    }

    /// Output position `o` (flat over the three axes) as per-axis windows and their count.
    #[inline]
    fn windows(&self, o: usize) -> ([(usize, usize); 3], usize) {
        let [a0, a1, a2] = self.axes;
        let (o0, rest) = (o / (a1.output * a2.output), o % (a1.output * a2.output));
        let (o1, o2) = (rest / a2.output, rest % a2.output);
        let w = [a0.window(o0), a1.window(o1), a2.window(o2)];
        let count = w.iter().map(|&(s, e)| e.saturating_sub(s)).product();
        (w, count)
    }

    /// One NCHW plane: `src` is its input, `dst` its output.
    fn plane(&self, src: &[u8], dst: &mut [u8]) {
        let [_, a1, a2] = self.axes;
        for (o, d) in dst.iter_mut().enumerate() {
            let (w, count) = self.windows(o);
            let mut sum = 0f32;
            for i0 in w[0].0..w[0].1 {
                for i1 in w[1].0..w[1].1 {
                    let row = &src[(i0 * a1.input + i1) * a2.input..];
                    for &x in &row[w[2].0..w[2].1] {
                        sum += self.table[usize::from(x)];
                    }
                }
            }
            *d = self.finish(sum, count);
        }
    }

    /// One NHWC output position `o` of one image: `src` is the image, `dst` the position's
    /// channels. Channels go in blocks that stay in registers, each summed in window order.
    fn position(&self, src: &[u8], o: usize, dst: &mut [u8]) {
        const BLOCK: usize = 32;
        let [_, a1, a2] = self.axes;
        let channels = dst.len();
        let (w, count) = self.windows(o);
        for c0 in (0..channels).step_by(BLOCK) {
            let width = BLOCK.min(channels - c0);
            let mut acc = [0f32; BLOCK];
            for i0 in w[0].0..w[0].1 {
                for i1 in w[1].0..w[1].1 {
                    for i2 in w[2].0..w[2].1 {
                        let at = ((i0 * a1.input + i1) * a2.input + i2) * channels + c0;
                        for (a, &x) in acc[..width].iter_mut().zip(&src[at..at + width]) {
                            *a += self.table[usize::from(x)];
                        }
                    }
                }
            }
            for (d, &a) in dst[c0..c0 + width].iter_mut().zip(&acc[..width]) {
                *d = self.finish(a, count);
            }
        }
    }
}

impl Kernel for QLinearAveragePool {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, out) = (io.input(0), io.output(0));
        let x = QParam::read(OP, "x", io.input(1), io.input(2), x_t.dtype())?;
        let y = QParam::read(OP, "y", io.input(3), io.input(4), out.dtype())?;
        let dims = x_t.dims();
        if dims.len() != self.kernel.len() + 2 {
            return Err(OpError::shape(
                OP,
                format!("input {dims:?} has the wrong rank"),
            ));
        }
        let spatial = self.spatial(dims);
        let sizes = self.axes(spatial)?;
        let (batch, channels) = if self.channels_last {
            (dims[0], dims[dims.len() - 1])
        } else {
            (dims[0], dims[1])
        };
        let mut axes = [Axis {
            input: 1,
            output: 1,
            kernel: 1,
            stride: 1,
            pad: 0,
        }; 3];
        let offset = 3 - spatial.len();
        for (i, &(output, pad)) in sizes.iter().enumerate() {
            axes[offset + i] = Axis {
                input: spatial[i],
                output,
                kernel: self.kernel[i],
                stride: self.strides[i],
                pad,
            };
        }
        let mut table = [0f32; 256];
        for (raw, v) in table.iter_mut().enumerate() {
            *v = x.dequantize(raw as u8);
        }
        let walk = Walk {
            axes,
            kernel_size: self.kernel.iter().product(),
            count_include_pad: self.count_include_pad,
            table,
            y,
        };
        let (in_len, out_len) = (walk.in_len(), walk.out_len());
        if out.numel() != batch * channels * out_len || x_t.numel() != batch * channels * in_len {
            return Err(OpError::kernel(OP, "output does not match the pooled dims"));
        }
        if out_len == 0 || batch * channels == 0 {
            return Ok(());
        }
        // onnxruntime's fallback: one unpadded window over the whole input.
        let global =
            spatial == self.kernel.as_slice() && sizes.iter().all(|&(o, p)| o == 1 && p == 0);
        let threads = io.threads.max(1);
        with_bytes(OP, x_t, |src| {
            with_bytes_mut(OP, out, |dst| {
                if global {
                    global_average(src, dst, &x, &y, channels, in_len, self.channels_last);
                    return Ok(());
                }
                let parallel = dst.len() >= PARALLEL_MIN_OUTPUTS && threads > 1;
                if self.channels_last {
                    let positions = batch * out_len;
                    let per_task = if parallel {
                        positions.div_ceil(threads * 4)
                    } else {
                        positions
                    };
                    crate::parallel::for_each_chunk_mut(dst, channels, per_task, |p, d| {
                        let (n, o) = (p / out_len, p % out_len);
                        walk.position(&src[n * in_len * channels..][..in_len * channels], o, d);
                    });
                } else {
                    let planes = batch * channels;
                    let per_task = if parallel {
                        planes.div_ceil(threads * 4)
                    } else {
                        planes
                    };
                    crate::parallel::for_each_chunk_mut(dst, out_len, per_task, |p, d| {
                        walk.plane(&src[p * in_len..][..in_len], d);
                    });
                }
                Ok(())
            })
        })
    }
}

/// onnxruntime's global average: `(Σx − x_zero·S) · x_scale / (y_scale · S)` on the exact sum.
fn global_average(
    src: &[u8],
    dst: &mut [u8],
    x: &QParam,
    y: &QParam,
    channels: usize,
    size: usize,
    channels_last: bool,
) {
    let scale = x.scale / (y.scale * size as f32);
    let value = |raw: u8| {
        if x.signed {
            i32::from(raw as i8)
        } else {
            i32::from(raw)
        }
    };
    let finish = |sum: i32| y.quantize_scaled((sum - x.zero * size as i32) as f32 * scale);
    if channels_last {
        for (n, out) in dst.chunks_exact_mut(channels).enumerate() {
            let image = &src[n * size * channels..][..size * channels];
            for (c, d) in out.iter_mut().enumerate() {
                let sum: i32 = (0..size).map(|p| value(image[p * channels + c])).sum();
                *d = finish(sum);
            }
        }
    } else {
        for (d, plane) in dst.iter_mut().zip(src.chunks_exact(size)) {
            *d = finish(plane.iter().map(|&v| value(v)).sum());
        }
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::test_util::OpRun;
    use crate::Attr;

    fn t<T: strata_core::Element>(v: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    fn pool(x: Tensor, attrs: &[(&str, Attr)]) -> Vec<u8> {
        let inputs = [
            x,
            t(&[0.1f32], &[]),
            t(&[3u8], &[]),
            t(&[0.1f32], &[]),
            t(&[3u8], &[]),
        ];
        let y = OpRun::new("QLinearAveragePool", 1)
            .domain("com.microsoft")
            .attrs(attrs)
            .checked_writes()
            .run(&inputs)
            .unwrap();
        y[0].to_vec::<u8>().unwrap()
    }

    // Expected values below are onnxruntime 1.32's for the same inputs.
    #[test]
    fn ceil_mode_and_count_include_pad_as_onnxruntime() {
        let x = || t(&[13u8, 23, 33, 43], &[1, 1, 1, 4]);
        let k = |v: Vec<i64>| ("kernel_shape", Attr::Ints(v));
        // The last ceil-mode window would start in the end padding: dropped.
        let a = [
            k(vec![1, 2]),
            ("strides", Attr::Ints(vec![1, 2])),
            ("pads", Attr::Ints(vec![0, 0, 0, 1])),
            ("ceil_mode", Attr::Int(1)),
        ];
        assert_eq!(pool(x(), &a), [18, 38]);
        let a = [
            k(vec![1, 3]),
            ("strides", Attr::Ints(vec![1, 2])),
            ("ceil_mode", Attr::Int(1)),
        ];
        assert_eq!(pool(x(), &a), [23, 38]);
        // count_include_pad divides by the whole kernel, even past the padding.
        let mut b = a.to_vec();
        b.push(("count_include_pad", Attr::Int(1)));
        assert_eq!(pool(x(), &b), [23, 26]);
        let a = [
            k(vec![1, 3]),
            ("auto_pad", Attr::String("SAME_UPPER".into())),
            ("count_include_pad", Attr::Int(1)),
        ];
        assert_eq!(pool(x(), &a), [13, 23, 33, 26]);
    }

    #[test]
    fn rounds_after_adding_the_zero_point() {
        // avg 2.5 / 1.0 + 3 = 5.5 -> 6 (half to even after the zero point, as onnxruntime).
        let inputs = [
            t(&[2u8, 3], &[1, 1, 2]),
            t(&[1.0f32], &[]),
            t(&[0u8], &[]),
            t(&[1.0f32], &[]),
            t(&[3u8], &[]),
        ];
        let y = OpRun::new("QLinearAveragePool", 1)
            .domain("com.microsoft")
            .attrs(&[
                ("kernel_shape", Attr::Ints(vec![2])),
                ("pads", Attr::Ints(vec![0, 1])),
            ])
            .run(&inputs)
            .unwrap();
        assert_eq!(y[0].dims(), [1, 1, 2]);
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [6, 6]);
    }

    #[test]
    fn channels_last_equals_channels_first() {
        let (c, h, w) = (5, 6, 7);
        let nchw: Vec<i8> = (0..c * h * w)
            .map(|i| ((i * 37) % 256) as u8 as i8)
            .collect();
        let mut nhwc = vec![0i8; nchw.len()];
        for ci in 0..c {
            for p in 0..h * w {
                nhwc[p * c + ci] = nchw[ci * h * w + p];
            }
        }
        let attrs = |last: i64| {
            vec![
                ("kernel_shape", Attr::Ints(vec![3, 2])),
                ("strides", Attr::Ints(vec![2, 1])),
                ("pads", Attr::Ints(vec![1, 0, 1, 1])),
                ("channels_last", Attr::Int(last)),
            ]
        };
        let run = |x: Tensor, last: i64| {
            let inputs = [
                x,
                t(&[0.05f32], &[]),
                t(&[-4i8], &[]),
                t(&[0.03f32], &[]),
                t(&[2i8], &[]),
            ];
            OpRun::new("QLinearAveragePool", 1)
                .domain("com.microsoft")
                .attrs(&attrs(last))
                .checked_writes()
                .run(&inputs)
                .unwrap()
                .remove(0)
        };
        let first = run(t(&nchw, &[1, c, h, w]), 0);
        let last = run(t(&nhwc, &[1, h, w, c]), 1);
        let (oh, ow) = (first.dims()[2], first.dims()[3]);
        assert_eq!(last.dims(), [1, oh, ow, c]);
        let (f, l) = (first.to_vec::<i8>().unwrap(), last.to_vec::<i8>().unwrap());
        for ci in 0..c {
            for p in 0..oh * ow {
                assert_eq!(f[ci * oh * ow + p], l[p * c + ci]);
            }
        }
    }
}
