//! `mirrorflow failback NS/NAME --id ID`: the reverse of a failed-over flow, starting where that
//! failover left the new primary (`spec.source.startFrom.afterFailover`), server-side applied
//! with its own field manager. `--dry-run` prints it and where it starts; `--wait` prints what
//! its worker 0 measured (diverged records, copies). The checks and the reverse flow are pure.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kube::api::{Api, Patch, PatchParams};

use super::{kube_client, read_flow, table};
use crate::api::{
    AfterFailoverStart, FailbackReport, FailoverPhase, FailoverReport, MirrorFlow, MirrorFlowSpec,
    ReplicationPolicyType, SourceStart,
};
use crate::worker::process::k8s::parse_flow_ref;
use crate::worker::replicate::failback::{points, FailbackWait, Point};
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// The field manager the reverse flow is applied with.
pub const FIELD_MANAGER: &str = "mirrorflow-failback";

/// Arguments of `mirrorflow failback`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FailbackArgs {
    /// The failed-over MirrorFlow, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME")]
    pub flow_ref: String,
    /// The failover's id (`spec.failover.id`); it must be Done.
    #[arg(long)]
    pub id: String,
    /// The reverse flow's name (same namespace); default `<NAME>-failback`.
    #[arg(long)]
    pub name: Option<String>,
    /// Copy the records the old primary took after the failover's point, which never reached
    /// the new primary, to `<topic>.diverged` before copying back.
    #[arg(long)]
    pub copy_diverged: bool,
    /// Print the reverse flow and where it starts; apply nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Wait for the reverse flow's failback report (what diverged, what was copied) and print it.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout_seconds: u64,
}

/// Why a failback is refused. Each names the field and value that decided it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FailbackRefusal {
    #[error("MirrorFlow {flow} has no status.failover: run `mirrorflow failover {flow} --id {id}` first")]
    NoFailover { flow: String, id: String },
    #[error("MirrorFlow {flow}: status.failover.id is {found:?}, not {id:?} (the last failover reported is another one)")]
    OtherFailover {
        flow: String,
        id: String,
        found: String,
    },
    #[error("MirrorFlow {flow}: status.failover.phase of failover {id:?} is {phase:?}, not Done{why}; fail back once it is Done")]
    NotDone {
        flow: String,
        id: String,
        phase: FailoverPhase,
        why: String,
    },
    #[error("MirrorFlow {flow}: spec.failover.id is {found}, not {id:?}: the flow replicates again, and failing back now would copy the same topics both ways")]
    NotStopped {
        flow: String,
        id: String,
        found: String,
    },
    #[error("MirrorFlow {flow}: spec.replicationPolicy.type is {policy:?}: only Identity writes back to the original topics (the reverse flow would write to renamed copies); fail back with a flow of your own")]
    NotIdentity {
        flow: String,
        policy: ReplicationPolicyType,
    },
    #[error("spec.topics of MirrorFlow {flow}: {why}")]
    Topics { flow: String, why: String },
    #[error(transparent)]
    Positions(FailbackWait),
    #[error("MirrorFlow {reverse} exists with spec.source.startFrom {found}, not afterFailover {{flow: {}, id: {}, copyDiverged: {}}}: delete it or choose another --name", want.flow, want.id, want.copy_diverged)]
    Conflict {
        reverse: String,
        found: String,
        want: AfterFailoverStart,
    },
}

/// The failback asked for: the failed-over flow `ns/name`, the failover's id, the reverse
/// flow's name and whether diverged records are copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub namespace: String,
    pub flow: String,
    pub id: String,
    pub reverse_name: String,
    pub copy_diverged: bool,
}

impl Request {
    /// `NAMESPACE/NAME` of the failed-over flow.
    pub fn flow_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.flow)
    }

    /// The reverse flow's start.
    pub fn start(&self) -> AfterFailoverStart {
        AfterFailoverStart {
            flow: self.flow_ref(),
            id: self.id.clone(),
            copy_diverged: self.copy_diverged,
        }
    }
}

/// A failback ready to apply: the reverse flow, the failover it starts from and, per
/// partition that failover reported (in `status.failover`), where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Reverse {
    pub flow: MirrorFlow,
    pub failover: FailoverReport,
    pub points: Vec<Point>,
}

