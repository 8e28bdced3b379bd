//! Human and JSON renderings of outputs and memory plans.

use serde_json::{json, Value};
use strata_core::{DType, Tensor};
use strata_runtime::MemoryPlan;

/// Summary statistics of a tensor's values (floats and integers widened to f64).
pub struct Summary {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub head: Vec<f64>,
}

fn as_f64(t: &Tensor) -> Option<Vec<f64>> {
    Some(match t.dtype() {
        DType::F32 => t.to_vec::<f32>().ok()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>().ok()?,
        DType::F16 => t
            .to_vec::<strata_core::f16>()
            .ok()?
            .into_iter()
            .map(|v| v.to_f64())
            .collect(),
        DType::BF16 => t
            .to_vec::<strata_core::bf16>()
            .ok()?
            .into_iter()
            .map(|v| v.to_f64())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .ok()?
            .into_iter()
            .map(|v| v as f64)
            .collect(),
        DType::I32 => t.to_vec::<i32>().ok()?.into_iter().map(f64::from).collect(),
        DType::U8 | DType::Bool => t.to_vec::<u8>().ok()?.into_iter().map(f64::from).collect(),
        _ => return None,
    })
}

pub fn summarize(name: &str, t: &Tensor) -> Summary {
    let values = as_f64(t).unwrap_or_default();
    let finite = !values.is_empty();
    Summary {
        name: name.to_string(),
        dtype: t.dtype(),
        dims: t.dims().to_vec(),
        min: finite.then(|| values.iter().cloned().fold(f64::INFINITY, f64::min)),
        max: finite.then(|| values.iter().cloned().fold(f64::NEG_INFINITY, f64::max)),
        mean: finite.then(|| values.iter().sum::<f64>() / values.len() as f64),
        head: values.iter().take(6).cloned().collect(),
    }
}

impl Summary {
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name, "dtype": self.dtype.to_string(), "dims": self.dims,
            "min": self.min, "max": self.max, "mean": self.mean, "head": self.head,
        })
    }

    pub fn to_text(&self) -> String {
        let stats = match (self.min, self.max, self.mean) {
            (Some(min), Some(max), Some(mean)) => {
                format!(" min {min:.6} max {max:.6} mean {mean:.6}")
            }
            _ => String::new(),
        };
        let head: Vec<String> = self.head.iter().map(|v| format!("{v:.5}")).collect();
        format!(
            "  {} {} {:?}{stats}\n    first values: [{}]",
            self.name,
            self.dtype,
            self.dims,
            head.join(", ")
        )
    }
}

pub fn bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.2} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

pub fn memory_json(plan: Option<&MemoryPlan>) -> Value {
    match plan {
        Some(p) => json!({
            "arena_bytes": p.arena_bytes, "lower_bound_bytes": p.lower_bound_bytes,
            "no_reuse_bytes": p.no_reuse_bytes, "alignment": p.alignment,
            "in_place_nodes": p.in_place.iter().filter(|x| x.is_some()).count(),
        }),
        None => Value::Null,
    }
}

pub fn memory_text(plan: Option<&MemoryPlan>) -> String {
    match plan {
        Some(p) => format!(
            "memory plan: arena {} (lower bound {}, without reuse {}), {} nodes in place",
            bytes(p.arena_bytes),
            bytes(p.lower_bound_bytes),
            bytes(p.no_reuse_bytes),
            p.in_place.iter().filter(|x| x.is_some()).count()
        ),
        None => "memory plan: deferred until input dims are known (pass --shape)".into(),
    }
}

/// Bytes in use per (device, memory kind) right now, from the global allocator registry.
pub fn memory_by_kind_json() -> Value {
    let rows: Vec<Value> = strata_core::AllocatorRegistry::global()
        .all_stats()
        .into_iter()
        .map(|(device, kind, s)| {
            json!({ "device": device.to_string(), "kind": format!("{kind:?}"),
                "active_bytes": s.active_bytes, "peak_bytes": s.peak_bytes })
        })
        .collect();
    Value::Array(rows)
}

pub fn memory_by_kind_text() -> String {
    let rows: Vec<String> = strata_core::AllocatorRegistry::global()
        .all_stats()
        .into_iter()
        .map(|(device, kind, s)| {
            format!(
                "{kind:?}@{device} {} (peak {})",
                bytes(s.active_bytes),
                bytes(s.peak_bytes)
            )
        })
        .collect();
    format!("memory by kind: {}", rows.join(", "))
}
