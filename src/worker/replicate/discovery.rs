//! Topic discovery and the periodic offset-validation check, run beside the replication loop.
//!
//! The loop takes a [`RefreshInput`] snapshot of its partition table and hands it to
//! [`Discovery::refresh`] on a task of its own; the task lists both clusters, creates or grows
//! target topics, reads watermarks and topic ids, decides where new partitions start and
//! judges every observation, and returns a [`RefreshPlan`]. The loop only applies it
//! ([`apply_plan`], pure): records keep flowing while a cluster answers slowly. Evidence about
//! a partition whose [`Partition::version`] changed meanwhile (failed, reset, parked) is
//! dropped; the next refresh looks again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer as _, StreamConsumer};
use tracing::{debug, info, warn};

use super::assign::is_owned;
use super::clients::Clients;
use super::created::{created_by_flow, created_topics_store, CreatedTopic, CreatedTopics};
use super::io;
use super::partitions::{start_position, Partition, PartitionTable, Start, Taken};
use super::select::{config_changes, target_topic_action, ConfigExclusions, TargetTopicAction};
use super::settings::EngineSettings;
use super::status::PartitionState;
use super::validate::{check_observation, confirm_with_fetch, CheckOutcome, TopicIds};
use crate::api::{StartFrom, TopicPartitionRef};
use crate::kafka::config::ClientProperties;
use crate::kafka::context::LogContext;
use crate::kafka::error::{Context as _, Error as KafkaError};
use crate::kafka::topics::unwritable;
use crate::kafka::topics::{self, Admin, ConfigEntry, MetaClient};
use crate::kafka::wire::Progress;
use crate::telemetry::metrics::{ErrorKind, WorkerMetrics};
use crate::worker::error::Error;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};
use crate::worker::validation::classify::{Detection, KnownPartition, PartitionObservation};

/// A partition as the refresh saw it when it started.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionView {
    /// [`Partition::version`] at the snapshot.
    pub version: u64,
    /// Parked (its topic had vanished).
    pub parked: bool,
    /// Failed partitions are not checked.
    pub failed: bool,
    /// The consumer fetches it (its fetch responses can confirm a ListOffsets answer).
    pub assigned: bool,
    /// Validation baseline at the committed position, if it has one.
    pub known: Option<KnownPartition>,
    /// Records of it arrived since the last check.
    pub fetching: bool,
}

/// What a refresh starts from.
#[derive(Clone)]
pub struct RefreshInput {
    /// Every entry of the table, parked ones included.
    pub views: BTreeMap<TopicPartitionRef, PartitionView>,
    /// No refresh was applied before (`startFrom: Latest` applies).
    pub first: bool,
    /// The topic selection.
    pub filter: TopicFilter,
    /// `spec.syncTopicConfigs`.
    pub sync_topic_configs: bool,
    /// MM2's config exclusions plus `spec.topicConfigs.exclude` (an error for a pattern
    /// that does not compile, which a validated spec never has).
    pub config_exclusions: Result<ConfigExclusions, Error>,
    /// `spec.target.replicationFactor`.
    pub replication_factor: Option<i32>,
    /// `spec.internalTopics.replicationFactor`.
    pub internal_replication_factor: Option<i32>,
    /// `spec.startFrom`.
    pub start_from: StartFrom,
    /// `spec.offsetValidation.enabled`.
    pub validation: bool,
}

/// Takes the snapshot (and restarts every partition's "fetched since the last check").
pub fn snapshot(
    table: &mut PartitionTable,
    filter: &TopicFilter,
    spec: &crate::api::MirrorFlowSpec,
) -> RefreshInput {
    let views = table
        .entries_mut()
        .map(|(tp, p, parked)| {
            let fetching = !parked && std::mem::take(&mut p.fetched_since_check);
            (tp.clone(), view(tp, p, parked, fetching))
        })
        .collect();
    RefreshInput {
        views,
        first: !table.refreshed_once(),
        filter: filter.clone(),
        sync_topic_configs: spec.sync_topic_configs,
        config_exclusions: ConfigExclusions::new(spec),
        replication_factor: spec.target.replication_factor,
        internal_replication_factor: spec.internal_topics.replication_factor,
        start_from: spec.start_from,
        validation: spec.offset_validation.enabled,
    }
}

fn view(tp: &TopicPartitionRef, p: &Partition, parked: bool, fetching: bool) -> PartitionView {
    PartitionView {
        version: p.version,
        parked,
        failed: p.state.is_failed(),
        assigned: !parked && p.replicating(),
        known: p.position.map(|pos| p.known(tp, pos)),
        fetching,
    }
}

/// Whether target partition `partition` of `topic` was created by this refresh (so it is
/// empty without asking the target).
fn created_empty(empty_from: &BTreeMap<String, i32>, topic: &str, partition: i32) -> bool {
    empty_from.get(topic).is_some_and(|from| partition >= *from)
}

