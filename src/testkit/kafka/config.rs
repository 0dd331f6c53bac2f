//! A node's `server.properties`, from the cluster's config and every node's ports (pure).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A client listener. Every cluster has [`Listener::Plaintext`]; the others are asked for in
/// [`KafkaConfig::listeners`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Listener {
    /// PLAINTEXT without authentication: principal `User:ANONYMOUS`, a super user. The
    /// testkit's own helpers and the brokers among themselves use it.
    Plaintext,
    /// SSL with a client certificate required; the principal is the certificate's CN.
    Mtls,
    /// SASL_SSL, SCRAM-SHA-512.
    Scram,
    /// SASL OAUTHBEARER: over TLS when the cluster has [`KafkaConfig::tls`], else plaintext.
    OAuth,
}

impl Listener {
    /// The listener's name in the broker's config.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Plaintext => "PLAINTEXT",
            Listener::Mtls => "MTLS",
            Listener::Scram => "SCRAM",
            Listener::OAuth => "OAUTH",
        }
    }

    /// Its `security.protocol` (the broker's and the client's).
    pub fn protocol(self, tls: bool) -> &'static str {
        match (self, tls) {
            (Listener::Plaintext, _) => "PLAINTEXT",
            (Listener::Mtls, _) => "SSL",
            (Listener::Scram, _) => "SASL_SSL",
            (Listener::OAuth, true) => "SASL_SSL",
            (Listener::OAuth, false) => "SASL_PLAINTEXT",
        }
    }

    fn needs_tls(self) -> bool {
        matches!(self, Listener::Mtls | Listener::Scram)
    }
}

/// The brokers' certificate (PEM chain, leaf first), its PKCS#8 key (PEM, unencrypted) and
/// the CA (PEM) that signs both the brokers' and the clients' certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// How the OAUTHBEARER listener validates tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OAuthValidation {
    /// The broker's default validator: unsecured (unsigned) JWS tokens, for tests only.
    #[default]
    Unsecured,
    /// Signed tokens, verified with the keys at `jwks_url` (Kafka's
    /// `OAuthBearerValidatorCallbackHandler`): signature, expiry, and the audience and issuer
    /// when given.
    Jwks {
        jwks_url: String,
        audience: Option<String>,
        issuer: Option<String>,
    },
}

/// What a cluster looks like. [`KafkaConfig::default`] is one node with PLAINTEXT only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Nodes, each broker and controller (combined mode): 1, or 3 where replication factor,
    /// ISR or leader movement matter.
    pub nodes: usize,
    /// Client listeners besides PLAINTEXT.
    pub listeners: Vec<Listener>,
    /// Required by [`Listener::Mtls`] and [`Listener::Scram`].
    pub tls: Option<KafkaTls>,
    /// SCRAM-SHA-512 users (name, password), created when the storage is formatted.
    pub scram_users: Vec<(String, String)>,
    pub oauth: OAuthValidation,
    /// Principals (`User:NAME`) with every permission, besides `User:ANONYMOUS`.
    pub super_users: Vec<String>,
    /// Broker properties set last (they win over the testkit's).
    pub properties: Vec<(String, String)>,
    /// Advertise this port for PLAINTEXT instead of the node's own (a proxy in front of a
    /// one-node cluster).
    pub advertise_plaintext: Option<u16>,
    /// JVM heap (`-Xmx`), MiB.
    pub heap_mib: u32,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            nodes: 1,
            listeners: Vec::new(),
            tls: None,
            scram_users: Vec::new(),
            oauth: OAuthValidation::default(),
            super_users: Vec::new(),
            properties: Vec::new(),
            advertise_plaintext: None,
            heap_mib: 384,
        }
    }
}

impl KafkaConfig {
    /// Three nodes, PLAINTEXT only: internal topics replicated 3 times with min ISR 2.
    pub fn three_nodes() -> Self {
        Self {
            nodes: 3,
            ..Self::default()
        }
    }

