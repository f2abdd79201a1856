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

/// Why machines made from a template with `template_labels` would not be selected by `selector`
/// — the selector is malformed, or does not match those labels — as a message naming the fields
/// to fix; `None` when they would be. Upstream's admission webhook refuses such objects; without
/// webhooks the controllers report it instead.
pub fn template_mismatch(
    kind: &str,
    selector: &LabelSelector,
    template_labels: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    let parsed = match Selector::try_from(selector.clone()) {
        Ok(parsed) => parsed,
        Err(error) => {
            return Some(format!(
                "spec.selector is not a valid label selector ({error}); fix it so that it selects spec.template.metadata.labels"
            ));
        }
    };
    let empty = BTreeMap::new();
    let labels = template_labels.unwrap_or(&empty);
    (!parsed.matches(labels)).then(|| {
        let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "spec.selector ({parsed}) does not select spec.template.metadata.labels ({}): machines made from the template would not belong to this {kind}; make the selector match the template's labels",
            shown.join(",")
        )
    })
}

/// Records a [`template_mismatch`] in `conditions` as `ScalingUp=False`/`InvalidSelector`, or
/// clears that condition once the spec is fixed; returns whether there is a mismatch (and so
/// nothing may be created).
pub(crate) fn record_mismatch(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    mismatch: Option<String>,
    generation: Option<i64>,
) -> bool {
    use capi_core::condition::{self, ConditionStatus, DesiredCondition};
    match mismatch {
        Some(message) => {
            condition::set(
                conditions,
                DesiredCondition::new(
                    condition::SCALING_UP,
                    ConditionStatus::False,
                    capi_runtime::reasons::INVALID_SELECTOR,
                )
                .message(message)
                .observed_generation(generation),
            );
            true
        }
        None => {
            conditions.retain(|c| {
                !(c.type_ == condition::SCALING_UP
                    && c.reason == capi_runtime::reasons::INVALID_SELECTOR)
            });
            false
        }
    }
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

    #[test]
    fn a_selector_that_misses_its_template_is_named_with_both_sides() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("pool", "one")])),
            match_expressions: None,
        };
        let message = template_mismatch(
            "MachineDeployment",
            &selector,
            Some(&labels(&[("pool", "other")])),
        )
        .unwrap();
        assert!(message.contains("pool=one"), "{message}");
        assert!(message.contains("pool=other"), "{message}");
        assert!(message.contains("MachineDeployment"), "{message}");
        let fits = labels(&[("pool", "one"), ("extra", "x")]);
        assert_eq!(
            template_mismatch("MachineSet", &selector, Some(&fits)),
            None
        );
        let malformed = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "pool".into(),
                operator: "Sometimes".into(),
                values: None,
            }]),
        };
        let message = template_mismatch("MachineSet", &malformed, Some(&fits)).unwrap();
        assert!(message.contains("not a valid label selector"), "{message}");
    }
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
