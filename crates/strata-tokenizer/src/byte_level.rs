//! GPT-2's reversible byte ↔ printable-character map: byte-level BPE vocabularies store every
//! byte as a visible character (space → `Ġ`, newline → `Ċ`), so text is mapped through it before
//! merging and token texts are mapped back when decoding.

/// The byte ↔ character tables, built once.
#[derive(Debug)]
pub(crate) struct ByteLevelMap {
    byte_to_char: [char; 256],
    /// Indexed by code point; every mapped character is below U+0144.
    char_to_byte: [Option<u8>; 0x144],
}

impl ByteLevelMap {
    pub(crate) fn new() -> Self {
        let mut byte_to_char = ['\0'; 256];
        let mut char_to_byte = [None; 0x144];
        let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut next_unprintable = 256u32;
        for byte in 0..=255u8 {
            let code = if printable(byte) {
                u32::from(byte)
            } else {
                let code = next_unprintable;
                next_unprintable += 1;
                code
            };
            // Every code below 0x144 is a valid scalar value, so `from_u32` cannot fail here.
            let ch = char::from_u32(code).unwrap_or('\u{FFFD}');
            byte_to_char[usize::from(byte)] = ch;
            char_to_byte[code as usize] = Some(byte);
        }
        Self {
            byte_to_char,
            char_to_byte,
        }
    }

    /// Appends the byte-level encoding of `text` to `out`.
    pub(crate) fn encode_into(&self, text: &str, out: &mut String) {
        for &byte in text.as_bytes() {
            out.push(self.byte_to_char[usize::from(byte)]);
        }
    }

    /// Maps a token's text back to bytes; characters outside the map are kept as their UTF-8.
    pub(crate) fn decode_into(&self, token_text: &str, out: &mut Vec<u8>) {
        for ch in token_text.chars() {
            match self.char_to_byte.get(ch as usize).copied().flatten() {
                Some(byte) => out.push(byte),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_and_space_is_g_dot() {
        let map = ByteLevelMap::new();
        let all: Vec<u8> = (0..=255u8).collect();
        let mut encoded = String::new();
        for &b in &all {
            encoded.push(map.byte_to_char[usize::from(b)]);
        }
        let mut decoded = Vec::new();
        map.decode_into(&encoded, &mut decoded);
        assert_eq!(decoded, all);
        let mut s = String::new();
        map.encode_into(" \n", &mut s);
        assert_eq!(s, "ĠĊ");
    }
}
