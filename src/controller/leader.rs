//! Leader election on a `coordination.k8s.io/v1` Lease, so two controller replicas never
//! reconcile at once. kube 5's runtime has no lease helper, so this is a small one with
//! client-go's semantics: a lease expires `leaseDurationSeconds` after *we saw it change*
//! (our monotonic clock only: no trust in the holder's clock, no wall-clock jumps), updates
//! use optimistic concurrency (resourceVersion), and a leader steps down when it has not
//! renewed within the renew deadline, counted from when its last successful renewal was
//! *sent* and bounding every call (a hung request counts against it): it stops writing
//! ([`Leadership`]) before anybody may take the lease over.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;

/// Whether this replica may write: always without leader election; with it, until the renew
/// deadline of the last successful renewal (a monotonic clock), so a replica that cannot renew
/// stops writing before another one may take the lease over.
#[derive(Debug, Clone, Default)]
pub struct Leadership(Option<Arc<Mutex<Option<Instant>>>>);

impl Leadership {
    /// No leader election: always the leader.
    pub fn always() -> Self {
        Self(None)
    }

    /// Leader election: not the leader until [`Leadership::renewed`].
    pub fn elected() -> Self {
        Self(Some(Arc::new(Mutex::new(None))))
    }

    /// The lease is ours until `until`.
    pub fn renewed(&self, until: Instant) {
        if let Some(m) = &self.0 {
            *m.lock().expect("leadership lock") = Some(until);
        }
    }

    /// The lease is not ours any more.
    pub fn lost(&self) {
        if let Some(m) = &self.0 {
            *m.lock().expect("leadership lock") = None;
        }
    }

    /// Whether this replica may write now.
    pub fn holds(&self) -> bool {
        match &self.0 {
            None => true,
            Some(m) => m
                .lock()
                .expect("leadership lock")
                .is_some_and(|until| Instant::now() < until),
        }
    }
}

/// Lease timing, client-go's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down (must be < lease_duration).
    pub renew_deadline: Duration,
    /// Interval between attempts (acquire and renew).
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// Settings with client-go's default timing (15 s / 10 s / 2 s).
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What to do with the lease as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No Lease object: create it holding it.
    Create,
    /// Nobody holds it (released): take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// The holder stopped renewing for longer than the lease duration: take it over.
    Steal { previous: String },
    /// Someone else holds a live lease, for at least this long.
    Wait {
        holder: String,
        expires_in: Duration,
    },
}

/// Decide from the lease's spec (`None`: no Lease object), our identity, and how long ago (on
/// our monotonic clock) we first saw the current lease record (holder + renewTime): a
/// skewed or jumping clock, ours or the holder's, cannot make us take it over early.
pub fn decide(
    lease: Option<&LeaseSpec>,
    identity: &str,
    seen_for: Duration,
    default_duration: Duration,
) -> LeaseDecision {
    let Some(spec) = lease else {
        return LeaseDecision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() {
        return LeaseDecision::Acquire;
    }
    if holder == identity {
        return LeaseDecision::Renew;
    }
    let duration = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.unsigned_abs().into()))
        .unwrap_or(default_duration);
    if seen_for > duration {
        LeaseDecision::Steal {
            previous: holder.to_string(),
        }
    } else {
        LeaseDecision::Wait {
            holder: holder.to_string(),
            expires_in: duration - seen_for,
        }
    }
}

