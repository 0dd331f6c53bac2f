//! Detection: whether a source partition lost records before replication (DataLoss) or no
//! longer holds what was replicated (TopicReset), and the message that explains it. Pure: the
//! engine calls [`classify_out_of_range`] on a consumer error and [`check_partition`] on each
//! periodic observation; the signals and what each misses are in `docs/DATA-SAFETY.md`.
//! Leader epochs are not a signal: librdkafka's metadata has none, and record-batch epochs
//! would only catch recreations that topic ids (Kafka 2.8+) catch with certainty.

use std::collections::HashSet;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::reset::{allowed_strategies, describe_tp, failure_type_name, strategy_name};
use crate::api::{FailureType, PartitionFailure, ResetRequest, ResetStrategy, TopicPartitionRef};

/// How many records were deleted before replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordsLost {
    /// Known exactly (same topic, log start past our position).
    Exactly(i64),
    /// A lower bound (recreation involved, or suspected).
    AtLeast(i64),
    /// Not known (lookup failed, or records of a deleted topic).
    Unknown,
}

/// One piece of evidence behind a detection; rendered in the failure message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The broker answered OFFSET_OUT_OF_RANGE (or log truncation) for our position.
    OutOfRange,
    /// The log start lookup after an out-of-range error failed.
    LogStartLookupFailed {
        /// The lookup error.
        error: String,
    },
    /// The topic id differs from the one recorded (ids absent when only a boolean was known).
    TopicIdChanged {
        /// Recorded id.
        previous: Option<String>,
        /// Current id.
        current: Option<String>,
    },
    /// The topic id is the same: the topic was not recreated.
    TopicIdUnchanged,
    /// The log start offset fell back to 0 from above 0.
    LogStartDroppedToZero {
        /// Highest log start recorded.
        previous: i64,
    },
    /// The high watermark fell below the highest one seen.
    HighWatermarkRegressed {
        /// Highest high watermark recorded.
        previous: i64,
        /// Current high watermark.
        current: i64,
    },
    /// Our position is past the current high watermark.
    PositionPastEnd {
        /// Current high watermark.
        high_watermark: i64,
    },
    /// The log start offset is past our position.
    LogStartPastPosition {
        /// Current log start.
        log_start: i64,
    },
    /// The recreated topic's log no longer starts at 0.
    RecreatedLogStartAboveZero {
        /// Current log start.
        log_start: i64,
    },
    /// No progress is recorded, but the target partition already holds records.
    TargetHoldsRecords {
        /// The target topic.
        target_topic: String,
        /// Its partition's end offset.
        end: i64,
    },
    /// The target refused the record at our position for good (RecordRejected).
    TargetRejected {
        /// The target topic.
        target_topic: String,
        /// The target's reason, as the client reported it.
        reason: String,
    },
}

impl Signal {
    fn describe(&self, position: i64) -> String {
        match self {
            Signal::OutOfRange => {
                format!("the source broker answered OFFSET_OUT_OF_RANGE for offset {position}")
            }
            Signal::LogStartLookupFailed { error } => {
                format!("looking up the log start offset failed ({error})")
            }
            Signal::TopicIdChanged {
                previous: Some(p),
                current: Some(c),
            } => {
                format!(
                    "the topic id changed from {p} to {c} (the topic was deleted and recreated)"
                )
            }
            Signal::TopicIdChanged { .. } => {
                "the topic id changed (the topic was deleted and recreated)".to_string()
            }
            Signal::TopicIdUnchanged => {
                "the topic id is unchanged, so the log was truncated rather than recreated \
                 (e.g. unclean leader election)"
                    .to_string()
            }
            Signal::LogStartDroppedToZero { previous } => format!(
                "the log start offset fell from {previous} to 0 (it only moves forward within \
                 one topic's lifetime)"
            ),
            Signal::HighWatermarkRegressed { previous, current } => {
                format!("the high watermark went back from {previous} to {current}")
            }
            Signal::PositionPastEnd { high_watermark } => format!(
                "the next offset to replicate, {position}, is past the high watermark \
                 {high_watermark}: offsets {high_watermark} to {} were replicated but no longer \
                 exist on the source",
                position - 1
            ),
            Signal::LogStartPastPosition { log_start } => format!(
                "the log start offset {log_start} is past offset {position}, the next to replicate"
            ),
            Signal::RecreatedLogStartAboveZero { log_start } => format!(
                "the recreated topic's log starts at offset {log_start}: its offsets 0 to {} \
                 were deleted before replication",
                log_start - 1
            ),
            Signal::TargetHoldsRecords { target_topic, end } => format!(
                "target topic \"{target_topic}\" already holds offsets up to {} of this \
                 partition, and no progress says which source records they are",
                end - 1
            ),
            Signal::TargetRejected {
                target_topic,
                reason,
            } => format!(
                "target topic \"{target_topic}\" refused the record at source offset \
                 {position}: {reason}"
            ),
        }
    }
}

