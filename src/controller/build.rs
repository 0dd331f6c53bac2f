//! Desired children of a MirrorFlow, as pure functions of (flow, checkpoints, settings, scale
//! plan). Names, paths and the command line follow the contracts in `docs/ARCHITECTURE.md`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::api::{FieldError, MirrorFlow, MirrorFlowSpec, OffsetCheckpoint, GROUP, SECRETS_DIR};

/// Field manager of every server-side apply the controller makes.
pub const FIELD_MANAGER: &str = "mirrorflow-controller";
/// Pod template annotation whose change rolls the workers.
pub const SPEC_HASH_ANNOTATION: &str = "mirrorflow.io/spec-hash";
/// StatefulSet annotation: the `--worker-count` its pod template runs with (drives the
/// scale-to-zero-first rule).
pub const WORKER_COUNT_ANNOTATION: &str = "mirrorflow.io/worker-count";
/// Key of the rendered flow in the ConfigMap.
pub const CONFIG_KEY: &str = "flow.yaml";
/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/mirrorflow";
/// Worker HTTP port (metrics, /healthz, /readyz), named `http`.
pub const HTTP_PORT: i32 = 8080;
/// Grace period for a worker to commit its transaction and leave.
pub const TERMINATION_GRACE_SECONDS: i64 = 30;
/// UID/GID the worker runs as (distroless `nonroot`); the restricted profile forbids root.
pub const WORKER_UID: i64 = 65532;
/// Longest flow name whose children stay legal: the StatefulSet `<flow>-worker` must leave
/// room for the `controller-revision-hash` label (`<sts>-<10 char hash>`, 63 max), which
/// limits StatefulSet names to 52 characters. The CRD schema enforces it too.
pub use crate::api::MAX_FLOW_NAME_LEN;
/// CPU request of a worker whose flow sets no `workers.resources`.
pub const DEFAULT_CPU_REQUEST: &str = "100m";
/// Memory a worker needs besides its window, `inFlightMiB`: measured peak RSS is the window
/// plus 16-29 MiB at 1,000 partitions (benches/replication.rs), so 43 leaves room; the limit
/// is twice the request. (48 before the window counted the consumer's prefetch.)
pub const BASE_MEMORY_MIB: i32 = 43;

/// Label keys and values shared by all children.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const APP_NAME: &str = "mirrorflow";
pub const COMPONENT_WORKER: &str = "worker";

/// Controller-wide settings the children depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSettings {
    /// Image used when `spec.workers.image` is not set.
    pub worker_image: String,
    /// Images a flow may name in `spec.workers.image` (see [`check_worker_image`]); empty
    /// allows every image.
    pub image_allowlist: Vec<String>,
}

/// Whether `image` is allowed by `allowlist`: empty allows all; an entry allows the image
/// it spells exactly, or, ending in `*`, every image that starts with what precedes the
/// `*` (e.g. `registry.example.com/mirrorflow:*`, `registry.example.com/mirrorflow@sha256:*`).
/// Compared as written (no registry or tag normalisation), so write entries the way flows
/// name images. Pure.
pub fn image_allowed(image: &str, allowlist: &[String]) -> bool {
    allowlist.is_empty()
        || allowlist.iter().any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == entry,
        })
}

/// `spec.workers.image` against the operator's allowlist (the controller's own worker image
/// is always allowed). Worker pods get the flow's Secrets mounted: without a list, anyone
/// who may create a MirrorFlow (but not read Secrets) could run an image of their choice
/// with those Secrets, or send them to a broker of their choice.
pub fn check_worker_image(
    spec: &MirrorFlowSpec,
    settings: &BuildSettings,
) -> Result<(), FieldError> {
    match &spec.workers.image {
        Some(image)
            if *image != settings.worker_image
                && !image_allowed(image, &settings.image_allowlist) =>
        {
            Err(FieldError {
                field: "spec.workers.image".into(),
                value: image.clone(),
                message: format!(
                    "is not in the operator's worker image allowlist ({}); remove spec.workers.image to use the operator's image, or ask the operator's administrators to allow it (chart value workerImageAllowlist)",
                    settings.image_allowlist.join(", ")
                ),
            })
        }
        _ => Ok(()),
    }
}

