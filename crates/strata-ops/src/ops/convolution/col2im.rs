//! Col2Im (opset 18): the inverse of im2col. Input (N, C * prod(block_shape), L) holds, for
//! each of the L sliding blocks, the block's C x block values; they are summed back into an
//! image (N, C, *image_shape) under `strides`, `dilations` and `pads` (begin..., end...), any
//! number of spatial axes. Output dims come from the values of `image_shape`.

use smallvec::SmallVec;
use strata_core::{Device, Tensor};

use crate::support::axes::{check_int_input, known_ints, read_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_supported;
use crate::support::numeric::{Real, WideFloat};
use crate::support::strided::advance_index;
use crate::{dispatch_float, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Col2Im";

#[derive(Debug, Clone)]
pub struct Col2Im {
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
}

/// Everything the scatter needs, per spatial axis.
#[derive(Debug)]
struct Geometry {
    channels: usize,
    image: SmallVec<[usize; 4]>,
    block: SmallVec<[usize; 4]>,
    /// Sliding-block positions along each axis.
    blocks: SmallVec<[usize; 4]>,
    stride: SmallVec<[usize; 4]>,
    dilation: SmallVec<[usize; 4]>,
    pad_begin: SmallVec<[usize; 4]>,
}

fn positive(what: &str, v: &[i64]) -> OpResult<SmallVec<[usize; 4]>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d > 0)
                .ok_or_else(|| OpError::shape(OP, format!("{what} {v:?} must be positive")))
        })
        .collect()
}

impl Col2Im {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let op = Col2Im {
            dilations: a.usizes("dilations")?,
            pads: a.usizes("pads")?,
            strides: a.usizes("strides")?,
        };
        for (name, v) in [("dilations", &op.dilations), ("strides", &op.strides)] {
            if v.as_ref().is_some_and(|v| v.contains(&0)) {
                return Err(OpError::attribute(OP, name, "values must be positive"));
            }
        }
        Ok(Box::new(op))
    }

    fn geometry(&self, x: &[usize], image: &[i64], block: &[i64]) -> OpResult<Geometry> {
        let image = positive("image_shape", image)?;
        let block = positive("block_shape", block)?;
        let r = image.len();
        if block.len() != r || x.len() != 3 {
            return Err(OpError::shape(
                OP,
                format!(
                    "input {x:?} must be rank 3 and image_shape {image:?} and block_shape \
                     {block:?} equally long"
                ),
            ));
        }
        let attr = |name: &str, v: &Option<Vec<usize>>, len: usize, default: usize| match v {
            Some(v) if v.len() != len => Err(OpError::attribute(
                OP,
                name,
                format!("needs {len} values, got {v:?}"),
            )),
            Some(v) => Ok(SmallVec::from_slice(v)),
            None => Ok(SmallVec::from_elem(default, len)),
        };
        let stride: SmallVec<[usize; 4]> = attr("strides", &self.strides, r, 1)?;
        let dilation: SmallVec<[usize; 4]> = attr("dilations", &self.dilations, r, 1)?;
        let pads: SmallVec<[usize; 8]> = match &self.pads {
            Some(p) if p.len() != 2 * r => {
                return Err(OpError::attribute(
                    OP,
                    "pads",
                    format!("needs {} values, got {p:?}", 2 * r),
                ))
            }
            Some(p) => SmallVec::from_slice(p),
            None => SmallVec::from_elem(0, 2 * r),
        };
        let block_size = block
            .iter()
            .try_fold(1usize, |acc, &b| acc.checked_mul(b))
            .ok_or_else(|| OpError::shape(OP, "block_shape is too large"))?;
        if !x[1].is_multiple_of(block_size) {
            return Err(OpError::shape(
                OP,
                format!(
                    "input dim 1 ({}) is not a multiple of the block size {block_size}",
                    x[1]
                ),
            ));
        }
        let mut blocks = SmallVec::new();
        for a in 0..r {
            let padded = image[a]
                .checked_add(pads[a])
                .and_then(|v| v.checked_add(pads[a + r]));
            let span = dilation[a]
                .checked_mul(block[a] - 1)
                .and_then(|v| v.checked_add(1));
            let n = match (padded, span) {
                (Some(p), Some(s)) if p >= s => (p - s) / stride[a] + 1,
                _ => {
                    return Err(OpError::shape(
                        OP,
                        format!("block {block:?} does not fit the padded image {image:?}"),
                    ))
                }
            };
            blocks.push(n);
        }
        let count = strata_core::shape::checked_numel(&blocks)?;
        if x[2] != count {
            return Err(OpError::shape(
                OP,
                format!(
                    "input has {} blocks, the geometry gives {blocks:?} = {count}",
                    x[2]
                ),
            ));
        }
        Ok(Geometry {
            channels: x[1] / block_size,
            image,
            block,
            blocks,
            stride,
            dilation,
            pad_begin: pads[..r].iter().copied().collect(),
        })
    }
}

