//! Memory budgets: the most memory one plan (its weights, arenas and run-time allocations) may
//! hold at once.
//!
//! A [`MemoryBudget`] is installed on a thread for the length of a plan build or a run
//! ([`MemoryBudget::install`]); while it is, the registry charges every allocation to it before
//! asking the allocator, and the [`BudgetCharge`] travels with the block, so the bytes return to
//! the budget when the block is freed, on whatever thread that happens. An allocation that would
//! pass the limit fails with [`CoreError::MemoryLimitExceeded`] before anything is allocated.
//! Threads without a budget installed (a pool's workers, code outside any plan) are not charged.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::{CoreError, Device, MemoryKind, Result};

/// A limit and the bytes charged against it. Shared by `Arc` between a plan and its contexts.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes (`usize::MAX`: no limit, only accounting).
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged and not yet returned.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most bytes ever charged at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// `Ok` when `bytes` more would fit now; charges nothing (for sizes known before the
    /// allocation happens, such as a plan's arena at build time).
    pub fn check(&self, bytes: usize, kind: MemoryKind, device: Device) -> Result<()> {
        let used = self.used();
        match used.checked_add(bytes) {
            Some(total) if total <= self.limit => Ok(()),
            _ => Err(self.exceeded(bytes, used, kind, device)),
        }
    }

    /// Charges `bytes`, or fails without charging when they would pass the limit. The charge is
    /// returned when the [`BudgetCharge`] drops.
    pub fn try_charge(
        self: &Arc<Self>,
        bytes: usize,
        kind: MemoryKind,
        device: Device,
    ) -> Result<BudgetCharge> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let total = match used.checked_add(bytes) {
                Some(total) if total <= self.limit => total,
                _ => return Err(self.exceeded(bytes, used, kind, device)),
            };
            match self
                .used
                .compare_exchange_weak(used, total, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    if total > self.peak.load(Ordering::Relaxed) {
                        self.peak.fetch_max(total, Ordering::Relaxed);
                    }
                    return Ok(BudgetCharge {
                        budget: self.clone(),
                        bytes,
                    });
                }
                Err(seen) => used = seen,
            }
        }
    }

    #[cold]
    fn exceeded(&self, bytes: usize, used: usize, kind: MemoryKind, device: Device) -> CoreError {
        CoreError::MemoryLimitExceeded {
            bytes,
            kind,
            device,
            used,
            limit: self.limit,
        }
    }

    /// Runs `f` with this budget charged for every registry allocation made on this thread. An
    /// inner install (a plan built or run inside another's run) replaces the outer budget for
    /// its length and restores it after, also when `f` unwinds.
    pub fn install<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        INSTALLED.with(|i| i.set(true));
        let _restore = Restore(previous);
        f()
    }

    /// The budget installed on this thread, if any.
    pub fn current() -> Option<Arc<MemoryBudget>> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Charges `bytes` to the budget installed on this thread; `None` when none is.
    #[inline]
    pub(crate) fn charge_current(
        bytes: usize,
        kind: MemoryKind,
        device: Device,
    ) -> Result<Option<BudgetCharge>> {
        // Most allocations (eager tensors, pool workers) run without a budget: one plain
        // thread-local load decides, without touching the budget's `RefCell`.
        if !INSTALLED.with(Cell::get) {
            return Ok(None);
        }
        MemoryBudget::charge_installed(bytes, kind, device)
    }

    #[inline(never)]
    fn charge_installed(
        bytes: usize,
        kind: MemoryKind,
        device: Device,
    ) -> Result<Option<BudgetCharge>> {
        CURRENT.with(|c| match &*c.borrow() {
            Some(budget) => budget.try_charge(bytes, kind, device).map(Some),
            None => Ok(None),
        })
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<MemoryBudget>>> = const { RefCell::new(None) };
    /// Whether `CURRENT` holds a budget (kept in step with it by `install` and `Restore`).
    static INSTALLED: Cell<bool> = const { Cell::new(false) };
}

