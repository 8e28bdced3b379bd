//! Tensors (T1–T7): a cheap handle over storage plus a strided layout.

mod access;
mod copy;
mod layout;
mod npy;
mod strings;
mod views;

pub use access::{BytesRead, BytesWrite, ReadGuard, WriteGuard};
pub use copy::copy_strided_bytes;
pub use layout::Layout;
pub use strings::StringBuffer;

use std::fmt;

use crate::align::DEFAULT_ALIGNMENT;
use crate::shape::INLINE_DIMS;
use crate::{AllocatorRegistry, CoreError, DType, Device, MemoryKind, Result, Shape, Storage};

/// A tensor handle: storage, a strided layout over it, and a dtype.
///
/// Cloning copies the small inline metadata and bumps the storage's reference count; it never
/// copies data. Views share storage (and so the version counter) with the tensor they come
/// from. An undefined tensor (`Tensor::undefined()`) stands for "no tensor here" (e.g. an omitted
/// optional input) and every data access on it is an error.
#[derive(Clone)]
pub struct Tensor {
    data: Option<Data>,
    layout: Layout,
    dtype: DType,
}

/// Where a defined tensor's elements live.
#[derive(Clone)]
enum Data {
    /// Every dtype but `String`: bytes of a memory block.
    Bytes(Storage),
    /// `String`: immutable text elements, indexed by layout positions like bytes are.
    Strings(StringBuffer),
}

/// The message for byte access to a string tensor.
const STRINGS_HAVE_NO_BYTES: &str =
    "string tensors hold text elements, not bytes; use the string accessors";

impl Tensor {
    /// The undefined tensor.
    pub fn undefined() -> Self {
        Tensor {
            data: None,
            layout: Layout::contiguous(Shape::default(), 0),
            dtype: DType::F32,
        }
    }

    /// The one allocation entry point (M9): a contiguous tensor of `dims` and `dtype` on `device`,
    /// from the global registry's allocator for (device, kind). Contents are unspecified (but
    /// initialized memory); use [`Tensor::zeros`] for zeros.
    #[inline]
    pub fn empty(dims: &[usize], dtype: DType, device: Device, kind: MemoryKind) -> Result<Tensor> {
        Tensor::empty_in(AllocatorRegistry::global(), dims, dtype, device, kind)
    }

    /// Like [`Tensor::empty`], from a given registry.
    #[inline]
    pub fn empty_in(
        registry: &AllocatorRegistry,
        dims: &[usize],
        dtype: DType,
        device: Device,
        kind: MemoryKind,
    ) -> Result<Tensor> {
        // The element count and bytes first, and the shape only after the allocation, so that
        // the handle is built in one go, with nothing to carry across the calls.
        let numel = match crate::shape::numel_of(dims) {
            Ok(numel) => numel,
            Err(err) => return Err(name_allocation(err, dims, dtype, device, kind)),
        };
        let bytes = match dtype.bytes_for(numel) {
            Ok(bytes) => bytes,
            Err(err) => return Err(name_allocation(err, dims, dtype, device, kind)),
        };
        if dtype.is_string() {
            return Tensor::empty_strings(dims, numel);
        }
        let block = registry.allocate(device, kind, bytes, DEFAULT_ALIGNMENT)?;
        let data = Some(Data::Bytes(Storage::new(block)));
        if dims.len() > INLINE_DIMS {
            return Ok(Tensor::contiguous_spilled(data, dims, numel, dtype));
        }
        Ok(Tensor {
            data,
            layout: Layout::contiguous_inline(dims, numel),
            dtype,
        })
    }

    /// The end of [`Tensor::empty_in`] for ranks beyond the inline dims.
    #[cold]
    fn contiguous_spilled(data: Option<Data>, dims: &[usize], numel: usize, dtype: DType) -> Self {
        Tensor {
            data,
            layout: Layout::contiguous(Shape::with_numel(dims, numel), 0),
            dtype,
        }
    }

    /// Text never lives in device memory blocks: "unspecified contents" are empty strings.
    #[cold]
    fn empty_strings(dims: &[usize], numel: usize) -> Result<Tensor> {
        Tensor::from_strings(dims, crate::try_vec_filled(numel, String::new())?)
    }

