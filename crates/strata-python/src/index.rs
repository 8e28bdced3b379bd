//! Basic indexing of `strata.Tensor` (`t[0]`, `t[:, 1:3]`, `t[..., ::-1]`, `t[None]`): views
//! sharing the tensor's memory and version counter, as numpy's and PyTorch's basic indexing
//! gives; assignment through them (`t[0] = 1.0`, `t[:, :2] = other`, broadcast and converted to
//! the tensor's dtype; one version bump). Indexing by tensors or lists is refused with a pointer
//! to `index_select`, `gather` and `strata.where`.

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PySlice, PyTuple};
use strata_core::Tensor;

use crate::eager::operand::Operand;
use crate::errors;
use crate::tensor::PyTensor;

/// One item of an index.
enum Item {
    Index(isize),
    Slice(isize, isize, isize),
    Ellipsis,
    NewAxis,
}

fn item(value: &Bound<'_, PyAny>) -> PyResult<Item> {
    if value.is_none() {
        return Ok(Item::NewAxis);
    }
    if value.is_instance_of::<PyEllipsis>() {
        return Ok(Item::Ellipsis);
    }
    if let Ok(slice) = value.cast::<PySlice>() {
        let part = |name: &str| -> PyResult<Option<isize>> {
            let v = slice.getattr(name)?;
            if v.is_none() {
                Ok(None)
            } else {
                v.extract().map(Some)
            }
        };
        let step = part("step")?.unwrap_or(1);
        if step == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "slice step cannot be zero",
            ));
        }
        // Omitted bounds: the whole axis in the step's direction (the view clamps them).
        let (from, to) = if step > 0 {
            (0, isize::MAX)
        } else {
            (isize::MAX, isize::MIN)
        };
        return Ok(Item::Slice(
            part("start")?.unwrap_or(from),
            part("stop")?.unwrap_or(to),
            step,
        ));
    }
    if value.is_instance_of::<pyo3::types::PyBool>() || value.is_instance_of::<PyTensor>() {
        return Err(unsupported(value));
    }
    match value.call_method0("__index__") {
        Ok(i) => Ok(Item::Index(i.extract()?)),
        Err(_) => Err(unsupported(value)),
    }
}

fn unsupported(value: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "strata.Tensor takes ints, slices, None and ... as indices, not {}; for indexing by \
         tensors use index_select, gather or strata.where",
        value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    ))
}

/// The view `items` pick out of `t`.
fn view(t: &Tensor, items: &[Item]) -> PyResult<Tensor> {
    let consuming = items
        .iter()
        .filter(|i| matches!(i, Item::Index(_) | Item::Slice(..)))
        .count();
    if items.iter().filter(|i| matches!(i, Item::Ellipsis)).count() > 1 {
        return Err(PyIndexError::new_err(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    if consuming > t.rank() {
        return Err(PyIndexError::new_err(format!(
            "too many indices for a tensor of rank {}: {consuming}",
            t.rank()
        )));
    }
    let mut out = t.clone();
    let mut axis = 0isize;
    for item in items {
        out = match *item {
            Item::Index(i) => {
                let size = out.dims()[axis as usize] as isize;
                if i < -size || i >= size {
                    return Err(PyIndexError::new_err(format!(
                        "index {i} is out of bounds for dim {axis} of size {size}"
                    )));
                }
                out.select(axis, i)
            }
            Item::Slice(start, end, step) => {
                axis += 1;
                out.slice(axis - 1, start, end, step)
            }
            Item::Ellipsis => {
                axis += (t.rank() - consuming) as isize;
                Ok(out)
            }
            Item::NewAxis => {
                axis += 1;
                out.unsqueeze(axis - 1)
            }
        }
        .map_err(|e| errors::core(&e))?;
    }
    Ok(out)
}

fn items(key: &Bound<'_, PyAny>) -> PyResult<Vec<Item>> {
    match key.cast::<PyTuple>() {
        Ok(tuple) => tuple.iter().map(|v| item(&v)).collect(),
        Err(_) => Ok(vec![item(key)?]),
    }
}

/// `value` (a tensor or a number) in `target`'s dtype, broadcast to its dims, and not sharing
/// its memory (reading and writing one block at once is a borrow conflict).
fn source(target: &Tensor, value: &Operand<'_>) -> strata_ops::OpResult<Tensor> {
    use strata_ops::prelude::EagerConvert;
    let src = match value {
        Operand::Tensor(t) if t.dtype() == target.dtype() => (*t).clone(),
        Operand::Tensor(t) => t.to_dtype(target.dtype())?,
        Operand::Scalar(s) => s.to_tensor(target.dtype())?,
    };
    let src = src.expand(target.dims())?;
    if src.shares_storage(target) {
        Ok(src
            .contiguous()?
            .detached(src.device(), src.memory_kind())?)
    } else {
        Ok(src)
    }
}

#[pymethods]
impl PyTensor {
    /// Basic indexing: a view (shares memory and the version counter).
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        view(&self.inner, &items(key)?).map(PyTensor::from)
    }

    /// `t[key] = value`: writes `value` (a tensor or a number; broadcast, converted to this
    /// tensor's dtype) into the view `key` picks.
    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = view(&self.inner, &items(key)?)?;
        let value = Operand::required("setitem", value)?;
        let src = source(&target, &value).map_err(|e| errors::eager(&e))?;
        target.copy_from(&src).map_err(|e| errors::core(&e))
    }
}
