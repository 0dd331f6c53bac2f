//! Connection health per cluster: which clients cannot authenticate or verify TLS, and why.
//!
//! librdkafka only logs a refused password or an untrusted certificate and retries for
//! ever, so the worker would look merely slow. The engine's clients of a cluster get a
//! `LogContext` from that cluster's [`ClusterHealth`] (side tasks' clients only log); the
//! context's error callback classifies the client error ([`classify`], pure) and records it
//! in the client's slot. A slot clears when the client's statistics show the failed broker
//! (or, for a bootstrap address, any broker) `UP` again ([`recovered`], pure), or, for the
//! metadata client that has no statistics, when one of its calls is answered
//! ([`ClientSlot::on_answer`]). A dropped client's problem stays with the cluster until one
//! of its clients shows a broker `UP` (a producer recreated after each failed attempt must
//! not make the problem blink; a client rebuilt after a Secret rotation clears it once it
//! connects). [`ClusterHealth::problem`] is the oldest problem: what `/status`, the
//! worker's status entry and the flow's condition show.
//!
//! Statistics are only delivered to clients that are polled (consumers, producers); create
//! those with [`STATS_PROPERTIES`] so that they can report recovery. Unpolled clients must
//! not get them (librdkafka would queue a report every interval for nobody).

use std::sync::{Arc, Mutex, Weak};

use jiff::Timestamp;
use rdkafka::types::RDKafkaErrorCode;
use serde::Deserialize;

use crate::api::{ClusterRole, ConnectionProblem, ConnectionProblemReason};

/// Properties that make a polled client report broker states (for [`recovered`]).
pub const STATS_PROPERTIES: &[(&str, &str)] = &[("statistics.interval.ms", "5000")];

/// What a client error means for the connection, if it is an authentication or TLS failure.
/// Pure; `reason` is librdkafka's message.
pub fn classify(code: RDKafkaErrorCode, reason: &str) -> Option<ConnectionProblemReason> {
    use ConnectionProblemReason::*;
    let r = reason.to_ascii_lowercase();
    // librdkafka reports some TLS failures as transport errors (a verify failure read after
    // the handshake, the server's "certificate required" alert under TLS 1.3): OpenSSL's
    // own wording identifies them.
    let openssl = r.contains("ssl routines") || r.contains("ssl alert");
    match code {
        RDKafkaErrorCode::Authentication
        | RDKafkaErrorCode::SaslAuthenticationFailed
        | RDKafkaErrorCode::UnsupportedSASLMechanism
        | RDKafkaErrorCode::IllegalSASLState => Some(AuthenticationFailed),
        RDKafkaErrorCode::SSL | RDKafkaErrorCode::BrokerTransportFailure
            if code == RDKafkaErrorCode::SSL || openssl =>
        {
            const VERIFY: &[&str] = &[
                "certificate verify failed",
                "failed to verify broker certificate",
                "broker certificate could not be verified",
                "error:0a000086",
                "certificate has expired",
                "certificate is not yet valid",
                "self-signed certificate",
                "self signed certificate",
                "unable to get local issuer certificate",
                "hostname mismatch",
                "ip address mismatch",
                "broker did not provide a certificate",
            ];
            Some(if VERIFY.iter().any(|v| r.contains(v)) {
                TlsVerificationFailed
            } else {
                TlsFailed
            })
        }
        _ if r.contains("sasl authentication error") => Some(AuthenticationFailed),
        _ => None,
    }
}

/// The broker name a librdkafka error message starts with (`ssl://host:9093/1: ...`).
pub fn broker_of(reason: &str) -> Option<&str> {
    let (name, _) = reason.split_once(": ")?;
    (name.contains("://") && !name.contains(' ')).then_some(name)
}

/// The broker states of one statistics report (`brokers.<name>.state`).
#[derive(Debug, Default, Deserialize, PartialEq)]
pub struct BrokerStates {
    #[serde(default)]
    brokers: std::collections::BTreeMap<String, BrokerState>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct BrokerState {
    #[serde(default)]
    state: String,
}

impl BrokerStates {
    /// Parses a librdkafka statistics report (other fields are skipped).
    pub fn parse(json: &[u8]) -> Option<Self> {
        serde_json::from_slice(json).ok()
    }

