//! The next step of a control plane towards its spec — create, delete or wait — decided from
//! what is observed, one machine at a time, as upstream Cluster API's KubeadmControlPlane does:
//!
//! - while any machine is being deleted, nothing else happens;
//! - with machines to replace (a rollout), grow to `replicas + maxSurge`, then delete an outdated
//!   machine; with `maxSurge: 0` delete first, then replace;
//! - otherwise create while there are fewer machines than `replicas`, delete while there are
//!   more;
//! - a machine is created only when every existing one is healthy, and deleted only when the
//!   others are healthy and etcd keeps its quorum without it ([`crate::quorum`]); before its
//!   machine goes, a member that leads etcd hands leadership to the healthiest, newest
//!   up-to-date member.

use crate::quorum::{self, Change, Member};
use crate::scale::{self, MachineFacts};

/// What the control plane does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create the first machine, which runs `kubeadm init`.
    Initialize {
        /// Its failure domain.
        failure_domain: Option<String>,
    },
    /// Create a machine that joins the control plane.
    ScaleUp {
        /// Its failure domain.
        failure_domain: Option<String>,
    },
    /// Delete a machine, after its etcd member handed over leadership and left.
    ScaleDown {
        /// The machine.
        machine: String,
        /// The member to hand etcd leadership to first, when the machine's member leads.
        move_leadership_to: Option<String>,
    },
    /// Nothing can happen safely now; the reason says what is awaited.
    Wait(String),
    /// The control plane matches its spec and every machine is healthy.
    Done,
}

/// What the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// `spec.replicas`.
    pub replicas: usize,
    /// `spec.rollout.strategy.rollingUpdate.maxSurge`: 0 or 1.
    pub max_surge: usize,
    /// The Cluster's control-plane failure domains.
    pub failure_domains: &'a [String],
    /// The control plane's machines.
    pub machines: &'a [MachineFacts],
    /// The etcd members.
    pub members: &'a [Member],
    /// The member that leads etcd, if known.
    pub leader: Option<&'a str>,
}

/// The next step.
pub fn next_step(observed: &Observed<'_>) -> Step {
    let machines = observed.machines;
    if let Some(deleting) = machines.iter().find(|m| m.deleting) {
        return Step::Wait(format!("machine {} is being deleted", deleting.name));
    }
    if machines.is_empty() {
        return if observed.replicas == 0 {
            Step::Done
        } else {
            Step::Initialize {
                failure_domain: scale::failure_domain_for_scale_up(
                    observed.failure_domains,
                    machines,
                ),
            }
        };
    }
    let rolling = machines.iter().any(|m| !m.up_to_date);
    let target = if rolling {
        observed.replicas + observed.max_surge
    } else {
        observed.replicas
    };
    if machines.len() < target {
        return scale_up(observed);
    }
    if machines.len() > observed.replicas || rolling {
        return scale_down(observed, rolling);
    }
    match machines.iter().find(|m| !m.healthy) {
        Some(joining) => Step::Wait(format!("machine {} is not healthy yet", joining.name)),
        None => Step::Done,
    }
}

fn scale_up(observed: &Observed<'_>) -> Step {
    if let Some(sick) = observed.machines.iter().find(|m| !m.healthy) {
        return Step::Wait(format!(
            "machine {} is not healthy yet; a new member joins only a healthy control plane",
            sick.name
        ));
    }
    if !quorum::safe(observed.members, Change::Add) {
        return Step::Wait("etcd would lose its quorum while a new member joins".into());
    }
    Step::ScaleUp {
        failure_domain: scale::failure_domain_for_scale_up(
            observed.failure_domains,
            observed.machines,
        ),
    }
}

fn scale_down(observed: &Observed<'_>, rolling: bool) -> Step {
    let Some(victim) =
        scale::machine_to_scale_down(observed.failure_domains, observed.machines, rolling)
    else {
        return Step::Done;
    };
    if let Some(sick) = observed
        .machines
        .iter()
        .find(|m| m.name != victim.name && !m.healthy)
    {
        return Step::Wait(format!(
            "machine {} is not healthy; {} stays until it is",
            sick.name, victim.name
        ));
    }
    if observed.members.iter().any(|m| m.name == victim.name)
        && !quorum::safe(observed.members, Change::Remove(&victim.name))
    {
        return Step::Wait(format!(
            "etcd would lose its quorum without {}'s member",
            victim.name
        ));
    }
    let move_leadership_to = if observed.leader == Some(victim.name.as_str()) {
        leadership_candidate(observed, &victim.name)
    } else {
        None
    };
    Step::ScaleDown {
        machine: victim.name.clone(),
        move_leadership_to,
    }
}

