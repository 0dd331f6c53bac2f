//! The `mirrorflow` binary: controller, worker and operator tools in one executable.

// Unsafe code lives in the library's `kafka::sys` only; here, only jemalloc's options below.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mirrorflow::telemetry::logging::{self, LogFormat};

/// Kafka cross-cluster replication, declared in YAML, safe by default.
#[derive(Parser, Debug)]
#[command(name = "mirrorflow", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "MIRRORFLOW_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator: reconcile MirrorFlow and OffsetCheckpoint resources into workers.
    Controller(mirrorflow::controller::ControllerArgs),
    /// Run one worker of a flow: replicate, validate offsets, emit offset syncs and checkpoints.
    /// Standalone with `--flow FILE`, or in Kubernetes with `--flow-ref NAMESPACE/NAME`.
    Worker(mirrorflow::worker::process::args::WorkerArgs),
    /// Failover helper: print a group's translated target offsets from the checkpoints topic
    /// (`-o table|json|yaml|csv`; csv is a `kafka-consumer-groups.sh --reset-offsets
    /// --from-file` plan); with --apply, commit them to the group on the target (refused while
    /// it has members). The flow from a file (--flow) or a cluster (--flow-ref NS/NAME).
    Translate(mirrorflow::cli::translate::TranslateArgs),
    /// Compare a flow's source records with their copies on the target (key, value, headers,
    /// timestamp, partition) through its progress and offset syncs; per partition what is
    /// missing, extra, different or duplicated. Fails when anything is missing, extra or
    /// different.
    Audit(mirrorflow::cli::audit::AuditArgs),
    /// Fail the flow's consumer groups over to the target: patch spec.failover (applied once
    /// per --id); --wait prints the report; --dry-run prints what it would do now.
    Failover(mirrorflow::cli::failover::FailoverArgs),
    /// Fail back after a Done failover: apply the reverse flow (Identity only), starting where
    /// the failover left the new primary; --dry-run prints it; --wait prints what diverged.
    Failback(mirrorflow::cli::failback::FailbackArgs),
    /// Take over from a stopped MirrorMaker 2: patch spec.source.startFrom.mirrorMaker2;
    /// --dry-run prints where each partition would start; --wait prints the takeover.
    #[command(name = "migrate-from-mm2")]
    MigrateFromMm2(mirrorflow::cli::migrate::MigrateArgs),
    /// A flow read through the Kubernetes API: conditions, workers and their lag, failed
    /// partitions with the command that clears each.
    Status(mirrorflow::cli::status::StatusArgs),
    /// Local demo without Kubernetes: two brokers, a standalone worker, a replication report.
    #[cfg(feature = "testkit")]
    Demo(mirrorflow::demo::DemoArgs),
    /// Print the CustomResourceDefinitions (MirrorFlow, OffsetCheckpoint) as YAML.
    Crdgen,
    /// Check a flow file (MirrorFlow + OffsetCheckpoint documents) and print what is wrong.
    Validate {
        /// The YAML file to check.
        file: PathBuf,
    },
}

/// jemalloc for the whole process, librdkafka's C allocations included (the crate's
/// `unprefixed` feature provides `malloc` and `free`). glibc's malloc takes an arena lock when
/// one thread frees what another allocated, which is every fetched record (librdkafka's broker
/// thread allocates it, the engine frees it); jemalloc batches those frees in per-thread caches.
/// The replication bench measured less CPU per record with it than with glibc's malloc.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation; `MALLOC_CONF` in the environment is read
/// after them and wins. One arena and small thread caches (a worker runs about 50 threads, most
/// of them nearly idle), freed pages returned to the system after half a second.
///
/// jemalloc reads the symbol `malloc_conf` as a `const char *`: a reference to the first byte
/// of a NUL-terminated static string has that layout and needs no `unsafe impl Sync`. Defining
/// an exported symbol is what `unsafe_code` flags (two definitions of one name would be
/// undefined behaviour): it is allowed here only. It stays in the binary: jemalloc has a weak
/// default of its own, so the linker never looks for this one in the library's archive, where
/// nothing else would pull it in. `jemalloc_runs_with_the_compiled_options` checks that
/// jemalloc read it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[export_name = "malloc_conf"]
static MALLOC_CONF: &u8 = &b"narenas:1,tcache_max:1024,lg_tcache_nslots_mul:-2,\
    tcache_nslots_small_max:32,dirty_decay_ms:500,muzzy_decay_ms:0\0"[0];

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let result: anyhow::Result<()> = match cli.command {
        Command::Controller(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::controller::run(args)))
        }
        Command::Worker(args) => worker_runtime().and_then(|rt| {
            rt.block_on(async move {
                if args.flow_ref.is_some() {
                    mirrorflow::worker::process::k8s::run(args).await
                } else {
                    mirrorflow::worker::process::flow_file::run(args).await
                }
            })
        }),
        Command::Translate(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::translate::run_translate(args)))
        }
        Command::Audit(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::audit::run_audit(args)))
        }
        Command::Failover(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::failover::run_failover(args)))
        }
        Command::Failback(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::failback::run_failback(args)))
        }
        Command::MigrateFromMm2(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::migrate::run_migrate(args)))
        }
        Command::Status(args) => {
            runtime().and_then(|rt| rt.block_on(mirrorflow::cli::status::run_status(args)))
        }
        #[cfg(feature = "testkit")]
        Command::Demo(args) => runtime().and_then(|rt| rt.block_on(mirrorflow::demo::run(args))),
        Command::Crdgen => {
            print!("{}", mirrorflow::api::crds_yaml());
            Ok(())
        }
        Command::Validate { file } => match mirrorflow::api::load_flow_file(&file) {
            Ok(f) => {
                println!(
                    "{}: MirrorFlow {} with {} OffsetCheckpoint(s) is valid",
                    file.display(),
                    f.flow.metadata.name.as_deref().unwrap_or_default(),
                    f.checkpoints.len()
                );
                Ok(())
            }
            Err(e) => Err(anyhow::anyhow!("{}: {e}", file.display())),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// A worker's runtime: few threads whatever the node's size (`worker::runtime`).
fn worker_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let env = std::env::var("TOKIO_WORKER_THREADS").ok();
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(mirrorflow::worker::runtime::threads(
            available,
            env.as_deref(),
        ))
        .enable_all()
        .build()?)
}

