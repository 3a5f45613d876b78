//! YAML in and out, one dialect for the whole workspace.
//!
//! The codec is `serde-saphyr`, the YAML crate kube-rs reads kubeconfigs with (so the binary
//! carries one YAML parser), set up to read and write as `serde_yaml` 0.9 did before it:
//!
//! - Reading: YAML 1.2 core booleans only (`yes`, `on` stay strings, as in `serde_yaml`),
//!   `0755` and `1_000` strings in untyped values (as in `serde_yaml`), duplicate keys refused, nesting up to
//!   [`MAX_DEPTH`] levels, and one-line errors that name the field path and the line and
//!   column in the whole text (no source snippets: messages end up in reports and events).
//! - Streams: [`documents`] reads every document of a multi-document text in order, empty ones
//!   included (as `null`), so a document's index is its position in the text, and stops after
//!   the first that does not parse.
//! - Writing: block style, list items at their key's indentation, strings quoted only when they
//!   would read back as something else, multi-line strings as literal blocks, long strings on
//!   one line: the layout of the committed CRDs and of the user data golden files.
//!
//! ```text
//! text --from_str / documents--> T (serde)        T --to_string--> text
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_saphyr::granit_parser::{Event, Parser};
use serde_saphyr::{Options, SerializerOptions, SnippetMode};

/// Deepest nesting read: `serde_yaml`'s recursion limit; Kubernetes manifests stay far below.
pub const MAX_DEPTH: usize = 128;
/// Most documents in one text: a `helm template` of a large chart, with room to spare.
pub const MAX_DOCUMENTS: usize = 100_000;

/// YAML that could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// Not YAML, or not the shape asked for; the message names the field and the line.
    #[error("{message}")]
    Parse { message: String },
    /// The value cannot be written as YAML.
    #[error("{message}")]
    Serialize { message: String },
}

impl YamlError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Parse { .. } => "yaml_parse",
            Self::Serialize { .. } => "yaml_serialize",
        }
    }
}

fn read_options() -> Options {
    serde_saphyr::options! {
        strict_booleans: true,
        // `serde_yaml` read `0755` and `1_000` in untyped values as strings.
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_documents: MAX_DOCUMENTS,
        },
    }
}

/// `error` as one line, its line numbers counted from the start of the whole text.
fn parse_error(error: &serde_saphyr::Error, line_offset: u64) -> YamlError {
    let message = error.render_with_options(serde_saphyr::render_options! {
        snippets: SnippetMode::Off,
        line_offset: line_offset,
    });
    YamlError::Parse { message }
}

/// Reads one document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, read_options()).map_err(|e| parse_error(&e, 0))
}

/// One document of a stream: its text (with any directives before it) and the lines before it.
#[derive(Debug, Clone, Copy)]
struct Slice<'a> {
    text: &'a str,
    line_offset: u64,
}

/// The documents of `text` as the YAML parser delimits them; the last slice runs to the end
/// of the text when the parser stops on a syntax error, so reading it reports that error.
fn slices(text: &str) -> Vec<Slice<'_>> {
    let mut slices = Vec::new();
    let mut start = 0;
    let mut start_line: u64 = 0;
    let mut open = false;
    for event in Parser::new_from_str(text) {
        match event {
            Ok((Event::DocumentStart(..), _)) => open = true,
            Ok((Event::DocumentEnd, span)) => {
                let end = span
                    .end
                    .byte_offset()
                    .unwrap_or_else(|| char_to_byte(text, span.end.index()));
                let end = end.clamp(start, text.len());
                slices.push(Slice {
                    text: &text[start..end],
                    line_offset: start_line,
                });
                start_line += count_lines(&text[start..end]);
                start = end;
                open = false;
            }
            Ok(_) => {}
            Err(_) => {
                // Reading the rest reports the parser's error with its line.
                slices.push(Slice {
                    text: &text[start..],
                    line_offset: start_line,
                });
                return slices;
            }
        }
        if slices.len() > MAX_DOCUMENTS {
            break;
        }
    }
    if open {
        slices.push(Slice {
            text: &text[start..],
            line_offset: start_line,
        });
    }
    slices
}

fn count_lines(text: &str) -> u64 {
    u64::try_from(text.matches('\n').count()).unwrap_or(u64::MAX)
}

fn char_to_byte(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(byte, _)| byte)
}

/// Every document of a (multi-document) text in order, an empty one read as YAML `null`; ends
/// after the first document that does not parse.
#[must_use]
pub fn documents<T: DeserializeOwned>(text: &str) -> Vec<Result<T, YamlError>> {
    let mut read = Vec::new();
    for slice in slices(text) {
        let document = serde_saphyr::from_str_with_options::<T>(slice.text, read_options())
            .map_err(|e| parse_error(&e, slice.line_offset));
        let failed = document.is_err();
        read.push(document);
        if failed {
            break;
        }
    }
    read
}

