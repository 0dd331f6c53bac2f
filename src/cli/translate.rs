//! `mirrorflow translate`: a group's checkpoints as the target sees them, for failover. The
//! decisions it prints (translation, whether a group may be moved) are the checkpoint
//! side's own (`worker::checkpoint::translate`); this is the operator's edge around them.
//!
//! Reads `<sourceAlias>.checkpoints.internal` on the target (the source may be down), and
//! prints per partition the group's source offset, the translated target offset, the target
//! end and the lag from there, and the group's committed offset on the target. With
//! `--apply` it commits the translated offsets to the group on the target: refused while
//! the group has active members there, never moving a partition backwards, and never past
//! the target's end.
//!
//! The flow comes from a file (`--flow`, Secrets from `--secrets-dir`) or from a cluster
//! (`--flow-ref NS/NAME`: the MirrorFlow and the target's Secrets read through the API with
//! the default kubeconfig). `-o table|json|yaml|csv`; `csv` is the reset plan of
//! `kafka-consumer-groups.sh --reset-offsets --from-file` (single group: `topic,partition,offset`
//! lines, no header, as Kafka's `ConsumerGroupCommand.parseResetPlan` reads them), holding the
//! partitions `--apply` would commit, so failover can be scripted.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rdkafka::Message as _;

use super::flow_source::{load_from_api, FlowSource, LoadedFlow, Side};
use super::table;
use crate::api::MirrorFlowSpec;
use crate::kafka::admin::{GroupAdmin, GroupOffset};
use crate::kafka::config::client_properties;
use crate::kafka::tail::TopicTail;
use crate::kafka::wire;
use crate::worker::checkpoint::runner::checkpoints_topic;
use crate::worker::checkpoint::translate::{
    decide_group_sync, GroupSyncDecision, TargetGroupState,
};

/// Output format of `translate`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TranslateOutput {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
    /// `topic,partition,offset` lines for `kafka-consumer-groups.sh --reset-offsets --from-file`.
    Csv,
}

/// Arguments of `mirrorflow translate`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct TranslateArgs {
    /// The flow (`--flow` or `--flow-ref`) and its target's Secrets.
    #[command(flatten)]
    pub source: FlowSource,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = TranslateOutput::Table)]
    pub output: TranslateOutput,
    /// Consumer group to translate.
    #[arg(long, value_name = "GROUP")]
    pub group: String,
    /// Commit the translated offsets to the group on the target (refused while the group has
    /// active members there; never moves a partition backwards).
    #[arg(long)]
    pub apply: bool,
    /// Bound for each cluster call, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub timeout_seconds: u64,
}

/// One partition of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateRow {
    /// Target topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The group's source offset in the checkpoint.
    pub source_offset: i64,
    /// Translated target offset in the checkpoint.
    pub target_offset: i64,
    /// Target end offset now, if the partition exists.
    pub target_end: Option<i64>,
    /// The group's committed offset on the target, if any.
    pub target_committed: Option<i64>,
}

impl TranslateRow {
    /// What would be committed: the translated offset, lowered to the target end (a
    /// truncated target must not get a position past its end).
    pub fn offset_to_commit(&self) -> i64 {
        match self.target_end {
            Some(end) => self.target_offset.min(end.max(0)),
            None => self.target_offset,
        }
    }

    /// Records the group reads on the target from the translated offset.
    pub fn lag(&self) -> Option<i64> {
        self.target_end
            .map(|end| (end - self.offset_to_commit()).max(0))
    }
}

/// Everything `translate` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateReport {
    /// Group id.
    pub group: String,
    /// Checkpoints topic read.
    pub checkpoints_topic: String,
    /// Members of the group on the target (`None`: the group does not exist there).
    pub target_members: Option<u32>,
    /// Per partition, by topic then partition.
    pub rows: Vec<TranslateRow>,
}

/// Per row, what `--apply` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowAction {
    /// Commit this offset.
    Commit(i64),
    /// The target group is already at or past it.
    AlreadyThere,
    /// The target partition does not exist: nothing to commit to.
    NoTargetPartition,
}

/// What `--apply` would do: refused (`Err`) while the group has active members, else one
/// action per row. Pure.
pub fn plan_apply(report: &TranslateReport) -> Result<Vec<RowAction>, String> {
    if let Some(m) = report.target_members.filter(|m| *m > 0) {
        return Err(format!(
            "group {:?} has {m} active member(s) on the target; stop them before applying (their commits would overwrite ours)",
            report.group
        ));
    }
    Ok(row_actions(report))
}

