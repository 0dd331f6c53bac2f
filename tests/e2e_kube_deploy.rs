//! The plain manifests on a real API server: `kubectl apply --server-side -k deploy/` as a user
//! runs it, then, with the controller running as `deploy/`'s ServiceAccount:
//! - bad input is refused by the API server itself (schema and CEL), each message naming the
//!   field, and none of it reaches the controller;
//! - leader election with real processes: the leader is killed, a standby takes over within
//!   the lease duration; a leader frozen (SIGSTOP) past its renew deadline is replaced and,
//!   thawed, writes nothing more; never do two replicas write at once (audit log);
//! - a worker's checkpoint report with an error, applied as worker 0 applies it, becomes the
//!   OffsetCheckpoint's `Ready` reason (`CheckpointFailed`) and a Warning event;
//! - a namespaced install (`helm template --set watchNamespaces=...`): Roles only, the
//!   controller reconciles the watched namespace and nothing else.
//!
//! No brokers and no kubelet: the flows point nowhere; what is checked is the API side. Runs
//! when `../shared/k8s/start.sh` exists or `KUBECONFIG` names a cluster (there, without the
//! audit-log checks); otherwise SKIPPED with the reason.

mod kube_support;

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mirrorflow::api::status::worker_id;
use mirrorflow::api::{MirrorFlow, OffsetCheckpoint, WorkerStatus};
use mirrorflow::worker::process::k8s::{field_manager, worker_status_patch};
use serde_json::json;
use serde_yaml::Value as Yaml;

use kube_support::audit::AuditEvent;
use kube_support::chart::{kind_name, parse_docs};
use kube_support::cluster::Cluster;
use kube_support::tools::{read, run};
use kube_support::{eventually, wait_event, ControllerProc, Scratch};

const SYSTEM_NS: &str = "mirrorflow-system";
const USER: &str = "system:serviceaccount:mirrorflow-system:mirrorflow";
const WAIT: Duration = Duration::from_secs(60);
/// Short lease timings, so that failover is quick to watch.
const LEASE: [&str; 3] = [
    "--lease-duration-seconds=4",
    "--renew-deadline-seconds=3",
    "--retry-period-seconds=1",
];

fn flow(name: &str, ns: &str) -> MirrorFlow {
    serde_json::from_value(json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"alias": "dc1", "bootstrapServers": "nowhere-1:9092"},
                 "target": {"alias": "dc2", "bootstrapServers": "nowhere-2:9092"},
                 "delivery": "AtLeastOnce"}
    }))
    .unwrap()
}