    /// States by broker name, for tests.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self {
            brokers: pairs
                .iter()
                .map(|(n, s)| {
                    (
                        n.to_string(),
                        BrokerState {
                            state: s.to_string(),
                        },
                    )
                })
                .collect(),
        }
    }
}

/// Whether a report shows the connection that failed (`failed_broker`) working again: that
/// broker is `UP`; for a bootstrap address, an unnamed broker or one the report does not
/// list (librdkafka replaces bootstrap entries by the brokers it learns), any broker `UP`.
pub fn recovered(failed_broker: Option<&str>, states: &BrokerStates) -> bool {
    let up = |s: &BrokerState| s.state == "UP";
    match failed_broker.and_then(|b| states.brokers.get(b).map(|s| (b, s))) {
        Some((name, s)) if !name.ends_with("/bootstrap") => up(s),
        _ => states.brokers.values().any(up),
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    reason: ConnectionProblemReason,
    message: String,
    broker: Option<String>,
    since: Timestamp,
}

/// One client's state, owned by its context (dropped with the client).
#[derive(Debug, Default)]
pub struct ClientSlot {
    problem: Mutex<Option<Recorded>>,
    /// The cluster's problem of dropped clients (see the module docs).
    retained: Option<Arc<Mutex<Option<Recorded>>>>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mine = self.lock().take();
        if let (Some(mine), Some(retained)) = (mine, &self.retained) {
            let mut r = retained.lock().unwrap_or_else(|e| e.into_inner());
            if r.as_ref()
                .is_none_or(|old| mine.since <= old.since || old.reason != mine.reason)
            {
                *r = Some(mine);
            }
        }
    }
}

impl ClientSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Recorded>> {
        self.problem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a client error if it is an authentication or TLS failure.
    pub fn on_error(&self, code: RDKafkaErrorCode, reason: &str, now: Timestamp) {
        let Some(kind) = classify(code, reason) else {
            return;
        };
        let mut p = self.lock();
        let since = match &*p {
            Some(old) if old.reason == kind => old.since,
            _ => now,
        };
        *p = Some(Recorded {
            reason: kind,
            message: reason.to_string(),
            broker: broker_of(reason).map(str::to_string),
            since,
        });
    }

    /// Clears the problem when the statistics report shows the connection working; a
    /// client with a broker `UP` also clears what dropped clients left.
    pub fn on_stats(&self, states: &BrokerStates) {
        let mut p = self.lock();
        if p.as_ref()
            .is_some_and(|r| recovered(r.broker.as_deref(), states))
        {
            *p = None;
        }
        if p.is_none() && recovered(None, states) {
            self.clear_retained(|_| true);
        }
    }

    /// A call of this client was answered: for a client without statistics (the metadata
    /// client), the proof that its connection works. Clears what `answered_clears` allows,
    /// here and among dropped clients' problems. Without it, one refused login at start
    /// showed on `/status` for as long as the client lived, and hid every later problem.
    pub fn on_answer(&self) {
        let mut p = self.lock();
        if p.as_ref().is_some_and(answered_clears) {
            *p = None;
        }
        if p.is_none() {
            self.clear_retained(answered_clears);
        }
    }

    fn clear_retained(&self, clears: impl Fn(&Recorded) -> bool) {
        if let Some(r) = &self.retained {
            let mut r = r.lock().unwrap_or_else(|e| e.into_inner());
            if r.as_ref().is_some_and(clears) {
                *r = None;
            }
        }
    }
}

/// Whether an answered call clears a recorded problem. Credentials are the cluster's, so an
/// answer proves them; so does it an unnamed or bootstrap connection's TLS. A named broker's
/// TLS problem (its certificate, its host name) stays: the answer may be another broker's.
fn answered_clears(r: &Recorded) -> bool {
    r.reason == ConnectionProblemReason::AuthenticationFailed
        || r.broker
            .as_deref()
            .is_none_or(|b| b.ends_with("/bootstrap"))
}

struct Inner {
    role: ClusterRole,
    alias: String,
    clients: Mutex<Vec<Weak<ClientSlot>>>,
    retained: Arc<Mutex<Option<Recorded>>>,
}

