//! MirrorMaker 2's `mm2.properties` (dedicated mode) from a typed config (pure).
//!
//! Keys as MM2 4.3 reads them (`MirrorMakerConfig`, `MirrorConnectorConfig`,
//! `MirrorSourceConfig`, `MirrorCheckpointConfig`, `MirrorHeartbeatConfig`): top-level keys
//! reach every connector of every pair, `A->B.key` one pair's connectors, `alias.key` one
//! cluster's clients and, for the cluster a pair targets, that pair's Connect worker.

use crate::testkit::kafka::Props;

/// One cluster MM2 connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mm2Cluster {
    /// Its alias (`clusters = ...`, the prefix of remote topics).
    pub alias: String,
    pub bootstrap_servers: String,
    /// Client properties for this cluster (`alias.key = value`: security, `producer.*`, ...).
    pub properties: Vec<(String, String)>,
}

/// A replication flow `source->target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mm2Flow {
    pub source: String,
    pub target: String,
    /// `A->B.enabled`: replicate records, offset syncs and checkpoints. A pair that is not
    /// enabled still emits heartbeats unless told not to (`MirrorMakerConfig.clusterPairs`).
    pub enabled: bool,
    /// `A->B.topics`: regexes of the source topics (MM2's default `.*`).
    pub topics: Vec<String>,
    /// `A->B.groups`: regexes of the source groups checkpointed (MM2's default `.*`).
    pub groups: Vec<String>,
    /// `A->B.emit.heartbeats.enabled`, when it differs from [`MirrorMakerConfig::heartbeats`].
    pub emit_heartbeats: Option<bool>,
}

impl Mm2Flow {
    /// An enabled flow of `topics`, every group.
    pub fn new(source: &str, target: &str, topics: &[&str]) -> Self {
        Self {
            source: source.to_owned(),
            target: target.to_owned(),
            enabled: true,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            groups: vec![".*".to_owned()],
            emit_heartbeats: None,
        }
    }

    /// `source->target`, as MM2 prefixes the pair's keys.
    pub fn pair(&self) -> String {
        format!("{}->{}", self.source, self.target)
    }
}

/// `replication.policy.class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mm2Policy {
    /// `DefaultReplicationPolicy`: `<source><separator><topic>`.
    Default { separator: String },
    /// `IdentityReplicationPolicy`: names kept.
    Identity,
}

/// Where the offset-syncs topic lives (`offset-syncs.topic.location`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncsLocation {
    /// MM2's default: on the source, `mm2-offset-syncs.<target>.internal`.
    Source,
    /// On the target, `mm2-offset-syncs.<source>.internal` (where mirrorflow keeps them).
    Target,
}

impl SyncsLocation {
    fn value(self) -> &'static str {
        match self {
            SyncsLocation::Source => "source",
            SyncsLocation::Target => "target",
        }
    }
}

/// A switch with an interval (`<name>.enabled`, `<name>.interval.seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periodic {
    pub enabled: bool,
    pub interval_seconds: u64,
}

impl Periodic {
    pub const fn on(interval_seconds: u64) -> Self {
        Self {
            enabled: true,
            interval_seconds,
        }
    }

    pub const fn off(interval_seconds: u64) -> Self {
        Self {
            enabled: false,
            interval_seconds,
        }
    }
}

/// Offset syncs (`emit.offset-syncs.enabled`, `offset-syncs.topic.location`,
/// `offset.lag.max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetSyncs {
    pub enabled: bool,
    pub location: SyncsLocation,
    /// A sync at least every `lag_max` records of a partition (MM2's default 100).
    pub lag_max: u64,
}

