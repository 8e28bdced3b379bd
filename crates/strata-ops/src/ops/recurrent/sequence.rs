//! The recurrent kernel: runs a cell over the sequence for each direction. The input
//! projection `X W^T` (plus biases) of every time step is one GEMM per direction; each step
//! then multiplies the previous hidden state by `R^T` (also through the GEMM). A batch entry
//! with a `sequence_lens` value shorter than the sequence stops updating after its length
//! (reverse directions start from its last valid step) and its later `Y` rows stay zero.

use strata_core::{DType, Device, Tensor};

use super::activation::{Activation, RecurrentFloat};
use super::gru::gru_step;
use super::lstm::lstm_step;
use super::op::{Cell, Recurrent};
use super::rnn::rnn_step;
use crate::kernels::gemm;
use crate::ops::axes::read_ints;
use crate::{Kernel, KernelIo, OpError, OpResult};

/// What a cell needs for one time step of one direction.
pub(super) struct Step<'a, T> {
    pub hidden: usize,
    /// Per batch entry: its row of `projection` at this step, `None` once its sequence ended.
    pub rows: &'a [Option<usize>],
    /// `X W^T + Wb (+ Rb)` for every (time, batch) row: [seq * batch, gates * hidden].
    pub projection: &'a [T],
    /// This direction's R: [gates * hidden, hidden].
    pub r: &'a [T],
    /// GRU with `linear_before_reset`: Rb of the h gate ([hidden]); empty otherwise.
    pub recurrent_bias: &'a [T],
    pub activations: &'a [Activation],
    pub clip: Option<T>,
    pub threads: usize,
}

/// Clamps a gate's pre-activation to `[-clip, clip]` when the node sets `clip`.
#[inline]
pub(super) fn clip<T: RecurrentFloat>(x: T, clip: Option<T>) -> T {
    match clip {
        Some(c) => num_traits::Float::min(num_traits::Float::max(x, -c), c),
        None => x,
    }
}

#[derive(Debug)]
pub(super) struct SequenceKernel {
    pub op: Recurrent,
}

/// Sizes of one run, checked against every input.
struct Geometry {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    gates: usize,
}

impl Geometry {
    fn gate_width(&self) -> usize {
        self.gates * self.hidden
    }

    /// Offset of the state of (direction, batch) in Y_h / Y_c / initial_h / initial_c.
    fn state_offset(&self, batch_major: bool, d: usize, b: usize) -> usize {
        let slot = if batch_major {
            b * self.dirs + d
        } else {
            d * self.batch + b
        };
        slot * self.hidden
    }

    /// Offset of (time, direction, batch) in Y.
    fn y_offset(&self, batch_major: bool, t: usize, d: usize, b: usize) -> usize {
        let slot = if batch_major {
            (b * self.seq + t) * self.dirs + d
        } else {
            (t * self.dirs + d) * self.batch + b
        };
        slot * self.hidden
    }
}

/// Reads an optional input as a vector of `len` values, checking its dims.
fn optional_values<T: RecurrentFloat>(
    op: &str,
    t: &Tensor,
    name: &str,
    dims: &[usize],
) -> OpResult<Option<Vec<T>>> {
    if !t.is_defined() {
        return Ok(None);
    }
    if t.dims() != dims {
        return Err(OpError::shape(
            op,
            format!("{name} has dims {:?}, expected {dims:?}", t.dims()),
        ));
    }
    Ok(Some(t.to_vec::<T>()?))
}

impl SequenceKernel {
    fn geometry(&self, x: &Tensor, w: &Tensor, r: &Tensor) -> OpResult<Geometry> {
        let op = self.op.cell.name();
        let (xd, wd, rd) = (x.dims(), w.dims(), r.dims());
        if xd.len() != 3 || wd.len() != 3 || rd.len() != 3 {
            return Err(OpError::shape(
                op,
                format!("X, W and R must have rank 3, got {xd:?}, {wd:?}, {rd:?}"),
            ));
        }
        let (seq, batch) = if self.op.batch_major {
            (xd[1], xd[0])
        } else {
            (xd[0], xd[1])
        };
        let hidden = self.op.hidden_size.unwrap_or(rd[2]);
        let g = Geometry {
            seq,
            batch,
            input: xd[2],
            hidden,
            dirs: self.op.direction.count(),
            gates: self.op.cell.gates(),
        };
        let gw = g.gate_width();
        if wd != [g.dirs, gw, g.input] || rd != [g.dirs, gw, hidden] {
            return Err(OpError::shape(
                op,
                format!(
                    "W {wd:?} / R {rd:?} do not match {} direction(s), {} gates of hidden size \
                     {hidden} and input size {}",
                    g.dirs, g.gates, g.input
                ),
            ));
        }
        Ok(g)
    }

