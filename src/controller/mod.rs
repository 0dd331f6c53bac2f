//! Control plane: reconciles MirrorFlow and OffsetCheckpoint into workers.
//!
//! `build` (pure: desired children), `status` (pure: status folding and events), `reconcile`
//! (the API edge), `leader` (Lease-based leader election), `metrics`, `error`. [`run`] wires
//! them: leader election, two controllers (flows, checkpoints), `/metrics` and `/healthz`,
//! graceful shutdown on SIGTERM / Ctrl-C.

pub mod build;
pub mod error;
pub mod leader;
pub mod metrics;
pub mod reconcile;
pub mod status;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use prometheus::Registry;
use tokio::sync::watch;

use crate::api::{MirrorFlow, OffsetCheckpoint};

use self::build::{BuildSettings, FIELD_MANAGER, LABEL_MANAGED_BY};
use self::leader::{HoldOutcome, LeaderElector, LeaseSettings};
use self::metrics::Metrics;
use self::reconcile::{error_policy, reconcile_checkpoint, reconcile_flow, Context};

/// Worker image used when neither `--worker-image` nor `MIRRORFLOW_IMAGE` is set.
pub const DEFAULT_WORKER_IMAGE: &str = concat!("mirrorflow:", env!("CARGO_PKG_VERSION"));

/// `mirrorflow controller` options.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ControllerArgs {
    /// Address of the HTTP server (`/metrics`, `/healthz`).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Watch only this namespace (all namespaces when absent).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Image of the worker pods of flows that do not set `spec.workers.image`.
    #[arg(long, env = "MIRRORFLOW_IMAGE", default_value = DEFAULT_WORKER_IMAGE)]
    pub worker_image: String,
    /// Leader election on a Lease, so only one controller replica reconciles (on/off).
    #[arg(long, default_value = "on", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "mirrorflow-controller")]
    pub lease_name: String,
    /// Namespace of the Lease (default: `POD_NAMESPACE`, else `--namespace`, else the
    /// client's default namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease (default: `POD_NAME`, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

/// A shutdown signal shared by every task: resolves once `true` is sent.
fn shutdown_signal(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + Sync + 'static {
    let mut rx = rx.clone();
    async move {
        // A dropped sender also means shutdown.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

async fn os_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn metrics_handler(State(registry): State<Registry>) -> impl IntoResponse {
    match prometheus::TextEncoder::new().encode_to_string(&registry.gather()) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The controller's HTTP routes: `/metrics` (Prometheus text) and `/healthz`.
pub fn http_router(registry: Registry) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(registry)
}

fn identity(args: &ControllerArgs) -> String {
    args.identity
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| format!("mirrorflow-controller-{}", std::process::id()))
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = ()>,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Run both controllers until `shutdown` resolves (graceful: running reconciles finish).
async fn run_controllers(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Context>,
    shutdown: impl Fn() -> Box<dyn Future<Output = ()> + Send + Sync + Unpin>,
) {
    let ns = namespace.as_deref();
    let owned = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={FIELD_MANAGER}"));
    let cfg = controller::Config::default().debounce(Duration::from_secs(1));

    let flows = Controller::new(api::<MirrorFlow>(&client, ns), watcher::Config::default())
        .owns(api::<StatefulSet>(&client, ns), owned.clone())
        .owns(api::<ConfigMap>(&client, ns), owned.clone())
        .owns(api::<Service>(&client, ns), owned.clone())
        .owns(api::<ServiceAccount>(&client, ns), owned.clone())
        .owns(api::<Role>(&client, ns), owned.clone())
        .owns(api::<RoleBinding>(&client, ns), owned)
        // A checkpoint's settings are rendered into its flow's ConfigMap.
        .watches(
            api::<OffsetCheckpoint>(&client, ns),
            watcher::Config::default(),
            |cp| {
                cp.namespace()
                    .map(|ns| ObjectRef::<MirrorFlow>::new(&cp.spec.flow_ref.name).within(&ns))
            },
        )
        .with_config(cfg.clone())
        .graceful_shutdown_on(shutdown())
        .run(reconcile_flow, error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "flow controller");
            }
        });

    let checkpoints = Controller::new(
        api::<OffsetCheckpoint>(&client, ns),
        watcher::Config::default(),
    );
    let store = checkpoints.store();
    // A flow appearing (or changing) re-evaluates the checkpoints that reference it.
    let checkpoints = checkpoints
        .watches(
            api::<MirrorFlow>(&client, ns),
            watcher::Config::default(),
            move |flow| {
                let (name, ns) = (flow.name_any(), flow.namespace());
                store
                    .state()
                    .into_iter()
                    .filter(|cp| cp.spec.flow_ref.name == name && cp.namespace() == ns)
                    .map(|cp| ObjectRef::from_obj(&*cp))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(cfg)
        .graceful_shutdown_on(shutdown())
        .run(reconcile_checkpoint, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "checkpoint controller");
            }
        });
    futures::join!(flows, checkpoints);
}

