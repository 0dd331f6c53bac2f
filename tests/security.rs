//! Secured clusters on Apache Kafka: TLS with a CA from a Secret (host names verified),
//! mutual TLS with SCRAM-SHA-256 on one listener, SCRAM-SHA-512, OAUTHBEARER with tokens
//! from a local endpoint that the broker validates, the topic ACL sync on Kafka's
//! authorizer; a standalone worker reading its Secrets from a `--secrets-dir` laid out like
//! the kubelet's mounts; connection failures classified. Certificates are made here.
//!
//! The worker's principals are super users: what they need beyond that is not this file's
//! subject. The tests' own reads and writes go through each cluster's PLAINTEXT listener.
//! Plaintext sources are the binary's shared cluster (names of each test's own); a secured
//! cluster is a test's own (its certificate is replaced by restarting it).

mod replication_support;
mod security_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mirrorflow::kafka::secrets::kubelet::write_secret;
use mirrorflow::testkit::brokers::{self, kafka_or_skip, shared_kafka_or_skip, LocalBroker};
use mirrorflow::testkit::kafka::{KafkaConfig, Listener, OAuthValidation};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use replication_support::*;
use security_support::*;

const PARTITIONS: i32 = 2;

/// Secret `target-user` with user `mirror` and `password`, mounted the kubelet way.
fn write_target_user(secrets: &std::path::Path, password: &[u8]) {
    write_secret(
        secrets,
        "target-user",
        &[("username", b"mirror"), ("password", password)],
    )
    .unwrap();
}

