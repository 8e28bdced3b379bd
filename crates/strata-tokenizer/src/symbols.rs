//! The doubly linked list of text pieces both BPE flavours merge in place: a piece is a byte
//! range of the word; merging the right neighbour into the left one just extends the left range
//! and unlinks the right, so no text is copied.

/// One piece of the word being merged; `len == 0` once merged into its left neighbour.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symbol {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) prev: Option<usize>,
    pub(crate) next: Option<usize>,
}

impl Symbol {
    pub(crate) fn text<'a>(&self, word: &'a str) -> &'a str {
        &word[self.start..self.start + self.len]
    }
}

/// Fills `symbols` with one symbol per character of `word`.
pub(crate) fn split_chars(word: &str, symbols: &mut Vec<Symbol>) {
    symbols.clear();
    for (start, ch) in word.char_indices() {
        let index = symbols.len();
        symbols.push(Symbol {
            start,
            len: ch.len_utf8(),
            prev: index.checked_sub(1),
            next: None,
        });
        if index > 0 {
            symbols[index - 1].next = Some(index);
        }
    }
}

/// Merges the right neighbour of `left` into it; returns the new right neighbour.
pub(crate) fn merge_right(symbols: &mut [Symbol], left: usize, right: usize) -> Option<usize> {
    symbols[left].len += symbols[right].len;
    symbols[right].len = 0;
    let after = symbols[right].next;
    symbols[left].next = after;
    if let Some(after) = after {
        symbols[after].prev = Some(left);
    }
    after
}

/// The symbols still in the list, in order.
pub(crate) fn live(symbols: &[Symbol]) -> impl Iterator<Item = Symbol> + '_ {
    let mut at = if symbols.is_empty() { None } else { Some(0) };
    std::iter::from_fn(move || {
        let s = symbols[at?];
        at = s.next;
        Some(s)
    })
}
