//! Apache Kafka for the tests and benches: KRaft clusters in combined mode (every node a
//! broker and a controller), one node or three, run with `java -cp` from the jars
//! `scripts/setup-kafka.sh` caches, on free loopback ports.
//!
//! Every cluster runs `StandardAuthorizer`. Its PLAINTEXT listener's clients are
//! `User:ANONYMOUS`, a super user: the testkit's helpers and the brokers among themselves use
//! it. The secured listeners a [`KafkaConfig`] asks for (mTLS, SASL_SSL SCRAM-SHA-512,
//! OAUTHBEARER) authenticate principals whose ACLs then decide.
//!
//! Data lives on disk: a node stopped and started again keeps its topics, records, groups and
//! ACLs. Each node logs to a file in the cluster's directory; a cluster dropped while its
//! test panics prints each node's last warnings and errors and keeps the directory (so does
//! `MIRRORFLOW_KEEP_BROKER_LOGS`). A watchdog process per node kills it if the process that
//! owns the cluster dies without dropping it (a test killed by SIGKILL, a shared cluster's
//! test runner ending).

mod config;
mod install;
mod shared;

pub(crate) use config::Props;
pub use config::{KafkaConfig, KafkaTls, Listener, NodePorts, OAuthValidation};
pub use install::{find as find_install, java_from_env, Distribution, Install, JAVA_ENV};
pub use shared::SharedKafka;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use super::local::{
    free_port, release_port, BrokerError, BrokerKind, KAFKA_HOME_ENV, KAFKA_INSTALL_HINT,
    KEEP_LOGS_ENV,
};
use super::proxy::KafkaProxy;

/// How long a node may take to answer metadata listing every node (a cold JVM on a loaded
/// 2-core machine can take half a minute).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a node may take to stop after SIGTERM (a controlled shutdown moves leadership).
const TERM_TIMEOUT: Duration = Duration::from_secs(60);

/// A running Apache Kafka cluster. Dropping it kills every node and deletes its directory
/// (kept when the thread is panicking).
pub struct KafkaCluster {
    config: KafkaConfig,
    install: Install,
    java: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
    /// The process whose death kills the nodes (this test process, or a shared cluster's
    /// test runner).
    owner: u32,
    /// A shared cluster: nodes in a session of their own (it outlives the test that started
    /// it), its directory removed by the watchdogs.
    detached: bool,
    started_in: Duration,
}

struct Node {
    ports: NodePorts,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl std::fmt::Debug for KafkaCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCluster")
            .field("version", &self.install.version)
            .field("bootstrap", &self.bootstrap_servers())
            .field("dir", &self.dir)
            .finish()
    }
}

fn not_installed(detail: String) -> BrokerError {
    BrokerError::BinaryNotFound {
        kind: BrokerKind::Kafka,
        searched: detail,
        hint: KAFKA_INSTALL_HINT,
        env: KAFKA_HOME_ENV,
    }
}

impl KafkaCluster {
    /// Starts a cluster and waits until every node answers metadata listing all of them.
    /// [`BrokerError::BinaryNotFound`] when the jars are not fetched.
    pub async fn start(config: KafkaConfig) -> Result<KafkaCluster, BrokerError> {
        Self::start_owned(config, std::process::id(), false, None).await
    }

    /// [`KafkaCluster::start`] for a one-node cluster that advertises `proxy`
    /// ([`KafkaConfig::advertise_plaintext`]): the proxy forwards to the node before the
    /// node is probed (the probe's clients follow the advertised address).
    pub(crate) async fn start_behind(
        config: KafkaConfig,
        proxy: &KafkaProxy,
    ) -> Result<KafkaCluster, BrokerError> {
        Self::start_inner(config, std::process::id(), false, None, Some(proxy)).await
    }

    pub(crate) async fn start_owned(
        config: KafkaConfig,
        owner: u32,
        detached: bool,
        dir: Option<PathBuf>,
    ) -> Result<KafkaCluster, BrokerError> {
        Self::start_inner(config, owner, detached, dir, None).await
    }

