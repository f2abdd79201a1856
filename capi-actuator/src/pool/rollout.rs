//! How many instances a pool's scale set holds and which instances leave it: the arithmetic of
//! scaling and rolling a pool, without I/O. `tests/pool_rollout_simulation.rs` replays it on a
//! simulated scale set and checks its limits at every step.
//!
//! The cloud's capacity only ever drops by named removals ([`capi_core::PoolSize::remove`]): a
//! scale set told to shrink picks its own victims, which nobody drained. So the loop first
//! chooses the instances to release (deleting their `Machine`s, which drain the nodes), and the
//! capacity it asks for never goes below what the cloud holds minus what can be removed now.

use capi_core::infra::PoolRollout;

/// One instance of the pool, as the loop sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The instance's provider ID.
    pub provider_id: String,
    /// The instance's name: the order among otherwise equal candidates.
    pub name: String,
    /// Launched from the pool's current model.
    pub up_to_date: bool,
    /// Its `Machine` is ready (the node joined and is ready).
    pub ready: bool,
    /// The cloud reports the instance as failed.
    pub failed: bool,
    /// Its `Machine` carries `cluster.x-k8s.io/delete-machine`: a user or an autoscaler chose it.
    pub marked: bool,
    /// Its `Machine` exists, so that releasing the instance drains its node first. An instance
    /// without one is never released (its `Machine` is on its way).
    pub has_machine: bool,
    /// Already leaving: its `Machine` or its infrastructure machine is being deleted.
    pub releasing: bool,
    /// The cloud is terminating it: it no longer counts towards the scale set's capacity.
    pub terminating: bool,
}

/// What one reconcile does about the pool's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The capacity to ask of the scale set (after this reconcile's removals); `None` when an
    /// autoscaler sets the size.
    pub capacity: Option<u32>,
    /// The instances chosen to leave now, by provider ID: the loop deletes their `Machine`s.
    pub release: Vec<String>,
}

/// The step of a pool of `desired` instances (`None`: an autoscaler sets the size, and the loop
/// neither resizes nor rolls the pool) whose scale set holds `members` at a capacity of
/// `capacity` (instances it may not list yet included), of which `removable` (none of them
/// terminating already) are named for removal in this reconcile.
///
/// Guarantees, for a pool of `desired` = R:
/// - the capacity asked for is never below what the scale set holds or is launching, minus the
///   named removals: the cloud never picks victims of its own;
/// - the scale set is never asked to hold more than R + `max_surge` instances beyond those
///   already leaving and those it already holds;
/// - an instance is released only when its `Machine` exists (its node is drained first), and
///   only while R − `max_unavailable` ready instances remain, unless a user or an autoscaler
///   marked it during a scale-down, or it failed;
/// - an up-to-date instance is released only while more than R up-to-date instances remain
///   (a rollout never removes what it just made), unless it failed or was marked;
/// - failed and outdated instances are replaced, marked ones go first on a scale-down, unready
///   before ready; when the limits leave nothing to do, nothing is released (the next
///   reconcile, once instances are ready, goes on).
pub fn step(
    desired: Option<u32>,
    rollout: PoolRollout,
    members: &[Member],
    capacity: u32,
    removable: usize,
) -> Step {
    let Some(desired) = desired else {
        return Step::default();
    };
    let (max_surge, max_unavailable) = match (rollout.max_surge, rollout.max_unavailable) {
        (0, 0) => (1, 0),
        limits => limits,
    };
    let mut live: Vec<&Member> = members
        .iter()
        .filter(|m| !m.releasing && !m.terminating)
        .collect();
    live.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.name.cmp(&b.name)));

    let min_ready = desired.saturating_sub(max_unavailable);
    let mut tally = Tally {
        count: count_of(&live, |_| true),
        ready: count_of(&live, |m| m.ready),
        up_to_date: count_of(&live, |m| m.up_to_date),
    };
    let mut release: Vec<&Member> = Vec::new();

    // Scale-down: the surplus, best candidates first.
    for member in live.iter().copied().filter(|m| m.has_machine) {
        if tally.count <= desired {
            break;
        }
        let chosen = member.marked || member.failed;
        if member.up_to_date && !chosen && tally.up_to_date <= desired {
            continue;
        }
        if member.ready && !member.marked && tally.ready <= min_ready {
            continue;
        }
        tally.take(member, &mut release);
    }
    // Replacement: failed and outdated instances, as far as readiness allows.
    for member in live.iter().copied().filter(|m| m.has_machine) {
        let replaced = member.failed || !member.up_to_date;
        if !replaced || release.iter().any(|r| r.provider_id == member.provider_id) {
            continue;
        }
        if member.ready && tally.ready <= min_ready {
            continue;
        }
        tally.take(member, &mut release);
    }

    let replacing = live.iter().any(|m| {
        (m.failed || !m.up_to_date) && !release.iter().any(|r| r.provider_id == m.provider_id)
    });
    let target = desired + if replacing { max_surge } else { 0 };
    let listed =
        u32::try_from(members.iter().filter(|m| !m.terminating).count()).unwrap_or(u32::MAX);
    let removable = u32::try_from(removable).unwrap_or(u32::MAX);
    let held = listed.max(capacity).saturating_sub(removable);
    Step {
        capacity: Some(target.max(held)),
        release: release.iter().map(|m| m.provider_id.clone()).collect(),
    }
}

