//! Packaging: the Helm chart (`charts/mirrorflow`), the plain manifests in `deploy/`, the
//! Dockerfile and the helper scripts stay correct and consistent with the controller's code.
//!
//! Tests that run `helm` or `kubectl` find them in `$MIRRORFLOW_TOOLS_DIR/bin` (default
//! `~/.local/mirrorflow-tools/bin`, filled by `scripts/install-helm.sh`), else on `PATH`. When
//! they are missing the test prints a `SKIPPED` line, unless `CI=true` or
//! `MIRRORFLOW_REQUIRE_BROKERS=1`: then it fails.
//!
//! Regenerate `deploy/` and the chart's CRD copy with `scripts/render-deploy.sh` (or run these
//! tests with `UPDATE_GENERATED=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde_json::{json, Value as Json};
use serde_yaml::Value as Yaml;

const CHART: &str = "charts/mirrorflow";
const CRDS: &str = "crds/mirrorflow-crds.yaml";
const RELEASE: &str = "mirrorflow";
const NAMESPACE: &str = "mirrorflow-system";
const FULL_VALUES: &str = "charts/mirrorflow/ci/full-values.yaml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn update_generated() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some()
}

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

/// Missing tools fail instead of skipping in CI and under `scripts/test.sh`.
fn tools_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("MIRRORFLOW_REQUIRE_BROKERS")
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

fn tools_bin() -> PathBuf {
    match std::env::var_os("MIRRORFLOW_TOOLS_DIR") {
        Some(d) => PathBuf::from(d).join("bin"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".local/mirrorflow-tools/bin"),
    }
}

/// `name` from the tools dir (the pinned version), else from `PATH`.
fn find_tool(name: &str) -> Option<PathBuf> {
    let pinned = tools_bin().join(name);
    if pinned.is_file() {
        return Some(pinned);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The tool, or `None` after printing why the calling test is skipped.
fn tool(name: &str, test: &str) -> Option<PathBuf> {
    match find_tool(name) {
        Some(p) => Some(p),
        None if tools_required() => {
            panic!("{name} not found (needed by {test}; CI=true or MIRRORFLOW_REQUIRE_BROKERS=1): run scripts/install-helm.sh")
        }
        None => {
            eprintln!("SKIPPED {test}: {name} not found; run scripts/install-helm.sh");
            None
        }
    }
}

/// Runs a command in the crate root: `Ok(stdout)` or `Err(stderr)`.
fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 output"))
    } else {
        Err(format!(
            "{} {args:?} failed ({}):\n{}{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `helm template` of the chart as release `mirrorflow` in `mirrorflow-system`.
fn template(helm: &Path, extra: &[&str]) -> Result<Vec<Yaml>, String> {
    let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE];
    args.extend_from_slice(extra);
    run(helm, &args).map(|s| parse_docs(&s))
}

fn parse_docs(text: &str) -> Vec<Yaml> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML parses"))
        .filter(|v: &Yaml| !v.is_null())
        .collect()
}

fn kind_name(doc: &Yaml) -> (String, String) {
    let s = |v: &Yaml| v.as_str().unwrap_or_default().to_string();
    (s(&doc["kind"]), s(&doc["metadata"]["name"]))
}

fn kinds(docs: &[Yaml]) -> BTreeSet<String> {
    docs.iter().map(|d| kind_name(d).0).collect()
}

/// Every object of `kind`, as a typed k8s-openapi value (apiVersion and kind are checked by
/// the deserializer).
fn all<T: DeserializeOwned>(docs: &[Yaml], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| {
            serde_yaml::from_value(d.clone())
                .unwrap_or_else(|e| panic!("{kind} {:?} does not parse: {e}", kind_name(d).1))
        })
        .collect()
}

fn one<T: DeserializeOwned>(docs: &[Yaml], kind: &str) -> T {
    let mut v = all::<T>(docs, kind);
    assert_eq!(v.len(), 1, "expected exactly one {kind}");
    v.remove(0)
}

fn untyped<'a>(docs: &'a [Yaml], kind: &str) -> Vec<&'a Yaml> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

// ---------------------------------------------------------------------------------------------
// Files that must stay copies of each other
// ---------------------------------------------------------------------------------------------