    /// Every listener: PLAINTEXT, mTLS, SCRAM-SHA-512 and OAUTHBEARER over TLS.
    pub fn secured(
        tls: KafkaTls,
        scram_users: Vec<(String, String)>,
        oauth: OAuthValidation,
    ) -> Self {
        Self {
            listeners: vec![Listener::Mtls, Listener::Scram, Listener::OAuth],
            tls: Some(tls),
            scram_users,
            oauth,
            ..Self::default()
        }
    }

    /// The client listeners, PLAINTEXT first, each once.
    pub fn client_listeners(&self) -> Vec<Listener> {
        let mut out = vec![Listener::Plaintext];
        for l in &self.listeners {
            if !out.contains(l) {
                out.push(*l);
            }
        }
        out
    }

    /// What makes this config unusable, before anything starts.
    pub fn check(&self) -> Result<(), String> {
        if self.nodes == 0 || self.nodes > 9 {
            return Err(format!("nodes = {}: expected 1 to 9", self.nodes));
        }
        if let Some(l) = self.listeners.iter().find(|l| l.needs_tls()) {
            if self.tls.is_none() {
                return Err(format!("listener {} needs tls files", l.name()));
            }
        }
        if self.advertise_plaintext.is_some() && self.nodes != 1 {
            return Err("advertise_plaintext (a proxy) needs a one-node cluster".to_owned());
        }
        Ok(())
    }
}

/// One node's ports: each client listener's and the controller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePorts {
    pub node_id: usize,
    pub listeners: BTreeMap<Listener, u16>,
    pub controller: u16,
}

/// The node's `server.properties`. `dir` is the node's directory (its data under `data/`).
pub fn server_properties(
    config: &KafkaConfig,
    node: &NodePorts,
    all: &[NodePorts],
    dir: &Path,
    keystore: &Path,
) -> String {
    let mut p = Props::default();
    quorum_and_listeners(&mut p, config, node, all);
    storage_and_timing(&mut p, config, dir);
    security(&mut p, config, keystore);
    for (k, v) in &config.properties {
        p.set(k.clone(), v.clone());
    }
    p.render()
}

/// The KRaft quorum of `all` nodes, and `node`'s listeners (advertised through the proxy
/// when there is one).
fn quorum_and_listeners(p: &mut Props, config: &KafkaConfig, node: &NodePorts, all: &[NodePorts]) {
    let tls = config.tls.is_some();
    p.set("process.roles", "broker,controller");
    p.set("node.id", node.node_id.to_string());
    let voters: Vec<String> = all
        .iter()
        .map(|n| format!("{}@127.0.0.1:{}", n.node_id, n.controller))
        .collect();
    p.set("controller.quorum.voters", voters.join(","));
    p.set("controller.listener.names", "CONTROLLER");
    p.set("inter.broker.listener.name", "PLAINTEXT");

    let mut listeners = Vec::new();
    let mut advertised = Vec::new();
    let mut map = Vec::new();
    for (l, port) in &node.listeners {
        listeners.push(format!("{}://127.0.0.1:{port}", l.name()));
        let adv = match (l, config.advertise_plaintext) {
            (Listener::Plaintext, Some(proxy)) => proxy,
            _ => *port,
        };
        advertised.push(format!("{}://127.0.0.1:{adv}", l.name()));
        map.push(format!("{}:{}", l.name(), l.protocol(tls)));
    }
    listeners.push(format!("CONTROLLER://127.0.0.1:{}", node.controller));
    map.push("CONTROLLER:PLAINTEXT".to_owned());
    p.set("listeners", listeners.join(","));
    p.set("advertised.listeners", advertised.join(","));
    p.set("listener.security.protocol.map", map.join(","));
}