/// The failover `req.id` of `f`, if failing back from it is safe: reported Done, the flow
/// still stopped by it, under Identity. Pure.
pub fn done_failover<'a>(
    f: &'a MirrorFlow,
    req: &Request,
) -> Result<&'a FailoverReport, FailbackRefusal> {
    let (flow, id) = (req.flow_ref(), req.id.clone());
    let report = f.status.as_ref().and_then(|s| s.failover.as_ref());
    let Some(report) = report else {
        return Err(FailbackRefusal::NoFailover { flow, id });
    };
    if report.id != id {
        let found = report.id.clone();
        return Err(FailbackRefusal::OtherFailover { flow, id, found });
    }
    if report.phase != FailoverPhase::Done {
        let why = report.message.as_ref().map(|m| format!(" ({m})"));
        let (phase, why) = (report.phase, why.unwrap_or_default());
        return Err(FailbackRefusal::NotDone {
            flow,
            id,
            phase,
            why,
        });
    }
    let requested = f.spec.failover.as_ref().map(|r| r.id.as_str());
    if requested != Some(id.as_str()) {
        let found = requested.map_or("absent".into(), |r| format!("{r:?}"));
        return Err(FailbackRefusal::NotStopped { flow, id, found });
    }
    let policy = f.spec.replication_policy.type_;
    if policy != ReplicationPolicyType::Identity {
        return Err(FailbackRefusal::NotIdentity { flow, policy });
    }
    Ok(report)
}

/// The reverse flow of `f`: source and target swapped whole (alias, bootstrap servers, TLS,
/// SASL, client config), the same topics, policy, delivery and workers, starting after the
/// failover. The target-only replication factors stay behind (they were chosen for the other
/// cluster: the reverse flow's target uses its brokers' defaults); nothing paused, reset or
/// failed over. Pure.
pub fn reverse_spec(f: &MirrorFlowSpec, start: AfterFailoverStart) -> MirrorFlowSpec {
    let mut source = f.target.clone();
    source.replication_factor = None;
    source.start_from = Some(SourceStart {
        after_failover: Some(start),
        mirror_maker2: None,
    });
    let mut target = f.source.clone();
    target.start_from = None;
    MirrorFlowSpec {
        source,
        target,
        internal_topics: Default::default(),
        paused: false,
        reset: None,
        failover: None,
        ..f.clone()
    }
}

/// The failback of `f` as `req` asks: refused as [`done_failover`] says, or when the failover
/// recorded no start for a partition the reverse flow replicates. Pure.
pub fn reverse(f: &MirrorFlow, req: &Request) -> Result<Reverse, FailbackRefusal> {
    let failover = done_failover(f, req)?.clone();
    let mut flow = MirrorFlow::new(&req.reverse_name, reverse_spec(&f.spec, req.start()));
    flow.metadata.namespace = Some(req.namespace.clone());
    let filter = TopicFilter::new(&flow.spec).map_err(|e| FailbackRefusal::Topics {
        flow: req.flow_ref(),
        why: e.to_string(),
    })?;
    let selected = |t: &str| filter.decide(t) == TopicDecision::Replicate;
    let points =
        points(&req.flow_ref(), &failover, selected).map_err(FailbackRefusal::Positions)?;
    Ok(Reverse {
        flow,
        failover,
        points,
    })
}

/// Whether to apply: `Ok(true)` when no reverse flow exists, `Ok(false)` when it exists with
/// the same start (a re-run), refused when it starts from anywhere else. Pure.
pub fn needs_apply(
    existing: Option<&MirrorFlow>,
    reverse: &str,
    want: &AfterFailoverStart,
) -> Result<bool, FailbackRefusal> {
    let Some(existing) = existing else {
        return Ok(true);
    };
    let start = existing.spec.source.start_from.as_ref();
    if start.and_then(|s| s.after_failover.as_ref()) == Some(want) {
        return Ok(false);
    }
    let found = match start {
        Some(s) => serde_json::to_string(s).unwrap_or_default(),
        None => "absent".into(),
    };
    Err(FailbackRefusal::Conflict {
        reverse: reverse.to_owned(),
        found,
        want: want.clone(),
    })
}

