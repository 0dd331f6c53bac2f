//! Builders: names, labels, owner references, pod security, secrets, rendered config,
//! spec hash, the scale-to-zero-first rule.

use super::*;
use crate::api::parse_flow_file;
use crate::api::status::worker_id;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn spec_json() -> Value {
    json!({
        "source": {
            "alias": "dc1",
            "bootstrapServers": "a:9092",
            "tls": {"ca": {"secretName": "ca-bundle", "key": "ca.crt"}},
            "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "dc1-user"}}
        },
        "target": {
            "alias": "dc2",
            "bootstrapServers": "b:9092",
            "tls": {
                "ca": {"secretName": "ca-bundle", "key": "other.crt"},
                "clientCert": {"secretName": "dc2-client"}
            }
        },
        "workers": {"replicas": 3}
    })
}

fn flow_from(v: Value) -> MirrorFlow {
    let mut f = MirrorFlow::new("orders", serde_json::from_value(v).unwrap());
    f.metadata.namespace = Some("kafka".into());
    f.metadata.uid = Some("uid-1".into());
    f.metadata.generation = Some(4);
    f
}

fn flow() -> MirrorFlow {
    flow_from(spec_json())
}

fn checkpoint(name: &str, flow: &str, ns: &str, interval: i32) -> OffsetCheckpoint {
    let spec =
        serde_json::from_value(json!({"flowRef": {"name": flow}, "intervalSeconds": interval}))
            .unwrap();
    let mut c = OffsetCheckpoint::new(name, spec);
    c.metadata.namespace = Some(ns.into());
    c
}

fn settings() -> BuildSettings {
    BuildSettings {
        worker_image: "mirrorflow:test".into(),
        image_allowlist: Vec::new(),
    }
}

fn steady(n: i32) -> ScalePlan {
    ScalePlan {
        replicas: n,
        worker_count: n,
        draining: None,
    }
}

fn children(f: &MirrorFlow) -> Children {
    build_children(f, &[], &settings(), steady(f.spec.workers.replicas)).unwrap()
}

fn container(sts: &StatefulSet) -> &Container {
    &sts.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

fn pod_spec(sts: &StatefulSet) -> &PodSpec {
    sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn template_hash(sts: &StatefulSet) -> String {
    sts.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[SPEC_HASH_ANNOTATION]
        .clone()
}

#[test]
fn names_labels_and_owner_refs() {
    let c = children(&flow());
    let metas: Vec<(&str, &ObjectMeta)> = vec![
        ("ConfigMap", &c.config_map.metadata),
        ("ServiceAccount", &c.service_account.metadata),
        ("Role", &c.role.metadata),
        ("RoleBinding", &c.role_binding.metadata),
        ("Service", &c.service.metadata),
        ("StatefulSet", &c.stateful_set.metadata),
    ];
    let want_labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "mirrorflow".to_string(),
        ),
        (
            "app.kubernetes.io/instance".to_string(),
            "orders".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "worker".to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "mirrorflow-controller".to_string(),
        ),
    ]);
    for (kind, m) in metas {
        let want_name = if kind == "ConfigMap" {
            "orders-worker-config"
        } else {
            "orders-worker"
        };
        assert_eq!(m.name.as_deref(), Some(want_name), "{kind}");
        assert_eq!(m.namespace.as_deref(), Some("kafka"), "{kind}");
        assert_eq!(m.labels.as_ref(), Some(&want_labels), "{kind}");
        let owners = m.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1, "{kind}");
        let o = &owners[0];
        assert_eq!(
            (
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str(),
                o.controller,
                o.api_version.as_str()
            ),
            (
                "MirrorFlow",
                "orders",
                "uid-1",
                Some(true),
                "mirrorflow.io/v1alpha1"
            ),
            "{kind}"
        );
    }
    let pod_labels = c
        .stateful_set
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone();
    assert_eq!(pod_labels, Some(want_labels));
}

#[test]
fn flow_without_uid_or_namespace_builds_nothing() {
    let mut f = flow();
    f.metadata.uid = None;
    assert!(build_children(&f, &[], &settings(), steady(1)).is_none());
    let mut f = flow();
    f.metadata.namespace = None;
    assert!(build_children(&f, &[], &settings(), steady(1)).is_none());
}

