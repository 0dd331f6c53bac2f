//! The checkpoint runner: on worker 0 of a flow, while an OffsetCheckpoint names the flow,
//! translates the committed offsets of the selected source groups every `intervalSeconds`,
//! writes them to `<sourceAlias>.checkpoints.internal` on the target and hands them to the
//! group sync ([`super::group_sync`]), which commits them to the target groups.
//!
//! This file holds the runner's life (connect while an OffsetCheckpoint names the flow,
//! reconnect on rotated Secrets) and its public face; the rest is below it:
//! - `startup`: connecting, reloading the checkpoints in force and the offset syncs;
//! - `schedule`: which OffsetCheckpoints run and when their cycles are due;
//! - `cycle`: one cycle of one OffsetCheckpoint (read, plan, write);
//! - `record`: what a cycle records in the runner's state.

mod cycle;
mod record;
mod schedule;
mod startup;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jiff::Timestamp;
use prometheus::Registry;
use rdkafka::ClientConfig;
use tokio::sync::watch;

use crate::api::{MirrorFlow, MirrorFlowSpec, OffsetCheckpoint, OffsetCheckpointStatus};
use crate::kafka::config::client_properties;
use crate::kafka::secrets::FlowSecrets;
use crate::kafka::wire;
use crate::worker::error::Error;
use crate::worker::topic_filter::TopicFilter;

use super::failback::LoadBack;
use super::group_sync::{run_group_syncs, Handoff};
use super::groups::GroupSelection;
use super::metrics::CheckpointMetrics;
use super::status::{checkpoint_status, RunnerState};

/// Bound for every cluster call of a cycle.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound for reading the offset-syncs topic to its end at start-up.
pub const STARTUP_READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause between failed start-up attempts.
const STARTUP_RETRY: Duration = Duration::from_secs(5);

/// Why a connected run ended.
enum Ended {
    Shutdown,
    /// A cluster's Secrets changed: connect again with them.
    Rotated,
    /// No OffsetCheckpoint left to run: disconnect until one comes.
    Unused,
}

/// Whether worker `worker_index` of a flow runs the checkpoints: index 0 only. Checkpoints
/// need every partition's offset syncs and all groups, not one worker's share, and a single
/// writer keeps them monotonic without coordination; a new index 0 reloads the checkpoints
/// topic, so monotonicity holds across runs.
pub fn should_run(worker_index: u32) -> bool {
    worker_index == 0
}

/// The offset-syncs topic of a flow, on the target: `mm2-offset-syncs.<sourceAlias>.internal`.
///
/// MM2 names this topic after the *target* alias and keeps it on the source by default; with
/// `offset-syncs.topic.location=target` (MM2 3.x) it lives on the target and is named after
/// the source alias. mirrorflow always keeps it on the target, so it is
/// `wire::offset_syncs_topic(<source alias>)` (the helper's parameter is the alias in the
/// name); the replication engine must write syncs to this same name.
pub fn offset_syncs_topic(flow: &MirrorFlowSpec) -> String {
    wire::offset_syncs_topic(&flow.source.alias)
}

/// MirrorMaker 2's offset-syncs topic on the source, for a flow that took over from MM2
/// (`spec.source.startFrom.mirrorMaker2`): `mm2-offset-syncs.<targetAlias>.internal`, MM2's
/// default location. Read once at start before the flow's own syncs, so groups still behind
/// the handover translate by MM2's syncs (with MM2's rule) and the rest by mirrorflow's: no
/// gap between the two. (MM2 with `offset-syncs.topic.location=target` wrote the flow's own
/// topic.)
pub fn mm2_offset_syncs_topic(flow: &MirrorFlowSpec) -> Option<String> {
    flow.source
        .start_from
        .as_ref()
        .and_then(|s| s.mirror_maker2.as_ref())
        .map(|_| wire::offset_syncs_topic(&flow.target.alias))
}

