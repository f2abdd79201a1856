//! Whether a CRD of this workspace is wire-compatible with upstream's CRD of the same kind: both
//! OpenAPI v3 schemas (of one served version) flattened into field paths, and each path's facts —
//! type, format, enum, required-ness, nullable, default, bounds, pattern, list and map markers,
//! int-or-string, preserved unknown fields, embedded resources and CEL rules — compared one by
//! one. Descriptions and CEL messages are not compared.
//!
//! A path reads like `.spec.clusterNetwork.pods.cidrBlocks[]`: `.name` for a property, `[]` for
//! the elements of a list, `{}` for the values of a map (`additionalProperties`).
//!
//! Differences a reviewer accepted are listed, each with a reason, in an [`AllowList`] (YAML); the
//! check fails on every other difference, and on every allow-list entry that no longer matches
//! anything, so that the list only ever shrinks.
//!
//! ```
//! use capi_testing::schema_compat::{Aspect, compare};
//! use serde_json::json;
//!
//! let upstream = json!({"type": "object", "properties": {"spec": {"type": "object",
//!     "required": ["clusterName"],
//!     "properties": {"clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
//!                    "paused": {"type": "boolean"}}}}});
//! let ours = json!({"type": "object", "properties": {"spec": {"type": "object",
//!     "required": ["clusterName"],
//!     "properties": {"clusterName": {"type": "string", "minLength": 1}}}}});
//! let comparison = compare("Cluster", &upstream, &ours);
//! assert_eq!(comparison.upstream_paths, 4);
//! assert_eq!(comparison.modelled_paths, 3);
//! let found: Vec<(String, Aspect)> =
//!     comparison.differences.iter().map(|d| (d.path.clone(), d.aspect)).collect();
//! assert_eq!(found, vec![
//!     (".spec.clusterName".to_string(), Aspect::Bounds),
//!     (".spec.paused".to_string(), Aspect::Missing),
//! ]);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};

/// What differs at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Aspect {
    /// Upstream has the path; ours does not (the API server would prune it).
    Missing,
    /// Ours has a path upstream does not.
    Extra,
    /// `type`.
    Type,
    /// `format`.
    Format,
    /// `enum`.
    Enum,
    /// Whether the field is in its parent's `required`.
    Required,
    /// `nullable`.
    Nullable,
    /// `default`.
    Default,
    /// `minimum`, `maximum` (and their exclusive forms), `minLength`, `maxLength`, `minItems`,
    /// `maxItems`, `minProperties`, `maxProperties`.
    Bounds,
    /// `pattern`.
    Pattern,
    /// `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`.
    ListType,
    /// `x-kubernetes-map-type`.
    MapType,
    /// `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`,
    /// `x-kubernetes-embedded-resource`.
    Markers,
    /// The CEL rules of `x-kubernetes-validations` (messages aside).
    Validations,
}

impl Aspect {
    /// Every aspect, in the order of the table's columns.
    pub const ALL: [Aspect; 14] = [
        Aspect::Missing,
        Aspect::Extra,
        Aspect::Type,
        Aspect::Format,
        Aspect::Enum,
        Aspect::Required,
        Aspect::Nullable,
        Aspect::Default,
        Aspect::Bounds,
        Aspect::Pattern,
        Aspect::ListType,
        Aspect::MapType,
        Aspect::Markers,
        Aspect::Validations,
    ];

    /// Its name, as in the allow-list.
    pub fn name(self) -> &'static str {
        match self {
            Aspect::Missing => "missing",
            Aspect::Extra => "extra",
            Aspect::Type => "type",
            Aspect::Format => "format",
            Aspect::Enum => "enum",
            Aspect::Required => "required",
            Aspect::Nullable => "nullable",
            Aspect::Default => "default",
            Aspect::Bounds => "bounds",
            Aspect::Pattern => "pattern",
            Aspect::ListType => "listType",
            Aspect::MapType => "mapType",
            Aspect::Markers => "markers",
            Aspect::Validations => "validations",
        }
    }

    /// The schema keywords this aspect compares.
    fn keywords(self) -> &'static [&'static str] {
        match self {
            Aspect::Missing | Aspect::Extra | Aspect::Required => &[],
            Aspect::Type => &["type"],
            Aspect::Format => &["format"],
            Aspect::Enum => &["enum"],
            Aspect::Nullable => &["nullable"],
            Aspect::Default => &["default"],
            Aspect::Bounds => &[
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "exclusiveMaximum",
                "minLength",
                "maxLength",
                "minItems",
                "maxItems",
                "minProperties",
                "maxProperties",
            ],
            Aspect::Pattern => &["pattern"],
            Aspect::ListType => &["x-kubernetes-list-type", "x-kubernetes-list-map-keys"],
            Aspect::MapType => &["x-kubernetes-map-type"],
            Aspect::Markers => &[
                "x-kubernetes-int-or-string",
                "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-embedded-resource",
            ],
            Aspect::Validations => &["x-kubernetes-validations"],
        }
    }
}

