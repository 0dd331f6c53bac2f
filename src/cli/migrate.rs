//! `mirrorflow migrate-from-mm2 NS/NAME`: merge-patches `spec.source.startFrom.mirrorMaker2`
//! (that field only) so the flow takes over from a stopped MirrorMaker 2. `--dry-run` reads
//! MM2's offsets topic with the flow's target settings and prints where each partition would
//! start; `--wait` prints the workers' `mirrorMaker2Takeover`. The decisions are pure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kube::api::{Api, Patch, PatchParams};

use super::flow_source::{load_from_api, Side};
use super::{kube_client, read_flow, table};
use crate::api::{MirrorFlow, MirrorMaker2Start, MirrorMaker2Takeover};
use crate::kafka::config::client_properties;
use crate::worker::process::k8s::parse_flow_ref;
use crate::worker::replicate::io::{read_mm2_positions, Mm2ReadError};
use crate::worker::replicate::migrate::Mm2Positions;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// Arguments of `mirrorflow migrate-from-mm2`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct MigrateArgs {
    /// The MirrorFlow, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME")]
    pub flow_ref: String,
    /// MM2's Connect offsets topic on the target; default `mm2-offsets.<source alias>.internal`
    /// (MM2's dedicated mode).
    #[arg(long, value_name = "TOPIC")]
    pub offsets_topic: Option<String>,
    /// Read MM2's positions now and print where each partition would start; patch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Wait for the workers' takeover report and print it.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits (and `--dry-run` reads the offsets topic).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout_seconds: u64,
}

/// Why the migration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrateRefusal {
    #[error("MirrorFlow {flow}: spec.source.startFrom.afterFailover is set (flow {from}, id {id}): a flow takes its first positions from one place; remove it first, or take over from MirrorMaker 2 with another flow")]
    AfterFailover {
        flow: String,
        from: String,
        id: String,
    },
}

/// The merge patch that sets `spec.source.startFrom.mirrorMaker2` of `f` (an absent
/// `offsets_topic` removes one set before), `None` when it is already so. Pure.
pub fn patch(
    f: &MirrorFlow,
    flow: &str,
    offsets_topic: Option<&str>,
) -> Result<Option<serde_json::Value>, MigrateRefusal> {
    let start = f.spec.source.start_from.as_ref();
    if let Some(a) = start.and_then(|s| s.after_failover.as_ref()) {
        return Err(MigrateRefusal::AfterFailover {
            flow: flow.to_owned(),
            from: a.flow.clone(),
            id: a.id.clone(),
        });
    }
    let want = MirrorMaker2Start {
        offsets_topic: offsets_topic.map(str::to_owned),
    };
    if start.and_then(|s| s.mirror_maker2.as_ref()) == Some(&want) {
        return Ok(None);
    }
    Ok(Some(serde_json::json!({"spec": {"source": {"startFrom": {
        "mirrorMaker2": {"offsetsTopic": offsets_topic}
    }}}})))
}

/// Where each partition the flow selects would start from MM2's `positions` read in `topic`,
/// as a page. Pure.
pub fn render_positions(
    f: &MirrorFlow,
    topic: &str,
    positions: &Mm2Positions,
    selected: impl Fn(&str) -> bool,
) -> String {
    let alias = &f.spec.source.alias;
    let all = positions.next_offsets();
    let (mine, others): (BTreeMap<_, _>, BTreeMap<_, _>) =
        all.into_iter().partition(|((t, _), _)| selected(t));
    let mut out = format!(
        "MirrorMaker 2's positions for source {alias:?} in {topic}: {} partition(s) of selected topics\n",
        mine.len()
    );
    if mine.is_empty() {
        let seen = positions.other_clusters();
        if !seen.is_empty() {
            let names: Vec<&str> = seen.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "it holds positions for other source aliases only ({}): spec.source.alias must be MM2's\n",
                names.join(", ")
            ));
        }
        out.push_str("a flow without progress waits until the topic holds a position for spec.source.alias\n");
    }
    let mut rows = vec![vec![
        "TOPIC".to_string(),
        "PARTITION".into(),
        "START-AT".into(),
    ]];
    for ((t, p), o) in &mine {
        rows.push(vec![t.clone(), p.to_string(), o.to_string()]);
    }
    if rows.len() > 1 {
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if !others.is_empty() {
        out.push_str(&format!(
            "and {} partition(s) of topics this flow does not select\n",
            others.len()
        ));
    }
    out.push_str(&format!(
        "\nPartitions without a position start per spec.startFrom ({:?}); a partition with progress of its own resumes there.\n",
        f.spec.start_from
    ));
    out
}

