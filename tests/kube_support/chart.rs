//! Rendering the Helm chart the way the tests and the end-to-end suite do: `helm template` as
//! release `mirrorflow` in `mirrorflow-system`, and typed access to the rendered objects.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use serde::de::DeserializeOwned;
use serde_yaml::Value as Yaml;

use super::tools::run;

pub const CHART: &str = "charts/mirrorflow";
pub const CRDS: &str = "crds/mirrorflow-crds.yaml";
pub const RELEASE: &str = "mirrorflow";
pub const NAMESPACE: &str = "mirrorflow-system";
pub const FULL_VALUES: &str = "charts/mirrorflow/ci/full-values.yaml";

/// Regenerate what is stale instead of failing (`UPDATE_GENERATED=1`).
pub fn update_generated() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some()
}

/// `helm template` of the chart as release `mirrorflow` in `mirrorflow-system`.
pub fn template(helm: &Path, extra: &[&str]) -> Result<Vec<Yaml>, String> {
    let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE];
    args.extend_from_slice(extra);
    run(helm, &args).map(|s| parse_docs(&s))
}

pub fn parse_docs(text: &str) -> Vec<Yaml> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML parses"))
        .filter(|v: &Yaml| !v.is_null())
        .collect()
}

pub fn kind_name(doc: &Yaml) -> (String, String) {
    let s = |v: &Yaml| v.as_str().unwrap_or_default().to_string();
    (s(&doc["kind"]), s(&doc["metadata"]["name"]))
}

pub fn kinds(docs: &[Yaml]) -> BTreeSet<String> {
    docs.iter().map(|d| kind_name(d).0).collect()
}

/// Every object of `kind`, as a typed k8s-openapi value (apiVersion and kind are checked by
/// the deserializer).
pub fn all<T: DeserializeOwned>(docs: &[Yaml], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| {
            serde_yaml::from_value(d.clone())
                .unwrap_or_else(|e| panic!("{kind} {:?} does not parse: {e}", kind_name(d).1))
        })
        .collect()
}

pub fn one<T: DeserializeOwned>(docs: &[Yaml], kind: &str) -> T {
    let mut v = all::<T>(docs, kind);
    assert_eq!(v.len(), 1, "expected exactly one {kind}");
    v.remove(0)
}

pub fn untyped<'a>(docs: &'a [Yaml], kind: &str) -> Vec<&'a Yaml> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub fn env_value(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

pub fn env_field(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
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
pub fn check_controller_pod(d: &Deployment) {
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

pub fn args_of(d: &Deployment) -> Vec<String> {
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

/// The alert rules of a rendered PrometheusRule.
pub fn alerts_of(rule: &Yaml) -> Vec<Yaml> {
    rule["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

/// Installs the chart as a user does (`helm template --include-crds`, server-side applied as
/// field manager `helm`) and waits for the CRDs; returns the rendered controller Deployment
/// and ClusterRole.
pub async fn install(
    cluster: &super::cluster::Cluster,
) -> (Yaml, k8s_openapi::api::rbac::v1::ClusterRole) {
    cluster.namespace(NAMESPACE).await;
    let rendered = run(
        &cluster.helm,
        &[
            "template",
            RELEASE,
            CHART,
            "--namespace",
            NAMESPACE,
            "--include-crds",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .kubectl_stdin(
            &["apply", "--server-side", "--field-manager=helm", "-f", "-"],
            Some(&rendered),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/mirrorflows.mirrorflow.io",
        "crd/offsetcheckpoints.mirrorflow.io",
        "--timeout=60s",
    ]);
    let docs = parse_docs(&rendered);
    let deployment = docs
        .iter()
        .find(|d| kind_name(d).0 == "Deployment")
        .expect("the chart renders the controller Deployment")
        .clone();
    let role = docs
        .iter()
        .find(|d| kind_name(d).0 == "ClusterRole")
        .map(|d| serde_yaml::from_value(d.clone()).unwrap())
        .expect("the default install has a ClusterRole");
    (deployment, role)
}
