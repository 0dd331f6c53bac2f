//! Consumer-group checkpoints: offset translation and group sync.
//!
//! - [`translate`]: the pure translator (sync histories, translation, monotonicity, sync
//!   decisions) and its safety argument.
//! - [`store`]: offset-sync histories per partition, fed from the offset-syncs topic.
//! - [`groups`]: which groups each OffsetCheckpoint selects.
//! - [`plan`]: one group's cycle as pure decisions.
//! - [`group_sync`]: the group sync beside the cycles: the hand-off of plans (coalescing),
//!   the commits to the target groups, who reports which failures.
//! - [`failback`]: groups of a flow failing back translate across the failover.
//! - [`status`]: runner state → `OffsetCheckpointStatus`.
//! - [`metrics`]: Prometheus series.
//! - [`io`] and `kafka::admin`: cluster calls.
//! - [`runner`]: start-up and the cycles, run by worker 0 of a flow.
//!
//! `mirrorflow translate` (`cli::translate`) prints [`translate`]'s decisions.
pub mod failback;
pub mod group_sync;
pub mod groups;
pub mod io;
pub mod metrics;
pub mod plan;
pub mod runner;
pub mod status;
pub mod store;
pub mod translate;
