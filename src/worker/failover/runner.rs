//! The failover's I/O: worker 0 runs `spec.failover` once per id and every worker stops
//! replicating once it is done. The outcome is kept on the target in the compacted topic
//! `mirrorflow-failover.<namespace>.<flow>.internal` (key the id, value the report as JSON),
//! so a restarted worker neither runs it again nor resumes replicating.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message as _};
use tokio::sync::watch;
use tracing::{info, warn};

use super::plan::{
    drain_step, plan_group, planned_partitions, ranges_to_count, record_final, record_times,
    summarize_recovery, windows_back, DrainStep, GroupInput, Proposal, Tp,
};
use crate::api::{
    FailoverMode, FailoverPartition, FailoverPhase, FailoverReport, FailoverRequest,
    MirrorFlowSpec, OffsetCheckpoint,
};
use crate::kafka::admin::{GroupAdmin, GroupOffset};
use crate::kafka::config::client_properties;
use crate::kafka::context::LogContext;
use crate::kafka::tail::TopicTail;
use crate::kafka::wire::{self, offset_syncs_topic, progress_topic, SYNC_SEQUENCE_HEADER};
use crate::worker::checkpoint::groups::GroupSelection;
use crate::worker::checkpoint::runner::checkpoints_topic;
use crate::worker::checkpoint::store::SyncStore;
use crate::worker::checkpoint::translate::{clamp_to_target_end, Translation};
use crate::worker::replicate::io::read_progress;
use crate::worker::replicate::store::{
    range_reader, read_range, read_store, write_store, StoreError,
};
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

pub use crate::worker::replicate::store::failover_store;

/// Why a failover could not run (its report's `Refused` message) or its store failed.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// The flow's settings (a cluster's client config, the topic selection).
    #[error("{0}")]
    Config(String),
    /// A precondition does not hold.
    #[error("{0}")]
    Refused(String),
    /// A Kafka call failed.
    #[error(transparent)]
    Kafka(#[from] crate::kafka::Error),
    /// The progress topic could not be read.
    #[error("reading the progress topic {0}")]
    Progress(String),
    /// The failover store holds what this build cannot read, or a report does not encode.
    #[error("failover store: {0}")]
    Store(String),
    /// A blocking task did not finish.
    #[error("blocking task failed: {0}")]
    Join(String),
    /// A store topic or a range could not be read or written.
    #[error(transparent)]
    Io(#[from] StoreError),
    /// One step failed.
    #[error("{what}: {source}")]
    Step {
        what: &'static str,
        source: Box<FailoverError>,
    },
}

impl FailoverError {
    fn doing(self, what: &'static str) -> Self {
        Self::Step {
            what,
            source: Box::new(self),
        }
    }
}

impl From<rdkafka::error::KafkaError> for FailoverError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        Self::Kafka(e.into())
    }
}

/// Bound of each cluster call.
const IO_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the drain is looked at, and other workers look for the outcome.
const POLL: Duration = Duration::from_secs(1);

/// A worker's failover side.
pub struct FailoverRunner {
    pub namespace: String,
    pub flow: String,
    pub secrets_dir: PathBuf,
    pub index: u32,
    /// The flow's spec, as it changes.
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// The OffsetCheckpoints (their group selections).
    pub checkpoints: watch::Receiver<Vec<OffsetCheckpoint>>,
    /// The report, for the worker's entry (worker 0).
    pub state: watch::Sender<Option<FailoverReport>>,
    /// True while replication must stay stopped: a failover of the current id is done, or
    /// (at start, while `spec.failover` is set) the store has not said yet whether it is.
    pub stopped: watch::Sender<bool>,
}

