//! The `MirrorFlow` custom resource: one source→target replication flow.

// kube's derive repeats `printcolumn(...)` keys, which clippy mistakes for duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;

/// A Kafka cross-cluster replication flow: records from topics on `source` are mirrored to
/// `target`, with offset validation (DataLoss / TopicReset detection) and offset syncs so that
/// consumer groups can fail over (see OffsetCheckpoint).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mirrorflow.io",
    version = "v1alpha1",
    kind = "MirrorFlow",
    plural = "mirrorflows",
    doc = "A Kafka cross-cluster replication flow: records of the selected topics on spec.source are mirrored to spec.target by worker pods, with keys, values, headers, timestamps and partitions. Offset validation stops a partition whose records were deleted before they were replicated (DataLoss) or whose topic was recreated (TopicReset) and shows it here; spec.reset clears it. Offset syncs let OffsetCheckpoints translate consumer-group offsets for failover.",
    namespaced,
    status = "MirrorFlowStatus",
    shortname = "mf",
    shortname = "mflow",
    category = "kafka",
    derive = "PartialEq",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Workers",
        type_ = "string",
        json_path = ".status.workersSummary",
        description = "workers replicating (paused, under spec.paused)/desired"
    ),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.failedPartitions",
        description = "partitions stopped by DataLoss or TopicReset"
    ),
    printcolumn(
        name = "Lag",
        type_ = "integer",
        json_path = ".status.replicationLag.records",
        description = "records not yet replicated"
    ),
    printcolumn(
        name = "Latency(ms)",
        type_ = "integer",
        json_path = ".status.replicationLatency.lastMillis",
        description = "heartbeat produced on the source → seen on the target, milliseconds"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(cel, validation = Rule::new("self.source.alias != self.target.alias").message("source.alias and target.alias must differ"))]
// A running flow's history (positions, offset syncs, target topic names) belongs to these
// fields: changing them would apply one cluster's positions to another. A new MirrorFlow is
// a new history.
#[x_kube(validation = Rule::new("self.source.alias == oldSelf.source.alias").field_path(".source.alias").reason(Reason::FieldValueForbidden).message("spec.source.alias cannot change on an existing flow (its positions and offset syncs belong to the old source); create a new MirrorFlow instead"))]
#[x_kube(validation = Rule::new("self.source.bootstrapServers == oldSelf.source.bootstrapServers").field_path(".source.bootstrapServers").reason(Reason::FieldValueForbidden).message("spec.source.bootstrapServers cannot change on an existing flow (positions of one cluster would be applied to another); create a new MirrorFlow instead"))]
#[x_kube(validation = Rule::new("self.target.alias == oldSelf.target.alias").field_path(".target.alias").reason(Reason::FieldValueForbidden).message("spec.target.alias cannot change on an existing flow (it names the offset-syncs topic and cycle detection); create a new MirrorFlow instead"))]
#[x_kube(validation = Rule::new("!has(self.source.replicationFactor)").field_path(".source.replicationFactor").reason(Reason::FieldValueForbidden).message("spec.source.replicationFactor is not used: mirrorflow creates no topics on the source; set spec.target.replicationFactor (target topics) or spec.internalTopics.replicationFactor"))]
#[x_kube(validation = Rule::new("!has(self.target.startFrom)").field_path(".target.startFrom").reason(Reason::FieldValueForbidden).message("spec.target.startFrom is not used: positions are taken on the source; set spec.source.startFrom"))]
#[x_kube(validation = Rule::new("has(self.replicationPolicy) == has(oldSelf.replicationPolicy) && (!has(self.replicationPolicy) || self.replicationPolicy == oldSelf.replicationPolicy)").field_path(".replicationPolicy").reason(Reason::FieldValueForbidden).message("spec.replicationPolicy cannot change on an existing flow (target topic names and positions would no longer match); create a new MirrorFlow instead"))]
#[serde(rename_all = "camelCase")]
pub struct MirrorFlowSpec {
    /// The cluster records are read from.
    pub source: ClusterSpec,
    /// The cluster records are written to; progress, offset syncs and checkpoints live here.
    pub target: ClusterSpec,
    /// Which source topics are replicated.
    #[serde(default)]
    pub topics: TopicSelector,
    /// How target topic names are derived from source topic names.
    #[serde(default)]
    pub replication_policy: ReplicationPolicy,
    /// Where a partition that was never replicated before starts.
    #[serde(default)]
    pub start_from: StartFrom,
    /// Detection of records lost to retention (DataLoss) and recreated topics (TopicReset).
    #[serde(default)]
    pub offset_validation: OffsetValidation,
    /// Delivery guarantee on the target.
    #[serde(default)]
    pub delivery: Delivery,
    /// Offset-sync emission (the upstream→downstream offset map used for checkpoints).
    #[serde(default)]
    pub offset_syncs: OffsetSyncs,
    /// MirrorMaker 2 heartbeats (on by default), and the replication latency measured with
    /// them. Worker 0 writes a heartbeat into the `heartbeats` topic of the target (key
    /// source, target alias) and of the source (key target, source alias), as MM2's
    /// dedicated mode does for a flow; the source's heartbeats topics are replicated to the
    /// target as `<sourceAlias><separator>heartbeats` whatever `topics` selects (also under
    /// Identity), never one that came from the target. The time from a heartbeat's
    /// timestamp until worker 0 reads its replica on the target is
    /// `status.replicationLatency`. Writing to the source needs WRITE (and CREATE until the
    /// topic exists) on its `heartbeats` topic.
    #[serde(default)]
    pub heartbeats: Heartbeats,
    /// The continuous integrity audit (on by default): see `Audit`.
    #[serde(default)]
    pub audit: super::Audit,
    /// Copy topic configs (retention.ms, cleanup.policy, max.message.bytes, ...) from source
    /// topics to target topics: when a target topic is created, and again on every refresh
    /// (`topics.refreshIntervalSeconds`) for the target topics this flow created (never a
    /// topic that existed before). Only configs set on the source topic itself travel (not
    /// the source brokers' defaults); a config set on a target topic but no longer on its
    /// source topic is deleted there, so the target's default applies. MirrorMaker 2's
    /// cluster-specific exclusions always apply, plus `topicConfigs.exclude`.
    #[serde(default = "defaults::true_")]
    pub sync_topic_configs: bool,
    /// Which topic configs `syncTopicConfigs` leaves alone.
    #[serde(default, skip_serializing_if = "TopicConfigs::is_empty")]
    pub topic_configs: TopicConfigs,
    /// Mirrorflow's own topics on the target: progress, offset syncs, checkpoints, the ACL
    /// and created-topics stores.
    #[serde(default, skip_serializing_if = "InternalTopics::is_empty")]
    pub internal_topics: InternalTopics,
    /// Copy the source's ALLOW ACLs on replicated topics to their target topics, as
    /// MirrorMaker 2's `sync.topic.acls`: literal and prefixed topic patterns renamed by the
    /// replication policy; READ, DESCRIBE and DESCRIBE_CONFIGS copied, ALL copied as READ (so
    /// nobody but the mirror writes the target topics); WRITE, other operations and DENY
    /// never copied. Re-synced every `topics.refreshIntervalSeconds`; an ACL the mirror
    /// created is removed when its source ACL goes. Needs DESCRIBE on the source cluster and
    /// ALTER on the target cluster (Kafka's ACL permissions).
    #[serde(default = "defaults::true_")]
    pub sync_topic_acls: bool,
    /// Stop consuming without losing position.
    #[serde(default)]
    pub paused: bool,
    /// The worker pods.
    #[serde(default)]
    pub workers: WorkersSpec,
    /// Patch this to clear DataLoss / TopicReset failures. A new `id` is a new request; an id
    /// that was already applied is a no-op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetRequest>,
    /// Patch this to fail the consumers over to the target (see `FailoverRequest`): the
    /// report is `status.failover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<super::FailoverRequest>,
}