/// Name of the StatefulSet, headless Service, ServiceAccount, Role and RoleBinding.
pub fn worker_name(flow: &str) -> String {
    format!("{flow}-worker")
}

/// Name of the rendered-config ConfigMap.
pub fn config_map_name(flow: &str) -> String {
    format!("{flow}-worker-config")
}

/// The label set every child carries.
pub fn labels(flow: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(flow);
    l.insert(LABEL_MANAGED_BY.into(), FIELD_MANAGER.into());
    l
}

/// The labels selecting a flow's worker pods (immutable StatefulSet selector: no
/// `managed-by`, so a change of manager never needs a new StatefulSet).
pub fn selector_labels(flow: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.into(), APP_NAME.into()),
        (LABEL_INSTANCE.into(), flow.into()),
        (LABEL_COMPONENT.into(), COMPONENT_WORKER.into()),
    ])
}

/// `k=v,k=v` form of [`selector_labels`], for list calls.
pub fn selector_string(flow: &str) -> String {
    selector_labels(flow)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Is `s` a DNS-1035 label (what a Service name must be): 1-63 lowercase letters, digits or
/// '-', starting with a letter and ending with a letter or digit.
pub fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

/// Checks the flow name can form its children's names (the spec validator cannot see
/// metadata; the CRD schema refuses such names too, this catches flows created before).
pub fn check_flow_name(name: &str) -> Result<(), FieldError> {
    let error = |message: String| FieldError {
        field: "metadata.name".into(),
        value: name.into(),
        message,
    };
    if name.len() > MAX_FLOW_NAME_LEN {
        return Err(error(format!(
            "must be at most {MAX_FLOW_NAME_LEN} characters so the StatefulSet {:?} and its pod labels stay within Kubernetes limits",
            worker_name(name)
        )));
    }
    if !is_dns1035_label(&worker_name(name)) {
        return Err(error(format!(
            "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) so the Service {:?} is a legal name",
            worker_name(name)
        )));
    }
    Ok(())
}

/// Resources of a worker: the flow's `workers.resources`, else requests of
/// [`DEFAULT_CPU_REQUEST`] and [`BASE_MEMORY_MIB`] + `inFlightMiB`, and a memory limit of
/// twice that (no BestEffort pods, and no CPU limit, which only throttles).
pub fn worker_resources(spec: &MirrorFlowSpec) -> ResourceRequirements {
    if let Some(r) = &spec.workers.resources {
        let set =
            |m: &Option<BTreeMap<String, Quantity>>| m.as_ref().is_some_and(|m| !m.is_empty());
        if set(&r.requests) || set(&r.limits) {
            return r.clone();
        }
    }
    let memory = BASE_MEMORY_MIB + spec.workers.in_flight_mib.max(1);
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(DEFAULT_CPU_REQUEST.into())),
            ("memory".to_string(), Quantity(format!("{memory}Mi"))),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity(format!("{}Mi", 2 * memory)),
        )])),
        ..Default::default()
    }
}

/// Hash of the spec fields whose change needs a worker restart: everything but `paused`,
/// `reset` and `workers.replicas` (workers read those live; replicas goes through the
/// scale-to-zero rule). FNV-1a over canonical JSON, so it is stable across processes and
/// Rust versions.
pub fn spec_hash(spec: &MirrorFlowSpec) -> String {
    let mut v = serde_json::to_value(spec).expect("MirrorFlowSpec serializes");
    if let Some(obj) = v.as_object_mut() {
        obj.remove("paused");
        obj.remove("reset");
        if let Some(w) = obj.get_mut("workers").and_then(|w| w.as_object_mut()) {
            w.remove("replicas");
        }
    }
    json_hash(&v)
}

