//! Which namespaces may use a shared identity: the `allowedNamespaces` of CAPA's cluster-scoped
//! `AWSCluster*Identity` kinds and CAPZ's `AzureClusterIdentity`, one meaning for every provider.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// The namespaces whose objects may use an identity.
///
/// | written | allows |
/// |---|---|
/// | no `allowedNamespaces` (or `null`) | no namespace |
/// | `{}` | every namespace |
/// | `{list: [a, b]}` | `a` and `b` |
/// | `{selector: {matchLabels: {team: x}}}` | namespaces labelled `team=x` |
/// | `{list: [a], selector: …}` | `a`, and the namespaces the selector matches |
/// | `{list: []}`, `{selector: {matchLabels: {}}}` | no namespace |
/// | `{list: null}`, `{selector: null}` | no namespace |
///
/// As in CAPA, the list and the selector are alternatives (either one admits a namespace), and
/// only the literal `{}` (or `{selector: {}}`, which decodes to the same) means every
/// namespace; a selector with empty `matchLabels` or `matchExpressions` selects nothing, and a
/// malformed selector (an unknown operator, `In` without values) selects nothing. Unlike CAPA,
/// a `list` or `selector` written as `null` (YAML `list:` with nothing after it) admits no
/// namespace through it, rather than turning the whole into `{}`: a mistake fails closed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct AllowedNamespaces {
    /// Namespaces by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(length(min = 1, max = 63)))]
    pub list: Option<Vec<String>>,
    /// Namespaces by their labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::label_selector")]
    pub selector: Option<LabelSelector>,
}

/// `allowedNamespaces` as written, telling an absent field from one written `null`.
#[derive(Deserialize)]
struct Written {
    #[serde(default, deserialize_with = "present")]
    list: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    selector: Option<Option<LabelSelector>>,
}

/// A field that is there, `null` or not.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl<'de> Deserialize<'de> for AllowedNamespaces {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = Written::deserialize(deserializer)?;
        Ok(Self {
            // A `null` list names no namespace.
            list: written.list.map(Option::unwrap_or_default),
            // A `null` selector selects none.
            selector: written.selector.map(|selector| {
                selector.unwrap_or_else(|| LabelSelector {
                    match_labels: Some(BTreeMap::new()),
                    match_expressions: None,
                })
            }),
        })
    }
}

impl AllowedNamespaces {
    /// Every namespace: the `{}` an operator writes to share an identity with all of them.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the namespaces named.
    pub fn named<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self {
            list: Some(names.into_iter().map(Into::into).collect()),
            selector: None,
        }
    }

    /// Whether `namespace` may use the identity without looking at its labels: it allows every
    /// namespace or names this one. `None` when only the namespace's labels can tell
    /// ([`AllowedNamespaces::admits`]).
    pub fn admits_by_name(&self, namespace: &str) -> Option<bool> {
        if self.is_everything() {
            return Some(true);
        }
        if self.list.iter().flatten().any(|name| name == namespace) {
            return Some(true);
        }
        match self.selector.as_ref() {
            Some(selector) if !selects_nothing(selector) => None,
            _ => Some(false),
        }
    }

    /// Whether `namespace`, labelled `labels`, may use the identity (the table above).
    pub fn admits(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        if let Some(verdict) = self.admits_by_name(namespace) {
            return verdict;
        }
        let empty = BTreeMap::new();
        self.selector.as_ref().is_some_and(|selector| {
            Selector::try_from(selector.clone())
                .is_ok_and(|parsed| parsed.matches(labels.unwrap_or(&empty)))
        })
    }

    fn is_everything(&self) -> bool {
        self.list.is_none()
            && self
                .selector
                .as_ref()
                .is_none_or(|selector| *selector == LabelSelector::default())
    }
}

/// A selector with no requirement at all (`matchLabels: {}` and no expressions): it would
/// match every namespace, which only the literal `{}` may mean.
fn selects_nothing(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// Whether an identity with `allowed` (absent: no namespace) may be used from `namespace`.
pub fn admits(
    allowed: Option<&AllowedNamespaces>,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    allowed.is_some_and(|allowed| allowed.admits(namespace, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(json: &str) -> Option<AllowedNamespaces> {
        let wrapped: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"allowedNamespaces": {json}}}"#)).unwrap();
        serde_json::from_value(wrapped["allowedNamespaces"].clone()).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn each_written_form_allows_what_the_table_says() {
        let team = labels(&[("team", "a")]);
        let other = labels(&[("team", "b")]);
        let cases: &[(&str, bool, bool, bool)] = &[
            // written, allows "a" labelled team=a, allows "b" labelled team=b, allows "c"
            ("null", false, false, false),
            ("{}", true, true, true),
            (r#"{"selector": {}}"#, true, true, true),
            (r#"{"list": null}"#, false, false, false),
            (r#"{"selector": null}"#, false, false, false),
            (
                r#"{"list": null, "selector": {"matchLabels": {"team": "b"}}}"#,
                false,
                true,
                false,
            ),
            (r#"{"list": []}"#, false, false, false),
            (r#"{"list": ["a"]}"#, true, false, false),
            (r#"{"selector": {"matchLabels": {}}}"#, false, false, false),
            (
                r#"{"selector": {"matchExpressions": []}}"#,
                false,
                false,
                false,
            ),
            (
                r#"{"selector": {"matchLabels": {"team": "a"}}}"#,
                true,
                false,
                false,
            ),
            (
                r#"{"list": ["c"], "selector": {"matchLabels": {"team": "b"}}}"#,
                false,
                true,
                true,
            ),
            (
                r#"{"selector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}"#,
                false,
                false,
                false,
            ),
        ];
        for (written, a, b, c) in cases {
            let allowed = from(written);
            assert_eq!(
                (
                    admits(allowed.as_ref(), "a", Some(&team)),
                    admits(allowed.as_ref(), "b", Some(&other)),
                    admits(allowed.as_ref(), "c", None),
                ),
                (*a, *b, *c),
                "{written}"
            );
        }
    }

    #[test]
    fn labels_are_needed_only_for_a_selector_that_selects_something() {
        assert_eq!(AllowedNamespaces::all().admits_by_name("x"), Some(true));
        assert_eq!(
            AllowedNamespaces::named(["x"]).admits_by_name("x"),
            Some(true)
        );
        assert_eq!(
            AllowedNamespaces::named(["x"]).admits_by_name("y"),
            Some(false)
        );
        let by_label = from(r#"{"list": ["x"], "selector": {"matchLabels": {"t": "1"}}}"#).unwrap();
        assert_eq!(by_label.admits_by_name("x"), Some(true));
        assert_eq!(by_label.admits_by_name("y"), None);
    }
}
