//! Secured nisshi brokers: TLS (`--cert/--key`), SASL SCRAM users (`--authentication`).
//!
//! nisshi keeps SCRAM credentials only in a persistent storage engine, and once it requires
//! authentication it answers nothing but the SASL handshake, while `nisshi user create`
//! speaks plaintext without SASL. So a broker with users runs on SQLite in its own directory:
//! it is first started plaintext and open to create the users, then restarted on the same
//! port and storage with TLS and authentication. Its data survives restarts (unlike memory
//! storage), which the rotation tests use.
//!
//! The testkit's own clients (create topics, produce, consume, ...) reach a secured broker
//! with the properties it registers for its bootstrap address ([`client_properties_for`]):
//! its CA and its first user.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// SCRAM mechanisms nisshi supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scram {
    Sha256,
    Sha512,
}

impl Scram {
    /// The librdkafka / spec name.
    pub fn mechanism(self) -> &'static str {
        match self {
            Scram::Sha256 => "SCRAM-SHA-256",
            Scram::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The `nisshi user create --mechanism` value.
    pub fn nisshi_arg(self) -> &'static str {
        match self {
            Scram::Sha256 => "scram256",
            Scram::Sha512 => "scram512",
        }
    }
}

/// A SCRAM user the broker knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    pub name: String,
    pub password: String,
    pub mechanism: Scram,
}

impl ScramUser {
    pub fn new(name: &str, password: &str, mechanism: Scram) -> Self {
        Self {
            name: name.into(),
            password: password.into(),
            mechanism,
        }
    }
}

/// The broker's TLS certificate chain and key (PEM files), and the CA file that verifies it
/// (for the testkit's own clients).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// How a nisshi broker is secured. The default is plaintext without authentication.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerSecurity {
    /// Serve TLS only.
    pub tls: Option<TlsFiles>,
    /// Require SASL SCRAM; these users exist. Empty: no authentication.
    pub users: Vec<ScramUser>,
    /// Advertise this `host:port` instead of the listener (e.g. a TLS proxy in front of
    /// the broker); the testkit's clients then need [`register_client_properties`] for it.
    pub advertise: Option<String>,
    /// Keep the data across [`super::LocalBroker::restart`] (SQLite storage in a directory of
    /// its own; users imply it). Retention applies at restart: records need current times.
    pub persistent: bool,
}

impl BrokerSecurity {
    /// Whether anything is secured.
    pub fn is_secured(&self) -> bool {
        self.tls.is_some() || !self.users.is_empty()
    }

    /// Client properties the testkit's clients use: the CA (host names verified) and the
    /// first user.
    pub fn admin_properties(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let protocol = match (self.tls.is_some(), !self.users.is_empty()) {
            (false, false) => return out,
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        };
        out.push(("security.protocol".into(), protocol.into()));
        if let Some(tls) = &self.tls {
            out.push(("ssl.ca.location".into(), tls.ca.display().to_string()));
            out.push((
                "ssl.endpoint.identification.algorithm".into(),
                "https".into(),
            ));
        }
        if let Some(u) = self.users.first() {
            out.push(("sasl.mechanism".into(), u.mechanism.mechanism().into()));
            out.push(("sasl.username".into(), u.name.clone()));
            out.push(("sasl.password".into(), u.password.clone()));
        }
        out
    }

    /// `nisshi broker` flags for this security (after the listener and storage flags).
    pub(super) fn broker_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(tls) = &self.tls {
            args.push("--cert".into());
            args.push(tls.cert.display().to_string());
            args.push("--key".into());
            args.push(tls.key.display().to_string());
        }
        if !self.users.is_empty() {
            args.push("--authentication".into());
        }
        args
    }
}

type Registry = Mutex<HashMap<String, Vec<(String, String)>>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Registers (or, with an empty list, forgets) the client properties the testkit's helpers
/// use for `bootstrap` (e.g. a proxy in front of a broker).
pub fn register_client_properties(bootstrap: &str, props: Vec<(String, String)>) {
    register(bootstrap, props)
}

pub(super) fn register(bootstrap: &str, props: Vec<(String, String)>) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    if props.is_empty() {
        r.remove(bootstrap);
    } else {
        r.insert(bootstrap.to_string(), props);
    }
}

/// The security properties the testkit's clients use for `bootstrap` (empty: plaintext).
pub fn client_properties_for(bootstrap: &str) -> Vec<(String, String)> {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(bootstrap)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_and_admin_properties() {
        let tls = TlsFiles {
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
            ca: "/c/ca.pem".into(),
        };
        let cases = [
            (BrokerSecurity::default(), "", ""),
            (
                BrokerSecurity {
                    tls: Some(tls.clone()),
                    ..Default::default()
                },
                "--cert /c/cert.pem --key /c/key.pem",
                "security.protocol=SSL ssl.ca.location=/c/ca.pem ssl.endpoint.identification.algorithm=https",
            ),
            (
                BrokerSecurity {
                    tls: Some(tls),
                    users: vec![
                        ScramUser::new("admin", "pw", Scram::Sha512),
                        ScramUser::new("other", "x", Scram::Sha256),
                    ],
                    advertise: None,
                    persistent: false,
                },
                "--cert /c/cert.pem --key /c/key.pem --authentication",
                "security.protocol=SASL_SSL ssl.ca.location=/c/ca.pem ssl.endpoint.identification.algorithm=https sasl.mechanism=SCRAM-SHA-512 sasl.username=admin sasl.password=pw",
            ),
        ];
        for (sec, args, props) in cases {
            assert_eq!(sec.broker_args().join(" "), args);
            let p: Vec<String> = sec
                .admin_properties()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            assert_eq!(p.join(" "), props);
        }
        register("h:1", vec![("a".into(), "b".into())]);
        assert_eq!(client_properties_for("h:1").len(), 1);
        register("h:1", vec![]);
        assert!(client_properties_for("h:1").is_empty());
    }
}