/// FNV-1a of a JSON value's canonical text (serde_json's maps are sorted: no
/// preserve_order feature), as 16 hex digits: stable across processes and Rust versions.
pub(crate) fn json_hash(v: &serde_json::Value) -> String {
    let bytes = serde_json::to_vec(v).expect("JSON value serializes");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Secrets the flow references: Secret name → keys, sorted. Each Secret is mounted at
/// `SECRETS_DIR/<name>/` with only these keys projected.
pub fn referenced_secrets(spec: &MirrorFlowSpec) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for cluster in [&spec.source, &spec.target] {
        for (secret, key) in cluster.secret_keys() {
            out.entry(secret.to_string())
                .or_default()
                .insert(key.to_string());
        }
    }
    out
}

/// The OffsetCheckpoints of `flow` (same namespace, `spec.flowRef.name == flow`), sorted by
/// name so the rendered config is deterministic.
pub fn checkpoints_of<'a>(
    flow: &MirrorFlow,
    all: &'a [OffsetCheckpoint],
) -> Vec<&'a OffsetCheckpoint> {
    let name = flow.name_any();
    let ns = flow.namespace();
    let mut out: Vec<_> = all
        .iter()
        .filter(|cp| cp.spec.flow_ref.name == name && cp.namespace() == ns)
        .collect();
    out.sort_by_key(|cp| cp.name_any());
    out
}

/// The ConfigMap's `flow.yaml`: the MirrorFlow (name, namespace, spec — secrets only by
/// reference, no status) followed by its OffsetCheckpoints, as multi-document YAML that
/// `api::parse_flow_file` reads back.
pub fn render_config(flow: &MirrorFlow, checkpoints: &[&OffsetCheckpoint]) -> String {
    let mut out = String::new();
    let mut f = MirrorFlow::new(&flow.name_any(), flow.spec.clone());
    f.metadata.namespace = flow.namespace();
    out.push_str("---\n");
    out.push_str(&serde_yaml::to_string(&f).expect("MirrorFlow serializes"));
    for cp in checkpoints {
        let mut c = OffsetCheckpoint::new(&cp.name_any(), cp.spec.clone());
        c.metadata.namespace = cp.namespace();
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&c).expect("OffsetCheckpoint serializes"));
    }
    out
}

/// What the controller sees of the existing workers, input to [`plan_scale`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedWorkers {
    /// The StatefulSet's `spec.replicas`.
    pub statefulset_replicas: i32,
    /// The `--worker-count` its template runs with (annotation); `None` for a StatefulSet
    /// without it, which is taken to run with `statefulset_replicas`.
    pub worker_count: Option<i32>,
    /// Worker pods that still exist, terminating ones included.
    pub pods: usize,
}

/// How many pods to run and with which `--worker-count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalePlan {
    /// StatefulSet `spec.replicas` to apply.
    pub replicas: i32,
    /// `--worker-count` to render into the pod template.
    pub worker_count: i32,
    /// Set while old workers drain before a resize: `(from, to)`.
    pub draining: Option<(i32, i32)>,
}

/// The scale-to-zero-first rule. A worker owns the partitions `hash % worker_count == index`;
/// with N→M, old and new workers would disagree on ownership, so the StatefulSet goes to 0
/// (keeping the old worker count in its template, so no pod is re-created with the new one)
/// and only when no pod remains does it go to M.
pub fn plan_scale(desired: i32, observed: Option<ObservedWorkers>) -> ScalePlan {
    let steady = ScalePlan {
        replicas: desired,
        worker_count: desired,
        draining: None,
    };
    let Some(o) = observed else { return steady };
    let current = o.worker_count.unwrap_or(o.statefulset_replicas);
    if current == desired {
        return steady;
    }
    if o.statefulset_replicas == 0 && o.pods == 0 {
        // Drained (or the StatefulSet was at 0 anyway): nobody owns a partition.
        return steady;
    }
    ScalePlan {
        replicas: 0,
        worker_count: current,
        draining: Some((current, desired)),
    }
}

