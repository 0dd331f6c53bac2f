//! The few Kafka requests the many-group client (`kafka::group_client`) sends, because
//! librdkafka asks for one consumer group per request: ApiVersions v0, SaslHandshake v1 and
//! SaslAuthenticate v2, FindCoordinator v4 and OffsetFetch v8 (many groups per request, Kafka
//! 3.0, KIP-699 / KIP-709) and OffsetCommit v8 (one group per request, pipelined). Encoding
//! and decoding are the `kafka-protocol` crate's (vendored with one patch, see
//! `vendor/README.md`); what is here maps its messages to ours, plans requests and judges
//! answers, as pure functions.

use std::collections::{BTreeMap, HashMap};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

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

/// SaslHandshake API key.
pub const SASL_HANDSHAKE: i16 = 17;
/// SaslAuthenticate API key.
pub const SASL_AUTHENTICATE: i16 = 36;
/// SaslHandshake v1: the mechanism, then SaslAuthenticate frames (KIP-152).
pub const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2 (flexible, Kafka 2.4).
pub const SASL_AUTHENTICATE_VERSION: i16 = 2;

fn decode_error(what: &'static str, total: usize, left: usize) -> DecodeError {
    DecodeError {
        what,
        offset: total.saturating_sub(left),
    }
}

/// Decodes `body` as `M` at `version` with the codec of the `kafka-protocol` crate; the whole
/// body must be used.
fn decode<M: Decodable>(body: &[u8], version: i16, what: &'static str) -> Result<M, DecodeError> {
    let mut buf = Bytes::copy_from_slice(body);
    let message =
        M::decode(&mut buf, version).map_err(|_| decode_error(what, body.len(), buf.len()))?;
    if !buf.is_empty() {
        return Err(decode_error(what, body.len(), buf.len()));
    }
    Ok(message)
}

/// Encodes a request body at `version`. The requests built here only hold fields every
/// version spoken here has, so encoding cannot fail; if it ever did, the body is empty and
/// the broker's refusal says so.
fn encode<M: Encodable>(message: &M, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    match message.encode(&mut buf, version) {
        Ok(()) => buf.to_vec(),
        Err(e) => {
            tracing::error!(error = %e, version, "group client: request does not encode");
            Vec::new()
        }
    }
}

fn header_version(api_key: i16, version: i16, request: bool) -> i16 {
    match ApiKey::try_from(api_key) {
        Ok(key) if request => key.request_header_version(version),
        Ok(key) => key.response_header_version(version),
        // Only the keys above are sent; a flexible-style header is the safe guess.
        Err(()) if request => 2,
        Err(()) => 1,
    }
}

/// A request frame: size prefix, request header (v1, or v2 for flexible versions), body.
pub fn frame(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &[u8],
) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut out = vec![0u8; 4];
    out.extend(encode(&header, header_version(api_key, version, true)));
    out.extend_from_slice(body);
    let size = i32::try_from(out.len() - 4).unwrap_or(i32::MAX);
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

/// Whether `version` of `api_key` uses the flexible (tagged-field) encoding: its response
/// header is v1.
pub fn is_flexible(api_key: i16, version: i16) -> bool {
    header_version(api_key, version, false) >= 1
}

fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_string()))
}

/// FindCoordinator v4 body: group coordinators of `groups`.
pub fn find_coordinator_body(groups: &[String]) -> Vec<u8> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(
            groups
                .iter()
                .map(|g| StrBytes::from_string(g.clone()))
                .collect(),
        );
    encode(&request, FIND_COORDINATOR_VERSION)
}

/// OffsetFetch v8 body: every committed partition (topics null) of `groups`.
pub fn offset_fetch_body(groups: &[String]) -> Vec<u8> {
    let request = OffsetFetchRequest::default()
        .with_groups(
            groups
                .iter()
                .map(|g| {
                    OffsetFetchRequestGroup::default()
                        .with_group_id(group_id(g))
                        .with_topics(None)
                })
                .collect(),
        )
        .with_require_stable(false);
    encode(&request, OFFSET_FETCH_VERSION)
}

