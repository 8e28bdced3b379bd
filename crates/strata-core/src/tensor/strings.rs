//! String tensors: UTF-8 text elements (ONNX STRING).
//!
//! Text has no fixed size, so it cannot live in byte storage or in a planned arena. A string
//! tensor holds a [`StringBuffer`], an immutable, reference-counted array of elements that the
//! tensor's layout indexes exactly as it indexes bytes: views (reshape, transpose, slice, expand,
//! …) share the buffer, and every operation that produces text builds a new buffer. Immutability
//! is what makes sharing sound without borrow tracking: nobody can write through a view.

use std::sync::Arc;

use super::copy::for_each_position;
use super::{Data, Layout, Tensor};
use crate::{CoreError, DType, Result, Shape};

/// The elements of one or more string tensors, shared and never mutated.
#[derive(Clone)]
pub struct StringBuffer(Arc<[Box<str>]>);

impl StringBuffer {
    pub fn new(elements: Vec<Box<str>>) -> Self {
        StringBuffer(elements.into())
    }

    /// Number of elements held (the positions a layout may index).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The element at a layout position.
    pub fn get(&self, position: usize) -> Option<&str> {
        self.0.get(position).map(|s| &**s)
    }

    /// True when both are the same buffer.
    pub fn shares_buffer(&self, other: &StringBuffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Checks that every position `layout` can reach holds an element.
    pub(crate) fn check_fits(&self, layout: &Layout, op: &'static str) -> Result<()> {
        let (lo, hi) = layout.span()?;
        if hi > self.len() {
            return Err(CoreError::OutOfBounds {
                op,
                offset: lo,
                end: hi,
                len: self.len(),
            });
        }
        Ok(())
    }
}

impl Tensor {
    /// A contiguous string tensor of `dims` holding `elements` in row-major order; their count
    /// must be the product of `dims`.
    pub fn from_strings<S: Into<Box<str>>>(
        dims: &[usize],
        elements: impl IntoIterator<Item = S>,
    ) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        let elements: Vec<Box<str>> = elements.into_iter().map(Into::into).collect();
        if elements.len() != shape.numel() {
            return Err(CoreError::InvalidView {
                op: "Tensor::from_strings",
                message: format!(
                    "{} strings given for dims {dims:?} ({} elements)",
                    elements.len(),
                    shape.numel()
                ),
            });
        }
        Ok(Tensor {
            data: Some(Data::Strings(StringBuffer::new(elements))),
            layout: Layout::contiguous(shape, 0),
            dtype: DType::String,
        })
    }

    /// The text buffer of a string tensor; an error for any other tensor.
    pub fn string_buffer(&self) -> Result<&StringBuffer> {
        match &self.data {
            Some(Data::Strings(strings)) => Ok(strings),
            Some(Data::Bytes(_)) => Err(CoreError::DTypeMismatch {
                op: "string_buffer",
                expected: DType::String,
                actual: self.dtype,
            }),
            None => Err(CoreError::Undefined {
                op: "string_buffer",
            }),
        }
    }

    /// Every element of a string tensor, in row-major logical order.
    pub fn strings(&self) -> Result<Vec<&str>> {
        let buffer = self.string_buffer()?;
        let mut out = Vec::with_capacity(self.numel());
        let dense = Layout::contiguous(self.shape().clone(), 0);
        // The layout was checked to fit the buffer when the view was made.
        for_each_position(&self.layout, &dense, |position, _| {
            out.push(buffer.get(position as usize).unwrap_or(""));
        });
        Ok(out)
    }

    /// The element of a string tensor at a logical index.
    pub fn string_at(&self, index: &[usize]) -> Result<&str> {
        let buffer = self.string_buffer()?;
        let position = self.layout.position(index)?;
        buffer.get(position).ok_or(CoreError::OutOfBounds {
            op: "string_at",
            offset: position,
            end: position + 1,
            len: buffer.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_index_the_shared_text() {
        let t = Tensor::from_strings(&[2, 3], ["a", "b", "c", "d", "e", "f"]).unwrap();
        assert_eq!(t.dtype(), DType::String);
        let tr = t.permute(&[1, 0]).unwrap();
        assert!(tr.shares_storage(&t));
        assert_eq!(tr.strings().unwrap(), ["a", "d", "b", "e", "c", "f"]);
        assert_eq!(tr.string_at(&[2, 1]).unwrap(), "f");
        let row = t.select(0, 1).unwrap();
        assert_eq!(row.strings().unwrap(), ["d", "e", "f"]);
        let wide = Tensor::from_strings(&[1], ["x"])
            .unwrap()
            .expand(&[3])
            .unwrap();
        assert_eq!(wide.strings().unwrap(), ["x", "x", "x"]);
        assert_eq!(t.contiguous().unwrap().strings().unwrap().len(), 6);
        assert_eq!(tr.contiguous().unwrap().strings().unwrap()[1], "d");
    }

    #[test]
    fn text_has_no_bytes_and_counts_must_match() {
        let t = Tensor::from_strings(&[2], ["é", ""]).unwrap();
        assert!(matches!(
            t.storage(),
            Err(CoreError::UnsupportedDType { .. })
        ));
        assert!(t.read_bytes("test").is_err());
        assert!(t.to_vec::<u8>().is_err());
        assert!(matches!(
            Tensor::from_strings(&[3], ["a"]),
            Err(CoreError::InvalidView { .. })
        ));
        let numbers = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        assert!(numbers.strings().is_err());
        let empty = Tensor::empty(
            &[2, 2],
            DType::String,
            crate::Device::Cpu,
            crate::MemoryKind::Default,
        )
        .unwrap();
        assert_eq!(empty.strings().unwrap(), ["", "", "", ""]);
    }
}
