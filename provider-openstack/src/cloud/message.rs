//! What of a cloud's error answer reaches conditions, events and logs: the cloud's own message
//! field, bounded, without control characters, and with every secret the request carried
//! blanked out — a cloud may echo the request (a password, user data, a token) in its message.
//!
//! A secret is blanked when it is known (the session's password or application credential
//! secret, the request's user data, admin password and password fields, and their base64
//! forms) and, whatever the request was, every long unbroken run of base64 or hex characters
//! (tokens, encoded user data, keys) is blanked too, so that a fragment or an encoding the
//! provider did not foresee does not get through either.

use base64::Engine;

/// The longest cloud message that reaches conditions, events and logs.
pub(crate) const MAX_MESSAGE: usize = 512;

/// What replaces a secret in a message.
const BLANK: &str = "[redacted]";

/// The shortest run of base64 or hex characters taken for an encoded secret. UUIDs (runs of at
/// most 12 between their dashes) and resource names stay readable.
const MIN_ENCODED_RUN: usize = 32;

/// The secrets a message must not show.
#[derive(Clone, Default)]
pub(crate) struct Redaction {
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
    pub(crate) fn secret(mut self, secret: &str) -> Self {
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

    /// Also blanks the secrets of a request body: the string values of its `user_data`,
    /// `adminPass`, `password` and `*secret*` fields, at any depth.
    pub(crate) fn request_body(mut self, body: &serde_json::Value) -> Self {
        let mut found = Vec::new();
        secrets_in(body, false, &mut found);
        for secret in found {
            self = self.secret(&secret);
        }
        self
    }

    /// `text` as it may be shown: secrets blanked, then bounded.
    pub(crate) fn apply(&self, text: &str) -> String {
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

    /// The message field of an error body, secrets blanked, bounded.
    pub(crate) fn cloud_message(&self, body: &serde_json::Value) -> String {
        match message_field(body) {
            Some(message) => self.apply(&message),
            None => format!(
                "unrecognised error body ({} bytes; logged at debug level)",
                body.to_string().len()
            ),
        }
    }
}

fn secrets_in(value: &serde_json::Value, sensitive: bool, found: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) if sensitive => found.push(s.clone()),
        serde_json::Value::Object(fields) => {
            for (key, value) in fields {
                let key = key.to_ascii_lowercase();
                let sensitive = sensitive
                    || key == "user_data"
                    || key == "adminpass"
                    || key.contains("password")
                    || key.contains("secret");
                secrets_in(value, sensitive, found);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                secrets_in(item, sensitive, found);
            }
        }
        _ => {}
    }
}

/// The message field of an OpenStack error body — Nova's `{"badRequest": {"message"}}`,
/// Neutron's `{"NeutronError": {"message"}}`, Octavia's `{"faultstring"}`, Keystone's
/// `{"error": {"message"}}` — never the rest of the body, which may echo the request.
fn message_field(body: &serde_json::Value) -> Option<String> {
    const FIELDS: [&str; 4] = ["message", "faultstring", "description", "title"];
    let direct = |value: &serde_json::Value| {
        FIELDS
            .iter()
            .find_map(|field| value.get(field).and_then(|m| m.as_str()))
            .map(str::to_string)
    };
    direct(body).or_else(|| {
        body.as_object()
            .and_then(|fields| fields.values().find_map(&direct))
    })
}

/// Blanks every run of at least [`MIN_ENCODED_RUN`] characters of the base64 alphabets
/// (standard and URL-safe, without the dash that separates words and UUID groups).
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

/// `text` without control characters, at most [`MAX_MESSAGE`] characters.
pub(crate) fn bounded(text: &str) -> String {
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
    use serde_json::json;

    #[test]
    fn only_the_clouds_message_reaches_the_user_and_it_is_bounded() {
        let none = Redaction::default();
        let echoed = json!({"badRequest": {"code": 400, "message": "Invalid flavorRef",
                            "request": {"adminPass": "s3cret", "user_data": "I2Nsb3Vk"}}});
        assert_eq!(none.cloud_message(&echoed), "Invalid flavorRef");
        let unknown = json!({"request": {"password": "s3cret"}});
        let message = none.cloud_message(&unknown);
        assert!(!message.contains("s3cret"), "{message}");
        assert!(message.starts_with("unrecognised error body"), "{message}");
        assert_eq!(
            none.cloud_message(&json!({"faultstring": "Quota has been met"})),
            "Quota has been met"
        );
        let long = bounded(&"x\n".repeat(1000));
        assert_eq!(long.chars().count(), MAX_MESSAGE + 1);
        assert!(!long.contains('\n'));
    }

    #[test]
    fn secrets_the_request_carried_are_blanked_in_the_message() {
        let user_data = "#cloud-config\nwrite_files: [{path: /etc/kubeadm.yaml, content: token abcdef.0123456789abcdef}]";
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_data);
        let body = json!({"server": {"name": "m-0", "adminPass": "p4ssw0rd!",
                                     "user_data": encoded}});
        let quoted = r#"quo"ted\pass"#;
        let redaction = Redaction::default()
            .secret("hunter2-secret")
            .secret(quoted)
            .request_body(&body);
        let echoed = json!({"password": quoted}).to_string();
        let message = redaction.apply(&format!(
            "Invalid user_data {encoded} for m-0 (adminPass p4ssw0rd!, auth hunter2-secret, \
             as base64 aHVudGVyMi1zZWNyZXQ=, echoed {echoed})"
        ));
        assert!(!format!("{redaction:?}").contains("hunter2"));
        for secret in [
            "p4ssw0rd!",
            "hunter2-secret",
            "aHVudGVyMi1zZWNyZXQ",
            &encoded[..40],
            "quo",
            r#"ted\\pass"#,
        ] {
            assert!(!message.contains(secret), "{secret} in {message}");
        }
        assert!(message.contains("for m-0"), "{message}");
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
        // A long word without digits is prose, not an encoding.
        assert!(
            redaction
                .apply("Pneumonoultramicroscopicsilicovolcanoconiosis happened")
                .contains("Pneumono")
        );
    }
}