/// Waits (bounded) until `topic` exists with its partitions.
async fn wait_topic(bootstrap: &str, topic: &str) {
    let deadline = Instant::now() + WAIT;
    while brokers::topic_partitions(bootstrap, topic)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "{topic} never appeared on {bootstrap}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A cluster of this test's own whose certificate `ca` signs (for 127.0.0.1), serving
/// `listeners`, with SCRAM-SHA-512 user `mirror` (password `mirror_pw`), a super user.
fn secured_config(
    dir: &std::path::Path,
    name: &str,
    ca: &Ca,
    listeners: &[Listener],
    mirror_pw: &str,
) -> KafkaConfig {
    let tls = write_tls_files(
        dir,
        name,
        &ca.server(&["127.0.0.1"], Validity::Current),
        &ca.pem,
    );
    let mut config = KafkaConfig::secured(
        tls,
        vec![("mirror".into(), mirror_pw.into())],
        OAuthValidation::Unsecured,
    );
    config.listeners = listeners.to_vec();
    config.super_users = vec!["User:mirror".into()];
    config
}

/// The source: one listener with mutual TLS *and* SASL SCRAM-SHA-256 (client certificates
/// signed by `ca` required, then the login), user `mirror` / `src-mirror-pw`. Returns the
/// cluster and that listener's address.
async fn mtls_scram256_source(dir: &std::path::Path, ca: &Ca) -> Option<(LocalBroker, String)> {
    let mut config = secured_config(dir, "source-broker", ca, &[Listener::Scram], "unused");
    let scram256 = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
    config.properties = vec![
        (
            "listener.name.scram.ssl.client.auth".into(),
            "required".into(),
        ),
        (
            "listener.name.scram.sasl.enabled.mechanisms".into(),
            "SCRAM-SHA-256".into(),
        ),
        (
            "listener.name.scram.scram-sha-256.sasl.jaas.config".into(),
            scram256.into(),
        ),
    ];
    let broker = kafka_or_skip(config).await?;
    let cluster = broker.kafka().unwrap();
    cluster
        .tool(
            "org.apache.kafka.tools.ConfigCommand",
            &[
                "--bootstrap-server",
                &broker.bootstrap_servers(),
                "--alter",
                "--add-config",
                "SCRAM-SHA-256=[password=src-mirror-pw]",
                "--entity-type",
                "users",
                "--entity-name",
                "mirror",
            ],
        )
        .await
        .unwrap();
    let addr = cluster.listener(Listener::Scram);
    Some((broker, addr))
}

/// The target: TLS (`ca`) and SCRAM-SHA-512, user `mirror` / `tgt-mirror-pw`; plus a
/// mutual-TLS listener. Returns the cluster and its SCRAM listener's address.
async fn tls_scram_target(dir: &std::path::Path, ca: &Ca) -> Option<(LocalBroker, String)> {
    let config = secured_config(
        dir,
        "target-broker",
        ca,
        &[Listener::Scram, Listener::Mtls],
        "tgt-mirror-pw",
    );
    let broker = kafka_or_skip(config).await?;
    let addr = broker.kafka().unwrap().listener(Listener::Scram);
    Some((broker, addr))
}

/// Sets user `mirror`'s SCRAM-SHA-512 password on a running cluster (AlterUserScramCredentials).
async fn set_mirror_password(broker: &LocalBroker, password: &str) {
    broker
        .kafka()
        .unwrap()
        .tool(
            "org.apache.kafka.tools.ConfigCommand",
            &[
                "--bootstrap-server",
                &broker.bootstrap_servers(),
                "--alter",
                "--add-config",
                &format!("SCRAM-SHA-512=[password={password}]"),
                "--entity-type",
                "users",
                "--entity-name",
                "mirror",
            ],
        )
        .await
        .unwrap();
}

fn flow_yaml(src: &str, tgt: &str) -> String {
    format!(
        "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: secured}}
spec:
  source:
    alias: dc1
    bootstrapServers: '{src}'
    tls:
      ca: {{secretName: source-ca, key: ca.crt}}
      clientCert: {{secretName: source-client}}
    sasl:
      mechanism: SCRAM-SHA-256
      credentials: {{secretName: source-user}}
  target:
    alias: dc2
    bootstrapServers: '{tgt}'
    tls:
      ca: {{secretName: target-ca, key: ca.crt}}
    sasl:
      mechanism: SCRAM-SHA-512
      credentials: {{secretName: target-user}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
  delivery: AtLeastOnce
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: billing}}
spec:
  flowRef: {{name: secured}}
  groups: {{include: [billing], refreshIntervalSeconds: 1}}
  intervalSeconds: 1
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_scram256_source_to_tls_scram512_target_replicates_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (src_ca, tgt_ca) = (Ca::new("source ca"), Ca::new("target ca"));
    let client = src_ca.client("mirror");
    let (Some((source, src_addr)), Some((target, tgt_addr))) = tokio::join!(
        mtls_scram256_source(dir.path(), &src_ca),
        tls_scram_target(dir.path(), &tgt_ca)
    ) else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());

    source
        .create_topic("orders", PARTITIONS, &[])
        .await
        .unwrap();
    let recs = records("sec", PARTITIONS, 50);
    brokers::produce(&src, "orders", &recs).await.unwrap();
    let group_at: BTreeMap<i32, i64> = [(0, 10), (1, 50)].into_iter().collect();
    brokers::commit_group(&src, "billing", "orders", &group_at)
        .await
        .unwrap();

    // Secrets as the kubelet mounts them (..data symlink into a timestamped directory).
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "source-ca", &[("ca.crt", src_ca.pem.as_bytes())]).unwrap();
    write_secret(
        &secrets,
        "source-client",
        &[
            ("tls.crt", client.cert.as_bytes()),
            ("tls.key", client.key.as_bytes()),
        ],
    )
    .unwrap();
    write_secret(
        &secrets,
        "source-user",
        &[("username", b"mirror\n"), ("password", b"src-mirror-pw\n")],
    )
    .unwrap();
    write_secret(&secrets, "target-ca", &[("ca.crt", tgt_ca.pem.as_bytes())]).unwrap();
    write_target_user(&secrets, b"tgt-mirror-pw");
    let flow = dir.path().join("flow.yaml");
    std::fs::write(&flow, flow_yaml(&src_addr, &tgt_addr)).unwrap();

    let begin = Instant::now();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    wait_topic(&tgt, "dc1.orders").await;
    let source_records = read_n(&src, "orders", recs.len()).await;
    let target_records = read_n(&tgt, "dc1.orders", recs.len()).await;
    assert_same(&source_records, &target_records, "secured flow");
    let replicated_in = begin.elapsed();

    // Checkpoints: the source group appears on the target at the translated offsets.
    wait_target_group(&tgt, "billing", "dc1.orders", &group_at, "secured flow").await;
    let status = wait_http(worker.addr, "/status", "worker running", |b| {
        b.contains("\"state\":\"Running\"")
    })
    .await;
    assert!(!status.contains("src-mirror-pw") && !status.contains("tgt-mirror-pw"));
    eprintln!(
        "secured flow: {} records replicated in {replicated_in:?}, group synced after {:?}",
        recs.len(),
        begin.elapsed()
    );
    worker.stop().await;

    let spec = mirrorflow::api::parse_flow_file(&std::fs::read_to_string(&flow).unwrap())
        .unwrap()
        .flow
        .spec;
    for (what, cluster, topic) in [
        ("mTLS + SCRAM-SHA-256 source", &spec.source, "orders"),
        ("TLS + SCRAM-SHA-512 target", &spec.target, "dc1.orders"),
    ] {
        tokio::task::block_in_place(|| {
            many_groups_on_a_secured_cluster(what, cluster, topic, &secrets)
        });
    }
}