fn write_options() -> SerializerOptions {
    serde_saphyr::ser_options! {
        // YAML 1.2 reading rules decide what needs quotes (`10.0.0.1` stays plain), and
        // [`ScalarStyle`] picks every string's style, so nothing is folded or re-quoted.
        yaml_12: true,
        no_lang_directive: true,
        prefer_block_scalars: false,
    }
}

/// Writes `value` as one YAML document (no `---`), ending in a newline.
pub fn to_string(value: &serde_json::Value) -> Result<String, YamlError> {
    serde_saphyr::to_string_with_options(&Styled(value), write_options()).map_err(|e| {
        YamlError::Serialize {
            message: e.to_string(),
        }
    })
}

/// A JSON value written with the string styles `serde_yaml` (over libyaml) chose, so documents
/// written before the move to `serde-saphyr` come out byte for byte the same.
struct Styled<'a>(&'a serde_json::Value);

impl Serialize for Styled<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeSeq as _};
        match self.0 {
            serde_json::Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, value) in map {
                    out.serialize_entry(
                        &StyledStr {
                            text: key,
                            key: true,
                        },
                        &Styled(value),
                    )?;
                }
                out.end()
            }
            serde_json::Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Styled(item))?;
                }
                out.end()
            }
            serde_json::Value::String(text) => StyledStr { text, key: false }.serialize(serializer),
            other => other.serialize(serializer),
        }
    }
}

/// A string with the style `serde_yaml` gave it.
struct StyledStr<'a> {
    text: &'a str,
    /// A mapping key (a simple key: no block scalars).
    key: bool,
}

impl Serialize for StyledStr<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match ScalarStyle::of(self.text, self.key) {
            ScalarStyle::Plain => serializer.serialize_str(self.text),
            ScalarStyle::SingleQuoted => {
                serde_saphyr::SingleQuoted(self.text).serialize(serializer)
            }
            ScalarStyle::DoubleQuoted => {
                serde_saphyr::DoubleQuoted(self.text).serialize(serializer)
            }
            ScalarStyle::Literal => serde_saphyr::LitStr(self.text).serialize(serializer),
        }
    }
}

/// How a string is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

impl ScalarStyle {
    /// `serde_yaml`'s choice: a literal block for multi-line strings, single quotes for strings
    /// that would read back as something else (`'1000'`, `'true'`, `''`), else plain; then
    /// libyaml's emitter falls back to single and then double quotes when a style cannot hold
    /// the text (its `yaml_emitter_analyze_scalar` and `yaml_emitter_select_scalar_style`, with
    /// unicode output on and no line width, as `serde_yaml` set it up).
    fn of(text: &str, key: bool) -> Self {
        let wanted = if text.contains('\n') {
            Self::Literal
        } else if reads_as_another_type(text) {
            Self::SingleQuoted
        } else {
            Self::Plain
        };
        let allowed = Allowed::of(text);
        match wanted {
            Self::Literal if allowed.block && !key => Self::Literal,
            Self::Plain if allowed.plain => Self::Plain,
            Self::Plain | Self::SingleQuoted if allowed.single_quoted => Self::SingleQuoted,
            _ => Self::DoubleQuoted,
        }
    }
}

/// Whether `serde_yaml` would read the plain scalar `text` as a null, a boolean or a number (or
/// as a string of digits with a leading zero, which it quoted to keep it one).
fn reads_as_another_type(text: &str) -> bool {
    const SPECIAL: [&str; 22] = [
        "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".inf",
        ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN",
        ".NAN",
    ];
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let radix_int = [("0x", 16), ("0o", 8), ("0b", 2)]
        .iter()
        .any(|(prefix, radix)| {
            unsigned.strip_prefix(prefix).is_some_and(|digits| {
                !digits.is_empty() && digits.chars().all(|c| c.is_digit(*radix))
            })
        });
    let leading_zero_digits = unsigned.len() > 1
        && unsigned.starts_with('0')
        && unsigned.bytes().all(|b| b.is_ascii_digit());
    let finite_float = !text.starts_with("+-")
        && !text.starts_with("++")
        && text.parse::<f64>().is_ok_and(f64::is_finite);
    text.is_empty() || SPECIAL.contains(&text) || radix_int || leading_zero_digits || finite_float
}

/// The styles libyaml's emitter allows for a string in block context.
#[derive(Debug, Clone, Copy)]
struct Allowed {
    plain: bool,
    single_quoted: bool,
    block: bool,
}

