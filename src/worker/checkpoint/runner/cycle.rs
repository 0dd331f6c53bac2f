//! One cycle of one OffsetCheckpoint: the groups' committed offsets on the source, the
//! offset syncs and the target's end offsets, a plan per group, the checkpoint records
//! written (only acknowledged ones come in force).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use jiff::Timestamp;

use crate::api::OffsetCheckpoint;
use crate::kafka::admin::GroupOffset;
use crate::kafka::run_blocking as blocking;
use crate::kafka::wire;
use crate::kafka::Error as KafkaError;
use crate::worker::error::Error;
use crate::worker::topic_filter::TopicDecision;

use super::super::failback::{FailingBack, WithFailback};
use super::super::group_sync::SyncOffer;
use super::super::io;
use super::super::plan::{plan_group, GroupPlan};
use super::super::translate::{CheckpointKey, CheckpointState, InForce, PartitionMap};
use super::record::{record_plans, select_groups};
use super::startup::{apply_sync, Worker};
use super::{CheckpointRunner, REQUEST_TIMEOUT};

impl Worker {
    pub(super) async fn list_source_groups(&self) -> Result<Vec<String>, KafkaError> {
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
    pub(super) async fn cycle(
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

#[cfg(test)]
mod tests {
    use super::super::tests::names;
    use super::*;

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
}
