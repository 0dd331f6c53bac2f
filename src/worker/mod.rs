//! Data plane: replication, offset validation and checkpoints.
pub mod checkpoint;
pub mod k8s;
pub mod replicate;
pub mod validation;
