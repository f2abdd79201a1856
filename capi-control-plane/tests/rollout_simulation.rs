//! The control plane's decisions, simulated step by step against a model of machines and etcd
//! members: a rolling update of 3 machines from one Kubernetes version to the next, and scaling
//! 1 → 3 → 1. The logs in `tests/golden/` are the readable record of the behaviour — which
//! machine goes when, where new ones go, who leads etcd — and `UPDATE_GOLDEN=1` rewrites them.
//! The invariants are asserted besides: the healthy etcd members never drop below what the
//! strategy promises, the member list always equals the joined machines, and the leader is never
//! the member of a machine being deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write;

use capi_control_plane::quorum::Member;
use capi_control_plane::rollout::{Observed, Step, next_step};
use capi_control_plane::scale::MachineFacts;

/// One simulated control-plane machine.
#[derive(Clone, Debug)]
struct Machine {
    facts: MachineFacts,
    version: &'static str,
    /// Its etcd member has joined.
    member: bool,
}

struct World {
    domains: Vec<String>,
    machines: Vec<Machine>,
    leader: Option<String>,
    clock: i64,
    created: usize,
    log: String,
}

impl World {
    fn new() -> Self {
        Self {
            domains: ["az-1", "az-2", "az-3"].map(String::from).to_vec(),
            machines: Vec::new(),
            leader: None,
            clock: 0,
            created: 0,
            log: String::new(),
        }
    }

    fn members(&self) -> Vec<Member> {
        self.machines
            .iter()
            .filter(|m| m.member)
            .map(|m| Member {
                name: m.facts.name.clone(),
                healthy: m.facts.healthy,
                learner: false,
            })
            .collect()
    }

    fn healthy_members(&self) -> usize {
        self.members().iter().filter(|m| m.healthy).count()
    }

    /// Time passes: machines being deleted are gone, new machines have joined and are healthy.
    fn tick(&mut self) {
        self.clock += 60;
        self.machines.retain(|m| !m.facts.deleting);
        for machine in &mut self.machines {
            machine.facts.healthy = true;
            machine.member = true;
        }
        if self.leader.is_none() {
            self.leader = self.machines.first().map(|m| m.facts.name.clone());
        }
    }

    fn create(&mut self, version: &'static str, failure_domain: Option<String>) -> String {
        let name = format!("cp-{}", self.created);
        self.created += 1;
        self.machines.push(Machine {
            facts: MachineFacts {
                name: name.clone(),
                failure_domain,
                created: self.clock,
                up_to_date: true,
                ..MachineFacts::default()
            },
            version,
            member: false,
        });
        name
    }

    /// Runs the decisions to `replicas` machines of `version` with `max_surge`; returns the fewest
    /// healthy etcd members seen at any point after the start.
    fn converge(&mut self, replicas: usize, max_surge: usize, version: &'static str) -> usize {
        for machine in &mut self.machines {
            machine.facts.up_to_date = machine.version == version;
        }
        let _ = writeln!(
            self.log,
            "# replicas {replicas}, maxSurge {max_surge}, version {version}"
        );
        let mut fewest = usize::MAX;
        for step in 1..=40 {
            let members = self.members();
            let facts: Vec<MachineFacts> = self.machines.iter().map(|m| m.facts.clone()).collect();
            let decided = next_step(&Observed {
                replicas,
                max_surge,
                failure_domains: &self.domains,
                machines: &facts,
                members: &members,
                leader: self.leader.as_deref(),
            });
            let action = match decided {
                Step::Done => {
                    let _ = writeln!(
                        self.log,
                        "done after {} steps: {}",
                        step - 1,
                        self.summary()
                    );
                    return fewest;
                }
                Step::Initialize { failure_domain } | Step::ScaleUp { failure_domain } => {
                    let domain = failure_domain.clone().unwrap_or_default();
                    let name = self.create(version, failure_domain);
                    format!("create {name} ({version}) in {domain}")
                }
                Step::ScaleDown {
                    machine,
                    move_leadership_to,
                } => {
                    let mut action = String::new();
                    if let Some(to) = move_leadership_to {
                        action.push_str(&format!("etcd leader {machine} -> {to}; "));
                        self.leader = Some(to);
                    }
                    assert_ne!(
                        self.leader.as_deref(),
                        Some(machine.as_str()),
                        "a leading member is never removed"
                    );
                    let victim = self
                        .machines
                        .iter_mut()
                        .find(|m| m.facts.name == machine)
                        .unwrap();
                    victim.member = false;
                    victim.facts.deleting = true;
                    action.push_str(&format!("remove member {machine}, delete {machine}"));
                    action
                }
                Step::Wait(why) => {
                    self.tick();
                    format!("wait: {why}")
                }
            };
            fewest = fewest.min(self.healthy_members());
            let _ = writeln!(
                self.log,
                "step {step:>2}: {action:<62} | {}",
                self.summary()
            );
        }
        panic!("did not converge:\n{}", self.log);
    }

    fn summary(&self) -> String {
        let machines: Vec<String> = self
            .machines
            .iter()
            .map(|m| {
                let state = if m.facts.deleting {
                    "deleting"
                } else if !m.facts.healthy {
                    "joining"
                } else {
                    m.version
                };
                format!(
                    "{}@{}:{}",
                    m.facts.name,
                    m.facts.failure_domain.as_deref().unwrap_or("-"),
                    state
                )
            })
            .collect();
        format!(
            "{} | etcd {}/{} healthy, leader {}",
            machines.join(" "),
            self.healthy_members(),
            self.members().len(),
            self.leader.as_deref().unwrap_or("-")
        )
    }
}

fn golden(name: &str, actual: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    capi_testing::golden::check(dir.join(name), actual);
}

/// A 3-replica control plane at v1.33.5, built from nothing.
fn three_at_old_version() -> World {
    let mut world = World::new();
    world.converge(3, 1, "v1.33.5");
    world.log.clear();
    world
}

#[test]
fn a_rolling_update_with_one_surge_never_drops_below_three_healthy_members() {
    let mut world = three_at_old_version();
    let fewest = world.converge(3, 1, "v1.34.1");
    assert!(fewest >= 3, "{}", world.log);
    golden("rollout-3-surge1.log", &world.log);
}

#[test]
fn a_rolling_update_without_surge_never_drops_below_two_healthy_members() {
    let mut world = three_at_old_version();
    let fewest = world.converge(3, 0, "v1.34.1");
    assert!(fewest >= 2, "{}", world.log);
    golden("rollout-3-surge0.log", &world.log);
}

#[test]
fn scaling_one_three_one_keeps_members_equal_to_machines() {
    let mut world = World::new();
    world.converge(1, 1, "v1.34.1");
    world.converge(3, 1, "v1.34.1");
    world.converge(1, 1, "v1.34.1");
    let names: Vec<&str> = world
        .machines
        .iter()
        .map(|m| m.facts.name.as_str())
        .collect();
    let members = world.members();
    let member_names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, member_names, "{}", world.log);
    assert_eq!(names.len(), 1);
    golden("scale-1-3-1.log", &world.log);
}
