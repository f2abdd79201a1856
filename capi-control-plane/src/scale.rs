//! Which failure domain a new control-plane machine goes to, and which machine goes first when
//! the control plane shrinks or rolls — upstream Cluster API's rules, as pure functions.
//!
//! - [`failure_domain_for_scale_up`]: among the Cluster's control-plane failure domains, the one
//!   with the fewest up-to-date machines (then the fewest machines of any kind); ties go to the
//!   first by name, so that the choice is reproducible.
//! - [`machine_to_scale_down`]: the first non-empty group of outdated machines marked with
//!   `cluster.x-k8s.io/delete-machine`, marked machines, outdated machines with failing
//!   components, outdated machines, all machines; within it, a machine outside the known failure
//!   domains first, else the failure domain holding the most of the group (then the most
//!   machines); the oldest machine there, then by name.

use std::cmp::Reverse;
use std::collections::BTreeMap;

/// One control-plane machine as the decisions see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// The Machine's name (also its node's and its etcd member's, once it has joined).
    pub name: String,
    /// `spec.failureDomain`.
    pub failure_domain: Option<String>,
    /// Creation time, seconds since the epoch.
    pub created: i64,
    /// Matches the control plane's spec (version, infrastructure template, kubeadm config) and no
    /// `rollout.after`/`rollout.before` asks for its replacement.
    pub up_to_date: bool,
    /// Being deleted.
    pub deleting: bool,
    /// Carries `cluster.x-k8s.io/delete-machine`.
    pub marked_for_deletion: bool,
    /// Has a node, and its API server, controller manager, scheduler, etcd pod and etcd member
    /// are all healthy.
    pub healthy: bool,
    /// One of those is reported unhealthy (not merely unknown).
    pub components_failing: bool,
}

/// The failure domain of the next machine, among `domains` (the Cluster's failure domains marked
/// for control planes); `None` when there are none.
pub fn failure_domain_for_scale_up(
    domains: &[String],
    machines: &[MachineFacts],
) -> Option<String> {
    let counts = count_by_domain(domains, machines, |m| m.up_to_date && !m.deleting);
    counts
        .into_iter()
        .min_by_key(|(domain, (priority, all))| (*priority, *all, (*domain).clone()))
        .map(|(domain, _)| domain.clone())
}

/// The machine to delete when the control plane has one too many, or `None` when `machines` is
/// empty. `rolling` restricts nothing but ranks outdated machines first (a rollout replaces them).
pub fn machine_to_scale_down<'a>(
    domains: &[String],
    machines: &'a [MachineFacts],
    rolling: bool,
) -> Option<&'a MachineFacts> {
    let outdated = |m: &&MachineFacts| rolling && !m.up_to_date;
    let groups: [Vec<&MachineFacts>; 5] = [
        machines
            .iter()
            .filter(outdated)
            .filter(|m| m.marked_for_deletion)
            .collect(),
        machines.iter().filter(|m| m.marked_for_deletion).collect(),
        machines
            .iter()
            .filter(outdated)
            .filter(|m| m.components_failing)
            .collect(),
        machines.iter().filter(outdated).collect(),
        machines.iter().collect(),
    ];
    let eligible = groups.into_iter().find(|g| !g.is_empty())?;
    let outside: Vec<&MachineFacts> = eligible
        .iter()
        .copied()
        .filter(|m| {
            !m.failure_domain
                .as_ref()
                .is_some_and(|d| domains.contains(d))
        })
        .collect();
    if !outside.is_empty() {
        return oldest(outside);
    }
    let eligible_names: Vec<&str> = eligible.iter().map(|m| m.name.as_str()).collect();
    let counts = count_by_domain(domains, machines, |m| {
        eligible_names.contains(&m.name.as_str())
    });
    let (domain, _) = counts
        .into_iter()
        .filter(|(_, (priority, _))| *priority > 0)
        .min_by_key(|(domain, (priority, all))| {
            (Reverse(*priority), Reverse(*all), (*domain).clone())
        })?;
    oldest(
        eligible
            .into_iter()
            .filter(|m| m.failure_domain.as_ref() == Some(domain))
            .collect(),
    )
}