/// What MirrorMaker 2 runs. [`MirrorMakerConfig::default`] is MM2's defaults, no clusters,
/// with replication factor 1 for the topics it creates (the testkit's clusters have one
/// node by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorMakerConfig {
    pub clusters: Vec<Mm2Cluster>,
    pub flows: Vec<Mm2Flow>,
    /// `tasks.max` of every connector.
    pub tasks_max: u32,
    pub replication_policy: Mm2Policy,
    pub offset_syncs: OffsetSyncs,
    /// `emit.checkpoints` (MM2: on, 60 s).
    pub checkpoints: Periodic,
    /// `emit.heartbeats` (MM2: on, 1 s).
    pub heartbeats: Periodic,
    /// `sync.group.offsets` (MM2: off, 60 s).
    pub group_sync: Periodic,
    /// `refresh.topics.interval.seconds` (MM2: 600).
    pub refresh_topics_seconds: u64,
    /// `refresh.groups.interval.seconds` (MM2: 600).
    pub refresh_groups_seconds: u64,
    /// Replication factor of the remote topics and of every topic MM2 creates (its offset
    /// syncs, checkpoints, heartbeats and the Connect workers' offsets, configs, status).
    pub replication_factor: u16,
    /// `offset.flush.interval.ms` of the Connect workers (Connect's default 60 s): how often
    /// a source task commits, which is also when MM2 sends the offset syncs it held back
    /// (`MirrorSourceTask.commit`). `None`: Connect's default.
    pub offset_flush_interval_ms: Option<u64>,
    /// Properties set last (they win over the above).
    pub properties: Vec<(String, String)>,
    /// `-Xmx`, MiB (`connect-mirror-maker.sh`: 2 GiB, with `-Xms256m`).
    pub heap_mib: u32,
    /// More JVM options (after the heap's).
    pub jvm_options: Vec<String>,
}

impl Default for MirrorMakerConfig {
    fn default() -> Self {
        Self {
            clusters: Vec::new(),
            flows: Vec::new(),
            tasks_max: 1,
            replication_policy: Mm2Policy::Default {
                separator: ".".to_owned(),
            },
            offset_syncs: OffsetSyncs {
                enabled: true,
                location: SyncsLocation::Source,
                lag_max: 100,
            },
            checkpoints: Periodic::on(60),
            heartbeats: Periodic::on(1),
            group_sync: Periodic::off(60),
            refresh_topics_seconds: 600,
            refresh_groups_seconds: 600,
            replication_factor: 1,
            offset_flush_interval_ms: None,
            properties: Vec::new(),
            heap_mib: 2048,
            jvm_options: Vec::new(),
        }
    }
}

impl MirrorMakerConfig {
    /// Two clusters and one enabled flow `source->target` of `topics`; MM2's defaults else.
    pub fn pair(source: (&str, &str), target: (&str, &str), topics: &[&str]) -> Self {
        let cluster = |(alias, bootstrap): (&str, &str)| Mm2Cluster {
            alias: alias.to_owned(),
            bootstrap_servers: bootstrap.to_owned(),
            properties: Vec::new(),
        };
        Self {
            clusters: vec![cluster(source), cluster(target)],
            flows: vec![Mm2Flow::new(source.0, target.0, topics)],
            ..Self::default()
        }
    }

    /// What makes this config unusable, before anything starts.
    pub fn check(&self) -> Result<(), String> {
        if self.clusters.len() < 2 {
            return Err(format!(
                "{} cluster(s): MirrorMaker 2 needs two or more",
                self.clusters.len()
            ));
        }
        for c in &self.clusters {
            let ok = !c.alias.is_empty()
                && c.alias
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_');
            if !ok {
                return Err(format!(
                    "cluster alias {:?}: use letters, digits, '-' and '_'",
                    c.alias
                ));
            }
        }
        let known = |a: &str| self.clusters.iter().any(|c| c.alias == a);
        for f in &self.flows {
            if !known(&f.source) || !known(&f.target) || f.source == f.target {
                return Err(format!(
                    "flow {}: source and target must be two of the clusters",
                    f.pair()
                ));
            }
        }
        if self.tasks_max == 0 {
            return Err("tasks_max = 0: at least 1".to_owned());
        }
        Ok(())
    }

    /// The clusters each enabled flow writes to, each once, in flow order.
    fn targets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for f in &self.flows {
            if !out.contains(&f.target.as_str()) {
                out.push(&f.target);
            }
        }
        out
    }
}

