//! `mirrorflow status NAMESPACE/NAME`: a flow as a terminal page, read through the API.
//!
//! What the status holds, nothing more: the summary (clusters, policy, workers, total lag),
//! the conditions, each worker's entry (state, partitions, lag, heartbeat age, generation)
//! and each failed partition with the `kubectl patch ... spec.reset` command that clears it
//! (the one its message names: `worker::validation::classify::failure_reset_command`), and the
//! last reset handled. [`render`] is a pure function of the MirrorFlow and the time.

use jiff::Timestamp;
use kube::ResourceExt;

use super::{kube_client, read_flow, table};
use crate::api::{MirrorFlow, ReplicationPolicyType, WorkerState};
use crate::worker::process::k8s::parse_flow_ref;
use crate::worker::validation::classify::{failure_reset_command, FlowRef};

/// Arguments of `mirrorflow status`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct StatusArgs {
    /// The MirrorFlow, as NAMESPACE/NAME (read with the default kubeconfig).
    #[arg(value_name = "NAMESPACE/NAME")]
    pub flow_ref: String,
}

/// `12s`, `5m3s`, `2h4m`, `3d1h`: how long ago, coarse. Pure.
pub fn age(since: Timestamp, now: Timestamp) -> String {
    let s = now.duration_since(since).as_secs().max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn state_name(s: WorkerState) -> &'static str {
    match s {
        WorkerState::Starting => "Starting",
        WorkerState::Running => "Running",
        WorkerState::Paused => "Paused",
        WorkerState::Degraded => "Degraded",
        WorkerState::Failed => "Failed",
        WorkerState::Stopped => "Stopped",
    }
}

