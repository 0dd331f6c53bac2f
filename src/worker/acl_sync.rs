//! The topic ACL sync (`spec.syncTopicAcls`): worker 0 copies the source's ALLOW bindings on
//! replicated topics to their target topics every `topics.refreshIntervalSeconds` (rules in
//! [`crate::kafka::acl`]).
//!
//! ACLs carry no owner, so the bindings this flow created are remembered in a compacted topic
//! on the target, `mirrorflow-acls.<namespace>.<flow>.internal` (key: the binding as JSON;
//! a tombstone forgets it). A binding is recorded *before* it is created, and forgotten only
//! after it was deleted: a crash in between can leave a record of a binding that does not
//! exist (harmless: it is created again or its delete is a no-op), never a created binding
//! the flow would not remove. Bindings that were on the target before are never touched.
//!
//! A failed sync leaves the target as it is and reports the error (status `lastError`,
//! `mirrorflow_worker_topic_acl_sync_errors_total`); the next one starts over with fresh
//! clients. A good sync's clients serve the next one until a cluster's spec or its mounted
//! Secrets change (`kafka::secrets`, as for the engine and the heartbeats).

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prometheus::{IntCounter, IntGaugeVec, Opts, Registry};
use rdkafka::admin::AdminClient;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::{ClusterSpec, MirrorFlowSpec, TopicAclSync};
use crate::kafka::acl::{self, plan, target_acl, TopicAcl};
use crate::kafka::config::client_properties;
use crate::kafka::context::LogContext;
use crate::kafka::error::Context as _;
use crate::kafka::secrets::FlowSecrets;
use crate::kafka::tail::TopicTail;
use crate::kafka::topics::ensure_store_topic;
use crate::kafka::Error as KafkaError;
use crate::worker::error::Error;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// Bound of each cluster call.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The topic remembering the bindings a flow created, on the target.
pub fn acl_store_topic(namespace: &str, flow: &str) -> String {
    format!("mirrorflow-acls.{namespace}.{flow}.internal")
}

/// One result per binding of an ACL write, or the request's failure as a whole.
pub type AclResults = Result<Vec<Result<(), KafkaError>>, KafkaError>;

/// What a sync needs from the clusters (librdkafka on real clusters; a fake in tests).
/// Blocking.
pub trait AclClusters {
    /// The source's topics.
    fn source_topics(&self) -> Result<Vec<String>, KafkaError>;
    /// The source's topic bindings.
    fn source_acls(&self) -> Result<Vec<TopicAcl>, KafkaError>;
    /// The target's topic bindings.
    fn target_acls(&self) -> Result<Vec<TopicAcl>, KafkaError>;
    /// Creates bindings on the target; one result per binding.
    fn create(&self, acls: &[TopicAcl]) -> AclResults;
    /// Deletes exactly these bindings on the target; one result per binding.
    fn delete(&self, acls: &[TopicAcl]) -> AclResults;
}

/// Where the flow remembers the bindings it created. Blocking.
pub trait CreatedStore {
    /// Every binding recorded as created.
    fn load(&mut self) -> Result<BTreeSet<TopicAcl>, Error>;
    /// Records (`created`) or forgets a binding, durably (acknowledged) before returning.
    fn record(&mut self, acl: &TopicAcl, created: bool) -> Result<(), Error>;
}

/// The counts of one good sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncCounts {
    pub synced: usize,
    pub created_by_flow: usize,
    pub skipped: usize,
    pub created_now: usize,
    pub deleted_now: usize,
}

