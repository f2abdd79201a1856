//! What an ARM answer that is not the one asked for means for a reconcile: throttling waits as
//! long as ARM says, conflicts and resources in use are retried, quota errors retry with a
//! condition naming the quota, invalid requests are the user's to fix (with ARM's message), and
//! everything else — outages, timeouts, refused tokens — is retried with backoff. Nothing here
//! latches: an invalid configuration is reported until the object changes, never forever.

use std::time::Duration;

use capi_core::ActuatorError;

use crate::token::TokenError;

/// How long a throttled request waits when ARM gives no `Retry-After`.
pub const DEFAULT_THROTTLE_WAIT: Duration = Duration::from_secs(30);

/// How long a request refused with a conflict (another operation on the resource in progress)
/// waits.
pub const CONFLICT_WAIT: Duration = Duration::from_secs(10);

/// The most of ARM's message an error carries.
const MAX_MESSAGE: usize = 1024;

/// ARM's refusal of a request, or the reason no answer came. Its message is ARM's own, bounded
/// and redacted of the token and credentials; it is safe to show in conditions and events.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ArmError {
    /// The HTTP status; `None` when no answer came.
    pub status: Option<u16>,
    /// ARM's error code (`InvalidParameter`, `AnotherOperationInProgress`, ...), or the
    /// provider's own for what is not ARM's (`ConnectionFailed`, `CredentialsRefused`).
    pub code: String,
    /// What went wrong, sanitised.
    pub message: String,
    /// How long ARM asked to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
}

/// What kind of refusal an [`ArmError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// `429`, or the client's own pacing: wait that long.
    Throttled(Duration),
    /// `409`, or a resource in use by another (`InUseSubnetCannotBeDeleted`, `NicInUse`): the
    /// state of something else has to change first; retried.
    Conflict,
    /// A quota or limit of the subscription is reached; retried, the condition names it.
    Quota,
    /// The resource does not exist.
    NotFound,
    /// The request cannot work as it is (`400`): the spec must change.
    Invalid,
    /// The credentials or token were refused (`401`/`403`): the Secret or the role assignment
    /// must change; retried.
    Unauthorized,
    /// Anything else: outages, timeouts, `5xx`; retried.
    Transient,
}

impl ArmError {
    /// An error with `status`, `code` and `message` (sanitised by the caller).
    pub fn new(status: Option<u16>, code: impl Into<String>, message: impl Into<String>) -> Self {
        let message: String = message.into();
        Self {
            status,
            code: code.into(),
            message: bounded(&message),
            retry_after: None,
        }
    }

    /// The same, with ARM's `Retry-After`.
    #[must_use]
    pub fn retry_after(mut self, after: Option<Duration>) -> Self {
        self.retry_after = after;
        self
    }

    /// No answer came (connection refused, reset, timed out).
    pub fn unanswered(message: impl Into<String>) -> Self {
        Self::new(None, "ConnectionFailed", message)
    }

    /// The token could not be had.
    pub fn token(error: TokenError) -> Self {
        match error {
            TokenError::Unreachable(message) => Self::new(None, "TokenUnavailable", message),
            other => Self::new(Some(401), "CredentialsRefused", other.to_string()),
        }
    }

    fn describe(&self) -> String {
        let status = self
            .status
            .map(|s| format!("HTTP {s} "))
            .unwrap_or_default();
        format!("{status}{}: {}", self.code, self.message)
    }

    fn code_is(&self, codes: &[&str]) -> bool {
        codes.iter().any(|c| self.code.eq_ignore_ascii_case(c))
    }

    /// What kind of refusal it is.
    pub fn class(&self) -> ErrorClass {
        let code = self.code.to_ascii_lowercase();
        let quota = code.contains("quota")
            || code.contains("limitreached")
            || code.contains("limitexceeded")
            || (code == "operationnotallowed"
                && self.message.to_ascii_lowercase().contains("quota"));
        // Something the request refers to is missing or not ready: made out of band, or not
        // yet — retried, never a latched invalid configuration.
        let missing = code.ends_with("notfound")
            || code == "invalidresourcereference"
            || code == "referencedresourcenotprovisioned";
        match self.status {
            Some(429) => ErrorClass::Throttled(self.retry_after.unwrap_or(DEFAULT_THROTTLE_WAIT)),
            _ if quota => ErrorClass::Quota,
            Some(400 | 409 | 422) if missing => ErrorClass::Transient,
            _ if code.contains("inuse")
                || self.code_is(&["AnotherOperationInProgress", "RetryableError", "Conflict"]) =>
            {
                ErrorClass::Conflict
            }
            // 412: a conditional write found the resource changed since it was read.
            Some(409 | 412) => ErrorClass::Conflict,
            Some(401 | 403) => ErrorClass::Unauthorized,
            Some(404) => ErrorClass::NotFound,
            Some(400 | 422) => ErrorClass::Invalid,
            _ => ErrorClass::Transient,
        }
    }

