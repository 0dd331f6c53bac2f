//! Worker metrics (Prometheus), every series prefixed `mirrorflow_worker_`: the list is on
//! [`WorkerMetrics`]; the ones alerts and dashboards use are in `docs/PACKAGING.md`.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry,
};

/// The stage an error happened in: the `kind` of `mirrorflow_worker_errors_total{kind,reason}`
/// (its `reason` comes from the error itself, see [`Categorized`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The target refused a record for good (e.g. too large).
    RecordRejected,
    /// A transient produce/commit failure; the batch is retried.
    TargetRetriable,
    /// A consumer error on the source.
    Source,
    /// Out of range / validation failure of a source partition.
    OffsetValidation,
    /// Topic discovery or target topic creation failed.
    TopicSync,
    /// Writing or reading progress failed.
    Progress,
    /// The worker cannot go on (fenced, transactions unsupported, bad config).
    Fatal,
}

impl ErrorKind {
    /// All kinds.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::RecordRejected,
        ErrorKind::TargetRetriable,
        ErrorKind::Source,
        ErrorKind::OffsetValidation,
        ErrorKind::TopicSync,
        ErrorKind::Progress,
        ErrorKind::Fatal,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RecordRejected => "record_rejected",
            ErrorKind::TargetRetriable => "target_retriable",
            ErrorKind::Source => "source",
            ErrorKind::OffsetValidation => "offset_validation",
            ErrorKind::TopicSync => "topic_sync",
            ErrorKind::Progress => "progress",
            ErrorKind::Fatal => "fatal",
        }
    }
}

/// An error that names its own category (`Broker`, `Timeout`, `InvalidSpec`, ...): the
/// `reason` label of `errors_total`, the same word conditions and Events use.
pub trait Categorized {
    /// The category, a PascalCase word.
    fn reason(&self) -> &'static str;
}

/// The labels of `errors_total` for an error of `cause` during `kind`: `[kind, reason]`.
pub fn error_labels(kind: ErrorKind, cause: &dyn Categorized) -> [&'static str; 2] {
    [kind.as_str(), cause.reason()]
}

/// Prometheus metrics of one worker, registered in their own [`Registry`]. Every series is
/// prefixed `mirrorflow_worker_`:
///
/// | metric | labels | meaning |
/// |---|---|---|
/// | `records_replicated_total` | topic | records committed on the target (source topic name) |
/// | `bytes_replicated_total` | topic | key + value + header bytes of those records |
/// | `replication_lag_records` | topic, partition | source high watermark − next offset to replicate |
/// | `replication_lag_seconds` | topic, partition | source timestamp → target acknowledgement of the last replicated record |
/// | `offset_syncs_total` | — | offset syncs written |
/// | `transactions_total` | outcome (commit, abort) | target transactions (ExactlyOnce) |
/// | `batches_total` | outcome (committed, retried) | batches written |
/// | `errors_total` | kind, reason | errors by stage (see [`ErrorKind`]) and by the error's category (see [`Categorized`]); a series appears at its first error |
/// | `partitions_owned` | — | partitions this worker owns |
/// | `partitions_failed` | — | owned partitions stopped by a failure |
/// | `paused` | — | 1 while `spec.paused` is set |
/// | `ready` | — | 1 once replication runs |
/// | `topic_config_changes_total` | op (set, delete) | config changes applied to target topics the flow created (`syncTopicConfigs`) |
/// | `topics_unwritable` | — | target topics this worker cannot write to: creation refused, or replication factor below `min.insync.replicas` |
/// | `topic_refresh_seconds` | — | how long the last topic refresh took (listing both clusters, target topics, watermarks, offset validation); it runs beside the copy loop |
/// | `topic_refreshes_total` | — | topic refreshes completed (failed ones included) |
/// | `replication_latency_seconds` | — | histogram: heartbeat written on the source → read on the target (worker 0, `spec.heartbeats`) |
/// | `replication_latency_last_seconds` | — | the latest of those, or how long an earlier heartbeat has been missing on the target |
/// | `heartbeats_total` | cluster (source, target), outcome (written, failed) | heartbeats emitted (worker 0) |
#[derive(Clone)]
pub struct WorkerMetrics {
    /// The registry served on `/metrics`.
    pub registry: Registry,
    /// `records_replicated_total{topic}`.
    pub records: IntCounterVec,
    /// `bytes_replicated_total{topic}`.
    pub bytes: IntCounterVec,
    /// `replication_lag_records{topic,partition}`.
    pub lag_records: IntGaugeVec,
    /// `replication_lag_seconds{topic,partition}`.
    pub lag_seconds: GaugeVec,
    /// `offset_syncs_total`.
    pub offset_syncs: IntCounter,
    /// `transactions_total{outcome}`.
    pub transactions: IntCounterVec,
    /// `batches_total{outcome}`.
    pub batches: IntCounterVec,
    /// `errors_total{kind,reason}`.
    pub errors: IntCounterVec,
    /// `partitions_owned`.
    pub partitions_owned: IntGauge,
    /// `partitions_failed`.
    pub partitions_failed: IntGauge,
    /// `paused`.
    pub paused: IntGauge,
    /// `ready`.
    pub ready: Gauge,
    /// `topic_config_changes_total{op}`.
    pub topic_config_changes: IntCounterVec,
    /// `topics_unwritable`.
    pub topics_unwritable: IntGauge,
    /// `topic_refresh_seconds`.
    pub refresh_seconds: Gauge,
    /// `topic_refreshes_total`.
    pub refreshes: IntCounter,
    /// `replication_latency_seconds` (histogram).
    pub latency: Histogram,
    /// `replication_latency_last_seconds`.
    pub latency_last: Gauge,
    /// `heartbeats_total{cluster,outcome}`.
    pub heartbeats: IntCounterVec,
}

