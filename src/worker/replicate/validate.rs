//! Offset validation in the engine (`spec.offsetValidation`): ties an out-of-range error to
//! partitions, judges each periodic watermark observation, confirms a ListOffsets answer with
//! a Fetch, and counts failures. The decisions live in `worker::validation`; this module adapts
//! them to the partition table. A failure is persisted with the partition's progress, so a
//! restarted worker keeps the partition stopped until a `spec.reset` clears it. The signals and
//! what each misses: `docs/DATA-SAFETY.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, Opts, Registry};
use tracing::{debug, error, warn};

use super::io;
use super::partitions::PartitionTable;
use super::status::{FailureKind, PartitionFailed};
use crate::api::{FailureType, TopicPartitionRef};
use crate::kafka::topics::{Admin, MetaClient};
use crate::kafka::Error as KafkaError;
use crate::worker::validation::classify::{
    check_partition, classify_out_of_range, Detection, FlowRef, KnownPartition,
    PartitionObservation, ReportedFailures, Signal,
};

/// After a failed topic id lookup, ids are not asked for this long (other signals go on).
pub const TOPIC_ID_RETRY: Duration = Duration::from_secs(300);

/// A partition the consumer had assigned when librdkafka reported an out-of-range position
/// (`AutoOffsetReset`). rdkafka drops the partition of consumer errors, so every assigned
/// partition is a candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRangeCandidate {
    /// The source partition.
    pub tp: TopicPartitionRef,
    /// Its committed position (the next offset to replicate).
    pub position: i64,
    /// `(log start, high watermark)` from ListOffsets, or the lookup error.
    pub marks: Result<(i64, i64), KafkaError>,
    /// Whether the topic id differs from the recorded one; `None` when not compared.
    pub topic_id_changed: Option<bool>,
}

/// Which partitions an out-of-range error belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// These partitions stop (classified).
    Failed(Vec<Detection>),
    /// No candidate is visibly out of range and there are several: the error cannot be tied
    /// to a partition. Retry (librdkafka keeps refusing a real out-of-range position, never
    /// resets it), and say so.
    Unattributed,
}

/// Decide which candidates an out-of-range error concerns:
/// - a candidate whose position lies outside `[log start, high watermark]`, or whose topic id
///   changed, is out of range: classified by [`classify_out_of_range`];
/// - otherwise, if there is exactly one candidate, the error is its own: classified from its
///   lookup (a position inside the log means the log was replaced: TopicReset; a failed
///   lookup still fails, as DataLoss with unknown counts);
/// - otherwise the error is [`Attribution::Unattributed`].
pub fn attribute_out_of_range(candidates: &[OutOfRangeCandidate]) -> Attribution {
    let classify = |c: &OutOfRangeCandidate| {
        let mut d = classify_out_of_range(
            c.tp.clone(),
            c.position,
            // The decision only shows why a lookup failed.
            c.marks
                .as_ref()
                .map(|(low, _)| *low)
                .map_err(ToString::to_string),
            c.topic_id_changed,
        );
        d.high_watermark = c.marks.as_ref().ok().map(|(_, high)| *high);
        d
    };
    let visible: Vec<Detection> = candidates
        .iter()
        .filter(|c| {
            c.topic_id_changed == Some(true)
                || c.marks
                    .as_ref()
                    .is_ok_and(|(low, high)| c.position < *low || c.position > *high)
        })
        .map(classify)
        .collect();
    if !visible.is_empty() {
        return Attribution::Failed(visible);
    }
    match candidates {
        [only] => Attribution::Failed(vec![classify(only)]),
        _ => Attribution::Unattributed,
    }
}

/// The periodic check on a partition the consumer is fetching saw only "log start past our
/// committed position": defer it. The records may already sit in librdkafka's prefetch queue
/// (fetched before they were deleted) and will be replicated; if they do not, the consumer
/// reports out of range, and a partition that stays idle is checked again next time.
pub fn defer_while_fetching(d: &Detection, fetching: bool) -> bool {
    fetching
        && d.type_ == FailureType::DataLoss
        && !d.signals.is_empty()
        && d.signals
            .iter()
            .all(|s| matches!(s, Signal::LogStartPastPosition { .. }))
}