/// Connection to one Kafka cluster. Secrets are always referenced, never inline.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(cel, validation = Rule::new("!has(self.sasl) || !(self.sasl.mechanism in ['PLAIN', 'OAUTHBEARER']) || has(self.tls)").message("sasl.mechanism PLAIN and OAUTHBEARER send the password or token as clear text: set tls (use SCRAM-SHA-256/512 where TLS is impossible)"))]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Short cluster name used in topic names (e.g. `dc1` → `dc1.orders`); a DNS-1123 label.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub alias: String,
    /// Comma-separated `host:port` list.
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,
    /// TLS settings; absent means plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// SASL authentication; absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<SaslSpec>,
    /// Extra librdkafka client properties (at most 100). Properties mirrorflow owns are
    /// rejected: group.id, enable.auto.commit, auto.offset.reset, isolation.level,
    /// transactional.id, enable.idempotence, enable.gapless.guarantee,
    /// message/delivery/transaction timeouts, bootstrap.servers, and every security property
    /// (security.*, ssl.*, sasl.*, https.*, enable.ssl.certificate.verification,
    /// enable.sasl.oauthbearer.unsecure.jwt), which come from the typed tls and sasl fields so
    /// that certificate verification cannot be switched off unnoticed; and so are values
    /// that break the delivery guarantees (acks other than all, more than 5 requests in
    /// flight, retries=0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100))]
    #[x_kube(validation = Rule::new("self.all(k, !(k.lowerAscii().startsWith('ssl.') || k.lowerAscii().startsWith('ssl_') || k.lowerAscii().startsWith('sasl.') || k.lowerAscii().startsWith('https.') || k.lowerAscii().startsWith('security.') || k.lowerAscii() in ['enable.ssl.certificate.verification', 'enable.sasl.oauthbearer.unsecure.jwt']))").message("config may not set security properties (security.*, ssl.*, sasl.*, https.*, enable.ssl.certificate.verification, enable.sasl.oauthbearer.unsecure.jwt): use the typed tls and sasl fields (tls.insecureSkipVerify for a test cluster)"))]
    pub config: BTreeMap<String, String>,
    /// Target only: replication factor of the target topics the flow creates (at least 1).
    /// Absent: the target brokers' `default.replication.factor` (CreateTopics with -1). A
    /// replication factor below the topic's `min.insync.replicas` can never take a write
    /// (acks=all): the flow reports such a topic (condition `TopicUnwritable`). Changing it
    /// affects topics created afterwards only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32767))]
    pub replication_factor: Option<i32>,
    /// Source only: where partitions without stored progress start, from another mirror's
    /// positions (`mirrorMaker2`) or a failover of the reverse flow (`afterFailover`);
    /// `spec.startFrom` applies to partitions it has no position for. Stored progress always
    /// wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<SourceStart>,
}