    async fn start_inner(
        config: KafkaConfig,
        owner: u32,
        detached: bool,
        dir: Option<PathBuf>,
        proxy: Option<&KafkaProxy>,
    ) -> Result<KafkaCluster, BrokerError> {
        config.check().map_err(|detail| BrokerError::Failed {
            op: "configure a Kafka cluster".to_owned(),
            detail,
        })?;
        let install = install::find(Distribution::Broker).map_err(not_installed)?;
        let begin = Instant::now();
        let dir = match dir {
            Some(d) => d,
            None => tempfile::Builder::new()
                .prefix("mirrorflow-kafka-")
                .tempdir()
                .map_err(BrokerError::io("create the Kafka cluster's directory"))?
                .keep(),
        };
        let mut cluster = KafkaCluster {
            java: install::java_from_env(),
            install,
            dir,
            nodes: Vec::new(),
            owner,
            detached,
            started_in: Duration::ZERO,
            config,
        };
        cluster.prepare()?;
        if let Some(proxy) = proxy {
            let upstream = cluster.node_address(1);
            proxy.set_upstream(upstream.parse().map_err(|_| BrokerError::Failed {
                op: "point the proxy at the Kafka node".to_owned(),
                detail: upstream,
            })?);
        }
        cluster.format().await?;
        for i in 0..cluster.nodes.len() {
            cluster.spawn(i)?;
        }
        cluster.wait_ready(None).await?;
        cluster.started_in = begin.elapsed();
        Ok(cluster)
    }

    /// Ports, files and `server.properties` of every node.
    fn prepare(&mut self) -> Result<(), BrokerError> {
        let listeners = self.config.client_listeners();
        let mut all = Vec::new();
        for node_id in 1..=self.config.nodes {
            let mut ports = BTreeMap::new();
            for l in &listeners {
                ports.insert(*l, free_port()?);
            }
            all.push(NodePorts {
                node_id,
                listeners: ports,
                controller: free_port()?,
            });
        }
        write(&self.dir.join("log4j2.properties"), LOG4J)?;
        for ports in &all {
            let dir = self.dir.join(format!("node-{}", ports.node_id));
            fs::create_dir_all(&dir)
                .map_err(BrokerError::io(format!("create {}", dir.display())))?;
            self.nodes.push(Node {
                log: dir.join("kafka.log"),
                dir,
                ports: ports.clone(),
                child: None,
            });
        }
        self.write_node_files()
    }

    /// The key store (from the config's TLS files) and every node's `server.properties`.
    fn write_node_files(&self) -> Result<(), BrokerError> {
        let keystore = self.dir.join("keystore.pem");
        if let Some(tls) = &self.config.tls {
            // Kafka's PEM key store: the private key and the certificate chain in one file.
            let key = read(&tls.key)?;
            let cert = read(&tls.cert)?;
            write(
                &keystore,
                &format!("{}\n{}\n", key.trim_end(), cert.trim_end()),
            )?;
        }
        let all: Vec<NodePorts> = self.nodes.iter().map(|n| n.ports.clone()).collect();
        for node in &self.nodes {
            let props =
                config::server_properties(&self.config, &node.ports, &all, &node.dir, &keystore);
            write(&node.dir.join("server.properties"), &props)?;
        }
        Ok(())
    }

    /// Serves `tls` (another certificate, key or CA) from now on: every node is killed and
    /// started again with it, on the same ports and with the same data. A certificate
    /// Kafka would refuse to reload in place (another host name) is served all the same.
    pub async fn replace_tls(&mut self, tls: KafkaTls) -> Result<(), BrokerError> {
        for id in self.node_ids() {
            self.kill(id)?;
        }
        self.config.tls = Some(tls);
        self.write_node_files()?;
        for i in 0..self.nodes.len() {
            self.spawn(i)?;
        }
        self.wait_ready(None).await
    }

