//! Who a worker is, its knobs, what it reports to, and how it fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::batch::{window_bytes, BatchLimits};
use super::status::StatusSink;
use super::writer::ProducerLimits;
use crate::api::defaults;
use crate::api::MirrorFlowSpec;
use crate::kafka::health::FlowHealth;
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::{Categorized, WorkerMetrics};

/// Knobs with safe defaults. The memory bound of a worker follows from them and
/// `spec.workers.inFlightMiB` ([`WindowShares`]; `docs/PERFORMANCE.md`, the memory model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Batch bounds.
    pub batch: BatchLimits,
    /// Producer bounds and timeouts.
    pub producer: ProducerLimits,
    /// Consumer prefetch bound, `queued.max.messages.kbytes` (unless set in `source.config`).
    pub consumer_queue_kbytes: u32,
    /// `fetch.max.bytes` (unless set in `source.config`).
    pub fetch_max_bytes: u32,
    /// `queued.min.messages`, the prefetch's record count (unless set in `source.config`).
    pub consumer_queue_records: u32,
    /// AtLeastOnce: batches sent to the target before the oldest one's delivery reports are
    /// in, and batches whose syncs and progress may await acknowledgement (1 = one at a
    /// time). `batch` then bounds all of them together, so after a crash at most
    /// `batch.max_records` records are replicated again.
    pub pipeline_depth: usize,
    /// Bound of metadata, admin and watermark calls, and of reading progress.
    pub io_timeout: Duration,
    /// How often the status is published and lag gauges refreshed between refreshes.
    pub status_interval: Duration,
    /// First retry delay after a failed batch or start step; doubles up to `retry_max`.
    pub retry_min: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// On shutdown, how long an open batch may take to commit before it is aborted.
    pub shutdown_grace: Duration,
    /// Records waiting this long without any acknowledgement from the target make the worker
    /// not ready (and Degraded, saying so) until the target answers again.
    pub stall_after: Duration,
    /// Bound of offset validation's own lookups: topic ids (DescribeTopics) and the fetch
    /// that confirms a ListOffsets answer. Short: on a cluster that reports no controller the
    /// id lookup only ends with this timeout (then ids are skipped for
    /// [`TOPIC_ID_RETRY`](super::validate::TOPIC_ID_RETRY)).
    pub validation_timeout: Duration,
}

impl Default for Tuning {
    /// The knobs of a flow with the default window.
    fn default() -> Self {
        Self::for_window(WindowShares::of(
            window_bytes(defaults::in_flight_mib()),
            &ConsumerBounds::default(),
        ))
    }
}

impl Tuning {
    /// The defaults with the flow's window (`spec.workers.inFlightMiB`, read at start: the
    /// controller restarts workers when it changes), less what `source.config` lets the
    /// consumer hold.
    pub fn for_spec(spec: &MirrorFlowSpec) -> Self {
        Self::for_window(WindowShares::of(
            window_bytes(spec.workers.in_flight_mib),
            &ConsumerBounds::from_config(&spec.source.config),
        ))
    }

    /// The defaults with the window shared as `shares` says.
    fn for_window(shares: WindowShares) -> Self {
        Self {
            batch: BatchLimits {
                max_records: 40_000,
                max_bytes: shares.batches,
                linger: Duration::from_millis(100),
            },
            producer: ProducerLimits::default(),
            consumer_queue_kbytes: u32::try_from(shares.prefetch >> 10).unwrap_or(u32::MAX),
            fetch_max_bytes: FETCH_BYTES as u32,
            // 40,000 records let the 100 B prefetch fill its 4 MiB (10,000, about 1 MB, cost
            // a fifth of the 100 B rate with 1 MiB fetches in the replication bench).
            consumer_queue_records: 40_000,
            pipeline_depth: 2,
            io_timeout: Duration::from_secs(30),
            status_interval: Duration::from_secs(2),
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            stall_after: Duration::from_secs(20),
            validation_timeout: Duration::from_secs(5),
        }
    }
}

/// One fetch response (`fetch.max.bytes`), by which the prefetch may overshoot its bound.
/// 1 MiB kept the peak at 1,000 partitions lower than 2 MiB did, at no cost in rate (the
/// replication bench's `rss` scenario).
const FETCH_BYTES: usize = 1 << 20;
/// The largest prefetch: 2 MiB cost 25-40 % of the 1 KB rate; 5 MiB's extra 100 B rate was
/// not worth its megabyte at the peak.
const PREFETCH_MAX_BYTES: usize = 4 << 20;

