//! The Helm chart (`charts/mirrorflow`): values.yaml, values.schema.json, ci/full-values.yaml
//! and the templates agree; `helm lint` and `helm template` with the default and the full
//! values; the restricted security context, probes and every option of the rendered objects.
//! helm comes from `scripts/install-helm.sh` (kube_support::tools: SKIPPED without it, a
//! failure in CI).
mod kube_support;

use kube_support::chart::*;
use kube_support::tools::{read, root, run, tool};
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value as Json};
use serde_yaml::Value as Yaml;

// ---------------------------------------------------------------------------------------------
// values.yaml, values.schema.json, full-values.yaml and the templates agree
// ---------------------------------------------------------------------------------------------

/// Dotted paths of the leaves of a values tree (scalars, lists, empty maps).
fn leaf_paths(v: &Yaml, prefix: &str, out: &mut Vec<String>) {
    match v {
        Yaml::Mapping(m) if !m.is_empty() => {
            for (k, child) in m {
                let k = k.as_str().expect("string keys");
                let p = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(child, &p, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

fn get_path<'a>(v: &'a Yaml, path: &str) -> Option<&'a Yaml> {
    path.split('.').try_fold(v, |v, k| v.as_mapping()?.get(k))
}

fn templates_text() -> String {
    let dir = root().join(CHART).join("templates");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `.Values.<path>` references in the templates (the longest dotted path of each).
fn value_references(text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    re.captures_iter(text)
        .map(|c| c[1][1..].to_string())
        .collect()
}

#[test]
fn every_value_is_used_by_a_template_and_set_by_full_values() {
    let values: Yaml = serde_yaml::from_str(&read("charts/mirrorflow/values.yaml")).unwrap();
    let full: Yaml = serde_yaml::from_str(&read(FULL_VALUES)).unwrap();
    let mut leaves = Vec::new();
    leaf_paths(&values, "", &mut leaves);
    assert!(leaves.len() > 30, "values.yaml has {} leaves", leaves.len());
    let refs = value_references(&templates_text());

    // A leaf is used when the templates reference it or one of its ancestors as a whole
    // (e.g. `toYaml .Values.resources` uses resources.requests.cpu).
    let unused: Vec<_> = leaves
        .iter()
        .filter(|leaf| {
            let parts: Vec<&str> = leaf.split('.').collect();
            !(1..=parts.len()).any(|n| refs.contains(&parts[..n].join(".")))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "values.yaml keys no template uses: {unused:?}"
    );

    // Every reference names a value that exists (catches typos the schema cannot see).
    let unknown: Vec<_> = refs
        .iter()
        .filter(|r| get_path(&values, r).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "templates reference values missing from values.yaml: {unknown:?}"
    );

    let missing: Vec<_> = leaves
        .iter()
        .filter(|l| get_path(&full, l).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "{FULL_VALUES} does not set: {missing:?}"
    );
}

fn schema() -> Json {
    serde_json::from_str(&read("charts/mirrorflow/values.schema.json")).unwrap()
}

#[test]
fn schema_closes_every_object_and_checks_values_files() {
    fn walk(v: &Json, at: &str, bad: &mut Vec<String>) {
        match v {
            Json::Object(m) => {
                if m.get("type") == Some(&json!("object")) {
                    match (m.get("properties"), m.get("additionalProperties")) {
                        // Chart-defined structures: closed.
                        (Some(_), Some(Json::Bool(false))) => {}
                        // Free maps (labels, annotations) and Kubernetes pass-through objects:
                        // explicitly typed or explicitly open.
                        (None, Some(_)) => {}
                        _ => bad.push(at.to_string()),
                    }
                }
                for (k, child) in m {
                    walk(child, &format!("{at}/{k}"), bad);
                }
            }
            Json::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, c)| walk(c, &format!("{at}/{i}"), bad)),
            _ => {}
        }
    }
    let schema = schema();
    let mut bad = Vec::new();
    walk(&schema, "", &mut bad);
    assert!(
        bad.is_empty(),
        "objects without additionalProperties: false (or an explicit map type): {bad:?}"
    );

    let validator = jsonschema::validator_for(&schema).unwrap();
    let as_json = |rel: &str| -> Json { serde_yaml::from_str(&read(rel)).unwrap() };
    for rel in ["charts/mirrorflow/values.yaml", FULL_VALUES] {
        let errs: Vec<String> = validator
            .iter_errors(&as_json(rel))
            .map(|e| e.to_string())
            .collect();
        assert!(errs.is_empty(), "{rel} fails the schema: {errs:?}");
    }
    let with = |path: &[&str], v: Json| {
        let mut doc = as_json("charts/mirrorflow/values.yaml");
        let mut at = &mut doc;
        for k in &path[..path.len() - 1] {
            at = &mut at[*k];
        }
        at[path[path.len() - 1]] = v;
        validator.is_valid(&doc)
    };
    let cases: Vec<(&[&str], Json, bool)> = vec![
        (&["unknownKey"], json!(1), false),
        (&["image", "registry"], json!("x"), false),
        (
            &["metrics", "serviceMonitor", "intervall"],
            json!("1m"),
            false,
        ),
        (&["logFormat"], json!("yaml"), false),
        (&["watchNamespaces"], json!(["Not_A_Namespace"]), false),
        (&["watchNamespaces"], json!("kafka"), false),
        (&["watchNamespaces"], json!(["a", "a"]), false),
        (&["image", "digest"], json!("latest"), false),
        (
            &["podDisruptionBudget", "maxUnavailable"],
            json!("25%"),
            true,
        ),
        (&["podDisruptionBudget", "maxUnavailable"], json!(0), false),
        (&["podLabels", "team"], json!("a"), true),
        (&["podLabels", "team"], json!(1), false),
        (
            &["metrics", "prometheusRule", "notReadyFor"],
            json!("ten minutes"),
            false,
        ),
    ];
    for (path, v, ok) in cases {
        assert_eq!(with(path, v.clone()), ok, "{path:?} = {v}");
    }
}

// ---------------------------------------------------------------------------------------------
// helm lint / template
// ---------------------------------------------------------------------------------------------

#[test]
fn helm_lint_passes_for_default_and_full_values() {
    let Some(helm) = tool("helm", "helm_lint_passes_for_default_and_full_values") else {
        return;
    };
    run(&helm, &["lint", "--strict", CHART]).unwrap();
    run(&helm, &["lint", "--strict", CHART, "-f", FULL_VALUES]).unwrap();
}

#[test]
fn helm_rejects_unknown_values() {
    let Some(helm) = tool("helm", "helm_rejects_unknown_values") else {
        return;
    };
    for (set, key) in [
        ("unknownKey=1", "unknownKey"),
        ("metrics.serviceMonitor.intervall=1m", "intervall"),
    ] {
        let err = template(&helm, &["--set", set]).expect_err(set);
        assert!(
            err.contains(key) && err.contains("not allowed"),
            "--set {set}: {err}"
        );
    }
}

#[test]
fn helm_refuses_inconsistent_values_with_a_reason() {
    let Some(helm) = tool("helm", "helm_refuses_inconsistent_values_with_a_reason") else {
        return;
    };
    let cases = [
        (
            "replicaCount=2,leaderElection.enabled=false",
            "leaderElection.enabled",
        ),
        (
            "serviceAccount.create=false",
            "serviceAccount.name is required",
        ),
    ];
    for (set, why) in cases {
        let err = template(&helm, &["--set", set]).expect_err(set);
        assert!(err.contains(why), "--set {set}: {err}");
    }
}

#[test]
fn default_render_is_restricted_and_complete() {
    let Some(helm) = tool("helm", "default_render_is_restricted_and_complete") else {
        return;
    };
    let docs = template(&helm, &[]).unwrap();
    let want: BTreeSet<String> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds(&docs), want);
    for d in &docs {
        let ns = &d["metadata"]["namespace"];
        if matches!(
            d["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        ) {
            assert!(ns.is_null());
        } else {
            assert_eq!(ns, NAMESPACE, "{:?}", kind_name(d));
        }
    }

    let d: Deployment = one(&docs, "Deployment");
    check_controller_pod(&d);
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("RollingUpdate")
    );
    let args = args_of(&d);
    for a in [
        "--leader-election=on",
        "--lease-name=mirrorflow",
        "--log-format=json",
    ] {
        assert!(args.contains(&a.to_string()), "{a} not in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--namespace")),
        "watches all namespaces: {args:?}"
    );
    let c = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some(mirrorflow::controller::DEFAULT_WORKER_IMAGE)
    );
    assert_eq!(
        env_value(c, "MIRRORFLOW_IMAGE").as_deref(),
        Some(mirrorflow::controller::DEFAULT_WORKER_IMAGE)
    );
    assert_eq!(env_value(c, "RUST_LOG"), None);
    assert_eq!(
        spec.template
            .spec
            .as_ref()
            .unwrap()
            .service_account_name
            .as_deref(),
        Some("mirrorflow")
    );

    let svc: Service = one(&docs, "Service");
    let svc_spec = svc.spec.unwrap();
    assert_eq!(svc_spec.ports.unwrap()[0].port, 8080);
    // The Service selects the controller's pods and never a flow's workers.
    let sel = svc_spec.selector.unwrap();
    assert_eq!(
        sel.get("app.kubernetes.io/component").map(String::as_str),
        Some("controller")
    );
    assert_eq!(&sel, spec.selector.match_labels.as_ref().unwrap());

    let pdb: PodDisruptionBudget = one(&docs, "PodDisruptionBudget");
    assert_eq!(
        pdb.spec.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let sa: ServiceAccount = one(&docs, "ServiceAccount");
    assert_eq!(sa.metadata.name.as_deref(), Some("mirrorflow"));
}

#[test]
fn full_values_render_every_option() {
    let Some(helm) = tool("helm", "full_values_render_every_option") else {
        return;
    };
    let docs = template(&helm, &["-f", FULL_VALUES]).unwrap();
    let k = kinds(&docs);
    for want in [
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
    ] {
        assert!(k.contains(want), "{want} missing: {k:?}");
    }
    assert!(
        !k.contains("ClusterRole") && !k.contains("ClusterRoleBinding"),
        "watchNamespaces set: no cluster RBAC"
    );

    let d: Deployment = one(&docs, "Deployment");
    check_controller_pod(&d);
    assert_eq!(d.metadata.name.as_deref(), Some("mirrorflow-ops"));
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/kafka/mirrorflow@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    );
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        env_value(c, "MIRRORFLOW_IMAGE").as_deref(),
        Some("registry.example.com/kafka/mirrorflow-worker:0.1.0-rc1")
    );
    assert_eq!(
        env_value(c, "RUST_LOG").as_deref(),
        Some("info,mirrorflow=debug")
    );
    assert_eq!(env_value(c, "MIRRORFLOW_EXTRA").as_deref(), Some("1"));
    let args = args_of(&d);
    for a in [
        "--namespace=kafka-mirroring,kafka-dr",
        "--lease-name=mirrorflow-ops-leader",
        "--log-format=text",
        "--lease-namespace=mirrorflow-system",
    ] {
        assert!(args.contains(&a.to_string()), "{a} not in {args:?}");
    }
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("mirrorflow-ops-sa")
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
    assert!(
        pod.node_selector.is_some()
            && pod.tolerations.is_some()
            && pod.topology_spread_constraints.is_some()
    );
    let aff = pod.affinity.as_ref().unwrap();
    assert!(aff.node_affinity.is_some() && aff.pod_anti_affinity.is_some());
    let meta = spec.template.metadata.as_ref().unwrap();
    assert_eq!(
        meta.labels
            .as_ref()
            .unwrap()
            .get("team")
            .map(String::as_str),
        Some("streaming")
    );
    assert!(meta
        .annotations
        .as_ref()
        .unwrap()
        .contains_key("example.com/scrape"));
    assert_eq!(
        c.resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0,
        "1"
    );

    let svc: Service = one(&docs, "Service");
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 9090);
    let sa: ServiceAccount = one(&docs, "ServiceAccount");
    assert_eq!(sa.metadata.name.as_deref(), Some("mirrorflow-ops-sa"));
    assert!(sa
        .metadata
        .annotations
        .unwrap()
        .contains_key("iam.example.com/role"));
    let pdb: PodDisruptionBudget = one(&docs, "PodDisruptionBudget");
    assert_eq!(
        pdb.spec.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("50%".into()))
    );

    // ServiceMonitors: the controller in its namespace, the workers in the watched one.
    let sms = untyped(&docs, "ServiceMonitor");
    assert_eq!(sms.len(), 2);
    for sm in &sms {
        assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
        let ep = &sm["spec"]["endpoints"][0];
        assert_eq!(
            (
                ep["port"].as_str(),
                ep["interval"].as_str(),
                ep["scrapeTimeout"].as_str()
            ),
            (Some("http"), Some("15s"), Some("5s"))
        );
    }
    let workers = sms
        .iter()
        .find(|s| s["metadata"]["name"] == "mirrorflow-ops-workers")
        .unwrap();
    assert_eq!(
        workers["spec"]["namespaceSelector"]["matchNames"],
        serde_yaml::from_str::<Yaml>("[kafka-mirroring, kafka-dr]").unwrap()
    );
    // The selector matches the labels the controller puts on every worker Service.
    let sel: BTreeMap<String, String> =
        serde_yaml::from_value(workers["spec"]["selector"]["matchLabels"].clone()).unwrap();
    let worker_labels = mirrorflow::controller::build::labels("any-flow");
    assert!(
        sel.iter().all(|(k, v)| worker_labels.get(k) == Some(v)),
        "{sel:?} vs {worker_labels:?}"
    );
    assert_eq!(
        workers["spec"]["endpoints"][0]["relabelings"][1]["sourceLabels"][0],
        "__meta_kubernetes_service_label_app_kubernetes_io_instance"
    );
    assert!(worker_labels.contains_key("app.kubernetes.io/instance"));

    let rule = untyped(&docs, "PrometheusRule")[0];
    let alerts = alerts_of(rule);
    let lag = alerts
        .iter()
        .find(|a| a["alert"] == "MirrorFlowReplicationLagHigh")
        .unwrap();
    assert!(
        lag["expr"].as_str().unwrap().ends_with("> 5000"),
        "{:?}",
        lag["expr"]
    );
    assert_eq!(lag["for"], "5m");
    let stale = alerts
        .iter()
        .find(|a| a["alert"] == "MirrorFlowCheckpointStale")
        .unwrap();
    assert!(stale["expr"].as_str().unwrap().ends_with("> 120"));
    assert_eq!(
        alerts
            .iter()
            .find(|a| a["alert"] == "MirrorFlowNotReady")
            .unwrap()["for"],
        "10m"
    );
    assert_eq!(
        alerts
            .iter()
            .find(|a| a["alert"] == "MirrorFlowWorkerDown")
            .unwrap()["for"],
        "3m"
    );

    let cm: ConfigMap = one(&docs, "ConfigMap");
    let labels = cm.metadata.labels.unwrap();
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        cm.metadata
            .annotations
            .unwrap()
            .get("grafana_folder")
            .map(String::as_str),
        Some("Kafka")
    );
    let dash: Json =
        serde_json::from_str(&cm.data.unwrap()["mirrorflow.json"]).expect("dashboard JSON parses");
    assert_eq!(
        dash,
        serde_json::from_str::<Json>(&read("charts/mirrorflow/dashboards/mirrorflow.json"))
            .unwrap()
    );
}