#[test]
fn worker_command_follows_the_contract() {
    let c = children(&flow());
    let ct = container(&c.stateful_set);
    assert_eq!(ct.command.as_deref(), Some(&["mirrorflow".to_string()][..]));
    assert_eq!(
        ct.args.as_ref().unwrap().join(" "),
        "worker --flow-ref kafka/orders --worker-count 3 --listen 0.0.0.0:8080 \
         --secrets-dir /var/run/mirrorflow/secrets --checkpoints-file /etc/mirrorflow/flow.yaml"
    );
    let env: Vec<(String, String)> = ct
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            let path = e
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path
                .clone();
            (e.name.clone(), path)
        })
        .collect();
    assert!(
        env.contains(&("POD_NAME".into(), "metadata.name".into())),
        "{env:?}"
    );
    assert_eq!(ct.image.as_deref(), Some("mirrorflow:test"));

    let mut v = spec_json();
    v["workers"]["image"] = json!("registry/mf:9");
    assert_eq!(
        container(&children(&flow_from(v)).stateful_set)
            .image
            .as_deref(),
        Some("registry/mf:9")
    );
}

#[test]
fn worker_pods_meet_the_restricted_profile() {
    let c = children(&flow());
    let pod = pod_spec(&c.stateful_set);
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_ne!(psc.run_as_user, Some(0));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    assert_eq!(pod.termination_grace_period_seconds, Some(30));
    assert_eq!(pod.service_account_name.as_deref(), Some("orders-worker"));
    let sc = container(&c.stateful_set)
        .security_context
        .as_ref()
        .unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(sc.capabilities.as_ref().unwrap().add, None);
    for v in pod.volumes.as_ref().unwrap() {
        assert!(v.host_path.is_none(), "restricted pods use no hostPath");
    }
}

#[test]
fn probes_and_ports() {
    let c = children(&flow());
    let ct = container(&c.stateful_set);
    let path = |p: &Option<Probe>| p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone();
    assert_eq!(path(&ct.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(path(&ct.readiness_probe).as_deref(), Some("/readyz"));
    let port = &ct.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("http"), 8080)
    );

    let svc = c.service.spec.as_ref().unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"), "headless");
    let sp = &svc.ports.as_ref().unwrap()[0];
    assert_eq!((sp.name.as_deref(), sp.port), (Some("http"), 8080));
    assert_eq!(svc.selector.as_ref(), Some(&selector_labels("orders")));
    let sts = c.stateful_set.spec.as_ref().unwrap();
    assert_eq!(sts.service_name.as_deref(), Some("orders-worker"));
    assert_eq!(
        sts.selector.match_labels.as_ref(),
        Some(&selector_labels("orders"))
    );
}

#[test]
fn secrets_are_mounted_never_copied() {
    let f = flow();
    let c = children(&f);
    let pod = pod_spec(&c.stateful_set);
    // (mount path, secret, projected keys)
    let mut mounted: Vec<(String, String, Vec<String>)> = Vec::new();
    for m in container(&c.stateful_set).volume_mounts.as_ref().unwrap() {
        let v = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == m.name)
            .unwrap();
        if let Some(s) = &v.secret {
            assert_eq!(m.read_only, Some(true));
            assert!(m.sub_path.is_none());
            let keys = s
                .items
                .as_ref()
                .unwrap()
                .iter()
                .map(|k| k.key.clone())
                .collect();
            mounted.push((m.mount_path.clone(), s.secret_name.clone().unwrap(), keys));
        }
    }
    assert_eq!(
        mounted,
        vec![
            (
                "/var/run/mirrorflow/secrets/ca-bundle".into(),
                "ca-bundle".into(),
                vec!["ca.crt".into(), "other.crt".into()]
            ),
            (
                "/var/run/mirrorflow/secrets/dc1-user".into(),
                "dc1-user".into(),
                vec!["password".into(), "username".into()]
            ),
            (
                "/var/run/mirrorflow/secrets/dc2-client".into(),
                "dc2-client".into(),
                vec!["tls.crt".into(), "tls.key".into()]
            ),
        ]
    );
    // The config mount is the whole directory (a subPath mount would never see updates).
    let cfg = container(&c.stateful_set)
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/etc/mirrorflow")
        .unwrap();
    assert!(cfg.sub_path.is_none());
    // The ConfigMap only names the Secrets.
    let yaml = &c.config_map.data.as_ref().unwrap()[CONFIG_KEY];
    assert!(yaml.contains("secretName: dc1-user"));
    // RBAC grants nothing on Secrets.
    for r in c.role.rules.as_ref().unwrap() {
        assert!(
            !r.resources
                .as_ref()
                .unwrap()
                .iter()
                .any(|x| x.contains("secret")),
            "{r:?}"
        );
    }
}

