//! Cluster templates with clusterctl's variable syntax, so that a template written for
//! `clusterctl generate cluster --from` works here and the other way round:
//!
//! | form               | value                                                        |
//! |--------------------|--------------------------------------------------------------|
//! | `${VAR}`           | the variable; an error naming it when it is not set           |
//! | `${VAR:-default}`  | the variable, or `default` when it is unset or empty          |
//! | `${VAR:=default}`  | the same as `:-` (the assignment has no effect in a template) |
//! | `${VAR-default}`   | the variable, or `default` only when it is unset              |
//! | `${VAR=default}`   | the same as `-`                                               |
//!
//! Everything else, including a lone `$`, is copied unchanged.

use std::collections::{BTreeMap, BTreeSet};

/// Why a template could not be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// Variables without a default were not given.
    #[error(
        "value for variables [{}] is not set; set them in the environment or with the matching flags",
        .0.join(", ")
    )]
    Missing(Vec<String>),
    /// A `${` without its closing `}`.
    #[error("line {line}: `${{` is not closed")]
    Unclosed {
        /// 1-based line number.
        line: usize,
    },
    /// A reference whose name is not a variable name.
    #[error("line {line}: {text:?} is not a variable name (letters, digits and `_`)")]
    BadName {
        /// 1-based line number.
        line: usize,
        /// The text inside `${…}`.
        text: String,
    },
}

/// How a variable is referenced.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reference {
    Required,
    /// Default when unset or empty (`:-`, `:=`).
    DefaultIfEmpty(String),
    /// Default only when unset (`-`, `=`).
    DefaultIfUnset(String),
}

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Variable { name: String, reference: Reference },
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// The variables a template uses: required ones, and optional ones with their defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Variables {
    /// Used without a default somewhere.
    pub required: BTreeSet<String>,
    /// Always used with a default (the first one given).
    pub optional: BTreeMap<String, String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            literal.push_str(&rest[..start]);
            let line = text[..text.len() - rest.len() + start]
                .matches('\n')
                .count()
                + 1;
            let after = &rest[start + 2..];
            let end = closing_brace(after).ok_or(TemplateError::Unclosed { line })?;
            let inner = &after[..end];
            let split = inner.find([':', '-', '=']);
            let (name, reference) = match split {
                None => (inner, Reference::Required),
                Some(at) => {
                    let (name, operator) = inner.split_at(at);
                    let reference = if let Some(value) = operator
                        .strip_prefix(":-")
                        .or_else(|| operator.strip_prefix(":="))
                    {
                        Reference::DefaultIfEmpty(value.to_string())
                    } else if let Some(value) = operator
                        .strip_prefix('-')
                        .or_else(|| operator.strip_prefix('='))
                    {
                        Reference::DefaultIfUnset(value.to_string())
                    } else {
                        return Err(TemplateError::BadName {
                            line,
                            text: inner.to_string(),
                        });
                    };
                    (name, reference)
                }
            };
            if !valid_name(name) {
                return Err(TemplateError::BadName {
                    line,
                    text: inner.to_string(),
                });
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Variable {
                name: name.to_string(),
                reference,
            });
            rest = &after[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Self { pieces })
    }

    /// The variables the template uses (what `--list-variables` prints).
    pub fn variables(&self) -> Variables {
        let mut variables = Variables::default();
        for piece in &self.pieces {
            if let Piece::Variable { name, reference } = piece {
                match reference {
                    Reference::Required => {
                        variables.required.insert(name.clone());
                    }
                    Reference::DefaultIfEmpty(value) | Reference::DefaultIfUnset(value) => {
                        variables
                            .optional
                            .entry(name.clone())
                            .or_insert_with(|| value.clone());
                    }
                }
            }
        }
        for name in &variables.required {
            variables.optional.remove(name);
        }
        variables
    }

    /// Renders with `lookup`; every missing required variable is named in the error. A default
    /// may itself hold variables (`${A:-${B}}`), rendered when the default is taken.
    pub fn render(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, TemplateError> {
        self.render_with(&lookup)
    }

    fn render_with(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, TemplateError> {
        let default = |text: &str| Template::parse(text)?.render_with(lookup);
        let mut out = String::new();
        let mut missing = BTreeSet::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Variable { name, reference } => {
                    let value = lookup(name);
                    match (reference, value) {
                        (Reference::DefaultIfEmpty(d), Some(v)) if v.is_empty() => {
                            out.push_str(&default(d)?)
                        }
                        (_, Some(v)) => out.push_str(&v),
                        (Reference::Required, None) => {
                            missing.insert(name.clone());
                        }
                        (Reference::DefaultIfEmpty(d) | Reference::DefaultIfUnset(d), None) => {
                            out.push_str(&default(d)?)
                        }
                    }
                }
            }
        }
        if !missing.is_empty() {
            return Err(TemplateError::Missing(missing.into_iter().collect()));
        }
        Ok(out)
    }
}

/// The index of the `}` that closes a `${` whose body starts `text`, counting nested `${…}`.
fn closing_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 2;
                continue;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn every_form_as_clusterctl_reads_it() {
        let template =
            Template::parse("a=${A} b=${B:-bd} c=${C:=cd} d=${D-dd} e=${E=ed} $HOME $ {x}")
                .unwrap();
        let set = vars(&[("A", "1"), ("B", ""), ("C", "3"), ("D", ""), ("E", "5")]);
        assert_eq!(
            template.render(set).unwrap(),
            "a=1 b=bd c=3 d= e=5 $HOME $ {x}"
        );
        let unset = vars(&[("A", "1")]);
        assert_eq!(
            template.render(unset).unwrap(),
            "a=1 b=bd c=cd d=dd e=ed $HOME $ {x}"
        );
    }

    #[test]
    fn missing_required_variables_are_all_named() {
        let template = Template::parse("${B}\n${A}\n${A}\n${C:-x}").unwrap();
        assert_eq!(
            template.render(vars(&[])),
            Err(TemplateError::Missing(vec!["A".into(), "B".into()]))
        );
        let message = template.render(vars(&[])).unwrap_err().to_string();
        assert!(message.contains("[A, B]"), "{message}");
    }

    #[test]
    fn a_default_may_hold_variables_as_clusterctl_reads_it() {
        let template =
            Template::parse("ns: ${CLASS_NS:-${NAMESPACE}} x: ${X:-${Y:-deep}}").unwrap();
        assert_eq!(
            template.render(vars(&[("NAMESPACE", "demo")])).unwrap(),
            "ns: demo x: deep"
        );
        assert_eq!(
            template
                .render(vars(&[("CLASS_NS", "classes"), ("NAMESPACE", "demo")]))
                .unwrap(),
            "ns: classes x: deep"
        );
    }

    #[test]
    fn variables_lists_required_and_defaults() {
        let template = Template::parse("${A} ${B:-2} ${B:-3} ${C=} ${A:-1}").unwrap();
        let variables = template.variables();
        assert_eq!(variables.required, BTreeSet::from(["A".to_string()]));
        assert_eq!(
            variables.optional,
            BTreeMap::from([
                ("B".to_string(), "2".to_string()),
                ("C".to_string(), String::new())
            ])
        );
    }

    #[test]
    fn malformed_references_say_where() {
        assert_eq!(
            Template::parse("ok\n${OPEN"),
            Err(TemplateError::Unclosed { line: 2 })
        );
        assert!(matches!(
            Template::parse("${not a name}"),
            Err(TemplateError::BadName { line: 1, .. })
        ));
        assert!(matches!(
            Template::parse("${A:?x}"),
            Err(TemplateError::BadName { .. })
        ));
    }
}
