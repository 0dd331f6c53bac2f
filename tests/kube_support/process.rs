//! Child processes of the suite (controllers, workers): output to a log file, signals by pid,
//! killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::{Child, Command};

/// The `mirrorflow` binary of this build, or `MIRRORFLOW_BIN` (to compare two builds with one
/// bench binary).
pub fn binary() -> PathBuf {
    std::env::var_os("MIRRORFLOW_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mirrorflow")))
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running child process.
pub struct Proc {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `program args` with `env` (on top of ours), output appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: PathBuf,
    ) -> std::io::Result<Proc> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Ok(Proc {
            name: name.to_string(),
            child: cmd.spawn()?,
            log,
        })
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.id().map(|p| p as i32)
    }

    /// Sends `signal` (libc constant) unless the process is gone.
    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit.
    pub async fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(r) => r.ok(),
            Err(_) => {
                let _ = self.child.start_kill();
                self.child.wait().await.ok()
            }
        }
    }

    /// SIGKILL and wait.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Waits for the exit, bounded.
    pub async fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .and_then(|r| r.ok())
    }

    /// The process's output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of its output.
    pub fn tail(&self, n: usize) -> String {
        let text = self.output();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// GET `path` on `addr`: (status, body), `None` when nothing answers.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::time::timeout(
        Duration::from_secs(3),
        mirrorflow::telemetry::http::get_text(addr, path),
    )
    .await
    .ok()?
    .ok()
}

/// The value of the Prometheus series `name` (exact label set text, e.g.
/// `x_total{resource="mirrorflow"}`) in a `/metrics` body.
pub fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