/// Buckets of `replication_latency_seconds`: from a fast local pair to a flow minutes behind.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

impl WorkerMetrics {
    /// Creates the metrics in a new registry.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let opts = |name: &str, help: &str| Opts::new(format!("mirrorflow_worker_{name}"), help);
        let records = IntCounterVec::new(
            opts(
                "records_replicated_total",
                "Records committed on the target, by source topic",
            ),
            &["topic"],
        )?;
        let bytes = IntCounterVec::new(
            opts(
                "bytes_replicated_total",
                "Key, value and header bytes committed on the target, by source topic",
            ),
            &["topic"],
        )?;
        let lag_records = IntGaugeVec::new(
            opts(
                "replication_lag_records",
                "Source high watermark minus the next offset to replicate",
            ),
            &["topic", "partition"],
        )?;
        let lag_seconds = GaugeVec::new(
            opts(
                "replication_lag_seconds",
                "Source timestamp to target acknowledgement of the last replicated record",
            ),
            &["topic", "partition"],
        )?;
        let offset_syncs =
            IntCounter::with_opts(opts("offset_syncs_total", "Offset syncs written"))?;
        let transactions = IntCounterVec::new(
            opts("transactions_total", "Target transactions by outcome"),
            &["outcome"],
        )?;
        let batches =
            IntCounterVec::new(opts("batches_total", "Batches by outcome"), &["outcome"])?;
        let errors = IntCounterVec::new(
            opts(
                "errors_total",
                "Errors by stage (kind) and category (reason)",
            ),
            &["kind", "reason"],
        )?;
        let partitions_owned =
            IntGauge::with_opts(opts("partitions_owned", "Partitions owned by this worker"))?;
        let partitions_failed = IntGauge::with_opts(opts(
            "partitions_failed",
            "Owned partitions stopped by a failure",
        ))?;
        let paused = IntGauge::with_opts(opts("paused", "1 while spec.paused is set"))?;
        let ready = Gauge::with_opts(opts("ready", "1 once replication runs"))?;
        let topic_config_changes = IntCounterVec::new(
            opts(
                "topic_config_changes_total",
                "Config changes applied to target topics the flow created, by operation (set, delete)",
            ),
            &["op"],
        )?;
        let topics_unwritable = IntGauge::with_opts(opts(
            "topics_unwritable",
            "Target topics this worker cannot write to: creation refused, or replication factor below min.insync.replicas",
        ))?;
        let refresh_seconds = Gauge::with_opts(opts(
            "topic_refresh_seconds",
            "How long the last topic refresh took: listing both clusters, target topics, watermarks, offset validation",
        ))?;
        let refreshes = IntCounter::with_opts(opts(
            "topic_refreshes_total",
            "Topic refreshes completed, failed ones included",
        ))?;
        let latency = Histogram::with_opts(
            HistogramOpts::from(opts(
                "replication_latency_seconds",
                "Heartbeat written on the source to its replica read on the target (spec.heartbeats)",
            ))
            .buckets(LATENCY_BUCKETS.to_vec()),
        )?;
        let latency_last = Gauge::with_opts(opts(
            "replication_latency_last_seconds",
            "The latest heartbeat latency, or how long an earlier heartbeat has been missing on the target",
        ))?;
        let heartbeats = IntCounterVec::new(
            opts(
                "heartbeats_total",
                "Heartbeats emitted, by cluster and outcome",
            ),
            &["cluster", "outcome"],
        )?;
        let metrics = Self {
            registry,
            records,
            bytes,
            lag_records,
            lag_seconds,
            offset_syncs,
            transactions,
            batches,
            errors,
            partitions_owned,
            partitions_failed,
            paused,
            ready,
            topic_config_changes,
            topics_unwritable,
            refresh_seconds,
            refreshes,
            latency,
            latency_last,
            heartbeats,
        };
        for c in metrics.collectors() {
            metrics.registry.register(c)?;
        }
        metrics.zero_series();
        Ok(metrics)
    }

    /// Every metric, to register.
    fn collectors(&self) -> [Box<dyn prometheus::core::Collector>; 19] {
        [
            Box::new(self.records.clone()),
            Box::new(self.bytes.clone()),
            Box::new(self.lag_records.clone()),
            Box::new(self.lag_seconds.clone()),
            Box::new(self.offset_syncs.clone()),
            Box::new(self.transactions.clone()),
            Box::new(self.batches.clone()),
            Box::new(self.errors.clone()),
            Box::new(self.partitions_owned.clone()),
            Box::new(self.partitions_failed.clone()),
            Box::new(self.paused.clone()),
            Box::new(self.ready.clone()),
            Box::new(self.topic_config_changes.clone()),
            Box::new(self.topics_unwritable.clone()),
            Box::new(self.refresh_seconds.clone()),
            Box::new(self.refreshes.clone()),
            Box::new(self.latency.clone()),
            Box::new(self.latency_last.clone()),
            Box::new(self.heartbeats.clone()),
        ]
    }

    /// Zero series from the start, so rate() and alerts work before the first event.
    fn zero_series(&self) {
        for outcome in ["commit", "abort"] {
            self.transactions.with_label_values(&[outcome]);
        }
        for outcome in ["committed", "retried"] {
            self.batches.with_label_values(&[outcome]);
        }
        for op in ["set", "delete"] {
            self.topic_config_changes.with_label_values(&[op]);
        }
    }

    /// Counts an error of `cause` during `kind`.
    pub fn error(&self, kind: ErrorKind, cause: &dyn Categorized) {
        self.errors
            .with_label_values(&error_labels(kind, cause))
            .inc();
    }

    /// Errors counted during `kind`, over every `reason`.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        use prometheus::core::Collector;
        self.errors
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .filter(|m| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == "kind" && l.value() == kind.as_str())
            })
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }

    /// Counts a config change applied to a target topic (`op`: set, delete).
    pub fn topic_config_change(&self, op: &str) {
        self.topic_config_changes.with_label_values(&[op]).inc();
    }

    /// Records a topic refresh that took `elapsed`.
    pub fn refreshed(&self, elapsed: std::time::Duration) {
        self.refresh_seconds.set(elapsed.as_secs_f64());
        self.refreshes.inc();
    }

    /// Drops the per-partition series of a partition this worker no longer owns.
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let p = partition.to_string();
        let _ = self.lag_records.remove_label_values(&[topic, &p]);
        let _ = self.lag_seconds.remove_label_values(&[topic, &p]);
    }

    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        encode_registry(&self.registry)
    }
}

