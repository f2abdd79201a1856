//! Clients of workload clusters from kubeconfigs a tenant can write.
//!
//! A cluster's `<cluster>-kubeconfig` Secret lives in the tenant's namespace, and the tenant may
//! overwrite it. kube-client follows everything a kubeconfig says: it runs `users[].exec`
//! commands and auth-provider helpers, reads token, certificate and key files from the
//! manager's file system (its own ServiceAccount token among them) and sends what it read to the
//! `server` the document names, through the proxy it names. So a manager builds a workload
//! client only through [`workload_config`], which keeps exactly what a control plane writes.
//!
//! # Guarantees
//!
//! - Only the current context's cluster and user are read, and of them only: `server`,
//!   `certificate-authority-data`, `tls-server-name`; `client-certificate-data`,
//!   `client-key-data`, `token`. The client is built from a new kubeconfig holding those alone,
//!   so nothing else in the document can reach kube-client.
//! - Any other setting of that cluster or user is refused before anything is built: `exec`,
//!   `auth-provider`, `tokenFile`, `client-certificate`, `client-key`,
//!   `certificate-authority` (file paths), `proxy-url`, `insecure-skip-tls-verify: true`,
//!   `username`/`password`, impersonation. The error names the refused field by its position
//!   (`users[0].user.exec`), never its value or an entry's name.
//! - Errors never quote the document: the parser's messages, which can, are reduced to their
//!   kind.

use kube::config::{AuthInfo, Cluster, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster};

/// Why no client is built from a kubeconfig. The messages name fields, never values.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    /// The text is not a kubeconfig document.
    #[error("the value is not a kubeconfig document")]
    NotAKubeconfig,
    /// No current context, or it names a cluster or user the document does not hold.
    #[error("the kubeconfig has no usable current context ({0})")]
    NoContext(&'static str),
    /// The cluster or user in use sets what a workload client must never follow.
    #[error(
        "the kubeconfig sets {field}, which is refused: a workload cluster's kubeconfig may hold \
         only a server, inline CA data and an inline client certificate and key or token"
    )]
    Refused {
        /// The refused field, by position (`users[0].user.exec`).
        field: String,
    },
    /// The kept settings do not make a client configuration (a server URL that does not parse,
    /// CA or client data that is not valid base64 or PEM).
    #[error("the kubeconfig's server or credentials are not usable")]
    Unusable,
}

/// The client configuration of the workload cluster a kubeconfig document names, built from the
/// settings a control plane writes and nothing else; see the module documentation.
pub async fn workload_config(text: &str) -> Result<kube::Config, KubeconfigError> {
    let document = Kubeconfig::from_yaml(text).map_err(|_| KubeconfigError::NotAKubeconfig)?;
    let kept = kept(&document)?;
    kube::Config::from_custom_kubeconfig(kept, &KubeConfigOptions::default())
        .await
        .map_err(|_| KubeconfigError::Unusable)
}

