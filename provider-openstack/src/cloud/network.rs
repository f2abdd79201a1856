//! Neutron over a [`Session`].

use async_trait::async_trait;
use openstack_sdk::types::ServiceType;
use serde_json::json;

use super::session::{Call, Session};
use super::{
    CloudError, CloudResult, FloatingIp, Network, Networking, NeutronResource, Port,
    PortAddressPair, PortCreate, Router, SecurityGroup, SecurityGroupRule, Subnet,
};

const NET: ServiceType = ServiceType::Network;

#[async_trait]
impl Networking for Session {
    async fn networks(&self, query: &[(String, String)]) -> CloudResult<Vec<Network>> {
        self.json(Call::get(NET, "networks").query(query).key("networks"))
            .await
    }

    async fn create_network(&self, name: &str, description: &str) -> CloudResult<Network> {
        self.json(
            Call::post(NET, "networks")
                .body(json!({"network": {"name": name, "description": description, "admin_state_up": true}}))
                .key("network"),
        )
        .await
    }

    async fn delete_network(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("networks/{id}")))
            .await
    }

    async fn subnets(&self, query: &[(String, String)]) -> CloudResult<Vec<Subnet>> {
        self.json(Call::get(NET, "subnets").query(query).key("subnets"))
            .await
    }

    async fn create_subnet(
        &self,
        network_id: &str,
        name: &str,
        cidr: &str,
        dns_nameservers: &[String],
        description: &str,
    ) -> CloudResult<Subnet> {
        self.json(
            Call::post(NET, "subnets")
                .body(json!({"subnet": {
                    "network_id": network_id, "name": name, "cidr": cidr, "ip_version": 4,
                    "dns_nameservers": dns_nameservers, "description": description,
                }}))
                .key("subnet"),
        )
        .await
    }

    async fn delete_subnet(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("subnets/{id}")))
            .await
    }

    async fn routers(&self, query: &[(String, String)]) -> CloudResult<Vec<Router>> {
        self.json(Call::get(NET, "routers").query(query).key("routers"))
            .await
    }

    async fn create_router(
        &self,
        name: &str,
        external_network_id: Option<String>,
        description: &str,
    ) -> CloudResult<Router> {
        let mut router = json!({"name": name, "description": description, "admin_state_up": true});
        if let Some(network) = external_network_id {
            router["external_gateway_info"] = json!({"network_id": network});
        }
        self.json(
            Call::post(NET, "routers")
                .body(json!({ "router": router }))
                .key("router"),
        )
        .await
    }

    async fn add_router_interface(&self, router_id: &str, subnet_id: &str) -> CloudResult<()> {
        let call = Call::put(NET, format!("routers/{router_id}/add_router_interface"))
            .body(json!({ "subnet_id": subnet_id }));
        match self.send(call).await {
            // Neutron refuses a second interface on the same subnet: it is already attached.
            Err(CloudError::Rejected { message, .. })
                if message.contains("already has a port") || message.contains("overlaps") =>
            {
                Ok(())
            }
            other => other,
        }
    }

    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> CloudResult<()> {
        let call = Call::put(NET, format!("routers/{router_id}/remove_router_interface"))
            .body(json!({ "subnet_id": subnet_id }));
        self.send_ignoring_404(call).await
    }

    async fn delete_router(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("routers/{id}")))
            .await
    }

    async fn security_groups(&self, query: &[(String, String)]) -> CloudResult<Vec<SecurityGroup>> {
        self.json(
            Call::get(NET, "security-groups")
                .query(query)
                .key("security_groups"),
        )
        .await
    }

    async fn create_security_group(
        &self,
        name: &str,
        description: &str,
    ) -> CloudResult<SecurityGroup> {
        self.json(
            Call::post(NET, "security-groups")
                .body(json!({"security_group": {"name": name, "description": description}}))
                .key("security_group"),
        )
        .await
    }

    async fn create_security_group_rule(
        &self,
        group_id: &str,
        rule: &SecurityGroupRule,
    ) -> CloudResult<()> {
        let mut body = serde_json::to_value(rule).map_err(|e| CloudError::Transient {
            what: "encoding a security group rule".into(),
            message: e.to_string(),
        })?;
        body["security_group_id"] = group_id.into();
        let call =
            Call::post(NET, "security-group-rules").body(json!({ "security_group_rule": body }));
        match self.send(call).await {
            // The same rule exists already (a retry after a crash).
            Err(CloudError::Conflict { .. }) => Ok(()),
            other => other,
        }
    }

    async fn delete_security_group_rule(&self, rule_id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("security-group-rules/{rule_id}")))
            .await
    }

    async fn delete_security_group(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("security-groups/{id}")))
            .await
    }

    async fn ports(&self, query: &[(String, String)]) -> CloudResult<Vec<Port>> {
        self.json(Call::get(NET, "ports").query(query).key("ports"))
            .await
    }

    async fn create_port(&self, port: &PortCreate) -> CloudResult<Port> {
        let mut body = json!({
            "name": port.name,
            "description": port.description,
            "network_id": port.network_id,
            "security_groups": port.security_group_ids,
            "admin_state_up": true,
        });
        if !port.fixed_ips.is_empty() {
            body["fixed_ips"] = json!(port.fixed_ips);
        }
        if !port.allowed_address_pairs.is_empty() {
            body["allowed_address_pairs"] = json!(port.allowed_address_pairs);
        }
        let mut created: Port = self
            .json(
                Call::post(NET, "ports")
                    .body(json!({ "port": body }))
                    .key("port"),
            )
            .await?;
        if !port.tags.is_empty() {
            self.set_tags(Port::COLLECTION, &created.id, &port.tags)
                .await?;
            // The answer to the create was written before the tags.
            created.tags = port.tags.clone();
        }
        Ok(created)
    }

    async fn set_allowed_address_pairs(
        &self,
        port_id: &str,
        pairs: &[PortAddressPair],
    ) -> CloudResult<()> {
        self.send(
            Call::put(NET, format!("ports/{port_id}"))
                .body(json!({"port": {"allowed_address_pairs": pairs}})),
        )
        .await
    }

    async fn delete_port(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("ports/{id}")))
            .await
    }

    async fn set_tags(&self, resource: &str, id: &str, tags: &[String]) -> CloudResult<()> {
        self.send(Call::put(NET, format!("{resource}/{id}/tags")).body(json!({ "tags": tags })))
            .await
    }

    async fn floating_ips(&self, query: &[(String, String)]) -> CloudResult<Vec<FloatingIp>> {
        self.json(
            Call::get(NET, "floatingips")
                .query(query)
                .key("floatingips"),
        )
        .await
    }

    async fn create_floating_ip(
        &self,
        network_id: &str,
        address: Option<String>,
        port_id: Option<String>,
        description: &str,
    ) -> CloudResult<FloatingIp> {
        let mut body = json!({"floating_network_id": network_id, "description": description});
        if let Some(address) = address {
            body["floating_ip_address"] = address.into();
        }
        if let Some(port) = port_id {
            body["port_id"] = port.into();
        }
        self.json(
            Call::post(NET, "floatingips")
                .body(json!({ "floatingip": body }))
                .key("floatingip"),
        )
        .await
    }

    async fn associate_floating_ip(&self, id: &str, port_id: Option<String>) -> CloudResult<()> {
        self.send(
            Call::put(NET, format!("floatingips/{id}"))
                .body(json!({"floatingip": {"port_id": port_id}})),
        )
        .await
    }

    async fn delete_floating_ip(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(NET, format!("floatingips/{id}")))
            .await
    }
}
