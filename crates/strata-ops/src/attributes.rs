//! Node attributes, parsed once at import and validated by each operator's constructor.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use strata_core::Tensor;

use crate::{OpError, OpResult};

/// One attribute value, as ONNX defines them.
#[derive(Clone)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(Tensor),
    /// A subgraph (control flow); its type belongs to the runtime that imported it.
    Graph(Arc<dyn Any + Send + Sync>),
}

impl fmt::Debug for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => write!(f, "{v}"),
            Attr::String(v) => write!(f, "{v:?}"),
            Attr::Ints(v) => write!(f, "{v:?}"),
            Attr::Floats(v) => write!(f, "{v:?}"),
            Attr::Strings(v) => write!(f, "{v:?}"),
            Attr::Tensor(t) => write!(f, "{t:?}"),
            Attr::Graph(_) => f.write_str("<graph>"),
        }
    }
}

/// The attributes of one node, with typed getters whose errors name the op and attribute.
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    op: String,
    entries: Vec<(String, Attr)>,
}

impl Attributes {
    pub fn new(op: &str) -> Self {
        Attributes {
            op: op.to_string(),
            entries: Vec::new(),
        }
    }

    pub fn with(mut self, name: &str, value: Attr) -> Self {
        self.insert(name, value);
        self
    }

    pub fn insert(&mut self, name: &str, value: Attr) {
        self.entries.retain(|(n, _)| n != name);
        self.entries.push((name.to_string(), value));
    }

    pub fn op(&self) -> &str {
        &self.op
    }

    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    fn wrong(&self, name: &str, expected: &str, got: &Attr) -> OpError {
        OpError::attribute(&self.op, name, format!("expected {expected}, got {got:?}"))
    }

    pub fn int(&self, name: &str) -> OpResult<Option<i64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(self.wrong(name, "an int", other)),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> OpResult<i64> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    pub fn float(&self, name: &str) -> OpResult<Option<f32>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(*v)),
            Some(other) => Err(self.wrong(name, "a float", other)),
        }
    }

    pub fn float_or(&self, name: &str, default: f32) -> OpResult<f32> {
        Ok(self.float(name)?.unwrap_or(default))
    }

    pub fn string(&self, name: &str) -> OpResult<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::String(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong(name, "a string", other)),
        }
    }

    pub fn string_or(&self, name: &str, default: &str) -> OpResult<String> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    pub fn ints(&self, name: &str) -> OpResult<Option<Vec<i64>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong(name, "a list of ints", other)),
        }
    }

    pub fn floats(&self, name: &str) -> OpResult<Option<Vec<f32>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong(name, "a list of floats", other)),
        }
    }

    pub fn strings(&self, name: &str) -> OpResult<Option<Vec<String>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Strings(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong(name, "a list of strings", other)),
        }
    }

    pub fn tensor(&self, name: &str) -> OpResult<Option<Tensor>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t.clone())),
            Some(other) => Err(self.wrong(name, "a tensor", other)),
        }
    }

    /// A list of non-negative ints as `usize` (e.g. kernel_shape, strides).
    pub fn usizes(&self, name: &str) -> OpResult<Option<Vec<usize>>> {
        self.ints(name)?
            .map(|v| {
                v.iter()
                    .map(|&x| {
                        usize::try_from(x).map_err(|_| {
                            OpError::attribute(
                                &self.op,
                                name,
                                format!("negative value {x} in {v:?}"),
                            )
                        })
                    })
                    .collect()
            })
            .transpose()
    }
}