/// One action per row, whatever the group's members. Pure.
pub fn row_actions(report: &TranslateReport) -> Vec<RowAction> {
    report
        .rows
        .iter()
        .map(|r| {
            if r.target_end.is_none() {
                return RowAction::NoTargetPartition;
            }
            let state = TargetGroupState {
                exists: report.target_members.is_some(),
                active_members: 0,
                committed: r.target_committed,
            };
            match decide_group_sync(&state, r.offset_to_commit()) {
                GroupSyncDecision::Commit(o) => RowAction::Commit(o),
                _ => RowAction::AlreadyThere,
            }
        })
        .collect()
}

/// The reset plan `kafka-consumer-groups.sh --group G --reset-offsets --from-file F
/// --execute` reads for one group: `topic,partition,offset` per line, no header (Kafka's
/// `ConsumerGroupCommand.parseResetPlan`, single-group format). It holds the partitions
/// `--apply` would commit: a partition the target group is already at or past is left out
/// (the tool would move it backwards), and so is one that does not exist on the target. Pure.
pub fn render_csv(report: &TranslateReport) -> String {
    report
        .rows
        .iter()
        .zip(row_actions(report))
        .filter_map(|(r, a)| match a {
            RowAction::Commit(o) => Some(format!("{},{},{o}\n", r.topic, r.partition)),
            _ => None,
        })
        .collect()
}

/// The report for `-o json|yaml`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportView {
    pub group: String,
    pub checkpoints_topic: String,
    /// Members of the group on the target; absent: no such group there.
    pub target_members: Option<u32>,
    pub partitions: Vec<RowView>,
    /// Records the group reads on the target from the translated offsets.
    pub total_lag: i64,
}

/// One partition for `-o json|yaml`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowView {
    pub topic: String,
    pub partition: i32,
    pub source_offset: i64,
    /// The checkpoint's translated offset.
    pub target_offset: i64,
    pub target_end: Option<i64>,
    /// What `--apply` commits (the translated offset, lowered to the target end).
    pub offset_to_commit: i64,
    pub lag: Option<i64>,
    pub target_committed: Option<i64>,
    /// `commit`, `alreadyThere` or `noTargetPartition`.
    pub action: &'static str,
}

/// The report as the JSON/YAML view. Pure.
pub fn view(report: &TranslateReport) -> ReportView {
    ReportView {
        group: report.group.clone(),
        checkpoints_topic: report.checkpoints_topic.clone(),
        target_members: report.target_members,
        partitions: report
            .rows
            .iter()
            .zip(row_actions(report))
            .map(|(r, a)| RowView {
                topic: r.topic.clone(),
                partition: r.partition,
                source_offset: r.source_offset,
                target_offset: r.target_offset,
                target_end: r.target_end,
                offset_to_commit: r.offset_to_commit(),
                lag: r.lag(),
                target_committed: r.target_committed,
                action: match a {
                    RowAction::Commit(_) => "commit",
                    RowAction::AlreadyThere => "alreadyThere",
                    RowAction::NoTargetPartition => "noTargetPartition",
                },
            })
            .collect(),
        total_lag: report.rows.iter().filter_map(TranslateRow::lag).sum(),
    }
}

/// The report in `format` (`actions`: the table's ACTION column). Pure.
pub fn render_as(
    report: &TranslateReport,
    actions: Option<&[RowAction]>,
    format: TranslateOutput,
) -> String {
    match format {
        TranslateOutput::Table => render(report, actions),
        TranslateOutput::Csv => render_csv(report),
        TranslateOutput::Json => {
            let mut s = serde_json::to_string_pretty(&view(report)).expect("plain data");
            s.push('\n');
            s
        }
        TranslateOutput::Yaml => serde_yaml::to_string(&view(report)).expect("plain data"),
    }
}

