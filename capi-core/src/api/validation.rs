//! Schema fragments shared by the kinds, and offered to providers' kinds: patterns and
//! hand-written schemas for fields whose Rust type cannot express the API server's validation on
//! its own. Use them with `#[schemars(pattern(...))]` and `#[schemars(schema_with = "...")]`.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A DNS-1123 subdomain (object names, API groups).
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A DNS-1123 label (cluster names: they become label values and name prefixes).
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// An IPv4 or IPv6 CIDR block such as `10.0.0.0/16` or `fd00::/108`.
pub const CIDR: &str = r"^(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))$";

/// A Kubernetes semantic version such as `v1.30.2` or `1.31.0-rc.1`.
pub const KUBERNETES_VERSION: &str =
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]+)?$";

/// A condition type: CamelCase, optionally prefixed with a DNS subdomain and a slash.
pub const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// A condition reason: CamelCase, as `metav1.Condition` requires.
pub const CONDITION_REASON: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// A taint key: a qualified name, optionally prefixed with a DNS subdomain and a slash.
pub const TAINT_KEY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// A taint value (a label value).
pub const TAINT_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Marks a list's schema as a map keyed by `keys` (`x-kubernetes-list-type: map`), as upstream
/// declares lists that server-side apply merges by key.
pub fn list_map(schema: &mut Schema, keys: &[&str]) {
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(keys));
}

/// A list keyed by `conditionType` (readiness gates). Use with `#[schemars(transform = ...)]`.
pub fn keyed_by_condition_type(schema: &mut Schema) {
    list_map(schema, &["conditionType"]);
}

/// A list keyed by `key` and `effect` (taints). Use with `#[schemars(transform = ...)]`.
pub fn keyed_by_key_and_effect(schema: &mut Schema) {
    list_map(schema, &["key", "effect"]);
}

/// An API version `group/version`, as upstream's references spell it.
pub const API_VERSION: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[a-z]([-a-z0-9]*[a-z0-9])?$";

/// `unhealthyInRange`: `[min-max]`.
pub const UNHEALTHY_RANGE: &str = r"^\[[0-9]+-[0-9]+\]$";

/// Adds a CEL rule (`x-kubernetes-validations`) to an object's schema: exactly one of the optional
/// fields `first` and `second` is set. The API server refuses an object with both or neither,
/// naming the object's path and the message `exactly one of <first> or <second> must be set`.
/// Use it in a `#[schemars(transform = ...)]` function.
pub fn exactly_one_of(schema: &mut Schema, first: &str, second: &str) {
    add_rule(
        schema,
        &format!("has(self.{first}) != has(self.{second})"),
        &format!("exactly one of {first} or {second} must be set"),
    );
}

/// Adds a CEL rule to a list's schema: no two elements have the same `name` (upstream's rule on
/// kubeadm's `extraArgs`), with the message `<field> name must be unique`.
fn unique_names(schema: &mut Schema, field: &str) {
    list_map(schema, &["name", "value"]);
    add_rule(
        schema,
        "self.all(x, self.exists_one(y, x.name == y.name))",
        &format!("{field} name must be unique"),
    );
}

/// `extraArgs` of a kubeadm component: each flag name at most once, as upstream declares it.
/// Use with `#[schemars(transform = validation::unique_extra_arg_names)]`.
pub fn unique_extra_arg_names(schema: &mut Schema) {
    unique_names(schema, "extraArgs");
}

/// `kubeletExtraArgs`: each flag name at most once, as upstream declares it.
pub fn unique_kubelet_extra_arg_names(schema: &mut Schema) {
    unique_names(schema, "kubeletExtraArgs");
}

/// The conditions a MachineHealthCheck sets or summarises itself, which upstream refuses as the
/// type of an unhealthy machine condition.
pub const MACHINE_HEALTH_CHECK_OWN_CONDITIONS: [&str; 5] = [
    "Ready",
    "Available",
    "HealthCheckSucceeded",
    "OwnerRemediated",
    "ExternallyRemediated",
];

/// `unhealthyMachineConditions[].type`: not one of [`MACHINE_HEALTH_CHECK_OWN_CONDITIONS`] (a CEL
/// rule, with upstream's message).
pub fn not_a_health_check_condition(schema: &mut Schema) {
    let quoted: Vec<String> = MACHINE_HEALTH_CHECK_OWN_CONDITIONS
        .iter()
        .map(|c| format!("'{c}'"))
        .collect();
    add_rule(
        schema,
        &format!("!(self in [{}])", quoted.join(",")),
        &format!(
            "type must not be one of: {}",
            MACHINE_HEALTH_CHECK_OWN_CONDITIONS.join(", ")
        ),
    );
}