/// How a worker's window (`spec.workers.inFlightMiB`) is shared between the record data it
/// holds, so that the one figure bounds all of it. Sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowShares {
    /// One fetch response being read.
    pub fetch: usize,
    /// The consumer's prefetch (`queued.max.messages.kbytes`).
    pub prefetch: usize,
    /// Records sent and not yet acknowledged, and the batch being read
    /// ([`BatchLimits::max_bytes`]).
    pub batches: usize,
}

impl WindowShares {
    /// One fetch, an eighth for the prefetch (at most 4 MiB, whole KiB) unless `source.config`
    /// sets either, and the rest for the batches, which get at least half: a window under
    /// 3 MiB, or one smaller than the consumer's own bounds, is exceeded by them.
    pub fn of(window: usize, consumer: &ConsumerBounds) -> Self {
        let fetch = consumer.fetch.unwrap_or(FETCH_BYTES);
        let prefetch = consumer
            .prefetch
            .unwrap_or((window / 8).min(PREFETCH_MAX_BYTES) & !1023);
        Self {
            fetch,
            prefetch,
            batches: window
                .saturating_sub(fetch.saturating_add(prefetch))
                .max(window / 2),
        }
    }
}

/// The consumer bounds a flow's `source.config` sets, in bytes (`None`: the worker's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerBounds {
    /// `fetch.max.bytes`, or a larger `message.max.bytes` (which raises the worker's).
    pub fetch: Option<usize>,
    /// `queued.max.messages.kbytes`.
    pub prefetch: Option<usize>,
}

impl ConsumerBounds {
    /// Read from `source.config`; a value that is not a number is left to librdkafka, which
    /// refuses it when the consumer is created.
    pub fn from_config(config: &BTreeMap<String, String>) -> Self {
        let num = |k: &str| config.get(k).and_then(|v| v.trim().parse::<usize>().ok());
        let fetch = num("fetch.max.bytes").or_else(|| {
            let message_max = config.get("message.max.bytes").map(String::as_str);
            let raised = fetch_max_bytes(FETCH_BYTES as u32, message_max) as usize;
            (raised != FETCH_BYTES).then_some(raised)
        });
        Self {
            fetch,
            prefetch: num("queued.max.messages.kbytes").map(|k| k.saturating_mul(1024)),
        }
    }
}

/// The consumer's `fetch.max.bytes`: the tuning's bound, raised to a `message.max.bytes` set
/// in `source.config` (librdkafka refuses a consumer whose fetch bound is below it).
pub fn fetch_max_bytes(tuning: u32, message_max_bytes: Option<&str>) -> u32 {
    message_max_bytes
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(tuning, |m| tuning.max(m))
}

/// Who this worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Namespace of the flow (`default` in standalone mode unless the file says otherwise).
    pub namespace: String,
    /// Flow name.
    pub flow_name: String,
    /// This worker's index.
    pub worker_index: u32,
    /// Number of workers of the flow.
    pub worker_count: u32,
    /// Where Secret references resolve (`<dir>/<secretName>/<key>`).
    pub secrets_dir: PathBuf,
    /// Knobs.
    pub tuning: Tuning,
    /// Indexes of workers scaled away (worker 0 only, ExactlyOnce): their transactional ids
    /// are fenced at start, so a transaction one of them left open is aborted at once instead
    /// of hiding newer progress until the coordinator's timeout.
    pub retired_workers: Vec<u32>,
}

impl EngineSettings {
    /// `mirrorflow-<len(ns)>-<ns>-<flow>-<index>`: the transactional id (and consumer group
    /// id) of this worker. The namespace's length makes it unambiguous (`team-a/orders` and
    /// `team/a-orders` never share an id on a shared target, so they never fence each other);
    /// stable for the life of the flow, so a restarted worker fences its own zombie.
    pub fn transactional_id(&self) -> String {
        worker_key(&self.namespace, &self.flow_name, self.worker_index)
    }
}

/// See [`EngineSettings::transactional_id`].
pub fn worker_key(namespace: &str, flow: &str, index: u32) -> String {
    format!("mirrorflow-{}-{namespace}-{flow}-{index}", namespace.len())
}

/// Why the engine stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The worker cannot replicate: bad configuration, fenced, or the target cannot provide
    /// the requested delivery guarantee. The message says what to do.
    #[error("{0}")]
    Fatal(crate::worker::error::Error),
}

/// Where the engine reports.
#[derive(Clone)]
pub struct EngineOutputs {
    /// Metrics.
    pub metrics: WorkerMetrics,
    /// Status snapshots.
    pub sink: Arc<dyn StatusSink>,
    /// Readiness for `/readyz`.
    pub readiness: Arc<Readiness>,
    /// Where the clients report authentication and TLS failures (`kafka::health`).
    pub health: FlowHealth,
}

