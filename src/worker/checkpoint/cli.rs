//! `mirrorflow translate`: a group's checkpoints as the target sees them, for failover.
//!
//! Reads `<sourceAlias>.checkpoints.internal` on the target (the source may be down), and
//! prints per partition the group's source offset, the translated target offset, the target
//! end and the lag from there, and the group's committed offset on the target. With
//! `--apply` it commits the translated offsets to the group on the target: refused while
//! the group has active members there, never moving a partition backwards, and never past
//! the target's end.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rdkafka::Message as _;

use crate::api::load_flow_file;
use crate::kafka::config::client_properties;
use crate::kafka::wire;

use super::io::TopicTail;
use super::runner::checkpoints_topic;
use super::translate::{decide_group_sync, GroupSyncDecision, TargetGroupState};
use crate::kafka::admin::{GroupAdmin, GroupOffset};

/// Arguments of `mirrorflow translate`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct TranslateArgs {
    /// Flow file holding the MirrorFlow (clusters, aliases, secret references).
    #[arg(long, value_name = "FILE")]
    pub flow: PathBuf,
    /// Consumer group to translate.
    #[arg(long, value_name = "GROUP")]
    pub group: String,
    /// Commit the translated offsets to the group on the target (refused while the group has
    /// active members there; never moves a partition backwards).
    #[arg(long)]
    pub apply: bool,
    /// Directory holding the referenced Secrets as `<secretName>/<key>` files.
    #[arg(
        long,
        value_name = "DIR",
        env = "MIRRORFLOW_SECRETS_DIR",
        default_value = crate::api::SECRETS_DIR
    )]
    pub secrets_dir: PathBuf,
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
    Ok(report
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
        .collect())
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
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
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
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let total: i64 = report.rows.iter().filter_map(TranslateRow::lag).sum();
    let _ = writeln!(out, "total lag on the target: {total} record(s)");
    out
}

/// Reads the group's checkpoints and the target's view of the group.
pub async fn translate_group(args: &TranslateArgs) -> anyhow::Result<TranslateReport> {
    let file =
        load_flow_file(&args.flow).with_context(|| format!("--flow {}", args.flow.display()))?;
    let spec = &file.flow.spec;
    let target = client_properties(&spec.target, &args.secrets_dir)
        .context("spec.target")?
        .to_client_config();
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

/// `mirrorflow translate`: prints the table; with `--apply` commits and prints what it did.
pub async fn run_translate(args: TranslateArgs) -> anyhow::Result<()> {
    let report = translate_group(&args).await?;
    if !args.apply {
        print!("{}", render(&report, None));
        return Ok(());
    }
    let actions = match plan_apply(&report) {
        Ok(a) => a,
        Err(e) => {
            print!("{}", render(&report, None));
            bail!("refusing to apply: {e}");
        }
    };
    print!("{}", render(&report, Some(&actions)));
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
    if commits.is_empty() {
        println!("nothing to commit: the target group is at or past every translated offset");
        return Ok(());
    }
    let file = load_flow_file(&args.flow)?;
    let target = client_properties(&file.flow.spec.target, &args.secrets_dir)?.to_client_config();
    let what = format!("target cluster {}", file.flow.spec.target.alias);
    let admin = GroupAdmin::new(
        &target,
        &what,
        Duration::from_secs(args.timeout_seconds.max(1)),
    )
    .map_err(anyhow::Error::msg)?;
    let group = args.group.clone();
    let n = commits.len();
    let result = tokio::task::spawn_blocking(move || admin.alter_offsets(&[(group, commits)]))
        .await?
        .pop()
        .unwrap_or_else(|| Err("no answer".into()));
    match result {
        Ok(()) => {
            println!(
                "committed {n} partition(s) of group {:?} on the target",
                args.group
            );
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
                flow: "f.yaml".into(),
                group: "g".into(),
                apply: true,
                secrets_dir: "/s".into(),
                timeout_seconds: 30,
            }
        );
        assert!(
            Cli::try_parse_from(["x", "--flow", "f.yaml"]).is_err(),
            "--group is required"
        );
    }
}
