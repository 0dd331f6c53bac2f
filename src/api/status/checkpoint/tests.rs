//! One table per decision of the OffsetCheckpoint fold: what blocks it, which groups are
//! stale, `Ready`, `Stale`, and the order of the summaries. The whole fold is tested in
//! `status/tests.rs`.

use super::*;
use crate::api::{FieldError, GroupFailureReason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use serde_json::json;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn checkpoint() -> OffsetCheckpoint {
    let spec = serde_json::from_value(json!({"flowRef": {"name": "orders"}, "intervalSeconds": 5}))
        .unwrap();
    let mut c = OffsetCheckpoint::new("groups", spec);
    c.metadata.namespace = Some("kafka".into());
    c
}

fn group(name: &str, last: Option<i64>) -> GroupSummary {
    GroupSummary {
        group: name.into(),
        partitions: 1,
        last_checkpoint_time: last.map(|s| Time(t(s))),
        synced: false,
        target_lag: None,
    }
}

fn reports(groups: Vec<GroupSummary>, error: Option<&str>) -> CheckpointReports {
    CheckpointReports {
        groups,
        failures: vec![],
        error: error.map(String::from),
    }
}

#[test]
fn blocked_table() {
    let cp = checkpoint();
    let invalid = ValidationErrors(vec![FieldError {
        field: "spec.groups.include[0]".into(),
        value: "[".into(),
        message: "not a regex".into(),
    }]);
    let found = FlowRefState::Found { invalid: false };
    let flow_invalid = FlowRefState::Found { invalid: true };
    let failing = reports(vec![], Some("target cluster dc2: timed out"));
    let failing_later = reports(vec![group("g", Some(0))], Some("timed out"));
    let running = reports(vec![], None);
    type Case<'a> = (
        &'a str,
        Option<&'a ValidationErrors>,
        FlowRefState,
        Option<&'a CheckpointReports>,
        Option<Verdict>,
    );
    let cases: Vec<Case> = vec![
        (
            "an invalid spec comes first",
            Some(&invalid),
            FlowRefState::NotFound,
            None,
            Some(Verdict::no(
                "InvalidSpec",
                "spec.groups.include[0]: not a regex (got \"[\")",
            )),
        ),
        (
            "the flow does not exist",
            None,
            FlowRefState::NotFound,
            Some(&running),
            Some(Verdict::no(
                "FlowNotFound",
                "MirrorFlow \"orders\" (spec.flowRef.name) not found in namespace \"kafka\"",
            )),
        ),
        (
            "the flow is invalid",
            None,
            flow_invalid,
            Some(&running),
            Some(Verdict::no(
                "FlowInvalid",
                "MirrorFlow \"orders\" has an invalid spec (see its InvalidSpec condition)",
            )),
        ),
        (
            "no report yet",
            None,
            found,
            None,
            Some(Verdict::no(
                "AwaitingCheckpoints",
                "no worker has reported checkpoints for this OffsetCheckpoint yet",
            )),
        ),
        (
            "failing before any group was checkpointed",
            None,
            found,
            Some(&failing),
            Some(Verdict::no(
                CHECKPOINT_FAILED,
                "target cluster dc2: timed out",
            )),
        ),
        (
            "failing with groups: judged on them",
            None,
            found,
            Some(&failing_later),
            None,
        ),
        ("reporting", None, found, Some(&running), None),
    ];
    for (name, invalid, flow, reports, want) in cases {
        let obs = CheckpointObservation {
            checkpoint: &cp,
            flow,
            invalid,
            reports,
            now: t(0),
        };
        assert_eq!(blocked(&obs), want, "{name}");
    }
}

#[test]
fn stale_groups_table() {
    let after = SignedDuration::from_secs(15);
    let groups = vec![
        group("never", None),
        group("old", Some(0)),
        group("edge", Some(85)),
        group("fresh", Some(99)),
    ];
    // At 100: `old` is 100 s old, `edge` exactly 15 s (not older than the bound).
    assert_eq!(
        stale_groups(&groups, t(100), after),
        vec!["old".to_string()]
    );
    assert_eq!(
        stale_groups(&groups, t(101), after),
        vec!["old".to_string(), "edge".to_string()]
    );
    assert_eq!(stale_groups(&groups, t(0), after), Vec::<String>::new());
}

