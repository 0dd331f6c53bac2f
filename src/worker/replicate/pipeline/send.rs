//! What was handed to the producer for a batch and how it is sent: per-batch delivery
//! bookkeeping ([`Sending`], [`Dispatched`]), syncs and progress awaiting acknowledgement
//! ([`MetaPending`]), and the producer calls that wait for room.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tracing::debug;

use super::super::batch::Batch;
use super::super::partitions::PartitionTable;
use super::super::writer::TargetWriter;
use super::verdict::{RecordFailure, RecordResult};
use crate::api::TopicPartitionRef;
use crate::kafka::delivery::{DeliveryReport, GroupHandle};
use crate::kafka::events::DeliveryProducer;
use crate::kafka::produce::{TargetRecord, TopicId};
use crate::kafka::producer::{Refused, ToSend};

/// What was handed to the producer for one batch so far. Built by `dispatch`, or record by
/// record while the batch is read (AtLeastOnce, pipelined: `Pipeline::on_message`).
pub struct Sending {
    /// Where the delivery reports arrive.
    pub group: GroupHandle,
    /// Records `0..reserved` have a place in `group`.
    pub reserved: usize,
    /// Target topic per batch slot.
    pub targets: Vec<Option<Target>>,
    /// Partitions sent one record per request, per slot.
    pub careful: Vec<bool>,
    /// Partitions not sent any further in this batch (a record was refused), per slot.
    pub stopped: Vec<bool>,
    /// Per record, once known (`Ok(target offset)`).
    pub results: Vec<Option<RecordResult>>,
    /// Records sent whose report is still to be collected from `group`.
    pub pending: Vec<usize>,
    /// Records handed to the producer.
    pub sent: usize,
    /// Records `0..next` of the batch were handled (sent, refused, or skipped).
    pub next: usize,
    pub sent_at: Instant,
}

impl Sending {
    pub fn new(group: GroupHandle, reserved: usize) -> Self {
        Self {
            group,
            reserved,
            targets: Vec::new(),
            careful: Vec::new(),
            stopped: Vec::new(),
            results: Vec::new(),
            pending: Vec::new(),
            sent: 0,
            next: 0,
            sent_at: Instant::now(),
        }
    }

    /// Extends the per-slot and per-record state to every partition and record of `batch`
    /// (target topics looked up in `writer`'s producer).
    pub fn cover(&mut self, batch: &Batch, table: &PartitionTable, writer: &mut TargetWriter) {
        for p in &batch.partitions()[self.targets.len()..] {
            let o = table.get(&p.tp);
            self.targets.push(o.map(|o| Target {
                id: writer.topic(&o.target_topic),
                name: o.target_topic.clone(),
            }));
            self.careful.push(o.is_some_and(|o| o.careful));
            self.stopped.push(false);
        }
        self.results.resize(batch.len(), None);
    }

    /// Makes room in the group for record `index` (doubling, so the lock is rarely taken).
    pub fn reserve(&mut self, index: usize) {
        if index >= self.reserved {
            self.reserved = (2 * self.reserved).max(index + 1).max(1024);
            self.group.reserve(self.reserved);
        }
    }

    /// Record `index` (of partition `slot`) was refused before it was sent: the partition
    /// sends nothing more in this batch.
    pub fn refuse(&mut self, index: usize, slot: usize, e: &KafkaError) {
        self.results[index] = Some(Err(Box::new(RecordFailure::from_error(e, true))));
        self.stopped[slot] = true;
    }

    /// Collects the reports of the records sent so far.
    pub fn collect(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let results = &mut self.results;
        self.group
            .take_each(&pending, |j, r| results[j] = Some(delivery_result(r)));
    }
}

/// Where a batch slot's records go.
pub struct Target {
    pub name: String,
    /// `name` in the producer the records were sent with.
    pub id: TopicId,
}

/// A batch whose records were handed to the producer; delivery reports are pending.
pub struct Dispatched {
    pub batch: Batch,
    pub s: Sending,
}

/// Offset syncs and progress of a finished batch, sent without transactions; their delivery
/// reports are pending.
pub struct MetaPending {
    pub group: GroupHandle,
    /// Records sent (indexes `0..sent` of `group`).
    pub sent: usize,
    /// Partitions whose position these progress records persist.
    pub progress: Vec<TopicPartitionRef>,
    /// The reset marker among them.
    pub marker: Option<String>,
    /// Records and bytes of the batch whose progress this is (still in the window).
    pub window: (usize, usize),
}

/// Waits until every record of the oldest dispatched batch has its delivery report.
pub async fn head_delivered(in_flight: &mut VecDeque<Dispatched>) {
    match in_flight.front_mut() {
        Some(d) => d.s.group.complete().await,
        None => std::future::pending().await,
    }
}

/// Waits until the oldest syncs and progress in flight are acknowledged.
pub async fn meta_delivered(meta: &mut VecDeque<MetaPending>) {
    match meta.front_mut() {
        Some(m) => m.group.complete().await,
        None => std::future::pending().await,
    }
}

/// The first of records `0..sent` of `group` that was not delivered.
pub fn first_failure(group: &GroupHandle, sent: usize) -> Option<Box<RecordFailure>> {
    (0..sent).find_map(|j| delivery_result(group.take(j)).err())
}

/// Hands a record to the writer's producer, to `topic` (an id of the writer's: one lookup
/// per producer, not one per record under the client's write lock); if its queue is full
/// (`target.config` may make it smaller than the batch window), waits for the queue to empty
/// once and tries again.
pub async fn send_waiting(
    writer: &TargetWriter,
    topic: TopicId,
    record: TargetRecord<'_>,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let mut record = ToSend::Copied(record);
    let mut waited = false;
    loop {
        match writer.send(topic, record) {
            Ok(()) => return Ok(()),
            Err((
                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                Refused::Copied(back),
            )) if !waited => {
                flush(writer.producer(), timeout).await;
                waited = true;
                record = ToSend::Copied(back);
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Sends everything queued in the producer now and waits for its reports (bounded).
pub async fn flush(producer: &Arc<DeliveryProducer>, timeout: Duration) {
    let p = producer.clone();
    let r = tokio::task::spawn_blocking(move || crate::kafka::producer::flush(&p, timeout)).await;
    if let Ok(Err(e)) = r {
        debug!("flushing the target producer: {e}");
    }
}

/// A delivery report as a record result.
pub fn delivery_result(r: Option<DeliveryReport>) -> RecordResult {
    match r {
        Some(Ok(offset)) => Ok(offset),
        Some(Err(e)) => Err(Box::new(RecordFailure::from_error(&e, false))),
        None => Err(Box::new(RecordFailure::no_report())),
    }
}
