//! Flows that would write the same target topic. Pure. Two writers of one topic interleave
//! their records, and each flow's offset syncs and checkpoints would describe offsets the other
//! one moved: failover would point consumers at the wrong records. The controller refuses the
//! flow that came second ([`first_collision`]); the one that came first keeps running.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use super::memo::Memo;
use crate::api::validate::full_match_regex;
use crate::api::{MirrorFlowSpec, ReplicationPolicyType};

/// Bytes a Kafka topic name may hold.
const TOPIC_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
/// Internal topics (`kafka::naming::is_internal_topic`), never replicated by any flow.
const INTERNAL: &[&str] = &[r"__.*", r"\..*", r".*\.internal", r".*-internal"];
/// Memory bound of one flow's DFA (bytes).
pub const DFA_SIZE_LIMIT: usize = 8 << 20;
/// Product states searched before giving up (and counting the pair as colliding).
pub const MAX_STATES: usize = 200_000;

/// The shared addresses of two comma-separated bootstrap lists (trimmed, lowercased, sorted).
pub fn shared_addresses(a: &str, b: &str) -> Vec<String> {
    let set = |s: &str| -> std::collections::BTreeSet<String> {
        s.split(',')
            .map(|x| x.trim().to_ascii_lowercase())
            .filter(|x| !x.is_empty())
            .collect()
    };
    set(a).intersection(&set(b)).cloned().collect()
}

/// The target prefix of a flow: `<sourceAlias><separator>` under Prefix, empty under Identity.
pub fn target_prefix(spec: &MirrorFlowSpec) -> String {
    match spec.replication_policy.type_ {
        ReplicationPolicyType::Prefix => {
            format!("{}{}", spec.source.alias, spec.replication_policy.separator)
        }
        ReplicationPolicyType::Identity => String::new(),
    }
}

/// Whether two flows share a target topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// Different target clusters, or no target topic name both can write.
    Disjoint,
    /// Both write this target topic (the shortest such name).
    Topic(String),
    /// A shared topic could not be ruled out (why).
    Undecided(String),
}

/// A flow's topic selection, compiled for the search.
struct Selection {
    include: Arc<dense::DFA<Vec<u32>>>,
    exclude: Arc<dense::DFA<Vec<u32>>>,
}

/// Compiled pattern lists, by list. Every reconcile compares its flow with each earlier one,
/// and building the DFAs took 0.05-2 s of CPU per reconcile at 100 flows (the reconcilers'
/// runtime starved); the lists rarely change, and flows share their exclude list.
static COMPILED: Memo<Vec<String>, Compiled> = Memo::new(4096);
type Compiled = Result<Arc<dense::DFA<Vec<u32>>>, PatternError>;

/// Why a pattern list could not be compiled for the search (boxed: memoized results stay
/// small).
#[derive(Debug, Clone, thiserror::Error)]
enum PatternError {
    /// A pattern is not a regex.
    #[error(transparent)]
    Regex(Box<regex::Error>),
    /// The patterns' automaton could not be built (e.g. over its size limit).
    #[error(transparent)]
    Automaton(Box<dense::BuildError>),
}

fn compile(patterns: &[String]) -> Compiled {
    COMPILED.get_or_compute(patterns, || build_dfa(patterns).map(Arc::new))
}

fn build_dfa(patterns: &[String]) -> Result<dense::DFA<Vec<u32>>, PatternError> {
    let anchored: Vec<String> = patterns
        .iter()
        .map(|p| full_match_regex(p).map(|r| r.as_str().to_string()))
        .collect::<Result<_, _>>()
        .map_err(|e| PatternError::Regex(Box::new(e)))?;
    let build = |unicode: bool| {
        dense::Builder::new()
            .configure(
                dense::Config::new()
                    // Every pattern that matches, not the leftmost-first one: full-match semantics.
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored)
                    // Only ASCII is ever fed, where the heuristic is exact.
                    .unicode_word_boundary(true)
                    .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                    .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
            )
            // Byte-oriented classes first: on the ASCII names fed here they match what the
            // Unicode ones match, with far smaller DFAs; Unicode for what needs it (`\p{L}`).
            .syntax(
                regex_automata::util::syntax::Config::new()
                    .unicode(unicode)
                    .utf8(unicode),
            )
            .build_many(&anchored)
            .map_err(|e| PatternError::Automaton(Box::new(e)))
    };
    build(false).or_else(|_| build(true))
}

