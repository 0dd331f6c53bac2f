//! Pure pieces of the engine's offset validation: attributing an out-of-range error to
//! partitions, scoping a reset request to one worker, which reset ids a worker has already
//! handled, and the failure counter. The decisions themselves (classification, checks, reset
//! planning) live in `worker::validation`; this module only adapts them to the engine.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prometheus::{IntCounterVec, Opts, Registry};

use crate::api::{
    AppliedReset, FailureType, PartitionFailure, ResetOutcome, ResetRequest, TopicPartitionRef,
};
use crate::kafka::wire::Progress;
use crate::worker::replicate::assign::is_owned;
use crate::worker::replicate::status::FailureKind;
use crate::worker::validation::classify::{classify_out_of_range, Detection, Signal};
use crate::worker::validation::reset::{describe_tp, plan_reset, strategy_name, ResetDecision};

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
    pub marks: Result<(i64, i64), String>,
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
            c.marks.clone().map(|(low, _)| low),
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

/// What one worker does with a reset request.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerReset {
    /// Plan against this worker's partitions (the request filtered to them).
    Plan(ResetRequest, ResetDecision),
    /// Nothing in the request concerns this worker: report it handled (outcome `Applied`,
    /// no partitions) with this message, so the controller can fold every worker's answer.
    NothingHere(String),
}

/// Scope `req` to worker `index` of `count` before planning it.
///
/// Each worker knows only the partitions it owns, so:
/// - the named partitions are filtered to the ones this worker owns: a partition failed on
///   another worker is never judged (and never called healthy) here; its owner judges it;
/// - a request naming only other workers' partitions, or (with several workers) naming none
///   while none of this worker's partitions is failed, is [`WorkerReset::NothingHere`]: the
///   failed partitions are elsewhere, and "nothing to reset" would be wrong flow-wide;
/// - with a single worker, an empty `partitions` and nothing failed is refused by
///   [`plan_reset`] ("nothing to reset"): that worker sees the whole flow;
/// - with several workers, naming own partitions while none of this worker's is failed is
///   refused with a message that claims no more than this worker knows.
///
/// `failed` holds this worker's DataLoss / TopicReset failures. The all-or-nothing rule of
/// [`plan_reset`] therefore holds per worker: with several workers, one may apply its part
/// while another refuses its own (the controller folds the outcome as Refused and names why).
pub fn plan_worker_reset(
    req: &ResetRequest,
    failed: &[PartitionFailure],
    index: u32,
    count: u32,
    worker: &str,
) -> WorkerReset {
    let mut mine = req.clone();
    mine.partitions
        .retain(|tp| is_owned(&tp.topic, tp.partition, index, count));
    if !req.partitions.is_empty() && mine.partitions.is_empty() {
        return WorkerReset::NothingHere(format!(
            "Reset request \"{}\": {worker} owns none of the {} partition(s) named; nothing to \
             reset on this worker.",
            req.id,
            req.partitions.len()
        ));
    }
    if req.partitions.is_empty() && failed.is_empty() && count > 1 {
        return WorkerReset::NothingHere(format!(
            "Reset request \"{}\": no partition owned by {worker} is failed; nothing to reset \
             on this worker.",
            req.id
        ));
    }
    if failed.is_empty() && count > 1 {
        // plan_reset would say "no partition is failed", which only holds for this worker.
        let named: Vec<String> = mine.partitions.iter().map(describe_tp).collect();
        let msg = format!(
            "Reset request \"{}\" ({}) refused; nothing was reset on {worker}. Not failed: {} \
             ({worker} owns {} and has no failed partition). Name only failed partitions, or \
             leave `partitions` empty to reset every failed partition. Patch spec.reset again \
             with a new id.",
            req.id,
            strategy_name(req.strategy),
            named.join(", "),
            if named.len() == 1 { "it" } else { "them" }
        );
        return WorkerReset::Plan(mine, ResetDecision::Refused(msg));
    }
    let decision = plan_reset(&mine, failed, None);
    WorkerReset::Plan(mine, decision)
}

/// The status record of [`WorkerReset::NothingHere`].
pub fn nothing_here_status(req: &ResetRequest, message: String, time: Time) -> AppliedReset {
    AppliedReset {
        id: req.id.clone(),
        time,
        outcome: ResetOutcome::Applied,
        message: Some(message),
        partitions: Vec::new(),
    }
}

