//! Record-by-record comparison of one source partition range with its target range. Pure.
//!
//! Two passes. The first walks the target in order and pairs every target record whose
//! content (key, value, headers, timestamp, partition) equals a source record: in order
//! (matched), again (duplicated: an AtLeastOnce re-send), or ahead of the next expected one
//! (the source records jumped over stay open, a later copy still matches them). The second
//! looks at each gap between two in-order matches: the source records and target records
//! left open there are paired as **different** (first at the positions the offset syncs
//! pin, then by equal key, then in order); what is left is **missing** (source) or
//! **extra** (target). A gap a compacted side's offset holes can explain, and the records
//! before the first match when the start of the range is not pinned, are **skipped**, never
//! a mismatch.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde::Serialize;

use crate::api::Delivery;

/// One record, reduced to what the audit compares (field hashes: a range holds no payloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rec {
    /// Offset in its partition.
    pub offset: i64,
    /// Partition number.
    pub partition: i32,
    /// Record timestamp (ms), if any.
    pub timestamp: Option<i64>,
    /// Hash of the key (`None` and empty differ).
    pub key: u64,
    /// Hash of the value.
    pub value: u64,
    /// Hash of the headers, in order, names and values.
    pub headers: u64,
}

/// Stable-within-a-process hash of optional bytes.
pub fn hash_bytes(bytes: Option<&[u8]>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Hash of a header list, in order.
pub fn hash_headers<'a>(headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    let mut n = 0usize;
    for (k, v) in headers {
        k.hash(&mut h);
        v.hash(&mut h);
        n += 1;
    }
    n.hash(&mut h);
    h.finish()
}

impl Rec {
    /// A record from its fields.
    pub fn new(
        offset: i64,
        partition: i32,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: u64,
    ) -> Self {
        Self {
            offset,
            partition,
            timestamp,
            key: hash_bytes(key),
            value: hash_bytes(value),
            headers,
        }
    }

    fn content(&self) -> Content {
        (
            self.partition,
            self.timestamp,
            self.key,
            self.value,
            self.headers,
        )
    }

    /// The fields in which `other` differs from `self`.
    pub fn differing(&self, other: &Rec) -> Vec<Field> {
        let mut out = Vec::new();
        if self.key != other.key {
            out.push(Field::Key);
        }
        if self.value != other.value {
            out.push(Field::Value);
        }
        if self.headers != other.headers {
            out.push(Field::Headers);
        }
        if self.timestamp != other.timestamp {
            out.push(Field::Timestamp);
        }
        if self.partition != other.partition {
            out.push(Field::Partition);
        }
        out
    }
}

type Content = (i32, Option<i64>, u64, u64, u64);

/// A compared field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Field {
    /// The key.
    Key,
    /// The value.
    Value,
    /// The headers.
    Headers,
    /// The timestamp.
    Timestamp,
    /// The partition.
    Partition,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Key => "key",
            Field::Value => "value",
            Field::Headers => "headers",
            Field::Timestamp => "timestamp",
            Field::Partition => "partition",
        })
    }
}

/// What a comparison found for one record (or pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// The target holds the record's copy, in order.
    Matched,
    /// A replicated source record has no copy on the target.
    Missing,
    /// A target record no source record maps to (e.g. another writer's).
    Extra,
    /// The target record at the source record's place holds other bytes.
    Different,
    /// A second copy of a record (AtLeastOnce re-sends).
    Duplicated,
    /// Not comparable: a side no longer holds the record (retention, compaction).
    Skipped,
}

impl Kind {
    /// The label used in reports and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Matched => "matched",
            Kind::Missing => "missing",
            Kind::Extra => "extra",
            Kind::Different => "different",
            Kind::Duplicated => "duplicated",
            Kind::Skipped => "skipped",
        }
    }
}

/// An offset sync: source offset `upstream` was written at target offset `downstream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Anchor {
    /// Source offset.
    pub upstream: i64,
    /// Target offset.
    pub downstream: i64,
}