/// What the reverse flow will do, from the failover's report. Pure.
pub fn render_plan(r: &Reverse) -> String {
    let s = &r.flow.spec;
    let start = s
        .source
        .start_from
        .as_ref()
        .and_then(|s| s.after_failover.as_ref());
    let (flow, id, copy) = start.map_or(("", "", false), |a| (&a.flow, &a.id, a.copy_diverged));
    let mut out = format!(
        "MirrorFlow {}/{}: {} ({}) -> {} ({}), Identity, after failover {id:?} of {flow} ({:?})\n",
        r.flow.metadata.namespace.as_deref().unwrap_or_default(),
        r.flow.metadata.name.as_deref().unwrap_or_default(),
        s.source.alias,
        s.source.bootstrap_servers,
        s.target.alias,
        s.target.bootstrap_servers,
        r.failover.mode,
    );
    let mut rows = vec![vec![
        "TOPIC".to_string(),
        "PARTITION".into(),
        "START-AT".into(),
        format!("DIVERGED-FROM ({})", s.target.alias),
    ]];
    for p in &r.points {
        let cells = [p.source.0.clone(), p.source.1.to_string()];
        rows.push([&cells[..], &[p.start_at.to_string(), p.holds.to_string()]].concat());
    }
    if rows.len() > 1 {
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if let Some(n) = r.failover.partitions_not_shown {
        out.push_str(&format!(
            "and {n} more partition(s) in the failover's store on {} (status.failover lists a few): they start at their recorded end too\n",
            s.source.alias
        ));
    }
    out.push_str(&format!(
        "\nPartitions the failover did not report start per spec.startFrom ({:?}); stored progress always wins.\n",
        s.start_from
    ));
    out.push_str(&format!(
        "Before anything is written, worker 0 counts the records {} took at or after DIVERGED-FROM (they never reached {}){}.\n",
        s.target.alias,
        s.source.alias,
        if copy {
            " and copies them to <topic>.diverged"
        } else {
            "; --copy-diverged would copy them to <topic>.diverged"
        }
    ));
    out
}

/// The failback report of the reverse flow for `want`, from its workers' entries. Pure.
pub fn report_of<'a>(r: &'a MirrorFlow, want: &AfterFailoverStart) -> Option<&'a FailbackReport> {
    let workers = r
        .status
        .as_ref()
        .map(|s| s.workers.as_slice())
        .unwrap_or_default();
    workers
        .iter()
        .filter_map(|w| w.failback.as_ref())
        .find(|f| f.flow == want.flow && f.id == want.id)
}

/// The failback report as a page: one line, then the partitions. Pure.
pub fn render_report(r: &FailbackReport) -> String {
    let mut out = format!(
        "failback after failover {:?} of {}: {} partition(s) started at the failover's positions, {} diverged record(s)",
        r.id, r.flow, r.partitions_started, r.diverged_records
    );
    if let Some(n) = r.diverged_copied {
        out.push_str(&format!(", {n} copied to <topic>.diverged"));
    }
    out.push('\n');
    let mut rows = vec![vec![
        "TOPIC".to_string(),
        "PARTITION".into(),
        "START-AT".into(),
        "DIVERGED".into(),
    ]];
    for p in &r.partitions {
        let diverged = p.diverged.as_ref().map_or("-".into(), |d| {
            format!(
                "{} records, {}/{} offsets {}-{}",
                d.records, d.topic, p.partition, d.first_offset, d.last_offset
            )
        });
        let cells = [p.topic.clone(), p.partition.to_string()];
        rows.push([&cells[..], &[p.start_at.to_string(), diverged]].concat());
    }
    if rows.len() > 1 {
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if let Some(n) = r.partitions_not_shown {
        out.push_str(&format!("and {n} more partition(s), not shown\n"));
    }
    out
}

/// The request `args` make.
fn request(args: &FailbackArgs) -> anyhow::Result<Request> {
    let (namespace, flow) = parse_flow_ref(&args.flow_ref)?;
    let reverse_name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("{flow}-failback"));
    Ok(Request {
        namespace,
        flow,
        id: args.id.clone(),
        reverse_name,
        copy_diverged: args.copy_diverged,
    })
}

/// `mirrorflow failback`.
pub async fn run_failback(args: FailbackArgs) -> anyhow::Result<()> {
    let client = kube_client().await?;
    print!("{}", failback(&client, &args).await?);
    Ok(())
}

