//! Consumer-group admin calls that librdkafka 2.12 has and rdkafka 0.39 does not wrap:
//! ListConsumerGroupOffsets, AlterConsumerGroupOffsets and ListOffsets (latest), plus the
//! safe group listing. All calls block (run them on tokio's blocking pool) and are bounded by
//! the timeout given to [`GroupAdmin::new`].
//!
//! Many groups: on a cluster of Kafka 3.0+ the group offsets are read with OffsetFetch v8, up
//! to 1000 groups per request, and committed with pipelined OffsetCommit requests, on
//! connections of our own (`kafka::group_client`, plaintext or TLS, SASL PLAIN or SCRAM;
//! librdkafka 2.12 refuses more than one group per ListConsumerGroupOffsets call and finds
//! each group's coordinator again). Otherwise (GSSAPI, OAUTHBEARER, encrypted keys, older
//! brokers, or `MIRRORFLOW_DIRECT_GROUP_CALLS=0`) librdkafka takes
//! one group per ListConsumerGroupOffsets / AlterConsumerGroupOffsets request, so up to
//! [`MAX_IN_FLIGHT`] requests are kept outstanding on a private queue, each tagged with its
//! index as the event opaque so answers (and timeouts) map back to their group.
//!
//! The librdkafka calls themselves are `kafka::sys::admin`.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::error::{Code, Context, Error};
use super::group_client::{GroupClient, Lanes, Unavailable};
use super::sys::admin as sys;

/// Environment switch: `0` keeps every group call on librdkafka (one group per request).
pub const DIRECT_GROUP_CALLS_ENV: &str = "MIRRORFLOW_DIRECT_GROUP_CALLS";

/// Requests kept outstanding at once by the multi-group calls.
pub use sys::MAX_IN_FLIGHT;

pub use super::group_offset::GroupOffset;

/// One consumer group as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group: String,
    /// Broker-reported state (`Empty`, `Stable`, `PreparingRebalance`, `Dead`, ...).
    pub state: String,
    /// Members currently in the group.
    pub members: u32,
}

/// Admin client for the group calls of one cluster.
pub struct GroupAdmin {
    admin: AdminClient<DefaultClientContext>,
    /// Many groups per request, when the cluster allows it (module docs).
    direct: Option<GroupClient>,
    /// Calls the many-group client served.
    direct_calls: std::sync::atomic::AtomicU64,
    timeout: Duration,
    what: String,
}

impl GroupAdmin {
    /// An admin client from `config` (the cluster's client properties); `what` names the
    /// cluster in errors (e.g. `source cluster dc1`).
    /// Many groups per request unless [`DIRECT_GROUP_CALLS_ENV`] is `0`.
    pub fn new(config: &ClientConfig, what: &str, timeout: Duration) -> Result<Self, Error> {
        let enabled = std::env::var(DIRECT_GROUP_CALLS_ENV).map_or(true, |v| v.trim() != "0");
        Self::with_batching(config, what, timeout, enabled)
    }

    /// As [`GroupAdmin::new`], with many groups per request when `batching` and the cluster
    /// allows it (module docs).
    pub fn with_batching(
        config: &ClientConfig,
        what: &str,
        timeout: Duration,
        batching: bool,
    ) -> Result<Self, Error> {
        let admin = config
            .create()
            .context_with(|| format!("{what}: create admin client"))?;
        let direct = batching
            .then(|| GroupClient::for_config(config, timeout, Lanes::default()))
            .flatten();
        Ok(Self {
            admin,
            direct,
            direct_calls: Default::default(),
            timeout,
            what: what.to_string(),
        })
    }

    /// Whether group offsets go many groups per request (see the module docs) until a
    /// broker turns out not to support it.
    pub fn batches_groups(&self) -> bool {
        self.direct.is_some()
    }

    /// Calls served many groups per request so far (the others took librdkafka's path).
    pub fn many_group_calls(&self) -> u64 {
        self.direct_calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `f` on the many-group client if there is one and it can serve the call.
    fn try_direct<R>(
        &self,
        f: impl FnOnce(&GroupClient) -> Result<Vec<Result<R, Error>>, Unavailable>,
    ) -> Option<Vec<Result<R, Error>>> {
        let direct = self.direct.as_ref()?;
        match f(direct) {
            Ok(r) => Some({
                self.direct_calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);

                r.into_iter()
                    .map(|r| r.map_err(|e| e.context(&self.what)))
                    .collect()
            }),
            Err(Unavailable(why)) => {
                tracing::debug!(cluster = %self.what, reason = %why, "group offsets: one request per group this time");
                None
            }
        }
    }

    /// Every consumer group of the cluster with its state and member count (ListGroups +
    /// DescribeGroups).
    pub fn list_groups(&self) -> Result<Vec<GroupListing>, Error> {
        let list = self
            .admin
            .inner()
            .fetch_group_list(None, self.timeout)
            .context_with(|| format!("{}: list consumer groups", self.what))?;
        Ok(list
            .groups()
            .iter()
            .map(|g| GroupListing {
                group: g.name().to_string(),
                state: g.state().to_string(),
                members: u32::try_from(g.members().len()).unwrap_or(u32::MAX),
            })
            .collect())
    }

