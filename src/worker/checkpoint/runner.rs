//! The checkpoint runner: on worker 0 of a flow, while an OffsetCheckpoint names the flow,
//! translates the committed offsets of the selected source groups every `intervalSeconds`,
//! writes them to `<sourceAlias>.checkpoints.internal` on the target and hands them to the
//! group sync ([`super::group_sync`]), which commits them to the target groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jiff::Timestamp;
use prometheus::Registry;
use rdkafka::{ClientConfig, Message as _};
use tokio::sync::watch;

use crate::api::{
    GroupFailureReason, MirrorFlow, MirrorFlowSpec, OffsetCheckpoint, OffsetCheckpointStatus,
};
use crate::kafka::config::client_properties;
use crate::kafka::secrets::FlowSecrets;
use crate::kafka::wire;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

use super::failback::{FailingBack, LoadBack, WithFailback};
use super::group_sync::{merge_owned_failures, run_group_syncs, sync_owned, Handoff, SyncOffer};
use super::groups::{assign_groups, GroupSelection};
use super::io;
use super::metrics::CheckpointMetrics;
use super::plan::{plan_group, GroupPlan};
use super::status::{checkpoint_status, merge_failures, RunnerState};
use super::store::{SyncStore, SYNC_SEQUENCE_HEADER};
use super::translate::{reload_checkpoints, CheckpointKey, CheckpointState, InForce, PartitionMap};
use crate::kafka::admin::{GroupAdmin, GroupOffset};
use crate::kafka::producer::EventProducer;
use crate::kafka::run_blocking as blocking;
use crate::kafka::tail::TopicTail;
use crate::kafka::topics::ensure_store_topic;
use crate::kafka::Error as KafkaError;
use crate::worker::error::Error;

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

    /// The cycles of the OffsetCheckpoints ([`CheckpointRunner`]), handing each cycle's plans to the
    /// group sync.
    async fn run_cycles<F: Future<Output = ()>>(
        &self,
        mut worker: Worker,
        shutdown: &mut std::pin::Pin<&mut F>,
        secrets: &mut Option<FlowSecrets>,
        handoff: &Handoff,
    ) -> anyhow::Result<Ended> {
        let mut shutdown = shutdown.as_mut();
        let mut specs_rx = self.specs_tx.subscribe();
        // Set when the wait below saw a change: `changed()` marks the value seen, so
        // `has_changed()` alone would miss every change that arrives while the runner waits.
        let mut specs_changed = true;
        let mut c = Cycles::default();
        loop {
            if std::mem::take(&mut specs_changed) || specs_rx.has_changed().unwrap_or(false) {
                let specs = specs_rx.borrow_and_update().clone();
                self.take_specs(&mut c, specs, handoff);
                if c.active.is_empty() {
                    return Ok(Ended::Unused);
                }
            }
            let refresh = refresh_interval(c.active.values());
            if c.groups_listed.is_none_or(|t| t.elapsed() >= refresh) {
                self.list_groups(&worker, &mut c, refresh).await;
            }
            for name in due(&c.schedule, Instant::now()) {
                let Some(cp) = c.active.get(&name) else {
                    continue;
                };
                let started = Instant::now();
                let groups: Vec<String> = c
                    .assignment
                    .get(&name)
                    .map(|g| g.iter().cloned().collect())
                    .unwrap_or_default();
                // A cycle stopped half-way is harmless: written checkpoints are reloaded
                // at the next start, and commits never move a group backwards.
                let mut offer = None;
                // Secrets that change mid-cycle cut it short too: against a cluster that
                // refuses the old ones, each of its calls would wait out its timeout first.
                let outcome = tokio::select! {
                    _ = &mut shutdown => return Ok(Ended::Shutdown),
                    _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                    r = worker.cycle(self, &name, cp, &groups, &mut offer) => r,
                };
                let interval = secs(cp.spec.interval_seconds);
                c.schedule.insert(name.clone(), started + interval);
                self.record_cycle(&worker, &name, started.elapsed(), outcome, offer, handoff);
            }
            let wake = next_wake(&c.schedule, c.groups_listed, refresh, Instant::now());
            tokio::select! {
                _ = &mut shutdown => return Ok(Ended::Shutdown),
                _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                _ = tokio::time::sleep_until(wake.into()) => {}
                r = specs_rx.changed() => {
                    if r.is_err() {
                        // Every sender is gone, which cannot happen while `self` holds one.
                        return Ok(Ended::Shutdown);
                    }
                    specs_changed = true;
                }
            }
        }
    }

    /// Takes a new list of OffsetCheckpoints: those gone lose their metrics, schedule and
    /// waiting plans; new ones are due at once; groups are listed again for the selections.
    fn take_specs(&self, c: &mut Cycles, specs: Vec<OffsetCheckpoint>, handoff: &Handoff) {
        let (next, selections) = self.accept_specs(specs);
        for gone in c.active.keys().filter(|n| !next.contains_key(*n)) {
            self.metrics.forget_checkpoint(gone);
        }
        reschedule(&mut c.schedule, next.keys(), Instant::now());
        for name in next.keys() {
            self.metrics.init_checkpoint(name);
        }
        self.state_tx.send_modify(|s| {
            s.specs.retain(|n, _| next.contains_key(n));
            for (n, cp) in &next {
                let st = s.specs.entry(n.clone()).or_default();
                st.interval_seconds = cp.spec.interval_seconds;
                st.generation = cp.metadata.generation;
            }
        });
        handoff.retain(|n| next.contains_key(n));
        c.active = next;
        c.selections = selections;
        c.groups_listed = None; // new selections see new groups at once
    }

    /// Lists the source's groups and assigns them to the OffsetCheckpoints' selections; a
    /// failed listing is retried a second later, at the next due cycle.
    async fn list_groups(&self, worker: &Worker, c: &mut Cycles, refresh: Duration) {
        match worker.list_source_groups().await {
            Ok(groups) => {
                let next = assign_groups(&c.selections, groups.iter().map(String::as_str));
                if next != c.assignment {
                    for (name, matched) in &next {
                        tracing::info!(flow = %self.flow_name, checkpoint = %name, listed = groups.len(), matched = matched.len(), groups = ?matched.iter().take(10).collect::<Vec<_>>(), "consumer groups selected");
                    }
                }
                c.assignment = next;
                c.groups_listed = Some(Instant::now());
            }
            Err(e) => {
                tracing::warn!(flow = %self.flow_name, error = %e, "listing source groups failed");
                // Retry at the next due cycle rather than spinning.
                c.groups_listed = Some(Instant::now() - refresh + secs(1));
            }
        }
    }

    /// A finished cycle in the metrics and the state; its plans go to the group sync.
    fn record_cycle(
        &self,
        worker: &Worker,
        name: &str,
        took: Duration,
        outcome: Result<(), Error>,
        offer: Option<SyncOffer>,
        handoff: &Handoff,
    ) {
        self.metrics
            .cycle_seconds
            .with_label_values(&[name])
            .set(took.as_secs_f64());
        if let Err(e) = &outcome {
            self.metrics.cycle_errors.with_label_values(&[name]).inc();
            tracing::warn!(flow = %self.flow_name, checkpoint = %name, reason = e.reason(), error = %e, "checkpoint cycle failed");
        }
        let at = Timestamp::now();
        self.state_tx.send_modify(|s| {
            let st = s.specs.entry(name.to_string()).or_default();
            st.cycles += 1;
            st.last_cycle = Some(at);
            st.last_cycle_duration = Some(took);
            st.last_error = outcome.err().map(|e| e.to_string());
        });
        worker.publish_store_state(&self.state_tx);
        if let Some(offer) = offer {
            if handoff.offer(name, offer) {
                self.metrics
                    .group_syncs_superseded
                    .with_label_values(&[name])
                    .inc();
            }
        }
    }

    /// Keeps this flow's valid OffsetCheckpoints, by name. Invalid group patterns are
    /// reported in the checkpoint's state instead of stopping the others.
    fn accept_specs(
        &self,
        specs: Vec<OffsetCheckpoint>,
    ) -> (
        BTreeMap<String, OffsetCheckpoint>,
        Vec<(String, GroupSelection)>,
    ) {
        let mut out = BTreeMap::new();
        let mut selections = Vec::new();
        for cp in specs {
            let name = cp.metadata.name.clone().unwrap_or_default();
            let Some(selection) = selection(&self.flow_name, &cp) else {
                tracing::warn!(checkpoint = %name, flow_ref = %cp.spec.flow_ref.name, flow = %self.flow_name, "OffsetCheckpoint names another flow; ignored");
                continue;
            };
            match selection {
                Ok(sel) => {
                    selections.push((name.clone(), sel));
                    out.insert(name, cp);
                }
                Err(e) => {
                    tracing::warn!(checkpoint = %name, error = %e, "invalid group selection; not run");
                    self.state_tx.send_modify(|s| {
                        let st = s.specs.entry(name.clone()).or_default();
                        st.last_error = Some(e.to_string());
                    });
                }
            }
        }
        (out, selections)
    }

    /// Connects, creates and reloads the checkpoints topic, and reads the offset syncs to
    /// their end.
    async fn start(&self) -> Result<Worker, Error> {
        let source = Arc::new(GroupAdmin::new(
            &self.source,
            &format!("source cluster {}", self.flow.source.alias),
            REQUEST_TIMEOUT,
        )?);
        let target = Arc::new(GroupAdmin::new(
            &self.target,
            &format!("target cluster {}", self.flow.target.alias),
            REQUEST_TIMEOUT,
        )?);
        let checkpoints_topic = checkpoints_topic(&self.flow);
        let rf = self.flow.internal_topics.replication_factor;
        if ensure_store_topic(&self.target, &checkpoints_topic, rf, REQUEST_TIMEOUT).await? {
            tracing::info!(topic = %checkpoints_topic, "created the checkpoints topic");
        }
        let in_force = reload(&self.target, &checkpoints_topic).await?;
        let syncs_topic = offset_syncs_topic(&self.flow);
        let mut tail = TopicTail::new(
            &self.target,
            &syncs_topic,
            &format!("target cluster {}", self.flow.target.alias),
        )?;
        let mm2 = match mm2_offset_syncs_topic(&self.flow) {
            Some(t) => Some(TopicTail::new(
                &self.source,
                &t,
                &format!("source cluster {}", self.flow.source.alias),
            )?),
            None => None,
        };
        let (tail, store, read) = tokio::task::spawn_blocking(move || {
            let mut store = SyncStore::new();
            // MM2's syncs first: they precede the flow's in every partition (MM2 stopped
            // where the flow started). Without them only groups past the handover
            // translate, so a failure to read them is logged, not fatal.
            if let Some(mut mm2) = mm2 {
                match mm2.catch_up(STARTUP_READ_TIMEOUT, |m| apply_sync(&mut store, m)) {
                    Ok(n) => tracing::info!(syncs_read = n, "MirrorMaker 2 offset syncs read"),
                    Err(e) => tracing::warn!(error = %e, "MirrorMaker 2 offset syncs not read: groups behind the handover do not translate"),
                }
            }
            let read = tail.catch_up(STARTUP_READ_TIMEOUT, |m| apply_sync(&mut store, m))?;
            Ok::<_, KafkaError>((tail, store, read))
        })
        .await
        .map_err(|e| KafkaError::Task(e.to_string()).context("offset syncs reader failed"))??;
        tracing::info!(
            flow = %self.flow_name,
            syncs_read = read,
            partitions = store.partitions(),
            checkpoints_reloaded = in_force.len(),
            "checkpoint runner started"
        );
        Ok(Worker {
            source,
            target,
            producer: io::checkpoint_producer(&self.target)?,
            checkpoints_topic,
            tail: Some(tail),
            store,
            in_force,
            filter: TopicFilter::new(&self.flow)?,
            metrics: self.metrics.clone(),
            failback: self.failback.clone().map(FailingBack::new),
        })
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

fn secs(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
}

/// What the cycles keep from one turn to the next.
#[derive(Default)]
struct Cycles {
    /// The OffsetCheckpoints run, by name.
    active: BTreeMap<String, OffsetCheckpoint>,
    selections: Vec<(String, GroupSelection)>,
    /// When each one's next cycle is due.
    schedule: BTreeMap<String, Instant>,
    /// When the source's groups were last listed (`None`: list them now).
    groups_listed: Option<Instant>,
    /// The groups each one checkpoints.
    assignment: BTreeMap<String, BTreeSet<String>>,
}

/// How often the source's groups are listed: the smallest `groups.refreshIntervalSeconds`
/// of the OffsetCheckpoints run (30 s without one).
fn refresh_interval<'a>(active: impl Iterator<Item = &'a OffsetCheckpoint>) -> Duration {
    active
        .map(|c| secs(c.spec.groups.refresh_interval_seconds))
        .min()
        .unwrap_or(Duration::from_secs(30))
}

