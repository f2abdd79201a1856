//! What of an OpenStack error answer reaches conditions, events and logs: the cloud's own
//! message field, never the rest of the body (which may echo the request), through
//! [`capi_provider::support::redact::Redaction`] (bounded, secrets blanked) — with the secrets of the
//! request's body (user data, admin password, `*password*` and `*secret*` fields) added to it.

use capi_provider::support::redact::Redaction;

/// What OpenStack's error bodies add to a [`Redaction`].
pub(crate) trait OpenStackRedaction: Sized {
    /// Also blanks the secrets of a request body: the string values of its `user_data`,
    /// `adminPass`, `password` and `*secret*` fields, at any depth.
    fn request_body(self, body: &serde_json::Value) -> Self;

    /// The message field of an error body, secrets blanked, bounded.
    fn cloud_message(&self, body: &serde_json::Value) -> String;
}

impl OpenStackRedaction for Redaction {
    fn request_body(mut self, body: &serde_json::Value) -> Self {
        let mut found = Vec::new();
        secrets_in(body, false, &mut found);
        for secret in found {
            self = self.secret(&secret);
        }
        self
    }

    fn cloud_message(&self, body: &serde_json::Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use capi_provider::support::redact::MAX_MESSAGE;
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
        let long = none.cloud_message(&json!({"message": "x\n".repeat(1000)}));
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
}
