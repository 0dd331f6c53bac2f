//! Where the JVM and the jars are: `scripts/setup-kafka.sh` puts them in a cache outside the
//! checkout.

use std::path::{Path, PathBuf};

use crate::testkit::local::KAFKA_HOME_ENV;

/// Env var naming the `java` to run (default `$JAVA_HOME/bin/java`, then `java` on PATH).
pub const JAVA_ENV: &str = "MIRRORFLOW_JAVA";

/// A fetched distribution: the broker's or MirrorMaker 2's jars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// `<cache>/broker` or `<cache>/mirror-maker`.
    pub dir: PathBuf,
    /// The version `scripts/kafka/pom.xml` named.
    pub version: String,
}

impl Install {
    /// `-cp` argument: every jar of the distribution.
    pub fn classpath(&self) -> String {
        format!("{}/*", self.dir.join("libs").display())
    }

    /// The broker's class-data-sharing archive, when setup recorded one.
    pub fn archive(&self) -> Option<PathBuf> {
        let path = self.dir.join("kafka.jsa");
        path.is_file().then_some(path)
    }
}

/// Which distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    Broker,
    MirrorMaker,
}

impl Distribution {
    fn dir_name(self) -> &'static str {
        match self {
            Distribution::Broker => "broker",
            Distribution::MirrorMaker => "mirror-maker",
        }
    }
}

/// The cache directory: the env var when set and not empty, else `~/.cache/mirrorflow/kafka`.
pub fn cache_dir(env: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    env.filter(|p| !p.as_os_str().is_empty())
        .or_else(|| home.map(|h| h.join(".cache").join("mirrorflow").join("kafka")))
}

/// The distribution in `cache`, if complete (setup writes `VERSION` last-but-one and the
/// stamp last, after the jars).
pub fn find_in(cache: &Path, which: Distribution) -> Result<Install, String> {
    let dir = cache.join(which.dir_name());
    let version = std::fs::read_to_string(dir.join("VERSION"))
        .map_err(|e| format!("{}: {e}", dir.join("VERSION").display()))?;
    if !dir.join(".stamp").is_file() || !dir.join("libs").is_dir() {
        return Err(format!("{} is incomplete", dir.display()));
    }
    Ok(Install {
        dir,
        version: version.trim().to_owned(),
    })
}

/// The distribution from the environment's cache.
pub fn find(which: Distribution) -> Result<Install, String> {
    let cache = cache_dir(
        std::env::var_os(KAFKA_HOME_ENV).map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
    .ok_or_else(|| format!("neither ${KAFKA_HOME_ENV} nor $HOME is set"))?;
    find_in(&cache, which)
}

/// The `java` to run: `$MIRRORFLOW_JAVA`, `$JAVA_HOME/bin/java`, else `java` (PATH).
pub fn java(env: Option<PathBuf>, java_home: Option<PathBuf>) -> PathBuf {
    env.filter(|p| !p.as_os_str().is_empty())
        .or_else(|| {
            java_home
                .filter(|h| !h.as_os_str().is_empty())
                .map(|h| h.join("bin").join("java"))
        })
        .unwrap_or_else(|| PathBuf::from("java"))
}

/// [`java`] from the environment.
pub fn java_from_env() -> PathBuf {
    java(
        std::env::var_os(JAVA_ENV).map(PathBuf::from),
        std::env::var_os("JAVA_HOME").map(PathBuf::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_table() {
        let p = |s: &str| Some(PathBuf::from(s));
        let cases = [
            (p("/k"), p("/home/u"), p("/k")),
            (p(""), p("/home/u"), p("/home/u/.cache/mirrorflow/kafka")),
            (None, p("/home/u"), p("/home/u/.cache/mirrorflow/kafka")),
            (None, None, None),
        ];
        for (env, home, want) in cases {
            assert_eq!(
                cache_dir(env.clone(), home.clone()),
                want,
                "{env:?} {home:?}"
            );
        }
    }

    #[test]
    fn java_table() {
        let p = |s: &str| Some(PathBuf::from(s));
        let cases = [
            (p("/j/java"), p("/jdk"), "/j/java"),
            (None, p("/jdk"), "/jdk/bin/java"),
            (p(""), p(""), "java"),
            (None, None, "java"),
        ];
        for (env, home, want) in cases {
            assert_eq!(
                java(env.clone(), home.clone()),
                PathBuf::from(want),
                "{env:?} {home:?}"
            );
        }
    }

    #[test]
    fn find_in_requires_a_complete_install() {
        let dir = tempfile::tempdir().unwrap();
        let broker = dir.path().join("broker");
        std::fs::create_dir_all(broker.join("libs")).unwrap();
        assert!(
            find_in(dir.path(), Distribution::Broker).is_err(),
            "no VERSION"
        );
        std::fs::write(broker.join("VERSION"), "4.4.0\n").unwrap();
        let err = find_in(dir.path(), Distribution::Broker).unwrap_err();
        assert!(err.contains("incomplete"), "{err}");
        std::fs::write(broker.join(".stamp"), "x").unwrap();
        let found = find_in(dir.path(), Distribution::Broker).unwrap();
        assert_eq!(found.version, "4.4.0");
        assert_eq!(found.classpath(), format!("{}/libs/*", broker.display()));
        assert_eq!(found.archive(), None);
        assert!(find_in(dir.path(), Distribution::MirrorMaker).is_err());
    }
}