/// A DataLoss, TopicReset, ProgressMissing or RecordRejected found on one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The source partition.
    pub tp: TopicPartitionRef,
    /// What kind of failure.
    pub type_: FailureType,
    /// Our position: the next offset replication needed (RecordRejected: the rejected
    /// record's offset).
    pub requested_offset: i64,
    /// The log start offset when known.
    pub log_start: Option<i64>,
    /// The high watermark when known.
    pub high_watermark: Option<i64>,
    /// Records deleted before replication.
    pub records_lost: RecordsLost,
    /// Evidence, in the order it was checked.
    pub signals: Vec<Signal>,
}

/// The flow a failure belongs to, for the `kubectl` command in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRef<'a> {
    /// Namespace of the MirrorFlow.
    pub namespace: &'a str,
    /// Name of the MirrorFlow.
    pub name: &'a str,
}

/// Classify an out-of-range error for `position` on `tp`.
///
/// `log_start` is the partition's log start offset, or the lookup error. `topic_id_changed` is
/// `Some` when topic ids were compared. Log start past the position: DataLoss with the exact
/// count; a recreated topic whose log no longer starts at 0: DataLoss, at least log start
/// records (DataLoss wins: its remedies make the operator accept the gap); otherwise
/// TopicReset. A failed lookup is DataLoss with unknown counts (Kafka PR 23091 chose
/// TopicReset): loss cannot be ruled out, and TopicReset's `RestartFromEarliest` would accept
/// a gap silently where DataLoss's `ResumeFromLogStart` does the same seek acknowledged.
/// The lookup error is text: the decision only shows it (a signal of the detection), it
/// never acts on why the lookup failed.
pub fn classify_out_of_range(
    tp: TopicPartitionRef,
    position: i64,
    log_start: Result<i64, String>,
    topic_id_changed: Option<bool>,
) -> Detection {
    let recreated = topic_id_changed == Some(true);
    let mut signals = vec![Signal::OutOfRange];
    match topic_id_changed {
        Some(true) => signals.push(Signal::TopicIdChanged {
            previous: None,
            current: None,
        }),
        Some(false) => signals.push(Signal::TopicIdUnchanged),
        None => {}
    }
    let (type_, records_lost, ls) = match log_start {
        Err(error) => {
            signals.push(Signal::LogStartLookupFailed { error });
            (FailureType::DataLoss, RecordsLost::Unknown, None)
        }
        Ok(ls) if recreated && ls > 0 => {
            signals.push(Signal::RecreatedLogStartAboveZero { log_start: ls });
            (FailureType::DataLoss, RecordsLost::AtLeast(ls), Some(ls))
        }
        Ok(ls) if !recreated && ls > position => {
            signals.push(Signal::LogStartPastPosition { log_start: ls });
            (
                FailureType::DataLoss,
                RecordsLost::Exactly(ls - position),
                Some(ls),
            )
        }
        Ok(ls) => (FailureType::TopicReset, RecordsLost::Unknown, Some(ls)),
    };
    Detection {
        tp,
        type_,
        requested_offset: position,
        log_start: ls,
        high_watermark: None,
        records_lost,
        signals,
    }
}

/// What the engine observed on a source partition just now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionObservation {
    /// Topic id (KIP-516), when the broker and client provide it.
    pub topic_id: Option<String>,
    /// Log start offset (ListOffsets earliest).
    pub log_start: i64,
    /// High watermark (ListOffsets latest, not the fetch-cached value).
    pub high_watermark: i64,
}

/// What we recorded about a partition we replicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownPartition {
    /// The source partition.
    pub tp: TopicPartitionRef,
    /// Next offset to replicate (last replicated + 1).
    pub position: i64,
    /// Topic id when first seen.
    pub topic_id: Option<String>,
    /// Highest high watermark seen.
    pub high_watermark: Option<i64>,
    /// Highest log start seen.
    pub log_start: Option<i64>,
}

impl KnownPartition {
    /// A fresh record at `position` with nothing observed yet.
    pub fn new(tp: TopicPartitionRef, position: i64) -> Self {
        Self {
            tp,
            position,
            topic_id: None,
            high_watermark: None,
            log_start: None,
        }
    }

    /// A record whose baseline is `now`: after a reset, the new topic (or the moved log) is the
    /// reference, so old watermarks and ids must not flag it again.
    pub fn baseline(tp: TopicPartitionRef, position: i64, now: &PartitionObservation) -> Self {
        let mut k = Self::new(tp, position);
        k.record(now);
        k
    }

    /// Fold in an observation for which [`check_partition`] returned `None`: keep the first
    /// topic id and the highest watermarks. An observation without a topic id keeps
    /// the recorded one (a client or broker that cannot see ids is not a recreation).
    pub fn record(&mut self, now: &PartitionObservation) {
        if now.topic_id.is_some() {
            self.topic_id.clone_from(&now.topic_id);
        }
        self.high_watermark = Some(
            self.high_watermark
                .map_or(now.high_watermark, |h| h.max(now.high_watermark)),
        );
        self.log_start = Some(
            self.log_start
                .map_or(now.log_start, |l| l.max(now.log_start)),
        );
    }
}