/// Per failure domain: how many machines `priority` selects, and how many machines in all.
fn count_by_domain<'d>(
    domains: &'d [String],
    machines: &[MachineFacts],
    priority: impl Fn(&MachineFacts) -> bool,
) -> BTreeMap<&'d String, (usize, usize)> {
    let mut counts: BTreeMap<&String, (usize, usize)> =
        domains.iter().map(|d| (d, (0, 0))).collect();
    for machine in machines {
        if let Some(count) = machine
            .failure_domain
            .as_ref()
            .and_then(|d| counts.get_mut(d))
        {
            count.1 += 1;
            if priority(machine) {
                count.0 += 1;
            }
        }
    }
    counts
}

fn oldest(machines: Vec<&MachineFacts>) -> Option<&MachineFacts> {
    machines
        .into_iter()
        .min_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, domain: &str, created: i64, up_to_date: bool) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            failure_domain: (!domain.is_empty()).then(|| domain.to_string()),
            created,
            up_to_date,
            healthy: true,
            ..MachineFacts::default()
        }
    }

    fn domains() -> Vec<String> {
        ["az-1", "az-2", "az-3"].map(String::from).to_vec()
    }

    #[test]
    fn a_new_machine_goes_where_the_fewest_up_to_date_machines_are() {
        let machines = [
            machine("a", "az-1", 1, true),
            machine("b", "az-2", 2, true),
            machine("c", "az-3", 3, false),
        ];
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &machines).as_deref(),
            Some("az-3"),
            "the outdated machine in az-3 does not count first"
        );
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &[]).as_deref(),
            Some("az-1")
        );
        assert_eq!(failure_domain_for_scale_up(&[], &machines), None);
    }

    #[test]
    fn a_tie_on_up_to_date_machines_goes_to_the_domain_with_fewer_machines() {
        let machines = [
            machine("a", "az-1", 1, false),
            machine("b", "az-1", 2, false),
            machine("c", "az-2", 3, false),
            machine("d", "az-3", 4, true),
        ];
        assert_eq!(
            failure_domain_for_scale_up(&domains(), &machines).as_deref(),
            Some("az-2")
        );
    }

    #[test]
    fn scale_down_takes_the_oldest_in_the_fullest_domain() {
        let machines = [
            machine("a", "az-1", 1, true),
            machine("b", "az-2", 2, true),
            machine("c", "az-2", 3, true),
            machine("d", "az-3", 4, true),
        ];
        let chosen = machine_to_scale_down(&domains(), &machines, false).unwrap();
        assert_eq!(chosen.name, "b");
    }

    #[test]
    fn a_marked_machine_goes_first_and_a_rollout_takes_outdated_machines_first() {
        let mut machines = vec![
            machine("a", "az-1", 1, true),
            machine("b", "az-2", 2, false),
            machine("c", "az-3", 3, true),
        ];
        assert_eq!(
            machine_to_scale_down(&domains(), &machines, true)
                .unwrap()
                .name,
            "b"
        );
        assert_eq!(
            machine_to_scale_down(&domains(), &machines, false)
                .unwrap()
                .name,
            "a",
            "outside a rollout age decides"
        );
        machines[2].marked_for_deletion = true;
        assert_eq!(
            machine_to_scale_down(&domains(), &machines, true)
                .unwrap()
                .name,
            "c"
        );
    }

    #[test]
    fn a_machine_outside_the_known_domains_goes_first() {
        let machines = [
            machine("a", "az-1", 1, true),
            machine("b", "", 5, true),
            machine("c", "gone", 4, true),
        ];
        assert_eq!(
            machine_to_scale_down(&domains(), &machines, false)
                .unwrap()
                .name,
            "c"
        );
    }
}
