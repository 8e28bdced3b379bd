//! The recurrent kernel: runs a cell over the sequence for each direction. The input
//! projection `X W^T` (plus biases) of every time step is one GEMM per direction; each step
//! then multiplies the previous hidden state by `R^T` (also through the GEMM). A batch entry
//! with a `sequence_lens` value shorter than the sequence stops updating after its length
//! (reverse directions start from its last valid step) and its later `Y` rows stay zero.

use strata_core::{DType, Device, ReadGuard, Tensor, WriteGuard};

use super::activation::RecurrentFloat;
use super::gru::gru_step;
use super::lstm::lstm_step;
use super::rnn::rnn_step;
use crate::kernels::gemm;
use crate::ops::recurrent::node::{Cell, Recurrent};
use crate::ops::recurrent::step::{Step, ENDED};
use crate::support::scratch::{carve, scratch_as};
use crate::{Kernel, KernelIo, OpError, OpResult};

#[derive(Debug)]
pub(super) struct SequenceKernel {
    pub op: Recurrent,
}

/// Sizes of one run, checked against every input.
pub(super) struct Geometry {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub dirs: usize,
    pub gates: usize,
}

impl Geometry {
    /// The sizes for X's dims (rank 3) and R's hidden axis.
    pub fn new(op: &Recurrent, x_dims: &[usize], r_hidden: usize) -> Geometry {
        let (seq, batch) = if op.batch_major {
            (x_dims[1], x_dims[0])
        } else {
            (x_dims[0], x_dims[1])
        };
        Geometry {
            seq,
            batch,
            input: x_dims[2],
            hidden: op.hidden_size.unwrap_or(r_hidden),
            dirs: op.direction.count(),
            gates: op.cell.gates(),
        }
    }

    /// Rows of W and R per direction (`None` when that overflows).
    pub fn gate_width(&self) -> Option<usize> {
        self.gates.checked_mul(self.hidden)
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

/// Read access to an optional input, after checking its dims.
fn optional_read<'t, T: RecurrentFloat>(
    op: &str,
    t: &'t Tensor,
    name: &str,
    dims: &[usize],
) -> OpResult<Option<ReadGuard<'t, T>>> {
    if !t.is_defined() {
        return Ok(None);
    }
    if t.dims() != dims {
        return Err(OpError::shape(
            op,
            format!("{name} has dims {:?}, expected {dims:?}", t.dims()),
        ));
    }
    Ok(Some(t.read::<T>()?))
}

/// The working buffers of one run, carved from planned scratch.
struct Work<'s, T> {
    /// Per batch entry: how many time steps it runs.
    lens: &'s mut [usize],
    /// Per batch entry: its projection row at this step, or [`ENDED`].
    rows: &'s mut [usize],
    /// X as [seq, batch, input] rows, for the batch-major layout only (else empty).
    x_rows: &'s mut [T],
    projection: &'s mut [T],
    gates: &'s mut [T],
    h: &'s mut [T],
    c: &'s mut [T],
    reset_h: &'s mut [T],
    /// GRU with `linear_before_reset`: Rb of the h gate.
    recurrent_bias: &'s mut [T],
    /// Peepholes of one direction (zeros when the node has none).
    peepholes: &'s mut [T],
}

/// Element counts of the working buffers: (usize entries, `T` entries).
fn work_lens(g: &Geometry, batch_major: bool) -> Option<(usize, usize)> {
    let steps = g.seq.checked_mul(g.batch)?;
    let state = g.batch.checked_mul(g.hidden)?;
    let x_rows = if batch_major {
        steps.checked_mul(g.input)?
    } else {
        0
    };
    let floats = x_rows
        .checked_add(steps.checked_mul(g.gate_width()?)?)?
        .checked_add(g.batch.checked_mul(g.gate_width()?)?)?
        .checked_add(state.checked_mul(3)?)?
        .checked_add(g.hidden.checked_mul(4)?)?;
    Some((g.batch.checked_mul(2)?, floats))
}

/// Scratch bytes of one run: the usize buffers first (aligned as the scratch itself), then
/// the `T` buffers.
pub(super) fn scratch_bytes(g: &Geometry, batch_major: bool, element_size: usize) -> Option<usize> {
    let (indices, floats) = work_lens(g, batch_major)?;
    indices
        .checked_mul(std::mem::size_of::<usize>())?
        .checked_add(floats.checked_mul(element_size)?)
}

