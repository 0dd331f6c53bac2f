//! Loading flows from YAML: the same documents a user would `kubectl apply`.
//!
//! A standalone flow file holds one `MirrorFlow` and any number of `OffsetCheckpoint`s whose
//! `flowRef` names it, as multi-document YAML. Unknown fields are errors here (the API server
//! would silently prune them, and a typo such as `offsetValidaton` must not be ignored).

use std::path::Path;

use serde::de::DeserializeOwned;

use super::validate::{validate_checkpoint, validate_flow, ValidationErrors};
use super::{MirrorFlow, OffsetCheckpoint, GROUP, VERSION};

/// A flow with its checkpoint settings, as read from a file or the API.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowFile {
    pub flow: MirrorFlow,
    pub checkpoints: Vec<OffsetCheckpoint>,
}

/// Why a flow file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("document {doc}: invalid YAML: {message}")]
    Yaml { doc: usize, message: String },
    #[error(
        "document {doc}: unknown field {field} (check the spelling; see `kubectl explain {kind}`)"
    )]
    UnknownField {
        doc: usize,
        kind: String,
        field: String,
    },
    #[error("document {doc}: apiVersion {found:?} is not supported; use \"{GROUP}/{VERSION}\"")]
    ApiVersion { doc: usize, found: String },
    #[error("document {doc}: kind {found:?} is not supported; use MirrorFlow or OffsetCheckpoint")]
    Kind { doc: usize, found: String },
    #[error("document {doc} ({kind} {name}): {errors}")]
    Invalid {
        doc: usize,
        kind: String,
        name: String,
        errors: ValidationErrors,
    },
    #[error("{0}")]
    Structure(String),
}

/// Read and validate a flow file.
pub fn load_flow_file(path: &Path) -> Result<FlowFile, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_flow_file(&text)
}

/// Parse and validate multi-document YAML holding one MirrorFlow and its OffsetCheckpoints.
pub fn parse_flow_file(text: &str) -> Result<FlowFile, LoadError> {
    let mut flows = Vec::new();
    let mut checkpoints = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let doc = i + 1;
        let value = serde_yaml::Value::deserialize_from(de, doc)?;
        if value.is_null() {
            continue; // empty document, e.g. a trailing `---`
        }
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if api_version != format!("{GROUP}/{VERSION}") {
            return Err(LoadError::ApiVersion {
                doc,
                found: api_version.to_string(),
            });
        }
        match value.get("kind").and_then(|v| v.as_str()).unwrap_or("") {
            "MirrorFlow" => {
                let flow: MirrorFlow = strict(value, doc, "mirrorflow")?;
                validate_flow(&flow.spec).map_err(|errors| LoadError::Invalid {
                    doc,
                    kind: "MirrorFlow".into(),
                    name: display_name(&flow.metadata.name),
                    errors,
                })?;
                flows.push(flow);
            }
            "OffsetCheckpoint" => {
                let cp: OffsetCheckpoint = strict(value, doc, "offsetcheckpoint")?;
                validate_checkpoint(&cp.spec).map_err(|errors| LoadError::Invalid {
                    doc,
                    kind: "OffsetCheckpoint".into(),
                    name: display_name(&cp.metadata.name),
                    errors,
                })?;
                checkpoints.push(cp);
            }
            other => {
                return Err(LoadError::Kind {
                    doc,
                    found: other.to_string(),
                })
            }
        }
    }
    let flow = match flows.len() {
        1 => flows.pop().expect("one flow"),
        0 => {
            return Err(LoadError::Structure(
                "the file holds no MirrorFlow document".into(),
            ))
        }
        n => {
            return Err(LoadError::Structure(format!(
                "the file holds {n} MirrorFlow documents; a worker runs exactly one flow"
            )))
        }
    };
    let Some(flow_name) = flow.metadata.name.clone().filter(|n| !n.is_empty()) else {
        return Err(LoadError::Structure(
            "MirrorFlow: metadata.name is required".into(),
        ));
    };
    for cp in &checkpoints {
        if cp.spec.flow_ref.name != flow_name {
            return Err(LoadError::Structure(format!(
                "OffsetCheckpoint {}: spec.flowRef.name is {:?} but the file's MirrorFlow is {:?}",
                display_name(&cp.metadata.name),
                cp.spec.flow_ref.name,
                flow_name
            )));
        }
    }
    Ok(FlowFile { flow, checkpoints })
}

fn display_name(n: &Option<String>) -> String {
    n.clone().unwrap_or_else(|| "<unnamed>".into())
}

trait DeserializeDoc: Sized {
    fn deserialize_from(de: serde_yaml::Deserializer<'_>, doc: usize) -> Result<Self, LoadError>;
}

impl DeserializeDoc for serde_yaml::Value {
    fn deserialize_from(de: serde_yaml::Deserializer<'_>, doc: usize) -> Result<Self, LoadError> {
        serde::Deserialize::deserialize(de).map_err(|e| LoadError::Yaml {
            doc,
            message: e.to_string(),
        })
    }
}

/// Deserialize, turning any ignored (unknown) field into an error naming its path.
fn strict<T: DeserializeOwned>(
    value: serde_yaml::Value,
    doc: usize,
    kind: &str,
) -> Result<T, LoadError> {
    let mut unknown = Vec::new();
    let out: T = serde_ignored::deserialize(value, |path| {
        let p = path.to_string();
        // `status` is output-only and fine to carry around (e.g. from `kubectl get -o yaml`).
        // apiVersion/kind are checked above; kube's generated types skip them.
        if !p.starts_with("status") && p != "apiVersion" && p != "kind" {
            unknown.push(p)
        }
    })
    .map_err(|e| LoadError::Yaml {
        doc,
        message: e.to_string(),
    })?;
    if let Some(field) = unknown.into_iter().next() {
        return Err(LoadError::UnknownField {
            doc,
            kind: kind.to_string(),
            field,
        });
    }
    Ok(out)
}
