use super::*;

/// Source record `o` with key `k{o}` and value `v{o}`.
fn s(o: i64) -> Rec {
    Rec::new(
        o,
        0,
        Some(1_000 + o),
        Some(format!("k{o}").as_bytes()),
        Some(format!("v{o}").as_bytes()),
        hash_headers([("h", Some(&b"x"[..]))]),
    )
}

/// The copy of `r` at target offset `d`.
fn at(d: i64, r: Rec) -> Rec {
    Rec { offset: d, ..r }
}

/// A foreign record at target offset `d`.
fn foreign(d: i64) -> Rec {
    Rec::new(
        d,
        0,
        Some(7),
        Some(b"other"),
        Some(format!("f{d}").as_bytes()),
        0,
    )
}

/// Source `from..to` copied to the target from `d0`, in order.
fn copies(from: i64, to: i64, d0: i64) -> Vec<Rec> {
    (from..to).map(|o| at(d0 + o - from, s(o))).collect()
}

fn input<'a>(source: &'a [Rec], target: &'a [Rec], anchors: &'a [Anchor]) -> Input<'a> {
    Input {
        source,
        target,
        anchors,
        start: Start::Pinned,
        expect_below: i64::MAX,
        source_from: source.first().map_or(0, |r| r.offset),
        target_from: target.first().map_or(0, |r| r.offset),
        delivery: Delivery::AtLeastOnce,
        duplicate_bound: 40_000,
        source_compacted: false,
        target_compacted: false,
        earlier: &[],
    }
}

fn f(kind: Kind, source: Option<i64>, target: Option<i64>) -> Finding {
    Finding {
        kind,
        source_offset: source,
        target_offset: target,
        fields: Vec::new(),
    }
}

/// (matched, missing, extra, different, duplicated, skipped)
fn counts(o: &Outcome) -> (u64, u64, u64, u64, u64, u64) {
    (
        o.matched,
        o.missing,
        o.extra,
        o.different,
        o.duplicated,
        o.skipped,
    )
}

#[test]
fn every_kind() {
    let src: Vec<Rec> = (10..20).map(s).collect();
    let anchors = [Anchor {
        upstream: 10,
        downstream: 100,
    }];
    let mut changed = at(103, s(13));
    changed.value = hash_bytes(Some(b"tampered"));
    let mut rekeyed_and_stamped = at(104, s(14));
    rekeyed_and_stamped.key = hash_bytes(Some(b"zz"));
    rekeyed_and_stamped.timestamp = Some(1);
    struct Case {
        name: &'static str,
        target: Vec<Rec>,
        counts: (u64, u64, u64, u64, u64, u64),
        clean: bool,
        first: Option<Finding>,
    }
    let cases = vec![
        Case {
            name: "clean copy",
            target: copies(10, 20, 100),
            counts: (10, 0, 0, 0, 0, 0),
            clean: true,
            first: None,
        },
        Case {
            name: "a record lost in the middle",
            target: [copies(10, 15, 100), copies(16, 20, 105)].concat(),
            counts: (9, 1, 0, 0, 0, 0),
            clean: false,
            first: Some(f(Kind::Missing, Some(15), None)),
        },
        Case {
            name: "the tail lost",
            target: copies(10, 17, 100),
            counts: (7, 3, 0, 0, 0, 0),
            clean: false,
            first: Some(f(Kind::Missing, Some(17), None)),
        },
        Case {
            name: "a foreign record between replicated ones",
            target: [copies(10, 13, 100), vec![foreign(103)], copies(13, 20, 104)].concat(),
            counts: (10, 0, 1, 0, 0, 0),
            clean: false,
            first: Some(f(Kind::Extra, None, Some(103))),
        },
        Case {
            name: "two foreign records in a row, then one at the end",
            target: [
                copies(10, 13, 100),
                vec![foreign(103), foreign(104)],
                copies(13, 20, 105),
                vec![foreign(112)],
            ]
            .concat(),
            counts: (10, 0, 3, 0, 0, 0),
            clean: false,
            first: Some(f(Kind::Extra, None, Some(103))),
        },
        Case {
            name: "one value replaced",
            target: [copies(10, 13, 100), vec![changed], copies(14, 20, 104)].concat(),
            counts: (9, 0, 0, 1, 0, 0),
            clean: false,
            first: Some(Finding {
                fields: vec![Field::Value],
                ..f(Kind::Different, Some(13), Some(103))
            }),
        },
        Case {
            name: "key and timestamp replaced at the end",
            target: [copies(10, 14, 100), vec![rekeyed_and_stamped]].concat(),
            counts: (4, 5, 0, 1, 0, 0),
            clean: false,
            first: Some(Finding {
                fields: vec![Field::Key, Field::Timestamp],
                ..f(Kind::Different, Some(14), Some(104))
            }),
        },
        Case {
            name: "target refilled by another writer: every place different",
            target: (100..110).map(foreign).collect(),
            counts: (0, 0, 0, 10, 0, 0),
            clean: false,
            first: Some(Finding {
                fields: vec![Field::Key, Field::Value, Field::Headers, Field::Timestamp],
                ..f(Kind::Different, Some(10), Some(100))
            }),
        },
        Case {
            name: "target refilled with fewer records: different, then missing",
            target: (100..104).map(foreign).collect(),
            counts: (0, 6, 0, 4, 0, 0),
            clean: false,
            first: Some(Finding {
                fields: vec![Field::Key, Field::Value, Field::Headers, Field::Timestamp],
                ..f(Kind::Different, Some(10), Some(100))
            }),
        },
        Case {
            name: "AtLeastOnce re-send of a window: duplicates within the bound",
            target: [copies(10, 16, 100), copies(13, 20, 106)].concat(),
            counts: (10, 0, 0, 0, 3, 0),
            clean: true,
            first: None,
        },
        Case {
            name: "a record lost, then re-sent by a replay",
            target: [
                copies(10, 13, 100),
                copies(14, 16, 103),
                copies(13, 20, 105),
            ]
            .concat(),
            counts: (10, 0, 0, 0, 2, 0),
            clean: true,
            first: None,
        },
        Case {
            name: "empty target",
            target: vec![],
            counts: (0, 10, 0, 0, 0, 0),
            clean: false,
            first: Some(f(Kind::Missing, Some(10), None)),
        },
    ];
    for c in cases {
        let o = compare(&input(&src, &c.target, &anchors));
        assert_eq!(counts(&o), c.counts, "{}: {o:?}", c.name);
        assert_eq!(o.clean(), c.clean, "{}", c.name);
        assert_eq!(o.first_mismatch(), c.first.as_ref(), "{}", c.name);
        assert_eq!(
            o.compared,
            o.matched + o.missing + o.extra + o.different + o.duplicated,
            "{}",
            c.name
        );
    }
}

