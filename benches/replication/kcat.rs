//! The kcat pipe (`kcat -C … | kcat -P …`) as a contender, and the `librdkafka.so.1` it runs
//! with (the contenders' librdkafka), linked from the `librdkafka.a` rdkafka-sys built for
//! this crate.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;

use crate::contender::Run;
use crate::process::Proc;

/// Starts `kcat -C … | kcat -P …` copying `run`'s topic to `target_topic`; the consumer
/// first.
pub fn spawn_pipe(run: &Run<'_>, target_topic: &str) -> anyhow::Result<Vec<Proc>> {
    let lib = run
        .kcat_libdir
        .context("no librdkafka usable by kcat against the brokers")?;
    let mut consume = Command::new("kcat");
    consume
        .env("LD_LIBRARY_PATH", lib)
        .args(["-C", "-b", run.src, "-t", run.topic])
        .args(["-o", "beginning", "-e", "-q", "-f", "%k\t%s\n"]);
    let mut consumer = run.spawn("kcat-C", &mut consume, Stdio::piped())?;
    let pipe = consumer
        .child
        .stdout
        .take()
        .context("kcat -C has no stdout")?;
    let mut produce = Command::new("kcat");
    produce
        .env("LD_LIBRARY_PATH", lib)
        .args(["-P", "-b", run.tgt, "-t", target_topic, "-K", "\t"])
        .args(["-X", "acks=all", "-X", "enable.idempotence=true"])
        .args(["-X", "linger.ms=5"])
        .args([
            "-X",
            &format!("compression.type={}", run.scenario.compression()),
        ]);
    let (log, file) = run.log_file("kcat-P")?;
    let child = produce
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .context("spawning kcat -P")?;
    let producer = Proc::new("kcat-P", child, log);
    Ok(vec![consumer, producer])
}

/// Whether `kcat` (with `libdir` on the library path, if any) can list the broker's metadata.
fn kcat_works(libdir: Option<&Path>, bootstrap: &str) -> bool {
    let mut cmd = Command::new("kcat");
    if let Some(dir) = libdir {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    cmd.args(["-L", "-b", bootstrap, "-m", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The newest `librdkafka.a` rdkafka-sys built in this target directory.
fn find_librdkafka_a() -> Option<PathBuf> {
    // <target>/<profile>/deps/replication-<hash> → <target>/<profile>/build
    let exe = std::env::current_exe().ok()?;
    let build = exe.parent()?.parent()?.join("build");
    std::fs::read_dir(&build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rdkafka-sys-"))
        .map(|e| e.path().join("out/lib/librdkafka.a"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// A directory holding a `librdkafka.so.1` kcat can use against the brokers, or why not.
pub fn libdir(bootstrap: &str) -> Result<PathBuf, String> {
    if Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        return Err("kcat is not installed (Debian package `kcat`)".to_string());
    }
    if let Some(dir) = std::env::var_os("MIRRORFLOW_BENCH_KCAT_LIBDIR") {
        let dir = PathBuf::from(dir);
        return if kcat_works(Some(&dir), bootstrap) {
            Ok(dir)
        } else {
            Err(format!(
                "kcat with MIRRORFLOW_BENCH_KCAT_LIBDIR={} cannot reach the brokers",
                dir.display()
            ))
        };
    }
    let archive = find_librdkafka_a().ok_or("no librdkafka.a from rdkafka-sys found")?;
    let dir = archive
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected rdkafka-sys layout")?
        .join("kcat-shim");
    let so = dir.join("librdkafka.so.1");
    let fresh = |so: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(so), m(&archive)), (Some(a), Some(b)) if a >= b)
    };
    if !fresh(&so) {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("cc")
            .args(["-shared", "-o"])
            .arg(&so)
            .args(["-Wl,-soname,librdkafka.so.1", "-Wl,--whole-archive"])
            .arg(&archive)
            .args(["-Wl,--no-whole-archive", "-Wl,--no-undefined"])
            .args([
                // librdkafka's OIDC token fetch (rdkafka's curl feature); the system
                // libcurl (libcurl4-openssl-dev, scripts/setup.sh) serves the shim.
                "-lcurl",
                "-lssl",
                "-lcrypto",
                "-lz",
                "-lzstd",
                "-lpthread",
                "-lm",
                "-ldl",
            ])
            .output()
            .map_err(|e| format!("running cc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "linking {} from {} failed: {}",
                so.display(),
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    if kcat_works(Some(&dir), bootstrap) {
        Ok(dir)
    } else {
        Err(format!(
            "kcat with {} cannot reach the brokers",
            so.display()
        ))
    }
}
