//! Support of the Kubernetes end-to-end suite (`tests/e2e_kube*.rs`) and the packaging tests:
//! the tools (helm, kubectl), rendering the chart ([`chart`]), the API server ([`cluster`]), its audit log ([`audit`]), child
//! processes ([`process`]), the process kubelet ([`kubelet`]) and the controller as a local
//! process started the way the chart's Deployment would start it ([`ControllerProc`]).

#![allow(dead_code)]

pub mod argo;
pub mod audit;
pub mod chart;
pub mod cluster;
pub mod kubelet;
pub mod process;
pub mod tools;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value as Yaml;

use self::process::{binary, free_port, http_get, metric, Proc};

/// Polls `f` until it returns `Some`, at most `limit` (a guard against hanging, not a timing
/// assertion); panics naming `what` and the last observation on the way.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("gave up after {limit:?} waiting for {what}; last: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits (at most `limit`) for an Event of `reason` about the object named `regarding` in
/// namespace `ns`, as `kubectl describe` lists them, and returns it.
pub async fn wait_event(
    client: &kube::Client,
    ns: &str,
    regarding: &str,
    reason: &str,
    limit: Duration,
) -> k8s_openapi::api::events::v1::Event {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), ns);
    eventually(
        &format!("a {reason} event of {regarding}"),
        limit,
        || async {
            let list = events
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let seen = list.items.len();
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                })
                .ok_or_else(|| format!("{seen} events, none yet"))
        },
    )
    .await
}

/// A `mirrorflow controller` process, started with the command, args and env of a rendered
/// Deployment (the chart's or `deploy/`'s), authenticated by a kubeconfig.
pub struct ControllerProc {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub identity: String,
}

impl ControllerProc {
    /// Starts the controller of `deployment` as pod `identity` of `namespace`, with `--listen`
    /// moved to a free loopback port and `extra_args` appended.
    pub fn start(
        deployment: &Yaml,
        namespace: &str,
        identity: &str,
        kubeconfig: &Path,
        extra_args: &[&str],
        log_dir: &Path,
    ) -> ControllerProc {
        let c = &deployment["spec"]["template"]["spec"]["containers"][0];
        let command: Vec<String> = c["command"]
            .as_sequence()
            .expect("controller command")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            command,
            vec!["mirrorflow".to_string()],
            "the image's binary"
        );
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut args: Vec<String> = c["args"]
            .as_sequence()
            .expect("controller args")
            .iter()
            .map(|v| {
                let a = v.as_str().unwrap();
                if a.starts_with("--listen=") {
                    format!("--listen={addr}")
                } else {
                    a.to_string()
                }
            })
            .collect();
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let mut env: Vec<(String, String)> = Vec::new();
        for e in c["env"].as_sequence().into_iter().flatten() {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => identity.to_string(),
                Some("metadata.namespace") => namespace.to_string(),
                Some(other) => panic!("env {name}: unsupported field {other}"),
                None => e["value"].as_str().unwrap_or_default().to_string(),
            };
            env.push((name, value));
        }
        env.push((
            "KUBECONFIG".into(),
            kubeconfig.to_string_lossy().into_owned(),
        ));
        if std::env::var_os("RUST_LOG").is_none() {
            env.push(("RUST_LOG".into(), "info,mirrorflow=debug,kube=warn".into()));
        }
        let proc = Proc::spawn(
            identity,
            &binary(),
            &args,
            &env,
            log_dir.join(format!("{identity}.log")),
        )
        .expect("start the controller");
        ControllerProc {
            proc,
            addr,
            identity: identity.to_string(),
        }
    }

    /// Its `/metrics` text, `None` while it does not answer.
    pub async fn metrics(&self) -> Option<String> {
        match http_get(self.addr, "/metrics").await {
            Some((200, body)) => Some(body),
            _ => None,
        }
    }

    /// `mirrorflow_controller_leader` (0 when it does not answer).
    pub async fn is_leader(&self) -> bool {
        self.metrics()
            .await
            .and_then(|m| metric(&m, "mirrorflow_controller_leader"))
            == Some(1.0)
    }

    /// Reconciles of flows so far.
    pub async fn flow_reconciles(&self) -> Option<f64> {
        self.metrics().await.and_then(|m| {
            metric(
                &m,
                "mirrorflow_controller_reconciles_total{resource=\"mirrorflow\"}",
            )
        })
    }
}

/// A scratch directory kept when the test fails (its logs explain the failure).
pub struct Scratch {
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(prefix: &str) -> Scratch {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let path = dir.path().to_path_buf();
        Scratch {
            dir: Some(dir),
            path,
        }
    }
}

impl Scratch {
    /// Keep the directory after the run (its logs), not only when it fails.
    pub fn keep(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.keep();
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Kept with the API server's (`MIRRORFLOW_KEEP_K8S`), to compare with a passing run.
        if std::thread::panicking() || std::env::var_os("MIRRORFLOW_KEEP_K8S").is_some() {
            if let Some(d) = self.dir.take() {
                eprintln!("logs of the test kept in {}", d.keep().display());
            }
        }
    }
}