/// Keeps the schedule of the checkpoints still run; those new are due at `now`.
fn reschedule<'a>(
    schedule: &mut BTreeMap<String, Instant>,
    names: impl Iterator<Item = &'a String> + Clone,
    now: Instant,
) {
    let keep: BTreeSet<&String> = names.clone().collect();
    schedule.retain(|n, _| keep.contains(n));
    for name in names {
        schedule.entry(name.clone()).or_insert(now);
    }
}

/// The checkpoints whose cycle is due at `now`, by name.
fn due(schedule: &BTreeMap<String, Instant>, now: Instant) -> Vec<String> {
    schedule
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(n, _)| n.clone())
        .collect()
}

/// When the cycles wake next: the first cycle due or the next group listing, whichever is
/// first (a minute after `now` when there is neither).
fn next_wake(
    schedule: &BTreeMap<String, Instant>,
    groups_listed: Option<Instant>,
    refresh: Duration,
    now: Instant,
) -> Instant {
    let next_due = schedule.values().min().copied();
    let next_refresh = groups_listed.map(|t| t + refresh);
    [next_due, next_refresh]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(60))
}

/// Reads the checkpoints topic to its end: the checkpoints in force.
async fn reload(target: &ClientConfig, topic: &str) -> Result<InForce, KafkaError> {
    let mut tail = TopicTail::new(target, topic, "target cluster")?;
    tokio::task::spawn_blocking(move || {
        let mut records = Vec::new();
        let mut bad = 0usize;
        tail.catch_up(STARTUP_READ_TIMEOUT, |m| {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                match wire::Checkpoint::decode(k, v) {
                    Ok(c) => records.push(c),
                    Err(_) => bad += 1,
                }
            }
        })?;
        if bad > 0 {
            tracing::warn!(
                skipped = bad,
                "checkpoint records that do not decode were skipped"
            );
        }
        Ok(reload_checkpoints(records))
    })
    .await
    .map_err(|e| KafkaError::Task(e.to_string()).context("checkpoints reader failed"))?
}

