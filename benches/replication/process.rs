//! A contender's child process: its readings from /proc (CPU, peak RSS, heap and
//! file-backed RSS), its log, and stopping it.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::procfs;

/// One process of a contender, with its latest readings.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
    pub cpu: f64,
    pub hwm_kib: u64,
    /// Largest sampled `RssAnon` (heap) and `RssFile` (mapped binary and libraries).
    pub anon_kib: u64,
    pub file_kib: u64,
    /// The latest `VmRSS`: what an idle process settles at, once start-up's transient
    /// clients are gone (the peak keeps them).
    pub rss_kib: u64,
    pub exit: Option<std::process::ExitStatus>,
    /// Whether the contender ends by itself (false: the worker, stopped by us).
    pub exits_by_itself: bool,
    /// Stopped with SIGKILL at once (MM2: a graceful stop can take a minute, and nothing
    /// after the copy is measured).
    pub kill_on_stop: bool,
}

impl Proc {
    pub fn new(name: &str, child: Child, log: PathBuf) -> Self {
        Self {
            name: name.to_string(),
            child,
            log,
            cpu: 0.0,
            hwm_kib: 0,
            anon_kib: 0,
            file_kib: 0,
            rss_kib: 0,
            exit: None,
            exits_by_itself: true,
            kill_on_stop: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Takes readings; reaps the process once it is a zombie (after its final reading).
    pub fn sample(&mut self) {
        if self.exit.is_some() {
            return;
        }
        if let Some(kib) = procfs::status_kib(self.pid(), "VmHWM") {
            self.hwm_kib = self.hwm_kib.max(kib);
        }
        if let Some(kib) = procfs::status_kib(self.pid(), "VmRSS") {
            self.rss_kib = kib;
        }
        if let Some(kib) = procfs::status_kib(self.pid(), "RssAnon") {
            self.anon_kib = self.anon_kib.max(kib);
        }
        if let Some(kib) = procfs::status_kib(self.pid(), "RssFile") {
            self.file_kib = self.file_kib.max(kib);
        }
        if let Some((state, cpu)) = procfs::cpu(self.pid()) {
            self.cpu = cpu;
            if state == 'Z' {
                self.exit = self.child.try_wait().ok().flatten();
            }
        } else {
            // Gone from /proc without being reaped cannot happen for our child; reap anyway.
            self.exit = self.child.try_wait().ok().flatten();
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// Stops a process still running: SIGTERM (graceful), then SIGKILL after 20 s; SIGKILL at
/// once when it is to be killed.
pub fn stop(p: &mut Proc) {
    if p.exit.is_some() || matches!(p.child.try_wait(), Ok(Some(_))) {
        return;
    }
    if p.kill_on_stop {
        kill(p);
        return;
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(p.pid().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = p.child.try_wait() {
            p.exit = Some(status);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = p.child.kill();
    p.exit = p.child.wait().ok();
}

/// SIGKILL (a crash: nothing flushed or committed), and reaps the process.
pub fn kill(p: &mut Proc) {
    let _ = p.child.kill();
    p.exit = p.child.wait().ok();
}

/// Waits up to 30 s for the processes that end by themselves to exit, sampling them to
/// the end; fails if any process exited unsuccessfully.
pub fn wait_for_exits(procs: &mut [Proc]) -> anyhow::Result<()> {
    let settle = Instant::now();
    while procs.iter().any(|p| p.exits_by_itself && p.exit.is_none())
        && settle.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(10));
        for p in procs.iter_mut().filter(|p| p.exits_by_itself) {
            p.sample();
        }
    }
    for p in procs.iter() {
        if let Some(status) = p.exit {
            if !status.success() {
                bail!("{} exited with {status}", p.name);
            }
        }
    }
    Ok(())
}