/// Group offsets on a secured cluster go many groups per request (the many-group client over
/// TLS and SASL), and librdkafka's one-group path reads back exactly what it committed.
fn many_groups_on_a_secured_cluster(
    what: &str,
    cluster: &mirrorflow::api::ClusterSpec,
    topic: &str,
    secrets: &std::path::Path,
) {
    use mirrorflow::kafka::admin::{GroupAdmin, GroupOffset};
    let config = mirrorflow::kafka::config::client_properties(cluster, secrets)
        .unwrap()
        .to_client_config();
    let timeout = Duration::from_secs(30);
    let fast = GroupAdmin::with_batching(&config, what, timeout, true).unwrap();
    let slow = GroupAdmin::with_batching(&config, what, timeout, false).unwrap();
    assert!(
        fast.batches_groups(),
        "{what}: the transport serves these settings"
    );
    let commits: Vec<(String, Vec<GroupOffset>)> = (0..300)
        .map(|g| {
            let offsets = (0..2)
                .map(|p| GroupOffset {
                    topic: topic.into(),
                    partition: p,
                    offset: g * 10 + i64::from(p),
                    metadata: format!("m{g}"),
                })
                .collect();
            (format!("secured-{g}"), offsets)
        })
        .collect();
    let begin = Instant::now();
    for r in fast.alter_offsets(&commits) {
        r.unwrap();
    }
    let committed_in = begin.elapsed();
    let groups: Vec<String> = commits.iter().map(|(g, _)| g.clone()).collect();
    let begin = Instant::now();
    let read_fast: Vec<Vec<GroupOffset>> = fast
        .list_offsets(&groups)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let fast_took = begin.elapsed();
    assert_eq!(
        fast.many_group_calls(),
        2,
        "{what}: both calls took the many-group path"
    );
    let begin = Instant::now();
    let read_slow: Vec<Vec<GroupOffset>> = slow
        .list_offsets(&groups)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let slow_took = begin.elapsed();
    assert_eq!(slow.many_group_calls(), 0);
    let sorted = |mut v: Vec<GroupOffset>| {
        v.sort_by_key(|o| o.partition);
        v
    };
    for ((want, fast), slow) in commits.iter().zip(read_fast).zip(read_slow) {
        assert_eq!(sorted(fast), want.1, "{what}: group {}", want.0);
        assert_eq!(
            sorted(slow),
            want.1,
            "{what}: group {} (librdkafka)",
            want.0
        );
    }
    eprintln!(
        "{what}: 300 groups committed (connecting included) in {committed_in:?}, read many \
         per request in {fast_took:?}, one per request (librdkafka) in {slow_took:?}"
    );
}

/// A client built exactly as the worker builds it (`client_properties` from the spec and the
/// mounted Secrets), reporting into `health`.
fn probe_client(
    spec: &mirrorflow::api::ClusterSpec,
    secrets: &std::path::Path,
    health: &mirrorflow::kafka::health::ClusterHealth,
) -> BaseConsumer<mirrorflow::kafka::context::LogContext> {
    let props = mirrorflow::kafka::config::client_properties(spec, secrets).unwrap();
    let mut c = props.to_client_config();
    c.set("group.id", "probe")
        .set("statistics.interval.ms", "200");
    assert!(mirrorflow::kafka::health::STATS_PROPERTIES
        .iter()
        .any(|(k, _)| *k == "statistics.interval.ms"));
    c.create_with_context(health.context()).unwrap()
}

