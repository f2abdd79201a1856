//! The generic reconcile loop of Cluster API infrastructure providers.
//!
//! This crate drives any [`capi_core::Actuator`]. Today it holds the loop's central decision,
//! [`machine::ensure_instance`]: find the instance by durable identity, then update it, or create
//! it. The kube-runtime controllers around it (owner lookup, pause, finalizers, status writes,
//! backoff) and the `Manager` are tracked as their own issue (DESIGN.md §5) and are not here yet.

pub mod machine;
