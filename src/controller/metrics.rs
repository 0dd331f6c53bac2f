//! Controller metrics: reconciles, errors by category, reconcile duration, leadership.

use std::time::Instant;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

use super::error::ErrorCategory;
use crate::api::status::{RECONCILING, STALLED};

/// `resource` label values.
pub const FLOW: &str = "mirrorflow";
pub const CHECKPOINT: &str = "offsetcheckpoint";

/// Prometheus metrics of the controller.
#[derive(Clone)]
pub struct Metrics {
    /// `mirrorflow_controller_reconciles_total{resource}`.
    pub reconciles: IntCounterVec,
    /// `mirrorflow_controller_reconcile_errors_total{resource,category}`.
    pub errors: IntCounterVec,
    /// `mirrorflow_controller_reconcile_duration_seconds{resource}`.
    pub duration: HistogramVec,
    /// `mirrorflow_controller_leader`: 1 while this replica holds the lease.
    pub leader: IntGauge,
    /// `mirrorflow_flow_condition{namespace,flow,type,status}`: 1 for each condition's current
    /// status, 0 for the other two (alerts on DataLoss / TopicReset / Ready use it).
    pub flow_condition: prometheus::IntGaugeVec,
}

impl Metrics {
    /// Create the metrics and register them in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let reconciles = IntCounterVec::new(
            Opts::new(
                "mirrorflow_controller_reconciles_total",
                "Reconciles started",
            ),
            &["resource"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "mirrorflow_controller_reconcile_errors_total",
                "Reconcile problems by category (invalid specs and missing flows included)",
            ),
            &["resource", "category"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "mirrorflow_controller_reconcile_duration_seconds",
                "Reconcile duration",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["resource"],
        )?;
        let leader = IntGauge::new(
            "mirrorflow_controller_leader",
            "1 while this replica holds the leader lease",
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        let flow_condition = prometheus::IntGaugeVec::new(
            Opts::new(
                "mirrorflow_flow_condition",
                "MirrorFlow conditions: 1 for the current status of each condition type",
            ),
            &["namespace", "flow", "type", "status"],
        )?;
        registry.register(Box::new(flow_condition.clone()))?;
        // Zero series exist from the start, so rate() works before the first error.
        for r in [FLOW, CHECKPOINT] {
            for c in ErrorCategory::ALL {
                errors.with_label_values(&[r, c.as_str()]);
            }
        }
        Ok(Self {
            reconciles,
            errors,
            duration,
            leader,
            flow_condition,
        })
    }

    /// Export a flow's conditions as `mirrorflow_flow_condition`.
    pub fn set_flow_conditions(
        &self,
        namespace: &str,
        flow: &str,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) {
        // kstatus's Reconciling and Stalled are present only while True: absent is False.
        let absent_false = [RECONCILING, STALLED]
            .into_iter()
            .filter(|t| conditions.iter().all(|c| c.type_ != *t))
            .map(|t| (t, "False"));
        let present = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()));
        for (type_, current) in present.chain(absent_false) {
            for status in ["True", "False", "Unknown"] {
                self.flow_condition
                    .with_label_values(&[namespace, flow, type_, status])
                    .set(i64::from(current == status));
            }
        }
    }

    /// Count a reconcile; the returned guard records its duration when dropped.
    pub fn reconcile(&self, resource: &'static str) -> ReconcileTimer {
        self.reconciles.with_label_values(&[resource]).inc();
        ReconcileTimer {
            histogram: self.duration.with_label_values(&[resource]),
            start: Instant::now(),
        }
    }

    /// Count a problem of `category`.
    pub fn error(&self, resource: &'static str, category: ErrorCategory) {
        self.errors
            .with_label_values(&[resource, category.as_str()])
            .inc();
    }
}

/// Records a reconcile's duration on drop.
pub struct ReconcileTimer {
    histogram: prometheus::Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reconciles_errors_and_durations() {
        let registry = Registry::new();
        let m = Metrics::new(&registry).unwrap();
        drop(m.reconcile(FLOW));
        m.error(FLOW, ErrorCategory::KubeApi);
        assert_eq!(m.reconciles.with_label_values(&[FLOW]).get(), 1);
        assert_eq!(m.errors.with_label_values(&[FLOW, "KubeApi"]).get(), 1);
        assert_eq!(
            m.errors.with_label_values(&[CHECKPOINT, "KubeApi"]).get(),
            0
        );
        assert_eq!(m.duration.with_label_values(&[FLOW]).get_sample_count(), 1);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(text.contains("mirrorflow_controller_reconcile_errors_total{category=\"InvalidSpec\",resource=\"mirrorflow\"} 0"), "{text}");
    }
}

#[cfg(test)]
mod flow_condition_tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    #[test]
    fn current_status_is_one_and_the_others_zero() {
        let m = Metrics::new(&Registry::new()).unwrap();
        let cond = |t: &str, s: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        };
        m.set_flow_conditions(
            "ns",
            "f",
            &[cond("DataLoss", "True"), cond("Ready", "False")],
        );
        let get = |t: &str, s: &str| m.flow_condition.with_label_values(&["ns", "f", t, s]).get();
        assert_eq!((get("DataLoss", "True"), get("DataLoss", "False")), (1, 0));
        assert_eq!(
            (
                get("Ready", "True"),
                get("Ready", "False"),
                get("Ready", "Unknown")
            ),
            (0, 1, 0)
        );
        m.set_flow_conditions("ns", "f", &[cond("DataLoss", "False")]);
        assert_eq!((get("DataLoss", "True"), get("DataLoss", "False")), (0, 1));
        // Stalled goes away when it no longer holds: its gauge says False.
        m.set_flow_conditions("ns", "f", &[cond("Stalled", "True")]);
        assert_eq!((get("Stalled", "True"), get("Stalled", "False")), (1, 0));
        m.set_flow_conditions("ns", "f", &[cond("Ready", "True")]);
        assert_eq!((get("Stalled", "True"), get("Stalled", "False")), (0, 1));
        assert_eq!(
            (get("Reconciling", "True"), get("Reconciling", "False")),
            (0, 1)
        );
    }
}
