//! A Java program for a test: one source file compiled with `javac` against a classpath into
//! a directory of its own, then run with `java` (stdout captured, the exit status checked,
//! both bounded). Tests use it to run Apache Kafka's own Java code (MirrorMaker 2's client
//! classes) on what mirrorflow writes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::brokers::BrokerError;
use super::kafka::{java_from_env, JAVA_ENV};

/// Bound of a compilation (a cold `javac` on a loaded 2-core machine takes seconds).
const COMPILE_TIMEOUT: Duration = Duration::from_secs(180);

/// log4j2 for the programs: warnings to stderr, so stdout carries only what they print.
const LOG4J: &str = "\
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
";

/// The `javac` beside `java`: in the directory of `$MIRRORFLOW_JAVA` when that is a path,
/// else `$JAVA_HOME/bin/javac`, else `javac` (PATH).
pub fn javac(java_env: Option<PathBuf>, java_home: Option<PathBuf>) -> PathBuf {
    java_env
        .and_then(|java| {
            java.parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .map(|dir| dir.join("javac"))
        })
        .or_else(|| {
            java_home
                .filter(|h| !h.as_os_str().is_empty())
                .map(|h| h.join("bin").join("javac"))
        })
        .unwrap_or_else(|| PathBuf::from("javac"))
}

/// [`javac`] from the environment.
pub fn javac_from_env() -> PathBuf {
    javac(
        std::env::var_os(JAVA_ENV).map(PathBuf::from),
        std::env::var_os("JAVA_HOME").map(PathBuf::from),
    )
}

/// A compiled program; its directory goes with it.
#[derive(Debug)]
pub struct JavaProgram {
    dir: tempfile::TempDir,
    class: String,
    classpath: String,
    java: PathBuf,
}

impl JavaProgram {
    /// Compiles `source` (its public class named after the file, in the default package)
    /// against `classpath` (`-cp` syntax: `dir/*` for a directory of jars).
    pub async fn compile(source: &Path, classpath: &str) -> Result<JavaProgram, BrokerError> {
        let class = source
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| source.extension().is_some_and(|e| e == "java"))
            .ok_or_else(|| BrokerError::Failed {
                op: format!("compile {}", source.display()),
                detail: "expected a .java file named after its class".to_owned(),
            })?
            .to_owned();
        let dir = tempfile::Builder::new()
            .prefix("mirrorflow-java-")
            .tempdir()
            .map_err(BrokerError::io("create a directory for javac"))?;
        std::fs::write(dir.path().join("log4j2.properties"), LOG4J)
            .map_err(BrokerError::io("write the programs' log4j2.properties"))?;
        let javac = javac_from_env();
        let mut command = tokio::process::Command::new(&javac);
        command
            .arg("-nowarn")
            .arg("-cp")
            .arg(classpath)
            .arg("-d")
            .arg(dir.path())
            .arg(source);
        let what = format!("{} {}", javac.display(), source.display());
        let out = bounded(command, COMPILE_TIMEOUT, &what).await?;
        if !out.status.success() {
            return Err(BrokerError::Failed {
                op: what,
                detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
            });
        }
        Ok(JavaProgram {
            dir,
            class,
            classpath: classpath.to_owned(),
            java: java_from_env(),
        })
    }

    /// Runs the program with `args`, returning its stdout; a non-zero exit is an error
    /// carrying stdout and stderr, and so is running past `timeout` (the JVM is killed).
    pub async fn run(&self, args: &[&str], timeout: Duration) -> Result<String, BrokerError> {
        let classpath = format!("{}:{}", self.dir.path().display(), self.classpath);
        let mut command = tokio::process::Command::new(&self.java);
        command
            .arg("-Xmx256m")
            .arg("-XX:+UseSerialGC")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.path().join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(classpath)
            .arg(&self.class)
            .args(args);
        let what = format!("java {} {}", self.class, args.join(" "));
        let out = bounded(command, timeout, &what).await?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(BrokerError::Failed {
                op: what,
                detail: format!(
                    "{}; stdout:\n{stdout}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    /// The directory holding the classes.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Runs `command` to its end within `timeout` (killed past it), output captured.
async fn bounded(
    mut command: tokio::process::Command,
    timeout: Duration,
    what: &str,
) -> Result<std::process::Output, BrokerError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(BrokerError::io(format!(
        "spawn {what} (is a JDK 17+ installed?)"
    )))?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(out) => out.map_err(BrokerError::io(format!("wait for {what}"))),
        // Dropping the future drops the child: killed (kill_on_drop).
        Err(_) => Err(BrokerError::Timeout {
            op: what.to_owned(),
            waited: timeout,
            detail: "killed".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn javac_table() {
        let p = |s: &str| Some(PathBuf::from(s));
        let cases = [
            (p("/jdk/bin/java"), p("/other"), "/jdk/bin/javac"),
            (p("java"), p("/jdk"), "/jdk/bin/javac"),
            (p(""), p("/jdk"), "/jdk/bin/javac"),
            (None, p("/jdk"), "/jdk/bin/javac"),
            (None, p(""), "javac"),
            (None, None, "javac"),
        ];
        for (java, home, want) in cases {
            assert_eq!(
                javac(java.clone(), home.clone()),
                PathBuf::from(want),
                "{java:?} {home:?}"
            );
        }
    }

    #[tokio::test]
    async fn compiles_runs_and_reports_failures() {
        if std::process::Command::new(javac_from_env())
            .arg("-version")
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: no javac");
            return;
        }
        let src = tempfile::tempdir().unwrap();
        let file = src.path().join("Hello.java");
        std::fs::write(
            &file,
            "public class Hello { public static void main(String[] a) {
                 System.out.println(\"hi \" + String.join(\",\", a));
                 System.err.println(\"noise\");
                 if (a.length > 0 && a[0].equals(\"fail\")) System.exit(3);
                 if (a.length > 0 && a[0].equals(\"hang\")) { try { Thread.sleep(60000); } catch (Exception e) {} }
             } }",
        )
        .unwrap();
        let program = JavaProgram::compile(&file, "").await.unwrap();
        assert!(program.dir().join("Hello.class").is_file());
        let out = program
            .run(&["a", "b"], Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(out, "hi a,b\n", "stdout only");
        let err = program
            .run(&["fail"], Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exit status: 3") && err.contains("noise"),
            "{err}"
        );
        let err = program
            .run(&["hang"], Duration::from_millis(1500))
            .await
            .unwrap_err();
        assert!(matches!(err, BrokerError::Timeout { .. }), "{err}");

        std::fs::write(src.path().join("Broken.java"), "public class Broken {").unwrap();
        let err = JavaProgram::compile(&src.path().join("Broken.java"), "")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("Broken.java"), "{err}");
    }
}
