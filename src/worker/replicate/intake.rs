//! The consumer side: the source consumer (manual assignment, positions from the progress
//! topic), records read ahead while a batch is written, copying a consumed record out of
//! librdkafka's buffer, and what a consumer error means.

use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedHeaders;
use rdkafka::types::RDKafkaErrorCode;

use super::batch::{header_bytes, record_size, BatchLimits, BatchRecord};
use super::settings::{fetch_max_bytes, EngineSettings, Tuning};
use crate::api::MirrorFlowSpec;
use crate::kafka::config::ClientProperties;
use crate::kafka::consume::{Polled, ReadyQueue, SourceMessage};
use crate::kafka::context::LogContext;

/// The source consumer of worker `settings.worker_index`. With offset validation,
/// `auto.offset.reset=error`: librdkafka never moves a position by itself.
pub fn create_consumer(
    settings: &EngineSettings,
    spec: &MirrorFlowSpec,
    props: &ClientProperties,
    ctx: LogContext,
) -> Result<StreamConsumer<LogContext>, KafkaError> {
    let mut config = props.to_client_config();
    for (k, v) in consumer_defaults(&settings.tuning, props) {
        config.set(k, v);
    }
    config
        // Never used for commits or membership: positions live in the progress topic.
        .set("group.id", settings.transactional_id())
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set(
            "auto.offset.reset",
            if spec.offset_validation.enabled {
                "error"
            } else {
                "earliest"
            },
        );
    config.create_with_context(ctx)
}

/// The consumer's prefetch bounds from the tuning (the bench's bare loop uses them too).
pub fn prefetch_properties(
    t: &Tuning,
    message_max_bytes: Option<&str>,
) -> [(&'static str, String); 5] {
    [
        (
            "queued.max.messages.kbytes",
            t.consumer_queue_kbytes.to_string(),
        ),
        ("queued.min.messages", t.consumer_queue_records.to_string()),
        (
            "fetch.max.bytes",
            fetch_max_bytes(t.fetch_max_bytes, message_max_bytes).to_string(),
        ),
        ("fetch.wait.max.ms", "100".to_string()),
        (
            "fetch.queue.backoff.ms",
            crate::kafka::config::FETCH_QUEUE_BACKOFF_MS.to_string(),
        ),
    ]
}

/// What the source consumer gets beyond `source.config`: the prefetch bounds and, since it
/// is polled, statistics (so that the connection health sees a broker come back); a
/// property set in `source.config` wins.
pub fn consumer_defaults(t: &Tuning, props: &ClientProperties) -> Vec<(&'static str, String)> {
    let stats = crate::kafka::health::STATS_PROPERTIES
        .iter()
        .map(|(k, v)| (*k, v.to_string()));
    props.unless_set(
        prefetch_properties(t, props.get("message.max.bytes"))
            .into_iter()
            .chain(stats),
    )
}

/// What a consumer error means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerError {
    /// librdkafka refused a position (offset validation): it does not say which partition.
    OutOfRange,
    /// The source's authorizer refuses the worker's principal READ on a topic: fetching goes
    /// on being refused until an ACL changes, so it is reported, not only counted.
    Refused,
    /// Anything else (librdkafka retries by itself).
    Other,
}

/// Classifies a consumer error.
pub fn classify_consumer_error(e: &KafkaError) -> ConsumerError {
    use RDKafkaErrorCode as C;
    match e {
        KafkaError::MessageConsumption(C::AutoOffsetReset | C::LogTruncation) => {
            ConsumerError::OutOfRange
        }
        KafkaError::MessageConsumption(C::TopicAuthorizationFailed) => ConsumerError::Refused,
        // Not GROUP_AUTHORIZATION_FAILED: librdkafka looks up the coordinator of any
        // `group.id`, and a principal without Describe on the group is refused that lookup;
        // the consumer is assigned, never in the group, and reads on.
        _ => ConsumerError::Other,
    }
}

/// Copies a consumed record out of librdkafka's buffer (one allocation for key and value;
/// headers are parsed once).
pub fn detach_record(m: SourceMessage<'_>) -> BatchRecord {
    let (headers, size) = headers_and_size(m);
    BatchRecord::new(
        m.offset(),
        m.key(),
        m.payload(),
        headers,
        m.timestamp(),
        size,
    )
}

/// A consumed record's headers (parsed once) and the size it counts in a batch.
pub fn headers_and_size(m: SourceMessage<'_>) -> (Option<OwnedHeaders>, usize) {
    let (key, value) = (m.key(), m.payload());
    match m.headers() {
        Some(h) => {
            let bytes = header_bytes((0..h.count()).filter_map(|i| h.get(i)));
            (Some(h.detach()), record_size(key, value, bytes))
        }
        None => (None, record_size(key, value, 0)),
    }
}