#[test]
fn duplicates_are_flagged_under_exactly_once_or_beyond_the_bound() {
    let src: Vec<Rec> = (0..10).map(s).collect();
    let target = [copies(0, 8, 0), copies(4, 10, 8)].concat(); // 4 re-sent
    let mut i = input(&src, &target, &[]);
    let o = compare(&i);
    assert_eq!((o.duplicated, o.longest_duplicate_run), (4, 4));
    assert!(o.clean() && o.findings.is_empty());
    i.duplicate_bound = 3;
    let o = compare(&i);
    assert!(!o.clean() && o.duplicates_flagged);
    assert_eq!(
        o.first_mismatch(),
        Some(&f(Kind::Duplicated, None, Some(8)))
    );
    i.duplicate_bound = 40_000;
    i.delivery = Delivery::ExactlyOnce;
    let o = compare(&i);
    assert!(!o.clean() && o.duplicates_flagged);
    assert_eq!(o.findings.len(), 4);
}

#[test]
fn an_anchor_pins_the_pair_that_differs() {
    // Two records replaced, one of them reordered: the sync at target 3 says it is source 3.
    let src: Vec<Rec> = (0..6).map(s).collect();
    let mut x = at(3, s(3));
    x.headers = 0;
    let mut y = at(2, s(2));
    y.key = hash_bytes(Some(b"k3")); // shares the key of source 3
    y.value = 1;
    let target = vec![at(0, s(0)), at(1, s(1)), y, x, at(4, s(4)), at(5, s(5))];
    let anchors = [Anchor {
        upstream: 3,
        downstream: 3,
    }];
    let o = compare(&input(&src, &target, &anchors));
    assert_eq!(counts(&o), (4, 0, 0, 2, 0, 0));
    assert_eq!(o.findings[0].source_offset, Some(2));
    assert_eq!(o.findings[1].fields, vec![Field::Headers]);
}

#[test]
fn loose_start_skips_what_precedes_the_first_match() {
    // The source lost 10..13 to retention; the target still holds their copies (and the
    // target lost the copy of 13 to its own retention in the second case).
    let src: Vec<Rec> = (13..20).map(s).collect();
    let target = copies(10, 20, 0);
    let mut i = input(&src, &target, &[]);
    i.start = Start::Loose;
    let o = compare(&i);
    assert_eq!(counts(&o), (7, 0, 0, 0, 0, 3));
    assert!(o.clean());
    let target = copies(14, 20, 4);
    let mut i = input(&src, &target, &[]);
    i.start = Start::Loose;
    let o = compare(&i);
    assert_eq!(counts(&o), (6, 0, 0, 0, 0, 1));
    // Pinned, the same target start is a record missing.
    i.start = Start::Pinned;
    assert_eq!(counts(&compare(&i)), (6, 1, 0, 0, 0, 0));
}

