//! One audit of a flow's partitions: the mapping (committed progress, offset syncs, log
//! bounds) read once, then per partition [`plan`](super::plan::plan), the two range reads and
//! [`compare`](super::compare::compare). Shared by `mirrorflow audit` and the worker's
//! continuous audit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::compare::{compare, Anchor, Input, Kind, Outcome};
use super::plan::{plan, Nothing, PartitionView, RangePlan, Request};
use super::read::{compacted, RangeReader, ReadError, Syncs};
use crate::api::MirrorFlowSpec;
use crate::kafka::config::ClientProperties;
use crate::kafka::context::LogContext;
use crate::kafka::topics::{admin_client, list_topics, meta_client, MetaClient};
use crate::kafka::wire::progress_topic;
use crate::worker::replicate::io::{read_progress, watermarks};
use crate::worker::replicate::settings::Tuning;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// A flow and its clusters.
#[derive(Clone)]
pub struct FlowClusters {
    /// The flow's spec.
    pub spec: MirrorFlowSpec,
    /// Its namespace (names the progress topic).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Source client properties.
    pub source: ClientProperties,
    /// Target client properties.
    pub target: ClientProperties,
}

/// One source partition to audit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

/// What the audit of one partition found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionReport {
    /// Source topic.
    pub topic: String,
    /// Target topic.
    pub target_topic: String,
    /// Partition.
    pub partition: i32,
    /// Source offsets compared `[from, to)`, if a range was planned.
    pub source_range: Option<(i64, i64)>,
    /// Target offsets compared `[from, to)`.
    pub target_range: Option<(i64, i64)>,
    /// Why nothing was compared, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_compared: Option<String>,
    /// What the comparison found.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl PartitionReport {
    /// Nothing missing, extra or different (and no flagged duplicates).
    pub fn clean(&self) -> bool {
        self.outcome.clean()
    }
}

/// The mapping of a flow as read at one moment.
pub struct Mapping {
    /// Source topic → target topic, partition count (selected topics only).
    pub topics: BTreeMap<String, (String, i32)>,
    progress: HashMap<(String, i32), i64>,
    syncs: Syncs,
    source_compacted: BTreeMap<String, bool>,
    target_compacted: BTreeMap<String, bool>,
}

/// Clients the audit keeps between runs.
pub struct Clients {
    source_meta: MetaClient,
    target_meta: MetaClient,
    source_reader: Arc<RangeReader>,
    target_reader: Arc<RangeReader>,
}

impl Clients {
    /// Clients for `flow`'s clusters.
    pub fn new(flow: &FlowClusters) -> Result<Self, String> {
        let (s, t) = (&flow.spec.source.alias, &flow.spec.target.alias);
        let meta = |p: &ClientProperties, alias: &str| {
            meta_client(p, LogContext::new(alias)).map_err(|e| format!("{alias}: {e}"))
        };
        Ok(Self {
            source_meta: meta(&flow.source, s)?,
            target_meta: meta(&flow.target, t)?,
            source_reader: Arc::new(RangeReader::new(
                &flow.source.to_client_config(),
                &format!("source cluster {s}"),
            )?),
            target_reader: Arc::new(RangeReader::new(
                &flow.target.to_client_config(),
                &format!("target cluster {t}"),
            )?),
        })
    }
}

/// Reads the mapping: the selected topics (or `only`), progress, cleanup policies; the
/// offset syncs are the caller's (`read::offset_syncs`, or a worker's `read::SyncReader`).
pub async fn read_mapping(
    flow: &FlowClusters,
    clients: &Clients,
    only: Option<&str>,
    syncs: Syncs,
    timeout: Duration,
) -> Result<Mapping, String> {
    let filter = TopicFilter::new(&flow.spec)?;
    let listed = list_topics(&clients.source_meta, timeout)
        .await
        .map_err(|e| format!("source cluster {}: {e}", flow.spec.source.alias))?;
    let topics: BTreeMap<String, (String, i32)> = listed
        .into_iter()
        .filter(|(t, _)| filter.decide(t) == TopicDecision::Replicate)
        .map(|(t, n)| {
            let target = filter.target_topic(&t);
            (t, (target, n))
        })
        .filter(|(t, (target, _))| only.is_none_or(|o| o == t || o == target))
        .collect();
    let progress = read_progress(
        &flow.target,
        LogContext::new(&flow.spec.target.alias),
        &progress_topic(&flow.namespace, &flow.name),
        timeout,
    )
    .await
    .map_err(|e| format!("progress of flow {}/{}: {e:?}", flow.namespace, flow.name))?
    .into_iter()
    .map(|(k, p)| (k, p.next_offset))
    .collect();
    let alias = |a: &str| LogContext::new(a);
    let source_admin =
        admin_client(&flow.source, alias(&flow.spec.source.alias)).map_err(|e| e.to_string())?;
    let target_admin =
        admin_client(&flow.target, alias(&flow.spec.target.alias)).map_err(|e| e.to_string())?;
    let names: Vec<String> = topics.keys().cloned().collect();
    let target_names: Vec<String> = topics.values().map(|(t, _)| t.clone()).collect();
    Ok(Mapping {
        source_compacted: compacted(&source_admin, &names, timeout).await?,
        target_compacted: compacted(&target_admin, &target_names, timeout).await?,
        topics,
        progress,
        syncs,
    })
}