/// Positions another mirror left, to take over from without copying again or skipping.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(cel, validation = Rule::new("has(self.mirrorMaker2) != has(self.afterFailover)").message("spec.source.startFrom names where positions come from: set exactly one of mirrorMaker2, afterFailover"))]
#[serde(rename_all = "camelCase")]
pub struct SourceStart {
    /// Take over from a stopped MirrorMaker 2: see `MirrorMaker2Start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_maker2: Option<MirrorMaker2Start>,
    /// Fail back after a failover of the reverse flow: see `AfterFailoverStart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_failover: Option<AfterFailoverStart>,
}

/// Failing back: this flow copies back (source = the reverse flow's target, the new primary)
/// only what was written there after failover `id` of flow `flow` reached Done. Each
/// partition that failover reported starts at the end offset the new primary had then
/// (`targetEnd`, read from the failover's store topic on this flow's source); the others
/// start per `spec.startFrom`. The flow waits, saying why, until that report exists and is
/// Done. Records the old primary (this flow's target) took after the failover's recorded
/// point (`targetHolds`) never reached the new primary: they are counted (read_committed)
/// and reported per partition before anything is written, and copied to `<topic>.diverged`
/// when `copyDiverged`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AfterFailoverStart {
    /// The failed-over flow, `NAMESPACE/NAME`.
    #[schemars(length(min = 3, max = 317))]
    pub flow: String,
    /// The failover's `spec.failover.id`.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    /// Copy the diverged records of each partition to `<topic>.diverged` on the target
    /// (same partition) before this flow writes to the partition.
    #[serde(default)]
    pub copy_diverged: bool,
}

impl AfterFailoverStart {
    /// `(namespace, name)` of `flow`, if it is `NAMESPACE/NAME`.
    pub fn flow_ref(&self) -> Option<(&str, &str)> {
        self.flow
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
    }
}

/// MirrorMaker 2's source positions, read from its Connect offsets topic on the target
/// (keys `["MirrorSourceConnector",{"cluster":<source alias>,"topic":..,"partition":..}]`,
/// values `{"offset":N}`, the last source offset it copied). A partition without stored
/// progress starts at N + 1; one MM2 never copied starts per `spec.startFrom`. Stop MM2
/// before the flow starts: records it copies afterwards are copied again. MM2's source
/// alias must be `spec.source.alias` and its replication policy the flow's (the same target
/// topics).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MirrorMaker2Start {
    /// The Connect offsets topic on the target; absent: `mm2-offsets.<source alias>.internal`
    /// (MM2's dedicated mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    pub offsets_topic: Option<String>,
}

impl MirrorMaker2Start {
    /// The offsets topic MM2 (dedicated mode) keeps for source `alias`, unless named.
    pub fn topic(&self, source_alias: &str) -> String {
        self.offsets_topic
            .clone()
            .unwrap_or_else(|| format!("mm2-offsets.{source_alias}.internal"))
    }
}