/// Where the compared ranges start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The first source record's copy is the first target record (an offset sync says so).
    Pinned,
    /// Unknown: open records on either side before the first match are skipped (the other
    /// side no longer holds, or never held, their counterparts).
    Loose,
}

/// One comparison.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Source records in offset order.
    pub source: &'a [Rec],
    /// Target records in offset order.
    pub target: &'a [Rec],
    /// Offset syncs inside the ranges (any order).
    pub anchors: &'a [Anchor],
    /// How the ranges start.
    pub start: Start,
    /// Source records at or above this offset are not known to be replicated yet: their copy
    /// may be on the target, its absence is no mismatch.
    pub expect_below: i64,
    /// First source offset of the range read (for offset holes before the first record).
    pub source_from: i64,
    /// First target offset of the range read.
    pub target_from: i64,
    /// The flow's delivery guarantee.
    pub delivery: Delivery,
    /// AtLeastOnce: the longest run of re-sent records that is not a mismatch.
    pub duplicate_bound: u64,
    /// The source topic is compacted: its offset holes may be records it no longer holds.
    pub source_compacted: bool,
    /// The target topic is compacted.
    pub target_compacted: bool,
    /// Source records before the range (any order): a target record equal to one of them is
    /// a re-sent copy (duplicated), not extra. Read only when a range has extra records.
    pub earlier: &'a [Rec],
}

/// One non-matched finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What was found.
    pub kind: Kind,
    /// The source record's offset, if one is involved.
    pub source_offset: Option<i64>,
    /// The target record's offset, if one is involved.
    pub target_offset: Option<i64>,
    /// For `Different`: which fields differ.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind.label())?;
        if let Some(o) = self.source_offset {
            write!(f, " source offset {o}")?;
        }
        if let Some(o) = self.target_offset {
            let sep = if self.source_offset.is_some() {
                ","
            } else {
                ""
            };
            write!(f, "{sep} target offset {o}")?;
        }
        if !self.fields.is_empty() {
            let fields: Vec<String> = self.fields.iter().map(Field::to_string).collect();
            write!(f, " ({} differ)", fields.join(", "))?;
        }
        Ok(())
    }
}

/// How many findings a result keeps (the counts are complete).
pub const MAX_FINDINGS: usize = 100;

/// What one comparison found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// Records compared (everything but skipped and not yet replicated).
    pub compared: u64,
    /// In-order copies.
    pub matched: u64,
    /// Source records without a copy.
    pub missing: u64,
    /// Target records without a source record.
    pub extra: u64,
    /// Pairs with other bytes.
    pub different: u64,
    /// Re-sent copies.
    pub duplicated: u64,
    /// Longest run of consecutive re-sent copies.
    pub longest_duplicate_run: u64,
    /// Records skipped (not held by a side).
    pub skipped: u64,
    /// Source records not yet known to be replicated and without a copy (not compared).
    pub unreplicated: u64,
    /// The duplicates count as a mismatch (ExactlyOnce, or a run beyond the bound).
    pub duplicates_flagged: bool,
    /// Mismatches in target order, the first [`MAX_FINDINGS`] (duplicates only if flagged).
    pub findings: Vec<Finding>,
}

impl Outcome {
    /// Nothing missing, extra or different, and no flagged duplicates.
    pub fn clean(&self) -> bool {
        self.missing == 0 && self.extra == 0 && self.different == 0 && !self.duplicates_flagged
    }

    /// The first mismatch, if any.
    pub fn first_mismatch(&self) -> Option<&Finding> {
        self.findings.first()
    }

    /// Adds `other`'s counts and findings (e.g. the next range of the same partition).
    pub fn absorb(&mut self, other: Outcome) {
        self.compared += other.compared;
        self.matched += other.matched;
        self.missing += other.missing;
        self.extra += other.extra;
        self.different += other.different;
        self.duplicated += other.duplicated;
        self.longest_duplicate_run = self.longest_duplicate_run.max(other.longest_duplicate_run);
        self.skipped += other.skipped;
        self.unreplicated += other.unreplicated;
        self.duplicates_flagged |= other.duplicates_flagged;
        let room = MAX_FINDINGS.saturating_sub(self.findings.len());
        self.findings.extend(other.findings.into_iter().take(room));
    }