/// `mirrorflow failback` through `client`: the page it prints.
pub async fn failback(client: &kube::Client, args: &FailbackArgs) -> anyhow::Result<String> {
    let req = request(args)?;
    let f = read_flow(client, &req.namespace, &req.flow).await?;
    let r = reverse(&f, &req)?;
    let reverse_ref = format!("{}/{}", req.namespace, req.reverse_name);
    if args.dry_run {
        let yaml = serde_yaml::to_string(&r.flow).context("the reverse flow as YAML")?;
        return Ok(format!(
            "{yaml}---\n# not applied (--dry-run)\n{}",
            render_plan(&r)
        ));
    }
    let api = Api::<MirrorFlow>::namespaced(client.clone(), &req.namespace);
    let existing = api
        .get_opt(&req.reverse_name)
        .await
        .with_context(|| format!("reading MirrorFlow {reverse_ref}"))?;
    let mut out = if needs_apply(existing.as_ref(), &reverse_ref, &req.start())? {
        let params = PatchParams::apply(FIELD_MANAGER);
        api.patch(&req.reverse_name, &params, &Patch::Apply(&r.flow))
            .await
            .with_context(|| format!("applying MirrorFlow {reverse_ref}"))?;
        format!(
            "MirrorFlow {reverse_ref} applied: failing back after failover {:?} of {}\n",
            req.id,
            req.flow_ref()
        )
    } else {
        format!(
            "MirrorFlow {reverse_ref} already fails back after failover {:?} of {}: unchanged\n",
            req.id,
            req.flow_ref()
        )
    };
    if args.wait {
        let report = wait_report(client, &req, Duration::from_secs(args.timeout_seconds)).await?;
        out.push_str(&render_report(&report));
    }
    Ok(out)
}