/// The checkpoints topic of a flow, on the target: `<sourceAlias>.checkpoints.internal`.
pub fn checkpoints_topic(flow: &MirrorFlowSpec) -> String {
    wire::checkpoints_topic(&flow.source.alias)
}

/// Runs a flow's OffsetCheckpoints. It connects only while one names the flow ([`runs_any`]).
///
/// Start-up (retried until it succeeds): create the checkpoints topic on the target if absent
/// (1 partition, compacted), reload it (last record per key wins), and read the offset-syncs
/// topic to its end, as MM2 does, before the first translation. Then one cycle per
/// OffsetCheckpoint every `intervalSeconds`; a cycle that takes longer delays the next one.
/// With `emitCheckpointsTopic: false` the checkpoints in force live only in memory; after a
/// restart the target groups' committed offsets (never moved backwards) keep the sync
/// monotonic.
///
/// Memory: offset-sync histories of `partitions × 64` syncs ([`SyncStore`]), one checkpoint
/// in force per (group, target partition), and at most two cycles' plans per checkpoint in
/// the group sync (the one it syncs, the newest waiting).
pub struct CheckpointRunner {
    flow_name: String,
    /// With `spec.source.startFrom.afterFailover` (see [`Self::failing_back`]).
    failback: Option<Arc<dyn LoadBack>>,
    flow: MirrorFlowSpec,
    source: ClientConfig,
    target: ClientConfig,
    specs_tx: watch::Sender<Vec<OffsetCheckpoint>>,
    state_tx: watch::Sender<RunnerState>,
    metrics: CheckpointMetrics,
    secrets_dir: std::path::PathBuf,
    /// Rotation of the clusters' mounted Secrets: reconnect with them.
    secrets: Option<FlowSecrets>,
}

impl CheckpointRunner {
    /// A runner for `flow` with its OffsetCheckpoints (those naming another flow are
    /// ignored). Reads the clusters' secrets from `secrets_dir` and registers its metrics
    /// on `registry`.
    pub fn new(
        flow: &MirrorFlow,
        checkpoints: Vec<OffsetCheckpoint>,
        secrets_dir: &Path,
        registry: &Registry,
    ) -> anyhow::Result<Self> {
        let flow_name = flow
            .metadata
            .name
            .clone()
            .context("MirrorFlow metadata.name is required")?;
        let source = client_properties(&flow.spec.source, secrets_dir)
            .context("spec.source")?
            .to_client_config();
        let target = client_properties(&flow.spec.target, secrets_dir)
            .context("spec.target")?
            .to_client_config();
        TopicFilter::new(&flow.spec).map_err(|e| anyhow::anyhow!("MirrorFlow {flow_name}: {e}"))?;
        let metrics = CheckpointMetrics::new(registry).context("register checkpoint metrics")?;
        let (specs_tx, _) = watch::channel(checkpoints);
        let (state_tx, _) = watch::channel(RunnerState::default());
        Ok(Self {
            failback: None,
            flow_name,
            flow: flow.spec.clone(),
            source,
            target,
            specs_tx,
            state_tx,
            metrics,
            secrets_dir: secrets_dir.to_path_buf(),
            secrets: None,
        })
    }

    /// Groups of a flow failing back translate across the failover, from what `loader` reads.
    pub fn failing_back(mut self, loader: Option<Arc<dyn LoadBack>>) -> Self {
        self.failback = loader;
        self
    }

