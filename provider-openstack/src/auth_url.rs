//! Which Keystone endpoints a credentials Secret may name.
//!
//! A `clouds.yaml` is written by whoever owns the namespace: its `auth_url` decides where the
//! manager sends the project's credentials and whose answers (service catalog, then every
//! response) it reads. On a management cluster shared by several teams, the operator restricts it
//! with `--allowed-auth-url-hosts`: a URL is used only when its host (and port, if the pattern
//! names one) matches a pattern, and only over HTTPS unless the pattern says `http://`. A
//! refused URL is never contacted; the object's condition names its host and the flag.
//!
//! Patterns: `keystone.example.com` (that host, any port), `keystone.example.com:5000` (that
//! port), `*.example.com` (any host below example.com, not example.com itself),
//! `http://10.0.0.5:5000` (plain HTTP allowed for that host: a lab cloud).

/// A refused `auth_url`; names its host, never the URL's path or query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthUrlRefused {
    /// Not an absolute `http(s)://host[:port]/…` URL.
    #[error("auth.auth_url is not an http(s) URL with a host")]
    NotAUrl,
    /// Its host is not allowed.
    #[error(
        "auth.auth_url host {host:?} is not allowed by the manager's --allowed-auth-url-hosts ({allowed})"
    )]
    HostNotAllowed {
        /// The host (and port) named.
        host: String,
        /// The patterns allowed.
        allowed: String,
    },
    /// Plain HTTP for a host allowed over HTTPS only.
    #[error(
        "auth.auth_url uses plain http for host {host:?}, which --allowed-auth-url-hosts allows over https only"
    )]
    PlainHttp {
        /// The host named.
        host: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// Lower-case host; starts with `*.` for a suffix.
    host: String,
    port: Option<u16>,
    plain_http: bool,
}

/// The hosts credentials may name; by default, any (a single-team management cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthUrlPolicy {
    /// `None`: any host.
    allowed: Option<Vec<Pattern>>,
}

impl AuthUrlPolicy {
    /// Any host.
    pub fn any() -> Self {
        Self::default()
    }

    /// Only hosts matching one of `patterns` (see the module documentation); an empty list
    /// allows none. An unusable pattern is an error naming it.
    pub fn only<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let mut allowed = Vec::with_capacity(patterns.len());
        for pattern in patterns {
            let text = pattern.as_ref().trim();
            let (plain_http, rest) = match text.strip_prefix("http://") {
                Some(rest) => (true, rest),
                None => (false, text.strip_prefix("https://").unwrap_or(text)),
            };
            let (host, port) = split_host_port(rest)
                .filter(|(host, _)| !host.is_empty() && !host.contains(['/', '?', '#', '@']))
                .ok_or_else(|| format!("{text:?} is not a host, host:port or *.domain"))?;
            let wildcard_leads = match host.strip_prefix("*.") {
                Some(below) => !below.is_empty() && !below.contains('*'),
                None => !host.contains('*'),
            };
            if !wildcard_leads {
                return Err(format!(
                    "{text:?}: a wildcard may only lead, as in *.example.com"
                ));
            }
            allowed.push(Pattern {
                host: host.to_ascii_lowercase(),
                port,
                plain_http,
            });
        }
        Ok(Self {
            allowed: Some(allowed),
        })
    }

    /// Whether credentials may send requests to `auth_url`.
    pub fn check(&self, auth_url: &str) -> Result<(), AuthUrlRefused> {
        let uri: http::Uri = auth_url.parse().map_err(|_| AuthUrlRefused::NotAUrl)?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(AuthUrlRefused::NotAUrl),
        };
        let authority = uri.authority().ok_or(AuthUrlRefused::NotAUrl)?;
        if authority.as_str().contains('@') {
            return Err(AuthUrlRefused::NotAUrl);
        }
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        // `http` keeps an IPv6 host's brackets; patterns are stored without them.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = authority.port_u16();
        let named = match port {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let matching = allowed.iter().find(|p| {
            let host_matches = match p.host.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|below| below.ends_with('.') && below.len() > 1),
                None => p.host == host,
            };
            host_matches && (p.port.is_none() || p.port == port)
        });
        match matching {
            None => Err(AuthUrlRefused::HostNotAllowed {
                host: named,
                allowed: allowed
                    .iter()
                    .map(|p| match p.port {
                        Some(port) => format!("{}:{port}", p.host),
                        None => p.host.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
            Some(pattern) if !https && !pattern.plain_http => {
                Err(AuthUrlRefused::PlainHttp { host: named })
            }
            Some(_) => Ok(()),
        }
    }
}

/// `host` or `host:port` (IPv6 in brackets).
fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match text.rsplit_once(':') {
        // More than one colon: an IPv6 address, which needs brackets.
        Some((host, _)) if host.contains(':') => None,
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((text, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_any_https_or_http_url_is_used() {
        let any = AuthUrlPolicy::any();
        assert_eq!(any.check("https://keystone.example.com:5000/v3"), Ok(()));
        assert_eq!(any.check("http://127.0.0.1:5000/v3"), Ok(()));
        assert_eq!(
            any.check("file:///etc/passwd"),
            Err(AuthUrlRefused::NotAUrl)
        );
        assert_eq!(any.check("keystone:5000"), Err(AuthUrlRefused::NotAUrl));
        assert_eq!(
            any.check("https://user:pw@keystone.example.com/v3"),
            Err(AuthUrlRefused::NotAUrl)
        );
    }

    #[test]
    fn only_the_listed_hosts_ports_and_subdomains_are_used() {
        let policy = AuthUrlPolicy::only(&[
            "keystone.example.com",
            "*.cloud.example.org",
            "10.0.0.5:5000",
            "http://lab.example.net:5000",
            "[fd00::5]:5000",
        ])
        .unwrap();
        for allowed in [
            "https://keystone.example.com/v3",
            "https://KEYSTONE.example.com:5000/v3",
            "https://identity.cloud.example.org/v3",
            "https://10.0.0.5:5000/v3",
            "http://lab.example.net:5000/v3",
            "https://lab.example.net:5000/v3",
            "https://[fd00::5]:5000/v3",
        ] {
            assert_eq!(policy.check(allowed), Ok(()), "{allowed}");
        }
        for refused in [
            "https://127.0.0.1:5000/v3",
            "https://keystone.example.com.evil.test/v3",
            "https://cloud.example.org/v3",
            "https://evilcloud.example.org/v3",
            "https://10.0.0.5:35357/v3",
            "https://[fd00::6]:5000/v3",
            "https://lab.example.net:5001/v3",
        ] {
            let error = policy.check(refused).unwrap_err();
            assert!(
                matches!(error, AuthUrlRefused::HostNotAllowed { .. }),
                "{refused}: {error}"
            );
            assert!(!error.to_string().contains("/v3"), "{error}");
        }
        assert_eq!(
            policy.check("http://keystone.example.com/v3"),
            Err(AuthUrlRefused::PlainHttp {
                host: "keystone.example.com".into()
            })
        );
    }

    #[test]
    fn an_empty_list_allows_nothing_and_bad_patterns_are_named() {
        let none = AuthUrlPolicy::only::<&str>(&[]).unwrap();
        assert!(none.check("https://keystone.example.com/v3").is_err());
        for bad in [
            "",
            "keystone/v3",
            "a.*.example.com",
            "host:port",
            "u@host",
            "fd00::5",
        ] {
            assert!(AuthUrlPolicy::only(&[bad]).is_err(), "{bad:?}");
        }
    }
}