/// One sync. `created` is the store's content, loaded on first use and kept up to date.
pub fn sync_once(
    spec: &MirrorFlowSpec,
    clusters: &dyn AclClusters,
    store: &mut dyn CreatedStore,
    created: &mut Option<BTreeSet<TopicAcl>>,
) -> Result<SyncCounts, Error> {
    let filter = TopicFilter::new(spec)?;
    let replicated = |t: &str| filter.decide(t) == TopicDecision::Replicate;
    let topics: Vec<String> = clusters
        .source_topics()
        .context_with(|| format!("source cluster {}", spec.source.alias))?
        .into_iter()
        .filter(|t| replicated(t))
        .collect();
    let source = clusters
        .source_acls()
        .context_with(|| format!("source cluster {}", spec.source.alias))?;
    let on_target: BTreeSet<TopicAcl> = clusters
        .target_acls()
        .context_with(|| format!("target cluster {}", spec.target.alias))?
        .into_iter()
        .collect();
    if created.is_none() {
        *created = Some(store.load()?);
    }
    let mine = created.as_mut().expect("loaded");
    let mut desired = BTreeSet::new();
    let mut skipped = 0usize;
    for b in &source {
        match target_acl(
            b,
            &spec.replication_policy,
            &spec.source.alias,
            &replicated,
            &topics,
        ) {
            Ok(t) => {
                desired.insert(t);
            }
            // Only bindings on replicated topics count as skipped; others are not ours.
            Err(acl::Skip::NotReplicated) => {}
            Err(_) => skipped += 1,
        }
    }
    let mut p = plan(&desired, skipped, &on_target, mine);
    // librdkafka 2.12 drops DescribeAcls' error code: a cluster without an authorizer, or a
    // mirror without DESCRIBE on it, answers like a cluster without ACLs. Never take that
    // as "every source binding is gone".
    let withheld = if source.is_empty() && !p.delete.is_empty() {
        std::mem::take(&mut p.delete).len()
    } else {
        0
    };
    let mut errors = Vec::new();
    let mut to_create = Vec::new();
    for b in &p.create {
        // Recorded first: a crash must never leave a created binding we would not remove.
        if !mine.contains(b) {
            store.record(b, true)?;
            mine.insert(b.clone());
        }
        to_create.push(b.clone());
    }
    let mut created_now = 0;
    for r in clusters
        .create(&to_create)
        .context_with(|| format!("target cluster {}", spec.target.alias))?
    {
        match r {
            Ok(()) => created_now += 1,
            Err(e) => errors.push(e.to_string()),
        }
    }
    let mut deleted_now = 0;
    let results = clusters
        .delete(&p.delete)
        .context_with(|| format!("target cluster {}", spec.target.alias))?;
    for (b, r) in p.delete.iter().zip(results) {
        match r {
            Ok(()) => {
                store.record(b, false)?;
                mine.remove(b);
                deleted_now += 1;
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if withheld > 0 {
        errors.push(format!(
            "source cluster {} lists no topic ACLs at all (no authorizer, or no DESCRIBE permission on the cluster: librdkafka reports both as an empty answer); the {withheld} binding(s) this flow created on the target are kept until it lists any",
            spec.source.alias
        ));
    }
    if !errors.is_empty() {
        return Err(Error::Partial(format!(
            "{} of {} ACL changes failed: {}",
            errors.len(),
            p.create.len() + p.delete.len(),
            errors.join("; ")
        ))
        .context(format!("target cluster {}", spec.target.alias)));
    }
    Ok(SyncCounts {
        synced: p.synced,
        created_by_flow: p.created_by_flow,
        skipped: p.skipped,
        created_now,
        deleted_now,
    })
}

/// The clusters through librdkafka.
pub struct KafkaClusters {
    source: AdminClient<LogContext>,
    target: AdminClient<LogContext>,
    timeout: Duration,
}

impl KafkaClusters {
    /// Admin clients from the clusters' client configs, logging under the clusters' aliases.
    /// They do not report into the connection health (as the heartbeat clients): they live
    /// from one sync to the next, and a problem recorded by a client without statistics
    /// would stay until it is dropped. The engine's clients report both clusters; a sync's
    /// own failure is in `status.topicAcls.lastError`.
    pub fn new(
        source: (&ClientConfig, &str),
        target: (&ClientConfig, &str),
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        Ok(Self {
            source: source
                .0
                .create_with_context(LogContext::new(source.1))
                .context("source admin client")?,
            target: target
                .0
                .create_with_context(LogContext::new(target.1))
                .context("target admin client")?,
            timeout,
        })
    }
}

impl AclClusters for KafkaClusters {
    fn source_topics(&self) -> Result<Vec<String>, KafkaError> {
        let md = self
            .source
            .inner()
            .fetch_metadata(None, self.timeout)
            .context("list topics")?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.name().to_string())
            .collect())
    }
    fn source_acls(&self) -> Result<Vec<TopicAcl>, KafkaError> {
        acl::describe_topic_acls(&self.source, self.timeout)
    }
    fn target_acls(&self) -> Result<Vec<TopicAcl>, KafkaError> {
        acl::describe_topic_acls(&self.target, self.timeout)
    }
    fn create(&self, acls: &[TopicAcl]) -> AclResults {
        acl::create_topic_acls(&self.target, acls, self.timeout)
    }
    fn delete(&self, acls: &[TopicAcl]) -> AclResults {
        acl::delete_topic_acls(&self.target, acls, self.timeout)
    }
}

/// The created bindings in the compacted store topic on the target.
pub struct KafkaStore {
    config: ClientConfig,
    topic: String,
    producer: BaseProducer,
    timeout: Duration,
    ensured: bool,
    /// `spec.internalTopics.replicationFactor`.
    pub replication_factor: Option<i32>,
}

impl KafkaStore {
    /// A store in `topic` with the target's client config; the topic is created (1
    /// partition, compacted) by the first record, so a flow that created nothing has none.
    pub fn new(target: &ClientConfig, topic: &str, timeout: Duration) -> Result<Self, KafkaError> {
        let mut c = target.clone();
        c.set("acks", "all").set("enable.idempotence", "true");
        Ok(Self {
            producer: c.create().context("target cluster: ACL store producer")?,
            config: target.clone(),
            topic: topic.to_string(),
            timeout,
            ensured: false,
            replication_factor: None,
        })
    }

    fn ensure(&mut self) -> Result<(), KafkaError> {
        if !self.ensured {
            // Blocking context: the admin future is driven by librdkafka's own thread.
            futures::executor::block_on(ensure_store_topic(
                &self.config,
                &self.topic,
                self.replication_factor,
                self.timeout,
            ))?;
            self.ensured = true;
        }
        Ok(())
    }
}

impl CreatedStore for KafkaStore {
    fn load(&mut self) -> Result<BTreeSet<TopicAcl>, Error> {
        // A missing topic reads as empty; it is created by the first record.
        let mut tail = TopicTail::new(&self.config, &self.topic, "target cluster")?;
        let mut out = BTreeSet::new();
        let mut bad = None;
        tail.catch_up(self.timeout, |m| {
            use rdkafka::Message;
            let Some(key) = m.key() else { return };
            match serde_json::from_slice::<TopicAcl>(key) {
                Ok(b) if m.payload().is_some() => {
                    out.insert(b);
                }
                Ok(b) => {
                    out.remove(&b);
                }
                Err(e) => bad = Some(format!("{} offset {}: {e}", self.topic, m.offset())),
            }
        })?;
        // Guessing could delete a binding that is not ours: refuse.
        if let Some(e) = bad {
            return Err(Error::Record(format!(
                "ACL store record does not decode: {e}"
            )));
        }
        Ok(out)
    }

    fn record(&mut self, acl: &TopicAcl, created: bool) -> Result<(), Error> {
        self.ensure()?;
        let key = serde_json::to_vec(acl).map_err(|e| Error::Record(e.to_string()))?;
        let value: &[u8] = b"{\"createdByFlow\":true}";
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic).key(&key);
        if created {
            rec = rec.payload(value);
        }
        self.producer
            .send(rec)
            .map_err(|(e, _)| e)
            .context_with(|| format!("write ACL store {}", self.topic))?;
        Ok(crate::kafka::producer::flush(&self.producer, self.timeout)
            .context_with(|| format!("write ACL store {}", self.topic))?)
    }
}

