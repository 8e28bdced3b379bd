//! The static memory planner (R2): every value a run produces gets an offset in one shared
//! buffer. Lifetimes come from the execution order; offsets are assigned greedily by size
//! (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference", 2020);
//! element-wise ops reuse their input's bytes when that input dies at them; kernel scratch is
//! a short-lived entry of its own.

use strata_core::align_up;

use crate::graph::ValueSource;
use crate::{Graph, Result, Specialization};

/// A byte range of the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub offset: usize,
    /// Capacity in bytes (the value's size rounded up to the alignment).
    pub bytes: usize,
}

/// Where every value and scratch buffer lives, and what that costs.
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    /// Per value: its slot, for values that live in the arena.
    pub values: Vec<Option<Slot>>,
    /// Per node: its scratch slot.
    pub scratch: Vec<Option<Slot>>,
    /// Per node: the input whose bytes output 0 reuses.
    pub in_place: Vec<Option<usize>>,
    /// Per node: run-time allocated (dynamic) values to free after the node runs.
    pub free_after: Vec<Vec<usize>>,
    pub arena_bytes: usize,
    /// Most bytes live at any one step: no plan can use less.
    pub lower_bound_bytes: usize,
    /// The sum of every entry's size, as if nothing were reused.
    pub no_reuse_bytes: usize,
    pub alignment: usize,
}

impl MemoryPlan {
    /// Arena bytes over the lower bound (1.0 is optimal).
    pub fn efficiency(&self) -> f64 {
        if self.arena_bytes == 0 {
            1.0
        } else {
            self.lower_bound_bytes as f64 / self.arena_bytes as f64
        }
    }
}

/// One entry to place: a value (or group of values sharing bytes in place) or a scratch buffer.
#[derive(Debug, Clone)]
struct Entry {
    bytes: usize,
    first: usize,
    last: usize,
}

