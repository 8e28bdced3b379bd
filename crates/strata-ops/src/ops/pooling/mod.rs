//! Pooling: MaxPool / AveragePool / LpPool and their global forms (kernels in `pool_kernel` and
//! `global_pool`), MaxUnpool, RoiAlign.

pub mod global_pool;
pub mod max_pool_2d;
#[cfg(target_arch = "x86_64")]
mod max_pool_direct;
#[cfg(target_arch = "x86_64")]
mod max_pool_folded;
#[cfg(target_arch = "x86_64")]
mod max_pool_int_avx512;
pub mod max_unpool;
pub mod pool;
pub mod pool_kernel;
pub mod roi_align;

use crate::OpTable;
use pool::PoolKind;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    &[
        ("MaxPool", |c| pool::Pool::build(PoolKind::Max, c)),
        ("AveragePool", |c| pool::Pool::build(PoolKind::Average, c)),
        ("LpPool", |c| pool::Pool::build(PoolKind::Lp, c)),
        ("GlobalAveragePool", |c| {
            pool::GlobalPool::build(PoolKind::Average, c)
        }),
        ("GlobalMaxPool", |c| {
            pool::GlobalPool::build(PoolKind::Max, c)
        }),
        ("GlobalLpPool", |c| pool::GlobalPool::build(PoolKind::Lp, c)),
    ],
    &[("MaxUnpool", max_unpool::MaxUnpool::build)],
    &[("RoiAlign", roi_align::RoiAlign::build)],
];