impl<'s, T: RecurrentFloat> Work<'s, T> {
    fn carve(op: &str, bytes: &'s mut [u8], g: &Geometry, batch_major: bool) -> OpResult<Self> {
        let (indices, _) = work_lens(g, batch_major)
            .ok_or_else(|| OpError::shape(op, "working memory size overflows"))?;
        let split = indices * std::mem::size_of::<usize>();
        if bytes.len() < split {
            return Err(OpError::kernel(op, "scratch is smaller than planned"));
        }
        let (index_bytes, float_bytes) = bytes.split_at_mut(split);
        let mut ints: &mut [usize] = scratch_as(op, index_bytes)?;
        let mut floats: &mut [T] = scratch_as(op, float_bytes)?;
        let (steps, state, gw) = (g.seq * g.batch, g.batch * g.hidden, g.gates * g.hidden);
        Ok(Work {
            lens: carve(op, &mut ints, g.batch)?,
            rows: carve(op, &mut ints, g.batch)?,
            x_rows: carve(
                op,
                &mut floats,
                if batch_major { steps * g.input } else { 0 },
            )?,
            projection: carve(op, &mut floats, steps * gw)?,
            gates: carve(op, &mut floats, g.batch * gw)?,
            h: carve(op, &mut floats, state)?,
            c: carve(op, &mut floats, state)?,
            reset_h: carve(op, &mut floats, state)?,
            recurrent_bias: carve(op, &mut floats, g.hidden)?,
            peepholes: carve(op, &mut floats, 3 * g.hidden)?,
        })
    }
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
        let g = Geometry::new(&self.op, xd, rd[2]);
        let gw = g
            .gate_width()
            .ok_or_else(|| OpError::shape(op, "gate width overflows"))?;
        if wd != [g.dirs, gw, g.input] || rd != [g.dirs, gw, g.hidden] {
            return Err(OpError::shape(
                op,
                format!(
                    "W {wd:?} / R {rd:?} do not match {} direction(s), {} gates of hidden size \
                     {} and input size {}",
                    g.dirs, g.gates, g.hidden, g.input
                ),
            ));
        }
        Ok(g)
    }

    /// Fills `lens` with how many time steps each batch entry runs (all of them without
    /// `sequence_lens`).
    fn lengths(&self, t: &Tensor, g: &Geometry, lens: &mut [usize]) -> OpResult<()> {
        let op = self.op.cell.name();
        if !t.is_defined() {
            lens.fill(g.seq);
            return Ok(());
        }
        if t.numel() != g.batch {
            return Err(OpError::shape(
                op,
                format!(
                    "sequence_lens has {} values for batch {}",
                    t.numel(),
                    g.batch
                ),
            ));
        }
        let check = |l: i64| {
            usize::try_from(l)
                .ok()
                .filter(|&l| l <= g.seq)
                .ok_or_else(|| {
                    OpError::shape(op, format!("sequence length {l} is outside 0..={}", g.seq))
                })
        };
        match t.dtype() {
            DType::I32 => {
                let read = t.read::<i32>()?;
                for (slot, &l) in lens.iter_mut().zip(read.elements()?.iter()) {
                    *slot = check(i64::from(l))?;
                }
            }
            DType::I64 => {
                let read = t.read::<i64>()?;
                for (slot, &l) in lens.iter_mut().zip(read.elements()?.iter()) {
                    *slot = check(l)?;
                }
            }
            dtype => {
                return Err(OpError::DType {
                    op: op.into(),
                    index: 4,
                    expected: "int32".into(),
                    actual: dtype,
                })
            }
        }
        Ok(())
    }

    fn run_typed<T: RecurrentFloat>(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.cell.name();
        let (x_t, w_t, r_t) = (io.input(0), io.input(1), io.input(2));
        let g = self.geometry(x_t, w_t, r_t)?;
        let (hs, gw, batch_major) = (g.hidden, g.gates * g.hidden, self.op.batch_major);
        let mut guard = io
            .scratch
            .ok_or_else(|| OpError::kernel(op, "needs planned scratch"))?
            .write_bytes("recurrent")?;
        let work = Work::<T>::carve(op, guard.bytes(), &g, batch_major)?;
        self.lengths(io.input(4), &g, work.lens)?;
        let (x_read, w_read, r_read) = (x_t.read::<T>()?, w_t.read::<T>()?, r_t.read::<T>()?);
        let (x, w, r) = (x_read.elements()?, w_read.elements()?, r_read.elements()?);
        let bias = optional_read::<T>(op, io.input(3), "B", &[g.dirs, 2 * gw])?;
        let bias = bias.as_ref().map(|g| g.elements()).transpose()?;
        let state_dims = if batch_major {
            [g.batch, g.dirs, hs]
        } else {
            [g.dirs, g.batch, hs]
        };
        let h0 = optional_read::<T>(op, io.input(5), "initial_h", &state_dims)?;
        let h0 = h0.as_ref().map(|g| g.elements()).transpose()?;
        let is_lstm = matches!(self.op.cell, Cell::Lstm { .. });
        let (c0, peepholes) = if is_lstm {
            (
                optional_read::<T>(op, io.input(6), "initial_c", &state_dims)?,
                optional_read::<T>(op, io.input(7), "P", &[g.dirs, 3 * hs])?,
            )
        } else {
            (None, None)
        };
        let c0 = c0.as_ref().map(|g| g.elements()).transpose()?;
        let peepholes = peepholes.as_ref().map(|g| g.elements()).transpose()?;

        // X as [seq, batch, input] rows, whatever the layout.
        let x_rows: &[T] = if batch_major {
            for b in 0..g.batch {
                for t in 0..g.seq {
                    let src = (b * g.seq + t) * g.input;
                    let dst = (t * g.batch + b) * g.input;
                    work.x_rows[dst..dst + g.input].copy_from_slice(&x[src..src + g.input]);
                }
            }
            work.x_rows
        } else {
            &x
        };

        let mut outputs = Outputs::<T>::bind(op, io, &g, is_lstm)?;
        let mut y = outputs.y.as_mut().and_then(WriteGuard::as_mut_slice);
        let mut y_h = outputs.y_h.as_mut().and_then(WriteGuard::as_mut_slice);
        let mut y_c = outputs.y_c.as_mut().and_then(WriteGuard::as_mut_slice);
        let steps = g.seq * g.batch;
        let per_dir = self.op.activations.len() / g.dirs;
        let clip_value = self.op.clip.map(<T as crate::kernels::Float>::from_f32);
        let linear_before_reset = matches!(
            self.op.cell,
            Cell::Gru {
                linear_before_reset: true
            }
        );
        let (lens, rows) = (&*work.lens, work.rows);
        let (projection, gates, h, c) = (work.projection, work.gates, work.h, work.c);

        // Cancellation and deadlines are checked once per time step.
        let stop = crate::run_control::stop_token();
        for d in 0..g.dirs {
            let w_d = &w[d * gw * g.input..(d + 1) * gw * g.input];
            let r_d = &r[d * gw * hs..(d + 1) * gw * hs];
            gemm(
                steps,
                gw,
                g.input,
                x_rows,
                (g.input as isize, 1),
                w_d,
                (1, g.input as isize),
                projection,
                (gw as isize, 1),
                T::one(),
                T::zero(),
                io.threads,
            )?;
            work.recurrent_bias.fill(T::zero());
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
                    work.recurrent_bias.copy_from_slice(&rb[2 * hs..]);
                }
            }
            match &peepholes {
                Some(p) => work
                    .peepholes
                    .copy_from_slice(&p[d * 3 * hs..(d + 1) * 3 * hs]),
                None => work.peepholes.fill(T::zero()),
            }
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
                stop.check(self.op.cell.name())?;
                for (b, row) in rows.iter_mut().enumerate() {
                    *row = if s < lens[b] {
                        let t = if reverse { lens[b] - 1 - s } else { s };
                        t * g.batch + b
                    } else {
                        ENDED
                    };
                }
                if rows.iter().all(|&row| row == ENDED) {
                    break;
                }
                let step = Step {
                    hidden: hs,
                    rows,
                    projection,
                    r: r_d,
                    recurrent_bias: if linear_before_reset {
                        work.recurrent_bias
                    } else {
                        &[]
                    },
                    activations: &self.op.activations[d * per_dir..(d + 1) * per_dir],
                    clip: clip_value,
                    threads: io.threads,
                };
                match self.op.cell {
                    Cell::Rnn => rnn_step(&step, h, gates)?,
                    Cell::Gru {
                        linear_before_reset,
                    } => gru_step(&step, linear_before_reset, h, gates, work.reset_h)?,
                    Cell::Lstm { input_forget } => {
                        lstm_step(&step, input_forget, work.peepholes, h, c, gates)?
                    }
                }
                if let Some(y) = y.as_deref_mut() {
                    for (b, &row) in rows.iter().enumerate() {
                        if row != ENDED {
                            let at = g.y_offset(batch_major, row / g.batch, d, b);
                            y[at..at + hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
                        }
                    }
                }
            }
            for b in 0..g.batch {
                let at = g.state_offset(batch_major, d, b);
                if let Some(y_h) = y_h.as_deref_mut() {
                    y_h[at..at + hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
                }
                if let Some(y_c) = y_c.as_deref_mut() {
                    y_c[at..at + hs].copy_from_slice(&c[b * hs..(b + 1) * hs]);
                }
            }
        }
        Ok(())
    }
}

