//! What a controller reads without asking the API server: one shared watch per kind, lookups
//! that read through it, objects kept compact, values kept for a while, the resync of converged
//! objects and the filter that decides which changes are worth a reconcile.
//!
//! - [`informer`]: one watch and store per kind shared by every controller of a manager, each
//!   controller with its own stream of the watch's events;
//! - [`lookup`]: read-through lookups of the objects a reconcile reads about (its owner, its
//!   `Cluster`), from a shared store first and the API server only for what it has not seen;
//! - [`packed`]: the compact representation of cached objects — typed kinds ([`Packed`]) and
//!   kinds known only at run time ([`PackedStore`]) — compressed, decoded when read;
//! - [`memo`]: values that hardly ever change, kept by key for a while;
//! - `resync`: the periodic look at converged objects, without a timer per object;
//! - [`predicate`]: which changes of a reconciled object are worth a reconcile;
//! - [`expectations`]: a controller's own creates and deletes its cache has not shown yet, so
//!   that a count read from a cache never repeats a write.
//!
//! Guarantees shared by every cache here: managed fields are dropped; a store is read for
//! decisions only once its first list is in; a (re-)list replaces a store's contents at its end,
//! so no reader sees half a list.

pub mod expectations;
pub mod informer;
pub mod lookup;
pub mod memo;
pub mod packed;
pub mod predicate;
pub(crate) mod resync;

pub use expectations::Expectations;
pub use informer::{Informer, Informers};
pub use lookup::Cached;
pub use packed::{Packed, PackedStore};
