//! The recurrent operator shared by RNN, GRU and LSTM (opsets 7–22): attribute validation
//! (`direction`, `hidden_size`, `activations` with `activation_alpha`/`activation_beta`, `clip`,
//! `layout` from opset 14, GRU's `linear_before_reset`, LSTM's `input_forget`) and shape
//! inference for the outputs `Y`, `Y_h` and (LSTM) `Y_c`. The node it builds is in `node.rs`, the
//! kernel in `sequence.rs`.

use strata_core::{DType, Device};

use crate::ops::recurrent::activation::parse_activations;
use crate::ops::recurrent::node::{Cell, Direction, Recurrent};
use crate::ops::recurrent::sequence::{scratch_bytes, Geometry, SequenceKernel};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_supported;
use crate::{Attr, Dim, Fact, Kernel, OpContext, OpError, OpResult, Operator};

impl Recurrent {
    pub fn build_rnn(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, Cell::Rnn)
    }

    pub fn build_gru(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let linear_before_reset = ctx.attrs.int_or("linear_before_reset", 0)? != 0;
        Self::build(
            ctx,
            Cell::Gru {
                linear_before_reset,
            },
        )
    }

    pub fn build_lstm(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let input_forget = ctx.attrs.int_or("input_forget", 0)? != 0;
        Self::build(ctx, Cell::Lstm { input_forget })
    }

    fn build(ctx: &OpContext, cell: Cell) -> OpResult<Box<dyn Operator>> {
        let op = cell.name();
        let direction = match ctx.attrs.string_or("direction", "forward")?.as_str() {
            "forward" => Direction::Forward,
            "reverse" => Direction::Reverse,
            "bidirectional" => Direction::Bidirectional,
            other => {
                return Err(OpError::attribute(
                    op,
                    "direction",
                    format!("expected forward, reverse or bidirectional, got {other:?}"),
                ))
            }
        };
        let hidden_size = match ctx.attrs.int("hidden_size")? {
            None => None,
            Some(h) => Some(usize::try_from(h).ok().filter(|&h| h > 0).ok_or_else(|| {
                OpError::attribute(op, "hidden_size", format!("must be positive, got {h}"))
            })?),
        };
        let per_dir = cell.default_activations().len();
        let names: Vec<String> = match ctx.attrs.get("activations") {
            None => cell
                .default_activations()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(Attr::Strings(names)) => names.clone(),
            Some(other) => {
                return Err(OpError::attribute(
                    op,
                    "activations",
                    format!("expected a list of strings, got {other:?}"),
                ))
            }
        };
        let alphas = ctx.attrs.floats("activation_alpha")?.unwrap_or_default();
        let betas = ctx.attrs.floats("activation_beta")?.unwrap_or_default();
        let mut activations = parse_activations(op, &names, &alphas, &betas)?;
        let dirs = direction.count();
        if activations.len() == per_dir && dirs == 2 {
            // One set given for a bidirectional node: both directions use it.
            activations.extend_from_within(..);
        }
        if activations.len() != per_dir * dirs {
            return Err(OpError::attribute(
                op,
                "activations",
                format!(
                    "expected {} names ({per_dir} per direction), got {names:?}",
                    per_dir * dirs
                ),
            ));
        }
        let clip = match ctx.attrs.float("clip")? {
            Some(c) if c.is_nan() || c <= 0.0 => {
                return Err(OpError::attribute(
                    op,
                    "clip",
                    format!("must be positive, got {c}"),
                ))
            }
            c => c,
        };
        let batch_major = match ctx.attrs.int_or("layout", 0)? {
            0 => false,
            1 => true,
            other => {
                return Err(OpError::attribute(
                    op,
                    "layout",
                    format!("expected 0 or 1, got {other}"),
                ))
            }
        };
        Ok(Box::new(Recurrent {
            cell,
            direction,
            hidden_size,
            activations,
            clip,
            batch_major,
        }))
    }

    /// The hidden size from the attribute, else from R's last dim.
    fn hidden_dim(&self, r: &Fact) -> Dim {
        match self.hidden_size {
            Some(h) => Dim::Known(h),
            None => r.dims.get(2).cloned().unwrap_or(Dim::Unknown),
        }
    }
}

/// Checks that a known dim equals `expected`.
fn check_dim(op: &str, what: &str, dim: &Dim, expected: &Dim) -> OpResult<()> {
    match (dim, expected) {
        (Dim::Known(a), Dim::Known(b)) if a != b => {
            Err(OpError::shape(op, format!("{what} is {a}, expected {b}")))
        }
        _ => Ok(()),
    }
}

