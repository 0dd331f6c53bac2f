//! The API edges of `mirrorflow translate --flow-ref`, `status`, `failback` and
//! `migrate-from-mm2` against the fake API server (`kube_mock`): what they read, what they
//! write, what they make of it, and their errors naming the object.

mod kube_mock;

use jiff::Timestamp;
use mirrorflow::cli::failback::{failback, FailbackArgs};
use mirrorflow::cli::migrate::{migrate, MigrateArgs};
use mirrorflow::cli::status::status_page;
use mirrorflow::cli::translate::target_from_api;
use serde_json::json;

use kube_mock::{flow_json, FakeApi, FLOWS, NS};

/// A flow whose target authenticates with SCRAM from Secret `dc2-user` and trusts the CA in
/// Secret `dc2-ca`.
fn secured_flow() -> serde_json::Value {
    flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9093",
                   "tls": {"ca": {"secretName": "dc2-ca", "key": "ca.crt"}},
                   "sasl": {"mechanism": "SCRAM-SHA-512",
                            "credentials": {"secretName": "dc2-user"}}}
    }))
}

fn secret(name: &str, data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": NS}, "data": data})
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn translate_reads_the_flow_and_the_targets_secrets_through_the_api() {
    let api = FakeApi::new();
    api.insert(secured_flow());
    api.insert(secret(
        "dc2-user",
        json!({"username": b64("mirror"), "password": b64("s3cret")}),
    ));
    api.insert(secret(
        "dc2-ca",
        json!({"ca.crt": b64("-----BEGIN CERTIFICATE-----\n")}),
    ));

    let access = target_from_api(&api.client(), NS, "orders").await.unwrap();
    assert_eq!(access.spec.target.alias, "dc2");
    let get = |k: &str| access.config.get(k).map(str::to_string);
    assert_eq!(get("bootstrap.servers").as_deref(), Some("b:9093"));
    assert_eq!(get("security.protocol").as_deref(), Some("SASL_SSL"));
    assert_eq!(get("sasl.username").as_deref(), Some("mirror"));
    assert_eq!(get("sasl.password").as_deref(), Some("s3cret"));
    // The CA is a private file in the worker's layout, gone with the access.
    let ca = std::path::PathBuf::from(get("ssl.ca.location").unwrap());
    assert!(ca.ends_with("dc2-ca/ca.crt"), "{}", ca.display());
    assert_eq!(
        std::fs::read_to_string(&ca).unwrap(),
        "-----BEGIN CERTIFICATE-----\n"
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&ca).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Only the target's Secrets are read (the source may be unreachable and its Secrets
    // elsewhere): the flow, then one GET per Secret.
    let calls: Vec<String> = api
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("GET"))
        .collect();
    assert_eq!(
        calls,
        vec![
            format!("GET {FLOWS}/orders"),
            "GET /api/v1/namespaces/kafka/secrets/dc2-ca".to_string(),
            "GET /api/v1/namespaces/kafka/secrets/dc2-user".to_string(),
        ]
    );
    drop(access);
    assert!(!ca.exists(), "the temporary Secrets are removed");
}

#[tokio::test]
async fn translate_errors_name_the_missing_object() {
    let api = FakeApi::new();
    let err = target_from_api(&api.client(), NS, "orders")
        .await
        .err()
        .unwrap()
        .to_string();
    assert_eq!(err, "MirrorFlow kafka/orders not found");

    api.insert(secured_flow());
    api.insert(secret("dc2-ca", json!({"ca.crt": b64("x")})));
    let err = target_from_api(&api.client(), NS, "orders")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("reading Secret kafka/dc2-user (spec.target of MirrorFlow kafka/orders)"),
        "{err}"
    );
    api.insert(secret("dc2-user", json!({"username": b64("mirror")})));
    let err = target_from_api(&api.client(), NS, "orders")
        .await
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "Secret kafka/dc2-user has no key \"password\" (spec.target of MirrorFlow kafka/orders)"
    );
}

