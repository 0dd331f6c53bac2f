//! Defaults, enums and every validation rule, valid and invalid.

use super::*;
use serde_json::json;

fn minimal_flow_json() -> serde_json::Value {
    json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
    })
}

fn minimal_spec() -> MirrorFlowSpec {
    serde_json::from_value(minimal_flow_json()).unwrap()
}

fn with(mut v: serde_json::Value, pointer: &str, value: serde_json::Value) -> MirrorFlowSpec {
    // Build nested objects along the pointer so tests can set deep fields concisely.
    let mut cur = &mut v;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            cur[*p] = value.clone();
        } else {
            if cur.get(*p).is_none() {
                cur[*p] = json!({});
            }
            cur = cur.get_mut(*p).unwrap();
        }
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn flow_defaults() {
    let s = minimal_spec();
    assert_eq!(s.topics.include, vec![".*"]);
    assert_eq!(
        s.topics.exclude,
        vec![r".*[\-\.]internal", r".*\.replica", r"__.*"]
    );
    assert_eq!(s.topics.refresh_interval_seconds, 10);
    assert_eq!(s.replication_policy.type_, ReplicationPolicyType::Prefix);
    assert_eq!(s.replication_policy.separator, ".");
    assert_eq!(s.start_from, StartFrom::Earliest);
    assert!(s.offset_validation.enabled);
    assert_eq!(s.delivery, Delivery::ExactlyOnce);
    assert_eq!(s.offset_syncs.lag_max, 100);
    assert!(s.sync_topic_configs);
    assert!(!s.paused);
    assert_eq!(s.workers.replicas, 1);
    assert_eq!(s.workers.in_flight_mib, 45);
    assert_eq!(s.workers.resources, None);
    assert_eq!(s.workers.image, None);
    assert_eq!(s.reset, None);
    assert!(s.source.tls.is_none() && s.source.sasl.is_none() && s.source.config.is_empty());
    assert_eq!(validate_flow(&s), Ok(()));
}

#[test]
fn nested_defaults() {
    let s = with(
        minimal_flow_json(),
        "/source/sasl",
        json!({"mechanism": "PLAIN", "credentials": {"secretName": "creds"}}),
    );
    let c = s
        .source
        .sasl
        .as_ref()
        .unwrap()
        .credentials
        .as_ref()
        .unwrap();
    assert_eq!(
        (c.username_key.as_str(), c.password_key.as_str()),
        ("username", "password")
    );
    let s = with(
        minimal_flow_json(),
        "/source/tls",
        json!({"clientCert": {"secretName": "cert"}}),
    );
    let cc = s.source.tls.as_ref().unwrap().client_cert.as_ref().unwrap();
    assert_eq!(
        (cc.cert_key.as_str(), cc.key_key.as_str()),
        ("tls.crt", "tls.key")
    );
    let s = with(
        minimal_flow_json(),
        "/replicationPolicy",
        json!({"type": "Identity"}),
    );
    assert_eq!(s.replication_policy.separator, ".");
    let s = with(minimal_flow_json(), "/topics", json!({"include": ["a"]}));
    assert_eq!(
        s.topics.exclude.len(),
        3,
        "exclude keeps its default when only include is set"
    );
}

#[test]
fn checkpoint_defaults() {
    let s: OffsetCheckpointSpec =
        serde_json::from_value(json!({"flowRef": {"name": "f"}})).unwrap();
    assert_eq!(s.groups.include, vec![".*"]);
    assert_eq!(
        s.groups.exclude,
        vec!["console-consumer-.*", "connect-.*", "__.*"]
    );
    assert_eq!(s.groups.refresh_interval_seconds, 30);
    assert_eq!(s.interval_seconds, 5);
    assert!(s.sync_group_offsets);
    assert!(s.emit_checkpoints_topic);
    assert_eq!(validate_checkpoint(&s), Ok(()));
}

