//! The continuous audit of one worker: every `spec.audit.intervalSeconds` it compares a range
//! of about `recordsPerPartition` records of each partition the engine owns, the next range
//! of each partition starting where the last ended and going back to the log start once it
//! reaches the committed progress. It reports into the worker's entry (`audit`) and the
//! metrics `mirrorflow_worker_audit_records_total{result}` and
//! `mirrorflow_worker_audit_runs_total{outcome}`; it never touches replication.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use prometheus::{IntCounterVec, Opts, Registry};
use tokio::sync::watch;
use tracing::{info, warn};

use super::compare::Kind;
use super::flow::{audit_partitions, read_mapping, Clients, FlowClusters, PartitionId};
use super::plan::{PartitionView, Request};
use super::read::{SyncReader, Syncs};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::status::MAX_AUDIT_MISMATCHES;
use crate::api::{AuditCounts, AuditReport, MirrorFlowSpec};
use crate::kafka::config::client_properties;
use crate::kafka::wire::offset_syncs_topic;
use crate::worker::replicate::WorkerSnapshot;

/// `mirrorflow_worker_audit_records_total{result}` and `mirrorflow_worker_audit_runs_total{outcome}`.
#[derive(Clone)]
pub struct AuditMetrics {
    records: IntCounterVec,
    runs: IntCounterVec,
}

/// Every `result` label.
pub const RESULTS: [Kind; 6] = [
    Kind::Matched,
    Kind::Missing,
    Kind::Extra,
    Kind::Different,
    Kind::Duplicated,
    Kind::Skipped,
];

impl AuditMetrics {
    /// Registers the series on `registry`.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let records = IntCounterVec::new(
            Opts::new(
                "mirrorflow_worker_audit_records_total",
                "Records the continuous audit compared, by result: matched, missing, extra, different, duplicated, skipped",
            ),
            &["result"],
        )?;
        registry.register(Box::new(records.clone()))?;
        for k in RESULTS {
            records.with_label_values(&[k.label()]);
        }
        // A run that stops happening (or keeps failing) shows here before anything else does.
        let runs = IntCounterVec::new(
            Opts::new(
                "mirrorflow_worker_audit_runs_total",
                "Runs of the continuous audit, by outcome: finished (compared what it owned) or failed (see status.workers[].audit.lastError)",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(runs.clone()))?;
        for o in ["finished", "failed"] {
            runs.with_label_values(&[o]);
        }
        Ok(Self { records, runs })
    }
}

/// The audit of one worker.
pub struct AuditRunner {
    /// The flow's namespace and name (the progress topic).
    pub namespace: String,
    /// The flow's name.
    pub flow: String,
    /// Where the clusters' Secrets are.
    pub secrets_dir: PathBuf,
    /// The flow's spec, as it changes.
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// The engine's snapshots: the partitions it owns.
    pub owned: watch::Receiver<WorkerSnapshot>,
    /// Where the report goes (the worker's entry).
    pub state: watch::Sender<Option<AuditReport>>,
    /// The metric, if registered.
    pub metrics: Option<AuditMetrics>,
}

/// What the runner keeps between runs.
#[derive(Default)]
struct Memory {
    cursors: HashMap<PartitionId, i64>,
    /// Per partition, its last range's first mismatch.
    mismatches: BTreeMap<PartitionId, String>,
    report: AuditReport,
    /// The offset-syncs topic, read on from where the last run stopped.
    syncs: Option<SyncReader>,
}

