//! The outcome of one reconcile, common to every kind: conditions to set, the finalizer change,
//! events to publish and what happens next. Deciding fills a [`Plan`]; recording writes it
//! ([`crate::write`]); [`Context::reconcile`](crate::Context::reconcile) turns its [`Next`] into the
//! controller's next action.

use std::time::Duration;

use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::{ActuatorError, ActuatorErrorKind};

use crate::reasons;

/// How the finalizer must change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Leave the finalizers as they are.
    Keep,
    /// Add the controller's finalizer (before anything is created that it must clean up).
    Add,
    /// Remove the controller's finalizer (everything it guards is gone).
    Remove,
}

/// What happens after the plan is written.
#[derive(Debug)]
pub enum Next {
    /// Nothing to do until something changes.
    AwaitChange,
    /// Look again after this long (jitter is added when scheduling).
    Requeue(Duration),
    /// Provisioned and converged: look again after the resync period.
    Resync,
    /// The configuration cannot work at this generation; do not call the cloud again until it
    /// changes.
    InvalidConfiguration,
    /// A failure: back off.
    Failed(ActuatorError),
}

/// A Kubernetes event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    /// A `Warning` event rather than a `Normal` one.
    pub warning: bool,
    /// The event's reason (one of [`crate::reasons`], or the controller's own).
    pub reason: &'static str,
    /// What happened, for `kubectl describe`. Never a secret.
    pub note: String,
}

/// What one reconcile decided: conditions, finalizer, events and what comes next, plus `R`, what
/// the kind records besides (provider ID and addresses for machines, endpoint and failure domains
/// for clusters).
#[derive(Debug)]
pub struct Plan<R> {
    /// What the kind records besides conditions.
    pub record: R,
    /// The conditions to set (others keep their values).
    pub conditions: Vec<DesiredCondition>,
    /// How the finalizer changes.
    pub finalizer: FinalizerChange,
    /// The events to publish, in order.
    pub events: Vec<EventNote>,
    /// What happens after the plan is written.
    pub next: Next,
    generation: Option<i64>,
}

impl Next {
    /// This outcome, made due within `wait` at the latest: waiting for a change (or the resync)
    /// becomes a requeue after `wait`, a requeue keeps the sooner of the two. An invalid
    /// configuration or a failure, which are not requeues, are kept as they are.
    pub fn due_within(self, wait: Duration) -> Self {
        match self {
            Self::AwaitChange | Self::Resync => Self::Requeue(wait),
            Self::Requeue(after) => Self::Requeue(after.min(wait)),
            other @ (Self::InvalidConfiguration | Self::Failed(_)) => other,
        }
    }
}

impl<R: Default> Plan<R> {
    /// An empty plan for an object at `generation` (stamped on every condition as
    /// `observedGeneration`): nothing to record, finalizer kept, wait for a change.
    pub fn new(generation: Option<i64>) -> Self {
        Self {
            record: R::default(),
            conditions: Vec::new(),
            finalizer: FinalizerChange::Keep,
            events: Vec::new(),
            next: Next::AwaitChange,
            generation,
        }
    }

    /// Sets condition `type_`.
    pub fn condition(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.conditions.push(
            DesiredCondition::new(type_, status, reason)
                .message(message)
                .observed_generation(self.generation),
        );
    }

    /// The generation the plan was decided at (stamped on its conditions).
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// Sets one of the provider's own conditions, stamped with this plan's generation unless it
    /// carries one.
    pub fn provider_condition(&mut self, mut wanted: DesiredCondition) {
        if wanted.observed_generation.is_none() {
            wanted.observed_generation = self.generation;
        }
        self.conditions.push(wanted);
    }

    /// Records whether reconciliation is paused (the `Paused` condition) and returns it.
    pub fn paused(&mut self, paused: bool) -> bool {
        self.conditions
            .push(reasons::paused_condition(paused, self.generation));
        paused
    }

    /// Turns an error of a deletion into the plan. Unlike elsewhere, an invalid configuration is
    /// retried with backoff: a deletion cannot wait for a spec change.
    pub fn deletion_error(self, error: ActuatorError) -> Self {
        if error.kind() == ActuatorErrorKind::InvalidConfiguration {
            let reason = error.reason().to_string();
            let message = error.message().to_string();
            return self.not_ready(&reason, message, Next::Failed(error));
        }
        self.actuator_error(error)
    }

    /// Sets `Ready=False` with `reason` and `message`, and what comes next.
    pub fn not_ready(mut self, reason: &str, message: impl Into<String>, next: Next) -> Self {
        self.condition(condition::READY, ConditionStatus::False, reason, message);
        self.next = next;
        self
    }

    /// Adds an event to publish.
    pub fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.events.push(EventNote {
            warning,
            reason,
            note: note.into(),
        });
    }

    /// Turns an actuator error into the plan: a condition, and the retry its kind asks for.
    pub fn actuator_error(mut self, error: ActuatorError) -> Self {
        let reason = error.reason().to_string();
        let message = error.message().to_string();
        match error.kind() {
            ActuatorErrorKind::RequeueAfter => {
                let delay = error.requeue_delay().unwrap_or_default();
                self.not_ready(&reason, message, Next::Requeue(delay))
            }
            ActuatorErrorKind::InvalidConfiguration => {
                self.event(
                    true,
                    reasons::INVALID_CONFIGURATION,
                    format!("{reason}: {message}"),
                );
                self.not_ready(&reason, message, Next::InvalidConfiguration)
            }
            ActuatorErrorKind::Transient => self.not_ready(&reason, message, Next::Failed(error)),
        }
    }
}

impl Next {
    /// How controller-runtime would label a reconcile that ended like this.
    pub fn result(&self) -> crate::metrics::ReconcileResult {
        use crate::metrics::ReconcileResult;
        match self {
            Self::AwaitChange | Self::InvalidConfiguration => ReconcileResult::Success,
            Self::Requeue(_) | Self::Resync => ReconcileResult::RequeueAfter,
            Self::Failed(_) => ReconcileResult::Error,
        }
    }
}