fn apply_sync(store: &mut SyncStore, m: &rdkafka::message::BorrowedMessage<'_>) {
    let header = io::header(m, SYNC_SEQUENCE_HEADER);
    if let Err(e) = store.apply(m.key(), m.payload(), header) {
        tracing::warn!(partition = m.partition(), offset = m.offset(), error = %e, "offset sync does not decode; skipped");
    }
}

/// Connected state of a started runner.
struct Worker {
    source: Arc<GroupAdmin>,
    target: Arc<GroupAdmin>,
    producer: EventProducer,
    checkpoints_topic: String,
    /// Taken while a blocking read runs.
    tail: Option<TopicTail>,
    store: SyncStore,
    in_force: InForce,
    filter: TopicFilter,
    metrics: CheckpointMetrics,
    /// With `spec.source.startFrom.afterFailover`: groups translate across the failover.
    failback: Option<FailingBack>,
}

impl Worker {
    fn publish_store_state(&self, state: &watch::Sender<RunnerState>) {
        self.metrics
            .sync_partitions
            .set(i64::try_from(self.store.partitions()).unwrap_or(i64::MAX));
        let (p, r, c) = (
            self.store.partitions(),
            self.store.retained(),
            self.in_force.len(),
        );
        state.send_modify(|s| {
            s.sync_partitions = p;
            s.syncs_retained = r;
            s.checkpoints_in_force = c;
        });
    }