/// What the API server must refuse, and a word its message must contain (the field).
fn invalid_resources() -> Vec<(&'static str, String, &'static str)> {
    let flow = |name: &str, spec: &str| {
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {{name: {name}, namespace: bad}}\nspec:\n  source: {{alias: dc1, bootstrapServers: 'a:1'}}\n  target: {{alias: dc2, bootstrapServers: 'b:1'}}\n{spec}"
        )
    };
    let checkpoint = |spec: &str| {
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\nmetadata: {{name: bad-cp, namespace: bad}}\nspec:\n{spec}"
        )
    };
    vec![
        (
            "alias not a DNS label",
            flow("f1", "").replace("alias: dc1", "alias: DC_1"),
            "spec.source.alias",
        ),
        (
            "aliases equal (CEL)",
            flow("f2", "").replace("alias: dc2", "alias: dc1"),
            "source.alias and target.alias must differ",
        ),
        ("replicas 0", flow("f3", "  workers: {replicas: 0}\n"), "spec.workers.replicas"),
        ("replicas 1001", flow("f4", "  workers: {replicas: 1001}\n"), "spec.workers.replicas"),
        (
            "unknown replication policy",
            flow("f5", "  replicationPolicy: {type: Rename}\n"),
            "spec.replicationPolicy.type",
        ),
        (
            "include regex",
            flow("f6", "  topics: {include: ['orders(']}\n"),
            "spec.topics.include[0]",
        ),
        (
            "exclude regex",
            flow("f7", "  topics: {exclude: ['ok', '[a-']}\n"),
            "spec.topics.exclude[1]",
        ),
        (
            "reset without id",
            flow("f8", "  reset: {strategy: SkipToLatest}\n"),
            "spec.reset.id",
        ),
        (
            "unknown reset strategy",
            flow("f9", "  reset: {id: r1, strategy: Rewind}\n"),
            "spec.reset.strategy",
        ),
        (
            "SASL PLAIN without TLS",
            flow("f10", "").replace(
                "bootstrapServers: 'a:1'",
                "bootstrapServers: 'a:1', sasl: {mechanism: PLAIN, credentials: {secretName: creds}}",
            ),
            "spec.source",
        ),
        (
            "name cannot be a Service name (digit first)",
            flow("1orders", ""),
            "metadata.name",
        ),
        (
            "name cannot be a Service name (dot)",
            flow("orders.eu", ""),
            "metadata.name",
        ),
        (
            "name too long for the StatefulSet",
            flow(&"o".repeat(46), ""),
            "metadata.name",
        ),
        ("unknown field (strict)", flow("f14", "  topicz: {}\n"), "topicz"),
        (
            "startFrom on the target (CEL)",
            flow("f18", "").replace(
                "bootstrapServers: 'b:1'",
                "bootstrapServers: 'b:1', startFrom: {mirrorMaker2: {}}",
            ),
            "spec.target.startFrom",
        ),
        (
            "source startFrom without a source of positions (CEL)",
            flow("f19", "").replace(
                "bootstrapServers: 'a:1'",
                "bootstrapServers: 'a:1', startFrom: {}",
            ),
            "set exactly one of mirrorMaker2, afterFailover",
        ),
        (
            "MM2 offsets topic not a topic name",
            flow("f20", "").replace(
                "bootstrapServers: 'a:1'",
                "bootstrapServers: 'a:1', startFrom: {mirrorMaker2: {offsetsTopic: 'a b'}}",
            ),
            "spec.source.startFrom.mirrorMaker2.offsetsTopic",
        ),
        ("inFlightMiB 0", flow("f15", "  workers: {inFlightMiB: 0}\n"), "spec.workers.inFlightMiB"),
        ("lagMax 0", flow("f16", "  offsetSyncs: {lagMax: 0}\n"), "spec.offsetSyncs.lagMax"),
        (
            "bootstrapServers empty",
            flow("f17", "").replace("bootstrapServers: 'b:1'", "bootstrapServers: ''"),
            "spec.target.bootstrapServers",
        ),
        (
            "checkpoint without flowRef",
            checkpoint("  groups: {include: ['.*']}\n"),
            "spec.flowRef",
        ),
        (
            "checkpoint group regex",
            checkpoint("  flowRef: {name: f}\n  groups: {include: ['(']}\n"),
            "spec.groups.include[0]",
        ),
        (
            "checkpoint writes nothing (CEL)",
            checkpoint("  flowRef: {name: f}\n  syncGroupOffsets: false\n  emitCheckpointsTopic: false\n"),
            "at least one of syncGroupOffsets and emitCheckpointsTopic",
        ),
        (
            "checkpoint interval 0",
            checkpoint("  flowRef: {name: f}\n  intervalSeconds: 0\n"),
            "spec.intervalSeconds",
        ),
    ]
}

/// The credential sequence of the controllers' writes (leases aside) in time order, runs
/// collapsed: each replica must appear in one run only (never two writing at once).
fn writers(events: &[AuditEvent]) -> Vec<String> {
    let mut writes: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.user.username == USER && e.is_write() && !e.is_lease())
        .collect();
    writes.sort_by_key(|e| e.stage_timestamp);
    let mut runs: Vec<String> = Vec::new();
    for w in writes {
        let c = w.credential().unwrap_or_default().to_string();
        if runs.last() != Some(&c) {
            runs.push(c);
        }
    }
    runs
}