/// Drives `client` (metadata requests, polls for its callbacks) until `done(problem)`.
async fn drive_until(
    client: &BaseConsumer<mirrorflow::kafka::context::LogContext>,
    health: &mirrorflow::kafka::health::ClusterHealth,
    what: &str,
    done: impl Fn(Option<&mirrorflow::api::ConnectionProblem>) -> bool,
) -> Option<mirrorflow::api::ConnectionProblem> {
    let deadline = Instant::now() + WAIT;
    loop {
        tokio::task::block_in_place(|| {
            let _ = client.fetch_metadata(None, Duration::from_millis(300));
            let _ = client.poll(Duration::from_millis(50));
        });
        let p = health.problem();
        if done(p.as_ref()) {
            return p;
        }
        assert!(Instant::now() < deadline, "{what}: last problem {p:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_tls_failures_are_classified_and_clear_when_fixed() {
    use mirrorflow::api::{ClusterRole, ConnectionProblemReason as R};
    use mirrorflow::kafka::health::ClusterHealth;
    let dir = tempfile::tempdir().unwrap();
    let (ca, other_ca) = (Ca::new("target ca"), Ca::new("someone else"));
    let Some((mut target, tgt)) = tls_scram_target(dir.path(), &ca).await else {
        return;
    };
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_secret(&secrets, "other-ca", &[("ca.crt", other_ca.pem.as_bytes())]).unwrap();
    write_secret(
        &secrets,
        "good",
        &[("username", b"mirror"), ("password", b"tgt-mirror-pw")],
    )
    .unwrap();
    write_secret(
        &secrets,
        "bad",
        &[("username", b"mirror"), ("password", b"hunter2-wrong")],
    )
    .unwrap();
    let cluster = |ca_secret: &str, user_secret: &str| -> mirrorflow::api::ClusterSpec {
        serde_json::from_value(serde_json::json!({
            "alias": "dc2", "bootstrapServers": tgt,
            "tls": {"ca": {"secretName": ca_secret, "key": "ca.crt"}},
            "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": user_secret}},
        }))
        .unwrap()
    };
    let check = |p: &mirrorflow::api::ConnectionProblem, reason: R, phrase: &str| {
        assert_eq!(
            (p.cluster, p.alias.as_str(), p.reason),
            (ClusterRole::Target, "dc2", reason)
        );
        assert!(
            p.message
                .starts_with(&format!("target cluster dc2: {phrase}: ")),
            "{}",
            p.message
        );
        assert!(
            !p.message.contains("hunter2") && !p.message.contains("tgt-mirror-pw"),
            "{}",
            p.message
        );
        eprintln!("observed: {}", p.message);
    };

    // Wrong password.
    let h = ClusterHealth::new(ClusterRole::Target, "dc2");
    let c = probe_client(&cluster("ca", "bad"), &secrets, &h);
    let p = drive_until(&c, &h, "wrong password", |p| p.is_some())
        .await
        .unwrap();
    check(&p, R::AuthenticationFailed, "authentication failed");
    drop(c);
    assert!(
        h.problem().is_some(),
        "kept while no client of the cluster connects"
    );
    // The right password: once a client connects, the problem is gone.
    let c = probe_client(&cluster("ca", "good"), &secrets, &h);
    drive_until(&c, &h, "recovery with the right password", |p| p.is_none()).await;
    drop(c);

    // Untrusted CA.
    let h = ClusterHealth::new(ClusterRole::Target, "dc2");
    let c = probe_client(&cluster("other-ca", "good"), &secrets, &h);
    let p = drive_until(&c, &h, "untrusted CA", |p| p.is_some())
        .await
        .unwrap();
    check(&p, R::TlsVerificationFailed, "TLS verification failed");
    drop(c);

    // An expired certificate, then one for another host; then the broker's certificate is
    // fixed and the same client recovers by itself.
    for (name, leaf) in [
        ("expired", ca.server(&["127.0.0.1"], Validity::Expired)),
        (
            "wrong-host",
            ca.server(&["kafka.elsewhere.example"], Validity::Current),
        ),
    ] {
        let tls = write_tls_files(dir.path(), name, &leaf, &ca.pem);
        target.kafka_mut().unwrap().replace_tls(tls).await.unwrap();
        let h = ClusterHealth::new(ClusterRole::Target, "dc2");
        let c = probe_client(&cluster("ca", "good"), &secrets, &h);
        let p = drive_until(&c, &h, name, |p| p.is_some()).await.unwrap();
        check(&p, R::TlsVerificationFailed, "TLS verification failed");
        if name == "wrong-host" {
            let good = ca.server(&["127.0.0.1"], Validity::Current);
            let tls = write_tls_files(dir.path(), "fixed", &good, &ca.pem);
            target.kafka_mut().unwrap().replace_tls(tls).await.unwrap();
            drive_until(
                &c,
                &h,
                "recovery after the broker's certificate is fixed",
                |p| p.is_none(),
            )
            .await;
        }
    }

    // Mutual TLS without a client certificate: the handshake is refused; with one signed
    // by the broker's CA, the same listener lets the client in.
    let mtls = target.kafka().unwrap().listener(Listener::Mtls);
    let mtls_spec = |client_cert: bool| -> mirrorflow::api::ClusterSpec {
        let mut tls = serde_json::json!({"ca": {"secretName": "ca", "key": "ca.crt"}});
        if client_cert {
            tls["clientCert"] = serde_json::json!({"secretName": "client"});
        }
        serde_json::from_value(serde_json::json!({
            "alias": "dc1", "bootstrapServers": mtls, "tls": tls,
        }))
        .unwrap()
    };
    let h = ClusterHealth::new(ClusterRole::Source, "dc1");
    let c = probe_client(&mtls_spec(false), &secrets, &h);
    let p = drive_until(&c, &h, "no client certificate", |p| p.is_some())
        .await
        .unwrap();
    assert_eq!(p.reason, R::TlsFailed, "{}", p.message);
    assert!(
        p.message.starts_with("source cluster dc1: TLS failed: "),
        "{}",
        p.message
    );
    eprintln!("observed: {}", p.message);
    drop(c);
    let leaf = ca.client("mirror");
    write_secret(
        &secrets,
        "client",
        &[
            ("tls.crt", leaf.cert.as_bytes()),
            ("tls.key", leaf.key.as_bytes()),
        ],
    )
    .unwrap();
    let c = probe_client(&mtls_spec(true), &secrets, &h);
    connects(&c, &h, "mutual TLS with a client certificate").await;
}

/// Drives `client` until a metadata request succeeds and `health` holds no problem.
async fn connects(
    client: &BaseConsumer<mirrorflow::kafka::context::LogContext>,
    health: &mirrorflow::kafka::health::ClusterHealth,
    what: &str,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let ok = tokio::task::block_in_place(|| {
            let ok = client.fetch_metadata(None, Duration::from_secs(1)).is_ok();
            let _ = client.poll(Duration::from_millis(50));
            ok
        });
        let p = health.problem();
        if ok && p.is_none() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: last problem {p:?}");
    }
}