    /// Formats every node's storage (one JVM each, at the same time), with the SCRAM users.
    async fn format(&self) -> Result<(), BrokerError> {
        let cluster_id = cluster_id()?;
        let mut running = Vec::new();
        for node in &self.nodes {
            let log = File::create(node.dir.join("format.log"))
                .map_err(BrokerError::io("create the format log"))?;
            let mut command = Command::new(&self.java);
            command
                .args(self.jvm_base(64))
                .arg("-cp")
                .arg(self.install.classpath())
                .args(["kafka.tools.StorageTool", "format", "-t", &cluster_id, "-c"])
                .arg(node.dir.join("server.properties"))
                .args(config::scram_arguments(&self.config))
                .stdin(Stdio::null())
                .stdout(
                    log.try_clone()
                        .map_err(BrokerError::io("clone a log handle"))?,
                )
                .stderr(log);
            let child = command.spawn().map_err(|source| BrokerError::Spawn {
                kind: BrokerKind::Kafka,
                binary: self.java.clone(),
                source,
            })?;
            running.push((node, child));
        }
        for (node, child) in running {
            let out = tokio::task::spawn_blocking(move || child.wait_with_output())
                .await
                .map_err(|e| BrokerError::Failed {
                    op: "wait for the storage tool".to_owned(),
                    detail: e.to_string(),
                })?
                .map_err(BrokerError::io("wait for the storage tool"))?;
            if !out.status.success() {
                return Err(BrokerError::Failed {
                    op: format!("format node {}'s storage", node.ports.node_id),
                    detail: format!(
                        "{}: {}",
                        out.status,
                        last_lines(&read(&node.dir.join("format.log")).unwrap_or_default(), 20)
                    ),
                });
            }
        }
        Ok(())
    }