/// The `mm2.properties` of `config` (MM2 reads it with `java.util.Properties`).
pub fn mm2_properties(config: &MirrorMakerConfig) -> String {
    let mut p = Props::default();
    let aliases: Vec<&str> = config.clusters.iter().map(|c| c.alias.as_str()).collect();
    p.set("clusters", aliases.join(","));
    for c in &config.clusters {
        p.set(
            format!("{}.bootstrap.servers", c.alias),
            c.bootstrap_servers.clone(),
        );
        for (k, v) in &c.properties {
            p.set(format!("{}.{k}", c.alias), v.clone());
        }
    }

    p.set("tasks.max", config.tasks_max.to_string());
    match &config.replication_policy {
        Mm2Policy::Default { separator } => {
            p.set(
                "replication.policy.class",
                "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
            );
            p.set("replication.policy.separator", separator.clone());
        }
        Mm2Policy::Identity => p.set(
            "replication.policy.class",
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        ),
    }

    let s = &config.offset_syncs;
    p.set("emit.offset-syncs.enabled", s.enabled.to_string());
    p.set("offset-syncs.topic.location", s.location.value());
    p.set("offset.lag.max", s.lag_max.to_string());
    for (name, periodic) in [
        ("emit.checkpoints", config.checkpoints),
        ("emit.heartbeats", config.heartbeats),
        ("sync.group.offsets", config.group_sync),
    ] {
        p.set(format!("{name}.enabled"), periodic.enabled.to_string());
        p.set(
            format!("{name}.interval.seconds"),
            periodic.interval_seconds.to_string(),
        );
    }
    p.set(
        "refresh.topics.interval.seconds",
        config.refresh_topics_seconds.to_string(),
    );
    p.set(
        "refresh.groups.interval.seconds",
        config.refresh_groups_seconds.to_string(),
    );

    // The connectors' topics (MirrorSourceConfig, MirrorCheckpointConfig,
    // MirrorHeartbeatConfig) and the workers' (`offset.storage.*`, `config.storage.*` and
    // `status.storage.*` are the top-level keys MirrorMakerConfig.workerConfig passes on).
    let rf = config.replication_factor.to_string();
    for key in [
        "replication.factor",
        "offset-syncs.topic.replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset.storage.replication.factor",
        "config.storage.replication.factor",
        "status.storage.replication.factor",
    ] {
        p.set(key, rf.clone());
    }
    // A worker's own settings come from its target cluster's prefix (workerConfig).
    if let Some(ms) = config.offset_flush_interval_ms {
        for target in config.targets() {
            p.set(format!("{target}.offset.flush.interval.ms"), ms.to_string());
        }
    }

    for f in &config.flows {
        let pair = f.pair();
        p.set(format!("{pair}.enabled"), f.enabled.to_string());
        p.set(format!("{pair}.topics"), f.topics.join(","));
        p.set(format!("{pair}.groups"), f.groups.join(","));
        if let Some(on) = f.emit_heartbeats {
            p.set(format!("{pair}.emit.heartbeats.enabled"), on.to_string());
        }
    }
    for (k, v) in &config.properties {
        p.set(k.clone(), v.clone());
    }
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn get<'a>(props: &'a str, key: &str) -> Option<&'a str> {
        props
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }

    #[test]
    fn a_pair_renders_mm2_defaults_with_replication_factor_one() {
        let config = MirrorMakerConfig::pair(
            ("dc1", "127.0.0.1:1"),
            ("dc2", "127.0.0.1:2,127.0.0.1:3"),
            &["orders", "pay.*"],
        );
        assert_eq!(config.check(), Ok(()));
        assert_eq!(
            mm2_properties(&config),
            "\
clusters=dc1,dc2
dc1.bootstrap.servers=127.0.0.1:1
dc2.bootstrap.servers=127.0.0.1:2,127.0.0.1:3
tasks.max=1
replication.policy.class=org.apache.kafka.connect.mirror.DefaultReplicationPolicy
replication.policy.separator=.
emit.offset-syncs.enabled=true
offset-syncs.topic.location=source
offset.lag.max=100
emit.checkpoints.enabled=true
emit.checkpoints.interval.seconds=60
emit.heartbeats.enabled=true
emit.heartbeats.interval.seconds=1
sync.group.offsets.enabled=false
sync.group.offsets.interval.seconds=60
refresh.topics.interval.seconds=600
refresh.groups.interval.seconds=600
replication.factor=1
offset-syncs.topic.replication.factor=1
checkpoints.topic.replication.factor=1
heartbeats.topic.replication.factor=1
offset.storage.replication.factor=1
config.storage.replication.factor=1
status.storage.replication.factor=1
dc1->dc2.enabled=true
dc1->dc2.topics=orders,pay.*
dc1->dc2.groups=.*
"
        );
    }

    #[test]
    fn every_setting_reaches_its_key() {
        let mut config = MirrorMakerConfig::pair(("a", "h:1"), ("b", "h:2"), &["t"]);
        config.clusters[0].properties = vec![("security.protocol".into(), "SSL".into())];
        config.flows[0].groups = vec!["app-.*".into()];
        config.flows.push(Mm2Flow {
            enabled: false,
            emit_heartbeats: Some(true),
            ..Mm2Flow::new("b", "a", &[])
        });
        config.tasks_max = 2;
        config.replication_policy = Mm2Policy::Identity;
        config.offset_syncs = OffsetSyncs {
            enabled: false,
            location: SyncsLocation::Target,
            lag_max: 10,
        };
        config.checkpoints = Periodic::on(1);
        config.heartbeats = Periodic::off(5);
        config.group_sync = Periodic::on(2);
        config.refresh_topics_seconds = 3;
        config.refresh_groups_seconds = 4;
        config.replication_factor = 3;
        config.offset_flush_interval_ms = Some(1000);
        config.properties = vec![
            ("tasks.max".into(), "4".into()),
            ("topics.exclude".into(), r".*\.tmp".into()),
        ];
        let p = mm2_properties(&config);
        let cases = [
            ("a.security.protocol", Some("SSL")),
            ("b.security.protocol", None),
            ("a->b.groups", Some("app-.*")),
            ("b->a.enabled", Some("false")),
            ("b->a.topics", Some("")),
            ("b->a.emit.heartbeats.enabled", Some("true")),
            ("a->b.emit.heartbeats.enabled", None),
            // The extra property wins, in place.
            ("tasks.max", Some("4")),
            (
                "replication.policy.class",
                Some("org.apache.kafka.connect.mirror.IdentityReplicationPolicy"),
            ),
            ("replication.policy.separator", None),
            ("emit.offset-syncs.enabled", Some("false")),
            ("offset-syncs.topic.location", Some("target")),
            ("offset.lag.max", Some("10")),
            ("emit.checkpoints.interval.seconds", Some("1")),
            ("emit.heartbeats.enabled", Some("false")),
            ("emit.heartbeats.interval.seconds", Some("5")),
            ("sync.group.offsets.enabled", Some("true")),
            ("sync.group.offsets.interval.seconds", Some("2")),
            ("refresh.topics.interval.seconds", Some("3")),
            ("refresh.groups.interval.seconds", Some("4")),
            ("status.storage.replication.factor", Some("3")),
            // Each worker reads it under its target's prefix.
            ("b.offset.flush.interval.ms", Some("1000")),
            ("a.offset.flush.interval.ms", Some("1000")),
            // Backslashes escaped for java.util.Properties.
            ("topics.exclude", Some(r".*\\.tmp")),
        ];
        for (key, want) in cases {
            assert_eq!(get(&p, key), want, "{key}\n{p}");
        }
        assert_eq!(p.matches("tasks.max=").count(), 1, "{p}");
    }

    #[test]
    fn check_table() {
        let ok = MirrorMakerConfig::pair(("a", "h:1"), ("b", "h:2"), &["t"]);
        let mut one = ok.clone();
        one.clusters.pop();
        let mut bad_alias = ok.clone();
        bad_alias.clusters[0].alias = "a.b".into();
        let mut unknown = ok.clone();
        unknown.flows[0].target = "c".into();
        let mut same = ok.clone();
        same.flows[0].target = "a".into();
        let mut no_tasks = ok.clone();
        no_tasks.tasks_max = 0;
        let cases = [
            (ok, None),
            (one, Some("1 cluster(s)")),
            (bad_alias, Some("alias \"a.b\"")),
            (unknown, Some("flow a->c")),
            (same, Some("flow a->a")),
            (no_tasks, Some("tasks_max")),
        ];
        for (config, want) in cases {
            match (config.check(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{e} should say {w}"),
                (got, want) => panic!("{got:?}, want {want:?}"),
            }
        }
    }
}
