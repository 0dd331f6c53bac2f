//! MirrorMaker 2 heartbeats and the replication latency they measure (`spec.heartbeats`).
//! Worker 0 runs [`HeartbeatRunner`] beside the engine, like the checkpoint runner and the
//! topic ACL sync: every `intervalSeconds` it writes a heartbeat into the `heartbeats` topic
//! of both clusters ([`latency::emissions`]: MM2's placement) and reads the replicas of the
//! source's heartbeats on the target ([`latency`]: why that is the flow's latency). The
//! engine replicates heartbeats topics whatever `topics` selects
//! (`kafka::naming::is_heartbeats_topic`). Failing to write or read heartbeats never stops
//! replication: it is reported in `status.replicationLatency.lastError`.

pub mod latency;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::{MirrorFlowSpec, ReplicationLatency};
use crate::kafka::config::{client_properties, ClientProperties};
use crate::kafka::context::LogContext;
use crate::kafka::error::{Context as _, Error as ClientError};
use crate::kafka::naming::target_topic;
use crate::kafka::producer::{EventProducer, Outgoing};
use crate::kafka::topics;
use crate::kafka::wire::{Heartbeat, HEARTBEATS_TOPIC};
use crate::telemetry::metrics::WorkerMetrics;
use crate::worker::error::Error;
use latency::{emissions, measures_flow, Cluster, LatencyTracker};

/// Bound of each cluster call and of a heartbeat's acknowledgement.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Clients are rebuilt after a failure at most this often (fresh Secrets, new connections)
/// rather than on every heartbeat.
const REBUILD_AFTER: Duration = Duration::from_secs(60);

/// Emits heartbeats and measures the latency on worker 0 until `shutdown`.
pub struct HeartbeatRunner {
    /// Group id of the replica reader: the worker's own (`EngineSettings::transactional_id`),
    /// suffixed. Never shared with another flow's reader on the same target: two live
    /// consumers of one group there kept the checkpoint runner from seeing any source group
    /// (tests/e2e_kube.rs), and a group per flow is what the other readers do too.
    pub reader_group: String,
    pub secrets_dir: PathBuf,
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// What `status.workers[].replicationLatency` shows (`None`: heartbeats off).
    pub state: watch::Sender<Option<ReplicationLatency>>,
    pub metrics: WorkerMetrics,
    /// Rotated Secrets rebuild the clients at once, as the engine's and the checkpoint
    /// runner's: clients left on an old password or CA would fail (and be reported as the
    /// cluster's connection problem) until their next rebuild.
    pub secrets: Option<crate::kafka::secrets::FlowSecrets>,
}

/// One cluster's side: a producer, and what creating its `heartbeats` topic needs.
struct Side {
    alias: String,
    /// What the transient topic clients are built from (the session's Secrets).
    props: ClientProperties,
    producer: EventProducer,
    /// Its `heartbeats` topic exists (created or found).
    topic_ready: bool,
    /// Replication factor of its `heartbeats` topic when created: `internalTopics` on the
    /// target; the broker default on the source, whose size the flow does not describe.
    replication_factor: Option<i32>,
}

/// The clients of one spec's clusters.
struct Session {
    /// The spec fields the clients and names were built from.
    key: (
        crate::api::ClusterSpec,
        crate::api::ClusterSpec,
        crate::api::ReplicationPolicy,
    ),
    built: Instant,
    source: Side,
    target: Side,
    /// Reads the target's replica of the source's heartbeats, once that topic exists; until
    /// then, its metadata says whether it does (shared with the blocking pool for that).
    reader: Arc<StreamConsumer<LogContext>>,
    replica_topic: String,
    assigned: bool,
}

impl Session {
    fn key_of(
        spec: &MirrorFlowSpec,
    ) -> (
        crate::api::ClusterSpec,
        crate::api::ClusterSpec,
        crate::api::ReplicationPolicy,
    ) {
        (
            spec.source.clone(),
            spec.target.clone(),
            spec.replication_policy.clone(),
        )
    }

