//! MIME multipart archives as cloud-init reads them: parsing a user's `multipart/mixed` user data
//! into parts and writing the merged archive Karpenter hands to EC2.
//!
//! Written here rather than taken from a crate: user data needs only headers (with folding), the
//! `Content-Type` parameters and boundary splitting, and the mail crates either decode bodies
//! (which must pass through untouched) or accept anything. The parser is strict where a bad
//! archive would make cloud-init skip the bootstrap part: a malformed header line, a missing
//! `Content-Type`, a non-multipart type, a missing boundary or a missing closing delimiter are
//! errors. Line endings are normalized to `\n`, as Karpenter does for the archives it writes.

use std::fmt::Write as _;

/// `MIME-Version` header value of every archive written.
const MIME_VERSION: &str = "1.0";
/// Boundary of the archives Karpenter writes (kept for byte-compatible output with Karpenter).
const PREFERRED_BOUNDARY: &str = "//";
/// RFC 2046: a boundary is at most 70 characters.
const MAX_BOUNDARY_LENGTH: usize = 70;

/// One part of a multipart archive: its headers in order (names canonicalized) and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Part {
    /// A part with a single `Content-Type` header.
    #[must_use]
    pub fn new(content_type: &str, body: impl Into<String>) -> Self {
        Self {
            headers: vec![("Content-Type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// The `Content-Type` header, if any (the first one).
    #[must_use]
    pub fn content_type(&self) -> Option<&str> {
        header(&self.headers, "Content-Type")
    }

    /// The media type of the part without parameters, lowercased (`text/x-shellscript`).
    #[must_use]
    pub fn media_type(&self) -> Option<String> {
        self.content_type()
            .map(|value| media_type_of(value).to_ascii_lowercase())
    }
}

/// Why user data is not a usable MIME multipart archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MimeError {
    #[error("line {line}: malformed header {text:?} (expected `Name: value`)")]
    MalformedHeader { line: usize, text: String },
    #[error("no Content-Type header")]
    MissingContentType,
    #[error("Content-Type {media_type:?} is not multipart")]
    NotMultipart { media_type: String },
    #[error("Content-Type {content_type:?} has no usable boundary parameter")]
    MissingBoundary { content_type: String },
    #[error("no closing delimiter \"--{boundary}--\"")]
    MissingClosingBoundary { boundary: String },
}

/// Whether user data announces itself as MIME (Karpenter's test: the trimmed text starts with a
/// `MIME-Version:` or `Content-Type:` header).
#[must_use]
pub fn looks_like_mime(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with("MIME-Version:") || trimmed.starts_with("Content-Type:")
}

/// Parses a multipart archive into its parts; the preamble and epilogue are dropped.
pub fn parse(text: &str) -> Result<Vec<Part>, MimeError> {
    let normalized = text.trim_start().replace("\r\n", "\n");
    let lines: Vec<&str> = normalized.split('\n').collect();
    let (headers, body_start) = parse_headers(&lines, 0)?;
    let content_type = header(&headers, "Content-Type").ok_or(MimeError::MissingContentType)?;
    let media_type = media_type_of(content_type);
    if !media_type.to_ascii_lowercase().starts_with("multipart/") {
        return Err(MimeError::NotMultipart {
            media_type: media_type.to_owned(),
        });
    }
    let boundary = parameter(content_type, "boundary")
        .filter(|b| !b.is_empty() && b.len() <= MAX_BOUNDARY_LENGTH)
        .ok_or_else(|| MimeError::MissingBoundary {
            content_type: content_type.to_owned(),
        })?;
    split_parts(&lines, body_start, &boundary)
}

/// Writes parts as one `multipart/mixed` archive with `\n` line endings. The boundary is `//`
/// like Karpenter's, unless a body holds a line that would read as its delimiter; then the
/// first of `//1`, `//2`, ... that no body contains.
#[must_use]
pub fn serialize(parts: &[Part]) -> String {
    let boundary = choose_boundary(parts);
    let mut out = String::new();
    let _ = writeln!(out, "MIME-Version: {MIME_VERSION}");
    let _ = writeln!(
        out,
        "Content-Type: multipart/mixed; boundary=\"{boundary}\""
    );
    out.push('\n');
    for (index, part) in parts.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "--{boundary}");
        let mut headers: Vec<&(String, String)> = part.headers.iter().collect();
        headers.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, value) in headers {
            let _ = writeln!(out, "{name}: {value}");
        }
        out.push('\n');
        out.push_str(&part.body.replace('\r', ""));
    }
    let _ = writeln!(out, "\n--{boundary}--");
    out
}

