//! Nova and Glance over a [`Session`].

use async_trait::async_trait;
use base64::Engine;
use openstack_sdk::types::ServiceType;
use serde_json::json;

use super::session::{Call, Session};
use super::{CloudError, CloudResult, Compute, Flavor, Image, Images, Named, Server, ServerCreate};

/// Whether `s` has the shape of an OpenStack UUID (so it is tried as an ID before as a name).
pub(crate) fn looks_like_uuid(s: &str) -> bool {
    let hex = s.chars().filter(|c| *c != '-').count();
    hex == 32 && s.len() == 36 && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

/// Nova's `name` filter is a regular expression: anchor and escape it to match exactly.
fn exact_name_regex(name: &str) -> String {
    let mut out = String::from("^");
    for c in name.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

#[async_trait]
impl Compute for Session {
    async fn get_server(&self, id: &str) -> CloudResult<Option<Server>> {
        match self
            .json::<Server>(Call::get(ServiceType::Compute, format!("servers/{id}")).key("server"))
            .await
        {
            Ok(server) if server.status == "DELETED" => Ok(None),
            Ok(server) => Ok(Some(server)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn servers_named(&self, name: &str) -> CloudResult<Vec<Server>> {
        let servers: Vec<Server> = self
            .json(
                Call::get(ServiceType::Compute, "servers/detail")
                    .param("name", exact_name_regex(name))
                    .key("servers"),
            )
            .await?;
        Ok(servers
            .into_iter()
            .filter(|s| s.name == name && s.status != "DELETED")
            .collect())
    }

    async fn servers_tagged(&self, tag: &str) -> CloudResult<Vec<Server>> {
        let servers: Vec<Server> = self
            .json(
                Call::get(ServiceType::Compute, "servers/detail")
                    .param("tags", tag)
                    .key("servers"),
            )
            .await?;
        Ok(servers
            .into_iter()
            .filter(|s| s.status != "DELETED")
            .collect())
    }

    async fn create_server(&self, server: &ServerCreate) -> CloudResult<Server> {
        let mut body = json!({
            "name": server.name,
            "flavorRef": server.flavor_id,
            "imageRef": server.image_id,
            "networks": server.port_ids.iter().map(|p| json!({"port": p})).collect::<Vec<_>>(),
            "user_data": base64::engine::general_purpose::STANDARD.encode(&server.user_data),
            "metadata": server.metadata,
            "config_drive": server.config_drive,
        });
        if let Some(key) = &server.key_name {
            body["key_name"] = key.clone().into();
        }
        if !server.tags.is_empty() {
            body["tags"] = server.tags.clone().into();
        }
        if let Some(zone) = &server.availability_zone {
            body["availability_zone"] = zone.clone().into();
        }
        let mut request = json!({ "server": body });
        if let Some(group) = &server.server_group_id {
            request["os:scheduler_hints"] = json!({ "group": group });
        }
        #[derive(serde::Deserialize)]
        struct Created {
            id: String,
        }
        let created: Created = self
            .json(
                Call::post(ServiceType::Compute, "servers")
                    .body(request)
                    .key("server"),
            )
            .await?;
        Ok(Server {
            id: created.id,
            name: server.name.clone(),
            status: "BUILD".into(),
            metadata: server.metadata.clone(),
            tags: server.tags.clone(),
            ..Server::default()
        })
    }

    async fn delete_server(&self, id: &str) -> CloudResult<()> {
        self.send_ignoring_404(Call::delete(ServiceType::Compute, format!("servers/{id}")))
            .await
    }

    async fn find_flavor(&self, name_or_id: &str) -> CloudResult<Option<Flavor>> {
        match self
            .json::<Flavor>(
                Call::get(ServiceType::Compute, format!("flavors/{name_or_id}")).key("flavor"),
            )
            .await
        {
            Ok(flavor) => return Ok(Some(flavor)),
            Err(CloudError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let flavors: Vec<Flavor> = self
            .json(
                Call::get(ServiceType::Compute, "flavors/detail")
                    .param("is_public", "None")
                    .key("flavors"),
            )
            .await?;
        Ok(flavors.into_iter().find(|f| f.name == name_or_id))
    }

    async fn find_server_group(&self, name_or_id: &str) -> CloudResult<Option<Named>> {
        let groups: Vec<Named> = self
            .json(Call::get(ServiceType::Compute, "os-server-groups").key("server_groups"))
            .await?;
        Ok(groups
            .into_iter()
            .find(|g| g.id == name_or_id || g.name == name_or_id))
    }
}

#[async_trait]
impl Images for Session {
    async fn find_images(&self, name_or_id: &str, tags: &[String]) -> CloudResult<Vec<Image>> {
        if looks_like_uuid(name_or_id) {
            match self
                .json::<Image>(Call::get(
                    ServiceType::Image,
                    format!("images/{name_or_id}"),
                ))
                .await
            {
                Ok(image) => return Ok(vec![image]),
                Err(CloudError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut call = Call::get(ServiceType::Image, "images")
            .param("name", name_or_id)
            .param("status", "active")
            .key("images");
        for tag in tags {
            call = call.param("tag", tag.clone());
        }
        self.json(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_matched_exactly_by_nova_regex() {
        assert_eq!(exact_name_regex("a.b-c(1)"), r"^a\.b-c\(1\)$");
    }

    #[test]
    fn uuids_are_recognised() {
        assert!(looks_like_uuid("0b7c1b4e-8a5d-4c1f-9a11-2f6c6b5f0e1d"));
        assert!(!looks_like_uuid("ubuntu-2404"));
        assert!(!looks_like_uuid("0b7c1b4e8a5d4c1f9a112f6c6b5f0e1d"));
    }
}