    /// Reconnects (and starts over: reload, offset syncs read again) whenever a cluster's
    /// mounted Secrets change.
    pub fn watch_secrets(mut self, secrets: FlowSecrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Client configs from the Secrets as mounted now; `None` (keep the current ones) when
    /// they do not load.
    fn reload_configs(&mut self) {
        let load = |c: &crate::api::ClusterSpec| {
            client_properties(c, &self.secrets_dir).map(|p| p.to_client_config())
        };
        match (load(&self.flow.source), load(&self.flow.target)) {
            (Ok(s), Ok(t)) => {
                self.source = s;
                self.target = t;
                tracing::info!(flow = %self.flow_name, "mounted Secrets changed: the checkpoint runner reconnects with them");
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(flow = %self.flow_name, error = %e, "the changed Secrets do not load; the checkpoint runner keeps its clients")
            }
        }
    }

    /// Sender to replace the OffsetCheckpoints live (e.g. when the mounted flow file
    /// changes); the runner picks the new list up before its next cycle.
    pub fn specs(&self) -> watch::Sender<Vec<OffsetCheckpoint>> {
        self.specs_tx.clone()
    }

    /// The runner's state, updated after start-up and every cycle (for `/status` and the
    /// status writer; fold it with [`statuses`]).
    pub fn state(&self) -> watch::Receiver<RunnerState> {
        self.state_tx.subscribe()
    }

    /// Runs until `shutdown` completes. Errors only for what retrying cannot fix.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        tokio::pin!(shutdown);
        loop {
            if !self.await_specs(&mut shutdown).await {
                return Ok(());
            }
            match self.run_once(&mut shutdown).await? {
                Ended::Shutdown => return Ok(()),
                Ended::Rotated => self.reload_configs(),
                Ended::Unused => {
                    tracing::info!(flow = %self.flow_name, "no OffsetCheckpoint left: the checkpoint runner disconnects");
                    self.metrics.sync_partitions.set(0);
                    self.state_tx.send_modify(|s| {
                        s.started = false;
                        s.startup_error = None;
                        s.sync_partitions = 0;
                        s.syncs_retained = 0;
                        s.checkpoints_in_force = 0;
                    });
                }
            }
        }
    }

    /// Waits, holding no client, until an OffsetCheckpoint this runner would run exists
    /// ([`runs_any`]); false on shutdown. Secrets that change meanwhile are reloaded.
    async fn await_specs<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> bool {
        let flow = self.flow_name.clone();
        let wanted = until_runs(self.specs_tx.subscribe(), &flow, true);
        tokio::pin!(wanted);
        let mut secrets = self.secrets.take();
        let runs = loop {
            tokio::select! {
                _ = shutdown.as_mut() => break false,
                _ = crate::kafka::secrets::rotated(&mut secrets) => self.reload_configs(),
                _ = &mut wanted => break true,
            }
        };
        self.secrets = secrets;
        runs
    }

    async fn run_once<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> anyhow::Result<Ended> {
        let mut secrets = self.secrets.take();
        let r = self.run_connected(shutdown, &mut secrets).await;
        self.secrets = secrets;
        r
    }

    async fn run_connected<F: Future<Output = ()>>(
        &self,
        shutdown: &mut std::pin::Pin<&mut F>,
        secrets: &mut Option<FlowSecrets>,
    ) -> anyhow::Result<Ended> {
        let mut shutdown = shutdown.as_mut();
        let mut startup = None;
        // A start that hangs (a cluster unreachable: up to the request timeout) or keeps
        // failing ends as soon as no OffsetCheckpoint is left, its clients dropped.
        let unused = until_runs(self.specs_tx.subscribe(), &self.flow_name, false);
        tokio::pin!(unused);
        while startup.is_none() {
            // Secrets that change while starting restart with them: a start that fails on a
            // wrong password or CA would otherwise retry with it for ever.
            tokio::select! {
                _ = &mut shutdown => return Ok(Ended::Shutdown),
                _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                _ = &mut unused => return Ok(Ended::Unused),
                r = self.start() => match r {
                    Ok(s) => startup = Some(s),
                    Err(e) => {
                        tracing::warn!(flow = %self.flow_name, error = %e, "checkpoint start-up failed; retrying");
                        self.state_tx.send_modify(|s| s.startup_error = Some(e.to_string()));
                        tokio::select! {
                            _ = &mut shutdown => return Ok(Ended::Shutdown),
                            _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                            _ = &mut unused => return Ok(Ended::Unused),
                            _ = tokio::time::sleep(STARTUP_RETRY) => {}
                        }
                    }
                },
            }
        }
        let worker = startup.expect("set above");
        self.state_tx.send_modify(|s| {
            s.started = true;
            s.startup_error = None;
        });
        worker.publish_store_state(&self.state_tx);
        // The group sync runs beside the cycles in this same task, so it stops with them.
        let handoff = Handoff::default();
        let syncs = run_group_syncs(
            &self.flow_name,
            worker.target.clone(),
            &handoff,
            &self.metrics,
            &self.state_tx,
        );
        tokio::pin!(syncs);
        tokio::select! {
            r = self.run_cycles(worker, &mut shutdown, secrets, &handoff) => r,
            never = &mut syncs => match never {},
        }
    }
}

