//! ARM resource IDs: `/subscriptions/<sub>/resourceGroups/<rg>` and
//! `/subscriptions/<sub>/resourceGroups/<rg>/providers/<namespace>/<collection>/<name>[/<child
//! collection>/<child>]`, built and parsed. ARM compares the fixed segments and names without
//! case; an ID is printed as it was built.

use std::fmt;

use super::ResourceType;

/// An ARM resource's ID.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// The subscription.
    pub subscription: String,
    /// The resource group (the resource itself for [`ResourceType::ResourceGroup`]).
    pub resource_group: String,
    /// The kind.
    pub kind: ResourceType,
    /// The parent's name (a subnet's virtual network), for a child kind.
    pub parent: Option<String>,
    /// The name (the group's for [`ResourceType::ResourceGroup`]).
    pub name: String,
}

/// Why a string is not the ID of a resource the provider knows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{id:?} is not the ID of a resource group, network, subnet, security group, public IP, load balancer, network interface, virtual machine, disk or virtual machine scale set: {why}"
)]
pub struct ResourceIdError {
    id: String,
    why: &'static str,
}

impl ResourceId {
    /// Resource group `name` of `subscription`.
    pub fn resource_group(subscription: &str, name: &str) -> Self {
        Self {
            subscription: subscription.into(),
            resource_group: name.into(),
            kind: ResourceType::ResourceGroup,
            parent: None,
            name: name.into(),
        }
    }

    /// Resource `name` of kind `kind` (not a child kind) in group `resource_group`.
    pub fn new(subscription: &str, resource_group: &str, kind: ResourceType, name: &str) -> Self {
        Self {
            subscription: subscription.into(),
            resource_group: resource_group.into(),
            kind,
            parent: None,
            name: name.into(),
        }
    }

    /// Child `name` of kind `kind` (a subnet) of this resource (its virtual network).
    pub fn child(&self, kind: ResourceType, name: &str) -> Self {
        Self {
            subscription: self.subscription.clone(),
            resource_group: self.resource_group.clone(),
            kind,
            parent: Some(self.name.clone()),
            name: name.into(),
        }
    }

    /// The URL path of the resource with its `api-version` (what a PUT, GET or DELETE goes to).
    pub fn url_path(&self) -> String {
        format!("{self}?api-version={}", self.kind.api_version())
    }

    /// Whether `other` names the same resource (ARM compares without case).
    pub fn same(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.subscription.eq_ignore_ascii_case(&other.subscription)
            && self
                .resource_group
                .eq_ignore_ascii_case(&other.resource_group)
            && self.name.eq_ignore_ascii_case(&other.name)
            && match (&self.parent, &other.parent) {
                (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                (None, None) => true,
                _ => false,
            }
    }

    /// Parses an ID (its path only: a query is ignored).
    pub fn parse(id: &str) -> Result<Self, ResourceIdError> {
        let fail = |why| ResourceIdError {
            id: id.chars().take(300).collect(),
            why,
        };
        let path = id.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(fail("an empty segment"));
        }
        let [subscriptions, subscription, groups, group, rest @ ..] = segments.as_slice() else {
            return Err(fail(
                "it does not start /subscriptions/<id>/resourceGroups/<name>",
            ));
        };
        if !subscriptions.eq_ignore_ascii_case("subscriptions")
            || !groups.eq_ignore_ascii_case("resourceGroups")
        {
            return Err(fail(
                "it does not start /subscriptions/<id>/resourceGroups/<name>",
            ));
        }
        let (kind, parent, name) = match rest {
            [] => (ResourceType::ResourceGroup, None, *group),
            [providers, namespace, collection, name]
                if providers.eq_ignore_ascii_case("providers") =>
            {
                let kind = ResourceType::from_segments(Some(namespace), None, collection)
                    .ok_or_else(|| fail("an unknown resource type"))?;
                (kind, None, *name)
            }
            [providers, namespace, collection, parent, child, name]
                if providers.eq_ignore_ascii_case("providers") =>
            {
                let parent_kind = ResourceType::from_segments(Some(namespace), None, collection)
                    .ok_or_else(|| fail("an unknown resource type"))?;
                let kind = ResourceType::from_segments(Some(namespace), Some(parent_kind), child)
                    .ok_or_else(|| fail("an unknown child resource type"))?;
                (kind, Some((*parent).to_string()), *name)
            }
            _ => return Err(fail("an unexpected number of segments")),
        };
        Ok(Self {
            subscription: (*subscription).to_string(),
            resource_group: (*group).to_string(),
            kind,
            parent,
            name: name.to_string(),
        })
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/subscriptions/{}/resourceGroups/{}",
            self.subscription, self.resource_group
        )?;
        let Some(namespace) = self.kind.namespace() else {
            return Ok(());
        };
        match (self.kind.parent(), &self.parent) {
            (Some(parent_kind), Some(parent)) => write!(
                f,
                "/providers/{namespace}/{}/{parent}/{}/{}",
                parent_kind.collection(),
                self.kind.collection(),
                self.name
            ),
            _ => write!(
                f,
                "/providers/{namespace}/{}/{}",
                self.kind.collection(),
                self.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "5b3ab0a0-7f4c-4b4e-9d8f-1c2d3e4f5a6b";

    #[test]
    fn ids_print_as_arm_writes_them_and_parse_back_whatever_the_case() {
        let vnet = ResourceId::new(SUB, "demo", ResourceType::VirtualNetwork, "demo-vnet");
        let subnet = vnet.child(ResourceType::Subnet, "demo-node-subnet");
        assert_eq!(
            subnet.to_string(),
            format!(
                "/subscriptions/{SUB}/resourceGroups/demo/providers/Microsoft.Network/virtualNetworks/demo-vnet/subnets/demo-node-subnet"
            )
        );
        assert_eq!(
            ResourceId::resource_group(SUB, "demo").url_path(),
            format!("/subscriptions/{SUB}/resourceGroups/demo?api-version=2025-04-01")
        );
        for id in [
            ResourceId::resource_group(SUB, "demo"),
            vnet.clone(),
            subnet.clone(),
            ResourceId::new(SUB, "demo", ResourceType::VirtualMachine, "demo-cp-x"),
            ResourceId::new(
                SUB,
                "demo",
                ResourceType::PublicIpAddress,
                "pip-demo-apiserver",
            ),
        ] {
            assert_eq!(ResourceId::parse(&id.to_string()), Ok(id.clone()));
        }
        // CAPZ lower-cases the resource group in provider IDs; ARM answers with its own case.
        let lowered = ResourceId::parse(
            &subnet
                .to_string()
                .to_lowercase()
                .replace("demo-node", "DEMO-node"),
        )
        .unwrap();
        assert!(lowered.same(&subnet));
        assert_ne!(lowered, subnet);
    }

    #[test]
    fn what_is_not_an_id_of_a_known_kind_is_refused_saying_why() {
        for (id, why) in [
            ("/subscriptions/s", "does not start"),
            (
                "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/a",
                "unknown resource type",
            ),
            (
                "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/routes/r",
                "unknown child",
            ),
            (
                "/subscriptions/s/resourceGroups//providers",
                "empty segment",
            ),
            (
                "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks",
                "number of segments",
            ),
        ] {
            let error = ResourceId::parse(id).unwrap_err().to_string();
            assert!(error.contains(why), "{id}: {error}");
        }
    }
}
