//! The replication engine (the worker process around it is `worker::process`). Each worker copies
//! the partitions it owns ([`assign::owner`]: no consumer group) from source to target with
//! keys, values, headers, timestamps and partition numbers, and writes its progress and MM2
//! offset syncs with each batch (in the batch's transaction with ExactlyOnce). [`engine`]
//! holds the loop; the rooms are listed in `docs/ARCHITECTURE.md`. What holds when workers,
//! brokers or the network fail: `docs/DATA-SAFETY.md`. The memory a worker may hold for
//! records, `spec.workers.inFlightMiB`, is shared out by [`settings::WindowShares`].

pub mod assign;
pub mod batch;
pub mod clients;
pub mod created;
pub mod discovery;
pub mod engine;
pub mod failback;
pub mod failback_io;
pub mod intake;
pub mod io;
pub mod migrate;
pub mod partitions;
pub mod pipeline;
pub mod report;
pub mod reset;
pub mod select;
pub mod settings;
pub mod status;
pub mod step;
pub mod store;
pub mod syncs;
pub mod validate;
pub mod writer;

pub use engine::Engine;
pub use settings::{EngineError, EngineOutputs, EngineSettings, Tuning};
pub use status::{PartitionState, StatusSink, WorkerSnapshot};