/// Who takes etcd leadership from `leaving`: healthy before unhealthy, up to date before
/// outdated, newest first.
fn leadership_candidate(observed: &Observed<'_>, leaving: &str) -> Option<String> {
    observed
        .machines
        .iter()
        .filter(|m| m.name != leaving && !m.deleting)
        .filter(|m| observed.members.iter().any(|member| member.name == m.name))
        .max_by_key(|m| {
            (
                m.healthy,
                m.up_to_date,
                m.created,
                std::cmp::Reverse(m.name.clone()),
            )
        })
        .map(|m| m.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, domain: &str, created: i64) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            failure_domain: Some(domain.into()),
            created,
            up_to_date: true,
            healthy: true,
            ..MachineFacts::default()
        }
    }

    fn member(name: &str, healthy: bool) -> Member {
        Member {
            name: name.into(),
            healthy,
            learner: false,
        }
    }

    fn domains() -> Vec<String> {
        ["az-1", "az-2", "az-3"].map(String::from).to_vec()
    }

    fn decide(
        replicas: usize,
        machines: &[MachineFacts],
        members: &[Member],
        leader: Option<&str>,
    ) -> Step {
        next_step(&Observed {
            replicas,
            max_surge: 1,
            failure_domains: &domains(),
            machines,
            members,
            leader,
        })
    }

    #[test]
    fn nothing_happens_while_a_machine_is_being_deleted() {
        let mut machines = vec![machine("a", "az-1", 1), machine("b", "az-2", 2)];
        machines[1].deleting = true;
        let step = decide(3, &machines, &[member("a", true)], Some("a"));
        assert_eq!(step, Step::Wait("machine b is being deleted".into()));
    }

    #[test]
    fn the_first_machine_initializes_and_the_next_join() {
        assert_eq!(
            decide(3, &[], &[], None),
            Step::Initialize {
                failure_domain: Some("az-1".into())
            }
        );
        let machines = [machine("a", "az-1", 1)];
        assert_eq!(
            decide(3, &machines, &[member("a", true)], Some("a")),
            Step::ScaleUp {
                failure_domain: Some("az-2".into())
            }
        );
    }

    #[test]
    fn a_scale_down_waits_for_the_others_to_be_healthy_and_for_quorum() {
        let mut machines = vec![
            machine("a", "az-1", 1),
            machine("b", "az-2", 2),
            machine("c", "az-3", 3),
        ];
        machines[2].healthy = false;
        let members = [member("a", true), member("b", true), member("c", false)];
        assert!(
            matches!(decide(1, &machines, &members, Some("b")), Step::Wait(why) if why.contains("machine c is not healthy"))
        );
        // The machine looks healthy, but etcd says its member is not: removing `a` would leave
        // one healthy voting member of two.
        machines[2].healthy = true;
        assert_eq!(
            decide(1, &machines, &members, Some("b")),
            Step::Wait("etcd would lose its quorum without a's member".into())
        );
    }

    #[test]
    fn the_leader_hands_over_to_the_newest_healthy_up_to_date_member_before_its_machine_goes() {
        let mut machines = vec![
            machine("a", "az-1", 1),
            machine("b", "az-2", 2),
            machine("c", "az-3", 3),
            machine("d", "az-1", 4),
        ];
        machines[3].up_to_date = false;
        let members = [
            member("a", true),
            member("b", true),
            member("c", true),
            member("d", true),
        ];
        assert_eq!(
            decide(3, &machines, &members, Some("d")),
            Step::ScaleDown {
                machine: "d".into(),
                move_leadership_to: Some("c".into()),
            },
            "the outdated machine goes first, and the newest up-to-date member leads"
        );
        assert_eq!(
            decide(3, &machines, &members, Some("a")),
            Step::ScaleDown {
                machine: "d".into(),
                move_leadership_to: None,
            }
        );
    }
}