/// The compiled group selection of `cp` for the runner of `flow`; `None` when `cp` names
/// another flow. The runner runs exactly the checkpoints this compiles.
fn selection(flow: &str, cp: &OffsetCheckpoint) -> Option<Result<GroupSelection, Error>> {
    (cp.spec.flow_ref.name == flow).then(|| GroupSelection::new(&cp.spec.groups))
}

/// Whether `specs` hold an OffsetCheckpoint the runner of `flow` runs: one naming it, with a
/// valid group selection (what `accept_specs` keeps). Without one the runner holds no clients.
pub fn runs_any(flow: &str, specs: &[OffsetCheckpoint]) -> bool {
    specs
        .iter()
        .any(|cp| matches!(selection(flow, cp), Some(Ok(_))))
}

/// Completes once whether the runner of `flow` runs any of the specs ([`runs_any`]) is
/// `runs`: the wait for a first OffsetCheckpoint, and for the last one to go.
async fn until_runs(mut specs: watch::Receiver<Vec<OffsetCheckpoint>>, flow: &str, runs: bool) {
    while runs_any(flow, &specs.borrow_and_update()) != runs {
        // Never errs while the runner holds a sender.
        if specs.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Folds the runner's state into the status of each OffsetCheckpoint at `now`.
pub fn statuses(
    state: &RunnerState,
    checkpoints: &[OffsetCheckpoint],
    now: Timestamp,
) -> Vec<(String, OffsetCheckpointStatus)> {
    checkpoints
        .iter()
        .map(|cp| {
            let name = cp.metadata.name.clone().unwrap_or_default();
            let status = checkpoint_status(
                cp,
                state.specs.get(&name),
                state.startup_error.as_deref(),
                now,
            );
            (name, status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FlowRef, GroupSelector, OffsetCheckpointSpec};

    pub(super) fn cp(flow: &str, include: &str) -> OffsetCheckpoint {
        OffsetCheckpoint::new(
            "cp",
            OffsetCheckpointSpec {
                flow_ref: FlowRef { name: flow.into() },
                groups: GroupSelector {
                    include: vec![include.into()],
                    exclude: vec![],
                    refresh_interval_seconds: 30,
                },
                interval_seconds: 5,
                sync_group_offsets: true,
                emit_checkpoints_topic: true,
            },
        )
    }

    #[test]
    fn runs_only_checkpoints_it_would_accept() {
        let cases: Vec<(&str, Vec<OffsetCheckpoint>, bool)> = vec![
            ("none", vec![], false),
            ("another flow's", vec![cp("other", ".*")], false),
            ("an invalid selection", vec![cp("f", "(")], false),
            ("one", vec![cp("f", "orders-.*")], true),
            (
                "one among others",
                vec![cp("other", ".*"), cp("f", "("), cp("f", "billing")],
                true,
            ),
        ];
        for (name, specs, want) in cases {
            assert_eq!(runs_any("f", &specs), want, "{name}");
        }
    }

    pub(super) fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }
}