/// A spec change as a running worker applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSpec {
    /// The spec to run: the new one, with the fields that need a restart (source, target,
    /// delivery, offsetValidation, replicationPolicy) kept at their running values.
    pub spec: MirrorFlowSpec,
    /// One of those fields changed (it applies after a restart).
    pub restart_needed: bool,
    pub paused_changed: bool,
    pub topics_changed: bool,
}

/// How a running worker applies `new` over `running`; `None` when nothing changed.
pub fn live_spec(running: &MirrorFlowSpec, new: MirrorFlowSpec) -> Option<LiveSpec> {
    if new == *running {
        return None;
    }
    let restart_needed = new.source != running.source
        || new.target != running.target
        || new.delivery != running.delivery
        || new.offset_validation != running.offset_validation
        || new.replication_policy != running.replication_policy;
    let paused_changed = new.paused != running.paused;
    let topics_changed = new.topics != running.topics;
    let mut spec = new;
    spec.replication_policy = running.replication_policy.clone();
    spec.source = running.source.clone();
    spec.target = running.target.clone();
    spec.delivery = running.delivery;
    spec.offset_validation = running.offset_validation.clone();
    Some(LiveSpec {
        spec,
        restart_needed,
        paused_changed,
        topics_changed,
    })
}

// The errors the worker counts in `errors_total` name their category (its `reason` label).
impl Categorized for crate::worker::error::Error {
    fn reason(&self) -> &'static str {
        crate::worker::error::Error::reason(self)
    }
}

impl Categorized for crate::kafka::Error {
    fn reason(&self) -> &'static str {
        crate::kafka::Error::reason(self)
    }
}

