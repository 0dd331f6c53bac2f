//! The chart's alerts (PrometheusRule), the Grafana dashboard and the metric names they use:
//! each documented in docs/PACKAGING.md and registered by the controller or the workers (a
//! file under `src/` that registers metrics names it).
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
    let sources = registering_sources();
    // Registered when a file that registers metrics names the series, in full or, after a
    // prefix it builds names with, as its suffix.
    let registered = |m: &str| {
        let family = m.trim_end_matches("_count").trim_end_matches("_sum");
        sources.iter().any(|s| s.names(family))
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
        } else {
            assert!(
                registered(m),
                "{m} is not registered by any file under src/ that registers metrics ({}), nor \
                 listed as pending in docs/PACKAGING.md",
                sources
                    .iter()
                    .map(|s| s.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for m in &pending {
        assert!(
            used.contains(m),
            "pending metric {m} is not used by the chart"
        );
    }
}

/// A file under `src/` that registers Prometheus collectors, and the name prefixes it builds
/// series names with.
struct Registering {
    path: String,
    text: String,
    prefixes: Vec<String>,
}

impl Registering {
    fn names(&self, family: &str) -> bool {
        self.text.contains(&format!("\"{family}\""))
            || self.prefixes.iter().any(|p| {
                family
                    .strip_prefix(p.as_str())
                    .is_some_and(|suffix| self.text.contains(&format!("\"{suffix}\"")))
            })
    }
}

/// Every file under `src/` that registers collectors on a registry (`registry.register(`).
fn registering_sources() -> Vec<Registering> {
    // A prefix: a literal of its own (`const PREFIX: &str = "mirrorflow_checkpoint_"`) or
    // the start of a format string (`format!("mirrorflow_worker_{name}")`).
    let prefix = regex::Regex::new(r#""(mirrorflow_[a-z0-9_]*_)(\{|")"#).unwrap();
    let mut out = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            if !text.contains("registry.register(") {
                continue;
            }
            let prefixes = prefix
                .captures_iter(&text)
                .map(|c| c[1].to_string())
                .collect();
            let path = path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap()
                .display()
                .to_string();
            out.push(Registering {
                path,
                text,
                prefixes,
            });
        }
    }
    assert!(
        out.iter()
            .any(|s| s.path.ends_with("src/telemetry/metrics.rs")),
        "the worker's metrics file is found: {:?}",
        out.iter().map(|s| &s.path).collect::<Vec<_>>()
    );
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
