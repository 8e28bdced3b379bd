//! The n-gram pool of TfIdfVectorizer compiled once at plan time into a flat trie: each node
//! keeps its children as a sorted run of tokens (binary-searched while walking) and, when an
//! n-gram of the pool ends there, the output column it counts into.

use std::collections::BTreeMap;

/// No n-gram of the pool ends at this node (it is only a prefix of longer ones).
const NO_COLUMN: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct TrieNode {
    column: u32,
    first_child: u32,
    child_count: u32,
}

/// A read-only trie over integer tokens; node 0 is the root (the empty n-gram).
#[derive(Debug, Clone)]
pub(crate) struct NgramTrie {
    nodes: Vec<TrieNode>,
    /// Child tokens, sorted within each node's run `first_child..first_child + child_count`.
    child_tokens: Vec<i64>,
    /// The node each child token leads to, parallel to `child_tokens`.
    child_nodes: Vec<u32>,
}

/// A trie under construction: children in ordered maps, flattened by [`TrieBuilder::finish`].
#[derive(Debug, Default)]
pub(crate) struct TrieBuilder {
    columns: Vec<u32>,
    children: Vec<BTreeMap<i64, u32>>,
}

impl TrieBuilder {
    pub fn new() -> Self {
        TrieBuilder {
            columns: vec![NO_COLUMN],
            children: vec![BTreeMap::new()],
        }
    }

    /// Adds `ngram` counting into `column`; a repeated n-gram keeps the last column given (as
    /// the ONNX reference does). Returns `None` when the trie would exceed `u32` nodes.
    pub fn insert(&mut self, ngram: &[i64], column: u32) -> Option<()> {
        let mut node = 0usize;
        for &token in ngram {
            let next = match self.children[node].get(&token) {
                Some(&child) => child as usize,
                None => {
                    let child = u32::try_from(self.columns.len()).ok()?;
                    self.columns.push(NO_COLUMN);
                    self.children.push(BTreeMap::new());
                    self.children[node].insert(token, child);
                    child as usize
                }
            };
            node = next;
        }
        self.columns[node] = column;
        Some(())
    }

    /// Flattens into the read-only form; node numbers follow breadth-first order so each
    /// node's children are one contiguous sorted run.
    pub fn finish(self) -> NgramTrie {
        let count = self.columns.len();
        let mut nodes = Vec::with_capacity(count);
        let mut child_tokens = Vec::with_capacity(count.saturating_sub(1));
        let mut child_nodes = Vec::with_capacity(count.saturating_sub(1));
        // Breadth-first renumbering: `order[k]` is the builder node that becomes node k.
        let mut order: Vec<u32> = Vec::with_capacity(count);
        order.push(0);
        let mut k = 0;
        while k < order.len() {
            let old = order[k] as usize;
            // Node counts fit in u32 (insert checks), so these casts are lossless.
            let first_child = child_tokens.len() as u32;
            for (&token, &child) in &self.children[old] {
                child_tokens.push(token);
                child_nodes.push(order.len() as u32);
                order.push(child);
            }
            nodes.push(TrieNode {
                column: self.columns[old],
                first_child,
                child_count: self.children[old].len() as u32,
            });
            k += 1;
        }
        NgramTrie {
            nodes,
            child_tokens,
            child_nodes,
        }
    }
}

impl NgramTrie {
    /// The root node (the empty n-gram).
    pub const ROOT: u32 = 0;

    /// The child of `node` reached by `token`, if any.
    #[inline]
    pub fn child(&self, node: u32, token: i64) -> Option<u32> {
        let n = self.nodes[node as usize];
        let start = n.first_child as usize;
        let run = &self.child_tokens[start..start + n.child_count as usize];
        run.binary_search(&token)
            .ok()
            .map(|i| self.child_nodes[start + i])
    }

    /// Whether `node` has any children (a walk can continue past it).
    #[inline]
    pub fn has_children(&self, node: u32) -> bool {
        self.nodes[node as usize].child_count > 0
    }

    /// The output column of the n-gram ending at `node`, if one does.
    #[inline]
    pub fn column(&self, node: u32) -> Option<u32> {
        let c = self.nodes[node as usize].column;
        (c != NO_COLUMN).then_some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_prefixes_and_keeps_the_last_column_of_a_repeat() {
        let mut b = TrieBuilder::new();
        b.insert(&[5, 6], 0).unwrap();
        b.insert(&[5], 3).unwrap();
        b.insert(&[7, 8], 1).unwrap();
        b.insert(&[5, 6], 2).unwrap();
        b.insert(&[-1], 4).unwrap();
        let t = b.finish();
        let five = t.child(NgramTrie::ROOT, 5).unwrap();
        assert_eq!(t.column(five), Some(3));
        let fifty_six = t.child(five, 6).unwrap();
        assert_eq!(t.column(fifty_six), Some(2));
        assert!(!t.has_children(fifty_six));
        let seven = t.child(NgramTrie::ROOT, 7).unwrap();
        assert_eq!(t.column(seven), None);
        assert!(t.has_children(seven));
        assert_eq!(t.column(t.child(seven, 8).unwrap()), Some(1));
        assert_eq!(t.column(t.child(NgramTrie::ROOT, -1).unwrap()), Some(4));
        assert_eq!(t.child(NgramTrie::ROOT, 6), None);
        assert_eq!(t.child(seven, 5), None);
    }
}