/// OffsetCommit v8 body: an admin commit (generation -1, no member) of `offsets` to `group`,
/// which the broker accepts only for a group without active members.
pub fn offset_commit_body(group: &str, offsets: &[GroupOffset]) -> Vec<u8> {
    let mut by_topic: BTreeMap<&str, Vec<&GroupOffset>> = BTreeMap::new();
    for o in offsets {
        by_topic.entry(o.topic.as_str()).or_default().push(o);
    }
    let topics = by_topic
        .into_iter()
        .map(|(topic, parts)| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|o| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(o.partition)
                                .with_committed_offset(o.offset)
                                .with_committed_leader_epoch(-1)
                                .with_committed_metadata(Some(StrBytes::from_string(
                                    o.metadata.clone(),
                                )))
                        })
                        .collect(),
                )
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::default())
        .with_group_instance_id(None)
        .with_topics(topics);
    encode(&request, OFFSET_COMMIT_VERSION)
}

/// SaslHandshake v1 body for `mechanism`.
pub fn sasl_handshake_body(mechanism: &str) -> Vec<u8> {
    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
    encode(&request, SASL_HANDSHAKE_VERSION)
}

/// SaslAuthenticate v2 body carrying `bytes`.
pub fn sasl_authenticate_body(bytes: &[u8]) -> Vec<u8> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bytes));
    encode(&request, SASL_AUTHENTICATE_VERSION)
}

/// Splits a response frame (size prefix removed) into its correlation id and body; the
/// header is v1 (with tagged fields) when `flexible`.
pub fn response_header(frame: &[u8], flexible: bool) -> Result<(i32, &[u8]), DecodeError> {
    let mut buf = Bytes::copy_from_slice(frame);
    let header = ResponseHeader::decode(&mut buf, i16::from(flexible))
        .map_err(|_| decode_error("response header", frame.len(), buf.len()))?;
    Ok((header.correlation_id, &frame[frame.len() - buf.len()..]))
}

/// ApiVersions v0 answer: the highest version per API key, or the top-level error code.
pub fn decode_api_versions(body: &[u8]) -> Result<Result<HashMap<i16, i16>, i16>, DecodeError> {
    // A refusal may carry the error code alone.
    if let [hi, lo, ..] = body {
        let error = i16::from_be_bytes([*hi, *lo]);
        if error != code::NONE {
            return Ok(Err(error));
        }
    }
    let answer: ApiVersionsResponse = decode(body, 0, "ApiVersions response")?;
    Ok(Ok(answer
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.max_version))
        .collect()))
}

/// SaslHandshake v1 answer: `Ok` when the broker takes the mechanism, else the error code
/// and the mechanisms it offers.
pub fn decode_sasl_handshake(body: &[u8]) -> Result<Result<(), (i16, Vec<String>)>, DecodeError> {
    let answer: SaslHandshakeResponse =
        decode(body, SASL_HANDSHAKE_VERSION, "SaslHandshake response")?;
    if answer.error_code == code::NONE {
        return Ok(Ok(()));
    }
    let offered = answer.mechanisms.iter().map(|m| m.to_string()).collect();
    Ok(Err((answer.error_code, offered)))
}

