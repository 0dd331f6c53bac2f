//! `mirrorflow audit`: compares a flow's source records with their copies on the target
//! (`worker::audit`) over a whole range, by default everything both sides still hold, and
//! prints per partition what was compared and found (matched, missing, extra, different,
//! duplicated, skipped) with the first mismatch. Fails (exit code 1) when anything is
//! missing, extra or different, or duplicates are beyond what the delivery allows.
//!
//! Memory: the comparison holds about 60 bytes per record of a partition's range (hashes,
//! never payloads); narrow a very long partition with `--from`/`--to`.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::Serialize;

use super::flow_source::{FlowSource, LoadedFlow, Side};
use super::table;
use crate::kafka::config::client_properties;
use crate::kafka::wire::offset_syncs_topic;
use crate::worker::audit::compare::Kind;
use crate::worker::audit::flow::{
    audit_partitions, read_mapping, totals, Clients, FlowClusters, PartitionReport,
};
use crate::worker::audit::plan::Request;
use crate::worker::audit::read::offset_syncs;

/// Output format of `audit`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditOutput {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The report as JSON.
    Json,
}

/// Arguments of `mirrorflow audit`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct AuditArgs {
    /// The flow (`--flow` or `--flow-ref`) and its Secrets.
    #[command(flatten)]
    pub source: FlowSource,
    /// Only this topic (source or target name).
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Only this partition.
    #[arg(long, value_name = "PARTITION")]
    pub partition: Option<i32>,
    /// First source offset (default: the log start).
    #[arg(long, value_name = "OFFSET")]
    pub from: Option<i64>,
    /// Source offset to stop before (default: the committed progress).
    #[arg(long, value_name = "OFFSET")]
    pub to: Option<i64>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = AuditOutput::Table)]
    pub output: AuditOutput,
    /// Bound for each cluster call and range read, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout_seconds: u64,
}

/// The whole report for `-o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// `namespace/name` of the flow.
    pub flow: String,
    /// Nothing missing, extra or different anywhere.
    pub clean: bool,
    /// Per partition.
    pub partitions: Vec<PartitionReport>,
}

/// The report as a table. Pure.
pub fn render(report: &AuditReport) -> String {
    let mut rows = vec![[
        "TOPIC",
        "PARTITION",
        "SOURCE",
        "TARGET",
        "COMPARED",
        "MATCHED",
        "MISSING",
        "EXTRA",
        "DIFFERENT",
        "DUPLICATED",
        "SKIPPED",
        "FIRST MISMATCH",
    ]
    .map(String::from)
    .to_vec()];
    let range = |r: Option<(i64, i64)>| r.map_or("-".to_string(), |(a, b)| format!("{a}-{b}"));
    for p in &report.partitions {
        let o = &p.outcome;
        let first = match (o.first_mismatch(), &p.not_compared) {
            (Some(f), _) => f.to_string(),
            (None, Some(why)) => format!("({why})"),
            (None, None) => "-".into(),
        };
        let dup = if o.duplicates_flagged {
            format!("{} (flagged)", o.duplicated)
        } else {
            o.duplicated.to_string()
        };
        rows.push(vec![
            p.topic.clone(),
            p.partition.to_string(),
            range(p.source_range),
            range(p.target_range),
            o.compared.to_string(),
            o.matched.to_string(),
            o.missing.to_string(),
            o.extra.to_string(),
            o.different.to_string(),
            dup,
            o.skipped.to_string(),
            first,
        ]);
    }
    let mut out = format!("audit of flow {}\n", report.flow);
    out.push_str(&table(&rows));
    let t = totals(&report.partitions);
    let _ = writeln!(
        out,
        "{}: {} partition(s), matched {}, missing {}, extra {}, different {}, duplicated {}, skipped {}",
        if report.clean { "clean" } else { "MISMATCH" },
        report.partitions.len(),
        t[&Kind::Matched],
        t[&Kind::Missing],
        t[&Kind::Extra],
        t[&Kind::Different],
        t[&Kind::Duplicated],
        t[&Kind::Skipped],
    );
    out
}

