//! MirrorMaker 2 as a contender: dedicated mode (`connect-mirror`, the testkit's typed
//! config), its defaults except what makes the comparison fair (see the bench's
//! documentation), its own cluster aliases per run so every run starts with empty Connect
//! offsets and an empty offset-syncs topic.

use std::process::Stdio;

use anyhow::Context as _;
use mirrorflow::testkit::brokers;
use mirrorflow::testkit::mirror_maker::{MirrorMaker, MirrorMakerConfig, Mm2Flow};

use crate::contender::Run;
use crate::process::Proc;

/// The source and target aliases of MM2 with `tasks` on `run` (the remote topic is
/// `<source alias>.<topic>`; Connect's topics and the offset syncs are named after them).
pub fn aliases(run: &Run<'_>, tasks: u32) -> (String, String) {
    let id = format!("{}-r{}{}", run.topic, run.round, run.alias_suffix);
    (format!("mm{tasks}-{id}"), format!("to{tasks}-{id}"))
}

pub fn target_topic(run: &Run<'_>, tasks: u32) -> String {
    format!("{}.{}", aliases(run, tasks).0, run.topic)
}

/// The config: one flow of `run`'s topic, `tasks.max` = `tasks`, offset syncs (every 100
/// records, on the source) and checkpoints (every 60 s) on as MM2 has them by default, the
/// scenario's compression on the target's producer, no heartbeats back from the target (MM2
/// would run a second Connect worker for that reverse pair; mirrorflow has no such thing).
pub fn config(run: &Run<'_>, tasks: u32) -> MirrorMakerConfig {
    let (source, target) = aliases(run, tasks);
    let mut config = MirrorMakerConfig::pair(
        (source.as_str(), run.src),
        (target.as_str(), run.tgt),
        &[run.topic],
    );
    config.tasks_max = tasks;
    if run.scenario.lz4 {
        config.clusters[1].properties =
            vec![("producer.compression.type".to_string(), "lz4".to_string())];
    }
    config.flows.push(Mm2Flow {
        enabled: false,
        emit_heartbeats: Some(false),
        ..Mm2Flow::new(&target, &source, &[])
    });
    config
}

/// Starts MM2 for `run` (its files in `run.logs/mm2-<source alias>/`, kept for a restart),
/// its log named `name`.
pub fn spawn(run: &Run<'_>, tasks: u32, name: &str) -> anyhow::Result<Proc> {
    let config = config(run, tasks);
    let dir = run.logs.join(format!("mm2-{}", aliases(run, tasks).0));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (mut cmd, _) = MirrorMaker::command(&config, &dir).context("MirrorMaker 2's command")?;
    // MM2 logs to stdout (the testkit's log4j2 console appender): both go to the log.
    let (log, file) = run.log_file(name)?;
    let child = cmd
        .stdout(file.try_clone()?)
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .context("spawning MirrorMaker 2")?;
    let mut p = Proc::new(name, child, log);
    p.exits_by_itself = false;
    // Nothing to keep from a graceful stop, and it can take a minute.
    p.kill_on_stop = true;
    Ok(p)
}

/// Deletes what MM2 created for `run` besides its remote topic (the caller deletes that):
/// Connect's offsets, configs and status topics and the checkpoints topic on the target, the
/// offset syncs on the source, so the brokers do not accumulate them run after run.
pub fn clean_up(run: &Run<'_>, tasks: u32) {
    let (source, target) = aliases(run, tasks);
    let on_target = [
        format!("mm2-offsets.{source}.internal"),
        format!("mm2-configs.{source}.internal"),
        format!("mm2-status.{source}.internal"),
        format!("{source}.checkpoints.internal"),
    ];
    for t in &on_target {
        let _ = run.rt.block_on(brokers::delete_topic(run.tgt, t));
    }
    let _ = run.rt.block_on(brokers::delete_topic(
        run.src,
        &format!("mm2-offset-syncs.{target}.internal"),
    ));
    let _ = std::fs::remove_dir_all(run.logs.join(format!("mm2-{source}")));
}