#[test]
fn switches_turn_objects_off() {
    let Some(helm) = tool("helm", "switches_turn_objects_off") else {
        return;
    };
    let docs = template(
        &helm,
        &[
            "--set",
            "rbac.create=false,serviceAccount.create=false,serviceAccount.name=existing-sa,podDisruptionBudget.enabled=false,leaderElection.enabled=false",
        ],
    )
    .unwrap();
    assert_eq!(
        kinds(&docs),
        ["Deployment", "Service"].map(String::from).into()
    );
    let d: Deployment = one(&docs, "Deployment");
    check_controller_pod(&d);
    let spec = d.spec.as_ref().unwrap();
    // One controller without a Lease: never two pods at once, not even during an upgrade.
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate")
    );
    let args = args_of(&d);
    assert!(
        args.contains(&"--leader-election=off".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--lease-name")),
        "{args:?}"
    );
    assert_eq!(
        spec.template
            .spec
            .as_ref()
            .unwrap()
            .service_account_name
            .as_deref(),
        Some("existing-sa")
    );

    // Leader election on, cluster RBAC off: the Lease Role goes with rbac.create too.
    let docs = template(&helm, &["--set", "rbac.create=false"]).unwrap();
    assert!(untyped(&docs, "Role").is_empty() && untyped(&docs, "ClusterRole").is_empty());
}