impl ClusterSpec {
    /// Every `(secretName, key)` the cluster's connection reads (TLS files, credentials, the
    /// OAUTHBEARER client secret and CA), sorted, without repeats: what the worker mounts
    /// and watches for rotation.
    pub fn secret_keys(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        if let Some(tls) = &self.tls {
            if let Some(ca) = &tls.ca {
                out.push((ca.secret_name.as_str(), ca.key.as_str()));
            }
            if let Some(cc) = &tls.client_cert {
                out.push((cc.secret_name.as_str(), cc.cert_key.as_str()));
                out.push((cc.secret_name.as_str(), cc.key_key.as_str()));
            }
        }
        if let Some(sasl) = &self.sasl {
            if let Some(cr) = &sasl.credentials {
                out.push((cr.secret_name.as_str(), cr.username_key.as_str()));
                out.push((cr.secret_name.as_str(), cr.password_key.as_str()));
            }
            if let Some(o) = &sasl.oauth_bearer {
                out.push((
                    o.client_secret.secret_name.as_str(),
                    o.client_secret.key.as_str(),
                ));
                if let Some(ca) = &o.ca {
                    out.push((ca.secret_name.as_str(), ca.key.as_str()));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// TLS to the brokers. Certificates come from Secrets in the flow's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// CA bundle (PEM) to verify the brokers; absent means the system trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKeyRef>,
    /// Client certificate for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<ClientCertRef>,
    /// FOR TEST CLUSTERS ONLY: do not verify the brokers' certificates or host names. Anyone
    /// on the network path can then impersonate the brokers and read the credentials and
    /// records. The flow gets an `InsecureTls` condition while it is set. Default false:
    /// the certificate chain is verified against `ca` (or the system trust store) and the
    /// broker's host name must match the certificate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

/// A key in a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key inside the Secret.
    #[schemars(length(min = 1))]
    pub key: String,
}

/// A client certificate and key (PEM) in one Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertRef {
    /// Secret name (same namespace), e.g. a `kubernetes.io/tls` Secret.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key holding the certificate.
    #[serde(default = "defaults::tls_crt")]
    pub cert_key: String,
    /// Key holding the private key.
    #[serde(default = "defaults::tls_key")]
    pub key_key: String,
}

/// SASL authentication with credentials from a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(cel, validation = Rule::new("self.mechanism == 'OAUTHBEARER' ? (has(self.oauthBearer) && !has(self.credentials)) : (has(self.credentials) && !has(self.oauthBearer))").message("mechanism OAUTHBEARER takes oauthBearer (and no credentials); PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 take credentials (and no oauthBearer)"))]
#[serde(rename_all = "camelCase")]
pub struct SaslSpec {
    /// SASL mechanism. PLAIN and OAUTHBEARER need `tls`.
    pub mechanism: SaslMechanism,
    /// Secret holding the username and password (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// OIDC client credentials (OAUTHBEARER): librdkafka fetches and refreshes the token from
    /// the token endpoint itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth_bearer: Option<OAuthBearerSpec>,
}

/// SASL mechanisms supported.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAuth 2 bearer tokens from an OIDC token endpoint (client credentials grant).
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl SaslMechanism {
    /// The librdkafka `sasl.mechanism` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// Whether the mechanism sends a reusable secret (password or token) as clear text, so
    /// that it needs TLS.
    pub fn needs_tls(self) -> bool {
        matches!(self, Self::Plain | Self::OAuthBearer)
    }
}

/// OIDC client credentials for SASL/OAUTHBEARER (Confluent Cloud, Redpanda Cloud, Strimzi
/// OAuth, Amazon MSK with an OIDC proxy, ...).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(cel, validation = Rule::new("self.tokenEndpointUrl.startsWith('https://') || self.tokenEndpointUrl.matches('^http://(localhost|127\\\\.0\\\\.0\\\\.1|\\\\[::1\\\\])(:[0-9]+)?(/.*)?$')").message("tokenEndpointUrl must be https:// (http:// only to a loopback address, e.g. a local token proxy)"))]
#[serde(rename_all = "camelCase")]
pub struct OAuthBearerSpec {
    /// The OIDC token endpoint, e.g. `https://idp.example.com/oauth2/token`. Must be
    /// `https://`; `http://` is accepted only for a loopback address (a token proxy in the
    /// same pod), because the client secret travels in the request.
    #[schemars(length(min = 1, max = 2048))]
    pub token_endpoint_url: String,
    /// The OAuth client id (not secret).
    #[schemars(length(min = 1, max = 512))]
    pub client_id: String,
    /// Key in a Secret holding the client secret.
    pub client_secret: SecretKeyRef,
    /// Scope to request, space-separated; absent means the endpoint's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// SASL extensions sent with the token, e.g. Confluent Cloud's `logicalCluster` and
    /// `identityPoolId`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 20))]
    pub extensions: BTreeMap<String, String>,
    /// CA bundle (PEM) to verify the token endpoint; absent means the system trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKeyRef>,
}

/// Username and password keys in a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsRef {
    /// Secret name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key holding the username.
    #[serde(default = "defaults::username")]
    pub username_key: String,
    /// Key holding the password.
    #[serde(default = "defaults::password")]
    pub password_key: String,
}

/// Topic selection by regular expressions (full match, Rust `regex` syntax).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopicSelector {
    /// A topic is replicated when it matches one of these...
    #[serde(default = "defaults::include_all")]
    pub include: Vec<String>,
    /// ...and none of these. Defaults exclude internal topics as MirrorMaker 2 does.
    #[serde(default = "defaults::topic_excludes")]
    pub exclude: Vec<String>,
    /// How often the source is scanned for new topics and partitions.
    #[serde(default = "defaults::topic_refresh_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub refresh_interval_seconds: i32,
}

impl Default for TopicSelector {
    fn default() -> Self {
        Self {
            include: defaults::include_all(),
            exclude: defaults::topic_excludes(),
            refresh_interval_seconds: defaults::topic_refresh_seconds(),
        }
    }
}

/// Topic config sync settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigs {
    /// Config names never copied, set or deleted on target topics, as regular expressions
    /// (full match, e.g. `retention\..*`), in addition to MirrorMaker 2's defaults
    /// (`follower.replication.throttled.replicas`, `leader.replication.throttled.replicas`,
    /// `message.timestamp.*`, `unclean.leader.election.enable`, `min.insync.replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub exclude: Vec<String>,
}