    /// The count of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Matched => self.matched,
            Kind::Missing => self.missing,
            Kind::Extra => self.extra,
            Kind::Different => self.different,
            Kind::Duplicated => self.duplicated,
            Kind::Skipped => self.skipped,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourceState {
    Pending,
    /// Jumped over; a later copy still matches it.
    Open,
    Matched,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetState {
    /// Matched the source record at this index, in order (a gap bound).
    InOrder(usize),
    /// Matched a record jumped over before.
    Late,
    Duplicate,
    Open,
}

/// Pass 1: pairs every target record with a source record of the same content, in order,
/// late (a record jumped over before) or again (a duplicate).
fn match_exact(src: &[Rec], tgt: &[Rec], earlier: &[Rec]) -> (Vec<SourceState>, Vec<TargetState>) {
    let before: std::collections::HashSet<Content> = earlier.iter().map(Rec::content).collect();
    let mut by_content: HashMap<Content, Vec<usize>> = HashMap::new();
    for (i, r) in src.iter().enumerate() {
        by_content.entry(r.content()).or_default().push(i);
    }
    let mut s_state = vec![SourceState::Pending; src.len()];
    let mut t_state = vec![TargetState::Open; tgt.len()];
    let mut next = 0usize;
    for (j, t) in tgt.iter().enumerate() {
        let c = t.content();
        if next < src.len() && src[next].content() == c {
            s_state[next] = SourceState::Matched;
            t_state[j] = TargetState::InOrder(next);
            next += 1;
            continue;
        }
        let Some(cands) = by_content.get(&c) else {
            if before.contains(&c) {
                t_state[j] = TargetState::Duplicate;
            }
            continue;
        };
        let behind = &cands[..cands.partition_point(|&k| k < next)];
        if let Some(&k) = behind.iter().find(|&&k| s_state[k] == SourceState::Open) {
            s_state[k] = SourceState::Matched;
            t_state[j] = TargetState::Late;
        } else if !behind.is_empty() {
            t_state[j] = TargetState::Duplicate;
        } else if let Some(&k) = cands.get(behind.len()) {
            for s in &mut s_state[next..k] {
                *s = SourceState::Open;
            }
            s_state[k] = SourceState::Matched;
            t_state[j] = TargetState::InOrder(k);
            next = k + 1;
        }
    }
    for s in &mut s_state[next..] {
        *s = SourceState::Open;
    }
    (s_state, t_state)
}

/// Compares one range. Pure.
pub fn compare(input: &Input<'_>) -> Outcome {
    let src = input.source;
    let tgt = input.target;
    let (s_state, t_state) = match_exact(src, tgt, input.earlier);

    let mut out = Outcome::default();
    // Findings sort in source order; a target-only one right after the source record its
    // left neighbour copied.
    let mut events: Vec<(Place, Finding)> = Vec::new();
    let mut left_of = Vec::with_capacity(tgt.len());
    let mut left = input.source_from - 1;
    for st in &t_state {
        if let TargetState::InOrder(k) = st {
            left = src[*k].offset;
        }
        left_of.push(left);
    }

    // Duplicates: counted; runs of consecutive re-sent copies measured.
    let mut run = 0u64;
    for (j, st) in t_state.iter().enumerate() {
        if *st == TargetState::Duplicate {
            run += 1;
            out.duplicated += 1;
            out.longest_duplicate_run = out.longest_duplicate_run.max(run);
            events.push((
                (left_of[j], 1, tgt[j].offset),
                Finding {
                    kind: Kind::Duplicated,
                    source_offset: None,
                    target_offset: Some(tgt[j].offset),
                    fields: Vec::new(),
                },
            ));
        } else {
            run = 0;
        }
    }
    out.duplicates_flagged = out.duplicated > 0
        && (input.delivery == Delivery::ExactlyOnce
            || out.longest_duplicate_run > input.duplicate_bound);
    if !out.duplicates_flagged {
        events.clear();
    }
    out.matched = t_state
        .iter()
        .filter(|s| matches!(s, TargetState::InOrder(_) | TargetState::Late))
        .count() as u64;

    // Pass 2: the gaps between in-order matches.
    let anchors: HashMap<i64, i64> = input
        .anchors
        .iter()
        .map(|a| (a.downstream, a.upstream))
        .collect();
    let bounds: Vec<(usize, usize)> = t_state
        .iter()
        .enumerate()
        .filter_map(|(j, s)| match s {
            TargetState::InOrder(k) => Some((*k, j)),
            _ => None,
        })
        .collect();
    let mut prev: Option<(usize, usize)> = None;
    for gap in 0..=bounds.len() {
        let right = bounds.get(gap).copied();
        let (s_lo, t_lo) = prev.map_or((0, 0), |(k, j)| (k + 1, j + 1));
        let (s_hi, t_hi) = right.unwrap_or((src.len(), tgt.len()));
        let open_src: Vec<usize> = (s_lo..s_hi)
            .filter(|&k| s_state[k] == SourceState::Open)
            .collect();
        let open_tgt: Vec<usize> = (t_lo..t_hi)
            .filter(|&j| t_state[j] == TargetState::Open)
            .collect();
        let leading = prev.is_none() && right.is_some() && input.start == Start::Loose;
        let trailing = right.is_none();
        if leading || (prev.is_none() && trailing && input.start == Start::Loose) {
            // Before the first match of an unpinned range: the other side's counterparts are
            // outside what it holds.
            out.skipped += (open_src.len() + open_tgt.len()) as u64;
        } else {
            let g = Gap {
                input,
                left_of: &left_of,
                open_src,
                open_tgt,
                source_offsets: (
                    prev.map_or(input.source_from - 1, |(k, _)| src[k].offset),
                    right.map(|(k, _)| src[k].offset),
                ),
                target_offsets: (
                    prev.map_or(input.target_from - 1, |(_, j)| tgt[j].offset),
                    right.map(|(_, j)| tgt[j].offset),
                ),
                source_between: s_hi - s_lo,
                target_between: t_hi - t_lo,
            };
            g.classify(&anchors, &mut out, &mut events);
        }
        prev = right;
    }

    out.compared = out.matched + out.missing + out.extra + out.different + out.duplicated;
    events.sort_by_key(|(at, _)| *at);
    out.findings = events
        .into_iter()
        .map(|(_, f)| f)
        .take(MAX_FINDINGS)
        .collect();
    out
}

/// Where a finding sorts: source offset, 0 for a source record's own finding or 1 for a
/// target-only one after it, target offset.
type Place = (i64, u8, i64);

/// The open records between two in-order matches (or a range edge).
struct Gap<'a> {
    input: &'a Input<'a>,
    left_of: &'a [i64],
    open_src: Vec<usize>,
    open_tgt: Vec<usize>,
    /// Offsets of the bounding matches (left bound exclusive; `None`: the range end).
    source_offsets: (i64, Option<i64>),
    target_offsets: (i64, Option<i64>),
    /// Records read between the bounds (open or not).
    source_between: usize,
    target_between: usize,
}

impl Gap<'_> {
    fn classify(
        &self,
        anchors: &HashMap<i64, i64>,
        out: &mut Outcome,
        events: &mut Vec<(Place, Finding)>,
    ) {
        let src = self.input.source;
        let tgt = self.input.target;
        let mut src_used = vec![false; self.open_src.len()];
        let mut tgt_used = vec![false; self.open_tgt.len()];
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        // Pinned by an offset sync.
        for (ti, &j) in self.open_tgt.iter().enumerate() {
            if let Some(&u) = anchors.get(&tgt[j].offset) {
                if let Some(si) = self.open_src.iter().position(|&k| src[k].offset == u) {
                    if !src_used[si] {
                        src_used[si] = true;
                        tgt_used[ti] = true;
                        pairs.push((self.open_src[si], j));
                    }
                }
            }
        }
        // Not known to be replicated (after the last match): only an exact copy pairs them.
        let trailing = self.source_offsets.1.is_none();
        for (si, &k) in self.open_src.iter().enumerate() {
            if !src_used[si] && trailing && src[k].offset >= self.input.expect_below {
                src_used[si] = true;
                out.unreplicated += 1;
            }
        }
        // The same key, in order.
        let mut from = 0;
        for (si, &k) in self.open_src.iter().enumerate() {
            if src_used[si] {
                continue;
            }
            if let Some(ti) = (from..self.open_tgt.len())
                .find(|&ti| !tgt_used[ti] && tgt[self.open_tgt[ti]].key == src[k].key)
            {
                src_used[si] = true;
                tgt_used[ti] = true;
                pairs.push((k, self.open_tgt[ti]));
                from = ti + 1;
            }
        }
        // What is left, in order: replaced records.
        let rest_src: Vec<usize> = (0..self.open_src.len()).filter(|&i| !src_used[i]).collect();
        let rest_tgt: Vec<usize> = (0..self.open_tgt.len()).filter(|&i| !tgt_used[i]).collect();
        for (&si, &ti) in rest_src.iter().zip(&rest_tgt) {
            src_used[si] = true;
            tgt_used[ti] = true;
            pairs.push((self.open_src[si], self.open_tgt[ti]));
        }
        self.report(pairs, &src_used, &tgt_used, out, events);
    }