/// Data, replication of the internal topics, and timings short enough for tests.
fn storage_and_timing(p: &mut Props, config: &KafkaConfig, dir: &Path) {
    p.set("log.dirs", dir.join("data").display().to_string());
    let replicas = config.nodes.min(3);
    let min_isr = if replicas >= 3 { 2 } else { 1 };
    p.set("num.partitions", "1");
    p.set("default.replication.factor", replicas.to_string());
    p.set("min.insync.replicas", "1");
    p.set("offsets.topic.replication.factor", replicas.to_string());
    p.set(
        "transaction.state.log.replication.factor",
        replicas.to_string(),
    );
    p.set("transaction.state.log.min.isr", min_isr.to_string());
    p.set(
        "share.coordinator.state.topic.replication.factor",
        replicas.to_string(),
    );
    p.set("share.coordinator.state.topic.min.isr", min_isr.to_string());
    // Fewer internal partitions: the first group or transaction creates them, 50 each by
    // default, which costs seconds on a loaded 2-core machine and tells tests nothing.
    p.set("offsets.topic.num.partitions", "5");
    p.set("transaction.state.log.num.partitions", "5");
    p.set("group.initial.rebalance.delay.ms", "0");
    // Topics exist because someone created them, as on the clusters users run.
    p.set("auto.create.topics.enable", "false");
    // Retention and DeleteRecords tests wait for the cleaner: look every second.
    p.set("log.retention.check.interval.ms", "1000");
    // No time limit by default: test records carry fixed timestamps (2023), which the
    // default 7 days would delete within a second. Tests of retention set `retention.ms`.
    p.set("log.retention.ms", "-1");
    p.set("log.segment.delete.delay.ms", "0");
    p.set("log.initial.task.delay.ms", "0");
    // Controlled shutdown and restarts within a test's patience.
    p.set("controller.quorum.election.timeout.ms", "1000");
    p.set("controller.quorum.fetch.timeout.ms", "2000");
    p.set("broker.heartbeat.interval.ms", "500");
    p.set("broker.session.timeout.ms", "6000");
}

