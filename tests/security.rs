//! Secured clusters on real nisshi brokers: TLS with a CA from a Secret (host names
//! verified), mutual TLS, SASL SCRAM-SHA-256/512 over TLS, a standalone worker reading its
//! Secrets from a `--secrets-dir` laid out like the kubelet's mounts; connection failures
//! classified; OAUTHBEARER's token endpoint really called. Certificates are made here.

mod replication_support;
mod security_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mirrorflow::kafka::secrets::kubelet::write_secret;
use mirrorflow::testkit::brokers::{
    self, register_client_properties, secured_broker_or_skip, BrokerKind, BrokerSecurity,
    LocalBroker, Scram, ScramUser,
};
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

/// The source: nisshi with SCRAM-SHA-256 users, reached only through a TLS proxy that
/// requires a client certificate (mutual TLS), which the broker advertises.
struct MtlsSource {
    broker: LocalBroker,
    proxy: MtlsProxy,
    bootstrap: String,
}

async fn mtls_source(dir: &std::path::Path, ca: &Ca, client: &Leaf) -> Option<MtlsSource> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let broker = secured_broker_or_skip(
        BrokerKind::Nisshi,
        BrokerSecurity {
            tls: None,
            users: vec![
                ScramUser::new("src-admin", "src-admin-pw", Scram::Sha256),
                ScramUser::new("mirror", "src-mirror-pw", Scram::Sha256),
            ],
            advertise: Some(proxy_addr.to_string()),
            persistent: false,
        },
    )
    .await?;
    let upstream = broker.bootstrap_servers().parse().unwrap();
    let proxy = MtlsProxy::start(
        listener,
        upstream,
        &ca.server(&["127.0.0.1"], Validity::Current),
        &ca.pem,
    );
    let files = write_tls_files(dir, "source-admin", client, &ca.pem);
    let bootstrap = proxy.addr.to_string();
    let props = [
        ("security.protocol", "SASL_SSL".to_string()),
        ("ssl.ca.location", files.ca.display().to_string()),
        ("ssl.certificate.location", files.cert.display().to_string()),
        ("ssl.key.location", files.key.display().to_string()),
        ("sasl.mechanism", "SCRAM-SHA-256".to_string()),
        ("sasl.username", "src-admin".to_string()),
        ("sasl.password", "src-admin-pw".to_string()),
    ];
    register_client_properties(
        &bootstrap,
        props
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    Some(MtlsSource {
        broker,
        proxy,
        bootstrap,
    })
}

