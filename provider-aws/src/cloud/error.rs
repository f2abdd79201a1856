//! What an AWS error answer means for a reconcile, and what of it the user sees.
//!
//! [`classify`] sorts AWS's error codes (EC2's and ELBv2's) into what the provider does about
//! them: back off ([`ErrorClass::Throttled`]), wait and retry without ever giving up
//! ([`ErrorClass::Quota`], [`ErrorClass::Busy`], [`ErrorClass::DependencyViolation`]), ask the user
//! to change the object ([`ErrorClass::Invalid`]), or retry as a transient failure. A
//! [`CloudError`] becomes an [`ActuatorError`] with a condition reason and a message that carries
//! AWS's code and its message — sanitised: bounded, secrets blanked
//! ([`capi_provider::support::redact`]), the encoded authorization message of `UnauthorizedOperation`
//! dropped, and for a refused credential a fixed message only (AWS's `SignatureDoesNotMatch`
//! may quote the canonical request, security token included).

use std::time::Duration;

use capi_core::actuator::ActuatorError;
use capi_provider::support::redact::Redaction;

/// What the provider does about an AWS error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// AWS asks for fewer requests: back off.
    Throttled,
    /// An account quota or the zone's capacity: retried every minute, never latched.
    Quota,
    /// The request cannot work as the object asks it (a bad parameter, an unknown AMI or key
    /// pair, an operation the account may not perform): the user must change something.
    Invalid,
    /// The credentials were refused.
    Authentication,
    /// The resource is in a state that does not allow the operation yet: retried shortly.
    Busy,
    /// Something still depends on the resource (deletion order, leftovers): retried after the
    /// dependants are dealt with.
    DependencyViolation,
    /// The resource does not exist; what that means is the caller's to say (gone, or a
    /// user-named resource that is missing).
    NotFound,
    /// Anything else: a server error, a timeout, a code not known here.
    Transient,
}

/// The throttling codes of EC2 (`RequestLimitExceeded`) and the query APIs.
const THROTTLING: [&str; 5] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
];

/// Credentials refused.
const AUTHENTICATION: [&str; 8] = [
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "IncompleteSignature",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
];

/// Capacity, not quota, but handled the same way: retried, never latched.
const CAPACITY: [&str; 2] = [
    "InsufficientInstanceCapacity",
    "InsufficientFreeAddressesInSubnet",
];

/// Requests that cannot work as written.
const INVALID: [&str; 7] = [
    "MissingParameter",
    "Unsupported",
    "UnsupportedOperation",
    "UnauthorizedOperation",
    "InvalidAMIID.NotFound",
    "InvalidKeyPair.NotFound",
    "InvalidInstanceType",
];

/// A resource in a state that forbids the operation for now.
const BUSY: [&str; 5] = [
    "IncorrectState",
    "IncorrectInstanceState",
    "ResourceInUse",
    "InvalidState",
    "OperationNotPermitted",
];

/// The class of AWS error `code` (EC2's or ELBv2's).
pub fn classify(code: &str) -> ErrorClass {
    if THROTTLING.contains(&code) {
        ErrorClass::Throttled
    } else if AUTHENTICATION.contains(&code) {
        ErrorClass::Authentication
    } else if CAPACITY.contains(&code)
        || (code.ends_with("LimitExceeded") && code != "RequestLimitExceeded")
        || (code.starts_with("TooMany") && code != "TooManyRequestsException")
    {
        ErrorClass::Quota
    } else if INVALID.contains(&code)
        || code.starts_with("InvalidParameter")
        || code.starts_with("InvalidAMIID.")
        || code.starts_with("InvalidBlockDeviceMapping")
        || code.starts_with("InvalidUserData")
    {
        ErrorClass::Invalid
    } else if BUSY.contains(&code) {
        ErrorClass::Busy
    } else if code == "DependencyViolation" {
        ErrorClass::DependencyViolation
    } else if code.ends_with(".NotFound") || code.ends_with("NotFound") {
        ErrorClass::NotFound
    } else {
        ErrorClass::Transient
    }
}