#[test]
fn role_is_limited_to_the_flow() {
    let c = children(&flow());
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = c
        .role
        .rules
        .unwrap()
        .into_iter()
        .map(|r| {
            assert_eq!(r.api_groups, Some(vec!["mirrorflow.io".to_string()]));
            (r.resources.unwrap(), r.resource_names.unwrap(), r.verbs)
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        vec![
            (
                s(&["mirrorflows"]),
                s(&["orders"]),
                s(&["get", "list", "watch"])
            ),
            (
                s(&["mirrorflows/status"]),
                s(&["orders"]),
                s(&["get", "patch"])
            ),
        ]
    );
    let rb = &c.role_binding;
    assert_eq!(
        (rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()),
        ("Role", "orders-worker")
    );
    let sub = &rb.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (
            sub.kind.as_str(),
            sub.name.as_str(),
            sub.namespace.as_deref()
        ),
        ("ServiceAccount", "orders-worker", Some("kafka"))
    );
}

#[test]
fn rendered_config_round_trips_through_the_worker_loader() {
    let f = flow();
    let all = vec![
        checkpoint("b-groups", "orders", "kafka", 7),
        checkpoint("a-groups", "orders", "kafka", 5),
        checkpoint("other-flow", "payments", "kafka", 5),
        checkpoint("other-ns", "orders", "elsewhere", 5),
    ];
    let mine = checkpoints_of(&f, &all);
    assert_eq!(
        mine.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        vec!["a-groups", "b-groups"]
    );
    let yaml = render_config(&f, &mine);
    let parsed = parse_flow_file(&yaml).unwrap();
    assert_eq!(parsed.flow.spec, f.spec);
    assert_eq!(parsed.flow.metadata.name.as_deref(), Some("orders"));
    assert_eq!(parsed.flow.metadata.namespace.as_deref(), Some("kafka"));
    assert_eq!(parsed.checkpoints.len(), 2);
    assert_eq!(parsed.checkpoints[1].spec, all[0].spec);
    assert!(!yaml.contains("status"), "{yaml}");
    assert!(!yaml.contains("uid-1"), "no server metadata: {yaml}");
}

#[test]
fn checkpoint_changes_reach_the_config_without_a_roll() {
    let f = flow();
    let a = [checkpoint("g", "orders", "kafka", 5)];
    let b = [checkpoint("g", "orders", "kafka", 60)];
    let ca = build_children(&f, &checkpoints_of(&f, &a), &settings(), steady(3)).unwrap();
    let cb = build_children(&f, &checkpoints_of(&f, &b), &settings(), steady(3)).unwrap();
    assert_ne!(ca.config_map, cb.config_map);
    assert_eq!(
        ca.stateful_set, cb.stateful_set,
        "the pod template must not change"
    );
}

#[test]
fn spec_hash_covers_restart_fields_only() {
    let base = spec_hash(&flow().spec);
    let changed = |path: &[&str], value: Value| {
        let mut v = spec_json();
        let mut cur = &mut v;
        for p in &path[..path.len() - 1] {
            if cur.get(*p).is_none() {
                cur[*p] = json!({});
            }
            cur = cur.get_mut(*p).unwrap();
        }
        cur[path[path.len() - 1]] = value;
        spec_hash(&flow_from(v).spec)
    };
    let cases: Vec<(&[&str], Value, bool)> = vec![
        (&["paused"], json!(true), false),
        (&["workers", "replicas"], json!(7), false),
        (
            &["reset"],
            json!({"id": "r1", "strategy": "SkipToLatest"}),
            false,
        ),
        (&["source", "bootstrapServers"], json!("c:9092"), true),
        (&["target", "config"], json!({"linger.ms": "5"}), true),
        (&["topics", "include"], json!(["orders.*"]), true),
        (&["delivery"], json!("AtLeastOnce"), true),
        (&["offsetValidation", "enabled"], json!(false), true),
        (&["workers", "image"], json!("x:1"), true),
        (&["workers", "inFlightMiB"], json!(64), true),
        (
            &["workers", "resources"],
            json!({"limits": {"memory": "1Gi"}}),
            true,
        ),
    ];
    for (path, value, rolls) in cases {
        assert_eq!(
            changed(path, value.clone()) != base,
            rolls,
            "{path:?} = {value}"
        );
    }
    // Key order in the input does not matter.
    let reordered: MirrorFlowSpec = serde_json::from_str(
        r#"{"workers":{"replicas":3},"target":{"bootstrapServers":"b:9092","alias":"dc2","tls":{"clientCert":{"secretName":"dc2-client"},"ca":{"key":"other.crt","secretName":"ca-bundle"}}},
            "source":{"sasl":{"credentials":{"secretName":"dc1-user"},"mechanism":"SCRAM-SHA-512"},"tls":{"ca":{"secretName":"ca-bundle","key":"ca.crt"}},"bootstrapServers":"a:9092","alias":"dc1"}}"#,
    )
    .unwrap();
    assert_eq!(spec_hash(&reordered), base);
    assert_eq!(base.len(), 16);
}

