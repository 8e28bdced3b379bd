//! The memory layer: blocks, storage, allocators, the arena and the registry.

pub mod alias;
pub mod allocator;
pub mod arena;
pub mod block;
pub mod budget;
pub mod caching;
pub mod cpu;
mod cuda_host;
pub mod external;
mod header_pool;
pub mod host_vec;
pub mod kind;
pub mod ledger;
pub mod mode;
mod os_pages;
pub mod pinned;
pub mod registry;
mod route;
pub mod storage;
pub mod thread_cache;
