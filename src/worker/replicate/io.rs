//! Cluster I/O of the engine: watermarks (ListOffsets and the fetch probe), topic ids, a
//! source topic's syncable configs, the newest offset syncs, the progress topic and
//! MirrorMaker 2's positions. Topic admin calls are `kafka::topics`. Blocking librdkafka
//! calls run on tokio's blocking pool; every wait is bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::migrate::{Mm2Positions, Mm2RecordError};
use super::select::{syncable_configs, ConfigExclusions};
use crate::kafka::config::{ClientProperties, FETCH_QUEUE_BACKOFF_MS};
use crate::kafka::context::LogContext;
use crate::kafka::error::{Context as _, Error};
use crate::kafka::tail::TopicTail;
use crate::kafka::topics::{describe_topic_configs, served, Admin, MetaClient};
use crate::kafka::wire::Progress;

/// A blocking librdkafka call that can fail, on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    crate::kafka::run_blocking(f).await?
}

/// `(log start, high watermark)` of each partition: two ListOffsets rounds (earliest,
/// latest) asked for all `partitions` at once, so one request per partition leader and
/// round, never one per partition (librdkafka's `offsets_for_times` with the logical offsets
/// -2/-1, which Kafka's ListOffsets answers with the log start and the end). The outer error
/// means the lookup failed as a whole; per partition, the broker's error.
pub async fn watermarks(
    client: &MetaClient,
    partitions: Vec<(String, i32)>,
    timeout: Duration,
) -> Result<BTreeMap<(String, i32), Result<(i64, i64), Error>>, Error> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let list = |at: Offset| {
        let client = client.clone();
        let partitions = partitions.clone();
        blocking(move || {
            let mut tpl = TopicPartitionList::with_capacity(partitions.len());
            for (t, p) in &partitions {
                tpl.add_partition_offset(t, *p, at)
                    .context_with(|| format!("list offsets of {t}/{p}"))?;
            }
            served(&client, client.offsets_for_times(tpl, timeout))
                .context_with(|| format!("list offsets of {} partitions", partitions.len()))
        })
    };
    let (low, high) = futures::try_join!(list(Offset::Beginning), list(Offset::End))?;
    let offset =
        |e: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>| match (
            e.error(),
            e.offset(),
        ) {
            (Err(err), _) => Err(Error::from(err).context(format!(
                "watermarks of {}/{}",
                e.topic(),
                e.partition()
            ))),
            (Ok(()), Offset::Offset(o)) => Ok(o),
            (Ok(()), other) => Err(Error::Protocol(format!("no offset ({other:?})"))
                .context(format!("watermarks of {}/{}", e.topic(), e.partition()))),
        };
    let by_partition = |tpl: &TopicPartitionList| -> HashMap<(String, i32), Result<i64, Error>> {
        tpl.elements()
            .iter()
            .map(|e| ((e.topic().to_string(), e.partition()), offset(e)))
            .collect()
    };
    let (low, high) = (by_partition(&low), by_partition(&high));
    Ok(partitions
        .into_iter()
        .map(|key| {
            let r = match (low.get(&key), high.get(&key)) {
                (Some(Ok(l)), Some(Ok(h))) => Ok((*l, *h)),
                (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e.clone()),
                _ => Err(Error::Protocol("missing from the answer".into())
                    .context(format!("watermarks of {}/{}", key.0, key.1))),
            };
            (key, r)
        })
        .collect())
}

pub use crate::kafka::consume::cached_watermarks;

/// The high watermark a Fetch reports for each `(topic, partition, position)`: a throw-away
/// consumer (no group, `auto.offset.reset=error`, read_committed) fetches every partition at
/// its position once. Offset validation uses it to confirm a ListOffsets answer before it
/// stops a partition. Partitions without an answer within `timeout` are left out.
pub async fn fetch_high_watermarks(
    props: &ClientProperties,
    ctx: LogContext,
    positions: Vec<(String, i32, i64)>,
    timeout: Duration,
) -> Result<HashMap<(String, i32), i64>, Error> {
    let mut config = props.to_client_config();
    config
        .set("group.id", "mirrorflow-validation-probe")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", "50")
        // One small answer per partition is enough.
        .set("max.partition.fetch.bytes", "1024");
    blocking(move || {
        let consumer: BaseConsumer<LogContext> = config
            .create_with_context(ctx)
            .context("fetch probe consumer")?;
        let mut tpl = TopicPartitionList::new();
        for (t, p, pos) in &positions {
            tpl.add_partition_offset(t, *p, Offset::Offset(*pos))
                .context_with(|| format!("fetch probe {t}/{p}"))?;
        }
        consumer.assign(&tpl).context("fetch probe assign")?;
        let mut out = HashMap::new();
        let begin = Instant::now();
        while out.len() < positions.len() && begin.elapsed() < timeout {
            // Records and errors are irrelevant: only the responses' watermarks count.
            let _ = consumer.poll(Duration::from_millis(50));
            for (t, p, _) in &positions {
                if out.contains_key(&(t.clone(), *p)) {
                    continue;
                }
                if let Some((_, high)) = cached_watermarks(consumer.client(), t, *p) {
                    out.insert((t.clone(), *p), high);
                }
            }
        }
        Ok(out)
    })
    .await
}

