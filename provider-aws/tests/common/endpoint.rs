//! Where moto is, and the region the tests work in. Shared with the manager's end-to-end test
//! (`provider-aws/bin/tests`), which includes this file alone.
#![allow(dead_code, unreachable_pub)]

/// The variable naming moto's endpoint (`cargo xtask test` starts moto and sets it).
pub const ENDPOINT_ENV: &str = "CAPI_RS_MOTO_ENDPOINT";

/// The region every test works in (EC2 and ELBv2 state are per region too).
pub const REGION: &str = "us-east-1";

/// moto's endpoint, or a failure saying how to start it.
pub fn endpoint() -> String {
    std::env::var(ENDPOINT_ENV).unwrap_or_else(|_| {
        panic!(
            "{ENDPOINT_ENV} is not set: these tests need moto_server. `cargo xtask test` starts \
             it; alone, run `cargo xtask moto start` and export the variable it prints"
        )
    })
}