/// Whether a detection rests only on the high watermark ListOffsets reported (our position
/// past it, or it went back below the highest seen). Such a detection stops the partition
/// only if a Fetch agrees: the fetch response's high watermark is the second opinion. A
/// single ListOffsets answer can be wrong (a new leader on brokers before Kafka 2.2; tansu's
/// "last batch base + 1"), and a false TopicReset pushes the operator into a harmful reset.
pub fn needs_fetch_confirmation(d: &Detection) -> bool {
    d.type_ == FailureType::TopicReset
        && !d.signals.is_empty()
        && d.signals.iter().all(|s| {
            matches!(
                s,
                Signal::PositionPastEnd { .. } | Signal::HighWatermarkRegressed { .. }
            )
        })
}

/// What a periodic check found on one partition.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckOutcome {
    /// Healthy: fold the observation into the baseline (a learned topic id is persisted).
    Healthy(PartitionObservation),
    /// Only "log start past the position" while the consumer fetches it: checked again next
    /// time ([`defer_while_fetching`]).
    Deferred(Detection),
    /// Rests only on the ListOffsets high watermark: confirm with a Fetch first
    /// ([`needs_fetch_confirmation`], [`confirm_with_fetch`]).
    Confirm(PartitionObservation, Detection),
    /// The partition stops.
    Failed(Detection),
}

/// Judges an observation of a partition at its known baseline; `fetching`: records of it
/// arrived since the last check.
pub fn check_observation(
    known: &KnownPartition,
    now: &PartitionObservation,
    fetching: bool,
) -> CheckOutcome {
    match check_partition(known, now) {
        None => CheckOutcome::Healthy(now.clone()),
        Some(d) if defer_while_fetching(&d, fetching) => CheckOutcome::Deferred(d),
        Some(d) if needs_fetch_confirmation(&d) => CheckOutcome::Confirm(now.clone(), d),
        Some(d) => CheckOutcome::Failed(d),
    }
}

/// A ListOffsets-only detection given a Fetch's high watermark: the check again with the
/// larger of both high watermarks. Without a fetch answer the ListOffsets answer stands.
pub fn confirm_with_fetch(
    known: &KnownPartition,
    mut now: PartitionObservation,
    detection: Detection,
    fetch_high: Option<i64>,
) -> CheckOutcome {
    let Some(h) = fetch_high else {
        return CheckOutcome::Failed(detection);
    };
    now.high_watermark = now.high_watermark.max(h);
    match check_partition(known, &now) {
        None => CheckOutcome::Healthy(now),
        Some(d) => CheckOutcome::Failed(d),
    }
}

/// Source topic ids for offset validation, shared by the loop and the refresh task: after a
/// failed lookup ids are not asked for [`TOPIC_ID_RETRY`] (a cluster without a controller
/// answers DescribeTopics only with the timeout).
#[derive(Clone)]
pub struct TopicIds {
    admin: Arc<Admin>,
    alias: Arc<str>,
    timeout: Duration,
    enabled: bool,
    paused_until: Arc<Mutex<Option<Instant>>>,
}

impl TopicIds {
    /// Lookups through `admin` of cluster `alias`, bounded by `timeout`; `enabled`: offset
    /// validation is on.
    pub fn new(admin: Arc<Admin>, alias: &str, timeout: Duration, enabled: bool) -> Self {
        Self {
            admin,
            alias: Arc::from(alias),
            timeout,
            enabled,
            paused_until: Arc::default(),
        }
    }

