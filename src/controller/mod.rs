//! Control plane: reconciles MirrorFlow and OffsetCheckpoint into workers.
//!
//! `build` (pure: desired children), `diff` (pure: would an apply change a child), `events`
//! (pure: events of a status change), `reconcile` (the API edge), `leader` (Lease-based
//! leader election), `metrics`, `error`. [`run`] wires them: leader election, per watched
//! namespace (or all) two controllers (flows, checkpoints) over watch caches of the flows,
//! checkpoints and children, `/metrics` and `/healthz`, graceful shutdown on SIGTERM / Ctrl-C.

pub mod build;
pub mod diff;
pub mod error;
pub mod events;
pub mod leader;
pub mod memo;
pub mod metrics;
pub mod overlap;
pub mod reconcile;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::routing::get;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use prometheus::Registry;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::api::{MirrorFlow, OffsetCheckpoint};
use crate::telemetry::http::metrics_router;

use self::build::{BuildSettings, FIELD_MANAGER, LABEL_MANAGED_BY};
use self::leader::{Leadership, LeaseSettings, LeaseState, LeaseThread};
use self::metrics::Metrics;
use self::reconcile::{
    error_policy, flow_trigger, reconcile_checkpoint, reconcile_flow, Context, Stores,
};

/// Worker image used when neither `--worker-image` nor `MIRRORFLOW_IMAGE` is set.
pub const DEFAULT_WORKER_IMAGE: &str = concat!("mirrorflow:", env!("CARGO_PKG_VERSION"));

/// `mirrorflow controller` options.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ControllerArgs {
    /// Address of the HTTP server (`/metrics`, `/healthz`).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Watch only these namespaces (repeat the flag or separate with commas; all namespaces
    /// when absent). Each is watched on its own, so namespaced RBAC (Roles) suffices.
    #[arg(long = "namespace", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Image of the worker pods of flows that do not set `spec.workers.image`.
    #[arg(long, env = "MIRRORFLOW_IMAGE", default_value = DEFAULT_WORKER_IMAGE)]
    pub worker_image: String,
    /// Images flows may name in `spec.workers.image`, comma-separated: exact references,
    /// or prefixes ending in `*`. Empty allows every image. Worker pods get the flow's
    /// Secrets mounted, so a list keeps flow authors from running their own image with them.
    #[arg(
        long,
        env = "MIRRORFLOW_WORKER_IMAGE_ALLOWLIST",
        value_delimiter = ',',
        num_args = 0..
    )]
    pub worker_image_allowlist: Vec<String>,
    /// Leader election on a Lease, so only one controller replica reconciles (on/off).
    #[arg(long, default_value = "on", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "mirrorflow-controller")]
    pub lease_name: String,
    /// Namespace of the Lease (default: `POD_NAMESPACE`, else the first `--namespace`, else
    /// the client's default namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a Lease is valid after its last renewal; a standby takes over after that.
    #[arg(long, default_value_t = 15, value_name = "SECONDS")]
    pub lease_duration_seconds: u64,
    /// A leader that could not renew for this long stops reconciling and exits (below the
    /// lease duration, so it stops before a standby may take over).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub renew_deadline_seconds: u64,
    /// Interval between lease attempts.
    #[arg(long, default_value_t = 2, value_name = "SECONDS")]
    pub retry_period_seconds: u64,
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