impl Selection {
    fn of(spec: &MirrorFlowSpec) -> Result<Self, PatternError> {
        let mut exclude = spec.topics.exclude.clone();
        exclude.extend(INTERNAL.iter().map(|s| s.to_string()));
        Ok(Self {
            include: compile(&spec.topics.include)?,
            exclude: compile(&exclude)?,
        })
    }

    fn start(&self) -> [StateID; 2] {
        let cfg = start::Config::new().anchored(Anchored::Yes);
        [
            self.include
                .start_state(&cfg)
                .expect("anchored start built"),
            self.exclude
                .start_state(&cfg)
                .expect("anchored start built"),
        ]
    }

    fn step(&self, s: [StateID; 2], b: u8) -> [StateID; 2] {
        [
            self.include.next_state(s[0], b),
            self.exclude.next_state(s[1], b),
        ]
    }

    /// Whether the name read so far is selected.
    fn accepts(&self, s: [StateID; 2]) -> bool {
        self.include
            .is_match_state(self.include.next_eoi_state(s[0]))
            && !self
                .exclude
                .is_match_state(self.exclude.next_eoi_state(s[1]))
    }

    fn dead(&self, s: [StateID; 2]) -> bool {
        self.include.is_dead_state(s[0])
    }
}

/// What of a spec the overlap depends on.
type PairKey = [(String, String, Vec<String>, Vec<String>); 2];

/// Overlaps already decided, by what they depend on. A reconcile compares its flow with every
/// earlier one, about twice a minute per flow, and pairs rarely change.
static DECIDED: Memo<PairKey, Overlap> = Memo::new(100_000);

fn pair_key(a: &MirrorFlowSpec, b: &MirrorFlowSpec) -> PairKey {
    let of = |s: &MirrorFlowSpec| {
        (
            s.target.bootstrap_servers.clone(),
            target_prefix(s),
            s.topics.include.clone(),
            s.topics.exclude.clone(),
        )
    };
    [of(a), of(b)]
}

/// Whether flows `a` and `b` (valid specs) could write the same target topic.
///
/// The rule, and why it is decidable here:
/// - **Same target cluster**: the two `target.bootstrapServers` lists share an address
///   (`host:port`, compared trimmed and lowercased). Aliases are names a flow author picks and
///   say nothing about identity; two addresses of one cluster that share none (a DNS alias, an
///   IP) are not recognised.
/// - **Same target topic**: a flow writes `p + s` for each source topic `s` it replicates,
///   `p` being its target prefix (`<sourceAlias><separator>` under `Prefix`, empty under
///   `Identity`). The topics a flow replicates are the names over Kafka's topic alphabet
///   (`[a-zA-Z0-9._-]`) that fully match an `include` pattern and no `exclude` pattern, minus
///   internal topics (`__*`, `.*`, `*.internal`, `*-internal`). Include and exclude patterns are
///   regular expressions (Rust's `regex` has no back-references or look-around), so each set
///   is a regular language and whether two flows share a target name is decided exactly: one
///   prefix must start with the other (`pL = pS + r`, else no name is shared), and then a
///   breadth-first search over the product of the four DFAs (both flows' includes and
///   excludes, the shorter-prefix flow's started after reading `r`) finds the shortest shared
///   target topic, which the condition names. Not modelled (so at worst a flow is refused for
///   a topic it would skip): the `Prefix` cycle rule and the 249-character limit.
/// - A pattern the DFA builder cannot handle within [`DFA_SIZE_LIMIT`], or a search beyond
///   [`MAX_STATES`] states, counts as a collision ("cannot be ruled out"): refusing is safe,
///   two writers are not.
pub fn overlap(a: &MirrorFlowSpec, b: &MirrorFlowSpec) -> Overlap {
    if shared_addresses(&a.target.bootstrap_servers, &b.target.bootstrap_servers).is_empty() {
        return Overlap::Disjoint;
    }
    DECIDED.get_or_compute(&pair_key(a, b), || decide(a, b))
}