#[test]
fn compaction_holes_explain_records_only_on_the_compacted_side() {
    // The source compacted 12 and 13 away after they were replicated.
    let src: Vec<Rec> = [10, 11, 14, 15].into_iter().map(s).collect();
    let target = copies(10, 16, 0);
    let mut i = input(&src, &target, &[]);
    assert_eq!(
        counts(&compare(&i)),
        (4, 0, 2, 0, 0, 0),
        "not compacted: extra"
    );
    i.source_compacted = true;
    let o = compare(&i);
    assert_eq!(counts(&o), (4, 0, 0, 0, 0, 2));
    assert!(o.clean());
    // A foreign record beyond the holes is still extra.
    let target = [copies(10, 14, 0), vec![foreign(4)], copies(14, 16, 5)].concat();
    i.target = &target;
    assert_eq!(counts(&compare(&i)), (4, 0, 1, 0, 0, 2));

    // The target compacted the copies of 11 and 12 away.
    let src: Vec<Rec> = (10..15).map(s).collect();
    let target = vec![at(0, s(10)), at(3, s(13)), at(4, s(14))];
    let mut i = input(&src, &target, &[]);
    assert_eq!(
        counts(&compare(&i)),
        (3, 2, 0, 0, 0, 0),
        "not compacted: missing"
    );
    i.target_compacted = true;
    assert_eq!(counts(&compare(&i)), (3, 0, 0, 0, 0, 2));
}

#[test]
fn records_not_yet_replicated_are_not_missing() {
    let src: Vec<Rec> = (0..10).map(s).collect();
    let target = [copies(0, 6, 0), vec![foreign(6)]].concat();
    let mut i = input(&src, &target, &[]);
    i.expect_below = 6;
    let o = compare(&i);
    assert_eq!(counts(&o), (6, 0, 1, 0, 0, 0));
    assert_eq!(o.unreplicated, 4);
    assert_eq!(o.first_mismatch(), Some(&f(Kind::Extra, None, Some(6))));
    // A copy already there of a record past the committed progress matches.
    let target = copies(0, 8, 0);
    i.target = &target;
    let o = compare(&i);
    assert_eq!((o.matched, o.unreplicated, o.clean()), (8, 2, true));
}

#[test]
fn identical_source_records_match_in_order() {
    let same = |o| Rec::new(o, 0, Some(5), None, Some(b"same"), 0);
    let src: Vec<Rec> = (0..4).map(same).collect();
    let target: Vec<Rec> = (0..4).map(same).collect();
    assert_eq!(
        counts(&compare(&input(&src, &target, &[]))),
        (4, 0, 0, 0, 0, 0)
    );
    let target: Vec<Rec> = (0..3).map(same).collect();
    assert_eq!(
        counts(&compare(&input(&src, &target, &[]))),
        (3, 1, 0, 0, 0, 0)
    );
}

#[test]
fn absorb_adds_counts_and_keeps_the_first_findings() {
    let src: Vec<Rec> = (0..3).map(s).collect();
    let mut a = compare(&input(&src, &[], &[]));
    let b = compare(&input(&src, &copies(0, 3, 0), &[]));
    a.absorb(b);
    assert_eq!((a.matched, a.missing, a.compared), (3, 3, 6));
    assert_eq!(a.first_mismatch(), Some(&f(Kind::Missing, Some(0), None)));
}

#[test]
fn a_finding_reads_as_a_sentence() {
    let d = Finding {
        fields: vec![Field::Value, Field::Headers],
        ..f(Kind::Different, Some(3), Some(7))
    };
    assert_eq!(
        d.to_string(),
        "different source offset 3, target offset 7 (value, headers differ)"
    );
    assert_eq!(
        f(Kind::Extra, None, Some(9)).to_string(),
        "extra target offset 9"
    );
}

#[test]
fn copies_of_records_before_the_range_are_duplicates() {
    // A re-send that started before the range (source 8..12) lands after its first copies.
    let src: Vec<Rec> = (10..14).map(s).collect();
    let target = [copies(10, 12, 0), copies(8, 14, 2)].concat();
    let mut i = input(&src, &target, &[]);
    assert_eq!(
        counts(&compare(&i)),
        (4, 0, 2, 0, 2, 0),
        "without the earlier records"
    );
    let earlier: Vec<Rec> = (8..10).map(s).collect();
    i.earlier = &earlier;
    let o = compare(&i);
    assert_eq!(counts(&o), (4, 0, 0, 0, 4, 0));
    assert!(o.clean());
}