/// Plans memory for `spec` with offsets aligned to `alignment`.
pub fn plan_memory(graph: &Graph, spec: &Specialization, alignment: usize) -> Result<MemoryPlan> {
    let n_nodes = graph.nodes.len();
    let end = n_nodes; // step index of "after the last node": graph outputs live until here
    let consumers = graph.consumers();
    let is_output: Vec<bool> = {
        let mut v = vec![false; graph.values.len()];
        graph.outputs.iter().for_each(|o| v[o.0] = true);
        v
    };
    let last_use = |value: usize, def: usize| -> usize {
        if is_output[value] {
            end
        } else {
            consumers[value].last().map_or(def, |n| n.0)
        }
    };

    // Which values live in the arena, with their sizes and lifetimes: the entry, and the byte
    // offset in it (non-zero only for inputs placed inside a Concat's output).
    let mut entry_of: Vec<Option<(usize, usize)>> = vec![None; graph.values.len()];
    let placed = placed_inputs(graph, spec, &is_output)?;
    // Per placing node (a Concat): the entry its output and placed inputs share.
    let mut group_entry: Vec<Option<usize>> = vec![None; n_nodes];
    let mut is_group_entry: Vec<bool> = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut no_reuse = 0usize;
    let size_of = |value: usize| -> Result<Option<usize>> {
        let fact = &spec.facts[value];
        match fact.concrete() {
            Some(dims) => Ok(Some(align_up(
                strata_core::Shape::new(&dims)?.size_in_bytes(fact.dtype)?,
                alignment,
            )?)),
            None => Ok(None),
        }
    };
    for id in graph.runtime_inputs() {
        if spec.facts[id.0].dtype.is_string() {
            continue; // text inputs are bound as given, not copied into the arena
        }
        let bytes = size_of(id.0)?.unwrap_or(0);
        no_reuse += bytes;
        entry_of[id.0] = Some((entries.len(), 0));
        is_group_entry.push(false);
        // Inputs stay intact for the whole run, so a run can be repeated without re-setting them.
        entries.push(Entry {
            bytes,
            first: 0,
            last: end,
        });
    }
    let mut in_place = vec![None; n_nodes];
    let mut scratch_entry: Vec<Option<usize>> = vec![None; n_nodes];
    let mut free_after: Vec<Vec<usize>> = vec![Vec::new(); n_nodes];
    for (i, node) in graph.nodes.iter().enumerate() {
        if spec.skip[i] {
            continue;
        }
        let input_facts: Vec<&strata_ops::Fact> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*ABSENT, |id| &spec.facts[id.0]))
            .collect();
        let output_facts: Vec<&strata_ops::Fact> =
            node.outputs.iter().map(|id| &spec.facts[id.0]).collect();
        if spec.dynamic[i] {
            for &out in &node.outputs {
                let last = last_use(out.0, i);
                if last < end {
                    free_after[last].push(out.0);
                }
            }
            continue;
        }
        for (k, &out) in node.outputs.iter().enumerate() {
            let bytes = size_of(out.0)?.unwrap_or(0);
            no_reuse += bytes;
            let last = last_use(out.0, i);
            // In-place: output 0 takes over an input that dies here and has the same size.
            if k == 0 {
                if let Some(input_index) = node.op.in_place_input() {
                    if let Some(Some(victim)) = node.inputs.get(input_index) {
                        // Bytes shared with a Concat's output are never overwritten in place.
                        let victim_entry = entry_of[victim.0]
                            .filter(|&(e, _)| !is_group_entry[e])
                            .map(|(e, _)| e);
                        let reused_once = node
                            .inputs
                            .iter()
                            .flatten()
                            .filter(|v| *v == victim)
                            .count()
                            == 1;
                        let dies_here = !is_output[victim.0]
                            && consumers[victim.0].last() == Some(&crate::graph::NodeId(i));
                        let is_node_output =
                            matches!(graph.values[victim.0].source, ValueSource::Node(..));
                        if let (Some(e), true, true, true) =
                            (victim_entry, reused_once, dies_here, is_node_output)
                        {
                            // Same element count and size, not merely the same aligned slot
                            // size: a broadcast input is smaller than the output it would be
                            // overwritten by. Dims may differ (Reshape, Flatten, Squeeze, or an
                            // operand that only lacks leading 1s), the elements line up.
                            let (v, o) = (&spec.facts[victim.0], &spec.facts[out.0]);
                            let count = |f: &strata_ops::Fact| {
                                f.concrete().map(|d| d.iter().product::<usize>())
                            };
                            let same_layout = count(v).is_some()
                                && count(v) == count(o)
                                && v.dtype.size_in_bytes() == o.dtype.size_in_bytes();
                            if same_layout && entries[e].bytes == bytes {
                                entries[e].last = last.max(entries[e].last);
                                entry_of[out.0] = Some((e, 0));
                                in_place[i] = Some(input_index);
                                continue;
                            }
                        }
                    }
                }
            }
            // A Concat's output, or an input placed inside it: one entry for them all, from the
            // first of them written to the last read.
            let group = if k == 0 && placed.offsets[i].is_some() {
                Some((i, 0))
            } else {
                placed.member[out.0]
            };
            if let Some((concat, offset)) = group {
                let e = match group_entry[concat] {
                    Some(e) => e,
                    None => {
                        let whole = size_of(graph.nodes[concat].outputs[0].0)?.unwrap_or(0);
                        entries.push(Entry {
                            bytes: whole,
                            first: i,
                            last: i,
                        });
                        is_group_entry.push(true);
                        group_entry[concat] = Some(entries.len() - 1);
                        entries.len() - 1
                    }
                };
                entries[e].first = entries[e].first.min(i);
                entries[e].last = entries[e].last.max(last);
                entry_of[out.0] = Some((e, offset));
                continue;
            }
            entry_of[out.0] = Some((entries.len(), 0));
            is_group_entry.push(false);
            entries.push(Entry {
                bytes,
                first: i,
                last,
            });
        }
        let scratch = node.op.scratch_bytes(&input_facts, &output_facts)?;
        if scratch > 0 {
            let bytes = align_up(scratch, alignment)?;
            no_reuse += bytes;
            scratch_entry[i] = Some(entries.len());
            is_group_entry.push(false);
            entries.push(Entry {
                bytes,
                first: i,
                last: i,
            });
        }
    }

    let offsets = assign_offsets(&entries);
    let arena_bytes = entries
        .iter()
        .zip(&offsets)
        .map(|(e, &o)| o + e.bytes)
        .max()
        .unwrap_or(0);
    let lower_bound_bytes = (0..=end)
        .map(|t| {
            entries
                .iter()
                .filter(|e| e.first <= t && t <= e.last)
                .map(|e| e.bytes)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let slot = |e: usize| Slot {
        offset: offsets[e],
        bytes: entries[e].bytes,
    };
    // A placed input's slot is its own bytes at its offset in the shared entry.
    let value_slot = |(id, e): (usize, &Option<(usize, usize)>)| -> Result<Option<Slot>> {
        Ok(match *e {
            Some((e, 0)) if !is_group_entry[e] => Some(slot(e)),
            Some((e, offset)) => {
                let fact = &spec.facts[id];
                let bytes = match fact.concrete() {
                    Some(dims) => strata_core::Shape::new(&dims)?.size_in_bytes(fact.dtype)?,
                    None => 0,
                };
                Some(Slot {
                    offset: offsets[e] + offset,
                    bytes,
                })
            }
            None => None,
        })
    };
    let values = entry_of
        .iter()
        .enumerate()
        .map(value_slot)
        .collect::<Result<Vec<_>>>()?;
    Ok(MemoryPlan {
        values,
        scratch: scratch_entry.iter().map(|e| e.map(slot)).collect(),
        in_place,
        free_after,
        arena_bytes,
        lower_bound_bytes,
        no_reuse_bytes: no_reuse,
        alignment,
    })
}

/// Inputs a Concat-like node (`Operator::places_inputs_in_output`) can find in place: per node
/// its input offsets, per value the node and byte offset it is placed at.
struct Placed {
    offsets: Vec<Option<Vec<usize>>>,
    member: Vec<Option<(usize, usize)>>,
}

/// Chooses the inputs to place inside their Concat's output: static values made by a static node
/// of this plan, read once by that Concat, not graph outputs and not placed elsewhere already.
/// (A value read by two Concats is placed in the first.)
fn placed_inputs(graph: &Graph, spec: &Specialization, is_output: &[bool]) -> Result<Placed> {
    let mut placed = Placed {
        offsets: vec![None; graph.nodes.len()],
        member: vec![None; graph.values.len()],
    };
    for (i, node) in graph.nodes.iter().enumerate() {
        if spec.skip[i] || spec.dynamic[i] || node.outputs.len() != 1 {
            continue;
        }
        let out = &spec.facts[node.outputs[0].0];
        if out.dtype.is_string() || is_output[node.outputs[0].0] {
            continue;
        }
        let inputs: Vec<&strata_ops::Fact> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*ABSENT, |id| &spec.facts[id.0]))
            .collect();
        let Some(offsets) = node.op.places_inputs_in_output(&inputs, out) else {
            continue;
        };
        let element = out.dtype.size_in_bytes();
        let mut any = false;
        for (slot, (input, &offset)) in node.inputs.iter().zip(&offsets).enumerate() {
            let Some(value) = *input else { continue };
            let made_here = matches!(
                graph.values[value.0].source,
                ValueSource::Node(producer, _) if !spec.skip[producer.0] && !spec.dynamic[producer.0]
            );
            let read_once = node.inputs.iter().filter(|v| **v == Some(value)).count() == 1;
            let fact = &spec.facts[value.0];
            if made_here
                && read_once
                && !is_output[value.0]
                && placed.member[value.0].is_none()
                && fact.concrete().is_some()
                && fact.dtype == out.dtype
                && node.outputs[0] != value
                && slot < offsets.len()
            {
                let bytes =
                    offset
                        .checked_mul(element)
                        .ok_or(strata_core::CoreError::SizeOverflow {
                            what: "placed input offset".into(),
                        })?;
                placed.member[value.0] = Some((i, bytes));
                any = true;
            }
        }
        if any {
            placed.offsets[i] = Some(offsets);
        }
    }
    Ok(placed)
}