/// Polls the reverse flow until a worker reports its failback.
async fn wait_report(
    client: &kube::Client,
    req: &Request,
    bound: Duration,
) -> anyhow::Result<FailbackReport> {
    let deadline = Instant::now() + bound;
    let want = req.start();
    loop {
        let r = read_flow(client, &req.namespace, &req.reverse_name).await?;
        if let Some(report) = report_of(&r, &want) {
            return Ok(report.clone());
        }
        if Instant::now() >= deadline {
            let said: Vec<String> = r
                .status
                .iter()
                .flat_map(|s| &s.workers)
                .filter_map(|w| w.message.as_ref().map(|m| format!("{}: {m}", w.id)))
                .collect();
            bail!(
                "no failback report from MirrorFlow {}/{} within {bound:?}{}",
                req.namespace,
                req.reverse_name,
                if said.is_empty() {
                    String::new()
                } else {
                    format!("; its workers say: {}", said.join("; "))
                }
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// Flow `kafka/orders` dc1 → dc2 under `policy`, `spec.failover` naming `requested`, its
    /// `status.failover` as given (JSON, so new report fields need no change here).
    fn flow(policy: &str, requested: Option<&str>, failover: serde_json::Value) -> MirrorFlow {
        let mut f = json!({
            "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
            "metadata": {"name": "orders", "namespace": "kafka"},
            "spec": {
                "source": {"alias": "dc1", "bootstrapServers": "a:9092",
                           "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "dc1-user"}},
                           "config": {"fetch.max.bytes": "1048576"}},
                "target": {"alias": "dc2", "bootstrapServers": "b:9093", "replicationFactor": 3,
                           "tls": {"ca": {"secretName": "dc2-ca", "key": "ca.crt"}}},
                "topics": {"include": ["orders", "payments"]},
                "replicationPolicy": {"type": policy},
                "startFrom": "Latest",
                "internalTopics": {"replicationFactor": 3},
                "workers": {"replicas": 2, "inFlightMiB": 64},
                "paused": true,
                "reset": {"id": "r1", "strategy": "RestartFromEarliest", "partitions": []}
            },
            "status": {"failover": failover}
        });
        if let Some(id) = requested {
            f["spec"]["failover"] = json!({"id": id, "mode": "Planned"});
        }
        serde_json::from_value(f).unwrap()
    }

    fn done() -> serde_json::Value {
        json!({"id": "m1", "mode": "Planned", "phase": "Done", "partitionsNotShown": 3, "partitions": [
            {"topic": "orders", "partition": 0, "sourceEnd": 560, "targetHolds": 560,
             "targetTopic": "orders", "targetEnd": 600},
            {"topic": "orders", "partition": 1, "sourceEnd": 70, "targetHolds": 70,
             "targetTopic": "orders", "targetEnd": 70},
            {"topic": "dc1.heartbeats", "partition": 0, "targetHolds": 5,
             "targetTopic": "dc1.heartbeats", "targetEnd": 5}
        ]})
    }

    fn req(copy_diverged: bool) -> Request {
        Request {
            namespace: "kafka".into(),
            flow: "orders".into(),
            id: "m1".into(),
            reverse_name: "orders-failback".into(),
            copy_diverged,
        }
    }

    #[test]
    fn the_reverse_flow_swaps_the_clusters_and_starts_after_the_failover() {
        let f = flow("Identity", Some("m1"), done());
        let r = reverse(&f, &req(true)).unwrap();
        let got = serde_json::to_value(&r.flow).unwrap();
        assert_eq!(
            got["metadata"],
            json!({"name": "orders-failback", "namespace": "kafka"})
        );
        assert_eq!(
            got["spec"]["source"],
            json!({"alias": "dc2", "bootstrapServers": "b:9093",
                   "tls": {"ca": {"secretName": "dc2-ca", "key": "ca.crt"}},
                   "startFrom": {"afterFailover": {"flow": "kafka/orders", "id": "m1", "copyDiverged": true}}})
        );
        assert_eq!(
            r.flow.spec.target, f.spec.source,
            "dc1 whole: SASL, client config"
        );
        let mut dc2 = f.spec.target.clone();
        dc2.replication_factor = None;
        dc2.start_from = r.flow.spec.source.start_from.clone();
        assert_eq!(
            r.flow.spec.source, dc2,
            "dc2 whole but its replication factor"
        );
        let s = &r.flow.spec;
        assert_eq!(s.topics, f.spec.topics);
        assert_eq!(s.replication_policy, f.spec.replication_policy);
        assert_eq!(s.start_from, f.spec.start_from);
        assert_eq!(s.workers, f.spec.workers);
        assert_eq!((s.paused, &s.reset, &s.failover), (false, &None, &None));
        assert!(
            s.internal_topics.is_empty(),
            "dc2's replication factors stay behind"
        );
        assert!(got.get("status").is_none(), "{got}");
        // Where it starts: the failover's reported partitions of the topics it replicates
        // (dc1.heartbeats came from dc1: not copied back).
        let starts: Vec<_> = r
            .points
            .iter()
            .map(|p| (p.source.clone(), p.start_at, p.holds))
            .collect();
        assert_eq!(
            starts,
            vec![
                (("orders".to_string(), 0), 600, 560),
                (("orders".to_string(), 1), 70, 70)
            ]
        );
        crate::api::validate_flow(&r.flow.spec).unwrap();
    }

    #[test]
    fn refusals_name_the_field_and_value() {
        let other = json!({"id": "m0", "mode": "Planned", "phase": "Done"});
        let timed_out = json!({"id": "m1", "mode": "Planned", "phase": "TimedOut",
                               "message": "orders/0 behind by 5"});
        let mut no_end = done();
        no_end["partitions"][1]["targetEnd"] = serde_json::Value::Null;
        let cases = [
            ("no report", flow("Identity", Some("m1"), serde_json::Value::Null),
             "MirrorFlow kafka/orders has no status.failover: run `mirrorflow failover kafka/orders --id m1` first"),
            ("another id", flow("Identity", Some("m1"), other),
             "MirrorFlow kafka/orders: status.failover.id is \"m0\", not \"m1\" (the last failover reported is another one)"),
            ("not done", flow("Identity", Some("m1"), timed_out),
             "MirrorFlow kafka/orders: status.failover.phase of failover \"m1\" is TimedOut, not Done (orders/0 behind by 5); fail back once it is Done"),
            ("replicating again", flow("Identity", None, done()),
             "MirrorFlow kafka/orders: spec.failover.id is absent, not \"m1\": the flow replicates again, and failing back now would copy the same topics both ways"),
            ("a newer request", flow("Identity", Some("m2"), done()),
             "MirrorFlow kafka/orders: spec.failover.id is \"m2\", not \"m1\": the flow replicates again, and failing back now would copy the same topics both ways"),
            ("prefix", flow("Prefix", Some("m1"), done()),
             "MirrorFlow kafka/orders: spec.replicationPolicy.type is Prefix: only Identity writes back to the original topics (the reverse flow would write to renamed copies); fail back with a flow of your own"),
            ("no targetEnd", flow("Identity", Some("m1"), no_end),
             "failover m1 of flow kafka/orders recorded no targetEnd for orders/1 (it ran on an older build, or the end could not be read); refusing to guess where to start"),
        ];
        for (name, f, says) in cases {
            let e = reverse(&f, &req(false)).expect_err(name);
            assert_eq!(e.to_string(), says, "{name}");
        }
    }

    #[test]
    fn an_existing_reverse_flow_is_left_alone_or_refused() {
        let want = req(false).start();
        let r = reverse(&flow("Identity", Some("m1"), done()), &req(false))
            .unwrap()
            .flow;
        let mut copying = r.clone();
        copying.spec.source.start_from = Some(SourceStart {
            after_failover: Some(req(true).start()),
            mirror_maker2: None,
        });
        let mut plain = r.clone();
        plain.spec.source.start_from = None;
        let cases: [(&str, Option<&MirrorFlow>, Result<bool, &str>); 4] = [
            ("absent", None, Ok(true)),
            ("the same", Some(&r), Ok(false)),
            ("copyDiverged differs", Some(&copying), Err("MirrorFlow kafka/orders-failback exists with spec.source.startFrom {\"afterFailover\":{\"flow\":\"kafka/orders\",\"id\":\"m1\",\"copyDiverged\":true}}, not afterFailover {flow: kafka/orders, id: m1, copyDiverged: false}: delete it or choose another --name")),
            ("another flow", Some(&plain), Err("MirrorFlow kafka/orders-failback exists with spec.source.startFrom absent, not afterFailover {flow: kafka/orders, id: m1, copyDiverged: false}: delete it or choose another --name")),
        ];
        for (name, existing, want_out) in cases {
            let got =
                needs_apply(existing, "kafka/orders-failback", &want).map_err(|e| e.to_string());
            assert_eq!(got, want_out.map_err(str::to_string), "{name}");
        }
    }

    #[test]
    fn the_plan_says_where_each_partition_starts() {
        let r = reverse(&flow("Identity", Some("m1"), done()), &req(false)).unwrap();
        assert_eq!(
            render_plan(&r),
            "MirrorFlow kafka/orders-failback: dc2 (b:9093) -> dc1 (a:9092), Identity, after failover \"m1\" of kafka/orders (Planned)

TOPIC   PARTITION  START-AT  DIVERGED-FROM (dc1)
orders  0          600       560
orders  1          70        70
and 3 more partition(s) in the failover's store on dc2 (status.failover lists a few): they start at their recorded end too

Partitions the failover did not report start per spec.startFrom (Latest); stored progress always wins.
Before anything is written, worker 0 counts the records dc1 took at or after DIVERGED-FROM (they never reached dc2); --copy-diverged would copy them to <topic>.diverged.
"
        );
    }

    #[test]
    fn the_report_is_found_by_flow_and_id_and_rendered() {
        let mut r = reverse(&flow("Identity", Some("m1"), done()), &req(true))
            .unwrap()
            .flow;
        let report = |id: &str| {
            json!({"flow": "kafka/orders", "id": id, "partitionsStarted": 2,
            "divergedRecords": 10, "divergedCopied": 10, "partitions": [
                {"topic": "orders", "partition": 0, "startAt": 600,
                 "diverged": {"topic": "orders", "firstOffset": 560, "lastOffset": 569, "records": 10}},
                {"topic": "orders", "partition": 1, "startAt": 70}]})
        };
        let status = |reports: Vec<serde_json::Value>| {
            let workers: Vec<_> = reports.into_iter().enumerate().map(|(i, f)| json!({
                "id": format!("orders-failback-worker-{i}"), "state": "Running", "failback": f
            })).collect();
            serde_json::from_value(json!({"workers": workers})).unwrap()
        };
        let want = req(true).start();
        r.status = Some(status(vec![report("m0")]));
        assert_eq!(report_of(&r, &want), None, "another failover's report");
        r.status = Some(status(vec![report("m0"), report("m1")]));
        let got = report_of(&r, &want).expect("worker 1's report");
        assert_eq!(
            render_report(got),
            "failback after failover \"m1\" of kafka/orders: 2 partition(s) started at the failover's positions, 10 diverged record(s), 10 copied to <topic>.diverged

TOPIC   PARTITION  START-AT  DIVERGED
orders  0          600       10 records, orders/0 offsets 560-569
orders  1          70        -
"
        );
    }
}