#[tokio::test]
async fn status_renders_the_flow_the_api_holds() {
    let api = FakeApi::new();
    let mut flow = flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
    }));
    flow["status"] = json!({
        "workersSummary": "1/1",
        "failedPartitions": 1,
        "conditions": [{"type": "Ready", "status": "False", "reason": "PartitionsFailed",
                        "message": "1 partition(s) stopped",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "workers": [{"id": "orders-worker-0", "partitions": 4, "state": "Degraded",
                     "lastHeartbeatTime": "2026-01-01T00:00:50Z",
                     "replicationLag": {"records": 42, "seconds": 3}}],
        "failures": [{"type": "TopicReset", "topic": "orders", "partition": 2,
                      "requestedOffset": 77, "detectedAt": "2026-01-01T00:00:00Z"}]
    });
    api.insert(flow);
    let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
    let page = status_page(&api.client(), NS, "orders", now).await.unwrap();
    assert!(
        page.starts_with("MirrorFlow kafka/orders: dc1 (a:9092) -> dc2 (b:9092)"),
        "{page}"
    );
    assert!(
        page.contains("orders-worker-0  Degraded  4           42           3            10s ago"),
        "{page}"
    );
    assert!(
        page.contains("  clear: kubectl -n kafka patch mirrorflow orders --type merge -p '{\"spec\":{\"reset\":{\"id\":\"topicreset-orders-2-1767225600\",\"strategy\":\"RestartFromEarliest\",\"partitions\":[{\"topic\":\"orders\",\"partition\":2}]}}}'"),
        "{page}"
    );
    let err = status_page(&api.client(), NS, "nope", now)
        .await
        .err()
        .unwrap()
        .to_string();
    assert_eq!(err, "MirrorFlow kafka/nope not found");
}

/// Flow `orders` (dc1 → dc2, Identity) failed over by `m1`, its report in `status.failover`.
fn failed_over(policy: &str, phase: &str) -> serde_json::Value {
    let mut f = flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092",
                   "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "dc1-user"}}},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "topics": {"include": ["orders"]},
        "replicationPolicy": {"type": policy},
        "workers": {"replicas": 2},
        "failover": {"id": "m1", "mode": "Planned"}
    }));
    f["status"] = json!({"failover": {"id": "m1", "mode": "Planned", "phase": phase, "partitions": [
        {"topic": "orders", "partition": 0, "sourceEnd": 560, "targetHolds": 560,
         "targetTopic": "orders", "targetEnd": 600}]}});
    f
}

fn failback_args(dry_run: bool, wait: bool) -> FailbackArgs {
    FailbackArgs {
        flow_ref: "kafka/orders".into(),
        id: "m1".into(),
        name: None,
        copy_diverged: true,
        dry_run,
        wait,
        timeout_seconds: 5,
    }
}

const REVERSE: &str = "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows/orders-failback";

#[tokio::test]
async fn failback_applies_the_reverse_flow_once_and_prints_its_report() {
    let api = FakeApi::new();
    api.insert(failed_over("Identity", "Done"));

    let dry = failback(&api.client(), &failback_args(true, false))
        .await
        .unwrap();
    assert_eq!(api.count("PATCH", REVERSE), 0, "--dry-run applies nothing");
    assert!(
        dry.contains("kind: MirrorFlow\n") && dry.contains("copyDiverged: true"),
        "{dry}"
    );
    assert!(dry.contains("orders  0          600       560\n"), "{dry}");

    let out = failback(&api.client(), &failback_args(false, false))
        .await
        .unwrap();
    assert_eq!(
        out,
        "MirrorFlow kafka/orders-failback applied: failing back after failover \"m1\" of kafka/orders\n"
    );
    assert!(
        api.patch_query(REVERSE)
            .contains("fieldManager=mirrorflow-failback"),
        "{}",
        api.patch_query(REVERSE)
    );
    let r = api.object(REVERSE).expect("the reverse flow");
    assert_eq!(r["kind"], "MirrorFlow");
    assert_eq!(r["spec"]["source"]["alias"], "dc2");
    assert_eq!(r["spec"]["source"]["bootstrapServers"], "b:9092");
    assert_eq!(
        r["spec"]["source"]["startFrom"],
        json!({"afterFailover": {"flow": "kafka/orders", "id": "m1", "copyDiverged": true}})
    );
    assert_eq!(r["spec"]["target"]["alias"], "dc1");
    assert_eq!(
        r["spec"]["target"]["sasl"]["credentials"]["secretName"],
        "dc1-user"
    );
    assert_eq!(r["spec"]["replicationPolicy"]["type"], "Identity");
    assert_eq!(r["spec"]["topics"]["include"], json!(["orders"]));
    assert_eq!(r["spec"]["workers"]["replicas"], 2);
    assert!(r["spec"].get("failover").is_none(), "{r}");

    // Its worker 0 reports; a re-run changes nothing and, with --wait, prints the report.
    api.edit(REVERSE, |r| {
        r["status"] = json!({"workers": [{"id": "orders-failback-worker-0", "state": "Running",
            "failback": {"flow": "kafka/orders", "id": "m1", "partitionsStarted": 1,
                         "divergedRecords": 10, "divergedCopied": 10, "partitions": [
                {"topic": "orders", "partition": 0, "startAt": 600,
                 "diverged": {"topic": "orders", "firstOffset": 560, "lastOffset": 569, "records": 10}}]}}]})
    });
    let again = failback(&api.client(), &failback_args(false, true))
        .await
        .unwrap();
    assert_eq!(
        api.count("PATCH", REVERSE),
        1,
        "the same reverse flow is not applied again"
    );
    assert_eq!(
        again,
        "MirrorFlow kafka/orders-failback already fails back after failover \"m1\" of kafka/orders: unchanged
failback after failover \"m1\" of kafka/orders: 1 partition(s) started at the failover's positions, 10 diverged record(s), 10 copied to <topic>.diverged

TOPIC   PARTITION  START-AT  DIVERGED
orders  0          600       10 records, orders/0 offsets 560-569
"
    );
}