    /// Reports the pairs as different and what is left as missing, extra or skipped.
    fn report(
        &self,
        pairs: Vec<(usize, usize)>,
        src_used: &[bool],
        tgt_used: &[bool],
        out: &mut Outcome,
        events: &mut Vec<(Place, Finding)>,
    ) {
        let src = self.input.source;
        let tgt = self.input.target;
        for (k, j) in pairs {
            out.different += 1;
            events.push((
                (src[k].offset, 0, tgt[j].offset),
                Finding {
                    kind: Kind::Different,
                    source_offset: Some(src[k].offset),
                    target_offset: Some(tgt[j].offset),
                    fields: src[k].differing(&tgt[j]),
                },
            ));
        }
        // Offset holes a compacted side may have made (records it no longer holds).
        let holes = |(lo, hi): (i64, Option<i64>), between: usize, end: i64| -> u64 {
            let hi = hi.unwrap_or(end);
            (hi - lo - 1 - between as i64).max(0) as u64
        };
        let src_end = src.last().map_or(self.input.source_from, |r| r.offset + 1);
        let tgt_end = tgt.last().map_or(self.input.target_from, |r| r.offset + 1);
        let mut src_holes = if self.input.source_compacted {
            holes(self.source_offsets, self.source_between, src_end)
        } else {
            0
        };
        let mut tgt_holes = if self.input.target_compacted {
            holes(self.target_offsets, self.target_between, tgt_end)
        } else {
            0
        };
        for (si, &k) in self.open_src.iter().enumerate() {
            if src_used[si] {
                continue;
            }
            if tgt_holes > 0 {
                tgt_holes -= 1;
                out.skipped += 1;
            } else {
                out.missing += 1;
                events.push((
                    (src[k].offset, 0, 0),
                    Finding {
                        kind: Kind::Missing,
                        source_offset: Some(src[k].offset),
                        target_offset: None,
                        fields: Vec::new(),
                    },
                ));
            }
        }
        for (ti, &j) in self.open_tgt.iter().enumerate() {
            if tgt_used[ti] {
                continue;
            }
            if src_holes > 0 {
                src_holes -= 1;
                out.skipped += 1;
            } else {
                out.extra += 1;
                events.push((
                    (self.left_of[j], 1, tgt[j].offset),
                    Finding {
                        kind: Kind::Extra,
                        source_offset: None,
                        target_offset: Some(tgt[j].offset),
                        fields: Vec::new(),
                    },
                ));
            }
        }
    }
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