/// librdkafka's own errors, categorised as [`crate::kafka::Error`] categorises them.
impl Categorized for rdkafka::error::KafkaError {
    fn reason(&self) -> &'static str {
        crate::kafka::Error::Rdkafka(self.clone()).reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_shared_between_fetch_prefetch_and_batches() {
        const MIB: usize = 1 << 20;
        const KIB: usize = 1 << 10;
        let cases = [
            // (window MiB, fetch, prefetch, batches)
            (45, MIB, 4 * MIB, 40 * MIB),
            (37, MIB, 4 * MIB, 32 * MIB),
            (32, MIB, 4 * MIB, 27 * MIB),
            (1024, MIB, 4 * MIB, 1019 * MIB),
            (16, MIB, 2 * MIB, 13 * MIB),
            (8, MIB, MIB, 6 * MIB),
            // The batches keep half: a fetch is 1 MiB whatever the window.
            (2, MIB, 256 * KIB, MIB),
            (1, MIB, 128 * KIB, 512 * KIB),
        ];
        for (mib, fetch, prefetch, batches) in cases {
            let s = WindowShares::of(mib << 20, &ConsumerBounds::default());
            assert_eq!(
                (s.fetch, s.prefetch, s.batches),
                (fetch, prefetch, batches),
                "{mib} MiB"
            );
            if mib >= 3 {
                assert!(s.fetch + s.prefetch + s.batches <= mib << 20, "{mib} MiB");
            }
        }
        // Whole KiB, as `queued.max.messages.kbytes` takes it.
        let default = ConsumerBounds::default();
        assert_eq!(WindowShares::of(3 * MIB + 5, &default).prefetch, 384 * KIB);

        // What `source.config` lets the consumer hold comes out of the batches' share.
        let config = |pairs: &[(&str, &str)]| {
            ConsumerBounds::from_config(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        // A window of 37 MiB; (source.config, (fetch, prefetch, batches) in MiB).
        let cases: [(&[(&str, &str)], _); 8] = [
            (&[], (1.0, 4.0, 32.0)),
            (&[("fetch.max.bytes", "4194304")], (4.0, 4.0, 29.0)),
            (
                &[("queued.max.messages.kbytes", "16384")],
                (1.0, 16.0, 20.0),
            ),
            // A larger `message.max.bytes` raises the fetch (librdkafka needs it); a smaller
            // one does not lower it; a `fetch.max.bytes` set is taken as it is (librdkafka
            // refuses one below `message.max.bytes` when the consumer is made).
            (&[("message.max.bytes", "3145728")], (3.0, 4.0, 30.0)),
            (&[("message.max.bytes", "500000")], (1.0, 4.0, 32.0)),
            (
                &[
                    ("fetch.max.bytes", "2097152"),
                    ("message.max.bytes", "3145728"),
                ],
                (2.0, 4.0, 31.0),
            ),
            // Bounds larger than the window: the batches keep half.
            (
                &[("queued.max.messages.kbytes", "65536")],
                (1.0, 64.0, 18.5),
            ),
            // Not a number: librdkafka refuses it when the consumer is made.
            (&[("fetch.max.bytes", "lots")], (1.0, 4.0, 32.0)),
        ];
        let mib = |bytes: usize| bytes as f64 / MIB as f64;
        for (pairs, want) in cases {
            let s = WindowShares::of(37 * MIB, &config(pairs));
            assert_eq!(
                (mib(s.fetch), mib(s.prefetch), mib(s.batches)),
                want,
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn window_follows_in_flight_mib() {
        let spec = |workers: serde_json::Value| -> crate::api::MirrorFlowSpec {
            serde_json::from_value(serde_json::json!({
                "source": {"alias": "dc1", "bootstrapServers": "a:1"},
                "target": {"alias": "dc2", "bootstrapServers": "b:1"},
                "workers": workers,
            }))
            .unwrap()
        };
        let cases = [
            // (inFlightMiB, batches, prefetch KiB); `None`: the default
            (None, 40 << 20, 4096),
            (Some(37), 32 << 20, 4096),
            (Some(16), 13 << 20, 2048),
            (Some(1), 512 << 10, 128),
            // Refused by validation; never a zero window if it got through.
            (Some(0), 512 << 10, 128),
        ];
        for (mib, bytes, prefetch_kib) in cases {
            let workers = mib.map_or(
                serde_json::json!({}),
                |m: i32| serde_json::json!({ "inFlightMiB": m }),
            );
            let t = Tuning::for_spec(&spec(workers));
            assert_eq!(t.batch.max_bytes, bytes, "{mib:?}");
            assert_eq!(t.consumer_queue_kbytes, prefetch_kib, "{mib:?}");
            assert_eq!(t.fetch_max_bytes, 1 << 20, "{mib:?}");
            assert_eq!(
                t.batch.max_records,
                Tuning::default().batch.max_records,
                "{mib:?}"
            );
        }
        assert_eq!(
            Tuning::default(),
            Tuning::for_spec(&spec(serde_json::json!({})))
        );

        let mut with_prefetch = spec(serde_json::json!({}));
        with_prefetch
            .source
            .config
            .insert("queued.max.messages.kbytes".into(), "8192".into());
        assert_eq!(Tuning::for_spec(&with_prefetch).batch.max_bytes, 36 << 20);
    }
    use crate::api::Delivery;

    fn spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        }))
        .unwrap()
    }

    #[test]
    fn worker_keys_are_unambiguous() {
        assert_eq!(
            worker_key("team-a", "orders", 0),
            "mirrorflow-6-team-a-orders-0"
        );
        assert_ne!(
            worker_key("team-a", "orders", 0),
            worker_key("team", "a-orders", 0)
        );
        assert_ne!(worker_key("a", "b-1", 2), worker_key("a", "b", 12));
        assert_ne!(worker_key("a-b", "c", 0), worker_key("a", "b-c", 0));
    }

    #[test]
    fn live_spec_changes() {
        let running = spec();
        assert_eq!(live_spec(&running, running.clone()), None);
        type Edit = fn(&mut MirrorFlowSpec);
        let cases: [(&str, Edit, bool, bool, bool); 5] = [
            ("pause", |s| s.paused = true, false, true, false),
            (
                "topics",
                |s| s.topics.include = vec!["orders".into()],
                false,
                false,
                true,
            ),
            (
                "lag max applies live",
                |s| s.offset_syncs.lag_max = 5,
                false,
                false,
                false,
            ),
            (
                "delivery waits for a restart",
                |s| s.delivery = Delivery::AtLeastOnce,
                true,
                false,
                false,
            ),
            (
                "target waits for a restart",
                |s| s.target.bootstrap_servers = "c:9092".into(),
                true,
                false,
                false,
            ),
        ];
        for (name, edit, restart, paused, topics) in cases {
            let mut new = running.clone();
            edit(&mut new);
            let live = live_spec(&running, new.clone()).expect(name);
            assert_eq!(
                (
                    live.restart_needed,
                    live.paused_changed,
                    live.topics_changed
                ),
                (restart, paused, topics),
                "{name}"
            );
            assert_eq!(live.spec.source, running.source, "{name}");
            assert_eq!(live.spec.target, running.target, "{name}");
            assert_eq!(live.spec.delivery, running.delivery, "{name}");
            assert_eq!(live.spec.paused, new.paused, "{name}");
            assert_eq!(live.spec.offset_syncs, new.offset_syncs, "{name}");
        }
    }
}