/// The flow and both clusters' client properties, from `--flow` or `--flow-ref`; the
/// temporary Secrets directory (flow-ref) lives as long as the returned value.
async fn access(args: &AuditArgs) -> anyhow::Result<(FlowClusters, LoadedFlow)> {
    let loaded = args.source.load(&[Side::Source, Side::Target]).await?;
    let spec = loaded.flow.spec.clone();
    let source = client_properties(&spec.source, loaded.secrets_dir()).context("spec.source")?;
    let target = client_properties(&spec.target, loaded.secrets_dir()).context("spec.target")?;
    let flow = FlowClusters {
        namespace: loaded.namespace(),
        name: loaded.name(),
        spec,
        source,
        target,
    };
    Ok((flow, loaded))
}

/// Audits the flow as `args` say.
pub async fn audit(args: &AuditArgs) -> anyhow::Result<AuditReport> {
    let (flow, _secrets) = access(args).await?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    let clients = Clients::new(&flow).map_err(anyhow::Error::msg)?;
    let syncs = offset_syncs(
        &flow.target.to_client_config(),
        &offset_syncs_topic(&flow.spec.source.alias),
        timeout,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let mapping = read_mapping(&flow, &clients, args.topic.as_deref(), syncs, timeout)
        .await
        .map_err(anyhow::Error::msg)?;
    if let Some(t) = &args.topic {
        if mapping.topics.is_empty() {
            bail!(
                "topic {t:?} is not replicated by flow {}/{}",
                flow.namespace,
                flow.name
            );
        }
    }
    let partitions: Vec<_> = mapping
        .partitions()
        .into_iter()
        .filter(|p| args.partition.is_none_or(|want| p.partition == want))
        .collect();
    let request = Request {
        from: args.from,
        to: args.to,
        records: None,
    };
    let reports = audit_partitions(
        &flow,
        &clients,
        &mapping,
        &partitions,
        |_, _| Some(request),
        timeout,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let partitions: Vec<PartitionReport> = reports.into_iter().map(|(r, _)| r).collect();
    Ok(AuditReport {
        flow: format!("{}/{}", flow.namespace, flow.name),
        clean: partitions.iter().all(PartitionReport::clean),
        partitions,
    })
}

/// `mirrorflow audit`: prints the report; an error when it is not clean.
pub async fn run_audit(args: AuditArgs) -> anyhow::Result<()> {
    let report = audit(&args).await?;
    match args.output {
        AuditOutput::Table => print!("{}", render(&report)),
        AuditOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("plain data")
        ),
    }
    let bad = report.partitions.iter().filter(|p| !p.clean()).count();
    if bad > 0 {
        bail!(
            "integrity mismatch in {bad} partition(s) of flow {}",
            report.flow
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::audit::compare::{Finding, Outcome};

    fn report(topic: &str, outcome: Outcome, not_compared: Option<&str>) -> PartitionReport {
        PartitionReport {
            topic: topic.into(),
            target_topic: format!("dc1.{topic}"),
            partition: 0,
            source_range: Some((0, 10)),
            target_range: Some((0, 11)),
            not_compared: not_compared.map(String::from),
            outcome,
        }
    }

    #[test]
    fn the_table_names_the_first_mismatch_and_the_verdict() {
        let extra = Outcome {
            compared: 11,
            matched: 10,
            extra: 1,
            findings: vec![Finding {
                kind: Kind::Extra,
                source_offset: None,
                target_offset: Some(4),
                fields: vec![],
            }],
            ..Outcome::default()
        };
        let clean = Outcome {
            compared: 10,
            matched: 10,
            ..Outcome::default()
        };
        let parts = vec![
            report("a", extra, None),
            report("b", clean, None),
            report(
                "c",
                Outcome::default(),
                Some("no committed progress: never replicated"),
            ),
        ];
        let r = AuditReport {
            flow: "ns/f".into(),
            clean: parts.iter().all(PartitionReport::clean),
            partitions: parts,
        };
        let text = render(&r);
        assert!(text.contains("extra target offset 4"), "{text}");
        assert!(
            text.contains("(no committed progress: never replicated)"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "MISMATCH: 3 partition(s), matched 20, missing 0, extra 1, different 0, duplicated 0, skipped 0\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["partitions"][0]["extra"], 1);
        assert_eq!(json["partitions"][0]["findings"][0]["targetOffset"], 4);
        assert_eq!(json["clean"], false);
    }
}
