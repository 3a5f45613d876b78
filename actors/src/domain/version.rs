//! The Kubernetes versions this release runs against: the pure check behind the daemon's
//! startup refusal (`karpenter run`) and the AWS provider's periodic version check (Karpenter's
//! `providers.version`, reference 4.2).
//!
//! Data flow: the binary reads the API server's `/version` (`major`, `minor`, `gitVersion`),
//! parses it with [`KubernetesVersion::from_server`] and calls [`check`] with the configured
//! floor (`KUBERNETES_MIN_VERSION`); an error stops the daemon with its message, a
//! [`Compatibility::NewerThanTested`] is logged as a warning and the daemon runs.

use std::fmt;

/// The oldest minor version Karpenter v1.5 supports: v1.5 dropped 1.25 (aws#8080).
pub const MIN_SUPPORTED: KubernetesVersion = KubernetesVersion {
    major: 1,
    minor: 26,
};

/// The newest minor version Karpenter v1.5 was tested against (aws#8115); newer servers get a
/// warning, not a refusal, as the API is compatible in practice.
pub const MAX_TESTED: KubernetesVersion = KubernetesVersion {
    major: 1,
    minor: 33,
};

/// A Kubernetes `major.minor` version (patch levels never change compatibility).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A version that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "the Kubernetes API server reports version {found:?}, which cannot be read as major.minor"
    )]
    Unreadable { found: String },
    #[error(
        "KUBERNETES_MIN_VERSION {found:?} is not a version (expected major.minor[.patch], e.g. 1.26.0)"
    )]
    BadMinimum { found: String },
    #[error(
        "Kubernetes {found} is not supported: this release needs {minimum} or newer \
         (Karpenter v1.5 supports {MIN_SUPPORTED} to {MAX_TESTED}); upgrade the cluster or run an older release"
    )]
    TooOld {
        found: KubernetesVersion,
        minimum: KubernetesVersion,
    },
}

impl VersionError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unreadable { .. } => "unreadable_version",
            Self::BadMinimum { .. } => "bad_minimum_version",
            Self::TooOld { .. } => "unsupported_version",
        }
    }
}

/// The leading number of `text` (`"26+"` -> 26, as EKS reports minors).
fn leading_number(text: &str) -> Option<u32> {
    let digits: &str = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or(text, |end| &text[..end]);
    digits.parse().ok()
}

impl KubernetesVersion {
    /// Reads `major.minor[.patch][-pre][+build]`, with or without a leading `v`.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor = leading_number(parts.next()?)?;
        Some(Self { major, minor })
    }

    /// Reads the API server's `/version` answer: `major` and `minor` when both are numbers
    /// (EKS writes minors like `"29+"`), else `gitVersion` (`v1.29.3-eks-adc7111`).
    pub fn from_server(major: &str, minor: &str, git_version: &str) -> Result<Self, VersionError> {
        if let (Ok(major), Some(minor)) = (major.trim().parse(), leading_number(minor.trim())) {
            return Ok(Self { major, minor });
        }
        Self::parse(git_version).ok_or_else(|| VersionError::Unreadable {
            found: format!("major {major:?}, minor {minor:?}, gitVersion {git_version:?}"),
        })
    }
}

/// What the daemon should do about a supported version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    /// Within the tested range.
    Supported,
    /// Newer than the newest tested version: run, with a warning.
    NewerThanTested { found: KubernetesVersion },
}

impl Compatibility {
    /// The warning to log, if any.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        match self {
            Self::Supported => None,
            Self::NewerThanTested { found } => Some(format!(
                "Kubernetes {found} is newer than the newest version this release was tested \
                 against ({MAX_TESTED}); it should work, but report anything odd"
            )),
        }
    }
}

/// Checks a server version against the supported range. `configured_minimum` is the
/// `KUBERNETES_MIN_VERSION` setting: it can raise the floor, never lower it below
/// [`MIN_SUPPORTED`] (its chart default, `1.19.0-0`, predates v1.5's floor).
pub fn check(
    server: KubernetesVersion,
    configured_minimum: &str,
) -> Result<Compatibility, VersionError> {
    let configured =
        KubernetesVersion::parse(configured_minimum).ok_or_else(|| VersionError::BadMinimum {
            found: configured_minimum.to_owned(),
        })?;
    let minimum = configured.max(MIN_SUPPORTED);
    if server < minimum {
        return Err(VersionError::TooOld {
            found: server,
            minimum,
        });
    }
    if server > MAX_TESTED {
        return Ok(Compatibility::NewerThanTested { found: server });
    }
    Ok(Compatibility::Supported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KubernetesVersion {
        KubernetesVersion { major: 1, minor }
    }

    #[test]
    fn versions_are_read_from_eks_and_plain_servers() {
        assert_eq!(KubernetesVersion::from_server("1", "29+", ""), Ok(v(29)));
        assert_eq!(
            KubernetesVersion::from_server("", "", "v1.30.2-eks-db838b0"),
            Ok(v(30))
        );
        assert_eq!(KubernetesVersion::parse("1.19.0-0"), Some(v(19)));
        assert!(matches!(
            KubernetesVersion::from_server("x", "y", "garbage"),
            Err(VersionError::Unreadable { .. })
        ));
    }

    #[test]
    fn a_server_older_than_1_26_is_refused_with_the_supported_range() {
        let error = check(v(25), "1.19.0-0").unwrap_err();
        assert_eq!(
            error,
            VersionError::TooOld {
                found: v(25),
                minimum: v(26)
            }
        );
        let message = error.to_string();
        assert!(message.contains("Kubernetes 1.25 is not supported"), "{message}");
        assert!(message.contains("1.26 to 1.33"), "{message}");
    }

    #[test]
    fn the_tested_range_is_supported_and_newer_versions_warn() {
        assert_eq!(check(v(26), "1.19.0-0"), Ok(Compatibility::Supported));
        assert_eq!(check(v(33), "1.19.0-0"), Ok(Compatibility::Supported));
        let newer = check(v(34), "1.19.0-0").unwrap();
        assert_eq!(newer, Compatibility::NewerThanTested { found: v(34) });
        assert!(newer.warning().is_some_and(|w| w.contains("1.34")));
    }

    #[test]
    fn the_configured_minimum_raises_the_floor_but_never_lowers_it() {
        assert!(matches!(
            check(v(28), "1.29"),
            Err(VersionError::TooOld { minimum, .. }) if minimum == v(29)
        ));
        assert!(check(v(25), "1.20").is_err());
        assert!(matches!(
            check(v(30), "one.two"),
            Err(VersionError::BadMinimum { .. })
        ));
    }
}