    /// Ids of `topics`, by topic; topics whose id is unknown are left out. Empty when
    /// validation is off or lookups are paused after a failure.
    pub async fn lookup(&self, topics: BTreeSet<String>) -> HashMap<String, String> {
        let paused = |until: &Option<Instant>| until.is_some_and(|t| Instant::now() < t);
        if !self.enabled || topics.is_empty() || paused(&self.paused_until.lock().unwrap()) {
            return HashMap::new();
        }
        match io::topic_ids(&self.admin, topics.into_iter().collect(), self.timeout).await {
            Ok(ids) => {
                *self.paused_until.lock().unwrap() = None;
                ids.into_iter()
                    .filter_map(|(topic, r)| match r {
                        Ok(Some(id)) => Some((topic, id)),
                        Ok(None) => None,
                        Err(e) => {
                            debug!("{e}");
                            None
                        }
                    })
                    .collect()
            }
            Err(e) => {
                warn!(
                    retry_in_s = TOPIC_ID_RETRY.as_secs(),
                    "topic ids of source cluster {} unavailable ({e}); recreated topics are \
                     detected from watermarks only until then",
                    self.alias
                );
                *self.paused_until.lock().unwrap() = Some(Instant::now() + TOPIC_ID_RETRY);
                HashMap::new()
            }
        }
    }
}

/// An out-of-range error arrived: every replicating partition with a position is a candidate,
/// given fresh watermarks (also recorded in the table for lag) and topic ids. The error is
/// the watermark lookup failing as a whole.
pub async fn out_of_range(
    table: &mut PartitionTable,
    meta: &MetaClient,
    ids: &TopicIds,
    timeout: Duration,
) -> Result<Vec<OutOfRangeCandidate>, KafkaError> {
    let assigned: Vec<(TopicPartitionRef, i64, String)> = table
        .owned()
        .filter(|(_, o)| o.replicating())
        .filter_map(|(tp, o)| o.position.map(|p| (tp.clone(), p, o.topic_id.clone())))
        .collect();
    let partitions = assigned
        .iter()
        .map(|(tp, _, _)| (tp.topic.clone(), tp.partition))
        .collect();
    let marks = io::watermarks(meta, partitions, timeout).await?;
    let topics: BTreeSet<String> = assigned.iter().map(|(tp, _, _)| tp.topic.clone()).collect();
    let ids = ids.lookup(topics).await;
    let candidates = out_of_range_candidates(assigned, marks, &ids);
    for c in &candidates {
        if let (Ok((low, high)), Some(o)) = (&c.marks, table.get_mut(&c.tp)) {
            o.low = Some(*low);
            o.high = Some(*high);
        }
    }
    Ok(candidates)
}

/// The out-of-range candidates: every `assigned` partition (with its recorded topic id) given
/// the current watermarks and topic ids.
pub fn out_of_range_candidates(
    assigned: Vec<(TopicPartitionRef, i64, String)>,
    mut marks: BTreeMap<(String, i32), Result<(i64, i64), KafkaError>>,
    ids: &HashMap<String, String>,
) -> Vec<OutOfRangeCandidate> {
    assigned
        .into_iter()
        .map(|(tp, position, recorded)| {
            let topic_id_changed = match ids.get(&tp.topic) {
                Some(now) if !recorded.is_empty() => Some(*now != recorded),
                _ => None,
            };
            let marks = marks
                .remove(&(tp.topic.clone(), tp.partition))
                .unwrap_or_else(|| {
                    Err(KafkaError::Protocol(format!(
                        "no watermarks for {}/{}",
                        tp.topic, tp.partition
                    )))
                });
            OutOfRangeCandidate {
                tp,
                position,
                marks,
                topic_id_changed,
            }
        })
        .collect()
}

/// The failure that stops a partition for a DataLoss / TopicReset detection; the first
/// report of each is logged at error level and counted.
pub fn detection_failure(
    d: Detection,
    flow: FlowRef<'_>,
    reported: &mut ReportedFailures,
    counter: &IntCounterVec,
) -> PartitionFailed {
    // Whole seconds, as the API server and the persisted progress keep it.
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("in range");
    let failure = d.to_failure(
        flow,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
    );
    let kind = kind_of(d.type_);
    let message = failure.message.clone().unwrap_or_default();
    if reported.first_report(&d) {
        error!(
            topic = %d.tp.topic,
            partition = d.tp.partition,
            requested_offset = d.requested_offset,
            log_start = ?d.log_start,
            records_lost = ?failure.records_lost,
            "{message}"
        );
        counter.with_label_values(&[failure_kind_name(kind)]).inc();
    }
    PartitionFailed {
        kind,
        offset: d.requested_offset,
        message,
        failure: Some(failure),
    }
}