/// Any registry in Prometheus text format (an encoding failure yields a comment line).
pub fn encode_registry(registry: &Registry) -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    match prometheus::TextEncoder::new().encode(&registry.gather(), &mut buf) {
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        Err(e) => format!("# encoding metrics failed: {e}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_a_kind_sum_over_reasons() {
        struct Cause(&'static str);
        impl Categorized for Cause {
            fn reason(&self) -> &'static str {
                self.0
            }
        }
        let m = WorkerMetrics::new().unwrap();
        assert_eq!(m.errors_of(ErrorKind::RecordRejected), 0, "no series yet");
        m.error(ErrorKind::RecordRejected, &Cause("Broker"));
        m.error(ErrorKind::RecordRejected, &Cause("Broker"));
        m.error(ErrorKind::RecordRejected, &Cause("Record"));
        m.error(ErrorKind::TopicSync, &Cause("Timeout"));
        assert_eq!(m.errors_of(ErrorKind::RecordRejected), 3);
        assert_eq!(m.errors_of(ErrorKind::TopicSync), 1);
        assert_eq!(m.errors_of(ErrorKind::Fatal), 0);
    }

    /// A cause naming a fixed category.
    struct Cause(&'static str);

    impl Categorized for Cause {
        fn reason(&self) -> &'static str {
            self.0
        }
    }

    #[test]
    fn labels_are_the_stage_and_the_cause_category() {
        for (kind, cause, want) in [
            (ErrorKind::Source, "Broker", ["source", "Broker"]),
            (ErrorKind::Fatal, "InvalidSpec", ["fatal", "InvalidSpec"]),
            (ErrorKind::Progress, "Timeout", ["progress", "Timeout"]),
        ] {
            assert_eq!(error_labels(kind, &Cause(cause)), want);
        }
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), 7);
        assert!(names.contains(&"record_rejected") && names.contains(&"topic_sync"));
    }

    /// The metrics registered are those [`WorkerMetrics`]' table documents, each once.
    #[test]
    fn registered_metrics_match_the_documented_table() {
        let documented: Vec<String> = include_str!("metrics.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("/// | `"))
            .filter_map(|l| l.split('`').next())
            .map(|name| format!("mirrorflow_worker_{name}"))
            .collect();
        let m = WorkerMetrics::new().unwrap();
        let registered: Vec<String> = m
            .collectors()
            .iter()
            .flat_map(|c| c.desc())
            .map(|d| d.fq_name.clone())
            .collect();
        assert_eq!(registered, documented);
        // Registered once: registering any of them again is refused.
        for c in m.collectors() {
            assert!(m.registry.register(c).is_err());
        }
    }

    #[test]
    fn series_exist_and_encode() {
        let m = WorkerMetrics::new().unwrap();
        m.records.with_label_values(&["orders"]).inc_by(3);
        m.lag_records.with_label_values(&["orders", "0"]).set(7);
        m.error(ErrorKind::RecordRejected, &Cause("Broker"));
        m.refreshed(std::time::Duration::from_millis(250));
        let text = m.encode();
        for needle in [
            "mirrorflow_worker_records_replicated_total{topic=\"orders\"} 3",
            "mirrorflow_worker_replication_lag_records{partition=\"0\",topic=\"orders\"} 7",
            "mirrorflow_worker_errors_total{kind=\"record_rejected\",reason=\"Broker\"} 1",
            "mirrorflow_worker_transactions_total{outcome=\"abort\"} 0",
            "mirrorflow_worker_topic_config_changes_total{op=\"delete\"} 0",
            "mirrorflow_worker_topic_refresh_seconds 0.25",
            "mirrorflow_worker_topic_refreshes_total 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        // Series of errors appear at their first error, not before.
        assert!(!text.contains("kind=\"fatal\""), "{text}");
        m.forget_partition("orders", 0);
        assert!(!m
            .encode()
            .contains("replication_lag_records{partition=\"0\""));
    }
}