impl TopicConfigs {
    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty()
    }
}

/// Mirrorflow's own topics on the target cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InternalTopics {
    /// Replication factor of the internal topics the flow creates (progress, offset syncs,
    /// checkpoints, the target's heartbeats, the ACL and created-topics stores; the source's
    /// heartbeats topic takes the source brokers' default), at least 1. Absent: the
    /// target brokers' `default.replication.factor`. Affects topics created afterwards only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32767))]
    pub replication_factor: Option<i32>,
}

impl InternalTopics {
    pub fn is_empty(&self) -> bool {
        self.replication_factor.is_none()
    }
}

/// Target topic naming.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationPolicy {
    /// `Prefix`: `<sourceAlias><separator><topic>` (prevents cycles). `Identity`: same name.
    #[serde(rename = "type", default)]
    pub type_: ReplicationPolicyType,
    /// Separator for `Prefix`; under `Identity` it still names heartbeats topics
    /// (`<sourceAlias><separator>heartbeats`), as MirrorMaker 2.
    #[serde(default = "defaults::separator")]
    #[schemars(length(min = 1, max = 8), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    pub separator: String,
}

impl Default for ReplicationPolicy {
    fn default() -> Self {
        Self {
            type_: ReplicationPolicyType::default(),
            separator: defaults::separator(),
        }
    }
}

/// Replication policy kinds.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplicationPolicyType {
    #[default]
    Prefix,
    Identity,
}

/// Start position for partitions with no stored progress.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StartFrom {
    #[default]
    Earliest,
    Latest,
}

/// Offset validation settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OffsetValidation {
    /// When true (default), a known position that is out of range stops that partition with a
    /// DataLoss or TopicReset failure instead of silently jumping. When false, the worker
    /// behaves like MirrorMaker 2 (resets to the earliest offset without reporting).
    #[serde(default = "defaults::true_")]
    pub enabled: bool,
}

impl Default for OffsetValidation {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// Delivery guarantees.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Delivery {
    /// Records and progress commit in one transaction: no loss, no duplicates. Needs a target
    /// that supports transactions.
    #[default]
    ExactlyOnce,
    /// No loss; after a crash, at most one batch window of records is replicated again
    /// (the records not yet covered by acknowledged progress: 40,000 records /
    /// the batches' share of `workers.inFlightMiB`, 40 of 45 MiB by default, per worker).
    AtLeastOnce,
}

/// Offset sync emission.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OffsetSyncs {
    /// Emit an offset sync at least every this many records per partition
    /// (MirrorMaker 2's `offset.lag.max`).
    #[serde(default = "defaults::offset_lag_max")]
    #[schemars(range(min = 1))]
    pub lag_max: i64,
}

impl Default for OffsetSyncs {
    fn default() -> Self {
        Self {
            lag_max: defaults::offset_lag_max(),
        }
    }
}

/// MirrorMaker 2 heartbeats (`MirrorHeartbeatConnector`), emitted by worker 0 in MM2's
/// wire format, as MM2's dedicated mode does for a flow `source->target`: into the
/// target's `heartbeats` topic keyed `(source alias, target alias)` (the flow's own heartbeat
/// connector), and into the source's `heartbeats` topic keyed `(target alias, source alias)`
/// (the connector MM2 runs for the reverse pair even when that flow is disabled). The
/// flow replicates the source's heartbeats topics to the target as
/// `<sourceAlias><separator>heartbeats` whatever `topics` selects (also under the
/// Identity policy, as MM2), never one that came from the target, so
/// `RemoteClusterUtils.upstreamClusters` and `replicationHops` work on the target. Worker 0
/// reads the replicated copies on the target: the time from a heartbeat's timestamp to
/// its arrival there is the flow's replication latency, measured even without
/// application traffic (`status.replicationLatency`, metric
/// `mirrorflow_worker_replication_latency_seconds`). Writing to the source needs WRITE
/// (and CREATE, unless the topic exists) on its `heartbeats` topic.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeats {
    /// Seconds between heartbeats (MirrorMaker 2's `emit.heartbeats.interval.seconds`,
    /// default 1). `0` emits none and measures no latency; heartbeats topics other
    /// emitters write are still replicated.
    #[serde(default = "defaults::heartbeat_interval_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub interval_seconds: i32,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Self {
            interval_seconds: defaults::heartbeat_interval_seconds(),
        }
    }
}