/// The lease spec to write for `decision`; `None` for [`LeaseDecision::Wait`].
pub fn next_spec(
    decision: &LeaseDecision,
    current: Option<&LeaseSpec>,
    identity: &str,
    now: Timestamp,
    duration: Duration,
) -> Option<LeaseSpec> {
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    let fresh = |transitions| LeaseSpec {
        holder_identity: Some(identity.to_string()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(duration.as_secs().try_into().unwrap_or(i32::MAX)),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    match decision {
        LeaseDecision::Wait { .. } => None,
        LeaseDecision::Create => Some(fresh(0)),
        LeaseDecision::Acquire | LeaseDecision::Steal { .. } => Some(fresh(transitions + 1)),
        LeaseDecision::Renew => {
            let mut s = current.cloned().unwrap_or_default();
            s.renew_time = Some(MicroTime(now));
            s.lease_duration_seconds = Some(duration.as_secs().try_into().unwrap_or(i32::MAX));
            Some(s)
        }
    }
}

/// Result of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease now.
    Leader,
    /// Someone else holds it.
    Follower { holder: String },
    /// Somebody wrote the lease between our read and our write; try again.
    Conflict,
}

/// Why [`LeaderElector::hold`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// Shutdown was requested while we were leader.
    Shutdown,
    /// Another replica holds the lease, or we could not renew within the renew deadline.
    Lost(String),
}

/// Acquires, holds and releases one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// The last lease record seen (holder, renewTime) and when (monotonic) we first saw it.
    observed: Mutex<Option<(String, Option<Timestamp>, Instant)>>,
    /// Until when we may write, set on every successful renewal.
    leadership: Leadership,
    /// When the last successful acquisition or renewal was sent.
    renewed_at: Mutex<Option<Instant>>,
}

impl LeaderElector {
    /// An elector for the lease in `settings`; `leadership` follows what it holds.
    pub fn new(client: Client, settings: LeaseSettings, leadership: Leadership) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: Mutex::new(None),
            leadership,
            renewed_at: Mutex::new(None),
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn record_seen_at(&self, spec: Option<&LeaseSpec>, now: Instant) -> Instant {
        let holder = spec
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let renew = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        let mut obs = self.observed.lock().expect("lease observation lock");
        match &*obs {
            Some((h, r, at)) if *h == holder && *r == renew => *at,
            _ => {
                *obs = Some((holder, renew, now));
                now
            }
        }
    }