// Reads jemalloc's state through its C API (`mallctl`).
#[cfg(all(test, target_os = "linux"))]
#[allow(unsafe_code)]
mod tests {
    use std::ffi::{c_char, c_int, c_void, CStr};

    unsafe extern "C" {
        fn mallctl(
            name: *const c_char,
            oldp: *mut c_void,
            oldlenp: *mut usize,
            newp: *mut c_void,
            newlen: usize,
        ) -> c_int;
    }

    fn read<T: Default>(name: &CStr) -> T {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `value` is a T of `len` bytes, the type jemalloc documents for `name`.
        let rc = unsafe {
            mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {name:?}");
        value
    }

    #[test]
    fn jemalloc_runs_with_the_compiled_options() {
        assert_eq!(read::<u32>(c"opt.narenas"), 1);
        assert_eq!(read::<usize>(c"opt.tcache_max"), 1024);
        assert_eq!(read::<isize>(c"opt.dirty_decay_ms"), 500);
        assert_eq!(read::<isize>(c"opt.muzzy_decay_ms"), 0);
    }

    #[test]
    fn c_malloc_is_jemalloc() {
        let before = read::<u64>(c"thread.allocated");
        // SAFETY: a plain allocation, freed below.
        let p = unsafe { libc::malloc(1 << 20) };
        assert!(!p.is_null());
        let after = read::<u64>(c"thread.allocated");
        // SAFETY: allocated above with malloc.
        unsafe { libc::free(p) };
        assert!(after - before >= 1 << 20, "{before} -> {after}");
    }

    /// The vendored librdkafka answers "no headers" for a consumed record that has none
    /// without allocating (vendor/README.md); upstream builds a parse buffer for each such
    /// record. A record with headers still has them parsed.
    #[test]
    fn a_consumed_record_without_headers_is_answered_without_allocating() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        use rdkafka::{ClientConfig, Offset, TopicPartitionList};
        use std::time::{Duration, Instant};

        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .expect("producer");
        let headers = OwnedHeaders::new().insert(Header {
            key: "trace",
            value: Some(&b"abc"[..]),
        });
        p.send(
            BaseRecord::<[u8], [u8]>::to("t")
                .payload(&b"h"[..])
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .expect("send");
        for _ in 0..50 {
            p.send(BaseRecord::<[u8], [u8]>::to("t").payload(&b"v"[..]))
                .map_err(|(e, _)| e)
                .expect("send");
        }
        p.flush(Duration::from_secs(10)).expect("flush");

        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "g")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, Offset::Beginning).unwrap();
        c.assign(&tpl).expect("assign");
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 51 && Instant::now() < deadline {
            if let Some(m) = c.poll(Duration::from_millis(100)) {
                got.push(m.expect("no consumer error"));
            }
        }
        assert_eq!(got.len(), 51, "every record within 10 s");

        let with = got[0].headers().expect("the first record's headers");
        assert_eq!(with.count(), 1);
        assert_eq!(with.get(0).key, "trace");
        let before = read::<u64>(c"thread.allocated");
        let none = got[1..].iter().filter(|m| m.headers().is_none()).count();
        let allocated = read::<u64>(c"thread.allocated") - before;
        assert_eq!(none, 50, "records sent without headers have none");
        assert_eq!(
            allocated, 0,
            "bytes allocated answering 50 records without headers"
        );
    }
}
