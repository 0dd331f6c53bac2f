//! ACLs on Apache Kafka's `StandardAuthorizer`:
//!
//! - the topic ACL sync (`spec.syncTopicAcls`, worker 0's `AclSyncRunner`): source bindings
//!   appear on the target renamed by the replication policy (Prefix and Identity side by
//!   side), ALL as READ, never WRITE (MirrorMaker 2's rule; DENY and other operations are
//!   not copied either), and removals on the source follow, sparing a binding that was on
//!   the target before. Source bindings are added and removed, and the target's listed,
//!   with Kafka's own `kafka-acls` (AclCommand), not with mirrorflow's calls;
//! - least privilege: a flow (ExactlyOnce, heartbeats, an OffsetCheckpoint with group sync,
//!   the ACL sync) runs as a SCRAM principal holding exactly the bindings
//!   `docs/SECURITY.md` lists (parsed from the page), and replicates; without READ on the
//!   source topic its status names the refused permission; without WRITE on the target
//!   topics it retries, and once the binding is back the target holds every record once.
//!   An AtLeastOnce flow runs as a second principal holding the page's bindings but the
//!   ExactlyOnce line.
//!   (A refused transactional id is `tests/exactly_once.rs`'.)
//!
//! Skipped with a `SKIPPED` line when the Kafka jars are not fetched, unless
//! `MIRRORFLOW_REQUIRE_BROKERS=1`.

mod fault_support;
mod replication_support;
mod security_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_support::{read_to_end, Isolation, WorkDir};
use mirrorflow::api::{Delivery, MirrorFlowSpec, ReplicationPolicyType, TopicAclSync, WorkerState};
use mirrorflow::kafka::secrets::kubelet::write_secret;
use mirrorflow::testkit::brokers::{
    commit_group, group_committed, kafka_or_skip, produce, LocalBroker, ProduceRecord,
};
use mirrorflow::testkit::kafka::{KafkaConfig, KafkaTls, Listener};
use mirrorflow::worker::acl_sync::AclSyncRunner;
use mirrorflow::worker::process::sinks::WorkerSink;
use mirrorflow::worker::replicate::WorkerSnapshot;
use replication_support::*;
use security_support::{Ca, Validity};
use tokio::sync::{oneshot, watch};

const ACL_COMMAND: &str = "org.apache.kafka.tools.AclCommand";

/// Runs `kafka-acls` against `broker` through its PLAINTEXT listener (a super user).
async fn kafka_acls(broker: &LocalBroker, args: &[&str]) -> String {
    let plain = broker.bootstrap_servers();
    let mut all = vec!["--bootstrap-server", plain.as_str()];
    all.extend_from_slice(args);
    broker
        .kafka()
        .expect("a Kafka cluster")
        .tool(ACL_COMMAND, &all)
        .await
        .unwrap_or_else(|e| panic!("kafka-acls {all:?}: {e}"))
}

/// A topic binding as `kafka-acls --list` prints it: (pattern type, name, principal,
/// operation, permission), Kafka's upper-case names.
type Listed = (String, String, String, String, String);

/// The topic bindings of a `kafka-acls --list` output.
fn parse_list(out: &str) -> BTreeSet<Listed> {
    fn field<'a>(line: &'a str, key: &str) -> &'a str {
        let at = line
            .find(&format!("{key}="))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"));
        let rest = &line[at + key.len() + 1..];
        let end = rest.find([',', ')']).unwrap_or(rest.len());
        &rest[..end]
    }
    let mut out_set = BTreeSet::new();
    let mut resource: Option<(String, String)> = None;
    for line in out.lines() {
        if line.contains("ResourcePattern(") {
            resource = (field(line, "resourceType") == "TOPIC").then(|| {
                (
                    field(line, "patternType").to_owned(),
                    field(line, "name").to_owned(),
                )
            });
        } else if line.trim_start().starts_with("(principal=") {
            if let Some((pattern, name)) = &resource {
                out_set.insert((
                    pattern.clone(),
                    name.clone(),
                    field(line, "principal").to_owned(),
                    field(line, "operation").to_owned(),
                    field(line, "permissionType").to_owned(),
                ));
            }
        }
    }
    out_set
}

fn listed(pattern: &str, name: &str, principal: &str, op: &str, perm: &str) -> Listed {
    (
        pattern.into(),
        name.into(),
        format!("User:{principal}"),
        op.into(),
        perm.into(),
    )
}