/// Lookups of the ends of target partitions that are to start fresh, within one refresh.
const NEW_PARTITION_TRIES: u32 = 5;
/// The wait before the next of those lookups, times the attempts so far (2.5 s in all).
const NEW_PARTITION_RETRY: Duration = Duration::from_millis(250);

/// One periodic check's result for a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub tp: TopicPartitionRef,
    /// [`PartitionView::version`] it was made against (0 for a partition new in this plan).
    pub version: u64,
    /// The position it was made at.
    pub position: i64,
    pub outcome: CheckOutcome,
}

/// What a refresh found; applied by [`apply_plan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefreshPlan {
    /// Source topics this worker owns partitions of: `(partitions, target topic)`. `None`
    /// when the source could not be listed (nothing changes).
    pub wanted: Option<BTreeMap<String, (i32, String)>>,
    /// Whether the target could be listed (else only vanished partitions are parked).
    pub targets_listed: bool,
    /// Target topics that exist with enough partitions.
    pub ready: BTreeSet<String>,
    /// Target topics this refresh created (`0`) or grew (the old count): their partitions
    /// from that index on did not exist a moment ago, so they hold nothing.
    pub empty_from: BTreeMap<String, i32>,
    /// Where partitions without a position start.
    pub starts: BTreeMap<TopicPartitionRef, Start>,
    /// Partitions without progress whose target partition already holds records: not
    /// started (ProgressMissing), with the target topic, its end and the start per
    /// `startFrom` that was refused.
    pub missing: BTreeMap<TopicPartitionRef, (String, i64, i64)>,
    /// `(log start, high watermark)` of owned partitions.
    pub marks: BTreeMap<TopicPartitionRef, (i64, i64)>,
    /// Validation of every partition with a position.
    pub checks: Vec<Check>,
    /// Target topics this worker cannot write to, with why: those it could not create or
    /// grow, and those the flow created (of the source topics whose partition 0 it owns)
    /// with fewer replicas than their `min.insync.replicas`; `None` when they could not be
    /// checked (the last answer stands).
    pub unwritable: Option<BTreeMap<String, String>>,
    /// How long the refresh took.
    pub elapsed: Duration,
}

/// Which worker this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub index: u32,
    pub count: u32,
}

impl Owner {
    fn owns(&self, topic: &str, partition: i32) -> bool {
        is_owned(topic, partition, self.index, self.count)
    }
}

/// The selected source topics this worker owns partitions of: `(partitions, target topic)`.
pub fn wanted_topics(
    source: &BTreeMap<String, i32>,
    filter: &TopicFilter,
    owner: Owner,
) -> BTreeMap<String, (i32, String)> {
    source
        .iter()
        .filter(|(topic, _)| filter.decide(topic) == TopicDecision::Replicate)
        .filter(|(topic, n)| (0..**n).any(|p| owner.owns(topic, p)))
        .map(|(topic, n)| (topic.clone(), (*n, filter.target_topic(topic))))
        .collect()
}

/// What the target needs: `(source topic, target topic, partitions, action)` per wanted topic.
pub fn target_actions(
    wanted: &BTreeMap<String, (i32, String)>,
    target: &BTreeMap<String, i32>,
) -> Vec<(String, String, i32, TargetTopicAction)> {
    wanted
        .iter()
        .map(|(topic, (n, t))| {
            let action = target_topic_action(*n, target.get(t).copied());
            (topic.clone(), t.clone(), *n, action)
        })
        .collect()
}

/// Owned partitions of the wanted topics, with their target topic, in order.
pub fn owned_partitions(
    wanted: &BTreeMap<String, (i32, String)>,
    owner: Owner,
) -> Vec<(TopicPartitionRef, String)> {
    let mut out = Vec::new();
    for (topic, (n, target)) in wanted {
        for p in (0..*n).filter(|p| owner.owns(topic, *p)) {
            out.push((
                TopicPartitionRef {
                    topic: topic.clone(),
                    partition: p,
                },
                target.clone(),
            ));
        }
    }
    out
}

/// Owned partitions that no longer belong to a wanted topic (vanished, deselected, or past a
/// shrunk partition count).
pub fn gone(
    table: &PartitionTable,
    wanted: &BTreeMap<String, (i32, String)>,
) -> Vec<TopicPartitionRef> {
    table
        .owned()
        .map(|(tp, _)| tp)
        .filter(|tp| {
            wanted
                .get(&tp.topic)
                .is_none_or(|(n, _)| tp.partition >= *n)
        })
        .cloned()
        .collect()
}

/// What applying a plan did (for the engine's side effects).
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// Partitions parked.
    pub gone: Vec<TopicPartitionRef>,
    /// Partitions that came back.
    pub back: Vec<TopicPartitionRef>,
    /// Partitions given a start.
    pub started: Vec<(TopicPartitionRef, Start)>,
    /// Partitions that stop (DataLoss / TopicReset).
    pub detections: Vec<Detection>,
    /// Deferred checks (logged).
    pub deferred: Vec<Detection>,
    /// The consumer must be re-assigned.
    pub reassign: bool,
}