/// The controller's HTTP routes: `/metrics` (telemetry's, as the workers serve it) and
/// `/healthz`.
pub fn http_router(registry: Registry) -> axum::Router {
    metrics_router(registry).route("/healthz", get(|| async { "ok" }))
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

/// What the caches keep of an object: everything but `metadata.managedFields`, which
/// nothing here reads and which every worker's status apply grows by a field manager
/// (per flow, an entry with its fields for each worker).
fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// A watch of the children of kind `K` (only those labelled as ours) into a cache.
fn children<K>(
    client: &Client,
    ns: Option<&str>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let owned = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={FIELD_MANAGER}"));
    let (store, writer) = reflector::store();
    let stream = watcher(api::<K>(client, ns), owned)
        .default_backoff()
        .modify(strip_managed_fields)
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// Run both controllers for one namespace (`None`: all) until `shutdown` resolves (graceful:
/// running reconciles finish).
async fn run_controllers(
    client: Client,
    namespace: Option<String>,
    ctx: Context,
    (flows, flow_writer): (Store<MirrorFlow>, reflector::store::Writer<MirrorFlow>),
    all_flows: Vec<Store<MirrorFlow>>,
    shutdown: impl Fn() -> Box<dyn Future<Output = ()> + Send + Sync + Unpin>,
) {
    let ns = namespace.as_deref();
    let cfg = controller::Config::default().debounce(Duration::from_secs(1));

    // Flows trigger a reconcile when their spec or a worker's state changes, not on every
    // heartbeat (the cache still sees every version).
    let flow_triggers = watcher(api::<MirrorFlow>(&client, ns), watcher::Config::default())
        .default_backoff()
        .modify(strip_managed_fields)
        .reflect(flow_writer)
        .applied_objects()
        .predicate_filter(flow_trigger, Default::default());
    let (config_maps, cm_events) = children::<ConfigMap>(&client, ns);
    let (service_accounts, sa_events) = children::<ServiceAccount>(&client, ns);
    let (roles, role_events) = children::<Role>(&client, ns);
    let (role_bindings, rb_events) = children::<RoleBinding>(&client, ns);
    let (services, svc_events) = children::<Service>(&client, ns);
    let (stateful_sets, sts_events) = children::<StatefulSet>(&client, ns);
    let (disruption_budgets, pdb_events) = children::<PodDisruptionBudget>(&client, ns);

    // Checkpoints trigger on their spec only: their status carries an age, and a reconcile
    // woken by its own status write would write again every second.
    let (checkpoint_store, checkpoint_writer) = reflector::store::<OffsetCheckpoint>();
    let checkpoint_triggers = watcher(
        api::<OffsetCheckpoint>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect(checkpoint_writer)
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default());
    let checkpoints = Controller::for_stream(checkpoint_triggers, checkpoint_store.clone());
    let ctx = Arc::new(ctx.with_stores(Stores {
        flows: flows.clone(),
        all_flows,
        checkpoints: checkpoint_store.clone(),
        config_maps,
        service_accounts,
        roles,
        role_bindings,
        services,
        stateful_sets,
        disruption_budgets,
    }));

    let flow_controller = Controller::for_stream(flow_triggers, flows)
        .owns_stream(cm_events)
        .owns_stream(sa_events)
        .owns_stream(role_events)
        .owns_stream(rb_events)
        .owns_stream(svc_events)
        .owns_stream(sts_events)
        .owns_stream(pdb_events)
        // A checkpoint's settings are rendered into its flow's ConfigMap.
        .watches(
            api::<OffsetCheckpoint>(&client, ns),
            watcher::Config::default(),
            |cp| {
                cp.namespace().map(|ns: String| {
                    ObjectRef::<MirrorFlow>::new(&cp.spec.flow_ref.name).within(&ns)
                })
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

    // A flow appearing (or its workers' checkpoint reports changing) re-evaluates the
    // checkpoints that reference it.
    let flow_changes = watcher(api::<MirrorFlow>(&client, ns), watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(flow_trigger, Default::default());
    let checkpoint_controller = checkpoints
        .watches_stream(flow_changes, move |flow| {
            let (name, ns) = (flow.name_any(), flow.namespace());
            checkpoint_store
                .state()
                .into_iter()
                .filter(|cp| cp.spec.flow_ref.name == name && cp.namespace() == ns)
                .map(|cp| ObjectRef::from_obj(&*cp))
                .collect::<Vec<_>>()
        })
        .with_config(cfg)
        .graceful_shutdown_on(shutdown())
        .run(reconcile_checkpoint, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "checkpoint controller");
            }
        });
    futures::join!(flow_controller, checkpoint_controller);
}

/// What every task's shutdown future is made by.
type Shutdown = dyn Fn() -> Box<dyn Future<Output = ()> + Send + Sync + Unpin>;

/// Run the operator until SIGTERM / Ctrl-C (then `Ok`) or until leadership is lost (then an
/// error, so the process exits and restarts as a follower).
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let client = Client::try_from(config.clone())
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

    check_lease_timing(&args)?;
    let leadership = if args.leader_election {
        Leadership::elected()
    } else {
        Leadership::always()
    };
    let lease = if args.leader_election {
        match acquire_lease(&args, &config, &client, &leadership, &shutdown).await {
            Ok(Some(lease)) => {
                metrics.leader.set(1);
                Some(lease)
            }
            // Shutdown before this replica led, or the election failed.
            not_leader => {
                let _ = stop.send(true);
                let _ = server.await;
                return not_leader.map(|_| ());
            }
        }
    } else {
        tracing::info!("leader election disabled (--leader-election off): run a single replica");
        None
    };

    let settings = build_settings(&args);
    tracing::info!(namespaces = ?args.namespaces, image = %args.worker_image, "controller started");
    let controllers = run_scopes(
        &client,
        &settings,
        &metrics,
        &leadership,
        &args.namespaces,
        &shutdown,
    );
    let outcome = match &lease {
        None => {
            controllers.await;
            Ok(())
        }
        Some(lease) => {
            tokio::select! {
                _ = controllers => {
                    // Graceful shutdown finished: hand over at once instead of after expiry.
                    lease.stop();
                    lease.settled().await;
                    Ok(())
                }
                s = lease.settled() => match s {
                    LeaseState::Lost(why) => Err(anyhow::anyhow!("lost leadership: {why}")),
                    _ => Ok(()),
                },
            }
        }
    };
    metrics.leader.set(0);
    let _ = stop.send(true);
    let _ = server.await;
    outcome
}

/// A leader must stop renewing before its Lease expires, and retry at most every second.
fn check_lease_timing(args: &ControllerArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.renew_deadline_seconds < args.lease_duration_seconds && args.retry_period_seconds >= 1,
        "--renew-deadline-seconds ({}) must be below --lease-duration-seconds ({}), and --retry-period-seconds at least 1",
        args.renew_deadline_seconds,
        args.lease_duration_seconds
    );
    Ok(())
}

