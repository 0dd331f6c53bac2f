//! The consumer-group admin calls rust-rdkafka does not wrap (`kafka::admin::GroupAdmin`'s
//! librdkafka path): ListConsumerGroupOffsets and AlterConsumerGroupOffsets, one group per
//! request with up to [`MAX_IN_FLIGHT`] requests outstanding on a private queue, and
//! ListOffsets (latest).

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::TopicPartitionList;

use super::handle::{admin_options, array, code_error, error_of, queue, text, timeout_ms, Handle};
use crate::kafka::error::{Code, Error};
use crate::kafka::group_offset::GroupOffset;

/// Requests kept outstanding at once by the multi-group calls.
pub const MAX_IN_FLIGHT: usize = 64;

/// Submits `n` admin requests through `admin` (at most [`MAX_IN_FLIGHT`] outstanding) and
/// collects one answer per request, in input order. `submit(i, rk, options, queue)` sends
/// request `i` (exactly one, with those options, on that queue); `read(i, event)` turns its
/// answer event, alive for the call, into a result. Errors start with `cluster` and `what`.
///
/// # Safety
/// `submit` must enqueue exactly one request on the queue with the options given, passing
/// only handles that live across its call; `read` must not keep pointers into the event.
unsafe fn run_many<C: ClientContext, R>(
    admin: &AdminClient<C>,
    op: rd::rd_kafka_admin_op_t,
    n: usize,
    (cluster, what, timeout): (&str, &str, Duration),
    submit: impl Fn(
        usize,
        *mut rd::rd_kafka_t,
        *mut rd::rd_kafka_AdminOptions_t,
        *mut rd::rd_kafka_queue_t,
    ),
    read: impl Fn(usize, *mut rd::rd_kafka_event_t) -> Result<R, Error>,
) -> Vec<Result<R, Error>> {
    let rk = admin.inner().native_ptr();
    let mut out: Vec<Option<Result<R, Error>>> = (0..n).map(|_| None).collect();
    let timeout_ms = timeout_ms(timeout);
    // SAFETY: `rk` is borrowed from `admin` for the call; the queue is ours.
    let queue = unsafe { queue(rk) };
    let mut next = 0usize;
    let mut outstanding = 0usize;
    while next < n || outstanding > 0 {
        while next < n && outstanding < MAX_IN_FLIGHT {
            // SAFETY: as for the queue; librdkafka copies what it needs from the options when
            // the request is enqueued, so they go at the end of this turn.
            let options = unsafe { admin_options(rk, op, timeout_ms) };
            // SAFETY: live options; the index travels as the event opaque, never dereferenced.
            unsafe { rd::rd_kafka_AdminOptions_set_opaque(options.ptr(), next as *mut c_void) };
            submit(next, rk, options.ptr(), queue.ptr());
            next += 1;
            outstanding += 1;
        }
        // SAFETY: our live queue; a returned event is ours. The slack over the request
        // timeout lets the request's own timeout report first.
        let event = unsafe {
            Handle::new(
                rd::rd_kafka_queue_poll(queue.ptr(), timeout_ms.saturating_add(2000)),
                rd::rd_kafka_event_destroy,
            )
        };
        if event.is_null() {
            for slot in out.iter_mut().take(next) {
                if slot.is_none() {
                    *slot = Some(Err(Error::Timeout(timeout).context(what).context(cluster)));
                }
            }
            break;
        }
        // SAFETY: a live event: its opaque and its error (string copied).
        let (i, error) = unsafe {
            let i = rd::rd_kafka_event_opaque(event.ptr()) as usize;
            let code = rd::rd_kafka_event_error(event.ptr());
            let error = (code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| {
                Error::code(
                    Code(code as i32),
                    text(rd::rd_kafka_event_error_string(event.ptr())),
                )
            });
            (i, error)
        };
        if i >= n || out[i].is_some() {
            continue; // not ours (cannot happen on a private queue)
        }
        outstanding -= 1;
        out[i] = Some(match error {
            Some(e) => Err(e.context(what).context(cluster)),
            None => read(i, event.ptr()),
        });
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(Error::Client("not sent".into())
                    .context(what)
                    .context(cluster))
            })
        })
        .collect()
}