    /// Committed offsets of each group (all partitions it committed), in input order.
    /// Partitions without a committed offset are left out.
    pub fn list_offsets(&self, groups: &[String]) -> Vec<Result<Vec<GroupOffset>, Error>> {
        if groups.is_empty() {
            return Vec::new();
        }
        if let Some(r) = self.try_direct(|d| d.list_offsets(groups)) {
            return r;
        }
        let prepared: Vec<Result<CString, Error>> = groups.iter().map(|g| c_group(g)).collect();
        let valid: Vec<(usize, &CString)> = ok_entries(&prepared);
        let requests: Vec<(&str, &CStr)> = valid
            .iter()
            .map(|(i, name)| (groups[*i].as_str(), name.as_c_str()))
            .collect();
        let answers = sys::list_group_offsets(&self.admin, &requests, self.timeout, &self.what);
        let sent = valid.iter().map(|(i, _)| *i).collect();
        merge(prepared, sent, answers)
    }

    /// Commits offsets to groups (AdminClient.alterConsumerGroupOffsets: the broker refuses
    /// it for a group with active members). One result per group, in input order; a group
    /// succeeds only if every partition did.
    pub fn alter_offsets(&self, commits: &[(String, Vec<GroupOffset>)]) -> Vec<Result<(), Error>> {
        if commits.is_empty() {
            return Vec::new();
        }
        if let Some(r) = self.try_direct(|d| d.commit_offsets(commits)) {
            return r;
        }
        let prepared: Vec<Result<(CString, TopicPartitionList), Error>> = commits
            .iter()
            .map(|(group, offsets)| {
                let name = c_group(group)?;
                let mut tpl = TopicPartitionList::with_capacity(offsets.len());
                for o in offsets {
                    tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset))
                        .context_with(|| format!("group {group:?} {}/{}", o.topic, o.partition))?;
                    if let Some(mut elem) = tpl.find_partition(&o.topic, o.partition) {
                        elem.set_metadata(o.metadata.as_str());
                    }
                }
                Ok((name, tpl))
            })
            .collect();
        let valid: Vec<(usize, &(CString, TopicPartitionList))> = ok_entries(&prepared);
        let requests: Vec<(&str, &CStr, &TopicPartitionList)> = valid
            .iter()
            .map(|(i, (name, tpl))| (commits[*i].0.as_str(), name.as_c_str(), tpl))
            .collect();
        let answers = sys::alter_group_offsets(&self.admin, &requests, self.timeout, &self.what);
        let sent = valid.iter().map(|(i, _)| *i).collect();
        merge(prepared, sent, answers)
    }

    /// End offsets (high watermarks) of `partitions` in one ListOffsets call. Partitions the
    /// cluster reports an error for (e.g. unknown topic) are left out of the map.
    pub fn end_offsets(
        &self,
        partitions: &[(String, i32)],
    ) -> Result<HashMap<(String, i32), i64>, Error> {
        match self.end_offsets_once(partitions) {
            // librdkafka's ListOffsets finds leaders in the client's metadata cache, which
            // does not learn of a topic created after its last refresh (every 5 minutes by
            // default): a checkpoint runner started before the worker created its target
            // topics failed every cycle for minutes (seen with two flows into one target).
            // Refresh the cache (a metadata request for all topics) and ask once more.
            Err(e) if e.error_code() == Some(Code::LOCAL_NOENT) => {
                let _ = self.admin.inner().fetch_metadata(None, self.timeout);
                self.end_offsets_once(partitions)
            }
            r => r,
        }
    }

    fn end_offsets_once(
        &self,
        partitions: &[(String, i32)],
    ) -> Result<HashMap<(String, i32), i64>, Error> {
        if partitions.is_empty() {
            return Ok(HashMap::new());
        }
        let what = "list end offsets";
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for (topic, partition) in partitions {
            // OffsetSpec LATEST is -1 (Offset::End).
            tpl.add_partition_offset(topic, *partition, Offset::End)
                .context_with(|| format!("{}: {what}: {topic}/{partition}", self.what))?;
        }
        sys::end_offsets(&self.admin, &tpl, self.timeout, &self.what)
    }
}

fn c_group(group: &str) -> Result<CString, Error> {
    CString::new(group).map_err(|e| Error::nul("group id", group, e))
}

/// `(index, value)` of the inputs that could be prepared.
fn ok_entries<T>(prepared: &[Result<T, Error>]) -> Vec<(usize, &T)> {
    prepared
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().ok().map(|v| (i, v)))
        .collect()
}

/// Puts the answers for the sent inputs (`sent[k]` is the input index of answer `k`) back
/// next to the preparation errors of the others, in input order.
fn merge<T, R>(
    prepared: Vec<Result<T, Error>>,
    sent: Vec<usize>,
    answers: Vec<Result<R, Error>>,
) -> Vec<Result<R, Error>> {
    let mut out: Vec<Result<R, Error>> = prepared
        .into_iter()
        .map(|p| match p {
            Ok(_) => Err(Error::Protocol("not answered".into())),
            Err(e) => Err(e),
        })
        .collect();
    for (i, answer) in sent.into_iter().zip(answers) {
        out[i] = answer;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    /// A coordinator that answers OffsetFetch with NOT_COORDINATOR (it moved, or is loading)
    /// is an error of that group, on the path librdkafka serves (TLS and SASL clusters).
    /// librdkafka 2.12.1 dereferenced the consumer group of the admin client, which has none,
    /// and the process died of SIGSEGV (vendor/README.md).
    #[test]
    fn not_coordinator_on_the_one_group_path_is_an_error_not_a_crash() {
        let mock = MockCluster::new(1).unwrap();
        mock.request_errors(
            RDKafkaApiKey::OffsetFetch,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR; 8],
        );
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let admin =
            GroupAdmin::with_batching(&config, "test cluster", Duration::from_secs(10), false)
                .unwrap();
        assert!(!admin.batches_groups());
        let got = admin.list_offsets(&["billing".to_string()]);
        assert_eq!(got.len(), 1);
        let e = got[0].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("test cluster") && e.contains("oordinator"),
            "{e}"
        );
    }
}