/// Topic ids of `topics` (DescribeTopics through `admin`, see [`crate::kafka::topic_id`]):
/// per topic the id, `None` (no id support) or the broker's error. The outer error means the
/// lookup failed as a whole.
pub async fn topic_ids(
    admin: &Arc<Admin>,
    topics: Vec<String>,
    timeout: Duration,
) -> Result<BTreeMap<String, crate::kafka::topic_id::TopicIdResult>, Error> {
    let admin = admin.clone();
    blocking(move || crate::kafka::topic_id::describe_topic_ids(&admin, &topics, timeout)).await
}

/// The syncable configs of a source topic (see [`syncable_configs`]).
pub async fn syncable_topic_configs(
    admin: &Admin,
    topic: &str,
    exclusions: &ConfigExclusions,
    timeout: Duration,
) -> Result<Vec<(String, String)>, Error> {
    let mut all = describe_topic_configs(admin, &[topic.to_string()], timeout).await?;
    let entries = all.remove(topic).unwrap_or_else(|| {
        Err(Error::Protocol("no answer".into())
            .context(format!("describe configs of topic {topic}")))
    })?;
    Ok(syncable_configs(&entries, exclusions))
}

/// The newest offset sync `(upstream, downstream)` of each of `partitions` in the
/// offset-syncs `topic` on the target (read to its end, read_committed); partitions without
/// a sync are left out.
pub async fn newest_syncs(
    props: &ClientProperties,
    topic: &str,
    partitions: Vec<(String, i32)>,
    timeout: Duration,
) -> Result<HashMap<(String, i32), (i64, i64)>, Error> {
    let config = props.to_client_config();
    let topic = topic.to_string();
    blocking(move || {
        let wanted: std::collections::HashSet<(String, i32)> = partitions.into_iter().collect();
        let mut tail = TopicTail::new(&config, &topic, "target cluster")?;
        let mut out = HashMap::new();
        tail.catch_up(timeout, |m| {
            let (Some(k), Some(v)) = (m.key(), m.payload()) else {
                return;
            };
            if let Ok(s) = crate::kafka::wire::OffsetSync::decode(k, v) {
                let key = (s.topic, s.partition);
                if wanted.contains(&key) {
                    out.insert(key, (s.upstream_offset, s.downstream_offset));
                }
            }
        })?;
        Ok(out)
    })
    .await
}

/// Why MirrorMaker 2's positions could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mm2ReadError {
    /// The cluster could not be read (retry).
    Unavailable(Error),
    /// A record of MM2's source connector does not decode (do not guess).
    Unreadable(Mm2RecordError),
}

/// MirrorMaker 2's source positions for source `cluster` in its Connect offsets `topic` on the
/// target, read from the beginning to its end. A missing topic reads as empty.
pub async fn read_mm2_positions(
    props: &ClientProperties,
    topic: &str,
    cluster: &str,
    timeout: Duration,
) -> Result<Mm2Positions, Mm2ReadError> {
    let config = props.to_client_config();
    let (topic, cluster) = (topic.to_string(), cluster.to_string());
    let task = tokio::task::spawn_blocking(move || {
        let unavailable = Mm2ReadError::Unavailable;
        let mut tail = TopicTail::new(&config, &topic, "target cluster").map_err(unavailable)?;
        let mut positions = Mm2Positions::new(&cluster);
        let mut bad = None;
        tail.catch_up(timeout, |m| {
            if bad.is_some() {
                return;
            }
            if let Err(what) = positions.apply(m.key(), m.payload()) {
                let text = |b: Option<&[u8]>| {
                    b.map_or("null".into(), |b| String::from_utf8_lossy(b).into_owned())
                };
                bad = Some(Mm2RecordError {
                    topic: topic.clone(),
                    partition: m.partition(),
                    offset: m.offset(),
                    what,
                    key: text(m.key()),
                    value: text(m.payload()),
                });
            }
        })
        .map_err(unavailable)?;
        match bad {
            Some(e) => Err(Mm2ReadError::Unreadable(e)),
            None => Ok(positions),
        }
    });
    task.await
        .map_err(|e| Mm2ReadError::Unavailable(task_failed(e)))?
}