impl FailoverRunner {
    /// Runs until `shutdown`.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut known: HashMap<String, FailoverReport> = HashMap::new();
        loop {
            let req = self.spec.borrow_and_update().failover.clone();
            match req {
                None => {
                    self.stopped
                        .send_if_modified(|s| std::mem::replace(s, false));
                    self.state.send_if_modified(|s| s.take().is_some());
                }
                Some(req) => {
                    let read = known.contains_key(&req.id)
                        || match self.read_store().await {
                            Ok(stored) => {
                                known.extend(stored);
                                true
                            }
                            Err(e) => {
                                warn!(id = %req.id, "reading the failover store: {e}; trying again");
                                false
                            }
                        };
                    match known.get(&req.id) {
                        Some(report) => {
                            let stop = report.phase == FailoverPhase::Done;
                            self.stopped
                                .send_if_modified(|s| std::mem::replace(s, stop) != stop);
                            if self.index == 0 {
                                let r = Some(report.clone());
                                self.state
                                    .send_if_modified(|s| std::mem::replace(s, r.clone()) != r);
                            }
                        }
                        // Not run yet: replicate (a planned failover drains by it); worker 0
                        // runs it, then applies its outcome on the next turn.
                        None if read => {
                            self.stopped
                                .send_if_modified(|s| std::mem::replace(s, false));
                            if self.index == 0 {
                                let report = tokio::select! {
                                    r = self.execute(&req) => r,
                                    _ = shutdown.as_mut() => return,
                                };
                                if let Err(e) = self.write_store(&report).await {
                                    // Not recorded: a restart runs it again (committing the
                                    // same offsets at most, never backwards).
                                    warn!(id = %req.id, "recording the failover outcome: {e}");
                                }
                                known.insert(req.id.clone(), report);
                                continue;
                            }
                        }
                        // The store did not answer: whether it is done is unknown; stay as
                        // we are (stopped from the start while spec.failover is set).
                        None => {}
                    }
                }
            }
            tokio::select! {
                _ = shutdown.as_mut() => return,
                _ = self.spec.changed() => {}
                _ = tokio::time::sleep(POLL * 2) => {}
            }
        }
    }

    fn config(&self, target: bool) -> Result<ClientConfig, FailoverError> {
        let spec = self.spec.borrow();
        let (side, cluster) = if target {
            ("target", &spec.target)
        } else {
            ("source", &spec.source)
        };
        client_properties(cluster, &self.secrets_dir)
            .map(|p| p.to_client_config())
            .map_err(|e| FailoverError::Config(format!("spec.{side}: {e}")))
    }

    fn publish(&self, report: &FailoverReport) {
        self.state.send_replace(Some(report.clone()));
    }

    async fn read_store(&self) -> Result<BTreeMap<String, FailoverReport>, FailoverError> {
        let config = self.config(true)?;
        let topic = failover_store(&self.namespace, &self.flow);
        Ok(read_store(config, topic, "target cluster").await?)
    }

    async fn write_store(&self, report: &FailoverReport) -> Result<(), FailoverError> {
        let config = self.config(true)?;
        let topic = failover_store(&self.namespace, &self.flow);
        let rf = self.spec.borrow().internal_topics.replication_factor;
        Ok(write_store(config, topic, rf, report.id.clone(), report).await?)
    }

    /// What `req` would do now, changing nothing (`mirrorflow failover --dry-run`): the
    /// partitions as they stand and, per group, what would be committed were the drain done.
    pub async fn preview(&self, req: &FailoverRequest) -> Result<FailoverReport, FailoverError> {
        let spec = self.spec.borrow().clone();
        let target = self.config(true)?;
        let holds = self.holds().await?;
        let (partitions, groups) = match req.mode {
            FailoverMode::Planned => {
                let filter = TopicFilter::new(&spec)
                    .map_err(|e| FailoverError::Config(format!("spec.topics: {e}")))?;
                let source = self.config(false)?;
                let ends = source_ends(&source, &filter).await?;
                let groups = self
                    .planned_groups(&spec, &filter, &source, &target)
                    .await?;
                let counted = count_committed(&source, ranges_to_count(&ends, &holds)).await;
                (planned_partitions(&ends, &holds, &counted), groups)
            }
            FailoverMode::Unplanned => (
                unplanned_partitions(&holds),
                self.checkpointed_groups(&spec, &target).await?,
            ),
        };
        let not_replicated = (req.mode == FailoverMode::Planned)
            .then(|| partitions.iter().filter_map(|p| p.not_replicated).sum());
        Ok(FailoverReport {
            message: Some("dry run: nothing changed; groups as they would be committed now".into()),
            not_replicated,
            partitions,
            groups: groups.iter().map(|g| plan_group(g).1).collect(),
            ..FailoverReport::new(&req.id, req.mode, FailoverPhase::Draining)
        })
    }

    /// Runs one failover to its final phase, publishing each phase.
    async fn execute(&self, req: &FailoverRequest) -> FailoverReport {
        let mut report = FailoverReport {
            started_at: Some(Time(Timestamp::now())),
            ..FailoverReport::new(&req.id, req.mode, FailoverPhase::Draining)
        };
        info!(id = %req.id, mode = ?req.mode, "failover started");
        let outcome = match req.mode {
            FailoverMode::Planned => self.planned(req, &mut report).await,
            FailoverMode::Unplanned => self.unplanned(&mut report).await,
        };
        if let Err(why) = outcome {
            report.phase = FailoverPhase::Refused;
            report.message = Some(why.to_string());
        }
        if report.phase == FailoverPhase::Done {
            // Replication stops now (not only once the report is stored), so the target's
            // ends recorded next are final: failing back starts there.
            self.stopped.send_replace(true);
            match self.record_positions(&mut report).await {
                Ok(()) => self.record_last_times(&mut report).await,
                Err(e) => note(
                    &mut report,
                    format!("targetEnd not recorded (failing back will wait): {e}"),
                ),
            }
        }
        report.finished_at = Some(Time(Timestamp::now()));
        info!(id = %req.id, phase = ?report.phase, message = ?report.message, "failover finished");
        report
    }

    async fn planned(
        &self,
        req: &FailoverRequest,
        report: &mut FailoverReport,
    ) -> Result<(), FailoverError> {
        let spec = self.spec.borrow().clone();
        if spec.paused {
            return Err(FailoverError::Refused(
                "spec.paused is true: a planned failover drains by replicating; unpause the flow first".into(),
            ));
        }
        let filter = TopicFilter::new(&spec)
            .map_err(|e| FailoverError::Config(format!("spec.topics: {e}")))?;
        let source = self.config(false)?;
        let ends = source_ends(&source, &filter).await.map_err(|e| {
            FailoverError::Refused(format!("source cluster {}: {e} (the source must answer for a Planned failover; use mode Unplanned if it is gone)", spec.source.alias))
        })?;
        self.publish(report);
        let started = Instant::now();
        let timeout = Duration::from_secs(u64::from(req.drain_timeout_seconds));
        loop {
            let holds = self.holds().await?;
            let counted = count_committed(&source, ranges_to_count(&ends, &holds)).await;
            report.partitions = planned_partitions(&ends, &holds, &counted);
            report.not_replicated = Some(
                report
                    .partitions
                    .iter()
                    .filter_map(|p| p.not_replicated)
                    .sum(),
            );
            match drain_step(&report.partitions, started.elapsed(), timeout) {
                DrainStep::Drained => break,
                DrainStep::Wait => {
                    self.publish(report);
                    tokio::time::sleep(POLL).await;
                }
                DrainStep::TimedOut(behind) => {
                    report.phase = FailoverPhase::TimedOut;
                    report.message = Some(format!(
                        "not drained within {}s, nothing moved and replication goes on; behind: {}",
                        req.drain_timeout_seconds,
                        crate::api::status::list_some(&behind)
                    ));
                    return Ok(());
                }
            }
        }
        report.phase = FailoverPhase::Committing;
        self.publish(report);
        let target = self.config(true)?;
        let groups = self
            .planned_groups(&spec, &filter, &source, &target)
            .await
            .map_err(|e| e.doing("translating the groups"))?;
        self.commit(&target, groups, report).await;
        report.phase = FailoverPhase::Done;
        Ok(())
    }

    async fn unplanned(&self, report: &mut FailoverReport) -> Result<(), FailoverError> {
        let spec = self.spec.borrow().clone();
        report.partitions = unplanned_partitions(&self.holds().await?);
        report.phase = FailoverPhase::Committing;
        self.publish(report);
        let target = self.config(true)?;
        let groups = self
            .checkpointed_groups(&spec, &target)
            .await
            .map_err(|e| e.doing("reading the checkpoints"))?;
        self.commit(&target, groups, report).await;
        report.phase = FailoverPhase::Done;
        report.message = Some("the source was not asked: each group moved to its last checkpoint; the recovery point is targetHolds in records, recoveryPoint in time".into());
        Ok(())
    }

    /// Done: what the target holds once replication stopped ([`record_final`]), read until
    /// two reads a poll apart agree (the engine finishes the batch it was writing).
    async fn record_positions(&self, report: &mut FailoverReport) -> Result<(), FailoverError> {
        let spec = self.spec.borrow().clone();
        let filter = TopicFilter::new(&spec)
            .map_err(|e| FailoverError::Config(format!("spec.topics: {e}")))?;
        let wanted: Vec<Tp> = report
            .partitions
            .iter()
            .map(|p| (filter.target_topic(&p.topic), p.partition))
            .collect();
        let target = self.config(true)?;
        let deadline = Instant::now() + IO_TIMEOUT * 2;
        let mut last: Option<(BTreeMap<Tp, i64>, BTreeMap<Tp, i64>)> = None;
        loop {
            let holds = self.holds().await?;
            let (config, wanted) = (target.clone(), wanted.clone());
            let ends: BTreeMap<Tp, i64> = blocking(move || {
                let admin = GroupAdmin::new(&config, "target cluster", IO_TIMEOUT)?;
                Ok(admin.end_offsets(&wanted)?.into_iter().collect())
            })
            .await?;
            if last
                .as_ref()
                .is_some_and(|(h, e)| (h, e) == (&holds, &ends))
            {
                record_final(&mut report.partitions, &holds, &ends, |t| {
                    filter.target_topic(t)
                });
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(FailoverError::Refused(format!(
                    "the target's ends still moved {}s after replication stopped",
                    (IO_TIMEOUT * 2).as_secs()
                )));
            }
            last = Some((holds, ends));
            tokio::time::sleep(POLL).await;
        }
    }

    /// Done, positions recorded: each partition's `lastReplicatedTime` (the last record below
    /// its `targetEnd`) and the recovery point. A partition that could not be read has no
    /// time and is named in the message.
    async fn record_last_times(&self, report: &mut FailoverReport) {
        let wanted: Vec<(Tp, i64)> = report
            .partitions
            .iter()
            .filter_map(|p| Some(((p.target_topic.clone()?, p.partition), p.target_end?)))
            .collect();
        let config = match self.config(true) {
            Ok(c) => range_reader(&c, "mirrorflow-failover-times"),
            Err(e) => return note(report, format!("lastReplicatedTime not read: {e}")),
        };
        let read = blocking(move || {
            let consumer: BaseConsumer = config.create()?;
            let (mut times, mut unread) = (BTreeMap::new(), Vec::new());
            for ((topic, partition), end) in wanted {
                match last_record_ms(&consumer, &topic, partition, end) {
                    Ok(Some(ms)) => {
                        times.insert((topic, partition), ms);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        warn!(%topic, partition, end, "reading the last replicated record: {e}");
                        unread.push(format!("{topic}/{partition}"));
                    }
                }
            }
            Ok((times, unread))
        })
        .await;
        match read {
            Ok((times, unread)) => {
                record_times(&mut report.partitions, &times);
                summarize_recovery(report);
                if !unread.is_empty() {
                    note(
                        report,
                        format!(
                            "lastReplicatedTime not read for {} (not in recoveryPoint)",
                            crate::api::status::list_some(&unread)
                        ),
                    );
                }
            }
            Err(e) => note(report, format!("lastReplicatedTime not read: {e}")),
        }
    }

    /// The source position the target holds per partition (the committed progress of every
    /// worker).
    async fn holds(&self) -> Result<BTreeMap<Tp, i64>, FailoverError> {
        let spec = self.spec.borrow().clone();
        let props = client_properties(&spec.target, &self.secrets_dir)
            .map_err(|e| FailoverError::Config(format!("spec.target: {e}")))?;
        let topic = progress_topic(&self.namespace, &self.flow);
        let p = read_progress(
            &props,
            LogContext::new(&spec.target.alias),
            &topic,
            IO_TIMEOUT,
        )
        .await
        .map_err(|e| FailoverError::Progress(format!("{topic}: {e:?}")))?;
        Ok(p.into_iter().map(|(k, v)| (k, v.next_offset)).collect())
    }

    fn selections(&self) -> Vec<GroupSelection> {
        self.checkpoints
            .borrow()
            .iter()
            .filter(|cp| cp.spec.flow_ref.name == self.flow)
            .filter_map(|cp| GroupSelection::new(&cp.spec.groups).ok())
            .collect()
    }

    /// Planned: each selected source group's committed offsets, translated with the offset
    /// syncs as they are after the drain.
    async fn planned_groups(
        &self,
        spec: &MirrorFlowSpec,
        filter: &TopicFilter,
        source: &ClientConfig,
        target: &ClientConfig,
    ) -> Result<Vec<GroupInput>, FailoverError> {
        let selections = self.selections();
        let (source, target) = (source.clone(), target.clone());
        let syncs_topic = offset_syncs_topic(&spec.source.alias);
        let filter = filter.clone();
        blocking(move || {
            let src = GroupAdmin::new(&source, "source cluster", IO_TIMEOUT)?;
            let groups: Vec<String> = src
                .list_groups()?
                .into_iter()
                .map(|g| g.group)
                .filter(|g| selections.iter().any(|s| s.matches(g)))
                .collect();
            let offsets = src.list_offsets(&groups);
            let mut store = SyncStore::new();
            let mut tail = TopicTail::new(&target, &syncs_topic, "target cluster")?;
            tail.catch_up(IO_TIMEOUT, |m| {
                let header = crate::worker::checkpoint::io::header(m, SYNC_SEQUENCE_HEADER);
                let _ = store.apply(m.key(), m.payload(), header);
            })?;
            let mut per_group = Vec::new();
            for (group, offsets) in groups.into_iter().zip(offsets) {
                let offsets = offsets?;
                let offsets: Vec<(GroupOffset, String)> = offsets
                    .into_iter()
                    .filter(|o| filter.decide(&o.topic) == TopicDecision::Replicate)
                    .map(|o| {
                        let t = filter.target_topic(&o.topic);
                        (o, t)
                    })
                    .collect();
                per_group.push((group, offsets));
            }
            let wanted: Vec<(String, i32)> = per_group
                .iter()
                .flat_map(|(_, os)| os.iter().map(|(o, t)| (t.clone(), o.partition)))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let tgt = GroupAdmin::new(&target, "target cluster", IO_TIMEOUT)?;
            let ends = tgt.end_offsets(&wanted)?;
            let mut inputs =
                target_groups(&tgt, per_group.iter().map(|(g, _)| g.clone()).collect())?;
            for (input, (_, offsets)) in inputs.iter_mut().zip(&per_group) {
                input.proposals = offsets
                    .iter()
                    .map(|(o, t)| {
                        let tr = ends.get(&(t.clone(), o.partition)).map(|&end| {
                            clamp_to_target_end(
                                store.translate(&o.topic, o.partition, o.offset),
                                end,
                            )
                        });
                        Proposal {
                            topic: t.clone(),
                            partition: o.partition,
                            offset: tr.and_then(|t| t.downstream()),
                            exact: matches!(tr, Some(Translation::Exact { .. })),
                        }
                    })
                    .collect();
            }
            Ok(inputs)
        })
        .await
    }

    /// Unplanned: each selected group's last checkpoint per partition (target side only).
    async fn checkpointed_groups(
        &self,
        spec: &MirrorFlowSpec,
        target: &ClientConfig,
    ) -> Result<Vec<GroupInput>, FailoverError> {
        let selections = self.selections();
        let topic = checkpoints_topic(spec);
        let target = target.clone();
        blocking(move || {
            let mut latest: BTreeMap<String, BTreeMap<Tp, i64>> = BTreeMap::new();
            let mut tail = TopicTail::new(&target, &topic, "target cluster")?;
            tail.catch_up(IO_TIMEOUT, |m| {
                if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                    if let Ok(c) = wire::Checkpoint::decode(k, v) {
                        if selections.iter().any(|s| s.matches(&c.group)) {
                            latest
                                .entry(c.group)
                                .or_default()
                                .insert((c.topic, c.partition), c.downstream_offset);
                        }
                    }
                }
            })?;
            let tgt = GroupAdmin::new(&target, "target cluster", IO_TIMEOUT)?;
            let wanted: Vec<(String, i32)> = latest
                .values()
                .flat_map(|m| m.keys().cloned())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let ends = tgt.end_offsets(&wanted)?;
            let mut inputs = target_groups(&tgt, latest.keys().cloned().collect())?;
            for (input, offsets) in inputs.iter_mut().zip(latest.values()) {
                input.proposals = offsets
                    .iter()
                    .map(|(tp, &o)| Proposal {
                        topic: tp.0.clone(),
                        partition: tp.1,
                        offset: ends.get(tp).map(|&end| o.min(end.max(0))),
                        exact: false,
                    })
                    .collect();
            }
            Ok(inputs)
        })
        .await
    }

    /// Commits each group's plan on the target and adds the group lines to `report`.
    async fn commit(
        &self,
        target: &ClientConfig,
        groups: Vec<GroupInput>,
        report: &mut FailoverReport,
    ) {
        let planned: Vec<_> = groups.iter().map(plan_group).collect();
        let commits: Vec<(String, Vec<GroupOffset>)> = planned
            .iter()
            .filter(|(c, _)| !c.is_empty())
            .map(|(c, r)| (r.group.clone(), c.clone()))
            .collect();
        let target = target.clone();
        let results = blocking(move || {
            let tgt = GroupAdmin::new(&target, "target cluster", IO_TIMEOUT)?;
            let r = tgt.alter_offsets(&commits);
            Ok(commits
                .into_iter()
                .map(|(g, _)| g)
                .zip(r.into_iter().map(|r| r.map_err(|e| e.to_string())))
                .collect::<HashMap<_, _>>())
        })
        .await;
        for (_, mut line) in planned {
            match &results {
                Err(e) if !line.committed.is_empty() => {
                    line.skipped = Some(format!("commit failed: {e}"));
                    line.committed.clear();
                }
                Ok(r) => {
                    if let Some(Err(e)) = r.get(&line.group) {
                        line.skipped = Some(format!("commit failed: {e}"));
                        line.committed.clear();
                    }
                }
                Err(_) => {}
            }
            report.groups.push(line);
        }
    }
}

