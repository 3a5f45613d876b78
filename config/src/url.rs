//! Absolute `http://` or `https://` URLs, for the cluster endpoint and the AWS endpoint override.
//! Karpenter's rule for `CLUSTER_ENDPOINT` (aws `options_validation.go`): absolute, with a host.
//! We also require an http(s) scheme: both settings are HTTP endpoints.

use std::fmt;
use std::str::FromStr;

/// A validated absolute `http://` or `https://` URL with a host, kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl(String);

/// A string that is not an absolute http(s) URL with a host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The URI parser rejected it.
    #[error("invalid URL {input:?}: {reason} (expected e.g. https://example.com:443)")]
    Malformed { input: String, reason: String },
    /// Not `http` or `https` (or no scheme at all).
    #[error("invalid URL {input:?}: must start with http:// or https://")]
    UnsupportedScheme { input: String },
    /// No host after the scheme.
    #[error("invalid URL {input:?}: missing host")]
    MissingHost { input: String },
    /// A port that is not a number up to 65535 (the URI parser only checks it when asked).
    #[error("invalid URL {input:?}: invalid port {port:?} (expected a number up to 65535)")]
    InvalidPort { input: String, port: String },
}

impl UrlError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_url"
    }
}

impl HttpUrl {
    /// Validates `input` as an absolute http(s) URL with a host.
    pub fn parse(input: &str) -> Result<Self, UrlError> {
        let uri: http::Uri =
            input
                .parse()
                .map_err(|err: http::uri::InvalidUri| UrlError::Malformed {
                    input: input.to_owned(),
                    reason: err.to_string(),
                })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(UrlError::UnsupportedScheme {
                input: input.to_owned(),
            });
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(UrlError::MissingHost {
                input: input.to_owned(),
            });
        }
        if let Some(port) = port_text(&uri)
            && port.parse::<u16>().is_err()
        {
            return Err(UrlError::InvalidPort {
                input: input.to_owned(),
                port: port.to_owned(),
            });
        }
        Ok(Self(input.to_owned()))
    }

    /// The URL as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for HttpUrl {
    type Err = UrlError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        Self::parse(input)
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for HttpUrl {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The text after the host's `:`, if any (`[::1]:4566` gives `4566`).
fn port_text(uri: &http::Uri) -> Option<&str> {
    let authority = uri.authority()?.as_str();
    let host_and_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, rest)| rest);
    let after_host = match host_and_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(_, rest)| rest),
        None => host_and_port
            .find(':')
            .map_or("", |colon| &host_and_port[colon..]),
    };
    after_host.strip_prefix(':')
}

/// Clap value parser: empty means unset (Karpenter's `""` default), anything else must be valid.
pub(crate) fn parse_optional_http_url(input: &str) -> Result<Option<HttpUrl>, UrlError> {
    if input.is_empty() {
        return Ok(None);
    }
    HttpUrl::parse(input).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_https_urls_with_a_host_are_accepted() {
        for input in [
            "https://ABCDEF.gr7.us-west-2.eks.amazonaws.com",
            "http://localhost:4566",
            "http://127.0.0.1:4566/",
            "http://[::1]:4566/path?query=1",
            "https://user@example.com",
        ] {
            assert_eq!(
                HttpUrl::parse(input).map(|url| url.to_string()),
                Ok(input.to_owned())
            );
        }
    }

    #[test]
    fn other_strings_are_rejected_with_the_reason() {
        let cases = [
            ("localhost:4566", "must start with http:// or https://"),
            ("ftp://example.com", "must start with http:// or https://"),
            ("/just/a/path", "must start with http:// or https://"),
            ("http://", "invalid URL"),
            ("http://:8080", "missing host"),
            ("http://exa mple.com", "invalid URL"),
            ("http://example.com:port", "invalid port \"port\""),
            ("http://example.com:70000", "invalid port \"70000\""),
            ("http://[::1]:x/", "invalid port \"x\""),
            ("not a url", "invalid URL"),
        ];
        for (input, expected) in cases {
            let err = HttpUrl::parse(input).expect_err(input);
            assert!(err.to_string().contains(expected), "{input:?}: {err}");
            assert!(err.to_string().contains(input), "{input:?}: {err}");
        }
    }

    #[test]
    fn empty_endpoint_means_unset() {
        assert_eq!(parse_optional_http_url(""), Ok(None));
    }
}