/// Check a partition without waiting for a fetch error: catches silent TopicResets and purged
/// idle partitions. `None` means no problem seen (then call [`KnownPartition::record`]).
///
/// Watermarks must come from ListOffsets, not from fetch responses, which can dip during a
/// leader change. Only a log start fallen to exactly 0 counts: a freshly elected leader may
/// briefly lag on the log start, and a false TopicReset pushes the operator into a harmful
/// reset.
pub fn check_partition(stored: &KnownPartition, now: &PartitionObservation) -> Option<Detection> {
    let position = stored.position;
    let mut signals = Vec::new();

    let id_changed = match (&stored.topic_id, &now.topic_id) {
        (Some(p), Some(c)) if p != c => {
            signals.push(Signal::TopicIdChanged {
                previous: Some(p.clone()),
                current: Some(c.clone()),
            });
            true
        }
        _ => false,
    };
    let log_start_zeroed = match stored.log_start {
        Some(p) if p > 0 && now.log_start == 0 => {
            signals.push(Signal::LogStartDroppedToZero { previous: p });
            true
        }
        _ => false,
    };
    let hwm_regressed = match stored.high_watermark {
        Some(p) if now.high_watermark < p => {
            signals.push(Signal::HighWatermarkRegressed {
                previous: p,
                current: now.high_watermark,
            });
            true
        }
        _ => false,
    };
    let past_end = position > now.high_watermark;
    if past_end {
        signals.push(Signal::PositionPastEnd {
            high_watermark: now.high_watermark,
        });
    }

    // Proven recreation: our position belongs to the old topic, the new one starts at 0.
    let recreated = id_changed;
    let suspected = log_start_zeroed || hwm_regressed || past_end;

    let (type_, records_lost) = if recreated && now.log_start > 0 {
        signals.push(Signal::RecreatedLogStartAboveZero {
            log_start: now.log_start,
        });
        (FailureType::DataLoss, RecordsLost::AtLeast(now.log_start))
    } else if !recreated && now.log_start > position {
        signals.push(Signal::LogStartPastPosition {
            log_start: now.log_start,
        });
        let n = now.log_start - position;
        // A regressed watermark hints at recreation: then more may be gone than the gap shows.
        let lost = if suspected {
            RecordsLost::AtLeast(n)
        } else {
            RecordsLost::Exactly(n)
        };
        (FailureType::DataLoss, lost)
    } else if recreated || suspected {
        (FailureType::TopicReset, RecordsLost::Unknown)
    } else {
        return None;
    };
    Some(Detection {
        tp: stored.tp.clone(),
        type_,
        requested_offset: position,
        log_start: Some(now.log_start),
        high_watermark: Some(now.high_watermark),
        records_lost,
        signals,
    })
}

/// The most serious type among several detections: DataLoss wins (for flow-level conditions).
pub fn worst_failure_type(types: impl IntoIterator<Item = FailureType>) -> Option<FailureType> {
    types.into_iter().fold(None, |acc, t| match (acc, t) {
        (Some(FailureType::DataLoss), _) | (_, FailureType::DataLoss) => {
            Some(FailureType::DataLoss)
        }
        _ => Some(FailureType::TopicReset),
    })
}

impl Detection {
    /// Records lost when known exactly (the `recordsLost` status field).
    pub fn records_lost_exact(&self) -> Option<i64> {
        match self.records_lost {
            RecordsLost::Exactly(n) => Some(n),
            _ => None,
        }
    }

    /// A reset id unique to this failure (type, topic, partition, detection time); within the
    /// CRD's 128 characters.
    pub fn suggested_reset_id(&self, detected_at: &Time) -> String {
        suggested_reset_id(self.type_, &self.tp, detected_at)
    }