/// The flow as a terminal page at `now`. Pure.
pub fn render(flow: &MirrorFlow, now: Timestamp) -> String {
    let status = flow.status.clone().unwrap_or_default();
    let mut out = summary(flow, &status);
    out.push_str(&conditions(&status.conditions, now));
    out.push_str(&workers(&status.workers, now));
    if !status.failures.is_empty() {
        let ns = flow.namespace().unwrap_or_default();
        let name = flow.name_any();
        let flow_ref = FlowRef {
            namespace: &ns,
            name: &name,
        };
        out.push_str(&failures(flow_ref, &status, now));
    }
    if let Some(a) = &status.audit {
        out.push_str(&audit(a, now));
    }
    if let Some(f) = &status.failover {
        out.push_str("\nFAILOVER ");
        out.push_str(&super::failover::render(f));
    }
    if let Some(r) = &status.last_applied_reset {
        out.push_str(&format!(
            "\nLAST RESET {:?}: {:?} {} ago, {} partition(s){}\n",
            r.id,
            r.outcome,
            age(r.time.0, now),
            r.partitions.len(),
            r.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    out
}

/// The continuous audit (`status.audit`): counts, last run, each mismatch.
fn audit(a: &crate::api::AuditReport, now: Timestamp) -> String {
    let r = &a.records;
    let mut out = format!(
        "\nAUDIT {} record(s) compared, last run {}: missing {}, extra {}, different {}, duplicated {}, skipped {}\n",
        r.compared,
        a.last_run_time
            .as_ref()
            .map_or_else(|| "-".to_string(), |t| format!("{} ago", age(t.0, now))),
        r.missing,
        r.extra,
        r.different,
        r.duplicated,
        r.skipped,
    );
    for m in &a.mismatches {
        out.push_str(&format!("  {m}\n"));
    }
    if let Some(e) = &a.last_error {
        out.push_str(&format!("  last run failed: {e}\n"));
    }
    out
}

/// `-` for what is not known.
fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The first two lines: clusters, policy, generations, workers, failed partitions, lag.
fn summary(flow: &MirrorFlow, status: &crate::api::MirrorFlowStatus) -> String {
    let ns = flow.namespace().unwrap_or_default();
    let name = flow.name_any();
    let spec = &flow.spec;
    let policy = match spec.replication_policy.type_ {
        ReplicationPolicyType::Prefix => {
            format!("Prefix {:?}", spec.replication_policy.separator)
        }
        ReplicationPolicyType::Identity => "Identity".to_string(),
    };
    let mut out = format!(
        "MirrorFlow {ns}/{name}: {} ({}) -> {} ({}), {policy}{}\n",
        spec.source.alias,
        spec.source.bootstrap_servers,
        spec.target.alias,
        spec.target.bootstrap_servers,
        if spec.paused { ", paused" } else { "" },
    );
    out.push_str(&format!(
        "generation {} (status observed {}), workers {} (replicating/desired), failed partitions {}, lag {}\n",
        opt(flow.metadata.generation),
        opt(status.observed_generation),
        status.workers_summary.as_deref().unwrap_or("-"),
        status.failed_partitions,
        status
            .replication_lag
            .as_ref()
            .map_or_else(|| "-".to_string(), |l| format!("{} record(s), {}s", l.records, l.seconds)),
    ));
    out
}

fn conditions(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    now: Timestamp,
) -> String {
    let mut out = "\nCONDITIONS\n".to_string();
    if conditions.is_empty() {
        out.push_str("(none yet: the controller has not reconciled this flow)\n");
        return out;
    }
    let mut rows = vec![["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]
        .map(String::from)
        .to_vec()];
    for c in conditions {
        rows.push(vec![
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            age(c.last_transition_time.0, now),
            c.message.clone(),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// Each worker's entry, by id.
fn workers(entries: &[crate::api::WorkerStatus], now: Timestamp) -> String {
    let mut out = "\nWORKERS\n".to_string();
    if entries.is_empty() {
        out.push_str("(no worker has reported)\n");
        return out;
    }
    let mut rows = vec![[
        "ID",
        "STATE",
        "PARTITIONS",
        "LAG-RECORDS",
        "LAG-SECONDS",
        "HEARTBEAT",
        "GENERATION",
        "MESSAGE",
    ]
    .map(String::from)
    .to_vec()];
    let mut workers: Vec<&crate::api::WorkerStatus> = entries.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    for w in workers {
        rows.push(vec![
            w.id.clone(),
            state_name(w.state).to_string(),
            w.partitions.to_string(),
            opt(w.replication_lag.as_ref().map(|l| l.records)),
            opt(w.replication_lag.as_ref().map(|l| l.seconds)),
            w.last_heartbeat_time
                .as_ref()
                .map_or_else(|| "-".to_string(), |t| format!("{} ago", age(t.0, now))),
            opt(w.observed_generation),
            w.message.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// Each failed partition with the command that clears it, and how many the status does not
/// list.
fn failures(
    flow_ref: FlowRef<'_>,
    status: &crate::api::MirrorFlowStatus,
    now: Timestamp,
) -> String {
    let mut out = "\nFAILURES\n".to_string();
    for f in &status.failures {
        let head = vec![
            "TYPE",
            "TOPIC",
            "PARTITION",
            "REQUESTED",
            "LOG-START",
            "LOST",
            "DETECTED",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let row = vec![
            format!("{:?}", f.type_),
            f.topic.clone(),
            f.partition.to_string(),
            f.requested_offset.to_string(),
            opt(f.log_start_offset),
            opt(f.records_lost),
            format!("{} ago", age(f.detected_at.0, now)),
        ];
        out.push_str(&table(&[head, row]));
        out.push_str(&format!(
            "  clear: {}\n",
            failure_reset_command(flow_ref, f)
        ));
    }
    if status.failed_partitions as usize > status.failures.len() {
        out.push_str(&format!(
            "({} more failed partition(s) not listed; the status keeps the first {})\n",
            status.failed_partitions as usize - status.failures.len(),
            status.failures.len()
        ));
    }
    out
}

/// The page of flow `ns/name` read through `client` at `now`.
pub async fn status_page(
    client: &kube::Client,
    ns: &str,
    name: &str,
    now: Timestamp,
) -> anyhow::Result<String> {
    let flow = read_flow(client, ns, name).await?;
    Ok(render(&flow, now))
}

/// `mirrorflow status`: reads the flow and prints [`render`].
pub async fn run_status(args: StatusArgs) -> anyhow::Result<()> {
    let (ns, name) = parse_flow_ref(&args.flow_ref)?;
    let client = kube_client().await?;
    print!(
        "{}",
        status_page(&client, &ns, &name, Timestamp::now()).await?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn t(s: i64) -> String {
        Timestamp::from_second(1_800_000_000 + s)
            .unwrap()
            .to_string()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000 + 100).unwrap()
    }

    fn flow(status: serde_json::Value) -> MirrorFlow {
        serde_json::from_value(json!({
            "apiVersion": "mirrorflow.io/v1alpha1",
            "kind": "MirrorFlow",
            "metadata": {"name": "orders", "namespace": "kafka", "generation": 4},
            "spec": {
                "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
                "target": {"alias": "dc2", "bootstrapServers": "b:9092"}
            },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_audit_shows_counts_and_each_mismatch() {
        let f = flow(json!({
            "audit": {
                "records": {"compared": 2000, "extra": 1},
                "lastRunTime": t(40),
                "mismatches": ["extra in orders/0: target offset 33"]
            }
        }));
        let page = render(&f, now());
        assert!(
            page.contains(
                "\nAUDIT 2000 record(s) compared, last run 1m0s ago: missing 0, extra 1, different 0, duplicated 0, skipped 0\n  extra in orders/0: target offset 33\n"
            ),
            "{page}"
        );
        assert!(!render(&flow(json!({})), now()).contains("AUDIT"));
    }

    #[test]
    fn the_failover_report_is_on_the_page() {
        let f = flow(json!({
            "failover": {
                "id": "m1", "mode": "Unplanned", "phase": "Done",
                "partitions": [{"topic": "orders", "partition": 0, "targetHolds": 60}],
                "groups": [{"group": "g-a", "committed": ["dc1.orders/0@10"]}]
            }
        }));
        let page = render(&f, now());
        assert!(
            page.contains(
                "\nFAILOVER failover \"m1\" (Unplanned): Done\n\nPARTITIONS\nTOPIC   PARTITION  SOURCE-END  TARGET-HOLDS  NOT-REPLICATED\norders  0          -           60            -\n\nGROUPS\nGROUP  COMMITTED        READ-AGAIN  NOT-TOUCHED\ng-a    dc1.orders/0@10  -\n"
            ),
            "{page}"
        );
        assert!(!render(&flow(json!({})), now()).contains("FAILOVER"));
    }

    #[test]
    fn age_table() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m0s"),
            (3599, "59m59s"),
            (3600, "1h0m"),
            (86_399, "23h59m"),
            (90_000, "1d1h"),
            (-5, "0s"),
        ];
        for (secs, want) in cases {
            let since = Timestamp::from_second(1_000_000 - secs).unwrap();
            let now = Timestamp::from_second(1_000_000).unwrap();
            assert_eq!(age(since, now), want, "{secs}");
        }
    }

    #[test]
    fn a_degraded_flow_snapshot() {
        let f = flow(json!({
            "observedGeneration": 4,
            "workersSummary": "2/2",
            "failedPartitions": 1,
            "replicationLag": {"records": 130, "seconds": 7},
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PartitionsFailed",
                 "message": "1 partition(s) stopped", "lastTransitionTime": t(40)},
                {"type": "DataLoss", "status": "True", "reason": "RecordsDeleted",
                 "message": "orders-3", "lastTransitionTime": t(40)}
            ],
            "workers": [
                {"id": "orders-worker-1", "partitions": 6, "state": "Running",
                 "lastHeartbeatTime": t(95), "observedGeneration": 4,
                 "replicationLag": {"records": 30, "seconds": 1}},
                {"id": "orders-worker-0", "partitions": 6, "state": "Degraded",
                 "lastHeartbeatTime": t(92), "observedGeneration": 4,
                 "message": "1 partition failed",
                 "replicationLag": {"records": 100, "seconds": 7}}
            ],
            "failures": [
                {"type": "DataLoss", "topic": "orders", "partition": 3, "requestedOffset": 120,
                 "logStartOffset": 500, "recordsLost": 380, "detectedAt": t(40)}
            ],
            "lastAppliedReset": {"id": "r1", "time": t(-3600), "outcome": "Applied",
                                 "partitions": [{"topic": "orders", "partition": 1}]}
        }));
        let want = r#"MirrorFlow kafka/orders: dc1 (a:9092) -> dc2 (b:9092), Prefix "."
generation 4 (status observed 4), workers 2/2 (replicating/desired), failed partitions 1, lag 130 record(s), 7s

CONDITIONS
TYPE      STATUS  REASON            AGE   MESSAGE
Ready     False   PartitionsFailed  1m0s  1 partition(s) stopped
DataLoss  True    RecordsDeleted    1m0s  orders-3

WORKERS
ID               STATE     PARTITIONS  LAG-RECORDS  LAG-SECONDS  HEARTBEAT  GENERATION  MESSAGE
orders-worker-0  Degraded  6           100          7            8s ago     4           1 partition failed
orders-worker-1  Running   6           30           1            5s ago     4

FAILURES
TYPE      TOPIC   PARTITION  REQUESTED  LOG-START  LOST  DETECTED
DataLoss  orders  3          120        500        380   1m0s ago
  clear: kubectl -n kafka patch mirrorflow orders --type merge -p '{"spec":{"reset":{"id":"dataloss-orders-3-1800000040","strategy":"ResumeFromLogStart","partitions":[{"topic":"orders","partition":3}]}}}'

LAST RESET "r1": Applied 1h1m ago, 1 partition(s)
"#;
        assert_eq!(render(&f, now()), want);
    }

    #[test]
    fn each_failure_type_gets_its_own_strategy() {
        let f = flow(json!({
            "failedPartitions": 3,
            "failures": [
                {"type": "TopicReset", "topic": "pay", "partition": 0, "requestedOffset": 9,
                 "detectedAt": t(0)},
                {"type": "ProgressMissing", "topic": "pay", "partition": 1, "requestedOffset": 0,
                 "detectedAt": t(0)}
            ]
        }));
        let text = render(&f, now());
        let cmds: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("  clear: "))
            .collect();
        assert_eq!(cmds.len(), 2, "{text}");
        assert!(
            cmds[0].contains(r#""strategy":"RestartFromEarliest""#),
            "{text}"
        );
        assert!(
            cmds[1].contains(r#""strategy":"ResumeFromTarget""#),
            "{text}"
        );
        assert!(
            text.contains("(1 more failed partition(s) not listed; the status keeps the first 2)"),
            "{text}"
        );
    }

    #[test]
    fn a_new_flow_says_what_is_missing() {
        let mut f = flow(serde_json::Value::Null);
        f.spec.paused = true;
        f.spec.replication_policy.type_ = ReplicationPolicyType::Identity;
        let text = render(&f, now());
        assert_eq!(
            text.lines().next().unwrap(),
            "MirrorFlow kafka/orders: dc1 (a:9092) -> dc2 (b:9092), Identity, paused"
        );
        assert!(text.contains("generation 4 (status observed -), workers - (replicating/desired), failed partitions 0, lag -"), "{text}");
        assert!(text.contains("(none yet: the controller has not reconciled this flow)"));
        assert!(text.contains("(no worker has reported)"));
        assert!(!text.contains("FAILURES") && !text.contains("LAST RESET"));
    }
}
