//! QuantizedLookup (strata-internal, made by the optimizer): an 8-bit tensor mapped through a
//! 256-entry table, one table for all elements or one per channel (axis 1). The QDQ pass turns
//! `DequantizeLinear → element-wise float ops with constant operands → QuantizeLinear` into it,
//! the table computed at plan time by running those very nodes on every 8-bit value, so the
//! results are the float graph's bit for bit.

use std::sync::Arc;

use strata_core::{DType, Device, Tensor};

use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpError, OpResult, Operator};

const OP: &str = "QuantizedLookup";

/// Elements per table.
pub const TABLE_LEN: usize = 256;

#[derive(Debug, Clone)]
pub struct QuantizedLookup {
    /// `channels` tables of [`TABLE_LEN`] raw output bytes, indexed by the input's raw byte.
    tables: Arc<[u8]>,
    channels: usize,
    input: DType,
    output: DType,
}

impl QuantizedLookup {
    /// The operator for u8/i8 input `input`, output `output` and `tables` (one table, or one
    /// per channel of axis 1), each [`TABLE_LEN`] raw bytes indexed by the input's raw byte.
    pub fn new(input: DType, output: DType, tables: Vec<u8>) -> OpResult<Self> {
        let eight_bit = |d: DType| matches!(d, DType::U8 | DType::I8);
        if !eight_bit(input) || !eight_bit(output) {
            return Err(OpError::kernel(
                OP,
                format!("needs 8-bit integer input and output, got {input} and {output}"),
            ));
        }
        if tables.is_empty() || !tables.len().is_multiple_of(TABLE_LEN) {
            return Err(OpError::kernel(
                OP,
                format!(
                    "tables must be whole {TABLE_LEN}-entry tables, got {} bytes",
                    tables.len()
                ),
            ));
        }
        Ok(QuantizedLookup {
            channels: tables.len() / TABLE_LEN,
            tables: tables.into(),
            input,
            output,
        })
    }

    /// Channels with a table of their own (1: one table for all).
    pub fn channels(&self) -> usize {
        self.channels
    }
}

impl Operator for QuantizedLookup {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x] = exact_inputs(OP, inputs)?;
        if x.dtype != self.input {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: self.input.to_string(),
                actual: x.dtype,
            });
        }
        if self.channels > 1 {
            let channels = x.dims.get(1).and_then(|d| d.known());
            if channels.is_some_and(|c| c != self.channels) || x.rank() < 2 {
                return Err(OpError::shape(
                    OP,
                    format!("{} tables for input dims {:?}", self.channels, x.dims),
                ));
            }
        }
        Ok(vec![Fact::new(self.output, x.dims.clone())])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, self.input, device)?;
        Ok(Box::new(self.clone()))
    }
}

fn bytes_of(op: &str, t: &Tensor, f: impl FnOnce(&[u8]) -> OpResult<()>) -> OpResult<()> {
    let not_contiguous = || OpError::kernel(op, "input is not contiguous");
    match t.dtype() {
        DType::U8 => f(t.read::<u8>()?.as_slice().ok_or_else(not_contiguous)?),
        DType::I8 => f(bytemuck::cast_slice(
            t.read::<i8>()?.as_slice().ok_or_else(not_contiguous)?,
        )),
        other => Err(OpError::kernel(op, format!("cannot read {other}"))),
    }
}

fn bytes_of_mut(op: &str, t: &Tensor, f: impl FnOnce(&mut [u8]) -> OpResult<()>) -> OpResult<()> {
    let not_contiguous = || OpError::kernel(op, "output is not contiguous");
    match t.dtype() {
        DType::U8 => f(t.write::<u8>()?.as_mut_slice().ok_or_else(not_contiguous)?),
        DType::I8 => f(bytemuck::cast_slice_mut(
            t.write::<i8>()?.as_mut_slice().ok_or_else(not_contiguous)?,
        )),
        other => Err(OpError::kernel(op, format!("cannot write {other}"))),
    }
}

/// Elements below which a lookup stays on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

