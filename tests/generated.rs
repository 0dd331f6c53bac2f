//! Generated files are fresh, and the examples parse, validate and satisfy the CRD schema.
//!
//! Regenerate with `cargo run -- crdgen > crds/mirrorflow-crds.yaml`
//! (or run the tests with `UPDATE_GENERATED=1`).

use std::path::{Path, PathBuf};

use mirrorflow::api::{self, MirrorFlow, OffsetCheckpoint};
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const CRDS_FILE: &str = "crds/mirrorflow-crds.yaml";

#[test]
fn crds_dir_is_fresh() {
    let path = root().join(CRDS_FILE);
    let want = api::crds_yaml();
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{CRDS_FILE} is stale: run `cargo run -- crdgen > {CRDS_FILE}` and commit the result"
    );
}

fn crd_schema(plural: &str) -> Value {
    api::crds_yaml()
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap())
        .find(|d| d["spec"]["names"]["plural"] == plural)
        .map(|d| d["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
        .unwrap()
}

/// OpenAPI v3 → JSON Schema: `nullable: true` means null is allowed too.
fn to_json_schema(mut s: Value) -> Value {
    fn fix(v: &mut Value) {
        if let Value::Object(m) = v {
            if m.get("nullable") == Some(&json!(true)) {
                if let Some(Value::String(t)) = m.get("type").cloned() {
                    m.insert("type".into(), json!([t, "null"]));
                }
                if let Some(Value::Array(e)) = m.get_mut("enum") {
                    e.push(Value::Null);
                }
            }
            for (_, child) in m.iter_mut() {
                fix(child);
            }
        } else if let Value::Array(a) = v {
            a.iter_mut().for_each(fix);
        }
    }
    fix(&mut s);
    s
}

fn schema_errors(plural: &str, object: &Value) -> Vec<String> {
    // Like the API server: default first, then validate.
    let object = &kube::core::cel::apply_defaults(&crd_schema(plural), object);
    let schema = to_json_schema(crd_schema(plural));
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut errs: Vec<String> = validator
        .iter_errors(object)
        .map(|e| format!("{}: {}", e.instance_path(), e))
        .collect();
    // CEL rules (x-kubernetes-validations) are evaluated by kube's CEL engine.
    if let Err(e) = kube::core::cel::Validator::new().validate(&crd_schema(plural), object, None) {
        errs.push(format!("CEL: {e:?}"));
    }
    errs
}

fn example_docs() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "examples/ must hold a minimal flow, a full flow and an OffsetCheckpoint"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(d).unwrap();
            if !v.is_null() {
                out.push((f.clone(), v));
            }
        }
    }
    out
}

#[test]
fn examples_parse_validate_and_match_the_schema() {
    let (mut flows, mut cps) = (0, 0);
    let mut secrets: Vec<(PathBuf, String, Vec<String>)> = Vec::new();
    let mut referenced: Vec<(PathBuf, String, String)> = Vec::new();
    for (file, doc) in example_docs() {
        let name = file.display();
        match doc["kind"].as_str() {
            Some("MirrorFlow") => {
                let f: MirrorFlow = serde_json::from_value(doc.clone()).unwrap();
                api::validate_flow(&f.spec).unwrap_or_else(|e| panic!("{name}: {e}"));
                for c in [&f.spec.source, &f.spec.target] {
                    for (s, k) in c.secret_keys() {
                        referenced.push((file.clone(), s.to_string(), k.to_string()));
                    }
                }
                assert_eq!(
                    schema_errors("mirrorflows", &doc),
                    Vec::<String>::new(),
                    "{name}"
                );
                flows += 1;
            }
            Some("OffsetCheckpoint") => {
                let c: OffsetCheckpoint = serde_json::from_value(doc.clone()).unwrap();
                api::validate_checkpoint(&c.spec).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    schema_errors("offsetcheckpoints", &doc),
                    Vec::<String>::new(),
                    "{name}"
                );
                cps += 1;
            }
            // The Secrets a secured example needs: every key its flow references is there.
            Some("Secret") => {
                assert_eq!(doc["apiVersion"], "v1", "{name}");
                secrets.push((
                    file.clone(),
                    doc["metadata"]["name"].as_str().unwrap().to_string(),
                    doc["stringData"]
                        .as_object()
                        .map(|m| m.keys().cloned().collect::<Vec<_>>())
                        .unwrap_or_default(),
                ));
            }
            other => panic!("{name}: unexpected kind {other:?}"),
        }
    }
    assert!(flows >= 2 && cps >= 1);
    assert!(
        !secrets.is_empty(),
        "examples/secured-flow.yaml carries its Secrets"
    );
    for (file, secret, key) in referenced {
        if !secrets.iter().any(|(f, _, _)| *f == file) {
            continue; // an example that leaves the Secrets to the reader
        }
        assert!(
            secrets
                .iter()
                .any(|(f, n, keys)| *f == file && *n == secret && keys.contains(&key)),
            "{}: the flow reads key {key:?} of Secret {secret:?}, which the file does not hold",
            file.display()
        );
    }
}