fn choose_boundary(parts: &[Part]) -> String {
    // A line is a delimiter when it is exactly `--boundary` or `--boundary--` plus optional
    // padding (RFC 2046, and how cloud-init's parser reads it).
    let collides = |boundary: &str| {
        let delimiter = format!("--{boundary}");
        let close = format!("--{boundary}--");
        parts.iter().any(|part| {
            part.body.lines().any(|line| {
                let line = line.trim_end_matches([' ', '\t', '\r']);
                line == delimiter || line == close
            })
        })
    };
    if !collides(PREFERRED_BOUNDARY) {
        return PREFERRED_BOUNDARY.to_owned();
    }
    // A line equals the delimiter of at most one numbered candidate, so one more candidate
    // than there are lines always finds a free boundary.
    let lines: usize = parts.iter().map(|p| p.body.lines().count()).sum();
    (1..=lines + 1)
        .map(|n| format!("{PREFERRED_BOUNDARY}{n}"))
        .find(|candidate| !collides(candidate))
        .unwrap_or_else(|| format!("{PREFERRED_BOUNDARY}{}", lines + 2))
}

/// Parses a header block starting at `start`; returns the headers and the index of the first
/// line after the blank line that ends the block (or past the end).
fn parse_headers(
    lines: &[&str],
    start: usize,
) -> Result<(Vec<(String, String)>, usize), MimeError> {
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut index = start;
    while index < lines.len() {
        let line = lines[index];
        if line.is_empty() {
            return Ok((headers, index + 1));
        }
        if line.starts_with([' ', '\t']) {
            let Some(last) = headers.last_mut() else {
                return Err(malformed(index, line));
            };
            last.1.push(' ');
            last.1.push_str(line.trim());
        } else {
            let (name, value) = line.split_once(':').ok_or_else(|| malformed(index, line))?;
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(malformed(index, line));
            }
            headers.push((canonical_header_name(name), value.trim().to_owned()));
        }
        index += 1;
    }
    Ok((headers, index))
}

fn malformed(index: usize, line: &str) -> MimeError {
    MimeError::MalformedHeader {
        line: index + 1,
        text: line.chars().take(80).collect(),
    }
}

fn split_parts(lines: &[&str], start: usize, boundary: &str) -> Result<Vec<Part>, MimeError> {
    let delimiter = format!("--{boundary}");
    let close = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<usize> = None;
    for (index, line) in lines.iter().enumerate().skip(start) {
        let line = line.trim_end_matches([' ', '\t']);
        let is_close = line == close;
        if !is_close && line != delimiter {
            continue;
        }
        if let Some(part_start) = current {
            parts.push(parse_part(lines, part_start, index)?);
        }
        if is_close {
            return Ok(parts);
        }
        current = Some(index + 1);
    }
    Err(MimeError::MissingClosingBoundary {
        boundary: boundary.to_owned(),
    })
}

/// A part spans `lines[start..end]`; the line break before the next delimiter belongs to the
/// delimiter, so the body is those lines joined with `\n`.
fn parse_part(lines: &[&str], start: usize, end: usize) -> Result<Part, MimeError> {
    let (headers, body_start) = parse_headers(&lines[..end], start)?;
    let body = if body_start < end {
        lines[body_start..end].join("\n")
    } else {
        String::new()
    };
    Ok(Part { headers, body })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn media_type_of(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

/// The value of a `Content-Type` parameter (`boundary="//"`), unquoted.
fn parameter(content_type: &str, name: &str) -> Option<String> {
    let mut rest = content_type.split_once(';')?.1;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return None;
        }
        let (key, after_key) = rest.split_once('=')?;
        let after_key = after_key.trim_start();
        let (value, remaining) = if let Some(quoted) = after_key.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    _ => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after_key.find(';').unwrap_or(after_key.len());
            (after_key[..end].trim().to_owned(), &after_key[end..])
        };
        if key.trim().eq_ignore_ascii_case(name) {
            return Some(value);
        }
        rest = remaining;
    }
}

