//! The plan as cloud-init cloud-config.
//!
//! cloud-init reads YAML 1.1, where `yes`, `on`, `0640` or `1e3` are not strings. Every scalar is
//! therefore written double-quoted (with JSON's escapes, which YAML accepts), booleans are written
//! only where cloud-init expects booleans, and file contents are literal blocks with an explicit
//! indentation and chomping indicator — or base64 when they are not plain text.

use std::fmt::Write as _;

use base64::Engine;

use super::{BootstrapPlan, PlanFile, partition_type_code};
use crate::api::{DiskSetup, PartitionTableType};

/// Writes the plan as a `#cloud-config` document.
pub fn render(plan: &BootstrapPlan) -> String {
    let mut out = String::from("#cloud-config\n");
    if !plan.boot_commands.is_empty() {
        out.push_str("bootcmd:\n");
        for command in &plan.boot_commands {
            let _ = writeln!(out, "  - {}", quote(command));
        }
    }
    if let Some(disks) = &plan.disk_setup {
        disk_setup(&mut out, disks);
    }
    if !plan.mounts.is_empty() {
        out.push_str("mounts:\n");
        for mount in &plan.mounts {
            let fields: Vec<String> = mount.iter().map(|f| quote(f)).collect();
            let _ = writeln!(out, "  - [{}]", fields.join(", "));
        }
    }
    if !plan.files.is_empty() {
        out.push_str("write_files:\n");
        for file in &plan.files {
            write_file(&mut out, file);
        }
    }
    if !plan.users.is_empty() {
        out.push_str("users:\n");
        for user in &plan.users {
            let _ = writeln!(out, "  - name: {}", quote(&user.name));
            let optional = [
                ("gecos", &user.gecos),
                ("groups", &user.groups),
                ("homedir", &user.home_dir),
                ("shell", &user.shell),
                ("primary_group", &user.primary_group),
                ("sudo", &user.sudo),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    let _ = writeln!(out, "    {key}: {}", quote(value));
                }
            }
            if let Some(hash) = &user.passwd {
                let _ = writeln!(out, "    passwd: {}", quote(hash));
            }
            let _ = writeln!(
                out,
                "    lock_passwd: {}",
                user.lock_password.unwrap_or(true)
            );
            if !user.ssh_authorized_keys.is_empty() {
                out.push_str("    ssh_authorized_keys:\n");
                for key in &user.ssh_authorized_keys {
                    let _ = writeln!(out, "      - {}", quote(key));
                }
            }
        }
    }
    if let Some(ntp) = &plan.ntp {
        out.push_str("ntp:\n  enabled: true\n  servers:\n");
        for server in &ntp.servers {
            let _ = writeln!(out, "    - {}", quote(server));
        }
    }
    if !plan.commands.is_empty() {
        out.push_str("runcmd:\n");
        for command in &plan.commands {
            let _ = writeln!(out, "  - {}", quote(command));
        }
    }
    out
}

/// `disk_setup` (partition tables by device) and `fs_setup` (file systems). Partition types were
/// checked by [`super::plan`].
fn disk_setup(out: &mut String, disks: &DiskSetup) {
    if !disks.partitions.is_empty() {
        out.push_str("disk_setup:\n");
        for partition in &disks.partitions {
            let table = partition.table_type.unwrap_or(PartitionTableType::Mbr);
            let _ = writeln!(out, "  {}:", quote(&partition.device));
            let table_name = match table {
                PartitionTableType::Mbr => "mbr",
                PartitionTableType::Gpt => "gpt",
            };
            let _ = writeln!(out, "    table_type: {}", quote(table_name));
            if partition.disk_layout.is_empty() {
                let _ = writeln!(out, "    layout: {}", partition.layout.unwrap_or(false));
            } else {
                out.push_str("    layout:\n");
                for part in &partition.disk_layout {
                    match part
                        .partition_type
                        .as_deref()
                        .and_then(|name| partition_type_code(name, table))
                    {
                        None => {
                            let _ = writeln!(out, "      - {}", part.percentage);
                        }
                        Some(code) => {
                            let _ = writeln!(out, "      - [{}, {code}]", part.percentage);
                        }
                    }
                }
            }
            let _ = writeln!(
                out,
                "    overwrite: {}",
                partition.overwrite.unwrap_or(false)
            );
        }
    }
    if !disks.filesystems.is_empty() {
        out.push_str("fs_setup:\n");
        for fs in &disks.filesystems {
            let _ = writeln!(out, "  - device: {}", quote(&fs.device));
            let _ = writeln!(out, "    filesystem: {}", quote(&fs.filesystem));
            for (key, value) in [("label", &fs.label), ("replace_fs", &fs.replace_fs)] {
                if let Some(value) = value {
                    let _ = writeln!(out, "    {key}: {}", quote(value));
                }
            }
            // A partition number is an integer to cloud-init; `auto`, `any`, `none` are words.
            match fs.partition.as_deref().map(|p| (p, p.parse::<u32>())) {
                Some((_, Ok(number))) => {
                    let _ = writeln!(out, "    partition: {number}");
                }
                Some((word, Err(_))) => {
                    let _ = writeln!(out, "    partition: {}", quote(word));
                }
                None => {}
            }
            if let Some(overwrite) = fs.overwrite {
                let _ = writeln!(out, "    overwrite: {overwrite}");
            }
            if !fs.extra_opts.is_empty() {
                let opts: Vec<String> = fs.extra_opts.iter().map(|o| quote(o)).collect();
                let _ = writeln!(out, "    extra_opts: [{}]", opts.join(", "));
            }
        }
    }
}

