//! The HTTP endpoints of a process: `/metrics` (Prometheus text), `/healthz` (liveness),
//! `/readyz` (readiness) and `/status` (JSON from a provider function).
//!
//! `/readyz` answers 200 once the owner marks the process ready (for a worker: positions known
//! and replication running, not Failed), else 503 with the reason. `/healthz` (liveness)
//! answers 200 while the owner keeps reporting its readiness, and 503 once it has not for
//! [`STALL_LIMIT`]: the engine's loop refreshes its readiness every status interval (2 s), and
//! every call it makes is bounded (at most about a minute), so a loop that stops reporting is
//! wedged and the kubelet restarts it.
//!
//! Binding: one listener (`--listen`, the pod's port 8080 named `http`) serves all four to
//! anything that can reach the pod; `/status` shows the flow's partitions, positions and
//! failures (never a secret: credentials are only referenced), `/metrics` the series of
//! docs/PACKAGING.md. Restrict who may reach it with a NetworkPolicy, or bind `--listen` to
//! 127.0.0.1 when nothing scrapes it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::Registry;

use super::metrics::encode_registry;

/// How long the owner may go without reporting its readiness before `/healthz` fails.
pub const STALL_LIMIT: Duration = Duration::from_secs(300);

/// Readiness, set by the process owner; each report is also a heartbeat of its loop.
#[derive(Debug)]
pub struct Readiness {
    // None = ready; Some(reason) = not ready.
    state: Mutex<Option<String>>,
    /// When the owner last reported (monotonic).
    reported: Mutex<Instant>,
    stall_limit: Duration,
}

impl Readiness {
    /// Not ready yet, with a reason.
    pub fn new(reason: &str) -> Arc<Self> {
        Self::with_stall_limit(reason, STALL_LIMIT)
    }

    /// [`Readiness::new`] with another stall limit.
    pub fn with_stall_limit(reason: &str, stall_limit: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Some(reason.to_string())),
            reported: Mutex::new(Instant::now()),
            stall_limit,
        })
    }

    fn beat(&self) {
        *self.reported.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Marks ready.
    pub fn set_ready(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.beat();
    }

    /// Marks not ready, with a reason.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.into());
        self.beat();
    }

    /// `None` when ready, else the reason.
    pub fn not_ready_reason(&self) -> Option<String> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How long ago the owner last reported.
    pub fn since_report(&self) -> Duration {
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// `None` while the owner reports, else why the process counts as wedged.
    pub fn wedged(&self) -> Option<String> {
        let since = self.since_report();
        (since > self.stall_limit).then(|| {
            format!(
                "no progress report for {}s (limit {}s): the loop is wedged",
                since.as_secs(),
                self.stall_limit.as_secs()
            )
        })
    }
}

/// Produces the `/status` document.
pub type StatusFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// What the endpoints serve.
#[derive(Clone)]
pub struct HttpState {
    /// Served on `/metrics`.
    pub registry: Registry,
    /// Drives `/readyz`.
    pub readiness: Arc<Readiness>,
    /// Served on `/status`.
    pub status: StatusFn,
}

/// The router with all four endpoints.
pub fn router(state: HttpState) -> Router {
    let registry = state.registry.clone();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(state)
        .merge(metrics_router(registry))
}

/// `/metrics` alone (Prometheus text of `registry`): a process without readiness or a status
/// document (the controller) adds its own routes to it.
pub fn metrics_router(registry: Registry) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry)
}

async fn metrics(State(registry): State<Registry>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        encode_registry(&registry),
    )
        .into_response()
}

async fn healthz(State(s): State<HttpState>) -> Response {
    match s.readiness.wedged() {
        None => (StatusCode::OK, "ok\n".to_string()).into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn readyz(State(s): State<HttpState>) -> Response {
    match s.readiness.not_ready_reason() {
        None => (StatusCode::OK, "ready\n".to_string()).into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

async fn status(State(s): State<HttpState>) -> Response {
    axum::Json((s.status)()).into_response()
}

/// Binds `addr` (errors name it) and serves `router` until `shutdown` completes.
/// Returns the bound address (useful with port 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (--listen): {e}"))?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok((local, task))
}

/// A minimal HTTP/1.1 GET for tests and the demo: `(status code, body)`.
pub async fn get_text(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints() {
        let registry = Registry::new();
        let c = prometheus::IntCounter::new("x_total", "x").unwrap();
        registry.register(Box::new(c.clone())).unwrap();
        c.inc();
        let readiness = Readiness::new("starting");
        let router = router(HttpState {
            registry,
            readiness: readiness.clone(),
            status: Arc::new(|| serde_json::json!({"state": "Running"})),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), router, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap();
        let cases = [
            ("/healthz", 200, "ok"),
            ("/readyz", 503, "not ready: starting"),
            ("/metrics", 200, "x_total 1"),
            ("/status", 200, "\"state\":\"Running\""),
            ("/nope", 404, ""),
        ];
        for (path, want_status, needle) in cases {
            let (status, body) = get_text(addr, path).await.unwrap();
            assert_eq!(status, want_status, "{path}");
            assert!(body.contains(needle), "{path}: {body}");
        }
        readiness.set_ready();
        assert_eq!(get_text(addr, "/readyz").await.unwrap().0, 200);
        stop_tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn liveness_fails_when_the_owner_stops_reporting() {
        let readiness = Readiness::with_stall_limit("starting", Duration::from_millis(200));
        let router = router(HttpState {
            registry: Registry::new(),
            readiness: readiness.clone(),
            status: Arc::new(|| serde_json::json!({})),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), router, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap();
        assert_eq!(get_text(addr, "/healthz").await.unwrap().0, 200);
        // The owner keeps reporting (whatever it says): alive.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            readiness.set_not_ready("target unreachable");
        }
        assert_eq!(get_text(addr, "/healthz").await.unwrap().0, 200);
        // It stops: wedged, while the server itself still answers.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (code, body) = get_text(addr, "/healthz").await.unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("wedged"), "{body}");
        readiness.set_ready();
        assert_eq!(
            get_text(addr, "/healthz").await.unwrap().0,
            200,
            "it recovers"
        );
        stop_tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[test]
    fn dechunk_table() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
        assert_eq!(dechunk("0\r\n\r\n"), "");
    }
}