impl Heartbeats {
    /// The emission interval; `None` when heartbeats are off.
    pub fn interval(&self) -> Option<std::time::Duration> {
        u64::try_from(self.interval_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(std::time::Duration::from_secs)
    }
}

/// Worker pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkersSpec {
    /// Number of workers; partitions are split deterministically between them.
    #[serde(default = "defaults::replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: i32,
    /// Compute resources of each worker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Worker image; defaults to the controller's own image. When the operator is installed
    /// with an image allowlist (chart value `workerImageAllowlist`), other images are
    /// refused with an `InvalidSpec` condition: the workers get the flow's Secrets mounted,
    /// so whoever may create flows could otherwise run any image with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Record data each worker holds, in MiB: one 1 MiB fetch, the consumer's prefetch (an
    /// eighth, at most 4 MiB) and, the rest, the batches: records sent to the target and not
    /// yet acknowledged plus the batch being read, each counted with its key, value, headers
    /// and 256 bytes of bookkeeping. It is the term of a worker's memory that grows with load
    /// (peak RSS is about this plus 16-29 MiB with 1,000 partitions, measured), and with
    /// AtLeastOnce the batches' share bounds what a crash may replicate twice (with at most
    /// 40,000 records). Larger copies faster when the target is slow to acknowledge. A
    /// `fetch.max.bytes` or `queued.max.messages.kbytes` in `source.config` replaces the
    /// worker's; the batches keep at least half, so under 3 MiB, or with consumer bounds
    /// larger than half of it, the worker holds more. Workers restart when it changes.
    #[serde(rename = "inFlightMiB", default = "defaults::in_flight_mib")]
    #[schemars(range(min = 1, max = 1024))]
    pub in_flight_mib: i32,
}

impl Default for WorkersSpec {
    fn default() -> Self {
        Self {
            replicas: defaults::replicas(),
            resources: None,
            image: None,
            in_flight_mib: defaults::in_flight_mib(),
        }
    }
}

/// A request to clear partition failures.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResetRequest {
    /// Any string; a new value is a new request. Applied at most once.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    /// What to do with the failed partitions.
    pub strategy: ResetStrategy,
    /// Partitions to reset; default: every partition currently failed. Naming a healthy
    /// partition refuses the whole request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub partitions: Vec<TopicPartitionRef>,
}

/// How a failed partition resumes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetStrategy {
    /// Accept the gap: resume from the source partition's current log start (DataLoss).
    ResumeFromLogStart,
    /// Replicate the recreated source topic again from its beginning (TopicReset). Records
    /// already mirrored stay on the target; the new records are appended after them.
    RestartFromEarliest,
    /// Skip everything up to the source's current end; replicate only new records.
    SkipToLatest,
    /// Resume after the records already on the target (ProgressMissing): from the source
    /// offset after the last offset sync those records left. Never skips a record; re-sends
    /// at most `offsetSyncs.lagMax` of them.
    ResumeFromTarget,
    /// Skip exactly the record the target rejected (RecordRejected): resume at the offset
    /// after it. Everything before it is already replicated; nothing else is skipped. The
    /// skipped record is named in `status.lastAppliedReset.skippedRecords`.
    SkipRecord,
    /// Send the rejected record again (RecordRejected), once the target accepts it (e.g.
    /// its topic's `max.message.bytes` was raised). Nothing is skipped.
    RetryRecord,
}

/// One partition of a source topic.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "camelCase")]
pub struct TopicPartitionRef {
    /// Source topic name.
    #[schemars(length(min = 1, max = 249))]
    pub topic: String,
    /// Partition number.
    #[schemars(range(min = 0))]
    pub partition: i32,
}

impl TopicPartitionRef {
    /// `topic`/`partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// Observed state of a MirrorFlow.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MirrorFlowStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (summary) and `Replicating`, always; kstatus's `Reconciling` and `Stalled`,
    /// only while True; and, from the first time they turn True, `DataLoss`, `TopicReset`,
    /// `ProgressMissing`, `RecordRejected`, `ConnectionFailed` (authentication or TLS
    /// verification fails, naming the cluster), `InsecureTls` (a cluster has
    /// `tls.insecureSkipVerify`), `TopicUnwritable` (a target topic cannot be created, or its
    /// replication factor is below its `min.insync.replicas`), `InvalidSpec`; `Audited` from
    /// the first finished run of `spec.audit` (False with reason `IntegrityMismatch` naming
    /// topic, partition, offsets and kind of each mismatch).
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// One entry per worker, written by the worker itself.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["id".into()]))]
    pub workers: Vec<WorkerStatus>,
    /// `up/desired` workers, for `kubectl get`: up is replicating (Running or Degraded), or
    /// Paused under `spec.paused`; Ready's and Replicating's messages give the same count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_summary: Option<String>,
    /// Number of partitions stopped by a failure.
    #[serde(default)]
    pub failed_partitions: i32,
    /// Partition failures (bounded to the first 100), each explained here once; worker
    /// entries name them in `stoppedPartitions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub failures: Vec<PartitionFailure>,
    /// The last reset request handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_reset: Option<AppliedReset>,
    /// Records and time not yet replicated, over all partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag: Option<ReplicationLag>,
    /// The topic ACL sync (`spec.syncTopicAcls`), as worker 0 reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_acls: Option<TopicAclSync>,
    /// Heartbeat produced on the source → seen on the target (`spec.heartbeats`), the
    /// highest any worker reports (worker 0 measures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_latency: Option<ReplicationLatency>,
    /// The continuous integrity audit (`spec.audit`), summed over the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<super::AuditReport>,
    /// The last failover (`spec.failover`), as worker 0 reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<super::FailoverReport>,
}

