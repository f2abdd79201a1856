//! Whether etcd keeps its quorum through a membership change, with the arithmetic upstream
//! Cluster API uses: the change is safe only if, counting the members that would remain (and the
//! one that would join), the healthy voting members are still a majority of the voting members,
//! and no learner is mid-promotion.

/// One etcd member as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The member's name (the node's name); empty while it has not started.
    pub name: String,
    /// Whether its machine reports the member healthy (`EtcdMemberHealthy=True`).
    pub healthy: bool,
    /// A learner: joined, not yet a voting member.
    pub learner: bool,
}

/// The change to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// A new member joins (a machine is added).
    Add,
    /// The named member leaves (its machine is deleted or remediated).
    Remove(&'a str),
}

/// How many voting members make a quorum among `voting`.
pub fn quorum(voting: usize) -> usize {
    voting / 2 + 1
}

/// Whether etcd keeps its quorum after `change`. A joining member counts as unhealthy until it
/// has proven otherwise, except when it joins a cluster of one or none (it is then needed for any
/// progress at all); a member without a name has not started and counts as an unhealthy learner,
/// which blocks every change until it is promoted or removed.
pub fn safe(members: &[Member], change: Change<'_>) -> bool {
    let mut voting = 0;
    let mut learners = 0;
    let mut unhealthy = 0;
    if change == Change::Add {
        voting += 1;
        if members.len() > 1 {
            unhealthy += 1;
        }
    }
    for member in members {
        if member.name.is_empty() {
            learners += 1;
            unhealthy += 1;
            continue;
        }
        if change == Change::Remove(member.name.as_str()) {
            continue;
        }
        if member.learner {
            learners += 1;
        } else {
            voting += 1;
        }
        if !member.healthy {
            unhealthy += 1;
        }
    }
    learners == 0 && voting >= unhealthy && voting - unhealthy >= quorum(voting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(healthy: &[bool]) -> Vec<Member> {
        healthy
            .iter()
            .enumerate()
            .map(|(i, healthy)| Member {
                name: format!("m{i}"),
                healthy: *healthy,
                learner: false,
            })
            .collect()
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn removing_one_of_three_needs_the_other_two_healthy() {
        assert!(safe(&members(&[true, true, true]), Change::Remove("m0")));
        assert!(
            safe(&members(&[false, true, true]), Change::Remove("m0")),
            "removing the sick one"
        );
        assert!(!safe(&members(&[true, false, true]), Change::Remove("m0")));
    }

    #[test]
    fn removing_one_of_five_tolerates_one_sick_survivor() {
        assert!(safe(
            &members(&[true, false, true, true, true]),
            Change::Remove("m0")
        ));
        assert!(!safe(
            &members(&[true, false, false, true, true]),
            Change::Remove("m0")
        ));
    }

    #[test]
    fn a_joining_member_counts_as_sick_unless_the_cluster_is_tiny() {
        assert!(safe(&members(&[true, true, true]), Change::Add));
        assert!(!safe(&members(&[true, false, true]), Change::Add));
        assert!(safe(&members(&[true, true]), Change::Add));
        assert!(safe(&members(&[true]), Change::Add));
        assert!(safe(&[], Change::Add));
    }

    #[test]
    fn a_learner_or_an_unstarted_member_blocks_every_change() {
        let mut with_learner = members(&[true, true, true]);
        with_learner[2].learner = true;
        assert!(!safe(&with_learner, Change::Remove("m0")));
        let mut unstarted = members(&[true, true, true]);
        unstarted[2].name.clear();
        assert!(!safe(&unstarted, Change::Add));
    }
}
