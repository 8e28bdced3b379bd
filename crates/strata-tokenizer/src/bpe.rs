//! Byte-level BPE merging (GPT-2 style): inside one pre-tokenized piece, repeatedly merge the
//! adjacent pair with the lowest merge rank until none is left. A heap of candidate pairs keyed
//! by rank keeps this O(n log n) per piece; stale candidates are skipped when popped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap as HashMap;

use crate::error::{Result, TokenizerError};
use crate::symbols::{live, merge_right, split_chars, Symbol};

/// Merge ranks over interned symbol texts: every token text and every merge half gets an id.
#[derive(Debug)]
pub(crate) struct MergeTable {
    /// Text → symbol id; token texts keep their token id, other merge halves get ids past the
    /// vocabulary.
    symbols: HashMap<String, u32>,
    /// (left symbol, right symbol) → rank (the merge's index; the first occurrence wins).
    ranks: HashMap<(u32, u32), u32>,
}

impl MergeTable {
    pub(crate) fn new(
        merges: &[String],
        token_ids: &HashMap<String, u32>,
        vocab_size: usize,
    ) -> Result<Self> {
        let mut symbols = token_ids.clone();
        let mut next_id = vocab_size as u32;
        let mut intern = |text: &str, symbols: &mut HashMap<String, u32>| -> u32 {
            if let Some(&id) = symbols.get(text) {
                return id;
            }
            let id = next_id;
            next_id += 1;
            symbols.insert(text.to_string(), id);
            id
        };
        let mut ranks = HashMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (index, merge) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let split = merge
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1);
            let Some(split) = split else {
                return Err(TokenizerError::MalformedMerge {
                    index,
                    text: merge.clone(),
                });
            };
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let left = intern(left, &mut symbols);
            let right = intern(right, &mut symbols);
            ranks.entry((left, right)).or_insert(index as u32);
        }
        Ok(Self { symbols, ranks })
    }

    fn symbol(&self, text: &str) -> Option<u32> {
        self.symbols.get(text).copied()
    }

    fn rank(&self, left: Option<u32>, right: Option<u32>) -> Option<u32> {
        self.ranks.get(&(left?, right?)).copied()
    }
}

/// Candidate merge, ordered so the heap pops the lowest rank, then the leftmost pair.
type Candidate = Reverse<(u32, usize, usize, usize)>;

/// Reusable buffers for merging one piece after another.
#[derive(Debug, Default)]
pub(crate) struct BpeScratch {
    symbols: Vec<Symbol>,
    /// The interned id of each symbol's text, if it has one (only those can merge further).
    ids: Vec<Option<u32>>,
    heap: BinaryHeap<Candidate>,
}

/// Merges `word` (byte-level encoded) and calls `emit` with the byte range of each final symbol.
pub(crate) fn merge_word(
    table: &MergeTable,
    word: &str,
    scratch: &mut BpeScratch,
    mut emit: impl FnMut(&str),
) {
    let BpeScratch { symbols, ids, heap } = scratch;
    split_chars(word, symbols);
    ids.clear();
    ids.extend(symbols.iter().map(|s| table.symbol(s.text(word))));
    heap.clear();
    let push_pair = |symbols: &[Symbol],
                     ids: &[Option<u32>],
                     heap: &mut BinaryHeap<Candidate>,
                     left: usize,
                     right: usize| {
        if let Some(rank) = table.rank(ids[left], ids[right]) {
            heap.push(Reverse((rank, left, symbols[left].len, symbols[right].len)));
        }
    };
    for i in 1..symbols.len() {
        push_pair(symbols, ids, heap, i - 1, i);
    }
    while let Some(Reverse((_, left, left_len, right_len))) = heap.pop() {
        let Some(right) = symbols[left].next else {
            continue;
        };
        // Stale if either side changed since the pair was queued (lengths only grow or drop to 0).
        if symbols[left].len != left_len || symbols[right].len != right_len || right_len == 0 {
            continue;
        }
        let after = merge_right(symbols, left, right);
        ids[left] = table.symbol(symbols[left].text(word));
        if let Some(after) = after {
            push_pair(symbols, ids, heap, left, after);
        }
        if let Some(before) = symbols[left].prev {
            push_pair(symbols, ids, heap, before, left);
        }
    }
    for symbol in live(symbols) {
        emit(symbol.text(word));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(tokens: &[&str], merges: &[&str]) -> MergeTable {
        let ids = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges: Vec<String> = merges.iter().map(|m| m.to_string()).collect();
        MergeTable::new(&merges, &ids, tokens.len()).unwrap()
    }

    fn merged(table: &MergeTable, word: &str) -> Vec<String> {
        let mut out = Vec::new();
        merge_word(table, word, &mut BpeScratch::default(), |s| {
            out.push(s.to_string())
        });
        out
    }

    #[test]
    fn lowest_rank_merges_first() {
        // "ab" ranks before "bc": abc → ab|c; with the ranks swapped: a|bc.
        let t = table(&["a", "b", "c", "ab", "bc"], &["a b", "b c"]);
        assert_eq!(merged(&t, "abc"), ["ab", "c"]);
        let t = table(&["a", "b", "c", "ab", "bc"], &["b c", "a b"]);
        assert_eq!(merged(&t, "abc"), ["a", "bc"]);
    }

    #[test]
    fn merges_chain_and_ties_go_left_first() {
        let t = table(&["a", "aa", "aaaa"], &["a a", "aa aa"]);
        assert_eq!(merged(&t, "aaaaa"), ["aaaa", "a"]);
        assert_eq!(merged(&t, "aaa"), ["aa", "a"]);
    }

    #[test]
    fn malformed_merge_is_a_typed_error() {
        let ids = HashMap::default();
        let err = MergeTable::new(&["nospace".to_string()], &ids, 0).unwrap_err();
        assert!(matches!(
            err,
            TokenizerError::MalformedMerge { index: 0, .. }
        ));
    }
}