/// Why progress could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressError {
    /// The cluster could not be read (retry).
    Unavailable(Error),
    /// A record does not decode (do not guess).
    Corrupt(String),
}

/// Reads the progress topic from the beginning to its end (read_committed: records of
/// aborted or open transactions never count) and returns the last progress per source
/// partition; a tombstone forgets the partition. `Ok(empty)` when the topic does not exist.
/// A record that does not decode is [`ProgressError::Corrupt`]: skipping it could restart a
/// partition from `startFrom` and lose records.
///
/// "Its end" is the high watermark when the read starts, not the last stable offset: a
/// transaction another worker has open (or left hanging) hides everything committed after
/// it began, and stopping there would resume from older positions (duplicates). The read
/// waits for such transactions to end (commit, abort, or the coordinator's timeout) and is
/// [`ProgressError::Unavailable`] if they outlast `timeout`.
pub async fn read_progress(
    props: &ClientProperties,
    ctx: LogContext,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Progress>, ProgressError> {
    use ProgressError::Unavailable;
    let mut config = props.to_client_config();
    config
        .set("group.id", "mirrorflow-progress-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        // Bounded read-ahead like the offset-syncs reader: an uncompacted progress topic of
        // a 1,000-partition flow holds millions of records, and librdkafka's default
        // prefetch (up to 64 MiB) would be the worker's peak memory at start.
        .set("queued.max.messages.kbytes", "2048")
        .set("fetch.max.bytes", "1048576")
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    let topic = topic.to_string();
    let mut uncommitted_config = config.clone();
    uncommitted_config.set("isolation.level", "read_uncommitted");
    let task = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<LogContext> =
            config.create_with_context(ctx.clone()).map_err(|e| {
                Unavailable(Error::from(e).context(format!("progress reader for {topic}")))
            })?;
        let uncommitted: BaseConsumer<LogContext> =
            uncommitted_config.create_with_context(ctx).map_err(|e| {
                Unavailable(Error::from(e).context(format!("progress reader for {topic}")))
            })?;
        let read = read_to_end(&consumer, &uncommitted, &topic, timeout);
        // Closing the clients joins their threads (0.1-0.2 s): not on the start's path.
        tokio::task::spawn_blocking(move || drop((consumer, uncommitted)));
        read
    });
    task.await.map_err(|e| Unavailable(task_failed(e)))?
}

/// A blocking read whose task failed (panicked or was cancelled).
fn task_failed(e: tokio::task::JoinError) -> Error {
    Error::Task(e.to_string()).context("blocking task failed")
}

