//! The README's demo, run as a user runs it (`mirrorflow demo`, default broker), small: the
//! report must say every record arrived. `scripts/demo.sh` builds this test target with the
//! binary so that `scripts/test.sh` reuses the demo's build (same dependency features).

use std::process::Command;

use mirrorflow::testkit::brokers::{broker_or_skip, BrokerKind};

#[tokio::test]
async fn demo_reports_every_record_replicated() {
    // The demo's default broker; skips (or fails under MIRRORFLOW_REQUIRE_BROKERS) like
    // every broker test when it is not installed.
    let Some(probe) = broker_or_skip(BrokerKind::Tansu).await else {
        return;
    };
    drop(probe);
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorflow"))
        .args([
            "demo",
            "--records",
            "3000",
            "--partitions",
            "3",
            "--value-bytes",
            "64",
        ])
        .args(["--timeout-seconds", "120"])
        .output()
        .expect("run mirrorflow demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let figure = |label: &str| -> u64 {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} line in the report:\n{stdout}"));
        line.split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number at the end of {line:?}"))
    };
    assert_eq!(figure("records on source"), 3000, "{stdout}");
    assert_eq!(figure("records on target"), 3000, "{stdout}");
    assert_eq!(figure("missing or different records"), 0, "{stdout}");
    assert_eq!(figure("duplicates"), 0, "{stdout}");
    assert!(
        stdout
            .contains("every record arrived with its key, value, headers, timestamp and partition"),
        "{stdout}"
    );
}