    /// What happened, the offsets, the records lost, and the exact command to clear it.
    pub fn message(&self, flow: FlowRef<'_>, detected_at: &Time) -> String {
        let tp = describe_tp(&self.tp);
        let pos = self.requested_offset;
        let mut m = match self.type_ {
            FailureType::DataLoss => self.data_loss_summary(&tp),
            FailureType::TopicReset => self.topic_reset_summary(&tp),
            FailureType::ProgressMissing => format!(
                "ProgressMissing on source {tp}: no replication progress is recorded for it \
                 (its progress topic was deleted or the target rebuilt), but its target \
                 partition already holds records. Starting per startFrom (offset {pos}) would \
                 replay records already on the target or skip records never replicated, so \
                 mirrorflow does not guess."
            ),
            FailureType::RecordRejected => format!(
                "RecordRejected on source {tp}: the target refused the record at offset {pos} \
                 for good. Every record before it is replicated; none after it is written, so \
                 nothing is skipped until you decide."
            ),
        };
        let evidence: Vec<String> = self.signals.iter().map(|s| s.describe(pos)).collect();
        if !evidence.is_empty() {
            let _ = write!(m, " Evidence: {}.", evidence.join("; "));
        }
        if self.type_ == FailureType::TopicReset {
            if let Some(ls) = self.log_start.filter(|ls| *ls > 0) {
                let _ = write!(
                    m,
                    " Note: the log now starts at offset {ls}; if the topic was recreated, its \
                     offsets 0 to {} were deleted before replication and no reset brings them \
                     back.",
                    ls - 1
                );
            }
        }
        m.push_str(" Replication of this partition is stopped; other partitions continue.");

        let allowed = allowed_strategies(self.type_);
        let id = self.suggested_reset_id(detected_at);
        let cmd = reset_command(flow, &id, allowed[0], std::slice::from_ref(&self.tp));
        match self.type_ {
            FailureType::DataLoss => {
                let _ = write!(
                    m,
                    " To accept the gap and resume at the log start, run: {cmd}."
                );
            }
            FailureType::TopicReset => {
                let _ = write!(
                    m,
                    " To replicate the new topic from its beginning, run: {cmd} (records already \
                     mirrored stay on the target; the new topic's records are appended after them)."
                );
            }
            FailureType::ProgressMissing => {
                let _ = write!(
                    m,
                    " To resume after the records already on the target, run: {cmd} (from the \
                     last offset sync they left: no record is skipped, at most offsetSyncs.lagMax \
                     are sent again; refused if no sync exists). RestartFromEarliest replicates \
                     the partition again from its log start (duplicates)."
                );
            }
            FailureType::RecordRejected => {
                let _ = write!(
                    m,
                    " To skip exactly this record and resume at offset {}, run: {cmd}. To send \
                     it again once the target accepts it (e.g. after raising the target topic's \
                     max.message.bytes), use strategy RetryRecord instead.",
                    pos + 1
                );
            }
        }
        let names: Vec<&str> = allowed.iter().map(|s| strategy_name(*s)).collect();
        let _ = write!(
            m,
            " Or use strategy SkipToLatest to replicate only records written from now on. \
             Allowed strategies for {}: {}. Omit `partitions` to reset every failed partition at \
             once (each must allow the strategy).",
            failure_type_name(self.type_),
            names.join(", ")
        );
        m
    }

    fn data_loss_summary(&self, tp: &str) -> String {
        let pos = self.requested_offset;
        match (self.log_start, self.records_lost) {
            (Some(ls), RecordsLost::Exactly(n)) => format!(
                "DataLoss on source {tp}: records were deleted on the source before they were \
                 replicated. Replication needed offset {pos} but the log now starts at offset \
                 {ls}: {n} records (offsets {pos} to {}) are lost.",
                ls - 1
            ),
            (ls, RecordsLost::AtLeast(n)) => {
                let ls = ls
                    .map(|ls| format!("; the log now starts at offset {ls}"))
                    .unwrap_or_default();
                format!(
                    "DataLoss on source {tp}: records were deleted on the source before they were \
                     replicated. Replication was at offset {pos}{ls}: at least {n} records are \
                     lost."
                )
            }
            _ => format!(
                "DataLoss on source {tp}: offset {pos}, the next to replicate, is gone from the \
                 source, and records may have been deleted before they were replicated; how many \
                 is unknown, and a recreated topic cannot be ruled out. Check the partition's \
                 offsets on the source before choosing."
            ),
        }
    }

    fn topic_reset_summary(&self, tp: &str) -> String {
        let pos = self.requested_offset;
        let mut m = format!(
            "TopicReset on source {tp}: the source no longer holds offsets that were already \
             replicated; the topic was deleted and recreated (or its log was truncated). \
             Replication was at offset {pos}"
        );
        if let Some(ls) = self.log_start {
            let _ = write!(m, "; log start {ls}");
        }
        if let Some(h) = self.high_watermark {
            let _ = write!(m, "; high watermark {h}");
        }
        let _ = write!(
            m,
            ". If the topic was recreated, records the old topic held beyond offset {pos} were \
             not replicated and cannot be counted."
        );
        m
    }

    /// The status entry for this detection.
    pub fn to_failure(&self, flow: FlowRef<'_>, detected_at: Time) -> PartitionFailure {
        PartitionFailure {
            type_: self.type_,
            topic: self.tp.topic.clone(),
            partition: self.tp.partition,
            requested_offset: self.requested_offset,
            log_start_offset: self.log_start,
            records_lost: self.records_lost_exact(),
            reason: self.signals.iter().find_map(|s| match s {
                Signal::TargetRejected { reason, .. } => Some(reason.clone()),
                _ => None,
            }),
            message: Some(self.message(flow, &detected_at)),
            detected_at,
        }
    }
}

/// The detection of a record the target refused for good at source offset `offset` of `tp`
/// (written to `target_topic`), with the target's `reason`.
pub fn record_rejected(
    tp: TopicPartitionRef,
    offset: i64,
    target_topic: &str,
    reason: &str,
) -> Detection {
    Detection {
        tp,
        type_: FailureType::RecordRejected,
        requested_offset: offset,
        log_start: None,
        high_watermark: None,
        records_lost: RecordsLost::Unknown,
        signals: vec![Signal::TargetRejected {
            target_topic: target_topic.to_string(),
            reason: reason.to_string(),
        }],
    }
}