impl AuditRunner {
    /// Runs until `stop` completes.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let mut memory = Memory::default();
        loop {
            let audit = self.spec.borrow().audit.clone();
            let every = Duration::from_secs(u64::from(audit.interval_seconds.max(1)));
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(every) => {}
            }
            if !audit.enabled {
                memory = Memory::default();
                let _ = self.state.send(None);
                continue;
            }
            let run = self.run_once(&mut memory, u64::from(audit.records_per_partition));
            let result = tokio::select! {
                _ = &mut stop => return,
                r = run => r,
            };
            if let Some(m) = &self.metrics {
                let outcome = if result.is_ok() { "finished" } else { "failed" };
                m.runs.with_label_values(&[outcome]).inc();
            }
            memory.report.last_error = result.err();
            if let Some(e) = &memory.report.last_error {
                warn!(error = %e, "integrity audit could not run");
            }
            let _ = self.state.send(Some(memory.report.clone()));
        }
    }

    async fn run_once(&self, memory: &mut Memory, records: u64) -> Result<(), String> {
        let spec = self.spec.borrow().clone();
        let owned: Vec<PartitionId> = self
            .owned
            .borrow()
            .partitions
            .iter()
            .map(|p| PartitionId {
                topic: p.topic.clone(),
                partition: p.partition,
            })
            .collect();
        memory.mismatches.retain(|id, _| owned.contains(id));
        memory.cursors.retain(|id, _| owned.contains(id));
        if owned.is_empty() {
            memory.report.last_run_time = Some(Time(Timestamp::now()));
            return Ok(());
        }
        let flow = FlowClusters {
            source: client_properties(&spec.source, &self.secrets_dir)
                .map_err(|e| format!("spec.source: {e}"))?,
            target: client_properties(&spec.target, &self.secrets_dir)
                .map_err(|e| format!("spec.target: {e}"))?,
            spec,
            namespace: self.namespace.clone(),
            name: self.flow.clone(),
        };
        let timeout = Duration::from_secs(30);
        let clients = Clients::new(&flow)?;
        let syncs = catch_up_syncs(&flow, &mut memory.syncs, &owned, timeout).await?;
        let mapping = read_mapping(&flow, &clients, None, syncs, timeout).await?;
        let cursors = &memory.cursors;
        let reports = audit_partitions(
            &flow,
            &clients,
            &mapping,
            &owned,
            |id, view| {
                Some(Request {
                    from: Some(cursors.get(id).copied().unwrap_or(view.source.0)),
                    to: None,
                    records: Some(records),
                })
            },
            timeout,
        )
        .await?;
        for (r, view) in reports {
            let id = PartitionId {
                topic: r.topic.clone(),
                partition: r.partition,
            };
            if let Some(view) = view {
                memory
                    .cursors
                    .insert(id.clone(), next_from(r.source_range, &view));
            }
            let o = &r.outcome;
            if let Some(m) = &self.metrics {
                for k in RESULTS {
                    m.records.with_label_values(&[k.label()]).inc_by(o.count(k));
                }
            }
            let c = &mut memory.report.records;
            *c = AuditCounts {
                compared: c.compared + o.compared,
                missing: c.missing + o.missing,
                extra: c.extra + o.extra,
                different: c.different + o.different,
                duplicated: c.duplicated + o.duplicated,
                skipped: c.skipped + o.skipped,
            };
            match o.first_mismatch() {
                Some(f) if !o.clean() => {
                    let text = mismatch_text(&r.topic, r.partition, f);
                    if memory.mismatches.get(&id) != Some(&text) {
                        warn!(mismatch = %text, "integrity audit found a mismatch");
                    }
                    memory.mismatches.insert(id, text);
                }
                _ => {
                    memory.mismatches.remove(&id);
                }
            }
        }
        memory.report.mismatches = memory
            .mismatches
            .values()
            .take(MAX_AUDIT_MISMATCHES)
            .cloned()
            .collect();
        memory.report.last_run_time = Some(Time(Timestamp::now()));
        info!(
            compared = memory.report.records.compared,
            mismatches = memory.mismatches.len(),
            "integrity audit run finished"
        );
        Ok(())
    }
}

/// The offset syncs of `owned`, read on from the last run (a new reader after a failure).
async fn catch_up_syncs(
    flow: &FlowClusters,
    slot: &mut Option<SyncReader>,
    owned: &[PartitionId],
    timeout: Duration,
) -> Result<Syncs, String> {
    let owned: Vec<(String, i32)> = owned
        .iter()
        .map(|p| (p.topic.clone(), p.partition))
        .collect();
    // A partition newly owned needs the syncs the reader dropped: read again from the start.
    let mut reader = match slot.take().filter(|r| r.covers(owned.iter())) {
        Some(r) => r,
        None => SyncReader::new(
            &flow.target.to_client_config(),
            &offset_syncs_topic(&flow.spec.source.alias),
        )?,
    };
    reader.keep_only(owned);
    let (reader, result) = crate::kafka::blocking(move || {
        let r = reader.catch_up(timeout);
        (reader, r)
    })
    .await?;
    result?;
    let syncs = reader.syncs().clone();
    *slot = Some(reader);
    Ok(syncs)
}

/// Where the next range of a partition starts: after the one just compared, or back at the
/// log start once the committed progress is reached. Pure.
pub fn next_from(compared: Option<(i64, i64)>, view: &PartitionView) -> i64 {
    let end = view.progress.unwrap_or(view.source.0).min(view.source.1);
    match compared {
        Some((_, to)) if to < end => to,
        _ => view.source.0,
    }
}

/// `<kind> in <topic>/<partition>: source offset <o>, target offset <o>`. Pure.
pub fn mismatch_text(topic: &str, partition: i32, f: &super::compare::Finding) -> String {
    let mut at = Vec::new();
    if let Some(o) = f.source_offset {
        at.push(format!("source offset {o}"));
    }
    if let Some(o) = f.target_offset {
        at.push(format!("target offset {o}"));
    }
    let fields = if f.fields.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = f.fields.iter().map(ToString::to_string).collect();
        format!(" ({} differ)", names.join(", "))
    };
    format!(
        "{} in {topic}/{partition}: {}{fields}",
        f.kind.label(),
        at.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::audit::compare::{Field, Finding};

    #[test]
    fn the_next_range_moves_on_then_wraps() {
        let view = PartitionView {
            source: (100, 1_000),
            target: (0, 900),
            progress: Some(900),
            syncs: vec![],
        };
        assert_eq!(next_from(Some((100, 400)), &view), 400);
        assert_eq!(next_from(Some((800, 900)), &view), 100);
        assert_eq!(next_from(None, &view), 100);
    }

    #[test]
    fn a_mismatch_names_topic_partition_offsets_and_kind() {
        let f = Finding {
            kind: Kind::Different,
            source_offset: Some(7),
            target_offset: Some(9),
            fields: vec![Field::Value],
        };
        assert_eq!(
            mismatch_text("orders", 2, &f),
            "different in orders/2: source offset 7, target offset 9 (value differ)"
        );
    }
}