/// Partition number of worker `index`'s marker record in the progress topic (empty topic
/// name). Its `reset_id` is the last reset id the worker handled, whatever the outcome; its
/// `next_offset` holds the worker count it ran with.
pub fn reset_marker_partition(worker_index: u32) -> i32 {
    -1 - i32::try_from(worker_index).unwrap_or(i32::MAX - 1)
}

/// The marker record of worker `index` of `count` after handling reset `id`.
pub fn reset_marker(index: u32, count: u32, id: &str) -> Progress {
    Progress {
        topic: String::new(),
        partition: reset_marker_partition(index),
        next_offset: i64::from(count),
        topic_id: String::new(),
        reset_id: id.to_string(),
    }
}

/// Reset ids worker `index` of `count` must treat as handled, from the progress read at
/// start, so a restart never applies a request again:
/// - the `reset_id` of every partition it owns now (also one a previous worker reset);
/// - its own marker;
/// - the marker of any worker that ran with a different worker count: that generation of
///   workers is gone (scaling stops every worker first), so whatever it handled is handled
///   for the flow. A worker newly added by scaling thus does not apply the current request
///   to partitions that fail after it starts.
///
/// A marker of another worker of the same generation is not ours: that worker handled the
/// request, this one may not have yet (e.g. it crashed first), so it still does.
pub fn handled_reset_ids<'a>(
    progress: impl IntoIterator<Item = &'a Progress>,
    index: u32,
    count: u32,
) -> BTreeSet<String> {
    let own_marker = reset_marker_partition(index);
    progress
        .into_iter()
        .filter(|p| {
            if p.topic.is_empty() {
                p.partition == own_marker || p.next_offset != i64::from(count)
            } else {
                is_owned(&p.topic, p.partition, index, count)
            }
        })
        .map(|p| p.reset_id.clone())
        .filter(|id| !id.is_empty())
        .collect()
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
    }
}