    /// One acquire-or-renew attempt. On success, [`Leadership`] holds until the renew
    /// deadline counted from this attempt's start.
    pub async fn try_acquire_or_renew(&self) -> Result<Attempt, kube::Error> {
        let s = &self.settings;
        let started = Instant::now();
        let now = Timestamp::now();
        let lease = self.api.get_opt(&s.name).await?;
        let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
        let seen = self.record_seen_at(spec, Instant::now());
        let decision = match (&lease, spec) {
            // A Lease without spec is as good as released.
            (Some(_), None) => LeaseDecision::Acquire,
            _ => decide(spec, &s.identity, seen.elapsed(), s.lease_duration),
        };
        let Some(next) = next_spec(&decision, spec, &s.identity, now, s.lease_duration) else {
            let LeaseDecision::Wait { holder, .. } = decision else {
                unreachable!("only Wait has no next spec")
            };
            return Ok(Attempt::Follower { holder });
        };
        if let LeaseDecision::Steal { previous } = &decision {
            tracing::warn!(lease = %s.name, %previous, "taking over an expired lease");
        }
        let result = match lease {
            None => {
                let l = Lease {
                    metadata: ObjectMeta {
                        name: Some(s.name.clone()),
                        namespace: Some(s.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(next),
                };
                self.api.create(&PostParams::default(), &l).await
            }
            Some(mut l) => {
                // Keeps metadata.resourceVersion: the write fails if anyone wrote in between.
                l.spec = Some(next);
                self.api.replace(&s.name, &PostParams::default(), &l).await
            }
        };
        match result {
            Ok(_) => {
                self.leadership.renewed(started + s.renew_deadline);
                *self.renewed_at.lock().expect("renewal lock") = Some(started);
                Ok(Attempt::Leader)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// [`Self::try_acquire_or_renew`], bounded: a call that hangs is an error.
    async fn attempt(&self, limit: Duration) -> Result<Attempt, Option<kube::Error>> {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Conflict)) => Err(None),
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        }
    }

    /// Wait until we are leader (`true`) or `shutdown` resolves first (`false`).
    pub async fn acquire(&self, shutdown: impl std::future::Future<Output = ()>) -> bool {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut last_holder = None;
        loop {
            match self
                .attempt(self.settings.renew_deadline)
                .await
                .map_err(|e| e.map(|e| e.to_string()))
            {
                Ok(Attempt::Leader) => {
                    tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, "became leader");
                    return true;
                }
                Ok(Attempt::Follower { holder }) => {
                    if last_holder.as_ref() != Some(&holder) {
                        tracing::info!(lease = %self.settings.name, %holder, "waiting for the leader lease");
                        last_holder = Some(holder);
                    }
                }
                Ok(Attempt::Conflict) | Err(None) => {}
                Err(Some(e)) => {
                    tracing::warn!(lease = %self.settings.name, error = %e, "leader election attempt failed")
                }
            }
            tokio::select! {
                _ = &mut shutdown => return false,
                _ = tokio::time::sleep(self.settings.retry_period) => {}
            }
        }
    }

    /// Renew every retry period until `shutdown` resolves or leadership is lost. Failures and
    /// conflicts are retried with backoff, all of it bounded by the renew deadline counted
    /// from the last successful renewal (monotonic clock); past it, leadership is lost (and
    /// [`Leadership`] already stopped the reconcilers from writing).
    pub async fn hold(&self, shutdown: impl std::future::Future<Output = ()>) -> HoldOutcome {
        let mut shutdown = std::pin::pin!(shutdown);
        let s = &self.settings;
        loop {
            let due = Instant::now() + s.retry_period;
            tokio::select! {
                _ = &mut shutdown => return HoldOutcome::Shutdown,
                _ = tokio::time::sleep(s.retry_period) => {}
            }
            let woke = Instant::now();
            let renewed_at = self
                .renewed_at
                .lock()
                .expect("renewal lock")
                .unwrap_or_else(Instant::now);
            let deadline = renewed_at + s.renew_deadline;
            let backoff = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(s.retry_period)
                .without_max_times();
            let renew = (|| async {
                let left = deadline.saturating_duration_since(Instant::now());
                self.attempt(left).await
            })
            .retry(backoff)
            .when(|_| Instant::now() < deadline)
            .notify(|e: &Option<kube::Error>, after| {
                if let Some(e) = e {
                    tracing::warn!(lease = %s.name, error = %e, retry_in = ?after, "lease renewal failed");
                }
            });
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = match tokio::time::timeout(left, renew).await {
                Ok(a) => a,
                Err(_) => Err(None),
            };
            let done = Instant::now();
            tracing::debug!(
                lease = %s.name,
                woke_late_ms = woke.saturating_duration_since(due).as_millis() as u64,
                renew_ms = done.saturating_duration_since(woke).as_millis() as u64,
                ok = attempt.is_ok(),
                "lease renewal"
            );
            match attempt {
                Ok(Attempt::Leader) => {}
                Ok(Attempt::Follower { holder }) => {
                    self.leadership.lost();
                    return HoldOutcome::Lost(format!("lease {} is held by {holder}", s.name));
                }
                Ok(Attempt::Conflict) => unreachable!("conflicts are retried"),
                Err(e) => {
                    self.leadership.lost();
                    return HoldOutcome::Lost(format!(
                        "could not renew lease {} within the renew deadline of {:?}: {}",
                        s.name,
                        s.renew_deadline,
                        e.map(|e| e.to_string())
                            .unwrap_or_else(|| "no answer in time, or write conflicts".into())
                    ));
                }
            }
        }
    }

    /// Give the lease up (after a graceful shutdown) so a successor need not wait for expiry.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let s = &self.settings;
        let Some(mut l) = self.api.get_opt(&s.name).await? else {
            return Ok(());
        };
        let Some(spec) = l.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
            return Ok(());
        }
        self.leadership.lost();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&s.name, &PostParams::default(), &l)
            .await?;
        tracing::info!(lease = %s.name, "released the leader lease");
        Ok(())
    }
}

