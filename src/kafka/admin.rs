//! Consumer-group admin calls that librdkafka 2.12 has and rdkafka 0.39 does not wrap:
//! ListConsumerGroupOffsets, AlterConsumerGroupOffsets and ListOffsets (latest), plus the
//! safe group listing. All calls block (run them on tokio's blocking pool) and are bounded by
//! the timeout given to [`GroupAdmin::new`].
//!
//! Many groups: on a plaintext cluster of Kafka 3.0+ the group offsets are read with
//! OffsetFetch v8, up to 1000 groups per request, and committed with pipelined OffsetCommit
//! requests, on connections of our own (`kafka::group_client`; librdkafka 2.12 refuses more
//! than one group per ListConsumerGroupOffsets call and finds each group's coordinator again).
//! Otherwise (TLS, SASL, older brokers, or `MIRRORFLOW_DIRECT_GROUP_CALLS=0`) librdkafka takes
//! one group per ListConsumerGroupOffsets / AlterConsumerGroupOffsets request, so up to
//! [`MAX_IN_FLIGHT`] requests are kept outstanding on a private queue, each tagged with its
//! index as the event opaque so answers (and timeouts) map back to their group.
//!
//! Every librdkafka handle is owned by a guard (`kafka::ffi`) that destroys it, and result pointers
//! are read only while their event is alive.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::DefaultClientContext;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::ffi::{admin_options, code_text, error_text, queue, Handle};
use super::group_client::{GroupClient, Lanes, Unavailable};

/// Environment switch: `0` keeps every group call on librdkafka (one group per request).
pub const DIRECT_GROUP_CALLS_ENV: &str = "MIRRORFLOW_DIRECT_GROUP_CALLS";

/// Requests kept outstanding at once by the multi-group calls.
pub const MAX_IN_FLIGHT: usize = 64;

/// A committed group offset for one partition (or one to commit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupOffset {
    /// Topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset (the next record the group reads).
    pub offset: i64,
    /// Commit metadata.
    pub metadata: String,
}

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
    timeout: Duration,
    what: String,
}

/// Elements of a librdkafka partition list.
///
/// # Safety
/// `list` must be null or a live list that outlives the returned slice.
unsafe fn partitions<'a>(
    list: *const rd::rd_kafka_topic_partition_list_t,
) -> &'a [rd::rd_kafka_topic_partition_t] {
    if list.is_null() || (*list).cnt <= 0 || (*list).elems.is_null() {
        return &[];
    }
    std::slice::from_raw_parts((*list).elems, (*list).cnt as usize)
}

/// Topic name and metadata of a partition element.
///
/// # Safety
/// `p` must be a live element.
unsafe fn topic_and_metadata(p: &rd::rd_kafka_topic_partition_t) -> (String, String) {
    let topic = if p.topic.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p.topic).to_string_lossy().into_owned()
    };
    let metadata = if p.metadata.is_null() || p.metadata_size == 0 {
        String::new()
    } else {
        let bytes = std::slice::from_raw_parts(p.metadata as *const u8, p.metadata_size);
        String::from_utf8_lossy(bytes).into_owned()
    };
    (topic, metadata)
}

impl GroupAdmin {
    /// An admin client from `config` (the cluster's client properties); `what` names the
    /// cluster in errors (e.g. `source cluster dc1`).
    /// Many groups per request unless [`DIRECT_GROUP_CALLS_ENV`] is `0`.
    pub fn new(config: &ClientConfig, what: &str, timeout: Duration) -> Result<Self, String> {
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
    ) -> Result<Self, String> {
        let admin = config
            .create()
            .map_err(|e| format!("{what}: create admin client: {e}"))?;
        let direct = batching
            .then(|| GroupClient::for_config(config, timeout, Lanes::default()))
            .flatten();
        Ok(Self {
            admin,
            direct,
            timeout,
            what: what.to_string(),
        })
    }

    /// Whether group offsets go many groups per request (see the module docs) until a
    /// broker turns out not to support it.
    pub fn batches_groups(&self) -> bool {
        self.direct.is_some()
    }

    /// Runs `f` on the many-group client if there is one and it can serve the call.
    fn try_direct<R>(
        &self,
        f: impl FnOnce(&GroupClient) -> Result<Vec<Result<R, String>>, Unavailable>,
    ) -> Option<Vec<Result<R, String>>> {
        let direct = self.direct.as_ref()?;
        match f(direct) {
            Ok(r) => Some(
                r.into_iter()
                    .map(|r| r.map_err(|e| format!("{}: {e}", self.what)))
                    .collect(),
            ),
            Err(Unavailable(why)) => {
                tracing::debug!(cluster = %self.what, reason = %why, "group offsets: one request per group this time");
                None
            }
        }
    }

