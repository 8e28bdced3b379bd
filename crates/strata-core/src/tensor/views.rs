//! Zero-copy views (T3): every method returns a tensor sharing this one's storage, except
//! `contiguous` and `reshape`, which copy only when the layout forces it.

use super::{Layout, Tensor};
use crate::{AllocatorRegistry, Result};

impl Tensor {
    /// Same elements with new dims; an error on element-count mismatch or when the strides
    /// cannot express the new shape without a copy (use `reshape` for that).
    #[inline]
    pub fn view(&self, dims: &[usize]) -> Result<Tensor> {
        self.derive("view", self.layout.view(dims)?)
    }

    /// Like `view`, but copies into a contiguous tensor when a view is impossible.
    pub fn reshape(&self, dims: &[usize]) -> Result<Tensor> {
        match self.layout.view(dims) {
            Ok(layout) => self.derive("reshape", layout),
            Err(crate::CoreError::InvalidView { .. }) => self.contiguous()?.view(dims),
            Err(e) => Err(e),
        }
    }

    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        self.derive("permute", self.layout.permute(perm)?)
    }

    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        self.derive("transpose", self.layout.transpose(a, b)?)
    }

    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        self.derive("narrow", self.layout.narrow(axis, start, len)?)
    }

    /// Python-style `start:end:step` on `axis` (see [`Layout::slice`]).
    pub fn slice(&self, axis: isize, start: isize, end: isize, step: isize) -> Result<Tensor> {
        self.derive("slice", self.layout.slice(axis, start, end, step)?)
    }

    pub fn select(&self, axis: isize, index: isize) -> Result<Tensor> {
        self.derive("select", self.layout.select(axis, index)?)
    }

    /// Broadcasts to `dims` with stride-0 axes.
    pub fn expand(&self, dims: &[usize]) -> Result<Tensor> {
        self.derive("expand", self.layout.expand(dims)?)
    }

    pub fn squeeze(&self, axis: Option<isize>) -> Result<Tensor> {
        self.derive("squeeze", self.layout.squeeze(axis)?)
    }

    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        self.derive("unsqueeze", self.layout.unsqueeze(axis)?)
    }

    /// Merges axes `start..=end`, copying only if the strides do not allow a view.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        match self.layout.flatten(start, end) {
            Ok(layout) => self.derive("flatten", layout),
            // Only a strided layout can fail to flatten for want of a copy; a contiguous one
            // failing means the axes are invalid (and retrying would recurse forever).
            Err(crate::CoreError::InvalidView { .. }) if !self.layout.is_contiguous() => {
                self.contiguous()?.flatten(start, end)
            }
            Err(e) => Err(e),
        }
    }

    /// This tensor if already contiguous (a cheap clone), otherwise a contiguous copy on the
    /// same device and memory kind.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.dtype.is_string() {
            if self.layout.is_contiguous() {
                return Ok(self.clone());
            }
            return Tensor::from_strings(self.dims(), self.strings()?);
        }
        if self.layout.is_contiguous() {
            self.defined_storage("contiguous")?;
            return Ok(self.clone());
        }
        let storage = self.defined_storage("contiguous")?;
        let out = Tensor::empty_in(
            AllocatorRegistry::global(),
            self.dims(),
            self.dtype,
            storage.device(),
            storage.kind(),
        )?;
        out.copy_from(self)?;
        Ok(out)
    }

    /// A view with an explicit layout over the same storage (checked to fit).
    pub fn as_strided(&self, layout: Layout) -> Result<Tensor> {
        self.with_checked_layout("as_strided", layout)
    }
}