/// Blocking: the committed offsets of each of `groups` (`(name, C name)`), one
/// ListConsumerGroupOffsets request per group; partitions without a committed offset are
/// left out. One result per group, in order; errors start with `cluster`.
pub fn list_group_offsets<C: ClientContext>(
    admin: &AdminClient<C>,
    groups: &[(&str, &CStr)],
    timeout: Duration,
    cluster: &str,
) -> Vec<Result<Vec<GroupOffset>, Error>> {
    let what = "list consumer group offsets";
    // SAFETY: `submit` enqueues one request; the group's name lives across the call and
    // librdkafka copies the request, destroyed right after. `read` copies everything out.
    unsafe {
        run_many(
            admin,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
            groups.len(),
            (cluster, what, timeout),
            |k, rk, options, queue| {
                let mut req = [rd::rd_kafka_ListConsumerGroupOffsets_new(
                    groups[k].1.as_ptr(),
                    std::ptr::null(),
                )];
                rd::rd_kafka_ListConsumerGroupOffsets(rk, req.as_mut_ptr(), 1, options, queue);
                rd::rd_kafka_ListConsumerGroupOffsets_destroy(req[0]);
            },
            |k, event| {
                let group = groups[k].0;
                let result = rd::rd_kafka_event_ListConsumerGroupOffsets_result(event);
                if result.is_null() {
                    return Err(unexpected_event(cluster, what));
                }
                let mut count = 0usize;
                let answers = array(
                    rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count),
                    count,
                );
                read_group_result(answers, group, true).map_err(|e| {
                    e.context(format!("group {group:?}"))
                        .context(what)
                        .context(cluster)
                })
            },
        )
    }
}

/// Blocking: commits offsets to groups (`(name, C name, offsets)`; the broker refuses it for
/// a group with active members), one AlterConsumerGroupOffsets request per group. One result
/// per group, in order: a group succeeds only if every partition did.
pub fn alter_group_offsets<C: ClientContext>(
    admin: &AdminClient<C>,
    commits: &[(&str, &CStr, &TopicPartitionList)],
    timeout: Duration,
    cluster: &str,
) -> Vec<Result<(), Error>> {
    let what = "commit consumer group offsets";
    // SAFETY: `submit` enqueues one request; name and list live across the call and
    // librdkafka copies both into the request, destroyed right after. `read` copies
    // everything out.
    unsafe {
        run_many(
            admin,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS,
            commits.len(),
            (cluster, what, timeout),
            |k, rk, options, queue| {
                let (_, name, tpl) = commits[k];
                let mut req = [rd::rd_kafka_AlterConsumerGroupOffsets_new(
                    name.as_ptr(),
                    tpl.ptr(),
                )];
                rd::rd_kafka_AlterConsumerGroupOffsets(rk, req.as_mut_ptr(), 1, options, queue);
                rd::rd_kafka_AlterConsumerGroupOffsets_destroy(req[0]);
            },
            |k, event| {
                let group = commits[k].0;
                let result = rd::rd_kafka_event_AlterConsumerGroupOffsets_result(event);
                if result.is_null() {
                    return Err(unexpected_event(cluster, what));
                }
                let mut count = 0usize;
                let answers = array(
                    rd::rd_kafka_AlterConsumerGroupOffsets_result_groups(result, &mut count),
                    count,
                );
                read_group_result(answers, group, false)
                    .map(|_| ())
                    .map_err(|e| {
                        e.context(format!("group {group:?}"))
                            .context(what)
                            .context(cluster)
                    })
            },
        )
    }
}

