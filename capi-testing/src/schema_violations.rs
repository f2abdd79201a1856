//! What a CRD's schema must refuse: every constraint of its OpenAPI v3 schema turned into a field
//! path and a [`mod@proptest`] strategy of edits that break it, so that a test can send each edit to
//! the API server and check that it is rejected — with that field path in the answer — before any
//! controller sees it.
//!
//! The constraints covered: `type`, `enum`, `minimum`/`maximum` (and their exclusive forms),
//! `minLength`/`maxLength`, `pattern`, `minItems`, `maxItems` (when the base object has an element
//! to repeat), `required`, and the CEL rule "exactly one of two fields"
//! (`x-kubernetes-validations` `has(self.a) != has(self.b)`, broken by setting neither); other CEL
//! rules are not generated. `maxProperties` and that CEL rule are also respected rather than
//! broken: an edit that adds a field to an object that allows no more, or whose sibling excludes
//! it, first drops the sibling ([`Constraint::make_room`]), so "exactly one of `id` or `filter`"
//! objects get both branches checked from one base object. The walk
//! covers `spec` (and any other top-level field except `apiVersion`, `kind`, `metadata` and
//! `status`, which the status subresource ignores on create); it descends into objects and into
//! the first element of arrays; it skips maps (`additionalProperties`), `x-kubernetes-int-or-string`
//! fields (either type is allowed), `x-kubernetes-preserve-unknown-fields` subtrees and
//! `anyOf`/`oneOf`/`allOf`.
//!
//! ```
//! use capi_testing::schema_violations::{constraints, Edit, Rule};
//! use proptest::strategy::{Strategy, ValueTree};
//! use serde_json::json;
//!
//! let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
//!     "required": ["clusterName"],
//!     "properties": {"clusterName": {"type": "string", "minLength": 1},
//!                    "replicas": {"type": "integer", "minimum": 0}}}}});
//! let found = constraints(&schema);
//! let names: Vec<String> = found.iter().map(|c| c.to_string()).collect();
//! assert!(names.contains(&"spec.clusterName: required".to_string()));
//!
//! let minimum = found.iter().find(|c| matches!(c.rule, Rule::Minimum { .. })).unwrap();
//! assert_eq!(minimum.field_path(), "spec.replicas");
//! let base = json!({"spec": {"clusterName": "a"}});
//! let mut runner = proptest::test_runner::TestRunner::default();
//! let edit = minimum.violations(&base).unwrap().new_tree(&mut runner).unwrap().current();
//! let mut object = base.clone();
//! edit.apply(&mut object, &minimum.path);
//! assert!(object["spec"]["replicas"].as_i64().unwrap() < 0);
//! ```

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value, json};

/// One step into a JSON document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// A field of an object.
    Field(String),
    /// An element of an array.
    Index(usize),
}

/// What the schema demands of a field.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// The JSON type (`string`, `integer`, `number`, `boolean`, `object`, `array`).
    Type(String),
    /// One of these values.
    Enum(Vec<Value>),
    /// At least (or, if exclusive, more than) this number.
    Minimum {
        /// The bound.
        bound: f64,
        /// Whether the bound itself is refused.
        exclusive: bool,
        /// Whether the field is an integer.
        integer: bool,
    },
    /// At most (or, if exclusive, less than) this number.
    Maximum {
        /// The bound.
        bound: f64,
        /// Whether the bound itself is refused.
        exclusive: bool,
        /// Whether the field is an integer.
        integer: bool,
    },
    /// At least this many characters.
    MinLength(u64),
    /// At most this many characters.
    MaxLength(u64),
    /// Matches this regular expression.
    Pattern(String),
    /// At least this many elements.
    MinItems(u64),
    /// At most this many elements.
    MaxItems(u64),
    /// The field must be present (the path names the field itself).
    Required,
    /// Exactly one of two optional fields of this object is set: a CEL rule
    /// (`x-kubernetes-validations`) of the form `has(self.a) != has(self.b)`, as
    /// `capi_core::api::validation::exactly_one_of` writes it.
    ExactlyOneOf(String, String),
}

