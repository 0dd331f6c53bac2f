//! `/proc` readings shared by the benches (`#[path = "common/procfs.rs"] mod procfs;`): CPU
//! seconds and memory fields of a process, and the child processes of this one (the
//! brokers).

// Each bench uses a part of these.
#![allow(dead_code)]

/// Linux `USER_HZ` (clock ticks in `/proc/<pid>/stat`).
const TICKS_PER_SECOND: f64 = 100.0;

/// `(state, user + system CPU seconds)` of `pid`; also works for a zombie (not yet reaped).
pub fn cpu(pid: u32) -> Option<(char, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may hold spaces: split after the last ')'.
    // utime and stime are fields 14 and 15 of the line: indices 11 and 12 after the name.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some((state, ticks / TICKS_PER_SECOND))
}

/// User + system CPU seconds of `pids` together (a process gone from /proc counts 0).
pub fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu(*p)).map(|(_, c)| c).sum()
}

/// A `kB` field of `/proc/<pid>/status` (`VmHWM`, `VmRSS`, `RssAnon`, …); absent for a
/// zombie.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// User + system CPU seconds of the calling thread (`/proc/thread-self/stat`), to take a
/// bench's own work out of its process's figure.
pub fn thread_cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|stat| {
            let rest = stat.get(stat.rfind(')')? + 2..)?.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
        })
        .map_or(0.0, |t| t / TICKS_PER_SECOND)
}
