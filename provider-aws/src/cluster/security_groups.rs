//! The cluster's security groups, one per role, and their ingress rules (CAPA's defaults):
//!
//! - `apiserver-lb`: the API server port from anywhere (or the load balancer's `ingressRules`);
//! - `controlplane`: the API server port from the load balancer, control planes and nodes;
//!   etcd (2379) and its peers (2380) from control planes; the CNI's rules;
//!   `additionalControlPlaneIngressRules`;
//! - `node`: NodePort services (30000–32767) from anywhere; the kubelet (10250) from control
//!   planes and nodes; the CNI's rules; `additionalNodeIngressRules`;
//! - `lb`: no rules (the cloud provider gives it to Service load balancers).
//!
//! The CNI's rules are the spec's `cni.cniIngressRules`, or Calico's (BGP on 179, IP-in-IP)
//! when the spec says nothing, each from control planes and nodes. Rules are converged: what is
//! missing is added, what nobody asked for is removed — on the cluster's own groups only; a group
//! of `securityGroupOverrides` is used as it is.

use std::collections::BTreeMap;

use capi_core::ActuatorError;

use super::Ctx;
use crate::api::{
    IngressRule, NetworkStatus, SecurityGroupProtocol, SecurityGroupRole, SecurityGroupStatus,
};
use crate::cloud::{Permission, PermissionSource, SecurityGroup};
use crate::naming::{OWNED, ROLE_TAG, Role};

fn rule(
    description: &str,
    protocol: &str,
    ports: (i32, i32),
    source: PermissionSource,
) -> Permission {
    Permission {
        protocol: protocol.to_string(),
        from_port: ports.0,
        to_port: ports.1,
        source,
        description: description.to_string(),
    }
}

fn port(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(-1)
}

/// The permissions of a user's rule (`sourceSecurityGroupRoles` resolved with `ids`).
fn from_spec(spec: &IngressRule, ids: &BTreeMap<SecurityGroupRole, String>) -> Vec<Permission> {
    let all = spec.protocol == SecurityGroupProtocol::All;
    let ports = if all {
        (-1, -1)
    } else {
        (port(spec.from_port), port(spec.to_port))
    };
    let mut sources: Vec<PermissionSource> = spec
        .cidr_blocks
        .iter()
        .map(|c| PermissionSource::Cidr(c.clone()))
        .collect();
    sources.extend(
        spec.source_security_group_ids
            .iter()
            .map(|g| PermissionSource::Group(g.clone())),
    );
    sources.extend(
        spec.source_security_group_roles
            .iter()
            .filter_map(|r| ids.get(r))
            .map(|g| PermissionSource::Group(g.clone())),
    );
    sources
        .into_iter()
        .map(|source| rule(&spec.description, spec.protocol.as_str(), ports, source))
        .collect()
}

