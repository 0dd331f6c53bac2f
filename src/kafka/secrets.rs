//! Secret rotation: notices when the mounted files a cluster's clients read change.
//!
//! The kubelet updates a mounted Secret in place: it writes the new keys into a fresh
//! timestamped directory, points a `..data_tmp` symlink at it and renames that over `..data`
//! (each key is a symlink into `..data`). librdkafka reads certificates, keys and passwords
//! once, when a client is created, so the worker must notice and rebuild its clients. The
//! watcher polls a fingerprint of each cluster's files ([`fingerprint`]: their contents
//! through the symlinks, so a swap, an in-place edit in standalone mode and a file appearing
//! all count) and bumps that cluster's version; only hashes are kept, never the secrets.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tracing::info;

use crate::api::MirrorFlowSpec;
use crate::kafka::config::secret_files;

/// How often the watcher looks at the files (the kubelet itself syncs Secrets about once a
/// minute, so this adds little delay).
pub const DEFAULT_POLL: Duration = Duration::from_secs(5);

/// A fingerprint of `files`' contents (a missing or unreadable file counts by its error
/// kind). Pure apart from reading the files.
pub fn fingerprint(files: &[PathBuf]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        match std::fs::read(f) {
            Ok(bytes) => bytes.hash(&mut h),
            Err(e) => format!("{:?}", e.kind()).hash(&mut h),
        }
    }
    h.finish()
}

/// A cluster's rotation count: starts at 0, +1 for each change seen. The engine rebuilds
/// that cluster's clients when it changes (`watch::Receiver::changed`).
pub type SecretsVersion = watch::Receiver<u64>;

/// Rotation versions of a flow's two clusters.
#[derive(Clone, Debug)]
pub struct FlowSecrets {
    pub source: SecretsVersion,
    pub target: SecretsVersion,
}

struct Watched {
    name: &'static str,
    alias: String,
    files: Vec<PathBuf>,
    last: u64,
    tx: watch::Sender<u64>,
}

impl Watched {
    fn new(name: &'static str, alias: &str, files: Vec<PathBuf>) -> (Self, SecretsVersion) {
        let (tx, rx) = watch::channel(0);
        let last = fingerprint(&files);
        let w = Self {
            name,
            alias: alias.to_string(),
            files,
            last,
            tx,
        };
        (w, rx)
    }

    /// Whether the files changed since the last look (and bumps the version if so).
    fn poll(&mut self) -> bool {
        let now = fingerprint(&self.files);
        if now == self.last {
            return false;
        }
        self.last = now;
        self.tx.send_modify(|v| *v += 1);
        info!(
            cluster = %self.alias,
            "the {} cluster's mounted Secrets changed ({} files); its clients reconnect with them",
            self.name,
            self.files.len()
        );
        true
    }
}

/// Watches `spec`'s secret files under `secrets_dir` every `every` until every receiver is
/// dropped. A cluster without secrets never changes.
pub fn watch_secrets(
    spec: &MirrorFlowSpec,
    secrets_dir: &Path,
    every: Duration,
) -> (FlowSecrets, tokio::task::JoinHandle<()>) {
    let (mut source, source_rx) = Watched::new(
        "source",
        &spec.source.alias,
        secret_files(&spec.source, secrets_dir),
    );
    let (mut target, target_rx) = Watched::new(
        "target",
        &spec.target.alias,
        secret_files(&spec.target, secrets_dir),
    );
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if source.tx.is_closed() && target.tx.is_closed() {
                return;
            }
            // Reading a few small files: cheap enough to do inline.
            source.poll();
            target.poll();
        }
    });
    (
        FlowSecrets {
            source: source_rx,
            target: target_rx,
        },
        task,
    )
}

/// Which cluster's Secrets changed (pending while nothing changes or nothing is watched).
pub async fn rotated(secrets: &mut Option<FlowSecrets>) -> &'static str {
    let Some(s) = secrets else {
        return std::future::pending().await;
    };
    let pending = || std::future::pending::<&'static str>();
    tokio::select! {
        r = s.source.changed() => match r { Ok(()) => "source", Err(_) => pending().await },
        r = s.target.changed() => match r { Ok(()) => "target", Err(_) => pending().await },
    }
}

/// Test helpers: a Secret mounted the way the kubelet does (`..data` symlink swap).
#[cfg(any(test, feature = "testkit"))]
pub mod kubelet {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    /// Writes `keys` as Secret `name` under `secrets_dir` the way the kubelet mounts it, or
    /// updates it the way the kubelet does: a new timestamped directory, `..data_tmp`
    /// pointing at it, renamed over `..data`, the old directory removed.
    pub fn write_secret(
        secrets_dir: &Path,
        name: &str,
        keys: &[(&str, &[u8])],
    ) -> std::io::Result<()> {
        let dir = secrets_dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let old = std::fs::read_link(dir.join("..data")).ok();
        let stamp = format!(
            "..{}.{}",
            jiff::Timestamp::now().strftime("%Y_%m_%d_%H_%M_%S"),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let data = dir.join(&stamp);
        std::fs::create_dir(&data)?;
        for (key, bytes) in keys {
            std::fs::write(data.join(key), bytes)?;
        }
        let tmp = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&stamp, &tmp)?;
        std::fs::rename(&tmp, dir.join("..data"))?;
        for (key, _) in keys {
            let link = dir.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(key), &link)?;
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(dir.join(old))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1",
                       "tls": {"ca": {"secretName": "ca", "key": "ca.crt"}}},
            "target": {"alias": "dc2", "bootstrapServers": "b:1",
                       "tls": {"ca": {"secretName": "ca", "key": "ca.crt"}},
                       "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "creds"}}},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn kubelet_swap_bumps_the_clusters_that_read_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        kubelet::write_secret(d, "ca", &[("ca.crt", b"ca-1")]).unwrap();
        kubelet::write_secret(d, "creds", &[("username", b"m"), ("password", b"p1")]).unwrap();
        assert_eq!(std::fs::read(d.join("ca/ca.crt")).unwrap(), b"ca-1");
        let (mut v, task) = watch_secrets(&spec(), d, Duration::from_millis(20));
        // The password changes: only the target reads it.
        kubelet::write_secret(d, "creds", &[("username", b"m"), ("password", b"p2")]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), v.target.changed())
            .await
            .expect("target version bumped")
            .unwrap();
        assert_eq!(*v.source.borrow(), 0);
        assert_eq!(std::fs::read(d.join("creds/password")).unwrap(), b"p2");
        // The CA changes: both clusters read it.
        kubelet::write_secret(d, "ca", &[("ca.crt", b"ca-2")]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), v.source.changed())
            .await
            .expect("source version bumped")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while *v.target.borrow() < 2 {
                v.target.changed().await.unwrap();
            }
        })
        .await
        .expect("target bumped again");
        // Only one timestamped directory is left, as with the kubelet.
        let dirs = std::fs::read_dir(d.join("ca"))
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(dirs, 1);
        drop(v);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("watcher ends with its receivers")
            .unwrap();
    }

    #[test]
    fn fingerprint_sees_content_not_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k");
        let files = vec![f.clone()];
        let missing = fingerprint(&files);
        std::fs::write(&f, "a").unwrap();
        let a = fingerprint(&files);
        assert_ne!(a, missing);
        std::fs::write(&f, "a").unwrap();
        assert_eq!(
            fingerprint(&files),
            a,
            "rewriting the same bytes is no rotation"
        );
        std::fs::write(&f, "b").unwrap();
        assert_ne!(fingerprint(&files), a);
    }
}
