//! Consumer groups failing back: a flow started by `spec.source.startFrom.afterFailover`
//! translates the groups of its source (the new primary) back to its target (the old
//! primary). Where the flow started a partition (`startAt`, the new primary's end when the
//! failover was done) and above, its own offset syncs translate; before its first one, the
//! seed `startAt` ↔ the old primary's end when the flow started the partition. Below
//! `startAt`, the failed-over flow's offset syncs, turned around. Pure but for
//! [`FailingBack`], which asks a [`LoadBack`] (`worker::failover::groups_back` reads the
//! failover's and the failback's stores) until it knows.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rdkafka::ClientConfig;

use crate::api::{FailbackPartition, FailbackReport};
use crate::kafka::wire::{self, SyncSequence, WireError};

use super::store::SyncStore;
use super::translate::{PartitionMap, PartitionRef, SyncPoint, Translation};

/// Translates a group's committed source offset of one partition.
pub trait Translate {
    /// The target offset for `offset` of source `topic`/`partition` (not yet clamped).
    fn translate(&self, topic: &str, partition: i32, offset: i64) -> Translation;
}

impl Translate for SyncStore {
    fn translate(&self, topic: &str, partition: i32, offset: i64) -> Translation {
        SyncStore::translate(self, topic, partition, offset)
    }
}

/// Where a partition of the new primary meets the old primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed {
    /// The new primary's offset the flow started at (the failover's `targetEnd`).
    pub start_at: i64,
    /// The old primary's offset the flow's first record of the partition lands at, or below
    /// it: its end when the flow started, past the diverged records (which never reached the
    /// new primary, so no consumer there read them).
    pub resume_at: i64,
}

/// One partition's decision. `offset` ≥ `start_at`: the flow's own translation (`own`), else
/// the seed: every record the flow copies lands at or past `resume_at`, and a group exactly
/// at `start_at` read everything the new primary held before the flow started. Below
/// `start_at` the flow copied nothing: the failed-over flow's syncs read backwards
/// (`before`) decide. Without a seed (not a partition the failover reported) `own` stands.
pub fn translate_back(
    offset: i64,
    seed: Option<Seed>,
    own: impl FnOnce() -> Translation,
    before: impl FnOnce() -> Translation,
) -> Translation {
    let Some(seed) = seed else {
        return own();
    };
    if offset < seed.start_at {
        return before();
    }
    match own() {
        Translation::NoSync { .. } => {
            let sync = SyncPoint::new(seed.start_at, seed.resume_at);
            if offset == seed.start_at {
                Translation::Exact {
                    downstream: seed.resume_at,
                    sync,
                }
            } else {
                Translation::Safe {
                    downstream: seed.resume_at,
                    sync,
                }
            }
        }
        t => t,
    }
}

/// One partition the failover reported, as failing back sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The partition on the new primary (this flow's source).
    pub source: (String, i32),
    /// The partition on the old primary the failover copied from.
    pub old: (String, i32),
    /// The old primary's offset below which the new primary holds every record.
    pub holds: i64,
}

/// What failing back knows: the seeds and the failed-over flow's syncs, turned around
/// (upstream on the new primary, downstream on the old), by new-primary partition.
///
/// Turning a sync around keeps what it proves: `(u, d)` says record `u` of the old primary
/// was copied to `d`; a group of the new primary past `d` read that copy, so `u + 1` skips
/// nothing it had not read, and the failed-over flow's writer contract (a linear span is a
/// record at every offset on both sides; a gap has one discontinuity between two consecutive
/// records) holds the same read from either side.
#[derive(Debug, Clone, Default)]
pub struct Back {
    seeds: PartitionMap<Seed>,
    /// Old primary topic → new primary topic, for the partitions that have a seed.
    topics: HashMap<String, String>,
    turned: SyncStore,
}

impl Back {
    /// The seeds of the failover's `points` this flow fails back. `report`: the flow's
    /// stored failback outcome (the diverged records it measured); `target_topic`: where
    /// this flow writes a source topic. A partition written to another topic than the one
    /// the failover copied from gets no seed: the old offsets say nothing about it.
    pub fn new(
        points: &[Point],
        report: &FailbackReport,
        target_topic: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut back = Self::default();
        let reported: PartitionMap<&FailbackPartition> = report
            .partitions
            .iter()
            .map(|r| ((r.topic.clone(), r.partition), r))
            .collect();
        for p in points {
            if target_topic(&p.source.0).as_deref() != Some(p.old.0.as_str()) {
                continue;
            }
            let Some(reported) = reported.get(&p.source) else {
                continue;
            };
            // The end the failback measured to is past the last diverged record (a range
            // with only markers holds no record); without any, the old primary held
            // nothing the new one lacked past `holds`.
            let resume_at = reported
                .diverged
                .as_ref()
                .map_or(p.holds, |d| d.last_offset + 1)
                .max(p.holds);
            back.seeds.insert(
                p.source.clone(),
                Seed {
                    start_at: reported.start_at,
                    resume_at,
                },
            );
            back.topics.insert(p.old.0.clone(), p.source.0.clone());
        }
        back
    }