#[test]
fn chart_and_deploy_crds_are_byte_identical_to_generated_crds() {
    let want = read(CRDS);
    for copy in [
        "charts/mirrorflow/crds/mirrorflow-crds.yaml",
        "deploy/crds.yaml",
    ] {
        if update_generated() {
            std::fs::write(root().join(copy), &want).unwrap();
        }
        let have = std::fs::read_to_string(root().join(copy)).unwrap_or_default();
        assert!(
            have == want,
            "{copy} differs from {CRDS}: run scripts/render-deploy.sh (after `cargo run -- crdgen > {CRDS}`)"
        );
    }
    // A chart without its CRDs installs a controller that cannot start its watches.
    let names: BTreeSet<String> = parse_docs(&want)
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| kind_name(d).1)
        .collect();
    assert_eq!(
        names,
        [
            "mirrorflows.mirrorflow.io",
            "offsetcheckpoints.mirrorflow.io"
        ]
        .map(String::from)
        .into(),
        "{CRDS} must define both CRDs: run `cargo run -- crdgen > {CRDS}`"
    );
    // Helm installs every file in crds/: nothing else may be there.
    let files: Vec<_> = std::fs::read_dir(root().join(CHART).join("crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, ["mirrorflow-crds.yaml"]);
}

#[test]
fn chart_app_version_and_image_match_the_binary() {
    let chart: Yaml = serde_yaml::from_str(&read("charts/mirrorflow/Chart.yaml")).unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml appVersion != Cargo.toml version"
    );
    // The chart's default image is the binary's default worker image, so deploy/ and a
    // controller started without MIRRORFLOW_IMAGE agree.
    let values: Yaml = serde_yaml::from_str(&read("charts/mirrorflow/values.yaml")).unwrap();
    let image = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap(),
        chart["appVersion"].as_str().unwrap()
    );
    assert_eq!(image, mirrorflow::controller::DEFAULT_WORKER_IMAGE);
    assert_eq!(values["image"]["tag"], "");
}

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
        (&["watchNamespace"], json!("Not_A_Namespace"), false),
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