/// The authorizer, TLS files, and each client listener's authentication.
fn security(p: &mut Props, config: &KafkaConfig, keystore: &Path) {
    p.set(
        "authorizer.class.name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    );
    let mut supers = vec!["User:ANONYMOUS".to_owned()];
    supers.extend(config.super_users.iter().cloned());
    p.set("super.users", supers.join(";"));
    p.set(
        "ssl.principal.mapping.rules",
        "RULE:^CN=([^,]*).*$/$1/,DEFAULT",
    );

    if let Some(t) = &config.tls {
        p.set("ssl.keystore.type", "PEM");
        p.set("ssl.keystore.location", keystore.display().to_string());
        p.set("ssl.truststore.type", "PEM");
        p.set("ssl.truststore.location", t.ca.display().to_string());
        p.set("ssl.endpoint.identification.algorithm", "");
    }
    for l in config.client_listeners() {
        let prefix = format!("listener.name.{}", l.name().to_lowercase());
        match l {
            Listener::Plaintext => {}
            Listener::Mtls => p.set(format!("{prefix}.ssl.client.auth"), "required"),
            Listener::Scram => {
                p.set(format!("{prefix}.sasl.enabled.mechanisms"), "SCRAM-SHA-512");
                p.set(
                    format!("{prefix}.scram-sha-512.sasl.jaas.config"),
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                );
            }
            Listener::OAuth => {
                p.set(format!("{prefix}.sasl.enabled.mechanisms"), "OAUTHBEARER");
                p.set(
                    format!("{prefix}.oauthbearer.sasl.jaas.config"),
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                );
                if let OAuthValidation::Jwks {
                    jwks_url,
                    audience,
                    issuer,
                } = &config.oauth
                {
                    p.set(
                        format!("{prefix}.oauthbearer.sasl.server.callback.handler.class"),
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                    );
                    p.set("sasl.oauthbearer.jwks.endpoint.url", jwks_url.clone());
                    if let Some(a) = audience {
                        p.set("sasl.oauthbearer.expected.audience", a.clone());
                    }
                    if let Some(i) = issuer {
                        p.set("sasl.oauthbearer.expected.issuer", i.clone());
                    }
                }
            }
        }
    }
}

/// JVM system properties the node needs (Kafka 4 reads a few security settings only there).
pub fn jvm_properties(config: &KafkaConfig) -> Vec<String> {
    match &config.oauth {
        OAuthValidation::Jwks { jwks_url, .. } if config.listeners.contains(&Listener::OAuth) => {
            vec![format!(
                "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url}"
            )]
        }
        _ => Vec::new(),
    }
}

/// The storage tool's `--add-scram` arguments for the config's users.
pub fn scram_arguments(config: &KafkaConfig) -> Vec<String> {
    config
        .scram_users
        .iter()
        .flat_map(|(name, password)| {
            [
                "--add-scram".to_owned(),
                format!("SCRAM-SHA-512=[name={name},password={password}]"),
            ]
        })
        .collect()
}

/// Properties in insertion order; setting a key again replaces its value in place.
#[derive(Default)]
pub(crate) struct Props(Vec<(String, String)>);

impl Props {
    pub(crate) fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.0 {
            // Java properties: a backslash escapes; our values hold none but paths on Windows.
            let _ = writeln!(out, "{k}={}", v.replace('\\', "\\\\"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(node_id: usize, base: u16, listeners: &[Listener]) -> NodePorts {
        NodePorts {
            node_id,
            listeners: listeners
                .iter()
                .enumerate()
                .map(|(i, l)| (*l, base + i as u16))
                .collect(),
            controller: base + 9,
        }
    }

    fn get<'a>(props: &'a str, key: &str) -> Option<&'a str> {
        props
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }

    #[test]
    fn one_node_plaintext() {
        let config = KafkaConfig::default();
        let n = ports(1, 9000, &[Listener::Plaintext]);
        let p = server_properties(
            &config,
            &n,
            std::slice::from_ref(&n),
            Path::new("/d"),
            Path::new("/d/ks.pem"),
        );
        let cases = [
            ("node.id", Some("1")),
            ("controller.quorum.voters", Some("1@127.0.0.1:9009")),
            (
                "listeners",
                Some("PLAINTEXT://127.0.0.1:9000,CONTROLLER://127.0.0.1:9009"),
            ),
            ("advertised.listeners", Some("PLAINTEXT://127.0.0.1:9000")),
            (
                "listener.security.protocol.map",
                Some("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"),
            ),
            ("log.dirs", Some("/d/data")),
            ("offsets.topic.replication.factor", Some("1")),
            ("transaction.state.log.min.isr", Some("1")),
            ("super.users", Some("User:ANONYMOUS")),
            ("auto.create.topics.enable", Some("false")),
            ("ssl.keystore.location", None),
        ];
        for (key, want) in cases {
            assert_eq!(get(&p, key), want, "{key}\n{p}");
        }
        assert!(jvm_properties(&config).is_empty());
    }

    #[test]
    fn three_nodes_replicate_internal_topics() {
        let config = KafkaConfig::three_nodes();
        let all: Vec<NodePorts> = (1..=3)
            .map(|i| ports(i, 9000 + 100 * i as u16, &[Listener::Plaintext]))
            .collect();
        let p = server_properties(&config, &all[1], &all, Path::new("/d2"), Path::new("/k"));
        let cases = [
            ("node.id", "2"),
            (
                "controller.quorum.voters",
                "1@127.0.0.1:9109,2@127.0.0.1:9209,3@127.0.0.1:9309",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9200,CONTROLLER://127.0.0.1:9209",
            ),
            ("default.replication.factor", "3"),
            ("offsets.topic.replication.factor", "3"),
            ("transaction.state.log.replication.factor", "3"),
            ("transaction.state.log.min.isr", "2"),
        ];
        for (key, want) in cases {
            assert_eq!(get(&p, key), Some(want), "{key}\n{p}");
        }
    }

    #[test]
    fn secured_listeners() {
        let tls = KafkaTls {
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
            ca: "/c/ca.pem".into(),
        };
        let mut config = KafkaConfig::secured(
            tls,
            vec![("admin".into(), "pw".into())],
            OAuthValidation::Jwks {
                jwks_url: "http://127.0.0.1:7/jwks".into(),
                audience: Some("kafka".into()),
                issuer: None,
            },
        );
        config.super_users = vec!["User:admin".into()];
        config.properties = vec![("num.partitions".into(), "3".into())];
        let all_listeners = config.client_listeners();
        assert_eq!(
            all_listeners,
            [
                Listener::Plaintext,
                Listener::Mtls,
                Listener::Scram,
                Listener::OAuth
            ]
        );
        let n = ports(1, 9000, &all_listeners);
        let p = server_properties(
            &config,
            &n,
            std::slice::from_ref(&n),
            Path::new("/d"),
            Path::new("/d/ks.pem"),
        );
        let cases = [
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,MTLS:SSL,SCRAM:SASL_SSL,OAUTH:SASL_SSL,CONTROLLER:PLAINTEXT",
            ),
            ("super.users", "User:ANONYMOUS;User:admin"),
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/d/ks.pem"),
            ("ssl.truststore.location", "/c/ca.pem"),
            ("listener.name.mtls.ssl.client.auth", "required"),
            (
                "listener.name.scram.sasl.enabled.mechanisms",
                "SCRAM-SHA-512",
            ),
            ("listener.name.oauth.sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "http://127.0.0.1:7/jwks",
            ),
            ("sasl.oauthbearer.expected.audience", "kafka"),
            ("num.partitions", "3"),
        ];
        for (key, want) in cases {
            assert_eq!(get(&p, key), Some(want), "{key}\n{p}");
        }
        assert_eq!(get(&p, "sasl.oauthbearer.expected.issuer"), None);
        assert_eq!(
            p.lines()
                .filter(|l| l.starts_with("num.partitions="))
                .count(),
            1,
            "an override replaces, never repeats"
        );
        assert_eq!(
            jvm_properties(&config),
            ["-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=http://127.0.0.1:7/jwks"]
        );
        assert_eq!(
            scram_arguments(&config),
            ["--add-scram", "SCRAM-SHA-512=[name=admin,password=pw]"]
        );
    }

    #[test]
    fn proxy_is_advertised_for_plaintext_only() {
        let config = KafkaConfig {
            advertise_plaintext: Some(7777),
            ..KafkaConfig::default()
        };
        let n = ports(1, 9000, &[Listener::Plaintext]);
        let p = server_properties(
            &config,
            &n,
            std::slice::from_ref(&n),
            Path::new("/d"),
            Path::new("/k"),
        );
        assert_eq!(
            get(&p, "listeners"),
            Some("PLAINTEXT://127.0.0.1:9000,CONTROLLER://127.0.0.1:9009")
        );
        assert_eq!(
            get(&p, "advertised.listeners"),
            Some("PLAINTEXT://127.0.0.1:7777")
        );
    }

    #[test]
    fn check_table() {
        let tls = KafkaTls {
            cert: "c".into(),
            key: "k".into(),
            ca: "a".into(),
        };
        let cases = [
            (KafkaConfig::default(), None),
            (
                KafkaConfig {
                    nodes: 0,
                    ..KafkaConfig::default()
                },
                Some("nodes = 0"),
            ),
            (
                KafkaConfig {
                    listeners: vec![Listener::Scram],
                    ..KafkaConfig::default()
                },
                Some("listener SCRAM needs tls files"),
            ),
            (
                KafkaConfig {
                    listeners: vec![Listener::OAuth],
                    ..KafkaConfig::default()
                },
                None,
            ),
            (
                KafkaConfig {
                    listeners: vec![Listener::Mtls],
                    tls: Some(tls),
                    ..KafkaConfig::default()
                },
                None,
            ),
            (
                KafkaConfig {
                    advertise_plaintext: Some(1),
                    ..KafkaConfig::three_nodes()
                },
                Some("one-node"),
            ),
        ];
        for (config, want) in cases {
            match (config.check(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{e} lacks {w}"),
                (got, want) => panic!("{config:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
