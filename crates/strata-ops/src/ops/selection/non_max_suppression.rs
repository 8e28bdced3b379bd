//! NonMaxSuppression (opsets 10/11): per batch entry and class, greedily keeps the highest
//! scoring boxes whose IoU with every kept box is at most `iou_threshold`, up to
//! `max_output_boxes_per_class` (0 when absent), skipping scores not above `score_threshold`
//! (when given). Boxes are corners `[y1, x1, y2, x2]` in either order (`center_point_box = 0`)
//! or `[x_center, y_center, width, height]` (`= 1`). Output: `[selected, 3]` int64 rows
//! `(batch, class, box)`; its length depends on the values, so it is computed from constant
//! inputs at plan time or on the runtime's dynamic path.

use strata_core::{DType, Device, Tensor};

use crate::support::axes::read_ints;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_supported;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "NonMaxSuppression";

#[derive(Debug, Clone, Copy)]
pub struct NonMaxSuppression {
    center_point_box: bool,
}

/// A box as its extent on each axis, `min <= max`.
#[derive(Debug, Clone, Copy)]
struct Extent {
    y: (f32, f32),
    x: (f32, f32),
}

impl Extent {
    fn new(b: &[f32], center_point: bool) -> Extent {
        let ordered = |a: f32, b: f32| if a <= b { (a, b) } else { (b, a) };
        if center_point {
            let (cx, cy, w, h) = (b[0], b[1], b[2] / 2.0, b[3] / 2.0);
            Extent {
                y: (cy - h, cy + h),
                x: (cx - w, cx + w),
            }
        } else {
            Extent {
                y: ordered(b[0], b[2]),
                x: ordered(b[1], b[3]),
            }
        }
    }

    fn area(&self) -> f32 {
        (self.y.1 - self.y.0) * (self.x.1 - self.x.0)
    }

    /// Whether the IoU of the two boxes exceeds `threshold` (degenerate boxes never suppress).
    fn suppresses(&self, other: &Extent, threshold: f32) -> bool {
        let x = (self.x.0.max(other.x.0), self.x.1.min(other.x.1));
        let y = (self.y.0.max(other.y.0), self.y.1.min(other.y.1));
        if x.1 <= x.0 || y.1 <= y.0 {
            return false;
        }
        let inter = (x.1 - x.0) * (y.1 - y.0);
        let (a, b) = (self.area(), other.area());
        let union = a + b - inter;
        if a <= 0.0 || b <= 0.0 || union <= 0.0 {
            return false;
        }
        inter / union > threshold
    }
}

/// The scalar parameters, read from the optional inputs.
struct Limits {
    max_per_class: usize,
    iou: f32,
    score: Option<f32>,
}

fn scalar_f32(t: &Tensor, what: &str) -> OpResult<f32> {
    if t.dtype() != DType::F32 || t.numel() != 1 {
        return Err(OpError::shape(
            OP,
            format!("{what} must be one float, got {}{:?}", t.dtype(), t.dims()),
        ));
    }
    Ok(t.to_vec::<f32>()?[0])
}

impl Limits {
    fn read(inputs: &[&Tensor]) -> OpResult<Limits> {
        let present = |i: usize| inputs.get(i).copied().filter(|t| t.is_defined());
        let max_per_class = match present(2) {
            None => 0,
            Some(t) => match read_ints(OP, t)?.as_slice() {
                &[] => 0,
                &[v] => usize::try_from(v.max(0)).unwrap_or(usize::MAX),
                other => {
                    return Err(OpError::shape(
                        OP,
                        format!("max_output_boxes_per_class must be one value, got {other:?}"),
                    ))
                }
            },
        };
        let iou = present(3)
            .map(|t| scalar_f32(t, "iou_threshold"))
            .transpose()?
            .unwrap_or(0.0);
        if !(0.0..=1.0).contains(&iou) {
            return Err(OpError::shape(
                OP,
                format!("iou_threshold {iou} is outside [0, 1]"),
            ));
        }
        let score = present(4)
            .map(|t| scalar_f32(t, "score_threshold"))
            .transpose()?;
        Ok(Limits {
            max_per_class,
            iou,
            score,
        })
    }
}