/// Each worker's takeover report, once every worker that owns partitions has one. Pure.
pub fn takeovers(f: &MirrorFlow) -> Option<Vec<(String, MirrorMaker2Takeover)>> {
    let workers = f
        .status
        .as_ref()
        .map(|s| s.workers.as_slice())
        .unwrap_or_default();
    let owning: Vec<_> = workers.iter().filter(|w| w.partitions > 0).collect();
    let done: Vec<(String, MirrorMaker2Takeover)> = owning
        .iter()
        .filter_map(|w| Some((w.id.clone(), w.mirror_maker2_takeover.clone()?)))
        .collect();
    (!done.is_empty() && done.len() == owning.len()).then_some(done)
}

/// The takeover reports as a page. Pure.
pub fn render_takeovers(reports: &[(String, MirrorMaker2Takeover)]) -> String {
    let mut rows = vec![vec![
        "WORKER".to_string(),
        "FROM-MM2".into(),
        "FELL-BACK".into(),
        "TOPICS".into(),
    ]];
    let mut topic = "";
    for (id, t) in reports {
        topic = &t.offsets_topic;
        let mut topics = t.topics.join("; ");
        if !t.fell_back_topics.is_empty() {
            topics.push_str(&format!(" (fell back: {})", t.fell_back_topics.join("; ")));
        }
        rows.push(vec![
            id.clone(),
            t.partitions.to_string(),
            t.fell_back.to_string(),
            topics,
        ]);
    }
    format!("took over from MirrorMaker 2 ({topic})\n{}", table(&rows))
}

/// `mirrorflow migrate-from-mm2`.
pub async fn run_migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let client = kube_client().await?;
    print!("{}", migrate(&client, &args).await?);
    Ok(())
}