/// Applies `plan` to the table: parks what vanished, takes owned partitions (new or back),
/// starts those with a ready target, records watermarks, and folds in the checks made against
/// the current version of each partition. `epoch` gives sync emitters their writer epoch.
pub fn apply_plan(
    table: &mut PartitionTable,
    plan: &RefreshPlan,
    owner: Owner,
    paused: bool,
    epoch: impl Fn() -> i64,
) -> Applied {
    let mut out = Applied::default();
    let Some(wanted) = &plan.wanted else {
        return out;
    };
    for tp in gone(table, wanted) {
        if table.park(&tp) {
            out.gone.push(tp);
            out.reassign = true;
        }
    }
    if !plan.targets_listed {
        return out;
    }
    for (tp, target) in owned_partitions(wanted, owner) {
        if table.take(&tp, &target, epoch(), paused) == Taken::Back {
            out.back.push(tp.clone());
            out.reassign = true;
        }
        if !plan.ready.contains(&target) {
            continue;
        }
        if let Some(start) = plan.starts.get(&tp) {
            if table.start(&tp, start, paused) {
                out.started.push((tp.clone(), start.clone()));
                out.reassign = true;
            }
        }
    }
    for (tp, (target, end, refused)) in &plan.missing {
        if table
            .get(tp)
            .is_some_and(|p| p.position.is_none() && !p.state.is_failed())
        {
            out.detections
                .push(progress_missing(tp, target, *end, *refused));
        }
    }
    for (tp, (low, high)) in &plan.marks {
        if let Some(p) = table.get_mut(tp) {
            p.low = Some(*low);
            p.high = Some(*high);
        }
    }
    for c in &plan.checks {
        let Some(p) = table.get_mut(&c.tp) else {
            continue;
        };
        let checkable = matches!(
            p.state,
            PartitionState::Replicating | PartitionState::Paused
        );
        if p.version != c.version || !checkable {
            continue;
        }
        match &c.outcome {
            CheckOutcome::Healthy(obs) => {
                if p.record(&c.tp, c.position, obs) {
                    // Persist the id with the position, also for an idle partition.
                    table.mark_pending(&c.tp);
                }
            }
            CheckOutcome::Deferred(d) => out.deferred.push(d.clone()),
            CheckOutcome::Failed(d) | CheckOutcome::Confirm(_, d) => {
                out.detections.push(at_position(d, p.position))
            }
        }
    }
    table.mark_refreshed();
    out
}

/// A detection made at a position the partition has replicated past since: a recreated or
/// truncated topic stays so, and its failure names where replication stopped, so the records
/// copied meanwhile are inside the window it reports. Other kinds stay as found (they are
/// only made on partitions that do not move: not fetching, or at their start).
fn at_position(d: &Detection, position: Option<i64>) -> Detection {
    let mut d = d.clone();
    if d.type_ == crate::api::FailureType::TopicReset {
        d.requested_offset = d.requested_offset.max(position.unwrap_or(0));
    }
    d
}

/// Logs what applying a plan did.
pub fn log_applied(a: &Applied, table: &PartitionTable) {
    for tp in &a.gone {
        info!(topic = %tp.topic, partition = tp.partition, "partition no longer replicated by this worker");
    }
    for tp in &a.back {
        let position = table.get(tp).and_then(|p| p.position);
        info!(topic = %tp.topic, partition = tp.partition, position = ?position, "partition is back");
    }
    for (tp, start) in &a.started {
        let resumed = matches!(start, Start::Resume(_));
        let from_mirror_maker2 = matches!(start, Start::MirrorMaker2(_));
        let after_failover = matches!(start, Start::AfterFailover(_));
        info!(topic = %tp.topic, partition = tp.partition, position = start.position(), resumed, from_mirror_maker2, after_failover, "taking partition");
    }
    for d in &a.deferred {
        debug!(
            topic = %d.tp.topic,
            partition = d.tp.partition,
            position = d.requested_offset,
            log_start = ?d.log_start,
            "log start past the committed position while fetching; checking again later"
        );
    }
}

/// The ProgressMissing detection of a partition whose target already holds `end` offsets.
fn progress_missing(tp: &TopicPartitionRef, target: &str, end: i64, refused: i64) -> Detection {
    Detection {
        tp: tp.clone(),
        type_: crate::api::FailureType::ProgressMissing,
        requested_offset: refused,
        log_start: None,
        high_watermark: None,
        records_lost: crate::worker::validation::classify::RecordsLost::Unknown,
        signals: vec![
            crate::worker::validation::classify::Signal::TargetHoldsRecords {
                target_topic: target.to_string(),
                end,
            },
        ],
    }
}

