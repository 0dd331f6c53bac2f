//! The few Kafka protocol requests mirrorflow speaks itself, because librdkafka asks for one
//! consumer group per request (`rd_kafka_ListConsumerGroupOffsets` refuses more than one in
//! 2.12, and finds each group's coordinator again: its coordinator cache holds 11 entries):
//! ApiVersions v0, FindCoordinator v4 (many groups per request, Kafka 3.0, KIP-699),
//! OffsetFetch v8 (many groups per request, Kafka 3.0, KIP-709) and OffsetCommit v8 (one
//! group per request, pipelined). Pure encoding, decoding and request planning; the socket
//! side is `kafka::group_client`.
//!
//! Layouts follow the Apache Kafka message definitions (`clients/src/main/resources/common/
//! message/*.json`). Flexible versions (all but ApiVersions v0 here) use request header v2
//! (client id as a non-compact nullable string, then tagged fields) and response header v1
//! (correlation id, tagged fields); compact strings and arrays carry their length + 1 as an
//! unsigned varint, 0 meaning null.

use std::collections::{BTreeMap, HashMap};

use super::error::{Code, DecodeError, Error};
use super::group_offset::GroupOffset;

/// ApiVersions API key.
pub const API_VERSIONS: i16 = 18;
/// FindCoordinator API key.
pub const FIND_COORDINATOR: i16 = 10;
/// OffsetFetch API key.
pub const OFFSET_FETCH: i16 = 9;
/// OffsetCommit API key.
pub const OFFSET_COMMIT: i16 = 8;
/// The versions spoken here (and the least a broker must support for this path).
pub const FIND_COORDINATOR_VERSION: i16 = 4;
/// OffsetFetch with a list of groups.
pub const OFFSET_FETCH_VERSION: i16 = 8;
/// First flexible OffsetCommit version.
pub const OFFSET_COMMIT_VERSION: i16 = 8;
/// Groups per OffsetFetch request: bounds one answer (about 200 bytes per group at 10
/// partitions) and lets several requests to one coordinator be pipelined.
pub const MAX_GROUPS_PER_FETCH: usize = 1000;
/// Keys per FindCoordinator request.
pub const MAX_KEYS_PER_FIND: usize = 1000;

/// Broker error codes this path acts on.
pub mod code {
    /// No error.
    pub const NONE: i16 = 0;
    /// The coordinator is loading the group's offsets: retry.
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// The coordinator is not available: find it again.
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// This broker is not the group's coordinator: find it again.
    pub const NOT_COORDINATOR: i16 = 16;
}

/// Whether an error code means "ask FindCoordinator again and retry".
pub fn is_reroute(code: i16) -> bool {
    matches!(
        code,
        code::COORDINATOR_LOAD_IN_PROGRESS
            | code::COORDINATOR_NOT_AVAILABLE
            | code::NOT_COORDINATOR
    )
}

/// Name and meaning of a broker error code (the texts the checkpoint side classifies, e.g.
/// "unknown member" and "rebalance" for a group with active members).
pub fn code_text(code: i16) -> String {
    let name = match code {
        3 => "UNKNOWN_TOPIC_OR_PARTITION: unknown topic or partition",
        12 => "OFFSET_METADATA_TOO_LARGE: offset metadata too large",
        14 => "COORDINATOR_LOAD_IN_PROGRESS: coordinator load in progress",
        15 => "COORDINATOR_NOT_AVAILABLE: coordinator not available",
        16 => "NOT_COORDINATOR: not coordinator",
        22 => "ILLEGAL_GENERATION: illegal generation",
        24 => "INVALID_GROUP_ID: invalid group id",
        25 => "UNKNOWN_MEMBER_ID: unknown member (the group has active members)",
        27 => "REBALANCE_IN_PROGRESS: group rebalance in progress",
        29 => "TOPIC_AUTHORIZATION_FAILED: topic authorization failed",
        30 => "GROUP_AUTHORIZATION_FAILED: group authorization failed",
        35 => "UNSUPPORTED_VERSION: unsupported version",
        68 => "NON_EMPTY_GROUP: the group is not empty",
        69 => "GROUP_ID_NOT_FOUND: group id not found",
        _ => return format!("broker error code {code}"),
    };
    format!("broker error {code} {name}")
}

