//! Pooling: MaxPool (with optional argmax indices), AveragePool, LpPool, and their global
//! forms, N-d, with pads, auto_pad, strides, dilations and ceil_mode. All compute in f32;
//! MaxPool also in i8 and u8 (opset 12+).

use std::marker::PhantomData;

use strata_core::{DType, Device, Element};

use crate::kernels::resolve_auto_pad;
use crate::ops::pooling::global_pool::{global_average_pool, global_lp_pool, global_max_pool};
use crate::ops::pooling::max_pool_2d::max_pool_threaded;
use crate::ops::pooling::pool_kernel::MaxPoolElement;
use crate::ops::pooling::pool_kernel::{
    average_pool, lp_pool, max_pool, pool_output_dims, PoolParams, StorageOrder,
};
use crate::support::inputs::required;
use crate::{
    Attr, Attributes, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Average,
    Lp,
}

#[derive(Debug, Clone)]
pub struct Pool {
    kind: PoolKind,
    auto_pad: String,
    kernel_shape: Vec<usize>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    ceil_mode: bool,
    count_include_pad: bool,
    column_major_indices: bool,
    p: u32,
}

impl Pool {
    pub fn build(kind: PoolKind, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let name = pool_name(kind);
        let kernel_shape = a
            .usizes("kernel_shape")?
            .ok_or_else(|| OpError::attribute(name, "kernel_shape", "is required"))?;
        let p = a.int_or("p", 2)?;
        if kind == PoolKind::Lp && !(1..=64).contains(&p) {
            return Err(OpError::attribute(
                name,
                "p",
                format!("must be in 1..=64, got {p}"),
            ));
        }
        Ok(Box::new(Pool {
            kind,
            auto_pad: a.string_or("auto_pad", "NOTSET")?,
            kernel_shape,
            strides: a.usizes("strides")?,
            pads: a.usizes("pads")?,
            dilations: a.usizes("dilations")?,
            ceil_mode: a.int_or("ceil_mode", 0)? != 0,
            count_include_pad: a.int_or("count_include_pad", 0)? != 0,
            column_major_indices: a.int_or("storage_order", 0)? != 0,
            p: p as u32,
        }))
    }

    fn params(&self, x: &[usize]) -> OpResult<PoolParams> {
        let name = pool_name(self.kind);
        let spatial = x.len().saturating_sub(2);
        if x.len() < 3 || self.kernel_shape.len() != spatial {
            return Err(OpError::shape(
                name,
                format!(
                    "kernel_shape {:?} does not fit input {x:?}",
                    self.kernel_shape
                ),
            ));
        }
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; spatial]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; spatial]);
        let (pads_begin, pads_end) = match self.auto_pad.as_str() {
            "" | "NOTSET" => match &self.pads {
                Some(p) if p.len() == 2 * spatial => (p[..spatial].to_vec(), p[spatial..].to_vec()),
                Some(p) => {
                    return Err(OpError::attribute(
                        name,
                        "pads",
                        format!("{p:?} needs {} entries", 2 * spatial),
                    ))
                }
                None => (vec![0; spatial], vec![0; spatial]),
            },
            mode => resolve_auto_pad(mode, &x[2..], &self.kernel_shape, &strides, &dilations)?,
        };
        Ok(PoolParams {
            kernel: self.kernel_shape.clone(),
            strides,
            pads_begin,
            pads_end,
            dilations,
            ceil_mode: self.ceil_mode,
        })
    }
}

/// AveragePool without dilations runs on 8-bit tensors as com.microsoft QLinearAveragePool.
impl crate::HasQLinearForm for Pool {
    fn qlinear(&self) -> Option<Box<dyn Operator>> {
        let dilated = self
            .dilations
            .as_ref()
            .is_some_and(|d| d.iter().any(|&d| d != 1));
        if self.kind != PoolKind::Average || dilated {
            return None;
        }
        let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
        let mut attrs = Attributes::new("QLinearAveragePool")
            .with("kernel_shape", ints(&self.kernel_shape))
            .with("auto_pad", Attr::String(self.auto_pad.clone()))
            .with("ceil_mode", Attr::Int(i64::from(self.ceil_mode)))
            .with(
                "count_include_pad",
                Attr::Int(i64::from(self.count_include_pad)),
            );
        if let Some(s) = &self.strides {
            attrs.insert("strides", ints(s));
        }
        if let Some(p) = &self.pads {
            attrs.insert("pads", ints(p));
        }
        crate::ops::quantization::microsoft::qlinear_average_pool::QLinearAveragePool::build(
            &OpContext {
                op_type: "QLinearAveragePool",
                domain: "com.microsoft",
                opset: 1,
                attrs: &attrs,
                num_inputs: 5,
                num_outputs: 1,
            },
        )
        .ok()
    }
}