/// `mirrorflow_worker_partition_failures_total{type}`: partitions stopped, by failure type
/// (`DataLoss`, `TopicReset`, `RecordRejected`), counted once per detection. Registered on
/// the worker's registry; if that fails (already registered), the counter still counts but
/// is not exported, and the error is returned for logging.
pub fn failure_counter(registry: &Registry) -> (IntCounterVec, Option<prometheus::Error>) {
    let counter = IntCounterVec::new(
        Opts::new(
            "mirrorflow_worker_partition_failures_total",
            "Partitions stopped by a failure, by type (DataLoss, TopicReset, RecordRejected)",
        ),
        &["type"],
    )
    .expect("valid metric options");
    for kind in [
        FailureKind::DataLoss,
        FailureKind::TopicReset,
        FailureKind::RecordRejected,
        FailureKind::ProgressMissing,
    ] {
        counter.with_label_values(&[failure_kind_name(kind)]);
    }
    let err = registry.register(Box::new(counter.clone())).err();
    (counter, err)
}

/// Label value of a failure kind.
pub fn failure_kind_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::DataLoss => "DataLoss",
        FailureKind::TopicReset => "TopicReset",
        FailureKind::RecordRejected => "RecordRejected",
        FailureKind::ProgressMissing => "ProgressMissing",
    }
}

