//! Octavia over a [`Session`].

use async_trait::async_trait;
use openstack_sdk::types::ServiceType;
use serde_json::json;

use super::session::{Call, Session};
use super::{CloudError, CloudResult, LbChild, LoadBalancer, LoadBalancing, Member};

const LB: ServiceType = ServiceType::LoadBalancer;

#[async_trait]
impl LoadBalancing for Session {
    async fn load_balancers_named(&self, name: &str) -> CloudResult<Vec<LoadBalancer>> {
        let found: Vec<LoadBalancer> = self
            .json(
                Call::get(LB, "lbaas/loadbalancers")
                    .param("name", name)
                    .key("loadbalancers"),
            )
            .await?;
        Ok(found
            .into_iter()
            .filter(|lb| lb.provisioning_status != "DELETED")
            .collect())
    }

    async fn get_load_balancer(&self, id: &str) -> CloudResult<Option<LoadBalancer>> {
        match self
            .json::<LoadBalancer>(
                Call::get(LB, format!("lbaas/loadbalancers/{id}")).key("loadbalancer"),
            )
            .await
        {
            Ok(lb) if lb.provisioning_status == "DELETED" => Ok(None),
            Ok(lb) => Ok(Some(lb)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_load_balancer(
        &self,
        name: &str,
        subnet_id: &str,
        provider: Option<String>,
        tags: &[String],
        description: &str,
    ) -> CloudResult<LoadBalancer> {
        let mut body = json!({
            "name": name, "vip_subnet_id": subnet_id, "description": description, "tags": tags,
        });
        if let Some(provider) = provider {
            body["provider"] = provider.into();
        }
        self.json(
            Call::post(LB, "lbaas/loadbalancers")
                .body(json!({ "loadbalancer": body }))
                .key("loadbalancer"),
        )
        .await
    }

    async fn delete_load_balancer(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(
            Call::delete(LB, format!("lbaas/loadbalancers/{id}")).param("cascade", "true"),
        )
        .await
    }

    async fn listeners(&self, lb_id: &str) -> CloudResult<Vec<LbChild>> {
        self.json(
            Call::get(LB, "lbaas/listeners")
                .param("loadbalancer_id", lb_id)
                .key("listeners"),
        )
        .await
    }

    async fn create_listener(
        &self,
        lb_id: &str,
        name: &str,
        port: u16,
        allowed_cidrs: &[String],
    ) -> CloudResult<LbChild> {
        let mut body = json!({
            "name": name, "loadbalancer_id": lb_id, "protocol": "TCP", "protocol_port": port,
        });
        if !allowed_cidrs.is_empty() {
            body["allowed_cidrs"] = json!(allowed_cidrs);
        }
        self.json(
            Call::post(LB, "lbaas/listeners")
                .body(json!({ "listener": body }))
                .key("listener"),
        )
        .await
    }

    async fn pools(&self, lb_id: &str) -> CloudResult<Vec<LbChild>> {
        self.json(
            Call::get(LB, "lbaas/pools")
                .param("loadbalancer_id", lb_id)
                .key("pools"),
        )
        .await
    }

    async fn create_pool(&self, listener_id: &str, name: &str) -> CloudResult<LbChild> {
        self.json(
            Call::post(LB, "lbaas/pools")
                .body(json!({"pool": {
                    "name": name, "listener_id": listener_id, "protocol": "TCP",
                    "lb_algorithm": "ROUND_ROBIN",
                }}))
                .key("pool"),
        )
        .await
    }

    async fn monitors(&self, pool_id: &str) -> CloudResult<Vec<LbChild>> {
        self.json(
            Call::get(LB, "lbaas/healthmonitors")
                .param("pool_id", pool_id)
                .key("healthmonitors"),
        )
        .await
    }

    async fn create_monitor(&self, pool_id: &str, name: &str) -> CloudResult<LbChild> {
        self.json(
            Call::post(LB, "lbaas/healthmonitors")
                .body(json!({"healthmonitor": {
                    "name": name, "pool_id": pool_id, "type": "TCP", "delay": 10, "timeout": 5,
                    "max_retries": 5, "max_retries_down": 3,
                }}))
                .key("healthmonitor"),
        )
        .await
    }

    async fn members(&self, pool_id: &str) -> CloudResult<Vec<Member>> {
        self.json(Call::get(LB, format!("lbaas/pools/{pool_id}/members")).key("members"))
            .await
    }

    async fn create_member(
        &self,
        pool_id: &str,
        name: &str,
        address: &str,
        port: u16,
        subnet_id: Option<String>,
    ) -> CloudResult<Member> {
        let mut body = json!({"name": name, "address": address, "protocol_port": port});
        if let Some(subnet) = subnet_id {
            body["subnet_id"] = subnet.into();
        }
        self.json(
            Call::post(LB, format!("lbaas/pools/{pool_id}/members"))
                .body(json!({ "member": body }))
                .key("member"),
        )
        .await
    }

    async fn delete_member(&self, pool_id: &str, member_id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(
            LB,
            format!("lbaas/pools/{pool_id}/members/{member_id}"),
        ))
        .await
    }
}