/// OAUTHBEARER: librdkafka fetches a token from the endpoint with the client credentials,
/// the broker validates it (Kafka's unsecured-token validator: expiry, subject, and here the
/// required scope `kafka`) and lets the client in; a token without that scope is refused
/// and shows as an authentication failure of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_token_from_the_endpoint_is_validated_by_the_broker() {
    use mirrorflow::api::{ClusterRole, ConnectionProblemReason as R};
    use mirrorflow::kafka::health::ClusterHealth;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("target ca");
    let mut config = secured_config(dir.path(), "target-broker", &ca, &[Listener::OAuth], "x");
    config.super_users.push("User:mirror-client".into());
    config.properties.push((
        "listener.name.oauth.oauthbearer.sasl.jaas.config".into(),
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
         unsecuredLoginStringClaim_sub=\"broker\" unsecuredValidatorRequiredScope=\"kafka\";"
            .into(),
    ));
    let Some(target) = kafka_or_skip(config).await else {
        return;
    };
    let oauth = target.kafka().unwrap().listener(Listener::OAuth);
    let (idp, refused_idp) = (
        TokenEndpoint::start("mirror-client", "kafka").await,
        TokenEndpoint::start("mirror-client", "billing").await,
    );
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_secret(&secrets, "oidc", &[("client-secret", b"s3cret-value\n")]).unwrap();
    let spec = |url: &str| -> mirrorflow::api::ClusterSpec {
        serde_json::from_value(serde_json::json!({
            "alias": "dc2", "bootstrapServers": oauth,
            "tls": {"ca": {"secretName": "ca", "key": "ca.crt"}},
            "sasl": {"mechanism": "OAUTHBEARER", "oauthBearer": {
                "tokenEndpointUrl": url, "clientId": "mirror-client",
                "clientSecret": {"secretName": "oidc", "key": "client-secret"},
                "scope": "kafka.read kafka.write",
                "extensions": {"logicalCluster": "lkc-1"}}},
        }))
        .unwrap()
    };
    let flow = mirrorflow::api::MirrorFlowSpec {
        target: spec(&idp.url),
        ..serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1"},
            "target": {"alias": "x", "bootstrapServers": "b:1"}}))
        .unwrap()
    };
    mirrorflow::api::validate_flow(&flow).expect("loopback http token endpoint is accepted");

    let h = ClusterHealth::new(ClusterRole::Target, "dc2");
    let c = probe_client(&spec(&idp.url), &secrets, &h);
    connects(&c, &h, "a token the broker accepts").await;
    drop(c);

    let h = ClusterHealth::new(ClusterRole::Target, "dc2");
    let c = probe_client(&spec(&refused_idp.url), &secrets, &h);
    let p = drive_until(&c, &h, "a token without the required scope", |p| {
        p.is_some()
    })
    .await
    .unwrap();
    assert_eq!(
        (p.cluster, p.reason),
        (ClusterRole::Target, R::AuthenticationFailed),
        "{}",
        p.message
    );
    assert!(
        p.message
            .starts_with("target cluster dc2: authentication failed: "),
        "{}",
        p.message
    );
    assert!(!p.message.contains("s3cret-value"), "{}", p.message);
    eprintln!("observed: {}", p.message);
    assert!(!refused_idp.calls.lock().unwrap().is_empty());

    let calls = idp.calls.lock().unwrap().clone();
    assert!(!calls.is_empty(), "librdkafka called the token endpoint");
    let call = &calls[0];
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode("mirror-client:s3cret-value");
    assert_eq!(
        call.authorization.as_deref(),
        Some(format!("Basic {basic}").as_str())
    );
    assert!(
        call.body.contains("grant_type=client_credentials"),
        "{}",
        call.body
    );
    assert!(call.body.contains("scope=kafka.read"), "{}", call.body);
    eprintln!(
        "observed token request: {} call(s), body {:?}",
        calls.len(),
        call.body
    );
}

