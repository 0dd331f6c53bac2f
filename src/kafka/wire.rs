//! MirrorMaker 2 compatible record formats, plus mirrorflow's own progress record. Pure.
//!
//! Integers are big-endian; `STRING` is an `INT16` byte length, then that many UTF-8 bytes.
//!
//! | record     | key                                         | value |
//! |------------|---------------------------------------------|-------|
//! | OffsetSync | topic STRING, partition INT32               | upstream INT64, downstream INT64 (no version) |
//! | Checkpoint | group STRING, topic STRING, partition INT32 | version INT16 (0), upstream INT64, downstream INT64, metadata STRING |
//! | Heartbeat  | source alias STRING, target alias STRING    | version INT16 (0), timestamp INT64 |
//! | Progress   | topic STRING, partition INT32               | version INT16 (0, or 1 with a failure), next_offset INT64, topic_id STRING, reset_id STRING, version 1 only: failure STRING |
//!
//! Readers accept what MM2's `Schema.read` accepts (trailing bytes ignored, a null string in
//! a value read as empty) and refuse what it would misread: invalid UTF-8, a null key field,
//! a version this build does not know (MM2 only `assert`s it). Offset syncs written by
//! mirrorflow carry a [`SyncSequence`] header (MM2 readers ignore headers). Encoders fail only
//! on a string longer than [`MAX_STRING_BYTES`].

use std::fmt;

use thiserror::Error;

/// Version written into (and accepted from) checkpoint values.
pub const CHECKPOINT_VERSION: i16 = 0;
/// Version written into (and accepted from) heartbeat values.
pub const HEARTBEAT_VERSION: i16 = 0;
/// Version of progress values without a failure (also what older workers read).
pub const PROGRESS_VERSION: i16 = 0;
/// Version of progress values that carry a failure; read from this version on.
pub const PROGRESS_VERSION_FAILURE: i16 = 1;
/// Name of MM2's heartbeats topic.
pub const HEARTBEATS_TOPIC: &str = "heartbeats";
/// Largest byte length a Kafka `STRING` can carry (its length prefix is an `INT16`).
pub const MAX_STRING_BYTES: usize = i16::MAX as usize;

/// MM2's offset-syncs topic, `mm2-offset-syncs.<alias>.internal`. MM2 names it after the
/// *other* cluster: with the topic on the source (MM2's default) that is the target alias;
/// mirrorflow keeps it on the target (MM2 3.x `offset-syncs.topic.location=target`), so it
/// passes the source alias.
pub fn offset_syncs_topic(other_cluster_alias: &str) -> String {
    format!("mm2-offset-syncs.{other_cluster_alias}.internal")
}

/// MM2's checkpoints topic (on the target) for groups of `source_alias`:
/// `<sourceAlias>.checkpoints.internal`.
pub fn checkpoints_topic(source_alias: &str) -> String {
    format!("{source_alias}.checkpoints.internal")
}

/// mirrorflow's compacted progress topic (on the target) for a flow:
/// `mirrorflow-progress.<namespace>.<flow>.internal`, so same-named flows of different
/// namespaces writing to one target cluster never share positions.
pub fn progress_topic(namespace: &str, flow_name: &str) -> String {
    format!("mirrorflow-progress.{namespace}.{flow_name}.internal")
}

/// Which serialized part an error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Key of an offset sync record.
    OffsetSyncKey,
    /// Value of an offset sync record.
    OffsetSyncValue,
    /// Key of a checkpoint record.
    CheckpointKey,
    /// Value of a checkpoint record.
    CheckpointValue,
    /// Key of a heartbeat record.
    HeartbeatKey,
    /// Value of a heartbeat record.
    HeartbeatValue,
    /// Key of a progress record.
    ProgressKey,
    /// Value of a progress record.
    ProgressValue,
    /// The [`SYNC_SEQUENCE_HEADER`] value of an offset sync record.
    SyncSequenceHeader,
}

impl Part {
    fn is_key(self) -> bool {
        matches!(
            self,
            Part::OffsetSyncKey | Part::CheckpointKey | Part::HeartbeatKey | Part::ProgressKey
        )
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::OffsetSyncKey => "offset sync key",
            Part::OffsetSyncValue => "offset sync value",
            Part::CheckpointKey => "checkpoint key",
            Part::CheckpointValue => "checkpoint value",
            Part::HeartbeatKey => "heartbeat key",
            Part::HeartbeatValue => "heartbeat value",
            Part::ProgressKey => "progress key",
            Part::ProgressValue => "progress value",
            Part::SyncSequenceHeader => "offset sync sequence header",
        })
    }
}