/// Adds `what` to the report's message.
fn note(report: &mut FailoverReport, what: String) {
    report.message = Some(match report.message.take() {
        Some(m) => format!("{m}; {what}"),
        None => what,
    });
}

/// Blocking: the timestamp (ms) of the last record a read_committed reader gets below `end`
/// in `topic`/`partition`, reading windows back from `end` down to the log start; `None`
/// when there is no record (or it carries no timestamp).
fn last_record_ms(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    end: i64,
) -> Result<Option<i64>, FailoverError> {
    let (low, _) = consumer.fetch_watermarks(topic, partition, IO_TIMEOUT)?;
    for range in windows_back(low, end) {
        let mut last = None;
        read_range(consumer, topic, partition, range, |m| {
            last = Some(m.timestamp().to_millis());
        })?;
        if let Some(ms) = last {
            return Ok(ms);
        }
    }
    Ok(None)
}

/// Unplanned: what the target holds per partition (the recovery point).
fn unplanned_partitions(holds: &BTreeMap<Tp, i64>) -> Vec<FailoverPartition> {
    holds
        .iter()
        .map(|((topic, partition), &held)| FailoverPartition {
            topic: topic.clone(),
            partition: *partition,
            source_end: None,
            target_holds: held,
            last_replicated_time: None,
            not_replicated: None,
            target_topic: None,
            target_end: None,
        })
        .collect()
}