/// `mirrorflow_worker_topic_acls{state}` and `mirrorflow_worker_topic_acl_sync_errors_total`.
#[derive(Clone)]
pub struct AclMetrics {
    pub bindings: IntGaugeVec,
    pub errors: IntCounter,
}

impl AclMetrics {
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let bindings = IntGaugeVec::new(
            Opts::new(
                "mirrorflow_worker_topic_acls",
                "Topic ACL bindings after the last good sync: synced (mirrored on the target), created_by_flow, skipped (DENY, WRITE, ...)",
            ),
            &["state"],
        )?;
        let errors = IntCounter::new(
            "mirrorflow_worker_topic_acl_sync_errors_total",
            "Topic ACL syncs that failed",
        )?;
        registry.register(Box::new(bindings.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        Ok(Self { bindings, errors })
    }
}

/// The status after a sync (`Ok`) or a failed one (keeps the last good counts).
pub fn fold_status(
    prev: Option<&TopicAclSync>,
    result: &Result<SyncCounts, Error>,
    now: Timestamp,
) -> TopicAclSync {
    let n = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
    match result {
        Ok(c) => TopicAclSync {
            synced: n(c.synced),
            created_by_flow: n(c.created_by_flow),
            skipped: n(c.skipped),
            last_sync_time: Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now))),
            last_error: None,
        },
        Err(e) => TopicAclSync {
            last_error: Some(e.to_string()),
            ..prev.cloned().unwrap_or_default()
        },
    }
}

