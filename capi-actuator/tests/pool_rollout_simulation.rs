//! Golden-file simulations of a pool's scale set under the pool loop's arithmetic
//! (`capi_actuator::pool::rollout::step`): a simulated cloud launches instances up to the
//! capacity it is asked for, from the current model; a new instance is ready two ticks after it
//! is launched; a released instance's `Machine` drains for one tick, then the instance is named
//! for removal. The logs in `tests/golden/` are the readable record; `UPDATE_GOLDEN=1` rewrites
//! them. Every tick checks the limits: never more than `replicas + maxSurge` instances beyond
//! those leaving, and, once the pool reached its size, never fewer than `replicas −
//! maxUnavailable` ready ones, through a rollout too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use capi_actuator::pool::rollout::{Member, step};
use capi_core::infra::PoolRollout;

#[derive(Clone, Debug)]
struct Instance {
    name: String,
    revision: u32,
    age: u32,
    /// Ticks since its `Machine` began deleting.
    leaving: Option<u32>,
}

struct Cloud {
    capacity: u32,
    instances: Vec<Instance>,
    launched: u32,
    revision: u32,
}

impl Cloud {
    /// The cloud's own work in one tick: launch up to the capacity, age everything.
    fn tick(&mut self) {
        while u32::try_from(self.instances.len()).unwrap() < self.capacity {
            self.launched += 1;
            self.instances.push(Instance {
                name: format!("i-{:02}", self.launched),
                revision: self.revision,
                age: 0,
                leaving: None,
            });
        }
        for instance in &mut self.instances {
            instance.age += 1;
            if let Some(ticks) = instance.leaving.as_mut() {
                *ticks += 1;
            }
        }
    }

    fn members(&self) -> Vec<Member> {
        self.instances
            .iter()
            .map(|i| Member {
                provider_id: i.name.clone(),
                name: i.name.clone(),
                up_to_date: i.revision == self.revision,
                ready: i.age >= 2 && i.leaving.is_none(),
                failed: false,
                marked: false,
                has_machine: true,
                releasing: i.leaving.is_some(),
                terminating: false,
            })
            .collect()
    }

    fn show(&self) -> String {
        self.instances
            .iter()
            .map(|i| {
                let state = match (i.leaving, i.age >= 2) {
                    (Some(_), _) => "leaving",
                    (None, true) => "ready",
                    (None, false) => "booting",
                };
                format!("{}:r{}:{state}", i.name, i.revision)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Runs the loop against the cloud until nothing changes for two ticks, with `changes` applied at
/// the given ticks (a new size, a new model).
fn simulate(start: u32, rollout: PoolRollout, changes: &[(u32, Change)]) -> String {
    let mut log = String::new();
    let mut desired = start;
    let mut cloud = Cloud {
        capacity: 0,
        instances: Vec::new(),
        launched: 0,
        revision: 1,
    };
    writeln!(
        log,
        "# replicas {start}, maxSurge {}, maxUnavailable {}",
        rollout.max_surge, rollout.max_unavailable
    )
    .unwrap();
    let mut full = false;
    let mut quiet = 0;
    for tick in 1..=60 {
        for (at, change) in changes {
            if *at == tick {
                match change {
                    Change::Replicas(n) => {
                        desired = *n;
                        full = false;
                    }
                    Change::NewModel => cloud.revision += 1,
                }
                writeln!(log, "tick {tick:2}: {change:?}").unwrap();
                quiet = 0;
            }
        }
        // Instances whose Machine drained for a tick are named for removal.
        let removable: Vec<String> = cloud
            .instances
            .iter()
            .filter(|i| i.leaving.is_some_and(|t| t >= 1))
            .map(|i| i.name.clone())
            .collect();
        let decided = step(
            Some(desired),
            rollout,
            &cloud.members(),
            cloud.capacity,
            removable.len(),
        );
        for name in &decided.release {
            let instance = cloud
                .instances
                .iter_mut()
                .find(|i| &i.name == name)
                .unwrap();
            assert!(instance.leaving.is_none(), "{name} released twice");
            instance.leaving = Some(0);
        }
        // The provider: the named removals (each lowering the capacity), then the capacity.
        cloud.instances.retain(|i| !removable.contains(&i.name));
        cloud.capacity = decided.capacity.unwrap();
        cloud.tick();

        let staying = cloud.instances.iter().filter(|i| i.leaving.is_none());
        let count = u32::try_from(staying.clone().count()).unwrap();
        let ready = u32::try_from(staying.filter(|i| i.age >= 2).count()).unwrap();
        let surge = rollout
            .max_surge
            .max(u32::from(rollout.max_unavailable == 0));
        assert!(
            count <= desired + surge,
            "tick {tick}: {count} instances beyond those leaving, limit {}",
            desired + surge
        );
        if full {
            assert!(
                ready >= desired.saturating_sub(rollout.max_unavailable),
                "tick {tick}: {ready} ready of {desired}"
            );
        }
        let done = ready == desired
            && count == desired
            && cloud
                .instances
                .iter()
                .all(|i| i.revision == cloud.revision && i.leaving.is_none());
        full |= done;
        writeln!(
            log,
            "tick {tick:2}: release {:<12} remove {:<12} capacity {} | {}",
            format!("{:?}", decided.release),
            format!("{removable:?}"),
            cloud.capacity,
            cloud.show()
        )
        .unwrap();
        if done && changes.iter().all(|(at, _)| *at <= tick) {
            quiet += 1;
            if quiet == 2 {
                writeln!(log, "done after {tick} ticks").unwrap();
                return log;
            }
        }
    }
    panic!("no steady state after 60 ticks:\n{log}");
}

#[derive(Debug)]
enum Change {
    Replicas(u32),
    NewModel,
}

fn golden(name: &str, actual: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    capi_testing::golden::check(dir.join(name), actual);
}

const SURGE_1: PoolRollout = PoolRollout {
    max_surge: 1,
    max_unavailable: 0,
};
const UNAVAILABLE_1: PoolRollout = PoolRollout {
    max_surge: 0,
    max_unavailable: 1,
};

#[test]
fn a_new_model_rolls_three_instances_one_surge_at_a_time() {
    golden(
        "pool-rollout-3-surge1-unavailable0.log",
        &simulate(3, SURGE_1, &[(6, Change::NewModel)]),
    );
}

#[test]
fn a_new_model_rolls_three_instances_one_unavailable_at_a_time() {
    golden(
        "pool-rollout-3-surge0-unavailable1.log",
        &simulate(3, UNAVAILABLE_1, &[(6, Change::NewModel)]),
    );
}

#[test]
fn scaling_one_to_five_to_two_drains_before_it_removes() {
    golden(
        "pool-scale-1-5-2.log",
        &simulate(
            1,
            SURGE_1,
            &[(5, Change::Replicas(5)), (12, Change::Replicas(2))],
        ),
    );
}

#[test]
fn a_new_model_during_a_scale_up_ends_with_only_new_instances() {
    golden(
        "pool-scale-up-during-rollout.log",
        &simulate(
            2,
            SURGE_1,
            &[(6, Change::NewModel), (7, Change::Replicas(4))],
        ),
    );
}