/// Write access to the outputs the node lists (an omitted optional output is `None`).
struct Outputs<'t, T: RecurrentFloat> {
    y: Option<WriteGuard<'t, T>>,
    y_h: Option<WriteGuard<'t, T>>,
    y_c: Option<WriteGuard<'t, T>>,
}

impl<'t, T: RecurrentFloat> Outputs<'t, T> {
    fn bind(op: &str, io: &KernelIo<'t>, g: &Geometry, is_lstm: bool) -> OpResult<Self> {
        let state = g.dirs * g.batch * g.hidden;
        let open = |index: usize, len: usize| -> OpResult<Option<WriteGuard<'t, T>>> {
            let out = io.output(index);
            if !out.is_defined() {
                return Ok(None);
            }
            if out.numel() != len {
                return Err(OpError::kernel(
                    op,
                    format!(
                        "output {index} has dims {:?}, expected {len} elements",
                        out.dims()
                    ),
                ));
            }
            let mut guard = out.write::<T>()?;
            if guard.as_mut_slice().is_none() {
                return Err(OpError::kernel(op, "output is not contiguous"));
            }
            // Y rows past a sequence's end stay zero.
            guard.fill(T::zero());
            Ok(Some(guard))
        };
        Ok(Outputs {
            y: open(0, g.seq * g.dirs * g.batch * g.hidden)?,
            y_h: open(1, state)?,
            y_c: if is_lstm { open(2, state)? } else { None },
        })
    }
}
impl Kernel for SequenceKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        match io.input(0).dtype() {
            DType::F32 => self.run_typed::<f32>(io),
            DType::F64 => self.run_typed::<f64>(io),
            dtype => Err(OpError::no_kernel(self.op.cell.name(), dtype, Device::Cpu)),
        }
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::test_util::OpRun;
    use crate::Attr;

    fn t(values: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice(values, dims).unwrap()
    }

    /// Builds `op_type` with `attrs`, infers and runs it; returns every output's values.
    fn run(op_type: &str, attrs: &[(&str, Attr)], inputs: &[Option<Tensor>]) -> Vec<Vec<f32>> {
        let inputs: Vec<Tensor> = inputs
            .iter()
            .map(|i| i.clone().unwrap_or_else(Tensor::undefined))
            .collect();
        let outputs = OpRun::new(op_type, 22)
            .attrs(attrs)
            .outputs(3)
            .constant_inputs()
            .run(&inputs)
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
    fn bad_sequence_lengths_are_errors() {
        let x = t(&[1.0, 2.0], &[2, 1, 1]);
        let w = t(&[0.5], &[1, 1, 1]);
        let r = t(&[1.0], &[1, 1, 1]);
        let none = Tensor::undefined();
        for (lens, what) in [
            (
                Tensor::from_slice(&[3i32], &[1]).unwrap(),
                "sequence length 3",
            ),
            (
                Tensor::from_slice(&[-1i32], &[1]).unwrap(),
                "sequence length -1",
            ),
            (
                Tensor::from_slice(&[1i32, 1], &[2]).unwrap(),
                "2 values for batch 1",
            ),
        ] {
            let inputs = [x.clone(), w.clone(), r.clone(), none.clone(), lens];
            let err = OpRun::new("RNN", 22).outputs(2).run(&inputs).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
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
