//! The continuous audit's fold: the workers' `audit` reports summed into `status.audit`, and
//! the `Audited` condition (`False`, reason `IntegrityMismatch`, naming each partition's
//! mismatch; `True` with the records compared and the last run).

use super::Verdict;
use crate::api::{Audit, AuditCounts, AuditReport, WorkerStatus};

/// The condition type.
pub const AUDITED: &str = "Audited";
/// Its reason when a comparison found records missing, extra, different or duplicated
/// beyond what the delivery allows.
pub const INTEGRITY_MISMATCH: &str = "IntegrityMismatch";
/// The most mismatches `status.audit` lists.
pub const MAX_AUDIT_MISMATCHES: usize = 20;

/// The flow's audit: the entries' counts summed, the latest run, their mismatches (bounded)
/// and the first error. `None` when no entry reports one. Pure.
pub fn fold_audit<'a>(entries: impl Iterator<Item = &'a WorkerStatus>) -> Option<AuditReport> {
    let mut out: Option<AuditReport> = None;
    for a in entries.filter_map(|e| e.audit.as_ref()) {
        let o = out.get_or_insert_with(AuditReport::default);
        let (r, s) = (&mut o.records, &a.records);
        *r = AuditCounts {
            compared: r.compared + s.compared,
            missing: r.missing + s.missing,
            extra: r.extra + s.extra,
            different: r.different + s.different,
            duplicated: r.duplicated + s.duplicated,
            skipped: r.skipped + s.skipped,
        };
        if a.last_run_time.as_ref().map(|t| t.0) > o.last_run_time.as_ref().map(|t| t.0) {
            o.last_run_time = a.last_run_time.clone();
        }
        o.mismatches.extend(a.mismatches.iter().cloned());
        o.mismatches.truncate(MAX_AUDIT_MISMATCHES);
        if o.last_error.is_none() {
            o.last_error = a.last_error.clone();
        }
    }
    out
}

/// `Audited`: absent while the audit is off or before its first run finished; False naming
/// the mismatches; True with the records compared and the last run. Pure.
pub(super) fn audited_verdict(spec: &Audit, folded: Option<&AuditReport>) -> Option<Verdict> {
    if !spec.enabled {
        return None;
    }
    let a = folded.filter(|a| a.last_run_time.is_some())?;
    let when = a
        .last_run_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    Some(if a.mismatches.is_empty() {
        Verdict::yes(
            "Consistent",
            format!(
                "{} records compared, nothing missing, extra or different; last run {when}",
                a.records.compared
            ),
        )
    } else {
        Verdict::no(INTEGRITY_MISMATCH, a.mismatches.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkerState;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn entry(audit: Option<AuditReport>) -> WorkerStatus {
        let mut e: WorkerStatus =
            serde_json::from_value(serde_json::json!({"id": "f-worker-0", "state": "Running"}))
                .unwrap();
        e.state = WorkerState::Running;
        e.audit = audit;
        e
    }

    fn report(compared: u64, missing: u64, at: i64, mismatches: &[&str]) -> AuditReport {
        AuditReport {
            records: AuditCounts {
                compared,
                missing,
                ..AuditCounts::default()
            },
            last_run_time: Some(Time(jiff::Timestamp::from_second(at).unwrap())),
            mismatches: mismatches.iter().map(|s| s.to_string()).collect(),
            last_error: None,
        }
    }

    #[test]
    fn folds_and_decides() {
        let on = Audit::default();
        let off = Audit {
            enabled: false,
            ..Audit::default()
        };
        assert_eq!(fold_audit([entry(None)].iter()), None);
        assert!(audited_verdict(&off, None).is_none());
        assert!(audited_verdict(&on, None).is_none());

        let clean = [
            entry(Some(report(10, 0, 100, &[]))),
            entry(Some(report(5, 0, 200, &[]))),
        ];
        let f = fold_audit(clean.iter()).unwrap();
        assert_eq!(f.records.compared, 15);
        assert_eq!(f.last_run_time.as_ref().unwrap().0.as_second(), 200);
        let v = audited_verdict(&on, Some(&f)).unwrap();
        assert_eq!((v.status, v.reason), ("True", "Consistent"));
        assert!(
            v.message.starts_with("15 records compared"),
            "{}",
            v.message
        );

        let bad = [
            entry(Some(report(10, 0, 100, &[]))),
            entry(Some(report(
                5,
                2,
                200,
                &["missing in t/0: source offset 7"],
            ))),
        ];
        let f = fold_audit(bad.iter()).unwrap();
        assert_eq!(f.records.missing, 2);
        let v = audited_verdict(&on, Some(&f)).unwrap();
        assert_eq!((v.status, v.reason), ("False", INTEGRITY_MISMATCH));
        assert_eq!(v.message, "missing in t/0: source offset 7");
    }
}
