//! What a worker process runs: its command line (`mirrorflow worker`) and its flow, live,
//! as the standalone (`flow_file`) and the Kubernetes (`k8s`) modes deliver it.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::api::{MirrorFlowSpec, OffsetCheckpoint};
use crate::worker::replicate::assign;

/// `mirrorflow worker` arguments.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// Standalone mode: the MirrorFlow YAML file (the same document `kubectl apply` takes).
    /// Re-read periodically: `paused`, `reset` and `topics` edits apply live.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "flow_ref",
        required_unless_present = "flow_ref"
    )]
    pub flow: Option<PathBuf>,
    /// Kubernetes mode: the MirrorFlow as NAMESPACE/NAME, read from the API server.
    #[arg(long, value_name = "NS/NAME")]
    pub flow_ref: Option<String>,
    /// This worker's index; default: the trailing ordinal of $POD_NAME, else 0.
    #[arg(long, value_name = "I")]
    pub worker_index: Option<u32>,
    /// Number of workers of the flow.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub worker_count: u32,
    /// Address of the HTTP endpoints (/metrics, /healthz, /readyz, /status).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Directory where Secret references resolve: DIR/<secretName>/<key>.
    #[arg(long, value_name = "DIR", default_value = crate::api::SECRETS_DIR)]
    pub secrets_dir: PathBuf,
    /// Rendered flow + OffsetCheckpoints (read by the checkpoint side).
    #[arg(long, value_name = "FILE")]
    pub checkpoints_file: Option<PathBuf>,
    /// How often the flow file is re-read, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub flow_reload_seconds: u64,
}

impl WorkerArgs {
    /// The worker index: `--worker-index`, else `pod_name`'s trailing ordinal, else 0.
    pub fn resolve_index(&self, pod_name: Option<&str>) -> anyhow::Result<u32> {
        let index = match (self.worker_index, pod_name) {
            (Some(i), _) => i,
            (None, Some(name)) => assign::ordinal_from_pod_name(name).with_context(|| {
                format!("POD_NAME={name:?} has no trailing ordinal; pass --worker-index")
            })?,
            (None, None) => 0,
        };
        anyhow::ensure!(
            self.worker_count >= 1,
            "--worker-count must be at least 1 (got {})",
            self.worker_count
        );
        anyhow::ensure!(
            index < self.worker_count,
            "--worker-index {index} must be below --worker-count {}",
            self.worker_count
        );
        Ok(index)
    }
}

/// A flow as the engine consumes it: identity plus a live spec.
pub struct FlowInput {
    /// `metadata.namespace` (`default` when absent).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The spec; a new value applies live (`paused`, `reset`, `topics`, `offsetSyncs`).
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// The flow's OffsetCheckpoints; a new list applies live (worker 0 runs them).
    pub checkpoints: watch::Receiver<Vec<OffsetCheckpoint>>,
    /// The ids of the worker entries in the flow's `status.workers` when the worker started
    /// (Kubernetes mode; none standalone): who ran before a scale-down.
    pub reported_workers: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: WorkerArgs,
    }

    #[test]
    fn args_and_index_table() {
        let parse = |argv: &[&str]| Cli::try_parse_from(argv).map(|c| c.args);
        let a = parse(&["w", "--flow", "f.yaml"]).unwrap();
        assert_eq!(a.worker_count, 1);
        assert_eq!(a.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(a.secrets_dir, PathBuf::from(crate::api::SECRETS_DIR));
        assert!(parse(&["w"]).is_err(), "--flow or --flow-ref is required");
        assert!(parse(&["w", "--flow", "f", "--flow-ref", "ns/f"]).is_err());
        let b = parse(&[
            "w",
            "--flow-ref",
            "ns/f",
            "--worker-count",
            "3",
            "--checkpoints-file",
            "/etc/x",
        ])
        .unwrap();
        let cases = [
            (None, None, 3, Some(0)),
            (Some(2), None, 3, Some(2)),
            (Some(2), Some("f-worker-1"), 3, Some(2)),
            (None, Some("f-worker-1"), 3, Some(1)),
            (None, Some("f-worker-3"), 3, None),
            (None, Some("nonumber"), 3, None),
            (Some(0), None, 0, None),
        ];
        for (index, pod, count, want) in cases {
            let args = WorkerArgs {
                worker_index: index,
                worker_count: count,
                ..b.clone()
            };
            let got = args.resolve_index(pod).ok();
            assert_eq!(got, want, "{index:?} {pod:?} {count}");
        }
    }
}
