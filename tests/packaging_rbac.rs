//! The chart's RBAC: enough for what the controller does (checked against its real child
//! builders), and nothing more; the namespaced install (`watchNamespaces`); a reason for every
//! rule. The end-to-end suite (`tests/e2e_kube.rs`) runs the controller under these rules on a
//! real API server.
mod kube_support;

use kube_support::chart::*;
use kube_support::tools::{read, root, tool};

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde_yaml::Value as Yaml;

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
    // Children: watch caches (list, watch), a read of one not cached (get), server-side apply
    // (patch, create when new).
    for (g, r) in [
        gr::<ConfigMap>(),
        gr::<Service>(),
        gr::<ServiceAccount>(),
        gr::<Role>(),
        gr::<RoleBinding>(),
        gr::<StatefulSet>(),
        gr::<PodDisruptionBudget>(),
    ] {
        need(&g, &r, &["get", "list", "watch", "create", "patch"]);
    }
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
            image_allowlist: Vec::new(),
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
fn namespaced_rbac_covers_the_controller_in_each_watched_namespace() {
    let Some(helm) = tool(
        "helm",
        "namespaced_rbac_covers_the_controller_in_each_watched_namespace",
    ) else {
        return;
    };
    let docs = template(
        &helm,
        &["--set", "watchNamespaces={kafka-mirroring,kafka-dr}"],
    )
    .unwrap();
    assert!(
        untyped(&docs, "ClusterRole").is_empty() && untyped(&docs, "ClusterRoleBinding").is_empty()
    );
    for ns in ["kafka-mirroring", "kafka-dr"] {
        let roles: Vec<Role> = all(&docs, "Role");
        let r = roles
            .iter()
            .find(|r| r.metadata.namespace.as_deref() == Some(ns))
            .unwrap_or_else(|| panic!("Role in the watched namespace {ns}"));
        check_controller_rules(r.rules.as_ref().unwrap(), &format!("Role in {ns}"));
        let bindings: Vec<RoleBinding> = all(&docs, "RoleBinding");
        let b = bindings
            .iter()
            .find(|b| b.metadata.namespace.as_deref() == Some(ns))
            .unwrap();
        assert_eq!(b.role_ref.kind, "Role");
        assert_eq!(b.role_ref.name, r.metadata.name.clone().unwrap());
        assert_eq!(
            b.subjects.as_ref().unwrap()[0].namespace.as_deref(),
            Some(NAMESPACE)
        );
    }
    check_lease_role(&docs, "mirrorflow");
    assert!(args_of(&one(&docs, "Deployment"))
        .contains(&"--namespace=kafka-mirroring,kafka-dr".to_string()));
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
