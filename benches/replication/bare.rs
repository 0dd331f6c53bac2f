//! The bare copy loop: this bench binary re-run as a child with `MIRRORFLOW_BENCH_ROLE=bare`,
//! a `BaseConsumer` polled one record at a time into a `BaseProducer` with the engine's
//! settings (see the bench's documentation).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context as _};
use mirrorflow::worker::replicate::intake::prefetch_properties;
use mirrorflow::worker::replicate::writer::{producer_properties, PRODUCER_TUNING};
use mirrorflow::worker::replicate::Tuning;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::contender::Run;
use crate::process::Proc;

/// Env var that turns this binary into the bare copy loop (a child of the bench).
pub const ROLE_ENV: &str = "MIRRORFLOW_BENCH_ROLE";

/// Counts delivery reports.
#[derive(Default)]
struct Acks {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set"))
}

/// Starts the bare loop copying `run`'s records to `target_topic`: this bench binary again,
/// in the bare role.
pub fn spawn(run: &Run<'_>, target_topic: &str) -> anyhow::Result<Proc> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    // A wrapper (valgrind, perf stat) runs the bare loop as MIRRORFLOW_BIN can run the worker.
    let mut cmd = match std::env::var_os("MIRRORFLOW_BENCH_BARE_WRAPPER") {
        Some(w) => {
            let mut c = Command::new(w);
            c.arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.envs(child_env(
        run.src,
        run.tgt,
        run.topic,
        target_topic,
        run.partitions,
        run.records,
        run.scenario.compression(),
    ));
    run.spawn("bare", &mut cmd, Stdio::null())
}

/// Environment of the child: where to copy from and to, and how many records.
fn child_env(
    src: &str,
    tgt: &str,
    topic: &str,
    target_topic: &str,
    partitions: i32,
    n: u64,
    compression: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (ROLE_ENV, "bare".to_string()),
        ("MIRRORFLOW_BENCH_BARE_SOURCE", src.to_string()),
        ("MIRRORFLOW_BENCH_BARE_TARGET", tgt.to_string()),
        ("MIRRORFLOW_BENCH_BARE_TOPIC", topic.to_string()),
        (
            "MIRRORFLOW_BENCH_BARE_TARGET_TOPIC",
            target_topic.to_string(),
        ),
        ("MIRRORFLOW_BENCH_BARE_PARTITIONS", partitions.to_string()),
        ("MIRRORFLOW_BENCH_BARE_RECORDS", n.to_string()),
        ("MIRRORFLOW_BENCH_BARE_COMPRESSION", compression.to_string()),
    ]
}

/// Copies `RECORDS` records from `TOPIC` to `TARGET_TOPIC` (same partition, key, value,
/// headers, timestamp) and exits once all are acknowledged.
pub fn run_from_env() -> anyhow::Result<()> {
    let src = var("MIRRORFLOW_BENCH_BARE_SOURCE")?;
    let tgt = var("MIRRORFLOW_BENCH_BARE_TARGET")?;
    let topic = var("MIRRORFLOW_BENCH_BARE_TOPIC")?;
    let target_topic = var("MIRRORFLOW_BENCH_BARE_TARGET_TOPIC")?;
    let partitions: i32 = var("MIRRORFLOW_BENCH_BARE_PARTITIONS")?.parse()?;
    let n: u64 = var("MIRRORFLOW_BENCH_BARE_RECORDS")?.parse()?;
    let tuning = Tuning::default();
    let consumer = consumer(&src, &tuning)?;
    let compression = var("MIRRORFLOW_BENCH_BARE_COMPRESSION")?;
    let producer = producer(&tgt, &tuning, &compression)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(&topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl).context("assign")?;
    let mut copied = 0u64;
    while copied < n {
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.context("consuming")?;
        let headers = m.headers().map(|h| h.detach());
        let mut record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(&target_topic).partition(m.partition());
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        if let Some(v) = m.payload() {
            record = record.payload(v);
        }
        if let Some(ts) = m.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(h) = headers {
            record = record.headers(h);
        }
        if let Err(e) = crate::kafka::send_waiting(&producer, record, Duration::from_millis(5)) {
            bail!("producing to {target_topic}: {e}");
        }
        copied += 1;
        if copied.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .context("flushing")?;
    let acks = producer.context();
    let (ok, failed) = (
        acks.ok.load(Ordering::Relaxed),
        acks.failed.load(Ordering::Relaxed),
    );
    if failed > 0 || ok != n {
        let first = acks
            .first_error
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_default();
        bail!("{ok} of {n} records acknowledged, {failed} failed (first error: {first})");
    }
    Ok(())
}

fn consumer(src: &str, tuning: &Tuning) -> anyhow::Result<BaseConsumer> {
    // The engine's consumer settings (intake.rs `create_consumer`, defaults of `Tuning`),
    // without statistics: nothing here would read them.
    let mut config = ClientConfig::new();
    for (k, v) in prefetch_properties(tuning, None) {
        config.set(k, v);
    }
    config
        .set("bootstrap.servers", src)
        .set("group.id", "mirrorflow-bench-bare")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .create()
        .context("creating the consumer")
}

fn producer(tgt: &str, tuning: &Tuning, compression: &str) -> anyhow::Result<BaseProducer<Acks>> {
    // The engine's producer settings (writer.rs `TargetWriter::create`, AtLeastOnce), without
    // statistics: nothing here would read them.
    let mut config = ClientConfig::new();
    for (k, v) in producer_properties(&tuning.producer, None) {
        config.set(k, v);
    }
    for (k, v) in PRODUCER_TUNING {
        config.set(k, v);
    }
    config
        .set("bootstrap.servers", tgt)
        .set("compression.type", compression)
        .create_with_context(Acks::default())
        .context("creating the producer")
}