/// The report as a table (plus the apply actions, when given). Pure.
pub fn render(report: &TranslateReport, actions: Option<&[RowAction]>) -> String {
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let mut header = vec![
        "TOPIC",
        "PARTITION",
        "SOURCE-OFFSET",
        "TARGET-OFFSET",
        "TARGET-END",
        "LAG",
        "TARGET-COMMITTED",
    ];
    if actions.is_some() {
        header.push("ACTION");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for (i, r) in report.rows.iter().enumerate() {
        let mut row = vec![
            r.topic.clone(),
            r.partition.to_string(),
            r.source_offset.to_string(),
            if r.offset_to_commit() < r.target_offset {
                format!(
                    "{} (clamped from {})",
                    r.offset_to_commit(),
                    r.target_offset
                )
            } else {
                r.target_offset.to_string()
            },
            opt(r.target_end),
            opt(r.lag()),
            opt(r.target_committed),
        ];
        if let Some(actions) = actions {
            row.push(match actions.get(i) {
                Some(RowAction::Commit(o)) => format!("commit {o}"),
                Some(RowAction::AlreadyThere) => "already there".into(),
                Some(RowAction::NoTargetPartition) => "no target partition".into(),
                None => "-".into(),
            });
        }
        rows.push(row);
    }
    let mut out = format!(
        "group {:?} (checkpoints from {}; target group: {})\n",
        report.group,
        report.checkpoints_topic,
        match report.target_members {
            None => "absent".to_string(),
            Some(0) => "no active members".to_string(),
            Some(m) => format!("{m} active member(s)"),
        }
    );
    out.push_str(&table(&rows));
    let total: i64 = report.rows.iter().filter_map(TranslateRow::lag).sum();
    let _ = writeln!(out, "total lag on the target: {total} record(s)");
    out
}

/// The flow's target cluster, ready to connect: the spec and the client config (whose
/// secret files live as long as `_flow` when they were read through the API).
pub struct TargetAccess {
    pub spec: MirrorFlowSpec,
    pub config: rdkafka::ClientConfig,
    _flow: LoadedFlow,
}

impl TargetAccess {
    fn new(flow: LoadedFlow) -> anyhow::Result<Self> {
        let config = client_properties(&flow.flow.spec.target, flow.secrets_dir())
            .context("spec.target")?
            .to_client_config();
        Ok(Self {
            spec: flow.flow.spec.clone(),
            config,
            _flow: flow,
        })
    }
}

/// Loads the flow from `--flow` or `--flow-ref` and builds the target's client config.
pub async fn target_access(args: &TranslateArgs) -> anyhow::Result<TargetAccess> {
    TargetAccess::new(args.source.load(&[Side::Target]).await?)
}

/// The MirrorFlow `ns/name` and its target's Secrets, read through `client` (see
/// [`load_from_api`]).
pub async fn target_from_api(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<TargetAccess> {
    TargetAccess::new(load_from_api(client, ns, name, &[Side::Target]).await?)
}

/// Reads the group's checkpoints and the target's view of the group.
pub async fn translate_group(args: &TranslateArgs) -> anyhow::Result<TranslateReport> {
    let access = target_access(args).await?;
    translate_with(args, &access).await
}

/// [`translate_group`] with the target already loaded.
pub async fn translate_with(
    args: &TranslateArgs,
    access: &TargetAccess,
) -> anyhow::Result<TranslateReport> {
    let spec = &access.spec;
    let target = access.config.clone();
    let timeout = Duration::from_secs(args.timeout_seconds.max(1));
    let topic = checkpoints_topic(spec);
    let what = format!("target cluster {}", spec.target.alias);
    let mut tail = TopicTail::new(&target, &topic, &what).map_err(anyhow::Error::msg)?;
    let group = args.group.clone();
    let latest = tokio::task::spawn_blocking(move || {
        let mut latest: BTreeMap<(String, i32), wire::Checkpoint> = BTreeMap::new();
        tail.catch_up(timeout, |m| {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                if let Ok(c) = wire::Checkpoint::decode(k, v) {
                    if c.group == group {
                        latest.insert((c.topic.clone(), c.partition), c);
                    }
                }
            }
        })?;
        Ok::<_, String>(latest)
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    if latest.is_empty() {
        bail!(
            "no checkpoint for group {:?} in topic {topic} on {what} (is an OffsetCheckpoint selecting it, and has a cycle run?)",
            args.group
        );
    }
    let admin = GroupAdmin::new(&target, &what, timeout).map_err(anyhow::Error::msg)?;
    let group = args.group.clone();
    let partitions: Vec<(String, i32)> = latest.keys().cloned().collect();
    let (ends, committed, members) = tokio::task::spawn_blocking(move || {
        let ends = admin.end_offsets(&partitions)?;
        let committed = admin
            .list_offsets(std::slice::from_ref(&group))
            .pop()
            .unwrap_or_else(|| Ok(Vec::new()))?;
        let members = admin
            .list_groups()?
            .into_iter()
            .find(|g| g.group == group)
            .map(|g| g.members);
        Ok::<_, String>((ends, committed, members))
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    let committed: HashMap<(String, i32), i64> = committed
        .into_iter()
        .map(|o| ((o.topic, o.partition), o.offset))
        .collect();
    Ok(TranslateReport {
        group: args.group.clone(),
        checkpoints_topic: topic,
        target_members: members,
        rows: latest
            .into_iter()
            .map(|(key, c)| TranslateRow {
                target_end: ends.get(&key).copied(),
                target_committed: committed.get(&key).copied(),
                topic: c.topic,
                partition: c.partition,
                source_offset: c.upstream_offset,
                target_offset: c.downstream_offset,
            })
            .collect(),
    })
}

/// `mirrorflow translate`: prints the report; with `--apply` commits and prints what it did.
pub async fn run_translate(args: TranslateArgs) -> anyhow::Result<()> {
    let access = target_access(&args).await?;
    let report = translate_with(&args, &access).await?;
    if !args.apply {
        print!("{}", render_as(&report, None, args.output));
        return Ok(());
    }
    let actions = match plan_apply(&report) {
        Ok(a) => a,
        Err(e) => {
            print!("{}", render_as(&report, None, args.output));
            bail!("refusing to apply: {e}");
        }
    };
    print!("{}", render_as(&report, Some(&actions), args.output));
    let commits: Vec<GroupOffset> = report
        .rows
        .iter()
        .zip(&actions)
        .filter_map(|(r, a)| match a {
            RowAction::Commit(o) => Some(GroupOffset {
                topic: r.topic.clone(),
                partition: r.partition,
                offset: *o,
                metadata: String::new(),
            }),
            _ => None,
        })
        .collect();
    // Notes go to stderr when stdout carries JSON, YAML or CSV.
    let note = |m: String| {
        if args.output == TranslateOutput::Table {
            println!("{m}");
        } else {
            eprintln!("{m}");
        }
    };
    if commits.is_empty() {
        note("nothing to commit: the target group is at or past every translated offset".into());
        return Ok(());
    }
    let what = format!("target cluster {}", access.spec.target.alias);
    let admin = GroupAdmin::new(
        &access.config,
        &what,
        Duration::from_secs(args.timeout_seconds.max(1)),
    )
    .map_err(anyhow::Error::msg)?;
    let group = args.group.clone();
    let n = commits.len();
    let result = tokio::task::spawn_blocking(move || admin.alter_offsets(&[(group, commits)]))
        .await?
        .pop()
        .unwrap_or_else(|| Err(crate::kafka::Error::Protocol("no answer".into())));
    match result {
        Ok(()) => {
            note(format!(
                "committed {n} partition(s) of group {:?} on the target",
                args.group
            ));
            Ok(())
        }
        Err(e) => bail!("commit failed (the group may have become active): {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use pretty_assertions::assert_eq;

    fn row(p: i32, target_offset: i64, end: Option<i64>, committed: Option<i64>) -> TranslateRow {
        TranslateRow {
            topic: "dc1.orders".into(),
            partition: p,
            source_offset: target_offset + 5,
            target_offset,
            target_end: end,
            target_committed: committed,
        }
    }

    fn report(members: Option<u32>, rows: Vec<TranslateRow>) -> TranslateReport {
        TranslateReport {
            group: "app".into(),
            checkpoints_topic: "dc1.checkpoints.internal".into(),
            target_members: members,
            rows,
        }
    }

    #[test]
    fn apply_table() {
        let rows = vec![
            row(0, 40, Some(100), None),
            row(1, 40, Some(100), Some(50)),
            row(2, 40, Some(100), Some(40)),
            row(3, 40, Some(30), None),
            row(4, 40, None, None),
        ];
        let want = vec![
            RowAction::Commit(40),
            RowAction::AlreadyThere,
            RowAction::AlreadyThere,
            RowAction::Commit(30),
            RowAction::NoTargetPartition,
        ];
        assert_eq!(plan_apply(&report(None, rows.clone())).unwrap(), want);
        assert_eq!(plan_apply(&report(Some(0), rows.clone())).unwrap(), want);
        let err = plan_apply(&report(Some(2), rows)).unwrap_err();
        assert!(err.contains("2 active member(s)"), "{err}");
    }

    #[test]
    fn lag_table() {
        let cases = [
            (row(0, 40, Some(100), None), Some(60)),
            (row(0, 100, Some(100), None), Some(0)),
            (row(0, 120, Some(100), None), Some(0)),
            (row(0, 40, None, None), None),
        ];
        for (r, want) in cases {
            assert_eq!(r.lag(), want, "{r:?}");
        }
    }

    #[test]
    fn render_shows_every_column() {
        let rep = report(
            Some(0),
            vec![
                row(0, 40, Some(100), Some(10)),
                row(1, 120, Some(100), None),
            ],
        );
        let actions = plan_apply(&rep).unwrap();
        let text = render(&rep, Some(&actions));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("\"app\"") && lines[0].contains("no active members"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("TOPIC") && lines[1].ends_with("ACTION"),
            "{text}"
        );
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cells,
            vec![
                "dc1.orders",
                "0",
                "45",
                "40",
                "100",
                "60",
                "10",
                "commit",
                "40"
            ]
        );
        assert!(lines[3].contains("100 (clamped from 120)"), "{text}");
        assert!(
            text.ends_with("total lag on the target: 60 record(s)\n"),
            "{text}"
        );
        assert!(!render(&rep, None).contains("ACTION"));
    }

    #[test]
    fn args_parse() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: TranslateArgs,
        }
        let cli = Cli::try_parse_from([
            "x",
            "--flow",
            "f.yaml",
            "--group",
            "g",
            "--apply",
            "--secrets-dir",
            "/s",
        ])
        .unwrap();
        assert_eq!(
            cli.args,
            TranslateArgs {
                source: FlowSource::file("f.yaml", "/s"),
                output: TranslateOutput::Table,
                group: "g".into(),
                apply: true,
                timeout_seconds: 30,
            }
        );
        assert!(
            Cli::try_parse_from(["x", "--flow", "f.yaml"]).is_err(),
            "--group is required"
        );
        let cli = Cli::try_parse_from([
            "x",
            "--flow-ref",
            "kafka/orders",
            "--group",
            "g",
            "-o",
            "csv",
        ])
        .unwrap();
        assert_eq!(
            (
                cli.args.source.flow,
                cli.args.source.flow_ref,
                cli.args.output
            ),
            (None, Some("kafka/orders".into()), TranslateOutput::Csv)
        );
        for bad in [
            vec!["x", "--group", "g"],
            vec!["x", "--flow", "f", "--flow-ref", "a/b", "--group", "g"],
            vec!["x", "--flow", "f", "--group", "g", "-o", "xml"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }

    /// The rows of every case of `apply_table`, for the output formats.
    fn mixed() -> TranslateReport {
        let mut other = row(0, 7, Some(9), None);
        other.topic = "dc1.pay".into();
        report(
            Some(0),
            vec![
                row(0, 40, Some(100), None),
                row(1, 40, Some(100), Some(50)),
                row(3, 40, Some(30), None),
                row(4, 40, None, None),
                other,
            ],
        )
    }

    #[test]
    fn csv_is_the_reset_plan_of_kafka_consumer_groups() {
        // Only what --apply commits: p1 is already past (the tool would move it back), p4 has
        // no target partition; p3 is clamped to the target end.
        assert_eq!(
            render_csv(&mixed()),
            "dc1.orders,0,40\ndc1.orders,3,30\ndc1.pay,0,7\n"
        );
        // Every line parses as Kafka's single-group format: topic,partition,offset.
        for line in render_csv(&mixed()).lines() {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 3, "{line}");
            f[1].parse::<i32>().unwrap();
            f[2].parse::<i64>().unwrap();
        }
        // Active members do not hide the plan (the tool itself refuses an active group).
        let mut active = mixed();
        active.target_members = Some(2);
        assert_eq!(render_csv(&active), render_csv(&mixed()));
        assert_eq!(render_csv(&report(None, vec![])), "");
    }

    #[test]
    fn json_and_yaml_carry_the_same_view() {
        let rep = mixed();
        let json: serde_json::Value =
            serde_json::from_str(&render_as(&rep, None, TranslateOutput::Json)).unwrap();
        let yaml: serde_json::Value =
            serde_yaml::from_str(&render_as(&rep, None, TranslateOutput::Yaml)).unwrap();
        assert_eq!(json, yaml);
        assert_eq!(json["group"], "app");
        assert_eq!(json["checkpointsTopic"], "dc1.checkpoints.internal");
        assert_eq!(json["targetMembers"], 0);
        assert_eq!(json["totalLag"], 60 + 60 + 2);
        let cases = [
            (0, 40, Some(60), "commit"),
            (1, 40, Some(60), "alreadyThere"),
            (2, 30, Some(0), "commit"),
            (3, 40, None, "noTargetPartition"),
            (4, 7, Some(2), "commit"),
        ];
        for (i, offset, lag, action) in cases {
            let p = &json["partitions"][i];
            assert_eq!(p["offsetToCommit"], offset, "{p}");
            assert_eq!(p["lag"], serde_json::json!(lag), "{p}");
            assert_eq!(p["action"], action, "{p}");
        }
        assert_eq!(
            json["partitions"][2]["targetOffset"], 40,
            "the checkpoint's own value"
        );
        assert_eq!(
            render_as(&rep, None, TranslateOutput::Table),
            render(&rep, None)
        );
    }
}
