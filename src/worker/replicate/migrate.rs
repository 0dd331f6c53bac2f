//! Taking over from MirrorMaker 2 (`spec.source.startFrom.mirrorMaker2`): MM2's source
//! positions, read from its Connect offsets topic, and which partitions start from them.
//!
//! Connect's `JsonConverter` (schemas off) writes a source task's position as key
//! `["<connector>",{"cluster":..,"partition":..,"topic":..}]`, value `{"offset":N}`, N the
//! last source offset the task copied (MirrorSourceTask resumes at N + 1); the last record per
//! key wins and a null value forgets the key. Only `MirrorSourceConnector` keys count (the
//! topic also holds the heartbeat connector's), whatever prefix the connector's name has
//! (Strimzi names it `<source>-><target>.MirrorSourceConnector`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::partitions::Start;
use crate::api::MirrorMaker2Takeover;

/// The connector whose positions count (the end of its name).
pub const SOURCE_CONNECTOR: &str = "MirrorSourceConnector";

/// Why a record of MM2's source connector cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mm2EntryError {
    #[error("the key's source partition needs a string cluster and topic and an int32 partition")]
    Key,
    #[error("the value has no non-negative integer \"offset\"")]
    Offset,
    #[error("the value is not JSON: {0}")]
    NotJson(String),
}

/// A record of the offsets topic that names MM2's source connector but cannot be read: the
/// position it holds is unknown, and guessing could copy again or skip.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MirrorMaker 2 offsets topic {topic}, partition {partition} offset {offset}: {what} (key {key}, value {value})")]
pub struct Mm2RecordError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub what: Mm2EntryError,
    pub key: String,
    pub value: String,
}

/// MM2's source positions for one source cluster alias.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mm2Positions {
    cluster: String,
    /// `(topic, partition)` → the last source offset MM2 copied.
    last: BTreeMap<(String, i32), i64>,
    /// Other source clusters seen (named when none is ours).
    others: BTreeSet<String>,
}

/// What one record was.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Not a position of MM2's source connector.
    Other,
    /// A position (`None`: a tombstone) of `cluster`'s `(topic, partition)`.
    Position {
        cluster: String,
        topic: String,
        partition: i32,
        offset: Option<i64>,
    },
}

impl Mm2Positions {
    /// Positions of source cluster `cluster` (MM2's alias for it).
    pub fn new(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            ..Self::default()
        }
    }

    /// Applies one record of the offsets topic (read in order per partition).
    pub fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), Mm2EntryError> {
        match parse(key, value)? {
            Entry::Other => {}
            Entry::Position { cluster, .. } if cluster != self.cluster => {
                self.others.insert(cluster);
            }
            Entry::Position {
                topic,
                partition,
                offset: Some(o),
                ..
            } => {
                self.last.insert((topic, partition), o);
            }
            Entry::Position {
                topic,
                partition,
                offset: None,
                ..
            } => {
                self.last.remove(&(topic, partition));
            }
        }
        Ok(())
    }

    /// Where MM2 would resume `topic`/`partition`: after the last offset it copied.
    pub fn next_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        // BTreeMap<(String, i32)> cannot be asked with a borrowed tuple; a range can.
        self.last
            .range((topic.to_owned(), partition)..=(topic.to_owned(), partition))
            .next()
            .map(|(_, o)| o + 1)
    }

    /// Every position: `(topic, partition)` → next offset.
    pub fn next_offsets(&self) -> BTreeMap<(String, i32), i64> {
        self.last.iter().map(|(k, o)| (k.clone(), o + 1)).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// Source cluster aliases other than ours that MM2 holds positions for.
    pub fn other_clusters(&self) -> &BTreeSet<String> {
        &self.others
    }
}

fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Entry, Mm2EntryError> {
    let Some(key) = key else {
        return Ok(Entry::Other);
    };
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(key) else {
        return Ok(Entry::Other);
    };
    let [Value::String(connector), partition] = parts.as_slice() else {
        return Ok(Entry::Other);
    };
    if !connector.ends_with(SOURCE_CONNECTOR) {
        return Ok(Entry::Other);
    }
    let field = |name: &str| partition.get(name).cloned().unwrap_or(Value::Null);
    let (Value::String(cluster), Value::String(topic), Some(p)) = (
        field("cluster"),
        field("topic"),
        field("partition")
            .as_i64()
            .and_then(|p| i32::try_from(p).ok()),
    ) else {
        return Err(Mm2EntryError::Key);
    };
    let offset = match value {
        None => None,
        Some(v) => match serde_json::from_slice::<Value>(v) {
            Ok(Value::Null) => None,
            Ok(v) => match v.get("offset").and_then(Value::as_i64) {
                Some(o) if o >= 0 => Some(o),
                _ => return Err(Mm2EntryError::Offset),
            },
            Err(e) => return Err(Mm2EntryError::NotJson(e.to_string())),
        },
    };
    Ok(Entry::Position {
        cluster,
        topic,
        partition: p,
        offset,
    })
}

