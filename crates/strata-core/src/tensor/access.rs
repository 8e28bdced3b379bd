//! Typed access (T7): dtype-checked guards over tensor memory, fills, strided copies and
//! conversions from and to `Vec`.

use std::marker::PhantomData;

use super::copy::{copy_strided_bytes, for_each_position};
use super::{Layout, Tensor};
use crate::memory::block::{BlockRead, BlockWrite};
use crate::{CoreError, DType, Device, Element, MemoryKind, Result, Storage};

/// Shared access to the raw bytes of a tensor's storage; holds a read borrow.
pub struct BytesRead<'a> {
    _borrow: BlockRead<'a>,
    bytes: &'a [u8],
}

/// Exclusive access to the raw bytes of a tensor's storage; holds the write borrow.
pub struct BytesWrite<'a> {
    _borrow: BlockWrite<'a>,
    bytes: &'a mut [u8],
}

impl BytesRead<'_> {
    /// Every byte of the storage (the tensor's layout positions times the element size index it).
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl BytesWrite<'_> {
    pub fn bytes(&mut self) -> &mut [u8] {
        self.bytes
    }
}

/// Shared access to a tensor's elements; holds a read borrow of its memory.
pub struct ReadGuard<'a, T> {
    _borrow: BlockRead<'a>,
    data: &'a [T],
    layout: &'a Layout,
}

/// Exclusive access to a tensor's elements; holds the write borrow of its memory.
pub struct WriteGuard<'a, T> {
    _borrow: BlockWrite<'a>,
    data: &'a mut [T],
    layout: &'a Layout,
    _marker: PhantomData<T>,
}

impl<'a, T: bytemuck::Pod> ReadGuard<'a, T> {
    /// Every element the storage holds, indexed by layout positions.
    pub fn storage_data(&self) -> &[T] {
        self.data
    }

    pub fn layout(&self) -> &Layout {
        self.layout
    }

    /// The elements in order, when the layout is contiguous.
    pub fn as_slice(&self) -> Option<&[T]> {
        contiguous_range(self.layout).map(|r| &self.data[r])
    }

    /// The element at a logical index.
    pub fn get(&self, index: &[usize]) -> Result<T> {
        Ok(self.data[self.layout.position(index)?])
    }

    /// The elements in logical order: borrowed when the view is contiguous (the usual case),
    /// else copied (fallibly, as [`ReadGuard::to_vec`]).
    pub fn elements(&self) -> Result<std::borrow::Cow<'_, [T]>> {
        match self.as_slice() {
            Some(slice) => Ok(std::borrow::Cow::Borrowed(slice)),
            None => self.to_vec().map(std::borrow::Cow::Owned),
        }
    }

    /// The elements in logical row-major order. A broadcast view can name far more elements
    /// than its storage holds, so the copy is reserved fallibly.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = crate::try_vec_with_capacity(self.layout.numel())?;
        if let Some(slice) = self.as_slice() {
            out.extend_from_slice(slice);
            return Ok(out);
        }
        for_each_position(self.layout, self.layout, |s, _| {
            out.push(self.data[s as usize])
        });
        Ok(out)
    }
}

impl<'a, T: bytemuck::Pod> WriteGuard<'a, T> {
    pub fn storage_data(&mut self) -> &mut [T] {
        self.data
    }

    pub fn layout(&self) -> &Layout {
        self.layout
    }

    pub fn as_slice(&self) -> Option<&[T]> {
        contiguous_range(self.layout).map(|r| &self.data[r])
    }

    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        contiguous_range(self.layout).map(|r| &mut self.data[r])
    }

    pub fn get(&self, index: &[usize]) -> Result<T> {
        Ok(self.data[self.layout.position(index)?])
    }

    pub fn set(&mut self, index: &[usize], value: T) -> Result<()> {
        let pos = self.layout.position(index)?;
        self.data[pos] = value;
        Ok(())
    }

    /// Sets every element of the view (not the whole storage) to `value`.
    pub fn fill(&mut self, value: T) {
        if let Some(slice) = self.as_mut_slice() {
            slice.fill(value);
            return;
        }
        let data = &mut *self.data;
        for_each_position(self.layout, self.layout, |s, _| data[s as usize] = value);
    }
}

fn contiguous_range(layout: &Layout) -> Option<std::ops::Range<usize>> {
    layout
        .is_contiguous()
        .then(|| layout.offset()..layout.offset() + layout.numel())
}

/// The storage's bytes as `&[T]` (truncated to whole elements).
fn typed<T: bytemuck::Pod>(bytes: &[u8]) -> Result<&[T]> {
    let size = std::mem::size_of::<T>();
    if bytes.len() < size {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(&bytes[..bytes.len() / size * size]).map_err(|e| {
        CoreError::InvalidView {
            op: "typed access",
            message: format!("storage cannot be viewed as elements: {e}"),
        }
    })
}

fn typed_mut<T: bytemuck::Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    let size = std::mem::size_of::<T>();
    if bytes.len() < size {
        return Ok(&mut []);
    }
    let whole = bytes.len() / size * size;
    bytemuck::try_cast_slice_mut(&mut bytes[..whole]).map_err(|e| CoreError::InvalidView {
        op: "typed access",
        message: format!("storage cannot be viewed as elements: {e}"),
    })
}