/// Drops the `default` schemars derives from `#[serde(default)]`: a field that deserialises to
/// its default when absent, but that the API server must not fill in (upstream's schema has no
/// default there, or the default would break one of its constraints, such as `minProperties`).
/// Use with `#[schemars(transform = validation::without_default)]`.
pub fn without_default(schema: &mut Schema) {
    schema.remove("default");
}

/// A field or object that cannot change once written (the API server refuses an update with
/// `is immutable`). Use with `#[schemars(transform = validation::immutable)]`.
pub fn immutable(schema: &mut Schema) {
    add_rule(schema, "self == oldSelf", "is immutable");
}

/// Adds the CEL rule `rule` (`x-kubernetes-validations`) with `message` to a schema, after the
/// rules it already has. The API server refuses an object breaking it, naming its path and the
/// message. Use it in a `#[schemars(transform = ...)]` function.
pub fn add_rule(schema: &mut Schema, rule: &str, message: &str) {
    let rule = serde_json::json!({"rule": rule, "message": message});
    match schema.get_mut("x-kubernetes-validations") {
        Some(serde_json::Value::Array(rules)) => rules.push(rule),
        _ => {
            schema.insert("x-kubernetes-validations".into(), serde_json::json!([rule]));
        }
    }
}

/// An integer or a percentage (`maxSurge`, `maxUnavailable`, `maxInFlight`): a non-negative integer
/// or a string such as `25%`.
pub fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "minimum": 0,
        "pattern": "^[0-9]+%$",
        "nullable": true,
    })
}

/// A point in time in a spec (`metav1.Time`): an RFC 3339 string, checked by a pattern rather than
/// `format: date-time` — the API server's `date-time` format also admits layouts that are not
/// RFC 3339, and an object whose spec a client cannot decode would stop every watch of its kind.
pub fn rfc3339_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$",
        "nullable": true,
    })
}

/// `status.conditions`: a list of `metav1.Condition` keyed by `type`, validated as upstream does
/// (the stock `k8s-openapi` schema carries no validation).
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let time = generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>();
    json_schema!({
        "description": "Conditions of the object: the current state of each aspect, as metav1.Condition.",
        "type": "array",
        "maxItems": 32,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316, "pattern": CONDITION_TYPE},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": time,
                "reason": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": CONDITION_REASON},
                "message": {"type": "string", "maxLength": 32768},
            },
        },
    })
}

/// A `metav1.LabelSelector`: the stock schema plus the marker that makes it atomic for server-side
/// apply, as upstream declares it.
pub fn label_selector(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector::json_schema(generator);
    schema.insert("x-kubernetes-map-type".into(), "atomic".into());
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, value: &str) -> bool {
        // The patterns are ECMA-262/RE2 compatible; the `regex` engine speaks the same subset.
        regex_lite::Regex::new(pattern)
            .map(|re| re.is_match(value))
            .unwrap_or(false)
    }

    #[test]
    fn cidr_accepts_v4_and_v6_blocks_only() {
        for ok in [
            "10.0.0.0/16",
            "192.168.0.0/24",
            "0.0.0.0/0",
            "fd00::/108",
            "2001:db8::/32",
        ] {
            assert!(matches(CIDR, ok), "{ok} should match");
        }
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "300.0.0.0/8",
            "hello/8",
            "fd00::/129",
            "",
        ] {
            assert!(!matches(CIDR, bad), "{bad} should not match");
        }
    }

    #[test]
    fn kubernetes_version_accepts_semver_with_optional_v() {
        for ok in ["v1.30.2", "1.31.0", "v1.32.0-rc.1", "v1.29.3+k3s1"] {
            assert!(matches(KUBERNETES_VERSION, ok), "{ok} should match");
        }
        for bad in ["1.30", "latest", "v01.2.3", "v1.2.3-", ""] {
            assert!(!matches(KUBERNETES_VERSION, bad), "{bad} should not match");
        }
    }

    #[test]
    fn condition_reason_is_camel_case_identifier() {
        assert!(matches(CONDITION_REASON, "WaitingForBootstrapData"));
        assert!(matches(CONDITION_REASON, "A"));
        assert!(!matches(CONDITION_REASON, "has space"));
        assert!(!matches(CONDITION_REASON, ""));
        assert!(!matches(CONDITION_REASON, "Trailing,"));
    }

    #[test]
    fn unhealthy_range_is_bracketed_pair() {
        assert!(matches(UNHEALTHY_RANGE, "[1-3]"));
        assert!(!matches(UNHEALTHY_RANGE, "1-3"));
        assert!(!matches(UNHEALTHY_RANGE, "[a-3]"));
    }
}