    fn connect(
        spec: &MirrorFlowSpec,
        group: &str,
        secrets_dir: &std::path::Path,
    ) -> Result<Self, Error> {
        let source_props = client_properties(&spec.source, secrets_dir)
            .map_err(|e| Error::from(e).context("spec.source"))?;
        let target_props = client_properties(&spec.target, secrets_dir)
            .map_err(|e| Error::from(e).context("spec.target"))?;
        // Heartbeat clients log, but do not report into the clusters' connection health: the
        // engine's clients report both clusters, and a problem of a client that is not
        // polled for statistics would stay until the session is rebuilt (a rotated CA
        // showed as a TLS failure for a minute after the broker had its new certificate).
        // Heartbeat errors are in `replicationLatency.lastError`.
        let ctx = |alias: &str| LogContext::new(alias);
        let side = |alias: &str, props: &ClientProperties| {
            let mut config = props.to_client_config();
            config
                .set("acks", "all")
                .set("enable.idempotence", "true")
                .set("linger.ms", "0")
                .set("message.timeout.ms", TIMEOUT.as_millis().to_string());
            Ok::<_, ClientError>(Side {
                alias: alias.to_string(),
                props: props.clone(),
                producer: EventProducer::create(&config, ctx(alias))
                    .context_with(|| format!("cluster {alias}: heartbeat producer"))?,
                topic_ready: false,
                replication_factor: None,
            })
        };
        let source = side(&spec.source.alias, &source_props)?;
        let mut target = side(&spec.target.alias, &target_props)?;
        target.replication_factor = spec.internal_topics.replication_factor;
        let mut config = target_props.to_client_config();
        config
            // Assigned, never subscribed, never committed.
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // What the target's consumers see: replicas committed by the flow's transactions.
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "100");
        let reader = config
            .create_with_context(ctx(&spec.target.alias))
            .context_with(|| format!("cluster {}: heartbeat reader", spec.target.alias))?;
        Ok(Self {
            key: Self::key_of(spec),
            built: Instant::now(),
            source,
            target,
            reader: Arc::new(reader),
            replica_topic: target_topic(
                &spec.replication_policy,
                &spec.source.alias,
                HEARTBEATS_TOPIC,
            ),
            assigned: false,
        })
    }

    /// Creates both `heartbeats` topics (the worker's internal-topic path: one partition,
    /// compacted, as MM2) and starts reading the replica once it exists (the flow creates
    /// it when it first replicates the source's heartbeats). Each cluster on its own: a
    /// source that refuses the topic leaves the target's heartbeats going. Errors name the
    /// cluster.
    async fn prepare(&mut self) -> Vec<ClientError> {
        let mut errors = Vec::new();
        for side in [&mut self.source, &mut self.target] {
            if !side.topic_ready {
                match side.ensure_topic().await {
                    Ok(()) => side.topic_ready = true,
                    Err(e) => errors.push(e),
                }
            }
        }
        if !self.assigned {
            if let Err(e) = self.assign_replica().await {
                errors.push(e.context(format!("cluster {}", self.target.alias)));
            }
        }
        errors
    }

    async fn assign_replica(&mut self) -> Result<(), ClientError> {
        // All topics, as the engine's metadata client asks: naming one could create it on a
        // broker that auto-creates topics.
        let reader = Arc::clone(&self.reader);
        let topic = self.replica_topic.clone();
        let exists = crate::kafka::run_blocking(move || {
            let md = reader
                .fetch_metadata(None, TIMEOUT)
                .context("fetch metadata")?;
            Ok::<_, ClientError>(
                md.topics()
                    .iter()
                    .any(|t| t.name() == topic && t.error().is_none()),
            )
        })
        .await??;
        if exists {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&self.replica_topic, 0, Offset::End)?;
            self.reader
                .assign(&tpl)
                .context_with(|| format!("read {}", self.replica_topic))?;
            self.assigned = true;
            info!(topic = %self.replica_topic, "reading heartbeat replicas on the target");
        }
        Ok(())
    }

    /// Writes the heartbeats of `now_ms`; the source's acknowledged one is pending in
    /// `tracker`. Errors name the cluster.
    async fn emit(
        &self,
        spec: &MirrorFlowSpec,
        now_ms: i64,
        tracker: &mut LatencyTracker,
        metrics: &WorkerMetrics,
    ) -> Vec<Error> {
        let mut errors = Vec::new();
        let sends =
            emissions(spec, now_ms)
                .into_iter()
                .map(|(cluster, hb)| {
                    let side = match cluster {
                        Cluster::Source => &self.source,
                        Cluster::Target => &self.target,
                    };
                    (cluster, side, hb)
                })
                .filter(|(_, side, _)| side.topic_ready)
                .map(|(cluster, side, hb)| async move {
                    (cluster, side, write(&side.producer, &hb).await)
                });
        for (cluster, side, result) in futures::future::join_all(sends).await {
            let outcome = if result.is_ok() { "written" } else { "failed" };
            metrics
                .heartbeats
                .with_label_values(&[cluster.as_str(), outcome])
                .inc();
            match result {
                Ok(()) if cluster == Cluster::Source => tracker.emitted(now_ms),
                Ok(()) => {}
                Err(e) => errors.push(e.context(format!(
                    "cannot write heartbeats to topic {HEARTBEATS_TOPIC} on {} cluster {}",
                    cluster.as_str(),
                    side.alias
                ))),
            }
        }
        errors
    }
}

