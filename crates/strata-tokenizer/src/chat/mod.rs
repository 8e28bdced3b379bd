//! Chat templates: `tokenizer.chat_template` is Jinja, rendered with minijinja the way Hugging
//! Face's `apply_chat_template` renders it (trim_blocks, lstrip_blocks, loop controls,
//! `raise_exception`, `strftime_now`, Python string methods, and a `tojson` that prints like
//! Python's `json.dumps`).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};

use crate::error::{Result, TokenizerError};

mod clock;

const TEMPLATE_NAME: &str = "chat_template";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, …
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A parsed chat template with the vocabulary's bos/eos texts.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Parses `source`; a syntax error is a [`TokenizerError::ChatTemplate`].
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", clock::strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(template_error)?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// Renders `messages`; `add_generation_prompt` asks the template to open the assistant's turn.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| context! { role => m.role.as_str(), content => m.content.as_str() })
            .collect();
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
            })
            .map_err(template_error)
    }
}

fn template_error(e: Error) -> TokenizerError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        message.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    TokenizerError::ChatTemplate(message)
}

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

/// `tojson` as Hugging Face defines it: `json.dumps(value, ensure_ascii=False, indent=indent)`.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(value, indent, 0, &mut out)?;
    Ok(Value::from(out))
}

fn write_json(
    value: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number_json(value)),
        ValueKind::String => write_json_string(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<(Option<Value>, Value)> =
                value.try_iter()?.map(|item| (None, item)).collect();
            write_json_container(('[', ']'), &items, indent, depth, out)?;
        }
        ValueKind::Map => {
            let entries = value
                .try_iter()?
                .map(|key| Ok((Some(key.clone()), value.get_item(&key)?)))
                .collect::<std::result::Result<Vec<_>, Error>>()?;
            write_json_container(('{', '}'), &entries, indent, depth, out)?;
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson cannot serialize a {}", value.kind()),
            ))
        }
    }
    Ok(())
}

/// A JSON array (entries without keys) or object, with Python's separators and indentation.
fn write_json_container(
    (open, close): (char, char),
    entries: &[(Option<Value>, Value)],
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    out.push(open);
    for (i, (key, item)) in entries.iter().enumerate() {
        if i > 0 {
            out.push_str(if indent.is_some() { "," } else { ", " });
        }
        newline(out, depth + 1);
        if let Some(key) = key {
            write_json_string(
                &key.as_str().map_or_else(|| key.to_string(), str::to_string),
                out,
            );
            out.push_str(": ");
        }
        write_json(item, indent, depth + 1, out)?;
    }
    if !entries.is_empty() {
        newline(out, depth);
    }
    out.push(close);
    Ok(())
}

/// Integers as integers, floats the way Python prints them (`1.0`, `0.5`).
fn number_json(value: &Value) -> String {
    if let Ok(i) = i64::try_from(value.clone()) {
        if value.as_i64().is_some() {
            return i.to_string();
        }
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else if f.is_finite() {
        f.to_string()
    } else {
        "NaN".to_string()
    }
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "<s>", "</s>").unwrap();
        let out = t.render(&[ChatMessage::new("user", "Hi")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn block_lines_are_trimmed_and_python_methods_work() {
        let src = "{{ bos_token }}\n{% for m in messages %}\n  {{ m.content.strip() | trim }}|{{ m.role.upper() }}\n{% endfor %}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "  x  ")], false)
                .unwrap(),
            "<s>\n  x|USER\n"
        );
    }

    #[test]
    fn raise_exception_is_a_typed_error() {
        let src = "{% if messages[0].role != 'system' %}{{ raise_exception('need a system turn') }}{% endif %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let err = t
            .render(&[ChatMessage::new("user", "x")], false)
            .unwrap_err();
        assert!(
            matches!(&err, TokenizerError::ChatTemplate(m) if m.contains("need a system turn")),
            "{err}"
        );
    }

    #[test]
    fn llama3_style_template_features_render() {
        // namespace, whitespace control, slicing, `is defined`, loop variables, strftime_now.
        let src = "{{- bos_token }}\n{%- set ns = namespace(n=0) %}\n{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}\n{%- if date_string is not defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}\n[{{ system }}|{{ date_string|length > 9 }}]\n{%- for m in messages %}{%- set ns.n = ns.n + 1 %}<{{ m.role }}:{{ m.content }}:{{ loop.index0 }}{{ ':last' if loop.last }}>{%- endfor %}\n{{- ns.n }}";
        let t = ChatTemplate::new(src, "<|begin_of_text|>", "").unwrap();
        let out = t
            .render(
                &[
                    ChatMessage::new("system", " Be brief. "),
                    ChatMessage::new("user", "a"),
                    ChatMessage::new("assistant", "b"),
                ],
                false,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|begin_of_text|>[Be brief.|True]<user:a:0><assistant:b:1:last>2"
        );
    }

    #[test]
    fn syntax_error_is_a_typed_error() {
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(TokenizerError::ChatTemplate(_))
        ));
    }

    #[test]
    fn tojson_prints_like_python_json_dumps() {
        let src =
            "{{ messages[0] | tojson }} {{ 'ü<\"' | tojson }} {{ [1, 2.5, none, true] | tojson }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t
            .render(&[ChatMessage::new("user", "a\nb")], false)
            .unwrap();
        assert_eq!(
            out,
            "{\"role\": \"user\", \"content\": \"a\\nb\"} \"ü<\\\"\" [1, 2.5, null, true]"
        );
    }
}