/// The clients and settings a refresh needs; cloned into the refresh task.
#[derive(Clone)]
pub struct Discovery {
    pub source_meta: MetaClient,
    pub target_meta: MetaClient,
    pub source_admin: Arc<Admin>,
    pub target_admin: Arc<Admin>,
    /// The replication consumer: its fetch responses' watermarks confirm ListOffsets answers.
    pub consumer: Arc<StreamConsumer<LogContext>>,
    pub source_props: ClientProperties,
    pub source_alias: String,
    pub target_alias: String,
    pub owner: Owner,
    pub io_timeout: Duration,
    pub validation_timeout: Duration,
    /// Progress read at start, by source partition.
    pub stored: Arc<HashMap<(String, i32), Progress>>,
    /// MirrorMaker 2's next offsets read at start (`spec.source.startFrom.mirrorMaker2`), by
    /// source partition.
    pub mm2: Arc<BTreeMap<(String, i32), i64>>,
    /// Where failing back starts each partition the failover reported
    /// (`spec.source.startFrom.afterFailover`), by source partition.
    pub after_failover: Arc<BTreeMap<(String, i32), i64>>,
    pub topic_ids: TopicIds,
    pub metrics: WorkerMetrics,
    /// The target's client config (for the created-topics store).
    pub target_config: rdkafka::ClientConfig,
    /// The created-topics store's topic, and the store once opened (taken by the refresh
    /// that uses it; refreshes never overlap).
    pub store_topic: String,
    pub created: Arc<std::sync::Mutex<Option<CreatedTopics>>>,
}

impl Discovery {
    /// The refreshes of worker `settings` of the flow `spec`, through `clients` (stored
    /// progress is set once read).
    pub fn new(
        clients: &Clients,
        settings: &EngineSettings,
        spec: &crate::api::MirrorFlowSpec,
        topic_ids: TopicIds,
        metrics: &WorkerMetrics,
    ) -> Self {
        Self {
            source_meta: clients.source_meta.clone(),
            target_meta: clients.target_meta.clone(),
            source_admin: clients.source_admin.clone(),
            target_admin: clients.target_admin.clone(),
            consumer: clients.consumer.clone(),
            source_props: clients.source_props.clone(),
            source_alias: spec.source.alias.clone(),
            target_alias: spec.target.alias.clone(),
            owner: Owner {
                index: settings.worker_index,
                count: settings.worker_count,
            },
            io_timeout: settings.tuning.io_timeout,
            validation_timeout: settings.tuning.validation_timeout,
            stored: Arc::default(),
            mm2: Arc::default(),
            after_failover: Arc::default(),
            topic_ids,
            metrics: metrics.clone(),
            target_config: clients.target_props.to_client_config(),
            store_topic: created_topics_store(&settings.namespace, &settings.flow_name),
            created: Arc::default(),
        }
    }

    /// Lists, creates, looks up and judges; never touches the table. Timed and counted
    /// (`topic_refresh_seconds`, `topic_refreshes_total`) whether or not a cluster answered.
    pub async fn refresh(&self, input: RefreshInput) -> RefreshPlan {
        let begin = Instant::now();
        let mut plan = self.plan(input).await;
        plan.elapsed = begin.elapsed();
        self.metrics.refreshed(plan.elapsed);
        plan
    }

