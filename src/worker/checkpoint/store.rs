//! In-memory view of the offset-syncs topic: one [`SyncHistory`] per source partition.
//! Pure: records go in as bytes, translations come out.
//!
//! Memory bound: `partitions × MAX_SYNCS_PER_PARTITION` (64) retained syncs, where
//! `partitions` is the number of source partitions that ever had a sync in the topic
//! (roughly 40 bytes per retained sync plus the topic name per partition).
//!
//! Contract: a partition whose newest sync carried the [`SYNC_SEQUENCE_HEADER`] is
//! translated under [`Contract::Mirrorflow`]; one whose newest sync came without it (MM2 or
//! an unknown writer) under [`Contract::Mm2`]. A malformed header counts as absent (the sync
//! itself is still a true `(upstream, downstream)` pair).

use crate::kafka::wire::{self, SyncSequence, WireError};

use super::translate::{
    translate, Contract, InsertOutcome, NoSyncReason, PartitionMap, PartitionRef, SyncHistory,
    SyncPoint, Translation, MAX_SYNCS_PER_PARTITION,
};

pub use crate::kafka::wire::SYNC_SEQUENCE_HEADER;

#[derive(Debug, Clone, Default)]
struct PartitionSyncs {
    history: SyncHistory,
    /// The newest inserted sync carried a valid sequence header.
    sequenced: bool,
}

/// What [`SyncStore::apply`] did with one record of the offset-syncs topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Inserted into the partition's history.
    Inserted(InsertOutcome),
    /// A record without key or value (e.g. a tombstone): nothing to learn.
    Skipped,
}

/// Offset syncs seen so far, per source `(topic, partition)`.
#[derive(Debug, Clone, Default)]
pub struct SyncStore {
    partitions: PartitionMap<PartitionSyncs>,
    bad_headers: u64,
}

