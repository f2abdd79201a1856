//! Reading one credential out of a Kubernetes `Secret`, as every provider's credentials need it:
//! from `data` (or `stringData`, as a Secret built in memory carries it), as text, trimmed of
//! surrounding whitespace (a trailing newline from `kubectl create secret --from-file` is not part
//! of a key). Errors name the key, never a value.

use k8s_openapi::api::core::v1::Secret;

/// A Secret's value that is not UTF-8 text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the credentials Secret's {key:?} is not UTF-8 text")]
pub struct NotText {
    /// The key.
    pub key: String,
}

/// The text of `key` in `secret`; `None` when it is absent or blank.
pub fn text(secret: &Secret, key: &str) -> Result<Option<String>, NotText> {
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        });
    let Some(raw) = raw else {
        return Ok(None);
    };
    let text = String::from_utf8(raw).map_err(|_| NotText { key: key.into() })?;
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn a_value_is_read_from_data_or_string_data_trimmed_and_blank_is_none() {
        let secret = Secret {
            data: Some(BTreeMap::from([
                ("a".to_string(), ByteString(b" value\n".to_vec())),
                ("blank".to_string(), ByteString(b"  ".to_vec())),
                ("binary".to_string(), ByteString(vec![0xff, 0xfe])),
            ])),
            string_data: Some(BTreeMap::from([("b".to_string(), "other".to_string())])),
            ..Secret::default()
        };
        assert_eq!(text(&secret, "a"), Ok(Some("value".into())));
        assert_eq!(text(&secret, "b"), Ok(Some("other".into())));
        assert_eq!(text(&secret, "blank"), Ok(None));
        assert_eq!(text(&secret, "missing"), Ok(None));
        let error = text(&secret, "binary").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the credentials Secret's \"binary\" is not UTF-8 text"
        );
    }
}
