//! Clusters shared by the tests of one test binary, so a binary pays one cluster start.
//!
//! cargo-nextest runs each test in a process of its own, so the cluster outlives the test
//! that started it: the first test of the binary (under a file lock) starts it in a session
//! of its own, with its nodes' watchdogs watching nextest's runner, and writes where it
//! listens; the next tests read that and use it while its nodes live. Under `cargo test` the
//! binary's tests share a process and the cluster lives until that process exits.
//!
//! A shared cluster cannot be stopped or restarted by a test (others use it), and its tests
//! must not step on each other: each uses topics, groups and flow names of its own.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::{print_problems, KafkaCluster, KafkaConfig, Listener};
use crate::testkit::local::BrokerError;

/// Where a shared cluster listens, and its nodes' processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub dir: PathBuf,
    pub listeners: BTreeMap<Listener, String>,
    pub pids: Vec<u32>,
    pub logs: Vec<PathBuf>,
    pub version: String,
}

impl State {
    fn render(&self) -> String {
        let mut out = format!("dir={}\nversion={}\n", self.dir.display(), self.version);
        for (l, addrs) in &self.listeners {
            out.push_str(&format!("listener.{}={addrs}\n", l.name()));
        }
        for pid in &self.pids {
            out.push_str(&format!("pid={pid}\n"));
        }
        for log in &self.logs {
            out.push_str(&format!("log={}\n", log.display()));
        }
        out
    }

    fn parse(text: &str) -> Option<State> {
        let mut state = State {
            dir: PathBuf::new(),
            listeners: BTreeMap::new(),
            pids: Vec::new(),
            logs: Vec::new(),
            version: String::new(),
        };
        for line in text.lines() {
            let (key, value) = line.split_once('=')?;
            match key {
                "dir" => state.dir = PathBuf::from(value),
                "version" => state.version = value.to_owned(),
                "pid" => state.pids.push(value.parse().ok()?),
                "log" => state.logs.push(PathBuf::from(value)),
                _ => {
                    let name = key.strip_prefix("listener.")?;
                    let l = [
                        Listener::Plaintext,
                        Listener::Mtls,
                        Listener::Scram,
                        Listener::OAuth,
                    ]
                    .into_iter()
                    .find(|l| l.name() == name)?;
                    state.listeners.insert(l, value.to_owned());
                }
            }
        }
        (!state.pids.is_empty() && state.listeners.contains_key(&Listener::Plaintext))
            .then_some(state)
    }

    fn alive(&self) -> bool {
        self.pids
            .iter()
            .all(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }
}

/// A handle on a shared cluster. Dropping it leaves the cluster running for the binary's
/// other tests; if the test is panicking, the nodes' last warnings and errors are printed.
#[derive(Debug, Clone)]
pub struct SharedKafka {
    state: State,
}

impl SharedKafka {
    /// The cluster shared under `key` by this test binary's tests, started with `config` by
    /// the first that asks. Tests that share a key must ask for the same config.
    pub async fn get(key: &str, config: KafkaConfig) -> Result<SharedKafka, BrokerError> {
        let key = sanitize(key);
        match Runner::from_env() {
            Runner::Nextest { run_id, binary_id } => {
                let dir = std::env::temp_dir()
                    .join("mirrorflow-kafka-shared")
                    .join(sanitize(&run_id))
                    .join(format!("{}-{key}", sanitize(&binary_id)));
                fs::create_dir_all(&dir)
                    .map_err(BrokerError::io(format!("create {}", dir.display())))?;
                let lock = fs::File::create(dir.join("lock"))
                    .map_err(BrokerError::io("create the shared cluster's lock"))?;
                // Held while we look and, if need be, start: the binary's tests wait here.
                lock.lock()
                    .map_err(BrokerError::io("lock the shared cluster"))?;
                let state_path = dir.join("state");
                if let Some(state) = fs::read_to_string(&state_path)
                    .ok()
                    .and_then(|t| State::parse(&t))
                    .filter(State::alive)
                {
                    return Ok(SharedKafka { state });
                }
                let owner = std::os::unix::process::parent_id();
                let cluster =
                    KafkaCluster::start_owned(config, owner, true, Some(fresh_dir(&dir)?)).await?;
                let state = cluster.leak();
                fs::write(&state_path, state.render())
                    .map_err(BrokerError::io(format!("write {}", state_path.display())))?;
                Ok(SharedKafka { state })
            }
            Runner::Process => {
                static CLUSTERS: OnceLock<Mutex<BTreeMap<String, State>>> = OnceLock::new();
                let clusters = CLUSTERS.get_or_init(Default::default);
                if let Some(state) = lock(clusters).get(&key).filter(|s| s.alive()) {
                    return Ok(SharedKafka {
                        state: state.clone(),
                    });
                }
                let cluster =
                    KafkaCluster::start_owned(config, std::process::id(), true, None).await?;
                let state = cluster.leak();
                lock(clusters).insert(key, state.clone());
                Ok(SharedKafka { state })
            }
        }
    }

