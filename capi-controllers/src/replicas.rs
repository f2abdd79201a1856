//! Defaulting `spec.replicas` of a MachineDeployment or MachineSet, as upstream's admission
//! webhooks do, so that the cluster autoscaler can take a node group over.
//!
//! Upstream defaults an absent `spec.replicas` when the object is written: to the autoscaler's
//! minimum size for a new object with both node-group size annotations, to the current size
//! brought into `[min, max]` for an existing one, and to 1 without the annotations. This SDK has
//! no admission webhook, so its controllers do it on their first pass over such an object and
//! write the value back; "current" is what exists (the sets' replicas of a deployment, the
//! machines of a set), which is what upstream's previous `spec.replicas` stood for.

use std::collections::BTreeMap;
use std::fmt::Debug;

use capi_core::labels::{AUTOSCALER_MAX_SIZE, AUTOSCALER_MIN_SIZE};
use capi_runtime::write;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The `spec.replicas` to write, if any.
///
/// - `Ok(None)`: `spec.replicas` is set; nothing to default.
/// - `Ok(Some(n))`: write `n`.
/// - `Err(message)`: an autoscaler annotation is malformed; the message names it, for a condition.
///
/// `current` is the size the object has now, `None` for an object that has never been scaled.
pub(crate) fn defaulted(
    spec: Option<i32>,
    annotations: &BTreeMap<String, String>,
    current: Option<i32>,
) -> Result<Option<i32>, String> {
    if spec.is_some() {
        return Ok(None);
    }
    let (min, max) = match (
        annotations.get(AUTOSCALER_MIN_SIZE),
        annotations.get(AUTOSCALER_MAX_SIZE),
    ) {
        (Some(min), Some(max)) => (
            size(AUTOSCALER_MIN_SIZE, min)?,
            size(AUTOSCALER_MAX_SIZE, max)?,
        ),
        _ => return Ok(Some(1)),
    };
    if min > max {
        return Err(format!(
            "annotation {AUTOSCALER_MIN_SIZE} ({min}) is greater than {AUTOSCALER_MAX_SIZE} \
             ({max}): spec.replicas cannot be defaulted for the cluster autoscaler"
        ));
    }
    Ok(Some(match current {
        None => min,
        Some(current) => current.clamp(min, max),
    }))
}

/// Writes a defaulted `spec.replicas` of `object`, guarded by the resource version the value was
/// computed from, so that a concurrent change by a user or the autoscaler wins.
pub(crate) async fn write<K>(api: &Api<K>, object: &K, replicas: i32) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = json!({
        "metadata": {"resourceVersion": object.resource_version()},
        "spec": {"replicas": replicas},
    });
    write::patch(api, &object.name_any(), patch).await
}

fn size(annotation: &str, value: &str) -> Result<i32, String> {
    match value.trim().parse::<i32>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(format!(
            "annotation {annotation} must be a non-negative 32-bit integer, not {value:?}: \
             spec.replicas cannot be defaulted for the cluster autoscaler"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(min: &str, max: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (AUTOSCALER_MIN_SIZE.to_string(), min.to_string()),
            (AUTOSCALER_MAX_SIZE.to_string(), max.to_string()),
        ])
    }

    #[test]
    fn a_set_value_is_kept_and_no_annotations_mean_one() {
        assert_eq!(defaulted(Some(7), &sizes("2", "5"), Some(9)), Ok(None));
        assert_eq!(defaulted(None, &BTreeMap::new(), Some(4)), Ok(Some(1)));
        let only_min = BTreeMap::from([(AUTOSCALER_MIN_SIZE.to_string(), "3".to_string())]);
        assert_eq!(defaulted(None, &only_min, None), Ok(Some(1)));
    }

    #[test]
    fn the_autoscaler_range_decides_like_upstream() {
        assert_eq!(
            defaulted(None, &sizes("2", "5"), None),
            Ok(Some(2)),
            "new: min"
        );
        assert_eq!(defaulted(None, &sizes("2", "5"), Some(1)), Ok(Some(2)));
        assert_eq!(defaulted(None, &sizes("2", "5"), Some(4)), Ok(Some(4)));
        assert_eq!(defaulted(None, &sizes("2", "5"), Some(9)), Ok(Some(5)));
        assert_eq!(defaulted(None, &sizes("0", "5"), Some(0)), Ok(Some(0)));
    }

    #[test]
    fn malformed_sizes_are_named() {
        for (min, max, named) in [
            ("two", "5", AUTOSCALER_MIN_SIZE),
            ("2", "5.5", AUTOSCALER_MAX_SIZE),
            ("-1", "5", AUTOSCALER_MIN_SIZE),
            ("6", "5", AUTOSCALER_MIN_SIZE),
        ] {
            let error = defaulted(None, &sizes(min, max), Some(3)).unwrap_err();
            assert!(error.contains(named), "{error}");
        }
    }
}