/// A record that could not be encoded or decoded. Every variant names the part, the field
/// and, when decoding, the byte offset inside that part where the field starts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The buffer ended inside a field.
    #[error("{part}: truncated at byte {offset} reading field `{field}`: need {needed} bytes, {available} available")]
    Truncated {
        /// Which key/value.
        part: Part,
        /// Field being read.
        field: &'static str,
        /// Byte offset where the missing bytes start.
        offset: usize,
        /// Bytes the field needs from `offset`.
        needed: usize,
        /// Bytes left from `offset`.
        available: usize,
    },
    /// A string length prefix below -1.
    #[error("{part}: field `{field}` at byte {offset} has invalid string length {length}")]
    InvalidStringLength {
        /// Which key/value.
        part: Part,
        /// Field being read.
        field: &'static str,
        /// Byte offset of the length prefix.
        offset: usize,
        /// The length read.
        length: i16,
    },
    /// A null string (length -1) where a value is required (key fields).
    #[error(
        "{part}: field `{field}` at byte {offset} is a null string; key fields must not be null"
    )]
    NullString {
        /// Which key/value.
        part: Part,
        /// Field being read.
        field: &'static str,
        /// Byte offset of the length prefix.
        offset: usize,
    },
    /// String bytes that are not UTF-8.
    #[error("{part}: field `{field}` at byte {offset} is not valid UTF-8: {source}")]
    InvalidUtf8 {
        /// Which key/value.
        part: Part,
        /// Field being read.
        field: &'static str,
        /// Byte offset where the string's bytes start (after the length prefix).
        offset: usize,
        /// Position of the first bad byte, relative to `offset`.
        source: std::str::Utf8Error,
    },
    /// A value version this build does not read.
    #[error("{part}: unsupported version {version} (this build reads version {supported} only)")]
    UnsupportedVersion {
        /// Which value.
        part: Part,
        /// Version found in the record.
        version: i16,
        /// Version this build reads.
        supported: i16,
    },
    /// A string too long for a Kafka `STRING` (encoding only).
    #[error(
        "{part}: field `{field}` is {len} bytes; a Kafka STRING holds at most {MAX_STRING_BYTES}"
    )]
    StringTooLong {
        /// Which key/value.
        part: Part,
        /// Field being written.
        field: &'static str,
        /// Its byte length.
        len: usize,
    },
}

