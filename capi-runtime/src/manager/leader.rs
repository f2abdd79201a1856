//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! acquire when the lease is free or expired, renew well within its duration, and stop leading
//! when a renewal has not succeeded within the renew deadline.
//!
//! The deadline is counted from the moment the last successful renewal was *sent* (the time it
//! wrote into the lease, from which other replicas count its expiry), and every attempt is cut
//! off at the deadline: a renewal that hangs (a stalled connection, an overloaded API server)
//! cannot keep this replica leading. With `renew_deadline < lease_duration` (checked), a replica
//! that could not renew has stopped its controllers before any other replica may take the lease —
//! as with client-go, provided the replicas' clocks differ by less than the difference (5 s by
//! default): the others judge expiry by the renew time written in the lease and their own clock.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;

/// Leader election settings. Defaults follow controller-runtime (15 s / 10 s / 2 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name; every replica of one manager uses the same.
    pub lease_name: String,
    /// This replica's identity; unique per process.
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// Leadership is given up when no renewal succeeded for this long.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Checks that the timings can keep their promise: a replica gives up (`renew_deadline`)
    /// before its lease expires (`lease_duration`) and tries more than once within the deadline
    /// (`retry_period`).
    pub fn validate(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "leader election: the renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "leader election: the retry period ({:?}) must be positive and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }

    /// Settings for the Lease `namespace/lease_name`, identity from `$POD_NAME`/`$HOSTNAME` plus a
    /// random suffix, and controller-runtime's timings.
    pub fn new(namespace: impl Into<String>, lease_name: impl Into<String>) -> Self {
        let host = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "manager".into());
        Self {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: format!("{host}_{:08x}", fastrand::u32(..)),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

pub(crate) struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
}

impl LeaderElector {
    pub(crate) fn new(client: Client, config: LeaderElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// Tries until this replica holds the lease; returns when the successful attempt was sent.
    /// Each attempt is bounded by the renew deadline.
    pub(crate) async fn acquire(&self) -> Instant {
        loop {
            let sent = Instant::now();
            let attempt = self.try_acquire_or_renew();
            match tokio::time::timeout(self.config.renew_deadline, attempt).await {
                Ok(Ok(true)) => {
                    tracing::info!(identity = %self.config.identity, lease = %self.config.lease_name, "acquired leadership");
                    return sent;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => tracing::debug!(%error, "could not acquire the lease"),
                Err(_) => {
                    tracing::debug!("acquiring the lease took longer than the renew deadline")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews every retry period, the lease first acquired by an attempt sent at `acquired`;
    /// returns when another replica holds the lease or when no renewal succeeded within the
    /// renew deadline, at the deadline at the latest, however long an attempt hangs.
    pub(crate) async fn hold(&self, acquired: Instant) {
        let mut renewed = acquired;
        loop {
            let deadline = renewed + self.config.renew_deadline;
            let next = (Instant::now() + self.config.retry_period).min(deadline);
            tokio::time::sleep_until(next).await;
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => renewed = sent,
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.config.lease_name, "another replica took the lease");
                    return;
                }
                Ok(Err(error)) => tracing::warn!(%error, "could not renew the lease"),
                Err(_) => {}
            }
            if Instant::now() >= renewed + self.config.renew_deadline {
                tracing::error!(
                    lease = %self.config.lease_name,
                    deadline = ?self.config.renew_deadline,
                    "could not renew the lease within the renew deadline; stopping"
                );
                return;
            }
        }
    }

    /// Gives the lease up so that another replica takes over without waiting for it to expire;
    /// bounded by the renew deadline.
    pub(crate) async fn release(&self) {
        let release = self.try_release();
        if tokio::time::timeout(self.config.renew_deadline, release)
            .await
            .is_err()
        {
            tracing::debug!("releasing the lease took longer than the renew deadline");
        }
    }

    async fn try_release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.config.lease_name).await {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() == Some(self.config.identity.as_str()) {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
                if let Err(error) = self
                    .api
                    .replace(&self.config.lease_name, &PostParams::default(), &lease)
                    .await
                {
                    tracing::debug!(%error, "could not release the lease");
                }
            }
        }
    }

    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        // Rounded up: a lease must not be written shorter than configured.
        let duration_seconds =
            i32::try_from(self.config.lease_duration.as_secs_f64().ceil() as u64)
                .unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(false),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.config.identity.as_str());
        if !ours && holder.is_some() && !expired(spec, now) {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.config.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(duration_seconds);
        spec.renew_time = Some(MicroTime(now));
        // `replace` carries the resource version we read: two replicas racing for an expired
        // lease cannot both win.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(error) => Err(error),
        }
    }
}

fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    renewed
        .0
        .checked_add(duration)
        .map_or(true, |expiry| expiry < now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_that_cannot_keep_their_promise_are_refused() {
        let good = LeaderElectionConfig::new("ns", "lease");
        assert!(good.validate().is_ok());
        let late = LeaderElectionConfig {
            renew_deadline: Duration::from_secs(15),
            ..good.clone()
        };
        assert!(late.validate().unwrap_err().contains("renew deadline"));
        let slow = LeaderElectionConfig {
            retry_period: Duration::from_secs(10),
            ..good
        };
        assert!(slow.validate().unwrap_err().contains("retry period"));
    }

    #[test]
    fn a_lease_expires_after_its_duration_from_the_last_renewal() {
        let now = Timestamp::from_second(1_000).unwrap();
        let mut spec = LeaseSpec {
            renew_time: Some(MicroTime(Timestamp::from_second(990).unwrap())),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec, now));
        spec.lease_duration_seconds = Some(5);
        assert!(expired(&spec, now));
        assert!(
            expired(&LeaseSpec::default(), now),
            "a lease never renewed is free"
        );
    }
}