impl NonMaxSuppression {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let center_point_box = match ctx.attrs.int_or("center_point_box", 0)? {
            0 => false,
            1 => true,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "center_point_box",
                    format!("must be 0 or 1, got {other}"),
                ))
            }
        };
        Ok(Box::new(NonMaxSuppression { center_point_box }))
    }

    /// The selected `(batch, class, box)` triples, flattened.
    fn select(&self, inputs: &[&Tensor]) -> OpResult<Vec<i64>> {
        let input = |index: usize| {
            inputs
                .get(index)
                .copied()
                .filter(|t| t.is_defined())
                .ok_or(OpError::MissingInput {
                    op: OP.into(),
                    index,
                })
        };
        let (boxes, scores) = (input(0)?, input(1)?);
        let (bd, sd) = (boxes.dims(), scores.dims());
        if boxes.dtype() != DType::F32 || scores.dtype() != DType::F32 {
            return Err(OpError::shape(OP, "boxes and scores must be float tensors"));
        }
        let (batches, classes, count) = match (bd, sd) {
            (&[b, n, 4], &[sb, c, sn]) if b == sb && n == sn => (b, c, n),
            _ => {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "boxes {bd:?} must be [batch, n, 4] and scores {sd:?} [batch, classes, n]"
                    ),
                ))
            }
        };
        let limits = Limits::read(inputs)?;
        let boxes = boxes.to_vec::<f32>()?;
        let scores = scores.to_vec::<f32>()?;
        let mut selected = Vec::new();
        let mut order: Vec<usize> = Vec::with_capacity(count);
        let mut kept: Vec<Extent> = Vec::new();
        // Cancellation and deadlines, once per (batch, class).
        let stop = crate::run_control::stop_token();
        for b in 0..batches {
            let extents: Vec<Extent> = boxes[b * count * 4..(b + 1) * count * 4]
                .chunks_exact(4)
                .map(|c| Extent::new(c, self.center_point_box))
                .collect();
            for c in 0..classes {
                stop.poll(b * classes + c, OP)?;
                let s = &scores[(b * classes + c) * count..(b * classes + c + 1) * count];
                order.clear();
                order.extend((0..count).filter(|&i| limits.score.is_none_or(|t| s[i] > t)));
                // Highest score first; the stable sort keeps equal scores in box order.
                order.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
                kept.clear();
                for &i in &order {
                    if kept.len() >= limits.max_per_class {
                        break;
                    }
                    if kept.iter().all(|k| !extents[i].suppresses(k, limits.iou)) {
                        kept.push(extents[i]);
                        selected.extend([b as i64, c as i64, i as i64]);
                    }
                }
            }
        }
        Ok(selected)
    }
}

impl Operator for NonMaxSuppression {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let boxes = required(OP, inputs, 0)?;
        let scores = required(OP, inputs, 1)?;
        if boxes.rank() != 3 || scores.rank() != 3 {
            return Err(OpError::shape(
                OP,
                format!(
                    "boxes and scores must have rank 3, got {:?} and {:?}",
                    boxes.dims, scores.dims
                ),
            ));
        }
        let all_known =
            (0..inputs.len()).all(|i| optional(inputs, i).is_none_or(|f| f.value.is_some()));
        if all_known {
            let undefined = Tensor::undefined();
            let tensors: Vec<&Tensor> = (0..inputs.len())
                .map(|i| {
                    optional(inputs, i)
                        .and_then(|f| f.value.as_ref())
                        .unwrap_or(&undefined)
                })
                .collect();
            let selected = self.select(&tensors)?;
            let rows = selected.len() / 3;
            return Ok(vec![Fact::constant(Tensor::from_slice(
                &selected,
                &[rows, 3],
            )?)]);
        }
        Ok(vec![Fact::new(
            DType::I64,
            vec![Dim::Unknown, Dim::Known(3)],
        )])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_supported(OP, dtype, device, dtype == DType::F32)?;
        Ok(Box::new(*self))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for NonMaxSuppression {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let selected = self.select(io.inputs)?;
        let out = io.output(0);
        if out.dims() != [selected.len() / 3, 3] {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output has dims {:?}, the selection has {} rows",
                    out.dims(),
                    selected.len() / 3
                ),
            ));
        }
        let mut w = out.write::<i64>()?;
        w.as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?
            .copy_from_slice(&selected);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(boxes: &[f32], scores: &[f32], n: usize, max: i64, iou: f32) -> OpResult<Vec<i64>> {
        let boxes = Tensor::from_slice(boxes, &[1, n, 4])?;
        let scores = Tensor::from_slice(scores, &[1, scores.len() / n, n])?;
        let max = Tensor::from_slice(&[max], &[1])?;
        let iou = Tensor::from_slice(&[iou], &[1])?;
        let facts: Vec<Fact> = [&boxes, &scores, &max, &iou]
            .iter()
            .map(|t| Fact::constant((*t).clone()))
            .collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let op = NonMaxSuppression {
            center_point_box: false,
        };
        let out = op.infer(&refs)?;
        Ok(out[0].value.as_ref().unwrap().to_vec::<i64>()?)
    }

    #[test]
    fn overlapping_boxes_are_suppressed_in_score_order() {
        // Box 1 lies inside box 0: IoU = 0.81 / 1.0; box 2 is disjoint.
        let boxes = [0.0, 0.0, 1.0, 1.0, 0.1, 0.1, 1.0, 1.0, 5.0, 5.0, 6.0, 6.0];
        let scores = [0.7, 0.9, 0.8];
        let out = select(&boxes, &scores, 3, 3, 0.5).unwrap();
        assert_eq!(out, vec![0, 0, 1, 0, 0, 2]);
        // A looser threshold keeps all three; the limit caps them.
        let out = select(&boxes, &scores, 3, 3, 0.85).unwrap();
        assert_eq!(out, vec![0, 0, 1, 0, 0, 2, 0, 0, 0]);
        let out = select(&boxes, &scores, 3, 1, 0.85).unwrap();
        assert_eq!(out, vec![0, 0, 1]);
    }

    #[test]
    fn bad_shapes_and_thresholds_are_errors() {
        assert!(select(&[0.0; 8], &[0.5, 0.5, 0.5], 2, 1, 0.5).is_err());
        assert!(select(&[0.0; 4], &[0.5], 1, 1, 1.5).is_err());
    }
}