/// `mirrorflow migrate-from-mm2` through `client`: the page it prints.
pub async fn migrate(client: &kube::Client, args: &MigrateArgs) -> anyhow::Result<String> {
    let (ns, name) = parse_flow_ref(&args.flow_ref)?;
    let flow_ref = format!("{ns}/{name}");
    let f = read_flow(client, &ns, &name).await?;
    let body = patch(&f, &flow_ref, args.offsets_topic.as_deref())?;
    if args.dry_run {
        let would = match &body {
            Some(b) => format!("would patch MirrorFlow {flow_ref}: {b}\n"),
            None => format!("MirrorFlow {flow_ref} already takes over from MirrorMaker 2 so\n"),
        };
        let timeout = Duration::from_secs(args.timeout_seconds);
        return Ok(would + &preview(client, &ns, &name, args, timeout).await?);
    }
    let mut out = match body {
        Some(b) => {
            Api::<MirrorFlow>::namespaced(client.clone(), &ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(b))
                .await
                .with_context(|| {
                    format!("patching spec.source.startFrom of MirrorFlow {flow_ref}")
                })?;
            format!("MirrorFlow {flow_ref}: spec.source.startFrom.mirrorMaker2 set\n")
        }
        None => format!(
            "MirrorFlow {flow_ref}: spec.source.startFrom.mirrorMaker2 already so: unchanged\n"
        ),
    };
    if args.wait {
        let bound = Duration::from_secs(args.timeout_seconds);
        let deadline = Instant::now() + bound;
        loop {
            let f = read_flow(client, &ns, &name).await?;
            if let Some(reports) = takeovers(&f) {
                out.push_str(&render_takeovers(&reports));
                break;
            }
            if Instant::now() >= deadline {
                bail!("no takeover report from every worker of MirrorFlow {flow_ref} within {bound:?}; see `mirrorflow status {flow_ref}`");
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    Ok(out)
}

/// MM2's positions read now from the offsets topic on the flow's target, as a page.
async fn preview(
    client: &kube::Client,
    ns: &str,
    name: &str,
    args: &MigrateArgs,
    timeout: Duration,
) -> anyhow::Result<String> {
    let loaded = load_from_api(client, ns, name, &[Side::Target]).await?;
    let spec = &loaded.flow.spec;
    let start = MirrorMaker2Start {
        offsets_topic: args.offsets_topic.clone(),
    };
    let topic = start.topic(&spec.source.alias);
    let props = client_properties(&spec.target, loaded.secrets_dir()).context("spec.target")?;
    let positions = read_mm2_positions(&props, &topic, &spec.source.alias, timeout)
        .await
        .map_err(|e| match e {
            Mm2ReadError::Unavailable(why) => {
                anyhow::anyhow!(
                    "reading {topic} on target cluster {}: {why}",
                    spec.target.alias
                )
            }
            Mm2ReadError::Unreadable(e) => anyhow::Error::new(e),
        })?;
    let filter = TopicFilter::new(spec)?;
    let selected = |t: &str| filter.decide(t) == TopicDecision::Replicate;
    Ok(render_positions(&loaded.flow, &topic, &positions, selected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn flow(start: serde_json::Value, workers: serde_json::Value) -> MirrorFlow {
        serde_json::from_value(json!({
            "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
            "metadata": {"name": "orders", "namespace": "kafka"},
            "spec": {
                "source": {"alias": "dc1", "bootstrapServers": "a:9092", "startFrom": start},
                "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
                "topics": {"include": ["orders"]}
            },
            "status": {"workers": workers}
        }))
        .unwrap()
    }

    #[test]
    fn patch_sets_only_the_mirror_maker2_start() {
        let set = |t: serde_json::Value| {
            Some(json!({"spec": {"source": {"startFrom": {"mirrorMaker2": {"offsetsTopic": t}}}}}))
        };
        let none = serde_json::Value::Null;
        let cases = [
            (
                "fresh, default topic",
                none.clone(),
                None,
                set(none.clone()),
            ),
            (
                "fresh, named topic",
                none.clone(),
                Some("connect-offsets"),
                set(json!("connect-offsets")),
            ),
            ("already so", json!({"mirrorMaker2": {}}), None, None),
            (
                "already so, named",
                json!({"mirrorMaker2": {"offsetsTopic": "o"}}),
                Some("o"),
                None,
            ),
            (
                "named before, default now",
                json!({"mirrorMaker2": {"offsetsTopic": "o"}}),
                None,
                set(none.clone()),
            ),
        ];
        for (name, start, topic, want) in cases {
            let f = flow(start, json!([]));
            assert_eq!(patch(&f, "kafka/orders", topic), Ok(want), "{name}");
        }
        let f = flow(
            json!({"afterFailover": {"flow": "kafka/back", "id": "m1"}}),
            json!([]),
        );
        assert_eq!(
            patch(&f, "kafka/orders", None).unwrap_err().to_string(),
            "MirrorFlow kafka/orders: spec.source.startFrom.afterFailover is set (flow kafka/back, id m1): a flow takes its first positions from one place; remove it first, or take over from MirrorMaker 2 with another flow"
        );
    }

    #[test]
    fn positions_show_where_the_selected_partitions_start() {
        let f = flow(serde_json::Value::Null, json!([]));
        let key = |c: &str, t: &str, p: i32| {
            format!("[\"MirrorSourceConnector\",{{\"cluster\":\"{c}\",\"partition\":{p},\"topic\":\"{t}\"}}]")
        };
        let mut pos = Mm2Positions::new("dc1");
        for (k, v) in [
            (key("dc1", "orders", 0), "{\"offset\":41}"),
            (key("dc1", "orders", 1), "{\"offset\":9}"),
            (key("dc1", "audit", 0), "{\"offset\":3}"),
        ] {
            pos.apply(Some(k.as_bytes()), Some(v.as_bytes())).unwrap();
        }
        assert_eq!(
            render_positions(&f, "mm2-offsets.dc1.internal", &pos, |t| t == "orders"),
            "MirrorMaker 2's positions for source \"dc1\" in mm2-offsets.dc1.internal: 2 partition(s) of selected topics

TOPIC   PARTITION  START-AT
orders  0          42
orders  1          10
and 1 partition(s) of topics this flow does not select

Partitions without a position start per spec.startFrom (Earliest); a partition with progress of its own resumes there.
"
        );
        let mut other = Mm2Positions::new("dc1");
        let k = key("east", "orders", 0);
        other
            .apply(Some(k.as_bytes()), Some(b"{\"offset\":1}"))
            .unwrap();
        let page = render_positions(&f, "t", &other, |_| true);
        assert!(
            page.contains("it holds positions for other source aliases only (east): spec.source.alias must be MM2's\n"),
            "{page}"
        );
    }

    #[test]
    fn takeovers_wait_for_every_worker_that_owns_partitions() {
        let t = |n: i32| {
            json!({"offsetsTopic": "mm2-offsets.dc1.internal", "partitions": n,
                                "topics": ["orders: 0-1"], "fellBack": 1, "fellBackTopics": ["orders: 2"]})
        };
        let w = |i: usize, parts: i32, takeover: Option<serde_json::Value>| {
            let mut w = json!({"id": format!("orders-worker-{i}"), "partitions": parts, "state": "Running"});
            if let Some(t) = takeover {
                w["mirrorMaker2Takeover"] = t;
            }
            w
        };
        let none = flow(serde_json::Value::Null, json!([]));
        assert_eq!(takeovers(&none), None, "no worker yet");
        let half = flow(
            serde_json::Value::Null,
            json!([w(0, 3, Some(t(2))), w(1, 2, None)]),
        );
        assert_eq!(takeovers(&half), None, "worker 1 has not reported");
        let done = flow(
            serde_json::Value::Null,
            json!([w(0, 3, Some(t(2))), w(1, 0, None)]),
        );
        let got = takeovers(&done).expect("every worker owning partitions reported");
        assert_eq!(
            render_takeovers(&got),
            "took over from MirrorMaker 2 (mm2-offsets.dc1.internal)
WORKER           FROM-MM2  FELL-BACK  TOPICS
orders-worker-0  2         1          orders: 0-1 (fell back: orders: 2)
"
        );
    }
}