/// A worker's own report.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// Worker id (`<flow>-worker-<index>`, the pod name).
    pub id: String,
    /// Partitions this worker owns.
    #[serde(default)]
    pub partitions: i32,
    /// Worker state.
    pub state: WorkerState,
    /// When the worker last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Human-readable detail, e.g. why the worker is failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The flow generation the worker is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Partition failures this worker detected that `status.failures` does not explain yet
    /// (bounded); once it does, the worker names them in `stoppedPartitions` instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub failures: Vec<PartitionFailure>,
    /// Partitions this worker has stopped for a failure that `status.failures` explains, as
    /// `topic/partition` (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub stopped_partitions: Vec<String>,
    /// Lag of this worker's partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag: Option<ReplicationLag>,
    /// The last reset this worker handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_reset: Option<AppliedReset>,
    /// Checkpoint results per OffsetCheckpoint (only the worker that runs checkpoints reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub checkpoints: Vec<WorkerCheckpointReport>,
    /// Clusters this worker cannot use because authentication or TLS verification fails
    /// (cleared by itself once a connection succeeds again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub connection_problems: Vec<ConnectionProblem>,
    /// The topic ACL sync (`spec.syncTopicAcls`; only worker 0 runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_acls: Option<TopicAclSync>,
    /// Target topics this worker cannot write to, each with why: the target refused to
    /// create (or grow) it, e.g. a replication factor above its number of brokers; or a
    /// topic the flow created has a replication factor below its `min.insync.replicas` (the
    /// mirror writes with acks=all), naming both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub unwritable_topics: Vec<String>,
    /// Replication latency measured with heartbeats (`spec.heartbeats`; only worker 0
    /// measures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_latency: Option<ReplicationLatency>,
    /// The continuous integrity audit of this worker's partitions (`spec.audit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<super::AuditReport>,
    /// The failover this worker runs (`spec.failover`; only worker 0 runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<super::FailoverReport>,
    /// Where this worker's partitions took over from MirrorMaker 2
    /// (`spec.source.startFrom.mirrorMaker2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_maker2_takeover: Option<MirrorMaker2Takeover>,
    /// Where this flow started after a failover, and what diverged
    /// (`spec.source.startFrom.afterFailover`; worker 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failback: Option<super::FailbackReport>,
}

/// The partitions a worker started from MirrorMaker 2's positions, and those MM2 had no
/// position for (started per `spec.startFrom`), since the worker started.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MirrorMaker2Takeover {
    /// The Connect offsets topic read.
    pub offsets_topic: String,
    /// Partitions started right after the last source offset MM2 copied.
    pub partitions: i32,
    /// Those partitions, `topic: 0-2,5` per topic (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub topics: Vec<String>,
    /// Partitions MM2 had no position for, started per `spec.startFrom`.
    #[serde(default)]
    pub fell_back: i32,
    /// Those partitions, as `topics` (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub fell_back_topics: Vec<String>,
}

/// Which side of the flow a cluster is.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub enum ClusterRole {
    Source,
    Target,
}

impl ClusterRole {
    /// `source` or `target`, as in `spec.source`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Target => "target",
        }
    }
}

/// Why a worker cannot use a cluster.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum ConnectionProblemReason {
    /// The brokers refused the SASL credentials (wrong username or password, unknown user,
    /// mechanism not enabled, token refused).
    AuthenticationFailed,
    /// The brokers' certificate could not be verified: untrusted CA, expired or not yet
    /// valid, or issued for another host name.
    TlsVerificationFailed,
    /// Another TLS failure: handshake refused (e.g. the brokers require a client
    /// certificate), unreadable certificate or key, protocol mismatch.
    TlsFailed,
}

impl ConnectionProblemReason {
    /// The condition reason / human phrase.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AuthenticationFailed => "AuthenticationFailed",
            Self::TlsVerificationFailed => "TlsVerificationFailed",
            Self::TlsFailed => "TlsFailed",
        }
    }

    /// "authentication failed", "TLS verification failed", "TLS failed".
    pub fn phrase(self) -> &'static str {
        match self {
            Self::AuthenticationFailed => "authentication failed",
            Self::TlsVerificationFailed => "TLS verification failed",
            Self::TlsFailed => "TLS failed",
        }
    }
}

