//! Apache Kafka's MirrorMaker 2 for the tests and benches, in dedicated mode
//! (`org.apache.kafka.connect.mirror.MirrorMaker mm2.properties`), run with `java -cp` on the
//! jars `scripts/setup-kafka.sh` caches for it (a classpath of its own, never the broker's).
//!
//! [`MirrorMakerConfig`] says what it replicates; [`mm2_properties`] renders it. The JVM logs
//! to `mm2.log` in its own directory; dropped while its test panics, the handle prints the
//! log's last warnings and errors and keeps the directory (so does
//! `MIRRORFLOW_KEEP_BROKER_LOGS`). A watchdog kills the JVM if the test process dies without
//! dropping the handle.
//!
//! Readiness is the caller's to judge (a record on the target, a checkpoint): MM2 says it
//! started long before its connectors run. [`MirrorMaker::spawned_at`] lets a test time that.

mod config;

pub use config::{
    mm2_properties, MirrorMakerConfig, Mm2Cluster, Mm2Flow, Mm2Policy, OffsetSyncs, Periodic,
    SyncsLocation,
};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::brokers::{or_skip, BrokerError, BrokerKind, KEEP_LOGS_ENV};
use super::kafka::{
    find_install, java_from_env, last_lines, problems_tail, proc_status_kib, watchdog,
    Distribution, Install,
};
use super::local::{KAFKA_HOME_ENV, KAFKA_INSTALL_HINT};

/// How long the JVM may take to log that MirrorMaker started (herders created, plugins
/// scanned) on a loaded 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long MM2 may take to stop after SIGTERM (its shutdown hook waits up to 60 s for the
/// start to finish, then stops every herder).
const TERM_TIMEOUT: Duration = Duration::from_secs(90);
/// What `MirrorMaker.start` logs once every herder started.
const STARTED: &str = "Kafka MirrorMaker started";

/// log4j2 for MM2: INFO to stdout (the log file), without the clients' and configs' chatter.
/// The pattern starts with `[`, as the Kafka nodes', so their problem filter reads it.
const LOG4J: &str = "\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %X{connector.context}%m (%c)%n
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
";

/// A running MirrorMaker 2. Dropping it kills the JVM and deletes its directory (kept when
/// the thread is panicking, and after a failed start).
pub struct MirrorMaker {
    config: MirrorMakerConfig,
    install: Install,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    spawned_at: Instant,
    started_in: Duration,
    /// Keep the directory on drop: a failed start's error names its log.
    keep: bool,
}

impl std::fmt::Debug for MirrorMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorMaker")
            .field("version", &self.install.version)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .finish()
    }
}