/// How long a quota or capacity error waits before the next attempt.
pub const QUOTA_RETRY: Duration = Duration::from_secs(60);
/// How long a busy resource waits.
pub const BUSY_RETRY: Duration = Duration::from_secs(5);
/// How long a resource with dependants waits.
pub const DEPENDENCY_RETRY: Duration = Duration::from_secs(10);
/// How long a throttled call waits when no per-region backoff says otherwise.
pub const THROTTLE_RETRY: Duration = Duration::from_secs(5);

/// An error answer of an AWS API call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudError {
    /// The operation (`RunInstances`).
    pub operation: String,
    /// AWS's error code, when the answer had one (none: a timeout, a connection failure).
    pub code: Option<String>,
    /// AWS's message (or the transport's), as it came: sanitised by [`Self::message`].
    raw_message: String,
    /// How long the region's budget asks a throttled reconcile to wait ([`THROTTLE_RETRY`]
    /// when unset).
    retry_after: Option<Duration>,
}

impl CloudError {
    /// An error answer of `operation` with `code` and AWS's `message`.
    pub fn new(
        operation: impl Into<String>,
        code: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            operation: operation.into(),
            code,
            raw_message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, with the wait the region's budget asks for after a throttled answer.
    #[must_use]
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// Whether EC2 or ELBv2 said the resource does not exist.
    pub fn is_not_found(&self) -> bool {
        self.class() == ErrorClass::NotFound
    }

    /// What the provider does about it.
    pub fn class(&self) -> ErrorClass {
        self.code.as_deref().map_or(ErrorClass::Transient, classify)
    }

    /// What the user may see: `<operation>: <code>: <message>`, the message sanitised with
    /// `redaction` (and for a refused credential, no message of AWS's at all).
    pub fn message(&self, redaction: &Redaction) -> String {
        let code = self.code.as_deref().unwrap_or("no error code");
        let told = match self.class() {
            ErrorClass::Authentication => {
                "AWS refused the credentials; check the identity's access key, secret and session \
                 token"
                    .to_string()
            }
            _ => redaction.apply(without_encoded_authorization(&self.raw_message)),
        };
        format!("{}: {code}: {told}", self.operation)
    }

    /// The actuator's answer to it: a requeue (throttled, quota, busy, dependants), an invalid
    /// configuration, or a transient failure — each with its condition reason.
    pub fn into_actuator_error(self, redaction: &Redaction) -> ActuatorError {
        let message = self.message(redaction);
        match self.class() {
            ErrorClass::Throttled => ActuatorError::requeue_after(
                self.retry_after.unwrap_or(THROTTLE_RETRY),
                "Throttled",
                message,
            ),
            ErrorClass::Quota => {
                ActuatorError::requeue_after(QUOTA_RETRY, "QuotaExceeded", message)
            }
            ErrorClass::Busy => ActuatorError::requeue_after(BUSY_RETRY, "ResourceBusy", message),
            ErrorClass::DependencyViolation => {
                ActuatorError::requeue_after(DEPENDENCY_RETRY, "DependencyViolation", message)
            }
            ErrorClass::Invalid => ActuatorError::invalid_configuration("InvalidRequest", message),
            ErrorClass::Authentication => {
                ActuatorError::transient_message("AuthenticationFailed", message)
            }
            ErrorClass::NotFound => ActuatorError::transient_message("ResourceNotFound", message),
            ErrorClass::Transient => ActuatorError::transient_message("CloudAPIError", message),
        }
    }
}

/// `UnauthorizedOperation` carries the request's whole context, encoded, after this phrase.
const ENCODED_AUTHORIZATION: &str = "Encoded authorization failure message:";

fn without_encoded_authorization(message: &str) -> &str {
    message
        .find(ENCODED_AUTHORIZATION)
        .map_or(message, |at| message[..at].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::actuator::ActuatorErrorKind;

    #[test]
    fn codes_fall_into_what_the_provider_does_about_them() {
        for (code, class) in [
            ("RequestLimitExceeded", ErrorClass::Throttled),
            ("Throttling", ErrorClass::Throttled),
            ("InstanceLimitExceeded", ErrorClass::Quota),
            ("VcpuLimitExceeded", ErrorClass::Quota),
            ("InsufficientInstanceCapacity", ErrorClass::Quota),
            ("TooManyLoadBalancers", ErrorClass::Quota),
            ("TooManyTargetGroups", ErrorClass::Quota),
            ("NatGatewayLimitExceeded", ErrorClass::Quota),
            ("InvalidParameterValue", ErrorClass::Invalid),
            ("InvalidParameterCombination", ErrorClass::Invalid),
            ("InvalidAMIID.NotFound", ErrorClass::Invalid),
            ("InvalidAMIID.Malformed", ErrorClass::Invalid),
            ("InvalidKeyPair.NotFound", ErrorClass::Invalid),
            ("UnauthorizedOperation", ErrorClass::Invalid),
            ("Unsupported", ErrorClass::Invalid),
            ("AuthFailure", ErrorClass::Authentication),
            ("SignatureDoesNotMatch", ErrorClass::Authentication),
            ("IncorrectInstanceState", ErrorClass::Busy),
            ("ResourceInUse", ErrorClass::Busy),
            ("DependencyViolation", ErrorClass::DependencyViolation),
            ("InvalidInstanceID.NotFound", ErrorClass::NotFound),
            ("InvalidSubnetID.NotFound", ErrorClass::NotFound),
            ("LoadBalancerNotFound", ErrorClass::NotFound),
            ("InternalError", ErrorClass::Transient),
            ("SomethingNew", ErrorClass::Transient),
        ] {
            assert_eq!(classify(code), class, "{code}");
        }
    }

    #[test]
    fn quotas_and_throttling_wait_and_never_latch() {
        let redaction = Redaction::default();
        for code in [
            "VcpuLimitExceeded",
            "RequestLimitExceeded",
            "DependencyViolation",
        ] {
            let error = CloudError::new("RunInstances", Some(code.into()), "try later")
                .into_actuator_error(&redaction);
            assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{code}");
        }
        let invalid = CloudError::new(
            "RunInstances",
            Some("InvalidParameterValue".into()),
            "Invalid value 'm9.huge' for InstanceType.",
        )
        .into_actuator_error(&redaction);
        assert_eq!(invalid.kind(), ActuatorErrorKind::InvalidConfiguration);
        assert!(
            invalid
                .to_string()
                .contains("RunInstances: InvalidParameterValue: Invalid value 'm9.huge'"),
            "{invalid}"
        );
        let timeout = CloudError::new("DescribeVpcs", None, "operation timed out")
            .into_actuator_error(&redaction);
        assert_eq!(timeout.kind(), ActuatorErrorKind::Transient);
    }

    #[test]
    fn what_aws_echoes_never_reaches_the_user() {
        let redaction = Redaction::default().secret("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
        let signature = CloudError::new(
            "DescribeInstances",
            Some("SignatureDoesNotMatch".into()),
            "The request signature we calculated does not match. The Canonical String for this \
             request should have been 'POST\n/\n\nx-amz-security-token:IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH'",
        );
        let message = signature.message(&redaction);
        assert!(!message.contains("IQoJ"), "{message}");
        assert!(!message.contains("Canonical"), "{message}");
        assert!(message.contains("AWS refused the credentials"), "{message}");

        let unauthorized = CloudError::new(
            "RunInstances",
            Some("UnauthorizedOperation".into()),
            "You are not authorized to perform this operation. Encoded authorization failure \
             message: 4GIOHlTkIaWHQD0Q0m6XSnuUMCm-abcdefghijklmnopqrstuvwxyz0123456789",
        );
        let message = unauthorized.message(&redaction);
        assert_eq!(
            message,
            "RunInstances: UnauthorizedOperation: You are not authorized to perform this operation."
        );

        let echoed = CloudError::new(
            "RunInstances",
            Some("InvalidParameterValue".into()),
            "bad key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY and user data I2Nsb3VkLWNvbmZpZwp3cml0ZV9maWxlczogW10K1234",
        );
        let message = echoed.message(&redaction);
        assert!(!message.contains("wJalr"), "{message}");
        assert!(!message.contains("I2Nsb3Vk"), "{message}");
    }
}
