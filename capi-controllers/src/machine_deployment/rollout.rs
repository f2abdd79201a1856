//! The arithmetic of `MachineDeployment` rollouts, as upstream defines it, separate from any API
//! calls so that it can be simulated step by step (see `tests/rollout_simulation.rs` and its golden
//! logs).
//!
//! - [`resolve_fenceposts`]: `maxSurge` rounds up, `maxUnavailable` rounds down, both against
//!   `replicas`; when both come out 0, `maxUnavailable` becomes 1 so that a rollout can progress.
//! - [`rolling_update_step`]: one reconcile of a rolling update — how far the new `MachineSet`
//!   may scale up and the old ones down without exceeding `replicas + maxSurge` machines or
//!   dropping below `replicas − maxUnavailable` available ones.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A rollout parameter that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RolloutError {
    /// A value is neither a non-negative integer nor a percentage like `25%`.
    #[error("{field}: {value:?} is not a non-negative integer or a percentage like \"25%\"")]
    InvalidIntOrPercent {
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
    },
}

fn scaled(
    value: Option<&IntOrString>,
    default: i32,
    total: i32,
    round_up: bool,
    field: &'static str,
) -> Result<i32, RolloutError> {
    let invalid = |value: String| RolloutError::InvalidIntOrPercent { field, value };
    match value {
        None => Ok(default),
        Some(IntOrString::Int(n)) if *n >= 0 => Ok(*n),
        Some(IntOrString::Int(n)) => Err(invalid(n.to_string())),
        Some(IntOrString::String(text)) => {
            crate::percentage::of(text, total, round_up).ok_or_else(|| invalid(text.clone()))
        }
    }
}

/// `(maxSurge, maxUnavailable)` as machine counts for `replicas` (defaults 1 and 0).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), RolloutError> {
    let surge = scaled(
        max_surge,
        1,
        replicas,
        true,
        "spec.rollout.strategy.rollingUpdate.maxSurge",
    )?;
    let unavailable = scaled(
        max_unavailable,
        0,
        replicas,
        false,
        "spec.rollout.strategy.rollingUpdate.maxUnavailable",
    )?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// What a `MachineSet` has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetState {
    /// The set's name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// Machines that are available.
    pub available: i32,
}

/// A new `spec.replicas` for a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The set.
    pub name: String,
    /// Its new replica count.
    pub replicas: i32,
}

/// One step of a rolling update to `desired` replicas: scale the new set up within the surge
/// budget, then the old sets (oldest first, as given) down within the availability budget.
pub fn rolling_update_step(
    desired: i32,
    new: &SetState,
    old: &[SetState],
    surge: i32,
    unavailable: i32,
) -> Vec<Scale> {
    let mut actions = Vec::new();
    let total: i32 = new.replicas + old.iter().map(|s| s.replicas).sum::<i32>();

    // Scale up the new set, never above desired + surge machines in all.
    let mut new_replicas = new.replicas;
    if new.replicas < desired {
        let room = (desired + surge - total).max(0);
        let up = room.min(desired - new.replicas);
        if up > 0 {
            new_replicas += up;
            actions.push(Scale {
                name: new.name.clone(),
                replicas: new_replicas,
            });
        }
    } else if new.replicas > desired {
        new_replicas = desired;
        actions.push(Scale {
            name: new.name.clone(),
            replicas: desired,
        });
    }

    // Scale down old sets, never below desired − unavailable available machines, and never
    // counting machines of the new set that are not available yet.
    let min_available = desired - unavailable;
    let new_unavailable = (new_replicas - new.available).max(0);
    let all = new_replicas + old.iter().map(|s| s.replicas).sum::<i32>();
    let mut budget = (all - min_available - new_unavailable).max(0);
    for set in old {
        if budget == 0 {
            break;
        }
        if set.replicas == 0 {
            continue;
        }
        let down = set.replicas.min(budget);
        budget -= down;
        actions.push(Scale {
            name: set.name.clone(),
            replicas: set.replicas - down,
        });
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i32) -> IntOrString {
        IntOrString::Int(n)
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.to_string())
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(resolve_fenceposts(None, None, 3), Ok((1, 0)));
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10),
            Ok((3, 2))
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("1%")), Some(&pct("99%")), 3),
            Ok((1, 2))
        );
        assert_eq!(
            resolve_fenceposts(Some(&int(0)), Some(&int(0)), 5),
            Ok((0, 1)),
            "both zero cannot progress"
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("0%")), Some(&pct("0%")), 5),
            Ok((0, 1))
        );
        assert!(resolve_fenceposts(Some(&pct("lots")), None, 3).is_err());
        assert!(resolve_fenceposts(Some(&int(-1)), None, 3).is_err());
    }

    #[test]
    fn first_step_surges_without_losing_availability() {
        let new = SetState {
            name: "new".into(),
            replicas: 0,
            available: 0,
        };
        let old = [SetState {
            name: "old".into(),
            replicas: 3,
            available: 3,
        }];
        assert_eq!(
            rolling_update_step(3, &new, &old, 1, 0),
            vec![Scale {
                name: "new".into(),
                replicas: 1
            }]
        );
    }

    #[test]
    fn max_unavailable_allows_scaling_down_first() {
        let new = SetState {
            name: "new".into(),
            replicas: 0,
            available: 0,
        };
        let old = [SetState {
            name: "old".into(),
            replicas: 4,
            available: 4,
        }];
        let actions = rolling_update_step(4, &new, &old, 0, 1);
        assert_eq!(
            actions,
            vec![Scale {
                name: "old".into(),
                replicas: 3
            }]
        );
    }
}
