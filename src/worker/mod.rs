//! Data plane: replication, offset validation and checkpoints.
pub mod acl_sync;
pub mod audit;
pub mod checkpoint;
pub mod error;
pub mod failover;
pub mod heartbeats;
pub mod process;
pub mod replicate;
pub mod runtime;
pub mod topic_filter;
pub mod validation;