impl Side {
    /// Creates its `heartbeats` topic unless it exists, with a metadata and an admin client
    /// made for the call and dropped after: a session needs them once, and kept they idled
    /// with their threads and connections (about 3 MiB for both clusters').
    async fn ensure_topic(&self) -> Result<(), ClientError> {
        let alias = &self.alias;
        let what = |c: &str| format!("cluster {alias}: heartbeat {c}");
        let ctx = LogContext::new(alias);
        let meta = topics::meta_client(&self.props, ctx.clone()).context_with(|| what("client"))?;
        let admin = topics::admin_client(&self.props, ctx).context_with(|| what("admin client"))?;
        let topics = [HEARTBEATS_TOPIC.to_string()];
        let result = topics::ensure_compacted(
            &meta,
            &admin,
            &topics,
            alias,
            self.replication_factor,
            TIMEOUT,
        )
        .await;
        // Destroying a librdkafka client joins its threads: not on a runtime thread.
        let _ = crate::kafka::blocking(move || drop((meta, admin))).await;
        result
    }
}

/// Writes one heartbeat to partition 0 (MM2: one partition, the heartbeat's timestamp as
/// the record's).
async fn write(producer: &EventProducer, hb: &Heartbeat) -> Result<(), Error> {
    let key = hb.encode_key().map_err(|e| Error::Record(e.to_string()))?;
    let value = hb
        .encode_value()
        .map_err(|e| Error::Record(e.to_string()))?;
    let record = Outgoing {
        topic: HEARTBEATS_TOPIC,
        partition: Some(0),
        key: Some(&key),
        value: Some(&value),
        timestamp: Some(hb.timestamp_ms),
        headers: None,
    };
    match producer.send_all(&[record], TIMEOUT).await.pop() {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(ClientError::from(e).into()),
        None => Err(ClientError::Client("no delivery report".into()).into()),
    }
}