/// A broker error code as an error, with its name and meaning.
pub fn code_error(code: i16) -> Error {
    Error::code(Code(i32::from(code)), code_text(code))
}

struct Writer(Vec<u8>);

impl Writer {
    fn i8(&mut self, v: i8) {
        self.0.push(v as u8);
    }
    fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// Compact array or string length (`len + 1`; `None` is null).
    fn compact_len(&mut self, len: Option<usize>) {
        self.uvarint(len.map_or(0, |l| l as u64 + 1));
    }
    fn compact_string(&mut self, s: Option<&str>) {
        self.compact_len(s.map(str::len));
        if let Some(s) = s {
            self.0.extend_from_slice(s.as_bytes());
        }
    }
    fn no_tags(&mut self) {
        self.uvarint(0);
    }
}

/// A request frame: size prefix, header (v1 or, for flexible versions, v2), body.
pub fn frame(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &[u8],
) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(body.len() + 32));
    w.i32(0); // size, patched below
    w.i16(api_key);
    w.i16(version);
    w.i32(correlation_id);
    w.i16(i16::try_from(client_id.len()).unwrap_or(i16::MAX));
    w.0.extend_from_slice(&client_id.as_bytes()[..client_id.len().min(i16::MAX as usize)]);
    if is_flexible(api_key, version) {
        w.no_tags();
    }
    w.0.extend_from_slice(body);
    let size = i32::try_from(w.0.len() - 4).unwrap_or(i32::MAX);
    w.0[..4].copy_from_slice(&size.to_be_bytes());
    w.0
}

/// Whether `version` of `api_key` uses the flexible (tagged-field) encoding.
pub fn is_flexible(api_key: i16, version: i16) -> bool {
    match api_key {
        API_VERSIONS => version >= 3,
        FIND_COORDINATOR => version >= 3,
        OFFSET_FETCH => version >= 6,
        OFFSET_COMMIT => version >= 8,
        _ => false,
    }
}

/// FindCoordinator v4 body: group coordinators of `groups`.
pub fn find_coordinator_body(groups: &[String]) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.i8(0); // key type: group
    w.compact_len(Some(groups.len()));
    for g in groups {
        w.compact_string(Some(g));
    }
    w.no_tags();
    w.0
}

/// OffsetFetch v8 body: every committed partition (topics null) of `groups`.
pub fn offset_fetch_body(groups: &[String]) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.compact_len(Some(groups.len()));
    for g in groups {
        w.compact_string(Some(g));
        w.compact_len(None); // all topics
        w.no_tags();
    }
    w.0.push(0); // require_stable false
    w.no_tags();
    w.0
}