/// The topic ACL sync on Kafka's authorizer: the source's ALLOW bindings on the replicated
/// topic appear on the target renamed by the replication policy (ALL as READ); WRITE and
/// DENY never do; a binding that was on the target before is left alone; a source binding
/// removed is removed on the target; the flow's store remembers what it created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_sync_mirrors_allow_bindings_and_follows_removals() {
    use mirrorflow::kafka::acl::{Operation, PatternType, Permission, TopicAcl};
    use mirrorflow::worker::acl_sync::{acl_store_topic, CreatedStore, KafkaStore};
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    let (Some(source), Some(target)) = (
        shared_kafka_or_skip("source").await,
        shared_kafka_or_skip("target").await,
    ) else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique("acl-orders");
    let copy = format!("dc1.{topic}");
    let flow_name = unique("acls");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    let b = |pattern, name: &str, who: &str, operation, permission| TopicAcl {
        pattern,
        name: name.into(),
        principal: format!("User:{who}"),
        host: "*".into(),
        operation,
        permission,
    };
    let prefix = &topic[..topic.len() - 3];
    let on_source = vec![
        b(Literal, &topic, "alice", Read, Allow),
        b(Prefixed, prefix, "bob", Describe, Allow),
        b(Literal, &topic, "carol", All, Allow),
        b(Literal, &topic, "alice", Write, Allow),
        b(Literal, &topic, "mallory", Read, Deny),
    ];
    let before = b(Literal, &copy, "dave", DescribeConfigs, Allow);
    let t = Duration::from_secs(10);
    all_ok(
        acls(&src, move |a| {
            mirrorflow::kafka::acl::create_topic_acls(a, &on_source, t)
        })
        .await,
    );
    let keep = vec![before.clone()];
    all_ok(
        acls(&tgt, move |a| {
            mirrorflow::kafka::acl::create_topic_acls(a, &keep, t)
        })
        .await,
    );

    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {{name: {flow_name}}}\nspec:\n  \
             source: {{alias: dc1, bootstrapServers: '{src}'}}\n  target: {{alias: dc2, bootstrapServers: '{tgt}'}}\n  \
             topics: {{include: ['{topic}'], refreshIntervalSeconds: 1}}\n  delivery: AtLeastOnce\n  \
             heartbeats: {{intervalSeconds: 0}}\n"
        ),
    )
    .unwrap();
    let worker = Standalone::start(&standalone_args(&flow, dir.path()), Vec::new());
    let metrics = wait_http(worker.addr, "/metrics", "ACL sync of 3 bindings", |b| {
        b.contains("mirrorflow_worker_topic_acls{state=\"synced\"} 3")
    })
    .await;
    for want in [
        "mirrorflow_worker_topic_acls{state=\"created_by_flow\"} 3",
        "mirrorflow_worker_topic_acls{state=\"skipped\"} 2",
        "mirrorflow_worker_topic_acl_sync_errors_total 0",
    ] {
        assert!(metrics.contains(want), "{want} in {metrics}");
    }
    let mine = |all: Vec<TopicAcl>| -> BTreeSet<TopicAcl> {
        all.into_iter()
            .filter(|a| a.name.starts_with("dc1.acl-"))
            .collect()
    };
    let target_acls = || {
        let tgt = tgt.clone();
        async move {
            mine(
                acls(&tgt, move |a| {
                    mirrorflow::kafka::acl::describe_topic_acls(a, t)
                })
                .await,
            )
        }
    };
    let synced = BTreeSet::from([
        b(Literal, &copy, "alice", Read, Allow),
        b(Prefixed, &format!("dc1.{prefix}"), "bob", Describe, Allow),
        b(Literal, &copy, "carol", Read, Allow),
    ]);
    let mut want = synced.clone();
    want.insert(before.clone());
    assert_eq!(target_acls().await, want, "on the target after the sync");

    // alice's READ goes on the source: the flow removes its copy, nothing else.
    let gone = vec![b(Literal, &topic, "alice", Read, Allow)];
    all_ok(
        acls(&src, move |a| {
            mirrorflow::kafka::acl::delete_topic_acls(a, &gone, t)
        })
        .await,
    );
    want.remove(&b(Literal, &copy, "alice", Read, Allow));
    let deadline = Instant::now() + WAIT;
    loop {
        let now = target_acls().await;
        if now == want {
            break;
        }
        assert!(Instant::now() < deadline, "after the removal: {now:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_http(worker.addr, "/metrics", "ACL sync of 2 bindings", |b| {
        b.contains("mirrorflow_worker_topic_acls{state=\"synced\"} 2")
    })
    .await;
    worker.stop().await;

    // The store of created bindings: the two the flow still has, reloaded by a new instance.
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &tgt);
    let store = acl_store_topic("default", &flow_name);
    let loaded = tokio::task::spawn_blocking(move || {
        KafkaStore::new(&config, &store, Duration::from_secs(30))
            .unwrap()
            .load()
            .unwrap()
    })
    .await
    .unwrap();
    let mut remembered: Vec<TopicAcl> = loaded.into_iter().collect();
    remembered.sort();
    let mut still: Vec<TopicAcl> = synced
        .into_iter()
        .filter(|a| a.principal != "User:alice")
        .collect();
    still.sort();
    assert_eq!(remembered, still);
}

fn all_ok(results: Vec<Result<(), mirrorflow::kafka::Error>>) {
    for r in results {
        r.unwrap();
    }
}

/// Runs `f` with an admin client of `bootstrap` on the blocking pool.
async fn acls<T: Send + 'static>(
    bootstrap: &str,
    f: impl FnOnce(
            &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
        ) -> Result<T, mirrorflow::kafka::Error>
        + Send
        + 'static,
) -> T {
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
    tokio::task::spawn_blocking(move || f(&admin))
        .await
        .unwrap()
        .unwrap()
}