impl Kernel for QuantizedLookup {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let dims = x.dims();
        if out.dims() != dims {
            return Err(OpError::kernel(OP, "output dims differ from the input's"));
        }
        // Elements per channel plane, and how many planes.
        let (inner, planes) = if self.channels > 1 {
            if dims.len() < 2 || dims[1] != self.channels {
                return Err(OpError::shape(
                    OP,
                    format!("{} tables for input dims {dims:?}", self.channels),
                ));
            }
            let inner: usize = dims[2..].iter().product();
            (inner, dims[0] * dims[1])
        } else {
            (x.numel(), 1)
        };
        if inner == 0 || planes == 0 {
            return Ok(());
        }
        let channels = self.channels;
        bytes_of(OP, x, |src| {
            bytes_of_mut(OP, out, |dst| {
                let chunk = if planes > 1 {
                    inner
                } else {
                    inner.div_ceil(16).max(4096)
                };
                let run = |index: usize, part: &mut [u8]| {
                    let start = index * chunk;
                    let channel = if planes > 1 { index % channels } else { 0 };
                    let table: &[u8; TABLE_LEN] = self.tables
                        [channel * TABLE_LEN..(channel + 1) * TABLE_LEN]
                        .try_into()
                        .unwrap_or(&[0; TABLE_LEN]);
                    look_up(table, &src[start..start + part.len()], part);
                };
                if src.len() >= PARALLEL_MIN && io.threads > 1 {
                    let per_task = (PARALLEL_MIN / chunk).max(1);
                    crate::parallel::for_each_chunk_mut(dst, chunk, per_task, run);
                } else {
                    for (index, part) in dst.chunks_mut(chunk).enumerate() {
                        run(index, part);
                    }
                }
                Ok(())
            })
        })
    }
}

/// `dst[i] = table[src[i]]`.
fn look_up(table: &[u8; TABLE_LEN], src: &[u8], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if super::lookup_x86::vbmi_available() {
        // SAFETY: AVX-512 VBMI was detected.
        unsafe { super::lookup_x86::look_up_vbmi(table, src, dst) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = table[usize::from(s)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the op's kernel on `x` with 1 and 3 threads (no pool: the tasks run in turn).
    fn run(op: &QuantizedLookup, x: Tensor) -> Tensor {
        let fact = Fact::known(x.dtype(), x.dims());
        let out_fact = op.infer(&[&fact]).unwrap().remove(0);
        let kernel = op.kernel(&[&fact], &[&out_fact], Device::Cpu).unwrap();
        let y = Tensor::zeros(x.dims(), out_fact.dtype).unwrap();
        for threads in [1, 3] {
            kernel
                .run(&KernelIo {
                    inputs: &[&x],
                    outputs: &[&y],
                    scratch: None,
                    in_place: None,
                    threads,
                })
                .unwrap();
        }
        y
    }

    #[test]
    fn maps_every_byte_through_its_channel_table() {
        // Channel c maps v to v + c (wrapping) for u8 in, i8 out.
        let channels = 3;
        let tables: Vec<u8> = (0..channels)
            .flat_map(|c| (0..TABLE_LEN).map(move |v| (v + c) as u8))
            .collect();
        let op = QuantizedLookup::new(DType::U8, DType::I8, tables).unwrap();
        let (n, inner) = (2, 40_000);
        let x: Vec<u8> = (0..n * channels * inner)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let y = run(&op, Tensor::from_slice(&x, &[n, channels, inner]).unwrap());
        let got = y.to_vec::<i8>().unwrap();
        for (i, (&v, &o)) in x.iter().zip(&got).enumerate() {
            let c = (i / inner) % channels;
            assert_eq!(o as u8, (usize::from(v) + c) as u8, "element {i}");
        }
    }

    #[test]
    fn one_table_for_any_shape_and_bad_tables_are_refused() {
        let tables: Vec<u8> = (0..TABLE_LEN).map(|v| 255 - v as u8).collect();
        let op = QuantizedLookup::new(DType::I8, DType::U8, tables).unwrap();
        let x: Vec<i8> = (0..100_003).map(|i| (i % 256) as u8 as i8).collect();
        let y = run(&op, Tensor::from_slice(&x, &[100_003]).unwrap());
        let got = y.to_vec::<u8>().unwrap();
        assert!(x.iter().zip(&got).all(|(&v, &o)| o == 255 - v as u8));
        assert!(QuantizedLookup::new(DType::U8, DType::U8, vec![0; 255]).is_err());
        assert!(QuantizedLookup::new(DType::F32, DType::U8, vec![0; 256]).is_err());
    }
}