impl MirrorMaker {
    /// Starts MM2 and waits until it logs that it started (not that it replicates).
    /// [`BrokerError::BinaryNotFound`] when the jars are not fetched.
    pub async fn start(config: MirrorMakerConfig) -> Result<MirrorMaker, BrokerError> {
        let dir = tempfile::Builder::new()
            .prefix("mirrorflow-mm2-")
            .tempdir()
            .map_err(BrokerError::io("create MirrorMaker 2's directory"))?
            .keep();
        let (mut command, install) = match Self::command(&config, &dir) {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let java = PathBuf::from(command.get_program());
        let log = dir.join("mm2.log");
        let out =
            fs::File::create(&log).map_err(BrokerError::io(format!("create {}", log.display())))?;
        command
            .stdin(Stdio::null())
            .stdout(
                out.try_clone()
                    .map_err(BrokerError::io("clone a log handle"))?,
            )
            .stderr(out);
        let spawned_at = Instant::now();
        let child = command.spawn().map_err(|source| BrokerError::Spawn {
            kind: BrokerKind::Kafka,
            binary: java.clone(),
            source,
        })?;
        watchdog(child.id(), std::process::id(), None)?;
        let mut mm = MirrorMaker {
            config,
            install,
            dir,
            log,
            child: Some(child),
            spawned_at,
            started_in: Duration::ZERO,
            keep: false,
        };
        if let Err(e) = mm.wait_log(STARTED, START_TIMEOUT).await {
            mm.keep = true;
            return Err(e);
        }
        mm.started_in = spawned_at.elapsed();
        Ok(mm)
    }

    /// The JVM's command line for `config`, its `mm2.properties` and `log4j2.properties`
    /// written into `dir`; stdin and output are the caller's (a bench spawns and samples the
    /// JVM itself). [`BrokerError::BinaryNotFound`] when the jars are not fetched.
    pub fn command(
        config: &MirrorMakerConfig,
        dir: &Path,
    ) -> Result<(Command, Install), BrokerError> {
        config.check().map_err(|detail| BrokerError::Failed {
            op: "configure MirrorMaker 2".to_owned(),
            detail,
        })?;
        let install = find_install(Distribution::MirrorMaker).map_err(not_installed)?;
        write(&dir.join("mm2.properties"), &mm2_properties(config))?;
        write(&dir.join("log4j2.properties"), LOG4J)?;
        let mut command = Command::new(java_from_env());
        command
            .arg(format!("-Xmx{}m", config.heap_mib))
            .arg(format!("-Xms{}m", config.heap_mib.min(256)))
            .args(&config.jvm_options)
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                dir.join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(install.classpath())
            .arg("org.apache.kafka.connect.mirror.MirrorMaker")
            .arg(dir.join("mm2.properties"));
        Ok((command, install))
    }

    /// Waits until the log holds `needle`; an error if the JVM exits first or `timeout`
    /// passes (both with the log's last problems).
    pub async fn wait_log(&mut self, needle: &str, timeout: Duration) -> Result<(), BrokerError> {
        let begin = Instant::now();
        loop {
            if self.log_text().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.exit_status() {
                return Err(BrokerError::Failed {
                    op: format!("MirrorMaker 2 (waiting for {needle:?})"),
                    detail: format!(
                        "the JVM exited ({status}); {}:\n{}",
                        self.log.display(),
                        self.problems(30)
                    ),
                });
            }
            if begin.elapsed() > timeout {
                return Err(BrokerError::Timeout {
                    op: format!("MirrorMaker 2 logging {needle:?}"),
                    waited: begin.elapsed(),
                    detail: format!("{}:\n{}", self.log.display(), self.problems(30)),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log's last `max_lines` lines of warnings and errors.
    pub fn problems(&self, max_lines: usize) -> String {
        problems_tail(&self.log, max_lines)
    }

    /// The log's last `max_lines` lines, whatever they say.
    pub fn log_tail(&self, max_lines: usize) -> String {
        last_lines(&self.log_text(), max_lines)
    }

    fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The config it runs.
    pub fn config(&self) -> &MirrorMakerConfig {
        &self.config
    }

    /// The version the jars are (`scripts/kafka/pom.xml`).
    pub fn version(&self) -> &str {
        &self.install.version
    }

    /// When the JVM was spawned (to time the first record replicated).
    pub fn spawned_at(&self) -> Instant {
        self.spawned_at
    }

    /// From spawn to its "started" log line.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The JVM's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the JVM runs (not stopped, killed or exited).
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exit_status().is_none()
    }

    /// Resident memory of the JVM now, KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid()?, "VmRSS")
    }

    /// The JVM's peak resident memory so far, KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid()?, "VmHWM")
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its directory (`mm2.properties`, `mm2.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops MM2 with SIGTERM (its shutdown hook stops the herders: tasks commit their
    /// offsets) and waits for the JVM to exit; past 90 s it is killed and that is an error.
    pub async fn stop(&mut self) -> Result<ExitStatus, BrokerError> {
        let Some(mut child) = self.child.take() else {
            return Err(BrokerError::Failed {
                op: "stop MirrorMaker 2".to_owned(),
                detail: "not running".to_owned(),
            });
        };
        // Our own child, not reaped yet, so the pid is still its.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let begin = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if begin.elapsed() < TERM_TIMEOUT => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(BrokerError::Timeout {
                        op: "stop MirrorMaker 2 with SIGTERM".to_owned(),
                        waited: begin.elapsed(),
                        detail: format!("killed with SIGKILL; {}", self.problems(20)),
                    });
                }
            }
        }
    }

    /// Kills the JVM with SIGKILL (a crash: nothing committed) and reaps it.
    pub fn kill(&mut self) -> Result<(), BrokerError> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .and_then(|()| child.wait().map(drop))
                .map_err(BrokerError::io(format!(
                    "kill MirrorMaker 2 (pid {})",
                    child.id()
                )))?;
        }
        Ok(())
    }
}

impl Drop for MirrorMaker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- MirrorMaker 2: last warnings and errors of {} ---\n{}",
                self.log.display(),
                self.problems(40)
            );
            eprintln!(
                "mirrorflow testkit: MirrorMaker 2 kept at {}",
                self.dir.display()
            );
        } else if self.keep || std::env::var_os(KEEP_LOGS_ENV).is_some() {
            eprintln!(
                "mirrorflow testkit: MirrorMaker 2 kept at {}",
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// MirrorMaker 2 as `config` says, or a skip when its jars are missing, as
/// [`crate::testkit::brokers::broker_or_skip`] says (a failure under
/// `MIRRORFLOW_REQUIRE_BROKERS=1`).
pub async fn mirror_maker_or_skip(config: MirrorMakerConfig) -> Option<MirrorMaker> {
    or_skip(BrokerKind::Kafka, MirrorMaker::start(config).await)
}

/// MirrorMaker 2's jars (for a Java program using its classes), or a skip when they are
/// missing, as [`mirror_maker_or_skip`] says.
pub fn mirror_maker_install_or_skip() -> Option<Install> {
    or_skip(
        BrokerKind::Kafka,
        find_install(Distribution::MirrorMaker).map_err(not_installed),
    )
}

fn not_installed(searched: String) -> BrokerError {
    BrokerError::BinaryNotFound {
        kind: BrokerKind::Kafka,
        searched,
        hint: KAFKA_INSTALL_HINT,
        env: KAFKA_HOME_ENV,
    }
}

fn write(path: &Path, text: &str) -> Result<(), BrokerError> {
    fs::write(path, text).map_err(BrokerError::io(format!("write {}", path.display())))
}