/// Run the operator until SIGTERM / Ctrl-C (then `Ok`) or until leadership is lost (then an
/// error, so the process exits and restarts as a follower).
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let registry = Registry::new();
    let metrics = Metrics::new(&registry).context("register controller metrics")?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let stop = Arc::new(stop_tx);
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            os_signal().await;
            tracing::info!("shutdown requested");
            let _ = stop.send(true);
        });
    }
    let shutdown = {
        let rx = stop_rx.clone();
        move || -> Box<dyn Future<Output = ()> + Send + Sync + Unpin> {
            Box::new(Box::pin(shutdown_signal(&rx)))
        }
    };

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (--listen)", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, "serving /metrics and /healthz");
    let server_stop = shutdown_signal(&stop_rx);
    let server = tokio::spawn(async move {
        axum::serve(listener, http_router(registry))
            .with_graceful_shutdown(server_stop)
            .await
    });

    let elector = if args.leader_election {
        let ns = args
            .lease_namespace
            .clone()
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_string());
        let settings = LeaseSettings::new(&args.lease_name, ns, identity(&args));
        let elector = LeaderElector::new(client.clone(), settings);
        if !elector.acquire(shutdown()).await {
            let _ = stop.send(true);
            let _ = server.await;
            return Ok(());
        }
        metrics.leader.set(1);
        Some(elector)
    } else {
        tracing::info!("leader election disabled (--leader-election off): run a single replica");
        None
    };

    let ctx = Arc::new(Context::new(
        client.clone(),
        BuildSettings {
            worker_image: args.worker_image.clone(),
        },
        metrics.clone(),
        reconcile::reporter(),
    ));
    tracing::info!(namespace = args.namespace.as_deref().unwrap_or("<all>"), image = %args.worker_image, "controller started");
    let controllers = run_controllers(client, args.namespace.clone(), ctx, &shutdown);
    let outcome = match &elector {
        None => {
            controllers.await;
            Ok(())
        }
        Some(elector) => {
            tokio::select! {
                _ = controllers => {
                    // Graceful shutdown finished: hand over at once instead of after expiry.
                    if let Err(e) = elector.release().await {
                        tracing::warn!(error = %e, "could not release the leader lease");
                    }
                    Ok(())
                }
                lost = elector.hold(futures::future::pending::<()>()) => match lost {
                    HoldOutcome::Lost(why) => Err(anyhow::anyhow!("lost leadership: {why}")),
                    HoldOutcome::Shutdown => Ok(()),
                },
            }
        }
    };
    metrics.leader.set(0);
    let _ = stop.send(true);
    let _ = server.await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn args_defaults_and_overrides() {
        let a = Cli::try_parse_from(["x"]).unwrap().args;
        assert_eq!(a.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(a.namespace, None);
        assert!(a.leader_election);
        assert_eq!(a.lease_name, "mirrorflow-controller");
        // MIRRORFLOW_IMAGE may be set in the environment running the tests.
        let want =
            std::env::var("MIRRORFLOW_IMAGE").unwrap_or_else(|_| DEFAULT_WORKER_IMAGE.to_string());
        assert_eq!(a.worker_image, want);
        assert!(
            DEFAULT_WORKER_IMAGE.starts_with("mirrorflow:")
                && DEFAULT_WORKER_IMAGE.len() > "mirrorflow:".len()
        );

        let a = Cli::try_parse_from([
            "x",
            "--listen",
            "127.0.0.1:9000",
            "--namespace",
            "kafka",
            "--worker-image",
            "reg/mf:1",
            "--leader-election",
            "off",
            "--lease-name",
            "l",
            "--lease-namespace",
            "ops",
        ])
        .unwrap()
        .args;
        assert_eq!(a.listen.port(), 9000);
        assert_eq!(a.namespace.as_deref(), Some("kafka"));
        assert_eq!(a.worker_image, "reg/mf:1");
        assert!(!a.leader_election);
        assert_eq!(
            (a.lease_name.as_str(), a.lease_namespace.as_deref()),
            ("l", Some("ops"))
        );
        assert!(Cli::try_parse_from(["x", "--leader-election", "maybe"]).is_err());
    }

    /// GET over a real socket (no HTTP client crate in the tree): status and body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).await.unwrap();
        let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
        let body = raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    #[tokio::test]
    async fn http_endpoints() {
        let registry = Registry::new();
        let m = Metrics::new(&registry).unwrap();
        drop(m.reconcile(metrics::FLOW));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let stop = shutdown_signal(&rx);
        let server = tokio::spawn(async move {
            axum::serve(listener, http_router(registry))
                .with_graceful_shutdown(stop)
                .await
        });
        let (status, body) = get(addr, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.contains("mirrorflow_controller_reconciles_total{resource=\"mirrorflow\"} 1"),
            "{body}"
        );
        assert_eq!(get(addr, "/nope").await.0, 404);
        tx.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}