/// How a test breaks a constraint in an object.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// Put this value at the path (creating the objects and arrays on the way).
    Set(Value),
    /// Remove the field at the path (creating its parent if needed).
    Remove,
    /// Repeat the array's first element until it has this many.
    Repeat(usize),
}

/// A constrained field of a schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    /// Where the field is, from the object's root.
    pub path: Vec<Segment>,
    /// What the schema demands there.
    pub rule: Rule,
    /// Objects on the way that allow at most so many properties (`maxProperties`), as (number
    /// of path segments leading to the object, the limit); see [`Constraint::make_room`].
    pub max_properties: Vec<(usize, usize)>,
    /// Objects on the way whose fields exclude each other ([`Rule::ExactlyOneOf`]), as (number of
    /// path segments leading to the object, the fields); see [`Constraint::make_room`].
    pub exclusive: Vec<(usize, Vec<String>)>,
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match &self.rule {
            Rule::Type(t) => format!("type {t}"),
            Rule::Enum(values) => format!("enum {}", Value::Array(values.clone())),
            Rule::Minimum { bound, .. } => format!("minimum {bound}"),
            Rule::Maximum { bound, .. } => format!("maximum {bound}"),
            Rule::MinLength(n) => format!("minLength {n}"),
            Rule::MaxLength(n) => format!("maxLength {n}"),
            Rule::Pattern(p) => format!("pattern {p}"),
            Rule::MinItems(n) => format!("minItems {n}"),
            Rule::MaxItems(n) => format!("maxItems {n}"),
            Rule::Required => "required".to_string(),
            Rule::ExactlyOneOf(first, second) => format!("exactly one of {first}, {second}"),
        };
        write!(f, "{}: {rule}", field_path(&self.path))
    }
}

impl Constraint {
    /// The path as the API server writes it in errors: `spec.template.spec.version`,
    /// `spec.failureDomains[0].name` (see [`field_path`]).
    pub fn field_path(&self) -> String {
        field_path(&self.path)
    }

    /// Removes, from each object on the way that allows at most `maxProperties` properties and
    /// lacks the field this path goes through, as many other fields as adding it needs, and the
    /// fields that exclude the one this path goes through — so that an edit of `id` in a
    /// `{filter}` that takes exactly one of `id` or `filter` breaks only this constraint, not the
    /// object's property count or exclusivity too.
    pub fn make_room(&self, object: &mut Value) {
        for (depth, fields) in &self.exclusive {
            let Some(Segment::Field(name)) = self.path.get(*depth) else {
                continue;
            };
            if !fields.contains(name) {
                continue;
            }
            if let Some(Value::Object(map)) = lookup_mut(object, &self.path[..*depth]) {
                map.retain(|key, _| key == name || !fields.contains(key));
            }
        }
        for &(depth, limit) in &self.max_properties {
            let Some(Segment::Field(name)) = self.path.get(depth) else {
                continue;
            };
            let Some(Value::Object(map)) = lookup_mut(object, &self.path[..depth]) else {
                continue;
            };
            if map.contains_key(name) {
                continue;
            }
            while map.len() >= limit.max(1) {
                let Some(other) = map.keys().next().cloned() else {
                    break;
                };
                map.remove(&other);
            }
        }
    }

