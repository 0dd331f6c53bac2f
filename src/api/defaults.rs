//! Defaults shared by the CRD schema (serde defaults become schema defaults) and the code.

/// MirrorMaker 2's default topic exclusions.
pub const TOPIC_EXCLUDES: &[&str] = &[r".*[\-\.]internal", r".*\.replica", r"__.*"];
/// MirrorMaker 2's default group exclusions.
pub const GROUP_EXCLUDES: &[&str] = &[r"console-consumer-.*", r"connect-.*", r"__.*"];

pub fn true_() -> bool {
    true
}
pub fn include_all() -> Vec<String> {
    vec![".*".to_string()]
}
pub fn topic_excludes() -> Vec<String> {
    TOPIC_EXCLUDES.iter().map(|s| s.to_string()).collect()
}
pub fn group_excludes() -> Vec<String> {
    GROUP_EXCLUDES.iter().map(|s| s.to_string()).collect()
}
pub fn topic_refresh_seconds() -> i32 {
    10
}
pub fn separator() -> String {
    ".".to_string()
}
pub fn offset_lag_max() -> i64 {
    100
}
pub fn heartbeat_interval_seconds() -> i32 {
    1
}
pub fn replicas() -> i32 {
    1
}
/// 45 MiB: 40 for the batches, 4 for the consumer's prefetch and 1 for a fetch
/// (`worker::replicate::settings::WindowShares`). Batches of 32 MiB, as much as the bare
/// rdkafka loop keeps in its producer queue, left the 1 KB lz4 rate below 95 % of the loop's
/// in half the runs; 40 did not (the replication bench; `docs/PERFORMANCE.md` has the memory
/// model).
pub fn in_flight_mib() -> i32 {
    45
}
pub fn checkpoint_interval_seconds() -> i32 {
    5
}
pub fn group_refresh_seconds() -> i32 {
    30
}
pub fn tls_crt() -> String {
    "tls.crt".to_string()
}
pub fn tls_key() -> String {
    "tls.key".to_string()
}
pub fn username() -> String {
    "username".to_string()
}
pub fn password() -> String {
    "password".to_string()
}
