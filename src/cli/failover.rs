//! `mirrorflow failover NS/NAME --id ID`: patches `spec.failover` (the worker does the rest),
//! optionally waits for the report and prints it. `--dry-run` changes nothing: it reads both
//! clusters with the flow's Secrets and prints what the failover would do now.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kube::api::{Api, ListParams, Patch, PatchParams};
use tokio::sync::watch;

use super::flow_source::{load_from_api, Side};
use super::{kube_client, read_flow, table};
use crate::api::{
    FailoverMode, FailoverPhase, FailoverReport, FailoverRequest, MirrorFlow, OffsetCheckpoint,
};
use crate::worker::failover::runner::FailoverRunner;
use crate::worker::process::k8s::parse_flow_ref;

/// Arguments of `mirrorflow failover`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FailoverArgs {
    /// The MirrorFlow, as NAMESPACE/NAME (read and patched with the default kubeconfig).
    #[arg(value_name = "NAMESPACE/NAME")]
    pub flow_ref: String,
    /// The request's id: a new id is a new failover; one already applied is a no-op.
    #[arg(long)]
    pub id: String,
    /// Planned (drain the source first) or Unplanned (the source is gone).
    #[arg(long, value_enum, default_value_t = Mode::Planned)]
    pub mode: Mode,
    /// Planned: how long the drain may take before nothing moves.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub drain_timeout_seconds: u32,
    /// Print what the failover would do now; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Wait for the report and print it; fails unless the failover is Done.
    #[arg(long)]
    pub wait: bool,
}

/// `--mode`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    #[value(name = "Planned")]
    Planned,
    #[value(name = "Unplanned")]
    Unplanned,
}

impl FailoverArgs {
    /// The `spec.failover` these arguments ask for.
    pub fn request(&self) -> FailoverRequest {
        FailoverRequest {
            id: self.id.clone(),
            mode: match self.mode {
                Mode::Planned => FailoverMode::Planned,
                Mode::Unplanned => FailoverMode::Unplanned,
            },
            drain_timeout_seconds: self.drain_timeout_seconds,
        }
    }
}

/// The merge patch that sets `spec.failover`. Pure.
pub fn patch(req: &FailoverRequest) -> serde_json::Value {
    serde_json::json!({ "spec": { "failover": req } })
}

/// The report as a page: one line, then partitions and groups (only rows that say
/// something: a partition behind, every group). Pure.
pub fn render(r: &FailoverReport) -> String {
    let mut out = format!("failover {:?} ({:?}): {:?}", r.id, r.mode, r.phase);
    if let Some(n) = r.not_replicated {
        out.push_str(&format!(", {n} record(s) not replicated"));
    }
    out.push('\n');
    if let (Some(t), Some(s)) = (&r.recovery_point, r.recovery_point_seconds) {
        out.push_str(&format!(
            "recovery point {}: at most {s}s of writes missing\n",
            t.0
        ));
    }
    if let Some(m) = &r.message {
        out.push_str(&format!("{m}\n"));
    }
    // The time column only once a failover read the times (Done).
    let timed = r
        .partitions
        .iter()
        .any(|p| p.last_replicated_time.is_some());
    let mut parts = vec![vec![
        "TOPIC".to_string(),
        "PARTITION".into(),
        "SOURCE-END".into(),
        "TARGET-HOLDS".into(),
        "NOT-REPLICATED".into(),
    ]];
    if timed {
        parts[0].push("LAST-REPLICATED".into());
    }
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    for p in &r.partitions {
        let mut row = vec![
            p.topic.clone(),
            p.partition.to_string(),
            opt(p.source_end),
            p.target_holds.to_string(),
            opt(p.not_replicated),
        ];
        if timed {
            row.push(
                p.last_replicated_time
                    .as_ref()
                    .map_or("-".to_string(), |t| t.0.to_string()),
            );
        }
        parts.push(row);
    }
    if parts.len() > 1 {
        out.push_str("\nPARTITIONS\n");
        out.push_str(&table(&parts));
    }
    if let Some(n) = r.partitions_not_shown {
        out.push_str(&format!(
            "and {n} more partition(s), not shown (those behind are listed first)\n"
        ));
    }
    let mut groups = vec![vec![
        "GROUP".to_string(),
        "COMMITTED".into(),
        "READ-AGAIN".into(),
        "NOT-TOUCHED".into(),
    ]];
    for g in &r.groups {
        groups.push(vec![
            g.group.clone(),
            if g.committed.is_empty() {
                "-".into()
            } else {
                g.committed.join(",")
            },
            opt(g.records_read_again),
            g.skipped.clone().unwrap_or_default(),
        ]);
    }
    if groups.len() > 1 {
        out.push_str("\nGROUPS\n");
        out.push_str(&table(&groups));
    }
    out
}

