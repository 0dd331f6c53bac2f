//! The integrity audit: records of the source compared with their copies on the target,
//! through the offset mapping the flow keeps (committed progress and offset syncs).
//!
//! - [`compare`]: one range, record by record (pure).
//! - [`plan`]: which ranges of a partition to read (pure).
//! - [`read`]: the range, offset-sync and config reads; [`flow`]: one audit of a flow.
//! - [`runner`]: the continuous audit of a worker's partitions (`spec.audit`).
pub mod compare;
pub mod flow;
pub mod plan;
pub mod read;
pub mod runner;