/// A cluster a worker cannot use. Never holds a secret value.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionProblem {
    /// `source` or `target`.
    pub cluster: ClusterRole,
    /// The cluster's alias.
    pub alias: String,
    /// What fails.
    pub reason: ConnectionProblemReason,
    /// The client's message, e.g. `target cluster dc2: authentication failed: SASL
    /// authentication error: Authentication failed during authentication due to invalid
    /// credentials with SASL mechanism SCRAM-SHA-512`.
    pub message: String,
    /// When it was first seen.
    pub since: Time,
}

/// Result of the topic ACL sync.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopicAclSync {
    /// ACL bindings on the target that mirror a source binding (present after the last sync).
    pub synced: i32,
    /// Of those, the bindings this flow created (the ones it removes when their source
    /// binding goes).
    pub created_by_flow: i32,
    /// Source bindings on replicated topics that are not copied (DENY, WRITE and other
    /// operations that would let someone change the target topics).
    pub skipped: i32,
    /// When the last sync finished without error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// Why the last sync failed; absent after a good one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What a worker reports about one OffsetCheckpoint; the controller folds it into that
/// resource's status.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerCheckpointReport {
    /// The OffsetCheckpoint's name.
    pub name: String,
    /// Per-group summaries (bounded to 50; the stalest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub groups: Vec<super::GroupSummary>,
    /// Groups not checkpointed or not synced (bounded to 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub failures: Vec<super::GroupFailure>,
    /// Why the checkpoint runner cannot run this OffsetCheckpoint: its start-up, or its last
    /// cycle or group sync, failed as a whole (e.g. a cluster unreachable, the checkpoints
    /// topic not writable). Absent once it runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Worker lifecycle states.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WorkerState {
    #[default]
    Starting,
    Running,
    Paused,
    /// Some partitions failed; the rest replicate.
    Degraded,
    /// The worker cannot replicate at all (e.g. target refuses transactions).
    Failed,
    Stopped,
}

/// A stopped partition: by offset validation, or by a record the target rejected.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionFailure {
    /// `DataLoss`, `TopicReset`, `ProgressMissing` or `RecordRejected`.
    #[serde(rename = "type")]
    pub type_: FailureType,
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// The position the worker asked for; for `RecordRejected`, the source offset of the
    /// rejected record (the partition's position: every record before it is replicated).
    pub requested_offset: i64,
    /// The partition's log start offset when detected (absent if the lookup failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_start_offset: Option<i64>,
    /// Records deleted before replication, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_lost: Option<i64>,
    /// When the failure was detected.
    pub detected_at: Time,
    /// `RecordRejected`: the target's reason, as the client reported it (e.g.
    /// `MessageSizeTooLarge (Broker: Message size too large)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened and how to clear it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Failure kinds.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureType {
    /// Records were deleted on the source before they were replicated.
    DataLoss,
    /// The source topic was deleted and recreated.
    TopicReset,
    /// No progress is recorded for the partition, but its target topic already holds
    /// records (the progress topic was deleted, or the target rebuilt): where to resume is
    /// not guessed.
    ProgressMissing,
    /// The target refused a record for good (too large, invalid, policy violation): the
    /// partition stops at it, every record before it replicated, none after it written.
    RecordRejected,
}

/// Outcome of a reset request.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedReset {
    /// The request id.
    pub id: String,
    /// When it was handled.
    pub time: Time,
    /// `Applied`, `Refused`, `Failed` (retried) or, from one worker, `NotOwned`.
    pub outcome: ResetOutcome,
    /// Details: partitions reset, or why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Partitions that were reset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<TopicPartitionRef>,
    /// Records skipped by `SkipRecord`: exactly one per partition, never replicated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub skipped_records: Vec<SkippedRecord>,
}

/// A source record a reset skipped.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct SkippedRecord {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset of the skipped record.
    pub offset: i64,
}

/// Reset outcomes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetOutcome {
    Applied,
    Refused,
    /// The seek could not be resolved (e.g. the source did not answer); retried.
    Failed,
    /// The worker owns none of the partitions the request concerns (other workers do).
    NotOwned,
}

/// Replication lag.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationLag {
    /// Records on the source not yet on the target.
    pub records: i64,
    /// Age of the oldest unreplicated record, in seconds (source timestamp → now).
    pub seconds: i64,
}

/// End-to-end replication latency measured with heartbeats: from the timestamp a heartbeat
/// was written with on the source to when its replicated copy was read on the target.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationLatency {
    /// The latest latency in milliseconds; while a heartbeat the source acknowledged is
    /// still missing on the target and older than that, how long it has been missing (so a
    /// stalled flow shows a growing value, not its last good one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_millis: Option<i64>,
    /// 99th percentile of the latencies measured over the last 5 minutes, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_millis: Option<i64>,
    /// When the latest heartbeat was seen on the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_time: Option<Time>,
    /// Why heartbeats cannot be written or read (e.g. no WRITE permission on the source's
    /// `heartbeats` topic); absent while they flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