impl Mapping {
    /// Every selected source partition.
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.topics
            .iter()
            .flat_map(|(t, (_, n))| {
                (0..*n).map(|p| PartitionId {
                    topic: t.clone(),
                    partition: p,
                })
            })
            .collect()
    }
}

/// Audits `partitions` with `request(partition, view)` choosing each range (or `None`:
/// nothing this time).
pub async fn audit_partitions(
    flow: &FlowClusters,
    clients: &Clients,
    mapping: &Mapping,
    partitions: &[PartitionId],
    mut request: impl FnMut(&PartitionId, &PartitionView) -> Option<Request>,
    timeout: Duration,
) -> Result<Vec<(PartitionReport, Option<PartitionView>)>, String> {
    let target_of = |id: &PartitionId| (mapping.topics[&id.topic].0.clone(), id.partition);
    let wanted: Vec<&PartitionId> = partitions
        .iter()
        .filter(|id| mapping.topics.contains_key(&id.topic))
        .collect();
    // Target bounds first: every copy on the target is then of a record below the source
    // end read after.
    let t_marks = watermarks(
        &clients.target_meta,
        wanted.iter().map(|id| target_of(id)).collect(),
        timeout,
    )
    .await
    .map_err(|e| format!("target cluster {}: {e}", flow.spec.target.alias))?;
    let s_marks = watermarks(
        &clients.source_meta,
        wanted
            .iter()
            .map(|id| (id.topic.clone(), id.partition))
            .collect(),
        timeout,
    )
    .await
    .map_err(|e| format!("source cluster {}: {e}", flow.spec.source.alias))?;
    let delivery = flow.spec.delivery;
    let duplicate_bound = Tuning::for_spec(&flow.spec).batch.max_records as u64;
    let mut out = Vec::new();
    for id in wanted {
        let (target_topic, _) = target_of(id);
        let key = (id.topic.clone(), id.partition);
        let mut report = PartitionReport {
            topic: id.topic.clone(),
            target_topic: target_topic.clone(),
            partition: id.partition,
            source_range: None,
            target_range: None,
            not_compared: None,
            outcome: Outcome::default(),
        };
        let s = s_marks.get(&key).cloned();
        let t = t_marks.get(&(target_topic.clone(), id.partition)).cloned();
        let (source, target) = match (s, t) {
            (Some(Ok(s)), Some(Ok(t))) => (s, t),
            (s, t) => {
                report.not_compared =
                    Some(format!("log bounds unknown (source {s:?}, target {t:?})"));
                out.push((report, None));
                continue;
            }
        };
        let view = PartitionView {
            source,
            target,
            progress: mapping.progress.get(&key).copied(),
            syncs: mapping.syncs.get(&key).cloned().unwrap_or_default(),
        };
        let Some(req) = request(id, &view) else {
            continue;
        };
        let range = match plan(&view, req) {
            Ok(r) => r,
            Err(n) => {
                if let Nothing::Empty { skipped } = n {
                    report.outcome.skipped = skipped;
                }
                report.not_compared = Some(describe(n));
                out.push((report, Some(view)));
                continue;
            }
        };
        report.source_range = Some(range.source);
        report.target_range = Some(range.target);
        let input = RangeInput {
            topic: id.topic.clone(),
            target_topic,
            partition: id.partition,
            range,
            source_low: view.source.0,
        };
        match read_and_compare(
            clients,
            input,
            delivery,
            duplicate_bound,
            (
                mapping
                    .source_compacted
                    .get(&id.topic)
                    .copied()
                    .unwrap_or(true),
                mapping
                    .target_compacted
                    .get(&report.target_topic)
                    .copied()
                    .unwrap_or(true),
            ),
            &view.syncs,
            timeout,
        )
        .await
        {
            Ok(o) => report.outcome = o,
            Err(ReadError::Gone(m)) => {
                report.outcome.skipped = (range.source.1 - range.source.0).max(0) as u64;
                report.not_compared = Some(m);
            }
            Err(ReadError::Failed(m)) => return Err(m),
        }
        out.push((report, Some(view)));
    }
    Ok(out)
}