/// `mirrorflow failover`.
pub async fn run_failover(args: FailoverArgs) -> anyhow::Result<()> {
    let (ns, name) = parse_flow_ref(&args.flow_ref)?;
    let client = kube_client().await?;
    let req = args.request();
    if args.dry_run {
        let report = preview(&client, &ns, &name, &req).await?;
        println!("would patch MirrorFlow {ns}/{name}: {}", patch(&req));
        print!("{}", render(&report));
        return Ok(());
    }
    let api = Api::<MirrorFlow>::namespaced(client.clone(), &ns);
    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch(&req)))
        .await
        .with_context(|| format!("patching spec.failover of MirrorFlow {ns}/{name}"))?;
    println!(
        "MirrorFlow {ns}/{name}: spec.failover {:?} requested",
        req.id
    );
    if !args.wait {
        return Ok(());
    }
    let bound = Duration::from_secs(u64::from(req.drain_timeout_seconds) + 300);
    let deadline = Instant::now() + bound;
    loop {
        let flow = read_flow(&client, &ns, &name).await?;
        let report = flow
            .status
            .and_then(|s| s.failover)
            .filter(|f| f.id == req.id);
        if let Some(r) = report.filter(|r| r.phase.is_final()) {
            print!("{}", render(&r));
            if r.phase != FailoverPhase::Done {
                bail!("failover {:?} ended {:?}", r.id, r.phase);
            }
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("no final report for failover {:?} within {bound:?}; see `kubectl describe mirrorflow {name} -n {ns}`", req.id);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The flow's failover as it would go now, from both clusters (nothing written).
async fn preview(
    client: &kube::Client,
    ns: &str,
    name: &str,
    req: &FailoverRequest,
) -> anyhow::Result<FailoverReport> {
    let sides: &[Side] = match req.mode {
        FailoverMode::Planned => &[Side::Source, Side::Target],
        FailoverMode::Unplanned => &[Side::Target],
    };
    let loaded = load_from_api(client, ns, name, sides).await?;
    let checkpoints = Api::<OffsetCheckpoint>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the OffsetCheckpoints of {ns}"))?
        .items;
    let runner = FailoverRunner {
        namespace: ns.to_string(),
        flow: name.to_string(),
        secrets_dir: loaded.secrets_dir().to_path_buf(),
        index: 0,
        spec: watch::channel(loaded.flow.spec.clone()).1,
        checkpoints: watch::channel(checkpoints).1,
        state: watch::channel(None).0,
        stopped: watch::channel(false).0,
    };
    Ok(runner.preview(req).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FailoverGroup, FailoverPartition};
    use pretty_assertions::assert_eq;

    #[test]
    fn patch_sets_only_spec_failover() {
        let req = FailoverRequest {
            id: "m1".into(),
            mode: FailoverMode::Unplanned,
            drain_timeout_seconds: 60,
        };
        assert_eq!(
            patch(&req),
            serde_json::json!({"spec": {"failover": {"id": "m1", "mode": "Unplanned", "drainTimeoutSeconds": 60}}})
        );
    }

    #[test]
    fn render_shows_the_figures_and_who_was_not_touched() {
        let r = FailoverReport {
            not_replicated: Some(0),
            partitions: vec![FailoverPartition {
                topic: "orders".into(),
                partition: 0,
                source_end: Some(560),
                target_holds: 560,
                last_replicated_time: None,
                not_replicated: Some(0),
                target_topic: None,
                target_end: None,
            }],
            groups: vec![
                FailoverGroup {
                    group: "g-a".into(),
                    committed: vec!["dc1.orders/0@0".into(), "dc1.orders/1@25".into()],
                    records_read_again: Some(0),
                    skipped: None,
                },
                FailoverGroup {
                    group: "g-live".into(),
                    committed: vec![],
                    records_read_again: None,
                    skipped: Some("1 active member(s) on the target".into()),
                },
            ],
            ..FailoverReport::new("m1", FailoverMode::Planned, FailoverPhase::Done)
        };
        assert_eq!(
            render(&r),
            "failover \"m1\" (Planned): Done, 0 record(s) not replicated

PARTITIONS
TOPIC   PARTITION  SOURCE-END  TARGET-HOLDS  NOT-REPLICATED
orders  0          560         560           0

GROUPS
GROUP   COMMITTED                       READ-AGAIN  NOT-TOUCHED
g-a     dc1.orders/0@0,dc1.orders/1@25  0
g-live  -                               -           1 active member(s) on the target
"
        );
        let bounded = FailoverReport {
            partitions_not_shown: Some(12),
            groups: Vec::new(),
            ..r
        };
        assert!(
            render(&bounded).contains(
                "orders  0          560         560           0\nand 12 more partition(s), not shown"
            ),
            "{}",
            render(&bounded)
        );
    }

    #[test]
    fn render_shows_the_recovery_point_and_each_partitions_last_time() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |s: i64| Some(Time(jiff::Timestamp::from_second(s).unwrap()));
        let part = |partition: i32, time| FailoverPartition {
            topic: "orders".into(),
            partition,
            source_end: None,
            target_holds: 60,
            last_replicated_time: time,
            not_replicated: None,
            target_topic: None,
            target_end: None,
        };
        let r = FailoverReport {
            recovery_point: at(1_700_000_000),
            recovery_point_seconds: Some(95),
            partitions: vec![part(0, at(1_700_000_000)), part(1, None)],
            ..FailoverReport::new("x", FailoverMode::Unplanned, FailoverPhase::Done)
        };
        assert_eq!(
            render(&r),
            "failover \"x\" (Unplanned): Done
recovery point 2023-11-14T22:13:20Z: at most 95s of writes missing

PARTITIONS
TOPIC   PARTITION  SOURCE-END  TARGET-HOLDS  NOT-REPLICATED  LAST-REPLICATED
orders  0          -           60            -               2023-11-14T22:13:20Z
orders  1          -           60            -               -
"
        );
    }
}
