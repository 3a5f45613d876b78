//! The Kubernetes version check: Karpenter v1.5 supports control planes from 1.26 (v1.5 dropped
//! 1.25) to 1.33 (the newest it was tested with). The binary reads the server's `/version` (or
//! EKS `DescribeCluster`) at startup and asks [`check_with_minimum`] what to do: refuse to start
//! below the minimum, warn above the newest tested version, carry on otherwise. The daemon's
//! `VersionActor` reads it again every 5 minutes and asks [`update`] whether the version in use
//! follows: a change to a supported version does, an unsupported one is refused.

use std::fmt;

/// The oldest control plane Karpenter v1.5 runs against.
pub const MIN_SUPPORTED: KubernetesVersion = KubernetesVersion {
    major: 1,
    minor: 26,
};
/// The newest control plane Karpenter v1.5 was tested with (its compatibility matrix).
pub const MAX_TESTED: KubernetesVersion = KubernetesVersion {
    major: 1,
    minor: 33,
};

/// A Kubernetes `major.minor` version.
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

/// What the server said that could not be read as a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "kubernetes version {value:?} is not a version: expected major.minor such as \"v1.29.3\" or \"1.29\""
    )]
    Unparseable { value: String },
    #[error(
        "kubernetes {version} is not supported: this karpenter (Karpenter v1.5 compatible) needs a control plane at {minimum} or newer; upgrade the cluster or run an older Karpenter release"
    )]
    TooOld {
        version: KubernetesVersion,
        minimum: KubernetesVersion,
    },
}

impl VersionError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unparseable { .. } => "unparseable_version",
            Self::TooOld { .. } => "unsupported_version",
        }
    }
}

/// A version the daemon runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionVerdict {
    /// Within the supported range.
    Supported(KubernetesVersion),
    /// Newer than the newest tested version: run, and log [`VersionVerdict::warning`].
    NewerThanTested(KubernetesVersion),
}

impl VersionVerdict {
    /// The warning to log, if any.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        match self {
            Self::Supported(_) => None,
            Self::NewerThanTested(version) => Some(format!(
                "kubernetes {version} is newer than {MAX_TESTED}, the newest version Karpenter v1.5 was tested with; it should work, but report problems"
            )),
        }
    }

    #[must_use]
    pub fn version(&self) -> KubernetesVersion {
        match self {
            Self::Supported(version) | Self::NewerThanTested(version) => *version,
        }
    }
}

impl KubernetesVersion {
    /// Reads a `gitVersion` (`v1.29.3-eks-ae9a62a`) or a `major.minor` (`1.29`).
    pub fn parse(value: &str) -> Result<Self, VersionError> {
        let unparseable = || VersionError::Unparseable {
            value: value.to_owned(),
        };
        let trimmed = value.trim();
        let trimmed = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let mut parts = trimmed.split('.');
        let major = parts.next().ok_or_else(unparseable)?;
        let minor = parts.next().ok_or_else(unparseable)?;
        Self::from_parts(major, minor).map_err(|_| unparseable())
    }

