//! Consumer-group checkpoints: offset translation and group sync.
pub mod translate;