    /// Edits of an object that break this constraint, or `None` when this module cannot produce
    /// one (a pattern the `regex-lite` engine does not understand, `maxItems` without an element
    /// in `base` to repeat).
    pub fn violations(&self, base: &Value) -> Option<BoxedStrategy<Edit>> {
        let set = |s: BoxedStrategy<Value>| Some(s.prop_map(Edit::Set).boxed());
        match &self.rule {
            Rule::Type(t) => set(wrong_type(t)),
            Rule::Enum(allowed) => {
                let allowed = allowed.clone();
                set("[A-Za-z0-9]{0,12}"
                    .prop_map(Value::String)
                    .prop_filter("a value outside the enum", move |v| !allowed.contains(v))
                    .boxed())
            }
            Rule::Minimum {
                bound,
                exclusive,
                integer,
            } => {
                let bound = *bound;
                let exclusive = *exclusive;
                if *integer {
                    let top = bound.ceil() as i64 - i64::from(!exclusive);
                    set((top.saturating_sub(1_000_000)..=top)
                        .prop_map(|n| json!(n))
                        .boxed())
                } else {
                    set((1e-3f64..1e6).prop_map(move |d| json!(bound - d)).boxed())
                }
            }
            Rule::Maximum {
                bound,
                exclusive,
                integer,
            } => {
                let bound = *bound;
                let exclusive = *exclusive;
                if *integer {
                    let bottom = bound.floor() as i64 + i64::from(!exclusive);
                    set((bottom..=bottom.saturating_add(1_000_000))
                        .prop_map(|n| json!(n))
                        .boxed())
                } else {
                    set((1e-3f64..1e6).prop_map(move |d| json!(bound + d)).boxed())
                }
            }
            Rule::MinLength(n) if *n > 0 => {
                let n = *n as usize;
                set(
                    proptest::collection::vec(proptest::char::range('a', 'z'), 0..n)
                        .prop_map(|chars| Value::String(chars.into_iter().collect()))
                        .boxed(),
                )
            }
            Rule::MinLength(_) => None,
            Rule::MaxLength(n) => {
                let n = *n as usize;
                set(
                    proptest::collection::vec(proptest::char::range('a', 'z'), n + 1..n + 40)
                        .prop_map(|chars| Value::String(chars.into_iter().collect()))
                        .boxed(),
                )
            }
            Rule::Pattern(pattern) => {
                let regex = regex_lite::Regex::new(pattern).ok()?;
                set(prop_oneof![
                    "[ -~]{0,24}",
                    "[A-Z]{1,8}",
                    "[a-z]{1,8}[ _/:]{1,3}[a-z]{0,8}",
                    Just(String::new()),
                    "[-.][a-z]{1,8}",
                ]
                .prop_filter("a string the pattern refuses", move |s| !regex.is_match(s))
                .prop_map(Value::String)
                .boxed())
            }
            Rule::MinItems(n) if *n > 0 => set(Just(json!([])).boxed()),
            Rule::MinItems(_) => None,
            Rule::MaxItems(n) => {
                let has_element =
                    matches!(lookup(base, &self.path), Some(Value::Array(a)) if !a.is_empty());
                let n = *n as usize;
                has_element.then(|| (n + 1..n + 4).prop_map(Edit::Repeat).boxed())
            }
            Rule::Required => Some(Just(Edit::Remove).boxed()),
            // Neither field set: the object becomes empty.
            Rule::ExactlyOneOf(..) => set(Just(json!({})).boxed()),
        }
    }
}

impl Edit {
    /// Applies the edit at `path` in `object`. Missing objects and arrays on the way are created
    /// (an array gets one empty object as its element); a value of the wrong shape on the way is
    /// replaced.
    pub fn apply(&self, object: &mut Value, path: &[Segment]) {
        let Some((last, parents)) = path.split_last() else {
            if let Edit::Set(value) = self {
                *object = value.clone();
            }
            return;
        };
        let parent = descend(object, parents);
        match (self, last) {
            (Edit::Set(value), Segment::Field(name)) => {
                ensure_object(parent).insert(name.clone(), value.clone());
            }
            (Edit::Set(value), Segment::Index(i)) => {
                let array = ensure_array(parent, *i);
                array[*i] = value.clone();
            }
            (Edit::Remove, Segment::Field(name)) => {
                ensure_object(parent).remove(name);
            }
            (Edit::Remove, Segment::Index(i)) => {
                let array = ensure_array(parent, *i);
                array.remove(*i);
            }
            (Edit::Repeat(n), _) => {
                let slot = descend(parent, std::slice::from_ref(last));
                if let Value::Array(items) = slot
                    && let Some(first) = items.first().cloned()
                {
                    items.resize(*n, first);
                }
            }
        }
    }
}

