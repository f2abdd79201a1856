//! `metadata.yaml`: which release series a provider has and which contract each follows.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A release version, `X.Y.Z` or `X.Y.Z-PRE` (a leading `v` is accepted), as semantic
/// versioning defines it (build metadata aside); its folder in a clusterctl repository is
/// `vX.Y.Z[-PRE]`, as clusterctl expects. Versions order by semver precedence: `1.0.0-rc.2` <
/// `1.0.0-rc.10` < `1.0.0`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version.
    pub patch: u64,
    /// The pre-release part after `-`, if any.
    pub pre: Option<String>,
}

/// A version that is not `X.Y.Z[-PRE]`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "version {0:?}: expected MAJOR.MINOR.PATCH with an optional -PRE-RELEASE (letters, digits, '.' and '-'), e.g. 0.1.0 or 0.2.0-rc.1"
)]
pub struct VersionError(pub String);

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || VersionError(text.to_string());
        let bare = text.strip_prefix('v').unwrap_or(text);
        let (release, pre) = match bare.split_once('-') {
            Some((release, pre)) => (release, Some(pre)),
            None => (bare, None),
        };
        if pre.is_some_and(|pre| !pre.split('.').all(valid_identifier)) {
            return Err(error());
        }
        let numbers: Vec<u64> = release
            .split('.')
            .map(|part| {
                // No sign, no leading zero: semver's numeric identifiers.
                let canonical = !part.is_empty()
                    && part.chars().all(|c| c.is_ascii_digit())
                    && (part == "0" || !part.starts_with('0'));
                canonical.then(|| part.parse().ok()).flatten()
            })
            .collect::<Option<_>>()
            .ok_or_else(error)?;
        let [major, minor, patch] = numbers[..] else {
            return Err(error());
        };
        Ok(Self {
            major,
            minor,
            patch,
            pre: pre.map(str::to_string),
        })
    }
}

/// A pre-release identifier: ASCII letters, digits and `-`, not empty, and a number without a
/// leading zero.
fn valid_identifier(identifier: &str) -> bool {
    !identifier.is_empty()
        && identifier
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !(identifier.len() > 1
            && identifier.starts_with('0')
            && identifier.chars().all(|c| c.is_ascii_digit()))
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let release =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if release != Ordering::Equal {
            return release;
        }
        match (&self.pre, &other.pre) {
            (None, None) => Ordering::Equal,
            // A pre-release comes before its release.
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(mine), Some(theirs)) => {
                let mut mine = mine.split('.');
                let mut theirs = theirs.split('.');
                loop {
                    let order = match (mine.next(), theirs.next()) {
                        (None, None) => return Ordering::Equal,
                        (None, Some(_)) => return Ordering::Less,
                        (Some(_), None) => return Ordering::Greater,
                        (Some(a), Some(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(a), Ok(b)) => a.cmp(&b),
                            // Numeric identifiers come before alphanumeric ones.
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        },
                    };
                    if order != Ordering::Equal {
                        return order;
                    }
                }
            }
        }
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    /// `vX.Y.Z[-PRE]`, the folder name and image tag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

/// One release series: every `major.minor.*` release follows `contract`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReleaseSeries {
    /// The series' major version.
    pub major: u64,
    /// The series' minor version.
    pub minor: u64,
    /// The Cluster API contract it follows (`v1beta2`).
    pub contract: String,
}

/// clusterctl's `Metadata` (`clusterctl.cluster.x-k8s.io/v1alpha3`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Always `clusterctl.cluster.x-k8s.io/v1alpha3`.
    pub api_version: String,
    /// Always `Metadata`.
    pub kind: String,
    /// Every release series, oldest first.
    #[serde(default)]
    pub release_series: Vec<ReleaseSeries>,
}

impl Metadata {
    /// Metadata without any series.
    pub fn new() -> Self {
        Self {
            api_version: "clusterctl.cluster.x-k8s.io/v1alpha3".to_string(),
            kind: "Metadata".to_string(),
            release_series: Vec::new(),
        }
    }

    /// The series of `version` (major and minor; the patch and pre-release do not count), if
    /// listed.
    pub fn series(&self, version: &Version) -> Option<&ReleaseSeries> {
        self.release_series
            .iter()
            .find(|s| (s.major, s.minor) == (version.major, version.minor))
    }

    /// These series and `other`'s, each once, oldest first; where both list a series, `self`'s
    /// contract stands.
    pub fn merge(mut self, other: &Metadata) -> Self {
        for series in &other.release_series {
            if !self
                .release_series
                .iter()
                .any(|s| (s.major, s.minor) == (series.major, series.minor))
            {
                self.release_series.push(series.clone());
            }
        }
        self.release_series.sort();
        self
    }

    /// With the series of `version` following this SDK's contract
    /// ([`capi_core::labels::CONTRACT`]) when it is not listed yet.
    pub fn with_release(self, version: &Version) -> Self {
        let mut this = Self::new().merge(&self);
        if this.series(version).is_none() {
            this.release_series.push(ReleaseSeries {
                major: version.major,
                minor: version.minor,
                contract: capi_core::labels::CONTRACT.to_string(),
            });
            this.release_series.sort();
        }
        this
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn versions_parse_as_semver_and_print_as_clusterctl_folders() {
        let version: Version = "0.2.0-rc.1".parse().unwrap();
        assert_eq!((version.major, version.minor, version.patch), (0, 2, 0));
        assert_eq!(version.to_string(), "v0.2.0-rc.1");
        assert_eq!("v1.14.2".parse::<Version>().unwrap().to_string(), "v1.14.2");
        for bad in [
            "",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.2.x",
            "1.2.3-",
            "1.2.3-a/b",
            "+1.2.3",
        ] {
            let error = bad.parse::<Version>().unwrap_err();
            assert_eq!(error, VersionError(bad.to_string()));
            assert!(error.to_string().contains("MAJOR.MINOR.PATCH"));
        }
    }

    #[test]
    fn versions_order_by_semver_precedence() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
        ];
        let versions: Vec<Version> = ordered.iter().map(|v| v.parse().unwrap()).collect();
        for pair in versions.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        let mut shuffled = versions.clone();
        shuffled.reverse();
        shuffled.sort();
        assert_eq!(shuffled, versions);
    }

    #[test]
    fn a_release_adds_its_series_once_and_keeps_every_earlier_one() {
        let first = Metadata::new().with_release(&"0.1.0".parse().unwrap());
        let patch = first.clone().with_release(&"0.1.3".parse().unwrap());
        assert_eq!(patch, first, "a patch release is in its series");
        let second = patch.with_release(&"0.2.0".parse().unwrap());
        let series: Vec<(u64, u64, &str)> = second
            .release_series
            .iter()
            .map(|s| (s.major, s.minor, s.contract.as_str()))
            .collect();
        assert_eq!(series, [(0, 1, "v1beta2"), (0, 2, "v1beta2")]);
        let older = Metadata {
            release_series: vec![ReleaseSeries {
                major: 0,
                minor: 0,
                contract: "v1beta1".into(),
            }],
            ..Metadata::new()
        };
        let merged = second.merge(&older);
        assert_eq!(merged.release_series[0].contract, "v1beta1");
        assert_eq!(merged.release_series.len(), 3);
    }
}
