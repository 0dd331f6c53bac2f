//! End to end against a real cluster: runs only when KUBECONFIG is set (otherwise prints a
//! SKIPPED line and passes). Applies the CRDs from `crds/`, runs the controller in-process on
//! a fresh namespace, creates a flow and checkpoints, and checks children and status. Worker
//! pods need the worker image to start; this test does not wait for them.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use mirrorflow::api::{MirrorFlow, OffsetCheckpoint};
use mirrorflow::controller::{run, ControllerArgs};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Poll `f` until it returns `Some` or the deadline passes (a guard against hanging, not a
/// timing assertion).
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn crd_documents() -> Vec<CustomResourceDefinition> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            let mut paths: Vec<_> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            paths.sort();
            paths
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap())
                .collect()
        })
        .unwrap_or_default();
    if texts.is_empty() {
        println!(
            "note: no CRD files in {}; applying the CRDs built into the binary",
            dir.display()
        );
        texts.push(mirrorflow::api::crds_yaml());
    }
    let mut out = Vec::new();
    for text in texts {
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_yaml::Value::deserialize(doc).unwrap();
            if v.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
                out.push(serde_yaml::from_value(v).unwrap());
            }
        }
    }
    out
}

use serde::Deserialize;

async fn owned_by_flow<K>(client: &Client, ns: &str, name: &str, uid: &str) -> Option<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let obj = Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let owned = obj
        .owner_references()
        .iter()
        .any(|o| o.uid == uid && o.controller == Some(true));
    let labelled = obj
        .labels()
        .get("app.kubernetes.io/managed-by")
        .map(String::as_str)
        == Some("mirrorflow-controller");
    (owned && labelled).then_some(obj)
}

#[tokio::test]
async fn controller_against_a_cluster() {
    if std::env::var_os("KUBECONFIG").is_none() {
        println!("SKIPPED e2e_kube: KUBECONFIG is not set (needs a cluster to run)");
        return;
    }
    let client = Client::try_default()
        .await
        .expect("KUBECONFIG is set but no client can be built");
    let ssa = PatchParams::apply("mirrorflow-e2e").force();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crd_documents() {
        let name = crd.name_any();
        crds.patch(&name, &ssa, &Patch::Apply(&crd))
            .await
            .expect("apply CRD");
        eventually(&format!("CRD {name} established"), || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let c = crds.get(&name).await.ok()?;
                c.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }

    let ns = format!("mirrorflow-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .expect("create namespace");

    let args = ControllerArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        namespace: Some(ns.clone()),
        worker_image: "mirrorflow:e2e".into(),
        leader_election: false,
        lease_name: "mirrorflow-e2e".into(),
        lease_namespace: None,
        identity: None,
    };
    let controller = tokio::spawn(run(args));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "dc1-user"},
                                           "stringData": {"username": "u", "password": "p"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let flows: Api<MirrorFlow> = Api::namespaced(client.clone(), &ns);
    let flow: MirrorFlow = serde_json::from_value(json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
        "metadata": {"name": "orders"},
        "spec": {
            "source": {"alias": "dc1", "bootstrapServers": "source:9092",
                       "sasl": {"mechanism": "PLAIN", "credentials": {"secretName": "dc1-user"}}},
            "target": {"alias": "dc2", "bootstrapServers": "target:9092"},
            "workers": {"replicas": 2}
        }
    }))
    .unwrap();
    let flow = flows
        .create(&PostParams::default(), &flow)
        .await
        .expect("create MirrorFlow");
    let uid = flow.uid().unwrap();
    let cps: Api<OffsetCheckpoint> = Api::namespaced(client.clone(), &ns);
    for (name, flow_ref) in [("groups", "orders"), ("orphan", "missing")] {
        let cp: OffsetCheckpoint = serde_json::from_value(json!({
            "apiVersion": "mirrorflow.io/v1alpha1", "kind": "OffsetCheckpoint",
            "metadata": {"name": name}, "spec": {"flowRef": {"name": flow_ref}}
        }))
        .unwrap();
        cps.create(&PostParams::default(), &cp)
            .await
            .expect("create OffsetCheckpoint");
    }

    let sts: StatefulSet = eventually("the worker StatefulSet", || {
        owned_by_flow(&client, &ns, "orders-worker", &uid)
    })
    .await;
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(2));
    eventually("the ServiceAccount", || {
        owned_by_flow::<ServiceAccount>(&client, &ns, "orders-worker", &uid)
    })
    .await;
    eventually("the Role", || {
        owned_by_flow::<Role>(&client, &ns, "orders-worker", &uid)
    })
    .await;
    eventually("the RoleBinding", || {
        owned_by_flow::<RoleBinding>(&client, &ns, "orders-worker", &uid)
    })
    .await;
    eventually("the Service", || {
        owned_by_flow::<Service>(&client, &ns, "orders-worker", &uid)
    })
    .await;
    let cm: ConfigMap = eventually("the ConfigMap with the checkpoint", || async {
        let cm: ConfigMap = owned_by_flow(&client, &ns, "orders-worker-config", &uid).await?;
        let yaml = cm.data.as_ref()?.get("flow.yaml")?;
        yaml.contains("name: groups").then_some(cm.clone())
    })
    .await;
    let yaml = &cm.data.unwrap()["flow.yaml"];
    assert!(!yaml.contains("name: orphan"));
    assert!(
        !yaml.contains("password: p"),
        "secret values never reach the ConfigMap"
    );

    let status = eventually("the flow status", || async {
        let f = flows.get("orders").await.ok()?;
        let st = f.status?;
        (st.observed_generation == f.metadata.generation).then_some(st)
    })
    .await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(
        ready.status, "False",
        "no worker has reported yet: {ready:?}"
    );
    assert_eq!(status.workers_summary.as_deref(), Some("0/2"));

    let reason = |name: &'static str| {
        let cps = cps.clone();
        async move {
            let c = cps.get(name).await.ok()?;
            c.status?
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.reason.clone())
        }
    };
    assert_eq!(
        eventually("orphan checkpoint status", || reason("orphan")).await,
        "FlowNotFound"
    );
    assert_eq!(
        eventually("checkpoint status", || reason("groups")).await,
        "AwaitingCheckpoints"
    );

    controller.abort();
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
