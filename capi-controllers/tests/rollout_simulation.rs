//! Golden-file simulations of rolling updates: each step of the rollout arithmetic, applied to a
//! simulated fleet where new machines become available one tick after they are created. The logs
//! in `tests/golden/` are the readable record of the behaviour; `UPDATE_GOLDEN=1` rewrites them.
//! Every step also checks the invariants: never more than `replicas + maxSurge` machines, never
//! fewer than `replicas − maxUnavailable` available.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use capi_controllers::machine_deployment::rollout::{
    SetState, resolve_fenceposts, rolling_update_step,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A simulated MachineSet: the ages (in ticks) of its machines.
struct Set {
    name: &'static str,
    replicas: i32,
    machines: Vec<u32>,
}

impl Set {
    fn available(&self) -> i32 {
        i32::try_from(self.machines.iter().filter(|age| **age >= 1).count()).unwrap()
    }

    fn state(&self) -> SetState {
        SetState {
            name: self.name.to_string(),
            replicas: self.replicas,
            available: self.available(),
        }
    }

    /// The set's controller: create or delete machines to match `replicas` (unavailable ones go
    /// first).
    fn converge(&mut self) {
        while i32::try_from(self.machines.len()).unwrap() < self.replicas {
            self.machines.push(0);
        }
        self.machines.sort_unstable();
        while i32::try_from(self.machines.len()).unwrap() > self.replicas {
            self.machines.remove(0);
        }
    }
}

fn simulate(desired: i32, surge: IntOrString, unavailable: IntOrString) -> String {
    let (max_surge, max_unavailable) =
        resolve_fenceposts(Some(&surge), Some(&unavailable), desired).unwrap();
    let mut log = String::new();
    let show = |v: &IntOrString| match v {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    writeln!(
        log,
        "# replicas {desired}, maxSurge {} -> {max_surge}, maxUnavailable {} -> {max_unavailable}",
        show(&surge),
        show(&unavailable)
    )
    .unwrap();
    let mut old = Set {
        name: "ms-v1",
        replicas: desired,
        machines: vec![5; usize::try_from(desired).unwrap()],
    };
    let mut new = Set {
        name: "ms-v2",
        replicas: 0,
        machines: Vec::new(),
    };
    for tick in 1..=60 {
        let actions = rolling_update_step(
            desired,
            &new.state(),
            &[old.state()],
            max_surge,
            max_unavailable,
        );
        let mut changes = Vec::new();
        for action in &actions {
            let set = if action.name == new.name {
                &mut new
            } else {
                &mut old
            };
            changes.push(format!(
                "{} {}->{}",
                set.name, set.replicas, action.replicas
            ));
            set.replicas = action.replicas;
        }
        old.converge();
        new.converge();
        let total = i32::try_from(old.machines.len() + new.machines.len()).unwrap();
        let available = old.available() + new.available();
        assert!(
            total <= desired + max_surge,
            "tick {tick}: {total} machines exceed {desired} + {max_surge}"
        );
        assert!(
            available >= desired - max_unavailable,
            "tick {tick}: {available} available, below {desired} - {max_unavailable}"
        );
        let what = if changes.is_empty() {
            "wait".to_string()
        } else {
            changes.join(", ")
        };
        writeln!(
            log,
            "tick {tick:2}: {what:<28} | ms-v1 {}/{} ms-v2 {}/{} | machines {total}, available {available}",
            old.available(),
            old.replicas,
            new.available(),
            new.replicas
        )
        .unwrap();
        if new.available() == desired && old.replicas == 0 && old.machines.is_empty() {
            writeln!(log, "done after {tick} ticks").unwrap();
            return log;
        }
        for age in old.machines.iter_mut().chain(new.machines.iter_mut()) {
            *age += 1;
        }
    }
    panic!("the rollout did not finish:\n{log}");
}

fn golden(name: &str, actual: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    capi_testing::golden::check(dir.join(name), actual);
}

#[test]
fn rolling_update_with_one_surge_keeps_full_capacity() {
    golden(
        "rollout-3-surge1-unavailable0.log",
        &simulate(3, IntOrString::Int(1), IntOrString::Int(0)),
    );
}

#[test]
fn rolling_update_without_surge_dips_by_one() {
    golden(
        "rollout-3-surge0-unavailable1.log",
        &simulate(3, IntOrString::Int(0), IntOrString::Int(1)),
    );
}

#[test]
fn rolling_update_with_percentages_rounds_like_upstream() {
    golden(
        "rollout-10-surge25pct-unavailable25pct.log",
        &simulate(
            10,
            IntOrString::String("25%".into()),
            IntOrString::String("25%".into()),
        ),
    );
}