/// An edit the API server did not refuse the way it should have.
#[derive(Clone, Debug)]
pub struct Miss {
    /// The constraint, as `path: rule`.
    pub constraint: String,
    /// What was done to the base object.
    pub edit: Edit,
    /// `accepted`, or the API server's answer when it did not name the field.
    pub answer: String,
}

/// What [`check_refusals`] found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Edits sent and refused with the right field path.
    pub refused: usize,
    /// Constraints no edit could be made for (see [`Constraint::violations`]).
    pub skipped: Vec<String>,
    /// Edits accepted, or refused without naming the field.
    pub misses: Vec<Miss>,
}

/// Sends `base` (a valid object of `api`'s kind, which must be accepted) and then, for every
/// constraint of `schema`, `cases` edits of it that break the constraint, all as dry-run creates;
/// each edit must be refused with 422 and an answer naming the field's path. Edits are drawn from
/// `runner` (seeded as the caller likes; no shrinking: each edit touches one field).
///
/// Errors: the base object was refused, or the API server could not be reached.
pub async fn check_refusals(
    api: &Api<DynamicObject>,
    schema: &Value,
    base: &Value,
    cases: u32,
    runner: &mut TestRunner,
) -> Result<Report, kube::Error> {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let create = |object: &Value| {
        let object = serde_json::from_value::<DynamicObject>(object.clone());
        async {
            let object = object.map_err(kube::Error::SerdeError)?;
            api.create(&dry_run, &object).await
        }
    };
    create(base).await?;
    let mut report = Report::default();
    for constraint in constraints(schema) {
        let Some(strategy) = constraint.violations(base) else {
            report.skipped.push(constraint.to_string());
            continue;
        };
        let path = constraint.field_path();
        for _ in 0..cases {
            let Ok(tree) = strategy.new_tree(runner) else {
                report.skipped.push(constraint.to_string());
                break;
            };
            let edit = tree.current();
            let mut object = base.clone();
            constraint.make_room(&mut object);
            edit.apply(&mut object, &constraint.path);
            let answer = match create(&object).await {
                Ok(_) => Some("accepted".to_string()),
                Err(kube::Error::Api(status))
                    if status.code == 422 && status.message.contains(&format!("{path}:")) =>
                {
                    None
                }
                Err(kube::Error::Api(status)) => Some(format!(
                    "{} {}: {}",
                    status.code, status.reason, status.message
                )),
                Err(other) => return Err(other),
            };
            match answer {
                None => report.refused += 1,
                Some(answer) => report.misses.push(Miss {
                    constraint: constraint.to_string(),
                    edit,
                    answer,
                }),
            }
        }
    }
    Ok(report)
}

/// What [`check_crds`] found over several CRDs.
#[derive(Clone, Debug, Default)]
pub struct CrdsReport {
    /// Per kind and version: how many edits were refused, and the constraints skipped.
    pub summary: Vec<String>,
    /// Edits refused with the right field path, over all CRDs.
    pub refused: usize,
    /// Every miss, as `Kind: constraint — edit — answer`.
    pub misses: Vec<String>,
}

/// [`check_refusals`] for every served version of every CRD in `crds`, each starting from
/// `base(kind)` (its `metadata` and `spec`; `apiVersion` and `kind` are filled in), in
/// `namespace` (cluster-scoped kinds in none). A CRD whose schema yields no checkable constraint counts as a miss, so that a
/// schema that lost its constraints cannot pass unnoticed.
///
/// Errors: a base object was refused (named by kind), or the API server could not be reached.
pub async fn check_crds(
    client: &kube::Client,
    namespace: &str,
    crds: &[CustomResourceDefinition],
    base: impl Fn(&str) -> Value,
    cases: u32,
    runner: &mut TestRunner,
) -> Result<CrdsReport, String> {
    let mut report = CrdsReport::default();
    for crd in crds {
        let kind = &crd.spec.names.kind;
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(serde_json::to_value)
                .transpose()
                .map_err(|e| format!("{kind} {}: schema: {e}", version.name))?
                .unwrap_or(Value::Null);
            let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
            let api: Api<DynamicObject> = if crd.spec.scope == "Cluster" {
                Api::all_with(client.clone(), &resource)
            } else {
                Api::namespaced_with(client.clone(), namespace, &resource)
            };
            let mut object = base(kind);
            object["apiVersion"] = json!(resource.api_version);
            object["kind"] = json!(kind);
            let found = check_refusals(&api, &schema, &object, cases, runner)
                .await
                .map_err(|e| {
                    format!("{kind} {}: the base object was refused: {e}", version.name)
                })?;
            if found.refused == 0 {
                report
                    .misses
                    .push(format!("{kind}: no constraint of its schema was checked"));
            }
            report.summary.push(format!(
                "{kind} {}: {} edits refused with the field named; skipped: {:?}",
                version.name, found.refused, found.skipped
            ));
            report.refused += found.refused;
            report.misses.extend(
                found
                    .misses
                    .into_iter()
                    .map(|m| format!("{kind}: {} — {:?} — {}", m.constraint, m.edit, m.answer)),
            );
        }
    }
    Ok(report)
}

