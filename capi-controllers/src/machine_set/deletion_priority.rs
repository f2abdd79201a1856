//! Which machines a `MachineSet` deletes first when it scales down, as upstream orders them:
//! machines marked with `cluster.x-k8s.io/delete-machine` (or already being deleted) first, then
//! unhealthy ones (marked for remediation, failed, or without a node), then the rest by the set's
//! `deletion.order` — `Newest`, `Oldest`, or `Random` (a stable hash of the name, so that the same
//! fleet always gives the same answer).

use std::cmp::Reverse;
use std::hash::{DefaultHasher, Hash, Hasher};

use capi_core::api::MachineSetDeletionOrder;

/// What deletion priority needs to know about a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineFacts {
    /// The machine's name.
    pub name: String,
    /// Creation time, seconds since the epoch.
    pub created: i64,
    /// Carries `cluster.x-k8s.io/delete-machine`, or is already being deleted.
    pub marked_for_deletion: bool,
    /// Marked for remediation, failed, or has no node yet.
    pub unhealthy: bool,
}

/// The `count` machines to delete, in order.
pub fn select_for_deletion(
    machines: &[MachineFacts],
    count: usize,
    order: MachineSetDeletionOrder,
) -> Vec<String> {
    let mut ranked: Vec<&MachineFacts> = machines.iter().collect();
    ranked.sort_by_key(|m| {
        let tier = if m.marked_for_deletion {
            0
        } else if m.unhealthy {
            1
        } else {
            2
        };
        let within = match order {
            MachineSetDeletionOrder::Newest => Reverse(m.created),
            MachineSetDeletionOrder::Oldest => Reverse(-m.created),
            MachineSetDeletionOrder::Random => {
                let mut hasher = DefaultHasher::new();
                m.name.hash(&mut hasher);
                Reverse(i64::from_ne_bytes(hasher.finish().to_ne_bytes()))
            }
        };
        (tier, within, m.name.clone())
    });
    ranked
        .into_iter()
        .take(count)
        .map(|m| m.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, created: i64) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            created,
            marked_for_deletion: false,
            unhealthy: false,
        }
    }

    #[test]
    fn marked_then_unhealthy_then_by_order() {
        let mut fleet = vec![
            machine("a", 10),
            machine("b", 20),
            machine("c", 30),
            machine("d", 40),
        ];
        assert_eq!(
            select_for_deletion(&fleet, 2, MachineSetDeletionOrder::Newest),
            ["d", "c"]
        );
        assert_eq!(
            select_for_deletion(&fleet, 2, MachineSetDeletionOrder::Oldest),
            ["a", "b"]
        );
        fleet[1].unhealthy = true;
        fleet[2].marked_for_deletion = true;
        assert_eq!(
            select_for_deletion(&fleet, 3, MachineSetDeletionOrder::Oldest),
            ["c", "b", "a"]
        );
        assert_eq!(
            select_for_deletion(&fleet, 3, MachineSetDeletionOrder::Newest),
            ["c", "b", "d"]
        );
    }

    #[test]
    fn random_is_stable_and_still_honours_marks() {
        let mut fleet: Vec<_> = (0..20).map(|i| machine(&format!("m-{i}"), i)).collect();
        let first = select_for_deletion(&fleet, 5, MachineSetDeletionOrder::Random);
        assert_eq!(
            first,
            select_for_deletion(&fleet, 5, MachineSetDeletionOrder::Random)
        );
        assert_eq!(first.len(), 5);
        fleet[7].marked_for_deletion = true;
        assert_eq!(
            select_for_deletion(&fleet, 1, MachineSetDeletionOrder::Random),
            ["m-7"]
        );
        assert!(select_for_deletion(&fleet, 50, MachineSetDeletionOrder::Random).len() == 20);
    }
}