fn env_value(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn env_field(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    let e = c.env.as_ref()?.iter().find(|e| e.name == name)?;
    Some(
        e.value_from
            .as_ref()?
            .field_ref
            .as_ref()?
            .field_path
            .clone(),
    )
}

/// The restricted Pod Security profile, and the probes, port and command the controller needs.
fn check_controller_pod(d: &Deployment) {
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true), "pod runAsNonRoot");
    assert_eq!(
        psc.run_as_user,
        Some(mirrorflow::controller::build::WORKER_UID),
        "same nonroot UID as the image and workers"
    );
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "seccompProfile"
    );
    assert_eq!(pod.automount_service_account_token, Some(true));
    assert!(pod.host_network.is_none() && pod.host_pid.is_none());

    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(
        sc.allow_privilege_escalation,
        Some(false),
        "allowPrivilegeEscalation"
    );
    assert_eq!(
        sc.read_only_root_filesystem,
        Some(true),
        "readOnlyRootFilesystem"
    );
    assert_eq!(sc.run_as_non_root, Some(true), "container runAsNonRoot");
    assert_eq!(sc.privileged, Some(false), "privileged");
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(caps.add.is_none());

    assert_eq!(c.command.as_deref(), Some(&["mirrorflow".to_string()][..]));
    let args = c.args.as_ref().unwrap();
    assert_eq!(args[0], "controller");
    assert!(
        args.contains(&"--listen=0.0.0.0:8080".to_string()),
        "{args:?}"
    );
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("http"), 8080)
    );
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some("/healthz"));
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into())
        );
    }
    let res = c.resources.as_ref().unwrap();
    assert!(res
        .requests
        .as_ref()
        .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")));
    assert!(res
        .limits
        .as_ref()
        .is_some_and(|r| r.contains_key("memory")));
    assert_eq!(env_field(c, "POD_NAME").as_deref(), Some("metadata.name"));
    assert_eq!(
        env_field(c, "POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    // The read-only root filesystem leaves /tmp as the only writable path.
    let mounts = c.volume_mounts.as_ref().unwrap();
    assert_eq!(
        mounts
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect::<Vec<_>>(),
        ["/tmp"]
    );
}

fn args_of(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap()
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
        "watchNamespace set: no cluster RBAC"
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
        "--namespace=kafka-mirroring",
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
        workers["spec"]["namespaceSelector"]["matchNames"][0],
        "kafka-mirroring"
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

// ---------------------------------------------------------------------------------------------
// RBAC: least privilege, but enough for what the controller does
// ---------------------------------------------------------------------------------------------

/// Does `rules` allow `verb` on `group`/`resource` (optionally one named object)?
fn allows(
    rules: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    rules.iter().any(|r| {
        let has =
            |v: &Option<Vec<String>>, x: &str| v.as_ref().is_some_and(|v| v.iter().any(|i| i == x));
        has(&r.api_groups, group)
            && has(&r.resources, resource)
            && r.verbs.iter().any(|v| v == verb)
            && match (&r.resource_names, name) {
                (None, _) => true,
                (Some(names), Some(n)) => names.iter().any(|i| i == n),
                (Some(_), None) => false,
            }
    })
}

fn gr<K: kube::Resource<DynamicType = ()>>() -> (String, String) {
    (K::group(&()).to_string(), K::plural(&()).to_string())
}

/// What the controller's code does with the API, from ARCHITECTURE.md and src/controller/.
fn check_controller_rules(rules: &[PolicyRule], what: &str) {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use mirrorflow::api::{MirrorFlow, OffsetCheckpoint};
    let need = |group: &str, resource: &str, verbs: &[&str]| {
        for v in verbs {
            assert!(
                allows(rules, group, resource, v, None),
                "{what}: {v} {group}/{resource} not allowed"
            );
        }
    };
    let (g, flows) = gr::<MirrorFlow>();
    let (_, checkpoints) = gr::<OffsetCheckpoint>();
    need(&g, &flows, &["get", "list", "watch"]);
    need(&g, &checkpoints, &["list", "watch"]);
    need(&g, &format!("{flows}/status"), &["patch"]);
    need(&g, &format!("{checkpoints}/status"), &["patch"]);
    need(&g, &format!("{flows}/finalizers"), &["update"]);
    // Children: server-side apply (patch, create when new), watched through `owns`.
    for (g, r) in [
        gr::<ConfigMap>(),
        gr::<Service>(),
        gr::<ServiceAccount>(),
        gr::<Role>(),
        gr::<RoleBinding>(),
        gr::<StatefulSet>(),
    ] {
        need(&g, &r, &["list", "watch", "create", "patch"]);
    }
    need("apps", "statefulsets", &["get"]);
    let (g, pods) = gr::<Pod>();
    need(&g, &pods, &["list"]);
    need("events.k8s.io", "events", &["create", "patch"]);

    // Least privilege: no wildcards, no Secrets, nothing deleted, no RBAC escalation verbs.
    for r in rules {
        let all: Vec<&String> = r
            .api_groups
            .iter()
            .chain(&r.resources)
            .flatten()
            .chain(&r.verbs)
            .collect();
        assert!(
            !all.iter().any(|s| s.as_str() == "*"),
            "{what}: wildcard in {r:?}"
        );
        assert!(
            !r.resources.iter().flatten().any(|s| s == "secrets"),
            "{what}: Secret access in {r:?}"
        );
        for v in [
            "delete",
            "deletecollection",
            "escalate",
            "bind",
            "impersonate",
        ] {
            assert!(!r.verbs.iter().any(|x| x == v), "{what}: {v} in {r:?}");
        }
    }

    // The Role the controller creates for each flow's workers must be within its own rights:
    // the API server refuses to let it grant more (no `escalate`/`bind`).
    let mut flow = mirrorflow::api::load_flow_file(&root().join("examples/full-flow.yaml"))
        .unwrap()
        .flow;
    flow.metadata.namespace = Some("kafka-mirroring".into());
    flow.metadata.uid = Some("0b7c1d0e-0000-4000-8000-000000000001".into());
    let children = mirrorflow::controller::build::build_children(
        &flow,
        &[],
        &mirrorflow::controller::build::BuildSettings {
            worker_image: "mirrorflow:test".into(),
        },
        mirrorflow::controller::build::ScalePlan {
            replicas: 1,
            worker_count: 1,
            draining: None,
        },
    )
    .expect("children of a flow with namespace and uid");
    let granted = children.role.rules.unwrap();
    assert!(!granted.is_empty());
    for rule in &granted {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    match &rule.resource_names {
                        None => assert!(
                            allows(rules, group, resource, verb, None),
                            "{what}: cannot grant {verb} {group}/{resource}"
                        ),
                        Some(names) => {
                            for n in names {
                                assert!(
                                    allows(rules, group, resource, verb, Some(n)),
                                    "{what}: cannot grant {verb} {group}/{resource} {n}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

fn check_lease_role(docs: &[Yaml], lease: &str) {
    let roles: Vec<Role> = all(docs, "Role");
    let r = roles
        .iter()
        .find(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-leader-election"))
        })
        .expect("leader-election Role");
    assert_eq!(
        r.metadata.namespace.as_deref(),
        Some(NAMESPACE),
        "the Lease lives in the controller's namespace"
    );
    let rules = r.rules.as_ref().unwrap();
    for v in ["get", "update"] {
        assert!(
            allows(rules, "coordination.k8s.io", "leases", v, Some(lease)),
            "{v} lease {lease}"
        );
        assert!(
            !allows(
                rules,
                "coordination.k8s.io",
                "leases",
                v,
                Some("someone-elses-lease")
            ),
            "{v} is limited to {lease}"
        );
    }
    assert!(allows(
        rules,
        "coordination.k8s.io",
        "leases",
        "create",
        None
    ));
    let bindings: Vec<RoleBinding> = all(docs, "RoleBinding");
    let b = bindings
        .iter()
        .find(|b| b.role_ref.name == r.metadata.name.clone().unwrap())
        .unwrap();
    assert_eq!(b.metadata.namespace, r.metadata.namespace);
}

#[test]
fn cluster_rbac_covers_the_controller_and_nothing_more() {
    let Some(helm) = tool(
        "helm",
        "cluster_rbac_covers_the_controller_and_nothing_more",
    ) else {
        return;
    };
    let docs = template(&helm, &[]).unwrap();
    let cr: ClusterRole = one(&docs, "ClusterRole");
    check_controller_rules(cr.rules.as_ref().unwrap(), "ClusterRole");
    let crb: ClusterRoleBinding = one(&docs, "ClusterRoleBinding");
    assert_eq!(crb.role_ref.name, cr.metadata.name.unwrap());
    let subject = &crb.subjects.unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "mirrorflow", Some(NAMESPACE))
    );
    check_lease_role(&docs, "mirrorflow");
}

#[test]
fn namespaced_rbac_covers_the_controller_in_the_watched_namespace() {
    let Some(helm) = tool(
        "helm",
        "namespaced_rbac_covers_the_controller_in_the_watched_namespace",
    ) else {
        return;
    };
    let docs = template(&helm, &["--set", "watchNamespace=kafka-mirroring"]).unwrap();
    let roles: Vec<Role> = all(&docs, "Role");
    let r = roles
        .iter()
        .find(|r| r.metadata.namespace.as_deref() == Some("kafka-mirroring"))
        .expect("Role in the watched namespace");
    check_controller_rules(r.rules.as_ref().unwrap(), "Role");
    let bindings: Vec<RoleBinding> = all(&docs, "RoleBinding");
    let b = bindings
        .iter()
        .find(|b| b.metadata.namespace.as_deref() == Some("kafka-mirroring"))
        .unwrap();
    assert_eq!(b.role_ref.kind, "Role");
    assert_eq!(
        b.subjects.as_ref().unwrap()[0].namespace.as_deref(),
        Some(NAMESPACE)
    );
    check_lease_role(&docs, "mirrorflow");
    assert!(args_of(&one(&docs, "Deployment")).contains(&"--namespace=kafka-mirroring".to_string()));
}

#[test]
fn every_rbac_rule_says_why() {
    let text = read("charts/mirrorflow/templates/rbac.yaml");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut rules = 0;
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("- apiGroups:") {
            rules += 1;
            let prev = lines[..i]
                .iter()
                .rev()
                .find(|p| !p.is_empty())
                .copied()
                .unwrap_or_default();
            assert!(
                prev.starts_with('#'),
                "rule at line {} of templates/rbac.yaml has no comment above it",
                i + 1
            );
        }
    }
    assert!(rules >= 10, "found {rules} rules");
}

// ---------------------------------------------------------------------------------------------
// Alerts, dashboard and the metric names they assume
// ---------------------------------------------------------------------------------------------

fn alerts_of(rule: &Yaml) -> Vec<Yaml> {
    rule["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

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
    ] {
        assert!(names.contains(want), "{want} missing: {names:?}");
    }
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

// ---------------------------------------------------------------------------------------------
// deploy/: rendered by scripts/render-deploy.sh, kustomize-ready
// ---------------------------------------------------------------------------------------------

fn dir_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn deploy_dir_is_fresh() {
    let Some(helm) = tool("helm", "deploy_dir_is_fresh") else {
        return;
    };
    let bash = PathBuf::from("bash");
    let tmp = tempfile::tempdir().unwrap();
    let run_script = |args: &[&str]| {
        let out = Command::new(&bash)
            .arg("scripts/render-deploy.sh")
            .args(args)
            .env("HELM", &helm)
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "render-deploy.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if update_generated() {
        run_script(&[]);
    }
    run_script(&[tmp.path().to_str().unwrap()]);
    let want = dir_files(tmp.path());
    let have = dir_files(&root().join("deploy"));
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "deploy/ has other files than scripts/render-deploy.sh writes"
    );
    for (name, text) in &want {
        assert!(
            &have[name] == text,
            "deploy/{name} is stale: run scripts/render-deploy.sh and commit the result"
        );
    }
}

/// The overlay example of docs/PACKAGING.md: the first ```yaml block after the line
/// "<!-- overlay-example -->". It lives in `overlay/` next to a checkout named `mirrorflow`.
fn overlay_example() -> String {
    let md = read("docs/PACKAGING.md");
    let after = md
        .split_once("<!-- overlay-example -->")
        .expect("overlay example marker in docs/PACKAGING.md")
        .1;
    let block = after
        .split_once("```yaml\n")
        .unwrap()
        .1
        .split_once("```")
        .unwrap()
        .0;
    assert!(
        block.contains("../mirrorflow/deploy"),
        "the example refers to ../mirrorflow/deploy"
    );
    block.to_string()
}

#[test]
fn kustomize_builds_deploy_and_the_documented_overlay() {
    let Some(kubectl) = tool(
        "kubectl",
        "kustomize_builds_deploy_and_the_documented_overlay",
    ) else {
        return;
    };
    let docs = parse_docs(&run(&kubectl, &["kustomize", "deploy"]).unwrap());
    let k = kinds(&docs);
    for want in [
        "Namespace",
        "CustomResourceDefinition",
        "Deployment",
        "ClusterRole",
    ] {
        assert!(
            k.contains(want),
            "{want} missing from kubectl kustomize deploy: {k:?}"
        );
    }
    let ns = untyped(&docs, "Namespace")[0];
    assert_eq!(ns["metadata"]["name"], NAMESPACE);
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    check_controller_pod(&one(&docs, "Deployment"));

    // kustomize takes bases by relative path only: lay out <tmp>/mirrorflow -> this checkout and
    // <tmp>/overlay/kustomization.yaml, as the docs do.
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root(), tmp.path().join("mirrorflow")).unwrap();
    let overlay = tmp.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), overlay_example()).unwrap();
    let docs = parse_docs(&run(&kubectl, &["kustomize", overlay.to_str().unwrap()]).unwrap());
    let d: Deployment = one(&docs, "Deployment");
    check_controller_pod(&d);
    let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/kafka/mirrorflow:0.1.0")
    );
    assert_eq!(
        env_value(c, "MIRRORFLOW_IMAGE").as_deref(),
        Some("registry.example.com/kafka/mirrorflow:0.1.0")
    );
    // The strategic merge patch replaced one env var and kept the others.
    assert_eq!(env_field(c, "POD_NAME").as_deref(), Some("metadata.name"));
}

// ---------------------------------------------------------------------------------------------
// Dockerfile and scripts
// ---------------------------------------------------------------------------------------------

#[test]
fn dockerfile_builds_a_nonroot_image_the_controller_can_start_workers_from() {
    let text = read("Dockerfile");
    let stages: Vec<&str> = text.split("\nFROM ").skip(1).collect();
    assert_eq!(stages.len(), 2, "multi-stage: build and runtime");
    assert!(stages[0].contains("cargo build --release --locked --bin mirrorflow"));
    let runtime = stages[1];
    // Workers run `mirrorflow worker ...` (command from PATH) as WORKER_UID.
    assert!(runtime.contains("/usr/local/bin/mirrorflow"));
    let uid = mirrorflow::controller::build::WORKER_UID;
    assert!(
        runtime.contains(&format!("\nUSER {uid}:{uid}\n")),
        "numeric non-root USER {uid}"
    );
    assert!(
        runtime.contains("RUN mirrorflow --version"),
        "smoke test of the runtime image"
    );
    // The shared libraries the binary links besides libc (see `ldd target/debug/mirrorflow`).
    for lib in ["libssl3", "zlib1g", "ca-certificates"] {
        assert!(runtime.contains(lib), "runtime image lacks {lib}");
    }
    let ignore = read(".dockerignore");
    assert!(
        ignore.lines().any(|l| l.trim() == "target/"),
        ".dockerignore must exclude target/"
    );
}

#[test]
fn scripts_parse() {
    for s in ["scripts/install-helm.sh", "scripts/render-deploy.sh"] {
        let out = Command::new("bash")
            .args(["-n", s])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{s}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = read(s);
        assert!(
            text.starts_with("#!/usr/bin/env bash\n") && text.contains("set -euo pipefail"),
            "{s}: header"
        );
    }
}