/// The Lease's namespace: `--lease-namespace` (or `POD_NAMESPACE`), else the first watched
/// namespace, else the client's default.
fn lease_namespace(args: &ControllerArgs, client_default: &str) -> String {
    args.lease_namespace
        .clone()
        .or_else(|| args.namespaces.first().cloned())
        .unwrap_or_else(|| client_default.to_string())
}

/// Waits until this replica leads (`Some`: its lease thread) or shutdown comes first
/// (`None`); an error when the election failed.
async fn acquire_lease(
    args: &ControllerArgs,
    config: &kube::Config,
    client: &Client,
    leadership: &Leadership,
    shutdown: &Shutdown,
) -> anyhow::Result<Option<LeaseThread>> {
    let ns = lease_namespace(args, client.default_namespace());
    let mut settings = LeaseSettings::new(&args.lease_name, ns, identity(args));
    settings.lease_duration = Duration::from_secs(args.lease_duration_seconds);
    settings.renew_deadline = Duration::from_secs(args.renew_deadline_seconds);
    settings.retry_period = Duration::from_secs(args.retry_period_seconds);
    // The renewal loop retries failures itself (logged, bounded by the renew deadline);
    // the client's own retries of 429/503/504 would hide them.
    let mut lease_config = config.clone();
    lease_config.default_retry = false;
    let lease = LeaseThread::spawn(
        move || Client::try_from(lease_config),
        settings,
        leadership.clone(),
    )
    .context("start the leader-election thread")?;
    let elected = tokio::select! {
        s = lease.elected() => s,
        _ = shutdown() => {
            lease.stop();
            lease.settled().await
        }
    };
    match elected {
        LeaseState::Leader => Ok(Some(lease)),
        LeaseState::Lost(why) => anyhow::bail!("leader election failed: {why}"),
        LeaseState::Acquiring | LeaseState::Stopped => Ok(None),
    }
}

/// The children's settings: the default worker image and the allowlist, blanks dropped.
fn build_settings(args: &ControllerArgs) -> BuildSettings {
    BuildSettings {
        worker_image: args.worker_image.clone(),
        image_allowlist: args
            .worker_image_allowlist
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    }
}

/// The scopes watched: each `--namespace`, or all namespaces (`None`).
fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    }
}

