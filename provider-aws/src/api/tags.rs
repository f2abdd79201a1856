//! `additionalTags`: the user's own tags, checked as CAPA's webhook checks them, and kept clear of
//! the tags the provider finds its resources by.

use std::collections::BTreeMap;

use capi_core::api::validation;
use schemars::{Schema, SchemaGenerator, json_schema};

/// At most this many user tags: AWS takes 50 per resource and the provider puts up to ten of its
/// own (ownership, role, `Name`, the idempotency key, ...).
pub const MAX_USER_TAGS: u32 = 40;

/// Key prefixes a user tag may not use: AWS's own (`aws:`), and those of the tags the provider
/// finds and deletes its resources by — a user tag there could make the provider adopt, or
/// delete, what is not its cluster's (CAPA #4629 leaked instances that way).
pub const RESERVED_TAG_PREFIXES: [&str; 4] = [
    "aws:",
    "sigs.k8s.io/cluster-api-provider-aws/",
    "capi-rs.dev/",
    "kubernetes.io/cluster/",
];

/// The characters AWS takes in tag keys and values (as CAPA's webhook checks them).
const TAG_CHARACTERS: &str = r"^[a-zA-Z0-9\s_.:=+\-@/]*$";

/// The schema of a tag map: string values of at most 256 characters, at most
/// [`MAX_USER_TAGS`] entries, keys of 1–128 allowed characters outside
/// [`RESERVED_TAG_PREFIXES`].
pub(crate) fn user_tags(_: &mut SchemaGenerator) -> Schema {
    let mut schema = json_schema!({
        "type": "object",
        "maxProperties": MAX_USER_TAGS,
        "additionalProperties": {
            "type": "string",
            "maxLength": 256,
            "pattern": TAG_CHARACTERS,
        },
    });
    validation::add_rule(
        &mut schema,
        "self.all(k, size(k) >= 1 && size(k) <= 128)",
        "tag keys are 1 to 128 characters long",
    );
    validation::add_rule(
        &mut schema,
        &format!(
            "self.all(k, k.matches('{}'))",
            TAG_CHARACTERS.replace('\\', "\\\\")
        ),
        "tag keys take letters, digits, spaces and _ . : / = + - @ only",
    );
    let reserved: Vec<String> = RESERVED_TAG_PREFIXES
        .iter()
        .map(|p| format!("k.startsWith('{p}')"))
        .collect();
    validation::add_rule(
        &mut schema,
        &format!("self.all(k, !({}))", reserved.join(" || ")),
        &format!(
            "tag keys may not start with {} (AWS's own, and the provider's)",
            RESERVED_TAG_PREFIXES.join(", ")
        ),
    );
    schema
}

/// Tags by key.
pub type Tags = BTreeMap<String, String>;
