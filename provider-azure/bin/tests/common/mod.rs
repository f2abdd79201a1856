//! What the Azure manager's tests share: the ARM test server and Azure's model checker of the
//! provider's own tests, the VMs of that server as a fake hypervisor's servers, and the manager
//! running against them.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../tests/common/model_checker.rs"]
pub mod model_checker;

#[path = "../../../tests/common/arm_server.rs"]
pub mod arm_server;

pub mod azure_servers;
pub mod manager;
pub mod pools;