/// The clusters' specs a sync's clients are built from.
type ClustersKey = (ClusterSpec, ClusterSpec);

fn clusters_key(spec: &MirrorFlowSpec) -> ClustersKey {
    (spec.source.clone(), spec.target.clone())
}

/// The clients of a sync, kept for the next one: a sync every `topics.refreshIntervalSeconds`
/// would otherwise open (and authenticate) three new connections each time.
struct SyncClients {
    key: ClustersKey,
    clusters: KafkaClusters,
    store: KafkaStore,
}

impl SyncClients {
    /// `kept` if it was built from `spec`'s clusters, else new clients with the Secrets under
    /// `secrets_dir` (`kept` is closed). Blocking.
    fn reuse_or_connect(
        kept: Option<Self>,
        spec: &MirrorFlowSpec,
        secrets_dir: &Path,
        topic: &str,
    ) -> Result<Self, Error> {
        let key = clusters_key(spec);
        if let Some(c) = kept.filter(|c| c.key == key) {
            return Ok(c);
        }
        let config = |c: &ClusterSpec| {
            client_properties(c, secrets_dir)
                .map(|p| p.to_client_config())
                .map_err(Error::from)
        };
        let (source, target) = (config(&spec.source)?, config(&spec.target)?);
        Ok(Self {
            clusters: KafkaClusters::new(
                (&source, &spec.source.alias),
                (&target, &spec.target.alias),
                REQUEST_TIMEOUT,
            )?,
            store: KafkaStore::new(&target, topic, REQUEST_TIMEOUT)?,
            key,
        })
    }
}

/// Closes `clients` off the runtime's threads (librdkafka joins its threads on close).
async fn release(clients: Option<SyncClients>) {
    if let Some(c) = clients {
        let _ = crate::kafka::blocking(move || drop(c)).await;
    }
}

/// Runs the sync on worker 0 until `shutdown`.
pub struct AclSyncRunner {
    pub namespace: String,
    pub flow: String,
    pub secrets_dir: PathBuf,
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// Rotation: the kept clients are closed when a cluster's Secrets change.
    pub secrets: Option<FlowSecrets>,
    pub state: watch::Sender<Option<TopicAclSync>>,
    pub metrics: Option<AclMetrics>,
}