/// A flow named `name` from a plaintext source (the shared one) to the TLS + SCRAM-SHA-512
/// target (Secrets `target-ca` and `target-user`) selecting `topic`, heartbeats off, with an
/// OffsetCheckpoint for `group`, all every second.
fn tls_scram_target_flow(name: &str, src: &str, tgt: &str, topic: &str, group: &str) -> String {
    format!(
        "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {{name: {name}}}\nspec:\n  \
         source: {{alias: dc1, bootstrapServers: '{src}'}}\n  \
         target:\n    alias: dc2\n    bootstrapServers: '{tgt}'\n    \
         tls: {{ca: {{secretName: target-ca, key: ca.crt}}}}\n    \
         sasl: {{mechanism: SCRAM-SHA-512, credentials: {{secretName: target-user}}}}\n  \
         topics: {{include: ['{topic}'], refreshIntervalSeconds: 1}}\n  delivery: AtLeastOnce\n  \
         heartbeats: {{intervalSeconds: 0}}\n\
         ---\napiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\nmetadata: {{name: {group}}}\n\
         spec:\n  flowRef: {{name: {name}}}\n  groups: {{include: ['{group}'], refreshIntervalSeconds: 1}}\n  \
         intervalSeconds: 1\n"
    )
}

/// The target's certificate and then user `mirror`'s password rotate while the worker
/// runs: each is reported while the two sides disagree and recovers once they agree, with
/// no record lost or sent twice and no restart. The password changes on the running broker
/// (AlterUserScramCredentials); Kafka keeps authenticated connections, so the target makes
/// its clients log in again every 2 s (`connections.max.reauth.ms`, KIP-368), as a cluster
/// that wants a changed password to take effect does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_ca_and_password_are_picked_up_without_a_restart_or_position_loss() {
    let dir = tempfile::tempdir().unwrap();
    let ca1 = Ca::new("target ca 1");
    let mut config = secured_config(
        dir.path(),
        "target-1",
        &ca1,
        &[Listener::Scram],
        "tgt-mirror-pw",
    );
    config
        .properties
        .push(("connections.max.reauth.ms".into(), "2000".into()));
    let (Some(source), Some(mut target)) =
        tokio::join!(shared_kafka_or_skip("source"), kafka_or_skip(config))
    else {
        return;
    };
    let tgt_addr = target.kafka().unwrap().listener(Listener::Scram);
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    let (topic, group) = (unique("rotating-orders"), unique("rotating-billing"));
    let copy = format!("dc1.{topic}");
    source.create_topic(&topic, PARTITIONS, &[]).await.unwrap();
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "target-ca", &[("ca.crt", ca1.pem.as_bytes())]).unwrap();
    write_target_user(&secrets, b"tgt-mirror-pw");
    let flow = dir.path().join("flow.yaml");
    let flow_name = unique("rotating");
    std::fs::write(
        &flow,
        tls_scram_target_flow(&flow_name, &src, &tgt_addr, &topic, &group),
    )
    .unwrap();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    let mut total = 0usize;
    let mut round = |tag: &str| {
        let r = records(tag, PARTITIONS, 20);
        total += r.len();
        (r, total)
    };
    let check_exact = |total: usize, what: &'static str| {
        let (src, tgt, topic, copy) = (src.clone(), tgt.clone(), topic.clone(), copy.clone());
        async move {
            wait_topic(&tgt, &copy).await;
            let s = read_n(&src, &topic, total).await;
            let t = read_n(&tgt, &copy, total).await;
            assert_same(&s, &t, what);
            // Nothing beyond: no record replicated twice.
            let more = read_idle(&tgt, &copy, Duration::from_secs(2)).await;
            assert_eq!(more.len(), total, "{what}: duplicates on the target");
        }
    };
    let (a, n) = round("a");
    brokers::produce(&src, &topic, &a).await.unwrap();
    check_exact(n, "before any rotation").await;
    // A login refused while the worker started must not linger: it would be the oldest
    // problem and hide the rotation's (this test once waited 90 s behind one).
    wait_http(
        worker.addr,
        "/status",
        "no connection problem before any rotation",
        |b| !b.contains("connectionProblems"),
    )
    .await;

    // 1. The CA rotates: the Secret first (the rebuilt clients cannot verify the broker's
    // old certificate: reported), then the broker's certificate (recovers by itself).
    let ca2 = Ca::new("target ca 2");
    let began = Instant::now();
    write_secret(&secrets, "target-ca", &[("ca.crt", ca2.pem.as_bytes())]).unwrap();
    let body = wait_http(
        worker.addr,
        "/status",
        "TLS verification failure reported",
        |b| b.contains("target cluster dc2: TLS verification failed"),
    )
    .await;
    eprintln!(
        "observed after the CA Secret swap ({:?}): {}",
        began.elapsed(),
        problem_of(&body)
    );
    let tls2 = write_tls_files(
        dir.path(),
        "target-2",
        &ca2.server(&["127.0.0.1"], Validity::Current),
        &ca2.pem,
    );
    target.kafka_mut().unwrap().replace_tls(tls2).await.unwrap();
    wait_http(
        worker.addr,
        "/status",
        "recovered after the new broker certificate",
        |b| !b.contains("connectionProblems") && b.contains("\"state\":\"Running\""),
    )
    .await;
    eprintln!(
        "observed: recovered {:?} after the CA swap",
        began.elapsed()
    );
    let (b, n) = round("b");
    brokers::produce(&src, &topic, &b).await.unwrap();
    check_exact(n, "after the CA rotation").await;

    // 2. The password rotates: the broker first (the clients' next login is refused:
    // reported), then the Secret (rebuilt clients log in again).
    let began = Instant::now();
    set_mirror_password(&target, "rotated-pw-2").await;
    let body = wait_http(
        worker.addr,
        "/status",
        "authentication failure reported",
        |b| b.contains("target cluster dc2: authentication failed"),
    )
    .await;
    eprintln!(
        "observed after the broker's password change ({:?}): {}",
        began.elapsed(),
        problem_of(&body)
    );
    assert!(
        !body.contains("rotated-pw-2") && !body.contains("tgt-mirror-pw"),
        "{body}"
    );
    write_target_user(&secrets, b"rotated-pw-2");
    wait_http(
        worker.addr,
        "/status",
        "recovered after the password Secret swap",
        |b| !b.contains("connectionProblems") && b.contains("\"state\":\"Running\""),
    )
    .await;
    eprintln!(
        "observed: recovered {:?} after the password change",
        began.elapsed()
    );
    let (c, n) = round("c");
    brokers::produce(&src, &topic, &c).await.unwrap();
    check_exact(n, "after the password rotation").await;

    // The checkpoint runner reconnected too: a source group's position reaches the target.
    let per_partition = (n / PARTITIONS as usize) as i64;
    let group_at: BTreeMap<i32, i64> = [(0, per_partition - 5), (1, per_partition - 7)]
        .into_iter()
        .collect();
    brokers::commit_group(&src, &group, &topic, &group_at)
        .await
        .unwrap();
    wait_target_group(&tgt, &group, &copy, &group_at, "after both rotations").await;
    worker.stop().await;
}