#[test]
fn pause_and_reset_do_not_touch_the_pod_template() {
    let f = flow();
    let mut p = flow();
    p.spec.paused = true;
    p.spec.reset =
        serde_json::from_value(json!({"id": "r1", "strategy": "ResumeFromLogStart"})).unwrap();
    let a = build_children(&f, &[], &settings(), steady(3))
        .unwrap()
        .stateful_set;
    let b = build_children(&p, &[], &settings(), steady(3))
        .unwrap()
        .stateful_set;
    assert_eq!(a, b);
    let mut s = flow();
    s.spec.source.bootstrap_servers = "z:9092".into();
    let c = build_children(&s, &[], &settings(), steady(3))
        .unwrap()
        .stateful_set;
    assert_ne!(template_hash(&a), template_hash(&c));
}

#[test]
fn scale_plans() {
    let obs = |sts: i32, count: Option<i32>, pods: usize| {
        Some(ObservedWorkers {
            statefulset_replicas: sts,
            worker_count: count,
            pods,
        })
    };
    let drain = |from, to| ScalePlan {
        replicas: 0,
        worker_count: from,
        draining: Some((from, to)),
    };
    let cases: Vec<(&str, i32, Option<ObservedWorkers>, ScalePlan)> = vec![
        ("new flow", 3, None, steady(3)),
        ("unchanged", 3, obs(3, Some(3), 3), steady(3)),
        (
            "unchanged, pods still starting",
            3,
            obs(3, Some(3), 1),
            steady(3),
        ),
        (
            "scale up: stop the old workers first",
            5,
            obs(3, Some(3), 3),
            drain(3, 5),
        ),
        (
            "scale down: stop the old workers first",
            1,
            obs(3, Some(3), 3),
            drain(3, 1),
        ),
        (
            "draining: pods still terminating",
            5,
            obs(0, Some(3), 2),
            drain(3, 5),
        ),
        (
            "drained: start the new count",
            5,
            obs(0, Some(3), 0),
            steady(5),
        ),
        (
            "spec.replicas reverted while draining",
            3,
            obs(0, Some(3), 2),
            steady(3),
        ),
        (
            "changed again while draining",
            4,
            obs(0, Some(3), 1),
            drain(3, 4),
        ),
        (
            "no annotation: count = StatefulSet replicas",
            2,
            obs(3, None, 3),
            drain(3, 2),
        ),
        ("no annotation, same count", 3, obs(3, None, 3), steady(3)),
        (
            "StatefulSet at 0 before, no pods",
            2,
            obs(0, Some(1), 0),
            steady(2),
        ),
    ];
    for (name, desired, observed, want) in cases {
        assert_eq!(plan_scale(desired, observed), want, "{name}");
    }
}

#[test]
fn draining_keeps_the_old_worker_count_in_the_template() {
    let mut f = flow();
    f.spec.workers.replicas = 5;
    let plan = plan_scale(
        5,
        Some(ObservedWorkers {
            statefulset_replicas: 3,
            worker_count: Some(3),
            pods: 3,
        }),
    );
    let sts = build_children(&f, &[], &settings(), plan)
        .unwrap()
        .stateful_set;
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(0));
    assert!(container(&sts)
        .args
        .as_ref()
        .unwrap()
        .join(" ")
        .contains("--worker-count 3"));
    assert_eq!(sts.annotations()[WORKER_COUNT_ANNOTATION], "3");
    assert_eq!(
        observe_workers(&sts, 0),
        ObservedWorkers {
            statefulset_replicas: 0,
            worker_count: Some(3),
            pods: 0
        }
    );
    // Next round, once no pod remains: the new count.
    let plan = plan_scale(5, Some(observe_workers(&sts, 0)));
    let sts = build_children(&f, &[], &settings(), plan)
        .unwrap()
        .stateful_set;
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(5));
    assert!(container(&sts)
        .args
        .as_ref()
        .unwrap()
        .join(" ")
        .contains("--worker-count 5"));
}