#[test]
fn checkpoint_stale_table() {
    let after = SignedDuration::from_secs(15);
    let many: Vec<String> = (0..7).map(|i| format!("g{i}")).collect();
    let cases = [
        (
            vec![],
            Verdict::no(
                "Fresh",
                "every group checkpointed within 3 × intervalSeconds (15s)",
            ),
        ),
        (
            vec!["a".to_string()],
            Verdict::yes(
                "CheckpointsStale",
                "last checkpoint older than 3 × intervalSeconds (15s): a",
            ),
        ),
        (
            many,
            Verdict::yes(
                "CheckpointsStale",
                "last checkpoint older than 3 × intervalSeconds (15s): g0, g1, g2, g3, g4 and 2 \
                 more",
            ),
        ),
    ];
    for (stale, want) in cases {
        assert_eq!(checkpoint_stale(&stale, after), want, "{stale:?}");
    }
}

#[test]
fn checkpoint_ready_table() {
    let two = vec![group("a", Some(0)), group("b", None)];
    let cases = [
        (
            "the runner's error comes first",
            reports(two.clone(), Some("commit failed")),
            1,
            1,
            Verdict::no(CHECKPOINT_FAILED, "commit failed"),
        ),
        (
            "stale groups",
            reports(two.clone(), None),
            1,
            1,
            Verdict::no("CheckpointsStale", "1 group(s) stale"),
        ),
        (
            "no group matched",
            reports(vec![], None),
            0,
            0,
            Verdict::yes(
                "NoGroupsMatched",
                "no source consumer group matches spec.groups",
            ),
        ),
        (
            "checkpointing",
            reports(two, None),
            0,
            1,
            Verdict::yes("Checkpointing", "1 group(s) checkpointed"),
        ),
    ];
    for (name, reports, stale, checkpointed, want) in cases {
        assert_eq!(
            checkpoint_ready(&reports, stale, checkpointed),
            want,
            "{name}"
        );
    }
}

#[test]
fn summaries_are_stalest_first_and_bounded() {
    let groups = vec![
        group("b", Some(5)),
        group("z", None),
        group("a", Some(5)),
        group("c", Some(1)),
        group("y", None),
    ];
    let order: Vec<String> = stalest_first(&groups)
        .into_iter()
        .map(|g| g.group)
        .collect();
    assert_eq!(order, ["y", "z", "c", "a", "b"]);

    let many: Vec<GroupSummary> = (0..MAX_GROUPS + 3)
        .map(|i| group(&format!("g{i:03}"), Some(i as i64)))
        .collect();
    let kept = stalest_first(&many);
    assert_eq!(kept.len(), MAX_GROUPS);
    assert_eq!(kept[0].group, "g000");
    assert_eq!(
        kept[MAX_GROUPS - 1].group,
        format!("g{:03}", MAX_GROUPS - 1)
    );
}

#[test]
fn failures_are_sorted_and_bounded_in_the_fold() {
    let cp = checkpoint();
    let failure = |g: &str| GroupFailure {
        group: g.into(),
        reason: GroupFailureReason::CommitFailed,
        message: "refused".into(),
        since: Time(t(0)),
    };
    let mut r = reports(vec![group("a", Some(0))], None);
    r.failures = (0..MAX_GROUPS + 2)
        .rev()
        .map(|i| failure(&format!("g{i:03}")))
        .collect();
    let st = fold_checkpoint_status(&CheckpointObservation {
        checkpoint: &cp,
        flow: FlowRefState::Found { invalid: false },
        invalid: None,
        reports: Some(&r),
        now: t(1),
    });
    let names: Vec<&str> = st.failures.iter().map(|f| f.group.as_str()).collect();
    assert_eq!(names.len(), MAX_GROUPS);
    assert_eq!(names[0], "g000");
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    assert_eq!(st.oldest_checkpoint_age_seconds, Some(1));
}
