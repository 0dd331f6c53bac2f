//! Checkpoint metrics (Prometheus), registered on the worker's registry, every series prefixed
//! `mirrorflow_checkpoint_`: the list is on [`CheckpointMetrics`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounterVec, IntGauge, Opts, Registry};

use super::translate::Translation;

const PREFIX: &str = "mirrorflow_checkpoint_";

/// Translation kinds, for pre-creating the series.
pub const TRANSLATION_KINDS: [&str; 4] = ["exact", "safe", "clamped", "no_sync"];

/// Per-group checkpoint age, computed when scraped so a stuck runner shows a growing age.
#[derive(Clone)]
struct AgeCollector {
    gauge: GaugeVec,
    last: Arc<Mutex<HashMap<(String, String), Timestamp>>>,
}

impl Collector for AgeCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Timestamp::now();
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        self.gauge.reset();
        for ((checkpoint, group), t) in last.iter() {
            let age = now.duration_since(*t).as_secs_f64().max(0.0);
            self.gauge.with_label_values(&[checkpoint, group]).set(age);
        }
        self.gauge.collect()
    }
}

/// The checkpoint metrics of one runner. Every series is prefixed `mirrorflow_checkpoint_`;
/// `checkpoint` is the OffsetCheckpoint name.
///
/// | metric | labels | meaning |
/// |---|---|---|
/// | `age_seconds` | checkpoint, group | seconds since the group's checkpoints were last brought up to date, computed at scrape time (RPO) |
/// | `written_total` | checkpoint | checkpoint records written to `<sourceAlias>.checkpoints.internal` |
/// | `groups_synced_total` | checkpoint | target groups committed to |
/// | `groups_refused_total` | checkpoint | target group syncs refused because the group had active members |
/// | `commit_failures_total` | checkpoint | target group commits that failed otherwise |
/// | `translations_total` | kind | partition translations per cycle by kind: `exact`, `safe`, `clamped`, `no_sync` |
/// | `translation_fallbacks_total` | kind | the non-exact ones (`safe`, `clamped`, `no_sync`) |
/// | `cycle_seconds` | checkpoint | wall time of the last cycle (the group sync runs beside it) |
/// | `group_sync_seconds` | checkpoint | wall time of the last group sync |
/// | `group_syncs_superseded_total` | checkpoint | cycle plans replaced by newer ones before the group sync took them |
/// | `cycle_errors_total` | checkpoint | cycles that failed as a whole |
/// | `sync_partitions` | — | source partitions with an offset-sync history (memory: × 64 syncs) |
#[derive(Clone)]
pub struct CheckpointMetrics {
    ages: Arc<Mutex<HashMap<(String, String), Timestamp>>>,
    /// `written_total{checkpoint}`.
    pub written: IntCounterVec,
    /// `groups_synced_total{checkpoint}`.
    pub groups_synced: IntCounterVec,
    /// `groups_refused_total{checkpoint}`.
    pub groups_refused: IntCounterVec,
    /// `commit_failures_total{checkpoint}`.
    pub commit_failures: IntCounterVec,
    /// `translations_total{kind}`.
    pub translations: IntCounterVec,
    /// `translation_fallbacks_total{kind}`.
    pub fallbacks: IntCounterVec,
    /// `cycle_seconds{checkpoint}`.
    pub cycle_seconds: GaugeVec,
    /// `cycle_errors_total{checkpoint}`.
    pub cycle_errors: IntCounterVec,
    /// `group_sync_seconds{checkpoint}`.
    pub group_sync_seconds: GaugeVec,
    /// `group_syncs_superseded_total{checkpoint}`.
    pub group_syncs_superseded: IntCounterVec,
    /// `sync_partitions`.
    pub sync_partitions: IntGauge,
}