/// Every topic binding on `broker`.
async fn topic_acls(broker: &LocalBroker) -> BTreeSet<Listed> {
    parse_list(&kafka_acls(broker, &["--list"]).await)
}

/// Worker 0's ACL sync of flow `test/<name>`, in-process.
struct AclSync {
    state: watch::Receiver<Option<TopicAclSync>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl AclSync {
    fn start(name: &str, spec: MirrorFlowSpec, secrets_dir: &Path) -> Self {
        let (_spec_tx, spec_rx) = watch::channel(spec);
        let (state_tx, state) = watch::channel(None);
        let runner = AclSyncRunner {
            namespace: "test".into(),
            flow: name.into(),
            secrets_dir: secrets_dir.to_path_buf(),
            spec: spec_rx,
            secrets: None,
            state: state_tx,
            metrics: None,
        };
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // The spec sender lives as long as the runner: a closed channel ends it.
            let _keep = _spec_tx;
            runner
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
        });
        Self {
            state,
            stop: Some(stop),
            task,
        }
    }

    /// Waits for a good sync whose counts are `(synced, createdByFlow, skipped)`.
    async fn wait_counts(&mut self, what: &str, want: (i32, i32, i32)) -> TopicAclSync {
        let begin = Instant::now();
        loop {
            if let Some(s) = self.state.borrow_and_update().clone() {
                if s.last_error.is_none() && (s.synced, s.created_by_flow, s.skipped) == want {
                    return s;
                }
                assert!(
                    begin.elapsed() < WAIT,
                    "{what}: ACL sync never reached {want:?}; last state {s:?}"
                );
            }
            assert!(begin.elapsed() < WAIT, "{what}: no ACL sync ran");
            let _ = tokio::time::timeout(Duration::from_millis(200), self.state.changed()).await;
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the ACL sync stops")
            .unwrap();
    }
}