impl Operator for Col2Im {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        required(OP, inputs, 1)?;
        required(OP, inputs, 2)?;
        check_int_input(OP, inputs, 1)?;
        check_int_input(OP, inputs, 2)?;
        if !x.dtype.is_float() || x.rank() != 3 {
            return Err(OpError::shape(
                OP,
                format!("input must be a rank-3 float tensor, got {x:?}"),
            ));
        }
        let values = (known_ints(OP, inputs, 1)?, known_ints(OP, inputs, 2)?);
        let dims = match (values, x.concrete()) {
            ((Some(image), Some(block)), Some(xd)) => {
                let g = self.geometry(&xd, &image, &block)?;
                let mut dims = vec![Dim::Known(xd[0]), Dim::Known(g.channels)];
                dims.extend(g.image.iter().map(|&d| Dim::Known(d)));
                dims
            }
            _ => {
                let r = crate::support::axes::dims_input_len(OP, inputs, 1)?
                    .ok_or_else(|| OpError::shape(OP, "image_shape has unknown length"))?;
                let mut dims = vec![x.dims[0].clone()];
                dims.extend(std::iter::repeat_n(Dim::Unknown, r + 1));
                dims
            }
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_supported(OP, dtype, device, dtype.is_float())?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for Col2Im {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let image = read_ints(OP, io.input(1))?;
        let block = read_ints(OP, io.input(2))?;
        let g = self.geometry(x.dims(), &image, &block)?;
        let fits = out.dtype() == x.dtype()
            && out.rank() == g.image.len() + 2
            && out.dims()[0] == x.dims()[0]
            && out.dims()[1] == g.channels
            && out.dims()[2..] == g.image[..];
        if !fits {
            return Err(OpError::kernel(
                OP,
                format!("output {:?} does not match the image geometry", out.dims()),
            ));
        }
        dispatch_float!(x.dtype(), T => scatter::<T>(&g, x, out),
            _ => Err(OpError::kernel(OP, format!("no kernel for dtype {}", x.dtype()))))
    }
}

/// Adds every block element into its image pixel (blocks outside the padded image skip).
fn scatter<T: Real>(g: &Geometry, x: &Tensor, out: &Tensor) -> OpResult<()> {
    let r = g.image.len();
    let xr = x.read::<T>()?;
    let src = xr.storage_data();
    let (base, xs) = (x.storage_offset() as isize, x.strides());
    let mut ow = out.write::<T>()?;
    let dst = ow
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
    dst.fill(T::narrow(<T::Wide as WideFloat>::lit(0.0)));
    let pixels: usize = g.image.iter().product();
    let block_size: usize = g.block.iter().product();
    let positions: usize = g.blocks.iter().product();
    let batch = x.dims()[0];
    let mut offset: SmallVec<[usize; 4]> = SmallVec::from_elem(0, r);
    let mut pos: SmallVec<[usize; 4]> = SmallVec::from_elem(0, r);
    for n in 0..batch {
        for c in 0..g.channels {
            let plane = &mut dst[(n * g.channels + c) * pixels..][..pixels];
            offset.fill(0);
            for k in 0..block_size {
                let row = (c * block_size + k) as isize;
                pos.fill(0);
                for l in 0..positions {
                    // Image coordinate of this block element, skipped inside the padding.
                    let mut at = 0usize;
                    let mut inside = true;
                    for a in 0..r {
                        let i = pos[a] * g.stride[a] + offset[a] * g.dilation[a];
                        match i.checked_sub(g.pad_begin[a]) {
                            Some(i) if i < g.image[a] => at = at * g.image[a] + i,
                            _ => inside = false,
                        }
                    }
                    if inside {
                        let s = base + n as isize * xs[0] + row * xs[1] + l as isize * xs[2];
                        let v = src[s as usize];
                        plane[at] = plane[at].add(v);
                    }
                    advance_index(&mut pos, &g.blocks);
                }
                advance_index(&mut offset, &g.block);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    fn col2im(
        x: &Tensor,
        image: &[i64],
        block: &[i64],
        attrs: Attributes,
    ) -> crate::OpResult<Tensor> {
        let i = Tensor::from_slice(image, &[image.len()]).unwrap();
        let b = Tensor::from_slice(block, &[block.len()]).unwrap();
        run_constant("Col2Im", 18, attrs, &[Some(x.clone()), Some(i), Some(b)])
    }

    #[test]
    fn overlapping_blocks_sum() {
        // 1-channel 1x3 image, 1x2 blocks at columns 0 and 1: column 1 gets both.
        let x = Tensor::from_slice(&[1.0f32, 2., 10., 20.], &[1, 2, 2]).unwrap();
        let y = col2im(&x, &[1, 3], &[1, 2], Attributes::new("Col2Im")).unwrap();
        assert_eq!(y.dims(), &[1, 1, 1, 3]);
        // Block element 0 holds [1, 2] for blocks 0, 1; element 1 holds [10, 20].
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 12., 20.]);
        // Stride 2 with one column of padding each side: blocks at -1..1 and 1..3.
        let attrs = Attributes::new("Col2Im")
            .with("strides", Attr::Ints(vec![1, 2]))
            .with("pads", Attr::Ints(vec![0, 1, 0, 1]));
        let y = col2im(&x, &[1, 3], &[1, 2], attrs).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![10., 2., 20.]);
    }

    #[test]
    fn mismatched_block_count_is_an_error() {
        let x = Tensor::from_slice(&[0.0f32; 6], &[1, 2, 3]).unwrap();
        let err = col2im(&x, &[1, 3], &[1, 2], Attributes::new("Col2Im")).unwrap_err();
        assert!(err.to_string().contains("blocks"), "{err}");
        assert!(col2im(&x, &[1, 3], &[0, 2], Attributes::new("Col2Im")).is_err());
    }
}