/// The current context's cluster and user, checked and copied field by field.
fn kept(document: &Kubeconfig) -> Result<Kubeconfig, KubeconfigError> {
    let current = document
        .current_context
        .as_deref()
        .ok_or(KubeconfigError::NoContext("no current-context"))?;
    let context = document
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or(KubeconfigError::NoContext(
            "current-context names no context",
        ))?;
    let (index, cluster) = document
        .clusters
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == context.cluster)
        .and_then(|(i, c)| Some((i, c.cluster.as_ref()?)))
        .ok_or(KubeconfigError::NoContext("the context names no cluster"))?;
    let cluster = kept_cluster(index, cluster)?;
    let user_name = context
        .user
        .as_deref()
        .ok_or(KubeconfigError::NoContext("the context names no user"))?;
    let (index, user) = document
        .auth_infos
        .iter()
        .enumerate()
        .find(|(_, u)| u.name == user_name)
        .and_then(|(i, u)| Some((i, u.auth_info.as_ref()?)))
        .ok_or(KubeconfigError::NoContext("the context names no user"))?;
    let user = kept_user(index, user)?;
    Ok(Kubeconfig {
        clusters: vec![NamedCluster {
            name: "workload".into(),
            cluster: Some(cluster),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "workload".into(),
            auth_info: Some(user),
            other: Default::default(),
        }],
        contexts: vec![kube::config::NamedContext {
            name: "workload".into(),
            context: Some(kube::config::Context {
                cluster: "workload".into(),
                user: Some("workload".into()),
                ..kube::config::Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some("workload".into()),
        ..Kubeconfig::default()
    })
}

fn refused(field: String) -> KubeconfigError {
    KubeconfigError::Refused { field }
}

fn kept_cluster(index: usize, cluster: &Cluster) -> Result<Cluster, KubeconfigError> {
    let field = |name: &str| format!("clusters[{index}].cluster.{name}");
    if cluster.certificate_authority.is_some() {
        return Err(refused(field("certificate-authority")));
    }
    if cluster.proxy_url.is_some() {
        return Err(refused(field("proxy-url")));
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        return Err(refused(field("insecure-skip-tls-verify")));
    }
    Ok(Cluster {
        server: cluster.server.clone(),
        certificate_authority_data: cluster.certificate_authority_data.clone(),
        tls_server_name: cluster.tls_server_name.clone(),
        ..Cluster::default()
    })
}

fn kept_user(index: usize, user: &AuthInfo) -> Result<AuthInfo, KubeconfigError> {
    let field = |name: &str| format!("users[{index}].user.{name}");
    let set = [
        ("exec", user.exec.is_some()),
        ("auth-provider", user.auth_provider.is_some()),
        ("tokenFile", user.token_file.is_some()),
        ("client-certificate", user.client_certificate.is_some()),
        ("client-key", user.client_key.is_some()),
        ("username", user.username.is_some()),
        ("password", user.password.is_some()),
        ("as", user.impersonate.is_some()),
        ("as-uid", user.impersonate_uid.is_some()),
        ("as-groups", user.impersonate_groups.is_some()),
        ("as-user-extra", user.impersonate_user_extra.is_some()),
    ];
    if let Some((name, _)) = set.iter().find(|(_, present)| *present) {
        return Err(refused(field(name)));
    }
    Ok(AuthInfo {
        client_certificate_data: user.client_certificate_data.clone(),
        client_key_data: user.client_key_data.clone(),
        token: user.token.clone(),
        ..AuthInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig as a control plane writes it, with `extra` added to its user and `cluster`
    /// to its cluster.
    fn document(cluster: &str, user: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Config
current-context: admin@workload
contexts:
- name: admin@workload
  context: {{cluster: workload, user: admin}}
clusters:
- name: workload
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: ""
{cluster}
users:
- name: admin
  user:
    token: s3cr3t-token
{user}
"#
        )
    }

    async fn error_of(cluster: &str, user: &str) -> KubeconfigError {
        workload_config(&document(cluster, user))
            .await
            .expect_err("refused")
    }

    #[tokio::test]
    async fn what_a_control_plane_writes_is_accepted() {
        let config = workload_config(&document("", "")).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
    }

    #[tokio::test]
    async fn every_setting_that_runs_reads_or_reroutes_is_refused_by_name() {
        let cases = [
            (
                "",
                "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/pwned']}",
                "users[0].user.exec",
            ),
            (
                "",
                "    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}",
                "users[0].user.auth-provider",
            ),
            (
                "",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "users[0].user.tokenFile",
            ),
            (
                "",
                "    client-certificate: /etc/kubernetes/pki/admin.crt",
                "users[0].user.client-certificate",
            ),
            (
                "",
                "    client-key: /etc/kubernetes/pki/admin.key",
                "users[0].user.client-key",
            ),
            (
                "",
                "    username: admin\n    password: hunter2",
                "users[0].user.username",
            ),
            ("", "    as: system:admin", "users[0].user.as"),
            (
                "    certificate-authority: /etc/ssl/ca.crt",
                "",
                "clusters[0].cluster.certificate-authority",
            ),
            (
                "    proxy-url: http://10.0.0.1:3128",
                "",
                "clusters[0].cluster.proxy-url",
            ),
            (
                "    insecure-skip-tls-verify: true",
                "",
                "clusters[0].cluster.insecure-skip-tls-verify",
            ),
        ];
        for (cluster, user, field) in cases {
            let error = error_of(cluster, user).await;
            assert_eq!(
                error,
                KubeconfigError::Refused {
                    field: field.into()
                },
                "{cluster}{user}"
            );
            let message = error.to_string();
            for value in [
                "/bin/sh", "/var/run", "/etc/", "hunter2", "10.0.0.1", "s3cr3t",
            ] {
                assert!(!message.contains(value), "{message}");
            }
        }
    }

    #[tokio::test]
    async fn only_the_current_contexts_entries_are_read() {
        let text = document("", "").replace(
            "users:\n",
            "users:\n- name: unused\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}\n",
        );
        let config = workload_config(&text).await.unwrap();
        assert!(config.auth_info.exec.is_none());
        assert!(config.auth_info.token.is_some());
    }

    #[tokio::test]
    async fn a_document_that_does_not_parse_is_reported_without_its_content() {
        let error = workload_config("users: [ {name: s3cr3t-key-data")
            .await
            .expect_err("refused");
        assert_eq!(error, KubeconfigError::NotAKubeconfig);
        let no_context = document("", "").replace("current-context: admin@workload\n", "");
        assert!(matches!(
            workload_config(&no_context).await,
            Err(KubeconfigError::NoContext(_))
        ));
    }
}
