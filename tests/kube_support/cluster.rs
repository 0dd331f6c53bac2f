//! The API server the suite runs against: its own `kube-apiserver` from `../shared/k8s/start.sh`
//! (with an audit log, so API calls can be counted per identity), or the cluster `KUBECONFIG`
//! names. Neither: the test prints `SKIPPED` with the reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use super::audit::AuditLog;
use super::tools::{root, run_with, tool, tools_required};

/// Env var naming the directory of `start.sh` and `kube-apiserver` (default `../shared/k8s`).
pub const K8S_DIR_ENV: &str = "MIRRORFLOW_K8S_DIR";

/// Only ServiceAccounts' requests are audited (the test's admin calls are not counted), once
/// per request, when it completes.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
  - level: None
";

/// A cluster to test against, with an admin client and `kubectl`.
pub struct Cluster {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    pub client: Client,
    pub kubectl: PathBuf,
    pub helm: PathBuf,
    /// Our own API server's run directory (`None`: an external cluster from KUBECONFIG).
    run_dir: Option<PathBuf>,
    start_sh: Option<PathBuf>,
    /// Scratch files (kubeconfigs of ServiceAccounts).
    scratch: tempfile::TempDir,
}

fn k8s_dir() -> PathBuf {
    std::env::var_os(K8S_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/k8s"))
}

fn skip_or_fail(test: &str, why: &str) -> Option<Cluster> {
    if tools_required() {
        panic!("{test}: {why} (CI=true or MIRRORFLOW_REQUIRE_BROKERS=1)");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}

impl Cluster {
    /// Our own API server when `start.sh` exists (unless `KUBECONFIG` is set: then that
    /// cluster); else `None` after printing `SKIPPED` with the reason.
    pub async fn start_or_skip(test: &str) -> Option<Cluster> {
        let kubectl = tool("kubectl", test)?;
        let helm = tool("helm", test)?;
        let scratch = tempfile::Builder::new()
            .prefix("mf-e2e-")
            .tempdir()
            .expect("temp dir");
        if let Some(kc) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            eprintln!("{test}: KUBECONFIG is set: testing against that cluster");
            let kubeconfig = PathBuf::from(kc);
            let client = client_from(&kubeconfig).await;
            return Some(Cluster {
                kubeconfig,
                client,
                kubectl,
                helm,
                run_dir: None,
                start_sh: None,
                scratch,
            });
        }
        let dir = k8s_dir();
        let start_sh = dir.join("start.sh");
        if !start_sh.is_file() {
            // Not a machine with the test API server: nothing is missing that setup.sh installs.
            eprintln!(
                "SKIPPED {test}: no {} (the test kube-apiserver) and KUBECONFIG is not set",
                start_sh.display()
            );
            return None;
        }
        let etcd = std::env::var_os("ETCD")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
        if !etcd.is_file() {
            return skip_or_fail(
                test,
                &format!(
                    "no etcd at {} (apt-get install etcd-server; scripts/setup.sh does)",
                    etcd.display()
                ),
            );
        }
        let run_dir = tempfile::Builder::new()
            .prefix("mf-k8s-")
            .tempdir()
            .expect("temp dir")
            .keep();
        std::fs::write(run_dir.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        let flags = format!(
            "--audit-policy-file={0}/audit-policy.yaml --audit-log-path={0}/audit.log --audit-log-format=json --audit-log-mode=blocking",
            run_dir.display()
        );
        let dir_arg = run_dir.to_string_lossy().into_owned();
        let out = run_with(
            Path::new("bash"),
            &[&start_sh.to_string_lossy(), "start", &dir_arg],
            &[("APISERVER_EXTRA_FLAGS", &flags)],
            None,
        )
        .unwrap_or_else(|e| panic!("{test}: start.sh failed: {e}"));
        let kubeconfig = PathBuf::from(out.lines().last().expect("kubeconfig path").trim());
        let client = client_from(&kubeconfig).await;
        Some(Cluster {
            kubeconfig,
            client,
            kubectl,
            helm,
            run_dir: Some(run_dir),
            start_sh: Some(start_sh),
            scratch,
        })
    }

    /// The audit log of our own API server (`None` on an external cluster).
    pub fn audit(&self) -> Option<AuditLog> {
        self.run_dir
            .as_ref()
            .map(|d| AuditLog::new(d.join("audit.log")))
    }

    /// `kubectl ARGS` as admin: stdout, or the error output.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_stdin(args, None)
    }

    /// `kubectl ARGS` as admin with `stdin`.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        run_with(
            &self.kubectl,
            args,
            &[("KUBECONFIG", &self.kubeconfig.to_string_lossy())],
            stdin,
        )
    }

    /// `kubectl ARGS`, which must succeed.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Creates a namespace (no error when it exists).
    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create namespace {name}: {e}"),
        }
    }

    /// A ServiceAccount token from `kubectl create token` (TokenRequest), as a user gets one.
    pub fn sa_token_kubectl(&self, ns: &str, sa: &str) -> String {
        self.kubectl_ok(&["create", "token", sa, "-n", ns, "--duration=2h"])
            .trim()
            .to_string()
    }

    /// A ServiceAccount token through the TokenRequest API (what a kubelet mounts).
    pub async fn sa_token(&self, ns: &str, sa: &str) -> Result<String, kube::Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(7200),
                ..Default::default()
            },
            ..Default::default()
        };
        let resp = api
            .create_token_request(sa, &PostParams::default(), &req)
            .await?;
        Ok(resp.status.map(|s| s.token).unwrap_or_default())
    }

    /// A kubeconfig authenticating with `token` (same server and CA as the admin's), written
    /// to a scratch file named after `name`.
    pub fn kubeconfig_for(&self, name: &str, token: &str, namespace: &str) -> PathBuf {
        let admin: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let ctx_name = admin["current-context"].as_str().unwrap_or_default();
        let ctx = admin["contexts"]
            .as_sequence()
            .and_then(|s| s.iter().find(|c| c["name"].as_str() == Some(ctx_name)))
            .expect("current context");
        let cluster_name = ctx["context"]["cluster"].as_str().unwrap_or_default();
        let cluster = admin["clusters"]
            .as_sequence()
            .and_then(|s| s.iter().find(|c| c["name"].as_str() == Some(cluster_name)))
            .expect("cluster of the current context")
            .clone();
        let doc = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [serde_json::to_value(&cluster).unwrap()],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": cluster_name, "user": name, "namespace": namespace}}],
            "current-context": name,
        });
        let path = self.scratch.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&doc).unwrap()).unwrap();
        path
    }

    /// Whether this is our own API server (no kubelet or controller-manager runs).
    pub fn is_local(&self) -> bool {
        self.run_dir.is_some()
    }

    /// The last lines of our API server's log (for failure messages).
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        let Some(dir) = &self.run_dir else {
            return String::new();
        };
        let text = std::fs::read_to_string(dir.join("apiserver.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    config.read_timeout = Some(Duration::from_secs(60));
    Client::try_from(config).expect("client")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let (Some(dir), Some(start_sh)) = (&self.run_dir, &self.start_sh) else {
            return;
        };
        if std::thread::panicking() || std::env::var_os("MIRRORFLOW_KEEP_K8S").is_some() {
            // Keep the logs to read; stop the processes.
            for p in ["apiserver", "etcd"] {
                if let Ok(pid) = std::fs::read_to_string(dir.join(format!("{p}.pid"))) {
                    let _ = std::process::Command::new("kill").arg(pid.trim()).status();
                }
            }
            eprintln!("API server logs and audit log kept in {}", dir.display());
            return;
        }
        let _ = std::process::Command::new("bash")
            .arg(start_sh)
            .arg("stop")
            .arg(dir)
            .status();
    }
}