/// [`check_crds`] with `PROPTEST_CASES` edits per constraint (3 when unset), printing the
/// summary; errors name every edit that was not refused with its field path.
pub async fn check_crds_refuse_all(
    client: &kube::Client,
    namespace: &str,
    crds: &[CustomResourceDefinition],
    base: impl Fn(&str) -> Value,
) -> Result<CrdsReport, String> {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let report = check_crds(
        client,
        namespace,
        crds,
        base,
        cases,
        &mut TestRunner::default(),
    )
    .await?;
    println!("{}", report.summary.join("\n"));
    if report.misses.is_empty() {
        return Ok(report);
    }
    Err(format!(
        "{} of {} edits were not refused with their field path:\n{}",
        report.misses.len(),
        report.misses.len() + report.refused,
        report.misses.join("\n")
    ))
}

/// Every constraint of `schema` (a CRD version's `openAPIV3Schema`), outside `apiVersion`,
/// `kind`, `metadata` and `status`, in document order.
pub fn constraints(schema: &Value) -> Vec<Constraint> {
    let mut found = Vec::new();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, child) in properties {
            if ["apiVersion", "kind", "metadata", "status"].contains(&name.as_str()) {
                continue;
            }
            walk(
                child,
                vec![Segment::Field(name.clone())],
                &Limits::default(),
                &mut found,
            );
        }
    }
    found
}

/// The value at `path`, if there is one.
pub fn lookup<'a>(object: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |value, segment| match segment {
            Segment::Field(name) => value.get(name),
            Segment::Index(i) => value.get(i),
        })
}

fn lookup_mut<'a>(object: &'a mut Value, path: &[Segment]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(object, |value, segment| match segment {
            Segment::Field(name) => value.get_mut(name),
            Segment::Index(i) => value.get_mut(i),
        })
}

/// The path as the API server's schema validation writes it: fields joined by dots, an array
/// element by its index — `spec.clusterNetwork.pods.cidrBlocks[0]`.
pub fn field_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// What the objects above a field constrain of their own fields: their `maxProperties` and the
/// groups of fields that exclude each other.
#[derive(Clone, Default)]
struct Limits {
    max_properties: Vec<(usize, usize)>,
    exclusive: Vec<(usize, Vec<String>)>,
}

