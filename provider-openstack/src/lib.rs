//! The OpenStack infrastructure provider: `OpenStackCluster`, `OpenStackMachine` and
//! `OpenStackMachineTemplate` reconciled through Keystone, Nova, Neutron and Octavia.
//!
//! **Not implemented yet.** This crate reserves its place in the workspace; it exports nothing, so
//! nothing can be mistaken for a working provider. Its implementation is tracked as its own issue
//! (DESIGN.md §9): CRDs in their own API group, a `clouds.yaml` credentials Secret, cluster
//! infrastructure in CAPO's order, idempotent server creation keyed by the machine's UID.