/// SaslAuthenticate v2 answer: the server's bytes, or the error code and message.
pub fn decode_sasl_authenticate(
    body: &[u8],
) -> Result<Result<Vec<u8>, (i16, String)>, DecodeError> {
    let answer: SaslAuthenticateResponse =
        decode(body, SASL_AUTHENTICATE_VERSION, "SaslAuthenticate response")?;
    if answer.error_code == code::NONE {
        return Ok(Ok(answer.auth_bytes.to_vec()));
    }
    let message = answer
        .error_message
        .map_or_else(|| code_text(answer.error_code), |m| m.to_string());
    Ok(Err((answer.error_code, message)))
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
    let answer: FindCoordinatorResponse =
        decode(body, FIND_COORDINATOR_VERSION, "FindCoordinator response")?;
    Ok(answer
        .coordinators
        .into_iter()
        .map(|c| {
            let found = if c.error_code == code::NONE {
                Ok(Coordinator {
                    node: c.node_id.0,
                    host: c.host.to_string(),
                    port: c.port,
                })
            } else {
                let message = c.error_message.map(|m| m.to_string());
                Err((
                    c.error_code,
                    message.unwrap_or_else(|| code_text(c.error_code)),
                ))
            };
            (c.key.to_string(), found)
        })
        .collect())
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
    let answer: OffsetFetchResponse = decode(body, OFFSET_FETCH_VERSION, "OffsetFetch response")?;
    Ok(answer
        .groups
        .into_iter()
        .map(|g| FetchedGroup {
            group: g.group_id.0.to_string(),
            error: g.error_code,
            partitions: g
                .topics
                .into_iter()
                .flat_map(|t| {
                    let topic = t.name.0.to_string();
                    t.partitions.into_iter().map(move |p| {
                        let o = GroupOffset {
                            topic: topic.clone(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            metadata: p.metadata.map(|m| m.to_string()).unwrap_or_default(),
                        };
                        (o, p.error_code)
                    })
                })
                .collect(),
        })
        .collect())
}

/// OffsetCommit v8 answer: `(topic, partition, error code)` per partition.
pub fn decode_offset_commit(body: &[u8]) -> Result<Vec<(String, i32, i16)>, DecodeError> {
    let answer: OffsetCommitResponse =
        decode(body, OFFSET_COMMIT_VERSION, "OffsetCommit response")?;
    Ok(answer
        .topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions
                .into_iter()
                .map(move |p| (topic.clone(), p.partition_index, p.error_code))
        })
        .collect())
}

