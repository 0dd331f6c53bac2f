//! The worker process: the one place that starts the replication engine with worker 0's
//! singletons (checkpoints, heartbeats, the topic ACL sync), the HTTP endpoints and the
//! status sinks ([`wiring`]), for a flow read from a file ([`flow_file`], standalone) or from
//! the Kubernetes API ([`k8s`], in a pod).

pub mod args;
pub mod flow_file;
pub mod k8s;
pub mod sinks;
pub mod wiring;