fn pool_name(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::Max => "MaxPool",
        PoolKind::Average => "AveragePool",
        PoolKind::Lp => "LpPool",
    }
}

impl Operator for Pool {
    fn op_type(&self) -> &str {
        pool_name(self.kind)
    }

    fn capabilities(&self) -> crate::OpCapabilities<'_> {
        crate::OpCapabilities {
            qlinear: Some(self),
            ..crate::OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(pool_name(self.kind), inputs, 0)?;
        let dims: Vec<Dim> = match x
            .dims
            .iter()
            .skip(2)
            .map(Dim::known)
            .collect::<Option<Vec<usize>>>()
        {
            Some(spatial) => {
                let mut concrete = vec![1, x.dims.get(1).and_then(Dim::known).unwrap_or(1)];
                concrete.extend(spatial);
                let out = pool_output_dims(&concrete, &self.params(&concrete)?)?;
                x.dims[..2]
                    .iter()
                    .cloned()
                    .chain(out[2..].iter().map(|&d| Dim::Known(d)))
                    .collect()
            }
            None => x.dims[..2.min(x.rank())]
                .iter()
                .cloned()
                .chain(std::iter::repeat_n(
                    Dim::Unknown,
                    x.rank().saturating_sub(2),
                ))
                .collect(),
        };
        let mut outs = vec![Fact::new(x.dtype, dims.clone())];
        if self.kind == PoolKind::Max {
            outs.push(Fact::new(DType::I64, dims));
        }
        Ok(outs)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let planned = match inputs[0].concrete() {
            Some(x) => Some((x.clone(), self.params(&x)?)),
            None => None,
        };
        let op = self.clone();
        match (self.kind, inputs[0].dtype, device) {
            (_, DType::F32, Device::Cpu) => Ok(Box::new(PoolKernel { op, planned })),
            (PoolKind::Max, DType::I8, Device::Cpu) => Ok(Box::new(MaxPoolKernel::<i8> {
                op,
                planned,
                _t: PhantomData,
            })),
            (PoolKind::Max, DType::U8, Device::Cpu) => Ok(Box::new(MaxPoolKernel::<u8> {
                op,
                planned,
                _t: PhantomData,
            })),
            (_, dtype, device) => Err(OpError::no_kernel(pool_name(self.kind), dtype, device)),
        }
    }
}

#[derive(Debug)]
struct PoolKernel {
    op: Pool,
    planned: Option<(Vec<usize>, PoolParams)>,
}

/// The parameters planned for `dims`, or recomputed when the input dims changed.
fn run_params<'a>(
    op: &Pool,
    planned: &'a Option<(Vec<usize>, PoolParams)>,
    dims: &[usize],
    fresh: &'a mut Option<PoolParams>,
) -> OpResult<&'a PoolParams> {
    match planned {
        Some((planned_dims, p)) if planned_dims.as_slice() == dims => Ok(p),
        _ => Ok(fresh.insert(op.params(dims)?)),
    }
}