/// The target: nisshi serving TLS itself, SCRAM-SHA-512 users.
async fn tls_scram_target(dir: &std::path::Path, ca: &Ca) -> Option<LocalBroker> {
    let files = write_tls_files(
        dir,
        "target-broker",
        &ca.server(&["127.0.0.1"], Validity::Current),
        &ca.pem,
    );
    secured_broker_or_skip(
        BrokerKind::Nisshi,
        BrokerSecurity {
            tls: Some(files),
            users: vec![
                ScramUser::new("tgt-admin", "tgt-admin-pw", Scram::Sha512),
                ScramUser::new("mirror", "tgt-mirror-pw", Scram::Sha512),
            ],
            advertise: None,
            persistent: false,
        },
    )
    .await
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
    let Some(source) = mtls_source(dir.path(), &src_ca, &client).await else {
        return;
    };
    let Some(target) = tls_scram_target(dir.path(), &tgt_ca).await else {
        return;
    };
    let (src, tgt) = (source.bootstrap.clone(), target.bootstrap_servers());

    brokers::create_topic(&src, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    let recs = records("sec", PARTITIONS, 50);
    brokers::produce(&src, "orders", &recs).await.unwrap();
    let group_at: BTreeMap<i32, i64> = [(0, 10), (1, 50)].into_iter().collect();
    brokers::commit_group(&src, "billing", "orders", &group_at)
        .await
        .unwrap();
    assert!(
        *source.proxy.accepted.lock().unwrap() > 0,
        "the proxy saw TLS clients"
    );

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
    std::fs::write(&flow, flow_yaml(&src, &tgt)).unwrap();

    let begin = Instant::now();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    wait_topic(&tgt, "dc1.orders").await;
    let source_records = read_n(&src, "orders", recs.len()).await;
    let target_records = read_n(&tgt, "dc1.orders", recs.len()).await;
    assert_same(&source_records, &target_records, "secured flow");
    let replicated_in = begin.elapsed();

    // Checkpoints: the source group appears on the target at the translated offsets.
    let deadline = Instant::now() + WAIT;
    let on_target = loop {
        let c = brokers::group_committed(&tgt, "billing", "dc1.orders", PARTITIONS)
            .await
            .unwrap();
        if c.len() == group_at.len() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "target group not synced; have {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(on_target, group_at, "translated offsets on the target");
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
    drop(source.broker);
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
    let Some(mut target) = tls_scram_target(dir.path(), &ca).await else {
        return;
    };
    let tgt = target.bootstrap_servers();
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
    let mut sec = BrokerSecurity {
        tls: None,
        users: vec![
            ScramUser::new("tgt-admin", "tgt-admin-pw", Scram::Sha512),
            ScramUser::new("mirror", "tgt-mirror-pw", Scram::Sha512),
        ],
        advertise: None,
        persistent: false,
    };
    for (name, leaf) in [
        ("expired", ca.server(&["127.0.0.1"], Validity::Expired)),
        (
            "wrong-host",
            ca.server(&["kafka.elsewhere.example"], Validity::Current),
        ),
    ] {
        sec.tls = Some(write_tls_files(dir.path(), name, &leaf, &ca.pem));
        target.set_security(sec.clone()).await.unwrap();
        let h = ClusterHealth::new(ClusterRole::Target, "dc2");
        let c = probe_client(&cluster("ca", "good"), &secrets, &h);
        let p = drive_until(&c, &h, name, |p| p.is_some()).await.unwrap();
        check(&p, R::TlsVerificationFailed, "TLS verification failed");
        if name == "wrong-host" {
            let good = ca.server(&["127.0.0.1"], Validity::Current);
            sec.tls = Some(write_tls_files(dir.path(), "fixed", &good, &ca.pem));
            target.set_security(sec.clone()).await.unwrap();
            drive_until(
                &c,
                &h,
                "recovery after the broker's certificate is fixed",
                |p| p.is_none(),
            )
            .await;
        }
    }

    // Mutual TLS without a client certificate: the handshake is refused.
    let src_ca = Ca::new("source ca");
    let Some(source) = mtls_source(dir.path(), &src_ca, &src_ca.client("admin")).await else {
        return;
    };
    write_secret(&secrets, "src-ca", &[("ca.crt", src_ca.pem.as_bytes())]).unwrap();
    let no_cert: mirrorflow::api::ClusterSpec = serde_json::from_value(serde_json::json!({
        "alias": "dc1", "bootstrapServers": source.bootstrap,
        "tls": {"ca": {"secretName": "src-ca", "key": "ca.crt"}},
    }))
    .unwrap();
    let h = ClusterHealth::new(ClusterRole::Source, "dc1");
    let c = probe_client(&no_cert, &secrets, &h);
    let p = drive_until(&c, &h, "no client certificate", |p| p.is_some())
        .await
        .unwrap();
    assert_eq!(p.reason, R::TlsFailed, "{}", p.message);
    assert!(
        p.message.starts_with("source cluster dc1: TLS failed: "),
        "{}",
        p.message
    );
    assert!(!source.proxy.refused.lock().unwrap().is_empty());
    eprintln!("observed: {}", p.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_fetches_a_token_from_the_endpoint_and_nisshi_refuses_the_mechanism() {
    use mirrorflow::api::{ClusterRole, ConnectionProblemReason as R};
    use mirrorflow::kafka::health::ClusterHealth;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("target ca");
    // nisshi does not verify OAUTHBEARER (it offers SCRAM only): the client's side is what
    // can be checked here, the broker refusing the mechanism is the expected end.
    let Some(target) = tls_scram_target(dir.path(), &ca).await else {
        return;
    };
    let idp = TokenEndpoint::start("mirror-client").await;
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_secret(&secrets, "oidc", &[("client-secret", b"s3cret-value\n")]).unwrap();
    let spec: mirrorflow::api::ClusterSpec = serde_json::from_value(serde_json::json!({
        "alias": "dc2", "bootstrapServers": target.bootstrap_servers(),
        "tls": {"ca": {"secretName": "ca", "key": "ca.crt"}},
        "sasl": {"mechanism": "OAUTHBEARER", "oauthBearer": {
            "tokenEndpointUrl": idp.url, "clientId": "mirror-client",
            "clientSecret": {"secretName": "oidc", "key": "client-secret"},
            "scope": "kafka.read kafka.write",
            "extensions": {"logicalCluster": "lkc-1"}}},
    }))
    .unwrap();
    let flow = mirrorflow::api::MirrorFlowSpec {
        target: spec.clone(),
        ..serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1"},
            "target": {"alias": "x", "bootstrapServers": "b:1"}}))
        .unwrap()
    };
    mirrorflow::api::validate_flow(&flow).expect("loopback http token endpoint is accepted");

    let h = ClusterHealth::new(ClusterRole::Target, "dc2");
    let c = probe_client(&spec, &secrets, &h);
    let p = drive_until(&c, &h, "OAUTHBEARER refused by nisshi", |p| p.is_some())
        .await
        .unwrap();
    assert_eq!(p.reason, R::AuthenticationFailed, "{}", p.message);
    assert!(!p.message.contains("s3cret-value"), "{}", p.message);
    eprintln!("observed: {}", p.message);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_sync_runs_on_nisshi_and_its_calls_and_store_reach_the_broker() {
    use mirrorflow::kafka::acl::{Operation, PatternType, Permission, TopicAcl};
    use mirrorflow::worker::acl_sync::{acl_store_topic, CreatedStore, KafkaStore};
    let Some((source, target)) = broker_pair(BrokerKind::Nisshi).await else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    brokers::create_topic(&src, "orders", 1, &[]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {{name: acls}}\nspec:\n  \
             source: {{alias: dc1, bootstrapServers: '{src}'}}\n  target: {{alias: dc2, bootstrapServers: '{tgt}'}}\n  \
             topics: {{include: [orders], refreshIntervalSeconds: 1}}\n  delivery: AtLeastOnce\n"
        ),
    )
    .unwrap();
    let worker = Standalone::start(&standalone_args(&flow, dir.path()), Vec::new());
    // nisshi 0.8.1 stores no ACLs: it answers every ACL request with SECURITY_DISABLED ("No
    // Authorizer is configured on the broker"), and librdkafka 2.12 drops DescribeAcls'
    // error code, so the source reads as a cluster without ACLs: nothing to sync.
    // `--authentication` does not change that (tried with SCRAM-SHA-512 and -256 users, over
    // SASL_PLAINTEXT and SASL_SSL): CreateAcls and DeleteAcls still answer each binding with
    // error 54 SECURITY_DISABLED "No Authorizer is configured.", DescribeAcls with error 54
    // "No Authorizer is configured on the broker" and no resources (seen on the wire), so a
    // created binding never shows up. nisshi-storage 0.8.1's ACL services return these
    // answers unconditionally ("ACLs have no backing storage yet"); bindings appearing on a
    // real target cannot be tested on nisshi.
    let metrics = wait_http(worker.addr, "/metrics", "ACL sync ran", |b| {
        b.contains("mirrorflow_worker_topic_acls{state=\"synced\"} 0")
    })
    .await;
    assert!(
        metrics.contains("mirrorflow_worker_topic_acl_sync_errors_total 0"),
        "{metrics}"
    );
    // Nothing to copy and no error: nothing in the status either.
    let status = wait_http(worker.addr, "/status", "status", |_| true).await;
    assert!(!status.contains("topicAcls"), "{status}");
    eprintln!("observed: ACL sync ran, 0 bindings, no error (nisshi lists none)");
    worker.stop().await;
    assert_eq!(
        brokers::topic_partitions(&tgt, &acl_store_topic("default", "acls"))
            .await
            .unwrap(),
        None,
        "no store topic while the flow created nothing"
    );

    // The FFI calls reach the broker: CreateAcls and DeleteAcls carry nisshi's per-binding
    // refusal back, DescribeAcls answers empty (see above).
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new()
            .set("bootstrap.servers", &tgt)
            .create()
            .unwrap();
    let one = TopicAcl {
        pattern: PatternType::Prefixed,
        name: "dc1.orders".into(),
        principal: "User:alice".into(),
        host: "*".into(),
        operation: Operation::Read,
        permission: Permission::Allow,
    };
    let acls = vec![one.clone()];
    let (created, deleted, described) = tokio::task::spawn_blocking(move || {
        let t = Duration::from_secs(10);
        (
            mirrorflow::kafka::acl::create_topic_acls(&admin, &acls, t).unwrap(),
            mirrorflow::kafka::acl::delete_topic_acls(&admin, &acls, t).unwrap(),
            mirrorflow::kafka::acl::describe_topic_acls(&admin, t).unwrap(),
        )
    })
    .await
    .unwrap();
    for r in created.iter().chain(&deleted) {
        let e = r.as_ref().unwrap_err();
        assert!(e.contains("dc1.orders") && e.contains("User:alice"), "{e}");
        eprintln!("observed: {e}");
    }
    assert!(described.is_empty());

    // The store of created bindings: recorded, reloaded by a new instance, forgotten.
    let topic = acl_store_topic("default", "acls");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &tgt);
    let b = |name: &str| TopicAcl {
        pattern: PatternType::Literal,
        name: name.into(),
        principal: "User:alice".into(),
        host: "*".into(),
        operation: Operation::Read,
        permission: Permission::Allow,
    };
    let t = topic.clone();
    let c = config.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let mut s = KafkaStore::new(&c, &t, Duration::from_secs(30)).unwrap();
        s.record(&b("dc1.a"), true).unwrap();
        s.record(&b("dc1.b"), true).unwrap();
        s.record(&b("dc1.a"), false).unwrap();
        let mut fresh = KafkaStore::new(&c, &t, Duration::from_secs(30)).unwrap();
        fresh.load().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        loaded.into_iter().map(|a| a.name).collect::<Vec<_>>(),
        vec!["dc1.b"]
    );
}