async fn leader_of<'a>(controllers: &'a [&'a ControllerProc]) -> Option<&'a ControllerProc> {
    for c in controllers {
        if c.is_leader().await {
            return Some(c);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_deploy_schema_and_leader_election() {
    let Some(cluster) = Cluster::start_or_skip("kustomize_deploy_schema_and_leader_election").await
    else {
        return;
    };
    let scratch = Scratch::new("mf-e2e-deploy-");
    let started = Instant::now();
    let step = |what: &str| eprintln!("[deploy {:>5.1}s] {what}", started.elapsed().as_secs_f64());

    // Exactly what docs/PACKAGING.md tells a user to run.
    cluster.kubectl_ok(&["apply", "--server-side", "-k", "deploy/"]);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/mirrorflows.mirrorflow.io",
        "crd/offsetcheckpoints.mirrorflow.io",
        "--timeout=60s",
    ]);
    let deployment: Yaml = parse_docs(&read("deploy/mirrorflow.yaml"))
        .into_iter()
        .find(|d| kind_name(d).0 == "Deployment")
        .expect("deploy/ has the controller Deployment");
    step("deploy/ applied");

    let start = |id: &str| {
        // A token per replica: the audit log tells them apart by its id.
        let token = cluster.sa_token_kubectl(SYSTEM_NS, "mirrorflow");
        let kc = cluster.kubeconfig_for(id, &token, SYSTEM_NS);
        ControllerProc::start(&deployment, SYSTEM_NS, id, &kc, &LEASE, &scratch.path)
    };
    let mut a = start("mirrorflow-a");
    let mut b = start("mirrorflow-b");
    eventually("a leader", WAIT, || async {
        leader_of(&[&a, &b])
            .await
            .map(|_| ())
            .ok_or_else(|| format!("a:\n{}\nb:\n{}", a.proc.tail(10), b.proc.tail(10)))
    })
    .await;

    // Bad input never gets past the API server.
    cluster.namespace("bad").await;
    let cases = invalid_resources();
    assert!(cases.len() >= 15);
    for (what, yaml, field) in &cases {
        let err = cluster
            .kubectl_stdin(&["apply", "-f", "-"], Some(yaml))
            .expect_err(&format!("the API server accepted: {what}"));
        assert!(
            err.contains(field),
            "{what}: the message names {field:?}: {err}"
        );
        eprintln!(
            "refused ({what}): {}",
            err.lines()
                .filter(|l| l.contains(field))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let left = cluster.kubectl_ok(&[
        "get",
        "mirrorflows,offsetcheckpoints",
        "-n",
        "bad",
        "-o",
        "name",
    ]);
    assert_eq!(left.trim(), "", "nothing was stored");
    step(&format!(
        "{} invalid resources refused by the API server",
        cases.len()
    ));

    // History-splitting edits of a live flow are refused by the CEL transition rules
    // (`oldSelf`); edits that keep the history (pause) are not.
    cluster.namespace("history").await;
    cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(
                "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata: {name: history, namespace: history}\nspec:\n  source: {alias: dc1, bootstrapServers: 'a:1'}\n  target: {alias: dc2, bootstrapServers: 'b:1'}\n",
            ),
        )
        .expect("a valid flow is accepted");
    let edits = [
        (
            "source alias",
            r#"{"spec":{"source":{"alias":"dc9"}}}"#,
            "spec.source.alias cannot change",
        ),
        (
            "source servers",
            r#"{"spec":{"source":{"bootstrapServers":"c:1"}}}"#,
            "spec.source.bootstrapServers cannot change",
        ),
        (
            "target alias",
            r#"{"spec":{"target":{"alias":"dc8"}}}"#,
            "spec.target.alias cannot change",
        ),
        (
            "replication policy",
            r#"{"spec":{"replicationPolicy":{"type":"Identity"}}}"#,
            "spec.replicationPolicy cannot change",
        ),
    ];
    for (what, patch, message) in edits {
        let err = cluster
            .kubectl(&[
                "patch",
                "mirrorflow",
                "history",
                "-n",
                "history",
                "--type",
                "merge",
                "-p",
                patch,
            ])
            .expect_err(&format!("the API server accepted a change of the {what}"));
        assert!(err.contains(message), "{what}: {err}");
    }
    cluster.kubectl_ok(&[
        "patch",
        "mirrorflow",
        "history",
        "-n",
        "history",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);
    cluster.kubectl_ok(&["delete", "mirrorflow", "history", "-n", "history"]);
    step("history-splitting edits refused on a live flow; pausing accepted");

    // Leader election, with a flow to reconcile.
    cluster.namespace("elect").await;
    let flows: Api<MirrorFlow> = Api::namespaced(cluster.client.clone(), "elect");
    flows
        .create(&PostParams::default(), &flow("elect", "elect"))
        .await
        .unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), "elect");
    let replicas = |n: i32| {
        let sts = sts.clone();
        async move {
            match sts.get_opt("elect-worker").await {
                Ok(Some(s)) if s.spec.as_ref().and_then(|s| s.replicas) == Some(n) => Ok(()),
                other => Err(format!("{:?}", other.map(|s| s.map(|s| s.spec)))),
            }
        }
    };
    eventually("the leader creates the children", WAIT, || replicas(1)).await;

    let (leader, standby) = if a.is_leader().await {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    step(&format!("{} leads; killing it", leader.identity));
    leader.proc.kill().await;
    let killed = Instant::now();
    eventually("the standby takes over", WAIT, || async {
        standby
            .is_leader()
            .await
            .then_some(())
            .ok_or_else(|| standby.proc.tail(5))
    })
    .await;
    let took = killed.elapsed();
    eprintln!(
        "takeover after the leader was killed: {:.1} s (lease 4 s, retry 1 s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(4 + 1 + 3), "took {took:?}");
    // It reconciles: a resize goes through drain-to-zero to the new count.
    flows
        .patch(
            "elect",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"workers": {"replicas": 2}}})),
        )
        .await
        .unwrap();
    eventually("the new leader resizes", WAIT, || replicas(2)).await;

    // A leader frozen past its renew deadline: replaced, and, thawed, it writes nothing.
    let mut c = start("mirrorflow-c");
    let frozen = standby;
    step(&format!(
        "{} leads, mirrorflow-c stands by; freezing the leader",
        frozen.identity
    ));
    tokio::time::sleep(Duration::from_secs(2)).await; // c has seen the lease
    frozen.proc.signal(libc::SIGSTOP);
    let freeze = Timestamp::now();
    flows
        .patch(
            "elect",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"workers": {"replicas": 1}}})),
        )
        .await
        .unwrap();
    eventually(
        "mirrorflow-c takes over from the frozen leader",
        WAIT,
        || async {
            c.is_leader()
                .await
                .then_some(())
                .ok_or_else(|| c.proc.tail(5))
        },
    )
    .await;
    eventually("mirrorflow-c resizes", WAIT, || replicas(1)).await;
    frozen.proc.signal(libc::SIGCONT);
    let status = frozen.proc.wait(WAIT).await;
    let out = frozen.proc.output();
    assert!(
        out.contains("lost leadership") || out.contains("renew deadline"),
        "the thawed leader steps down: {status:?}\n{}",
        frozen.proc.tail(15)
    );
    step("the thawed leader exited");

    // Worker 0's checkpoint report, applied as the worker applies it, passes the API server's
    // schema and reaches the OffsetCheckpoint: Ready False CheckpointFailed with the error,
    // and a Warning event.
    const DOWN: &str = "target cluster: create topic dc1.checkpoints.internal (replication factor 65): InvalidReplicationFactor";
    let cps: Api<OffsetCheckpoint> = Api::namespaced(cluster.client.clone(), "elect");
    cps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "mirrorflow.io/v1alpha1", "kind": "OffsetCheckpoint",
            "metadata": {"name": "elect-groups", "namespace": "elect"},
            "spec": {"flowRef": {"name": "elect"}}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let entry: WorkerStatus = serde_json::from_value(json!({
        "id": worker_id("elect", 0), "state": "Running",
        "lastHeartbeatTime": Timestamp::now().to_string(),
        "checkpoints": [{"name": "elect-groups", "error": DOWN}]
    }))
    .unwrap();
    flows
        .patch_status(
            "elect",
            &PatchParams::apply(&field_manager(0)).force(),
            &Patch::Apply(&worker_status_patch("elect", &entry)),
        )
        .await
        .unwrap();
    eventually("the OffsetCheckpoint says why", WAIT, || async {
        let cp = cps.get("elect-groups").await.map_err(|e| e.to_string())?;
        let ready = cp
            .status
            .into_iter()
            .flat_map(|s| s.conditions)
            .find(|c| c.type_ == "Ready");
        match ready {
            Some(c)
                if c.status == "False" && c.reason == "CheckpointFailed" && c.message == DOWN =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let event = wait_event(
        &cluster.client,
        "elect",
        "elect-groups",
        "CheckpointFailed",
        WAIT,
    )
    .await;
    assert_eq!(event.note.as_deref(), Some(DOWN));
    step("a worker's checkpoint error is the OffsetCheckpoint's Ready reason and an event");

    if let Some(audit) = cluster.audit() {
        let events = audit.events();
        let runs = writers(&events);
        let mut seen = std::collections::BTreeSet::new();
        for r in &runs {
            assert!(
                seen.insert(r.clone()),
                "two replicas wrote at once: {runs:?}"
            );
        }
        assert_eq!(
            runs.len(),
            3,
            "a, b and c wrote, one after the other: {runs:?}"
        );
        let thawed: Vec<String> = events
            .iter()
            .filter(|e| {
                e.user.username == USER
                    && e.is_write()
                    && !e.is_lease()
                    && e.stage_timestamp > freeze
                    && e.credential() == Some(runs[1].as_str())
            })
            .map(AuditEvent::describe)
            .collect();
        assert!(
            thawed.is_empty(),
            "the frozen leader wrote after its freeze: {thawed:?}"
        );
        // None of the refused resources reached the controller.
        let saw_bad: Vec<String> = events
            .iter()
            .filter(|e| {
                e.user.username == USER && e.namespace() == Some("bad") && e.resource() != "events"
            })
            .filter(|e| {
                e.object_ref
                    .as_ref()
                    .and_then(|o| o.name.as_ref())
                    .is_some()
            })
            .map(AuditEvent::describe)
            .collect();
        assert!(saw_bad.is_empty(), "{saw_bad:?}");
        let forbidden: Vec<String> = events
            .iter()
            .filter(|e| e.forbidden_by_rbac())
            .map(|e| format!("{} {}", e.user.username, e.describe()))
            .collect();
        assert!(forbidden.is_empty(), "refused by RBAC: {forbidden:?}");
    } else {
        eprintln!("note: no audit log on this cluster; the write-order checks are skipped");
    }
    c.proc.stop(Duration::from_secs(10)).await;

    // A namespaced install: Roles in the watched namespace only, no cluster-wide rights.
    step("namespaced install (watchNamespaces)");
    cluster.namespace("mf-ns-system").await;
    cluster.namespace("team-a").await;
    cluster.namespace("team-b").await;
    let rendered = run(
        &cluster.helm,
        &[
            "template",
            "mf-ns",
            "charts/mirrorflow",
            "--namespace",
            "mf-ns-system",
            "--skip-crds",
            "--set",
            "watchNamespaces={team-a}",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let docs = parse_docs(&rendered);
    assert!(
        docs.iter().all(|d| !kind_name(d).0.starts_with("Cluster")),
        "Roles only"
    );
    cluster
        .kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&rendered))
        .unwrap_or_else(|e| panic!("{e}"));
    let sa = docs
        .iter()
        .find(|d| kind_name(d).0 == "ServiceAccount")
        .map(|d| kind_name(d).1)
        .unwrap();
    let ns_deployment = docs
        .iter()
        .find(|d| kind_name(d).0 == "Deployment")
        .unwrap();
    let token = cluster.sa_token_kubectl("mf-ns-system", &sa);
    let kc = cluster.kubeconfig_for("namespaced", &token, "mf-ns-system");
    let mut d = ControllerProc::start(
        ns_deployment,
        "mf-ns-system",
        "mf-ns-0",
        &kc,
        &LEASE,
        &scratch.path,
    );
    for ns in ["team-a", "team-b"] {
        Api::<MirrorFlow>::namespaced(cluster.client.clone(), ns)
            .create(&PostParams::default(), &flow("orders", ns))
            .await
            .unwrap();
    }
    let team_a: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), "team-a");
    eventually("the watched namespace is reconciled", WAIT, || async {
        team_a
            .get_opt("orders-worker")
            .await
            .ok()
            .flatten()
            .map(|_| ())
            .ok_or_else(|| d.proc.tail(10))
    })
    .await;
    let b_flow = Api::<MirrorFlow>::namespaced(cluster.client.clone(), "team-b")
        .get("orders")
        .await
        .unwrap();
    assert!(
        b_flow.status.is_none(),
        "team-b is not watched: {:?}",
        b_flow.status
    );
    assert!(
        Api::<StatefulSet>::namespaced(cluster.client.clone(), "team-b")
            .get_opt("orders-worker")
            .await
            .unwrap()
            .is_none()
    );
    if let Some(audit) = cluster.audit() {
        let user = format!("system:serviceaccount:mf-ns-system:{sa}");
        let forbidden: Vec<String> = audit
            .events()
            .iter()
            .filter(|e| e.user.username == user && e.forbidden_by_rbac())
            .map(AuditEvent::describe)
            .collect();
        assert!(
            forbidden.is_empty(),
            "a namespaced install lacks: {forbidden:?}"
        );
    }
    let flow_a = Api::<MirrorFlow>::namespaced(cluster.client.clone(), "team-a")
        .get("orders")
        .await
        .unwrap();
    assert!(flow_a.status.is_some(), "{}", flow_a.name_any());
    d.proc.stop(Duration::from_secs(10)).await;
    step("done");
}