/// The two fields of a CEL rule `has(self.a) != has(self.b)`.
fn exactly_one_of(rule: &str) -> Option<(String, String)> {
    let field = |part: &str| {
        let name = part.trim().strip_prefix("has(self.")?.strip_suffix(')')?;
        // CEL escapes some field names (`__dash__`, `__namespace__`); those are not JSON keys.
        (!name.contains("__") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .then(|| name.to_string())
    };
    let (first, second) = rule.split_once("!=")?;
    Some((field(first)?, field(second)?))
}

/// `limits`: what the objects above constrain (see [`Constraint::max_properties`] and
/// [`Constraint::exclusive`]).
fn walk(schema: &Value, path: Vec<Segment>, limits: &Limits, found: &mut Vec<Constraint>) {
    let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-preserve-unknown-fields")
        || ["anyOf", "oneOf", "allOf"]
            .iter()
            .any(|k| schema.get(k).is_some())
    {
        return;
    }
    let mut push = |rule: Rule| {
        found.push(Constraint {
            path: path.clone(),
            rule,
            max_properties: limits.max_properties.clone(),
            exclusive: limits.exclusive.clone(),
        })
    };
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    if !ty.is_empty() && !flag("x-kubernetes-int-or-string") {
        push(Rule::Type(ty.to_string()));
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        push(Rule::Enum(values.clone()));
    }
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    let integer = ty == "integer";
    if let Some(bound) = number("minimum") {
        push(Rule::Minimum {
            bound,
            exclusive: flag("exclusiveMinimum"),
            integer,
        });
    }
    if let Some(bound) = number("maximum") {
        push(Rule::Maximum {
            bound,
            exclusive: flag("exclusiveMaximum"),
            integer,
        });
    }
    let count = |key: &str| schema.get(key).and_then(Value::as_u64);
    if let Some(n) = count("minLength") {
        push(Rule::MinLength(n));
    }
    if let Some(n) = count("maxLength") {
        push(Rule::MaxLength(n));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        push(Rule::Pattern(pattern.to_string()));
    }
    if let Some(n) = count("minItems") {
        push(Rule::MinItems(n));
    }
    if let Some(n) = count("maxItems") {
        push(Rule::MaxItems(n));
    }
    let mut inner = limits.clone();
    if let Some(Value::Array(rules)) = schema.get("x-kubernetes-validations") {
        for (first, second) in rules
            .iter()
            .filter_map(|r| r.get("rule").and_then(Value::as_str))
            .filter_map(exactly_one_of)
        {
            inner
                .exclusive
                .push((path.len(), vec![first.clone(), second.clone()]));
            push(Rule::ExactlyOneOf(first, second));
        }
    }
    if let Some(n) = count("maxProperties") {
        inner
            .max_properties
            .push((path.len(), usize::try_from(n).unwrap_or(usize::MAX)));
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            let mut child = path.clone();
            child.push(Segment::Field(name.to_string()));
            found.push(Constraint {
                path: child,
                rule: Rule::Required,
                max_properties: inner.max_properties.clone(),
                exclusive: inner.exclusive.clone(),
            });
        }
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, child) in properties {
            let mut next = path.clone();
            next.push(Segment::Field(name.clone()));
            walk(child, next, &inner, found);
        }
    }
    if let Some(items) = schema.get("items") {
        let mut next = path;
        next.push(Segment::Index(0));
        walk(items, next, &inner, found);
    }
}

/// Values of every JSON type but `ty`.
fn wrong_type(ty: &str) -> BoxedStrategy<Value> {
    let string = "[a-z]{1,8}".prop_map(Value::String).boxed();
    let integer = any::<i32>().prop_map(|n| json!(n)).boxed();
    let fraction = (-1000i32..1000)
        .prop_map(|n| json!(f64::from(n) + 0.5))
        .boxed();
    let boolean = any::<bool>().prop_map(Value::Bool).boxed();
    let object = Just(json!({"unexpected": "object"})).boxed();
    let array = Just(json!(["unexpected"])).boxed();
    let choices: Vec<BoxedStrategy<Value>> = match ty {
        "string" => vec![integer, boolean, object, array],
        "integer" => vec![string, fraction, boolean, object, array],
        "number" => vec![string, boolean, object, array],
        "boolean" => vec![string, integer, object, array],
        "object" => vec![string, integer, boolean, array],
        "array" => vec![string, integer, boolean, object],
        _ => vec![object],
    };
    proptest::strategy::Union::new(choices).boxed()
}

/// The value at `path`, created as needed (objects for fields, arrays for indexes).
fn descend<'a>(mut value: &'a mut Value, path: &[Segment]) -> &'a mut Value {
    for segment in path {
        value = match segment {
            Segment::Field(name) => ensure_object(value)
                .entry(name.clone())
                .or_insert(Value::Null),
            Segment::Index(i) => &mut ensure_array(value, *i)[*i],
        };
    }
    value
}