/// Where the elector thread is ([`LeaseThread`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Waiting for the lease.
    Acquiring,
    /// We hold it.
    Leader,
    /// Leadership is lost (or the lease client could not be built): why.
    Lost(String),
    /// Stopped on request (after releasing the lease if we held it).
    Stopped,
}

/// The elector on a thread of its own, with its own single-threaded runtime and its own
/// [`Client`] (own connections): the reconcilers' bursts (their runtime's run queue, the
/// shared client's request buffer and connection pool) cannot delay a renewal. client-go gets
/// the same from preemptive goroutines and a separate leader-election client.
pub struct LeaseThread {
    state: tokio::sync::watch::Receiver<LeaseState>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl LeaseThread {
    /// Start electing on a new thread; `client` builds the lease client there (its request
    /// buffer and connections are spawned on the runtime it is built on).
    pub fn spawn(
        client: impl FnOnce() -> Result<Client, kube::Error> + Send + 'static,
        settings: LeaseSettings,
        leadership: Leadership,
    ) -> std::io::Result<Self> {
        let (state_tx, state) = tokio::sync::watch::channel(LeaseState::Acquiring);
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("leader-election".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let stopped = move || {
                        let mut rx = stop_rx.clone();
                        async move {
                            let _ = rx.wait_for(|s| *s).await;
                        }
                    };
                    let client = match client() {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = state_tx.send(LeaseState::Lost(format!(
                                "cannot build the lease client: {e}"
                            )));
                            return;
                        }
                    };
                    let elector = LeaderElector::new(client, settings, leadership);
                    if !elector.acquire(stopped()).await {
                        let _ = state_tx.send(LeaseState::Stopped);
                        return;
                    }
                    let _ = state_tx.send(LeaseState::Leader);
                    match elector.hold(stopped()).await {
                        HoldOutcome::Shutdown => {
                            if let Err(e) = elector.release().await {
                                tracing::warn!(error = %e, "could not release the leader lease");
                            }
                            let _ = state_tx.send(LeaseState::Stopped);
                        }
                        HoldOutcome::Lost(why) => {
                            let _ = state_tx.send(LeaseState::Lost(why));
                        }
                    }
                })
            })?;
        Ok(Self { state, stop })
    }

    /// Wait until the state is no longer `Acquiring` (or, for [`Self::settled`], no longer
    /// `Leader` either) and return it; a thread that died counts as lost.
    async fn wait(&self, done: impl Fn(&LeaseState) -> bool) -> LeaseState {
        let mut rx = self.state.clone();
        let state = rx.wait_for(|s| done(s)).await.map(|s| s.clone());
        state.unwrap_or_else(|_| LeaseState::Lost("the leader-election thread ended".into()))
    }

    /// `Leader`, `Lost` or `Stopped`, whichever comes first.
    pub async fn elected(&self) -> LeaseState {
        self.wait(|s| *s != LeaseState::Acquiring).await
    }

    /// `Lost` or `Stopped`: the end of leadership.
    pub async fn settled(&self) -> LeaseState {
        self.wait(|s| matches!(s, LeaseState::Lost(_) | LeaseState::Stopped))
            .await
    }

    /// Stop electing; a held lease is released. [`Self::settled`] tells when that is done.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn held(by: &str, renew: i64, duration: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(by.into()),
            renew_time: Some(MicroTime(t(renew))),
            acquire_time: Some(MicroTime(t(0))),
            lease_duration_seconds: duration,
            lease_transitions: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let other = held("b", 0, Some(15));
        let released = LeaseSpec {
            holder_identity: None,
            ..held("x", 0, Some(1))
        };
        let empty_holder = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held("x", 0, Some(1))
        };
        let ours = held("a", 0, Some(15));
        let old_renew = held("b", -1000, Some(15));
        let no_duration = held("b", 0, None);
        let secs = Duration::from_secs;
        let cases: Vec<(&str, Option<&LeaseSpec>, u64, LeaseDecision)> = vec![
            ("no lease", None, 0, LeaseDecision::Create),
            ("released", Some(&released), 5, LeaseDecision::Acquire),
            (
                "empty holder",
                Some(&empty_holder),
                5,
                LeaseDecision::Acquire,
            ),
            ("ours", Some(&ours), 100, LeaseDecision::Renew),
            (
                "other, live",
                Some(&other),
                10,
                LeaseDecision::Wait {
                    holder: "b".into(),
                    expires_in: secs(5),
                },
            ),
            (
                "other, exactly at expiry",
                Some(&other),
                15,
                LeaseDecision::Wait {
                    holder: "b".into(),
                    expires_in: secs(0),
                },
            ),
            (
                "other, expired",
                Some(&other),
                16,
                LeaseDecision::Steal {
                    previous: "b".into(),
                },
            ),
            (
                "an old renewTime does not matter, only how long we have seen the record",
                Some(&old_renew),
                6,
                LeaseDecision::Wait {
                    holder: "b".into(),
                    expires_in: secs(9),
                },
            ),
            (
                "no duration in the lease: our default",
                Some(&no_duration),
                16,
                LeaseDecision::Steal {
                    previous: "b".into(),
                },
            ),
        ];
        for (name, lease, seen_for, want) in cases {
            assert_eq!(decide(lease, "a", secs(seen_for), D), want, "{name}");
        }
    }

    #[test]
    fn leadership_ends_at_the_renew_deadline() {
        let l = Leadership::elected();
        assert!(!l.holds(), "not before the first renewal");
        l.renewed(Instant::now() + Duration::from_secs(60));
        assert!(l.holds());
        l.renewed(Instant::now() - Duration::from_millis(1));
        assert!(!l.holds(), "the deadline passed without a renewal");
        l.renewed(Instant::now() + Duration::from_secs(60));
        l.lost();
        assert!(!l.holds());
        assert!(Leadership::always().holds());
    }

    #[test]
    fn next_specs() {
        let cur = held("b", 0, Some(15));
        let s = next_spec(&LeaseDecision::Create, None, "a", t(7), D).unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("a"));
        assert_eq!(s.lease_transitions, Some(0));
        assert_eq!(s.acquire_time, Some(MicroTime(t(7))));
        assert_eq!(s.lease_duration_seconds, Some(15));

        let s = next_spec(
            &LeaseDecision::Steal {
                previous: "b".into(),
            },
            Some(&cur),
            "a",
            t(20),
            D,
        )
        .unwrap();
        assert_eq!(
            (s.holder_identity.as_deref(), s.lease_transitions),
            (Some("a"), Some(4))
        );
        assert_eq!(s.renew_time, Some(MicroTime(t(20))));

        let s = next_spec(&LeaseDecision::Acquire, Some(&cur), "a", t(20), D).unwrap();
        assert_eq!(s.lease_transitions, Some(4));

        let mine = held("a", 0, Some(15));
        let s = next_spec(&LeaseDecision::Renew, Some(&mine), "a", t(9), D).unwrap();
        assert_eq!(
            s.acquire_time,
            Some(MicroTime(t(0))),
            "renewal keeps the acquire time"
        );
        assert_eq!(s.renew_time, Some(MicroTime(t(9))));
        assert_eq!(s.lease_transitions, Some(3), "renewal is not a transition");

        let wait = LeaseDecision::Wait {
            holder: "b".into(),
            expires_in: Duration::from_secs(15),
        };
        assert_eq!(next_spec(&wait, Some(&cur), "a", t(9), D), None);
    }
}