impl Allowed {
    fn of(text: &str) -> Self {
        let printable = |c: char| {
            c == '\n'
                || (' '..='~').contains(&c)
                || ('\u{A0}'..='\u{D7FF}').contains(&c)
                || (('\u{E000}'..='\u{FFFD}').contains(&c) && c != '\u{FEFF}')
        };
        let is_break = |c: char| matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}');
        let blank = |c: Option<char>| c.is_none_or(|c| c == ' ' || c == '\t' || is_break(c));
        if text.is_empty() {
            return Self {
                plain: false,
                single_quoted: true,
                block: false,
            };
        }
        let chars: Vec<char> = text.chars().collect();
        let mut indicators =
            (text.starts_with("---") || text.starts_with("...")) && blank(chars.get(3).copied());
        let (mut special, mut line_breaks) = (false, false);
        let (mut leading_space, mut leading_break) = (false, false);
        let (mut trailing_space, mut trailing_break) = (false, false);
        let (mut break_space, mut space_break) = (false, false);
        let (mut previous_space, mut previous_break) = (false, false);
        let mut preceded_by_whitespace = true;
        for (i, &c) in chars.iter().enumerate() {
            let followed_by_whitespace = blank(chars.get(i + 1).copied());
            let (first, last) = (i == 0, i + 1 == chars.len());
            if first {
                indicators |= "#,[]{}&*!|>'\"%@`".contains(c)
                    || (matches!(c, '?' | ':' | '-') && followed_by_whitespace);
            } else {
                indicators |=
                    (c == ':' && followed_by_whitespace) || (c == '#' && preceded_by_whitespace);
            }
            special |= !printable(c);
            line_breaks |= is_break(c);
            if c == ' ' {
                leading_space |= first;
                trailing_space |= last;
                break_space |= previous_break;
                (previous_space, previous_break) = (true, false);
            } else if is_break(c) {
                leading_break |= first;
                trailing_break |= last;
                space_break |= previous_space;
                (previous_space, previous_break) = (false, true);
            } else {
                (previous_space, previous_break) = (false, false);
            }
            preceded_by_whitespace = blank(Some(c));
        }
        let edges = leading_space || leading_break || trailing_space || trailing_break;
        let unwritable = space_break || special;
        Self {
            plain: !(edges || break_space || unwritable || line_breaks || indicators),
            single_quoted: !(break_space || unwritable),
            block: !(trailing_space || unwritable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn yes_and_on_stay_strings_as_in_yaml_1_2() {
        let value: Value = from_str("a: yes\nb: on\nc: true\nd: 0755\ne: 42\n").unwrap();
        assert_eq!(
            value,
            json!({"a": "yes", "b": "on", "c": true, "d": "0755", "e": 42})
        );
    }

    #[test]
    fn documents_keep_their_index_with_empty_ones_between() {
        let text = "a: 1\n---\n# only a comment\n---\nb: 2\n---\n";
        let read: Vec<Value> = documents(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(read[0], json!({"a": 1}));
        assert_eq!(read[1], Value::Null);
        assert_eq!(read[2], json!({"b": 2}));
    }

    #[test]
    fn a_broken_document_ends_the_stream_with_its_line() {
        let text = "a: 1\n---\nb: 2\n---\nc: [unclosed\n";
        let read = documents::<Value>(text);
        assert_eq!(read.len(), 3);
        assert_eq!(read[1], Ok(json!({"b": 2})));
        let Err(error) = &read[2] else {
            panic!("{read:?}")
        };
        assert!(error.to_string().contains("line 5"), "{error}");
    }

    #[test]
    fn a_type_error_names_the_field_and_the_line() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[expect(dead_code, reason = "only its type matters")]
            count: u32,
        }
        let error = from_str::<File>("\ncount: many\n").unwrap_err().to_string();
        assert!(error.contains("line 2"), "{error}");
        let error = from_str::<File>("counts: 1\n").unwrap_err().to_string();
        assert!(error.contains("counts"), "{error}");
    }

    #[test]
    fn written_yaml_reads_back_the_same() {
        let value = json!({
            "b": ["x", "1", "yes", "", "multi\nline"],
            "a": {"n": 1, "f": 1.5, "t": true, "z": null, "e": {}},
        });
        let text = to_string(&value).unwrap();
        assert_eq!(from_str::<Value>(&text).unwrap(), value, "{text}");
    }

    #[test]
    fn strings_are_written_in_the_styles_serde_yaml_chose() {
        let text = to_string(&json!({
            "a": "1000",
            "b": "10.0.0.10",
            "c": "x: y",
            "d": "it's",
            "e": "two\nlines",
            "f": "",
            "g": "- x",
            "h": "true",
            "i": ["0755", "tab\there"],
        }))
        .unwrap();
        assert_eq!(
            text,
            "a: '1000'\nb: 10.0.0.10\nc: 'x: y'\nd: it's\ne: |-\n  two\n  lines\nf: ''\ng: '- x'\nh: 'true'\ni:\n- '0755'\n- \"tab\\there\"\n"
        );
    }
}