impl CheckpointMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let opts = |name: &str, help: &str| Opts::new(format!("{PREFIX}{name}"), help);
        let age = GaugeVec::new(
            opts(
                "age_seconds",
                "Seconds since the group's checkpoints were last brought up to date (RPO)",
            ),
            &["checkpoint", "group"],
        )?;
        let ages = Arc::new(Mutex::new(HashMap::new()));
        let written = IntCounterVec::new(
            opts("written_total", "Checkpoint records written"),
            &["checkpoint"],
        )?;
        let groups_synced = IntCounterVec::new(
            opts("groups_synced_total", "Target groups committed to"),
            &["checkpoint"],
        )?;
        let groups_refused = IntCounterVec::new(
            opts(
                "groups_refused_total",
                "Target group syncs refused: the group had active members",
            ),
            &["checkpoint"],
        )?;
        let commit_failures = IntCounterVec::new(
            opts(
                "commit_failures_total",
                "Target group commits that failed for another reason",
            ),
            &["checkpoint"],
        )?;
        let translations = IntCounterVec::new(
            opts("translations_total", "Partition translations by kind"),
            &["kind"],
        )?;
        let fallbacks = IntCounterVec::new(
            opts(
                "translation_fallbacks_total",
                "Non-exact partition translations by kind",
            ),
            &["kind"],
        )?;
        let cycle_seconds = GaugeVec::new(
            opts("cycle_seconds", "Wall time of the last cycle"),
            &["checkpoint"],
        )?;
        let cycle_errors = IntCounterVec::new(
            opts("cycle_errors_total", "Cycles that failed as a whole"),
            &["checkpoint"],
        )?;
        let group_sync_seconds = GaugeVec::new(
            opts("group_sync_seconds", "Wall time of the last group sync"),
            &["checkpoint"],
        )?;
        let group_syncs_superseded = IntCounterVec::new(
            opts(
                "group_syncs_superseded_total",
                "Cycle plans replaced by newer ones before the group sync took them",
            ),
            &["checkpoint"],
        )?;
        let sync_partitions = IntGauge::with_opts(opts(
            "sync_partitions",
            "Source partitions with an offset-sync history (each holds at most 64 syncs)",
        ))?;
        registry.register(Box::new(AgeCollector {
            gauge: age,
            last: ages.clone(),
        }))?;
        registry.register(Box::new(written.clone()))?;
        registry.register(Box::new(groups_synced.clone()))?;
        registry.register(Box::new(groups_refused.clone()))?;
        registry.register(Box::new(commit_failures.clone()))?;
        registry.register(Box::new(translations.clone()))?;
        registry.register(Box::new(fallbacks.clone()))?;
        registry.register(Box::new(cycle_seconds.clone()))?;
        registry.register(Box::new(cycle_errors.clone()))?;
        registry.register(Box::new(group_sync_seconds.clone()))?;
        registry.register(Box::new(group_syncs_superseded.clone()))?;
        registry.register(Box::new(sync_partitions.clone()))?;
        // Zero series from the start, so rate() works before the first event.
        for kind in TRANSLATION_KINDS {
            translations.with_label_values(&[kind]);
            if kind != "exact" {
                fallbacks.with_label_values(&[kind]);
            }
        }
        Ok(Self {
            ages,
            written,
            groups_synced,
            groups_refused,
            commit_failures,
            translations,
            fallbacks,
            cycle_seconds,
            cycle_errors,
            group_sync_seconds,
            group_syncs_superseded,
            sync_partitions,
        })
    }

    /// Pre-creates the per-checkpoint counters of `checkpoint`.
    pub fn init_checkpoint(&self, checkpoint: &str) {
        for c in [
            &self.written,
            &self.groups_synced,
            &self.groups_refused,
            &self.commit_failures,
            &self.cycle_errors,
            &self.group_syncs_superseded,
        ] {
            c.with_label_values(&[checkpoint]);
        }
    }

    /// Counts a cycle's partition translations (tallied first: one series update per kind,
    /// not per partition).
    pub fn translations<'a>(&self, ts: impl IntoIterator<Item = &'a Translation>) {
        let mut by_kind: BTreeMap<(&'static str, bool), u64> = BTreeMap::new();
        for t in ts {
            let exact = matches!(t, Translation::Exact { .. });
            *by_kind.entry((t.kind(), exact)).or_default() += 1;
        }
        for ((kind, exact), n) in by_kind {
            self.translations.with_label_values(&[kind]).inc_by(n);
            if !exact {
                self.fallbacks.with_label_values(&[kind]).inc_by(n);
            }
        }
    }

    /// Records that `group` of `checkpoint` was brought up to date at `at`.
    pub fn checkpointed(&self, checkpoint: &str, group: &str, at: Timestamp) {
        let mut ages = self.ages.lock().unwrap_or_else(|e| e.into_inner());
        ages.insert((checkpoint.to_string(), group.to_string()), at);
    }

    /// Keeps only the age series of the groups in `keep` for `checkpoint` (groups that
    /// disappeared or are no longer selected stop reporting).
    pub fn retain_groups(&self, checkpoint: &str, keep: impl Fn(&str) -> bool) {
        let mut ages = self.ages.lock().unwrap_or_else(|e| e.into_inner());
        ages.retain(|(c, g), _| c != checkpoint || keep(g));
    }

    /// Drops every series of a checkpoint that no longer exists.
    pub fn forget_checkpoint(&self, checkpoint: &str) {
        self.retain_groups(checkpoint, |_| false);
        for c in [
            &self.written,
            &self.groups_synced,
            &self.groups_refused,
            &self.commit_failures,
            &self.cycle_errors,
            &self.group_syncs_superseded,
        ] {
            let _ = c.remove_label_values(&[checkpoint]);
        }
        let _ = self.cycle_seconds.remove_label_values(&[checkpoint]);
        let _ = self.group_sync_seconds.remove_label_values(&[checkpoint]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::encode_registry;
    use crate::worker::checkpoint::translate::{NoSyncReason, SyncPoint};

    #[test]
    fn series_encode_and_age_is_computed_at_scrape() {
        let registry = Registry::new();
        let m = CheckpointMetrics::new(&registry).unwrap();
        m.init_checkpoint("cp");
        m.written.with_label_values(&["cp"]).inc_by(3);
        let sync = SyncPoint::new(1, 1);
        let exact = Translation::Exact {
            downstream: 1,
            sync,
        };
        m.translations(&[
            exact,
            Translation::Safe {
                downstream: 2,
                sync,
            },
            exact,
            Translation::NoSync {
                reason: NoSyncReason::Empty,
            },
        ]);
        m.checkpointed(
            "cp",
            "g1",
            Timestamp::now() - jiff::SignedDuration::from_secs(100),
        );
        let text = encode_registry(&registry);
        for needle in [
            "mirrorflow_checkpoint_written_total{checkpoint=\"cp\"} 3",
            "mirrorflow_checkpoint_groups_refused_total{checkpoint=\"cp\"} 0",
            "mirrorflow_checkpoint_group_syncs_superseded_total{checkpoint=\"cp\"} 0",
            "mirrorflow_checkpoint_translations_total{kind=\"exact\"} 2",
            "mirrorflow_checkpoint_translations_total{kind=\"safe\"} 1",
            "mirrorflow_checkpoint_translation_fallbacks_total{kind=\"safe\"} 1",
            "mirrorflow_checkpoint_translation_fallbacks_total{kind=\"no_sync\"} 1",
            "mirrorflow_checkpoint_translation_fallbacks_total{kind=\"clamped\"} 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        let age_line = text
            .lines()
            .find(|l| {
                l.starts_with("mirrorflow_checkpoint_age_seconds{checkpoint=\"cp\",group=\"g1\"}")
            })
            .unwrap_or_else(|| panic!("no age series in\n{text}"));
        let age: f64 = age_line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(age >= 100.0, "{age_line}");
        assert!(!text.contains("fallbacks_total{kind=\"exact\"}"));

        m.retain_groups("cp", |g| g != "g1");
        assert!(!encode_registry(&registry).contains("group=\"g1\""));
        m.forget_checkpoint("cp");
        assert!(!encode_registry(&registry).contains("checkpoint=\"cp\""));
        // Registering twice on one registry fails loudly instead of double counting.
        assert!(CheckpointMetrics::new(&registry).is_err());
    }
}