/// The partitions started from MM2's positions and those it had none for (per `startFrom`),
/// as reported in status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Takeover {
    pub offsets_topic: String,
    pub from_mm2: BTreeSet<(String, i32)>,
    pub fell_back: BTreeSet<(String, i32)>,
}

impl Takeover {
    /// Notes where a partition started.
    pub fn started(&mut self, topic: &str, partition: i32, start: &Start) {
        let key = (topic.to_owned(), partition);
        match start {
            Start::MirrorMaker2(_) => {
                self.from_mm2.insert(key);
            }
            Start::Fresh(_) => {
                self.fell_back.insert(key);
            }
            Start::Resume(_) | Start::AfterFailover(_) => {}
        }
    }

    /// The status entry (lists bounded to 20 topics); none while every partition resumed
    /// from its own progress (a restart after the takeover).
    pub fn report(&self) -> Option<MirrorMaker2Takeover> {
        if self.from_mm2.is_empty() && self.fell_back.is_empty() {
            return None;
        }
        let count = |s: &BTreeSet<_>| i32::try_from(s.len()).unwrap_or(i32::MAX);
        let list = |s| summarize(s).into_iter().take(20).collect();
        Some(MirrorMaker2Takeover {
            offsets_topic: self.offsets_topic.clone(),
            partitions: count(&self.from_mm2),
            topics: list(&self.from_mm2),
            fell_back: count(&self.fell_back),
            fell_back_topics: list(&self.fell_back),
        })
    }
}

/// Which partitions started from MM2's positions, compactly: `topic: 0-2,5` per topic.
pub fn summarize(partitions: &BTreeSet<(String, i32)>) -> Vec<String> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(t, ps)| format!("{t}: {}", ranges(&ps)))
        .collect()
}

