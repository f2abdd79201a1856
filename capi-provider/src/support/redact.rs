//! What of a cloud's error message may reach conditions, events and logs: bounded, without
//! control characters, and with every secret blanked out — a cloud may echo the request (a
//! password, user data, a token, a signed request) in its message.
//!
//! A secret is blanked when it is known ([`Redaction::secret`]: a credential, the request's user
//! data — as it is, JSON-escaped and base64-encoded) and, whatever the request was, every long
//! unbroken run of base64 or hex characters with a digit in it (tokens, encoded user data, keys,
//! signatures) is blanked too, so that a fragment or an encoding a provider did not foresee does
//! not get through either. Providers add what their cloud's error bodies need (which field is the
//! message) around it.

use base64::Engine;

/// The longest cloud message that reaches conditions, events and logs, in characters.
pub const MAX_MESSAGE: usize = 512;

/// What replaces a secret in a message.
pub const BLANK: &str = "[redacted]";

/// The shortest run of base64 or hex characters taken for an encoded secret. UUIDs (runs of at
/// most 12 between their dashes) and resource names stay readable.
const MIN_ENCODED_RUN: usize = 32;

/// The secrets a message must not show. Its `Debug` shows how many, never which.
#[derive(Clone, Default)]
pub struct Redaction {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redaction {{ {} secrets }}", self.secrets.len())
    }
}

impl Redaction {
    /// Blanks `secret` (as it is, JSON-escaped as an echoed body shows it, and base64-encoded)
    /// wherever it appears; too short a value (under four characters) is left alone rather than
    /// blanking every word that contains it.
    pub fn secret(mut self, secret: &str) -> Self {
        if secret.chars().count() >= 4 {
            self.secrets.push(secret.to_string());
            let escaped = serde_json::Value::String(secret.to_string()).to_string();
            let escaped = escaped.trim_matches('"');
            if escaped != secret {
                self.secrets.push(escaped.to_string());
            }
            let encoded = base64::engine::general_purpose::STANDARD.encode(secret);
            self.secrets.push(encoded.trim_end_matches('=').to_string());
        }
        self
    }

    /// `text` as it may be shown: secrets blanked, long encoded runs blanked, then bounded.
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_string();
        // Longest first, so that a secret containing another is blanked whole.
        let mut secrets: Vec<&String> = self.secrets.iter().collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for secret in secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), BLANK);
            }
        }
        bounded(&blank_encoded_runs(&out))
    }
}

/// Blanks every run of at least [`MIN_ENCODED_RUN`] characters of the base64 alphabets
/// (standard and URL-safe, without the dash that separates words and UUID groups) that holds a
/// digit (a long word is prose, not an encoding).
fn blank_encoded_runs(text: &str) -> String {
    let encoded = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_');
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.chars().count() >= MIN_ENCODED_RUN && run.chars().any(|c| c.is_ascii_digit()) {
            out.push_str(BLANK);
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if encoded(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// `text` without control characters, at most [`MAX_MESSAGE`] characters (and `…` when cut).
pub fn bounded(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_MESSAGE)
        .collect();
    if text.chars().count() > MAX_MESSAGE {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secrets_are_blanked_in_every_form() {
        let quoted = r#"quo"ted\pass"#;
        let redaction = Redaction::default()
            .secret("hunter2-secret")
            .secret(quoted)
            .secret("abc");
        let echoed = serde_json::json!({"password": quoted}).to_string();
        let message = redaction.apply(&format!(
            "auth hunter2-secret, as base64 aHVudGVyMi1zZWNyZXQ=, echoed {echoed}, short abc"
        ));
        assert!(!format!("{redaction:?}").contains("hunter2"));
        for secret in [
            "hunter2-secret",
            "aHVudGVyMi1zZWNyZXQ",
            "quo",
            r#"ted\\pass"#,
        ] {
            assert!(!message.contains(secret), "{secret} in {message}");
        }
        assert!(
            message.contains("short abc"),
            "too short to blank: {message}"
        );
    }

    #[test]
    fn long_encoded_runs_are_blanked_and_uuids_and_names_are_not() {
        let redaction = Redaction::default();
        let token = "gAAAAABnX3k2c1ZlR0FBQUFBQm5YM2syYzFabFIwRkJRVUZC";
        let message = redaction.apply(&format!(
            "Port 3f2a9c1e-7b4d-4e2a-9f1c-0a1b2c3d4e5f on network capi-demo-cluster-network \
             refused token {token}"
        ));
        assert!(!message.contains(token), "{message}");
        assert!(
            message.contains("3f2a9c1e-7b4d-4e2a-9f1c-0a1b2c3d4e5f"),
            "{message}"
        );
        assert!(message.contains("capi-demo-cluster-network"), "{message}");
        assert!(
            redaction
                .apply("Pneumonoultramicroscopicsilicovolcanoconiosis happened")
                .contains("Pneumono")
        );
    }

    #[test]
    fn messages_are_bounded_and_single_line() {
        let long = bounded(&"x\n".repeat(1000));
        assert_eq!(long.chars().count(), MAX_MESSAGE + 1);
        assert!(!long.contains('\n'));
        assert_eq!(bounded("short"), "short");
    }
}