/// Records read while a batch is written, bounded like a batch (so at most two batches of
/// records are held: the one being written and this one). Stops at the first consumer error,
/// which is handled with the records (an out-of-range error must be seen before more are
/// taken).
pub struct ReadAhead {
    open: bool,
    limits: BatchLimits,
    bytes: usize,
    /// Topics of the records, so a record carries an index instead of a copied name.
    topics: Vec<String>,
    items: Vec<Result<(usize, i32, BatchRecord), KafkaError>>,
}

impl ReadAhead {
    /// Reads ahead within `limits` when `enabled`.
    pub fn new(enabled: bool, limits: BatchLimits) -> Self {
        Self {
            open: enabled,
            limits,
            bytes: 0,
            topics: Vec::new(),
            items: Vec::new(),
        }
    }

    /// Whether it takes more.
    pub fn open(&self) -> bool {
        self.open
    }

    /// Takes one consumer result.
    pub fn push(&mut self, r: Result<SourceMessage<'_>, KafkaError>) {
        match r {
            Ok(m) => {
                let name = m.topic();
                let topic = match self.topics.iter().rposition(|t| t == name) {
                    Some(i) => i,
                    None => {
                        self.topics.push(name.to_string());
                        self.topics.len() - 1
                    }
                };
                let record = detach_record(m);
                self.bytes += record.size;
                self.items.push(Ok((topic, m.partition(), record)));
            }
            Err(e) => {
                self.open = false;
                self.items.push(Err(e));
            }
        }
        if self.items.len() >= self.limits.max_records || self.bytes >= self.limits.max_bytes {
            self.open = false;
        }
    }

    /// Takes what librdkafka already has queued, without waiting.
    pub fn drain(&mut self, consumer: &StreamConsumer<LogContext>) {
        let Some(queue) = ReadyQueue::of(consumer) else {
            return;
        };
        while self.open {
            match queue.poll() {
                Some(Polled::Message(ev)) => self.push(Ok(ev.message())),
                Some(Polled::Error(e)) => self.push(Err(e)),
                None => return,
            }
        }
    }

    /// Hands the records and errors read to `f`, in order: `(topic, partition, record)`.
    pub fn take_each(self, mut f: impl FnMut(Result<(&str, i32, BatchRecord), KafkaError>)) {
        let Self { topics, items, .. } = self;
        for item in items {
            f(item.map(|(t, p, rec)| (topics[t].as_str(), p, rec)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumer_gets_the_tunings_bounds_unless_source_config_sets_them() {
        let t = Tuning::default();
        let props = |kv: &[(&str, &str)]| kv.iter().copied().collect::<ClientProperties>();
        // (source.config, property, what the consumer gets beyond source.config)
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static str,
            Option<&'static str>,
        );
        let cases: [Case; 6] = [
            (&[], "queued.min.messages", Some("40000")),
            (&[], "queued.max.messages.kbytes", Some("4096")),
            (&[], "fetch.max.bytes", Some("1048576")),
            (&[], "statistics.interval.ms", Some("5000")),
            (
                &[("queued.min.messages", "500")],
                "queued.min.messages",
                None,
            ),
            (
                &[("message.max.bytes", "5242880")],
                "fetch.max.bytes",
                Some("5242880"),
            ),
        ];
        for (source_config, key, want) in cases {
            let got = consumer_defaults(&t, &props(source_config));
            let got = got.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
            assert_eq!(got, want, "{source_config:?} {key}");
        }
    }

    #[test]
    fn consumer_error_table() {
        use RDKafkaErrorCode as C;
        let cases = [
            (C::AutoOffsetReset, ConsumerError::OutOfRange),
            (C::LogTruncation, ConsumerError::OutOfRange),
            (C::TopicAuthorizationFailed, ConsumerError::Refused),
            (C::GroupAuthorizationFailed, ConsumerError::Other),
            (C::NotLeaderForPartition, ConsumerError::Other),
            (C::UnknownTopicOrPartition, ConsumerError::Other),
        ];
        for (code, want) in cases {
            let e = KafkaError::MessageConsumption(code);
            assert_eq!(classify_consumer_error(&e), want, "{code:?}");
        }
        assert_eq!(
            classify_consumer_error(&KafkaError::Canceled),
            ConsumerError::Other
        );
    }

    #[test]
    fn fetch_bound_follows_a_larger_message_bound() {
        let cases = [
            (None, 1_048_576),
            (Some("1000000"), 1_048_576),
            (Some(" 5242880 "), 5_242_880),
            (Some("not a number"), 1_048_576),
        ];
        for (message_max, want) in cases {
            assert_eq!(
                fetch_max_bytes(1_048_576, message_max),
                want,
                "{message_max:?}"
            );
        }
    }
}
