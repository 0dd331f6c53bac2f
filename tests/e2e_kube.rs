//! The operator end to end on a real API server, under its own RBAC, installed the way a user
//! installs it: `helm template --include-crds` of `charts/mirrorflow` applied to the server;
//! `mirrorflow controller` as a local process with the command, args and env of the chart's
//! Deployment, authenticated as the chart's ServiceAccount (a `kubectl create token`); the
//! workers as local processes run by the process kubelet (`kube_support::kubelet`) from the
//! pod template of the StatefulSets the controller creates, authenticated as the per-flow
//! ServiceAccount, against two local Apache Kafka nodes.
//!
//! Runs when `../shared/k8s/start.sh` exists (it starts its own API server, ~5 s); otherwise
//! prints SKIPPED with the reason (`KUBECONFIG` naming a cluster with kubelets: SKIPPED too,
//! the process kubelet needs a bare API server; `tests/e2e_kube_deploy.rs` runs anywhere).
//!
//! Scenarios, in order, on one server: the examples reach Ready (children owned, workers in
//! `status.workers`, printer columns, `kubectl wait --for=condition=Ready`, Healthy by the
//! chart's Argo CD health checks); an OffsetCheckpoint syncs a group; the controller's API
//! calls for one flow over a minute of steady state with traffic (audit log); DataLoss →
//! Event → `kubectl describe` (one screen, the detail once) → the `kubectl patch` it prints →
//! the reset applied once; resize 1→2; a foreign StatefulSet not taken over; a child the API
//! server refuses; resize 2→1 with the controller killed mid-resize; deleting a flow (and
//! its children: no garbage collector runs) stops its workers. Throughout: no request of the
//! controller or a worker is refused by RBAC, and every rule of the chart's ClusterRole is
//! used.

mod kube_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::ResourceExt;
use mirrorflow::api::{MirrorFlow, OffsetCheckpoint, ResetOutcome};
use mirrorflow::kafka::admin::{GroupAdmin, GroupOffset};
use mirrorflow::testkit::brokers::{
    broker_or_skip, delete_records_before, produce, watermarks, BrokerKind, LocalBroker,
    ProduceRecord,
};
use serde_json::json;
use serde_yaml::Value as Yaml;

use kube_support::audit::AuditEvent;
use kube_support::chart::parse_docs;
use kube_support::cluster::Cluster;
use kube_support::kubelet::Kubelet;
use kube_support::tools::read;
use kube_support::{eventually, ControllerProc, Scratch};

const RELEASE: &str = "mirrorflow";
const SYSTEM_NS: &str = "mirrorflow-system";
/// The namespace of examples/full-flow.yaml and examples/offset-checkpoint.yaml.
const EXAMPLES_NS: &str = "kafka-mirroring";
/// Where examples/minimal-flow.yaml (no namespace) goes, and the other scenario flows.
const NS: &str = "mirrorflow-e2e";
const CONTROLLER_USER: &str = "system:serviceaccount:mirrorflow-system:mirrorflow";
const WAIT: Duration = Duration::from_secs(120);
/// The steady-state window of the request count.
const WINDOW: Duration = Duration::from_secs(60);

struct Stack {
    cluster: Arc<Cluster>,
    source: LocalBroker,
    target: LocalBroker,
    kubelet: Option<Kubelet>,
    controller: Option<ControllerProc>,
    deployment: Yaml,
    controller_kubeconfig: std::path::PathBuf,
    controllers_started: usize,
    scratch: Scratch,
    started: Instant,
}

impl Stack {
    fn step(&self, what: &str) {
        eprintln!(
            "[e2e {:>6.1}s] {what}",
            self.started.elapsed().as_secs_f64()
        );
    }

    fn start_controller(&mut self) {
        self.controllers_started += 1;
        let id = format!("mirrorflow-controller-{}", self.controllers_started);
        self.controller = Some(ControllerProc::start(
            &self.deployment,
            SYSTEM_NS,
            &id,
            &self.controller_kubeconfig,
            &[],
            &self.scratch.path,
        ));
    }

    fn controller_tail(&self) -> String {
        self.controller
            .as_ref()
            .map(|c| c.proc.tail(30))
            .unwrap_or_default()
    }

    fn flows(&self, ns: &str) -> Api<MirrorFlow> {
        Api::namespaced(self.cluster.client.clone(), ns)
    }

    fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().unwrap()
    }

    async fn flow(&self, ns: &str, name: &str) -> MirrorFlow {
        self.flows(ns).get(name).await.unwrap()
    }

    /// Waits (bounded) until `check` accepts flow `ns/name`, showing the flow and the
    /// controller's last words when it does not.
    async fn until<T>(
        &self,
        what: &str,
        ns: &str,
        name: &str,
        mut check: impl FnMut(&MirrorFlow) -> Option<T>,
    ) -> T {
        let api = self.flows(ns);
        let deadline = Instant::now() + WAIT;
        loop {
            let last = match api.get(name).await {
                Ok(f) => match check(&f) {
                    Some(v) => return v,
                    None => serde_json::to_string(&f.status).unwrap(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "gave up after {WAIT:?} waiting for {what}; {ns}/{name} status: {last}\ncontroller:\n{}",
                    self.controller_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// The spec of `ns/name` without its reset request, for a new flow.
    async fn spec_of(&self, ns: &str, name: &str) -> serde_json::Value {
        let mut spec = self.flow(ns, name).await.spec;
        spec.reset = None;
        serde_json::to_value(&spec).unwrap()
    }

    /// `kubectl patch mirrorflow` with a merge patch.
    fn patch_flow(&self, ns: &str, name: &str, patch: serde_json::Value) {
        self.cluster.kubectl_ok(&[
            "patch",
            "mirrorflow",
            name,
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ]);
    }
}

fn condition(flow: &MirrorFlow, type_: &str) -> Option<(String, String, String)> {
    flow.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn ready_with(flow: &MirrorFlow, workers: usize) -> bool {
    let fresh = flow
        .status
        .as_ref()
        .map(|s| s.workers_summary.as_deref() == Some(&format!("{workers}/{workers}")))
        .unwrap_or(false);
    fresh && condition(flow, "Ready").is_some_and(|c| c.0 == "True")
}

/// examples/*.yaml edited to point at the local brokers: bootstrap servers, no TLS/SASL
/// (the local brokers run plaintext), replication factor 1 where an example sets one (each
/// local cluster is one Kafka node, which refuses more), 2 workers where the example sets a
/// count. Their delivery stays as written (ExactlyOnce unless an example says otherwise).
fn edited_examples(source: &str, target: &str) -> String {
    let mut out = String::new();
    for file in [
        "examples/full-flow.yaml",
        "examples/offset-checkpoint.yaml",
        "examples/minimal-flow.yaml",
    ] {
        for mut doc in parse_docs(&read(file)) {
            if doc["kind"] == "MirrorFlow" {
                let audited = doc["metadata"]["name"] == "orders-dr";
                let spec = &mut doc["spec"];
                for (side, bootstrap) in [("source", source), ("target", target)] {
                    let c = spec[side].as_mapping_mut().unwrap();
                    c.insert("bootstrapServers".into(), bootstrap.into());
                    c.remove("tls");
                    c.remove("sasl");
                    if c.contains_key("replicationFactor") {
                        c.insert("replicationFactor".into(), 1.into());
                    }
                }
                if spec["internalTopics"]["replicationFactor"]
                    .as_i64()
                    .is_some()
                {
                    spec["internalTopics"]["replicationFactor"] = 1.into();
                }
                // The audit runs within the test (default: every 300 s).
                if audited {
                    spec["audit"] = serde_yaml::from_str("intervalSeconds: 10").unwrap();
                }
                if spec["workers"]["replicas"].as_i64().is_some() {
                    spec["workers"]["replicas"] = 2.into();
                }
                if doc["metadata"]["namespace"].is_null() {
                    doc["metadata"]
                        .as_mapping_mut()
                        .unwrap()
                        .insert("namespace".into(), NS.into());
                }
            }
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&doc).unwrap());
        }
    }
    out
}

fn records(n: usize, tag: &str) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| ProduceRecord::new(format!("k{i}"), format!("{tag}-{i}")))
        .collect()
}

async fn prepare_source(stack: &Stack) {
    for (topic, partitions) in [("orders.created", 4), ("payments", 1), ("events", 1)] {
        stack
            .source
            .create_topic(topic, partitions, &[])
            .await
            .unwrap_or_else(|e| panic!("create {topic}: {e}"));
    }
    let src = stack.source.bootstrap_servers();
    produce(&src, "orders.created", &records(200, "order"))
        .await
        .unwrap();
    // A consumer group of the orders services (examples/offset-checkpoint.yaml checkpoints
    // `orders-.*`), stopped at offset 10 of every partition.
    let admin = group_admin(&src);
    let offsets: Vec<GroupOffset> = (0..4)
        .map(|p| GroupOffset {
            topic: "orders.created".into(),
            partition: p,
            offset: 10,
            metadata: String::new(),
        })
        .collect();
    let r = tokio::task::spawn_blocking(move || {
        admin.alter_offsets(&[("orders-app".to_string(), offsets)])
    })
    .await
    .unwrap();
    r.into_iter().for_each(|r| r.unwrap());
}

fn group_admin(bootstrap: &str) -> GroupAdmin {
    let mut c = rdkafka::ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    GroupAdmin::new(&c, bootstrap, Duration::from_secs(30)).unwrap()
}

async fn examples_become_ready(stack: &Stack) {
    stack.step("apply the examples");
    stack.cluster.namespace(EXAMPLES_NS).await;
    stack.cluster.namespace(NS).await;
    let text = edited_examples(
        &stack.source.bootstrap_servers(),
        &stack.target.bootstrap_servers(),
    );
    stack
        .cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&text))
        .unwrap_or_else(|e| panic!("{e}"));

    let flow = stack
        .until(
            "orders-dr Ready with 2 workers",
            EXAMPLES_NS,
            "orders-dr",
            |f| ready_with(f, 2).then(|| f.clone()),
        )
        .await;
    stack
        .until("dc1-to-dc2 Ready", NS, "dc1-to-dc2", |f| {
            ready_with(f, 1).then_some(())
        })
        .await;
    stack.step("the examples are Ready");
    // GitOps tools and scripts wait on the Ready condition.
    stack.cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "mirrorflow/orders-dr",
        "-n",
        EXAMPLES_NS,
        "--timeout=60s",
    ]);
    stack.step("kubectl wait --for=condition=Ready mirrorflow/orders-dr");
    assert_eq!(
        argo_health(stack, EXAMPLES_NS, "mirrorflow", "orders-dr").0,
        "Healthy"
    );

    // Children exist, controlled by the flow.
    let uid = flow.uid().unwrap();
    for (kind, name) in [
        ("statefulset", "orders-dr-worker"),
        ("service", "orders-dr-worker"),
        ("serviceaccount", "orders-dr-worker"),
        ("role", "orders-dr-worker"),
        ("rolebinding", "orders-dr-worker"),
        ("poddisruptionbudget", "orders-dr-worker"),
        ("configmap", "orders-dr-worker-config"),
    ] {
        let out = stack.cluster.kubectl_ok(&[
            "get",
            kind,
            name,
            "-n",
            EXAMPLES_NS,
            "-o",
            "jsonpath={.metadata.ownerReferences[?(@.controller==true)].uid}",
        ]);
        assert_eq!(out, uid, "{kind}/{name} is controlled by orders-dr");
    }
    // The workers report in, each its own entry.
    let mut ids: Vec<String> = flow
        .status
        .clone()
        .unwrap()
        .workers
        .iter()
        .map(|w| w.id.clone())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["orders-dr-worker-0", "orders-dr-worker-1"]);
    // The full example's reset names a healthy partition: refused, and said so.
    let reset = stack
        .until(
            "the example's reset is handled",
            EXAMPLES_NS,
            "orders-dr",
            |f| f.status.as_ref()?.last_applied_reset.clone(),
        )
        .await;
    assert_eq!(
        (reset.id.as_str(), reset.outcome),
        ("incident-2041", ResetOutcome::Refused),
        "{reset:?}"
    );
}

