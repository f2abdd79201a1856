//! The AWS infrastructure provider: EC2 instances, VPC networking and an ELBv2 API-server load
//! balancer, tested against `moto_server` on loopback.
//!
//! **Not implemented yet.** This crate reserves its place in the workspace; it exports nothing, so
//! nothing can be mistaken for a working provider. The heavy AWS SDK crates will stay inside this
//! crate so that the rest of the workspace builds without them (DESIGN.md §9).
