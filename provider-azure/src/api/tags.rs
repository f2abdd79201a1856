//! `additionalTags`: the user's own tags, within Azure's rules for tag names and values, and kept
//! clear of the tags the provider finds its resources by.

use std::collections::BTreeMap;

use capi_core::api::validation;
use schemars::{Schema, SchemaGenerator, json_schema};

/// At most this many user tags: Azure takes 50 per resource and the provider puts up to ten of
/// its own (ownership, role, `Name`, the cluster, the idempotency key, ...).
pub const MAX_USER_TAGS: u32 = 40;

/// Tag name prefixes a user tag may not use (compared without case): those Azure reserves
/// (`microsoft`, `azure`, `windows`), and those of the tags the provider finds and deletes its
/// resources by — a user tag there could make the provider adopt, or delete, what is not its
/// cluster's.
pub const RESERVED_TAG_PREFIXES: [&str; 6] = [
    "microsoft",
    "azure",
    "windows",
    "sigs.k8s.io_cluster-api-provider-azure_",
    "capi-rs.dev_",
    "kubernetes.io_cluster_",
];

/// The characters Azure refuses in tag names.
const FORBIDDEN_NAME_CHARACTERS: &str = r#"<>%&\?/"#;

/// The schema of a tag map: string values of at most 256 characters, at most
/// [`MAX_USER_TAGS`] entries, names of 1–512 characters without `<>%&\?/`, outside
/// [`RESERVED_TAG_PREFIXES`].
pub(crate) fn user_tags(_: &mut SchemaGenerator) -> Schema {
    let mut schema = json_schema!({
        "type": "object",
        "maxProperties": MAX_USER_TAGS,
        "additionalProperties": {"type": "string", "maxLength": 256},
    });
    validation::add_rule(
        &mut schema,
        "self.all(k, size(k) >= 1 && size(k) <= 512)",
        "tag names are 1 to 512 characters long",
    );
    validation::add_rule(
        &mut schema,
        r"self.all(k, !k.matches('[<>%&\\\\?/]'))",
        &format!("tag names may not contain any of {FORBIDDEN_NAME_CHARACTERS}"),
    );
    let reserved: Vec<String> = RESERVED_TAG_PREFIXES
        .iter()
        .map(|p| format!("k.lowerAscii().startsWith('{p}')"))
        .collect();
    validation::add_rule(
        &mut schema,
        &format!("self.all(k, !({}))", reserved.join(" || ")),
        &format!(
            "tag names may not start with {} (Azure's own, and the provider's)",
            RESERVED_TAG_PREFIXES.join(", ")
        ),
    );
    schema
}

/// Tags by name.
pub type Tags = BTreeMap<String, String>;