    /// Per batch entry, how many time steps it runs (all of them without `sequence_lens`).
    fn lengths(&self, t: &Tensor, g: &Geometry) -> OpResult<Vec<usize>> {
        let op = self.op.cell.name();
        if !t.is_defined() {
            return Ok(vec![g.seq; g.batch]);
        }
        let lens = read_ints(op, t)?;
        if lens.len() != g.batch {
            return Err(OpError::shape(
                op,
                format!(
                    "sequence_lens has {} values for batch {}",
                    lens.len(),
                    g.batch
                ),
            ));
        }
        lens.iter()
            .map(|&l| {
                usize::try_from(l)
                    .ok()
                    .filter(|&l| l <= g.seq)
                    .ok_or_else(|| {
                        OpError::shape(op, format!("sequence length {l} is outside 0..={}", g.seq))
                    })
            })
            .collect()
    }

    fn run_typed<T: RecurrentFloat>(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.cell.name();
        let (x_t, w_t, r_t) = (io.input(0), io.input(1), io.input(2));
        let g = self.geometry(x_t, w_t, r_t)?;
        let (hs, gw, batch_major) = (g.hidden, g.gate_width(), self.op.batch_major);
        let lens = self.lengths(io.input(4), &g)?;
        let x = x_t.to_vec::<T>()?;
        let w = w_t.to_vec::<T>()?;
        let r = r_t.to_vec::<T>()?;
        let bias = optional_values::<T>(op, io.input(3), "B", &[g.dirs, 2 * gw])?;
        let state_dims = if batch_major {
            [g.batch, g.dirs, hs]
        } else {
            [g.dirs, g.batch, hs]
        };
        let h0 = optional_values::<T>(op, io.input(5), "initial_h", &state_dims)?;
        let is_lstm = matches!(self.op.cell, Cell::Lstm { .. });
        let (c0, peepholes) = if is_lstm {
            (
                optional_values::<T>(op, io.input(6), "initial_c", &state_dims)?,
                optional_values::<T>(op, io.input(7), "P", &[g.dirs, 3 * hs])?,
            )
        } else {
            (None, None)
        };

        // X as [seq, batch, input] rows, whatever the layout.
        let x_rows: Vec<T> = if batch_major {
            let mut rows = vec![T::zero(); x.len()];
            for b in 0..g.batch {
                for t in 0..g.seq {
                    let src = (b * g.seq + t) * g.input;
                    let dst = (t * g.batch + b) * g.input;
                    rows[dst..dst + g.input].copy_from_slice(&x[src..src + g.input]);
                }
            }
            rows
        } else {
            x
        };

        let steps = g.seq * g.batch;
        let mut y = vec![T::zero(); steps * g.dirs * hs];
        let mut y_h = vec![T::zero(); g.dirs * g.batch * hs];
        let mut y_c = vec![T::zero(); g.dirs * g.batch * hs];
        let mut projection = vec![T::zero(); steps * gw];
        let mut gates = vec![T::zero(); g.batch * gw];
        let mut h = vec![T::zero(); g.batch * hs];
        let mut c = vec![T::zero(); g.batch * hs];
        let mut reset_h = vec![T::zero(); g.batch * hs];
        let mut rows = vec![None; g.batch];
        let per_dir = self.op.activations.len() / g.dirs;
        let clip_value = self.op.clip.map(<T as crate::kernels::Float>::from_f32);
        let linear_before_reset = matches!(
            self.op.cell,
            Cell::Gru {
                linear_before_reset: true
            }
        );

        for d in 0..g.dirs {
            let w_d = &w[d * gw * g.input..(d + 1) * gw * g.input];
            let r_d = &r[d * gw * hs..(d + 1) * gw * hs];
            gemm(
                steps,
                gw,
                g.input,
                &x_rows,
                (g.input as isize, 1),
                w_d,
                (1, g.input as isize),
                &mut projection,
                (gw as isize, 1),
                T::one(),
                T::zero(),
                io.threads,
            )?;
            let mut recurrent_bias = Vec::new();
            if let Some(bias) = &bias {
                let (wb, rb) = bias[d * 2 * gw..(d + 1) * 2 * gw].split_at(gw);
                // With linear_before_reset, Rb of the h gate is applied inside the reset product.
                let folded = if linear_before_reset { 2 * hs } else { gw };
                for row in projection.chunks_exact_mut(gw) {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v += wb[j] + if j < folded { rb[j] } else { T::zero() };
                    }
                }
                if linear_before_reset {
                    recurrent_bias.extend_from_slice(&rb[2 * hs..]);
                }
            }
            if linear_before_reset && recurrent_bias.is_empty() {
                recurrent_bias.resize(hs, T::zero());
            }
            let zero_peepholes = vec![T::zero(); 3 * hs];
            let peep_d = peepholes
                .as_ref()
                .map_or(&zero_peepholes[..], |p| &p[d * 3 * hs..(d + 1) * 3 * hs]);
            for b in 0..g.batch {
                let at = g.state_offset(batch_major, d, b);
                let dst = b * hs..(b + 1) * hs;
                match &h0 {
                    Some(h0) => h[dst.clone()].copy_from_slice(&h0[at..at + hs]),
                    None => h[dst.clone()].fill(T::zero()),
                }
                match &c0 {
                    Some(c0) => c[dst].copy_from_slice(&c0[at..at + hs]),
                    None => c[dst].fill(T::zero()),
                }
            }
            let reverse = self.op.direction.is_reverse(d);
            for s in 0..g.seq {
                for (b, row) in rows.iter_mut().enumerate() {
                    *row = (s < lens[b]).then(|| {
                        let t = if reverse { lens[b] - 1 - s } else { s };
                        t * g.batch + b
                    });
                }
                if rows.iter().all(Option::is_none) {
                    break;
                }
                let step = Step {
                    hidden: hs,
                    rows: &rows,
                    projection: &projection,
                    r: r_d,
                    recurrent_bias: &recurrent_bias,
                    activations: &self.op.activations[d * per_dir..(d + 1) * per_dir],
                    clip: clip_value,
                    threads: io.threads,
                };
                match self.op.cell {
                    Cell::Rnn => rnn_step(&step, &mut h, &mut gates)?,
                    Cell::Gru {
                        linear_before_reset,
                    } => gru_step(&step, linear_before_reset, &mut h, &mut gates, &mut reset_h)?,
                    Cell::Lstm { input_forget } => {
                        lstm_step(&step, input_forget, peep_d, &mut h, &mut c, &mut gates)?
                    }
                }
                for (b, row) in rows.iter().enumerate() {
                    if let Some(row) = row {
                        let at = g.y_offset(batch_major, row / g.batch, d, b);
                        y[at..at + hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
                    }
                }
            }
            for b in 0..g.batch {
                let at = g.state_offset(batch_major, d, b);
                y_h[at..at + hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
                y_c[at..at + hs].copy_from_slice(&c[b * hs..(b + 1) * hs]);
            }
        }
        store(op, io.output(0), &y)?;
        store(op, io.output(1), &y_h)?;
        if is_lstm {
            store(op, io.output(2), &y_c)?;
        }
        Ok(())
    }
}

/// Copies `values` into an output the node lists (an omitted optional output is skipped).
fn store<T: RecurrentFloat>(op: &str, out: &Tensor, values: &[T]) -> OpResult<()> {
    if !out.is_defined() {
        return Ok(());
    }
    if out.numel() != values.len() {
        return Err(OpError::kernel(
            op,
            format!(
                "output has dims {:?}, expected {} elements",
                out.dims(),
                values.len()
            ),
        ));
    }
    let mut guard = out.write::<T>()?;
    let slice = guard
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(op, "output is not contiguous"))?;
    slice.copy_from_slice(values);
    Ok(())
}