/// Source bindings added and removed with `kafka-acls`; two flows (Prefix and Identity)
/// sync them to one target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acl_sync_renames_never_writes_and_follows_removals_kafka() {
    let (source, target) = tokio::join!(
        kafka_or_skip(KafkaConfig::default()),
        kafka_or_skip(KafkaConfig::default())
    );
    let (Some(source), Some(target)) = (source, target) else {
        return;
    };
    for t in ["orders", "payments", "hr"] {
        create(&source, t, 1).await;
    }
    // (args after --add/--remove) of each source binding group.
    let alice_orders = [
        "--allow-principal",
        "User:alice",
        "--operation",
        "All",
        "--topic",
        "orders",
    ];
    let alice_payments_read = [
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "payments",
    ];
    let bob_pay_prefix = [
        "--allow-principal",
        "User:bob",
        "--operation",
        "Read",
        "--topic",
        "pay",
        "--resource-pattern-type",
        "prefixed",
    ];
    let kept: [&[&str]; 5] = [
        // Never copied: WRITE (MM2's rule), DENY, ALTER; hr is not replicated.
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "orders",
        ],
        &[
            "--deny-principal",
            "User:mallory",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ],
        &[
            "--allow-principal",
            "User:bob",
            "--operation",
            "Alter",
            "--topic",
            "payments",
        ],
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "hr",
        ],
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "Describe",
            "--operation",
            "DescribeConfigs",
            "--topic",
            "payments",
        ],
    ];
    let adds: Vec<Vec<&str>> = [&alice_orders[..], &alice_payments_read, &bob_pay_prefix]
        .into_iter()
        .chain(kept)
        .map(|a| [&["--add"][..], a].concat())
        .collect();
    for a in &adds {
        kafka_acls(&source, a).await;
    }
    // A binding that was on the target before the flow: equal to one the sync wants, it
    // must survive its source binding's removal.
    let mut pre_existing_target = alice_payments_read;
    pre_existing_target[5] = "dc1.payments";
    kafka_acls(&target, &[&["--add"][..], &pre_existing_target].concat()).await;
    let source_bindings = topic_acls(&source).await;
    assert_eq!(source_bindings.len(), 9, "{source_bindings:#?}");

    let dir = WorkDir::new();
    let spec = include(
        flow_spec(&source, &target, Delivery::AtLeastOnce),
        &["orders", "payments"],
    );
    let identity = policy(spec.clone(), ReplicationPolicyType::Identity);
    let begin = Instant::now();
    let mut prefix_sync = AclSync::start("acls", spec, dir.path());
    let mut identity_sync = AclSync::start("acls-identity", identity, dir.path());
    // Prefix: dc1.orders READ (ALL), dc1.payments READ (there before), DESCRIBE,
    // DESCRIBE_CONFIGS, prefixed dc1.pay READ; skipped: WRITE, DENY, ALTER.
    prefix_sync.wait_counts("Prefix flow", (5, 4, 3)).await;
    // Identity: the same literal bindings under the source names; the prefixed one too
    // broad (it would cover target topics the flow does not write).
    identity_sync.wait_counts("Identity flow", (4, 4, 4)).await;
    let synced_in = begin.elapsed();
    let want: BTreeSet<Listed> = [
        listed("LITERAL", "dc1.orders", "alice", "READ", "ALLOW"),
        listed("LITERAL", "dc1.payments", "alice", "READ", "ALLOW"),
        listed("LITERAL", "dc1.payments", "alice", "DESCRIBE", "ALLOW"),
        listed(
            "LITERAL",
            "dc1.payments",
            "alice",
            "DESCRIBE_CONFIGS",
            "ALLOW",
        ),
        listed("PREFIXED", "dc1.pay", "bob", "READ", "ALLOW"),
        listed("LITERAL", "orders", "alice", "READ", "ALLOW"),
        listed("LITERAL", "payments", "alice", "READ", "ALLOW"),
        listed("LITERAL", "payments", "alice", "DESCRIBE", "ALLOW"),
        listed("LITERAL", "payments", "alice", "DESCRIBE_CONFIGS", "ALLOW"),
    ]
    .into_iter()
    .collect();
    let on_target = topic_acls(&target).await;
    assert_eq!(on_target, want, "the target's topic ACLs after the sync");
    assert!(
        on_target
            .iter()
            .all(|b| b.3 != "WRITE" && b.3 != "ALL" && b.4 == "ALLOW"),
        "no WRITE, ALL or DENY on the target: {on_target:#?}"
    );

    // Removals on the source follow; the binding that was there before stays.
    let begin_removal = Instant::now();
    for a in [&alice_orders[..], &alice_payments_read, &bob_pay_prefix] {
        kafka_acls(&source, &[&["--remove", "--force"][..], a].concat()).await;
    }
    prefix_sync
        .wait_counts("Prefix flow after removals", (2, 2, 3))
        .await;
    identity_sync
        .wait_counts("Identity flow after removals", (2, 2, 3))
        .await;
    let removed_in = begin_removal.elapsed();
    let want: BTreeSet<Listed> = [
        listed("LITERAL", "dc1.payments", "alice", "READ", "ALLOW"),
        listed("LITERAL", "dc1.payments", "alice", "DESCRIBE", "ALLOW"),
        listed(
            "LITERAL",
            "dc1.payments",
            "alice",
            "DESCRIBE_CONFIGS",
            "ALLOW",
        ),
        listed("LITERAL", "payments", "alice", "DESCRIBE", "ALLOW"),
        listed("LITERAL", "payments", "alice", "DESCRIBE_CONFIGS", "ALLOW"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        topic_acls(&target).await,
        want,
        "the target's topic ACLs after the source removals"
    );
    prefix_sync.stop().await;
    identity_sync.stop().await;
    println!(
        "ACL sync on Apache Kafka {} (StandardAuthorizer): 9 source topic bindings -> 9 on \
         the target (Prefix: 5 synced, 4 created, 3 skipped: WRITE, DENY, ALTER; Identity: 4 \
         synced, 4 skipped, the prefixed binding too broad), no WRITE/ALL/DENY copied, in \
         {:.1} s; 3 source removals -> 4 target bindings deleted, the pre-existing one kept, \
         in {:.1} s",
        source.kafka().unwrap().version(),
        synced_in.as_secs_f64(),
        removed_in.as_secs_f64()
    );
}

/// Which cluster a documented binding is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Source,
    Target,
}

/// One `acls "$SOURCE" ...` line of docs/SECURITY.md's least-privilege section, its
/// variables replaced: the arguments after `--allow-principal`.
#[derive(Debug, Clone)]
struct DocAcl {
    side: Side,
    args: Vec<String>,
}

impl DocAcl {
    fn exactly_once_only(&self) -> bool {
        self.args.iter().any(|a| a == "--transactional-id")
    }