/// OffsetCommit v8 body: an admin commit (generation -1, no member) of `offsets` to `group`,
/// which the broker accepts only for a group without active members.
pub fn offset_commit_body(group: &str, offsets: &[GroupOffset]) -> Vec<u8> {
    let mut by_topic: BTreeMap<&str, Vec<&GroupOffset>> = BTreeMap::new();
    for o in offsets {
        by_topic.entry(o.topic.as_str()).or_default().push(o);
    }
    let mut w = Writer(Vec::new());
    w.compact_string(Some(group));
    w.i32(-1); // generation
    w.compact_string(Some("")); // member id
    w.compact_string(None); // group instance id
    w.compact_len(Some(by_topic.len()));
    for (topic, parts) in by_topic {
        w.compact_string(Some(topic));
        w.compact_len(Some(parts.len()));
        for o in parts {
            w.i32(o.partition);
            w.i64(o.offset);
            w.i32(-1); // leader epoch unknown
            w.compact_string(Some(&o.metadata));
            w.no_tags();
        }
        w.no_tags();
    }
    w.no_tags();
    w.0
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, pos: 0, what }
    }
    fn err(&self) -> DecodeError {
        DecodeError {
            what: self.what,
            offset: self.pos,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| self.err())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn uvarint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err())
    }
    /// Compact length: `None` for null.
    fn compact_len(&mut self) -> Result<Option<usize>, DecodeError> {
        let n = self.uvarint()?;
        if n == 0 {
            return Ok(None);
        }
        let len = usize::try_from(n - 1).map_err(|_| self.err())?;
        // An element takes at least one byte: a larger count is malformed, not an allocation.
        if len > self.buf.len() - self.pos {
            return Err(self.err());
        }
        Ok(Some(len))
    }
    fn compact_string(&mut self) -> Result<Option<String>, DecodeError> {
        match self.compact_len()? {
            None => Ok(None),
            Some(n) => {
                let at = self.pos;
                let bytes = self.take(n)?;
                std::str::from_utf8(bytes)
                    .map(|s| Some(s.to_string()))
                    .map_err(|_| DecodeError {
                        what: self.what,
                        offset: at,
                    })
            }
        }
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        Ok(self.compact_string()?.unwrap_or_default())
    }
    fn skip_tags(&mut self) -> Result<(), DecodeError> {
        let n = self.uvarint()?;
        for _ in 0..n {
            self.uvarint()?; // tag
            let size = usize::try_from(self.uvarint()?).map_err(|_| self.err())?;
            self.take(size)?;
        }
        Ok(())
    }
    fn array_len(&mut self) -> Result<usize, DecodeError> {
        Ok(self.compact_len()?.unwrap_or(0))
    }
}

/// Splits a response frame body (without the size prefix) into correlation id and body;
/// `flexible` responses carry tagged fields in the header (ApiVersions never does).
pub fn response_header(frame: &[u8], flexible: bool) -> Result<(i32, &[u8]), DecodeError> {
    let mut r = Reader::new(frame, "response header");
    let correlation = r.i32()?;
    if flexible {
        r.skip_tags()?;
    }
    Ok((correlation, &frame[r.pos..]))
}

/// ApiVersions v0 answer: the highest version per API key, or the top-level error code.
pub fn decode_api_versions(body: &[u8]) -> Result<Result<HashMap<i16, i16>, i16>, DecodeError> {
    let mut r = Reader::new(body, "ApiVersions response");
    let error = r.i16()?;
    if error != code::NONE {
        return Ok(Err(error));
    }
    let n = r.i32()?;
    let mut out = HashMap::new();
    for _ in 0..n.max(0) {
        let key = r.i16()?;
        let _min = r.i16()?;
        let max = r.i16()?;
        out.insert(key, max);
    }
    Ok(Ok(out))
}

/// Where a group's coordinator is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Coordinator {
    /// Broker node id.
    pub node: i32,
    /// Host and port as the broker advertises them.
    pub host: String,
    /// Port.
    pub port: i32,
}

/// One key's FindCoordinator answer: its coordinator, or an error code and message.
pub type Found = Result<Coordinator, (i16, String)>;

/// FindCoordinator v4 answer, per key.
pub fn decode_find_coordinator(body: &[u8]) -> Result<Vec<(String, Found)>, DecodeError> {
    let mut r = Reader::new(body, "FindCoordinator response");
    let _throttle = r.i32()?;
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.string()?;
        let node = r.i32()?;
        let host = r.string()?;
        let port = r.i32()?;
        let error = r.i16()?;
        let message = r.compact_string()?;
        r.skip_tags()?;
        let answer = if error == code::NONE {
            Ok(Coordinator { node, host, port })
        } else {
            Err((error, message.unwrap_or_else(|| code_text(error))))
        };
        out.push((key, answer));
    }
    r.skip_tags()?;
    Ok(out)
}

/// One group of an OffsetFetch v8 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedGroup {
    /// Group id.
    pub group: String,
    /// Group-level error code.
    pub error: i16,
    /// `(offset, partition error code)`; offset -1 means nothing committed.
    pub partitions: Vec<(GroupOffset, i16)>,
}

