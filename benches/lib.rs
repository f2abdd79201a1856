//! Criterion micro-benchmarks of the capi-rs SDK: `cargo bench -p capi-benches`.
//!
//! - `serialization`: a `Machine` to and from JSON, and CRD generation.
//! - `bootstrap`: the rendering model, cloud-init and Ignition output, the per-cluster PKI.