#[test]
fn flow_name_length() {
    let ok = "a".repeat(MAX_FLOW_NAME_LEN);
    assert_eq!(check_flow_name(&ok), Ok(()));
    assert!(worker_id(&ok, 999).len() <= 63, "pod names are DNS labels");
    let long = "a".repeat(MAX_FLOW_NAME_LEN + 1);
    let e = check_flow_name(&long).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.value.as_str()),
        ("metadata.name", long.as_str())
    );
    assert!(
        e.message.contains(&MAX_FLOW_NAME_LEN.to_string()),
        "{}",
        e.message
    );
}

#[test]
fn selector_string_matches_the_selector() {
    assert_eq!(
        selector_string("orders"),
        "app.kubernetes.io/component=worker,app.kubernetes.io/instance=orders,app.kubernetes.io/name=mirrorflow"
    );
}

#[test]
fn flow_names_must_form_service_names() {
    let rows = [
        ("orders", true),
        ("a1-b2", true),
        ("1orders", false),
        ("a.b", false),
        ("Orders", false),
        ("orders-", true), // the Service is "orders--worker": still a label
    ];
    for (name, ok) in rows {
        assert_eq!(check_flow_name(name).is_ok(), ok, "{name}");
    }
    let e = check_flow_name("a.b").unwrap_err();
    assert!(
        e.message.contains("DNS-1035") && e.message.contains("\"a.b-worker\""),
        "{}",
        e.message
    );
    assert!(is_dns1035_label("a") && !is_dns1035_label("-a") && !is_dns1035_label(""));
}