/// Reads the progress topic with `consumer` (read_committed) to the end `uncommitted` finds
/// at the start; see [`read_progress`].
fn read_to_end(
    consumer: &BaseConsumer<LogContext>,
    uncommitted: &BaseConsumer<LogContext>,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Progress>, ProgressError> {
    use ProgressError::{Corrupt, Unavailable};
    let md = consumer.fetch_metadata(None, timeout).map_err(|e| {
        Unavailable(Error::from(e).context(format!("metadata for progress topic {topic}")))
    })?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        // Absent from a complete answer: a flow that never wrote progress. (A target that
        // still holds records of this flow stops those partitions: ProgressMissing.)
        return Ok(HashMap::new());
    };
    if let Some(e) = t.error() {
        let listed = Error::code(rdkafka::types::RDKafkaErrorCode::from(e), format!("{e:?}"));
        return Err(Unavailable(listed.context(format!(
            "progress topic {topic} is listed with an error; not reading it as empty"
        ))));
    }
    let partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    // The end to reach: the high watermark now (read_uncommitted), so open transactions
    // cannot make an older end look final.
    let ends = ends_to_read(&uncommitted_watermarks(
        uncommitted,
        topic,
        &partitions,
        timeout,
    )?);
    let mut tpl = TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(|e| {
                Unavailable(Error::from(e).context(format!("progress topic {topic}/{p}")))
            })?;
    }
    if !ends.is_empty() {
        consumer.assign(&tpl).map_err(|e| {
            Unavailable(Error::from(e).context(format!("assign progress topic {topic}")))
        })?;
    }
    let mut reader = EndReader::new(&ends);
    let mut out = HashMap::new();
    let begin = Instant::now();
    while !reader.done() {
        if begin.elapsed() > timeout {
            return Err(Unavailable(
                Error::Timeout(timeout).context(reader.late(topic, timeout)),
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                // At the last stable offset: final only once it passed the start's end.
                let stable = consumer
                    .fetch_watermarks(topic, p, timeout)
                    .map(|(_, lso)| lso)
                    .map_err(|e| {
                        Unavailable(Error::from(e).context(format!("progress topic {topic}/{p}")))
                    })?;
                if let EndStep::ReadAgainFrom(next) = reader.at_end(p, stable) {
                    // Read what the ended transactions committed, to the end again.
                    consumer
                        .seek(topic, p, Offset::Offset(next), timeout)
                        .map_err(|e| {
                            Unavailable(
                                Error::from(e).context(format!("progress topic {topic}/{p}")),
                            )
                        })?;
                }
            }
            Some(Err(e)) => {
                return Err(Unavailable(
                    Error::from(e).context(format!("read progress topic {topic}")),
                ))
            }
            Some(Ok(m)) => {
                reader.consumed(m.partition(), m.offset());
                let at = format!(
                    "progress topic {topic}/{} offset {}",
                    m.partition(),
                    m.offset()
                );
                let key = m
                    .key()
                    .ok_or_else(|| Corrupt(format!("{at}: record without key")))?;
                match m.payload() {
                    None => {
                        let k =
                            Progress::decode_key(key).map_err(|e| Corrupt(format!("{at}: {e}")))?;
                        out.remove(&k);
                    }
                    Some(value) => {
                        let p = Progress::decode(key, value)
                            .map_err(|e| Corrupt(format!("{at}: {e}")))?;
                        out.insert((p.topic.clone(), p.partition), p);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Low and high watermarks of each partition (the client must read uncommitted).
fn uncommitted_watermarks(
    client: &BaseConsumer<LogContext>,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<BTreeMap<i32, (i64, i64)>, ProgressError> {
    partitions
        .iter()
        .map(|p| {
            client
                .fetch_watermarks(topic, *p, timeout)
                .map(|w| (*p, w))
                .map_err(|e| {
                    ProgressError::Unavailable(
                        Error::from(e).context(format!("progress topic {topic}/{p}")),
                    )
                })
        })
        .collect()
}

/// The partitions a start-up read reads, with the end to reach (the high watermark): those
/// holding records at the start, committed or not (`low < high`). An empty one has nothing
/// to wait for, not even a fetch's end of partition (a fresh worker's topic is all empty,
/// and that fetch took 0.2-0.5 s of its start). Pure.
pub fn ends_to_read(watermarks: &BTreeMap<i32, (i64, i64)>) -> BTreeMap<i32, i64> {
    watermarks
        .iter()
        .filter(|(_, (low, high))| high > low)
        .map(|(p, (_, high))| (*p, *high))
        .collect()
}

/// What to do at the end of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndStep {
    /// Read to the end: done with it.
    Done,
    /// A transaction open at the start still hides records: wait for more.
    Wait,
    /// The transactions that hid records ended: read again from this offset to the end.
    ReadAgainFrom(i64),
}

/// When a read_committed read of the progress topic is complete: every partition read to an
/// end at or past its high watermark at the start. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndReader {
    /// Per partition: the end to pass, the next offset to read, and whether the current
    /// pass started after the stable offset passed the end.
    parts: BTreeMap<i32, (i64, i64, bool)>,
    done: std::collections::BTreeSet<i32>,
}

impl EndReader {
    /// Partitions and their high watermarks at the start.
    pub fn new(ends: &BTreeMap<i32, i64>) -> Self {
        Self {
            parts: ends.iter().map(|(p, e)| (*p, (*e, 0, false))).collect(),
            done: std::collections::BTreeSet::new(),
        }
    }

    /// A record at `offset` of partition `p` was read.
    pub fn consumed(&mut self, p: i32, offset: i64) {
        if let Some(s) = self.parts.get_mut(&p) {
            s.1 = s.1.max(offset + 1);
        }
    }

    /// The read of `p` reached its end while the last stable offset is `stable`.
    pub fn at_end(&mut self, p: i32, stable: i64) -> EndStep {
        let Some((end, next, final_pass)) = self.parts.get_mut(&p) else {
            return EndStep::Done;
        };
        if *final_pass || (stable >= *end && *next >= *end) || *end == 0 {
            self.done.insert(p);
            return EndStep::Done;
        }
        if stable >= *end {
            // Everything before `end` is settled now; what ended after this pass began is
            // read by one more pass from where this one stopped.
            *final_pass = true;
            return EndStep::ReadAgainFrom(*next);
        }
        EndStep::Wait
    }

    /// Whether every partition is read.
    pub fn done(&self) -> bool {
        self.done.len() == self.parts.len()
    }

    /// The error when the read did not finish in time.
    pub fn late(&self, topic: &str, timeout: Duration) -> String {
        let waiting: Vec<String> = self
            .parts
            .iter()
            .filter(|(p, _)| !self.done.contains(p))
            .map(|(p, (end, next, _))| format!("{p} (read to {next} of {end})"))
            .collect();
        format!(
            "progress topic {topic} was not read to its end within {timeout:?}: partitions {} \
             wait for a transaction another worker has open (it ends with its commit, abort or \
             the coordinator's transaction timeout); resuming from older positions would \
             replicate records twice",
            waiting.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_to_read_table() {
        type Watermarks = Vec<(i32, (i64, i64))>;
        type Ends = Vec<(i32, i64)>;
        let cases: Vec<(&str, Watermarks, Ends)> = vec![
            ("never written", vec![(0, (0, 0))], vec![]),
            ("every record deleted", vec![(0, (7, 7))], vec![]),
            ("holds records", vec![(0, (3, 9))], vec![(0, 9)]),
            (
                "only the partitions with records",
                vec![(0, (0, 0)), (1, (0, 4)), (2, (5, 5)), (3, (2, 6))],
                vec![(1, 4), (3, 6)],
            ),
            ("no partition", vec![], vec![]),
        ];
        for (name, watermarks, want) in cases {
            let got = ends_to_read(&watermarks.into_iter().collect());
            assert_eq!(got, want.into_iter().collect(), "{name}");
        }
    }

    #[test]
    fn end_reader_waits_for_open_transactions() {
        let mut r = EndReader::new(&[(0, 10), (1, 0), (2, 5)].into());
        // Partition 1 is empty; partition 2 is read to its end with nothing open.
        for o in 0..5 {
            r.consumed(2, o);
        }
        assert_eq!(r.at_end(1, 0), EndStep::Done);
        assert_eq!(r.at_end(2, 5), EndStep::Done);
        // Partition 0: a transaction open from offset 4 hides 4..10.
        for o in 0..4 {
            r.consumed(0, o);
        }
        assert_eq!(
            r.at_end(0, 4),
            EndStep::Wait,
            "never final below the start's end"
        );
        assert!(!r.done());
        // It committed: one more pass from where the read stopped.
        assert_eq!(r.at_end(0, 12), EndStep::ReadAgainFrom(4));
        assert!(!r.done());
        r.consumed(0, 9);
        assert_eq!(r.at_end(0, 12), EndStep::Done);
        assert!(r.done());
        assert!(r.late("p", Duration::from_secs(1)).contains("partitions "));
    }

    #[test]
    fn end_reader_done_at_once_when_read_past_the_end() {
        let mut r = EndReader::new(&[(0, 3)].into());
        r.consumed(0, 2);
        assert_eq!(r.at_end(0, 3), EndStep::Done);
    }

    fn unreachable() -> ClientProperties {
        let mut p = ClientProperties::default();
        p.set("bootstrap.servers", "127.0.0.1:1");
        p
    }

    #[tokio::test]
    async fn fetch_probe_config_is_valid_and_bounded() {
        // librdkafka rejects inconsistent configs at creation: that must not happen here.
        let got = fetch_high_watermarks(
            &unreachable(),
            LogContext::new("dc1"),
            vec![("orders".into(), 0, 5)],
            Duration::from_millis(100),
        )
        .await;
        assert_eq!(got, Ok(HashMap::new()), "no answer within the bound");
    }

    #[test]
    fn no_cached_watermarks_before_a_fetch() {
        let consumer: BaseConsumer<LogContext> = unreachable()
            .to_client_config()
            .set("group.id", "g")
            .create_with_context(LogContext::new("dc1"))
            .unwrap();
        assert_eq!(cached_watermarks(consumer.client(), "orders", 0), None);
    }
}