/// `kubectl get mf -o wide`, as text.
async fn printer_columns(stack: &Stack) {
    // Printer columns, as text. The lag and latency columns follow the workers' heartbeats
    // (every 10 s) and the controller's next look (within 30 s), not every record.
    let table = eventually("printer columns with the lag caught up", WAIT, || async {
        let table = stack.cluster.kubectl_ok(&[
            "get",
            "mf",
            "-A",
            "-o",
            "wide",
            "--sort-by=.metadata.name",
        ]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            vec![
                "NAMESPACE",
                "NAME",
                "READY",
                "WORKERS",
                "FAILED",
                "LAG",
                "LATENCY(MS)",
                "REASON",
                "AGE"
            ]
        );
        let ok = [(EXAMPLES_NS, "orders-dr", "2/2"), (NS, "dc1-to-dc2", "1/1")]
            .iter()
            .all(|(ns, name, workers)| {
                table.lines().any(|l| {
                    let row: Vec<&str> = l.split_whitespace().collect();
                    // LATENCY(MS): measured with heartbeats (on by default), so a number.
                    row.len() >= 8
                        && row[..6] == [*ns, *name, "True", *workers, "0", "0"]
                        && row[6].parse::<u64>().is_ok()
                        && row[7] == "AllWorkersRunning"
                })
            });
        if ok {
            Ok(table)
        } else {
            Err(table)
        }
    })
    .await;
    eprintln!("{table}");
}

async fn checkpoint_syncs_a_group(stack: &Stack) {
    let cps: Api<OffsetCheckpoint> = Api::namespaced(stack.cluster.client.clone(), EXAMPLES_NS);
    let st = eventually("orders-groups checkpoints orders-app", WAIT, || async {
        let cp = cps.get("orders-groups").await.map_err(|e| e.to_string())?;
        let st = cp.status.clone().unwrap_or_default();
        let ready = st
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let synced = st
            .groups
            .iter()
            .any(|g| g.group == "orders-app" && g.synced);
        if ready && synced {
            Ok(st)
        } else {
            Err(serde_json::to_string(&st).unwrap())
        }
    })
    .await;
    assert!(st.groups_checkpointed >= 1, "{st:?}");
    // The translated offsets are committed to the same group on the target.
    let admin = group_admin(&stack.target.bootstrap_servers());
    let committed =
        tokio::task::spawn_blocking(move || admin.list_offsets(&["orders-app".to_string()]))
            .await
            .unwrap()
            .pop()
            .unwrap()
            .unwrap();
    assert!(
        committed
            .iter()
            .any(|o| o.topic == "eu-west.orders.created"),
        "{committed:?}"
    );
    let table = stack.cluster.kubectl_ok(&[
        "get",
        "ocp",
        "-n",
        EXAMPLES_NS,
        "orders-groups",
        "-o",
        "wide",
    ]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "FLOW",
            "READY",
            "GROUPS",
            "OLDESTAGE",
            "REASON",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (&row[..4], row[5]),
        (
            &["orders-groups", "orders-dr", "True", "1"][..],
            "Checkpointing"
        ),
        "{table}"
    );
    stack.step("OffsetCheckpoint orders-groups synced group orders-app to the target");
    assert_eq!(
        argo_health(stack, EXAMPLES_NS, "offsetcheckpoint", "orders-groups").0,
        "Healthy"
    );

    // The operator tools, through this API server: `translate --flow-ref` reads the flow (and
    // would read its target's Secrets) and finds the group's checkpoints on the target;
    // `status` renders the flow's workers.
    let args = mirrorflow::cli::translate::TranslateArgs {
        source: mirrorflow::cli::flow_source::FlowSource {
            flow: None,
            flow_ref: Some(format!("{EXAMPLES_NS}/orders-dr")),
            secrets_dir: "/nonexistent".into(),
        },
        output: mirrorflow::cli::translate::TranslateOutput::Csv,
        group: "orders-app".into(),
        apply: false,
        timeout_seconds: 10,
    };
    let access = mirrorflow::cli::translate::target_from_api(
        &stack.cluster.client,
        EXAMPLES_NS,
        "orders-dr",
    )
    .await
    .unwrap();
    let report = mirrorflow::cli::translate::translate_with(&args, &access)
        .await
        .unwrap();
    assert!(
        report
            .rows
            .iter()
            .any(|r| r.topic == "eu-west.orders.created" && r.target_committed.is_some()),
        "{report:?}"
    );
    let page = mirrorflow::cli::status::status_page(
        &stack.cluster.client,
        EXAMPLES_NS,
        "orders-dr",
        Timestamp::now(),
    )
    .await
    .unwrap();
    assert!(
        page.starts_with(&format!("MirrorFlow {EXAMPLES_NS}/orders-dr: eu-west ("))
            && page.contains("orders-dr-worker-0  Running"),
        "{page}"
    );
    stack.step("translate --flow-ref and status read the flow through the API server");

    // The integrity audit (every 10 s on orders-dr here): the Audited condition in `kubectl
    // describe`, and `mirrorflow audit --flow-ref` through this API server.
    let audited = stack
        .until("orders-dr Audited", EXAMPLES_NS, "orders-dr", |f| {
            condition(f, "Audited")
                .filter(|c| c.0 == "True")
                .map(|c| c.2)
        })
        .await;
    let describe =
        stack
            .cluster
            .kubectl_ok(&["describe", "mirrorflow", "orders-dr", "-n", EXAMPLES_NS]);
    eprintln!("orders-dr Audited True: {audited}");
    assert!(
        describe.contains("Audited") && describe.contains(audited.as_str()),
        "the Audited condition ({audited}) in:\n{describe}"
    );
    let out = std::process::Command::new(kube_support::process::binary())
        .args(["audit", "--flow-ref", &format!("{EXAMPLES_NS}/orders-dr")])
        .env("KUBECONFIG", &stack.cluster.kubeconfig)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("---- mirrorflow audit --flow-ref {EXAMPLES_NS}/orders-dr\n{stdout}----");
    assert!(
        out.status.success() && stdout.contains("clean: ") && stdout.contains("orders.created"),
        "{}\n{stdout}\n{stderr}",
        out.status
    );
    stack.step("Audited in kubectl describe; audit --flow-ref compares through the API server");
}

