//! The Apache Kafka of `mirrorflow::testkit::kafka`: one node and three, restarts that keep
//! data, a controlled shutdown that moves leadership, a cluster shared by a binary's tests,
//! and the secured listeners (mTLS, SCRAM-SHA-512, OAUTHBEARER) with the authorizer. Prints
//! start times and memory. Skipped with a `SKIPPED` line when the jars are not fetched,
//! unless `MIRRORFLOW_REQUIRE_BROKERS=1`.

mod security_support;

use std::time::{Duration, Instant};

use mirrorflow::testkit::brokers::{
    consume_all, kafka_or_skip, produce, register_client_properties, shared_kafka_or_skip,
    watermarks, ConsumeUntil, ProduceRecord,
};
use mirrorflow::testkit::kafka::{KafkaConfig, KafkaTls, Listener, OAuthValidation};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use security_support::{Ca, Validity};

fn records(n: usize, partitions: i32) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| {
            ProduceRecord::new(format!("k{i}"), format!("v{i}")).partition(i as i32 % partitions)
        })
        .collect()
}

fn report(what: &str, broker: &mirrorflow::testkit::brokers::LocalBroker) {
    let cluster = broker.kafka().expect("a Kafka cluster");
    let rss: Vec<String> = cluster
        .rss_kib()
        .into_iter()
        .map(|(id, kib)| format!("node {id} {} MiB", kib / 1024))
        .collect();
    eprintln!(
        "{what}: Apache Kafka {} started in {:?}; RSS {}",
        cluster.version(),
        broker.started_in(),
        rss.join(", ")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_node_round_trips_and_keeps_its_data_across_a_crash() {
    let Some(mut broker) = kafka_or_skip(KafkaConfig::default()).await else {
        return;
    };
    report("one node", &broker);
    let bootstrap = broker.bootstrap_servers();
    broker.create_topic("t", 2, &[]).await.unwrap();
    produce(&bootstrap, "t", &records(10, 2)).await.unwrap();

    let begin = Instant::now();
    broker.stop().unwrap();
    assert!(!broker.is_running());
    broker.restart().await.unwrap();
    eprintln!("one node restarted after SIGKILL in {:?}", begin.elapsed());
    assert_eq!(watermarks(&bootstrap, "t", 0).await.unwrap(), (0, 5));
    let got = consume_all(&bootstrap, "t", ConsumeUntil::count(10))
        .await
        .unwrap();
    assert_eq!(got.len(), 10, "records survive a crash and restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_move_leadership_on_a_controlled_shutdown() {
    let Some(mut broker) = kafka_or_skip(KafkaConfig::three_nodes()).await else {
        return;
    };
    report("three nodes", &broker);
    let bootstrap = broker.bootstrap_servers();
    broker
        .create_topic("r3", 1, &[("min.insync.replicas", "2")])
        .await
        .unwrap();
    let leader = || {
        let bootstrap = bootstrap.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let c: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .create()
                    .unwrap();
                let md = c
                    .fetch_metadata(Some("r3"), Duration::from_secs(10))
                    .unwrap();
                let p = &md.topics()[0].partitions()[0];
                (p.leader(), p.replicas().len(), p.isr().len())
            })
            .await
            .unwrap()
        }
    };
    let (first, replicas, isr) = leader().await;
    assert_eq!((replicas, isr), (3, 3), "replication factor 3, all in sync");
    produce(&bootstrap, "r3", &records(5, 1)).await.unwrap();

    let node = usize::try_from(first).unwrap();
    broker.kafka_mut().unwrap().shut_down(node).await.unwrap();
    let (second, _, isr) = leader().await;
    assert_ne!(second, first, "leadership moved off the stopped node");
    assert_eq!(isr, 2);
    produce(&bootstrap, "r3", &records(5, 1)).await.unwrap();

    broker.kafka_mut().unwrap().start_node(node).await.unwrap();
    let got = consume_all(&bootstrap, "r3", ConsumeUntil::count(10))
        .await
        .unwrap();
    assert_eq!(got.len(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_cluster_is_started_once() {
    let begin = Instant::now();
    let Some(a) = shared_kafka_or_skip("smoke").await else {
        return;
    };
    let first = begin.elapsed();
    let begin = Instant::now();
    let b = shared_kafka_or_skip("smoke").await.unwrap();
    eprintln!(
        "shared cluster: first get {first:?}, second {:?}",
        begin.elapsed()
    );
    assert_eq!(a.bootstrap_servers(), b.bootstrap_servers());
    a.create_topic("shared-smoke", 1, &[]).await.unwrap();
    produce(&b.bootstrap_servers(), "shared-smoke", &records(3, 1))
        .await
        .unwrap();
}

/// Properties of a client that reaches `listener` as `principal`.
fn client(
    listener: Listener,
    dir: &std::path::Path,
    ca: &Ca,
    principal: &str,
) -> Vec<(String, String)> {
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, &ca.pem).unwrap();
    let mut props: Vec<(&str, String)> =
        vec![("security.protocol", listener.protocol(true).to_owned())];
    props.push(("ssl.ca.location", ca_path.display().to_string()));
    props.push(("ssl.endpoint.identification.algorithm", "https".to_owned()));
    match listener {
        Listener::Mtls => {
            let leaf = ca.client(principal);
            let (cert, key) = (
                dir.join(format!("{principal}.crt")),
                dir.join(format!("{principal}.key")),
            );
            std::fs::write(&cert, &leaf.cert).unwrap();
            std::fs::write(&key, &leaf.key).unwrap();
            props.push(("ssl.certificate.location", cert.display().to_string()));
            props.push(("ssl.key.location", key.display().to_string()));
        }
        Listener::Scram => {
            props.push(("sasl.mechanism", "SCRAM-SHA-512".to_owned()));
            props.push(("sasl.username", principal.to_owned()));
            props.push(("sasl.password", format!("{principal}-secret")));
        }
        Listener::OAuth => {
            props.push(("sasl.mechanism", "OAUTHBEARER".to_owned()));
            props.push(("sasl.oauthbearer.config", format!("principal={principal}")));
            props.push(("enable.sasl.oauthbearer.unsecure.jwt", "true".to_owned()));
        }
        Listener::Plaintext => props.clear(),
    }
    props.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn secured_listeners_authenticate_and_the_authorizer_decides() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test-ca");
    let server = ca.server(&["127.0.0.1", "localhost"], Validity::Current);
    let tls = KafkaTls {
        cert: dir.path().join("broker.crt"),
        key: dir.path().join("broker.key"),
        ca: dir.path().join("broker-ca.crt"),
    };
    std::fs::write(&tls.cert, &server.cert).unwrap();
    std::fs::write(&tls.key, &server.key).unwrap();
    std::fs::write(&tls.ca, &ca.pem).unwrap();
    let mut config = KafkaConfig::secured(
        tls,
        vec![
            ("admin".into(), "admin-secret".into()),
            ("alice".into(), "alice-secret".into()),
        ],
        OAuthValidation::Unsecured,
    );
    config.super_users = vec!["User:admin".into()];
    let Some(broker) = kafka_or_skip(config).await else {
        return;
    };
    report("secured", &broker);
    let cluster = broker.kafka().unwrap();
    broker.create_topic("secret", 1, &[]).await.unwrap();

    for (listener, principal) in [
        (Listener::Mtls, "admin"),
        (Listener::Scram, "admin"),
        (Listener::OAuth, "admin"),
    ] {
        let addr = cluster.listener(listener);
        register_client_properties(&addr, client(listener, dir.path(), &ca, principal));
        produce(&addr, "secret", &records(1, 1))
            .await
            .unwrap_or_else(|e| panic!("{} as {principal}: {e}", listener.name()));
    }
    // A principal without ACLs is refused by the authorizer, on every listener.
    for listener in [Listener::Mtls, Listener::Scram, Listener::OAuth] {
        let addr = cluster.listener(listener);
        register_client_properties(&addr, client(listener, dir.path(), &ca, "alice"));
        let err = produce(&addr, "secret", &records(1, 1)).await.unwrap_err();
        assert!(
            err.to_string().contains("uthoriz"),
            "{} as alice: {err}",
            listener.name()
        );
    }
    // An ACL lets alice write (kafka-acls).
    let out = cluster
        .tool(
            "org.apache.kafka.tools.AclCommand",
            &[
                "--bootstrap-server",
                &broker.bootstrap_servers(),
                "--add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--topic",
                "secret",
            ],
        )
        .await
        .unwrap();
    assert!(out.contains("alice"), "{out}");
    let addr = cluster.listener(Listener::Scram);
    register_client_properties(&addr, client(Listener::Scram, dir.path(), &ca, "alice"));
    produce(&addr, "secret", &records(1, 1)).await.unwrap();
    assert_eq!(
        watermarks(&broker.bootstrap_servers(), "secret", 0)
            .await
            .unwrap(),
        (0, 4)
    );
}