    /// A zero-filled host tensor of `Default` kind.
    pub fn zeros(dims: &[usize], dtype: DType) -> Result<Tensor> {
        let t = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Default)?;
        t.fill_zero()?;
        Ok(t)
    }

    /// Binds a contiguous tensor of `dims` and `dtype` into `storage` at `byte_offset` (T6),
    /// without copying. The range must lie inside the storage and be aligned for the dtype.
    pub fn bind(
        storage: &Storage,
        byte_offset: usize,
        dims: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        let bytes = shape.size_in_bytes(dtype)?;
        let end = byte_offset
            .checked_add(bytes)
            .filter(|&end| end <= storage.len())
            .ok_or_else(|| CoreError::OutOfBounds {
                op: "Tensor::bind",
                offset: byte_offset,
                end: byte_offset.saturating_add(bytes),
                len: storage.len(),
            })?;
        debug_assert!(end <= storage.len());
        let sub = storage.sub_storage(byte_offset, bytes)?;
        Tensor::from_storage(sub, Layout::contiguous(shape, 0), dtype)
    }

    /// A tensor over `storage` with any layout; checks that every element the layout can reach
    /// lies inside the storage and that the storage is aligned for the dtype.
    pub fn from_storage(storage: Storage, layout: Layout, dtype: DType) -> Result<Tensor> {
        if dtype.is_string() {
            return Err(CoreError::UnsupportedDType {
                op: "Tensor::from_storage",
                dtype,
                reason: STRINGS_HAVE_NO_BYTES,
            });
        }
        check_fits(&storage, &layout, dtype, "Tensor::from_storage")?;
        let align = element_align(dtype);
        if !(storage.as_ptr() as usize).is_multiple_of(align) {
            return Err(CoreError::InvalidView {
                op: "Tensor::from_storage",
                message: format!(
                    "storage address is not aligned to {align} bytes as {dtype} requires"
                ),
            });
        }
        Ok(Tensor {
            data: Some(Data::Bytes(storage)),
            layout,
            dtype,
        })
    }

    #[inline]
    pub fn is_defined(&self) -> bool {
        self.data.is_some()
    }

    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    #[inline]
    pub fn shape(&self) -> &Shape {
        self.layout.shape()
    }

    #[inline]
    pub fn dims(&self) -> &[usize] {
        self.layout.dims()
    }

    #[inline]
    pub fn strides(&self) -> &[isize] {
        self.layout.strides()
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    #[inline]
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    #[inline]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element offset of the first element within the storage.
    #[inline]
    pub fn storage_offset(&self) -> usize {
        self.layout.offset()
    }

    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The storage; an error for the undefined tensor and for string tensors.
    pub fn storage(&self) -> Result<&Storage> {
        self.defined_storage("storage")
    }

    /// The byte storage, if this tensor has one.
    fn bytes_storage(&self) -> Option<&Storage> {
        match &self.data {
            Some(Data::Bytes(storage)) => Some(storage),
            _ => None,
        }
    }

    /// Host memory for text, the device for everything else.
    pub fn device(&self) -> Device {
        self.bytes_storage().map_or(Device::Cpu, Storage::device)
    }

    /// The memory kind of the storage (`Default` for the undefined tensor and for text).
    pub fn memory_kind(&self) -> MemoryKind {
        self.bytes_storage()
            .map_or(MemoryKind::Default, Storage::kind)
    }

    /// The version counter shared with every view of the same memory (T4); text is immutable
    /// and stays at 0.
    pub fn version(&self) -> u64 {
        self.bytes_storage().map_or(0, |s| s.block().version())
    }

    /// Bytes the elements occupy (numel in this dtype).
    pub fn size_in_bytes(&self) -> Result<usize> {
        self.dtype.bytes_for(self.numel())
    }

    /// Bytes available from the first element to the end of the storage (T5).
    pub fn capacity_bytes(&self) -> usize {
        let start = self.layout.offset() / self.dtype.block_size() * self.dtype.size_in_bytes();
        match &self.data {
            Some(Data::Bytes(s)) => s.len().saturating_sub(start),
            Some(Data::Strings(strings)) => strings
                .len()
                .saturating_sub(self.layout.offset())
                .saturating_mul(self.dtype.size_in_bytes()),
            None => 0,
        }
    }

    /// True when both tensors use the same memory block (or the same text buffer).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        match (&self.data, &other.data) {
            (Some(Data::Bytes(a)), Some(Data::Bytes(b))) => a.shares_block(b),
            (Some(Data::Strings(a)), Some(Data::Strings(b))) => a.shares_buffer(b),
            _ => false,
        }
    }

    /// Changes this handle's dims in place to a contiguous layout, reusing the storage when it is
    /// large enough and reallocating (same device and kind, from the global registry) otherwise.
    /// Contents are preserved only when no reallocation happens.
    pub fn resize(&mut self, dims: &[usize]) -> Result<()> {
        self.resize_in(AllocatorRegistry::global(), dims)
    }

    /// Like [`Tensor::resize`], reallocating from `registry`.
    pub fn resize_in(&mut self, registry: &AllocatorRegistry, dims: &[usize]) -> Result<()> {
        let storage = self.defined_storage("resize")?;
        let shape = Shape::new(dims)?;
        let needed = shape.size_in_bytes(self.dtype)?;
        if self.layout.is_contiguous() && needed <= self.capacity_bytes() {
            self.layout = Layout::contiguous(shape, self.layout.offset());
            return Ok(());
        }
        let block =
            registry.allocate(storage.device(), storage.kind(), needed, DEFAULT_ALIGNMENT)?;
        self.data = Some(Data::Bytes(Storage::new(block)));
        self.layout = Layout::contiguous(shape, 0);
        Ok(())
    }

    /// Sets contiguous dims without ever allocating; an error when the storage is too small.
    pub fn set_shape_metadata(&mut self, dims: &[usize]) -> Result<()> {
        self.defined_storage("set_shape_metadata")?;
        let shape = Shape::new(dims)?;
        let needed = shape.size_in_bytes(self.dtype)?;
        let capacity = self.capacity_bytes();
        if needed > capacity {
            return Err(CoreError::CapacityExceeded {
                op: "set_shape_metadata",
                needed,
                capacity,
            });
        }
        self.layout = Layout::contiguous(shape, self.layout.offset());
        Ok(())
    }

    /// A tensor sharing this one's storage with any layout, checked to fit the storage.
    pub(crate) fn with_checked_layout(&self, op: &'static str, layout: Layout) -> Result<Tensor> {
        match &self.data {
            None => return Err(CoreError::Undefined { op }),
            Some(Data::Bytes(storage)) => check_fits(storage, &layout, self.dtype, op)?,
            Some(Data::Strings(strings)) => strings.check_fits(&layout, op)?,
        }
        Ok(Tensor {
            data: self.data.clone(),
            layout,
            dtype: self.dtype,
        })
    }

    /// A view sharing this one's storage, with a layout derived from this tensor's by one of the
    /// view operations (view, permute, narrow, slice, select, expand, squeeze, unsqueeze). Such a
    /// layout reaches only positions this one reaches (or none, keeping this offset), so it fits
    /// the storage without re-checking the span; only the block-quantized rule is checked.
    #[inline]
    pub(crate) fn derive(&self, op: &'static str, layout: Layout) -> Result<Tensor> {
        match &self.data {
            None => return Err(CoreError::Undefined { op }),
            Some(Data::Bytes(storage)) => {
                if self.dtype.is_quantized() {
                    check_quantized(&layout, self.dtype, op)?;
                }
                debug_assert!(
                    check_fits(storage, &layout, self.dtype, op).is_ok(),
                    "{op} left the storage"
                );
            }
            Some(Data::Strings(strings)) => {
                debug_assert!(
                    strings.check_fits(&layout, op).is_ok(),
                    "{op} left the text"
                );
            }
        }
        Ok(Tensor {
            data: self.data.clone(),
            layout,
            dtype: self.dtype,
        })
    }

    /// The byte storage: an error for the undefined tensor and for string tensors.
    pub(crate) fn defined_storage(&self, op: &'static str) -> Result<&Storage> {
        match &self.data {
            Some(Data::Bytes(storage)) => Ok(storage),
            Some(Data::Strings(_)) => Err(CoreError::UnsupportedDType {
                op,
                dtype: self.dtype,
                reason: STRINGS_HAVE_NO_BYTES,
            }),
            None => Err(CoreError::Undefined { op }),
        }
    }
}