/// Cursor over one key or value buffer.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    part: Part,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], part: Part) -> Self {
        Self { buf, pos: 0, part }
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], WireError> {
        let available = self.buf.len() - self.pos;
        if available < n {
            return Err(WireError::Truncated {
                part: self.part,
                field,
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, WireError> {
        let b = self.take(field, 2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, WireError> {
        let b = self.take(field, 4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        let b = self.take(field, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// Reads a STRING; null is an error in keys and the empty string in values.
    fn string(&mut self, field: &'static str) -> Result<String, WireError> {
        let len_offset = self.pos;
        let length = self.i16(field)?;
        if length == -1 {
            if self.part.is_key() {
                return Err(WireError::NullString {
                    part: self.part,
                    field,
                    offset: len_offset,
                });
            }
            return Ok(String::new());
        }
        if length < 0 {
            return Err(WireError::InvalidStringLength {
                part: self.part,
                field,
                offset: len_offset,
                length,
            });
        }
        let body_offset = self.pos;
        let bytes = self.take(field, length as usize)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|source| WireError::InvalidUtf8 {
                part: self.part,
                field,
                offset: body_offset,
                source,
            })
    }

    /// Reads the version header and rejects anything but `supported`.
    fn version(&mut self, supported: i16) -> Result<(), WireError> {
        self.version_in(supported..=supported).map(|_| ())
    }

    /// Reads a version within `supported`; an error names the newest one supported.
    fn version_in(&mut self, supported: std::ops::RangeInclusive<i16>) -> Result<i16, WireError> {
        let version = self.i16("version")?;
        if !supported.contains(&version) {
            return Err(WireError::UnsupportedVersion {
                part: self.part,
                version,
                supported: *supported.end(),
            });
        }
        Ok(version)
    }
}

/// Growing buffer for one key or value.
struct Writer {
    buf: Vec<u8>,
    part: Part,
}

impl Writer {
    fn new(part: Part) -> Self {
        Self {
            buf: Vec::with_capacity(32),
            part,
        }
    }

    fn i16(mut self, v: i16) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn i32(mut self, v: i32) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn i64(mut self, v: i64) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn string(mut self, field: &'static str, s: &str) -> Result<Self, WireError> {
        let len = s.len();
        if len > MAX_STRING_BYTES {
            return Err(WireError::StringTooLong {
                part: self.part,
                field,
                len,
            });
        }
        self.buf.extend_from_slice(&(len as i16).to_be_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        Ok(self)
    }

    fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// MM2 offset sync: upstream offset `upstream_offset` of `topic`/`partition` (source names)
/// was written at `downstream_offset` of the replica partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetSync {
    /// Source topic name.
    pub topic: String,
    /// Partition (same number on both sides).
    pub partition: i32,
    /// Offset of the record on the source.
    pub upstream_offset: i64,
    /// Offset of its copy on the target.
    pub downstream_offset: i64,
}

impl OffsetSync {
    /// Key bytes: topic STRING, partition INT32.
    pub fn encode_key(&self) -> Result<Vec<u8>, WireError> {
        encode_topic_partition_key(Part::OffsetSyncKey, &self.topic, self.partition)
    }

    /// Value bytes: upstream INT64, downstream INT64 (no version field).
    pub fn encode_value(&self) -> Result<Vec<u8>, WireError> {
        Ok(Writer::new(Part::OffsetSyncValue)
            .i64(self.upstream_offset)
            .i64(self.downstream_offset)
            .finish())
    }

    /// Decodes a record; trailing bytes are ignored (see module docs).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, WireError> {
        let (topic, partition) = decode_topic_partition_key(Part::OffsetSyncKey, key)?;
        let mut v = Reader::new(value, Part::OffsetSyncValue);
        let upstream_offset = v.i64("upstream_offset")?;
        let downstream_offset = v.i64("downstream_offset")?;
        Ok(Self {
            topic,
            partition,
            upstream_offset,
            downstream_offset,
        })
    }
}

/// MM2 checkpoint: group `group` committed `upstream_offset` on the source, which
/// translates to `downstream_offset` of `topic` (the *target* topic name) on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Consumer group id.
    pub group: String,
    /// Target (replica) topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset on the source.
    pub upstream_offset: i64,
    /// Translated offset on the target.
    pub downstream_offset: i64,
    /// The group's commit metadata, copied through.
    pub metadata: String,
}

impl Checkpoint {
    /// Key bytes: group STRING, topic STRING, partition INT32.
    pub fn encode_key(&self) -> Result<Vec<u8>, WireError> {
        Ok(Writer::new(Part::CheckpointKey)
            .string("group", &self.group)?
            .string("topic", &self.topic)?
            .i32(self.partition)
            .finish())
    }

    /// Value bytes: version INT16 (0), upstream INT64, downstream INT64, metadata STRING.
    pub fn encode_value(&self) -> Result<Vec<u8>, WireError> {
        Ok(Writer::new(Part::CheckpointValue)
            .i16(CHECKPOINT_VERSION)
            .i64(self.upstream_offset)
            .i64(self.downstream_offset)
            .string("metadata", &self.metadata)?
            .finish())
    }

    /// Decodes a record. Rejects versions other than [`CHECKPOINT_VERSION`]; ignores
    /// trailing bytes (see module docs).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, WireError> {
        let mut k = Reader::new(key, Part::CheckpointKey);
        let group = k.string("group")?;
        let topic = k.string("topic")?;
        let partition = k.i32("partition")?;
        let mut v = Reader::new(value, Part::CheckpointValue);
        v.version(CHECKPOINT_VERSION)?;
        let upstream_offset = v.i64("upstream_offset")?;
        let downstream_offset = v.i64("downstream_offset")?;
        let metadata = v.string("metadata")?;
        Ok(Self {
            group,
            topic,
            partition,
            upstream_offset,
            downstream_offset,
            metadata,
        })
    }
}

/// MM2 heartbeat: `source_alias` was alive at `timestamp_ms` as seen by replication to
/// `target_alias`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Source cluster alias.
    pub source_alias: String,
    /// Target cluster alias.
    pub target_alias: String,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

impl Heartbeat {
    /// Key bytes: source alias STRING, target alias STRING.
    pub fn encode_key(&self) -> Result<Vec<u8>, WireError> {
        Ok(Writer::new(Part::HeartbeatKey)
            .string("source_alias", &self.source_alias)?
            .string("target_alias", &self.target_alias)?
            .finish())
    }

    /// Value bytes: version INT16 (0), timestamp INT64.
    pub fn encode_value(&self) -> Result<Vec<u8>, WireError> {
        Ok(Writer::new(Part::HeartbeatValue)
            .i16(HEARTBEAT_VERSION)
            .i64(self.timestamp_ms)
            .finish())
    }

    /// Decodes a record. Rejects versions other than [`HEARTBEAT_VERSION`].
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, WireError> {
        let mut k = Reader::new(key, Part::HeartbeatKey);
        let source_alias = k.string("source_alias")?;
        let target_alias = k.string("target_alias")?;
        let mut v = Reader::new(value, Part::HeartbeatValue);
        v.version(HEARTBEAT_VERSION)?;
        let timestamp_ms = v.i64("timestamp_ms")?;
        Ok(Self {
            source_alias,
            target_alias,
            timestamp_ms,
        })
    }
}

/// mirrorflow's replication progress for one source partition (not an MM2 record). Kept
/// in the compacted [`progress_topic`] on the target so any worker can resume the
/// partition where the last one stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Source topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Next source offset to replicate.
    pub next_offset: i64,
    /// Source topic id as text; empty if unknown.
    pub topic_id: String,
    /// Id of the last reset applied to this partition; empty if none.
    pub reset_id: String,
    /// Why the partition is stopped (opaque text, JSON written by the engine); empty while it
    /// replicates. Persisted so a restart keeps it stopped until a reset clears it.
    pub failure: String,
}

impl Progress {
    /// Key bytes: topic STRING, partition INT32 (same layout as the offset sync key). Also
    /// the key for a tombstone that forgets the partition.
    pub fn encode_key(&self) -> Result<Vec<u8>, WireError> {
        encode_topic_partition_key(Part::ProgressKey, &self.topic, self.partition)
    }

    /// Value bytes: version INT16, next_offset INT64, topic_id STRING, reset_id STRING, and
    /// with a failure (version 1) failure STRING. Without one, version 0: the bytes older
    /// workers wrote and read.
    pub fn encode_value(&self) -> Result<Vec<u8>, WireError> {
        let version = if self.failure.is_empty() {
            PROGRESS_VERSION
        } else {
            PROGRESS_VERSION_FAILURE
        };
        let w = Writer::new(Part::ProgressValue)
            .i16(version)
            .i64(self.next_offset)
            .string("topic_id", &self.topic_id)?
            .string("reset_id", &self.reset_id)?;
        Ok(if self.failure.is_empty() {
            w.finish()
        } else {
            w.string("failure", &self.failure)?.finish()
        })
    }

    /// Decodes only the key, e.g. for a tombstone (null value): `(topic, partition)`.
    pub fn decode_key(key: &[u8]) -> Result<(String, i32), WireError> {
        decode_topic_partition_key(Part::ProgressKey, key)
    }

    /// Decodes a record. Rejects versions newer than [`PROGRESS_VERSION_FAILURE`], naming the
    /// version found, so an older worker never misreads a newer layout.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, WireError> {
        let (topic, partition) = Self::decode_key(key)?;
        let mut v = Reader::new(value, Part::ProgressValue);
        let version = v.version_in(PROGRESS_VERSION..=PROGRESS_VERSION_FAILURE)?;
        let next_offset = v.i64("next_offset")?;
        let topic_id = v.string("topic_id")?;
        let reset_id = v.string("reset_id")?;
        let failure = if version >= PROGRESS_VERSION_FAILURE {
            v.string("failure")?
        } else {
            String::new()
        };
        Ok(Self {
            topic,
            partition,
            next_offset,
            topic_id,
            reset_id,
            failure,
        })
    }
}

/// Record header on mirrorflow offset syncs carrying a [`SyncSequence`].
pub const SYNC_SEQUENCE_HEADER: &str = "mirrorflow.sync.seq";

/// Position of an offset sync in its writer's emission order for one partition: the writer
/// picks a fresh `writer_epoch` each time it starts replicating the partition and numbers
/// the syncs it emits `seq = 0, 1, 2, …`. Two syncs were consecutive when written iff they
/// share the epoch and their `seq` differ by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncSequence {
    /// Identifies one run of the writer for the partition (e.g. random, or a generation).
    pub writer_epoch: i64,
    /// Per-partition counter within the epoch.
    pub seq: i64,
}

impl SyncSequence {
    /// Header bytes: writer_epoch INT64, seq INT64.
    pub fn encode(&self) -> Vec<u8> {
        Writer::new(Part::SyncSequenceHeader)
            .i64(self.writer_epoch)
            .i64(self.seq)
            .finish()
    }

    /// Decodes the header value; trailing bytes are ignored like everywhere else.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes, Part::SyncSequenceHeader);
        let writer_epoch = r.i64("writer_epoch")?;
        let seq = r.i64("seq")?;
        Ok(Self { writer_epoch, seq })
    }

    /// True if `next` was emitted right after `self` by the same writer run.
    pub fn is_followed_by(&self, next: &SyncSequence) -> bool {
        self.writer_epoch == next.writer_epoch && self.seq.checked_add(1) == Some(next.seq)
    }
}

fn encode_topic_partition_key(
    part: Part,
    topic: &str,
    partition: i32,
) -> Result<Vec<u8>, WireError> {
    Ok(Writer::new(part)
        .string("topic", topic)?
        .i32(partition)
        .finish())
}

fn decode_topic_partition_key(part: Part, key: &[u8]) -> Result<(String, i32), WireError> {
    let mut k = Reader::new(key, part);
    let topic = k.string("topic")?;
    let partition = k.i32("partition")?;
    Ok((topic, partition))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn sync() -> OffsetSync {
        OffsetSync {
            topic: "ab".into(),
            partition: 3,
            upstream_offset: 0x0102_0304_0506_0708,
            downstream_offset: -2,
        }
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            group: "g".into(),
            topic: "s.t".into(),
            partition: 258,
            upstream_offset: 5,
            downstream_offset: 4,
            metadata: "m".into(),
        }
    }

    fn heartbeat() -> Heartbeat {
        Heartbeat {
            source_alias: "a".into(),
            target_alias: "bc".into(),
            timestamp_ms: 1_700_000_000_000,
        }
    }

    fn progress() -> Progress {
        Progress {
            topic: "t".into(),
            partition: 0,
            next_offset: 42,
            topic_id: "id".into(),
            reset_id: String::new(),
            failure: String::new(),
        }
    }

    // Hand-written layouts pin the format independently of the encoder.
    const SYNC_KEY: &[u8] = &[0, 2, b'a', b'b', 0, 0, 0, 3];
    const SYNC_VALUE: &[u8] = &[
        1, 2, 3, 4, 5, 6, 7, 8, //
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
    ];
    const CP_KEY: &[u8] = &[0, 1, b'g', 0, 3, b's', b'.', b't', 0, 0, 1, 2];
    const CP_VALUE: &[u8] = &[
        0, 0, // version
        0, 0, 0, 0, 0, 0, 0, 5, // upstream
        0, 0, 0, 0, 0, 0, 0, 4, // downstream
        0, 1, b'm', // metadata
    ];
    const HB_KEY: &[u8] = &[0, 1, b'a', 0, 2, b'b', b'c'];
    const HB_VALUE: &[u8] = &[0, 0, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00];
    const PR_KEY: &[u8] = &[0, 1, b't', 0, 0, 0, 0];
    const PR_VALUE: &[u8] = &[
        0, 0, // version
        0, 0, 0, 0, 0, 0, 0, 42, // next_offset
        0, 2, b'i', b'd', // topic_id
        0, 0, // reset_id (empty)
    ];

    #[test]
    fn encoders_produce_pinned_layouts() {
        let cases: Vec<(&str, Vec<u8>, &[u8])> = vec![
            ("sync key", sync().encode_key().unwrap(), SYNC_KEY),
            ("sync value", sync().encode_value().unwrap(), SYNC_VALUE),
            ("cp key", checkpoint().encode_key().unwrap(), CP_KEY),
            ("cp value", checkpoint().encode_value().unwrap(), CP_VALUE),
            ("hb key", heartbeat().encode_key().unwrap(), HB_KEY),
            ("hb value", heartbeat().encode_value().unwrap(), HB_VALUE),
            ("progress key", progress().encode_key().unwrap(), PR_KEY),
            (
                "progress value",
                progress().encode_value().unwrap(),
                PR_VALUE,
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn progress_with_a_failure_is_version_1_and_older_values_still_read() {
        const PR_FAILED: &[u8] = &[
            0, 1, // version
            0, 0, 0, 0, 0, 0, 0, 42, // next_offset
            0, 2, b'i', b'd', // topic_id
            0, 0, // reset_id (empty)
            0, 2, b'{', b'}', // failure
        ];
        let failed = Progress {
            failure: "{}".into(),
            ..progress()
        };
        assert_eq!(failed.encode_value().unwrap(), PR_FAILED);
        assert_eq!(Progress::decode(PR_KEY, PR_FAILED).unwrap(), failed);
        assert_eq!(
            Progress::decode(PR_KEY, PR_VALUE).unwrap().failure,
            "",
            "version 0 has no failure"
        );
        let mut newer = PR_FAILED.to_vec();
        newer[1] = 2;
        let err = Progress::decode(PR_KEY, &newer).unwrap_err().to_string();
        assert!(err.contains('2') && err.contains('1'), "{err}");
    }

    #[test]
    fn decoders_read_pinned_layouts() {
        assert_eq!(OffsetSync::decode(SYNC_KEY, SYNC_VALUE).unwrap(), sync());
        assert_eq!(Checkpoint::decode(CP_KEY, CP_VALUE).unwrap(), checkpoint());
        assert_eq!(Heartbeat::decode(HB_KEY, HB_VALUE).unwrap(), heartbeat());
        assert_eq!(Progress::decode(PR_KEY, PR_VALUE).unwrap(), progress());
        assert_eq!(Progress::decode_key(PR_KEY).unwrap(), ("t".to_string(), 0));
    }

    #[test]
    fn round_trips() {
        let syncs = [
            sync(),
            OffsetSync {
                topic: String::new(),
                partition: i32::MIN,
                upstream_offset: i64::MAX,
                downstream_offset: i64::MIN,
            },
            OffsetSync {
                topic: "é".repeat(1000),
                partition: -1,
                upstream_offset: 0,
                downstream_offset: 0,
            },
        ];
        for s in syncs {
            let back = OffsetSync::decode(&s.encode_key().unwrap(), &s.encode_value().unwrap());
            assert_eq!(back.unwrap(), s);
        }
        let cps = [
            checkpoint(),
            Checkpoint {
                group: "grüppe".into(),
                topic: "x".repeat(MAX_STRING_BYTES),
                partition: 0,
                upstream_offset: -1,
                downstream_offset: i64::MAX,
                metadata: String::new(),
            },
        ];
        for c in cps {
            let back = Checkpoint::decode(&c.encode_key().unwrap(), &c.encode_value().unwrap());
            assert_eq!(back.unwrap(), c);
        }
        let h = Heartbeat {
            source_alias: String::new(),
            target_alias: "t".into(),
            timestamp_ms: -5,
        };
        let back = Heartbeat::decode(&h.encode_key().unwrap(), &h.encode_value().unwrap());
        assert_eq!(back.unwrap(), h);
        let p = Progress {
            topic: "orders".into(),
            partition: 7,
            next_offset: i64::MAX,
            topic_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            reset_id: "reset-1".into(),
            failure: String::new(),
        };
        let back = Progress::decode(&p.encode_key().unwrap(), &p.encode_value().unwrap());
        assert_eq!(back.unwrap(), p);
    }

    /// Decodes `key`/`value` of the given record kind; returns the error, if any.
    fn decode_err(kind: &str, key: &[u8], value: &[u8]) -> Option<WireError> {
        match kind {
            "sync" => OffsetSync::decode(key, value).err(),
            "cp" => Checkpoint::decode(key, value).err(),
            "hb" => Heartbeat::decode(key, value).err(),
            "progress" => Progress::decode(key, value).err(),
            other => panic!("unknown kind {other}"),
        }
    }

    /// Every proper prefix of every key and value fails as `Truncated`, naming the field
    /// that spans the cut and the byte offset where that field (or its body) starts.
    #[test]
    fn truncation_at_every_byte_names_field_and_offset() {
        // (kind, key, value, key fields, value fields) with field = (name, start, end)
        // where [start, end) are the bytes read by one `take` call.
        type Fields = &'static [(&'static str, usize, usize)];
        type Case = (&'static str, &'static [u8], &'static [u8], Fields, Fields);
        let cases: [Case; 4] = [
            (
                "sync",
                SYNC_KEY,
                SYNC_VALUE,
                &[("topic", 0, 2), ("topic", 2, 4), ("partition", 4, 8)],
                &[("upstream_offset", 0, 8), ("downstream_offset", 8, 16)],
            ),
            (
                "cp",
                CP_KEY,
                CP_VALUE,
                &[
                    ("group", 0, 2),
                    ("group", 2, 3),
                    ("topic", 3, 5),
                    ("topic", 5, 8),
                    ("partition", 8, 12),
                ],
                &[
                    ("version", 0, 2),
                    ("upstream_offset", 2, 10),
                    ("downstream_offset", 10, 18),
                    ("metadata", 18, 20),
                    ("metadata", 20, 21),
                ],
            ),
            (
                "hb",
                HB_KEY,
                HB_VALUE,
                &[
                    ("source_alias", 0, 2),
                    ("source_alias", 2, 3),
                    ("target_alias", 3, 5),
                    ("target_alias", 5, 7),
                ],
                &[("version", 0, 2), ("timestamp_ms", 2, 10)],
            ),
            (
                "progress",
                PR_KEY,
                PR_VALUE,
                &[("topic", 0, 2), ("topic", 2, 3), ("partition", 3, 7)],
                &[
                    ("version", 0, 2),
                    ("next_offset", 2, 10),
                    ("topic_id", 10, 12),
                    ("topic_id", 12, 14),
                    ("reset_id", 14, 16),
                ],
            ),
        ];
        for (kind, key, value, key_fields, value_fields) in cases {
            assert_eq!(key_fields.last().unwrap().2, key.len(), "{kind} key table");
            assert_eq!(
                value_fields.last().unwrap().2,
                value.len(),
                "{kind} value table"
            );
            for (is_key, full, fields) in [(true, key, key_fields), (false, value, value_fields)] {
                for cut in 0..full.len() {
                    let &(field, start, end) = fields
                        .iter()
                        .find(|(_, s, e)| *s <= cut && cut < *e)
                        .unwrap();
                    let err = if is_key {
                        decode_err(kind, &full[..cut], value)
                    } else {
                        decode_err(kind, key, &full[..cut])
                    };
                    match err {
                        Some(WireError::Truncated {
                            field: f,
                            offset,
                            needed,
                            available,
                            ..
                        }) => {
                            assert_eq!(
                                (f, offset, needed, available),
                                (field, start, end - start, cut - start),
                                "{kind} key={is_key} cut={cut}"
                            );
                        }
                        other => panic!("{kind} key={is_key} cut={cut}: {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn wrong_versions_are_rejected_with_the_version() {
        for version in [2i16, -1, 7] {
            let v = version.to_be_bytes();
            let mut cp = CP_VALUE.to_vec();
            cp[..2].copy_from_slice(&v);
            let mut hb = HB_VALUE.to_vec();
            hb[..2].copy_from_slice(&v);
            let mut pr = PR_VALUE.to_vec();
            pr[..2].copy_from_slice(&v);
            let cases = [
                ("cp", CP_KEY, cp, Part::CheckpointValue),
                ("hb", HB_KEY, hb, Part::HeartbeatValue),
                ("progress", PR_KEY, pr, Part::ProgressValue),
            ];
            for (kind, key, value, part) in cases {
                let err = decode_err(kind, key, &value).unwrap();
                let supported = if part == Part::ProgressValue {
                    PROGRESS_VERSION_FAILURE
                } else {
                    0
                };
                assert_eq!(
                    err,
                    WireError::UnsupportedVersion {
                        part,
                        version,
                        supported
                    }
                );
                assert!(
                    err.to_string().contains(&format!("version {version}")),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn string_length_and_null_rules() {
        // Length -1 in a key field: null, rejected.
        let key = [0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(
            OffsetSync::decode(&key, SYNC_VALUE).unwrap_err(),
            WireError::NullString {
                part: Part::OffsetSyncKey,
                field: "topic",
                offset: 0
            }
        );
        // Second key field null: offset points at its length prefix.
        let key = [0, 1, b'g', 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(
            Checkpoint::decode(&key, CP_VALUE).unwrap_err(),
            WireError::NullString {
                part: Part::CheckpointKey,
                field: "topic",
                offset: 3
            }
        );
        // Length -2: invalid everywhere.
        let key = [0xff, 0xfe, 0, 0, 0, 0];
        assert_eq!(
            Progress::decode(&key, PR_VALUE).unwrap_err(),
            WireError::InvalidStringLength {
                part: Part::ProgressKey,
                field: "topic",
                offset: 0,
                length: -2
            }
        );
        let mut value = CP_VALUE[..18].to_vec();
        value.extend_from_slice(&[0x80, 0x00]);
        assert_eq!(
            Checkpoint::decode(CP_KEY, &value).unwrap_err(),
            WireError::InvalidStringLength {
                part: Part::CheckpointValue,
                field: "metadata",
                offset: 18,
                length: i16::MIN
            }
        );
        // Null metadata in a value decodes as empty.
        let mut value = CP_VALUE[..18].to_vec();
        value.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(Checkpoint::decode(CP_KEY, &value).unwrap().metadata, "");
    }

    #[test]
    fn invalid_utf8_is_reported_with_field_and_offset() {
        // (kind, key, value, part, field, offset of the string bytes)
        type Case = (&'static str, Vec<u8>, Vec<u8>, Part, &'static str, usize);
        let cases: [Case; 3] = [
            (
                "sync",
                vec![0, 2, b'a', 0xff, 0, 0, 0, 0],
                SYNC_VALUE.to_vec(),
                Part::OffsetSyncKey,
                "topic",
                2,
            ),
            (
                "cp",
                vec![0, 1, b'g', 0, 2, 0xc3, 0x28, 0, 0, 0, 0],
                CP_VALUE.to_vec(),
                Part::CheckpointKey,
                "topic",
                5,
            ),
            (
                "progress",
                PR_KEY.to_vec(),
                [&PR_VALUE[..14], &[0, 1, 0x80]].concat(),
                Part::ProgressValue,
                "reset_id",
                16,
            ),
        ];
        for (kind, key, value, want_part, want_field, want_offset) in cases {
            match decode_err(kind, &key, &value) {
                Some(WireError::InvalidUtf8 {
                    part,
                    field,
                    offset,
                    ..
                }) => assert_eq!(
                    (part, field, offset),
                    (want_part, want_field, want_offset),
                    "{kind}"
                ),
                other => panic!("{kind}: {other:?}"),
            }
        }
    }

    #[test]
    fn trailing_bytes_are_ignored_like_mm2() {
        let key = [SYNC_KEY, &[9, 9]].concat();
        let value = [SYNC_VALUE, &[1]].concat();
        assert_eq!(OffsetSync::decode(&key, &value).unwrap(), sync());
        let value = [CP_VALUE, &[0, 0, 0]].concat();
        assert_eq!(Checkpoint::decode(CP_KEY, &value).unwrap(), checkpoint());
    }

    #[test]
    fn oversized_strings_are_refused_when_encoding() {
        let mut c = checkpoint();
        c.metadata = "x".repeat(MAX_STRING_BYTES + 1);
        assert_eq!(
            c.encode_value().unwrap_err(),
            WireError::StringTooLong {
                part: Part::CheckpointValue,
                field: "metadata",
                len: MAX_STRING_BYTES + 1
            }
        );
        let mut c = checkpoint();
        c.group = "g".repeat(40_000);
        assert!(matches!(
            c.encode_key(),
            Err(WireError::StringTooLong { field: "group", .. })
        ));
    }

    #[test]
    fn error_messages_name_field_and_offset() {
        let err = Checkpoint::decode(&CP_KEY[..9], CP_VALUE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "checkpoint key: truncated at byte 8 reading field `partition`: need 4 bytes, 1 available"
        );
    }

    #[test]
    fn sync_sequence_header() {
        let s = SyncSequence {
            writer_epoch: 0x0a0b,
            seq: 3,
        };
        let bytes = [0, 0, 0, 0, 0, 0, 0x0a, 0x0b, 0, 0, 0, 0, 0, 0, 0, 3];
        assert_eq!(s.encode(), bytes);
        assert_eq!(SyncSequence::decode(&bytes).unwrap(), s);
        assert_eq!(
            SyncSequence::decode(&bytes[..12]).unwrap_err(),
            WireError::Truncated {
                part: Part::SyncSequenceHeader,
                field: "seq",
                offset: 8,
                needed: 8,
                available: 4
            }
        );
        let cases = [
            (
                SyncSequence {
                    writer_epoch: 1,
                    seq: 4,
                },
                true,
            ),
            (
                SyncSequence {
                    writer_epoch: 1,
                    seq: 5,
                },
                false,
            ),
            (
                SyncSequence {
                    writer_epoch: 1,
                    seq: 3,
                },
                false,
            ),
            (
                SyncSequence {
                    writer_epoch: 2,
                    seq: 4,
                },
                false,
            ),
        ];
        let prev = SyncSequence {
            writer_epoch: 1,
            seq: 3,
        };
        for (next, want) in cases {
            assert_eq!(prev.is_followed_by(&next), want, "{next:?}");
        }
        let max = SyncSequence {
            writer_epoch: 1,
            seq: i64::MAX,
        };
        assert!(!max.is_followed_by(&SyncSequence {
            writer_epoch: 1,
            seq: i64::MIN
        }));
    }

    #[test]
    fn topic_names() {
        assert_eq!(offset_syncs_topic("dc2"), "mm2-offset-syncs.dc2.internal");
        assert_eq!(checkpoints_topic("dc1"), "dc1.checkpoints.internal");
        assert_eq!(
            progress_topic("kafka", "orders"),
            "mirrorflow-progress.kafka.orders.internal"
        );
        assert_eq!(HEARTBEATS_TOPIC, "heartbeats");
    }
}