/// Puts the outer budget back when an install ends.
struct Restore(Option<Arc<MemoryBudget>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        INSTALLED.with(|i| i.set(previous.is_some()));
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Bytes charged to a budget; returned when dropped.
#[derive(Debug)]
pub struct BudgetCharge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl BudgetCharge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BudgetCharge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The default limit: the machine's physical memory (`usize::MAX` where it cannot be read).
/// A plan that would need more could only succeed by swapping, so failing early is kinder.
pub fn default_memory_limit() -> usize {
    static TOTAL: OnceLock<usize> = OnceLock::new();
    *TOTAL.get_or_init(|| total_memory().unwrap_or(usize::MAX))
}

/// `MemTotal` from /proc/meminfo.
fn total_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Parses a size such as `512M`, `4G`, `1.5G`, `64K`, `1T` or a plain byte count (binary units:
/// K = 1024; a trailing `B` or `iB` is allowed).
pub fn parse_memory_size(text: &str) -> std::result::Result<usize, String> {
    let trimmed = text.trim();
    let upper = trimmed.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (number, scale) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 1u64 << 10),
        Some('M') => (&body[..body.len() - 1], 1 << 20),
        Some('G') => (&body[..body.len() - 1], 1 << 30),
        Some('T') => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{trimmed}' is not a size (examples: 512M, 4G, 1.5G)"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= usize::MAX as f64 {
        return Err(format!("'{trimmed}' is not a usable memory size"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_until_the_limit_and_returns_on_drop() {
        let budget = MemoryBudget::new(100);
        let a = budget
            .try_charge(60, MemoryKind::Persistent, Device::Cpu)
            .unwrap();
        let err = budget
            .try_charge(41, MemoryKind::Workspace, Device::Cpu)
            .unwrap_err();
        assert!(
            matches!(
                err,
                CoreError::MemoryLimitExceeded {
                    bytes: 41,
                    used: 60,
                    limit: 100,
                    kind: MemoryKind::Workspace,
                    ..
                }
            ),
            "{err}"
        );
        assert!(budget.check(40, MemoryKind::Workspace, Device::Cpu).is_ok());
        assert!(budget
            .check(usize::MAX, MemoryKind::Workspace, Device::Cpu)
            .is_err());
        drop(a);
        assert_eq!((budget.used(), budget.peak()), (0, 60));
        let b = budget
            .try_charge(100, MemoryKind::Workspace, Device::Cpu)
            .unwrap();
        assert_eq!(b.bytes(), 100);
    }

    #[test]
    fn installs_nest_and_restore() {
        let outer = MemoryBudget::new(10);
        let inner = MemoryBudget::new(20);
        assert!(MemoryBudget::current().is_none());
        let charge = |bytes| {
            MemoryBudget::charge_current(bytes, MemoryKind::Default, Device::Cpu)
                .map(|c| c.map(|c| c.bytes()))
        };
        outer.install(|| {
            inner.install(|| {
                assert!(Arc::ptr_eq(&MemoryBudget::current().unwrap(), &inner));
                assert_eq!(charge(15).unwrap(), Some(15));
            });
            assert!(Arc::ptr_eq(&MemoryBudget::current().unwrap(), &outer));
            // The outer limit applies again once the inner install ended.
            assert!(charge(15).is_err());
            assert_eq!(charge(5).unwrap(), Some(5));
        });
        assert!(MemoryBudget::current().is_none());
        assert_eq!(charge(1 << 40).unwrap(), None, "no budget, no charge");
        // An install that unwinds restores the state too.
        let unwound = std::panic::catch_unwind(|| inner.install(|| panic!("unwinds")));
        assert!(unwound.is_err());
        assert_eq!(charge(1 << 40).unwrap(), None);
    }

    #[test]
    fn concurrent_charges_never_pass_the_limit() {
        let budget = MemoryBudget::new(1000);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        if let Ok(c) = budget.try_charge(300, MemoryKind::Default, Device::Cpu) {
                            assert!(budget.used() <= 1000);
                            drop(c);
                        }
                    }
                });
            }
        });
        assert_eq!(budget.used(), 0);
        assert!(budget.peak() <= 1000);
    }

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_memory_size("512M"), Ok(512 << 20));
        assert_eq!(parse_memory_size("4G"), Ok(4 << 30));
        assert_eq!(parse_memory_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_memory_size("64kib"), Ok(64 << 10));
        assert_eq!(parse_memory_size("1000"), Ok(1000));
        for bad in ["", "G", "-1G", "0", "lots", "1e30T", "NaN"] {
            assert!(parse_memory_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_limit_is_the_machine_memory() {
        let limit = default_memory_limit();
        assert!(limit > 64 << 20, "{limit}");
    }
}
