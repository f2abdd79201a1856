//! [`ActuatorError`]: how an actuator tells the loop what to do next.

use std::error::Error as StdError;
use std::time::Duration;

/// The outcome of an actuator call that is not a plain success.
///
/// The three kinds mean different things to the reconcile loop, and every provider must pick the
/// one that matches:
///
/// | kind | the loop | condition | logs |
/// |---|---|---|---|
/// | [`RequeueAfter`](Self::RequeueAfter) | reconciles again after about `after` (with jitter); no backoff | `Ready=False` with the given reason while waiting | debug only |
/// | [`Transient`](Self::Transient) | per-object exponential backoff, capped, reset by the next success | `Ready=False` with the reason | the cause, at warn |
/// | [`InvalidConfiguration`](Self::InvalidConfiguration) | no retry until the object's `metadata.generation` changes | `Ready=False` with the reason and the message | once, at warn |
///
/// Nothing latches forever: an invalid configuration is retried as soon as the user edits the
/// object, and every other kind is retried on its own.
///
/// Messages end up in conditions, events and logs. They must never contain credentials, tokens or
/// bootstrap data: build them from identifiers and cloud error codes, not from request bodies.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActuatorError {
    /// Not a failure: the operation is in progress (an instance is booting, a deletion is
    /// running, a load balancer is still `PENDING_CREATE`). Reconcile again after `after`.
    #[error("in progress ({reason}), checking again in {after:?}: {message}")]
    RequeueAfter {
        /// How long to wait before the next attempt.
        after: Duration,
        /// A CamelCase condition reason, e.g. `WaitingForInstance`.
        reason: String,
        /// What is being waited for, for `kubectl describe`.
        message: String,
    },

    /// A failure that may go away by itself: a cloud API error, a timeout, throttling.
    #[error("{reason}: {message}")]
    Transient {
        /// A CamelCase condition reason, e.g. `CloudAPIError`.
        reason: String,
        /// A short description of the failure.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    },

    /// The object asks for something that cannot work (unknown image, flavor too small, missing
    /// credentials Secret). Retrying without a change is pointless.
    #[error("invalid configuration ({reason}): {message}")]
    InvalidConfiguration {
        /// A CamelCase condition reason, e.g. `ImageNotFound`.
        reason: String,
        /// What is wrong and how to fix it, for the user.
        message: String,
    },
}

/// The kind of an [`ActuatorError`], without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActuatorErrorKind {
    /// See [`ActuatorError::RequeueAfter`].
    RequeueAfter,
    /// See [`ActuatorError::Transient`].
    Transient,
    /// See [`ActuatorError::InvalidConfiguration`].
    InvalidConfiguration,
}

impl ActuatorErrorKind {
    /// A short label for metrics: `requeue`, `transient` or `invalid_configuration`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequeueAfter => "requeue",
            Self::Transient => "transient",
            Self::InvalidConfiguration => "invalid_configuration",
        }
    }
}

impl ActuatorError {
    /// Not done yet; check again after `after`.
    pub fn requeue_after(
        after: Duration,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::RequeueAfter {
            after,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A transient failure caused by `source`; its `Display` becomes the message.
    pub fn transient<E>(reason: impl Into<String>, source: E) -> Self
    where
        E: StdError + Send + Sync + 'static,
    {
        Self::Transient {
            reason: reason.into(),
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// A transient failure described by a message only.
    pub fn transient_message(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Transient {
            reason: reason.into(),
            message: message.into(),
            source: None,
        }
    }

    /// The object's configuration cannot work; `message` tells the user what to change.
    pub fn invalid_configuration(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidConfiguration {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ActuatorErrorKind {
        match self {
            Self::RequeueAfter { .. } => ActuatorErrorKind::RequeueAfter,
            Self::Transient { .. } => ActuatorErrorKind::Transient,
            Self::InvalidConfiguration { .. } => ActuatorErrorKind::InvalidConfiguration,
        }
    }

    /// The requested delay, for [`RequeueAfter`](Self::RequeueAfter) only.
    pub fn requeue_delay(&self) -> Option<Duration> {
        match self {
            Self::RequeueAfter { after, .. } => Some(*after),
            _ => None,
        }
    }

    /// The condition reason.
    pub fn reason(&self) -> &str {
        match self {
            Self::RequeueAfter { reason, .. }
            | Self::Transient { reason, .. }
            | Self::InvalidConfiguration { reason, .. } => reason,
        }
    }

    /// The message for the condition.
    pub fn message(&self) -> &str {
        match self {
            Self::RequeueAfter { message, .. }
            | Self::Transient { message, .. }
            | Self::InvalidConfiguration { message, .. } => message,
        }
    }

    /// Whether this is a failure (transient or invalid configuration) rather than "in progress".
    pub fn is_failure(&self) -> bool {
        !matches!(self, Self::RequeueAfter { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_accessors() {
        let requeue =
            ActuatorError::requeue_after(Duration::from_secs(5), "WaitingForInstance", "booting");
        assert_eq!(requeue.kind(), ActuatorErrorKind::RequeueAfter);
        assert_eq!(requeue.requeue_delay(), Some(Duration::from_secs(5)));
        assert!(!requeue.is_failure());

        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "compute API timed out");
        let transient = ActuatorError::transient("CloudAPIError", io);
        assert_eq!(transient.kind(), ActuatorErrorKind::Transient);
        assert_eq!(transient.message(), "compute API timed out");
        assert!(std::error::Error::source(&transient).is_some());
        assert!(transient.is_failure());
        assert_eq!(transient.requeue_delay(), None);

        let invalid = ActuatorError::invalid_configuration(
            "ImageNotFound",
            "image \"ubuntu-99\" does not exist",
        );
        assert_eq!(invalid.kind().as_str(), "invalid_configuration");
        assert_eq!(invalid.reason(), "ImageNotFound");
        assert_eq!(
            invalid.to_string(),
            "invalid configuration (ImageNotFound): image \"ubuntu-99\" does not exist"
        );
    }
}