/// The next replica read on the target, as `(key, value)`; pending while nothing is read.
async fn next_replica(session: &Option<Session>) -> Result<(Vec<u8>, Vec<u8>), ClientError> {
    match session {
        Some(s) if s.assigned => loop {
            match s.reader.recv().await {
                Ok(m) => {
                    return Ok((
                        m.key().unwrap_or_default().to_vec(),
                        m.payload().unwrap_or_default().to_vec(),
                    ))
                }
                // librdkafka looks up the coordinator of the reader's group.id, which a
                // principal without Describe on that group is refused; the reader is
                // assigned, never in the group, and reads on (docs/SECURITY.md).
                Err(KafkaError::MessageConsumption(RDKafkaErrorCode::GroupAuthorizationFailed)) => {
                }
                Err(e) => {
                    return Err(ClientError::from(e).context(format!("reading {}", s.replica_topic)))
                }
            }
        },
        _ => std::future::pending().await,
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The status of the measurement at `now_ms`.
pub fn report(tracker: &LatencyTracker, now_ms: i64, error: Option<&str>) -> ReplicationLatency {
    ReplicationLatency {
        last_millis: tracker.current(now_ms),
        p99_millis: tracker.p99(now_ms),
        last_seen_time: tracker
            .last_seen()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map(Time),
        last_error: error.map(str::to_string),
    }
}

impl HeartbeatRunner {
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tracker = LatencyTracker::default();
        let mut session: Option<Session> = None;
        let mut error: Option<String> = None;
        loop {
            let spec = self.spec.borrow_and_update().clone();
            let Some(every) = spec.heartbeats.interval() else {
                if session.take().is_some() {
                    info!("heartbeats off (spec.heartbeats.intervalSeconds: 0, or the flow is failed over)");
                }
                tracker = LatencyTracker::default();
                self.state.send_replace(None);
                // No value rather than a stale one (NaN: no alert fires, graphs show a gap).
                self.metrics.latency_last.set(f64::NAN);
                tokio::select! {
                    _ = shutdown.as_mut() => return,
                    r = self.spec.changed() => if r.is_err() { return },
                }
                continue;
            };
            if session
                .as_ref()
                .is_some_and(|s| s.key != Session::key_of(&spec))
            {
                session = None;
                tracker = LatencyTracker::default();
            }
            // As text: the status shows it, and a repeated error is logged once.
            let result = self
                .beat(&spec, &mut session, &mut tracker)
                .await
                .map_err(|e| e.to_string());
            match &result {
                Err(e) if error.as_ref() != Some(e) => warn!("heartbeats: {e}"),
                Ok(()) if error.is_some() => info!("heartbeats flow again"),
                _ => {}
            }
            if result.is_err()
                && session
                    .as_ref()
                    .is_some_and(|s| s.built.elapsed() >= REBUILD_AFTER)
            {
                session = None;
            }
            error = result.err();
            self.publish(&tracker, error.as_deref());
            let next = tokio::time::Instant::now() + every;
            loop {
                tokio::select! {
                    _ = shutdown.as_mut() => return,
                    _ = tokio::time::sleep_until(next) => break,
                    r = self.spec.changed() => { if r.is_err() { return } break }
                    cluster = crate::kafka::secrets::rotated(&mut self.secrets) => {
                        info!("heartbeats: the {cluster} cluster's Secrets changed; reconnecting");
                        session = None;
                        break;
                    }
                    r = next_replica(&session) => {
                        match r {
                            Ok((key, value)) => self.on_replica(&spec, &key, &value, &mut tracker),
                            Err(e) => {
                                let e = e.to_string();
                                if error.as_ref() != Some(&e) {
                                    warn!("heartbeats: {e}");
                                }
                                error = Some(e);
                            }
                        }
                        self.publish(&tracker, error.as_deref());
                    }
                }
            }
        }
    }

    /// One heartbeat: clients, topics, the replica reader, then the writes.
    async fn beat(
        &self,
        spec: &MirrorFlowSpec,
        session: &mut Option<Session>,
        tracker: &mut LatencyTracker,
    ) -> Result<(), Error> {
        if session.is_none() {
            *session = Some(Session::connect(
                spec,
                &self.reader_group,
                &self.secrets_dir,
            )?);
        }
        let s = session.as_mut().expect("connected above");
        let mut errors: Vec<Error> = s.prepare().await.into_iter().map(Error::from).collect();
        errors.extend(s.emit(spec, now_ms(), tracker, &self.metrics).await);
        if spec.paused {
            // Nothing is replicated while paused: a missing replica is no latency.
            tracker.forget_pending();
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.swap_remove(0)),
            _ => Err(Error::Partial(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }

    fn on_replica(
        &self,
        spec: &MirrorFlowSpec,
        key: &[u8],
        value: &[u8],
        tracker: &mut LatencyTracker,
    ) {
        match Heartbeat::decode(key, value) {
            Ok(hb) if measures_flow(&hb, &spec.source.alias) => {
                let l = tracker.seen(hb.timestamp_ms, now_ms());
                self.metrics.latency.observe(l as f64 / 1000.0);
            }
            Ok(_) => {}
            // Someone else's record in a heartbeats topic: not ours to judge.
            Err(e) => tracing::debug!("not a heartbeat: {e}"),
        }
    }

    fn publish(&self, tracker: &LatencyTracker, error: Option<&str>) {
        let r = report(tracker, now_ms(), error);
        if let Some(ms) = r.last_millis {
            self.metrics.latency_last.set(ms as f64 / 1000.0);
        }
        self.state.send_replace(Some(r));
    }
}