impl Operator for Recurrent {
    fn op_type(&self) -> &str {
        self.cell.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.cell.name();
        let x = required(op, inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64) {
            return Err(OpError::DType {
                op: op.into(),
                index: 0,
                expected: "float or double".into(),
                actual: x.dtype,
            });
        }
        for index in 1..inputs.len() {
            let Some(f) = optional(inputs, index) else {
                continue;
            };
            // Input 4 is sequence_lens (int32); every other input has X's type.
            let ok = if index == 4 {
                f.dtype == DType::I32 || f.dtype == DType::I64
            } else {
                f.dtype == x.dtype
            };
            if !ok {
                return Err(OpError::DType {
                    op: op.into(),
                    index,
                    expected: if index == 4 { "int32" } else { "X's type" }.into(),
                    actual: f.dtype,
                });
            }
        }
        let w = required(op, inputs, 1)?;
        let r = required(op, inputs, 2)?;
        for (name, f) in [("X", x), ("W", w), ("R", r)] {
            if f.rank() != 3 {
                return Err(OpError::shape(
                    op,
                    format!("{name} must have rank 3, got {:?}", f.dims),
                ));
            }
        }
        let dirs = Dim::Known(self.direction.count());
        check_dim(op, "W's direction axis", &w.dims[0], &dirs)?;
        check_dim(op, "R's direction axis", &r.dims[0], &dirs)?;
        let hidden = self.hidden_dim(r);
        // Saturated: no real dim equals usize::MAX, so an overflowing hidden_size fails the checks.
        let gate_rows = hidden.map(|h| h.saturating_mul(self.cell.gates()));
        check_dim(op, "R's hidden axis", &r.dims[2], &hidden)?;
        check_dim(op, "R's gate axis", &r.dims[1], &gate_rows)?;
        check_dim(op, "W's gate axis", &w.dims[1], &gate_rows)?;
        check_dim(op, "W's input axis", &w.dims[2], &x.dims[2])?;
        let (seq, batch) = if self.batch_major {
            (x.dims[1].clone(), x.dims[0].clone())
        } else {
            (x.dims[0].clone(), x.dims[1].clone())
        };
        let (y, state) = if self.batch_major {
            (
                vec![batch.clone(), seq, dirs.clone(), hidden.clone()],
                vec![batch, dirs, hidden],
            )
        } else {
            (
                vec![seq, dirs.clone(), batch.clone(), hidden.clone()],
                vec![dirs, batch, hidden],
            )
        };
        let mut outputs = vec![Fact::new(x.dtype, y)];
        outputs.extend((1..self.cell.num_outputs()).map(|_| Fact::new(x.dtype, state.clone())));
        Ok(outputs)
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let op = self.cell.name();
        let (x, r) = (required(op, inputs, 0)?, required(op, inputs, 2)?);
        let (Some(x_dims), Some(r_dims)) = (x.concrete(), r.concrete()) else {
            return Ok(0);
        };
        if x_dims.len() != 3 || r_dims.len() != 3 {
            // `infer` reports the bad rank.
            return Ok(0);
        }
        let element = if x.dtype == DType::F64 { 8 } else { 4 };
        let g = Geometry::new(self, &x_dims, r_dims[2]);
        scratch_bytes(&g, self.batch_major, element)
            .ok_or_else(|| OpError::shape(op, "working memory size overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(self.cell.name(), inputs, 0)?.dtype;
        cpu_supported(
            self.cell.name(),
            dtype,
            device,
            matches!(dtype, DType::F32 | DType::F64),
        )?;
        Ok(Box::new(SequenceKernel { op: self.clone() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attributes;

    fn build(op_type: &str, attrs: Attributes) -> OpResult<Box<dyn Operator>> {
        crate::build_operator(&OpContext {
            op_type,
            domain: "",
            opset: 14,
            attrs: &attrs,
            num_inputs: 3,
            num_outputs: 2,
        })
    }

    #[test]
    fn bad_attributes_are_rejected() {
        let bad_dir = Attributes::new("GRU").with("direction", Attr::String("up".into()));
        assert!(build("GRU", bad_dir)
            .unwrap_err()
            .to_string()
            .contains("direction"));
        let bad_layout = Attributes::new("RNN").with("layout", Attr::Int(2));
        assert!(build("RNN", bad_layout).is_err());
        let too_few = Attributes::new("LSTM").with(
            "activations",
            Attr::Strings(vec!["Sigmoid".into(), "Tanh".into()]),
        );
        assert!(build("LSTM", too_few)
            .unwrap_err()
            .to_string()
            .contains("LSTM"));
    }

    #[test]
    fn shapes_follow_layout_and_reject_bad_ranks() {
        let op = build(
            "LSTM",
            Attributes::new("LSTM").with("hidden_size", Attr::Int(5)),
        )
        .unwrap();
        let x = Fact::known(DType::F32, &[7, 2, 3]);
        let w = Fact::known(DType::F32, &[1, 20, 3]);
        let r = Fact::known(DType::F32, &[1, 20, 5]);
        let outs = op.infer(&[&x, &w, &r]).unwrap();
        assert_eq!(outs.len(), 3);
        assert_eq!(outs[0].concrete().unwrap(), vec![7, 1, 2, 5]);
        assert_eq!(outs[2].concrete().unwrap(), vec![1, 2, 5]);
        let flat = Fact::known(DType::F32, &[7, 6]);
        assert!(op.infer(&[&flat, &w, &r]).is_err());
        let wrong_gates = Fact::known(DType::F32, &[1, 15, 3]);
        assert!(op.infer(&[&x, &wrong_gates, &r]).is_err());
        let ints = Fact::known(DType::I32, &[7, 2, 3]);
        assert!(op.infer(&[&ints, &w, &r]).is_err());
    }
}