    async fn list_source_groups(&self) -> Result<Vec<String>, KafkaError> {
        let source = self.source.clone();
        let listing = blocking(move || source.list_groups()).await??;
        Ok(listing.into_iter().map(|g| g.group).collect())
    }

    /// Reads the offset syncs up to their current end (bounded; a slow read only costs
    /// precision, never safety).
    async fn catch_up_syncs(&mut self) {
        let Some(mut tail) = self.tail.take() else {
            return;
        };
        let mut store = std::mem::take(&mut self.store);
        let result = blocking(move || {
            let r = tail.catch_up(REQUEST_TIMEOUT, |m| apply_sync(&mut store, m));
            (tail, store, r)
        })
        .await;
        match result {
            Ok((tail, store, r)) => {
                self.tail = Some(tail);
                self.store = store;
                if let Err(e) = r {
                    tracing::warn!(error = %e, "offset syncs not read to their end; translating with what was read");
                }
            }
            Err(e) => {
                // The reader is lost with the panicked task; a restart rebuilds it.
                tracing::error!(error = %e, "offset syncs reader failed");
            }
        }
    }

    fn target_topic(&self, source_topic: &str) -> Option<String> {
        (self.filter.decide(source_topic) == TopicDecision::Replicate)
            .then(|| self.filter.target_topic(source_topic))
    }

    /// One cycle of one OffsetCheckpoint: read its groups' committed offsets on the source
    /// (groups re-listed every `groups.refreshIntervalSeconds` and when the specs change), read
    /// the offset syncs to their end and the target's end offsets, plan each group
    /// ([`plan_group`]) and write the new checkpoints (with `emitCheckpointsTopic`; only
    /// acknowledged ones come into force). Group-level problems are recorded in the state; an
    /// error means the cycle failed as a whole. With `syncGroupOffsets`, the plans for the
    /// group sync are left in `offer` (also when the write failed for some).
    async fn cycle(
        &mut self,
        runner: &CheckpointRunner,
        name: &str,
        cp: &OffsetCheckpoint,
        groups: &[String],
        offer: &mut Option<SyncOffer>,
    ) -> Result<(), Error> {
        let t0 = Instant::now();
        // 1. Committed offsets on the source.
        let source = self.source.clone();
        let list = groups.to_vec();
        let offsets = blocking(move || source.list_offsets(&list)).await?;
        let (by_group, read_errors) = split_reads(groups, offsets)?;
        let t_read = t0.elapsed();
        // 2. Offset syncs, then target ends (in this order: an end read after the syncs is
        //    at or past every sync read).
        self.catch_up_syncs().await;
        if let Some(f) = &mut self.failback {
            f.refresh(&runner.source, &runner.target).await;
        }
        let (targets, needed) = target_partitions(&by_group, |t| self.target_topic(t));
        let target = self.target.clone();
        let ends: PartitionMap<i64> = blocking(move || target.end_offsets(&needed))
            .await??
            .into_iter()
            .collect();
        let t_syncs_ends = t0.elapsed();
        // 3. Plan and write.
        let mut plans: Vec<GroupPlan> = by_group
            .iter()
            .map(|(g, offs)| {
                plan_group(
                    g,
                    offs,
                    |t| targets.get(t).and_then(|o| o.as_deref()),
                    &WithFailback {
                        own: &self.store,
                        back: self.failback.as_ref().and_then(FailingBack::back),
                    },
                    &ends,
                    &self.in_force,
                )
            })
            .collect();
        self.metrics.translations(
            plans
                .iter()
                .flat_map(|p| &p.partitions)
                .filter_map(|p| p.translation.as_ref()),
        );
        // Moved out, not cloned (100,000 records when every group moved); nothing after
        // the write reads a plan's `emit`.
        let emit: Vec<wire::Checkpoint> = plans
            .iter_mut()
            .flat_map(|p| std::mem::take(&mut p.emit))
            .collect();
        let written = self.write_checkpoints(name, cp, &emit).await;
        let t_written = t0.elapsed();
        tracing::debug!(
            checkpoint = %name,
            groups = groups.len(),
            written = emit.len(),
            source_offsets_ms = t_read.as_millis() as u64,
            syncs_and_ends_ms = (t_syncs_ends - t_read).as_millis() as u64,
            write_ms = (t_written - t_syncs_ends).as_millis() as u64,
            "checkpoint cycle"
        );
        // 5. State.
        let now = Timestamp::now();
        let selected: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
        runner.state_tx.send_modify(|s| {
            let st = s.specs.entry(name.to_string()).or_default();
            select_groups(st, groups, &selected);
            record_plans(
                st,
                &plans,
                &written.failed_groups,
                cp.spec.sync_group_offsets,
                now,
                |g| self.metrics.checkpointed(name, g, now),
            );
        });
        self.metrics.retain_groups(name, |g| selected.contains(g));
        // 4. The group sync takes the plans beside the next cycles (`run_group_syncs`).
        if cp.spec.sync_group_offsets {
            *offer = Some(SyncOffer {
                plans,
                skip: written.failed_groups,
            });
        }
        if let Some(e) = written.error {
            return Err(e);
        }
        if !read_errors.is_empty() {
            tracing::warn!(checkpoint = %name, failed = read_errors.len(), first = %read_errors[0], "some groups could not be read on the source");
        }
        Ok(())
    }