#[test]
fn default_resources_follow_the_window_and_never_override_the_flow() {
    let with = |workers: Value| {
        let mut v = spec_json();
        v["workers"] = workers;
        flow_from(v)
    };
    let resources = |f: &MirrorFlow| {
        serde_json::to_value(
            container(&children(f).stateful_set)
                .resources
                .clone()
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        resources(&with(json!({}))),
        json!({"requests": {"cpu": "100m", "memory": "88Mi"}, "limits": {"memory": "176Mi"}})
    );
    assert_eq!(
        resources(&with(json!({"inFlightMiB": 64}))),
        json!({"requests": {"cpu": "100m", "memory": "107Mi"}, "limits": {"memory": "214Mi"}})
    );
    assert_eq!(
        resources(&with(json!({"resources": {}}))),
        resources(&with(json!({}))),
        "an empty resources block is none"
    );
    let own = json!({"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}});
    assert_eq!(resources(&with(json!({"resources": own.clone()}))), own);
}

#[test]
fn one_disruption_budget_per_flow() {
    let c = children(&flow());
    let pdb = &c.disruption_budget;
    assert_eq!(pdb.metadata.name, c.stateful_set.metadata.name);
    assert_eq!(
        pdb.metadata.owner_references,
        c.stateful_set.metadata.owner_references
    );
    let spec = pdb.spec.as_ref().unwrap();
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        spec.selector.as_ref().unwrap().match_labels,
        c.stateful_set.spec.as_ref().unwrap().selector.match_labels
    );
}

#[test]
fn worker_image_allowlist_table() {
    let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: &[(&str, &[&str], bool)] = &[
        ("anything", &[], true),
        (
            "reg.example/mirrorflow:1.2",
            &["reg.example/mirrorflow:1.2"],
            true,
        ),
        (
            "reg.example/mirrorflow:1.3",
            &["reg.example/mirrorflow:1.2"],
            false,
        ),
        (
            "reg.example/mirrorflow:1.3",
            &["reg.example/mirrorflow:*"],
            true,
        ),
        (
            "reg.example/mirrorflow@sha256:abc",
            &["reg.example/mirrorflow@sha256:*"],
            true,
        ),
        // A tag prefix does not allow another repository.
        (
            "reg.example/mirrorflow-evil:1",
            &["reg.example/mirrorflow:*"],
            false,
        ),
        ("evil.example/mirrorflow:1", &["reg.example/*"], false),
        ("mirrorflow:1", &["docker.io/library/mirrorflow:1"], false),
    ];
    for (image, allow, want) in cases {
        assert_eq!(
            image_allowed(image, &list(allow)),
            *want,
            "{image} {allow:?}"
        );
    }
    let mut s = settings();
    s.image_allowlist = list(&["reg.example/mirrorflow:*"]);
    let mut spec = flow().spec;
    assert_eq!(
        check_worker_image(&spec, &s),
        Ok(()),
        "unset: the operator's image"
    );
    spec.workers.image = Some(s.worker_image.clone());
    assert_eq!(
        check_worker_image(&spec, &s),
        Ok(()),
        "the operator's own image"
    );
    spec.workers.image = Some("evil.example/x:1".into());
    let e = check_worker_image(&spec, &s).unwrap_err();
    assert_eq!(e.field, "spec.workers.image");
    assert!(
        e.message.contains("reg.example/mirrorflow:*"),
        "{}",
        e.message
    );
    s.image_allowlist.clear();
    assert_eq!(
        check_worker_image(&spec, &s),
        Ok(()),
        "no list: all allowed"
    );
}

#[test]
fn worker_volumes_table() {
    let secrets = |list: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        list.iter()
            .map(|(s, keys)| (s.to_string(), keys.iter().map(|k| k.to_string()).collect()))
            .collect()
    };
    // (volume name, what it holds, mount path, read-only)
    type Row = (String, String, String, Option<bool>);
    let rows = |flow: &str, s: &BTreeMap<String, BTreeSet<String>>| -> Vec<Row> {
        let (volumes, mounts) = worker_volumes(flow, s);
        assert_eq!(volumes.len(), mounts.len());
        volumes
            .iter()
            .zip(&mounts)
            .map(|(v, m)| {
                assert_eq!(v.name, m.name);
                let holds = match (&v.config_map, &v.empty_dir, &v.secret) {
                    (Some(c), None, None) => format!("configmap {}", c.name),
                    (None, Some(_), None) => "emptyDir".to_string(),
                    (None, None, Some(s)) => {
                        assert_eq!(s.default_mode, Some(0o440));
                        assert_eq!(s.optional, Some(false));
                        let items = s.items.as_ref().unwrap();
                        assert!(items.iter().all(|k| k.key == k.path && k.mode.is_none()));
                        let keys: Vec<&str> = items.iter().map(|k| k.key.as_str()).collect();
                        format!(
                            "secret {} [{}]",
                            s.secret_name.as_deref().unwrap(),
                            keys.join(" ")
                        )
                    }
                    other => panic!("unexpected volume {other:?}"),
                };
                assert!(m.sub_path.is_none(), "{m:?}");
                (v.name.clone(), holds, m.mount_path.clone(), m.read_only)
            })
            .collect()
    };
    let row = |v: &str, holds: &str, path: &str, ro: Option<bool>| -> Row {
        (v.into(), holds.into(), path.into(), ro)
    };
    let base = vec![
        row(
            "config",
            "configmap orders-worker-config",
            "/etc/mirrorflow",
            Some(true),
        ),
        row("tmp", "emptyDir", "/tmp", None),
    ];
    assert_eq!(rows("orders", &secrets(&[])), base, "no secret");
    let mut want = base.clone();
    want.extend([
        row(
            "secret-0",
            "secret ca.bundle.v2 [ca.crt]",
            "/var/run/mirrorflow/secrets/ca.bundle.v2",
            Some(true),
        ),
        row(
            "secret-1",
            "secret dc1-user [password username]",
            "/var/run/mirrorflow/secrets/dc1-user",
            Some(true),
        ),
    ]);
    assert_eq!(
        rows(
            "orders",
            &secrets(&[
                ("dc1-user", &["username", "password"]),
                ("ca.bundle.v2", &["ca.crt"]),
            ])
        ),
        want,
        "secrets in name order, volumes indexed (names may hold dots), only the named keys"
    );
}

#[test]
fn worker_args_name_the_flow_and_the_count() {
    let cases = [
        ("kafka", "orders", 3, "kafka/orders", "3"),
        ("prod-eu", "payments", 0, "prod-eu/payments", "0"),
    ];
    for (ns, flow, count, flow_ref, count_arg) in cases {
        let args = worker_args(ns, flow, count);
        assert_eq!(
            args.join(" "),
            format!(
                "worker --flow-ref {flow_ref} --worker-count {count_arg} --listen 0.0.0.0:8080 \
                 --secrets-dir /var/run/mirrorflow/secrets \
                 --checkpoints-file /etc/mirrorflow/flow.yaml"
            )
        );
    }
}
