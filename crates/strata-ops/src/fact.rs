//! Facts (I2): what is known about a value before running — dtype, a shape whose dims may be
//! symbolic, and, for constants and shape computations, the value itself.

use std::fmt;

use strata_core::{DType, Tensor};

use crate::{OpError, OpResult};

/// One dimension: a number, a named symbol (equal names are equal sizes), or unknown.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    Known(usize),
    Sym(String),
    Unknown,
}

impl Dim {
    /// A named dim (`Dim::sym("N")`).
    pub fn sym(name: impl Into<String>) -> Dim {
        Dim::Sym(name.into())
    }

    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(d) => Some(*d),
            _ => None,
        }
    }

    /// Applies `f` to a known dim; symbolic dims become unknown (we do not do dim algebra).
    pub fn map(&self, f: impl FnOnce(usize) -> usize) -> Dim {
        match self {
            Dim::Known(d) => Dim::Known(f(*d)),
            _ => Dim::Unknown,
        }
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(d) => write!(f, "{d}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

impl From<usize> for Dim {
    fn from(d: usize) -> Self {
        Dim::Known(d)
    }
}

/// What is known about a value at plan time.
#[derive(Clone)]
pub struct Fact {
    pub dtype: DType,
    pub dims: Vec<Dim>,
    /// The value, when it is a constant or computable from shapes alone.
    pub value: Option<Tensor>,
    defined: bool,
}

impl Fact {
    pub fn new(dtype: DType, dims: Vec<Dim>) -> Self {
        Fact {
            dtype,
            dims,
            value: None,
            defined: true,
        }
    }

    /// A fact with fully known dims.
    pub fn known(dtype: DType, dims: &[usize]) -> Self {
        Fact::new(dtype, dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// A constant: dims and value from `tensor`.
    pub fn constant(tensor: Tensor) -> Self {
        let mut fact = Fact::known(tensor.dtype(), tensor.dims());
        fact.value = Some(tensor);
        fact
    }

    /// Stands for an omitted optional input.
    pub fn absent() -> Self {
        Fact {
            dtype: DType::F32,
            dims: Vec::new(),
            value: None,
            defined: false,
        }
    }

    pub fn is_defined(&self) -> bool {
        self.defined
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The dims if all are known.
    pub fn concrete(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(Dim::known).collect()
    }

    /// The dims, or an error naming the op when some are not known.
    pub fn concrete_or_err(&self, op: &str) -> OpResult<Vec<usize>> {
        self.concrete()
            .ok_or_else(|| OpError::shape(op, format!("needs known dims, got {:?}", self.dims)))
    }

    /// Known element count (`None` too when the dims' product overflows: no such tensor can
    /// exist, and whatever would allocate it fails with its own size error).
    pub fn numel(&self) -> Option<usize> {
        self.concrete()
            .and_then(|d| strata_core::shape::checked_numel(&d).ok())
    }
}

impl fmt::Debug for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.defined {
            return f.write_str("absent");
        }
        write!(f, "{}{:?}", self.dtype, self.dims)?;
        if self.value.is_some() {
            f.write_str(" const")?;
        }
        Ok(())
    }
}

/// Reads an integer tensor value (i64 or i32) as `Vec<i64>`.
pub fn int_values(op: &str, tensor: &Tensor) -> OpResult<Vec<i64>> {
    match tensor.dtype() {
        DType::I64 => Ok(tensor.to_vec::<i64>()?),
        DType::I32 => Ok(tensor.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        other => Err(OpError::shape(
            op,
            format!("expected an int64 or int32 tensor, got {other}"),
        )),
    }
}

/// Numpy-style broadcasting of two symbolic shapes.
pub fn broadcast_dims(op: &str, a: &[Dim], b: &[Dim]) -> OpResult<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let at = |s: &[Dim], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank].clone()
        } else {
            Dim::Known(1)
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y && x != Dim::Unknown => Ok(x),
            (Dim::Known(1), y) => Ok(y),
            (x, Dim::Known(1)) => Ok(x),
            (Dim::Known(x), Dim::Known(y)) => Err(OpError::shape(
                op,
                format!("cannot broadcast {a:?} with {b:?}: {x} vs {y} at axis {i}"),
            )),
            (Dim::Known(x), _) | (_, Dim::Known(x)) => Ok(Dim::Known(x)),
            _ => Ok(Dim::Unknown),
        })
        .collect()
}

/// Numpy-style broadcasting of concrete shapes.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(OpError::shape(
                op,
                format!("cannot broadcast {a:?} with {b:?}: {x} vs {y} at axis {i}"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_broadcast() {
        let n = Dim::Sym("N".into());
        let out = broadcast_dims(
            "Add",
            &[n.clone(), Dim::Known(3)],
            &[Dim::Known(1), Dim::Known(3)],
        )
        .unwrap();
        assert_eq!(out, vec![n.clone(), Dim::Known(3)]);
        let out = broadcast_dims(
            "Add",
            &[Dim::Known(3)],
            &[n.clone(), Dim::Known(2), Dim::Known(1)],
        )
        .unwrap();
        assert_eq!(out, vec![n, Dim::Known(2), Dim::Known(3)]);
        assert!(broadcast_dims("Add", &[Dim::Known(2)], &[Dim::Known(3)]).is_err());
        assert_eq!(
            broadcast_shapes("Add", &[4, 1, 3], &[5, 1]).unwrap(),
            vec![4, 5, 3]
        );
    }
}