    /// Writes a cycle's checkpoint records when `emitCheckpointsTopic`: only acknowledged
    /// ones come in force. Without it they are in force at once, in memory only.
    async fn write_checkpoints(
        &mut self,
        name: &str,
        cp: &OffsetCheckpoint,
        emit: &[wire::Checkpoint],
    ) -> Written {
        if !cp.spec.emit_checkpoints_topic || emit.is_empty() {
            return accept_written(&mut self.in_force, emit, std::iter::repeat_with(|| Ok(())));
        }
        let results = io::write_checkpoints(
            &self.producer,
            &self.checkpoints_topic,
            emit,
            REQUEST_TIMEOUT,
        )
        .await;
        let written = accept_written(&mut self.in_force, emit, results);
        self.metrics
            .written
            .with_label_values(&[name])
            .inc_by(written.count);
        written
    }
}

/// Committed offsets by group, in the order the groups were listed.
type GroupOffsets = Vec<(String, Vec<GroupOffset>)>;

/// The groups whose committed offsets were read, in order, and the errors of those that
/// were not. An error when there were groups and none could be read: the cycle fails.
fn split_reads<E>(
    groups: &[String],
    results: Vec<Result<Vec<GroupOffset>, E>>,
) -> Result<(GroupOffsets, Vec<E>), E> {
    let mut read_errors = Vec::new();
    let mut by_group: GroupOffsets = Vec::new();
    for (group, r) in groups.iter().zip(results) {
        match r {
            Ok(o) => by_group.push((group.clone(), o)),
            Err(e) => read_errors.push(e),
        }
    }
    if !groups.is_empty() && by_group.is_empty() && !read_errors.is_empty() {
        return Err(read_errors.swap_remove(0));
    }
    Ok((by_group, read_errors))
}

/// The target topic of each source topic the groups committed on (`None`: not replicated),
/// and the target partitions whose end offsets the translation needs, sorted, each once.
/// `target_topic` decides once per source topic, not per group partition (100,000 a cycle
/// at 10,000 groups).
fn target_partitions(
    by_group: &[(String, Vec<GroupOffset>)],
    target_topic: impl Fn(&str) -> Option<String>,
) -> (TargetTopics<'_>, Vec<(String, i32)>) {
    let mut targets: TargetTopics = HashMap::new();
    let mut needed: BTreeSet<(&str, i32)> = BTreeSet::new();
    for (_, offs) in by_group {
        for o in offs {
            needed.insert((&o.topic, o.partition));
        }
    }
    for (topic, _) in &needed {
        targets.entry(topic).or_insert_with(|| target_topic(topic));
    }
    let needed: BTreeSet<(String, i32)> = needed
        .iter()
        .filter_map(|(t, p)| Some((targets[t].clone()?, *p)))
        .collect();
    (targets, needed.into_iter().collect())
}

/// Target topic by source topic (`None`: not replicated).
type TargetTopics<'a> = HashMap<&'a str, Option<String>>;

/// What became of a cycle's checkpoint records.
#[derive(Debug, PartialEq, Eq)]
struct Written<E = Error> {
    /// Records acknowledged.
    count: u64,
    /// Groups with a record that was not: the group sync skips them this cycle.
    failed_groups: BTreeSet<String>,
    /// The first write error: the cycle failed.
    error: Option<E>,
}

impl<E> Default for Written<E> {
    fn default() -> Self {
        Self {
            count: 0,
            failed_groups: BTreeSet::new(),
            error: None,
        }
    }
}