/// The target's view of `groups` (members, committed offsets), in order; no proposals yet.
fn target_groups(tgt: &GroupAdmin, groups: Vec<String>) -> Result<Vec<GroupInput>, FailoverError> {
    let listing: HashMap<String, u32> = tgt
        .list_groups()?
        .into_iter()
        .map(|g| (g.group, g.members))
        .collect();
    let committed = tgt.list_offsets(&groups);
    groups
        .into_iter()
        .zip(committed)
        .map(|(group, c)| {
            let committed = c?
                .into_iter()
                .map(|o| ((o.topic, o.partition), o.offset))
                .collect();
            Ok(GroupInput {
                members: listing.get(&group).copied(),
                group,
                committed,
                proposals: Vec::new(),
            })
        })
        .collect()
}

/// The end offsets of every partition of the source topics the flow replicates.
async fn source_ends(
    source: &ClientConfig,
    filter: &TopicFilter,
) -> Result<BTreeMap<Tp, i64>, FailoverError> {
    let source = source.clone();
    let filter = filter.clone();
    blocking(move || {
        let consumer: BaseConsumer = source.create()?;
        let md = consumer.fetch_metadata(None, IO_TIMEOUT)?;
        let partitions: Vec<(String, i32)> = md
            .topics()
            .iter()
            .filter(|t| filter.decide(t.name()) == TopicDecision::Replicate)
            .flat_map(|t| {
                t.partitions()
                    .iter()
                    .map(|p| (t.name().to_string(), p.id()))
            })
            .collect();
        let admin = GroupAdmin::new(&source, "source cluster", IO_TIMEOUT)?;
        let ends = admin.end_offsets(&partitions)?;
        Ok(ends.into_iter().collect())
    })
    .await
}