/// Blocking: end offsets (high watermarks) of the partitions of `tpl` in one ListOffsets
/// call (`tpl`'s offsets are the spec: `Offset::End`). Partitions the cluster reports an
/// error for are left out of the map.
pub fn end_offsets<C: ClientContext>(
    admin: &AdminClient<C>,
    tpl: &TopicPartitionList,
    timeout: Duration,
    cluster: &str,
) -> Result<HashMap<(String, i32), i64>, Error> {
    let what = "list end offsets";
    // SAFETY: `submit` enqueues one request; the list lives across the call and librdkafka
    // copies it. `read` copies everything out.
    let mut results = unsafe {
        run_many(
            admin,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTOFFSETS,
            1,
            (cluster, what, timeout),
            |_, rk, options, queue| rd::rd_kafka_ListOffsets(rk, tpl.ptr(), options, queue),
            |_, event| {
                let result = rd::rd_kafka_event_ListOffsets_result(event);
                if result.is_null() {
                    return Err(unexpected_event(cluster, what));
                }
                let mut count = 0usize;
                let infos = array(
                    rd::rd_kafka_ListOffsets_result_infos(result, &mut count),
                    count,
                );
                let mut ends = HashMap::with_capacity(infos.len());
                for info in infos {
                    let Some(p) =
                        rd::rd_kafka_ListOffsetsResultInfo_topic_partition(*info).as_ref()
                    else {
                        continue;
                    };
                    if p.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || p.offset < 0
                    {
                        continue;
                    }
                    ends.insert((text(p.topic), p.partition), p.offset);
                }
                Ok(ends)
            },
        )
    };
    results.pop().unwrap_or_else(|| {
        Err(Error::Protocol("no answer".into())
            .context(what)
            .context(cluster))
    })
}

/// An answer of another call than the one asked.
fn unexpected_event(cluster: &str, what: &str) -> Error {
    Error::Protocol("unexpected event type".into())
        .context(what)
        .context(cluster)
}

/// Elements of a librdkafka partition list.
///
/// # Safety
/// `list` must be null or a live list that outlives the returned slice.
unsafe fn partitions<'a>(
    list: *const rd::rd_kafka_topic_partition_list_t,
) -> &'a [rd::rd_kafka_topic_partition_t] {
    // SAFETY: a live list (the caller's contract): `cnt` elements at `elems`.
    unsafe {
        match list.as_ref() {
            Some(l) if l.cnt > 0 => array(l.elems, l.cnt as usize),
            _ => &[],
        }
    }
}

/// Metadata of a partition element, as text.
///
/// # Safety
/// `p` must be a live element.
unsafe fn metadata(p: &rd::rd_kafka_topic_partition_t) -> String {
    // SAFETY: a live element (the caller's contract): `metadata_size` bytes at `metadata`.
    let bytes = unsafe { array(p.metadata as *const u8, p.metadata_size) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Reads the single group result of a group-offsets answer: its partitions (with offsets
/// when `with_offsets`), or the first group- or partition-level error.
///
/// # Safety
/// `groups` must hold live group results.
unsafe fn read_group_result(
    groups: &[*const rd::rd_kafka_group_result_t],
    group: &str,
    with_offsets: bool,
) -> Result<Vec<GroupOffset>, Error> {
    // SAFETY: live group results (the caller's contract), with their names, errors and
    // partition lists; everything is copied out.
    unsafe {
        let g = groups
            .iter()
            .copied()
            .find(|g| {
                let name = rd::rd_kafka_group_result_name(*g);
                !name.is_null() && CStr::from_ptr(name).to_bytes() == group.as_bytes()
            })
            .ok_or_else(|| Error::Protocol("group missing from the answer".into()))?;
        if let Some(e) = error_of(rd::rd_kafka_group_result_error(g)) {
            return Err(e);
        }
        let mut out = Vec::new();
        for p in partitions(rd::rd_kafka_group_result_partitions(g)) {
            let topic = text(p.topic);
            if p.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(code_error(p.err).context(format!("{topic}/{}", p.partition)));
            }
            if with_offsets && p.offset < 0 {
                continue; // no committed offset
            }
            out.push(GroupOffset {
                topic,
                partition: p.partition,
                offset: p.offset,
                metadata: metadata(p),
            });
        }
        Ok(out)
    }
}