/// A group's outcome in one commit answer: every partition asked must be answered, without
/// error. Partitions the answer adds are ignored.
pub fn commit_outcome(asked: &[GroupOffset], answer: &[(String, i32, i16)]) -> FetchOutcome {
    let by_partition: HashMap<(&str, i32), i16> = answer
        .iter()
        .map(|(t, p, e)| ((t.as_str(), *p), *e))
        .collect();
    for o in asked {
        let at = || format!("{}/{}", o.topic, o.partition);
        match by_partition.get(&(o.topic.as_str(), o.partition)) {
            None => {
                return FetchOutcome::Failed(
                    Error::Protocol("partition missing from the answer".into()).context(at()),
                )
            }
            Some(&e) if is_reroute(e) => return FetchOutcome::Reroute(code_error(e)),
            Some(&e) if e != code::NONE => {
                return FetchOutcome::Failed(code_error(e).context(at()))
            }
            Some(_) => {}
        }
    }
    FetchOutcome::Offsets(Vec::new())
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

    /// Broker answers written byte by byte from the Kafka message definitions, independent
    /// of the codec under test.
    struct Writer(Vec<u8>);

    impl Writer {
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
        fn compact_len(&mut self, len: Option<usize>) {
            self.uvarint(len.map_or(0, |n| n as u64 + 1));
        }
        fn compact_string(&mut self, s: Option<&str>) {
            self.compact_len(s.map(str::len));
            if let Some(s) = s {
                self.0.extend_from_slice(s.as_bytes());
            }
        }
        fn compact_bytes(&mut self, b: &[u8]) {
            self.compact_len(Some(b.len()));
            self.0.extend_from_slice(b);
        }
        fn no_tags(&mut self) {
            self.uvarint(0);
        }
    }

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

    #[test]
    fn commit_answers_must_answer_every_partition_asked() {
        let asked = |parts: &[(&str, i32)]| -> Vec<GroupOffset> {
            parts
                .iter()
                .map(|(t, p)| GroupOffset {
                    topic: t.to_string(),
                    partition: *p,
                    offset: 1,
                    metadata: String::new(),
                })
                .collect()
        };
        let answered = |parts: &[(&str, i32, i16)]| -> Vec<(String, i32, i16)> {
            parts
                .iter()
                .map(|(t, p, e)| (t.to_string(), *p, *e))
                .collect()
        };
        // (name, asked, answered, outcome: "ok" | "reroute" | error text it contains)
        type Case = (
            &'static str,
            Vec<GroupOffset>,
            Vec<(String, i32, i16)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "all answered",
                asked(&[("t", 0), ("t", 1)]),
                answered(&[("t", 1, 0), ("t", 0, 0)]),
                "ok",
            ),
            (
                "an extra partition is ignored",
                asked(&[("t", 0)]),
                answered(&[("t", 0, 0), ("u", 3, 0)]),
                "ok",
            ),
            (
                "one missing",
                asked(&[("t", 0), ("t", 1)]),
                answered(&[("t", 0, 0)]),
                "t/1: partition missing from the answer",
            ),
            (
                "answered for another topic",
                asked(&[("t", 0)]),
                answered(&[("u", 0, 0)]),
                "t/0: partition missing",
            ),
            (
                "an error names its partition",
                asked(&[("t", 0), ("t", 1)]),
                answered(&[("t", 0, 0), ("t", 1, 25)]),
                "t/1: broker error 25 UNKNOWN_MEMBER_ID",
            ),
            (
                "coordinator moved",
                asked(&[("t", 0)]),
                answered(&[("t", 0, code::NOT_COORDINATOR)]),
                "reroute",
            ),
            ("nothing asked", asked(&[]), answered(&[]), "ok"),
        ];
        for (name, asked, answer, want) in cases {
            let got = commit_outcome(&asked, &answer);
            match (want, got) {
                ("ok", FetchOutcome::Offsets(o)) => assert!(o.is_empty(), "{name}"),
                ("reroute", FetchOutcome::Reroute(_)) => {}
                (text, FetchOutcome::Failed(e)) => {
                    assert!(e.to_string().contains(text), "{name}: {e}")
                }
                (_, other) => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn sasl_answers_decode() {
        let mut w = Writer(Vec::new());
        w.i16(33);
        w.i32(2);
        for m in ["PLAIN", "SCRAM-SHA-512"] {
            w.i16(m.len() as i16);
            w.0.extend_from_slice(m.as_bytes());
        }
        assert_eq!(
            decode_sasl_handshake(&w.0).unwrap(),
            Err((33, vec!["PLAIN".to_string(), "SCRAM-SHA-512".to_string()]))
        );
        assert_eq!(decode_sasl_handshake(&[0, 0, 0, 0, 0, 0]).unwrap(), Ok(()));
        let mut w = Writer(Vec::new());
        w.i16(0);
        w.compact_string(None);
        w.compact_bytes(b"r=abc");
        w.i64(0);
        w.no_tags();
        assert_eq!(
            decode_sasl_authenticate(&w.0).unwrap(),
            Ok(b"r=abc".to_vec())
        );
        let mut w = Writer(Vec::new());
        w.i16(58);
        w.compact_string(Some("Authentication failed"));
        w.compact_bytes(b"");
        w.i64(0);
        w.no_tags();
        assert_eq!(
            decode_sasl_authenticate(&w.0).unwrap(),
            Err((58, "Authentication failed".to_string()))
        );
        // Request layouts (KIP-152): handshake v1 is a plain string, authenticate v2 compact bytes.
        assert_eq!(sasl_handshake_body("PLAIN"), b"\0\x05PLAIN".to_vec());
        assert_eq!(sasl_authenticate_body(b"ab"), vec![3, b'a', b'b', 0]);
    }
}