/// A size error of an allocation, naming what was being allocated, and where.
#[cold]
fn name_allocation(
    err: CoreError,
    dims: &[usize],
    dtype: DType,
    device: Device,
    kind: MemoryKind,
) -> CoreError {
    match err {
        CoreError::SizeOverflow { what } => CoreError::SizeOverflow {
            what: format!(
                "{what} (a {dtype} tensor of dims {dims:?} on {device}, {kind:?} memory)"
            ),
        },
        other => other,
    }
}

/// Alignment a storage address needs for typed access to `dtype`.
fn element_align(dtype: DType) -> usize {
    if dtype.is_quantized() {
        1
    } else {
        dtype.size_in_bytes()
    }
}

/// Block-quantized tensors have no per-element addressing: only whole blocks, contiguous.
fn check_quantized(layout: &Layout, dtype: DType, op: &'static str) -> Result<()> {
    let block = dtype.block_size();
    if dtype.is_quantized()
        && !(layout.is_contiguous()
            && layout.offset().is_multiple_of(block)
            && layout.numel().is_multiple_of(block))
    {
        return Err(CoreError::UnsupportedDType {
            op,
            dtype,
            reason: "block-quantized tensors support only whole-block contiguous layouts",
        });
    }
    Ok(())
}

/// Checks that every element `layout` can reach lies inside `storage`.
fn check_fits(storage: &Storage, layout: &Layout, dtype: DType, op: &'static str) -> Result<()> {
    check_quantized(layout, dtype, op)?;
    let (lo, hi) = layout.span()?;
    let to_bytes = |elems: usize| {
        (elems / dtype.block_size())
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| CoreError::overflow("layout byte span"))
    };
    let (start, end) = (
        to_bytes(lo)?,
        to_bytes(hi.div_ceil(dtype.block_size()) * dtype.block_size())?,
    );
    if end > storage.len() {
        return Err(CoreError::OutOfBounds {
            op,
            offset: start,
            end,
            len: storage.len(),
        });
    }
    Ok(())
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_defined() {
            return f.write_str("Tensor(undefined)");
        }
        write!(
            f,
            "Tensor({} {:?} strides={:?} offset={} {})",
            self.dtype,
            self.dims(),
            self.strides(),
            self.storage_offset(),
            self.device()
        )
    }
}

impl Default for Tensor {
    fn default() -> Self {
        Tensor::undefined()
    }
}
