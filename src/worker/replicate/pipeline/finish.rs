//! Finishing a dispatched batch: wait for its delivery reports, judge them
//! ([`verdict::judge`]), write its offset syncs and progress ([`verdict::commit_plan`]),
//! commit, and apply; rewinding when it did not commit; the acknowledgement of syncs and
//! progress sent without transactions.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use tracing::{debug, error, info, warn};

use super::send::{first_failure, send_waiting, Dispatched, MetaPending, Target};
use super::verdict::{
    self, commit_error_action, CommitAction, CommitPlan, Judgement, RecordFailure, Verdict,
};
use crate::kafka::delivery::GroupHandle;
use crate::kafka::error::ErrorKind as KafkaKind;
use crate::kafka::produce::TopicId;

/// Commit attempts of one transaction before its outcome counts as unknown.
const MAX_COMMIT_ATTEMPTS: u32 = 5;
use super::{Pipeline, WriteOutcome};
use crate::api::TopicPartitionRef;
use crate::kafka::wire::{OffsetSync, SYNC_SEQUENCE_HEADER};
use crate::telemetry::metrics::{Categorized, ErrorKind};
use crate::worker::error::Error as WorkerError;
use crate::worker::replicate::batch::Batch;
use crate::worker::replicate::partitions::PartitionTable;
use crate::worker::replicate::report;
use crate::worker::replicate::settings::EngineError;
use crate::worker::replicate::status::{FailureKind, PartitionFailed};
use crate::worker::replicate::syncs::fresh_epoch;
use crate::worker::replicate::validate::failure_kind_name;
use crate::worker::replicate::writer::{
    classify_code, classify_error, describe_error, ErrorClass, TargetWriter,
};
use crate::worker::validation::classify::{record_rejected, FlowRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

impl Pipeline {
    /// Finishes the oldest dispatched batch (its records were sent before any later one's).
    /// A batch that did not commit as a whole drops every later one: the consumer restarts
    /// from the committed positions.
    pub(super) async fn finish_head(
        &mut self,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        let Some(d) = self.in_flight.pop_front() else {
            return Ok(WriteOutcome::Committed);
        };
        let outcome = self.finish(d, table).await?;
        if outcome != WriteOutcome::Committed || self.reassign_needed {
            self.discard_in_flight(table).await?;
        }
        Ok(outcome)
    }

    /// Drops the dispatched batches: their records may still reach the target (at least
    /// once: they are sent again from the committed positions), their syncs start over.
    pub(super) async fn discard_in_flight(
        &mut self,
        table: &mut PartitionTable,
    ) -> Result<(), EngineError> {
        while let Some(d) = self.in_flight.pop_front() {
            debug!(
                records = d.batch.len(),
                "dropping a dispatched batch after a failed one"
            );
            self.rewind(&d.batch, table).await?;
        }
        Ok(())
    }

    /// Waits for every delivery report of the batch and finishes it: offset syncs and
    /// progress, then the committed positions. `Retry` has rewound.
    pub(super) async fn finish(
        &mut self,
        mut d: Dispatched,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        let outcome = self.finish_inner(&mut d, table).await;
        debug!(
            records = d.batch.len(),
            bytes = d.batch.bytes(),
            elapsed_ms = d.s.sent_at.elapsed().as_millis() as u64,
            committed = matches!(outcome, Ok(WriteOutcome::Committed)),
            "batch written"
        );
        if let Ok(WriteOutcome::Retry) = &outcome {
            self.rewind(&d.batch, table).await?;
        }
        self.recycle(d.batch);
        outcome
    }

    /// Commits a batch's transaction (its records, syncs and progress): again while the
    /// coordinator says the error is retriable; an unknown outcome recreates the producer and
    /// re-reads the positions (`Err(Uncertain)`), never writing the batch twice.
    async fn commit_transaction(
        &mut self,
        d: &Dispatched,
        meta_group: GroupHandle,
        meta_sent: usize,
        table: &mut PartitionTable,
    ) -> Result<Result<GroupHandle, WriteOutcome>, EngineError> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(Err(WriteOutcome::Retry));
        };
        let mut attempts = 0;
        while let Err(e) = writer.commit().await {
            attempts += 1;
            match commit_error_action(&e) {
                CommitAction::Retry if attempts < MAX_COMMIT_ATTEMPTS => {
                    warn!(
                        attempt = attempts,
                        "commit transaction: {}; committing again",
                        describe_error(&e)
                    );
                    self.metrics
                        .transactions
                        .with_label_values(&["commit_retry"])
                        .inc();
                }
                CommitAction::Abort => {
                    return self.write_error("commit transaction", &e, table).map(Err)
                }
                CommitAction::Fenced => return Err(self.fenced(&describe_error(&e))),
                CommitAction::Retry | CommitAction::Unknown => {
                    warn!(
                        "commit transaction: {}; its outcome is unknown: recreating the producer \
                         and reading the positions back from the progress topic",
                        describe_error(&e)
                    );
                    self.metrics.error(ErrorKind::TargetRetriable, &e);
                    self.drop_writer(table);
                    table.restart_emitters(d.batch.partitions().iter().map(|p| &p.tp), fresh_epoch);
                    self.request_reassign();
                    return Ok(Err(WriteOutcome::Uncertain));
                }
            }
        }
        meta_group.complete().await;
        if let Some(fail) = first_failure(&meta_group, meta_sent) {
            // Cannot happen after a successful commit; never claim success then.
            warn!("progress not delivered after commit: {}", fail.message);
            return Ok(Err(WriteOutcome::Retry));
        }
        self.metrics
            .transactions
            .with_label_values(&["commit"])
            .inc();
        Ok(Ok(meta_group))
    }

    async fn finish_inner(
        &mut self,
        d: &mut Dispatched,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        if !self.await_reports(d, table).await {
            return Ok(WriteOutcome::Retry);
        }
        // A fenced producer only reports "purged": ask it first.
        if d.s.results.iter().flatten().any(Result::is_err) {
            self.check_fenced()?;
        }
        let j = verdict::judge(&d.batch, &d.s.results, &d.s.careful, self.cfg.transactional);
        let recreate = match &j.verdict {
            Verdict::Fenced(m) => return Err(self.fenced(m)),
            Verdict::Unsupported(m) => return Err(self.unsupported(m)),
            Verdict::Retry {
                recreate_producer, ..
            } => *recreate_producer,
            Verdict::Replay | Verdict::Commit => false,
        };
        if recreate {
            self.drop_writer(table);
        }
        self.stop_refused(&j, &d.batch, &d.s.targets, table);
        match &j.verdict {
            Verdict::Retry { first_error, .. } => {
                // A refused transaction purges its records: the refusal is its cause.
                let cause = self.writer.as_ref().and_then(TargetWriter::abortable_cause);
                let counted = cause
                    .as_ref()
                    .map_or(&**first_error as &dyn Categorized, |e| e);
                self.metrics.error(ErrorKind::TargetRetriable, counted);
                let refused = match &cause {
                    Some(e) => e.rdkafka_error_code().map(|c| (c, describe_error(e))),
                    None => verdict::refused_write(&d.s.results),
                };
                self.write_refused =
                    refused.and_then(|(c, e)| report::write_refusal(&self.cfg.target_alias, c, &e));
                let why = cause
                    .as_ref()
                    .map_or_else(|| first_error.message.clone(), describe_error);
                warn!(
                    "records were not delivered to target {}: {why}",
                    self.cfg.target_alias
                );
                return Ok(WriteOutcome::Retry);
            }
            Verdict::Replay => {
                // The transaction is poisoned: abort, replay the other partitions (the
                // refused one is Failed or careful).
                self.rewind(&d.batch, table).await?;
                return Ok(WriteOutcome::Replay);
            }
            _ => {}
        }
        let plan =
            verdict::commit_plan(&d.batch, &j.outcomes, table, self.lag_max, self.cfg.worker);
        let acked_at = jiff::Timestamp::now().as_millisecond();
        let Some((meta_group, meta_sent)) = self.send_meta(&d.batch, &plan, table).await? else {
            return Ok(WriteOutcome::Retry);
        };
        let meta_group = if self.cfg.transactional {
            match self
                .commit_transaction(d, meta_group, meta_sent, table)
                .await?
            {
                Ok(group) => group,
                Err(outcome) => return Ok(outcome),
            }
        } else {
            meta_group
        };
        self.count_committed(&plan);
        let CommitPlan {
            emitters,
            last_timestamps,
            progress,
            pending_written,
            marker,
            ..
        } = plan;
        // Without transactions the records are on the target now (acknowledged): positions
        // advance at once, while syncs and progress are acknowledged in the background
        // ([`Pipeline::on_meta_delivered`]). A lost progress record is written again.
        if !self.cfg.transactional {
            self.meta_in_flight.push_back(MetaPending {
                group: meta_group,
                sent: meta_sent,
                progress: progress
                    .iter()
                    .map(|p| TopicPartitionRef {
                        topic: p.topic.clone(),
                        partition: p.partition,
                    })
                    .collect(),
                marker: marker.clone(),
                window: (d.batch.len(), d.batch.bytes()),
            });
        }
        let refetch = table.apply_commit(
            d.batch.partitions(),
            &j.outcomes,
            emitters,
            &last_timestamps,
            acked_at,
        );
        for tp in &pending_written {
            table.clear_pending(tp);
        }
        if let Some(id) = &marker {
            table.marker_persisted(id);
        }
        if refetch {
            self.request_reassign();
        }
        Ok(WriteOutcome::Committed)
    }

    /// Waits for the batch's delivery reports and collects them; false when the producer is
    /// gone and the batch must be retried. librdkafka reports every record within its
    /// delivery timeout. A producer that has not (and a margin) is recreated: its destruction
    /// purges what it still holds (and releases the fetch events of records sent without a
    /// copy); the records without a report count as not delivered.
    async fn await_reports(&mut self, d: &mut Dispatched, table: &mut PartitionTable) -> bool {
        let limit = self.cfg.tuning.producer.delivery_timeout + Duration::from_secs(10);
        if !d.s.group.complete_within(limit).await {
            warn!(
                ?limit,
                "delivery reports missing for a batch; recreating the target producer"
            );
            self.drop_writer(table);
        }
        d.s.collect();
        self.writer.is_some()
    }

    /// The committed batch's records, bytes and offset syncs in the worker's metrics.
    fn count_committed(&self, plan: &CommitPlan) {
        self.metrics.offset_syncs.inc_by(plan.syncs.len() as u64);
        for (topic, (n, bytes)) in &plan.counts {
            self.metrics.records.with_label_values(&[topic]).inc_by(*n);
            self.metrics
                .bytes
                .with_label_values(&[topic])
                .inc_by(*bytes);
        }
    }

    /// Partitions whose record the target refused stop (both modes); a size refusal that may
    /// cover a whole produce batch is first retried one record per request.
    fn stop_refused(
        &mut self,
        j: &Judgement,
        batch: &Batch,
        targets: &[Option<Target>],
        table: &mut PartitionTable,
    ) {
        for (slot, offset) in &j.careful {
            let tp = &batch.partitions()[*slot].tp;
            if let Some(p) = table.get_mut(tp) {
                info!(topic = %tp.topic, partition = tp.partition, offset, "the target refused a produce batch as too large; retrying this partition one record per request");
                p.careful = true;
                self.request_reassign();
            }
        }
        for (slot, offset, why) in &j.rejected {
            let tp = &batch.partitions()[*slot].tp;
            self.metrics.error(ErrorKind::RecordRejected, &**why);
            let target = targets[*slot].as_ref().map_or("?", |t| t.name.as_str());
            let flow = FlowRef {
                namespace: &self.cfg.namespace,
                name: &self.cfg.flow_name,
            };
            // Whole seconds, as the API server and the persisted progress keep it.
            let now =
                jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("in range");
            // A status entry like DataLoss's: persisted with the position (the rejected
            // record's offset), so a restart keeps the partition stopped until a reset.
            let failure = record_rejected(tp.clone(), *offset, target, &why.message)
                .to_failure(flow, Time(now));
            let message = failure.message.clone().unwrap_or_default();
            error!(topic = %tp.topic, partition = tp.partition, offset, "{message}");
            self.failures_total
                .with_label_values(&[failure_kind_name(FailureKind::RecordRejected)])
                .inc();
            let failed = PartitionFailed {
                kind: FailureKind::RecordRejected,
                offset: *offset,
                message,
                failure: Some(failure),
            };
            // Not before its committed position reaches the record: a retried batch or an
            // aborted transaction left the records before it to replicate first.
            if table.fail_at(tp, failed) {
                self.request_reassign();
            }
        }
    }

    /// Sends the plan's syncs and progress (one round trip): the group of their reports and
    /// how many were sent; `None` without a producer. Without transactions a crash may keep
    /// the progress and lose syncs of the batch: translation then falls back to the safe
    /// rule for those offsets (their sync sequence has a hole), never past them.
    async fn send_meta(
        &mut self,
        batch: &Batch,
        plan: &CommitPlan,
        table: &mut PartitionTable,
    ) -> Result<Option<(GroupHandle, usize)>, EngineError> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(None);
        };
        let (syncs_topic, progress_topic) = (
            writer.topic(&self.cfg.syncs_topic),
            writer.topic(&self.cfg.progress_topic),
        );
        // Every record encoded before any is sent: an encoding error sends nothing.
        let mut records = Vec::with_capacity(plan.syncs.len() + plan.progress.len());
        for (slot, s) in &plan.syncs {
            let tp = &batch.partitions()[*slot].tp;
            let sync = OffsetSync {
                topic: tp.topic.clone(),
                partition: tp.partition,
                upstream_offset: s.upstream,
                downstream_offset: s.downstream,
            };
            let (key, value) = encoded(sync.encode_key(), sync.encode_value(), "an offset sync")?;
            let headers = OwnedHeaders::new().insert(Header {
                key: SYNC_SEQUENCE_HEADER,
                value: Some(s.sequence.encode().as_slice()),
            });
            records.push(MetaRecord {
                topic: (syncs_topic, &self.cfg.syncs_topic),
                what: "send offset sync",
                key,
                value,
                headers: Some(headers),
            });
        }
        for p in &plan.progress {
            let (key, value) = encoded(p.encode_key(), p.encode_value(), "progress")?;
            records.push(MetaRecord {
                topic: (progress_topic, &self.cfg.progress_topic),
                what: "send progress",
                key,
                value,
                headers: None,
            });
        }
        let writer = &*writer;
        let meta_group = writer.tracker().group(records.len());
        let flush_timeout = self.cfg.tuning.producer.delivery_timeout;
        let mut meta_sent = 0usize;
        // A refused send ends the loop; its error is handled below, with `self` free again.
        let mut refused = None;
        for r in records {
            let (id, name) = r.topic;
            let mut br: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(name, meta_group.ticket(meta_sent))
                    .partition(0)
                    .key(r.key.as_slice())
                    .payload(r.value.as_slice());
            if let Some(h) = r.headers {
                br = br.headers(h);
            }
            match send_waiting(writer, id, br, flush_timeout).await {
                Ok(()) => meta_sent += 1,
                Err(e) => {
                    refused = Some((r.what, e));
                    break;
                }
            }
        }
        if let Some((what, e)) = refused {
            self.write_error(what, &e, table)?;
            return Ok(None);
        }
        meta_group.expect(meta_sent);
        Ok(Some((meta_group, meta_sent)))
    }

    /// The error that stops a worker whose target cannot store its records.
    fn unsupported(&self, m: &str) -> EngineError {
        // The target refuses what the flow asks of it, for good.
        EngineError::Fatal(WorkerError::Refused(format!(
            "target {} cannot store the records: {m}",
            self.cfg.target_alias
        )))
    }

    /// The error that stops a fenced worker.
    fn fenced(&self, detail: &str) -> EngineError {
        // The target refuses this worker's transactional id: another one holds it.
        EngineError::Fatal(WorkerError::Refused(format!(
            "this worker was fenced on target {}: another worker took over transactional.id {} \
             ({detail}). Two workers with the same index were running; this one stops",
            self.cfg.target_alias, self.cfg.transactional_id
        )))
    }

    /// Fails if the producer is fenced (librdkafka then reports only "purged" deliveries):
    /// a fenced worker must stop, never re-initialize and fence the worker that replaced it.
    fn check_fenced(&self) -> Result<(), EngineError> {
        match self.writer.as_ref().and_then(|w| w.fatal_error()) {
            Some((code, msg)) if classify_code(code, true) == ErrorClass::Fenced => {
                Err(self.fenced(&msg))
            }
            _ => Ok(()),
        }
    }

    /// Aborts the batch's transaction (recreating the producer if that fails), restarts the
    /// sync emitters of its partitions, and asks for a re-assignment.
    pub(super) async fn rewind(
        &mut self,
        batch: &Batch,
        table: &mut PartitionTable,
    ) -> Result<(), EngineError> {
        self.check_fenced()?;
        if let Some(w) = &mut self.writer {
            if let Err(e) = w.abort().await {
                if classify_error(&e) == ErrorClass::Fenced {
                    return Err(self.fenced(&describe_error(&e)));
                }
                warn!(
                    "aborting the transaction failed ({}); recreating the producer",
                    describe_error(&e)
                );
                self.drop_writer(table);
            }
        }
        // Emitters start over: the target may hold copies the next attempt writes again.
        table.restart_emitters(batch.partitions().iter().map(|p| &p.tp), fresh_epoch);
        self.request_reassign();
        self.metrics
            .transactions
            .with_label_values(&["abort"])
            .inc_by(u64::from(self.cfg.transactional));
        Ok(())
    }

    /// Drops the producer (it is recreated before the next write). Its reports for syncs and
    /// progress still in flight may never come: those positions are written again.
    pub(super) fn drop_writer(&mut self, table: &mut PartitionTable) {
        self.writer = None;
        if self.live.is_some() {
            // Sent through the producer that goes: read them again.
            self.request_reassign();
        }
        while let Some(m) = self.meta_in_flight.pop_front() {
            // Its reports went with it: a loss in the client, not on the broker.
            let lost = RecordFailure::unreported("the producer was recreated", KafkaKind::Client);
            self.meta_failed(m, &lost, table);
        }
    }

    /// Syncs and progress of a batch were acknowledged (AtLeastOnce). On failure, the
    /// positions are written again with the next batch; the syncs are not (their sequence
    /// has a hole, which readers see: translation falls back to the safe rule there).
    pub(super) fn on_meta_delivered(&mut self, table: &mut PartitionTable) {
        let Some(m) = self.meta_in_flight.pop_front() else {
            return;
        };
        match first_failure(&m.group, m.sent) {
            Some(f) => self.meta_failed(m, &f, table),
            None => self.last_ack = std::time::Instant::now(),
        }
    }

    fn meta_failed(&mut self, m: MetaPending, f: &RecordFailure, table: &mut PartitionTable) {
        self.metrics.error(ErrorKind::Progress, f);
        let message = &f.message;
        warn!("offset syncs or progress not delivered: {message}; writing the positions again");
        for tp in &m.progress {
            table.mark_pending(tp);
        }
        if let Some(id) = m.marker {
            table.marker_lost(id);
        }
    }

    /// Waits for every sync and progress record in flight.
    pub(super) async fn drain_meta(&mut self, table: &mut PartitionTable) {
        while !self.meta_in_flight.is_empty() {
            self.next_meta(table).await;
        }
    }

    /// Waits for the oldest syncs and progress in flight. librdkafka reports every record
    /// within its delivery timeout; past that (and a margin) they count as failed.
    pub(super) async fn next_meta(&mut self, table: &mut PartitionTable) {
        let limit = self.cfg.tuning.producer.delivery_timeout + Duration::from_secs(10);
        if tokio::time::timeout(limit, super::send::meta_delivered(&mut self.meta_in_flight))
            .await
            .is_ok()
        {
            self.on_meta_delivered(table);
        } else if let Some(m) = self.meta_in_flight.pop_front() {
            let late = RecordFailure::unreported(
                "no delivery report within the delivery timeout",
                KafkaKind::Timeout,
            );
            self.meta_failed(m, &late, table);
        }
    }

    pub(super) fn write_error(
        &mut self,
        what: &str,
        e: &KafkaError,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        self.check_fenced()?;
        let detail = describe_error(e);
        match classify_error(e) {
            ErrorClass::Fenced => Err(self.fenced(&format!("{what}: {detail}"))),
            ErrorClass::ProducerBroken => {
                warn!("{what}: {detail}; recreating the producer");
                self.drop_writer(table);
                self.metrics.error(ErrorKind::TargetRetriable, e);
                Ok(WriteOutcome::Retry)
            }
            _ => {
                warn!("{what}: {detail}");
                self.metrics.error(ErrorKind::TargetRetriable, e);
                Ok(WriteOutcome::Retry)
            }
        }
    }
}

/// An offset sync or progress record, encoded, for [`Pipeline::send_meta`].
struct MetaRecord<'a> {
    topic: (TopicId, &'a str),
    /// What failed, for the error if the send is refused.
    what: &'static str,
    key: Vec<u8>,
    value: Vec<u8>,
    headers: Option<OwnedHeaders>,
}

/// A record's encoded key and value; an encoding error is fatal (a bug, not the cluster).
fn encoded<E: std::fmt::Display>(
    key: Result<Vec<u8>, E>,
    value: Result<Vec<u8>, E>,
    what: &str,
) -> Result<(Vec<u8>, Vec<u8>), EngineError> {
    match (key, value) {
        (Ok(k), Ok(v)) => Ok((k, v)),
        (Err(e), _) | (_, Err(e)) => Err(EngineError::Fatal(WorkerError::Record(format!(
            "encoding {what}: {e}"
        )))),
    }
}
