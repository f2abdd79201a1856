//! Label selectors as the API server evaluates them, for objects read from caches — kube's
//! [`Selector`] applied to the API's `LabelSelector`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// Whether `labels` match `selector` (`matchLabels` and every `matchExpressions` operator:
/// `In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything, as in the API;
/// a malformed one (an unknown operator, `In` without values) matches nothing.
pub fn matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    Selector::try_from(selector.clone())
        .is_ok_and(|selector| selector.matches(labels.unwrap_or(&empty)))
}

/// The selector in the API's string form (`a=b,c in (d,e)`), as the scale subresource reports it;
/// empty for a malformed selector.
pub fn to_string(selector: &LabelSelector) -> String {
    Selector::try_from(selector.clone())
        .map(|selector| selector.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rule(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_every_operator() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                rule("tier", "In", &["a", "b"]),
                rule("zone", "NotIn", &["x"]),
                rule("team", "Exists", &[]),
                rule("legacy", "DoesNotExist", &[]),
            ]),
        };
        let good = labels(&[("app", "web"), ("tier", "a"), ("team", "t")]);
        assert!(matches(&selector, Some(&good)));
        for bad in [
            labels(&[("app", "db"), ("tier", "a"), ("team", "t")]),
            labels(&[("app", "web"), ("tier", "c"), ("team", "t")]),
            labels(&[("app", "web"), ("tier", "a"), ("team", "t"), ("zone", "x")]),
            labels(&[("app", "web"), ("tier", "a")]),
            labels(&[("app", "web"), ("tier", "a"), ("team", "t"), ("legacy", "")]),
        ] {
            assert!(!matches(&selector, Some(&bad)), "{bad:?}");
        }
        assert!(matches(&LabelSelector::default(), None));
        assert_eq!(
            to_string(&selector),
            "app=web,tier in (a,b),zone notin (x),team,!legacy"
        );
    }

    #[test]
    fn unknown_operator_matches_nothing() {
        let selector = LabelSelector {
            match_expressions: Some(vec![rule("a", "Like", &["b"])]),
            ..LabelSelector::default()
        };
        assert!(!matches(&selector, Some(&labels(&[("a", "b")]))));
    }
}