    async fn plan(&self, input: RefreshInput) -> RefreshPlan {
        let mut plan = RefreshPlan::default();
        let timeout = self.io_timeout;
        let Some(source) = self
            .list(&self.source_meta, "source", &self.source_alias)
            .await
        else {
            return plan;
        };
        let wanted = wanted_topics(&source, &input.filter, self.owner);
        plan.wanted = Some(wanted.clone());
        let target_rf = match topics::list_topics_with_replicas(&self.target_meta, timeout).await {
            Ok(t) => t,
            Err(e) => {
                self.metrics.error(ErrorKind::TopicSync, &e);
                warn!("target cluster {}: {e}", self.target_alias);
                return plan;
            }
        };
        let target = target_rf
            .iter()
            .map(|(t, (n, _))| (t.clone(), *n))
            .collect();
        plan.targets_listed = true;
        // Target topics that cannot be created or grown are reported with the ones that
        // cannot take writes: either way no record reaches them.
        let mut refused = BTreeMap::new();
        for (topic, t, n, action) in target_actions(&wanted, &target) {
            match self.prepare_target(&topic, &t, n, action, &input).await {
                Ok(empty_from) => {
                    if let Some(from) = empty_from {
                        plan.empty_from.insert(t.clone(), from);
                    }
                    plan.ready.insert(t);
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::TopicSync, &e);
                    warn!("target cluster {}: {e}", self.target_alias);
                    refused.insert(t, format!("target cluster {}: {e}", self.target_alias));
                }
            }
        }
        plan.unwritable = match self
            .sync_created(&wanted, &target_rf, &plan.ready, &input)
            .await
        {
            Some(mut m) => {
                m.extend(refused);
                Some(m)
            }
            None if !refused.is_empty() => Some(refused),
            None => None,
        };
        let owned = owned_partitions(&wanted, self.owner);
        let marks = match io::watermarks(
            &self.source_meta,
            owned
                .iter()
                .map(|(tp, _)| (tp.topic.clone(), tp.partition))
                .collect(),
            timeout,
        )
        .await
        {
            Ok(m) => m,
            Err(e) => {
                warn!("{e}");
                BTreeMap::new()
            }
        };
        for ((topic, partition), r) in marks {
            match r {
                Ok(m) => {
                    plan.marks.insert(TopicPartitionRef { topic, partition }, m);
                }
                Err(e) => debug!("{e}"),
            }
        }
        // Where partitions without a position start (the target must be ready).
        for (tp, target) in &owned {
            let view = input.views.get(tp);
            let settled = view.is_some_and(|v| v.known.is_some() || v.failed);
            if settled || !plan.ready.contains(target) {
                continue;
            }
            let key = (tp.topic.clone(), tp.partition);
            let stored = self.stored.get(&key);
            let external = self
                .mm2
                .get(&key)
                .map(|&o| Start::MirrorMaker2(o))
                .or_else(|| {
                    let at = self.after_failover.get(&key);
                    at.map(|&o| Start::AfterFailover(o))
                });
            let marks = plan.marks.get(tp).copied();
            if let Some(s) = start_position(stored, external, marks, input.start_from, input.first)
            {
                plan.starts.insert(tp.clone(), s);
            }
        }
        self.refuse_guesses(&owned, &mut plan).await;
        if input.validation {
            plan.checks = self.check(&input, &owned, &plan).await;
        }
        plan
    }

    /// A fresh start is a guess when the target partition already holds records (progress
    /// deleted, target rebuilt): those partitions do not start ([`RefreshPlan::missing`]). If
    /// the target's ends cannot be read, fresh starts wait for the next refresh.
    async fn refuse_guesses(&self, owned: &[(TopicPartitionRef, String)], plan: &mut RefreshPlan) {
        let fresh: Vec<(TopicPartitionRef, String)> = owned
            .iter()
            .filter(|(tp, _)| matches!(plan.starts.get(tp), Some(Start::Fresh(_))))
            .cloned()
            .collect();
        if fresh.is_empty() {
            return;
        }
        // Partitions this refresh created hold nothing: asking for their ends would only
        // wait for leaders (a 1,000-partition topic takes seconds to elect them all, and
        // one leaderless partition fails the whole ListOffsets).
        let mut ends: BTreeMap<(String, i32), Result<(i64, i64), crate::kafka::Error>> =
            BTreeMap::new();
        let mut unanswered = Vec::new();
        for (tp, t) in &fresh {
            if created_empty(&plan.empty_from, t, tp.partition) {
                ends.insert((t.clone(), tp.partition), Ok((0, 0)));
            } else {
                unanswered.push((t.clone(), tp.partition));
            }
        }
        // A target topic created a moment ago (by another worker) may have no leader elected
        // yet (its ends answer NOT_LEADER_OR_FOLLOWER for a second or so): ask again shortly
        // rather than leave its partitions for the next refresh.
        for attempt in 1..=NEW_PARTITION_TRIES {
            if unanswered.is_empty() {
                break;
            }
            let asked = unanswered.clone();
            match io::watermarks(&self.target_meta, asked, self.io_timeout).await {
                Ok(e) => ends.extend(e.into_iter().filter(|(_, r)| r.is_ok())),
                Err(e) if attempt == NEW_PARTITION_TRIES => warn!(
                    "target cluster {}: {e}; new partitions start later",
                    self.target_alias
                ),
                Err(_) => {}
            }
            unanswered.retain(|k| !ends.contains_key(k));
            if unanswered.is_empty() || attempt == NEW_PARTITION_TRIES {
                break;
            }
            tokio::time::sleep(NEW_PARTITION_RETRY * attempt).await;
        }
        for (tp, target) in fresh {
            match ends.get(&(target.clone(), tp.partition)) {
                Some(Ok((_, 0))) => {}
                Some(Ok((_, end))) => {
                    let refused = plan.starts.remove(&tp).map_or(0, |s| s.position());
                    plan.missing.insert(tp, (target, *end, refused));
                }
                _ => {
                    plan.starts.remove(&tp);
                }
            }
        }
    }

    /// The topics of the `side` cluster `alias` (partition counts); a failure is logged and
    /// counted.
    async fn list(
        &self,
        meta: &MetaClient,
        side: &str,
        alias: &str,
    ) -> Option<BTreeMap<String, i32>> {
        match topics::list_topics(meta, self.io_timeout).await {
            Ok(t) => Some(t),
            Err(e) => {
                self.metrics.error(ErrorKind::TopicSync, &e);
                warn!("{side} cluster {alias}: {e}");
                None
            }
        }
    }

    /// Creates or grows a target topic: `Ok` when it is ready, else why not (reported).
    async fn prepare_target(
        &self,
        topic: &str,
        target: &str,
        partitions: i32,
        action: TargetTopicAction,
        input: &RefreshInput,
    ) -> Result<Option<i32>, Error> {
        let timeout = self.io_timeout;
        match action {
            TargetTopicAction::Ready => Ok(None),
            TargetTopicAction::Grow { from, to } => {
                match topics::add_partitions(&self.target_admin, target, to, timeout).await {
                    Ok(()) => {
                        info!(topic = %target, from, to, "grew target topic");
                        Ok(Some(from))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            TargetTopicAction::Create => {
                let configs = if input.sync_topic_configs {
                    let exclusions = match &input.config_exclusions {
                        Ok(x) => x,
                        Err(e) => {
                            return Err(e
                                .clone()
                                .context(format!("not creating target topic {target}")))
                        }
                    };
                    match io::syncable_topic_configs(&self.source_admin, topic, exclusions, timeout)
                        .await
                    {
                        Ok(c) => c,
                        Err(e) => {
                            return Err(Error::from(e).context(format!(
                                "not creating target topic {target} yet (spec.syncTopicConfigs is true)"
                            )))
                        }
                    }
                } else {
                    Vec::new()
                };
                let rf = input.replication_factor;
                match topics::create_topic(
                    &self.target_admin,
                    target,
                    partitions,
                    rf,
                    &configs,
                    timeout,
                )
                .await
                {
                    Ok(created) => {
                        if created {
                            info!(topic = %target, partitions, replication_factor = ?rf, ?configs, "created target topic");
                            if let Err(e) = self.record_created(target, input).await {
                                self.metrics.error(ErrorKind::TopicSync, &e);
                                warn!("target topic {target} was created but could not be recorded as the flow's ({e}); its configs are not re-synced");
                            }
                        }
                        Ok(created.then_some(0))
                    }
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Records that the flow created `target` in the created-topics store (creating the
    /// store first), with the topic's id. Without an id answer nothing is recorded: a
    /// record without one would match any topic of that name.
    async fn record_created(&self, target: &str, input: &RefreshInput) -> Result<(), Error> {
        let timeout = self.io_timeout;
        // Just created: on a cluster of several brokers the one that answers may not know
        // the topic yet (UNKNOWN_TOPIC_OR_PARTITION for a moment). Ask again, within the bound.
        let begin = Instant::now();
        let mut pause = Duration::from_millis(100);
        let topic_id = loop {
            let mut ids =
                io::topic_ids(&self.target_admin, vec![target.to_string()], timeout).await?;
            match ids
                .remove(target)
                .unwrap_or_else(|| Err("no answer".to_string()))
            {
                Ok(id) => break id,
                Err(_) if begin.elapsed() + pause < timeout => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    return Err(KafkaError::Client(e)
                        .context(format!("topic id of {target}"))
                        .into())
                }
            }
        };
        let mut store = self.take_store()?;
        if !store.exists {
            let existing = topics::list_topics(&self.target_meta, timeout).await;
            if !existing?.contains_key(&self.store_topic) {
                let configs = topics::internal_topic_configs();
                let rf = input.internal_replication_factor;
                let store_topic = &self.store_topic;
                // Created or created meanwhile by another worker: either way it exists.
                topics::create_topic(&self.target_admin, store_topic, 1, rf, &configs, timeout)
                    .await
                    .context_with(|| format!("cannot create internal topic {store_topic}"))?;
            }
            store.exists = true;
        }
        let target = target.to_string();
        let (store, r) = crate::kafka::run_blocking(move || {
            let r = store.record(&target, CreatedTopic { topic_id });
            (store, r)
        })
        .await?;
        self.put_store(store);
        r
    }

    /// The store, opened on first use.
    fn take_store(&self) -> Result<CreatedTopics, Error> {
        let taken = self
            .created
            .lock()
            .map_err(|e| Error::Internal(e.to_string()))?
            .take();
        match taken {
            Some(s) => Ok(s),
            None => Ok(CreatedTopics::new(
                &self.target_config,
                &self.store_topic,
                self.io_timeout,
            )?),
        }
    }

    fn put_store(&self, store: CreatedTopics) {
        if let Ok(mut g) = self.created.lock() {
            *g = Some(store);
        }
    }

    /// What the store holds now (read on from where the last refresh stopped).
    async fn created_topics(&self) -> Result<BTreeMap<String, CreatedTopic>, Error> {
        let store = self.take_store()?;
        let (store, r) = crate::kafka::run_blocking(move || {
            let mut store = store;
            let r = store.catch_up().cloned();
            (store, r)
        })
        .await?;
        self.put_store(store);
        r
    }

    /// For the ready target topics this flow created, of the source topics whose partition
    /// 0 this worker owns (one worker per topic): re-syncs their configs from the source
    /// (`syncTopicConfigs`), and checks that they can take writes. Returns the topics that
    /// cannot; `None` when the check could not run.
    async fn sync_created(
        &self,
        wanted: &BTreeMap<String, (i32, String)>,
        target_rf: &BTreeMap<String, (i32, i32)>,
        ready: &BTreeSet<String>,
        input: &RefreshInput,
    ) -> Option<BTreeMap<String, String>> {
        let timeout = self.io_timeout;
        let fail = |e: Error| {
            self.metrics.error(ErrorKind::TopicSync, &e);
            warn!("target cluster {}: {e}", self.target_alias);
            None
        };
        let mine: Vec<(&String, &String)> = wanted
            .iter()
            .filter(|(s, (_, t))| self.owner.owns(s, 0) && ready.contains(t))
            .map(|(s, (_, t))| (s, t))
            .collect();
        if mine.is_empty() {
            return Some(BTreeMap::new());
        }
        let known = match self.created_topics().await {
            Ok(k) => k,
            Err(e) => return fail(e),
        };
        let recorded: Vec<(&String, &String)> = mine
            .into_iter()
            .filter(|(_, t)| known.contains_key(*t))
            .collect();
        let with_id: Vec<String> = recorded
            .iter()
            .filter(|(_, t)| known.get(*t).is_some_and(|c| c.topic_id.is_some()))
            .map(|(_, t)| (*t).clone())
            .collect();
        let ids = if with_id.is_empty() {
            BTreeMap::new()
        } else {
            match io::topic_ids(&self.target_admin, with_id, timeout).await {
                Ok(ids) => ids,
                Err(e) => return fail(Error::from(e).context("topic ids")),
            }
        };
        let ours: Vec<(String, String)> = recorded
            .into_iter()
            .filter(|(_, t)| {
                let now = ids.get(*t).and_then(|r| r.as_ref().ok()).cloned().flatten();
                created_by_flow(known.get(*t), now.as_deref())
            })
            .map(|(s, t)| (s.clone(), t.clone()))
            .collect();
        if ours.is_empty() {
            return Some(BTreeMap::new());
        }
        let targets: Vec<String> = ours.iter().map(|(_, t)| t.clone()).collect();
        let target_configs =
            match topics::describe_topic_configs(&self.target_admin, &targets, timeout).await {
                Ok(c) => c,
                Err(e) => return fail(e.into()),
            };
        let mut problems = BTreeMap::new();
        for t in &targets {
            let Some(Ok(entries)) = target_configs.get(t) else {
                continue;
            };
            let min_insync = topics::min_insync_replicas(entries);
            let Some((_, rf)) = target_rf.get(t) else {
                continue;
            };
            if let Some(why) = unwritable(t, *rf, min_insync) {
                let hint = "spec.target.replicationFactor sets it for new target topics";
                problems.insert(t.clone(), format!("{why} ({hint})"));
            }
        }
        if input.sync_topic_configs {
            self.resync_configs(&ours, &target_configs, input).await;
        }
        Some(problems)
    }

    /// Makes the configs of the target topics `ours` (`(source, target)`) match their
    /// source topics' ([`config_changes`]); counts each change applied.
    async fn resync_configs(
        &self,
        ours: &[(String, String)],
        target_configs: &BTreeMap<String, Result<Vec<ConfigEntry>, KafkaError>>,
        input: &RefreshInput,
    ) {
        let timeout = self.io_timeout;
        let exclusions = match &input.config_exclusions {
            Ok(x) => x,
            Err(e) => {
                warn!("topic configs not synced: {e}");
                return;
            }
        };
        let sources: Vec<String> = ours.iter().map(|(s, _)| s.clone()).collect();
        let source_configs =
            match topics::describe_topic_configs(&self.source_admin, &sources, timeout).await {
                Ok(c) => c,
                Err(e) => {
                    self.metrics.error(ErrorKind::TopicSync, &e);
                    warn!("source cluster {}: {e}", self.source_alias);
                    return;
                }
            };
        let mut changes = Vec::new();
        for (s, t) in ours {
            match (source_configs.get(s), target_configs.get(t)) {
                (Some(Ok(src)), Some(Ok(dst))) => {
                    let c = config_changes(src, dst, exclusions);
                    if !c.is_empty() {
                        changes.push((t.clone(), c));
                    }
                }
                (Some(Err(e)), _) | (_, Some(Err(e))) => {
                    self.metrics.error(ErrorKind::TopicSync, e);
                    warn!("{e}");
                }
                _ => {}
            }
        }
        if changes.is_empty() {
            return;
        }
        let results =
            match topics::alter_topic_configs(&self.target_admin, changes.clone(), timeout).await {
                Ok(r) => r,
                Err(e) => {
                    self.metrics.error(ErrorKind::TopicSync, &e);
                    warn!("target cluster {}: {e}", self.target_alias);
                    return;
                }
            };
        for ((t, c), r) in changes.iter().zip(results) {
            match r {
                Ok(()) => {
                    for change in c {
                        self.metrics.topic_config_change(change.op());
                    }
                    info!(topic = %t, changes = ?c, "synced target topic configs");
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::TopicSync, &e);
                    warn!("target cluster {}: {e}", self.target_alias);
                }
            }
        }
    }

    /// Offset validation of every owned, not failed partition with a position (new ones at
    /// their start, before the consumer is assigned to them) against the fresh watermarks and
    /// topic ids; ListOffsets-only detections confirmed by a Fetch.
    async fn check(
        &self,
        input: &RefreshInput,
        owned: &[(TopicPartitionRef, String)],
        plan: &RefreshPlan,
    ) -> Vec<Check> {
        // (tp, version, baseline, fetching, assigned)
        let mut subjects = Vec::new();
        for (tp, _) in owned {
            let view = input.views.get(tp);
            let known = match (view.and_then(|v| v.known.clone()), plan.starts.get(tp)) {
                (Some(k), _) if !view.is_some_and(|v| v.failed) => k,
                (None, Some(start)) => {
                    let (id, _) = match start {
                        Start::Resume(p) => (p.topic_id.clone(), ()),
                        Start::Fresh(_) | Start::MirrorMaker2(_) | Start::AfterFailover(_) => {
                            (String::new(), ())
                        }
                    };
                    KnownPartition {
                        tp: tp.clone(),
                        position: start.position(),
                        topic_id: (!id.is_empty()).then_some(id),
                        high_watermark: None,
                        log_start: None,
                    }
                }
                _ => continue,
            };
            let v = view.map(|v| (v.version, v.fetching, v.assigned && !v.parked));
            let (version, fetching, assigned) = v.unwrap_or((0, false, false));
            subjects.push((tp.clone(), version, known, fetching, assigned));
        }
        let topics: BTreeSet<String> = subjects.iter().map(|s| s.0.topic.clone()).collect();
        let ids = self.topic_ids.lookup(topics).await;
        let mut checks = Vec::new();
        let mut to_confirm = Vec::new();
        for (tp, version, known, fetching, assigned) in subjects {
            let Some((low, high)) = plan.marks.get(&tp).copied() else {
                continue;
            };
            let now = PartitionObservation {
                topic_id: ids.get(&tp.topic).cloned(),
                log_start: low,
                high_watermark: high,
            };
            let position = known.position;
            match check_observation(&known, &now, fetching) {
                CheckOutcome::Confirm(obs, d) => {
                    to_confirm.push((tp, version, known, obs, d, assigned))
                }
                outcome => checks.push(Check {
                    tp,
                    version,
                    position,
                    outcome,
                }),
            }
        }
        checks.extend(self.confirm(to_confirm).await);
        checks
    }

    /// Confirms ListOffsets-only detections with the high watermark of a fetch response: the
    /// consumer's own (for partitions it fetches) or a probe's.
    async fn confirm(
        &self,
        items: Vec<(
            TopicPartitionRef,
            u64,
            KnownPartition,
            PartitionObservation,
            Detection,
            bool,
        )>,
    ) -> Vec<Check> {
        if items.is_empty() {
            return Vec::new();
        }
        let mut fetched: HashMap<TopicPartitionRef, i64> = HashMap::new();
        let mut probe = Vec::new();
        for (tp, _, _, _, d, assigned) in &items {
            let cached = assigned
                .then(|| io::cached_watermarks(self.consumer.client(), &tp.topic, tp.partition))
                .flatten();
            match cached {
                Some((_, high)) => {
                    fetched.insert(tp.clone(), high);
                }
                None => probe.push((tp.topic.clone(), tp.partition, d.requested_offset)),
            }
        }
        if !probe.is_empty() {
            let ctx = LogContext::new(&self.source_alias);
            let timeout = self.validation_timeout;
            match io::fetch_high_watermarks(&self.source_props, ctx, probe, timeout).await {
                Ok(m) => fetched
                    .extend(m.into_iter().map(|((topic, partition), h)| {
                        (TopicPartitionRef { topic, partition }, h)
                    })),
                Err(e) => warn!("confirming source watermarks with a fetch: {e}"),
            }
        }
        items
            .into_iter()
            .map(|(tp, version, known, obs, d, _)| {
                let h = fetched.get(&tp).copied();
                let listed = obs.high_watermark;
                let outcome = confirm_with_fetch(&known, obs, d, h);
                if let (CheckOutcome::Healthy(_), Some(h)) = (&outcome, h) {
                    debug!(
                        topic = %tp.topic,
                        partition = tp.partition,
                        position = known.position,
                        list_offsets = listed,
                        fetch = h,
                        "ListOffsets' high watermark is below the position but a fetch's is not; not stopping"
                    );
                }
                Check {
                    position: known.position,
                    tp,
                    version,
                    outcome,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
