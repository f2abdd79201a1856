//! Spec parameters (`{id}` or `{filter: {name, tags}}`) resolved to exactly one cloud resource;
//! none or several is an invalid configuration naming the field.

use capi_core::ActuatorError;

use crate::api::{NameFilter, NetworkParam, OpenStackMachineSpec, SecurityGroupParam, SubnetParam};
use crate::cloud::{Compute, Flavor, Image, Images, Network, Networking, SecurityGroup, Subnet};
use crate::connector::actuator_error;

fn query(id: Option<&String>, filter: Option<&NameFilter>) -> Vec<(String, String)> {
    let mut q = Vec::new();
    if let Some(id) = id {
        q.push(("id".to_string(), id.clone()));
    }
    if let Some(filter) = filter {
        if let Some(name) = &filter.name {
            q.push(("name".to_string(), name.clone()));
        }
        if !filter.tags.is_empty() {
            q.push(("tags".to_string(), filter.tags.join(",")));
        }
    }
    q
}

/// Exactly one of `found`, else an invalid configuration naming `field` and what matched.
pub(crate) fn exactly_one<T>(
    mut found: Vec<T>,
    field: &str,
    what: &str,
    name: impl Fn(&T) -> String,
) -> Result<T, ActuatorError> {
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ActuatorError::invalid_configuration(
            format!("{what}NotFound"),
            format!("{field}: no {what} matches"),
        )),
        n => Err(ActuatorError::invalid_configuration(
            format!("{what}Ambiguous"),
            format!(
                "{field}: {n} {what}s match ({}); make the filter match one",
                found.iter().map(&name).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// The network a [`NetworkParam`] names.
pub(crate) async fn network(
    net: &dyn Networking,
    param: &NetworkParam,
    field: &str,
) -> Result<Network, ActuatorError> {
    let found = net
        .networks(&query(param.id.as_ref(), param.filter.as_ref()))
        .await
        .map_err(|e| actuator_error(&format!("resolving {field}"), e))?;
    exactly_one(found, field, "Network", |n| n.name.clone())
}

/// The subnet a [`SubnetParam`] names (within `network_id` if given).
pub(crate) async fn subnet(
    net: &dyn Networking,
    param: &SubnetParam,
    network_id: Option<&str>,
    field: &str,
) -> Result<Subnet, ActuatorError> {
    let mut q = query(param.id.as_ref(), param.filter.as_ref());
    if let Some(network) = network_id {
        q.push(("network_id".into(), network.to_string()));
    }
    let found = net
        .subnets(&q)
        .await
        .map_err(|e| actuator_error(&format!("resolving {field}"), e))?;
    exactly_one(found, field, "Subnet", |s| s.name.clone())
}

/// The security group a [`SecurityGroupParam`] names.
pub(crate) async fn security_group(
    net: &dyn Networking,
    param: &SecurityGroupParam,
    field: &str,
) -> Result<SecurityGroup, ActuatorError> {
    let found = net
        .security_groups(&query(param.id.as_ref(), param.filter.as_ref()))
        .await
        .map_err(|e| actuator_error(&format!("resolving {field}"), e))?;
    exactly_one(found, field, "SecurityGroup", |g| g.name.clone())
}

/// The flavor `spec.flavor` names.
pub(crate) async fn flavor(
    compute: &dyn Compute,
    spec: &OpenStackMachineSpec,
) -> Result<Flavor, ActuatorError> {
    let wanted =
        name_or_id(spec.flavor.id.as_ref(), spec.flavor.filter.as_ref()).unwrap_or_default();
    compute
        .find_flavor(&wanted)
        .await
        .map_err(|e| actuator_error("looking up the flavor", e))?
        .ok_or_else(|| {
            ActuatorError::invalid_configuration(
                "FlavorNotFound",
                format!("spec.flavor: no flavor {wanted:?} in the cloud"),
            )
        })
}

/// The one image `spec.image` names (with all the filter's tags).
pub(crate) async fn image(
    images: &dyn Images,
    spec: &OpenStackMachineSpec,
) -> Result<Image, ActuatorError> {
    let wanted = name_or_id(spec.image.id.as_ref(), spec.image.filter.as_ref()).unwrap_or_default();
    let tags = spec
        .image
        .filter
        .as_ref()
        .map(|f| f.tags.clone())
        .unwrap_or_default();
    let found = images
        .find_images(&wanted, &tags)
        .await
        .map_err(|e| actuator_error("looking up the image", e))?;
    exactly_one(found, "spec.image", "Image", |i| i.name.clone())
}

/// The name or ID to look a flavor, image or server group up by.
pub(crate) fn name_or_id(id: Option<&String>, filter: Option<&NameFilter>) -> Option<String> {
    id.cloned().or_else(|| filter.and_then(|f| f.name.clone()))
}

/// The query for resources with exactly this name.
pub(crate) fn by_name(name: &str) -> Vec<(String, String)> {
    vec![("name".to_string(), name.to_string())]
}