/// The shared health of one cluster's connections (clone freely).
#[derive(Clone)]
pub struct ClusterHealth(Arc<Inner>);

impl std::fmt::Debug for ClusterHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterHealth")
            .field("role", &self.0.role)
            .field("alias", &self.0.alias)
            .finish()
    }
}

impl ClusterHealth {
    /// The health of the `role` cluster `alias` (no clients yet).
    pub fn new(role: ClusterRole, alias: &str) -> Self {
        Self(Arc::new(Inner {
            role,
            alias: alias.to_string(),
            clients: Mutex::new(Vec::new()),
            retained: Arc::default(),
        }))
    }

    /// The cluster's alias.
    pub fn alias(&self) -> &str {
        &self.0.alias
    }

    /// Source or target.
    pub fn role(&self) -> ClusterRole {
        self.0.role
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Vec<Weak<ClientSlot>>> {
        self.0.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one new client of this cluster, reporting into this health (its context:
    /// `ClusterHealth::context`, beside the context in `kafka::context`).
    pub(crate) fn new_slot(&self) -> Arc<ClientSlot> {
        let slot = Arc::new(ClientSlot {
            problem: Mutex::default(),
            retained: Some(self.0.retained.clone()),
        });
        let mut clients = self.clients();
        clients.retain(|w| w.strong_count() > 0);
        clients.push(Arc::downgrade(&slot));
        slot
    }

    /// The oldest current problem of the cluster's live clients, naming the cluster by its
    /// role and alias. Never holds a secret: librdkafka's messages carry none.
    pub fn problem(&self) -> Option<ConnectionProblem> {
        let retained = self
            .0
            .retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let recorded = self
            .clients()
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|s| s.lock().clone())
            .chain(retained)
            .min_by_key(|r| r.since)?;
        Some(ConnectionProblem {
            cluster: self.0.role,
            alias: self.0.alias.clone(),
            reason: recorded.reason,
            message: format!(
                "{} cluster {}: {}: {}",
                self.0.role.as_str(),
                self.0.alias,
                recorded.reason.phrase(),
                recorded.message
            ),
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(recorded.since),
        })
    }
}

/// The source's and the target's health, as the worker reports them.
#[derive(Clone, Debug)]
pub struct FlowHealth {
    pub source: ClusterHealth,
    pub target: ClusterHealth,
}

impl FlowHealth {
    /// Health handles for a flow's two clusters.
    pub fn new(source_alias: &str, target_alias: &str) -> Self {
        Self {
            source: ClusterHealth::new(ClusterRole::Source, source_alias),
            target: ClusterHealth::new(ClusterRole::Target, target_alias),
        }
    }

    /// Current problems, source first.
    pub fn problems(&self) -> Vec<ConnectionProblem> {
        [&self.source, &self.target]
            .into_iter()
            .filter_map(ClusterHealth::problem)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConnectionProblemReason::*;

    #[test]
    fn classify_table() {
        use RDKafkaErrorCode as C;
        let cases: &[(C, &str, Option<ConnectionProblemReason>)] = &[
            (
                C::Authentication,
                "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                Some(AuthenticationFailed),
            ),
            (
                C::Authentication,
                "Failed to acquire SASL OAUTHBEARER token: Failed to retrieve OIDC token from \"http://127.0.0.1:1/token\": Couldn't connect to server",
                Some(AuthenticationFailed),
            ),
            (
                C::UnsupportedSASLMechanism,
                "sasl_ssl://h:9093/bootstrap: Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-256,SCRAM-SHA-512",
                Some(AuthenticationFailed),
            ),
            (
                C::SSL,
                "ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 3ms in state SSL_HANDSHAKE)",
                Some(TlsVerificationFailed),
            ),
            (
                C::SSL,
                "ssl://h:9093/1: Failed to verify broker certificate: certificate has expired",
                Some(TlsVerificationFailed),
            ),
            (
                C::SSL,
                "ssl://h:9093/1: SSL handshake failed: ssl/record/rec_layer_s3.c:1605: error:0A000410:SSL routines::sslv3 alert handshake failure: client SSL authentication might be required (see ssl.key.location and ssl.certificate.location and consult the broker logs for more information)",
                Some(TlsFailed),
            ),
            (
                C::BrokerTransportFailure,
                "ssl://h:9093/bootstrap: SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker listener?",
                None,
            ),
            (
                C::BrokerTransportFailure,
                "sasl_ssl://127.0.0.1:44029/bootstrap: error:0A000086:SSL routines::certificate verify failed (after 1ms in state SSL_HANDSHAKE)",
                Some(TlsVerificationFailed),
            ),
            (
                C::BrokerTransportFailure,
                "ssl://127.0.0.1:36499/bootstrap: Receive failed: error:0A00045C:SSL routines::tlsv13 alert certificate required: SSL alert number 116 (after 0ms in state APIVERSION_QUERY)",
                Some(TlsFailed),
            ),
            (C::AllBrokersDown, "1/1 brokers are down", None),
            (
                C::BrokerTransportFailure,
                "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
                None,
            ),
        ];
        for (code, reason, want) in cases {
            assert_eq!(classify(*code, reason), *want, "{code:?} {reason}");
        }
    }

    #[test]
    fn broker_of_table() {
        let cases = [
            (
                "ssl://h:9093/1: SSL handshake failed",
                Some("ssl://h:9093/1"),
            ),
            (
                "sasl_ssl://127.0.0.1:9/bootstrap: SASL authentication error: x",
                Some("sasl_ssl://127.0.0.1:9/bootstrap"),
            ),
            ("Failed to acquire SASL OAUTHBEARER token: x", None),
            ("no colon", None),
        ];
        for (reason, want) in cases {
            assert_eq!(broker_of(reason), want, "{reason}");
        }
    }

    #[test]
    fn recovered_table() {
        let s = BrokerStates::from_pairs;
        let cases = [
            (
                "named broker up",
                Some("ssl://h:1/1"),
                s(&[("ssl://h:1/1", "UP")]),
                true,
            ),
            (
                "named broker still down, another up",
                Some("ssl://h:1/1"),
                s(&[("ssl://h:1/1", "TRY_CONNECT"), ("ssl://h:2/2", "UP")]),
                false,
            ),
            (
                "bootstrap entry: any broker up",
                Some("ssl://h:1/bootstrap"),
                s(&[("ssl://h:1/bootstrap", "INIT"), ("ssl://h:1/1", "UP")]),
                true,
            ),
            (
                "unnamed: any broker up",
                None,
                s(&[("ssl://h:1/1", "UP")]),
                true,
            ),
            ("nothing up", None, s(&[("ssl://h:1/1", "AUTH_REQ")]), false),
            ("no brokers", None, s(&[]), false),
        ];
        for (what, broker, states, want) in cases {
            assert_eq!(recovered(broker, &states), want, "{what}");
        }
        let parsed = BrokerStates::parse(
            br#"{"name":"x","brokers":{"ssl://h:1/1":{"state":"UP","rtt":{}}},"topics":{}}"#,
        )
        .unwrap();
        assert_eq!(parsed, s(&[("ssl://h:1/1", "UP")]));
    }

    #[test]
    fn an_answered_call_clears_what_it_proves() {
        let rec = |reason, broker: Option<&str>| Recorded {
            reason,
            message: String::new(),
            broker: broker.map(str::to_string),
            since: Timestamp::UNIX_EPOCH,
        };
        let cases = [
            (AuthenticationFailed, Some("sasl_ssl://h:1/bootstrap"), true),
            (AuthenticationFailed, Some("sasl_ssl://h:1/2"), true),
            (AuthenticationFailed, None, true),
            (TlsVerificationFailed, Some("ssl://h:1/bootstrap"), true),
            (TlsVerificationFailed, None, true),
            (TlsVerificationFailed, Some("ssl://h:1/2"), false),
            (TlsFailed, Some("ssl://h:1/2"), false),
        ];
        for (reason, broker, want) in cases {
            assert_eq!(
                answered_clears(&rec(reason, broker)),
                want,
                "{reason:?} {broker:?}"
            );
        }

        // A metadata client refused once at start, then answered: nothing stays, and a
        // later problem is the one shown.
        let h = ClusterHealth::new(ClusterRole::Target, "dc2");
        let meta = h.context();
        let t0 = Timestamp::from_second(1_000).unwrap();
        let auth = "sasl_ssl://h:1/bootstrap: SASL authentication error: invalid credentials";
        meta.slot()
            .unwrap()
            .on_error(RDKafkaErrorCode::Authentication, auth, t0);
        assert!(h.problem().is_some());
        meta.slot().unwrap().on_answer();
        assert_eq!(h.problem(), None, "answered: the login works");
        // The same through a dropped client: its problem is retained, and an answer of
        // another client of the cluster clears it.
        let dropped = h.context();
        dropped
            .slot()
            .unwrap()
            .on_error(RDKafkaErrorCode::Authentication, auth, t0);
        drop(dropped);
        assert!(h.problem().is_some(), "retained");
        meta.slot().unwrap().on_answer();
        assert_eq!(h.problem(), None);
        // A named broker's untrusted certificate stays after an answer.
        let tls = "ssl://h:1/2: Failed to verify broker certificate: certificate has expired";
        meta.slot()
            .unwrap()
            .on_error(RDKafkaErrorCode::SSL, tls, t0);
        meta.slot().unwrap().on_answer();
        assert_eq!(h.problem().map(|p| p.reason), Some(TlsVerificationFailed));
    }

    #[test]
    fn health_follows_client_slots() {
        let h = ClusterHealth::new(ClusterRole::Target, "dc2");
        assert_eq!(h.problem(), None);
        let ctx = h.context();
        let t0 = Timestamp::from_second(1_000).unwrap();
        let slot = ctx.slot().unwrap();
        slot.on_error(
            RDKafkaErrorCode::BrokerTransportFailure,
            "sasl_ssl://h:1/bootstrap: Connection refused",
            t0,
        );
        assert_eq!(h.problem(), None, "not an auth/TLS failure");
        let auth = "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512";
        slot.on_error(RDKafkaErrorCode::Authentication, auth, t0);
        let later = Timestamp::from_second(1_030).unwrap();
        slot.on_error(RDKafkaErrorCode::Authentication, auth, later);
        let p = h.problem().unwrap();
        assert_eq!(
            (p.cluster, p.reason),
            (ClusterRole::Target, AuthenticationFailed)
        );
        assert_eq!(p.since.0, t0, "a repeated failure keeps its first time");
        assert!(
            p.message
                .starts_with("target cluster dc2: authentication failed: sasl_ssl://"),
            "{}",
            p.message
        );
        // Still failing: nothing UP.
        slot.on_stats(&BrokerStates::from_pairs(&[(
            "sasl_ssl://h:1/bootstrap",
            "AUTH_REQ",
        )]));
        assert!(h.problem().is_some());
        slot.on_stats(&BrokerStates::from_pairs(&[("sasl_ssl://h:1/1", "UP")]));
        assert_eq!(h.problem(), None, "recovered");
        // A dropped client's problem stays until another client of the cluster connects.
        slot.on_error(RDKafkaErrorCode::Authentication, auth, later);
        assert!(h.problem().is_some());
        drop(ctx);
        assert!(h.problem().is_some(), "kept after the client is gone");
        let next = h.context();
        next.slot().unwrap().on_stats(&BrokerStates::from_pairs(&[(
            "sasl_ssl://h:1/1",
            "AUTH_REQ",
        )]));
        assert!(
            h.problem().is_some(),
            "the next client has not connected yet"
        );
        next.slot()
            .unwrap()
            .on_stats(&BrokerStates::from_pairs(&[("sasl_ssl://h:1/1", "UP")]));
        assert_eq!(h.problem(), None, "a client of the cluster connected");
        drop(next);
        let flow = FlowHealth::new("dc1", "dc2");
        let c = flow.source.context();
        c.slot().unwrap().on_error(
            RDKafkaErrorCode::SSL,
            "ssl://h:1/1: Failed to verify broker certificate: certificate has expired",
            t0,
        );
        let problems = flow.problems();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .message
                .starts_with("source cluster dc1: TLS verification failed: "),
            "{}",
            problems[0].message
        );
    }
}
