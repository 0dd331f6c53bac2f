//! `spec.failover`: moving the flow's consumer groups to the target as one operation, once
//! per id. Decisions in [`plan`], I/O in [`runner`].

pub mod groups_back;
pub mod plan;
pub mod runner;