    fn has(&self, words: &[&str]) -> bool {
        words.iter().all(|w| self.args.iter().any(|a| a == w))
    }
}

/// Shell words of `line`: blanks split, double quotes group (no escapes in the page).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// The bindings docs/SECURITY.md lists for a worker of flow `ns/flow` from alias `src`.
fn documented_acls(ns: &str, flow: &str, src: &str) -> Vec<DocAcl> {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SECURITY.md")).unwrap();
    let start = page
        .find("## Least privilege")
        .expect("docs/SECURITY.md has a least-privilege section");
    let section = &page[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let vars = |w: &str| {
        w.replace("${#NS}", &ns.len().to_string())
            .replace("$NS", ns)
            .replace("$FLOW", flow)
            .replace("$SRC", src)
    };
    let acls: Vec<DocAcl> = section
        .lines()
        .filter(|l| l.starts_with("acls "))
        .map(|l| {
            let words = shell_words(l);
            let side = match words[1].as_str() {
                "$SOURCE" => Side::Source,
                "$TARGET" => Side::Target,
                other => panic!("docs/SECURITY.md: acls for {other:?} in {l:?}"),
            };
            DocAcl {
                side,
                args: words[2..].iter().map(|w| vars(w)).collect(),
            }
        })
        .collect();
    assert!(acls.len() >= 8, "docs/SECURITY.md lists {acls:?}");
    assert!(
        acls.iter().all(|a| !a.args.iter().any(|w| w.contains('$'))),
        "a variable left: {acls:?}"
    );
    acls
}

const MIRROR: &str = "User:mirror";

/// Adds (`add`) or removes `acl` for the ExactlyOnce worker's principal.
async fn apply(source: &LocalBroker, target: &LocalBroker, acl: &DocAcl, add: bool) {
    apply_for(MIRROR, source, target, acl, add).await
}

/// Adds every binding of `acls` for `principal`, the source's and the target's side by side.
async fn apply_all(principal: &str, source: &LocalBroker, target: &LocalBroker, acls: &[DocAcl]) {
    let side = |side: Side| async move {
        for a in acls.iter().filter(|a| a.side == side) {
            apply_for(principal, source, target, a, true).await;
        }
    };
    tokio::join!(side(Side::Source), side(Side::Target));
}

/// Adds (`add`) or removes `acl` for `principal`.
async fn apply_for(
    principal: &str,
    source: &LocalBroker,
    target: &LocalBroker,
    acl: &DocAcl,
    add: bool,
) {
    let broker = match acl.side {
        Side::Source => source,
        Side::Target => target,
    };
    let mut args: Vec<&str> = if add {
        vec!["--add"]
    } else {
        vec!["--remove", "--force"]
    };
    args.extend(["--allow-principal", principal]);
    args.extend(acl.args.iter().map(String::as_str));
    kafka_acls(broker, &args).await;
}

/// A one-node cluster with a SASL_SSL SCRAM-SHA-512 listener where `mirror` and `alo` log
/// in.
fn scram_cluster(dir: &Path, ca: &Ca, name: &str) -> KafkaConfig {
    let server = ca.server(&["127.0.0.1", "localhost"], Validity::Current);
    let tls = KafkaTls {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
        ca: dir.join(format!("{name}-ca.crt")),
    };
    std::fs::write(&tls.cert, &server.cert).unwrap();
    std::fs::write(&tls.key, &server.key).unwrap();
    std::fs::write(&tls.ca, &ca.pem).unwrap();
    KafkaConfig {
        listeners: vec![Listener::Scram],
        tls: Some(tls),
        scram_users: vec![
            ("mirror".into(), "mirror-secret".into()),
            ("alo".into(), "alo-secret".into()),
        ],
        ..KafkaConfig::default()
    }
}

/// The flow `test/<name>` from alias `alias` between the SCRAM listeners, logging in with
/// the Secret `user` (CA: `cluster-ca`), with an OffsetCheckpoint for group `billing`.
fn least_flow_yaml(
    name: &str,
    alias: &str,
    user: &str,
    delivery: &str,
    source: &LocalBroker,
    target: &LocalBroker,
) -> String {
    let cluster = |alias: &str, b: &LocalBroker| {
        format!(
            "    alias: {alias}\n    bootstrapServers: '{}'\n    \
             tls: {{ca: {{secretName: cluster-ca, key: ca.crt}}}}\n    \
             sasl: {{mechanism: SCRAM-SHA-512, credentials: {{secretName: {user}}}}}\n",
            b.kafka().unwrap().listener(Listener::Scram)
        )
    };
    format!(
        "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\n\
         metadata: {{name: {name}, namespace: test}}\nspec:\n  source:\n{}  target:\n{}  \
         topics: {{include: [orders], refreshIntervalSeconds: 1}}\n  startFrom: Earliest\n  \
         delivery: {delivery}\n\
         ---\napiVersion: mirrorflow.io/v1alpha1\nkind: OffsetCheckpoint\n\
         metadata: {{name: billing, namespace: test}}\n\
         spec:\n  flowRef: {{name: {name}}}\n  groups: {{include: [billing], refreshIntervalSeconds: 1}}\n  \
         intervalSeconds: 1\n  syncGroupOffsets: true\n",
        cluster(alias, source),
        cluster("dc2", target)
    )
}

/// Waits until the worker's snapshot satisfies `pred`; panics with the last one.
async fn wait_snapshot(
    rx: &mut watch::Receiver<WorkerSnapshot>,
    what: &str,
    bound: Duration,
    pred: impl Fn(&WorkerSnapshot) -> bool,
) -> WorkerSnapshot {
    let begin = Instant::now();
    loop {
        {
            let s = rx.borrow_and_update();
            if pred(&s) {
                return s.clone();
            }
            assert!(
                begin.elapsed() < bound,
                "{what}: not within {bound:?}; last status: {}",
                serde_json::to_string_pretty(&*s).unwrap()
            );
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
    }
}

fn positions_reach(s: &WorkerSnapshot, topic: &str, want: &BTreeMap<i32, i64>) -> bool {
    want.iter().all(|(p, off)| {
        s.partitions.iter().any(|x| {
            x.topic == topic && x.partition == *p && x.position.is_some_and(|pos| pos >= *off)
        })
    })
}

/// Records `from..from + n`, spread over 2 partitions.
fn more(tag: &str, from: usize, n: usize) -> Vec<ProduceRecord> {
    fault_support::batch(tag, 2, from, n)
}

/// Each partition's end after `total` records (an even number) in all.
fn ends_at(total: usize) -> BTreeMap<i32, i64> {
    let half = i64::try_from(total / 2).unwrap();
    [(0, half), (1, half)].into_iter().collect()
}

/// What a worker's snapshot says about its problems, in one line.
fn said(s: &WorkerSnapshot) -> String {
    let mut v = serde_json::to_value(s).unwrap();
    // Partitions and lag say nothing here and make the line long.
    if let Some(o) = v.as_object_mut() {
        o.remove("partitions");
        o.remove("replicationLag");
        o.remove("time");
    }
    v.to_string()
}

/// A flow runs as a principal holding exactly docs/SECURITY.md's bindings; without READ on
/// the source topic its status names what is refused; without WRITE on the target topics
/// it waits; each given back, it carries on, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn least_privilege_flow_runs_with_the_documented_acls_kafka() {
    let dir = WorkDir::new();
    let ca = Ca::new("least-privilege-ca");
    let (source, target) = tokio::join!(
        kafka_or_skip(scram_cluster(dir.path(), &ca, "source")),
        kafka_or_skip(scram_cluster(dir.path(), &ca, "target"))
    );
    let (Some(source), Some(target)) = (source, target) else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let acls = documented_acls("test", "least", "dc1");
    let begin = Instant::now();
    apply_all(MIRROR, &source, &target, &acls).await;
    eprintln!(
        "{} documented bindings applied in {:.1} s",
        acls.len(),
        begin.elapsed().as_secs_f64()
    );

    create(&source, "orders", 2).await;
    let mut total = 100usize;
    produce(&sb, "orders", &more("lp", 0, total)).await.unwrap();
    let consumed: BTreeMap<i32, i64> = [(0, 30), (1, 20)].into_iter().collect();
    commit_group(&sb, "billing", "orders", &consumed)
        .await
        .unwrap();

    let secrets = dir.path().join("secrets");
    write_secret(&secrets, "cluster-ca", &[("ca.crt", ca.pem.as_bytes())]).unwrap();
    write_secret(
        &secrets,
        "mirror-user",
        &[("username", b"mirror"), ("password", b"mirror-secret")],
    )
    .unwrap();
    let flow_file = dir.path().join("least.yaml");
    let yaml = least_flow_yaml(
        "least",
        "dc1",
        "mirror-user",
        "ExactlyOnce",
        &source,
        &target,
    );
    std::fs::write(&flow_file, yaml).unwrap();
    let (tx, mut rx) = watch::channel(WorkerSnapshot::starting(
        "test",
        "least",
        0,
        1,
        Delivery::ExactlyOnce,
    ));
    let sinks: Vec<Arc<dyn WorkerSink>> = vec![Arc::new(tx)];
    let began = Instant::now();
    let worker = Standalone::start(&standalone_args(&flow_file, &secrets), sinks);

    // Everything works: records, heartbeats, the ACL sync, and the group checkpointed.
    let s = wait_snapshot(
        &mut rx,
        "replicated as the least-privileged principal",
        WAIT * 2,
        |s| {
            positions_reach(s, "orders", &ends_at(total))
                && s.replication_latency.is_some()
                && s.topic_acls
                    .as_ref()
                    .is_some_and(|a| a.last_error.is_none() && a.synced > 0)
        },
    )
    .await;
    let replicated_in = began.elapsed();
    let text = said(&s);
    assert!(
        s.connection_problems.is_empty() && !text.to_lowercase().contains("authoriz"),
        "nothing refused: {text}"
    );
    let src = read_to_end(&sb, "orders", Isolation::Committed).await;
    let dst = read_to_end(&tb, "dc1.orders", Isolation::Committed).await;
    assert_same(&src, &dst, "as the least-privileged principal");
    let begin = Instant::now();
    let synced_group = loop {
        let got = group_committed(&tb, "billing", "dc1.orders", 2)
            .await
            .unwrap();
        if got.len() == 2 {
            break got;
        }
        assert!(
            begin.elapsed() < WAIT,
            "group billing never synced to the target: {got:?}; status {}",
            said(&rx.borrow())
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    println!(
        "least privilege: {} documented bindings ({} on the source, {} on the target, {} for \
         ExactlyOnce only); flow replicated {} records in {:.1} s as User:mirror, group billing \
         synced to the target at {synced_group:?}, topic ACLs synced {:?}",
        acls.len(),
        acls.iter().filter(|a| a.side == Side::Source).count(),
        acls.iter().filter(|a| a.side == Side::Target).count(),
        acls.iter().filter(|a| a.exactly_once_only()).count(),
        dst.len(),
        replicated_in.as_secs_f64(),
        s.topic_acls.as_ref().map(|a| (a.synced, a.skipped)),
    );

    // READ on the source topic taken away (Describe kept) while the flow runs: the worker
    // turns Degraded saying which cluster refuses and what to grant; given back, the
    // records arrive and the status clears.
    let read = documented_line(&acls, Side::Source, &["--topic", "orders"], "Read");
    apply(&source, &target, &read, false).await;
    produce(&sb, "orders", &more("noread", total, 20))
        .await
        .unwrap();
    total += 20;
    let refused = Instant::now();
    let s = wait_snapshot(&mut rx, "without READ on the source topic", WAIT, |s| {
        s.state == WorkerState::Degraded
    })
    .await;
    let read_refused_in = refused.elapsed();
    let message = s.message.clone().unwrap_or_default();
    for want in [
        "source cluster dc1",
        "TopicAuthorizationFailed",
        "--operation Read",
    ] {
        assert!(
            message.contains(want),
            "the status names {want:?}: {message}"
        );
    }
    apply(&source, &target, &read, true).await;
    wait_snapshot(&mut rx, "READ given back", WAIT * 2, |s| {
        positions_reach(s, "orders", &ends_at(total)) && s.state == WorkerState::Running
    })
    .await;

    // WRITE on the target topics taken away and given back: the worker turns Degraded
    // saying which cluster refuses and what to grant (the transactions fail as purged; the
    // refusal is their cause); the transactions that failed meanwhile leave nothing behind
    // (no loss, no duplicate below).
    let write = documented_line(&acls, Side::Target, &["--topic", "dc1."], "Write");
    apply(&source, &target, &write, false).await;
    produce(&sb, "orders", &more("nowrite", total, 20))
        .await
        .unwrap();
    total += 20;
    let refused = Instant::now();
    let s = wait_snapshot(&mut rx, "without WRITE on the target topics", WAIT, |s| {
        s.state == WorkerState::Degraded
            && s.message
                .as_deref()
                .is_some_and(|m| m.contains("refuses to let this worker write"))
    })
    .await;
    let write_refused_in = refused.elapsed();
    let without_write = s.message.clone().unwrap_or_default();
    for want in [
        "target cluster dc2",
        "TOPIC_AUTHORIZATION_FAILED",
        "--operation Write",
    ] {
        assert!(
            without_write.contains(want),
            "the status names {want:?}: {without_write}"
        );
    }
    apply(&source, &target, &write, true).await;
    wait_snapshot(&mut rx, "WRITE given back", WAIT * 2, |s| {
        positions_reach(s, "orders", &ends_at(total)) && s.state == WorkerState::Running
    })
    .await;
    println!(
        "least privilege without READ on the source topic: Degraded after {:.1} s: \"{message}\"; \
         without WRITE on the target topics: Degraded after {:.1} s: \"{without_write}\"",
        read_refused_in.as_secs_f64(),
        write_refused_in.as_secs_f64()
    );
    worker.stop().await;
    let src = read_to_end(&sb, "orders", Isolation::Committed).await;
    let dst = read_to_end(&tb, "dc1.orders", Isolation::Committed).await;
    assert_same(&src, &dst, "after the refusals");

    // AtLeastOnce: the page without its ExactlyOnce line, for a principal of its own (so
    // that nothing granted to `mirror` helps), from alias `src`.
    let alo: Vec<DocAcl> = documented_acls("test", "least-alo", "src")
        .into_iter()
        .filter(|a| !a.exactly_once_only())
        .collect();
    apply_all("User:alo", &source, &target, &alo).await;
    write_secret(
        &secrets,
        "alo-user",
        &[("username", b"alo"), ("password", b"alo-secret")],
    )
    .unwrap();
    let flow_file = dir.path().join("least-alo.yaml");
    let yaml = least_flow_yaml(
        "least-alo",
        "src",
        "alo-user",
        "AtLeastOnce",
        &source,
        &target,
    );
    std::fs::write(&flow_file, yaml).unwrap();
    let (tx, mut rx) = watch::channel(WorkerSnapshot::starting(
        "test",
        "least-alo",
        0,
        1,
        Delivery::AtLeastOnce,
    ));
    let began = Instant::now();
    let worker = Standalone::start(
        &standalone_args(&flow_file, &secrets),
        vec![Arc::new(tx) as Arc<dyn WorkerSink>],
    );
    let s = wait_snapshot(&mut rx, "AtLeastOnce as User:alo", WAIT * 2, |s| {
        positions_reach(s, "orders", &ends_at(total))
            && s.replication_latency.is_some()
            && s.topic_acls
                .as_ref()
                .is_some_and(|a| a.last_error.is_none() && a.synced > 0)
    })
    .await;
    let alo_in = began.elapsed();
    assert!(
        s.connection_problems.is_empty() && !said(&s).to_lowercase().contains("authoriz"),
        "nothing refused: {}",
        said(&s)
    );
    let begin = Instant::now();
    while group_committed(&tb, "billing", "src.orders", 2)
        .await
        .unwrap()
        .len()
        < 2
    {
        assert!(
            begin.elapsed() < WAIT,
            "group billing never synced for src.orders; status {}",
            said(&rx.borrow())
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    worker.stop().await;
    let dst = read_to_end(&tb, "src.orders", Isolation::Committed).await;
    assert_same(&src, &dst, "AtLeastOnce as User:alo");
    println!(
        "least privilege, AtLeastOnce: {} documented bindings (no TransactionalId) for User:alo; \
         {} records replicated in {:.1} s, group billing synced",
        alo.len(),
        dst.len(),
        alo_in.as_secs_f64()
    );
}

/// The documented line of `side` naming `words`, narrowed to its operation `op`.
fn documented_line(acls: &[DocAcl], side: Side, words: &[&str], op: &str) -> DocAcl {
    let doc = acls
        .iter()
        .find(|a| a.side == side && a.has(words) && a.has(&[op]))
        .unwrap_or_else(|| panic!("docs/SECURITY.md: no {side:?} line with {words:?} and {op}"));
    let mut args = strip_operations(&doc.args);
    args.extend(["--operation".to_owned(), op.to_owned()]);
    DocAcl { side, args }
}

/// `args` without its `--operation X` pairs.
fn strip_operations(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--operation" {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out
}