    fn timeout_ms(&self) -> c_int {
        c_int::try_from(self.timeout.as_millis()).unwrap_or(c_int::MAX)
    }

    /// Every consumer group of the cluster with its state and member count (ListGroups +
    /// DescribeGroups).
    pub fn list_groups(&self) -> Result<Vec<GroupListing>, String> {
        let list = self
            .admin
            .inner()
            .fetch_group_list(None, self.timeout)
            .map_err(|e| format!("{}: list consumer groups: {e}", self.what))?;
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

    /// Submits `n` admin requests (at most [`MAX_IN_FLIGHT`] outstanding) and collects one
    /// answer per request, in input order. `submit(i, options, queue)` sends request `i`;
    /// `read(i, event)` turns its answer event into a result.
    fn run_many<R>(
        &self,
        op: rd::rd_kafka_admin_op_t,
        n: usize,
        what: &str,
        submit: impl Fn(usize, *mut rd::rd_kafka_AdminOptions_t, *mut rd::rd_kafka_queue_t),
        read: impl Fn(usize, *mut rd::rd_kafka_event_t) -> Result<R, String>,
    ) -> Vec<Result<R, String>> {
        let rk = self.admin.inner().native_ptr();
        let mut out: Vec<Option<Result<R, String>>> = (0..n).map(|_| None).collect();
        let timeout_ms = self.timeout_ms();
        // SAFETY: the queue and options are created from the live client `rk` and destroyed
        // by guards; librdkafka copies what it needs from the options at submit time.
        unsafe {
            let queue = queue(rk);
            let mut next = 0usize;
            let mut outstanding = 0usize;
            while next < n || outstanding > 0 {
                while next < n && outstanding < MAX_IN_FLIGHT {
                    let options = admin_options(rk, op, timeout_ms);
                    // The index travels as the event opaque (never dereferenced).
                    rd::rd_kafka_AdminOptions_set_opaque(options.ptr, next as *mut c_void);
                    submit(next, options.ptr, queue.ptr);
                    next += 1;
                    outstanding += 1;
                }
                // Slack over the request timeout so the request's own timeout reports first.
                let event = Handle {
                    ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(2000)),
                    destroy: rd::rd_kafka_event_destroy,
                };
                if event.ptr.is_null() {
                    for slot in out.iter_mut().take(next) {
                        if slot.is_none() {
                            *slot = Some(Err(format!(
                                "{}: {what}: no answer within {:?}",
                                self.what, self.timeout
                            )));
                        }
                    }
                    break;
                }
                let i = rd::rd_kafka_event_opaque(event.ptr) as usize;
                if i >= n || out[i].is_some() {
                    continue; // not ours (cannot happen on a private queue)
                }
                outstanding -= 1;
                let result = if rd::rd_kafka_event_error(event.ptr)
                    != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    let msg = CStr::from_ptr(rd::rd_kafka_event_error_string(event.ptr));
                    Err(format!("{}: {what}: {}", self.what, msg.to_string_lossy()))
                } else {
                    read(i, event.ptr)
                };
                out[i] = Some(result);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(format!("{}: {what}: not sent", self.what))))
            .collect()
    }

    /// Committed offsets of each group (all partitions it committed), in input order.
    /// Partitions without a committed offset are left out.
    pub fn list_offsets(&self, groups: &[String]) -> Vec<Result<Vec<GroupOffset>, String>> {
        if groups.is_empty() {
            return Vec::new();
        }
        if let Some(r) = self.try_direct(|d| d.list_offsets(groups)) {
            return r;
        }
        let what = "list consumer group offsets";
        let prepared: Vec<Result<CString, String>> = groups.iter().map(|g| c_group(g)).collect();
        let valid: Vec<(usize, &CString)> = ok_entries(&prepared);
        let answers = self.run_many(
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
            valid.len(),
            what,
            |k, options, queue| {
                let name = valid[k].1;
                // SAFETY: `name` lives across the call; librdkafka copies the request.
                unsafe {
                    let mut req = [rd::rd_kafka_ListConsumerGroupOffsets_new(
                        name.as_ptr(),
                        std::ptr::null(),
                    )];
                    rd::rd_kafka_ListConsumerGroupOffsets(
                        self.admin.inner().native_ptr(),
                        req.as_mut_ptr(),
                        1,
                        options,
                        queue,
                    );
                    rd::rd_kafka_ListConsumerGroupOffsets_destroy(req[0]);
                }
            },
            |k, event| {
                let group = &groups[valid[k].0];
                // SAFETY: `event` is alive for this call; everything is copied out.
                unsafe {
                    let result = rd::rd_kafka_event_ListConsumerGroupOffsets_result(event);
                    if result.is_null() {
                        return Err(format!("{}: {what}: unexpected event type", self.what));
                    }
                    let mut count = 0usize;
                    let groups_ptr =
                        rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
                    read_group_result(groups_ptr, count, group, true)
                        .map_err(|e| format!("{}: {what}: group {group:?}: {e}", self.what))
                }
            },
        );
        let sent = valid.iter().map(|(i, _)| *i).collect();
        merge(prepared, sent, answers)
    }

    /// Commits offsets to groups (AdminClient.alterConsumerGroupOffsets: the broker refuses
    /// it for a group with active members). One result per group, in input order; a group
    /// succeeds only if every partition did.
    pub fn alter_offsets(&self, commits: &[(String, Vec<GroupOffset>)]) -> Vec<Result<(), String>> {
        if commits.is_empty() {
            return Vec::new();
        }
        if let Some(r) = self.try_direct(|d| d.commit_offsets(commits)) {
            return r;
        }
        let what = "commit consumer group offsets";
        let prepared: Vec<Result<(CString, TopicPartitionList), String>> = commits
            .iter()
            .map(|(group, offsets)| {
                let name = c_group(group)?;
                let mut tpl = TopicPartitionList::with_capacity(offsets.len());
                for o in offsets {
                    tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset))
                        .map_err(|e| format!("group {group:?} {}/{}: {e}", o.topic, o.partition))?;
                    if let Some(mut elem) = tpl.find_partition(&o.topic, o.partition) {
                        elem.set_metadata(o.metadata.as_str());
                    }
                }
                Ok((name, tpl))
            })
            .collect();
        let valid: Vec<(usize, &(CString, TopicPartitionList))> = ok_entries(&prepared);
        let answers = self.run_many(
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS,
            valid.len(),
            what,
            |k, options, queue| {
                let (name, tpl) = valid[k].1;
                // SAFETY: `name` and `tpl` live across the call; librdkafka copies both.
                unsafe {
                    let mut req = [rd::rd_kafka_AlterConsumerGroupOffsets_new(
                        name.as_ptr(),
                        tpl.ptr(),
                    )];
                    rd::rd_kafka_AlterConsumerGroupOffsets(
                        self.admin.inner().native_ptr(),
                        req.as_mut_ptr(),
                        1,
                        options,
                        queue,
                    );
                    rd::rd_kafka_AlterConsumerGroupOffsets_destroy(req[0]);
                }
            },
            |k, event| {
                let group = &commits[valid[k].0].0;
                // SAFETY: `event` is alive for this call; everything is copied out.
                unsafe {
                    let result = rd::rd_kafka_event_AlterConsumerGroupOffsets_result(event);
                    if result.is_null() {
                        return Err(format!("{}: {what}: unexpected event type", self.what));
                    }
                    let mut count = 0usize;
                    let groups_ptr =
                        rd::rd_kafka_AlterConsumerGroupOffsets_result_groups(result, &mut count);
                    read_group_result(groups_ptr, count, group, false)
                        .map(|_| ())
                        .map_err(|e| format!("{}: {what}: group {group:?}: {e}", self.what))
                }
            },
        );
        let sent = valid.iter().map(|(i, _)| *i).collect();
        merge(prepared, sent, answers)
    }

    /// End offsets (high watermarks) of `partitions` in one ListOffsets call. Partitions the
    /// cluster reports an error for (e.g. unknown topic) are left out of the map.
    pub fn end_offsets(
        &self,
        partitions: &[(String, i32)],
    ) -> Result<HashMap<(String, i32), i64>, String> {
        match self.end_offsets_once(partitions) {
            // librdkafka's ListOffsets finds leaders in the client's metadata cache, which
            // does not learn of a topic created after its last refresh (every 5 minutes by
            // default): a checkpoint runner started before the worker created its target
            // topics failed every cycle for minutes (seen with two flows into one target).
            // Refresh the cache (a metadata request for all topics) and ask once more.
            Err(e) if e.contains("No leaders found") => {
                let _ = self.admin.inner().fetch_metadata(None, self.timeout);
                self.end_offsets_once(partitions)
            }
            r => r,
        }
    }

    fn end_offsets_once(
        &self,
        partitions: &[(String, i32)],
    ) -> Result<HashMap<(String, i32), i64>, String> {
        if partitions.is_empty() {
            return Ok(HashMap::new());
        }
        let what = "list end offsets";
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for (topic, partition) in partitions {
            // OffsetSpec LATEST is -1 (Offset::End).
            tpl.add_partition_offset(topic, *partition, Offset::End)
                .map_err(|e| format!("{}: {what}: {topic}/{partition}: {e}", self.what))?;
        }
        let mut results = self.run_many(
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTOFFSETS,
            1,
            what,
            |_, options, queue| {
                // SAFETY: `tpl` lives across the call; librdkafka copies it.
                unsafe {
                    rd::rd_kafka_ListOffsets(
                        self.admin.inner().native_ptr(),
                        tpl.ptr(),
                        options,
                        queue,
                    )
                }
            },
            |_, event| {
                // SAFETY: `event` is alive for this call; everything is copied out.
                unsafe {
                    let result = rd::rd_kafka_event_ListOffsets_result(event);
                    if result.is_null() {
                        return Err(format!("{}: {what}: unexpected event type", self.what));
                    }
                    let mut count = 0usize;
                    let infos = rd::rd_kafka_ListOffsets_result_infos(result, &mut count);
                    let infos: &[*const rd::rd_kafka_ListOffsetsResultInfo_t] =
                        if infos.is_null() || count == 0 {
                            &[]
                        } else {
                            std::slice::from_raw_parts(infos, count)
                        };
                    let mut ends = HashMap::with_capacity(infos.len());
                    for info in infos {
                        let p = rd::rd_kafka_ListOffsetsResultInfo_topic_partition(*info);
                        if p.is_null() {
                            continue;
                        }
                        let p = &*p;
                        if p.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                            || p.offset < 0
                        {
                            continue;
                        }
                        let (topic, _) = topic_and_metadata(p);
                        ends.insert((topic, p.partition), p.offset);
                    }
                    Ok(ends)
                }
            },
        );
        results
            .pop()
            .unwrap_or_else(|| Err(format!("{}: {what}: no answer", self.what)))
    }
}