fn host_storage<'t>(tensor: &'t Tensor, op: &'static str) -> Result<&'t Storage> {
    let storage = tensor.defined_storage(op)?;
    if !storage.device().is_cpu() {
        return Err(CoreError::DeviceMismatch {
            op,
            expected: Device::Cpu,
            actual: storage.device(),
        });
    }
    Ok(storage)
}

fn check_element<T: Element>(tensor: &Tensor, op: &'static str) -> Result<()> {
    if T::accepts(tensor.dtype) {
        Ok(())
    } else {
        Err(CoreError::DTypeMismatch {
            op,
            expected: T::DTYPE,
            actual: tensor.dtype,
        })
    }
}

impl Tensor {
    /// Shared, dtype-checked access to the elements of a host tensor.
    pub fn read<T: Element>(&self) -> Result<ReadGuard<'_, T>> {
        check_element::<T>(self, "read")?;
        self.read_raw("read")
    }

    /// Exclusive, dtype-checked access; bumps the version counter (outside inference mode).
    pub fn write<T: Element>(&self) -> Result<WriteGuard<'_, T>> {
        check_element::<T>(self, "write")?;
        self.write_raw("write")
    }

    /// Shared access with elements viewed as `T` of the dtype's element size, whatever the dtype
    /// (for kernels that move elements without interpreting them).
    pub fn read_raw<T: bytemuck::Pod>(&self, op: &'static str) -> Result<ReadGuard<'_, T>> {
        check_raw_size::<T>(self.dtype, op)?;
        let BytesRead { _borrow, bytes } = self.read_bytes(op)?;
        Ok(ReadGuard {
            _borrow,
            data: typed(bytes)?,
            layout: &self.layout,
        })
    }

    /// Exclusive access with elements viewed as `T` of the dtype's element size.
    pub fn write_raw<T: bytemuck::Pod>(&self, op: &'static str) -> Result<WriteGuard<'_, T>> {
        check_raw_size::<T>(self.dtype, op)?;
        let BytesWrite { _borrow, bytes } = self.write_bytes(op)?;
        Ok(WriteGuard {
            _borrow,
            data: typed_mut(bytes)?,
            layout: &self.layout,
            _marker: PhantomData,
        })
    }

    /// Shared access to the storage's bytes.
    pub fn read_bytes(&self, op: &'static str) -> Result<BytesRead<'_>> {
        let storage = host_storage(self, op)?;
        let borrow = storage.block().borrow_read(op)?;
        let bytes: &[u8] = if storage.is_empty() {
            &[]
        } else {
            // SAFETY: the storage range lies inside its block (checked by `sub_storage`), the
            // memory is initialized host memory, and the read borrow held by the guard excludes
            // writers for the guard's lifetime, which bounds the slice.
            unsafe { std::slice::from_raw_parts(storage.as_ptr(), storage.len()) }
        };
        Ok(BytesRead {
            _borrow: borrow,
            bytes,
        })
    }

    /// Exclusive access to the storage's bytes; bumps the version counter.
    pub fn write_bytes(&self, op: &'static str) -> Result<BytesWrite<'_>> {
        let storage = host_storage(self, op)?;
        let borrow = storage.block().borrow_write(op)?;
        let bytes: &mut [u8] = if storage.is_empty() {
            &mut []
        } else {
            // SAFETY: as in `read_bytes`, plus: the block is writable (borrow_write refuses
            // read-only memory) and the write borrow excludes every other reader and writer of
            // the block while the guard lives.
            unsafe {
                std::slice::from_raw_parts_mut(
                    storage.block().as_mut_ptr().add(storage.offset()),
                    storage.len(),
                )
            }
        };
        Ok(BytesWrite {
            _borrow: borrow,
            bytes,
        })
    }

    /// A host tensor (`Default` kind) holding a copy of `data` with `dims`.
    pub fn from_slice<T: Element>(data: &[T], dims: &[usize]) -> Result<Tensor> {
        Tensor::from_slice_in(data, dims, MemoryKind::Default)
    }

    /// Like [`Tensor::from_slice`] with an explicit memory kind.
    pub fn from_slice_in<T: Element>(
        data: &[T],
        dims: &[usize],
        kind: MemoryKind,
    ) -> Result<Tensor> {
        let t = Tensor::empty(dims, T::DTYPE, Device::Cpu, kind)?;
        if t.numel() != data.len() {
            return Err(CoreError::NumelMismatch {
                op: "from_slice",
                from: vec![data.len()],
                from_numel: data.len(),
                to: dims.to_vec(),
                to_numel: t.numel(),
            });
        }
        t.write::<T>()?
            .as_mut_slice()
            .expect("fresh tensors are contiguous")
            .copy_from_slice(data);
        Ok(t)
    }

    /// A rank-0 host tensor.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// A bool tensor from `data`.
    pub fn from_bools(data: &[bool], dims: &[usize]) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().map(|&b| b as u8).collect();
        let t = Tensor::from_slice(&bytes, dims)?;
        Ok(Tensor {
            dtype: DType::Bool,
            ..t
        })
    }

    /// The elements in logical order (a copy), dtype-checked.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read::<T>()?.to_vec()
    }

    /// The elements of a bool tensor; any byte other than 0 or 1 is an error.
    pub fn to_bools(&self) -> Result<Vec<bool>> {
        if self.dtype != DType::Bool {
            return Err(CoreError::DTypeMismatch {
                op: "to_bools",
                expected: DType::Bool,
                actual: self.dtype,
            });
        }
        self.read::<u8>()?
            .to_vec()?
            .into_iter()
            .enumerate()
            .map(|(index, value)| match value {
                0 => Ok(false),
                1 => Ok(true),
                value => Err(CoreError::InvalidBool { index, value }),
            })
            .collect()
    }

    /// Sets every element of this view to `value`.
    pub fn fill<T: Element>(&self, value: T) -> Result<()> {
        self.write::<T>()?.fill(value);
        Ok(())
    }

    /// Sets every element of this view to zero, for any dtype.
    pub fn fill_zero(&self) -> Result<()> {
        if self.dtype.is_quantized() || self.is_contiguous() {
            let start =
                self.storage_offset() / self.dtype.block_size() * self.dtype.size_in_bytes();
            let len = self.size_in_bytes()?;
            self.write_bytes("fill_zero")?.bytes()[start..start + len].fill(0);
            return Ok(());
        }
        match self.dtype.size_in_bytes() {
            1 => self.write_raw::<u8>("fill_zero")?.fill(0),
            2 => self.write_raw::<u16>("fill_zero")?.fill(0),
            4 => self.write_raw::<u32>("fill_zero")?.fill(0),
            _ => self.write_raw::<u64>("fill_zero")?.fill(0),
        }
        Ok(())
    }

    /// A contiguous copy of this tensor in fresh memory of (`device`, `kind`), independent of
    /// this one's storage. Text is immutable, so a string tensor is shared, not copied.
    pub fn detached(&self, device: crate::Device, kind: crate::MemoryKind) -> Result<Tensor> {
        if self.dtype.is_string() {
            self.string_buffer()?;
            return Ok(self.clone());
        }
        let out = Tensor::empty(self.dims(), self.dtype, device, kind)?;
        out.copy_from(self)?;
        Ok(out)
    }

    /// Copies `src`'s elements into this tensor's view; dims and dtype must match. Layouts may
    /// differ arbitrarily. Copying between views of the same memory is a borrow error.
    pub fn copy_from(&self, src: &Tensor) -> Result<()> {
        if src.dtype != self.dtype {
            return Err(CoreError::DTypeMismatch {
                op: "copy_from",
                expected: self.dtype,
                actual: src.dtype,
            });
        }
        if src.dims() != self.dims() {
            return Err(CoreError::ShapeMismatch {
                op: "copy_from",
                expected: self.dims().to_vec(),
                actual: src.dims().to_vec(),
            });
        }
        let (elem, src_layout, dst_layout) = if self.dtype.is_quantized() {
            // Whole-block contiguous layouts only (enforced at construction): copy as bytes.
            let bytes = self.size_in_bytes()?;
            let start =
                |t: &Tensor| t.storage_offset() / t.dtype.block_size() * t.dtype.size_in_bytes();
            let shape = crate::Shape::new(&[bytes])?;
            (
                1,
                Layout::contiguous(shape.clone(), start(src)),
                Layout::contiguous(shape, start(self)),
            )
        } else {
            (
                self.dtype.size_in_bytes(),
                src.layout.clone(),
                self.layout.clone(),
            )
        };
        let input = src.read_bytes("copy_from")?;
        let mut output = self.write_bytes("copy_from")?;
        copy_strided_bytes(
            input.bytes(),
            &src_layout,
            output.bytes(),
            &dst_layout,
            elem,
        );
        Ok(())
    }
}

/// Raw access as `T` is allowed when `T` has the dtype's element size.
fn check_raw_size<T>(dtype: DType, op: &'static str) -> Result<()> {
    if !dtype.is_quantized() && std::mem::size_of::<T>() == dtype.size_in_bytes() {
        Ok(())
    } else {
        Err(CoreError::UnsupportedDType {
            op,
            dtype,
            reason: "element size differs from the requested access type",
        })
    }
}