/// Every child of a flow, ready for server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    pub config_map: ConfigMap,
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub service: Service,
    pub stateful_set: StatefulSet,
    /// At most one worker of the flow down for a voluntary disruption (a node drain): a
    /// stopped worker's partitions wait for it.
    pub disruption_budget: PodDisruptionBudget,
}

/// Build the desired children. The flow must have a name, a namespace and a uid (it comes
/// from the API server); `None` otherwise.
pub fn build_children(
    flow: &MirrorFlow,
    checkpoints: &[&OffsetCheckpoint],
    settings: &BuildSettings,
    plan: ScalePlan,
) -> Option<Children> {
    let owner = flow.controller_owner_ref(&())?;
    let ns = flow.namespace()?;
    let name = flow.name_any();
    let meta = |n: String| ObjectMeta {
        name: Some(n),
        namespace: Some(ns.clone()),
        labels: Some(labels(&name)),
        owner_references: Some(vec![owner.clone()]),
        ..Default::default()
    };
    Some(Children {
        config_map: ConfigMap {
            metadata: meta(config_map_name(&name)),
            data: Some(BTreeMap::from([(
                CONFIG_KEY.to_string(),
                render_config(flow, checkpoints),
            )])),
            ..Default::default()
        },
        service_account: ServiceAccount {
            metadata: meta(worker_name(&name)),
            automount_service_account_token: Some(true),
            ..Default::default()
        },
        role: Role {
            metadata: meta(worker_name(&name)),
            rules: Some(worker_rules(&name)),
        },
        role_binding: RoleBinding {
            metadata: meta(worker_name(&name)),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: worker_name(&name),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: worker_name(&name),
                namespace: Some(ns.clone()),
                ..Default::default()
            }]),
        },
        service: Service {
            metadata: meta(worker_name(&name)),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(selector_labels(&name)),
                // Scrape metrics of workers that are not ready too: that is when they matter.
                publish_not_ready_addresses: Some(true),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: HTTP_PORT,
                    target_port: Some(IntOrString::String("http".into())),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
        disruption_budget: PodDisruptionBudget {
            metadata: meta(worker_name(&name)),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(LabelSelector {
                    match_labels: Some(selector_labels(&name)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        stateful_set: stateful_set(flow, &ns, owner, settings, plan),
    })
}

/// Least privilege: read and watch its own flow (list is needed by watches; with
/// `resourceNames` the worker must list/watch with `fieldSelector=metadata.name=<flow>`), patch
/// its own status entry. Secrets are mounted, so no Secret access at all.
fn worker_rules(flow: &str) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(vec![GROUP.into()]),
            resources: Some(vec!["mirrorflows".into()]),
            resource_names: Some(vec![flow.into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(vec![GROUP.into()]),
            resources: Some(vec!["mirrorflows/status".into()]),
            resource_names: Some(vec![flow.into()]),
            verbs: vec!["get".into(), "patch".into()],
            ..Default::default()
        },
    ]
}

fn stateful_set(
    flow: &MirrorFlow,
    ns: &str,
    owner: OwnerReference,
    settings: &BuildSettings,
    plan: ScalePlan,
) -> StatefulSet {
    let name = flow.name_any();
    let spec = &flow.spec;
    let image = spec
        .workers
        .image
        .clone()
        .unwrap_or_else(|| settings.worker_image.clone());
    let (volumes, mounts) = worker_volumes(&name, &referenced_secrets(spec));
    let container = worker_container(
        image,
        worker_args(ns, &name, plan.worker_count),
        worker_resources(spec),
        mounts,
    );
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(worker_name(&name)),
            namespace: Some(ns.into()),
            labels: Some(labels(&name)),
            annotations: Some(BTreeMap::from([(
                WORKER_COUNT_ANNOTATION.to_string(),
                plan.worker_count.to_string(),
            )])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(plan.replicas),
            service_name: Some(worker_name(&name)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..Default::default()
            },
            // Ordinals are partition owners, not a start order: start and stop them together.
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
                    annotations: Some(BTreeMap::from([(
                        SPEC_HASH_ANNOTATION.to_string(),
                        spec_hash(spec),
                    )])),
                    ..Default::default()
                }),
                spec: Some(worker_pod_spec(&name, container, volumes)),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The worker pod's volumes and the container's mounts: the rendered flow (ConfigMap), a
/// writable `/tmp`, and each referenced Secret (only the keys the flow names) under
/// `SECRETS_DIR/<secret>/<key>`.
fn worker_volumes(
    flow: &str,
    secrets: &BTreeMap<String, BTreeSet<String>>,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(flow),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    // No subPath: ConfigMap updates must reach the running workers.
    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    ];
    // Secret names may be 253 characters with dots; volume names are DNS labels, so index them.
    for (i, (secret, keys)) in secrets.iter().enumerate() {
        let vol = format!("secret-{i}");
        volumes.push(Volume {
            name: vol.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                items: Some(
                    keys.iter()
                        .map(|k| KeyToPath {
                            key: k.clone(),
                            path: k.clone(),
                            mode: None,
                        })
                        .collect(),
                ),
                // Owner and fsGroup may read; nobody else.
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: vol,
            mount_path: format!("{SECRETS_DIR}/{secret}"),
            read_only: Some(true),
            ..Default::default()
        });
    }
    (volumes, mounts)
}