fn c_group(group: &str) -> Result<CString, String> {
    CString::new(group).map_err(|e| format!("group id {group:?}: {e}"))
}

/// `(index, value)` of the inputs that could be prepared.
fn ok_entries<T>(prepared: &[Result<T, String>]) -> Vec<(usize, &T)> {
    prepared
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().ok().map(|v| (i, v)))
        .collect()
}

/// Puts the answers for the sent inputs (`sent[k]` is the input index of answer `k`) back
/// next to the preparation errors of the others, in input order.
fn merge<T, R>(
    prepared: Vec<Result<T, String>>,
    sent: Vec<usize>,
    answers: Vec<Result<R, String>>,
) -> Vec<Result<R, String>> {
    let mut out: Vec<Result<R, String>> = prepared
        .into_iter()
        .map(|p| match p {
            Ok(_) => Err("not answered".to_string()),
            Err(e) => Err(e),
        })
        .collect();
    for (i, answer) in sent.into_iter().zip(answers) {
        out[i] = answer;
    }
    out
}

/// Reads the single group result of a group-offsets answer: its partitions (with offsets
/// when `with_offsets`), or the first group- or partition-level error.
///
/// # Safety
/// `groups` must point to `count` live group results.
unsafe fn read_group_result(
    groups: *mut *const rd::rd_kafka_group_result_t,
    count: usize,
    group: &str,
    with_offsets: bool,
) -> Result<Vec<GroupOffset>, String> {
    let groups: &[*const rd::rd_kafka_group_result_t] = if groups.is_null() || count == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(groups, count)
    };
    let g = groups
        .iter()
        .copied()
        .find(|g| CStr::from_ptr(rd::rd_kafka_group_result_name(*g)).to_bytes() == group.as_bytes())
        .ok_or_else(|| "group missing from the answer".to_string())?;
    if let Some(e) = error_text(rd::rd_kafka_group_result_error(g)) {
        return Err(e);
    }
    let mut out = Vec::new();
    for p in partitions(rd::rd_kafka_group_result_partitions(g)) {
        let (topic, metadata) = topic_and_metadata(p);
        if p.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("{topic}/{}: {}", p.partition, code_text(p.err)));
        }
        if with_offsets && p.offset < 0 {
            continue; // no committed offset
        }
        out.push(GroupOffset {
            topic,
            partition: p.partition,
            offset: p.offset,
            metadata,
        });
    }
    Ok(out)
}