/// MaxPool over `T` with the optional argmax indices output.
fn run_max_pool<T: Element + MaxPoolElement>(
    op: &Pool,
    planned: &Option<(Vec<usize>, PoolParams)>,
    io: &KernelIo<'_>,
) -> OpResult<()> {
    let (x, out) = (io.input(0), io.output(0));
    let mut fresh = None;
    let params = run_params(op, planned, x.dims(), &mut fresh)?;
    let not_contiguous = || OpError::kernel("MaxPool", "operands must be contiguous");
    let rx = x.read::<T>()?;
    let input = rx.as_slice().ok_or_else(not_contiguous)?;
    let mut wo = out.write::<T>()?;
    let output = wo.as_mut_slice().ok_or_else(not_contiguous)?;
    let order = if op.column_major_indices {
        StorageOrder::ColumnMajor
    } else {
        StorageOrder::RowMajor
    };
    let indices_tensor = io.output(1);
    if indices_tensor.is_defined() {
        let mut wi = indices_tensor.write::<i64>()?;
        max_pool(
            input,
            x.dims(),
            params,
            output,
            Some(wi.as_mut_slice().ok_or_else(not_contiguous)?),
            order,
        )?;
    } else {
        max_pool_threaded(input, x.dims(), params, output, io.threads)?;
    }
    Ok(())
}

impl Kernel for PoolKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if self.op.kind == PoolKind::Max {
            return run_max_pool::<f32>(&self.op, &self.planned, io);
        }
        // AveragePool or LpPool.
        let name = pool_name(self.op.kind);
        let (x, out) = (io.input(0), io.output(0));
        let mut fresh = None;
        let params = run_params(&self.op, &self.planned, x.dims(), &mut fresh)?;
        let not_contiguous = || OpError::kernel(name, "operands must be contiguous");
        let rx = x.read::<f32>()?;
        let input = rx.as_slice().ok_or_else(not_contiguous)?;
        let mut wo = out.write::<f32>()?;
        let output = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        if self.op.kind == PoolKind::Average {
            average_pool(
                input,
                x.dims(),
                params,
                self.op.count_include_pad,
                output,
                io.threads,
            )?;
        } else {
            lp_pool(input, x.dims(), params, self.op.p, output)?;
        }
        Ok(())
    }
}

/// MaxPool over the 8-bit integers (ONNX opset 12+).
#[derive(Debug)]
struct MaxPoolKernel<T> {
    op: Pool,
    planned: Option<(Vec<usize>, PoolParams)>,
    _t: PhantomData<T>,
}

impl<T: Element + MaxPoolElement> Kernel for MaxPoolKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        run_max_pool::<T>(&self.op, &self.planned, io)
    }
}

/// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: one value per (batch, channel) plane.
#[derive(Debug, Clone, Copy)]
pub struct GlobalPool {
    kind: PoolKind,
    p: u32,
}

impl GlobalPool {
    pub fn build(kind: PoolKind, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let p = ctx.attrs.int_or("p", 2)?;
        if !(1..=64).contains(&p) {
            return Err(OpError::attribute(
                "GlobalLpPool",
                "p",
                format!("must be in 1..=64, got {p}"),
            ));
        }
        Ok(Box::new(GlobalPool { kind, p: p as u32 }))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "GlobalMaxPool",
            PoolKind::Average => "GlobalAveragePool",
            PoolKind::Lp => "GlobalLpPool",
        }
    }
}

impl Operator for GlobalPool {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(self.name(), inputs, 0)?;
        if x.rank() < 2 {
            return Err(OpError::shape(
                self.name(),
                format!("input must have rank >= 2, got {:?}", x.dims),
            ));
        }
        let dims = x.dims[..2]
            .iter()
            .cloned()
            .chain(std::iter::repeat_n(Dim::Known(1), x.rank() - 2))
            .collect();
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(GlobalPoolKernel { op: *self })),
            (dtype, device) => Err(OpError::no_kernel(self.name(), dtype, device)),
        }
    }
}

#[derive(Debug)]
struct GlobalPoolKernel {
    op: GlobalPool,
}

impl Kernel for GlobalPoolKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let not_contiguous = || OpError::kernel(self.op.name(), "operands must be contiguous");
        let rx = x.read::<f32>()?;
        let input = rx.as_slice().ok_or_else(not_contiguous)?;
        let mut wo = out.write::<f32>()?;
        let output = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        match self.op.kind {
            PoolKind::Average => global_average_pool(input, x.dims(), output, io.threads)?,
            PoolKind::Max => global_max_pool(input, x.dims(), output, io.threads)?,
            PoolKind::Lp => global_lp_pool(input, x.dims(), self.op.p, output, io.threads)?,
        }
        Ok(())
    }
}