/// OffsetFetch v8 answer.
pub fn decode_offset_fetch(body: &[u8]) -> Result<Vec<FetchedGroup>, DecodeError> {
    let mut r = Reader::new(body, "OffsetFetch response");
    let _throttle = r.i32()?;
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let group = r.string()?;
        let mut partitions = Vec::new();
        for _ in 0..r.array_len()? {
            let topic = r.string()?;
            for _ in 0..r.array_len()? {
                let partition = r.i32()?;
                let offset = r.i64()?;
                let _epoch = r.i32()?;
                let metadata = r.compact_string()?.unwrap_or_default();
                let error = r.i16()?;
                r.skip_tags()?;
                let o = GroupOffset {
                    topic: topic.clone(),
                    partition,
                    offset,
                    metadata,
                };
                partitions.push((o, error));
            }
            r.skip_tags()?;
        }
        let error = r.i16()?;
        r.skip_tags()?;
        out.push(FetchedGroup {
            group,
            error,
            partitions,
        });
    }
    r.skip_tags()?;
    Ok(out)
}

/// OffsetCommit v8 answer: `(topic, partition, error code)` per partition.
pub fn decode_offset_commit(body: &[u8]) -> Result<Vec<(String, i32, i16)>, DecodeError> {
    let mut r = Reader::new(body, "OffsetCommit response");
    let _throttle = r.i32()?;
    let mut out = Vec::new();
    for _ in 0..r.array_len()? {
        let topic = r.string()?;
        for _ in 0..r.array_len()? {
            let partition = r.i32()?;
            let error = r.i16()?;
            r.skip_tags()?;
            out.push((topic.clone(), partition, error));
        }
        r.skip_tags()?;
    }
    r.skip_tags()?;
    Ok(out)
}

/// A group's outcome in one fetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// Its committed offsets (partitions without a commit left out).
    Offsets(Vec<GroupOffset>),
    /// Its coordinator moved or is loading: find it again and retry.
    Reroute(Error),
    /// A failure retrying will not fix this cycle.
    Failed(Error),
}

/// The outcome of `group` in an OffsetFetch answer: the group-level error, else the first
/// partition-level one, else its committed offsets (as `GroupAdmin::list_offsets` reports
/// them). A group missing from the answer fails.
pub fn fetch_outcome(group: &str, answer: Option<&FetchedGroup>) -> FetchOutcome {
    let Some(g) = answer else {
        return FetchOutcome::Failed(Error::Protocol("group missing from the answer".into()));
    };
    if is_reroute(g.error) {
        return FetchOutcome::Reroute(code_error(g.error));
    }
    if g.error != code::NONE {
        return FetchOutcome::Failed(code_error(g.error));
    }
    let mut out = Vec::with_capacity(g.partitions.len());
    for (o, e) in &g.partitions {
        if is_reroute(*e) {
            return FetchOutcome::Reroute(code_error(*e));
        }
        if *e != code::NONE {
            return FetchOutcome::Failed(
                code_error(*e).context(format!("{}/{}", o.topic, o.partition)),
            );
        }
        if o.offset >= 0 {
            out.push(o.clone());
        }
    }
    debug_assert_eq!(g.group, group);
    FetchOutcome::Offsets(out)
}

/// The requests of one round of a many-group call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoundPlan {
    /// Groups whose coordinator is not known: FindCoordinator requests of at most
    /// [`MAX_KEYS_PER_FIND`] keys each (sent to any broker).
    pub find: Vec<Vec<String>>,
    /// Per coordinator, its groups in requests of at most `per_request` groups each.
    pub send: Vec<(Coordinator, Vec<Vec<String>>)>,
}

/// Plans one round for `groups` (indexes into the caller's list, each once): groups with a
/// known coordinator go to it, batched `per_request` at a time in input order; the others
/// are looked up first. Duplicated group ids are asked once.
pub fn plan_round(
    groups: &[&str],
    coordinators: &HashMap<String, Coordinator>,
    per_request: usize,
) -> RoundPlan {
    let per_request = per_request.max(1);
    let mut seen = std::collections::HashSet::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut by_coord: BTreeMap<&Coordinator, Vec<String>> = BTreeMap::new();
    for g in groups {
        if !seen.insert(*g) {
            continue;
        }
        match coordinators.get(*g) {
            Some(c) => by_coord.entry(c).or_default().push(g.to_string()),
            None => unknown.push(g.to_string()),
        }
    }
    RoundPlan {
        find: unknown
            .chunks(MAX_KEYS_PER_FIND)
            .map(<[String]>::to_vec)
            .collect(),
        send: by_coord
            .into_iter()
            .map(|(c, gs)| {
                (
                    c.clone(),
                    gs.chunks(per_request).map(<[String]>::to_vec).collect(),
                )
            })
            .collect(),
    }
}