/// The failure kind of a validation failure type.
pub fn kind_of(t: FailureType) -> FailureKind {
    match t {
        FailureType::DataLoss => FailureKind::DataLoss,
        FailureType::TopicReset => FailureKind::TopicReset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResetStrategy;
    use crate::worker::replicate::assign::owner;
    use crate::worker::validation::classify::RecordsLost;
    use pretty_assertions::assert_eq;
    use FailureType::{DataLoss, TopicReset};

    fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
        TopicPartitionRef {
            topic: topic.into(),
            partition,
        }
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
            marks: marks.map_err(String::from),
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
            leader_epoch: None,
        };
        let obs = |id: &str, log_start: i64, high: i64| PartitionObservation {
            topic_id: Some(id.into()),
            log_start,
            high_watermark: high,
            leader_epoch: None,
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

    fn failure(topic: &str, partition: i32, t: FailureType) -> PartitionFailure {
        PartitionFailure {
            type_: t,
            topic: topic.into(),
            partition,
            requested_offset: 10,
            log_start_offset: Some(20),
            records_lost: Some(10),
            detected_at: Time(jiff::Timestamp::from_second(1_700_000_000).unwrap()),
            message: None,
        }
    }

    /// A partition of `topic` owned by worker `index` of `count`.
    fn owned_by(topic: &str, index: u32, count: u32) -> i32 {
        (0..64)
            .find(|p| owner(topic, *p, count) == index)
            .expect("some partition")
    }

    #[test]
    fn worker_reset_scope() {
        let req = |partitions: Vec<TopicPartitionRef>| ResetRequest {
            id: "r1".into(),
            strategy: ResetStrategy::ResumeFromLogStart,
            partitions,
        };
        let (mine, theirs) = (owned_by("orders", 0, 2), owned_by("orders", 1, 2));
        let failed_mine = vec![failure("orders", mine, DataLoss)];

        // Named: only other workers' partitions → nothing here.
        let got = plan_worker_reset(&req(vec![tp("orders", theirs)]), &failed_mine, 0, 2, "w-0");
        let WorkerReset::NothingHere(msg) = got else {
            panic!("{got:?}")
        };
        assert!(msg.contains("w-0 owns none of the 1 partition(s)"), "{msg}");

        // Named: mine (failed) and theirs (failed elsewhere) → applies mine, theirs not judged.
        let got = plan_worker_reset(
            &req(vec![tp("orders", mine), tp("orders", theirs)]),
            &failed_mine,
            0,
            2,
            "w-0",
        );
        let WorkerReset::Plan(scoped, ResetDecision::Apply(actions)) = got else {
            panic!("{got:?}")
        };
        assert_eq!(scoped.partitions, vec![tp("orders", mine)]);
        assert_eq!(actions.len(), 1);

        // Named: mine but healthy → refused, naming it (and only it).
        let got = plan_worker_reset(
            &req(vec![tp("orders", mine), tp("orders", theirs)]),
            &[],
            0,
            2,
            "w-0",
        );
        let WorkerReset::Plan(_, ResetDecision::Refused(msg)) = got else {
            panic!("{got:?}")
        };
        assert!(msg.contains(&format!("partition {mine}")), "{msg}");
        assert!(!msg.contains(&format!("partition {theirs}")), "{msg}");

        // Same with nothing failed here: refused, without claiming the whole flow is healthy.
        let got = plan_worker_reset(&req(vec![tp("orders", mine)]), &[], 0, 2, "w-0");
        let WorkerReset::Plan(_, ResetDecision::Refused(msg)) = got else {
            panic!("{got:?}")
        };
        assert!(
            msg.contains(&format!(
                "Not failed: topic \"orders\" partition {mine} (w-0 owns it"
            )),
            "{msg}"
        );
        assert!(!msg.contains("no partition is failed"), "{msg}");

        // All failed, none here, several workers → nothing here (not "nothing to reset").
        let got = plan_worker_reset(&req(vec![]), &[], 1, 2, "w-1");
        assert!(matches!(got, WorkerReset::NothingHere(_)), "{got:?}");
        // A single worker sees the whole flow: refused.
        let got = plan_worker_reset(&req(vec![]), &[], 0, 1, "w-0");
        let WorkerReset::Plan(_, ResetDecision::Refused(msg)) = got else {
            panic!("{got:?}")
        };
        assert!(msg.contains("nothing to reset"), "{msg}");
        // All failed, some here → applies them.
        let got = plan_worker_reset(&req(vec![]), &failed_mine, 0, 2, "w-0");
        assert!(
            matches!(got, WorkerReset::Plan(_, ResetDecision::Apply(ref a)) if a.len() == 1),
            "{got:?}"
        );

        let st = nothing_here_status(&req(vec![]), "m".into(), failed_mine[0].detected_at.clone());
        assert_eq!(st.outcome, ResetOutcome::Applied);
        assert!(st.partitions.is_empty());
    }

    fn progress(topic: &str, partition: i32, next: i64, reset: &str) -> Progress {
        Progress {
            topic: topic.into(),
            partition,
            next_offset: next,
            topic_id: String::new(),
            reset_id: reset.into(),
        }
    }

    #[test]
    fn handled_ids() {
        let (mine, theirs) = (owned_by("orders", 0, 2), owned_by("orders", 1, 2));
        let records = vec![
            progress("orders", mine, 5, "on-my-partition"),
            progress("orders", theirs, 5, "on-their-partition"),
            progress("orders", mine + 64, 5, ""),
            reset_marker(0, 2, "my-marker"),
            reset_marker(1, 2, "peer-marker"),
            reset_marker(4, 5, "previous-generation"),
            // Written before markers carried the count.
            Progress {
                next_offset: 0,
                ..reset_marker(1, 2, "old-layout")
            },
        ];
        let got = handled_reset_ids(&records, 0, 2);
        let want: BTreeSet<String> = [
            "on-my-partition",
            "my-marker",
            "previous-generation",
            "old-layout",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(got, want);
        // The peer itself sees its marker, not mine.
        let got = handled_reset_ids(&records, 1, 2);
        assert!(got.contains("peer-marker") && got.contains("on-their-partition"));
        assert!(!got.contains("my-marker") && !got.contains("on-my-partition"));
        assert_eq!(reset_marker_partition(0), -1);
        assert_eq!(reset_marker_partition(3), -4);
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