impl AclSyncRunner {
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut clients = None;
        self.run_syncs(&mut clients, shutdown).await;
        release(clients).await;
    }

    async fn run_syncs(
        &mut self,
        clients: &mut Option<SyncClients>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let topic = acl_store_topic(&self.namespace, &self.flow);
        let mut created: Option<BTreeSet<TopicAcl>> = None;
        let mut last_error: Option<Error> = None;
        loop {
            let spec = self.spec.borrow_and_update().clone();
            let every = Duration::from_secs(
                u64::try_from(spec.topics.refresh_interval_seconds.max(1)).unwrap_or(10),
            );
            if spec.sync_topic_acls {
                let result = self.sync(&spec, &topic, &mut created, clients).await;
                match &result {
                    Ok(c) if c.created_now + c.deleted_now > 0 => info!(
                        created = c.created_now,
                        deleted = c.deleted_now,
                        synced = c.synced,
                        "topic ACLs synced"
                    ),
                    Ok(_) => {}
                    // Once per distinct error (a cluster without an authorizer says so on
                    // every sync).
                    Err(e) if last_error.as_ref() != Some(e) => {
                        warn!(reason = e.reason(), "topic ACL sync failed: {e}")
                    }
                    Err(_) => {}
                }
                last_error = result.as_ref().err().cloned();
                if let Some(m) = &self.metrics {
                    match &result {
                        Ok(c) => {
                            m.bindings
                                .with_label_values(&["synced"])
                                .set(c.synced as i64);
                            m.bindings
                                .with_label_values(&["created_by_flow"])
                                .set(c.created_by_flow as i64);
                            m.bindings
                                .with_label_values(&["skipped"])
                                .set(c.skipped as i64);
                        }
                        Err(_) => m.errors.inc(),
                    }
                }
                let prev = self.state.borrow().clone();
                self.state.send_replace(Some(fold_status(
                    prev.as_ref(),
                    &result,
                    Timestamp::now(),
                )));
            } else {
                self.state.send_replace(None);
                release(clients.take()).await;
            }
            tokio::select! {
                _ = shutdown.as_mut() => return,
                _ = tokio::time::sleep(every) => {}
                r = self.spec.changed() => if r.is_err() { return },
                cluster = crate::kafka::secrets::rotated(&mut self.secrets) => {
                    info!("topic ACL sync: the {cluster} cluster's Secrets changed; reconnecting");
                    release(clients.take()).await;
                }
            }
        }
    }

    async fn sync(
        &self,
        spec: &MirrorFlowSpec,
        topic: &str,
        created: &mut Option<BTreeSet<TopicAcl>>,
        clients: &mut Option<SyncClients>,
    ) -> Result<SyncCounts, Error> {
        let (spec, mut taken) = (spec.clone(), created.take());
        let (topic, kept) = (topic.to_string(), clients.take());
        let secrets_dir = self.secrets_dir.clone();
        let (result, back, kept) = crate::kafka::run_blocking(move || {
            let mut c = match SyncClients::reuse_or_connect(kept, &spec, &secrets_dir, &topic) {
                Ok(c) => c,
                Err(e) => return (Err(e), taken, None),
            };
            c.store.replication_factor = spec.internal_topics.replication_factor;
            let r = sync_once(&spec, &c.clusters, &mut c.store, &mut taken);
            // After a failure the next sync starts over with fresh clients: a connection may
            // be wedged, or a credential changed in a way the Secret files do not show.
            let kept = r.is_ok().then_some(c);
            (r, taken, kept)
        })
        .await?;
        *created = back;
        *clients = kept;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::acl::tests::acl;
    use crate::kafka::acl::{Operation::*, PatternType::*, Permission::*};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        topics: Vec<String>,
        source: Mutex<Vec<TopicAcl>>,
        target: Mutex<BTreeSet<TopicAcl>>,
    }

    impl AclClusters for Fake {
        fn source_topics(&self) -> Result<Vec<String>, KafkaError> {
            Ok(self.topics.clone())
        }
        fn source_acls(&self) -> Result<Vec<TopicAcl>, KafkaError> {
            Ok(self.source.lock().unwrap().clone())
        }
        fn target_acls(&self) -> Result<Vec<TopicAcl>, KafkaError> {
            Ok(self.target.lock().unwrap().iter().cloned().collect())
        }
        fn create(&self, acls: &[TopicAcl]) -> AclResults {
            let mut t = self.target.lock().unwrap();
            Ok(acls
                .iter()
                .map(|a| {
                    t.insert(a.clone());
                    Ok(())
                })
                .collect())
        }
        fn delete(&self, acls: &[TopicAcl]) -> AclResults {
            let mut t = self.target.lock().unwrap();
            Ok(acls
                .iter()
                .map(|a| {
                    t.remove(a);
                    Ok(())
                })
                .collect())
        }
    }

    #[derive(Default)]
    struct MemStore(Vec<(TopicAcl, bool)>);

    impl CreatedStore for MemStore {
        fn load(&mut self) -> Result<BTreeSet<TopicAcl>, Error> {
            let mut out = BTreeSet::new();
            for (a, c) in &self.0 {
                if *c {
                    out.insert(a.clone());
                } else {
                    out.remove(a);
                }
            }
            Ok(out)
        }
        fn record(&mut self, acl: &TopicAcl, created: bool) -> Result<(), Error> {
            self.0.push((acl.clone(), created));
            Ok(())
        }
    }

    fn spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1"},
            "target": {"alias": "dc2", "bootstrapServers": "b:1"},
            "topics": {"include": ["orders.*", "pay"]},
        }))
        .unwrap()
    }

    #[test]
    fn sync_copies_renames_and_removes_only_its_own_bindings() {
        let fake = Fake {
            topics: vec!["orders".into(), "pay".into(), "hr".into()],
            ..Default::default()
        };
        let pre_existing = acl(Literal, "dc1.pay", Read, Allow);
        *fake.source.lock().unwrap() = vec![
            acl(Literal, "orders", All, Allow),
            acl(Prefixed, "orders", Describe, Allow),
            acl(Literal, "orders", Write, Allow),
            acl(Literal, "orders", Read, Deny),
            acl(Literal, "pay", Read, Allow),
            acl(Literal, "hr", Read, Allow),
        ];
        fake.target.lock().unwrap().insert(pre_existing.clone());
        let mut store = MemStore::default();
        let mut created = None;
        let c = sync_once(&spec(), &fake, &mut store, &mut created).unwrap();
        assert_eq!(
            (c.synced, c.created_by_flow, c.skipped, c.created_now),
            (3, 2, 2, 2)
        );
        let want: BTreeSet<TopicAcl> = [
            acl(Literal, "dc1.orders", Read, Allow),
            acl(Prefixed, "dc1.orders", Describe, Allow),
            pre_existing.clone(),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            *fake.target.lock().unwrap(),
            want,
            "renamed, ALL as READ, no WRITE, no DENY, no hr"
        );
        // Idempotent.
        let again = sync_once(&spec(), &fake, &mut store, &mut created).unwrap();
        assert_eq!((again.created_now, again.deleted_now), (0, 0));

        // The source answers with no ACLs at all (what librdkafka makes of an error): kept.
        fake.source.lock().unwrap().clear();
        let e = sync_once(&spec(), &fake, &mut store, &mut created).unwrap_err();
        assert_eq!(e.reason(), "Partial");
        let e = e.to_string();
        assert!(
            e.starts_with("target cluster dc2: 1 of ") && e.contains("lists no topic ACLs at all"),
            "{e}"
        );
        assert_eq!(fake.target.lock().unwrap().len(), 3, "nothing deleted");
        // The source bindings go (others remain): the flow removes what it created, keeps
        // what was there.
        *fake.source.lock().unwrap() = vec![acl(Literal, "hr", Read, Allow)];
        // A restarted worker reloads what it created from the store.
        let mut created = None;
        let c = sync_once(&spec(), &fake, &mut store, &mut created).unwrap();
        assert_eq!((c.deleted_now, c.synced), (2, 0));
        assert_eq!(
            *fake.target.lock().unwrap(),
            [pre_existing].into_iter().collect()
        );
        assert_eq!(
            store.load().unwrap(),
            BTreeSet::new(),
            "forgotten after deletion"
        );
        // Recorded before creation, forgotten after deletion.
        let order: Vec<bool> = store.0.iter().map(|(_, c)| *c).collect();
        assert_eq!(order, vec![true, true, false, false]);
    }

    #[test]
    fn clients_are_kept_while_the_clusters_specs_stay_the_same() {
        // Changed Secret contents close the kept clients through `kafka::secrets`' watcher
        // (its own test covers a kubelet swap); here, what the spec changes.
        let secured = |bootstrap: &str, config: serde_json::Value, creds: &str| {
            let spec: MirrorFlowSpec = serde_json::from_value(serde_json::json!({
                "source": {"alias": "dc1", "bootstrapServers": bootstrap, "config": config},
                "target": {"alias": "dc2", "bootstrapServers": "b:1",
                           "tls": {"ca": {"secretName": "ca", "key": "ca.crt"}},
                           "sasl": {"mechanism": "SCRAM-SHA-512",
                                    "credentials": {"secretName": creds}}},
                "topics": {"include": ["orders"]},
            }))
            .unwrap();
            spec
        };
        let base = secured("a:1", serde_json::json!({}), "creds");
        let key = clusters_key(&base);
        let mut other_topics = base.clone();
        other_topics.topics.include = vec!["pay".into()];
        assert_eq!(clusters_key(&other_topics), key, "not a cluster change");
        for changed in [
            secured("a:2", serde_json::json!({}), "creds"),
            secured("a:1", serde_json::json!({"client.rack": "r1"}), "creds"),
            secured("a:1", serde_json::json!({}), "creds-2"),
        ] {
            assert_ne!(clusters_key(&changed), key);
        }
    }

    #[test]
    fn failed_sync_keeps_the_last_counts_and_reports_the_error() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let good = fold_status(
            None,
            &Ok(SyncCounts {
                synced: 3,
                created_by_flow: 2,
                skipped: 1,
                created_now: 2,
                deleted_now: 0,
            }),
            now,
        );
        assert_eq!((good.synced, good.created_by_flow, good.skipped), (3, 2, 1));
        assert!(good.last_error.is_none() && good.last_sync_time.is_some());
        let bad = fold_status(
            Some(&good),
            &Err(Error::Partial("boom".into()).context("target cluster dc2")),
            now,
        );
        assert_eq!(bad.synced, 3);
        assert_eq!(bad.last_error.as_deref(), Some("target cluster dc2: boom"));
        assert_eq!(bad.last_sync_time, good.last_sync_time);
    }
}