fn decide(a: &MirrorFlowSpec, b: &MirrorFlowSpec) -> Overlap {
    let (pa, pb) = (target_prefix(a), target_prefix(b));
    // The flow with the shorter prefix reads `rest` of the longer prefix as part of its topic.
    let (short, long, long_prefix, rest) = if pb.starts_with(&pa) {
        (a, b, pb.clone(), pb[pa.len()..].to_string())
    } else if pa.starts_with(&pb) {
        (b, a, pa.clone(), pa[pb.len()..].to_string())
    } else {
        return Overlap::Disjoint;
    };
    let (s, l) = match (Selection::of(short), Selection::of(long)) {
        (Ok(s), Ok(l)) => (s, l),
        (Err(e), _) | (_, Err(e)) => {
            return Overlap::Undecided(format!("a topic pattern cannot be analysed: {e}"))
        }
    };
    let mut s0 = s.start();
    for b in rest.bytes() {
        s0 = s.step(s0, b);
    }
    let l0 = l.start();
    // The long flow's source topic (the suffix searched) must not be empty.
    type Node = ([StateID; 2], [StateID; 2]);
    let mut parent: HashMap<Node, Option<(Node, u8)>> = HashMap::new();
    let mut queue = VecDeque::new();
    let first: Node = (s0, l0);
    if s.dead(first.0) || l.dead(first.1) {
        return Overlap::Disjoint;
    }
    parent.insert(first, None);
    queue.push_back(first);
    while let Some(node) = queue.pop_front() {
        for &b in TOPIC_ALPHABET {
            let next: Node = (s.step(node.0, b), l.step(node.1, b));
            if s.dead(next.0) || l.dead(next.1) || parent.contains_key(&next) {
                continue;
            }
            parent.insert(next, Some((node, b)));
            if s.accepts(next.0) && l.accepts(next.1) {
                let mut suffix = Vec::new();
                let mut at = next;
                while let Some(Some((p, b))) = parent.get(&at) {
                    suffix.push(*b);
                    at = *p;
                }
                suffix.reverse();
                return Overlap::Topic(format!(
                    "{long_prefix}{}",
                    String::from_utf8_lossy(&suffix)
                ));
            }
            if parent.len() >= MAX_STATES {
                return Overlap::Undecided(format!(
                    "the topic patterns are too complex to compare ({MAX_STATES} states searched)"
                ));
            }
            queue.push_back(next);
        }
    }
    Overlap::Disjoint
}

/// A flow as the overlap check sees it.
#[derive(Debug, Clone, Copy)]
pub struct FlowEntry<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// `metadata.creationTimestamp` (absent sorts first: it is older than anything we see).
    pub created: Option<jiff::Timestamp>,
    pub spec: &'a MirrorFlowSpec,
}

impl FlowEntry<'_> {
    fn order_key(&self) -> (Option<jiff::Timestamp>, &str, &str) {
        (self.created, self.name, self.namespace)
    }
}