    /// The reconcile's answer to it, `what` naming the operation (`creating virtual machine
    /// m-0`).
    pub fn into_actuator(self, what: &str) -> ActuatorError {
        let message = format!("{what}: {self}");
        match self.class() {
            ErrorClass::Throttled(after) => {
                ActuatorError::requeue_after(after, "Throttled", message)
            }
            ErrorClass::Conflict => ActuatorError::requeue_after(
                self.retry_after.unwrap_or(CONFLICT_WAIT),
                "Conflict",
                message,
            ),
            ErrorClass::Quota => ActuatorError::transient_message(
                "QuotaExceeded",
                format!(
                    "{what}: a quota of the subscription is reached ({}): {}; raise it, or free \
                     capacity",
                    self.code, self.message
                ),
            ),
            ErrorClass::Invalid => {
                ActuatorError::invalid_configuration(invalid_reason(&self.code), message)
            }
            ErrorClass::Unauthorized => ActuatorError::transient_message(
                "AuthorizationFailed",
                format!(
                    "{message}; check the identityRef Secret and the service principal's role \
                     assignments"
                ),
            ),
            ErrorClass::NotFound => ActuatorError::transient_message("NotFound", message),
            ErrorClass::Transient => ActuatorError::transient_message("AzureAPIError", message),
        }
    }
}

/// A condition reason from ARM's code (`InvalidParameter` stays, anything unusable becomes
/// `InvalidRequest`).
fn invalid_reason(code: &str) -> String {
    let clean: String = code.chars().filter(char::is_ascii_alphanumeric).collect();
    if clean.is_empty() || !clean.starts_with(|c: char| c.is_ascii_uppercase()) {
        "InvalidRequest".into()
    } else {
        clean.chars().take(64).collect()
    }
}

/// At most [`MAX_MESSAGE`] characters, on one line.
pub(crate) fn bounded(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() > MAX_MESSAGE {
        let mut cut: String = one_line.chars().take(MAX_MESSAGE).collect();
        cut.push('…');
        cut
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::ActuatorErrorKind;

    fn error(status: u16, code: &str, message: &str) -> ArmError {
        ArmError::new(Some(status), code, message)
    }

    #[test]
    fn throttling_waits_as_long_as_arm_says() {
        let throttled =
            error(429, "TooManyRequests", "slow down").retry_after(Some(Duration::from_secs(17)));
        assert_eq!(
            throttled.class(),
            ErrorClass::Throttled(Duration::from_secs(17))
        );
        match throttled.into_actuator("creating vnet") {
            ActuatorError::RequeueAfter { after, reason, .. } => {
                assert_eq!(after, Duration::from_secs(17));
                assert_eq!(reason, "Throttled");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            error(429, "TooManyRequests", "").class(),
            ErrorClass::Throttled(DEFAULT_THROTTLE_WAIT)
        );
    }

    #[test]
    fn conflicts_and_resources_in_use_are_retried() {
        for e in [
            error(409, "AnotherOperationInProgress", "busy"),
            error(400, "InUseSubnetCannotBeDeleted", "subnet in use"),
            error(400, "NicInUse", "attached"),
            error(409, "Conflict", ""),
        ] {
            assert_eq!(e.class(), ErrorClass::Conflict, "{e}");
            assert_eq!(e.into_actuator("x").kind(), ActuatorErrorKind::RequeueAfter);
        }
    }

    #[test]
    fn quota_errors_retry_and_name_the_quota() {
        let e = error(
            409,
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota.",
        );
        assert_eq!(e.class(), ErrorClass::Quota);
        let actuator = e.into_actuator("creating virtual machine m-0");
        assert_eq!(actuator.kind(), ActuatorErrorKind::Transient);
        assert!(
            actuator
                .to_string()
                .contains("standardDSv3Family Cores quota")
        );
        assert_eq!(
            error(400, "PublicIPCountLimitReached", "").class(),
            ErrorClass::Quota
        );
    }

    #[test]
    fn invalid_requests_are_the_users_to_fix_with_arms_message() {
        let e = error(
            400,
            "InvalidParameter",
            "The value of parameter imageReference.sku is invalid.",
        );
        let actuator = e.into_actuator("creating virtual machine m-0");
        assert_eq!(actuator.kind(), ActuatorErrorKind::InvalidConfiguration);
        assert_eq!(actuator.reason(), "InvalidParameter");
        assert!(actuator.to_string().contains("imageReference.sku"));
        assert_eq!(invalid_reason("bad code!"), "InvalidRequest");
        // What the request refers to is missing: retried.
        for code in [
            "InvalidResourceReference",
            "PlatformImageNotFound",
            "ResourceGroupNotFound",
        ] {
            assert_eq!(
                error(400, code, "").class(),
                ErrorClass::Transient,
                "{code}"
            );
        }
    }

    #[test]
    fn outages_and_refusals_retry() {
        assert_eq!(
            ArmError::unanswered("connection reset")
                .into_actuator("x")
                .kind(),
            ActuatorErrorKind::Transient
        );
        assert_eq!(
            error(503, "ServiceUnavailable", "").class(),
            ErrorClass::Transient
        );
        let refused = error(403, "AuthorizationFailed", "no role");
        assert_eq!(refused.class(), ErrorClass::Unauthorized);
        assert_eq!(
            refused.into_actuator("x").kind(),
            ActuatorErrorKind::Transient
        );
    }

    #[test]
    fn messages_are_bounded_and_on_one_line() {
        let e = error(400, "X", &format!("a\nb{}", "c".repeat(5000)));
        assert!(!e.message.contains('\n'));
        assert!(e.message.chars().count() <= MAX_MESSAGE + 1);
    }
}