static ABSENT: std::sync::LazyLock<strata_ops::Fact> =
    std::sync::LazyLock::new(strata_ops::Fact::absent);

/// Greedy by size: place the largest entries first, each in the smallest gap between entries
/// already placed that overlap it in time, or after them all.
fn assign_offsets(entries: &[Entry]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by(|&a, &b| {
        entries[b]
            .bytes
            .cmp(&entries[a].bytes)
            .then(entries[a].first.cmp(&entries[b].first))
    });
    let mut offsets = vec![0usize; entries.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(entries.len());
    for &e in &order {
        let entry = &entries[e];
        if entry.bytes == 0 {
            continue;
        }
        let mut overlapping: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&p| entries[p].first <= entry.last && entry.first <= entries[p].last)
            .map(|&p| (offsets[p], entries[p].bytes))
            .collect();
        overlapping.sort_unstable();
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut prev_end = 0usize;
        for (offset, bytes) in overlapping {
            if offset > prev_end {
                let gap = offset - prev_end;
                if gap >= entry.bytes && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, prev_end));
                }
            }
            prev_end = prev_end.max(offset + bytes);
        }
        offsets[e] = best.map_or(prev_end, |(_, o)| o);
        placed.push(e);
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: usize, first: usize, last: usize) -> Entry {
        Entry { bytes, first, last }
    }

    /// No two entries that are alive at the same step may overlap in memory.
    fn assert_valid(entries: &[Entry], offsets: &[usize]) {
        for (i, a) in entries.iter().enumerate() {
            for (j, b) in entries.iter().enumerate().skip(i + 1) {
                let time = a.first <= b.last && b.first <= a.last;
                let space = offsets[i] < offsets[j] + b.bytes && offsets[j] < offsets[i] + a.bytes;
                assert!(
                    !(time && space && a.bytes > 0 && b.bytes > 0),
                    "entries {i} and {j} collide"
                );
            }
        }
    }

    #[test]
    fn chain_reuses_memory() {
        // a -> b -> c -> d: only two neighbours are alive at once.
        let entries = vec![
            entry(100, 0, 1),
            entry(100, 1, 2),
            entry(100, 2, 3),
            entry(100, 3, 4),
        ];
        let offsets = assign_offsets(&entries);
        assert_valid(&entries, &offsets);
        let arena = entries
            .iter()
            .zip(&offsets)
            .map(|(e, o)| o + e.bytes)
            .max()
            .unwrap();
        assert_eq!(arena, 200);
    }

    #[test]
    fn random_lifetimes_never_collide() {
        let mut seed = 0x2545F4914F6CDD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let n = (next() % 30 + 1) as usize;
            let entries: Vec<Entry> = (0..n)
                .map(|_| {
                    let first = (next() % 20) as usize;
                    entry(
                        ((next() % 8 + 1) * 256) as usize,
                        first,
                        first + (next() % 6) as usize,
                    )
                })
                .collect();
            let offsets = assign_offsets(&entries);
            assert_valid(&entries, &offsets);
            let arena = entries
                .iter()
                .zip(&offsets)
                .map(|(e, o)| o + e.bytes)
                .max()
                .unwrap();
            let lower = (0..30)
                .map(|t| {
                    entries
                        .iter()
                        .filter(|e| e.first <= t && t <= e.last)
                        .map(|e| e.bytes)
                        .sum::<usize>()
                })
                .max()
                .unwrap();
            let total: usize = entries.iter().map(|e| e.bytes).sum();
            assert!(lower <= arena && arena <= total);
        }
    }
}
