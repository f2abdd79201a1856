//! Names of machines made from a template: upstream's `machineNaming.template`, a name with
//! `{{ .field }}` placeholders, filled in with the owner's facts and `{{ .random }}`.

/// Renders `template` with `fields` (`(".machineSet.name", "workers-abc12")`, …) and
/// `{{ .random }}` (five characters, [`crate::random_suffix`]). Errors name the template and
/// what is wrong with it: an unclosed or unknown placeholder, or a name over 63 characters.
pub fn machine_name(template: &str, fields: &[(&str, &str)]) -> Result<String, String> {
    let random = crate::random_suffix();
    let mut name = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        name.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            return Err(format!(
                "machineNaming.template {template:?}: unclosed {{{{"
            ));
        };
        let field = rest[start + 2..start + end].trim();
        match fields.iter().find(|(key, _)| *key == field) {
            Some((_, value)) => name.push_str(value),
            None if field == ".random" => name.push_str(&random),
            None => {
                let known: Vec<&str> = fields
                    .iter()
                    .map(|(key, _)| *key)
                    .chain([".random"])
                    .collect();
                return Err(format!(
                    "machineNaming.template {template:?}: unknown field {field:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        rest = &rest[start + end + 2..];
    }
    name.push_str(rest);
    if name.len() > 63 {
        return Err(format!(
            "machineNaming.template {template:?} makes {name:?}, longer than 63 characters"
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_bad_templates_are_named() {
        let fields = [(".machineSet.name", "workers"), (".cluster.name", "demo")];
        let name = machine_name(
            "{{ .cluster.name }}-{{ .machineSet.name }}-{{ .random }}",
            &fields,
        )
        .unwrap();
        assert!(name.starts_with("demo-workers-") && name.len() == "demo-workers-".len() + 5);
        let unknown = machine_name("{{ .node.name }}", &fields).unwrap_err();
        assert!(
            unknown.contains("unknown field \".node.name\""),
            "{unknown}"
        );
        assert!(
            machine_name("x-{{ .random", &fields)
                .unwrap_err()
                .contains("unclosed")
        );
        let long = "a".repeat(60) + "-{{ .random }}";
        assert!(
            machine_name(&long, &fields)
                .unwrap_err()
                .contains("longer than 63")
        );
    }
}