/// Waits (bounded) until the target group `group` has `want` on `topic`.
async fn wait_target_group(
    tgt: &str,
    group: &str,
    topic: &str,
    want: &BTreeMap<i32, i64>,
    what: &str,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = brokers::group_committed(tgt, group, topic, PARTITIONS)
            .await
            .unwrap();
        if c.len() == want.len() {
            assert_eq!(&c, want, "translated offsets {what}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "target group not synced {what}; have {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A worker started with a wrong target password: once the Secret is fixed, replication
/// and the checkpoint runner both start with it (the runner used to retry its start-up
/// with the Secrets it was built with, for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_fixed_while_the_worker_cannot_connect_is_picked_up_by_every_part() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("target ca");
    let (Some(source), Some((target, tgt_addr))) = tokio::join!(
        shared_kafka_or_skip("source"),
        tls_scram_target(dir.path(), &ca)
    ) else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    let (topic, group) = (unique("fixed-orders"), unique("fixed-billing"));
    let copy = format!("dc1.{topic}");
    source.create_topic(&topic, PARTITIONS, &[]).await.unwrap();
    let produced = records("a", PARTITIONS, 20);
    brokers::produce(&src, &topic, &produced).await.unwrap();
    let group_at: BTreeMap<i32, i64> = [(0, 15), (1, 13)].into_iter().collect();
    brokers::commit_group(&src, &group, &topic, &group_at)
        .await
        .unwrap();
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "target-ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_target_user(&secrets, b"not-the-password");
    let flow = dir.path().join("flow.yaml");
    let flow_name = unique("fixed");
    std::fs::write(
        &flow,
        tls_scram_target_flow(&flow_name, &src, &tgt_addr, &topic, &group),
    )
    .unwrap();
    let started = Instant::now();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    wait_http(
        worker.addr,
        "/status",
        "authentication failure reported",
        |b| b.contains("target cluster dc2: authentication failed"),
    )
    .await;
    eprintln!(
        "observed: failure reported {:?} after the start",
        started.elapsed()
    );
    let fixed = Instant::now();
    write_target_user(&secrets, b"tgt-mirror-pw");
    wait_topic(&tgt, &copy).await;
    let s = read_n(&src, &topic, produced.len()).await;
    let t = read_n(&tgt, &copy, produced.len()).await;
    assert_same(&s, &t, "after the password Secret was fixed");
    eprintln!("observed: replicated {:?} after the fix", fixed.elapsed());
    wait_target_group(
        &tgt,
        &group,
        &copy,
        &group_at,
        "after the password Secret was fixed",
    )
    .await;
    eprintln!("observed: group synced {:?} after the fix", fixed.elapsed());
    worker.stop().await;
}

fn problem_of(status: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(status).unwrap();
    v["connectionProblems"][0]["message"]
        .as_str()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}
