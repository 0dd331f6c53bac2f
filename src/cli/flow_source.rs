//! Where an operator command finds its flow: `--flow FILE` (Secrets from `--secrets-dir`) or
//! `--flow-ref NAMESPACE/NAME` (the MirrorFlow and the Secrets its clusters reference, read
//! through the API into a private temporary directory, so clients are built as in a pod).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::{kube_client, read_flow};
use crate::api::{load_flow_file, ClusterSpec, MirrorFlow, MirrorFlowSpec};
use crate::worker::process::k8s::parse_flow_ref;

/// `--flow` / `--flow-ref` and `--secrets-dir`, flattened into a command's arguments.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FlowSource {
    /// Flow file holding the MirrorFlow (clusters, aliases, secret references).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "flow_ref",
        conflicts_with = "flow_ref"
    )]
    pub flow: Option<PathBuf>,
    /// The MirrorFlow in a cluster (default kubeconfig); the Secrets its clusters reference
    /// are read through the API too.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub flow_ref: Option<String>,
    /// Directory holding the referenced Secrets as `<secretName>/<key>` files (with `--flow`).
    #[arg(
        long,
        value_name = "DIR",
        env = "MIRRORFLOW_SECRETS_DIR",
        default_value = crate::api::SECRETS_DIR
    )]
    pub secrets_dir: PathBuf,
}

impl FlowSource {
    /// `--flow FILE` with Secrets under `secrets_dir`.
    pub fn file(path: impl Into<PathBuf>, secrets_dir: impl Into<PathBuf>) -> Self {
        Self {
            flow: Some(path.into()),
            flow_ref: None,
            secrets_dir: secrets_dir.into(),
        }
    }

    /// Loads the flow; through the API, only the Secrets of the clusters `sides` names.
    pub async fn load(&self, sides: &[Side]) -> anyhow::Result<LoadedFlow> {
        match (&self.flow, &self.flow_ref) {
            (Some(path), None) => {
                let file =
                    load_flow_file(path).with_context(|| format!("--flow {}", path.display()))?;
                Ok(LoadedFlow {
                    flow: file.flow,
                    secrets: Secrets::Given(self.secrets_dir.clone()),
                })
            }
            (None, Some(flow_ref)) => {
                let (ns, name) = parse_flow_ref(flow_ref)?;
                load_from_api(&kube_client().await?, &ns, &name, sides).await
            }
            _ => bail!("give exactly one of --flow FILE and --flow-ref NAMESPACE/NAME"),
        }
    }
}

/// A cluster of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `spec.source`.
    Source,
    /// `spec.target`.
    Target,
}

impl Side {
    fn of(self, spec: &MirrorFlowSpec) -> (&'static str, &ClusterSpec) {
        match self {
            Side::Source => ("spec.source", &spec.source),
            Side::Target => ("spec.target", &spec.target),
        }
    }
}

/// The MirrorFlow `ns/name` read through `client`, validated, with the Secrets of the
/// clusters `sides` names written into a private temporary directory.
pub async fn load_from_api(
    client: &kube::Client,
    ns: &str,
    name: &str,
    sides: &[Side],
) -> anyhow::Result<LoadedFlow> {
    let flow = read_flow(client, ns, name).await?;
    crate::api::validate_flow(&flow.spec)
        .map_err(|e| anyhow::anyhow!("MirrorFlow {ns}/{name} is invalid: {e}"))?;
    let clusters: Vec<(&str, &ClusterSpec)> = sides.iter().map(|s| s.of(&flow.spec)).collect();
    let dir = secrets_from_api(client, ns, name, &clusters).await?;
    Ok(LoadedFlow {
        flow,
        secrets: Secrets::Temporary(dir),
    })
}

/// A flow and the directory its Secrets are read from (a temporary one lives as long as
/// this value).
pub struct LoadedFlow {
    /// The MirrorFlow.
    pub flow: MirrorFlow,
    secrets: Secrets,
}

enum Secrets {
    Given(PathBuf),
    Temporary(tempfile::TempDir),
}

impl LoadedFlow {
    /// Where the Secrets are, in the worker's layout.
    pub fn secrets_dir(&self) -> &Path {
        match &self.secrets {
            Secrets::Given(p) => p,
            Secrets::Temporary(d) => d.path(),
        }
    }

    /// The flow's namespace (`default` when the file names none).
    pub fn namespace(&self) -> String {
        self.flow
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into())
    }

    /// The flow's name.
    pub fn name(&self) -> String {
        self.flow.metadata.name.clone().unwrap_or_default()
    }
}

/// The Secrets `clusters` reference (each named by its field, e.g. `spec.target`), read
/// through `client` and written as the worker's layout (`<secretName>/<key>` files, mode
/// 0600) into a private temporary directory, removed when the value is dropped.
pub async fn secrets_from_api(
    client: &kube::Client,
    ns: &str,
    name: &str,
    clusters: &[(&str, &crate::api::ClusterSpec)],
) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("mirrorflow-secrets-")
        .tempdir()
        .context("temporary directory for the flow's Secrets")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut read: BTreeMap<&str, Secret> = BTreeMap::new();
    for (field, cluster) in clusters {
        for (secret, key) in cluster.secret_keys() {
            if !read.contains_key(secret) {
                let s = secrets.get(secret).await.map_err(|e| {
                    anyhow::anyhow!(
                        "reading Secret {ns}/{secret} ({field} of MirrorFlow {ns}/{name}): {e}"
                    )
                })?;
                read.insert(secret, s);
            }
            let value = read[secret]
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.clone())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "Secret {ns}/{secret} has no key {key:?} ({field} of MirrorFlow {ns}/{name})"
                    )
                })?;
            let path = crate::kafka::config::secret_path(dir.path(), secret, key);
            if !path.exists() {
                std::fs::create_dir_all(path.parent().expect("under the directory"))?;
                write_private(&path, &value)?;
            }
        }
    }
    Ok(dir)
}

fn write_private(path: &std::path::Path, value: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(value)?;
    Ok(())
}
