//! The paged KV cache of one attention layer in one execution context (L4): keys and values of
//! every position so far, in fixed-size blocks of `KVCache` memory allocated as the sequence
//! grows, up to the context length. A block is never moved or copied once allocated; `reset`
//! releases them all. The block list is reserved for the whole context up front, so growing
//! allocates only the block itself, and steps inside a block allocate nothing.

use std::any::Any;
use std::sync::Arc;

use strata_core::{AllocatorRegistry, Device, MemoryBlock, MemoryKind};

use crate::support::f16_bits::f32_to_f16;
use crate::{ContextState, OpError, OpResult};

const OP: &str = "CachedAttention";

/// Positions per cache block.
pub const KV_BLOCK_TOKENS: usize = 64;

/// Alignment of each block (a cache line, enough for any vector load).
const BLOCK_ALIGN: usize = 64;

/// Keys and values of one layer: per position, `kv_dim` keys then (in the block's second half)
/// `kv_dim` values, f16 bits.
#[derive(Debug)]
pub struct KvCache {
    kv_dim: usize,
    block_tokens: usize,
    max_tokens: usize,
    /// Each block: `block_tokens × kv_dim` keys, then as many values.
    blocks: Vec<Arc<MemoryBlock>>,
    len: usize,
}

impl KvCache {
    /// An empty cache for `max_tokens` positions of `kv_dim` keys and values each.
    pub fn new(kv_dim: usize, block_tokens: usize, max_tokens: usize) -> OpResult<Self> {
        block_tokens
            .checked_mul(kv_dim)
            .and_then(|n| n.checked_mul(2 * std::mem::size_of::<u16>()))
            .filter(|_| block_tokens > 0)
            .ok_or_else(|| {
                OpError::shape(
                    OP,
                    format!("a block of {block_tokens} × {kv_dim} is too large"),
                )
            })?;
        Ok(KvCache {
            kv_dim,
            block_tokens,
            max_tokens,
            blocks: Vec::with_capacity(max_tokens.div_ceil(block_tokens)),
            len: 0,
        })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions the cache can hold.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn block_bytes(&self) -> usize {
        self.block_tokens * self.kv_dim * 2 * std::mem::size_of::<u16>()
    }

    /// Forgets the positions from `len` on (their blocks are kept for reuse).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes room for positions `len..len + tokens`, allocating blocks as needed.
    pub fn grow(&mut self, tokens: usize) -> OpResult<()> {
        let want = self
            .len
            .checked_add(tokens)
            .filter(|&t| t <= self.max_tokens)
            .ok_or_else(|| {
                OpError::kernel(
                    OP,
                    format!(
                        "the context is full: {} positions held, {tokens} more asked for, at most {}",
                        self.len, self.max_tokens
                    ),
                )
            })?;
        while self.blocks.len() * self.block_tokens < want {
            let block = AllocatorRegistry::global().allocate(
                Device::Cpu,
                MemoryKind::KVCache,
                self.block_bytes(),
                BLOCK_ALIGN,
            )?;
            self.blocks.push(block);
        }
        Ok(())
    }

    /// Appends one position's keys and values, rounded to f16 (after [`KvCache::grow`] made
    /// room).
    pub fn push(&mut self, key: &[f32], value: &[f32]) -> OpResult<()> {
        if key.len() != self.kv_dim || value.len() != self.kv_dim {
            return Err(OpError::shape(
                OP,
                format!(
                    "keys/values of {}/{} values, expected {}",
                    key.len(),
                    value.len(),
                    self.kv_dim
                ),
            ));
        }
        if self.len >= self.blocks.len() * self.block_tokens {
            return Err(OpError::kernel(
                OP,
                "no room in the KV cache: grow it first",
            ));
        }
        let (k, v) = self.slot(self.len);
        // SAFETY: `slot` points at `kv_dim` f16 of keys and of values inside a block this cache
        // owns alone (blocks are never shared), and `&mut self` excludes every reader.
        let (k, v) = unsafe {
            (
                std::slice::from_raw_parts_mut(k, self.kv_dim),
                std::slice::from_raw_parts_mut(v, self.kv_dim),
            )
        };
        k.iter_mut().zip(key).for_each(|(k, &x)| *k = f32_to_f16(x));
        v.iter_mut()
            .zip(value)
            .for_each(|(v, &x)| *v = f32_to_f16(x));
        self.len += 1;
        Ok(())
    }

    /// Pointers to the keys and values of position `pos` (inside an allocated block).
    #[inline]
    fn slot(&self, pos: usize) -> (*mut u16, *mut u16) {
        let block = &self.blocks[pos / self.block_tokens];
        let row = pos % self.block_tokens;
        let base = block.as_mut_ptr().cast::<u16>();
        // SAFETY: row < block_tokens, so both offsets stay inside the block of
        // 2 × block_tokens × kv_dim f16 (its size, checked in `new`); blocks are aligned to 64.
        unsafe {
            (
                base.add(row * self.kv_dim),
                base.add((self.block_tokens + row) * self.kv_dim),
            )
        }
    }

    /// The keys (f16 bits) of position `pos < len`.
    #[inline]
    pub fn key(&self, pos: usize) -> &[u16] {
        assert!(pos < self.len, "key {pos} of {}", self.len);
        // SAFETY: positions below `len` were written by `push`; the slice lives no longer than
        // `&self`, during which no `&mut self` method can write.
        unsafe { std::slice::from_raw_parts(self.slot(pos).0, self.kv_dim) }
    }

    /// The values (f16 bits) of position `pos < len`.
    #[inline]
    pub fn value(&self, pos: usize) -> &[u16] {
        assert!(pos < self.len, "value {pos} of {}", self.len);
        // SAFETY: as in `key`.
        unsafe { std::slice::from_raw_parts(self.slot(pos).1, self.kv_dim) }
    }
}

impl ContextState for KvCache {
    fn reset(&mut self) {
        self.blocks.clear();
        self.len = 0;
    }

    fn bytes(&self) -> usize {
        self.blocks.len() * self.block_bytes()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