/// The committed records in each range `[from, to)` of the source (read_committed), for
/// the ranges that could be read; one that could not is left out (and logged): the offset
/// difference stands for it.
async fn count_committed(source: &ClientConfig, ranges: Vec<(Tp, i64, i64)>) -> BTreeMap<Tp, i64> {
    if ranges.is_empty() {
        return BTreeMap::new();
    }
    let config = range_reader(source, "mirrorflow-failover-drain");
    let counted = blocking(move || {
        let consumer: BaseConsumer = config.create()?;
        let mut out = BTreeMap::new();
        for ((topic, partition), from, to) in ranges {
            match count_range(&consumer, &topic, partition, (from, to)) {
                Ok(n) => {
                    out.insert((topic, partition), n);
                }
                Err(e) => warn!(%topic, partition, from, to, "counting the records not replicated: {e}; the offset difference stands"),
            }
        }
        Ok(out)
    })
    .await;
    counted.unwrap_or_else(|e| {
        warn!("counting the records not replicated: {e}; the offset differences stand");
        BTreeMap::new()
    })
}

/// Blocking: the records a read_committed reader gets from `topic`/`partition` in
/// `[from, to)`, reading to the range's end or the partition's (its last stable offset).
fn count_range(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    range: (i64, i64),
) -> Result<i64, FailoverError> {
    Ok(read_range(consumer, topic, partition, range, |_| {})?)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FailoverError> + Send + 'static,
) -> Result<T, FailoverError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FailoverError::Join(e.to_string()))?
}