impl fmt::Display for Aspect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The facts of one field path.
#[derive(Clone, Debug, Default, PartialEq)]
struct Facts {
    /// The compared keywords and their values (enum sorted, CEL rules without messages).
    keywords: BTreeMap<&'static str, Value>,
    /// In its parent's `required`.
    required: bool,
}

/// One difference between upstream and ours.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The kind.
    pub kind: String,
    /// The field path.
    pub path: String,
    /// What differs.
    pub aspect: Aspect,
    /// Upstream's value (`null` when absent).
    pub upstream: Value,
    /// Ours (`null` when absent).
    pub ours: Value,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.kind, self.path, self.aspect)?;
        if !matches!(self.aspect, Aspect::Missing | Aspect::Extra) {
            write!(f, ": upstream {} / ours {}", self.upstream, self.ours)?;
        }
        Ok(())
    }
}

/// The comparison of one kind.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// The kind.
    pub kind: String,
    /// How many field paths upstream's schema has.
    pub upstream_paths: usize,
    /// How many of them ours has too.
    pub modelled_paths: usize,
    /// Every difference, by path, then aspect.
    pub differences: Vec<Difference>,
}

/// Compares upstream's schema of `kind` with ours (both `openAPIV3Schema` values).
pub fn compare(kind: &str, upstream: &Value, ours: &Value) -> Comparison {
    let upstream = flatten(upstream);
    let ours = flatten(ours);
    let mut differences = Vec::new();
    let mut push = |path: &str, aspect: Aspect, upstream: Value, ours: Value| {
        differences.push(Difference {
            kind: kind.to_string(),
            path: path.to_string(),
            aspect,
            upstream,
            ours,
        });
    };
    let paths: BTreeSet<&String> = upstream.keys().chain(ours.keys()).collect();
    for path in paths {
        match (upstream.get(path), ours.get(path)) {
            (Some(_), None) => push(path, Aspect::Missing, Value::Null, Value::Null),
            (None, Some(_)) => push(path, Aspect::Extra, Value::Null, Value::Null),
            (Some(theirs), Some(mine)) => {
                if theirs.required != mine.required {
                    push(
                        path,
                        Aspect::Required,
                        Value::Bool(theirs.required),
                        Value::Bool(mine.required),
                    );
                }
                for aspect in Aspect::ALL {
                    let keywords = aspect.keywords();
                    if keywords.is_empty() {
                        continue;
                    }
                    let pick = |facts: &Facts| {
                        let picked: Map<String, Value> = keywords
                            .iter()
                            .filter_map(|k| Some((k.to_string(), facts.keywords.get(k)?.clone())))
                            .collect();
                        picked
                    };
                    let (theirs, mine) = (pick(theirs), pick(mine));
                    if theirs != mine {
                        let single = |m: Map<String, Value>| {
                            if keywords.len() == 1 {
                                m.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null)
                            } else {
                                Value::Object(m)
                            }
                        };
                        push(path, aspect, single(theirs), single(mine));
                    }
                }
            }
            (None, None) => {}
        }
    }
    let modelled_paths = upstream.keys().filter(|p| ours.contains_key(*p)).count();
    Comparison {
        kind: kind.to_string(),
        upstream_paths: upstream.len(),
        modelled_paths,
        differences,
    }
}

/// Every field path of `schema` with its facts; the root is `""`.
fn flatten(schema: &Value) -> BTreeMap<String, Facts> {
    let mut out = BTreeMap::new();
    walk(schema, String::new(), false, &mut out);
    out
}

fn walk(schema: &Value, path: String, required: bool, out: &mut BTreeMap<String, Facts>) {
    let mut facts = Facts {
        required,
        ..Facts::default()
    };
    for aspect in Aspect::ALL {
        for keyword in aspect.keywords() {
            let Some(value) = schema.get(*keyword) else {
                continue;
            };
            let value = normalise(keyword, value);
            if !value.is_null() {
                facts.keywords.insert(keyword, value);
            }
        }
    }
    let required_fields: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.insert(path.clone(), facts);
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            walk(
                property,
                format!("{path}.{name}"),
                required_fields.contains(name.as_str()),
                out,
            );
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, format!("{path}[]"), false, out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(values, format!("{path}{{}}"), false, out);
    }
}