impl Kernel for SequenceKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        match io.input(0).dtype() {
            DType::F32 => self.run_typed::<f32>(io),
            DType::F64 => self.run_typed::<f64>(io),
            dtype => Err(OpError::NoKernel {
                op: self.op.cell.name().into(),
                dtype,
                device: Device::Cpu,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::{Attr, Attributes, Fact, KernelIo, OpContext};

    fn t(values: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice(values, dims).unwrap()
    }

    /// Builds `op_type` with `attrs`, infers and runs it; returns every output's values.
    fn run(op_type: &str, attrs: &[(&str, Attr)], inputs: &[Option<Tensor>]) -> Vec<Vec<f32>> {
        let mut a = Attributes::new(op_type);
        for (name, value) in attrs {
            a.insert(name, value.clone());
        }
        let ctx = OpContext {
            op_type,
            domain: "",
            opset: 22,
            attrs: &a,
            num_inputs: inputs.len(),
            num_outputs: 3,
        };
        let op = crate::build_operator(&ctx).unwrap();
        let facts: Vec<Fact> = inputs
            .iter()
            .map(|i| i.clone().map_or_else(Fact::absent, Fact::constant))
            .collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let outs = op.infer(&refs).unwrap();
        let outputs: Vec<Tensor> = outs
            .iter()
            .map(|f| Tensor::zeros(&f.concrete().unwrap(), f.dtype).unwrap())
            .collect();
        let undefined = Tensor::undefined();
        let in_refs: Vec<&Tensor> = inputs
            .iter()
            .map(|i| i.as_ref().unwrap_or(&undefined))
            .collect();
        let out_refs: Vec<&Tensor> = outputs.iter().collect();
        let kernel = op.kernel(&refs, &[], strata_core::Device::Cpu).unwrap();
        kernel
            .run(&KernelIo {
                inputs: &in_refs,
                outputs: &out_refs,
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
        outputs.iter().map(|o| o.to_vec::<f32>().unwrap()).collect()
    }

    fn relu() -> (&'static str, Attr) {
        ("activations", Attr::Strings(vec!["Relu".into()]))
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn rnn_forward_reverse_and_lengths() {
        // h_t = relu(0.5 x_t + h_{t-1}), x = [1, 2].
        let x = t(&[1.0, 2.0], &[2, 1, 1]);
        let w = t(&[0.5], &[1, 1, 1]);
        let r = t(&[1.0], &[1, 1, 1]);
        let base = [Some(x.clone()), Some(w.clone()), Some(r.clone())];
        let out = run("RNN", &[relu()], &base);
        assert_close(&out[0], &[0.5, 1.5]);
        assert_close(&out[1], &[1.5]);
        let rev = ("direction", Attr::String("reverse".into()));
        let out = run("RNN", &[relu(), rev], &base);
        assert_close(&out[0], &[1.5, 1.0]);
        assert_close(&out[1], &[1.5]);
        // Batch entry 0 has length 1: its state stops after step 0 and Y's row 1 stays zero.
        let lens = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let inputs = [Some(x), Some(w), Some(r), None, Some(lens)];
        let out = run("RNN", &[relu()], &inputs);
        assert_close(&out[0], &[0.5, 0.0]);
        assert_close(&out[1], &[0.5]);
    }

    #[test]
    fn gru_reset_placement() {
        // W = [z 0, r 0, h 1], R = [0, 0, 2], Rb_h = 1, H0 = 1, x = 1: z = r = 0.5.
        let x = t(&[1.0], &[1, 1, 1]);
        let w = t(&[0.0, 0.0, 1.0], &[1, 3, 1]);
        let r = t(&[0.0, 0.0, 2.0], &[1, 3, 1]);
        let b = t(&[0.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[1, 6]);
        let h0 = t(&[1.0], &[1, 1, 1]);
        let inputs = [Some(x), Some(w), Some(r), Some(b), None, Some(h0)];
        // Default: g(x + (r * H) Rh + Rbh) = tanh(1 + 1 + 1).
        let out = run("GRU", &[], &inputs);
        assert_close(&out[1], &[0.5 * 3f32.tanh() + 0.5]);
        // linear_before_reset: g(x + r * (H Rh + Rbh)) = tanh(1 + 0.5 * 3).
        let out = run("GRU", &[("linear_before_reset", Attr::Int(1))], &inputs);
        assert_close(&out[1], &[0.5 * 2.5f32.tanh() + 0.5]);
    }

    #[test]
    fn lstm_with_peepholes_and_batch_major_layout() {
        // Only W_c = 1 and P_i = 1; C0 = 2, x = 1.
        let x = t(&[1.0], &[1, 1, 1]);
        let w = t(&[0.0, 0.0, 0.0, 1.0], &[1, 4, 1]);
        let r = t(&[0.0; 4], &[1, 4, 1]);
        let c0 = t(&[2.0], &[1, 1, 1]);
        let p = t(&[1.0, 0.0, 0.0], &[1, 3]);
        let inputs = [
            Some(x),
            Some(w),
            Some(r),
            None,
            None,
            None,
            Some(c0),
            Some(p),
        ];
        let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
        let cell = 0.5 * 2.0 + sigmoid(2.0) * 1f32.tanh();
        let hidden = 0.5 * cell.tanh();
        for layout in [0, 1] {
            let out = run("LSTM", &[("layout", Attr::Int(layout))], &inputs);
            assert_close(&out[0], &[hidden]);
            assert_close(&out[1], &[hidden]);
            assert_close(&out[2], &[cell]);
        }
    }

    #[test]
    fn bidirectional_batch_major_places_directions() {
        // Two steps, relu(x + h): forward [1, 3], reverse [3, 2] for x = [1, 2].
        let x = t(&[1.0, 2.0], &[1, 2, 1]);
        let w = t(&[1.0, 1.0], &[2, 1, 1]);
        let r = t(&[1.0, 1.0], &[2, 1, 1]);
        let attrs = [
            relu(),
            ("direction", Attr::String("bidirectional".into())),
            ("layout", Attr::Int(1)),
        ];
        let out = run("RNN", &attrs, &[Some(x), Some(w), Some(r)]);
        // Y is [batch, seq, dirs, hidden].
        assert_close(&out[0], &[1.0, 3.0, 3.0, 2.0]);
        assert_close(&out[1], &[3.0, 3.0]);
    }
}
