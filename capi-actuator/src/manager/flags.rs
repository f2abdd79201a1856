//! The command-line flags every provider's manager binary shares, parsed in one place so that
//! all managers accept the same spelling:
//!
//! ```text
//! [--http-addr 0.0.0.0:8080] [--namespace NS] [--label-selector SEL] [--concurrency N]
//! [--qps F] [--burst N] [--leader-elect NAMESPACE/NAME] [--log-format text|json]
//! [--with-bootstrap] [--with-core]
//! ```
//!
//! A binary feeds each flag to [`ManagerFlags::accept`] and handles the ones it declines itself:
//!
//! ```
//! use capi_actuator::manager::flags::{FlagError, ManagerFlags};
//!
//! let mut flags = ManagerFlags::default();
//! let mut args = ["--qps", "20", "--with-core"].map(String::from).into_iter();
//! while let Some(flag) = args.next() {
//!     if !flags.accept(&flag, &mut args)? {
//!         return Err(FlagError::Unknown(flag));
//!     }
//! }
//! assert_eq!(flags.config.qps, 20.0);
//! assert!(flags.with_core);
//! # Ok::<(), FlagError>(())
//! ```

use super::{LeaderElectionConfig, ManagerConfig};
use crate::telemetry::LogFormat;

/// A flag that could not be used; the message says what is expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagError {
    /// The flag needs a value and none followed.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// The value does not parse.
    #[error("{flag} expects {expected}, not {value:?}")]
    Invalid {
        /// The flag.
        flag: String,
        /// What it expects.
        expected: &'static str,
        /// What it got.
        value: String,
    },
    /// Neither the shared flags nor the binary's own know it.
    #[error("unknown argument {0:?}; see the binary's docs for the flags")]
    Unknown(String),
}

/// What the shared flags set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManagerFlags {
    /// The manager's configuration (HTTP address, QPS, burst, leader election, reconciler scope
    /// and concurrency).
    pub config: ManagerConfig,
    /// The log line format.
    pub log_format: LogFormat,
    /// Also run the kubeadm bootstrap reconciler.
    pub with_bootstrap: bool,
    /// Also run the core Cluster API controllers (standalone mode).
    pub with_core: bool,
}

impl ManagerFlags {
    /// Applies `flag` (taking its value from `rest` when it has one) and returns `true`, or
    /// returns `false` without consuming anything when the flag is not a shared one.
    pub fn accept(
        &mut self,
        flag: &str,
        rest: &mut impl Iterator<Item = String>,
    ) -> Result<bool, FlagError> {
        let mut value = || {
            rest.next()
                .ok_or_else(|| FlagError::MissingValue(flag.into()))
        };
        let invalid = |expected, value: String| FlagError::Invalid {
            flag: flag.into(),
            expected,
            value,
        };
        match flag {
            "--with-bootstrap" => self.with_bootstrap = true,
            "--with-core" => self.with_core = true,
            "--http-addr" => {
                let v = value()?;
                self.config.http_addr = v.parse().map_err(|_| invalid("HOST:PORT", v))?;
            }
            "--namespace" => {
                let options = std::mem::take(&mut self.config.reconciler);
                self.config.reconciler = options.namespace(value()?);
            }
            "--label-selector" => {
                let options = std::mem::take(&mut self.config.reconciler);
                self.config.reconciler = options.label_selector(value()?);
            }
            "--concurrency" => {
                let v = value()?;
                let n = v.parse().map_err(|_| invalid("a count (1–65535)", v))?;
                let options = std::mem::take(&mut self.config.reconciler);
                self.config.reconciler = options.concurrency(n);
            }
            "--qps" => {
                let v = value()?;
                self.config.qps = v
                    .parse()
                    .ok()
                    .filter(|q: &f64| q.is_finite() && *q > 0.0)
                    .ok_or_else(|| invalid("a positive number", v))?;
            }
            "--burst" => {
                let v = value()?;
                self.config.burst = v.parse().map_err(|_| invalid("a count", v))?;
            }
            "--leader-elect" => {
                let v = value()?;
                let (namespace, name) = v
                    .split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .ok_or_else(|| invalid("NAMESPACE/NAME", v.clone()))?;
                self.config.leader_election = Some(LeaderElectionConfig::new(namespace, name));
            }
            "--log-format" => {
                let v = value()?;
                self.log_format = match v.as_str() {
                    "json" => LogFormat::Json,
                    "text" => LogFormat::Text,
                    _ => return Err(invalid("text or json", v)),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(args: &[&str]) -> Result<ManagerFlags, FlagError> {
        let mut flags = ManagerFlags::default();
        let mut rest = args.iter().map(|s| s.to_string());
        while let Some(flag) = rest.next() {
            if !flags.accept(&flag, &mut rest)? {
                return Err(FlagError::Unknown(flag));
            }
        }
        Ok(flags)
    }

    #[test]
    fn every_shared_flag_lands_in_the_config() {
        let flags = parse(&[
            "--http-addr",
            "127.0.0.1:9000",
            "--namespace",
            "team-a",
            "--label-selector",
            "tier=gold",
            "--concurrency",
            "7",
            "--qps",
            "12.5",
            "--burst",
            "30",
            "--leader-elect",
            "capi-system/lease",
            "--log-format",
            "json",
            "--with-bootstrap",
            "--with-core",
        ])
        .unwrap();
        assert_eq!(flags.config.http_addr.to_string(), "127.0.0.1:9000");
        assert_eq!(flags.config.reconciler.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            flags.config.reconciler.label_selector.as_deref(),
            Some("tier=gold")
        );
        assert_eq!(flags.config.reconciler.concurrency, 7);
        assert_eq!((flags.config.qps, flags.config.burst), (12.5, 30));
        let lease = flags.config.leader_election.unwrap();
        assert_eq!(
            (lease.namespace.as_str(), lease.lease_name.as_str()),
            ("capi-system", "lease")
        );
        assert_eq!(flags.log_format, LogFormat::Json);
        assert!(flags.with_bootstrap && flags.with_core);
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        assert_eq!(
            parse(&["--qps"]).unwrap_err(),
            FlagError::MissingValue("--qps".into())
        );
        for (args, expected) in [
            (["--qps", "-1"], "a positive number"),
            (["--qps", "NaN"], "a positive number"),
            (["--leader-elect", "lease"], "NAMESPACE/NAME"),
            (["--leader-elect", "/lease"], "NAMESPACE/NAME"),
            (["--log-format", "xml"], "text or json"),
            (["--http-addr", "localhost"], "HOST:PORT"),
            (["--concurrency", "many"], "a count (1–65535)"),
        ] {
            match parse(&args) {
                Err(FlagError::Invalid { expected: e, .. }) => assert_eq!(e, expected, "{args:?}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(
            parse(&["--cloud-url", "x"]).unwrap_err(),
            FlagError::Unknown("--cloud-url".into()),
            "a flag of one binary only is declined, not swallowed"
        );
    }
}