/// RFC 7230 token characters, which header names are made of.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// `content-type` -> `Content-Type`, as Go's `textproto` writes header names.
fn canonical_header_name(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let mapped = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            mapped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARCHIVE: &str = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\n\r\npreamble\r\n--BOUNDARY\r\ncontent-type: text/x-shellscript; charset=\"us-ascii\"\r\n\r\n#!/bin/bash\r\necho hi\r\n\r\n--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\nkind: NodeConfig\r\n--BOUNDARY--\r\nepilogue";

    #[test]
    fn parts_keep_their_bodies_and_canonical_header_names() {
        let parts = parse(ARCHIVE).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0].headers,
            vec![(
                "Content-Type".to_owned(),
                "text/x-shellscript; charset=\"us-ascii\"".to_owned()
            )]
        );
        assert_eq!(parts[0].body, "#!/bin/bash\necho hi\n");
        assert_eq!(parts[1].body, "kind: NodeConfig");
        assert_eq!(
            parts[1].media_type().as_deref(),
            Some("application/node.eks.aws")
        );
    }

    #[test]
    fn a_serialized_archive_parses_back_to_the_same_parts() {
        let parts = vec![
            Part::new("text/x-shellscript; charset=\"us-ascii\"", "#!/bin/bash\n"),
            Part::new("application/node.eks.aws", "kind: NodeConfig"),
        ];
        let text = serialize(&parts);
        assert!(text.starts_with(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\n"
        ));
        assert!(text.ends_with("kind: NodeConfig\n--//--\n"));
        assert_eq!(parse(&text).unwrap(), parts);
    }

    #[test]
    fn a_body_holding_the_default_delimiter_gets_another_boundary() {
        let parts = vec![Part::new("text/plain", "--//\nnot a delimiter")];
        let text = serialize(&parts);
        assert!(text.contains("boundary=\"//1\""), "{text}");
        assert_eq!(parse(&text).unwrap(), parts);
    }

    #[test]
    fn folded_headers_and_unquoted_boundaries_are_read() {
        let text = "Content-Type: multipart/mixed;\n boundary=abc\nMIME-Version: 1.0\n\n--abc\nContent-Type: text/plain\n\nx\n--abc--\n";
        let parts = parse(text).unwrap();
        assert_eq!(parts[0].body, "x");
    }

    #[test]
    fn bad_archives_are_errors_that_say_why() {
        type Check = fn(&MimeError) -> bool;
        let cases: [(&str, Check); 5] = [
            ("MIME-Version: 1.0\nnot a header\n\n", |e| {
                matches!(e, MimeError::MalformedHeader { line: 2, .. })
            }),
            ("MIME-Version: 1.0\n\n--x\n--x--\n", |e| {
                matches!(e, MimeError::MissingContentType)
            }),
            ("Content-Type: text/plain\n\nhello", |e| {
                matches!(e, MimeError::NotMultipart { .. })
            }),
            ("Content-Type: multipart/mixed\n\n--x\n--x--", |e| {
                matches!(e, MimeError::MissingBoundary { .. })
            }),
            (
                "Content-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: text/plain\n\nbody\n",
                |e| matches!(e, MimeError::MissingClosingBoundary { .. }),
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(expected(&error), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_part_without_a_blank_line_after_its_headers_is_malformed() {
        let text = "Content-Type: multipart/mixed; boundary=x\n\n--x\n#!/bin/bash\n--x--\n";
        assert!(matches!(
            parse(text),
            Err(MimeError::MalformedHeader { line: 4, .. })
        ));
    }

    #[test]
    fn mime_detection_follows_karpenter() {
        assert!(looks_like_mime("  MIME-Version: 1.0\n"));
        assert!(looks_like_mime("Content-Type: multipart/mixed"));
        assert!(!looks_like_mime("#!/bin/bash"));
    }
}
