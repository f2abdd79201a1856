//! The Azure infrastructure provider: virtual machines, virtual networks and load balancers over
//! ARM REST, with long-running operations and `Retry-After` handling.
//!
//! **Not implemented yet.** This crate reserves its place in the workspace; it exports nothing, so
//! nothing can be mistaken for a working provider (DESIGN.md §9).