impl SyncStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one record of the offset-syncs topic: `header` is the value of the
    /// [`SYNC_SEQUENCE_HEADER`] header, if present. Records that do not decode are errors
    /// (the caller logs and skips them).
    pub fn apply(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        header: Option<&[u8]>,
    ) -> Result<Applied, WireError> {
        let (Some(key), Some(value)) = (key, value) else {
            return Ok(Applied::Skipped);
        };
        let sync = wire::OffsetSync::decode(key, value)?;
        let sequence = match header.map(SyncSequence::decode) {
            Some(Ok(s)) => Some(s),
            Some(Err(_)) => {
                self.bad_headers += 1;
                None
            }
            None => None,
        };
        Ok(Applied::Inserted(self.insert(&sync, sequence)))
    }

    /// Inserts a decoded sync.
    pub fn insert(
        &mut self,
        sync: &wire::OffsetSync,
        sequence: Option<SyncSequence>,
    ) -> InsertOutcome {
        let entry = self
            .partitions
            .entry((sync.topic.clone(), sync.partition))
            .or_default();
        let outcome = entry
            .history
            .insert_sequenced(SyncPoint::from(sync), sequence);
        if outcome != InsertOutcome::Rejected {
            entry.sequenced = sequence.is_some();
        }
        outcome
    }

    /// The contract the partition's syncs come with (see module docs); `Mm2` if unknown.
    pub fn contract(&self, topic: &str, partition: i32) -> Contract {
        match self.partitions.get(&PartitionRef(topic, partition)) {
            Some(p) if p.sequenced => Contract::Mirrorflow,
            _ => Contract::Mm2,
        }
    }

    /// Translates a group's committed source offset for `topic`/`partition`.
    pub fn translate(&self, topic: &str, partition: i32, group_offset: i64) -> Translation {
        match self.partitions.get(&PartitionRef(topic, partition)) {
            Some(p) => translate(
                &p.history,
                group_offset,
                if p.sequenced {
                    Contract::Mirrorflow
                } else {
                    Contract::Mm2
                },
            ),
            None => Translation::NoSync {
                reason: NoSyncReason::Empty,
            },
        }
    }

    /// Newest sync of a partition, if any.
    pub fn newest(&self, topic: &str, partition: i32) -> Option<SyncPoint> {
        self.partitions
            .get(&PartitionRef(topic, partition))
            .and_then(|p| p.history.newest())
    }

    /// Source partitions with a history.
    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Syncs retained over all partitions (≤ `partitions() × 64`).
    pub fn retained(&self) -> usize {
        self.partitions.values().map(|p| p.history.len()).sum()
    }

    /// The memory bound: retained syncs never exceed this.
    pub fn bound(&self) -> usize {
        self.partitions.len() * MAX_SYNCS_PER_PARTITION
    }

    /// Sequence headers that did not decode (their syncs were used without a sequence).
    pub fn bad_headers(&self) -> u64 {
        self.bad_headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn record(topic: &str, partition: i32, u: i64, d: i64) -> (Vec<u8>, Vec<u8>) {
        let s = wire::OffsetSync {
            topic: topic.into(),
            partition,
            upstream_offset: u,
            downstream_offset: d,
        };
        (s.encode_key().unwrap(), s.encode_value().unwrap())
    }

    fn seq(epoch: i64, seq: i64) -> Vec<u8> {
        SyncSequence {
            writer_epoch: epoch,
            seq,
        }
        .encode()
    }

    /// `(u, d, header)` syncs of partition t/0, then `(offset, expected translation kind,
    /// expected downstream)`.
    type Case = (
        &'static str,
        Vec<(i64, i64, Option<Vec<u8>>)>,
        Contract,
        Vec<(i64, &'static str, Option<i64>)>,
    );

    #[test]
    fn translation_by_contract_table() {
        let cases: Vec<Case> = vec![
            (
                "sequenced consecutive syncs interpolate",
                vec![(0, 0, Some(seq(1, 0))), (100, 100, Some(seq(1, 1)))],
                Contract::Mirrorflow,
                vec![
                    (0, "exact", Some(0)),
                    (37, "exact", Some(37)),
                    (100, "exact", Some(100)),
                    (101, "exact", Some(101)),
                    (150, "safe", Some(101)),
                ],
            ),
            (
                "without headers: MM2 rule d + 1",
                vec![(0, 0, None), (100, 100, None)],
                Contract::Mm2,
                vec![
                    (0, "exact", Some(0)),
                    (37, "safe", Some(1)),
                    (100, "exact", Some(100)),
                    (101, "safe", Some(101)),
                ],
            ),
            (
                "a hole in the sequence: no interpolation",
                vec![(0, 0, Some(seq(1, 0))), (100, 100, Some(seq(1, 2)))],
                Contract::Mirrorflow,
                vec![(37, "safe", Some(1)), (1, "exact", Some(1))],
            ),
            (
                "malformed header counts as absent",
                vec![(0, 0, Some(seq(1, 0))), (100, 100, Some(vec![1, 2, 3]))],
                Contract::Mm2,
                vec![(37, "safe", Some(1))],
            ),
            (
                "below the oldest sync: no translation",
                vec![(50, 10, Some(seq(1, 0)))],
                Contract::Mirrorflow,
                vec![(49, "no_sync", None), (50, "exact", Some(10))],
            ),
            (
                "no syncs",
                vec![],
                Contract::Mm2,
                vec![(0, "no_sync", None)],
            ),
        ];
        for (name, syncs, contract, probes) in cases {
            let mut store = SyncStore::new();
            for (u, d, header) in &syncs {
                let (k, v) = record("t", 0, *u, *d);
                store.apply(Some(&k), Some(&v), header.as_deref()).unwrap();
            }
            assert_eq!(store.contract("t", 0), contract, "{name}");
            for (offset, kind, downstream) in probes {
                let t = store.translate("t", 0, offset);
                assert_eq!(
                    (t.kind(), t.downstream()),
                    (kind, downstream),
                    "{name}: offset {offset}"
                );
            }
        }
    }

    #[test]
    fn partitions_are_independent_and_bounded() {
        let mut store = SyncStore::new();
        for p in 0..3 {
            for i in 0..200 {
                let (k, v) = record("t", p, i * 10, i * 10 + i64::from(p));
                store.apply(Some(&k), Some(&v), None).unwrap();
            }
        }
        assert_eq!(store.partitions(), 3);
        assert!(
            store.retained() <= store.bound(),
            "{} > {}",
            store.retained(),
            store.bound()
        );
        assert_eq!(store.bound(), 3 * MAX_SYNCS_PER_PARTITION);
        assert_eq!(store.translate("t", 2, 1990).downstream(), Some(1992));
        assert_eq!(store.newest("t", 1), Some(SyncPoint::new(1990, 1991)));
        assert_eq!(store.translate("u", 0, 5).kind(), "no_sync");
    }

    #[test]
    fn tombstones_skip_and_garbage_errors() {
        let mut store = SyncStore::new();
        assert_eq!(
            store.apply(Some(b"k"), None, None).unwrap(),
            Applied::Skipped
        );
        assert!(store.apply(Some(&[0, 9]), Some(&[0; 16]), None).is_err());
        assert_eq!(store.partitions(), 0);
        let (k, v) = record("t", 0, 1, 1);
        store.apply(Some(&k), Some(&v), Some(&[0])).unwrap();
        assert_eq!(store.bad_headers(), 1);
    }
}