/// A flow from a plaintext source to the TLS + SCRAM-SHA-512 target (Secrets `target-ca`
/// and `target-user`) with an OffsetCheckpoint for group `billing`, all every second.
fn tls_scram_target_flow(name: &str, src: &str, tgt: &str) -> String {
    format!(
        "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {{name: {name}}}\nspec:\n  \
         source: {{alias: dc1, bootstrapServers: '{src}'}}\n  \
         target:\n    alias: dc2\n    bootstrapServers: '{tgt}'\n    \
         tls: {{ca: {{secretName: target-ca, key: ca.crt}}}}\n    \
         sasl: {{mechanism: SCRAM-SHA-512, credentials: {{secretName: target-user}}}}\n  \
         topics: {{include: [orders], refreshIntervalSeconds: 1}}\n  delivery: AtLeastOnce\n\
         ---\napiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\nmetadata: {{name: billing}}\n\
         spec:\n  flowRef: {{name: {name}}}\n  groups: {{include: [billing], refreshIntervalSeconds: 1}}\n  \
         intervalSeconds: 1\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_ca_and_password_are_picked_up_without_a_restart_or_position_loss() {
    let dir = tempfile::tempdir().unwrap();
    let ca1 = Ca::new("target ca 1");
    let Some(source) = brokers::broker_or_skip(BrokerKind::Nisshi).await else {
        return;
    };
    let Some(mut target) = tls_scram_target(dir.path(), &ca1).await else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    brokers::create_topic(&src, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "target-ca", &[("ca.crt", ca1.pem.as_bytes())]).unwrap();
    write_target_user(&secrets, b"tgt-mirror-pw");
    let flow = dir.path().join("flow.yaml");
    std::fs::write(&flow, tls_scram_target_flow("rotating", &src, &tgt)).unwrap();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    let mut total = 0usize;
    // Timestamps of now: nisshi's SQLite storage applies retention when it restarts, and
    // the usual test timestamps (2023) would be deleted by it.
    let mut round = |tag: &str| {
        let r: Vec<_> = records(tag, PARTITIONS, 20)
            .into_iter()
            .map(|mut r| {
                r.timestamp_ms = None;
                r
            })
            .collect();
        total += r.len();
        (r, total)
    };
    let check_exact = |total: usize, what: &'static str| {
        let (src, tgt) = (src.clone(), tgt.clone());
        async move {
            wait_topic(&tgt, "dc1.orders").await;
            let s = read_n(&src, "orders", total).await;
            let t = read_n(&tgt, "dc1.orders", total).await;
            assert_same(&s, &t, what);
            // Nothing beyond: no record replicated twice.
            let more = read_idle(&tgt, "dc1.orders", Duration::from_secs(2)).await;
            assert_eq!(more.len(), total, "{what}: duplicates on the target");
        }
    };
    let (a, n) = round("a");
    brokers::produce(&src, "orders", &a).await.unwrap();
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
    let users = vec![
        ScramUser::new("tgt-admin", "tgt-admin-pw", Scram::Sha512),
        ScramUser::new("mirror", "tgt-mirror-pw", Scram::Sha512),
    ];
    let tls2 = write_tls_files(
        dir.path(),
        "target-2",
        &ca2.server(&["127.0.0.1"], Validity::Current),
        &ca2.pem,
    );
    let mut sec = BrokerSecurity {
        tls: Some(tls2),
        users,
        advertise: None,
        persistent: false,
    };
    target.set_security(sec.clone()).await.unwrap();
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
    brokers::produce(&src, "orders", &b).await.unwrap();
    check_exact(n, "after the CA rotation").await;

    // 2. The password rotates: the broker first (the running clients are refused:
    // reported), then the Secret (rebuilt clients log in again).
    let began = Instant::now();
    sec.users[1] = ScramUser::new("mirror", "rotated-pw-2", Scram::Sha512);
    target.set_security(sec.clone()).await.unwrap();
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
    brokers::produce(&src, "orders", &c).await.unwrap();
    check_exact(n, "after the password rotation").await;

    // The checkpoint runner reconnected too: a source group's position reaches the target.
    let per_partition = (n / PARTITIONS as usize) as i64;
    let group_at: BTreeMap<i32, i64> = [(0, per_partition - 5), (1, per_partition - 7)]
        .into_iter()
        .collect();
    brokers::commit_group(&src, "billing", "orders", &group_at)
        .await
        .unwrap();
    wait_target_group(&tgt, &group_at, "after both rotations").await;
    worker.stop().await;
}