/// The Argo CD health (status, message) of `kind/name` as the API server returns it, by the
/// chart's Lua health check.
fn argo_health(stack: &Stack, ns: &str, kind: &str, name: &str) -> (String, String) {
    let json = stack
        .cluster
        .kubectl_ok(&["get", kind, name, "-n", ns, "-o", "json"]);
    kube_support::argo::health(&serde_json::from_str(&json).unwrap())
}

/// Controller requests attributable to `ns` (its only flow), leases aside, over `[from, to)`:
/// (per minute, breakdown).
fn requests_per_minute(
    events: &[AuditEvent],
    ns: &str,
    from: Timestamp,
    to: Timestamp,
) -> (f64, BTreeMap<String, usize>) {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    let mut n = 0;
    for e in events.iter().filter(|e| {
        e.user.username == CONTROLLER_USER
            && !e.is_lease()
            && e.namespace() == Some(ns)
            && e.stage_timestamp >= from
            && e.stage_timestamp < to
    }) {
        n += 1;
        *by.entry(format!("{} {}", e.verb, e.resource()))
            .or_default() += 1;
    }
    let minutes = to.duration_since(from).as_secs_f64() / 60.0;
    (n as f64 / minutes, by)
}

async fn data_loss_describe_and_reset(stack: &Stack) {
    stack.step("DataLoss: replicate, pause, purge past the position, resume");
    let (src, tgt) = (
        stack.source.bootstrap_servers(),
        stack.target.bootstrap_servers(),
    );
    produce(&src, "events", &records(10, "before"))
        .await
        .unwrap();
    eventually("dc1.events holds 10 records", WAIT, || async {
        match watermarks(&tgt, "dc1.events", 0).await {
            Ok((_, high)) if high >= 10 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    stack.patch_flow(NS, "dc1-to-dc2", json!({"spec": {"paused": true}}));
    stack
        .until("dc1-to-dc2 paused", NS, "dc1-to-dc2", |f| {
            let w = f.status.as_ref()?.workers.first()?;
            (w.state == mirrorflow::api::WorkerState::Paused).then_some(())
        })
        .await;
    produce(&src, "events", &records(10, "lost")).await.unwrap();
    let log_start = delete_records_before(&src, "events", 0, 20).await.unwrap();
    assert_eq!(log_start, 20);
    stack.patch_flow(NS, "dc1-to-dc2", json!({"spec": {"paused": false}}));
    let message = stack
        .until("DataLoss on events/0", NS, "dc1-to-dc2", |f| {
            condition(f, "DataLoss")
                .filter(|c| c.0 == "True")
                .map(|c| c.2)
        })
        .await;
    assert!(message.contains("events/0"), "{message}");
    let flow = stack.flow(NS, "dc1-to-dc2").await;
    let failure = flow.status.as_ref().unwrap().failures[0].clone();
    assert_eq!(
        (
            failure.requested_offset,
            failure.log_start_offset,
            failure.records_lost
        ),
        (10, Some(20), Some(10)),
        "{failure:?}"
    );

    // The Event, as `kubectl describe` lists it.
    wait_event(stack, "dc1-to-dc2", "DataLoss").await;

    // As the Event arrives the worker may not have seen the fold yet (then the explanation
    // is in its entry too, for one watch round trip): said, not asserted.
    let early = stack
        .cluster
        .kubectl_ok(&["describe", "mirrorflow", "dc1-to-dc2", "-n", NS]);
    eprintln!(
        "kubectl describe as the DataLoss Event arrives: {} lines from Status: to Events:, the loss explained {} time(s)",
        early
            .lines()
            .skip_while(|l| !l.starts_with("Status:"))
            .take_while(|l| !l.starts_with("Events:"))
            .count(),
        early.matches("records (offsets 10 to 19) are lost").count()
    );
    // `kubectl describe`: one screen, the failure explained once, with its command (the
    // worker names the partition instead of explaining it once it sees it in status.failures).
    stack
        .until(
            "the worker entry without the explanation",
            NS,
            "dc1-to-dc2",
            |f| {
                let w = f.status.as_ref()?.workers.first()?;
                (w.failures.is_empty() && !w.stopped_partitions.is_empty()).then_some(())
            },
        )
        .await;
    let describe = stack
        .cluster
        .kubectl_ok(&["describe", "mirrorflow", "dc1-to-dc2", "-n", NS]);
    eprintln!(
        "---- kubectl describe ({} lines, {} from Status:)\n{describe}----",
        describe.lines().count(),
        describe
            .lines()
            .skip_while(|l| !l.starts_with("Status:"))
            .count()
    );
    let (health, said) = argo_health(stack, NS, "mirrorflow", "dc1-to-dc2");
    assert_eq!(health, "Degraded", "{said}");
    assert!(said.starts_with("PartitionsFailed"), "{said}");
    let command_start = format!("kubectl -n {NS} patch mirrorflow dc1-to-dc2 --type merge -p '");
    assert_eq!(
        describe.matches(&command_start).count(),
        1,
        "the patch command once:\n{describe}"
    );
    assert_eq!(
        describe
            .matches("records (offsets 10 to 19) are lost")
            .count(),
        1,
        "the loss explained once:\n{describe}"
    );
    for want in [
        "RecordsDeleted",
        "Warning  DataLoss",
        "Records Lost:",
        "Log Start Offset:",
    ] {
        assert!(describe.contains(want), "{want:?} missing:\n{describe}");
    }
    // The flow's status, below its spec, fits one screen: four conditions of 6 lines each
    // (Ready, Stalled, Replicating, DataLoss), the failure once, the workers (the heartbeat
    // latency adds 4 lines to the flow's status and 4 to worker 0's entry).
    let status_lines = describe
        .lines()
        .skip_while(|l| !l.starts_with("Status:"))
        .take_while(|l| !l.starts_with("Events:"))
        .count();
    assert!(
        status_lines <= 60,
        "the status takes {status_lines} lines:\n{describe}"
    );

    // Run the command it prints, as a user would.
    let from = describe.find(&command_start).unwrap() + command_start.len();
    let patch = &describe[from..from + describe[from..].find('\'').unwrap()];
    let id = serde_json::from_str::<serde_json::Value>(patch).unwrap()["spec"]["reset"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    stack.cluster.kubectl_ok(&[
        "-n",
        NS,
        "patch",
        "mirrorflow",
        "dc1-to-dc2",
        "--type",
        "merge",
        "-p",
        patch,
    ]);
    let applied = stack
        .until("the reset applied", NS, "dc1-to-dc2", |f| {
            let st = f.status.as_ref()?;
            let r = st.last_applied_reset.clone().filter(|r| r.id == id)?;
            let clear = condition(f, "DataLoss").is_some_and(|c| c.0 == "False");
            (clear && st.failed_partitions == 0).then_some(r)
        })
        .await;
    assert_eq!(applied.outcome, ResetOutcome::Applied, "{applied:?}");
    produce(&src, "events", &records(5, "after")).await.unwrap();
    eventually("records after the gap replicate", WAIT, || async {
        match watermarks(&tgt, "dc1.events", 0).await {
            Ok((_, high)) if high >= 15 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Applied once: a restarted worker does not apply it again.
    let pod = stack.kubelet().pods_of(NS, "dc1-to-dc2-worker")[0].clone();
    let restarts = pod.restarts;
    kill_pod_process(&pod).await;
    eventually("the worker restarted", WAIT, || async {
        let p = stack.kubelet().pods_of(NS, "dc1-to-dc2-worker");
        p.iter()
            .any(|p| p.restarts > restarts && p.ready)
            .then_some(())
            .ok_or_else(|| format!("{p:?}"))
    })
    .await;
    let flow = stack
        .until("Ready after the restart", NS, "dc1-to-dc2", |f| {
            ready_with(f, 1).then(|| f.clone())
        })
        .await;
    let st = flow.status.unwrap();
    assert_eq!(
        st.last_applied_reset.as_ref().map(|r| &r.time),
        Some(&applied.time)
    );
    let events: Api<Event> = Api::namespaced(stack.cluster.client.clone(), NS);
    let resets: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ResetApplied"))
        .collect();
    assert_eq!(resets.len(), 1, "one ResetApplied event: {resets:?}");
    assert_eq!(
        resets[0].series.as_ref().map(|s| s.count),
        None,
        "never repeated"
    );
    // The restarted worker knows the reset from its progress and does not apply it again
    // (it would report the application, with a new time).
    let entry = st
        .workers
        .iter()
        .find(|w| w.id == "dc1-to-dc2-worker-0")
        .unwrap();
    if let Some(r) = &entry.last_applied_reset {
        assert_eq!(
            r.time.0.as_second(),
            applied.time.0.as_second(),
            "applied again: {r:?}"
        );
    }
    stack.step("the reset was applied once");
}

/// Kills a worker process (the kubelet restarts it, as after a crash).
async fn kill_pod_process(pod: &kube_support::kubelet::PodInfo) {
    let pid = pod
        .pid
        .unwrap_or_else(|| panic!("{} runs no process", pod.name));
    // SAFETY: kill(2) of a child process of this test, by the pid its kubelet recorded.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

async fn resize(stack: &Stack, from: usize, to: usize) {
    stack.step(&format!("resize dc1-to-dc2 {from} -> {to}"));
    stack.patch_flow(
        NS,
        "dc1-to-dc2",
        json!({"spec": {"workers": {"replicas": to}}}),
    );
    stack
        .until(&format!("{to} workers Ready"), NS, "dc1-to-dc2", |f| {
            ready_with(f, to).then_some(())
        })
        .await;
    let pods = stack.kubelet().pods_of(NS, "dc1-to-dc2-worker");
    assert_eq!(pods.len(), to, "{pods:?}");
    let sts: Api<StatefulSet> = Api::namespaced(stack.cluster.client.clone(), NS);
    let s = sts.get("dc1-to-dc2-worker").await.unwrap();
    assert_eq!(
        s.annotations()
            .get("mirrorflow.io/worker-count")
            .map(String::as_str),
        Some(to.to_string().as_str())
    );
}

async fn foreign_objects_are_not_taken_over(stack: &Stack) {
    stack.step("a StatefulSet named like a flow's child, not the flow's");
    let sts: Api<StatefulSet> = Api::namespaced(stack.cluster.client.clone(), NS);
    let foreign: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "taken-worker", "namespace": NS, "labels": {"team": "payments"}},
        "spec": {"replicas": 0, "serviceName": "taken-worker",
                 "selector": {"matchLabels": {"app": "theirs"}},
                 "template": {"metadata": {"labels": {"app": "theirs"}},
                              "spec": {"containers": [{"name": "c", "image": "theirs:1"}]}}}
    }))
    .unwrap();
    let created = sts.create(&PostParams::default(), &foreign).await.unwrap();
    let taken: MirrorFlow = serde_json::from_value(json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
        "metadata": {"name": "taken", "namespace": NS},
        "spec": stack.spec_of(NS, "dc1-to-dc2").await,
    }))
    .unwrap();
    stack
        .flows(NS)
        .create(&PostParams::default(), &taken)
        .await
        .unwrap();
    let message = stack
        .until("taken: ChildConflict", NS, "taken", |f| {
            condition(f, "Ready")
                .filter(|c| c.1 == "ChildConflict")
                .map(|c| c.2)
        })
        .await;
    assert!(
        message.contains("StatefulSet taken-worker already exists"),
        "{message}"
    );
    let live = sts.get("taken-worker").await.unwrap();
    assert!(live.owner_references().is_empty(), "{live:?}");
    assert!(
        live.managed_fields()
            .iter()
            .all(|m| m.manager.as_deref() != Some("mirrorflow-controller")),
        "not a field of it is ours: {:?}",
        live.managed_fields()
    );
    assert_eq!(
        live.resource_version(),
        created.resource_version(),
        "never written to at all"
    );
    let cm = stack
        .cluster
        .kubectl(&["get", "configmap", "taken-worker-config", "-n", NS]);
    assert!(
        cm.is_err(),
        "no child of taken is created beside it: {cm:?}"
    );
    wait_event(stack, "taken", "ChildConflict").await;
}

async fn wait_event(stack: &Stack, regarding: &str, reason: &str) -> Event {
    kube_support::wait_event(&stack.cluster.client, NS, regarding, reason, WAIT).await
}

/// A cluster policy (ValidatingAdmissionPolicy) the worker StatefulSet does not meet.
const STRICT_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: statefulsets-need-a-team}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["statefulsets"]
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: "StatefulSets in this namespace need a team label"
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: statefulsets-need-a-team}
spec:
  policyName: statefulsets-need-a-team
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {policy: strict}
---
apiVersion: v1
kind: Namespace
metadata:
  name: mirrorflow-strict
  labels: {policy: strict}