    /// Reads `/version`'s `major` and `minor` fields; EKS reports minors such as `29+`.
    pub fn from_parts(major: &str, minor: &str) -> Result<Self, VersionError> {
        let unparseable = || VersionError::Unparseable {
            value: format!("{major}.{minor}"),
        };
        let number = |text: &str| -> Option<u32> {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        Ok(Self {
            major: number(major.trim()).ok_or_else(unparseable)?,
            minor: number(minor.trim()).ok_or_else(unparseable)?,
        })
    }
}

/// Decides whether the daemon may run against this control plane.
pub fn check(version: KubernetesVersion) -> Result<VersionVerdict, VersionError> {
    if version < MIN_SUPPORTED {
        return Err(VersionError::TooOld {
            version,
            minimum: MIN_SUPPORTED,
        });
    }
    if version > MAX_TESTED {
        return Ok(VersionVerdict::NewerThanTested(version));
    }
    Ok(VersionVerdict::Supported(version))
}

/// [`check`], with a floor of the operator's (`KUBERNETES_MIN_VERSION`) when it asks for more
/// than Karpenter's minimum.
pub fn check_with_minimum(
    version: KubernetesVersion,
    minimum: Option<KubernetesVersion>,
) -> Result<VersionVerdict, VersionError> {
    let verdict = check(version)?;
    match minimum {
        Some(minimum) if version < minimum => Err(VersionError::TooOld { version, minimum }),
        _ => Ok(verdict),
    }
}

/// What a periodic read of the control plane's version means for the version in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionUpdate {
    /// The version in use is current.
    Unchanged,
    /// The control plane moved to a version the daemon runs against: use it from now on.
    Changed(VersionVerdict),
    /// The control plane moved to a version the daemon does not support: keep the one in use.
    Rejected(VersionError),
}

/// Decides what a version read from the control plane does to `current`, the one in use
/// (Karpenter's `providers.version`, which validates a version when it changes).
#[must_use]
pub fn update(
    current: KubernetesVersion,
    found: KubernetesVersion,
    minimum: Option<KubernetesVersion>,
) -> VersionUpdate {
    if found == current {
        return VersionUpdate::Unchanged;
    }
    match check_with_minimum(found, minimum) {
        Ok(verdict) => VersionUpdate::Changed(verdict),
        Err(error) => VersionUpdate::Rejected(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_versions_and_eks_minors_parse() {
        assert_eq!(
            KubernetesVersion::parse("v1.29.3-eks-ae9a62a").unwrap(),
            KubernetesVersion {
                major: 1,
                minor: 29
            }
        );
        assert_eq!(
            KubernetesVersion::from_parts("1", "30+").unwrap(),
            KubernetesVersion {
                major: 1,
                minor: 30
            }
        );
        assert!(KubernetesVersion::parse("latest").is_err());
        assert!(KubernetesVersion::parse("v1").is_err());
    }

    #[test]
    fn versions_below_1_26_are_refused_with_the_minimum_in_the_message() {
        let error = check(KubernetesVersion::parse("v1.25.16").unwrap()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("kubernetes 1.25 is not supported"),
            "{message}"
        );
        assert!(message.contains("1.26 or newer"), "{message}");
        assert_eq!(error.category(), "unsupported_version");
    }

    #[test]
    fn the_supported_range_runs_quietly_and_newer_versions_warn() {
        for minor in 26..=33 {
            let verdict = check(KubernetesVersion { major: 1, minor }).unwrap();
            assert_eq!(verdict.warning(), None, "1.{minor}");
        }
        let verdict = check(KubernetesVersion::parse("1.34").unwrap()).unwrap();
        assert!(matches!(verdict, VersionVerdict::NewerThanTested(_)));
        assert!(verdict.warning().unwrap().contains("1.33"));
    }

    #[test]
    fn a_changed_version_is_used_only_when_supported_and_above_the_floor() {
        let v = |text| KubernetesVersion::parse(text).unwrap();
        assert_eq!(update(v("1.32"), v("1.32"), None), VersionUpdate::Unchanged);
        assert_eq!(
            update(v("1.32"), v("1.33"), None),
            VersionUpdate::Changed(VersionVerdict::Supported(v("1.33")))
        );
        assert_eq!(
            update(v("1.33"), v("1.34"), None),
            VersionUpdate::Changed(VersionVerdict::NewerThanTested(v("1.34")))
        );
        assert!(matches!(
            update(v("1.32"), v("1.20"), None),
            VersionUpdate::Rejected(VersionError::TooOld { .. })
        ));
        let VersionUpdate::Rejected(error) = update(v("1.32"), v("1.30"), Some(v("1.31"))) else {
            panic!("1.30 is below the floor");
        };
        assert!(error.to_string().contains("1.31 or newer"), "{error}");
    }
}
