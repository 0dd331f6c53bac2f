//! helm and kubectl: found in `$MIRRORFLOW_TOOLS_DIR/bin` (default `~/.local/mirrorflow-tools/bin`,
//! filled by `scripts/install-helm.sh`), else on `PATH`. Missing tools print `SKIPPED`, unless
//! `CI=true` or `MIRRORFLOW_REQUIRE_BROKERS=1`: then they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the crate, read to a string.
pub fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Missing tools fail instead of skipping in CI and under `scripts/test.sh`.
pub fn tools_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("MIRRORFLOW_REQUIRE_BROKERS")
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

fn tools_bin() -> PathBuf {
    match std::env::var_os("MIRRORFLOW_TOOLS_DIR") {
        Some(d) => PathBuf::from(d).join("bin"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".local/mirrorflow-tools/bin"),
    }
}

/// `name` from the tools dir (the pinned version), else from `PATH`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let pinned = tools_bin().join(name);
    if pinned.is_file() {
        return Some(pinned);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The tool, or `None` after printing why the calling test is skipped.
pub fn tool(name: &str, test: &str) -> Option<PathBuf> {
    match find_tool(name) {
        Some(p) => Some(p),
        None if tools_required() => {
            panic!("{name} not found (needed by {test}; CI=true or MIRRORFLOW_REQUIRE_BROKERS=1): run scripts/install-helm.sh")
        }
        None => {
            eprintln!("SKIPPED {test}: {name} not found; run scripts/install-helm.sh");
            None
        }
    }
}

/// Runs a command in the crate root: `Ok(stdout)` or `Err(stdout and stderr)`.
pub fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    run_with(program, args, &[], None)
}

/// [`run`] with environment variables and, optionally, text on stdin.
pub fn run_with(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait for the command");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 output"))
    } else {
        Err(format!(
            "{} {args:?} failed ({}):\n{}{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
