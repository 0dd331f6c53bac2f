//! The chart's alerts (PrometheusRule), the Grafana dashboard and the metric names they use:
//! each documented in docs/PACKAGING.md and registered by the controller or the workers.
mod kube_support;

use kube_support::chart::*;
use kube_support::tools::{read, tool};
use std::collections::BTreeSet;

use serde_json::Value as Json;

// ---------------------------------------------------------------------------------------------
// Alerts, dashboard and the metric names they assume
// ---------------------------------------------------------------------------------------------

/// `mirrorflow_*` series named in PromQL (histogram suffixes folded into the family name).
fn metric_names(exprs: &[String]) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\b(mirrorflow_[a-z0-9_]+)").unwrap();
    exprs
        .iter()
        .flat_map(|e| {
            re.captures_iter(e)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .map(|m| m.trim_end_matches("_bucket").to_string())
        .collect()
}

fn dashboard_exprs(dash: &Json) -> Vec<String> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {:?} has no targets", p["title"]));
        assert!(!targets.is_empty(), "panel {:?} has no targets", p["title"]);
        for t in targets {
            let e = t["expr"].as_str().unwrap_or_default();
            assert!(!e.is_empty(), "panel {:?}: empty expr", p["title"]);
            out.push(e.to_string());
        }
    }
    out
}

#[test]
fn dashboard_is_valid_and_uses_its_variables() {
    let dash: Json =
        serde_json::from_str(&read("charts/mirrorflow/dashboards/mirrorflow.json")).unwrap();
    assert_eq!(dash["uid"], "mirrorflow");
    let vars: BTreeSet<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let text = dash.to_string();
    let re = regex::Regex::new(r"\$\{?([a-z_]+)").unwrap();
    for c in re.captures_iter(&text) {
        let v = &c[1];
        assert!(
            v.starts_with("__") || vars.contains(v),
            "dashboard uses undefined variable ${v}"
        );
    }
    let mut ids = BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "duplicate panel id {}",
            p["id"]
        );
    }
    assert!(dashboard_exprs(&dash).len() >= 10);
    // The heartbeat latency: its distribution (p99 from the histogram) and the latest value.
    let latency: Vec<String> = dashboard_exprs(&dash)
        .into_iter()
        .filter(|e| e.contains("replication_latency"))
        .collect();
    assert!(
        latency
            .iter()
            .any(|e| e.starts_with("histogram_quantile(0.99")
                && e.contains("mirrorflow_worker_replication_latency_seconds_bucket"))
            && latency
                .iter()
                .any(|e| e.contains("mirrorflow_worker_replication_latency_last_seconds")),
        "{latency:?}"
    );
}

#[test]
fn alerts_and_dashboard_use_documented_metrics() {
    let Some(helm) = tool("helm", "alerts_and_dashboard_use_documented_metrics") else {
        return;
    };
    let docs = template(&helm, &["--set", "metrics.prometheusRule.enabled=true"]).unwrap();
    let alerts = alerts_of(untyped(&docs, "PrometheusRule")[0]);
    let names: BTreeSet<&str> = alerts
        .iter()
        .map(|a| a["alert"].as_str().unwrap())
        .collect();
    for want in [
        "MirrorFlowDataLoss",
        "MirrorFlowTopicReset",
        "MirrorFlowWorkerDown",
        "MirrorFlowControllerDown",
        "MirrorFlowLatencyHigh",
    ] {
        assert!(names.contains(want), "{want} missing: {names:?}");
    }
    // The latency alert judges the latest value (which grows while a heartbeat is missing):
    // a histogram quantile has no samples at all when the flow stalls, and never fires.
    let latency = alerts
        .iter()
        .find(|a| a["alert"].as_str() == Some("MirrorFlowLatencyHigh"))
        .unwrap();
    assert_eq!(
        latency["expr"].as_str().unwrap(),
        "max by (namespace, flow) (mirrorflow_worker_replication_latency_last_seconds) > 60"
    );
    assert_eq!(latency["for"].as_str(), Some("10m"));
    let mut exprs = Vec::new();
    for a in &alerts {
        assert!(
            matches!(
                a["labels"]["severity"].as_str(),
                Some("critical" | "warning")
            ),
            "{:?}: severity",
            a["alert"]
        );
        assert!(
            a["annotations"]["summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{:?}: summary",
            a["alert"]
        );
        // Helm must have left Prometheus' own templates for Prometheus.
        assert!(!a["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("{{ \""));
        exprs.push(a["expr"].as_str().unwrap().to_string());
    }
    assert!(
        exprs.iter().any(|e| e.contains("type=\"DataLoss\""))
            && exprs.iter().any(|e| e.contains("type=\"TopicReset\""))
    );
    let dash: Json =
        serde_json::from_str(&read("charts/mirrorflow/dashboards/mirrorflow.json")).unwrap();
    exprs.extend(dashboard_exprs(&dash));

    let docs_md = read("docs/PACKAGING.md");
    let pending: BTreeSet<String> = {
        let list = docs_md
            .split_once("<!-- pending-metrics -->")
            .and_then(|(_, rest)| rest.split_once("<!-- /pending-metrics -->"))
            .expect("pending-metrics markers in docs/PACKAGING.md")
            .0;
        metric_names(&[list.to_string()])
    };
    let sources = [
        (
            "mirrorflow_",
            "src/controller/metrics.rs",
            read("src/controller/metrics.rs"),
        ),
        (
            "mirrorflow_checkpoint_",
            "src/worker/checkpoint/metrics.rs",
            read("src/worker/checkpoint/metrics.rs"),
        ),
        (
            "mirrorflow_worker_",
            "src/telemetry/metrics.rs",
            read("src/telemetry/metrics.rs"),
        ),
    ];
    // Registered when the source names the series, in full or as the suffix after its prefix
    // (the worker builds names with `opts("<suffix>", ...)`).
    let registered = |m: &str| {
        let family = m.trim_end_matches("_count").trim_end_matches("_sum");
        sources.iter().any(|(prefix, _, src)| {
            family.starts_with(prefix)
                && (src.contains(&format!("\"{family}\""))
                    || src.contains(&format!("\"{}\"", &family[prefix.len()..])))
        })
    };
    let used = metric_names(&exprs);
    assert!(used.len() >= 8, "{used:?}");
    for m in &used {
        assert!(
            docs_md.contains(&format!("| `{m}`")),
            "{m} is used by alerts or dashboard but not in the table of docs/PACKAGING.md"
        );
        if pending.contains(m) {
            assert!(
                !registered(m),
                "{m} is registered now: remove it from the pending list in docs/PACKAGING.md"
            );
        } else if let Some((_, file, _)) =
            sources.iter().find(|(prefix, _, _)| m.starts_with(prefix))
        {
            assert!(
                registered(m),
                "{m} is not registered in {file} (nor listed as pending in docs/PACKAGING.md)"
            );
        } else {
            panic!("{m}: neither registered by the controller or workers nor listed as pending");
        }
    }
    for m in &pending {
        assert!(
            used.contains(m),
            "pending metric {m} is not used by the chart"
        );
    }
}