#[test]
fn enums_round_trip_with_their_wire_names() {
    let cases: Vec<(serde_json::Value, serde_json::Value)> = vec![
        (
            serde_json::to_value(SaslMechanism::Plain).unwrap(),
            json!("PLAIN"),
        ),
        (
            serde_json::to_value(SaslMechanism::ScramSha256).unwrap(),
            json!("SCRAM-SHA-256"),
        ),
        (
            serde_json::to_value(SaslMechanism::ScramSha512).unwrap(),
            json!("SCRAM-SHA-512"),
        ),
        (
            serde_json::to_value(ReplicationPolicyType::Prefix).unwrap(),
            json!("Prefix"),
        ),
        (
            serde_json::to_value(ReplicationPolicyType::Identity).unwrap(),
            json!("Identity"),
        ),
        (
            serde_json::to_value(StartFrom::Earliest).unwrap(),
            json!("Earliest"),
        ),
        (
            serde_json::to_value(StartFrom::Latest).unwrap(),
            json!("Latest"),
        ),
        (
            serde_json::to_value(Delivery::ExactlyOnce).unwrap(),
            json!("ExactlyOnce"),
        ),
        (
            serde_json::to_value(Delivery::AtLeastOnce).unwrap(),
            json!("AtLeastOnce"),
        ),
        (
            serde_json::to_value(ResetStrategy::ResumeFromLogStart).unwrap(),
            json!("ResumeFromLogStart"),
        ),
        (
            serde_json::to_value(ResetStrategy::RestartFromEarliest).unwrap(),
            json!("RestartFromEarliest"),
        ),
        (
            serde_json::to_value(ResetStrategy::SkipToLatest).unwrap(),
            json!("SkipToLatest"),
        ),
        (
            serde_json::to_value(FailureType::DataLoss).unwrap(),
            json!("DataLoss"),
        ),
        (
            serde_json::to_value(FailureType::TopicReset).unwrap(),
            json!("TopicReset"),
        ),
        (
            serde_json::to_value(WorkerState::Degraded).unwrap(),
            json!("Degraded"),
        ),
        (
            serde_json::to_value(ResetOutcome::Refused).unwrap(),
            json!("Refused"),
        ),
        (
            serde_json::to_value(GroupFailureReason::ActiveOnTarget).unwrap(),
            json!("ActiveOnTarget"),
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
    assert_eq!(SaslMechanism::ScramSha512.as_str(), "SCRAM-SHA-512");
    // Unknown enum values are rejected, naming the allowed ones.
    let err = serde_json::from_value::<MirrorFlowSpec>(json!({
        "source": {"alias": "a", "bootstrapServers": "a:1"},
        "target": {"alias": "b", "bootstrapServers": "b:1"},
        "delivery": "Maybe"
    }))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("Maybe") && err.contains("ExactlyOnce"),
        "{err}"
    );
}

/// (description, pointer, value, expected failing field or None when valid)
#[test]
fn flow_validation_table() {
    let rows: Vec<(&str, &str, serde_json::Value, Option<&str>)> = vec![
        ("alias ok", "/source/alias", json!("dc-1"), None),
        (
            "alias uppercase",
            "/source/alias",
            json!("DC1"),
            Some("spec.source.alias"),
        ),
        (
            "alias leading dash",
            "/target/alias",
            json!("-dc"),
            Some("spec.target.alias"),
        ),
        (
            "alias trailing dash",
            "/target/alias",
            json!("dc-"),
            Some("spec.target.alias"),
        ),
        (
            "alias dot",
            "/source/alias",
            json!("dc.1"),
            Some("spec.source.alias"),
        ),
        (
            "alias too long",
            "/source/alias",
            json!("a".repeat(64)),
            Some("spec.source.alias"),
        ),
        (
            "alias empty",
            "/source/alias",
            json!(""),
            Some("spec.source.alias"),
        ),
        (
            "aliases equal",
            "/target/alias",
            json!("dc1"),
            Some("spec.target.alias"),
        ),
        (
            "servers list ok",
            "/source/bootstrapServers",
            json!("a:1, b.c:9092,[::1]:9093"),
            None,
        ),
        (
            "servers empty",
            "/source/bootstrapServers",
            json!(" "),
            Some("spec.source.bootstrapServers"),
        ),
        (
            "servers no port",
            "/source/bootstrapServers",
            json!("a"),
            Some("spec.source.bootstrapServers"),
        ),
        (
            "servers bad port",
            "/target/bootstrapServers",
            json!("a:99999"),
            Some("spec.target.bootstrapServers"),
        ),
        (
            "servers port 0",
            "/target/bootstrapServers",
            json!("a:0"),
            Some("spec.target.bootstrapServers"),
        ),
        (
            "config ok",
            "/source/config",
            json!({"fetch.max.bytes": "1"}),
            None,
        ),
        (
            "config group.id",
            "/source/config",
            json!({"group.id": "x"}),
            Some("spec.source.config[\"group.id\"]"),
        ),
        (
            "config auto commit",
            "/source/config",
            json!({"enable.auto.commit": "true"}),
            Some("spec.source.config[\"enable.auto.commit\"]"),
        ),
        (
            "config reset",
            "/source/config",
            json!({"auto.offset.reset": "earliest"}),
            Some("spec.source.config[\"auto.offset.reset\"]"),
        ),
        (
            "config isolation",
            "/source/config",
            json!({"isolation.level": "read_uncommitted"}),
            Some("spec.source.config[\"isolation.level\"]"),
        ),
        (
            "config txn id",
            "/target/config",
            json!({"transactional.id": "t"}),
            Some("spec.target.config[\"transactional.id\"]"),
        ),
        (
            "config idempotence",
            "/target/config",
            json!({"enable.idempotence": "false"}),
            Some("spec.target.config[\"enable.idempotence\"]"),
        ),
        (
            "config bootstrap",
            "/target/config",
            json!({"bootstrap.servers": "x:1"}),
            Some("spec.target.config[\"bootstrap.servers\"]"),
        ),
        (
            "config security",
            "/target/config",
            json!({"security.protocol": "SSL"}),
            Some("spec.target.config[\"security.protocol\"]"),
        ),
        (
            "config sasl.*",
            "/target/config",
            json!({"sasl.password": "hunter2"}),
            Some("spec.target.config[\"sasl.password\"]"),
        ),
        (
            "config ssl.*",
            "/target/config",
            json!({"ssl.key.location": "/k"}),
            Some("spec.target.config[\"ssl.key.location\"]"),
        ),
        (
            "config acks 1",
            "/target/config",
            json!({"acks": "1"}),
            Some("spec.target.config[\"acks\"]"),
        ),
        (
            "config acks all",
            "/target/config",
            json!({"acks": "all"}),
            None,
        ),
        (
            "config acks -1",
            "/target/config",
            json!({"request.required.acks": "-1"}),
            None,
        ),
        (
            "config in flight 6",
            "/target/config",
            json!({"max.in.flight.requests.per.connection": "6"}),
            Some("spec.target.config[\"max.in.flight.requests.per.connection\"]"),
        ),
        (
            "config in flight 5",
            "/target/config",
            json!({"max.in.flight": "5"}),
            None,
        ),
        (
            "config in flight junk",
            "/target/config",
            json!({"max.in.flight": "lots"}),
            Some("spec.target.config[\"max.in.flight\"]"),
        ),
        (
            "config retries 0",
            "/target/config",
            json!({"retries": "0"}),
            Some("spec.target.config[\"retries\"]"),
        ),
        (
            "config retries 3",
            "/target/config",
            json!({"message.send.max.retries": "3"}),
            None,
        ),
        (
            "config message timeout",
            "/target/config",
            json!({"message.timeout.ms": "0"}),
            Some("spec.target.config[\"message.timeout.ms\"]"),
        ),
        (
            "config transaction timeout",
            "/target/config",
            json!({"transaction.timeout.ms": "900000"}),
            Some("spec.target.config[\"transaction.timeout.ms\"]"),
        ),
        (
            "config gapless",
            "/target/config",
            json!({"enable.gapless.guarantee": "false"}),
            Some("spec.target.config[\"enable.gapless.guarantee\"]"),
        ),
        (
            "config case-insensitive",
            "/target/config",
            json!({"Group.Id": "x"}),
            Some("spec.target.config[\"Group.Id\"]"),
        ),
        (
            "include regex bad",
            "/topics/include",
            json!(["ok", "(unclosed"]),
            Some("spec.topics.include[1]"),
        ),
        (
            "exclude regex bad",
            "/topics/exclude",
            json!(["[z-a]"]),
            Some("spec.topics.exclude[0]"),
        ),
        (
            "include empty",
            "/topics/include",
            json!([]),
            Some("spec.topics.include"),
        ),
        (
            "refresh 0",
            "/topics/refreshIntervalSeconds",
            json!(0),
            Some("spec.topics.refreshIntervalSeconds"),
        ),
        (
            "refresh too big",
            "/topics/refreshIntervalSeconds",
            json!(3601),
            Some("spec.topics.refreshIntervalSeconds"),
        ),
        (
            "separator ok",
            "/replicationPolicy",
            json!({"type": "Prefix", "separator": "_"}),
            None,
        ),
        (
            "separator bad char",
            "/replicationPolicy",
            json!({"type": "Prefix", "separator": "/"}),
            Some("spec.replicationPolicy.separator"),
        ),
        (
            "separator empty",
            "/replicationPolicy",
            json!({"type": "Prefix", "separator": ""}),
            Some("spec.replicationPolicy.separator"),
        ),
        (
            "separator checked for identity too (it names heartbeats topics)",
            "/replicationPolicy",
            json!({"type": "Identity", "separator": "/"}),
            Some("spec.replicationPolicy.separator"),
        ),
        (
            "heartbeats off",
            "/heartbeats",
            json!({"intervalSeconds": 0}),
            None,
        ),
        (
            "heartbeats every 30 s",
            "/heartbeats",
            json!({"intervalSeconds": 30}),
            None,
        ),
        (
            "heartbeats negative",
            "/heartbeats",
            json!({"intervalSeconds": -1}),
            Some("spec.heartbeats.intervalSeconds"),
        ),
        (
            "heartbeats too rare",
            "/heartbeats",
            json!({"intervalSeconds": 3601}),
            Some("spec.heartbeats.intervalSeconds"),
        ),
        (
            "lagMax 0",
            "/offsetSyncs/lagMax",
            json!(0),
            Some("spec.offsetSyncs.lagMax"),
        ),
        ("lagMax 1", "/offsetSyncs/lagMax", json!(1), None),
        (
            "replicas 0",
            "/workers/replicas",
            json!(0),
            Some("spec.workers.replicas"),
        ),
        (
            "replicas 1001",
            "/workers/replicas",
            json!(1001),
            Some("spec.workers.replicas"),
        ),
        ("replicas 5", "/workers/replicas", json!(5), None),
        (
            "inFlightMiB 0",
            "/workers/inFlightMiB",
            json!(0),
            Some("spec.workers.inFlightMiB"),
        ),
        (
            "inFlightMiB 1025",
            "/workers/inFlightMiB",
            json!(1025),
            Some("spec.workers.inFlightMiB"),
        ),
        ("inFlightMiB 32", "/workers/inFlightMiB", json!(32), None),
        (
            "image blank",
            "/workers/image",
            json!(" "),
            Some("spec.workers.image"),
        ),
        (
            "image ok",
            "/workers/image",
            json!("ghcr.io/x/mirrorflow:1.0"),
            None,
        ),
        (
            "reset ok",
            "/reset",
            json!({"id": "r1", "strategy": "SkipToLatest"}),
            None,
        ),
        (
            "reset empty id",
            "/reset",
            json!({"id": "", "strategy": "SkipToLatest"}),
            Some("spec.reset.id"),
        ),
        (
            "reset bad topic",
            "/reset",
            json!({"id": "r", "strategy": "SkipToLatest", "partitions": [{"topic": "a/b", "partition": 0}]}),
            Some("spec.reset.partitions[0].topic"),
        ),
        (
            "reset negative partition",
            "/reset",
            json!({"id": "r", "strategy": "SkipToLatest", "partitions": [{"topic": "a", "partition": -1}]}),
            Some("spec.reset.partitions[0].partition"),
        ),
        (
            "reset duplicate",
            "/reset",
            json!({"id": "r", "strategy": "SkipToLatest", "partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]}),
            Some("spec.reset.partitions[1]"),
        ),
        (
            "tls ca ok",
            "/source/tls",
            json!({"ca": {"secretName": "ca", "key": "ca.crt"}}),
            None,
        ),
        (
            "tls ca bad secret",
            "/source/tls",
            json!({"ca": {"secretName": "Bad_Name", "key": "ca.crt"}}),
            Some("spec.source.tls.ca.secretName"),
        ),
        (
            "tls cert bad key",
            "/source/tls",
            json!({"clientCert": {"secretName": "c", "keyKey": "../x"}}),
            Some("spec.source.tls.clientCert.keyKey"),
        ),
        (
            "sasl bad secret",
            "/target/sasl",
            json!({"mechanism": "SCRAM-SHA-256", "credentials": {"secretName": ""}}),
            Some("spec.target.sasl.credentials.secretName"),
        ),
        (
            "scram without tls is fine (the password never travels)",
            "/target/sasl",
            json!({"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "c"}}),
            None,
        ),
        (
            "plain without tls",
            "/target/sasl",
            json!({"mechanism": "PLAIN", "credentials": {"secretName": "c"}}),
            Some("spec.target.sasl.mechanism"),
        ),
        (
            "oauthbearer without tls",
            "/target/sasl",
            json!({"mechanism": "OAUTHBEARER", "oauthBearer": {"tokenEndpointUrl": "https://idp/t",
                   "clientId": "m", "clientSecret": {"secretName": "o", "key": "s"}}}),
            Some("spec.target.sasl.mechanism"),
        ),
        (
            "scram without credentials",
            "/target/sasl",
            json!({"mechanism": "SCRAM-SHA-256"}),
            Some("spec.target.sasl.credentials"),
        ),
        (
            "scram with oauthBearer",
            "/target/sasl",
            json!({"mechanism": "SCRAM-SHA-256", "credentials": {"secretName": "c"},
                   "oauthBearer": {"tokenEndpointUrl": "https://idp/t", "clientId": "m",
                                   "clientSecret": {"secretName": "o", "key": "s"}}}),
            Some("spec.target.sasl.credentials"),
        ),
        (
            "config bypasses certificate verification",
            "/source/config",
            json!({"enable.ssl.certificate.verification": "false"}),
            Some("spec.source.config[\"enable.ssl.certificate.verification\"]"),
        ),
        (
            "config sets a CA location",
            "/source/config",
            json!({"SSL.CA.Location": "/tmp/evil.pem"}),
            Some("spec.source.config[\"SSL.CA.Location\"]"),
        ),
        (
            "config turns off host name checks",
            "/source/config",
            json!({"ssl.endpoint.identification.algorithm": "none"}),
            Some("spec.source.config[\"ssl.endpoint.identification.algorithm\"]"),
        ),
        (
            "config sets a sasl password inline",
            "/target/config",
            json!({"sasl.password": "hunter2"}),
            Some("spec.target.config[\"sasl.password\"]"),
        ),
        (
            "config enables unsigned tokens",
            "/target/config",
            json!({"enable.sasl.oauthbearer.unsecure.jwt": "true"}),
            Some("spec.target.config[\"enable.sasl.oauthbearer.unsecure.jwt\"]"),
        ),
        (
            "config trusts another token endpoint CA",
            "/target/config",
            json!({"https.ca.location": "/tmp/x"}),
            Some("spec.target.config[\"https.ca.location\"]"),
        ),
        (
            "insecureSkipVerify is the documented opt-out",
            "/source/tls",
            json!({"insecureSkipVerify": true}),
            None,
        ),
        (
            "topic config exclusion ok",
            "/topicConfigs/exclude",
            json!(["retention\\..*", "segment.bytes"]),
            None,
        ),
        (
            "topic config exclusion not a regex",
            "/topicConfigs/exclude",
            json!(["ok", "retention(.ms"]),
            Some("spec.topicConfigs.exclude[1]"),
        ),
        ("target RF 3", "/target/replicationFactor", json!(3), None),
        (
            "target RF 0",
            "/target/replicationFactor",
            json!(0),
            Some("spec.target.replicationFactor"),
        ),
        (
            "target RF -1 (the default is spelled by leaving it out)",
            "/target/replicationFactor",
            json!(-1),
            Some("spec.target.replicationFactor"),
        ),
        (
            "target RF above Kafka's int16",
            "/target/replicationFactor",
            json!(40000),
            Some("spec.target.replicationFactor"),
        ),
        (
            "RF on the source",
            "/source/replicationFactor",
            json!(3),
            Some("spec.source.replicationFactor"),
        ),
        (
            "take over from MM2's default offsets topic",
            "/source/startFrom",
            json!({"mirrorMaker2": {}}),
            None,
        ),
        (
            "take over from a named offsets topic",
            "/source/startFrom",
            json!({"mirrorMaker2": {"offsetsTopic": "mirrormaker2-cluster-offsets"}}),
            None,
        ),
        (
            "offsets topic not a topic name",
            "/source/startFrom",
            json!({"mirrorMaker2": {"offsetsTopic": "mm2 offsets"}}),
            Some("spec.source.startFrom.mirrorMaker2.offsetsTopic"),
        ),
        (
            "fail back after a failover",
            "/source/startFrom",
            json!({"afterFailover": {"flow": "prod/dr", "id": "move-1", "copyDiverged": true}}),
            None,
        ),
        (
            "fail back: flow without a namespace",
            "/source/startFrom",
            json!({"afterFailover": {"flow": "dr", "id": "move-1"}}),
            Some("spec.source.startFrom.afterFailover.flow"),
        ),
        (
            "fail back: flow with an empty name",
            "/source/startFrom",
            json!({"afterFailover": {"flow": "prod/", "id": "move-1"}}),
            Some("spec.source.startFrom.afterFailover.flow"),
        ),
        (
            "fail back: empty id",
            "/source/startFrom",
            json!({"afterFailover": {"flow": "prod/dr", "id": ""}}),
            Some("spec.source.startFrom.afterFailover.id"),
        ),
        (
            "both sources of positions",
            "/source/startFrom",
            json!({"mirrorMaker2": {}, "afterFailover": {"flow": "prod/dr", "id": "x"}}),
            Some("spec.source.startFrom.afterFailover"),
        ),
        (
            "startFrom without a source of positions",
            "/source/startFrom",
            json!({}),
            Some("spec.source.startFrom"),
        ),
        (
            "startFrom on the target",
            "/target/startFrom",
            json!({"mirrorMaker2": {}}),
            Some("spec.target.startFrom"),
        ),
        (
            "internal topics RF 2",
            "/internalTopics/replicationFactor",
            json!(2),
            None,
        ),
        (
            "internal topics RF 0",
            "/internalTopics/replicationFactor",
            json!(0),
            Some("spec.internalTopics.replicationFactor"),
        ),
    ];
    for (what, pointer, value, expected) in rows {
        let spec = with(minimal_flow_json(), pointer, value.clone());
        let got = validate_flow(&spec);
        match expected {
            None => assert_eq!(got, Ok(()), "{what}: expected valid"),
            Some(field) => {
                let errs = got.expect_err(what);
                assert_eq!(errs.fields(), vec![field], "{what}: {errs}");
                // The message names the field and shows the value (but never a config value).
                let text = errs.to_string();
                assert!(text.contains(field), "{what}: {text}");
            }
        }
    }
}

#[test]
fn config_errors_never_echo_values() {
    let spec = with(
        minimal_flow_json(),
        "/target/config",
        json!({"sasl.password": "hunter2"}),
    );
    let text = validate_flow(&spec).unwrap_err().to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("typed tls and sasl fields"), "{text}");
}

#[test]
fn all_errors_are_reported_at_once() {
    let mut v = minimal_flow_json();
    v["source"]["alias"] = json!("BAD");
    v["target"]["bootstrapServers"] = json!("nope");
    v["topics"] = json!({"include": ["("]});
    let errs = validate_flow(&serde_json::from_value(v).unwrap()).unwrap_err();
    assert_eq!(
        errs.fields(),
        vec![
            "spec.source.alias",
            "spec.target.bootstrapServers",
            "spec.topics.include[0]"
        ]
    );
}

/// A spec wrong in every part: each rule reports, in the order the spec is read.
#[test]
fn every_part_of_the_spec_reports_in_order() {
    let mut v = minimal_flow_json();
    v["target"]["alias"] = json!("dc1");
    v["source"]["replicationFactor"] = json!(3);
    v["target"]["replicationFactor"] = json!(0);
    v["internalTopics"] = json!({"replicationFactor": -1});
    v["topics"] = json!({"include": [], "exclude": ["("], "refreshIntervalSeconds": 0});
    v["topicConfigs"] = json!({"exclude": ["["]});
    v["replicationPolicy"] = json!({"type": "Prefix", "separator": "/"});
    v["offsetSyncs"] = json!({"lagMax": 0});
    v["workers"] = json!({"replicas": 0, "inFlightMiB": 0, "image": " "});
    v["heartbeats"] = json!({"intervalSeconds": -1});
    v["reset"] = json!({"id": "", "strategy": "SkipToLatest",
        "partitions": [{"topic": "a/b", "partition": -1}, {"topic": "a/b", "partition": -1}]});
    let errs = validate_flow(&serde_json::from_value(v).unwrap()).unwrap_err();
    assert_eq!(
        errs.fields(),
        vec![
            "spec.target.alias",
            "spec.topics.include",
            "spec.topics.exclude[0]",
            "spec.topicConfigs.exclude[0]",
            "spec.source.replicationFactor",
            "spec.target.replicationFactor",
            "spec.internalTopics.replicationFactor",
            "spec.topics.refreshIntervalSeconds",
            "spec.replicationPolicy.separator",
            "spec.offsetSyncs.lagMax",
            "spec.workers.replicas",
            "spec.workers.inFlightMiB",
            "spec.heartbeats.intervalSeconds",
            "spec.workers.image",
            "spec.reset.id",
            "spec.reset.partitions[0].topic",
            "spec.reset.partitions[0].partition",
            "spec.reset.partitions[1].topic",
            "spec.reset.partitions[1].partition",
            "spec.reset.partitions[1]",
        ]
    );
}

#[test]
fn plain_sasl_needs_tls() {
    let plain = json!({"mechanism": "PLAIN", "credentials": {"secretName": "creds"}});
    let mut v = minimal_flow_json();
    v["target"]["sasl"] = plain.clone();
    let errs = validate_flow(&serde_json::from_value(v.clone()).unwrap()).unwrap_err();
    assert_eq!(errs.fields(), vec!["spec.target.sasl.mechanism"]);
    assert!(errs.to_string().contains("clear text"), "{errs}");
    v["target"]["tls"] = json!({});
    assert_eq!(
        validate_flow(&serde_json::from_value(v.clone()).unwrap()),
        Ok(())
    );
    v["target"]["sasl"]["mechanism"] = json!("SCRAM-SHA-256");
    v["target"].as_object_mut().unwrap().remove("tls");
    assert_eq!(validate_flow(&serde_json::from_value(v).unwrap()), Ok(()));
}

#[test]
fn crds_check_names_and_patterns() {
    let crds = crds();
    let flow = serde_json::to_value(&crds[0]).unwrap();
    let root = &flow["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let name = &root["properties"]["metadata"]["properties"]["name"];
    assert_eq!(name["maxLength"], MAX_FLOW_NAME_LEN);
    assert!(name["x-kubernetes-validations"][0]["rule"]
        .as_str()
        .unwrap()
        .contains("^[a-z]([-a-z0-9]*[a-z0-9])?$"));
    for (doc, path) in [
        (&flow, "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/topics/properties/include"),
        (&flow, "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/topics/properties/exclude"),
    ] {
        let list = doc.pointer(path).unwrap();
        assert!(list["maxItems"].is_u64(), "{path}");
        assert!(list["items"]["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap()
            .contains("matches(self)"));
    }
    let cp = serde_json::to_value(&crds[1]).unwrap();
    assert!(cp.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/groups/properties/include/items/x-kubernetes-validations").is_some());
}

#[test]
fn checkpoint_validation_table() {
    let base = json!({"flowRef": {"name": "flow"}});
    let rows: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
        ("ok", json!({}), None),
        (
            "flowRef empty",
            json!({"flowRef": {"name": ""}}),
            Some("spec.flowRef.name"),
        ),
        (
            "flowRef upper",
            json!({"flowRef": {"name": "Flow"}}),
            Some("spec.flowRef.name"),
        ),
        (
            "include bad",
            json!({"groups": {"include": ["*"]}}),
            Some("spec.groups.include[0]"),
        ),
        (
            "exclude bad",
            json!({"groups": {"exclude": ["a", "b)"]}}),
            Some("spec.groups.exclude[1]"),
        ),
        (
            "include empty",
            json!({"groups": {"include": []}}),
            Some("spec.groups.include"),
        ),
        (
            "interval 0",
            json!({"intervalSeconds": 0}),
            Some("spec.intervalSeconds"),
        ),
        ("interval 1", json!({"intervalSeconds": 1}), None),
        (
            "group refresh 0",
            json!({"groups": {"refreshIntervalSeconds": 0}}),
            Some("spec.groups.refreshIntervalSeconds"),
        ),
        (
            "both off",
            json!({"syncGroupOffsets": false, "emitCheckpointsTopic": false}),
            Some("spec.emitCheckpointsTopic"),
        ),
        (
            "sync only",
            json!({"syncGroupOffsets": true, "emitCheckpointsTopic": false}),
            None,
        ),
        (
            "emit only",
            json!({"syncGroupOffsets": false, "emitCheckpointsTopic": true}),
            None,
        ),
    ];
    for (what, patch, expected) in rows {
        let mut v = base.clone();
        for (k, val) in patch.as_object().unwrap() {
            v[k] = val.clone();
        }
        let spec: OffsetCheckpointSpec = serde_json::from_value(v).unwrap();
        match expected {
            None => assert_eq!(validate_checkpoint(&spec), Ok(()), "{what}"),
            Some(field) => {
                let errs = validate_checkpoint(&spec).expect_err(what);
                assert_eq!(errs.fields(), vec![field], "{what}: {errs}");
            }
        }
    }
}

#[test]
fn history_fields_cannot_change_on_an_existing_flow() {
    let old = minimal_flow_json();
    #[rustfmt::skip]
    let cases: [(&str, &str, serde_json::Value, Option<&str>); 7] = [
        ("source alias", "/source/alias", json!("dc9"), Some("spec.source.alias cannot change")),
        ("source servers", "/source/bootstrapServers", json!("elsewhere:9092"), Some("spec.source.bootstrapServers cannot change")),
        ("target alias", "/target/alias", json!("dc9"), Some("spec.target.alias cannot change")),
        ("policy set", "/replicationPolicy", json!({"type": "Identity"}), Some("spec.replicationPolicy cannot change")),
        ("target servers may move", "/target/bootstrapServers", json!("b2:9092"), None),
        ("pause", "/paused", json!(true), None),
        ("topics", "/topics", json!({"include": ["orders"]}), None),
    ];
    for (name, path, value, want) in cases {
        let mut new = old.clone();
        let (parent, key) = path.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut new
        } else {
            new.pointer_mut(parent).unwrap()
        };
        target[key] = value;
        let got = MirrorFlowSpec::validate_cel(&new, Some(&old));
        match want {
            None => assert!(got.is_ok(), "{name}: {got:?}"),
            Some(msg) => {
                let err = format!("{:?}", got.expect_err(name));
                assert!(err.contains(msg), "{name}: {err}");
            }
        }
    }
}

#[test]
fn cel_rules_match_validate() {
    // The same cross-field rules run in the API server (CEL) and in validate().
    let ok = minimal_flow_json();
    assert!(MirrorFlowSpec::validate_cel(&ok, None).is_ok());
    let mut same = minimal_flow_json();
    same["target"]["alias"] = json!("dc1");
    let err = MirrorFlowSpec::validate_cel(&same, None).unwrap_err();
    assert!(format!("{err:?}").contains("must differ"), "{err:?}");
    let mut source_rf = minimal_flow_json();
    source_rf["source"]["replicationFactor"] = json!(3);
    let err = MirrorFlowSpec::validate_cel(&source_rf, None).unwrap_err();
    assert!(
        format!("{err:?}").contains("spec.source.replicationFactor is not used"),
        "{err:?}"
    );
    let mut target_rf = minimal_flow_json();
    target_rf["target"]["replicationFactor"] = json!(3);
    assert!(MirrorFlowSpec::validate_cel(&target_rf, None).is_ok());

    let cp = |sync: bool, emit: bool| {
        json!({"flowRef": {"name": "f"}, "groups": {"include": [".*"], "exclude": [], "refreshIntervalSeconds": 30},
               "intervalSeconds": 5, "syncGroupOffsets": sync, "emitCheckpointsTopic": emit})
    };
    assert!(OffsetCheckpointSpec::validate_cel(&cp(true, false), None).is_ok());
    assert!(OffsetCheckpointSpec::validate_cel(&cp(false, true), None).is_ok());
    assert!(OffsetCheckpointSpec::validate_cel(&cp(false, false), None).is_err());
}

#[test]
fn owned_properties_have_reasons() {
    for p in validate::OWNED_PROPERTIES {
        assert!(validate::owned_property_reason(p).is_some(), "{p}");
    }
    assert!(validate::owned_property_reason("linger.ms").is_none());
    assert!(validate::owned_property_reason("client.id").is_none());
}

const FLOW_DOC: &str = "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: f\nspec:\n  source: {alias: a, bootstrapServers: 'a:1'}\n  target: {alias: b, bootstrapServers: 'b:1'}\n";

#[test]
fn load_flow_with_checkpoints() {
    let text = format!(
        "{FLOW_DOC}---\napiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\nmetadata:\n  name: g\nspec:\n  flowRef: {{name: f}}\n---\n"
    );
    let file = parse_flow_file(&text).unwrap();
    assert_eq!(file.flow.metadata.name.as_deref(), Some("f"));
    assert_eq!(file.checkpoints.len(), 1);
}

#[test]
fn load_errors_name_the_problem() {
    let cp = |flow: &str| {
        format!("---\napiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\nmetadata:\n  name: g\nspec:\n  flowRef: {{name: {flow}}}\n")
    };
    let rows: Vec<(String, &str)> = vec![
        (
            FLOW_DOC.replace("spec:\n", "spec:\n  offsetValidaton: {enabled: false}\n"),
            "unknown field spec.offsetValidaton",
        ),
        (
            FLOW_DOC.replace("v1alpha1", "v1"),
            "apiVersion \"mirrorflow.io/v1\"",
        ),
        (
            FLOW_DOC.replace("kind: MirrorFlow", "kind: KafkaMirrorMaker2"),
            "kind \"KafkaMirrorMaker2\"",
        ),
        (
            FLOW_DOC.replace("alias: b", "alias: B"),
            "spec.target.alias",
        ),
        (
            FLOW_DOC.replace("  name: f\n", ""),
            "metadata.name is required",
        ),
        (
            format!("{FLOW_DOC}---\n{FLOW_DOC}"),
            "2 MirrorFlow documents",
        ),
        (cp("f"), "no MirrorFlow"),
        (
            format!("{FLOW_DOC}{}", cp("other")),
            "spec.flowRef.name is \"other\"",
        ),
        (
            FLOW_DOC.replace("delivery", "x") + "  delivery: Sometimes\n",
            "Sometimes",
        ),
        ("spec: [unclosed".to_string(), "invalid YAML"),
    ];
    for (text, want) in rows {
        let err = parse_flow_file(&text).expect_err(want).to_string();
        assert!(err.contains(want), "want {want:?} in {err:?}");
    }
}

#[test]
fn crds_are_structural_and_described() {
    let yaml = crds_yaml();
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    fn walk(path: &str, s: &serde_json::Value, problems: &mut Vec<String>) {
        let obj = s.as_object().unwrap();
        for bad in ["oneOf", "anyOf", "allOf", "$ref"] {
            if obj.contains_key(bad) {
                problems.push(format!("{path}: {bad}"));
            }
        }
        let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
        let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        if !obj.contains_key("type") && !int_or_string && !preserve {
            problems.push(format!("{path}: no type"));
        }
        if !obj.contains_key("description")
            && !path.ends_with("[]")
            && !path.ends_with("{}")
            && path.matches('.').count() > 1
        {
            problems.push(format!("{path}: no description"));
        }
        if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
            for (k, v) in props {
                walk(&format!("{path}.{k}"), v, problems);
            }
        }
        if let Some(items) = obj.get("items") {
            walk(&format!("{path}[]"), items, problems);
        }
        if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
            walk(&format!("{path}{{}}"), ap, problems);
        }
    }
    let mut problems = Vec::new();
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap();
        let v = &d["spec"]["versions"][0];
        assert_eq!(
            v["subresources"]["status"],
            json!({}),
            "{name}: status subresource"
        );
        assert!(
            v["additionalPrinterColumns"].as_array().unwrap().len() >= 4,
            "{name}"
        );
        assert!(
            d["spec"]["names"]["shortNames"].as_array().is_some(),
            "{name}"
        );
        walk(name, &v["schema"]["openAPIV3Schema"], &mut problems);
    }
    // metadata (the API server allows nothing there but name restrictions), and k8s-openapi's
    // ResourceRequirements internals, carry no descriptions of ours.
    problems.retain(|p| !p.ends_with(".metadata: no description"));
    problems.retain(|p| !p.contains(".resources.") || p.ends_with(": no type"));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn security_refusals_in_cel_and_validate() {
    // Each is refused by the API server (CEL) and by validate() (standalone mode), and each
    // message names what to use instead.
    let oauth = |url: &str| {
        json!({"mechanism": "OAUTHBEARER", "oauthBearer": {"tokenEndpointUrl": url,
               "clientId": "m", "clientSecret": {"secretName": "o", "key": "s"}}})
    };
    let tls = json!({"ca": {"secretName": "ca", "key": "ca.crt"}});
    type Row<'a> = (&'a str, Vec<(&'a str, serde_json::Value)>, Option<&'a str>);
    let rows: Vec<Row> = vec![
        (
            "plain without tls",
            vec![(
                "/source/sasl",
                json!({"mechanism": "PLAIN", "credentials": {"secretName": "c"}}),
            )],
            Some("clear text"),
        ),
        (
            "plain with tls",
            vec![
                (
                    "/source/sasl",
                    json!({"mechanism": "PLAIN", "credentials": {"secretName": "c"}}),
                ),
                ("/source/tls", tls.clone()),
            ],
            None,
        ),
        (
            "verification off through config",
            vec![(
                "/target/config",
                json!({"enable.ssl.certificate.verification": "false"}),
            )],
            Some("insecureSkipVerify"),
        ),
        (
            "ssl key through config, upper case",
            vec![("/target/config", json!({"SSL.KEY.LOCATION": "/x"}))],
            Some("typed tls and sasl"),
        ),
        (
            "oauth over http to a remote host",
            vec![
                ("/target/sasl", oauth("http://idp.example/token")),
                ("/target/tls", tls.clone()),
            ],
            Some("https"),
        ),
        (
            "oauth over http to loopback",
            vec![
                ("/target/sasl", oauth("http://127.0.0.1:8080/token")),
                ("/target/tls", tls.clone()),
            ],
            None,
        ),
        (
            "oauth over https",
            vec![
                ("/target/sasl", oauth("https://idp.example/token")),
                ("/target/tls", tls.clone()),
            ],
            None,
        ),
        (
            "oauth with username credentials instead",
            vec![
                (
                    "/target/sasl",
                    json!({"mechanism": "OAUTHBEARER", "credentials": {"secretName": "c"}}),
                ),
                ("/target/tls", tls.clone()),
            ],
            Some("oauthBearer"),
        ),
    ];
    for (what, patches, refused) in rows {
        let mut v = minimal_flow_json();
        for (pointer, value) in &patches {
            let spec = with(v.clone(), pointer, value.clone());
            v = serde_json::to_value(&spec).unwrap();
        }
        let spec: MirrorFlowSpec = serde_json::from_value(v.clone()).unwrap();
        let by_validate = validate_flow(&spec);
        let by_cel = MirrorFlowSpec::validate_cel(&v, None);
        match refused {
            None => {
                assert_eq!(by_validate, Ok(()), "{what}");
                assert!(by_cel.is_ok(), "{what}: {by_cel:?}");
            }
            Some(needle) => {
                let e = by_validate.expect_err(what).to_string();
                assert!(e.contains(needle), "{what}: validate: {e}");
                let c = format!("{:?}", by_cel.expect_err(what));
                assert!(c.contains(needle), "{what}: CEL: {c}");
            }
        }
    }
}

#[test]
fn loopback_http_table() {
    let cases = [
        ("http://localhost/token", true),
        ("http://localhost:8080/token", true),
        ("http://127.0.0.1:1/x?y", true),
        ("http://[::1]:9/t", true),
        ("http://localhost.evil.example/t", false),
        ("http://127.0.0.1.evil.example/t", false),
        ("http://user@evil.example/t", false),
        ("https://localhost/t", false),
        ("http://idp.example/t", false),
    ];
    for (url, want) in cases {
        assert_eq!(validate::is_loopback_http(url), want, "{url}");
    }
}