"#;

async fn refused_children_are_reported(stack: &Stack) {
    stack.step("a child the API server refuses (a cluster's admission policy)");
    stack
        .cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(STRICT_POLICY))
        .unwrap_or_else(|e| panic!("{e}"));
    let refused: MirrorFlow = serde_json::from_value(json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
        "metadata": {"name": "refused", "namespace": "mirrorflow-strict"},
        "spec": stack.spec_of(NS, "dc1-to-dc2").await,
    }))
    .unwrap();
    let strict = stack.flows("mirrorflow-strict");
    // The policy takes a moment to be enforced; until then the StatefulSet goes through.
    strict
        .create(&PostParams::default(), &refused)
        .await
        .unwrap();
    let message = stack
        .until(
            "refused: ApplyFailed",
            "mirrorflow-strict",
            "refused",
            |f| {
                condition(f, "Ready")
                    .filter(|c| c.1 == "ApplyFailed")
                    .map(|c| c.2)
            },
        )
        .await;
    assert!(
        message.contains("applying StatefulSet refused-worker")
            && message.contains("StatefulSets in this namespace need a team label"),
        "the API server's words: {message}"
    );
    let events: Api<Event> = Api::namespaced(stack.cluster.client.clone(), "mirrorflow-strict");
    let ev = eventually("an ApplyFailed event", WAIT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ApplyFailed"))
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert!(ev.note.unwrap_or_default().contains("need a team label"));
    strict
        .delete("refused", &DeleteParams::default())
        .await
        .unwrap();
    stack
        .flows(NS)
        .delete("taken", &DeleteParams::default())
        .await
        .unwrap();
}

