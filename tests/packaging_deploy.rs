//! What is generated must stay a copy of its source: the chart's and `deploy/`'s CRDs of
//! `crds/`, `deploy/` of the chart (`scripts/render-deploy.sh`, or `UPDATE_GENERATED=1`),
//! kustomize builds `deploy/` and the documented overlay; the Dockerfile and the scripts.
mod kube_support;

use kube_support::chart::*;
use kube_support::tools::{read, root, run, tool};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::apps::v1::Deployment;
use serde_yaml::Value as Yaml;

// ---------------------------------------------------------------------------------------------
// Files that must stay copies of each other
// ---------------------------------------------------------------------------------------------

/// The tests that write `deploy/` and the chart's CRDs (with `UPDATE_GENERATED=1`) or read
/// them take turns: run in parallel, a regenerating run read a half-written `deploy/`.
fn generated_files() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn chart_and_deploy_crds_are_byte_identical_to_generated_crds() {
    let _turn = generated_files();
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
    let _turn = generated_files();
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
    let _turn = generated_files();
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
    // The operator image is built without the testkit feature (no demo, no broker launchers):
    // the default features, which are empty.
    assert!(
        stages[0].contains("cargo build --release --locked --bin mirrorflow"),
        "the image builds the mirrorflow binary in release"
    );
    let build = stages[0]
        .lines()
        .find(|l| l.contains("cargo build"))
        .unwrap_or_default();
    assert!(
        !build.contains("--features") && !build.contains("--all-features"),
        "the image must build the default features, without testkit: {build}"
    );
    assert!(
        read("Cargo.toml").contains("\ndefault = []\n"),
        "the default features are the operator's: empty"
    );
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