/// Puts each acknowledged record of `emit` in force (`results` in the same order).
fn accept_written<E>(
    in_force: &mut InForce,
    emit: &[wire::Checkpoint],
    results: impl IntoIterator<Item = Result<(), E>>,
) -> Written<E> {
    let mut out = Written::default();
    for (c, r) in emit.iter().zip(results) {
        match r {
            Ok(()) => {
                out.count += 1;
                in_force.insert(CheckpointKey::from(c), CheckpointState::from(c));
            }
            Err(e) => {
                out.failed_groups.insert(c.group.clone());
                out.error.get_or_insert(e);
            }
        }
    }
    out
}

/// Keeps the state of the selected groups only, and adds those new to the selection.
fn select_groups(st: &mut super::status::SpecState, groups: &[String], selected: &BTreeSet<&str>) {
    st.groups.retain(|g, _| selected.contains(g.as_str()));
    for g in groups {
        // Not `entry`: it would allocate the name of every group, every cycle.
        if !st.groups.contains_key(g) {
            st.groups.insert(g.clone(), Default::default());
        }
    }
}

/// Records each planned group's cycle in its state: checkpointed partitions, target lag,
/// this cycle's failures, and `now` as its last checkpoint when the cycle brought it up to
/// date and its records were written (`checkpointed` is told of each such group). With
/// `syncGroupOffsets`, `synced` and the sync's failures are the group sync's to report.
fn record_plans(
    st: &mut super::status::SpecState,
    plans: &[GroupPlan],
    failed_groups: &BTreeSet<String>,
    sync_group_offsets: bool,
    now: Timestamp,
    mut checkpointed: impl FnMut(&str),
) {
    for plan in plans {
        let Some(g) = st.groups.get_mut(&plan.group) else {
            continue; // every plan's group is selected
        };
        let wrote = !failed_groups.contains(&plan.group);
        if wrote && plan.is_current() {
            g.last_checkpoint = Some(now);
            checkpointed(&plan.group);
        }
        g.partitions = i32::try_from(plan.checkpointed()).unwrap_or(i32::MAX);
        g.target_lag = plan.target_lag();
        let failures: Vec<(GroupFailureReason, String)> = plan.failure().into_iter().collect();
        if sync_group_offsets {
            g.failures = merge_owned_failures(&g.failures, failures, |r| !sync_owned(r), now);
        } else {
            g.synced = false;
            g.failures = merge_failures(&g.failures, failures, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::{PartitionOutcome, PartitionProblem};
    use super::super::status::{FailureState, GroupState, SpecState};
    use super::super::translate::NoSyncReason;
    use super::*;
    use crate::api::{FlowRef, GroupSelector, OffsetCheckpointSpec};

    fn cp(flow: &str, include: &str) -> OffsetCheckpoint {
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

    fn offsets(topic: &str, partitions: &[i32]) -> Vec<GroupOffset> {
        partitions
            .iter()
            .map(|p| GroupOffset {
                topic: topic.into(),
                partition: *p,
                offset: 10,
                metadata: String::new(),
            })
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn split_reads_table() {
        let groups = names(&["a", "b", "c"]);
        type Reads = Vec<Result<Vec<GroupOffset>, String>>;
        /// The groups read and the errors, or the cycle's error.
        type Want = Result<(Vec<&'static str>, Vec<&'static str>), &'static str>;
        let cases: Vec<(&str, &[String], Reads, Want)> = vec![
            ("no group", &[], vec![], Ok((vec![], vec![]))),
            (
                "all read",
                &groups,
                vec![Ok(offsets("t", &[0])), Ok(vec![]), Ok(offsets("u", &[1]))],
                Ok((vec!["a", "b", "c"], vec![])),
            ),
            (
                "some read: the others' errors are kept",
                &groups,
                vec![Err("a: timeout".into()), Ok(vec![]), Err("c: gone".into())],
                Ok((vec!["b"], vec!["a: timeout", "c: gone"])),
            ),
            (
                "none read: the cycle fails with the first error",
                &groups,
                vec![
                    Err("a: timeout".into()),
                    Err("b: timeout".into()),
                    Err("c: gone".into()),
                ],
                Err("a: timeout"),
            ),
        ];
        for (name, groups, reads, want) in cases {
            let got = split_reads(groups, reads).map(|(by_group, errors)| {
                let read: Vec<String> = by_group.into_iter().map(|(g, _)| g).collect();
                (read, errors)
            });
            let want = want
                .map(|(read, errors)| (names(&read), names(&errors)))
                .map_err(String::from);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn target_partitions_decide_once_per_topic() {
        let by_group = vec![
            ("g1".to_string(), offsets("orders", &[1, 0])),
            ("g2".to_string(), offsets("orders", &[0])),
            ("g2".to_string(), offsets("internal", &[0])),
            ("g3".to_string(), offsets("billing", &[2])),
        ];
        let asked = std::cell::RefCell::new(Vec::new());
        let (targets, needed) = target_partitions(&by_group, |t| {
            asked.borrow_mut().push(t.to_string());
            (t != "internal").then(|| format!("dc1.{t}"))
        });
        assert_eq!(
            asked.into_inner(),
            names(&["billing", "internal", "orders"])
        );
        let mut targets: Vec<(&str, Option<String>)> = targets.into_iter().collect();
        targets.sort();
        assert_eq!(
            targets,
            vec![
                ("billing", Some("dc1.billing".into())),
                ("internal", None),
                ("orders", Some("dc1.orders".into())),
            ]
        );
        assert_eq!(
            needed,
            vec![
                ("dc1.billing".to_string(), 2),
                ("dc1.orders".to_string(), 0),
                ("dc1.orders".to_string(), 1),
            ],
            "sorted, each once, not replicated topics left out"
        );
        assert_eq!(target_partitions(&[], |_| None), (HashMap::new(), vec![]));
    }

    #[test]
    fn accept_written_table() {
        let record = |group: &str, partition: i32, downstream: i64| wire::Checkpoint {
            group: group.into(),
            topic: "dc1.orders".into(),
            partition,
            upstream_offset: downstream + 5,
            downstream_offset: downstream,
            metadata: String::new(),
        };
        let emit = vec![record("a", 0, 10), record("b", 0, 20), record("b", 1, 30)];
        let key = |c: &wire::Checkpoint| CheckpointKey::from(c);
        type Case = (
            &'static str,
            Vec<Result<(), String>>,
            Written<String>,
            Vec<usize>,
        );
        let cases: Vec<Case> = vec![
            (
                "all acknowledged",
                vec![Ok(()), Ok(()), Ok(())],
                Written {
                    count: 3,
                    ..Default::default()
                },
                vec![0, 1, 2],
            ),
            (
                "failures: the groups, the first error",
                vec![Ok(()), Err("timed out".into()), Err("too large".into())],
                Written {
                    count: 1,
                    failed_groups: BTreeSet::from(["b".to_string()]),
                    error: Some("timed out".into()),
                },
                vec![0],
            ),
        ];
        for (name, results, want, in_force) in cases {
            let mut held = InForce::default();
            // A checkpoint in force before stays unless a written record replaces it.
            let old = record("b", 1, 3);
            held.insert(key(&old), CheckpointState::from(&old));
            assert_eq!(accept_written(&mut held, &emit, results), want, "{name}");
            let mut want_held = InForce::default();
            want_held.insert(key(&old), CheckpointState::from(&old));
            for i in in_force {
                want_held.insert(key(&emit[i]), CheckpointState::from(&emit[i]));
            }
            assert_eq!(held, want_held, "{name}");
        }
        // Not written to a topic: every record in force at once.
        let mut held = InForce::default();
        let written: Written<String> = accept_written(&mut held, &emit, std::iter::repeat(Ok(())));
        assert_eq!((written.count, held.len()), (3, 3));
    }

    fn outcome(
        partition: i32,
        effective: Option<i64>,
        problem: Option<PartitionProblem>,
    ) -> PartitionOutcome {
        PartitionOutcome {
            source_topic: "orders".into(),
            target_topic: "dc1.orders".into(),
            partition,
            group_offset: 10,
            metadata: String::new(),
            translation: None,
            decision: None,
            effective: effective.map(|d| CheckpointState {
                upstream: 10,
                downstream: d,
            }),
            target_end: Some(100),
            problem,
        }
    }

    fn plan(group: &str, partitions: Vec<PartitionOutcome>) -> GroupPlan {
        GroupPlan {
            group: group.into(),
            partitions,
            emit: vec![],
        }
    }

    #[test]
    fn select_groups_keeps_the_selected_only() {
        let mut st = SpecState::default();
        st.groups.insert(
            "old".into(),
            GroupState {
                partitions: 3,
                ..Default::default()
            },
        );
        st.groups.insert(
            "kept".into(),
            GroupState {
                partitions: 2,
                ..Default::default()
            },
        );
        let groups = names(&["kept", "new"]);
        let selected: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
        select_groups(&mut st, &groups, &selected);
        let got: Vec<(&str, i32)> = st
            .groups
            .iter()
            .map(|(g, s)| (g.as_str(), s.partitions))
            .collect();
        assert_eq!(got, vec![("kept", 2), ("new", 0)]);
    }

    #[test]
    fn record_plans_table() {
        let before = Timestamp::from_second(1_700_000_000).unwrap();
        let now = Timestamp::from_second(1_700_000_060).unwrap();
        let old_failure = |reason| FailureState {
            reason,
            message: "old".into(),
            since: before,
        };
        let no_sync = Some(PartitionProblem::NoSync(NoSyncReason::Empty));
        let plans = vec![
            // Up to date: 2 partitions checkpointed, lag 100-50 + 100-60.
            plan(
                "current",
                vec![outcome(0, Some(50), None), outcome(1, Some(60), None)],
            ),
            // One partition without a sync: reported, still current.
            plan(
                "partly",
                vec![outcome(0, Some(50), None), outcome(1, None, no_sync)],
            ),
            // A target end unknown: not brought up to date.
            plan(
                "behind",
                vec![outcome(
                    0,
                    Some(90),
                    Some(PartitionProblem::TargetEndUnknown),
                )],
            ),
            // Its record was not written.
            plan("unwritten", vec![outcome(0, Some(50), None)]),
            // Not selected (cannot happen): skipped.
            plan("unknown", vec![outcome(0, Some(50), None)]),
        ];
        let failed: BTreeSet<String> = BTreeSet::from(["unwritten".to_string()]);
        let no_offset_sync = (
            GroupFailureReason::NoOffsetSync,
            "no safe translation for orders/1 at 10 (no offset sync yet)".to_string(),
        );
        for sync_group_offsets in [false, true] {
            let mut st = SpecState::default();
            for g in ["current", "partly", "behind", "unwritten"] {
                st.groups.insert(
                    g.into(),
                    GroupState {
                        synced: true,
                        failures: vec![
                            old_failure(GroupFailureReason::NoOffsetSync),
                            old_failure(GroupFailureReason::CommitFailed),
                        ],
                        ..Default::default()
                    },
                );
            }
            let mut told = Vec::new();
            record_plans(&mut st, &plans, &failed, sync_group_offsets, now, |g| {
                told.push(g.to_string())
            });
            assert_eq!(told, names(&["current", "partly"]), "{sync_group_offsets}");
            let row = |g: &str| {
                let s = &st.groups[g];
                let failures: Vec<(GroupFailureReason, String, Timestamp)> = s
                    .failures
                    .iter()
                    .map(|f| (f.reason, f.message.clone(), f.since))
                    .collect();
                (
                    s.last_checkpoint,
                    s.partitions,
                    s.target_lag,
                    s.synced,
                    failures,
                )
            };
            // The group sync owns `synced` and CommitFailed when it runs; else they go.
            let commit_failed: Vec<_> = if sync_group_offsets {
                vec![(GroupFailureReason::CommitFailed, "old".to_string(), before)]
            } else {
                vec![]
            };
            let synced = sync_group_offsets;
            let mut partly_failures = vec![(no_offset_sync.0, no_offset_sync.1.clone(), before)];
            partly_failures.extend(commit_failed.clone());
            assert_eq!(
                row("current"),
                (Some(now), 2, Some(90), synced, commit_failed.clone()),
                "current, sync={sync_group_offsets}"
            );
            assert_eq!(
                row("partly"),
                (Some(now), 1, Some(50), synced, partly_failures),
                "a NoOffsetSync that persists keeps its start, sync={sync_group_offsets}"
            );
            let mut behind_failures = vec![(
                GroupFailureReason::NoOffsetSync,
                "no safe translation for orders/0 at 10 (target end offset unknown)".to_string(),
                before,
            )];
            behind_failures.extend(commit_failed.clone());
            assert_eq!(
                row("behind"),
                (None, 1, Some(10), synced, behind_failures),
                "behind, sync={sync_group_offsets}"
            );
            assert_eq!(
                row("unwritten"),
                (None, 1, Some(50), synced, commit_failed),
                "unwritten, sync={sync_group_offsets}"
            );
            assert!(!st.groups.contains_key("unknown"));
        }
    }

    #[test]
    fn schedule_table() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut schedule: BTreeMap<String, Instant> =
            [("a".to_string(), at(5)), ("b".to_string(), at(10))].into();
        let next = names(&["b", "c"]);
        reschedule(&mut schedule, next.iter(), at(1));
        assert_eq!(
            schedule,
            [("b".to_string(), at(10)), ("c".to_string(), at(1))].into(),
            "a gone, b keeps its time, c due at once"
        );
        assert_eq!(due(&schedule, at(0)), Vec::<String>::new());
        assert_eq!(due(&schedule, at(1)), names(&["c"]));
        assert_eq!(due(&schedule, at(10)), names(&["b", "c"]));

        let refresh = Duration::from_secs(30);
        let cases = [
            ("the first due cycle", Some(at(0)), at(1)),
            ("never listed", None, at(1)),
            (
                "a listing due before the cycles",
                Some(at(0) - refresh),
                at(0),
            ),
        ];
        for (name, listed, want) in cases {
            assert_eq!(next_wake(&schedule, listed, refresh, at(0)), want, "{name}");
        }
        assert_eq!(
            next_wake(&BTreeMap::new(), None, refresh, at(0)),
            at(60),
            "nothing scheduled: a minute"
        );
    }

    #[test]
    fn refresh_interval_is_the_smallest() {
        let with = |s: i32| {
            let mut c = cp("f", ".*");
            c.spec.groups.refresh_interval_seconds = s;
            c
        };
        let cases = [
            (vec![], 30),
            (vec![with(120)], 120),
            (vec![with(120), with(15), with(60)], 15),
            (vec![with(0)], 1),
        ];
        for (specs, want) in cases {
            assert_eq!(
                refresh_interval(specs.iter()),
                Duration::from_secs(want),
                "{specs:?}"
            );
        }
    }
}