async fn resize_down_with_the_controller_killed(stack: &mut Stack) {
    stack.step("resize dc1-to-dc2 2 -> 1, controller killed while the old workers drain");
    stack.patch_flow(
        NS,
        "dc1-to-dc2",
        json!({"spec": {"workers": {"replicas": 1}}}),
    );
    let sts: Api<StatefulSet> = Api::namespaced(stack.cluster.client.clone(), NS);
    eventually("draining (replicas 0)", WAIT, || async {
        let s = sts
            .get("dc1-to-dc2-worker")
            .await
            .map_err(|e| e.to_string())?;
        (s.spec.as_ref().and_then(|s| s.replicas) == Some(0))
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    let mut old = stack.controller.take().unwrap();
    old.proc.kill().await;
    stack.step("controller killed mid-resize; a new one starts");
    stack.start_controller();
    stack
        .until("1 worker Ready after the restart", NS, "dc1-to-dc2", |f| {
            ready_with(f, 1).then_some(())
        })
        .await;
    assert_eq!(stack.kubelet().pods_of(NS, "dc1-to-dc2-worker").len(), 1);
}

/// `mirrorflow failover --wait` on orders-dr (2 workers): the report, `Ready=False`
/// `FailedOver` in `kubectl describe`, both workers paused; the same id again changes nothing.
async fn planned_failover_with_the_cli(stack: &Stack) {
    stack.step("planned failover of orders-dr with mirrorflow failover --wait");
    let src = stack.source.bootstrap_servers();
    produce(&src, "orders.created", &records(200, "before-failover"))
        .await
        .unwrap();
    let failover = |extra: &[&str]| {
        let mut args = vec![
            "failover".to_string(),
            format!("{EXAMPLES_NS}/orders-dr"),
            "--id".into(),
            "e2e-move".into(),
            "--drain-timeout-seconds".into(),
            "120".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = std::process::Command::new(kube_support::process::binary())
            .args(&args)
            .env("KUBECONFIG", &stack.cluster.kubeconfig)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        eprintln!("---- mirrorflow {}\n{stdout}{stderr}----", args.join(" "));
        assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
        stdout
    };
    let dry = failover(&["--dry-run"]);
    assert!(
        dry.contains("would patch") && dry.contains("orders-app"),
        "{dry}"
    );
    let stdout = failover(&["--wait"]);
    assert!(
        stdout.contains("Done, 0 record(s) not replicated") && stdout.contains("orders-app"),
        "{stdout}"
    );
    let reason = stack
        .until("orders-dr FailedOver", EXAMPLES_NS, "orders-dr", |f| {
            condition(f, "Ready")
                .filter(|c| c.0 == "False" && c.1 == "FailedOver")
                .map(|c| c.2)
        })
        .await;
    let flow = stack.flow(EXAMPLES_NS, "orders-dr").await;
    let report = flow
        .status
        .as_ref()
        .and_then(|s| s.failover.clone())
        .unwrap();
    let app = report.groups.iter().find(|g| g.group == "orders-app");
    assert!(app.is_some_and(|g| g.skipped.is_none()), "{report:?}");
    assert_eq!(report.not_replicated, Some(0), "{report:?}");
    // The report is shown once: in status.failover, not again under worker 0.
    stack
        .until(
            "both workers paused, the report folded",
            EXAMPLES_NS,
            "orders-dr",
            |f| {
                let w = &f.status.as_ref()?.workers;
                (w.len() == 2
                    && w.iter().all(|e| {
                        e.state == mirrorflow::api::WorkerState::Paused && e.failover.is_none()
                    }))
                .then_some(())
            },
        )
        .await;
    let describe =
        stack
            .cluster
            .kubectl_ok(&["describe", "mirrorflow", "orders-dr", "-n", EXAMPLES_NS]);
    let from_status = describe
        .lines()
        .skip_while(|l| !l.starts_with("Status:"))
        .count();
    eprintln!("---- kubectl describe after the failover ({from_status} lines from Status:)\n{describe}----");
    assert!(
        describe.contains("FailedOver")
            && describe.contains(&reason)
            && describe.contains("e2e-move"),
        "{describe}"
    );
    // Nothing more reaches the target, and the same id again is a no-op.
    let tgt = stack.target.bootstrap_servers();
    let ends = || async {
        let mut sum = 0;
        for p in 0..4 {
            sum += watermarks(&tgt, "eu-west.orders.created", p)
                .await
                .unwrap()
                .1;
        }
        sum
    };
    let before = ends().await;
    produce(&src, "orders.created", &records(50, "after-failover"))
        .await
        .unwrap();
    failover(&[]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        ends().await,
        before,
        "replication stopped after the failover"
    );
    let again = stack.flow(EXAMPLES_NS, "orders-dr").await;
    assert_eq!(
        again.status.and_then(|s| s.failover),
        Some(report),
        "applied once"
    );
    stack.step("failover done: FailedOver in kubectl describe, workers paused");
}

async fn deleted_flow_stops_its_workers(stack: &Stack) -> Timestamp {
    stack.step("delete orders-dr, then its children (no garbage collector runs here)");
    let uid = stack.flow(EXAMPLES_NS, "orders-dr").await.uid().unwrap();
    stack
        .flows(EXAMPLES_NS)
        .delete("orders-dr", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Timestamp::now();
    // What the garbage collector would delete: everything the flow controls.
    for kind in [
        "statefulsets",
        "services",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "poddisruptionbudgets",
        "configmaps",
    ] {
        let out = stack
            .cluster
            .kubectl_ok(&["get", kind, "-n", EXAMPLES_NS, "-o", "json"]);
        let list: serde_json::Value = serde_json::from_str(&out).unwrap();
        for item in list["items"].as_array().unwrap() {
            let owned = item["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| o.iter().any(|r| r["uid"] == uid));
            if owned {
                let name = item["metadata"]["name"].as_str().unwrap();
                stack.cluster.kubectl_ok(&[
                    "delete",
                    kind,
                    name,
                    "-n",
                    EXAMPLES_NS,
                    "--wait=false",
                ]);
            }
        }
    }
    eventually("orders-dr's workers stopped", WAIT, || async {
        let p = stack.kubelet().pods_of(EXAMPLES_NS, "orders-dr-worker");
        p.is_empty().then_some(()).ok_or_else(|| format!("{p:?}"))
    })
    .await;
    let pods = stack
        .cluster
        .kubectl_ok(&["get", "pods", "-n", EXAMPLES_NS, "-o", "name"]);
    assert_eq!(pods.trim(), "", "their Pod objects are gone too");
    deleted
}

/// Every request of the controller and of the workers was allowed by RBAC, and every rule of
/// the ClusterRole was needed.
fn check_rbac(events: &[AuditEvent], role: &ClusterRole, deleted: Timestamp) {
    // After orders-dr and its Role were deleted, its workers (still stopping) may be refused.
    let stopping = |e: &AuditEvent| {
        e.user
            .username
            .starts_with("system:serviceaccount:kafka-mirroring:orders-dr-worker")
            && e.stage_timestamp > deleted
    };
    let forbidden: Vec<String> = events
        .iter()
        .filter(|e| e.forbidden_by_rbac() && !stopping(e))
        .map(|e| format!("{} {}", e.user.username, e.describe()))
        .collect();
    assert!(forbidden.is_empty(), "refused by RBAC: {forbidden:#?}");
    let used: BTreeSet<(String, String)> = events
        .iter()
        .filter(|e| e.user.username == CONTROLLER_USER && !e.is_lease())
        .map(|e| {
            let verb = if e.verb == "patch" && e.code() == 201 {
                "create"
            } else {
                &e.verb
            };
            (verb.to_string(), e.resource())
        })
        .collect();
    // Granted for what this suite cannot show: `get` of mirrorflows and mirrorflows/status
    // (granted on to the workers: a Role can only grant what its creator holds), finalizers
    // (only the OwnerReferencesPermissionEnforcement admission plugin checks them), `create`
    // through an apply (authorized as create, audited as a patch), `patch` of a child that
    // was only ever created here (the same apply updates it when it changes), events `patch`
    // (an event repeating within the recorder's window).
    let exempt = [
        ("get", "mirrorflows"),
        ("get", "mirrorflows/status"),
        ("update", "mirrorflows/finalizers"),
        ("patch", "events"),
    ];
    let mut unused = Vec::new();
    for rule in role.rules.iter().flatten() {
        for resource in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                let want = (verb.clone(), resource.clone());
                let created = used.contains(&("create".to_string(), resource.clone()));
                let is_exempt = exempt.contains(&(verb.as_str(), resource.as_str()))
                    || (verb == "create" && resource != "events")
                    || (verb == "patch" && created);
                if !is_exempt && !used.contains(&want) {
                    unused.push(format!("{verb} {resource}"));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "ClusterRole rules the controller never used (drop them, or say why they stay): {unused:?}; used: {used:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_full_stack() {
    let Some(cluster) = Cluster::start_or_skip("chart_full_stack").await else {
        return;
    };
    if !cluster.is_local() {
        eprintln!(
            "SKIPPED chart_full_stack: the process kubelet needs an API server without kubelets (KUBECONFIG names another cluster)"
        );
        return;
    }
    let (source, target) = tokio::join!(
        broker_or_skip(BrokerKind::Kafka),
        broker_or_skip(BrokerKind::Kafka)
    );
    let (Some(source), Some(target)) = (source, target) else {
        return;
    };
    let cluster = Arc::new(cluster);
    let scratch = Scratch::new("mf-e2e-logs-");
    let started = Instant::now();
    let (deployment, cluster_role) = kube_support::chart::install(&cluster).await;
    // The controller's identity: the chart's ServiceAccount, through a token a user would get.
    let token = cluster.sa_token_kubectl(SYSTEM_NS, RELEASE);
    let controller_kubeconfig = cluster.kubeconfig_for("controller", &token, SYSTEM_NS);
    let kubelet = Kubelet::start(
        cluster.clone(),
        vec![EXAMPLES_NS.into(), NS.into()],
        scratch.path.join("pods"),
    );
    let mut stack = Stack {
        cluster: cluster.clone(),
        source,
        target,
        kubelet: Some(kubelet),
        controller: None,
        deployment,
        controller_kubeconfig,
        controllers_started: 0,
        scratch,
        started,
    };
    stack.step("chart installed");
    prepare_source(&stack).await;
    stack.start_controller();

    examples_become_ready(&stack).await;
    checkpoint_syncs_a_group(&stack).await;
    printer_columns(&stack).await;

    // Steady state of orders-dr (alone in its namespace) for a minute, with traffic, while
    // the next scenarios run on other flows.
    let audit = cluster.audit().expect("our API server has an audit log");
    let from = Timestamp::now();
    let src = stack.source.bootstrap_servers();
    let traffic = tokio::spawn(async move {
        for round in 0..5 {
            let _ = produce(
                &src,
                "orders.created",
                &records(100, &format!("steady-{round}")),
            )
            .await;
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });

    data_loss_describe_and_reset(&stack).await;
    resize(&stack, 1, 2).await;
    foreign_objects_are_not_taken_over(&stack).await;
    refused_children_are_reported(&stack).await;

    let left =
        WINDOW.saturating_sub(Duration::try_from(Timestamp::now().duration_since(from)).unwrap());
    tokio::time::sleep(left).await;
    let to = Timestamp::now();
    traffic.await.unwrap();
    let (rate, by) = requests_per_minute(&audit.events(), EXAMPLES_NS, from, to);
    eprintln!(
        "controller API requests for orders-dr (2 workers, with traffic), steady state: {rate:.1} per minute over {:.0} s; {by:?}",
        to.duration_since(from).as_secs_f64()
    );
    assert!(
        rate <= 10.0,
        "{rate:.1} requests per flow per minute: {by:?}"
    );
    let flow = stack.flow(EXAMPLES_NS, "orders-dr").await;
    assert!(ready_with(&flow, 2), "still Ready: {:?}", flow.status);

    resize_down_with_the_controller_killed(&mut stack).await;
    planned_failover_with_the_cli(&stack).await;
    let deleted = deleted_flow_stops_its_workers(&stack).await;

    if let Some(k) = stack.kubelet.take() {
        k.shutdown().await;
    }
    let events = audit.events();
    let after_delete: Vec<String> = events
        .iter()
        .filter(|e| {
            e.user.username == CONTROLLER_USER
                && e.is_write()
                && e.namespace() == Some(EXAMPLES_NS)
                && e.stage_timestamp > deleted
        })
        .map(AuditEvent::describe)
        .collect();
    assert!(
        after_delete.is_empty(),
        "nothing recreated for a deleted flow: {after_delete:?}"
    );
    check_rbac(&events, &cluster_role, deleted);
    stack.step("done");
}