    /// PLAINTEXT `host:port` of every node.
    pub fn bootstrap_servers(&self) -> String {
        self.listener(Listener::Plaintext)
    }

    /// `host:port` of every node's `listener` (empty if the cluster has none).
    pub fn listener(&self, listener: Listener) -> String {
        self.state
            .listeners
            .get(&listener)
            .cloned()
            .unwrap_or_default()
    }

    /// The version the jars are.
    pub fn version(&self) -> &str {
        &self.state.version
    }
}

impl Drop for SharedKafka {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, log) in self.state.logs.iter().enumerate() {
                print_problems(i + 1, log);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new directory for a cluster under `dir` (an earlier one may hold a dead cluster's logs).
fn fresh_dir(dir: &Path) -> Result<PathBuf, BrokerError> {
    tempfile::Builder::new()
        .prefix("cluster-")
        .tempdir_in(dir)
        .map(tempfile::TempDir::keep)
        .map_err(BrokerError::io(format!(
            "create a cluster directory in {}",
            dir.display()
        )))
}

/// Who runs the tests.
#[derive(Debug, PartialEq, Eq)]
enum Runner {
    /// cargo-nextest: a process per test, all children of the runner.
    Nextest { run_id: String, binary_id: String },
    /// `cargo test` or a bench: one process.
    Process,
}

impl Runner {
    fn from_env() -> Runner {
        Self::from(
            std::env::var("NEXTEST_RUN_ID").ok(),
            std::env::var("NEXTEST_BINARY_ID").ok(),
        )
    }

    fn from(run_id: Option<String>, binary_id: Option<String>) -> Runner {
        match (run_id.filter(|s| !s.is_empty()), binary_id) {
            (Some(run_id), binary_id) => Runner::Nextest {
                run_id,
                binary_id: binary_id.unwrap_or_else(|| {
                    std::env::current_exe()
                        .ok()
                        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .unwrap_or_default()
                }),
            },
            (None, _) => Runner::Process,
        }
    }
}

/// A file-name-safe version of `s`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips() {
        let state = State {
            dir: "/tmp/c".into(),
            listeners: [
                (Listener::Plaintext, "127.0.0.1:1,127.0.0.1:2".to_owned()),
                (Listener::Scram, "127.0.0.1:3".to_owned()),
            ]
            .into(),
            pids: vec![10, 11],
            logs: vec!["/tmp/c/node-1/kafka.log".into()],
            version: "4.4.0".into(),
        };
        assert_eq!(State::parse(&state.render()), Some(state));
        assert_eq!(State::parse("dir=/x\n"), None, "no pids, no listeners");
        assert_eq!(State::parse("garbage"), None);
    }

    #[test]
    fn runner_table() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(Runner::from(None, s("b")), Runner::Process);
        assert_eq!(Runner::from(s(""), s("b")), Runner::Process);
        assert_eq!(
            Runner::from(s("r"), s("mirrorflow::faults")),
            Runner::Nextest {
                run_id: "r".into(),
                binary_id: "mirrorflow::faults".into()
            }
        );
        assert_eq!(sanitize("mirrorflow::faults"), "mirrorflow__faults");
    }
}