fn ensure_object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

/// An array of at least `index + 1` elements (new ones are empty objects).
fn ensure_array(value: &mut Value, index: usize) -> &mut Vec<Value> {
    if !value.is_array() {
        *value = Value::Array(Vec::new());
    }
    match value {
        Value::Array(items) => {
            if items.len() <= index {
                items.resize(index + 1, json!({}));
            }
            items
        }
        _ => unreachable!("just made an array"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::test_runner::TestRunner;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["A"]}}},
            "spec": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                "strategy": {"type": "string", "enum": ["A", "B"]},
                "surge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "zones": {"type": "array", "minItems": 1, "maxItems": 2,
                          "items": {"type": "object", "required": ["zone"],
                                    "properties": {"zone": {"type": "string"}}}}
            }}
        }})
    }

    #[test]
    fn finds_every_constraint_outside_metadata_and_status() {
        let found: Vec<String> = constraints(&schema())
            .iter()
            .map(|c| c.to_string())
            .collect();
        for expected in [
            "spec: type object",
            "spec.name: required",
            "spec.name: minLength 1",
            "spec.name: maxLength 5",
            "spec.name: pattern ^[a-z]+$",
            "spec.replicas: minimum 0",
            "spec.replicas: maximum 10",
            "spec.strategy: enum [\"A\",\"B\"]",
            "spec.zones: minItems 1",
            "spec.zones: maxItems 2",
            "spec.zones[0].zone: required",
            "spec.zones[0].zone: type string",
        ] {
            assert!(
                found.contains(&expected.to_string()),
                "{expected} not in {found:#?}"
            );
        }
        assert!(
            !found
                .iter()
                .any(|c| c.starts_with("status") || c.starts_with("apiVersion"))
        );
        assert!(
            !found.iter().any(|c| c.starts_with("spec.surge")),
            "{found:#?}"
        );
    }

    /// Every generated edit breaks its rule, checked by a small validator of our own.
    #[test]
    fn every_violation_breaks_its_rule() {
        let base = json!({"spec": {"name": "ok", "zones": [{"zone": "a"}]}});
        let mut runner = TestRunner::default();
        for constraint in constraints(&schema()) {
            let Some(strategy) = constraints_violation(&constraint, &base) else {
                continue;
            };
            runner
                .run(&strategy, |edit| {
                    let mut object = base.clone();
                    edit.apply(&mut object, &constraint.path);
                    let value = lookup(&object, &constraint.path);
                    prop_assert!(
                        !satisfies(&constraint.rule, value),
                        "{constraint} {value:?}"
                    );
                    Ok(())
                })
                .unwrap();
        }
    }

    fn constraints_violation(constraint: &Constraint, base: &Value) -> Option<BoxedStrategy<Edit>> {
        constraint.violations(base)
    }

    fn satisfies(rule: &Rule, value: Option<&Value>) -> bool {
        let Some(value) = value else {
            return !matches!(rule, Rule::Required);
        };
        match rule {
            Rule::Type(t) => match t.as_str() {
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "object" => value.is_object(),
                "array" => value.is_array(),
                _ => true,
            },
            Rule::Enum(values) => values.contains(value),
            Rule::Minimum {
                bound, exclusive, ..
            } => value
                .as_f64()
                .is_some_and(|v| if *exclusive { v > *bound } else { v >= *bound }),
            Rule::Maximum {
                bound, exclusive, ..
            } => value
                .as_f64()
                .is_some_and(|v| if *exclusive { v < *bound } else { v <= *bound }),
            Rule::MinLength(n) => value
                .as_str()
                .is_some_and(|s| s.chars().count() as u64 >= *n),
            Rule::MaxLength(n) => value
                .as_str()
                .is_some_and(|s| s.chars().count() as u64 <= *n),
            Rule::Pattern(p) => value
                .as_str()
                .is_some_and(|s| regex_lite::Regex::new(p).is_ok_and(|r| r.is_match(s))),
            Rule::MinItems(n) => value.as_array().is_some_and(|a| a.len() as u64 >= *n),
            Rule::MaxItems(n) => value.as_array().is_some_and(|a| a.len() as u64 <= *n),
            Rule::Required => true,
            Rule::ExactlyOneOf(first, second) => value
                .as_object()
                .is_some_and(|m| m.contains_key(first) != m.contains_key(second)),
        }
    }

    #[test]
    fn edits_create_what_is_missing_on_the_way() {
        let mut object = json!({});
        let path = vec![
            Segment::Field("spec".into()),
            Segment::Field("zones".into()),
            Segment::Index(0),
            Segment::Field("zone".into()),
        ];
        Edit::Set(json!(7)).apply(&mut object, &path);
        assert_eq!(object, json!({"spec": {"zones": [{"zone": 7}]}}));
        Edit::Remove.apply(&mut object, &path);
        assert_eq!(object, json!({"spec": {"zones": [{}]}}));
        Edit::Repeat(3).apply(&mut object, &path[..2]);
        assert_eq!(object, json!({"spec": {"zones": [{}, {}, {}]}}));
        assert_eq!(field_path(&path), "spec.zones[0].zone");
    }

    #[test]
    fn an_edit_in_a_one_of_object_replaces_the_other_branch() {
        let properties = json!({
            "id": {"type": "string", "minLength": 1},
            "filter": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}});
        one_of_object_replaces_the_other_branch(
            json!({"type": "object", "maxProperties": 1, "properties": properties}),
        );
        let cel = json!({"type": "object", "properties": properties, "x-kubernetes-validations": [
            {"rule": "has(self.id) != has(self.filter)", "message": "exactly one of id or filter must be set"}]});
        let found = one_of_object_replaces_the_other_branch(cel);
        let rule = found
            .iter()
            .find(|c| {
                field_path(&c.path) == "spec.image"
                    && c.rule == Rule::ExactlyOneOf("id".into(), "filter".into())
            })
            .expect("the CEL rule is a constraint of spec.image");
        let base = json!({"spec": {"image": {"id": "i"}}});
        let mut runner = TestRunner::deterministic();
        let edit = rule
            .violations(&base)
            .unwrap()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut object = base.clone();
        edit.apply(&mut object, &rule.path);
        assert!(!satisfies(&rule.rule, lookup(&object, &rule.path)));
        assert_eq!(
            exactly_one_of("has(self.a) != has(self.b_2)"),
            Some(("a".into(), "b_2".into()))
        );
        assert_eq!(exactly_one_of("self.a == self.b"), None);
    }

    fn one_of_object_replaces_the_other_branch(param: Value) -> Vec<Constraint> {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"image": param, "ports": {"type": "array", "items": {"type": "object",
                "properties": {"network": param}}}}}}});
        let found = constraints(&schema);
        let find = |path: &str, rule: Rule| {
            found
                .iter()
                .find(|c| field_path(&c.path) == path && c.rule == rule)
                .unwrap_or_else(|| panic!("no {path} constraint"))
                .clone()
        };
        let base = json!({"spec": {"image": {"filter": {"name": "abc"}},
                                   "ports": [{"network": {"id": "n"}}]}});

        let id = find("spec.image.id", Rule::MinLength(1));
        let mut object = base.clone();
        id.make_room(&mut object);
        Edit::Set(json!("")).apply(&mut object, &id.path);
        assert_eq!(
            object["spec"]["image"],
            json!({"id": ""}),
            "filter gave way"
        );

        let name = find("spec.ports[0].network.filter.name", Rule::MaxLength(3));
        let mut object = base.clone();
        name.make_room(&mut object);
        Edit::Set(json!("abcd")).apply(&mut object, &name.path);
        assert_eq!(
            object["spec"]["ports"][0]["network"],
            json!({"filter": {"name": "abcd"}}),
            "id gave way, inside an array element"
        );

        let kept = find("spec.image.filter.name", Rule::MaxLength(3));
        let mut object = base.clone();
        kept.make_room(&mut object);
        assert_eq!(
            object, base,
            "nothing to make room for when the branch is present"
        );
        found
    }
}
