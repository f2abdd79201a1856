//! What the Azure provider's integration tests share.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod arm_server;
pub mod model_checker;