/// A reset id unique to a failure (type, topic, partition, detection time); within the CRD's
/// 128 characters.
pub fn suggested_reset_id(
    type_: FailureType,
    tp: &TopicPartitionRef,
    detected_at: &Time,
) -> String {
    let kind = match type_ {
        FailureType::DataLoss => "dataloss",
        FailureType::TopicReset => "topicreset",
        FailureType::ProgressMissing => "progressmissing",
        FailureType::RecordRejected => "recordrejected",
    };
    const MAX_TOPIC: usize = 64;
    let topic = if tp.topic.len() <= MAX_TOPIC {
        tp.topic.clone()
    } else {
        // Topic names are ASCII in Kafka; cut on a char boundary anyway, and keep ids of
        // topics sharing a long prefix apart with a hash of the full name.
        let cut: String = tp.topic.chars().take(MAX_TOPIC).collect();
        format!("{cut}.{:08x}", fnv1a32(tp.topic.as_bytes()))
    };
    format!(
        "{kind}-{topic}-{}-{}",
        tp.partition,
        detected_at.0.as_second()
    )
}

/// The command that clears `f` the way its message suggests: its first allowed strategy,
/// for that one partition, under the id [`suggested_reset_id`] gives it.
pub fn failure_reset_command(flow: FlowRef<'_>, f: &PartitionFailure) -> String {
    let tp = TopicPartitionRef::new(f.topic.clone(), f.partition);
    let id = suggested_reset_id(f.type_, &tp, &f.detected_at);
    reset_command(
        flow,
        &id,
        allowed_strategies(f.type_)[0],
        std::slice::from_ref(&tp),
    )
}

/// `kubectl -n NS patch mirrorflow NAME --type merge -p '{"spec":{"reset":{...}}}'`.
pub fn reset_command(
    flow: FlowRef<'_>,
    id: &str,
    strategy: ResetStrategy,
    partitions: &[TopicPartitionRef],
) -> String {
    // Serialize the API type itself so the patch always matches the CRD; structs (not a
    // `json!` map) keep the field order stable: id, strategy, partitions.
    #[derive(serde::Serialize)]
    struct Patch<'a> {
        spec: Spec<'a>,
    }
    #[derive(serde::Serialize)]
    struct Spec<'a> {
        reset: &'a ResetRequest,
    }
    let reset = ResetRequest {
        id: id.to_string(),
        strategy,
        partitions: partitions.to_vec(),
    };
    let patch = serde_json::to_string(&Patch {
        spec: Spec { reset: &reset },
    })
    .expect("a ResetRequest serializes");
    format!(
        "kubectl -n {} patch mirrorflow {} --type merge -p '{}'",
        flow.namespace, flow.name, patch
    )
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Identity of a reported failure: a new requested offset or type is a new failure.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FailureKey {
    /// The source partition.
    pub tp: TopicPartitionRef,
    /// DataLoss or TopicReset.
    pub type_: FailureType,
    /// The position that failed.
    pub requested_offset: i64,
}

impl From<&Detection> for FailureKey {
    fn from(d: &Detection) -> Self {
        Self {
            tp: d.tp.clone(),
            type_: d.type_,
            requested_offset: d.requested_offset,
        }
    }
}

impl From<&PartitionFailure> for FailureKey {
    fn from(f: &PartitionFailure) -> Self {
        Self {
            tp: TopicPartitionRef {
                topic: f.topic.clone(),
                partition: f.partition,
            },
            type_: f.type_,
            requested_offset: f.requested_offset,
        }
    }
}

/// Remembers which failures were already logged, so each is logged once at error level even
/// though the engine sees it on every poll or check.
#[derive(Clone, Debug, Default)]
pub struct ReportedFailures {
    seen: HashSet<FailureKey>,
}

impl ReportedFailures {
    /// True the first time `key` is seen: log it now.
    pub fn first_report(&mut self, key: impl Into<FailureKey>) -> bool {
        self.seen.insert(key.into())
    }

    /// Forget a partition once it was reset, so a later failure is logged again.
    pub fn forget(&mut self, tp: &TopicPartitionRef) {
        self.seen.retain(|k| &k.tp != tp);
    }

    /// Number of remembered failures.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True if nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::validation::reset::{plan_reset, ResetDecision, SeekTarget};
    use pretty_assertions::assert_eq;
    use FailureType::{DataLoss, TopicReset};

    fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
        TopicPartitionRef::new(topic, partition)
    }

    fn t0() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
    }

    const FLOW: FlowRef<'static> = FlowRef {
        namespace: "kafka",
        name: "dc1-to-dc2",
    };

    #[test]
    fn out_of_range_rows() {
        // (position, log start, topic id changed) → (type, records lost, log start)
        type Row = (
            i64,
            Result<i64, String>,
            Option<bool>,
            FailureType,
            RecordsLost,
            Option<i64>,
        );
        let rows: Vec<Row> = vec![
            // Log start past position: retention deleted unreplicated records.
            (
                120,
                Ok(500),
                None,
                DataLoss,
                RecordsLost::Exactly(380),
                Some(500),
            ),
            (
                120,
                Ok(121),
                Some(false),
                DataLoss,
                RecordsLost::Exactly(1),
                Some(121),
            ),
            // Log start at or below position: the log is shorter than our position.
            (120, Ok(0), None, TopicReset, RecordsLost::Unknown, Some(0)),
            (
                120,
                Ok(120),
                None,
                TopicReset,
                RecordsLost::Unknown,
                Some(120),
            ),
            (
                120,
                Ok(50),
                Some(false),
                TopicReset,
                RecordsLost::Unknown,
                Some(50),
            ),
            (
                120,
                Ok(0),
                Some(true),
                TopicReset,
                RecordsLost::Unknown,
                Some(0),
            ),
            // Both signals: DataLoss wins; on the new topic the loss starts at 0.
            (
                120,
                Ok(50),
                Some(true),
                DataLoss,
                RecordsLost::AtLeast(50),
                Some(50),
            ),
            (
                120,
                Ok(500),
                Some(true),
                DataLoss,
                RecordsLost::AtLeast(500),
                Some(500),
            ),
            // Failed lookup: still fails, as DataLoss with unknown counts.
            (
                120,
                Err("timed out".into()),
                None,
                DataLoss,
                RecordsLost::Unknown,
                None,
            ),
            (
                120,
                Err("timed out".into()),
                Some(true),
                DataLoss,
                RecordsLost::Unknown,
                None,
            ),
        ];
        for (pos, ls, changed, want_type, want_lost, want_ls) in rows {
            let d = classify_out_of_range(tp("orders", 3), pos, ls.clone(), changed);
            let ctx = format!("pos {pos} ls {ls:?} changed {changed:?}");
            assert_eq!(d.type_, want_type, "{ctx}");
            assert_eq!(d.records_lost, want_lost, "{ctx}");
            assert_eq!(d.log_start, want_ls, "{ctx}");
            assert_eq!(d.requested_offset, pos, "{ctx}");
            assert_eq!(d.tp, tp("orders", 3), "{ctx}");
            assert_eq!(d.signals[0], Signal::OutOfRange, "{ctx}");
        }
    }

    #[test]
    fn failed_lookup_message_says_unknown_and_error() {
        let d = classify_out_of_range(
            tp("orders", 3),
            120,
            Err("ListOffsets: broker down".into()),
            None,
        );
        let f = d.to_failure(FLOW, t0());
        assert_eq!(f.type_, DataLoss);
        assert_eq!(f.log_start_offset, None);
        assert_eq!(f.records_lost, None);
        let m = f.message.unwrap();
        for want in [
            "topic \"orders\" partition 3",
            "offset 120",
            "ListOffsets: broker down",
            "may have been deleted",
            "how many is unknown",
            "ResumeFromLogStart",
        ] {
            assert!(m.contains(want), "missing {want:?} in {m}");
        }
    }

    #[test]
    fn a_rejected_record_names_the_offset_the_reason_and_the_skip_command() {
        let reason = "Broker: Message size too large (MessageSizeTooLarge)";
        let f = record_rejected(tp("orders", 3), 41, "dc1.orders", reason).to_failure(FLOW, t0());
        assert_eq!(
            (f.type_, f.requested_offset, f.reason.as_deref()),
            (FailureType::RecordRejected, 41, Some(reason))
        );
        assert_eq!((f.log_start_offset, f.records_lost), (None, None));
        let m = f.message.unwrap();
        for want in [
            "RecordRejected on source topic \"orders\" partition 3",
            "refused the record at offset 41",
            "target topic \"dc1.orders\" refused the record at source offset 41: Broker: Message size too large",
            "none after it is written",
            "To skip exactly this record and resume at offset 42, run: kubectl -n kafka patch mirrorflow dc1-to-dc2",
            "\"strategy\":\"SkipRecord\",\"partitions\":[{\"topic\":\"orders\",\"partition\":3}]",
            "\"id\":\"recordrejected-orders-3-",
            "use strategy RetryRecord",
            "Allowed strategies for RecordRejected: SkipRecord, RetryRecord, SkipToLatest",
        ] {
            assert!(m.contains(want), "missing {want:?} in {m}");
        }
    }

    fn known(position: i64) -> KnownPartition {
        KnownPartition {
            tp: tp("orders", 3),
            position,
            topic_id: Some("AAA".into()),
            high_watermark: Some(1000),
            log_start: Some(0),
        }
    }

    fn obs(topic_id: Option<&str>, log_start: i64, hwm: i64) -> PartitionObservation {
        PartitionObservation {
            topic_id: topic_id.map(Into::into),
            log_start,
            high_watermark: hwm,
        }
    }

    #[test]
    fn check_partition_rows() {
        type Want = Option<(FailureType, RecordsLost)>;
        // Stored: id AAA, hwm seen 1000, log start 0, position varies.
        let rows: Vec<(&str, KnownPartition, PartitionObservation, Want)> = vec![
            (
                "healthy, growing",
                known(900),
                obs(Some("AAA"), 0, 1200),
                None,
            ),
            (
                "healthy, caught up",
                known(1000),
                obs(Some("AAA"), 0, 1000),
                None,
            ),
            (
                "healthy, retention behind position",
                known(900),
                obs(Some("AAA"), 900, 1000),
                None,
            ),
            (
                "no ids now: not a change",
                known(900),
                obs(None, 0, 1200),
                None,
            ),
            (
                "topic id changed, new topic bigger (silent reset)",
                known(900),
                obs(Some("BBB"), 0, 5000),
                Some((TopicReset, RecordsLost::Unknown)),
            ),
            (
                "topic id changed, new topic shorter",
                known(900),
                obs(Some("BBB"), 0, 500),
                Some((TopicReset, RecordsLost::Unknown)),
            ),
            (
                "hwm went back below seen",
                known(900),
                obs(Some("AAA"), 0, 950),
                Some((TopicReset, RecordsLost::Unknown)),
            ),
            (
                "position past hwm (shorter topic, no fetch error)",
                known(900),
                obs(None, 0, 40),
                Some((TopicReset, RecordsLost::Unknown)),
            ),
            (
                "idle partition purged",
                known(900),
                obs(Some("AAA"), 1000, 1000),
                Some((DataLoss, RecordsLost::Exactly(100))),
            ),
            (
                "recreated and purged: DataLoss wins",
                known(900),
                obs(Some("BBB"), 300, 5000),
                Some((DataLoss, RecordsLost::AtLeast(300))),
            ),
            (
                "recreated, purged past position: DataLoss wins",
                known(900),
                obs(Some("BBB"), 950, 5000),
                Some((DataLoss, RecordsLost::AtLeast(950))),
            ),
            (
                "hwm regressed and purged past position: lower bound",
                known(900),
                obs(None, 920, 950),
                Some((DataLoss, RecordsLost::AtLeast(20))),
            ),
        ];
        for (name, stored, now, want) in rows {
            let got = check_partition(&stored, &now);
            assert_eq!(
                got.as_ref().map(|d| (d.type_, d.records_lost)),
                want,
                "{name}"
            );
            if let Some(d) = got {
                assert_eq!(d.requested_offset, stored.position, "{name}");
                assert_eq!(d.log_start, Some(now.log_start), "{name}");
                assert_eq!(d.high_watermark, Some(now.high_watermark), "{name}");
                assert!(!d.signals.is_empty(), "{name}");
            }
        }
    }

    #[test]
    fn log_start_drop_to_zero() {
        let mut stored = known(900);
        stored.topic_id = None;
        stored.log_start = Some(400);
        // Recreated topic already past every watermark we saw: only the log start shows it.
        let d = check_partition(&stored, &obs(None, 0, 5000)).unwrap();
        assert_eq!(d.type_, TopicReset);
        assert_eq!(
            d.signals,
            vec![Signal::LogStartDroppedToZero { previous: 400 }]
        );
        // A small drop is not used (leader change noise).
        assert_eq!(check_partition(&stored, &obs(None, 390, 5000)), None);
        // Old log started at 0: undetectable without ids (documented).
        stored.log_start = Some(0);
        assert_eq!(check_partition(&stored, &obs(None, 0, 5000)), None);
    }

    #[test]
    fn record_keeps_highest_and_first_id() {
        let mut k = KnownPartition::new(tp("orders", 0), 10);
        k.record(&obs(Some("AAA"), 5, 100));
        k.record(&obs(None, 3, 90));
        assert_eq!(k.topic_id.as_deref(), Some("AAA"));
        assert_eq!(k.high_watermark, Some(100));
        assert_eq!(k.log_start, Some(5));
        // After a reset the new topic is the baseline: the same observation is healthy.
        let now = obs(Some("BBB"), 0, 30);
        assert!(check_partition(&k, &now).is_some());
        let fresh = KnownPartition::baseline(tp("orders", 0), 0, &now);
        assert_eq!(check_partition(&fresh, &now), None);
    }

    #[test]
    fn worst_type() {
        assert_eq!(worst_failure_type([]), None);
        assert_eq!(
            worst_failure_type([TopicReset, TopicReset]),
            Some(TopicReset)
        );
        assert_eq!(
            worst_failure_type([TopicReset, DataLoss, TopicReset]),
            Some(DataLoss)
        );
        assert_eq!(worst_failure_type([DataLoss]), Some(DataLoss));
    }

    #[test]
    fn failure_messages() {
        let rows: Vec<(Detection, Vec<&str>)> = vec![
            (
                classify_out_of_range(tp("orders", 3), 120, Ok(500), None),
                vec![
                    "DataLoss on source topic \"orders\" partition 3",
                    "needed offset 120 but the log now starts at offset 500: 380 records (offsets 120 to 499) are lost",
                    "OFFSET_OUT_OF_RANGE for offset 120",
                    r#"kubectl -n kafka patch mirrorflow dc1-to-dc2 --type merge -p '{"spec":{"reset":{"id":"dataloss-orders-3-1700000000","strategy":"ResumeFromLogStart","partitions":[{"topic":"orders","partition":3}]}}}'"#,
                    "SkipToLatest",
                    "Allowed strategies for DataLoss: ResumeFromLogStart, SkipToLatest",
                ],
            ),
            (
                classify_out_of_range(tp("orders", 3), 120, Ok(0), None),
                vec![
                    "TopicReset on source topic \"orders\" partition 3",
                    "offset 120; log start 0",
                    "\"strategy\":\"RestartFromEarliest\"",
                    "appended after them",
                    "Allowed strategies for TopicReset: RestartFromEarliest, SkipToLatest",
                ],
            ),
            (
                check_partition(&known(900), &obs(Some("BBB"), 0, 5000)).unwrap(),
                vec!["topic id changed from AAA to BBB", "offset 900; log start 0; high watermark 5000"],
            ),
            (
                check_partition(&known(900), &obs(None, 0, 40)).unwrap(),
                vec!["high watermark went back from 1000 to 40", "offsets 40 to 899 were replicated but no longer exist"],
            ),
            (
                check_partition(&known(900), &obs(None, 10, 40)).unwrap(),
                vec!["log now starts at offset 10", "offsets 0 to 9 were deleted"],
            ),
            (
                check_partition(&known(900), &obs(Some("BBB"), 300, 5000)).unwrap(),
                vec!["at least 300 records are lost", "recreated topic's log starts at offset 300"],
            ),
        ];
        for (d, wants) in rows {
            let m = d.message(FLOW, &t0());
            for w in wants {
                assert!(m.contains(w), "missing {w:?} in {m}");
            }
        }
    }

    #[test]
    fn failure_reset_command_is_the_one_in_the_message() {
        for d in [
            classify_out_of_range(tp("orders", 3), 120, Ok(500), None),
            classify_out_of_range(tp("orders", 3), 120, Ok(0), None),
        ] {
            let f = d.to_failure(FLOW, t0());
            let cmd = failure_reset_command(FLOW, &f);
            assert!(f.message.as_deref().unwrap().contains(&cmd), "{cmd}");
        }
    }

    #[test]
    fn suggested_command_is_accepted_by_plan_reset() {
        // The command in each message, fed back as a request, applies to that partition.
        for d in [
            classify_out_of_range(tp("orders", 3), 120, Ok(500), None),
            classify_out_of_range(tp("orders", 3), 120, Ok(0), None),
            classify_out_of_range(tp("orders", 3), 120, Err("x".into()), None),
        ] {
            let f = d.to_failure(FLOW, t0());
            let m = f.message.clone().unwrap();
            let json = m.split("-p '").nth(1).unwrap().split('\'').next().unwrap();
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let req: ResetRequest = serde_json::from_value(v["spec"]["reset"].clone()).unwrap();
            assert!(req.id.len() <= 128);
            let ResetDecision::Apply(actions) = plan_reset(&req, std::slice::from_ref(&f), None)
            else {
                panic!("suggested request refused: {m}")
            };
            assert_eq!(actions[0].tp, tp("orders", 3));
            assert_eq!(actions[0].target, SeekTarget::LogStart);
        }
    }

    #[test]
    fn to_failure_fields() {
        let d = classify_out_of_range(tp("orders", 3), 120, Ok(500), None);
        let f = d.to_failure(FLOW, t0());
        assert_eq!(
            (
                f.type_,
                f.topic.as_str(),
                f.partition,
                f.requested_offset,
                f.log_start_offset,
                f.records_lost,
                f.detected_at.clone()
            ),
            (DataLoss, "orders", 3, 120, Some(500), Some(380), t0())
        );
        // Lower bounds are not reported as exact counts.
        let d = classify_out_of_range(tp("orders", 3), 120, Ok(50), Some(true));
        assert_eq!(d.to_failure(FLOW, t0()).records_lost, None);
    }

    #[test]
    fn reset_ids_distinct_and_bounded() {
        let long_a = format!("{}a", "x".repeat(200));
        let long_b = format!("{}b", "x".repeat(200));
        let ids: Vec<String> = [
            tp("orders", 3),
            tp("orders", 4),
            tp("pay", 3),
            tp(&long_a, 0),
            tp(&long_b, 0),
        ]
        .into_iter()
        .map(|tp| classify_out_of_range(tp, 1, Ok(0), None).suggested_reset_id(&t0()))
        .collect();
        let unique: HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{ids:?}");
        assert!(ids.iter().all(|id| id.len() <= 128), "{ids:?}");
        let later = Time(jiff::Timestamp::from_second(1_700_000_060).unwrap());
        let d = classify_out_of_range(tp("orders", 3), 1, Ok(0), None);
        assert_ne!(d.suggested_reset_id(&t0()), d.suggested_reset_id(&later));
    }

    #[test]
    fn log_once() {
        let mut r = ReportedFailures::default();
        let a = classify_out_of_range(tp("orders", 3), 120, Ok(500), None);
        assert!(r.first_report(&a));
        assert!(!r.first_report(&a));
        // The same failure as a status entry is the same key.
        assert!(!r.first_report(&a.to_failure(FLOW, t0())));
        // New offset, new type or new partition: logged again.
        assert!(r.first_report(&classify_out_of_range(tp("orders", 3), 130, Ok(500), None)));
        assert!(r.first_report(&classify_out_of_range(tp("orders", 3), 120, Ok(0), None)));
        assert!(r.first_report(&classify_out_of_range(tp("orders", 4), 120, Ok(500), None)));
        assert_eq!(r.len(), 4);
        r.forget(&tp("orders", 3));
        assert_eq!(r.len(), 1);
        assert!(r.first_report(&a));
    }
}