/// `0,1,2,5` → `0-2,5` (sorted input).
fn ranges(ps: &[i32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ps.len() {
        let mut j = i;
        while j + 1 < ps.len() && ps[j + 1] == ps[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ps[i].to_string()
        } else {
            format!("{}-{}", ps[i], ps[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(connector: &str, cluster: &str, topic: &str, p: i32) -> Vec<u8> {
        format!(
            "[\"{connector}\",{{\"cluster\":\"{cluster}\",\"partition\":{p},\"topic\":\"{topic}\"}}]"
        )
        .into_bytes()
    }

    fn val(o: i64) -> Vec<u8> {
        format!("{{\"offset\":{o}}}").into_bytes()
    }

    /// A record: key, value.
    type Rec = (Option<Vec<u8>>, Option<Vec<u8>>);
    /// `(topic, partition)` → next offset.
    type Want<'a> = Vec<((&'a str, i32), i64)>;
    /// What, key, value, what the error says.
    type Bad<'a> = (&'a str, Vec<u8>, Option<Vec<u8>>, &'a str);

    #[test]
    fn positions_table() {
        let k = |t: &str, p| Some(key("MirrorSourceConnector", "dc1", t, p));
        let rows: Vec<(&str, Vec<Rec>, Want)> = vec![
            ("empty topic", vec![], vec![]),
            (
                "next offset is the last copied + 1",
                vec![(k("orders", 0), Some(val(249)))],
                vec![(("orders", 0), 250)],
            ),
            (
                "the last record per key wins",
                vec![
                    (k("orders", 0), Some(val(10))),
                    (k("orders", 1), Some(val(7))),
                    (k("orders", 0), Some(val(99))),
                ],
                vec![(("orders", 0), 100), (("orders", 1), 8)],
            ),
            (
                "a tombstone forgets the partition",
                vec![
                    (k("orders", 0), Some(val(10))),
                    (k("orders", 0), None),
                    (k("orders", 1), Some(val(3))),
                    (k("orders", 1), Some(b"null".to_vec())),
                ],
                vec![],
            ),
            (
                "a position after a tombstone counts again",
                vec![
                    (k("orders", 0), Some(val(10))),
                    (k("orders", 0), None),
                    (k("orders", 0), Some(val(0))),
                ],
                vec![(("orders", 0), 1)],
            ),
            (
                "another source cluster, the heartbeat connector and foreign keys are ignored",
                vec![
                    (
                        Some(key("MirrorSourceConnector", "dc3", "orders", 0)),
                        Some(val(5)),
                    ),
                    (
                        Some(b"[\"MirrorHeartbeatConnector\",{\"sourceClusterAlias\":\"dc1\",\"targetClusterAlias\":\"dc2\"}]".to_vec()),
                        Some(b"{\"offset\":0}".to_vec()),
                    ),
                    (Some(b"not json".to_vec()), Some(val(1))),
                    (None, Some(val(1))),
                    (Some(b"{\"a\":1}".to_vec()), Some(val(1))),
                ],
                vec![],
            ),
            (
                "a prefixed connector name (Strimzi) counts",
                vec![(
                    Some(key("dc1->dc2.MirrorSourceConnector", "dc1", "orders", 2)),
                    Some(val(41)),
                )],
                vec![(("orders", 2), 42)],
            ),
        ];
        for (what, records, want) in rows {
            let mut m = Mm2Positions::new("dc1");
            for (k, v) in &records {
                m.apply(k.as_deref(), v.as_deref()).unwrap();
            }
            let want: BTreeMap<(String, i32), i64> = want
                .into_iter()
                .map(|((t, p), o)| ((t.to_owned(), p), o))
                .collect();
            assert_eq!(m.next_offsets(), want, "{what}");
            for ((t, p), o) in &want {
                assert_eq!(m.next_offset(t, *p), Some(*o), "{what}");
            }
            assert_eq!(m.next_offset("orders", 9), None, "{what}");
        }
    }

    #[test]
    fn other_clusters_are_named() {
        let mut m = Mm2Positions::new("dc1");
        m.apply(
            Some(&key("MirrorSourceConnector", "primary", "orders", 0)),
            Some(&val(1)),
        )
        .unwrap();
        assert!(m.is_empty());
        assert_eq!(
            m.other_clusters().iter().collect::<Vec<_>>(),
            vec!["primary"]
        );
    }

    #[test]
    fn unreadable_source_connector_records_are_errors() {
        let k = key("MirrorSourceConnector", "dc1", "orders", 0);
        let rows: Vec<Bad> = vec![
            (
                "value not JSON",
                k.clone(),
                Some(b"{offset".to_vec()),
                "not JSON",
            ),
            (
                "value without offset",
                k.clone(),
                Some(b"{\"position\":3}".to_vec()),
                "\"offset\"",
            ),
            (
                "negative offset",
                k.clone(),
                Some(val(-1)),
                "non-negative",
            ),
            (
                "offset not an integer",
                k.clone(),
                Some(b"{\"offset\":\"3\"}".to_vec()),
                "\"offset\"",
            ),
            (
                "partition missing",
                b"[\"MirrorSourceConnector\",{\"cluster\":\"dc1\",\"topic\":\"orders\"}]".to_vec(),
                Some(val(3)),
                "int32 partition",
            ),
            (
                "partition out of int32",
                b"[\"MirrorSourceConnector\",{\"cluster\":\"dc1\",\"topic\":\"o\",\"partition\":4294967296}]".to_vec(),
                Some(val(3)),
                "int32 partition",
            ),
        ];
        for (what, k, v, says) in rows {
            let mut m = Mm2Positions::new("dc1");
            let e = m.apply(Some(&k), v.as_deref()).expect_err(what).to_string();
            assert!(e.contains(says), "{what}: {e}");
            assert!(m.is_empty(), "{what}");
        }
    }

    #[test]
    fn takeover_report() {
        let mut t = Takeover {
            offsets_topic: "mm2-offsets.dc1.internal".into(),
            ..Takeover::default()
        };
        let stored = crate::kafka::wire::Progress {
            topic: "pay".into(),
            partition: 0,
            next_offset: 9,
            topic_id: String::new(),
            reset_id: String::new(),
            failure: String::new(),
        };
        t.started("pay", 0, &Start::Resume(stored.clone()));
        assert_eq!(t.report(), None, "only resumed: nothing taken over");
        t.started("orders", 0, &Start::MirrorMaker2(250));
        t.started("orders", 1, &Start::MirrorMaker2(7));
        t.started("orders", 2, &Start::Fresh(0));
        t.started("pay", 0, &Start::Resume(stored));
        assert_eq!(
            t.report(),
            Some(MirrorMaker2Takeover {
                offsets_topic: "mm2-offsets.dc1.internal".into(),
                partitions: 2,
                topics: vec!["orders: 0-1".into()],
                fell_back: 1,
                fell_back_topics: vec!["orders: 2".into()],
            })
        );
    }

    #[test]
    fn summary_is_compact() {
        let set: BTreeSet<(String, i32)> = [
            ("orders", 0),
            ("orders", 1),
            ("orders", 2),
            ("orders", 5),
            ("pay", 3),
        ]
        .into_iter()
        .map(|(t, p)| (t.to_owned(), p))
        .collect();
        assert_eq!(summarize(&set), vec!["orders: 0-2,5", "pay: 3"]);
        assert!(summarize(&BTreeSet::new()).is_empty());
    }
}
