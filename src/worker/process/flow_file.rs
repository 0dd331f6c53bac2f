//! Standalone mode of the worker (`mirrorflow worker --flow FILE`): the flow is a
//! MirrorFlow YAML file (with its OffsetCheckpoints), re-read periodically so `paused`,
//! `reset` and `topics` edits apply live.

use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use super::args::{FlowInput, WorkerArgs};
use super::wiring::{run_with, shutdown_signal};
use crate::api::load_flow_file;

/// Runs a standalone worker (`--flow FILE`) until SIGTERM/SIGINT.
///
/// Kubernetes mode (`--flow-ref`) builds its [`FlowInput`] and status sink from the API and
/// calls [`run_with`].
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let Some(path) = args.flow.clone() else {
        anyhow::bail!(
            "--flow-ref {} needs the Kubernetes flow source; this entry point runs a flow file (--flow FILE)",
            args.flow_ref.as_deref().unwrap_or("")
        );
    };
    let (input, _watcher) =
        watch_flow_file(&path, Duration::from_secs(args.flow_reload_seconds.max(1)))?;
    run_with(args, input, Vec::new(), shutdown_signal()).await
}

/// Loads `path` and re-reads it every `every`, publishing changed specs. An unreadable or
/// invalid file at start is an error; later, the last good spec stays in force and the
/// problem is logged (once per distinct error). Returns the input and the watcher task
/// (aborting it freezes the spec).
pub fn watch_flow_file(
    path: &Path,
    every: Duration,
) -> anyhow::Result<(FlowInput, tokio::task::JoinHandle<()>)> {
    let file = load_flow_file(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let meta = &file.flow.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let (tx, rx) = watch::channel(file.flow.spec.clone());
    let (cp_tx, cp_rx) = watch::channel(file.checkpoints.clone());
    let path = path.to_path_buf();
    let (name_c, ns_c) = (name.clone(), namespace.clone());
    let task = tokio::spawn(async move {
        let mut last_error: Option<String> = None;
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            match load_flow_file(&path) {
                Ok(f) => {
                    last_error = None;
                    let new_ns = f.flow.metadata.namespace.clone().filter(|n| !n.is_empty());
                    if f.flow.metadata.name.as_deref() != Some(name_c.as_str())
                        || new_ns.as_deref().unwrap_or("default") != ns_c
                    {
                        warn!(file = %path.display(), "the flow's name or namespace changed; restart the worker to run the new flow");
                        continue;
                    }
                    cp_tx.send_if_modified(|cur| {
                        if *cur != f.checkpoints {
                            info!(file = %path.display(), "OffsetCheckpoints changed");
                            *cur = f.checkpoints.clone();
                            true
                        } else {
                            false
                        }
                    });
                    tx.send_if_modified(|cur| {
                        if *cur != f.flow.spec {
                            info!(file = %path.display(), "flow file changed");
                            *cur = f.flow.spec.clone();
                            true
                        } else {
                            false
                        }
                    });
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        warn!(file = %path.display(), "keeping the last good flow: {msg}");
                        last_error = Some(msg);
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok((
        FlowInput {
            namespace,
            name,
            spec: rx,
            checkpoints: cp_rx,
            reported_workers: Vec::new(),
        },
        task,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn flow_file_is_watched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flow.yaml");
        let doc = |paused: bool| {
            format!(
                "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: orders\nspec:\n  \
                 source: {{alias: dc1, bootstrapServers: 'a:9092'}}\n  target: {{alias: dc2, bootstrapServers: 'b:9092'}}\n  \
                 delivery: AtLeastOnce\n  paused: {paused}\n"
            )
        };
        std::fs::write(&path, doc(false)).unwrap();
        let (mut input, task) = watch_flow_file(&path, Duration::from_millis(20)).unwrap();
        assert_eq!(
            (input.namespace.as_str(), input.name.as_str()),
            ("default", "orders")
        );
        assert!(!input.spec.borrow().paused);
        // An invalid edit keeps the last good spec...
        std::fs::write(&path, "kind: [").unwrap();
        // ...and a valid one is published.
        std::fs::write(&path, doc(true)).unwrap();
        tokio::time::timeout(Duration::from_secs(10), input.spec.changed())
            .await
            .expect("change seen")
            .unwrap();
        assert!(input.spec.borrow().paused);
        task.abort();
        assert!(watch_flow_file(&dir.path().join("missing.yaml"), Duration::from_secs(1)).is_err());
    }
}