#[test]
fn examples_that_are_whole_flow_files_load() {
    for f in ["examples/minimal-flow.yaml", "examples/full-flow.yaml"] {
        api::load_flow_file(Path::new(&root().join(f))).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}

/// The API server rejects what validate() rejects, wherever a schema can express the rule.
#[test]
fn schema_rejects_bad_flows() {
    let good = json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow", "metadata": {"name": "f"},
        "spec": {"source": {"alias": "dc1", "bootstrapServers": "a:1"},
                 "target": {"alias": "dc2", "bootstrapServers": "b:1"}}
    });
    assert_eq!(schema_errors("mirrorflows", &good), Vec::<String>::new());
    let rows: Vec<(&str, &str, Value)> = vec![
        ("alias pattern", "/spec/source/alias", json!("DC1")),
        ("alias length", "/spec/source/alias", json!("a".repeat(64))),
        ("servers empty", "/spec/source/bootstrapServers", json!("")),
        ("aliases equal (CEL)", "/spec/target/alias", json!("dc1")),
        ("delivery enum", "/spec/delivery", json!("Sometimes")),
        ("startFrom enum", "/spec/startFrom", json!("Middle")),
        (
            "policy enum",
            "/spec/replicationPolicy",
            json!({"type": "Rename"}),
        ),
        (
            "separator pattern",
            "/spec/replicationPolicy",
            json!({"separator": "/"}),
        ),
        ("lagMax minimum", "/spec/offsetSyncs", json!({"lagMax": 0})),
        ("replicas minimum", "/spec/workers", json!({"replicas": 0})),
        (
            "refresh minimum",
            "/spec/topics",
            json!({"refreshIntervalSeconds": 0}),
        ),
        (
            "sasl mechanism",
            "/spec/source/sasl",
            json!({"mechanism": "GSSAPI", "credentials": {"secretName": "s"}}),
        ),
        (
            "sasl credentials required",
            "/spec/source/sasl",
            json!({"mechanism": "PLAIN"}),
        ),
        (
            "reset strategy",
            "/spec/reset",
            json!({"id": "1", "strategy": "Rewind"}),
        ),
        (
            "reset id empty",
            "/spec/reset",
            json!({"id": "", "strategy": "SkipToLatest"}),
        ),
        (
            "reset partition minimum",
            "/spec/reset",
            json!({"id": "1", "strategy": "SkipToLatest", "partitions": [{"topic": "t", "partition": -1}]}),
        ),
        (
            "config values are strings",
            "/spec/source/config",
            json!({"linger.ms": 5}),
        ),
        ("paused type", "/spec/paused", json!("yes")),
    ];
    for (what, pointer, value) in rows {
        let mut doc = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        doc.pointer_mut(parent).unwrap()[key] = value;
        assert!(
            !schema_errors("mirrorflows", &doc).is_empty(),
            "schema accepted: {what}"
        );
    }
}

#[test]
fn schema_rejects_bad_checkpoints() {
    let good = json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "OffsetCheckpoint", "metadata": {"name": "c"},
        "spec": {"flowRef": {"name": "f"}, "syncGroupOffsets": true, "emitCheckpointsTopic": true}
    });
    assert_eq!(
        schema_errors("offsetcheckpoints", &good),
        Vec::<String>::new()
    );
    let rows: Vec<(&str, &str, Value)> = vec![
        ("flowRef required", "/spec/flowRef", Value::Null),
        ("interval minimum", "/spec/intervalSeconds", json!(0)),
        ("both off (CEL)", "/spec/syncGroupOffsets", json!(false)),
    ];
    for (what, pointer, value) in rows {
        let mut doc = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        if what == "both off (CEL)" {
            doc["spec"]["emitCheckpointsTopic"] = json!(false);
        }
        if value.is_null() {
            doc.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(key);
        } else {
            doc.pointer_mut(parent).unwrap()[key] = value;
        }
        assert!(
            !schema_errors("offsetcheckpoints", &doc).is_empty(),
            "schema accepted: {what}"
        );
    }
}

/// Edits that would apply one cluster's positions to another are refused on update by the
/// CEL transition rules (`oldSelf`); edits that keep the history are not.
#[test]
fn schema_refuses_history_splitting_edits() {
    let old = json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow", "metadata": {"name": "f"},
        "spec": {"source": {"alias": "dc1", "bootstrapServers": "a:1"},
                 "target": {"alias": "dc2", "bootstrapServers": "b:1"}}
    });
    let schema = crd_schema("mirrorflows");
    let update_errors = |pointer: &str, value: Value| {
        let old = kube::core::cel::apply_defaults(&schema, &old);
        let mut new = old.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        new.pointer_mut(parent).unwrap()[key] = value;
        let new = kube::core::cel::apply_defaults(&schema, &new);
        match kube::core::cel::Validator::new().validate(&schema, &new, Some(&old)) {
            Ok(()) => String::new(),
            Err(e) => format!("{e:?}"),
        }
    };
    let rows = [
        (
            "/spec/source/alias",
            json!("dc9"),
            "spec.source.alias cannot change",
        ),
        (
            "/spec/source/bootstrapServers",
            json!("c:1"),
            "spec.source.bootstrapServers cannot change",
        ),
        (
            "/spec/target/alias",
            json!("dc8"),
            "spec.target.alias cannot change",
        ),
        (
            "/spec/replicationPolicy",
            json!({"type": "Identity"}),
            "spec.replicationPolicy cannot change",
        ),
    ];
    for (pointer, value, message) in rows {
        let errs = update_errors(pointer, value);
        assert!(errs.contains(message), "{pointer}: {errs}");
    }
    // What may change on a live flow.
    assert_eq!(
        update_errors("/spec/target/bootstrapServers", json!("d:1")),
        ""
    );
    assert_eq!(
        update_errors("/spec/source/bootstrapServers", json!("a:1")),
        ""
    );
}
