//! Criterion micro-benchmarks of the capi-rs SDK: `cargo bench -p capi-benches`.
//!
//! - `serialization`: a `Machine` to and from JSON, and CRD generation.
