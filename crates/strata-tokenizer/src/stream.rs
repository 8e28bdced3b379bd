//! Streaming detokenizer: one token at a time in, text out as soon as it is valid UTF-8. A
//! character split across tokens (byte-level BPE spells emoji and CJK as several byte tokens) is
//! held back until its last byte arrives. After the first tokens warm the buffers up, pushing a
//! token allocates nothing.
//!
//! [`StreamState`] is the decoder without the vocabulary (given at each push), for owners that
//! hold the tokenizer behind an `Arc` and cannot also hold a borrow of it (an owned generation);
//! [`StreamDecoder`] pairs it with a borrowed tokenizer.

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// Turns a stream of ids into a stream of text pieces.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    state: StreamState,
}

impl<'a> StreamDecoder<'a> {
    /// A streaming decoder over `tokenizer`'s vocabulary.
    pub fn new(tokenizer: &'a Tokenizer, render_special: bool) -> Self {
        Self {
            tokenizer,
            state: StreamState::new(render_special),
        }
    }

    /// Adds one token and returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<&str> {
        self.state.push(self.tokenizer, id)
    }

    /// Ends the stream: whatever is still held back (an incomplete sequence) comes out as U+FFFD.
    pub fn finish(&mut self) -> &str {
        self.state.finish()
    }

    /// Whether bytes are being held back.
    pub fn has_pending(&self) -> bool {
        self.state.has_pending()
    }
}

/// A streaming decoder's state; every push names the tokenizer (the same one each time).
#[derive(Debug)]
pub struct StreamState {
    render_special: bool,
    /// Bytes not yet emitted: at most an incomplete UTF-8 sequence between calls.
    pending: Vec<u8>,
    /// The text handed out by the last call.
    out: String,
    at_start: bool,
}

impl StreamState {
    pub fn new(render_special: bool) -> Self {
        Self {
            render_special,
            pending: Vec::with_capacity(64),
            out: String::with_capacity(64),
            at_start: true,
        }
    }

    /// Adds one token and returns the text that became complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<&str> {
        let mut piece = tokenizer.token_bytes(id, self.render_special)?;
        if self.at_start && tokenizer.strips_leading_space() {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
        }
        // The prefix space sits in the first piece with text; empty pieces (hidden specials) wait.
        self.at_start &= piece.is_empty();
        self.pending.extend_from_slice(piece);
        self.out.clear();
        self.drain(false);
        Ok(&self.out)
    }

    /// Ends the stream: whatever is still held back (an incomplete sequence) comes out as U+FFFD.
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        self.drain(true);
        &self.out
    }

    /// Whether bytes are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Moves the valid prefix of `pending` into `out`; bytes that can never become valid are
    /// replaced by U+FFFD, and an incomplete tail stays unless `flush`.
    fn drain(&mut self, flush: bool) {
        let mut consumed = 0;
        loop {
            let rest = &self.pending[consumed..];
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    self.out.push_str(valid);
                    consumed = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid_len = e.valid_up_to();
                    // The prefix up to `valid_up_to` is valid UTF-8 by definition.
                    self.out
                        .push_str(std::str::from_utf8(&rest[..valid_len]).unwrap_or_default());
                    consumed += valid_len;
                    match e.error_len() {
                        Some(bad) => {
                            self.out.push('\u{FFFD}');
                            consumed += bad;
                        }
                        None if flush => {
                            self.out.push('\u{FFFD}');
                            consumed = self.pending.len();
                            break;
                        }
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..consumed);
    }
}