    /// Takes one record of the failed-over flow's offset-syncs topic (keyed by the old
    /// primary's topic), turned around; syncs of partitions without a seed are ignored.
    pub fn apply_forward(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        header: Option<&[u8]>,
    ) -> Result<(), WireError> {
        let (Some(key), Some(value)) = (key, value) else {
            return Ok(());
        };
        let sync = wire::OffsetSync::decode(key, value)?;
        let Some(topic) = self.topics.get(&sync.topic) else {
            return Ok(());
        };
        if !self
            .seeds
            .contains_key(&PartitionRef(topic, sync.partition))
        {
            return Ok(());
        }
        let turned = wire::OffsetSync {
            topic: topic.clone(),
            partition: sync.partition,
            upstream_offset: sync.downstream_offset,
            downstream_offset: sync.upstream_offset,
        };
        // A sequence that does not decode only costs precision (the link is unknown).
        let sequence = header.and_then(|h| SyncSequence::decode(h).ok());
        self.turned.insert(&turned, sequence);
        Ok(())
    }

    /// Partitions with a seed.
    pub fn partitions(&self) -> usize {
        self.seeds.len()
    }

    /// Turned-around syncs retained.
    pub fn retained(&self) -> usize {
        self.turned.retained()
    }
}

/// The flow's own syncs, with failing back's seeds and turned syncs where it has them.
pub struct WithFailback<'a> {
    pub own: &'a SyncStore,
    pub back: Option<&'a Back>,
}

impl Translate for WithFailback<'_> {
    fn translate(&self, topic: &str, partition: i32, offset: i64) -> Translation {
        let seed = self
            .back
            .and_then(|b| b.seeds.get(&PartitionRef(topic, partition)).copied());
        translate_back(
            offset,
            seed,
            || self.own.translate(topic, partition, offset),
            || match self.back {
                Some(b) => b.turned.translate(topic, partition, offset),
                None => self.own.translate(topic, partition, offset),
            },
        )
    }
}

/// Reads what failing back knows, with the flow's current client configs (source, target):
/// `None` until the flow's failback outcome is stored (or when a read failed, logged).
pub trait LoadBack: Send + Sync {
    fn load(
        &self,
        source: &ClientConfig,
        target: &ClientConfig,
    ) -> Pin<Box<dyn Future<Output = Option<Back>> + Send>>;
}

/// A flow failing back, as its checkpoints see it: loaded once, asked again each cycle until
/// then (groups translate with the flow's own syncs only, and it has none before the
/// outcome is stored).
pub struct FailingBack {
    loader: Arc<dyn LoadBack>,
    back: Option<Back>,
}

impl FailingBack {
    pub fn new(loader: Arc<dyn LoadBack>) -> Self {
        Self { loader, back: None }
    }

    /// What is known, once read.
    pub fn back(&self) -> Option<&Back> {
        self.back.as_ref()
    }

