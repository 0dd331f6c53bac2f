//! Resets in the engine: `spec.reset` scoped to this worker's partitions, the per-worker
//! marker that makes a reset id apply at most once, and the ids handled before a restart.
//! Reset planning itself lives in `worker::validation::reset`.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{info, warn};

use super::io;
use super::partitions::PartitionTable;
use super::syncs::fresh_epoch;
use super::validate::TopicIds;
use crate::api::{AppliedReset, PartitionFailure, ResetOutcome, ResetRequest, TopicPartitionRef};
use crate::kafka::config::ClientProperties;
use crate::kafka::topics::MetaClient;
use crate::kafka::wire::Progress;
use crate::kafka::Error as KafkaError;
use crate::worker::error::Error;
use crate::worker::replicate::assign::is_owned;
use crate::worker::validation::reset::{
    describe_tp, failed_status, plan_reset, record_seek, strategy_name, PartitionResetAction,
    ResetDecision, SeekError, SeekTarget,
};

/// What a reset needs from both clusters, and who this worker is.
pub struct ResetIo<'a> {
    pub meta: &'a MetaClient,
    /// The target's metadata client, properties and offset-syncs topic (ResumeFromTarget).
    pub target_meta: &'a MetaClient,
    pub target_props: &'a ClientProperties,
    pub syncs_topic: &'a str,
    pub ids: &'a TopicIds,
    pub timeout: Duration,
    /// `(index, count)`.
    pub worker: (u32, u32),
    /// `<flow>-worker-<index>`.
    pub worker_id: &'a str,
}

/// A worker's resets: the ids it handled (read back at start, and since) and the last
/// outcome (for its status entry).
#[derive(Debug, Default)]
pub struct Resets {
    pub handled: BTreeSet<String>,
    pub last_applied: Option<AppliedReset>,
}

impl Resets {
    /// Handles `req` at most once per id: scoped to this worker ([`plan_worker_reset`]), the
    /// failed partitions it names seek to the log start or the end, with the current log as
    /// their new baseline. The id is then pending as this worker's marker in `table`, so a
    /// restart never applies it again. `None`: nothing to do (already handled); else the
    /// partitions reset (possibly none: refused, failed, nothing here).
    pub async fn handle(
        &mut self,
        req: &ResetRequest,
        table: &mut PartitionTable,
        io: &ResetIo<'_>,
        paused: bool,
    ) -> Option<Vec<TopicPartitionRef>> {
        if self.handled.contains(&req.id) {
            return None;
        }
        let failed: Vec<PartitionFailure> = table
            .failed()
            .filter_map(|(_, f)| f.failure.clone())
            .collect();
        let now = || Time(jiff::Timestamp::now());
        let (index, count) = io.worker;
        let mut reset = Vec::new();
        match plan_worker_reset(req, &failed, index, count, io.worker_id) {
            WorkerReset::NothingHere(msg) => {
                info!(id = %req.id, "{msg}");
                self.last_applied = Some(nothing_here_status(req, msg, now()));
            }
            WorkerReset::Plan(_, ResetDecision::NoOp) => return None,
            WorkerReset::Plan(_, ResetDecision::Refused(why)) => {
                warn!(id = %req.id, "reset refused: {why}");
                self.last_applied = ResetDecision::Refused(why).status(req, now());
            }
            WorkerReset::Plan(
                _,
                decision @ (ResetDecision::Apply(_) | ResetDecision::ApplySome { .. }),
            ) => {
                let actions = decision.actions();
                match resolve(actions, table, io).await {
                    Err(e) => {
                        warn!(id = %req.id, "reset failed: {e}; trying again later");
                        self.last_applied =
                            Some(failed_status(req, actions, &e.to_string(), now()));
                        // Not handled: nothing moved, and the next attempt may succeed.
                        return Some(reset);
                    }
                    Ok((resolved, ids)) => {
                        for (tp, position, marks) in resolved {
                            let id = ids.get(&tp.topic).cloned();
                            if table.reset(&tp, position, &req.id, id, marks, fresh_epoch(), paused)
                            {
                                info!(topic = %tp.topic, partition = tp.partition, position, id = %req.id, "reset applied");
                                reset.push(tp);
                            }
                        }
                        self.last_applied = decision.status(req, now());
                    }
                }
            }
        }
        self.handled.insert(req.id.clone());
        table.set_pending_marker(&req.id);
        Some(reset)
    }
}

/// Where each reset action seeks to (the log start or the end, from fresh watermarks), with
/// those watermarks, and the current topic ids (the new baseline).
#[allow(clippy::type_complexity)]
async fn resolve(
    actions: &[PartitionResetAction],
    table: &PartitionTable,
    io: &ResetIo<'_>,
) -> Result<
    (
        Vec<(TopicPartitionRef, i64, (i64, i64))>,
        HashMap<String, String>,
    ),
    Error,