/// The rules `role`'s group should have, given every role's group ID.
pub(crate) fn desired(
    ctx: &Ctx,
    role: SecurityGroupRole,
    ids: &BTreeMap<SecurityGroupRole, String>,
) -> Vec<Permission> {
    let group = |r: SecurityGroupRole| ids.get(&r).map(|id| PermissionSource::Group(id.clone()));
    let anywhere = || PermissionSource::Cidr("0.0.0.0/0".into());
    let api = i32::from(ctx.api_server_port);
    let network = &ctx.cluster.spec.network;
    let cni = || -> Vec<Permission> {
        let sources = [
            group(SecurityGroupRole::ControlPlane),
            group(SecurityGroupRole::Node),
        ];
        let rules: Vec<(String, String, (i32, i32))> = match &network.cni {
            Some(cni) => cni
                .cni_ingress_rules
                .iter()
                .map(|r| {
                    let all = r.protocol == SecurityGroupProtocol::All;
                    (
                        r.description.clone(),
                        r.protocol.as_str().to_string(),
                        if all {
                            (-1, -1)
                        } else {
                            (port(r.from_port), port(r.to_port))
                        },
                    )
                })
                .collect(),
            None => vec![
                ("bgp (calico)".into(), "tcp".into(), (179, 179)),
                ("IP-in-IP (calico)".into(), "4".into(), (-1, -1)),
            ],
        };
        rules
            .iter()
            .flat_map(|(description, protocol, ports)| {
                sources
                    .iter()
                    .flatten()
                    .map(|s| rule(description, protocol, *ports, s.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let mut rules = Vec::new();
    match role {
        SecurityGroupRole::ApiServerLb => {
            let custom = ctx
                .cluster
                .spec
                .control_plane_load_balancer
                .as_ref()
                .map(|lb| lb.ingress_rules.as_slice())
                .unwrap_or_default();
            if custom.is_empty() {
                rules.push(rule("Kubernetes API", "tcp", (api, api), anywhere()));
            } else {
                rules.extend(custom.iter().flat_map(|r| from_spec(r, ids)));
            }
        }
        SecurityGroupRole::Lb => {}
        SecurityGroupRole::ControlPlane => {
            for source in [
                SecurityGroupRole::ApiServerLb,
                SecurityGroupRole::ControlPlane,
                SecurityGroupRole::Node,
            ] {
                rules.extend(group(source).map(|s| rule("Kubernetes API", "tcp", (api, api), s)));
            }
            if let Some(cp) = group(SecurityGroupRole::ControlPlane) {
                rules.push(rule("etcd", "tcp", (2379, 2379), cp.clone()));
                rules.push(rule("etcd peer", "tcp", (2380, 2380), cp));
            }
            rules.extend(cni());
            rules.extend(
                network
                    .additional_control_plane_ingress_rules
                    .iter()
                    .flat_map(|r| from_spec(r, ids)),
            );
        }
        SecurityGroupRole::Node => {
            rules.push(rule(
                "Node Port Services",
                "tcp",
                (30000, 32767),
                anywhere(),
            ));
            for source in [SecurityGroupRole::ControlPlane, SecurityGroupRole::Node] {
                rules.extend(group(source).map(|s| rule("Kubelet API", "tcp", (10250, 10250), s)));
            }
            rules.extend(cni());
            rules.extend(
                network
                    .additional_node_ingress_rules
                    .iter()
                    .flat_map(|r| from_spec(r, ids)),
            );
        }
    }
    let mut unique: Vec<Permission> = Vec::new();
    for r in rules {
        if !unique.iter().any(|u| u.same_rule(&r)) {
            unique.push(r);
        }
    }
    unique
}

/// The groups (found by their role tag, or created), then their rules; fills
/// `status.securityGroups`.
pub(super) async fn reconcile(ctx: &Ctx, status: &mut NetworkStatus) -> Result<(), ActuatorError> {
    let Some(vpc) = status.vpc.as_ref().map(|v| v.id.clone()) else {
        return Ok(());
    };
    let network = &ctx.clients.network;
    let overrides = &ctx.cluster.spec.network.security_group_overrides;
    let existing = network
        .security_groups(&ctx.owned_and(&[("vpc-id", &vpc)]))
        .await
        .map_err(|e| ctx.error(e))?;
    let mut groups: BTreeMap<SecurityGroupRole, SecurityGroup> = BTreeMap::new();
    let mut ids: BTreeMap<SecurityGroupRole, String> = BTreeMap::new();
    for role in SecurityGroupRole::ALL {
        if let Some(id) = overrides.get(role.as_str()) {
            ids.insert(role, id.clone());
            status.security_groups.insert(
                role.as_str().to_string(),
                SecurityGroupStatus {
                    id: id.clone(),
                    name: String::new(),
                },
            );
            continue;
        }
        let found = existing
            .iter()
            .find(|g| g.tags.get(ROLE_TAG).map(String::as_str) == Some(role.as_str()));
        let group = match found {
            Some(group) => group.clone(),
            None => {
                let name = ctx.naming.security_group(role);
                let mut tags = ctx.tags(Role::SecurityGroup(role), &name);
                if role == SecurityGroupRole::Lb {
                    // The cloud provider gives this group to the Service load balancers it
                    // makes for the cluster.
                    tags.insert(ctx.naming.kubernetes_cluster_tag(), OWNED.to_string());
                }
                let description = format!("Kubernetes cluster {}: {}", ctx.name, role.as_str());
                network
                    .create_security_group(&vpc, &name, &description, &tags)
                    .await
                    .map_err(|e| ctx.error(e))?
            }
        };
        ids.insert(role, group.id.clone());
        status.security_groups.insert(
            role.as_str().to_string(),
            SecurityGroupStatus {
                id: group.id.clone(),
                name: group.name.clone(),
            },
        );
        groups.insert(role, group);
    }
    for (role, group) in &groups {
        let wanted = desired(ctx, *role, &ids);
        let missing: Vec<Permission> = wanted
            .iter()
            .filter(|w| !group.ingress.iter().any(|have| have.same_rule(w)))
            .cloned()
            .collect();
        let extra: Vec<Permission> = group
            .ingress
            .iter()
            .filter(|have| !wanted.iter().any(|w| w.same_rule(have)))
            .cloned()
            .collect();
        network
            .revoke_ingress(&group.id, &extra)
            .await
            .map_err(|e| ctx.error(e))?;
        network
            .authorize_ingress(&group.id, &missing)
            .await
            .map_err(|e| ctx.error(e))?;
    }
    Ok(())
}