/// The live instances counted as releases are chosen.
struct Tally {
    count: u32,
    ready: u32,
    up_to_date: u32,
}

impl Tally {
    fn take<'m>(&mut self, member: &'m Member, release: &mut Vec<&'m Member>) {
        self.count -= 1;
        self.ready -= u32::from(member.ready);
        self.up_to_date -= u32::from(member.up_to_date);
        release.push(member);
    }
}

/// The order in which instances leave: chosen by a user, failed, then outdated before
/// up-to-date and unready before ready.
fn rank(member: &Member) -> u8 {
    match member {
        Member { marked: true, .. } => 0,
        Member { failed: true, .. } => 1,
        Member {
            ready: false,
            up_to_date: false,
            ..
        } => 2,
        Member {
            ready: true,
            up_to_date: false,
            ..
        } => 3,
        Member {
            ready: false,
            up_to_date: true,
            ..
        } => 4,
        Member {
            ready: true,
            up_to_date: true,
            ..
        } => 5,
    }
}

fn count_of(members: &[&Member], keep: impl Fn(&Member) -> bool) -> u32 {
    u32::try_from(members.iter().filter(|m| keep(m)).count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, up_to_date: bool, ready: bool) -> Member {
        Member {
            provider_id: format!("p:///{name}"),
            name: name.to_string(),
            up_to_date,
            ready,
            failed: false,
            marked: false,
            has_machine: true,
            releasing: false,
            terminating: false,
        }
    }

    const ONE_AT_A_TIME: PoolRollout = PoolRollout {
        max_surge: 1,
        max_unavailable: 0,
    };

    #[test]
    fn a_new_pool_asks_for_its_size() {
        assert_eq!(
            step(Some(3), ONE_AT_A_TIME, &[], 0, 0),
            Step {
                capacity: Some(3),
                release: vec![]
            }
        );
    }

    #[test]
    fn an_autoscaled_pool_is_neither_resized_nor_rolled() {
        let members = [member("a", false, true)];
        assert_eq!(step(None, ONE_AT_A_TIME, &members, 1, 0), Step::default());
    }

    #[test]
    fn scale_down_drains_first_and_keeps_the_capacity_until_removal() {
        let members: Vec<Member> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| member(n, true, true))
            .collect();
        let chosen = step(Some(2), ONE_AT_A_TIME, &members, 5, 0);
        assert_eq!(chosen.release, ["p:///a", "p:///b", "p:///c"]);
        assert_eq!(
            chosen.capacity,
            Some(5),
            "nothing removable yet: the cloud keeps 5"
        );

        let mut leaving = members.clone();
        for m in leaving.iter_mut().take(3) {
            m.releasing = true;
        }
        let removing = step(Some(2), ONE_AT_A_TIME, &leaving, 5, 3);
        assert_eq!(removing.release, Vec::<String>::new());
        assert_eq!(removing.capacity, Some(2));
    }

    #[test]
    fn marked_and_failed_instances_leave_first_on_scale_down() {
        let mut members: Vec<Member> = ["a", "b", "c"]
            .iter()
            .map(|n| member(n, true, true))
            .collect();
        members[2].marked = true;
        members[1].failed = true;
        members[1].ready = false;
        let chosen = step(Some(1), ONE_AT_A_TIME, &members, 3, 0);
        assert_eq!(chosen.release, ["p:///c", "p:///b"]);
    }

    #[test]
    fn a_rollout_surges_then_replaces_outdated_instances_once_the_new_one_is_ready() {
        let old: Vec<Member> = ["a", "b", "c"]
            .iter()
            .map(|n| member(n, false, true))
            .collect();
        let start = step(Some(3), ONE_AT_A_TIME, &old, 3, 0);
        assert_eq!((start.capacity, start.release.len()), (Some(4), 0));

        let mut surged = old.clone();
        surged.push(member("d", true, false));
        let waiting = step(Some(3), ONE_AT_A_TIME, &surged, 4, 0);
        assert_eq!(
            (waiting.capacity, waiting.release.len()),
            (Some(4), 0),
            "the new instance is not released, and no ready one goes before it is ready"
        );

        surged[3].ready = true;
        let replacing = step(Some(3), ONE_AT_A_TIME, &surged, 4, 0);
        assert_eq!(replacing.release, ["p:///a"]);
        assert_eq!(replacing.capacity, Some(4));
    }

    #[test]
    fn the_capacity_never_drops_below_what_the_cloud_is_launching() {
        // Scaled to 5 and back to 3 before the two new instances are listed: asking for 3
        // would let the cloud terminate two instances of its own choosing, undrained.
        let three: Vec<Member> = ["a", "b", "c"]
            .iter()
            .map(|n| member(n, true, true))
            .collect();
        assert_eq!(step(Some(3), ONE_AT_A_TIME, &three, 5, 0).capacity, Some(5));
    }

    #[test]
    fn an_instance_the_cloud_terminates_holds_no_capacity() {
        let mut members: Vec<Member> = ["a", "b", "c"]
            .iter()
            .map(|n| member(n, true, true))
            .collect();
        members[2].terminating = true;
        // The cloud already took c out of its capacity of 2: asking for 3 would launch one more.
        let chosen = step(Some(2), ONE_AT_A_TIME, &members, 2, 0);
        assert_eq!(chosen.capacity, Some(2));
        assert!(chosen.release.is_empty());
    }

    #[test]
    fn an_instance_without_a_machine_is_never_released() {
        let mut members: Vec<Member> = ["a", "b"].iter().map(|n| member(n, true, false)).collect();
        members[0].has_machine = false;
        members[1].has_machine = false;
        let chosen = step(Some(0), ONE_AT_A_TIME, &members, 2, 0);
        assert!(chosen.release.is_empty());
        assert_eq!(chosen.capacity, Some(2));
    }

    #[test]
    fn a_failed_instance_is_replaced_at_full_size() {
        let mut members: Vec<Member> = ["a", "b"].iter().map(|n| member(n, true, true)).collect();
        members[1].failed = true;
        members[1].ready = false;
        let chosen = step(Some(2), ONE_AT_A_TIME, &members, 2, 0);
        assert_eq!(chosen.release, ["p:///b"]);
        assert_eq!(
            chosen.capacity,
            Some(2),
            "the cloud keeps b until it is removed"
        );
    }

    #[test]
    fn max_unavailable_rolls_without_surge() {
        let old: Vec<Member> = ["a", "b", "c"]
            .iter()
            .map(|n| member(n, false, true))
            .collect();
        let limits = PoolRollout {
            max_surge: 0,
            max_unavailable: 1,
        };
        let chosen = step(Some(3), limits, &old, 3, 0);
        assert_eq!(chosen.release, ["p:///a"]);
        assert_eq!(
            chosen.capacity,
            Some(3),
            "the cloud keeps 3 until a is removed"
        );
    }

    #[test]
    fn both_limits_zero_still_progress_one_at_a_time() {
        let old = [member("a", false, true)];
        let limits = PoolRollout {
            max_surge: 0,
            max_unavailable: 0,
        };
        assert_eq!(step(Some(1), limits, &old, 1, 0).capacity, Some(2));
    }
}