struct RangeInput {
    topic: String,
    target_topic: String,
    partition: i32,
    range: RangePlan,
    /// The source's log start.
    source_low: i64,
}

async fn read_and_compare(
    clients: &Clients,
    input: RangeInput,
    delivery: crate::api::Delivery,
    duplicate_bound: u64,
    (source_compacted, target_compacted): (bool, bool),
    syncs: &[Anchor],
    timeout: Duration,
) -> Result<Outcome, ReadError> {
    let (tr, sr) = (clients.target_reader.clone(), clients.source_reader.clone());
    let RangeInput {
        topic,
        target_topic,
        partition,
        range,
        source_low,
    } = input;
    let sr_earlier = sr.clone();
    let topic_earlier = topic.clone();
    let (target, source) = crate::kafka::blocking(move || {
        let target = tr.read(&target_topic, partition, range.target, timeout)?;
        let source = sr.read(&topic, partition, range.source, timeout)?;
        Ok::<_, ReadError>((target, source))
    })
    .await
    .map_err(ReadError::Failed)??;
    let anchors: Vec<Anchor> = syncs
        .iter()
        .copied()
        .filter(|a| {
            (range.source.0..range.source.1).contains(&a.upstream)
                && (range.target.0..range.target.1).contains(&a.downstream)
        })
        .collect();
    let mut input = Input {
        source: &source,
        target: &target,
        anchors: &anchors,
        start: range.start,
        expect_below: range.expect_below,
        source_from: range.source.0,
        target_from: range.target.0,
        delivery,
        duplicate_bound,
        source_compacted,
        target_compacted,
        earlier: &[],
    };
    let mut outcome = compare(&input);
    // Extra records may be re-sent copies of records before the range (a re-send that
    // began there): compare again knowing the records a re-send can reach back to.
    let earlier_from = range
        .source
        .0
        .saturating_sub(i64::try_from(duplicate_bound).unwrap_or(i64::MAX))
        .max(source_low);
    if outcome.extra > 0 && earlier_from < range.source.0 {
        let span = (earlier_from, range.source.0);
        let earlier = crate::kafka::blocking(move || {
            sr_earlier.read(&topic_earlier, partition, span, timeout)
        })
        .await
        .map_err(ReadError::Failed)?;
        // Not readable (gone since the plan, or failing): the first comparison stands.
        if let Ok(earlier) = earlier {
            input.earlier = &earlier;
            outcome = compare(&input);
        }
    }
    outcome.skipped += range.skipped;
    Ok(outcome)
}

/// Why nothing was compared, for people.
pub fn describe(n: Nothing) -> String {
    match n {
        Nothing::NotReplicated => "no committed progress: never replicated".into(),
        Nothing::Empty { skipped: 0 } => "no replicated record in the range".into(),
        Nothing::Empty { skipped } => {
            format!("the source no longer holds the range ({skipped} offsets skipped)")
        }
        Nothing::NoSyncs => "no two offset syncs bound a range".into(),
    }
}

/// The counts of `reports` by kind (for totals and metrics).
pub fn totals<'a>(reports: impl IntoIterator<Item = &'a PartitionReport>) -> BTreeMap<Kind, u64> {
    let mut out = BTreeMap::new();
    for r in reports {
        for k in [
            Kind::Matched,
            Kind::Missing,
            Kind::Extra,
            Kind::Different,
            Kind::Duplicated,
            Kind::Skipped,
        ] {
            *out.entry(k).or_insert(0) += r.outcome.count(k);
        }
    }
    out
}
