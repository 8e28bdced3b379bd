//! Stop conditions: end-of-generation ids and stop strings. Text that could be the beginning of
//! a stop string is held back until it is known not to be one, so a stop string split across
//! tokens is never shown.

/// What to do after one token.
#[derive(Debug, PartialEq, Eq)]
pub struct StopStep<'a> {
    /// Text that is safe to show now.
    pub text: &'a str,
    /// Whether generation is over (the text above is the last).
    pub stop: bool,
}

/// Watches generated tokens and their text for the end of generation.
#[derive(Debug)]
pub struct StopChecker {
    end_ids: Vec<u32>,
    stop_strings: Vec<String>,
    held: String,
    out: String,
    stopped: bool,
}

impl StopChecker {
    /// Stops on any of `end_ids` (e.g. [`crate::Tokenizer::end_of_generation_ids`]) or when the
    /// text contains one of `stop_strings` (empty strings are ignored).
    pub fn new(end_ids: &[u32], stop_strings: &[&str]) -> Self {
        let stop_strings: Vec<String> = stop_strings
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string())
            .collect();
        let longest = stop_strings.iter().map(String::len).max().unwrap_or(0);
        Self {
            end_ids: end_ids.to_vec(),
            stop_strings,
            held: String::with_capacity(longest + 64),
            out: String::with_capacity(longest + 64),
            stopped: false,
        }
    }

    /// Whether a stop condition was met.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Takes the next token and its decoded text (e.g. from a [`crate::StreamDecoder`]).
    /// On an end id, the held-back text is released and generation stops; on a stop string, the
    /// text before it is released and generation stops.
    pub fn push(&mut self, id: u32, text: &str) -> StopStep<'_> {
        self.out.clear();
        if self.stopped {
            return StopStep {
                text: &self.out,
                stop: true,
            };
        }
        if self.end_ids.contains(&id) {
            self.stopped = true;
            std::mem::swap(&mut self.out, &mut self.held);
            return StopStep {
                text: &self.out,
                stop: true,
            };
        }
        self.held.push_str(text);
        let earliest = self
            .stop_strings
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = earliest {
            self.stopped = true;
            self.out.push_str(&self.held[..at]);
            self.held.clear();
            return StopStep {
                text: &self.out,
                stop: true,
            };
        }
        let keep = self.partial_match_len();
        let release = self.held.len() - keep;
        self.out.push_str(&self.held[..release]);
        self.held.drain(..release);
        StopStep {
            text: &self.out,
            stop: false,
        }
    }

    /// Releases what is still held back (when generation ends for another reason).
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        std::mem::swap(&mut self.out, &mut self.held);
        &self.out
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop string.
    fn partial_match_len(&self) -> usize {
        let held = self.held.as_str();
        let mut best = 0;
        for stop in &self.stop_strings {
            let max = stop.len().saturating_sub(1).min(held.len());
            for len in (best + 1..=max).rev() {
                let start = held.len() - len;
                if held.is_char_boundary(start)
                    && stop.as_bytes().starts_with(&held.as_bytes()[start..])
                {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(checker: &mut StopChecker, steps: &[(u32, &str)]) -> (String, bool) {
        let mut shown = String::new();
        for &(id, text) in steps {
            let step = checker.push(id, text);
            shown.push_str(step.text);
            if step.stop {
                return (shown, true);
            }
        }
        shown.push_str(checker.finish());
        (shown, false)
    }

    #[test]
    fn stops_on_an_end_id_and_releases_held_text() {
        let mut c = StopChecker::new(&[2], &["###"]);
        assert_eq!(
            feed(&mut c, &[(5, "Hi #"), (2, "")]),
            ("Hi #".to_string(), true)
        );
    }

    #[test]
    fn stop_string_split_across_tokens_is_never_shown() {
        let mut c = StopChecker::new(&[], &["<end>"]);
        let step = c.push(1, "ok <e");
        assert_eq!(
            step,
            StopStep {
                text: "ok ",
                stop: false
            }
        );
        let step = c.push(1, "n");
        assert_eq!(
            step,
            StopStep {
                text: "",
                stop: false
            }
        );
        let step = c.push(1, "d> more");
        assert_eq!(
            step,
            StopStep {
                text: "",
                stop: true
            }
        );
        assert!(c.is_stopped());
    }

    #[test]
    fn false_alarm_is_released_and_earliest_stop_string_wins() {
        let mut c = StopChecker::new(&[], &["<end>", "STOP"]);
        assert_eq!(
            feed(&mut c, &[(1, "a <e"), (1, "x b")]),
            ("a <ex b".to_string(), false)
        );
        let mut c = StopChecker::new(&[], &["<end>", "STOP"]);
        assert_eq!(
            feed(&mut c, &[(1, "x STOP y <end>")]),
            ("x ".to_string(), true)
        );
    }

    #[test]
    fn held_text_respects_char_boundaries() {
        let mut c = StopChecker::new(&[], &["é!"]);
        assert_eq!(c.push(1, "caf").text, "caf");
        assert_eq!(c.push(1, "é").text, "");
        assert_eq!(c.push(1, "s").text, "és");
    }
}