/// A keyword's value in a form that compares by meaning: enums as sorted sets, CEL rules as a
/// sorted set of their rule text (and field path / reason, which change what a client sees),
/// numbers as floats; `null` where the keyword says nothing the API server would act on — a
/// `minLength`, `minItems` or `minProperties` of 0, `x-kubernetes-list-type: atomic` (what the
/// API server assumes for a list without a list type), `false` markers.
fn normalise(keyword: &str, value: &Value) -> Value {
    match (keyword, value) {
        ("minLength" | "minItems" | "minProperties", Value::Number(n))
            if n.as_f64() == Some(0.0) =>
        {
            Value::Null
        }
        ("x-kubernetes-list-type", Value::String(t)) if t == "atomic" => Value::Null,
        ("enum", Value::Array(values)) => {
            let mut values = values.clone();
            values.sort_by_key(|v| v.to_string());
            values.dedup();
            Value::Array(values)
        }
        ("x-kubernetes-validations", Value::Array(rules)) => {
            let mut rules: Vec<Value> = rules
                .iter()
                .map(|r| {
                    let mut kept = Map::new();
                    for key in ["rule", "fieldPath", "reason", "optionalOldSelf"] {
                        if let Some(v) = r.get(key) {
                            kept.insert(key.into(), v.clone());
                        }
                    }
                    Value::Object(kept)
                })
                .collect();
            rules.sort_by_key(|v| v.to_string());
            Value::Array(rules)
        }
        ("x-kubernetes-list-map-keys", Value::Array(keys)) => {
            let mut keys = keys.clone();
            keys.sort_by_key(|v| v.to_string());
            Value::Array(keys)
        }
        (_, Value::Number(n)) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| value.clone(), Value::Number),
        // `false` markers say nothing more than absent ones.
        (
            "x-kubernetes-int-or-string"
            | "x-kubernetes-preserve-unknown-fields"
            | "x-kubernetes-embedded-resource"
            | "nullable",
            Value::Bool(false),
        ) => Value::Null,
        _ => value.clone(),
    }
}

/// One accepted difference.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowed {
    /// The kind; `*` matches any run of characters (`KubeadmControlPlane*`, `*`).
    pub kind: String,
    /// The field path, or several; `*` matches any run of characters (`*.rollout.after`).
    #[serde(deserialize_with = "one_or_many")]
    pub path: Vec<String>,
    /// What may differ there: one aspect or a list of them.
    #[serde(deserialize_with = "one_or_many")]
    pub aspect: Vec<Aspect>,
    /// Why this difference is accepted.
    pub reason: String,
}

fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        One(T),
        Many(Vec<T>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

impl Allowed {
    fn matches(&self, difference: &Difference) -> bool {
        glob(&self.kind, &difference.kind)
            && self.aspect.contains(&difference.aspect)
            && self.path.iter().any(|p| glob(p, &difference.path))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The reviewed list of accepted differences.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    /// The entries, in file order.
    pub entries: Vec<Allowed>,
}

/// Why an allow-list cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the allow-list is not a YAML list of {{kind, path, aspect, reason}}: {0}")]
pub struct AllowListError(String);

impl AllowList {
    /// Reads the YAML list of [`Allowed`] entries; every entry needs a non-empty reason.
    pub fn parse(yaml: &str) -> Result<Self, AllowListError> {
        let entries: Vec<Allowed> = if yaml.trim().is_empty() {
            Vec::new()
        } else {
            serde_saphyr::from_str(yaml).map_err(|e| AllowListError(e.to_string()))?
        };
        if let Some(bare) = entries.iter().find(|e| e.reason.trim().is_empty()) {
            return Err(AllowListError(format!(
                "{} {:?} {:?} has no reason",
                bare.kind, bare.path, bare.aspect
            )));
        }
        Ok(Self { entries })
    }

    /// The differences of `comparisons` no entry accepts, and the entries that accept none.
    pub fn judge<'a>(
        &'a self,
        comparisons: &'a [Comparison],
    ) -> (Vec<&'a Difference>, Vec<&'a Allowed>) {
        let differences: Vec<&Difference> =
            comparisons.iter().flat_map(|c| &c.differences).collect();
        let refused = differences
            .iter()
            .copied()
            .filter(|d| !self.entries.iter().any(|e| e.matches(d)))
            .collect();
        let unused = self
            .entries
            .iter()
            .filter(|e| !differences.iter().any(|d| e.matches(d)))
            .collect();
        (refused, unused)
    }
}

/// A table of `comparisons`: per kind, upstream's paths, how many ours models (and the share),
/// and how many differences of each aspect.
pub fn table(comparisons: &[Comparison]) -> String {
    let mut header = vec![
        "kind".to_string(),
        "upstream".to_string(),
        "modelled".to_string(),
        "%".to_string(),
    ];
    header.extend(Aspect::ALL.iter().map(|a| a.name().to_string()));
    let mut rows = vec![header];
    for c in comparisons {
        let share = if c.upstream_paths == 0 {
            100.0
        } else {
            100.0 * c.modelled_paths as f64 / c.upstream_paths as f64
        };
        let mut row = vec![
            c.kind.clone(),
            c.upstream_paths.to_string(),
            c.modelled_paths.to_string(),
            format!("{share:.1}"),
        ];
        row.extend(Aspect::ALL.iter().map(|a| {
            c.differences
                .iter()
                .filter(|d| d.aspect == *a)
                .count()
                .to_string()
        }));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, width))| {
                    if i == 0 {
                        format!("{cell:<width$}")
                    } else {
                        format!("{cell:>width$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `openAPIV3Schema` of `version` in a CRD given as JSON (ours serialised, or upstream's YAML
/// read into a value).
pub fn schema_of<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.get("spec")?
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .get("schema")?
        .get("openAPIV3Schema")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_aspect_is_seen_and_equal_schemas_have_no_difference() {
        let upstream = json!({"type": "object", "properties": {
            "a": {"type": "string", "format": "date-time"},
            "b": {"type": "string", "enum": ["X", "Y"]},
            "c": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}}}},
            "d": {"type": "object", "x-kubernetes-validations": [{"rule": "self.x > 0", "message": "m"}],
                  "additionalProperties": {"type": "string"}},
            "e": {"x-kubernetes-int-or-string": true},
        }});
        assert!(compare("K", &upstream, &upstream).differences.is_empty());

        let ours = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "enum": ["Y", "X"]},
            "c": {"type": "array", "x-kubernetes-list-type": "atomic",
                  "items": {"type": "object",
                            "properties": {"name": {"type": "string"}}}},
            "d": {"type": "object", "x-kubernetes-validations": [{"rule": "self.x > 0", "message": "other"}]},
            "e": {"type": "string"},
            "f": {"type": "string"},
        }});
        let found: Vec<String> = compare("K", &upstream, &ours)
            .differences
            .iter()
            .map(|d| format!("{} {}", d.path, d.aspect))
            .collect();
        assert_eq!(
            found,
            [
                ".a format",
                ".c listType",
                ".c[].name required",
                ".d{} missing",
                ".e type",
                ".e markers",
                ".f extra",
            ]
        );
    }

    #[test]
    fn the_allow_list_accepts_by_path_or_prefix_and_reports_unused_entries() {
        let upstream = json!({"properties": {"a": {"type": "string"}, "b": {"properties": {"c": {}, "d": {}}}}});
        let ours = json!({"properties": {}});
        let comparisons = [compare("K", &upstream, &ours)];
        let list = AllowList::parse(
            "- {kind: K, path: .a, aspect: missing, reason: not served}\n\
             - {kind: '*', path: .b*, aspect: [missing, type], reason: later}\n\
             - {kind: K, path: .z, aspect: type, reason: stale}\n",
        )
        .unwrap();
        let (refused, unused) = list.judge(&comparisons);
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!(unused.len(), 1);
        assert_eq!(unused[0].path, [".z"]);
        assert!(AllowList::parse("- {kind: K, path: .a, aspect: missing, reason: ''}").is_err());
        assert!(glob("*.rollout.after", ".spec.template.spec.rollout.after"));
        assert!(glob(
            "*.max*",
            ".spec.rollout.strategy.rollingUpdate.maxSurge"
        ));
        assert!(!glob("*.max*", ".spec.replicas"));
        assert!(glob("KubeadmControlPlane*", "KubeadmControlPlaneTemplate"));
        assert!(!glob(".spec", ".spec.x"));
        let printed = table(&comparisons);
        let row = printed.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[..5], ["K", "5", "1", "20.0", "4"], "{printed}");
    }
}
