//! Label selectors as the API server evaluates them, for objects read from caches.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match `selector` (`matchLabels` and every `matchExpressions` operator:
/// `In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything, as in the API;
/// an unknown operator matches nothing.
pub fn matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    exact
        && selector.match_expressions.iter().flatten().all(|rule| {
            let value = labels.get(&rule.key);
            let values = rule.values.as_deref().unwrap_or_default();
            match rule.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// The selector in the API's string form (`a=b,c in (d,e)`), as the scale subresource reports it.
pub fn to_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for rule in selector.match_expressions.iter().flatten() {
        let values = rule.values.as_deref().unwrap_or_default().join(",");
        parts.push(match rule.operator.as_str() {
            "In" => format!("{} in ({values})", rule.key),
            "NotIn" => format!("{} notin ({values})", rule.key),
            "Exists" => rule.key.clone(),
            "DoesNotExist" => format!("!{}", rule.key),
            other => format!("{} {other} ({values})", rule.key),
        });
    }
    parts.join(",")
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
