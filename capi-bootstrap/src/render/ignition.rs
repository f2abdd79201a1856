//! The plan as Ignition spec v3.3 JSON (Fedora CoreOS, Flatcar).
//!
//! Files become `storage.files` with `data:` URLs; users become `passwd.users` (a `sudo` rule becomes
//! a file in `/etc/sudoers.d`); NTP becomes a systemd-timesyncd drop-in; the commands become
//! `/etc/kubeadm.sh`, run once by `kubeadm.service`, which then disables itself and leaves a marker
//! so that a reboot does not run kubeadm again.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::{BootstrapPlan, PlanFile, RenderError};

/// The Ignition spec version written.
pub const SPEC_VERSION: &str = "3.3.0";
/// The script the unit runs.
pub const SCRIPT: &str = "/etc/kubeadm.sh";
/// The unit that runs it once.
pub const UNIT: &str = "kubeadm.service";
/// Its marker: present once kubeadm ran.
pub const DONE_MARKER: &str = "/etc/kubeadm.done";

/// Writes the plan as an Ignition config.
pub fn render(plan: &BootstrapPlan) -> Result<String, RenderError> {
    let unsupported = |field: &str, hint: &'static str| RenderError::Unsupported {
        field: field.to_string(),
        context: " with format ignition",
        hint,
    };
    if !plan.boot_commands.is_empty() {
        return Err(unsupported(
            "bootCommands",
            "run them from a systemd unit in ignition.containerLinuxConfig.additionalConfig",
        ));
    }
    if plan.disk_setup.is_some() {
        return Err(unsupported(
            "diskSetup",
            "declare storage.disks and storage.filesystems in ignition.containerLinuxConfig.additionalConfig",
        ));
    }
    if !plan.mounts.is_empty() {
        return Err(unsupported(
            "mounts",
            "declare mount units in ignition.containerLinuxConfig.additionalConfig",
        ));
    }
    let mut files: Vec<Value> = plan.files.iter().map(file).collect();
    let mut users = Vec::new();
    for user in &plan.users {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(user.name));
        if !user.ssh_authorized_keys.is_empty() {
            entry.insert("sshAuthorizedKeys".into(), json!(user.ssh_authorized_keys));
        }
        if let Some(groups) = &user.groups {
            let groups: Vec<&str> = groups
                .split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .collect();
            entry.insert("groups".into(), json!(groups));
        }
        for (key, value) in [
            ("passwordHash", &user.passwd),
            ("gecos", &user.gecos),
            ("homeDir", &user.home_dir),
            ("shell", &user.shell),
            ("primaryGroup", &user.primary_group),
        ] {
            if let Some(value) = value {
                entry.insert(key.into(), json!(value));
            }
        }
        users.push(Value::Object(entry));
        if let Some(rule) = &user.sudo {
            let sudoers = PlanFile::new(
                format!("/etc/sudoers.d/{}", user.name),
                0o440,
                format!("{} {rule}\n", user.name),
            );
            files.push(file(&sudoers));
        }
    }
    let mut units = vec![json!({"name": UNIT, "enabled": true, "contents": unit_contents()})];
    if let Some(ntp) = &plan.ntp {
        let config = format!("[Time]\nNTP={}\n", ntp.servers.join(" "));
        files.push(file(&PlanFile::new(
            "/etc/systemd/timesyncd.conf.d/cluster-api.conf",
            0o644,
            config,
        )));
        units.push(json!({"name": "systemd-timesyncd.service", "enabled": true}));
    }
    files.push(file(&PlanFile::new(SCRIPT, 0o700, script(&plan.commands))));

    if let Some(extra) = &plan.additional_ignition {
        merge_additional(extra, &mut files, &mut units, &mut users)?;
    }
    let mut config = Map::new();
    config.insert("ignition".into(), json!({"version": SPEC_VERSION}));
    if !users.is_empty() {
        config.insert("passwd".into(), json!({"users": users}));
    }
    config.insert("storage".into(), json!({"files": files}));
    config.insert("systemd".into(), json!({"units": units}));
    serde_json::to_string_pretty(&Value::Object(config))
        .map_err(|e| RenderError::InvalidAdditionalConfig(e.to_string()))
}

fn data_url(content: &[u8]) -> String {
    format!(
        "data:;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(content)
    )
}

fn file(file: &PlanFile) -> Value {
    let mut resource = Map::new();
    resource.insert("source".into(), json!(data_url(&file.content)));
    if file.gzip {
        resource.insert("compression".into(), json!("gzip"));
    }
    let mut entry = Map::new();
    entry.insert("path".into(), json!(file.path));
    entry.insert("mode".into(), json!(file.mode));
    entry.insert("user".into(), json!({"name": file.user}));
    entry.insert("group".into(), json!({"name": file.group}));
    if file.append {
        entry.insert("append".into(), json!([resource]));
    } else {
        entry.insert("overwrite".into(), json!(true));
        entry.insert("contents".into(), Value::Object(resource));
    }
    Value::Object(entry)
}

fn script(commands: &[String]) -> String {
    let mut script = String::from(
        "#!/bin/bash\n# Written by capi-bootstrap: pre-kubeadm commands, kubeadm, post-kubeadm commands.\nset -euo pipefail\n",
    );
    for command in commands {
        script.push_str(command);
        script.push('\n');
    }
    script
}

fn unit_contents() -> String {
    format!(
        "[Unit]\nDescription=Bootstrap this node with kubeadm (once)\nWants=network-online.target\n\
         After=network-online.target\nConditionPathExists=!{DONE_MARKER}\n\n[Service]\nType=oneshot\n\
         RemainAfterExit=yes\nExecStart={SCRIPT}\nExecStartPost=/usr/bin/touch {DONE_MARKER}\n\
         ExecStartPost=/usr/bin/systemctl disable {UNIT}\n\n[Install]\nWantedBy=multi-user.target\n"
    )
}

/// Appends `storage.files`, `systemd.units` and `passwd.users` of an Ignition fragment. Any other
/// content is refused rather than silently dropped.
fn merge_additional(
    extra: &Value,
    files: &mut Vec<Value>,
    units: &mut Vec<Value>,
    users: &mut Vec<Value>,
) -> Result<(), RenderError> {
    let Value::Object(top) = extra else {
        return Err(RenderError::InvalidAdditionalConfig(
            "expected a JSON object".into(),
        ));
    };
    for (key, value) in top {
        let (section, list) = match key.as_str() {
            "ignition" => continue,
            "storage" => ("files", &mut *files),
            "systemd" => ("units", &mut *units),
            "passwd" => ("users", &mut *users),
            other => {
                return Err(RenderError::InvalidAdditionalConfig(format!(
                    "unsupported section {other:?}"
                )));
            }
        };
        let Value::Object(fields) = value else {
            return Err(RenderError::InvalidAdditionalConfig(format!(
                "{key} must be an object"
            )));
        };
        for (field, items) in fields {
            if field != section {
                return Err(RenderError::InvalidAdditionalConfig(format!(
                    "unsupported field {key}.{field}"
                )));
            }
            let Value::Array(items) = items else {
                return Err(RenderError::InvalidAdditionalConfig(format!(
                    "{key}.{field} must be a list"
                )));
            };
            list.extend(items.iter().cloned());
        }
    }
    Ok(())
}
