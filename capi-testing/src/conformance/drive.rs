//! Driving an actuator call the way the loop does: retried through `RequeueAfter` and transient
//! failures, or stopped part-way as a crash would stop it.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use capi_core::{ActuatorError, ActuatorErrorKind};
use tokio::time::Instant;

use super::Settings;

/// Why a call did not settle with `Ok`.
#[derive(Debug)]
pub(crate) enum Unsettled {
    /// The actuator said the configuration cannot work.
    Invalid(ActuatorError),
    /// Still failing or waiting at the deadline; the last answer.
    TimedOut(String),
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(error) => write!(f, "invalid configuration: {error}"),
            Self::TimedOut(last) => write!(f, "not settled by the deadline; last: {last}"),
        }
    }
}

/// Calls `call` until it returns `Ok` or an invalid configuration, waiting as `RequeueAfter` asks
/// (capped) and briefly after a transient failure, until `settings.deadline` from now.
pub(crate) async fn settle<T, F, Fut>(settings: &Settings, mut call: F) -> Result<T, Unsettled>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ActuatorError>>,
{
    let deadline = Instant::now() + settings.deadline;
    loop {
        let error = match call().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let wait = match error.kind() {
            ActuatorErrorKind::InvalidConfiguration => return Err(Unsettled::Invalid(error)),
            ActuatorErrorKind::RequeueAfter => error.requeue_delay().unwrap_or_default(),
            ActuatorErrorKind::Transient => Duration::from_millis(100),
        }
        .min(settings.max_wait);
        if Instant::now() + wait > deadline {
            return Err(Unsettled::TimedOut(error.to_string()));
        }
        tokio::time::sleep(wait).await;
    }
}

/// Polls `future` at most `polls` times, giving the runtime (and the cloud) `gap` between polls,
/// then drops it — as a crash or a cancelled reconcile stops a call at an await point. Returns
/// its output if it finished first.
pub(crate) async fn interrupted<F: Future>(
    future: F,
    polls: usize,
    gap: Duration,
) -> Option<F::Output> {
    let mut future = pin!(future);
    for _ in 0..polls {
        let poll = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = poll {
            return Some(output);
        }
        if gap.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(gap).await;
        }
    }
    None
}