/// Why `flow` is refused: the first (oldest) of `others` that came before it and shares a
/// target topic with it, with Ready's message; `None` when it may run. "Before" is
/// creationTimestamp, then name, then namespace, so of two colliding flows exactly one is
/// refused whichever is reconciled first. `others` should hold only valid flows that are
/// not being deleted; `flow` itself among them is skipped.
pub fn first_collision(flow: &FlowEntry<'_>, others: &[FlowEntry<'_>]) -> Option<String> {
    let mut earlier: Vec<&FlowEntry<'_>> = others
        .iter()
        .filter(|o| !(o.namespace == flow.namespace && o.name == flow.name))
        .filter(|o| o.order_key() < flow.order_key())
        .collect();
    earlier.sort_by(|x, y| x.order_key().cmp(&y.order_key()));
    earlier.into_iter().find_map(|o| {
        let why = match overlap(flow.spec, o.spec) {
            Overlap::Disjoint => return None,
            Overlap::Topic(t) => format!("both would write target topic {t:?}"),
            Overlap::Undecided(e) => format!("a shared target topic cannot be ruled out: {e}"),
        };
        let shared = shared_addresses(
            &flow.spec.target.bootstrap_servers,
            &o.spec.target.bootstrap_servers,
        )
        .join(",");
        Some(format!(
            "MirrorFlow {}/{} (created earlier) writes to the same target cluster ({shared}) and {why}; \
             this flow's workers are stopped until the topic selections or policies no longer overlap \
             (see docs/ARCHITECTURE.md#flows-that-share-a-target)",
            o.namespace, o.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterSpec, ReplicationPolicy, TopicSelector};
    use pretty_assertions::assert_eq;

    fn flow(src: &str, target_servers: &str, include: &[&str], exclude: &[&str]) -> MirrorFlowSpec {
        MirrorFlowSpec {
            source: ClusterSpec {
                alias: src.into(),
                bootstrap_servers: format!("{src}:9092"),
                ..Default::default()
            },
            target: ClusterSpec {
                alias: "b".into(),
                bootstrap_servers: target_servers.into(),
                ..Default::default()
            },
            topics: TopicSelector {
                include: include.iter().map(|s| s.to_string()).collect(),
                exclude: exclude.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            ..serde_json::from_value(serde_json::json!({
                "source": {"alias": "x", "bootstrapServers": "x"},
                "target": {"alias": "y", "bootstrapServers": "y"}
            }))
            .unwrap()
        }
    }

    fn identity(mut f: MirrorFlowSpec) -> MirrorFlowSpec {
        f.replication_policy = ReplicationPolicy {
            type_: ReplicationPolicyType::Identity,
            ..Default::default()
        };
        f
    }

    fn sep(mut f: MirrorFlowSpec, s: &str) -> MirrorFlowSpec {
        f.replication_policy.separator = s.into();
        f
    }

    fn topic(t: &str) -> Overlap {
        Overlap::Topic(t.into())
    }

    #[test]
    fn overlap_table() {
        let all: &[&str] = &[".*"];
        let none: &[&str] = &[];
        let cases: Vec<(&str, MirrorFlowSpec, MirrorFlowSpec, Overlap)> = vec![
            (
                "other target cluster",
                identity(flow("a", "b:9092", all, none)),
                identity(flow("c", "c2:9092", all, none)),
                Overlap::Disjoint,
            ),
            (
                "one shared address among several, case and spaces ignored",
                identity(flow("a", "b1:9092, B2:9092", &["orders"], none)),
                identity(flow("c", "b2:9092,b3:9092", &["orders"], none)),
                topic("orders"),
            ),
            (
                "fan-in with Prefix: a.x and c.x never meet",
                flow("a", "b:9092", all, none),
                flow("c", "b:9092", all, none),
                Overlap::Disjoint,
            ),
            (
                "same source alias with Prefix, both take everything",
                flow("a", "b:9092", all, none),
                flow("a", "b:9092", all, none),
                topic("a.a"),
            ),
            (
                "same source alias, disjoint literal selections",
                flow("a", "b:9092", &["orders"], none),
                flow("a", "b:9092", &["payments"], none),
                Overlap::Disjoint,
            ),
            (
                "same source alias, regex selections that meet in one name",
                flow("a", "b:9092", &["ord.*"], none),
                flow("a", "b:9092", &[".*ers"], none),
                // The shortest name both match: "ord" then "ers".
                topic("a.orders"),
            ),
            (
                "an exclude removes the only shared name",
                flow("a", "b:9092", &["orders|payments"], &["orders"]),
                flow("a", "b:9092", &["orders"], none),
                Overlap::Disjoint,
            ),
            (
                "excludes on both sides leave the middle",
                flow("a", "b:9092", &["t[0-9]"], &["t[0-4]"]),
                flow("a", "b:9092", &["t[0-9]"], &["t[6-9]"]),
                topic("a.t5"),
            ),
            (
                "Identity flows from two sources, both take everything",
                identity(flow("a", "b:9092", all, none)),
                identity(flow("c", "b:9092", all, none)),
                topic("a"),
            ),
            (
                "Identity flows, disjoint prefixes in the patterns",
                identity(flow("a", "b:9092", &["team-a-.*"], none)),
                identity(flow("c", "b:9092", &["team-c-.*"], none)),
                Overlap::Disjoint,
            ),
            (
                "Identity meets Prefix: the Identity flow's topic carries the prefix",
                identity(flow("c", "b:9092", &["a\\..*"], none)),
                flow("a", "b:9092", &["orders"], none),
                topic("a.orders"),
            ),
            (
                "Identity flow taking everything but remote topics, against Prefix",
                identity(flow("c", "b:9092", all, &[".*\\..*"])),
                flow("a", "b:9092", all, none),
                Overlap::Disjoint,
            ),
            (
                "internal topics are never replicated by either",
                identity(flow("a", "b:9092", &["__.*|x\\.internal"], none)),
                identity(flow("c", "b:9092", all, none)),
                Overlap::Disjoint,
            ),
            (
                "one prefix extends the other: alias a with separator '-' and alias a-b with '.'",
                sep(flow("a", "b:9092", &["b\\.orders"], none), "-"),
                flow("a-b", "b:9092", &["orders"], none),
                topic("a-b.orders"),
            ),
            (
                "prefixes that diverge",
                sep(flow("a", "b:9092", all, none), "_"),
                flow("a", "b:9092", all, none),
                Overlap::Disjoint,
            ),
            (
                "an empty include selects nothing",
                identity(flow("a", "b:9092", none, none)),
                identity(flow("c", "b:9092", all, none)),
                Overlap::Disjoint,
            ),
            (
                "word boundaries and classes over ASCII",
                identity(flow("a", "b:9092", &[r"\bx\w+"], none)),
                identity(flow("c", "b:9092", &["x_.*"], none)),
                topic("x_"),
            ),
        ];
        for (name, x, y, want) in cases {
            assert_eq!(overlap(&x, &y), want, "{name}");
            // Symmetric in its verdict.
            assert_eq!(overlap(&y, &x), want, "{name} (swapped)");
        }
    }

    #[test]
    fn too_complex_patterns_count_as_overlapping() {
        // (a|b){20} after a free prefix: a DFA of 2^20 states is refused by the size limit.
        let hard = identity(flow("a", "b:9092", &["[ab]*a[ab]{22}"], none()));
        let all = identity(flow("c", "b:9092", &[".*"], none()));
        match overlap(&hard, &all) {
            Overlap::Undecided(why) => assert!(why.contains("cannot be analysed"), "{why}"),
            other => panic!("expected Undecided, got {other:?}"),
        }
    }

    fn none() -> &'static [&'static str] {
        &[]
    }

    fn entry<'a>(ns: &'a str, name: &'a str, at: i64, spec: &'a MirrorFlowSpec) -> FlowEntry<'a> {
        FlowEntry {
            namespace: ns,
            name,
            created: Some(jiff::Timestamp::from_second(at).unwrap()),
            spec,
        }
    }

    #[test]
    fn the_later_flow_is_refused_naming_the_earlier() {
        let orders = identity(flow("a", "b:9092", &["orders"], none()));
        let all = identity(flow("c", "b:9092", &[".*"], none()));
        let other = identity(flow("c", "b:9092", &["payments"], none()));
        let a = entry("team-a", "mirror", 100, &orders);
        let b = entry("team-b", "mirror", 200, &all);
        let c = entry("team-c", "pay", 300, &other);
        let flows = [a, b, c];
        // b came after a and takes "orders" too.
        let msg = first_collision(&b, &flows).unwrap();
        assert!(
            msg.starts_with("MirrorFlow team-a/mirror (created earlier) writes to the same target cluster (b:9092) and both would write target topic \"orders\""),
            "{msg}"
        );
        // a came first: it runs. c shares nothing with a, but b (earlier) takes everything.
        assert_eq!(first_collision(&a, &flows), None);
        let msg = first_collision(&c, &flows).unwrap();
        assert!(
            msg.contains("team-b/mirror") && msg.contains("\"payments\""),
            "{msg}"
        );
        // Same creation time: the name decides, then the namespace.
        let a2 = entry("team-a", "zzz", 200, &orders);
        assert!(first_collision(&a2, &[a2, b])
            .unwrap()
            .contains("team-b/mirror"));
        assert_eq!(first_collision(&b, &[a2, b]), None);
        let b2 = entry("team-z", "mirror", 200, &orders);
        assert!(first_collision(&b2, &[b, b2])
            .unwrap()
            .contains("team-b/mirror"));
        // A flow is never compared with itself.
        assert_eq!(first_collision(&b, &[b]), None);
    }

    #[test]
    fn shared_addresses_table() {
        let cases = [
            ("b:9092", "b:9092", vec!["b:9092"]),
            ("B:9092 ,c:9092", "c:9092,b:9092", vec!["b:9092", "c:9092"]),
            ("b:9092", "b:9093", vec![]),
            ("b:9092,", ",", vec![]),
        ];
        for (x, y, want) in cases {
            assert_eq!(shared_addresses(x, y), want, "{x} / {y}");
        }
    }
}