fn write_file(out: &mut String, file: &PlanFile) {
    let _ = writeln!(out, "  - path: {}", quote(&file.path));
    let _ = writeln!(
        out,
        "    owner: {}",
        quote(&format!("{}:{}", file.user, file.group))
    );
    let _ = writeln!(
        out,
        "    permissions: {}",
        quote(&format!("{:04o}", file.mode))
    );
    if file.append {
        out.push_str("    append: true\n");
    }
    let text = std::str::from_utf8(&file.content)
        .ok()
        .filter(|t| is_plain_text(t));
    match (file.gzip, text) {
        // Nothing but line breaks (or nothing): a literal block would read back as empty.
        (false, Some(text)) if text.trim_end_matches('\n').is_empty() => {
            let _ = writeln!(out, "    content: {}", quote(text));
        }
        (false, Some(text)) => literal_block(out, text),
        (gzip, _) => {
            let encoding = if gzip { "gzip+base64" } else { "b64" };
            let _ = writeln!(out, "    encoding: {}", quote(encoding));
            let encoded = base64::engine::general_purpose::STANDARD.encode(&file.content);
            let _ = writeln!(out, "    content: {}", quote(&encoded));
        }
    }
}

/// Text a literal block can carry unchanged: no control characters but newline and tab, no
/// carriage returns, no byte-order mark.
fn is_plain_text(text: &str) -> bool {
    !text.chars().any(|c| {
        (c.is_control() && c != '\n' && c != '\t')
            || c == '\u{feff}'
            || c == '\u{2028}'
            || c == '\u{2029}'
            || c == '\u{85}'
    })
}

/// `content: |2` with the right chomping: strip (no final newline), clip (one), keep (more).
fn literal_block(out: &mut String, text: &str) {
    let trailing = text.len() - text.trim_end_matches('\n').len();
    let chomping = match trailing {
        0 => "-",
        1 => "",
        _ => "+",
    };
    let _ = writeln!(out, "    content: |2{chomping}");
    let body = text.strip_suffix('\n').unwrap_or(text);
    for line in body.split('\n') {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "      {line}");
        }
    }
}

/// A YAML double-quoted scalar (JSON string syntax, which YAML 1.1 and 1.2 both accept).
fn quote(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_file(content: &[u8]) -> String {
        let mut out = String::new();
        write_file(&mut out, &PlanFile::new("/etc/x", 0o640, content.to_vec()));
        out
    }

    #[test]
    fn yaml_1_1_traps_are_quoted() {
        let out = render_file(b"");
        assert!(out.contains("permissions: \"0640\""), "{out}");
        assert_eq!(quote("yes"), "\"yes\"");
        assert_eq!(quote("on"), "\"on\"");
    }

    #[test]
    fn literal_blocks_keep_exact_trailing_newlines() {
        assert!(render_file(b"a\nb").contains("content: |2-\n      a\n      b\n"));
        assert!(render_file(b"a\n").contains("content: |2\n      a\n"));
        assert!(render_file(b"a\n\n").contains("content: |2+\n      a\n\n"));
        assert!(render_file(b"  indented\n").contains("content: |2\n        indented\n"));
    }

    #[test]
    fn content_of_only_line_breaks_is_quoted() {
        assert!(render_file(b"").contains("content: \"\"\n"));
        assert!(render_file(b"\n").contains("content: \"\\n\"\n"));
        assert!(render_file(b"\n\n").contains("content: \"\\n\\n\"\n"));
    }

    #[test]
    fn disks_are_written_as_cloud_init_reads_them() {
        use crate::api::{DiskSetup, Filesystem, Partition, PartitionSpec, PartitionTableType};
        let mut out = String::new();
        disk_setup(
            &mut out,
            &DiskSetup {
                partitions: vec![Partition {
                    device: "/dev/vdb".into(),
                    disk_layout: vec![
                        PartitionSpec {
                            percentage: 60,
                            partition_type: None,
                        },
                        PartitionSpec {
                            percentage: 40,
                            partition_type: Some("LinuxSwap".into()),
                        },
                    ],
                    table_type: Some(PartitionTableType::Mbr),
                    ..Partition::default()
                }],
                filesystems: vec![Filesystem {
                    device: "/dev/vdb".into(),
                    filesystem: "ext4".into(),
                    partition: Some("2".into()),
                    ..Filesystem::default()
                }],
            },
        );
        assert!(
            out.contains("    layout:\n      - 60\n      - [40, 82]\n"),
            "{out}"
        );
        assert!(out.contains("    partition: 2\n"), "{out}");
    }

    #[test]
    fn binary_content_is_base64() {
        let out = render_file(&[0, 159, 146, 150]);
        assert!(out.contains("encoding: \"b64\""), "{out}");
        assert!(render_file(b"dos\r\nline").contains("encoding: \"b64\""));
    }
}