    /// JVM options every Kafka JVM of the testkit shares.
    fn jvm_base(&self, heap_mib: u32) -> Vec<String> {
        let mut args = vec![
            format!("-Xmx{heap_mib}m"),
            "-Xms32m".to_owned(),
            "-XX:+UseSerialGC".to_owned(),
            "-Xss512k".to_owned(),
            format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.properties").display()
            ),
        ];
        if let Some(archive) = self.install.archive() {
            // A stale archive (other jars) is ignored by the JVM, quietly with these flags.
            args.push(format!("-XX:SharedArchiveFile={}", archive.display()));
            args.push("-Xshare:auto".to_owned());
            args.push("-Xlog:cds=off".to_owned());
            args.push("-Xlog:cds+dynamic=off".to_owned());
        }
        args
    }

    /// Starts node `i`'s JVM and its watchdog.
    fn spawn(&mut self, i: usize) -> Result<(), BrokerError> {
        let node = &self.nodes[i];
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(BrokerError::io(format!("open {}", node.log.display())))?;
        use std::io::Write;
        let _ = writeln!(
            log,
            "--- mirrorflow testkit: node {} starting",
            node.ports.node_id
        );
        let mut command = if self.detached {
            // Its own session: the test process's group may be killed while others use it.
            let mut c = Command::new("setsid");
            c.arg(&self.java);
            c
        } else {
            Command::new(&self.java)
        };
        command
            .args(self.jvm_base(self.config.heap_mib))
            .args(config::jvm_properties(&self.config))
            .arg("-cp")
            .arg(self.install.classpath())
            .arg("kafka.Kafka")
            .arg(node.dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(BrokerError::io("clone a log handle"))?,
            )
            .stderr(log);
        let child = command.spawn().map_err(|source| BrokerError::Spawn {
            kind: BrokerKind::Kafka,
            binary: self.java.clone(),
            source,
        })?;
        // A shared cluster's directory goes with its nodes; a test's own is removed on drop.
        let cleanup = self.detached.then_some(self.dir.as_path());
        watchdog(child.id(), self.owner, cleanup)?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// Waits until every running node answers metadata listing every running node. `fresh`:
    /// the node just started, whose death is reported at once.
    async fn wait_ready(&mut self, fresh: Option<usize>) -> Result<(), BrokerError> {
        let begin = Instant::now();
        let want = self.nodes.iter().filter(|n| n.child.is_some()).count();
        loop {
            if let Some(failed) = self.exited_node() {
                let node = &self.nodes[failed];
                return Err(BrokerError::Failed {
                    op: format!("start Kafka node {}", node.ports.node_id),
                    detail: format!(
                        "the JVM exited; {}:\n{}",
                        node.log.display(),
                        problems_tail(&node.log, 30)
                    ),
                });
            }
            let mut last_error = String::new();
            let mut ready = 0;
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                let bootstrap = format!("127.0.0.1:{}", node.ports.listeners[&Listener::Plaintext]);
                match brokers_listed(bootstrap).await {
                    Ok(n) if n >= want => ready += 1,
                    Ok(n) => last_error = format!("metadata lists {n} of {want} nodes"),
                    Err(e) => last_error = e,
                }
            }
            if ready == want {
                return Ok(());
            }
            if begin.elapsed() > READY_TIMEOUT {
                let node = &self.nodes[fresh.unwrap_or(0)];
                return Err(BrokerError::NotReady {
                    kind: BrokerKind::Kafka,
                    bootstrap: self.bootstrap_servers(),
                    waited: begin.elapsed(),
                    last_error,
                    log: node.log.clone(),
                    tail: problems_tail(&node.log, 30),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn exited_node(&mut self) -> Option<usize> {
        self.nodes.iter_mut().position(|n| {
            n.child
                .as_mut()
                .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
        })
    }

    /// The version the jars are (`scripts/kafka/pom.xml`).
    pub fn version(&self) -> &str {
        &self.install.version
    }

    /// The cluster's config.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// How long [`KafkaCluster::start`] took, formatting included.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// PLAINTEXT `host:port` of every node, for `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> String {
        self.listener(Listener::Plaintext)
    }

    /// `host:port` of every node's `listener` (empty if the cluster has none).
    pub fn listener(&self, listener: Listener) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| n.ports.listeners.get(&listener))
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        addrs.join(",")
    }

    /// PLAINTEXT `host:port` of node `node_id` (1-based).
    pub fn node_address(&self, node_id: usize) -> String {
        format!(
            "127.0.0.1:{}",
            self.node(node_id).ports.listeners[&Listener::Plaintext]
        )
    }

    /// The node ids, 1-based.
    pub fn node_ids(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.ports.node_id).collect()
    }

    /// The pid of node `node_id`'s JVM, while it runs.
    pub fn node_pid(&self, node_id: usize) -> Option<u32> {
        self.node(node_id).child.as_ref().map(Child::id)
    }

    /// Whether node `node_id`'s JVM runs (started, not stopped, not exited).
    pub fn is_running(&self, node_id: usize) -> bool {
        self.node(node_id).child.as_ref().is_some_and(|c| {
            // Not reaped yet, an exited JVM is a zombie: state `Z` in /proc.
            fs::read_to_string(format!("/proc/{}/stat", c.id())).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|r| !r.trim_start().starts_with('Z'))
            })
        })
    }

    /// Node `node_id`'s log file.
    pub fn log_path(&self, node_id: usize) -> &Path {
        &self.node(node_id).log
    }

    /// The cluster's directory (nodes' data and logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn index(&self, node_id: usize) -> usize {
        self.nodes
            .iter()
            .position(|n| n.ports.node_id == node_id)
            .unwrap_or_else(|| panic!("no Kafka node {node_id} (nodes {:?})", self.node_ids()))
    }

    fn node(&self, node_id: usize) -> &Node {
        &self.nodes[self.index(node_id)]
    }

    /// Kills node `node_id`'s JVM with SIGKILL (a crash: nothing flushed, no controlled
    /// shutdown) and reaps it. A stopped node stays stopped.
    pub fn kill(&mut self, node_id: usize) -> Result<(), BrokerError> {
        let i = self.index(node_id);
        if let Some(mut child) = self.nodes[i].child.take() {
            if let Err(err) = child.kill() {
                if err.kind() != io::ErrorKind::InvalidInput {
                    return Err(BrokerError::Io {
                        op: format!("kill Kafka node {node_id} (pid {})", child.id()),
                        source: err,
                    });
                }
            }
            child
                .wait()
                .map_err(BrokerError::io(format!("reap Kafka node {node_id}")))?;
        }
        Ok(())
    }

    /// Stops node `node_id` with SIGTERM: a controlled shutdown (its partitions' leadership
    /// moves to other nodes first), waiting for the JVM to exit (SIGKILL after 60 s).
    pub async fn shut_down(&mut self, node_id: usize) -> Result<(), BrokerError> {
        let i = self.index(node_id);
        let Some(mut child) = self.nodes[i].child.take() else {
            return Ok(());
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let begin = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if begin.elapsed() < TERM_TIMEOUT => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(BrokerError::Timeout {
                        op: format!("controlled shutdown of Kafka node {node_id}"),
                        waited: begin.elapsed(),
                        detail: "killed with SIGKILL".to_owned(),
                    });
                }
            }
        }
    }

    /// Starts a stopped node `node_id` again (same ports, same data) and waits until every
    /// running node lists it.
    pub async fn start_node(&mut self, node_id: usize) -> Result<(), BrokerError> {
        let i = self.index(node_id);
        if self.nodes[i].child.is_none() {
            self.spawn(i)?;
        }
        self.wait_ready(Some(i)).await
    }

    /// Kills every node and starts them again (a whole-cluster crash and recovery).
    pub async fn restart(&mut self) -> Result<(), BrokerError> {
        for id in self.node_ids() {
            self.kill(id)?;
        }
        for i in 0..self.nodes.len() {
            self.spawn(i)?;
        }
        self.wait_ready(None).await
    }

    /// Runs one of Kafka's command-line tools (`org.apache.kafka.tools.AclCommand`,
    /// `org.apache.kafka.tools.ConfigCommand`, ...) on the cluster's jars, returning its stdout; a
    /// non-zero exit is an error carrying its output.
    pub async fn tool(&self, class: &str, args: &[&str]) -> Result<String, BrokerError> {
        let mut command = tokio::process::Command::new(&self.java);
        command
            .args(self.jvm_base(256))
            .arg("-cp")
            .arg(self.install.classpath())
            .arg(class)
            .args(args)
            .stdin(Stdio::null());
        let out = command
            .output()
            .await
            .map_err(BrokerError::io(format!("run {class}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(BrokerError::Failed {
                op: format!("{class} {}", args.join(" ")),
                detail: format!(
                    "{}: {}{}",
                    out.status,
                    stdout,
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    /// Resident memory of each running node's JVM, KiB (from /proc).
    pub fn rss_kib(&self) -> Vec<(usize, u64)> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let pid = n.child.as_ref()?.id();
                Some((n.ports.node_id, proc_status_kib(pid, "VmRSS")?))
            })
            .collect()
    }

    /// Leaves the nodes running past this handle (a shared cluster: the watchdogs end them).
    pub(crate) fn leak(mut self) -> shared::State {
        let state = shared::State {
            dir: self.dir.clone(),
            listeners: self
                .config
                .client_listeners()
                .into_iter()
                .map(|l| (l, self.listener(l)))
                .collect(),
            pids: self
                .nodes
                .iter()
                .filter_map(|n| n.child.as_ref().map(Child::id))
                .collect(),
            logs: self.nodes.iter().map(|n| n.log.clone()).collect(),
            version: self.install.version.clone(),
        };
        for n in &mut self.nodes {
            n.child = None;
        }
        self.nodes.clear();
        self.dir = PathBuf::new();
        state
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            for port in node
                .ports
                .listeners
                .values()
                .chain([&node.ports.controller])
            {
                release_port(*port);
            }
        }
        if self.dir.as_os_str().is_empty() {
            return;
        }
        if std::thread::panicking() {
            for node in &self.nodes {
                print_problems(node.ports.node_id, &node.log);
            }
            eprintln!(
                "mirrorflow testkit: Kafka cluster kept at {}",
                self.dir.display()
            );
        } else if std::env::var_os(KEEP_LOGS_ENV).is_some() {
            eprintln!(
                "mirrorflow testkit: Kafka cluster kept at {}",
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`: resident now, `VmHWM`: its peak).
pub(crate) fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    status_kib(
        &fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        field,
    )
}

fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Prints the last warnings and errors of a node's log to stderr (a failing test's output).
pub(crate) fn print_problems(node_id: usize, log: &Path) {
    eprintln!(
        "--- Kafka node {node_id}: last warnings and errors of {} ---\n{}",
        log.display(),
        problems_tail(log, 40)
    );
}

/// log4j2 for the nodes: INFO to stdout (the node's log file), quieter where it is chatty.
const LOG4J: &str = "\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
";

/// Kills `pid` with SIGKILL once `owner` is gone (then removes `cleanup`); ends by itself
/// when `pid` exits. A shell loop in a session of its own, so killing the owner's process
/// group spares it.
pub(crate) fn watchdog(pid: u32, owner: u32, cleanup: Option<&Path>) -> Result<(), BrokerError> {
    let cleanup = cleanup.map_or(String::new(), |d| {
        format!(
            "sleep 1; rm -rf '{}';",
            d.display().to_string().replace('\'', "")
        )
    });
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do \
           kill -0 {owner} 2>/dev/null || {{ kill -9 {pid}; {cleanup} exit 0; }}; sleep 1; \
         done"
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(BrokerError::io("spawn a Kafka node's watchdog (setsid sh)"))
}

/// Brokers a metadata request to `bootstrap` lists.
async fn brokers_listed(bootstrap: String) -> Result<usize, String> {
    tokio::task::spawn_blocking(move || {
        let addr: std::net::SocketAddr =
            bootstrap.parse().map_err(|e| format!("{bootstrap}: {e}"))?;
        // A cheap TCP probe first: librdkafka's reconnect backoff slows the metadata probe
        // while nothing listens yet.
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
            .map_err(|e| format!("connect {bootstrap}: {e}"))?;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("log_level", "3")
            .create()
            .map_err(|e| e.to_string())?;
        let md = consumer
            .fetch_metadata(None, Duration::from_secs(3))
            .map_err(|e| format!("metadata from {bootstrap}: {e}"))?;
        Ok(md.brokers().len())
    })
    .await
    .map_err(|e| format!("metadata probe task: {e}"))?
}

/// A new cluster id: 16 random bytes, base64url without padding (the storage tool's format).
/// The first byte's top bit is clear, so the id never starts with `-` or `_` (the storage
/// tool would read a leading `-` as an option; Kafka's own `Uuid.randomUuid` avoids it too).
fn cluster_id() -> Result<String, BrokerError> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(BrokerError::io("read /dev/urandom"))?;
    bytes[0] &= 0x7f;
    Ok(base64url(&bytes))
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn read(path: &Path) -> Result<String, BrokerError> {
    fs::read_to_string(path).map_err(BrokerError::io(format!("read {}", path.display())))
}

fn write(path: &Path, text: &str) -> Result<(), BrokerError> {
    fs::write(path, text).map_err(BrokerError::io(format!("write {}", path.display())))
}

/// The last `max_lines` lines of a node's log that say something went wrong (WARN, ERROR,
/// exceptions and their stack), from its last 256 KiB.
pub(crate) fn problems_tail(path: &Path, max_lines: usize) -> String {
    const MAX_BYTES: u64 = 256 * 1024;
    let text = (|| -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    })();
    match text {
        Ok(text) => last_lines(&problems(&text), max_lines),
        Err(err) => format!("<cannot read {}: {err}>", path.display()),
    }
}

/// The lines of a log4j log that report problems: WARN/ERROR/FATAL records, with the
/// continuation lines (stack traces) that follow them.
fn problems(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_problem = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_problem = [" WARN ", " ERROR ", " FATAL "]
                .iter()
                .any(|l| line.contains(l));
        } else if line.starts_with("Exception") || line.starts_with("Error") {
            in_problem = true;
        }
        if in_problem {
            out.push(line);
        }
    }
    out.join("\n")
}

pub(crate) fn last_lines(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_table() {
        let cases: [(&[u8], &str); 5] = [
            (b"", ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (&[0xfb, 0xff, 0xfe], "-__-"),
        ];
        for (bytes, want) in cases {
            assert_eq!(base64url(bytes), want, "{bytes:?}");
        }
        assert_eq!(
            base64url(&[7u8; 16]).len(),
            22,
            "a cluster id is 22 characters"
        );
        for _ in 0..64 {
            let id = cluster_id().unwrap();
            assert!(id.starts_with(|c: char| c.is_ascii_alphabetic()), "{id}");
        }
    }

    #[test]
    fn status_kib_table() {
        let status = "Name:\tjava\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
        let cases = [
            ("VmRSS", Some(102_400)),
            ("VmHWM", Some(204_800)),
            ("VmSwap", None),
            ("Vm", None),
        ];
        for (field, want) in cases {
            assert_eq!(status_kib(status, field), want, "{field}");
        }
    }

    #[test]
    fn problems_keep_warnings_errors_and_their_stacks() {
        let log = "\
[t] INFO started (kafka.Kafka)
[t] WARN disk slow (kafka.log)
[t] INFO fine (x)
[t] ERROR boom (y)
java.lang.IllegalStateException: no
\tat a.b(C.java:1)
[t] INFO after (z)
Exception in thread \"main\" java.lang.Error: x
\tat q
";
        assert_eq!(
            problems(log),
            "[t] WARN disk slow (kafka.log)\n[t] ERROR boom (y)\njava.lang.IllegalStateException: no\n\tat a.b(C.java:1)\nException in thread \"main\" java.lang.Error: x\n\tat q"
        );
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
    }
}
