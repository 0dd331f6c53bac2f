//! The replication engine (the worker process around it is `worker::process`). The rooms of
//! the engine are listed in `docs/ARCHITECTURE.md`; [`engine`] holds its loop.
//!
//! # What a worker does
//! - **Ownership.** Partitions are split between the `N` workers of a flow by
//!   [`assign::owner`]: `(fnv1a64(topic) + partition) mod N`. Stable, deterministic, no
//!   consumer group: the source consumer uses `assign`, never `subscribe`.
//! - **Topics.** Every `topics.refreshIntervalSeconds` ([`discovery`], on a task beside the
//!   replication loop) the source is listed; topics selected
//!   by `worker::topic_filter` (full-match include/exclude, never internal topics, never
//!   topics that came from the target) get a target topic named by `kafka::naming` with the
//!   same partition count and — with `syncTopicConfigs` — the source topic's own configs
//!   (minus broker-specific ones, as MM2). Partition increases are followed.
//! - **Records** keep key, value, headers, timestamp and partition number. No header is
//!   added to replicated records.
//! - **Progress** (next source offset per partition, [`crate::kafka::wire::Progress`]) lives on
//!   the target in the compacted topic `mirrorflow-progress.<namespace>.<flow>.internal` and is read back
//!   at start (read_committed), so a worker restarted anywhere resumes. A partition without
//!   progress starts per `startFrom` at an explicit offset (log start or end); partitions
//!   that appear while the worker runs start at their log start.
//! - **Offset syncs** (MM2 format, plus the `mirrorflow.sync.seq` header) go to
//!   `mm2-offset-syncs.<sourceAlias>.internal` on the target, emitted per [`syncs`] with the
//!   batch of records they describe (in its transaction with ExactlyOnce; right after its
//!   delivery reports with AtLeastOnce), so they never starve.
//! - **ExactlyOnce**: one transactional producer (`mirrorflow-<len(ns)>-<ns>-<flow>-<index>`); a batch's
//!   records, syncs and progress commit together. Starting fences a zombie with the same id.
//!   A target that refuses transactions stops the worker with a message naming the fix
//!   (`spec.delivery: AtLeastOnce`); there is no silent downgrade.
//! - **AtLeastOnce**: idempotent producer, pipelined. Each consumed record is handed to
//!   the producer as it is read (librdkafka's copy is the only one; the open batch keeps
//!   offsets, sizes and timestamps; from 512 bytes of key and value there is no copy:
//!   librdkafka reads the consumer's fetch buffer, whose event is held until the record's
//!   delivery report, `pipeline::HELD_MIN_BYTES`), while up to `Tuning::pipeline_depth` (2) earlier
//!   batches await their delivery reports. When a batch's records are acknowledged, its
//!   positions advance and its syncs and progress are sent; their acknowledgement is awaited
//!   in the background (a lost one is written again). A batch that fails drops every later
//!   one and the open batch: the consumer restarts from the committed positions (records
//!   already sent from them may arrive twice). A record the producer refuses outright halts
//!   its partition's later records until then; one the broker refuses for good stops the
//!   producer (`enable.gapless.guarantee`), so no later record of its partition lands before
//!   it is retried: the producer is recreated and what was in flight sent again. Duplicate
//!   bound: a failed batch or a crash re-sends at most the window below, after the records
//!   it repeats (each partition keeps its order of first appearance), except records whose
//!   delivery timed out (`message.timeout.ms`), which librdkafka's gap guarantee does not
//!   cover and which may then land after later ones. A full producer queue (a small
//!   `queue.buffering.max.*` in `target.config`) keeps the rest of the open batch in memory,
//!   sent in order when the batch is. A crash replicates again at most the records not
//!   covered by acknowledged progress: `Tuning::batch` (40,000 records / the batches' share
//!   of `spec.workers.inFlightMiB`, 40 of the default 45 MiB), the window that the sent
//!   batches, those awaiting progress and the open batch share.
//! - **Failures.** A record the target refuses for good (e.g. larger than `max.message.bytes`)
//!   stops its partition ([`status::PartitionState::Failed`]) with the broker's message;
//!   other partitions go on. Transient target errors rewind to the committed positions and
//!   retry with exponential backoff. An out-of-range position (offset validation) stops the
//!   partition as DataLoss or TopicReset.
//! - **paused** stops consuming (partitions unassigned) and keeps positions; HTTP stays up.
//! - **Secrets** (`docs/SECURITY.md`): every client reports authentication and TLS
//!   failures into the flow's connection health (`/status`, the status entry, `/readyz`);
//!   when a cluster's mounted Secrets change, the open batches finish and every client is
//!   rebuilt from them, resuming from the committed positions. Worker 0 also syncs topic
//!   ACLs (`worker::acl_sync`).
//! - **SIGTERM/SIGINT**: the batches in flight and the open one commit (their syncs and
//!   progress acknowledged) within 10 s, or are aborted; exit 0.
//!
//! # Memory bound (defaults, per worker)
//! `spec.workers.inFlightMiB` (45 MiB by default) bounds all record data a worker holds,
//! shared by [`settings::WindowShares`]:
//! - one fetch being read (`fetch.max.bytes` = 1 MiB, or `message.max.bytes` if
//!   `source.config` sets it larger);
//! - the consumer's prefetch: `queued.max.messages.kbytes`, an eighth of the window and at
//!   most 4 MiB (or 40,000 records, `queued.min.messages`);
//! - the rest, 40 MiB by default, for the batches: records sent and not yet acknowledged and
//!   the open batch, each record counted with 256 bytes of bookkeeping
//!   (`batch::RECORD_OVERHEAD_BYTES`; a record sent without a copy with 352 more for its
//!   held fetch event, `batch::HELD_OVERHEAD_BYTES`), and 40,000 records in all ([`batch::BatchLimits::room`]:
//!   the open batch gets a third with the default depth, less what earlier batches still
//!   hold), held by librdkafka's producer or the consumer's fetch buffers (the engine keeps a copy only of records read ahead
//!   while a batch is written, or waiting for a full producer queue, within the same bound).
//!   A single record larger than the room forms a batch of its own;
//! - producer queue: ≤ 32 MiB of payload (`queue.buffering.max.kbytes`): the batches' 40 MiB
//!   count each record with its bookkeeping, so with records of more than about 1 KB the
//!   queue fills first and the engine keeps the rest of the open batch, within its share.
//!
//! Beyond the window are librdkafka's buffers and structures and the worker's own (measured:
//! peak RSS the window plus 16-29 MiB with 1,000 partitions, an idle worker 18 MiB;
//! docs/PERFORMANCE.md). Backpressure: a slow target holds the window full, and then nothing
//! more is consumed. `source.config` may set the consumer's bounds (`fetch.max.bytes`,
//! `queued.max.messages.kbytes`): the batches get what they leave, at least half.
//!
//! The window is the trade between memory and throughput: when the target acknowledges
//! slowly (a busy host), throughput is about the batches' share ÷ acknowledgement latency. On
//! the 2-core bench host (1 KB records, medians of 3 interleaved runs, the prefetch outside
//! the window then): batches of 16 MiB, 94.5 % of the bare copy loop (lz4 76.6 %); 32 MiB,
//! 103.0 % (lz4 93.6 %), measured when records were counted with 64 bytes of bookkeeping,
//! not 256; with the prefetch counted inside, batches of 40 MiB (a window of 45) against 32
//! (37): lz4 rate 98.3-106.1 % against 90.5-95.7 % of the bare loop's. Hence the default of 45.

pub mod assign;
pub mod batch;
pub mod clients;
pub mod created;
pub mod discovery;
pub mod engine;
pub mod intake;
pub mod io;
pub mod partitions;
pub mod pipeline;
pub mod report;
pub mod reset;
pub mod select;
pub mod settings;
pub mod status;
pub mod step;
pub mod syncs;
pub mod validate;
pub mod writer;

pub use engine::Engine;
pub use settings::{EngineError, EngineOutputs, EngineSettings, Tuning};
pub use status::{PartitionState, StatusSink, WorkerSnapshot};