/// The failure kind of a validation failure type.
pub fn kind_of(t: FailureType) -> FailureKind {
    match t {
        FailureType::DataLoss => FailureKind::DataLoss,
        FailureType::TopicReset => FailureKind::TopicReset,
        FailureType::ProgressMissing => FailureKind::ProgressMissing,
        FailureType::RecordRejected => FailureKind::RecordRejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::validation::classify::RecordsLost;
    use pretty_assertions::assert_eq;
    use FailureType::{DataLoss, TopicReset};

    fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
        TopicPartitionRef::new(topic, partition)
    }

    fn cand(
        partition: i32,
        position: i64,
        marks: Result<(i64, i64), &str>,
        changed: Option<bool>,
    ) -> OutOfRangeCandidate {
        OutOfRangeCandidate {
            tp: tp("orders", partition),
            position,
            marks: marks.map_err(|e| KafkaError::Client(e.into())),
            topic_id_changed: changed,
        }
    }

    #[test]
    fn attribution_rows() {
        type Want = Option<Vec<(i32, FailureType, RecordsLost, Option<i64>)>>;
        let rows: Vec<(&str, Vec<OutOfRangeCandidate>, Want)> = vec![
            (
                "log start past position",
                vec![
                    cand(0, 10, Ok((0, 50)), None),
                    cand(1, 12, Ok((17, 30)), None),
                ],
                Some(vec![(1, DataLoss, RecordsLost::Exactly(5), Some(30))]),
            ),
            (
                "position past the end",
                vec![
                    cand(0, 10, Ok((0, 50)), None),
                    cand(1, 40, Ok((0, 5)), None),
                ],
                Some(vec![(1, TopicReset, RecordsLost::Unknown, Some(5))]),
            ),
            (
                "topic id changed although in range",
                vec![
                    cand(0, 10, Ok((0, 50)), Some(true)),
                    cand(1, 12, Ok((0, 30)), Some(false)),
                ],
                Some(vec![(0, TopicReset, RecordsLost::Unknown, Some(50))]),
            ),
            (
                "several visible",
                vec![
                    cand(0, 10, Ok((20, 50)), None),
                    cand(1, 40, Ok((0, 5)), None),
                ],
                Some(vec![
                    (0, DataLoss, RecordsLost::Exactly(10), Some(50)),
                    (1, TopicReset, RecordsLost::Unknown, Some(5)),
                ]),
            ),
            (
                "single candidate in range: the broker's word counts",
                vec![cand(0, 10, Ok((0, 50)), None)],
                Some(vec![(0, TopicReset, RecordsLost::Unknown, Some(50))]),
            ),
            (
                "single candidate, lookup failed: still fails",
                vec![cand(0, 10, Err("timed out"), None)],
                Some(vec![(0, DataLoss, RecordsLost::Unknown, None)]),
            ),
            (
                "several in range: cannot tell which",
                vec![
                    cand(0, 10, Ok((0, 50)), None),
                    cand(1, 12, Ok((0, 30)), Some(false)),
                ],
                None,
            ),
            (
                "several, one lookup failed: cannot tell which",
                vec![
                    cand(0, 10, Ok((0, 50)), None),
                    cand(1, 12, Err("timed out"), None),
                ],
                None,
            ),
            ("no candidate", vec![], None),
        ];
        for (name, cands, want) in rows {
            let got = match attribute_out_of_range(&cands) {
                Attribution::Failed(ds) => Some(
                    ds.iter()
                        .map(|d| (d.tp.partition, d.type_, d.records_lost, d.high_watermark))
                        .collect::<Vec<_>>(),
                ),
                Attribution::Unattributed => None,
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn deferral_only_for_plain_log_start_while_fetching() {
        let plain = classify_out_of_range(tp("orders", 0), 10, Ok(20), None);
        let plain = Detection {
            signals: vec![Signal::LogStartPastPosition { log_start: 20 }],
            ..plain
        };
        assert!(defer_while_fetching(&plain, true));
        assert!(!defer_while_fetching(&plain, false), "idle: report now");
        let out_of_range = classify_out_of_range(tp("orders", 0), 10, Ok(20), None);
        assert!(
            !defer_while_fetching(&out_of_range, true),
            "the broker refused the position: report now"
        );
        let reset = classify_out_of_range(tp("orders", 0), 10, Ok(0), None);
        assert!(!defer_while_fetching(&reset, true));
    }

    #[test]
    fn fetch_confirmation_only_for_listoffsets_ends() {
        use crate::worker::validation::classify::{
            check_partition, KnownPartition, PartitionObservation,
        };
        let known = KnownPartition {
            tp: tp("orders", 0),
            position: 900,
            topic_id: Some("AAA".into()),
            high_watermark: Some(1000),
            log_start: Some(0),
        };
        let obs = |id: &str, log_start: i64, high: i64| PartitionObservation {
            topic_id: Some(id.into()),
            log_start,
            high_watermark: high,
        };
        let rows = [
            ("past the end", obs("AAA", 0, 40), true),
            ("high watermark went back", obs("AAA", 0, 950), true),
            ("topic id changed too", obs("BBB", 0, 40), false),
            ("log start past position", obs("AAA", 950, 1000), false),
        ];
        for (name, now, want) in rows {
            let d = check_partition(&known, &now).expect(name);
            assert_eq!(needs_fetch_confirmation(&d), want, "{name}");
        }
        let oor = classify_out_of_range(tp("orders", 0), 10, Ok(0), None);
        assert!(
            !needs_fetch_confirmation(&oor),
            "the broker already refused the fetch"
        );
    }

    #[test]
    fn periodic_check_outcomes() {
        let known = KnownPartition {
            tp: tp("orders", 0),
            position: 900,
            topic_id: Some("AAA".into()),
            high_watermark: Some(1000),
            log_start: Some(0),
        };
        let obs = |id: &str, log_start: i64, high: i64| PartitionObservation {
            topic_id: Some(id.into()),
            log_start,
            high_watermark: high,
        };
        type Kind = fn(&CheckOutcome) -> bool;
        let healthy: Kind = |o| matches!(o, CheckOutcome::Healthy(_));
        let deferred: Kind = |o| matches!(o, CheckOutcome::Deferred(_));
        let confirm: Kind = |o| matches!(o, CheckOutcome::Confirm(..));
        let failed: Kind = |o| matches!(o, CheckOutcome::Failed(_));
        let rows: [(&str, PartitionObservation, bool, Kind); 7] = [
            ("healthy", obs("AAA", 0, 1200), false, healthy),
            (
                "purged while fetching: later",
                obs("AAA", 950, 1200),
                true,
                deferred,
            ),
            (
                "purged while idle: DataLoss",
                obs("AAA", 950, 1200),
                false,
                failed,
            ),
            (
                "past the end: ask a fetch",
                obs("AAA", 0, 40),
                false,
                confirm,
            ),
            (
                "high watermark back: ask a fetch",
                obs("AAA", 0, 950),
                true,
                confirm,
            ),
            (
                "new topic id: TopicReset",
                obs("BBB", 0, 1200),
                false,
                failed,
            ),
            (
                "new id and purged: no deferral",
                obs("BBB", 950, 1200),
                true,
                failed,
            ),
        ];
        for (name, now, fetching, want) in rows {
            let got = check_observation(&known, &now, fetching);
            assert!(want(&got), "{name}: {got:?}");
        }
        // A Fetch's high watermark settles a ListOffsets-only detection.
        let CheckOutcome::Confirm(now, d) = check_observation(&known, &obs("AAA", 0, 40), false)
        else {
            panic!("needs confirmation");
        };
        let rows: [(&str, Option<i64>, Kind); 3] = [
            ("the fetch sees the records", Some(1100), healthy),
            ("the fetch agrees", Some(40), failed),
            ("no fetch answer: ListOffsets stands", None, failed),
        ];
        for (name, fetch, want) in rows {
            let got = confirm_with_fetch(&known, now.clone(), d.clone(), fetch);
            assert!(want(&got), "{name}: {got:?}");
        }
    }

    #[test]
    fn out_of_range_candidates_compare_recorded_ids() {
        let marks: BTreeMap<(String, i32), Result<(i64, i64), KafkaError>> = [
            (("orders".to_string(), 0), Ok((0, 50))),
            (
                ("orders".to_string(), 1),
                Err(KafkaError::Client("boom".into())),
            ),
        ]
        .into();
        let ids: HashMap<String, String> = [("orders".to_string(), "NEW".to_string())].into();
        let got = out_of_range_candidates(
            vec![
                (tp("orders", 0), 10, "OLD".into()),
                (tp("orders", 1), 12, String::new()),
                (tp("orders", 2), 14, "NEW".into()),
            ],
            marks,
            &ids,
        );
        let rows: Vec<(i32, Option<bool>, bool)> = got
            .iter()
            .map(|c| (c.tp.partition, c.topic_id_changed, c.marks.is_ok()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (0, Some(true), true),
                (1, None, false),
                (2, Some(false), false)
            ],
            "no recorded id: not compared; no watermarks: an error naming the partition"
        );
        assert_eq!(
            got[2].marks.as_ref().unwrap_err().to_string(),
            "no watermarks for orders/2"
        );
    }

    #[test]
    fn counter_registers_once() {
        let registry = Registry::new();
        let (c, err) = failure_counter(&registry);
        assert!(err.is_none());
        c.with_label_values(&["DataLoss"]).inc();
        let text = crate::telemetry::metrics::encode_registry(&registry);
        for want in [
            "mirrorflow_worker_partition_failures_total{type=\"DataLoss\"} 1",
            "mirrorflow_worker_partition_failures_total{type=\"TopicReset\"} 0",
            "mirrorflow_worker_partition_failures_total{type=\"RecordRejected\"} 0",
        ] {
            assert!(text.contains(want), "missing {want} in {text}");
        }
        let (_, err) = failure_counter(&registry);
        assert!(err.is_some(), "a second registration is reported");
        assert_eq!(kind_of(TopicReset), FailureKind::TopicReset);
    }
}
