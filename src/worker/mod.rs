//! Data plane: replication, offset validation and checkpoints.
pub mod checkpoint;
pub mod validation;
pub mod replicate;
pub mod k8s;