> {
    let tps: Vec<(String, i32)> = actions
        .iter()
        .map(|a| (a.tp.topic.clone(), a.tp.partition))
        .collect();
    let topics: BTreeSet<String> = actions.iter().map(|a| a.tp.topic.clone()).collect();
    let marks = io::watermarks(io.meta, tps, io.timeout).await;
    let ids = io.ids.lookup(topics).await;
    let marks = marks?;
    let after = after_target(actions, table, io).await?;
    let mut resolved = Vec::new();
    for a in actions {
        let (low, high) = match marks.get(&(a.tp.topic.clone(), a.tp.partition)) {
            Some(Ok(m)) => *m,
            Some(Err(e)) => return Err(e.clone().into()),
            None => {
                return Err(KafkaError::Protocol(format!(
                    "no watermarks for {}/{}",
                    a.tp.topic, a.tp.partition
                ))
                .into())
            }
        };
        let to = match a.target {
            SeekTarget::LogStart => low,
            SeekTarget::End => high,
            SeekTarget::AfterTarget => {
                let to = after.get(&a.tp).copied().unwrap_or(low);
                if to < low {
                    return Err(Error::Refused(format!(
                        "{}/{}: the records after the last offset sync (from offset {to}) were \
                         deleted on the source (log start {low}); choose RestartFromEarliest \
                         (from the log start) or SkipToLatest",
                        a.tp.topic, a.tp.partition
                    )));
                }
                to
            }
            // The records after it may since have been deleted on the source (position
            // below `low`): offset validation then reports that gap as DataLoss.
            SeekTarget::AfterRecord | SeekTarget::AtRecord => record_seek(
                a.target,
                a.previous_failure.requested_offset,
                table.get(&a.tp).and_then(|p| p.position),
            )
            .map_err(|e| {
                let e = match e {
                    SeekError::PositionMoved { .. } => Error::Refused(e.to_string()),
                    SeekError::NotARecordSeek(_) => Error::Internal(e.to_string()),
                };
                e.context(format!("{}/{}", a.tp.topic, a.tp.partition))
            })?,
        };
        resolved.push((a.tp.clone(), to, (low, high)));
    }
    Ok((resolved, ids))
}

/// For ResumeFromTarget actions: the source offset after the newest offset sync of each
/// partition, provided the target still holds the record that sync points at.
async fn after_target(
    actions: &[PartitionResetAction],
    table: &PartitionTable,
    io: &ResetIo<'_>,
) -> Result<HashMap<TopicPartitionRef, i64>, Error> {
    let wanted: Vec<&PartitionResetAction> = actions
        .iter()
        .filter(|a| a.target == SeekTarget::AfterTarget)
        .collect();
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    let tps: Vec<(String, i32)> = wanted
        .iter()
        .map(|a| (a.tp.topic.clone(), a.tp.partition))
        .collect();
    let syncs = io::newest_syncs(io.target_props, io.syncs_topic, tps, io.timeout).await?;
    let target_of = |tp: &TopicPartitionRef| table.get(tp).map(|p| p.target_topic.clone());
    let targets: Vec<(String, i32)> = wanted
        .iter()
        .filter_map(|a| target_of(&a.tp).map(|t| (t, a.tp.partition)))
        .collect();
    let ends = io::watermarks(io.target_meta, targets, io.timeout).await?;
    let mut out = HashMap::new();
    for a in wanted {
        let (topic, partition) = (&a.tp.topic, a.tp.partition);
        let Some((up, down)) = syncs.get(&(topic.clone(), partition)).copied() else {
            return Err(Error::Refused(format!(
                "{topic}/{partition}: no offset sync on the target tells which source records \
                 it holds (topic {}); choose RestartFromEarliest or SkipToLatest",
                io.syncs_topic
            )));
        };
        let target = target_of(&a.tp).unwrap_or_default();
        let end = match ends.get(&(target.clone(), partition)) {
            Some(Ok((_, high))) => *high,
            Some(Err(e)) => return Err(e.clone().into()),
            None => {
                return Err(KafkaError::Protocol(format!(
                    "no watermarks for target {target}/{partition}"
                ))
                .into())
            }
        };
        if down >= end {
            return Err(Error::Refused(format!(
                "{topic}/{partition}: the last offset sync points at target offset {down}, but \
                 {target}/{partition} ends at {end} (the target lost records); choose \
                 RestartFromEarliest or SkipToLatest"
            )));
        }
        out.insert(a.tp.clone(), up + 1);
    }
    Ok(out)
}

/// What one worker does with a reset request.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerReset {
    /// Plan against this worker's partitions (the request filtered to them).
    Plan(ResetRequest, ResetDecision),
    /// Nothing in the request concerns this worker: report it handled (outcome `NotOwned`,
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
        outcome: ResetOutcome::NotOwned,
        message: Some(message),
        partitions: Vec::new(),
        skipped_records: Vec::new(),
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
        failure: String::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FailureType, ResetStrategy};
    use crate::worker::replicate::assign::owner;
    use pretty_assertions::assert_eq;
    use FailureType::DataLoss;

    fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
        TopicPartitionRef::new(topic, partition)
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
            reason: None,
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
        assert_eq!(st.outcome, ResetOutcome::NotOwned);
        assert!(st.partitions.is_empty());
    }

    fn progress(topic: &str, partition: i32, next: i64, reset: &str) -> Progress {
        Progress {
            topic: topic.into(),
            partition,
            next_offset: next,
            topic_id: String::new(),
            reset_id: reset.into(),
            failure: String::new(),
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
}