    pub async fn refresh(&mut self, source: &ClientConfig, target: &ClientConfig) {
        if self.back.is_none() {
            self.back = self.loader.load(source, target).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Diverged;
    use crate::worker::checkpoint::translate::NoSyncReason;
    use pretty_assertions::assert_eq;

    const NONE: Translation = Translation::NoSync {
        reason: NoSyncReason::BeforeOldest,
    };

    fn exact(d: i64, u: i64, dd: i64) -> Translation {
        Translation::Exact {
            downstream: d,
            sync: SyncPoint::new(u, dd),
        }
    }

    fn safe(d: i64, u: i64, dd: i64) -> Translation {
        Translation::Safe {
            downstream: d,
            sync: SyncPoint::new(u, dd),
        }
    }

    #[test]
    fn translate_back_table() {
        let seed = Some(Seed {
            start_at: 100,
            resume_at: 67,
        });
        let own = exact(80, 120, 80);
        let turned = exact(40, 50, 40);
        // (case, offset, seed, own, turned, expected)
        let cases = [
            (
                "below startAt: the turned syncs",
                50,
                seed,
                own,
                turned,
                turned,
            ),
            ("below startAt, none turned", 50, seed, own, NONE, NONE),
            (
                "at startAt, nothing copied yet: the seed, exact",
                100,
                seed,
                NONE,
                turned,
                exact(67, 100, 67),
            ),
            (
                "past startAt, before the first own sync: the seed, safe",
                110,
                seed,
                NONE,
                turned,
                safe(67, 100, 67),
            ),
            (
                "past startAt with an own sync: its translation",
                120,
                seed,
                own,
                turned,
                own,
            ),
            ("no seed: the own syncs only", 50, None, own, turned, own),
            ("no seed, no own sync", 50, None, NONE, turned, NONE),
        ];
        for (name, offset, seed, own, turned, want) in cases {
            assert_eq!(
                translate_back(offset, seed, || own, || turned),
                want,
                "{name}"
            );
        }
    }

    fn sync_record(topic: &str, u: i64, d: i64) -> (Vec<u8>, Vec<u8>) {
        let s = wire::OffsetSync {
            topic: topic.into(),
            partition: 0,
            upstream_offset: u,
            downstream_offset: d,
        };
        (s.encode_key().unwrap(), s.encode_value().unwrap())
    }

    fn seq(n: i64) -> Vec<u8> {
        SyncSequence {
            writer_epoch: 1,
            seq: n,
        }
        .encode()
    }

    fn point(source: &str, old: &str, holds: i64) -> Point {
        Point {
            source: (source.into(), 0),
            old: (old.into(), 0),
            holds,
        }
    }

    fn reported(topic: &str, start_at: i64, diverged: Option<(i64, i64)>) -> FailbackPartition {
        FailbackPartition {
            topic: topic.into(),
            partition: 0,
            start_at,
            diverged: diverged.map(|(first, last)| Diverged {
                topic: "old".into(),
                first_offset: first,
                last_offset: last,
                records: last - first + 1,
            }),
        }
    }

    fn report(partitions: Vec<FailbackPartition>) -> FailbackReport {
        FailbackReport {
            flow: "ns/dr".into(),
            id: "x".into(),
            partitions_started: 1,
            diverged_records: 0,
            diverged_copied: None,
            partitions,
            partitions_not_shown: None,
        }
    }

    /// The old primary's `orders` was copied to the new primary's `orders` with a gap: A
    /// 0..=59 at B 0..=59, A 61..=69 (60 a marker) at B 60..=68, then B 69 a marker of the
    /// copy: B ends at 70, A held 70 (holds), then took 5 diverged records 70..=74.
    fn back(seq_headers: bool, diverged: Option<(i64, i64)>) -> Back {
        let mut b = Back::new(
            &[point("orders", "orders", 70)],
            &report(vec![reported("orders", 70, diverged)]),
            |t| Some(t.to_owned()),
        );
        let syncs = [(0, 0), (59, 59), (61, 60), (69, 68)];
        for (i, (u, d)) in syncs.into_iter().enumerate() {
            let (k, v) = sync_record("orders", u, d);
            let h = seq_headers.then(|| seq(i as i64));
            b.apply_forward(Some(&k), Some(&v), h.as_deref()).unwrap();
        }
        // Another topic's syncs and a tombstone are not this failback's.
        let (k, v) = sync_record("payments", 5, 5);
        b.apply_forward(Some(&k), Some(&v), None).unwrap();
        b.apply_forward(Some(&k), None, None).unwrap();
        b
    }

    #[test]
    fn turned_syncs_and_seed_table() {
        let own = SyncStore::new();
        let with = |b: &Back, o: i64| {
            WithFailback {
                own: &own,
                back: Some(b),
            }
            .translate("orders", 0, o)
            .downstream()
        };
        let sequenced = back(true, Some((70, 74)));
        assert_eq!((sequenced.partitions(), sequenced.retained()), (1, 4));
        // (offset on B, A offset with the sequenced syncs, A offset with MM2-style syncs)
        let cases = [
            (0, Some(0), Some(0)),
            (30, Some(30), Some(1)), // linear span: exact; MM2's rule: d + 1
            (59, Some(59), Some(59)),
            (60, Some(61), Some(61)), // the first record after A's marker
            (65, Some(66), Some(62)),
            (68, Some(69), Some(69)),
            (69, Some(70), Some(70)), // past the last copied record
            (70, Some(75), Some(75)), // startAt: past the diverged records
            (90, Some(75), Some(75)), // nothing of the flow's own yet: the seed
        ];
        let plain = back(false, Some((70, 74)));
        for (o, want, want_plain) in cases {
            assert_eq!(with(&sequenced, o), want, "sequenced, B offset {o}");
            assert_eq!(
                with(&plain, o),
                want_plain,
                "without sequences, B offset {o}"
            );
        }
        // Nothing diverged: the seed is what the new primary holds.
        assert_eq!(with(&back(true, None), 70), Some(70));
        // Another topic than the old one: no failback translation.
        let elsewhere = Back::new(
            &[point("orders", "orders", 70)],
            &report(vec![reported("orders", 70, None)]),
            |t| Some(format!("dc2.{t}")),
        );
        assert_eq!(elsewhere.partitions(), 0);
        assert_eq!(with(&elsewhere, 70), None);
    }

    #[test]
    fn own_syncs_take_over_from_the_seed() {
        let b = back(true, Some((70, 74)));
        let mut own = SyncStore::new();
        // The flow's first record: B 70 copied to A 75, then linear to B 79 → A 84.
        for (i, (u, d)) in [(70, 75), (79, 84)].into_iter().enumerate() {
            let s = wire::OffsetSync {
                topic: "orders".into(),
                partition: 0,
                upstream_offset: u,
                downstream_offset: d,
            };
            own.insert(
                &s,
                Some(SyncSequence {
                    writer_epoch: 9,
                    seq: i as i64,
                }),
            );
        }
        let w = WithFailback {
            own: &own,
            back: Some(&b),
        };
        let got: Vec<_> = [69, 70, 75, 79, 80]
            .map(|o| w.translate("orders", 0, o).downstream())
            .to_vec();
        assert_eq!(got, vec![Some(70), Some(75), Some(80), Some(84), Some(85)]);
    }
}