/// The worker's command line (the contract in `docs/ARCHITECTURE.md`).
fn worker_args(ns: &str, flow: &str, worker_count: i32) -> Vec<String> {
    vec![
        "worker".to_string(),
        "--flow-ref".into(),
        format!("{ns}/{flow}"),
        "--worker-count".into(),
        worker_count.to_string(),
        "--listen".into(),
        format!("0.0.0.0:{HTTP_PORT}"),
        "--secrets-dir".into(),
        SECRETS_DIR.into(),
        "--checkpoints-file".into(),
        format!("{CONFIG_DIR}/{CONFIG_KEY}"),
    ]
}

/// The worker container: its pod's name and namespace from the downward API, the `http`
/// port with liveness (`/healthz`) and readiness (`/readyz`) probes, and the restricted
/// profile's security context.
fn worker_container(
    image: String,
    args: Vec<String>,
    resources: ResourceRequirements,
    mounts: Vec<VolumeMount>,
) -> Container {
    let field_env = |env: &str, path: &str| EnvVar {
        name: env.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let probe = |path: &str, failure_threshold: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(10),
        failure_threshold: Some(failure_threshold),
        ..Default::default()
    };
    Container {
        name: "worker".into(),
        image: Some(image),
        command: Some(vec!["mirrorflow".into()]),
        args: Some(args),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: HTTP_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        liveness_probe: Some(probe("/healthz", 3)),
        readiness_probe: Some(probe("/readyz", 1)),
        resources: Some(resources),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The worker pod: its own service account, time to commit and leave, and the restricted
/// profile (non-root, `RuntimeDefault` seccomp).
fn worker_pod_spec(flow: &str, container: Container, volumes: Vec<Volume>) -> PodSpec {
    PodSpec {
        service_account_name: Some(worker_name(flow)),
        automount_service_account_token: Some(true),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(WORKER_UID),
            run_as_group: Some(WORKER_UID),
            fs_group: Some(WORKER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![container],
        volumes: Some(volumes),
        ..Default::default()
    }
}

/// Reads [`ObservedWorkers`] from an existing StatefulSet and the number of its pods.
pub fn observe_workers(sts: &StatefulSet, pods: usize) -> ObservedWorkers {
    ObservedWorkers {
        statefulset_replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        worker_count: sts
            .annotations()
            .get(WORKER_COUNT_ANNOTATION)
            .and_then(|v| v.parse().ok()),
        pods,
    }
}

#[cfg(test)]
mod tests;