/// Waits (bounded) until the target group `billing` has `want` on `dc1.orders`.
async fn wait_target_group(tgt: &str, want: &BTreeMap<i32, i64>, what: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = brokers::group_committed(tgt, "billing", "dc1.orders", PARTITIONS)
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
    let Some(source) = brokers::broker_or_skip(BrokerKind::Nisshi).await else {
        return;
    };
    let Some(target) = tls_scram_target(dir.path(), &ca).await else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    brokers::create_topic(&src, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    let produced = records("a", PARTITIONS, 20);
    brokers::produce(&src, "orders", &produced).await.unwrap();
    let group_at: BTreeMap<i32, i64> = [(0, 15), (1, 13)].into_iter().collect();
    brokers::commit_group(&src, "billing", "orders", &group_at)
        .await
        .unwrap();
    let secrets = secrets_dir(dir.path());
    write_secret(&secrets, "target-ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_target_user(&secrets, b"not-the-password");
    let flow = dir.path().join("flow.yaml");
    std::fs::write(&flow, tls_scram_target_flow("fixed", &src, &tgt)).unwrap();
    let worker = Standalone::start(&standalone_args(&flow, &secrets), Vec::new());
    wait_http(
        worker.addr,
        "/status",
        "authentication failure reported",
        |b| b.contains("target cluster dc2: authentication failed"),
    )
    .await;
    write_target_user(&secrets, b"tgt-mirror-pw");
    wait_topic(&tgt, "dc1.orders").await;
    let s = read_n(&src, "orders", produced.len()).await;
    let t = read_n(&tgt, "dc1.orders", produced.len()).await;
    assert_same(&s, &t, "after the password Secret was fixed");
    wait_target_group(&tgt, &group_at, "after the password Secret was fixed").await;
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