/// Both controllers in every watched scope, until shutdown.
async fn run_scopes(
    client: &Client,
    settings: &BuildSettings,
    metrics: &Metrics,
    leadership: &Leadership,
    namespaces: &[String],
    shutdown: &Shutdown,
) {
    let scopes = scopes(namespaces);
    // Each scope fills its own flow cache; every scope reads all of them, so flows in two
    // watched namespaces that share a target topic are seen together (controller::overlap).
    let flow_stores: Vec<_> = scopes
        .iter()
        .map(|_| reflector::store::<MirrorFlow>())
        .collect();
    let all_flows: Vec<Store<MirrorFlow>> = flow_stores.iter().map(|(s, _)| s.clone()).collect();
    futures::future::join_all(scopes.into_iter().zip(flow_stores).map(|(ns, flows)| {
        let ctx = Context::new(
            client.clone(),
            settings.clone(),
            metrics.clone(),
            reconcile::reporter(),
        )
        .with_leadership(leadership.clone());
        run_controllers(client.clone(), ns, ctx, flows, all_flows.clone(), shutdown)
    }))
    .await;
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
        assert_eq!(a.namespaces, Vec::<String>::new());
        assert_eq!(
            (
                a.lease_duration_seconds,
                a.renew_deadline_seconds,
                a.retry_period_seconds
            ),
            (15, 10, 2)
        );
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
            "--worker-image-allowlist",
            "reg/mf:*,reg/other@sha256:*",
        ])
        .unwrap()
        .args;
        assert_eq!(a.worker_image_allowlist, ["reg/mf:*", "reg/other@sha256:*"]);
        assert_eq!(a.listen.port(), 9000);
        assert_eq!(a.namespaces, vec!["kafka".to_string()]);
        assert_eq!(a.worker_image, "reg/mf:1");
        assert!(!a.leader_election);
        assert_eq!(
            (a.lease_name.as_str(), a.lease_namespace.as_deref()),
            ("l", Some("ops"))
        );
        assert!(Cli::try_parse_from(["x", "--leader-election", "maybe"]).is_err());
        let a = Cli::try_parse_from(["x", "--namespace", "a,b", "--namespace", "c"])
            .unwrap()
            .args;
        assert_eq!(a.namespaces, vec!["a", "b", "c"]);
    }

    fn args(flags: &[&str]) -> ControllerArgs {
        Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn lease_timing_table() {
        let cases = [
            (&[][..], true),
            (&["--renew-deadline-seconds", "14"][..], true),
            (&["--renew-deadline-seconds", "15"][..], false),
            (
                &[
                    "--lease-duration-seconds",
                    "5",
                    "--renew-deadline-seconds",
                    "10",
                ][..],
                false,
            ),
            (&["--retry-period-seconds", "0"][..], false),
        ];
        for (flags, ok) in cases {
            let got = check_lease_timing(&args(flags));
            assert_eq!(got.is_ok(), ok, "{flags:?}: {got:?}");
        }
        let err = check_lease_timing(&args(&["--renew-deadline-seconds", "20"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--renew-deadline-seconds (20) must be below --lease-duration-seconds (15), and \
             --retry-period-seconds at least 1"
        );
    }

    #[test]
    fn lease_namespace_table() {
        // POD_NAMESPACE may be set where the tests run: only explicit flags are compared.
        let mut a = args(&["--namespace", "kafka,ops"]);
        a.lease_namespace = None;
        assert_eq!(lease_namespace(&a, "default"), "kafka");
        a.namespaces.clear();
        assert_eq!(lease_namespace(&a, "default"), "default");
        a.lease_namespace = Some("leases".into());
        assert_eq!(lease_namespace(&a, "default"), "leases");
    }

    #[test]
    fn settings_and_scopes_from_the_flags() {
        let a = args(&[
            "--worker-image",
            "reg/mf:2",
            "--worker-image-allowlist",
            " reg/mf:* ,,reg/x:1",
        ]);
        assert_eq!(
            build_settings(&a),
            BuildSettings {
                worker_image: "reg/mf:2".into(),
                image_allowlist: vec!["reg/mf:*".into(), "reg/x:1".into()],
            }
        );
        assert_eq!(scopes(&[]), vec![None]);
        assert_eq!(
            scopes(&["a".to_string(), "b".to_string()]),
            vec![Some("a".to_string()), Some("b".to_string())]
        );
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