#[tokio::test]
async fn failback_refuses_before_writing_anything() {
    let cases = [
        (failed_over("Identity", "Draining"), None,
         "MirrorFlow kafka/orders: status.failover.phase of failover \"m1\" is Draining, not Done; fail back once it is Done"),
        (failed_over("Prefix", "Done"), None,
         "MirrorFlow kafka/orders: spec.replicationPolicy.type is Prefix: only Identity writes back to the original topics (the reverse flow would write to renamed copies); fail back with a flow of your own"),
        (failed_over("Identity", "Done"),
         Some(json!({"afterFailover": {"flow": "kafka/orders", "id": "m0"}})),
         "MirrorFlow kafka/orders-failback exists with spec.source.startFrom {\"afterFailover\":{\"flow\":\"kafka/orders\",\"id\":\"m0\",\"copyDiverged\":false}}, not afterFailover {flow: kafka/orders, id: m1, copyDiverged: true}: delete it or choose another --name"),
    ];
    for (f, existing, says) in cases {
        let api = FakeApi::new();
        api.insert(f);
        if let Some(start) = existing {
            let mut r = flow_json(json!({
                "source": {"alias": "dc2", "bootstrapServers": "b:9092", "startFrom": start},
                "target": {"alias": "dc1", "bootstrapServers": "a:9092"}
            }));
            r["metadata"]["name"] = json!("orders-failback");
            api.insert(r);
        }
        let err = failback(&api.client(), &failback_args(false, false))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), says);
        assert_eq!(api.count("PATCH", REVERSE), 0, "{says}");
    }
    let api = FakeApi::new();
    let err = failback(&api.client(), &failback_args(true, false))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "MirrorFlow kafka/orders not found");
}

fn migrate_args(offsets_topic: Option<&str>) -> MigrateArgs {
    MigrateArgs {
        flow_ref: "kafka/orders".into(),
        offsets_topic: offsets_topic.map(str::to_string),
        dry_run: false,
        wait: false,
        timeout_seconds: 5,
    }
}

#[tokio::test]
async fn migrate_patches_only_the_mirror_maker2_start() {
    let orders = format!("{FLOWS}/orders");
    let api = FakeApi::new();
    api.insert(flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
    })));
    let out = migrate(&api.client(), &migrate_args(Some("connect-offsets")))
        .await
        .unwrap();
    assert_eq!(
        out,
        "MirrorFlow kafka/orders: spec.source.startFrom.mirrorMaker2 set\n"
    );
    assert_eq!(
        api.patch_body(&orders),
        json!({"spec": {"source": {"startFrom": {"mirrorMaker2": {"offsetsTopic": "connect-offsets"}}}}})
    );
    assert!(
        !api.patch_query(&orders).contains("fieldManager"),
        "a merge patch"
    );

    let api = FakeApi::new();
    api.insert(flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092", "startFrom": {"mirrorMaker2": {}}},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
    })));
    let out = migrate(&api.client(), &migrate_args(None)).await.unwrap();
    assert_eq!(
        out,
        "MirrorFlow kafka/orders: spec.source.startFrom.mirrorMaker2 already so: unchanged\n"
    );
    assert_eq!(api.count("PATCH", &orders), 0);

    let api = FakeApi::new();
    api.insert(flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092",
                   "startFrom": {"afterFailover": {"flow": "kafka/back", "id": "m1"}}},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
    })));
    let err = migrate(&api.client(), &migrate_args(None))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MirrorFlow kafka/orders: spec.source.startFrom.afterFailover is set (flow kafka/back, id m1): a flow takes its first positions from one place; remove it first, or take over from MirrorMaker 2 with another flow"
    );
    assert_eq!(api.count("PATCH", &orders), 0);
}