/// Whether a broker's highest versions (from ApiVersions) allow this path.
pub fn supports(max_versions: &HashMap<i16, i16>, api_key: i16, version: i16) -> bool {
    max_versions.get(&api_key).is_some_and(|m| *m >= version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn coord(node: i32) -> Coordinator {
        Coordinator {
            node,
            host: format!("b{node}"),
            port: 9092,
        }
    }

    fn names(v: &[Vec<String>]) -> Vec<Vec<&str>> {
        v.iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn plan_round_routes_batches_and_looks_up() {
        struct Case {
            name: &'static str,
            groups: Vec<&'static str>,
            known: Vec<(&'static str, i32)>,
            per_request: usize,
            find: Vec<Vec<&'static str>>,
            send: Vec<(i32, Vec<Vec<&'static str>>)>,
        }
        let cases = vec![
            Case {
                name: "nothing known: one lookup, nothing sent",
                groups: vec!["a", "b"],
                known: vec![],
                per_request: 10,
                find: vec![vec!["a", "b"]],
                send: vec![],
            },
            Case {
                name: "one broker: all groups in one request",
                groups: vec!["a", "b", "c"],
                known: vec![("a", 1), ("b", 1), ("c", 1)],
                per_request: 10,
                find: vec![],
                send: vec![(1, vec![vec!["a", "b", "c"]])],
            },
            Case {
                name: "batches of per_request in input order",
                groups: vec!["a", "b", "c", "d", "e"],
                known: vec![("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)],
                per_request: 2,
                find: vec![],
                send: vec![(1, vec![vec!["a", "b"], vec!["c", "d"], vec!["e"]])],
            },
            Case {
                name: "each group to its own coordinator; unknown ones looked up",
                groups: vec!["a", "b", "c", "d"],
                known: vec![("a", 2), ("b", 1), ("d", 2)],
                per_request: 10,
                find: vec![vec!["c"]],
                send: vec![(1, vec![vec!["b"]]), (2, vec![vec!["a", "d"]])],
            },
            Case {
                name: "a group listed twice is asked once",
                groups: vec!["a", "a", "b"],
                known: vec![("a", 1)],
                per_request: 10,
                find: vec![vec!["b"]],
                send: vec![(1, vec![vec!["a"]])],
            },
            Case {
                name: "per_request 0 is taken as 1",
                groups: vec!["a", "b"],
                known: vec![("a", 1), ("b", 1)],
                per_request: 0,
                find: vec![],
                send: vec![(1, vec![vec!["a"], vec!["b"]])],
            },
            Case {
                name: "no groups: no requests",
                groups: vec![],
                known: vec![("a", 1)],
                per_request: 10,
                find: vec![],
                send: vec![],
            },
        ];
        for c in cases {
            let known: HashMap<String, Coordinator> = c
                .known
                .iter()
                .map(|(g, n)| (g.to_string(), coord(*n)))
                .collect();
            let plan = plan_round(&c.groups, &known, c.per_request);
            assert_eq!(names(&plan.find), c.find, "{}", c.name);
            let send: Vec<(i32, Vec<Vec<&str>>)> = plan
                .send
                .iter()
                .map(|(co, r)| (co.node, names(r)))
                .collect();
            assert_eq!(send, c.send, "{}", c.name);
        }
    }

    #[test]
    fn lookups_are_chunked() {
        let groups: Vec<String> = (0..MAX_KEYS_PER_FIND * 2 + 1)
            .map(|i| format!("g{i}"))
            .collect();
        let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        let plan = plan_round(&refs, &HashMap::new(), 10);
        let sizes: Vec<usize> = plan.find.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![MAX_KEYS_PER_FIND, MAX_KEYS_PER_FIND, 1]);
    }

    #[test]
    fn request_frames_have_pinned_layouts() {
        // ApiVersions v0: header v1 (no tags), empty body.
        assert_eq!(
            frame(API_VERSIONS, 0, 7, "mf", &[]),
            vec![0, 0, 0, 12, 0, 18, 0, 0, 0, 0, 0, 7, 0, 2, b'm', b'f']
        );
        // FindCoordinator v4: header v2 (tags), key type 0, compact array of 1 key "g".
        assert_eq!(
            frame(
                FIND_COORDINATOR,
                4,
                1,
                "",
                &find_coordinator_body(&["g".into()])
            ),
            vec![0, 0, 0, 16, 0, 10, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 2, 2, b'g', 0]
        );
        // OffsetFetch v8: groups [{"g", topics null, tags}], require_stable false, tags.
        assert_eq!(
            offset_fetch_body(&["g".into()]),
            vec![2, 2, b'g', 0, 0, 0, 0]
        );
        // OffsetCommit v8: "g", generation -1, member "", instance null, t/0 @ 5 meta "".
        let o = GroupOffset {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            metadata: String::new(),
        };
        assert_eq!(
            offset_commit_body("g", &[o]),
            vec![
                2, b'g', 255, 255, 255, 255, 1, 0, 2, 2, b't', 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                5, 255, 255, 255, 255, 1, 0, 0, 0
            ]
        );
    }

    #[test]
    fn varints_round_trip_at_their_boundaries() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u32::MAX as u64] {
            let mut w = Writer(Vec::new());
            w.uvarint(v);
            let mut r = Reader::new(&w.0, "test");
            assert_eq!(r.uvarint().unwrap(), v);
            assert_eq!(r.pos, w.0.len());
        }
    }

    /// (topic, partition, offset, metadata, error code) of one answered partition.
    type Part<'a> = (&'a str, i32, i64, Option<&'a str>, i16);

    /// Encodes an OffsetFetch v8 answer the way a broker does.
    fn fetch_answer(groups: &[(&str, i16, &[Part<'_>])]) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        w.i32(0);
        w.compact_len(Some(groups.len()));
        for (g, err, parts) in groups {
            w.compact_string(Some(g));
            let mut topics: BTreeMap<&str, Vec<_>> = BTreeMap::new();
            for p in *parts {
                topics.entry(p.0).or_default().push(*p);
            }
            w.compact_len(Some(topics.len()));
            for (t, ps) in topics {
                w.compact_string(Some(t));
                w.compact_len(Some(ps.len()));
                for (_, p, o, m, e) in ps {
                    w.i32(p);
                    w.i64(o);
                    w.i32(-1);
                    w.compact_string(m);
                    w.i16(e);
                    w.no_tags();
                }
                w.no_tags();
            }
            w.i16(*err);
            w.no_tags();
        }
        w.no_tags();
        w.0
    }

    #[test]
    fn offset_fetch_answers_decode_into_outcomes() {
        let body = fetch_answer(&[
            (
                "ok",
                0,
                &[
                    ("t", 0, 5, Some("m"), 0),
                    ("t", 1, -1, None, 0),
                    ("u", 0, 9, None, 0),
                ],
            ),
            ("moved", code::NOT_COORDINATOR, &[]),
            (
                "loading",
                0,
                &[("t", 0, -1, None, code::COORDINATOR_LOAD_IN_PROGRESS)],
            ),
            ("denied", 30, &[]),
            ("bad-partition", 0, &[("t", 2, 1, None, 3)]),
        ]);
        let answer = decode_offset_fetch(&body).unwrap();
        let find = |g: &str| answer.iter().find(|a| a.group == g);
        let off = |t: &str, p: i32, o: i64, m: &str| GroupOffset {
            topic: t.into(),
            partition: p,
            offset: o,
            metadata: m.into(),
        };
        assert_eq!(
            fetch_outcome("ok", find("ok")),
            FetchOutcome::Offsets(vec![off("t", 0, 5, "m"), off("u", 0, 9, "")]),
            "nothing committed on t/1: left out"
        );
        assert!(
            matches!(fetch_outcome("moved", find("moved")), FetchOutcome::Reroute(m) if m.to_string().contains("NOT_COORDINATOR") && m.error_code() == Some(Code::NOT_COORDINATOR))
        );
        assert!(matches!(
            fetch_outcome("loading", find("loading")),
            FetchOutcome::Reroute(_)
        ));
        assert!(
            matches!(fetch_outcome("denied", find("denied")), FetchOutcome::Failed(m) if m.to_string().contains("GROUP_AUTHORIZATION_FAILED"))
        );
        assert!(
            matches!(fetch_outcome("bad-partition", find("bad-partition")), FetchOutcome::Failed(m) if m.to_string().starts_with("t/2: ") && m.error_code() == Some(Code::UNKNOWN_TOPIC_OR_PARTITION))
        );
        assert!(
            matches!(fetch_outcome("absent", find("absent")), FetchOutcome::Failed(m) if m.to_string().contains("missing"))
        );
    }

    #[test]
    fn truncated_answers_are_errors_never_panics() {
        let body = fetch_answer(&[("ok", 0, &[("t", 0, 5, Some("m"), 0)])]);
        for cut in 0..body.len() {
            assert!(decode_offset_fetch(&body[..cut]).is_err(), "cut at {cut}");
        }
        // A huge array count is refused before allocating.
        assert!(decode_offset_fetch(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }

    #[test]
    fn find_coordinator_and_api_versions_answers_decode() {
        let mut w = Writer(Vec::new());
        w.i32(0);
        w.compact_len(Some(2));
        for (k, node, err, msg) in [("a", 3, 0i16, None), ("b", -1, 15, Some("loading"))] {
            w.compact_string(Some(k));
            w.i32(node);
            w.compact_string(Some("h"));
            w.i32(9092);
            w.i16(err);
            w.compact_string(msg);
            w.no_tags();
        }
        w.no_tags();
        assert_eq!(
            decode_find_coordinator(&w.0).unwrap(),
            vec![
                (
                    "a".to_string(),
                    Ok(Coordinator {
                        node: 3,
                        host: "h".into(),
                        port: 9092
                    })
                ),
                ("b".to_string(), Err((15, "loading".to_string())))
            ]
        );
        let v0 = [0u8, 0, 0, 0, 0, 2, 0, 9, 0, 0, 0, 9, 0, 10, 0, 0, 0, 4];
        let versions = decode_api_versions(&v0).unwrap().unwrap();
        assert!(supports(&versions, OFFSET_FETCH, 8));
        assert!(!supports(&versions, FIND_COORDINATOR, 5));
        assert!(!supports(&versions, OFFSET_COMMIT, 8), "absent key");
        assert_eq!(decode_api_versions(&[0, 35]).unwrap(), Err(35));
    }

    #[test]
    fn response_headers_split_correlation_and_tags() {
        assert_eq!(
            response_header(&[0, 0, 0, 9, 0, 1, 2], true).unwrap(),
            (9, &[1u8, 2][..])
        );
        assert_eq!(
            response_header(&[0, 0, 0, 9, 0, 1], false).unwrap(),
            (9, &[0u8, 1][..])
        );
        assert!(response_header(&[0, 0], false).is_err());
    }

    #[test]
    fn offset_commit_answers_decode() {
        let mut w = Writer(Vec::new());
        w.i32(0);
        w.compact_len(Some(1));
        w.compact_string(Some("t"));
        w.compact_len(Some(2));
        for (p, e) in [(0, 0i16), (1, 25)] {
            w.i32(p);
            w.i16(e);
            w.no_tags();
        }
        w.no_tags();
        w.no_tags();
        assert_eq!(
            decode_offset_commit(&w.0).unwrap(),
            vec![("t".to_string(), 0, 0), ("t".to_string(), 1, 25)]
        );
        assert!(
            code_text(25).contains("unknown member"),
            "classified as ActiveOnTarget"
        );
    }
}
