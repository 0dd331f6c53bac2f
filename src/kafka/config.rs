//! The one place that turns a [`ClusterSpec`] (plus the mounted secrets) into librdkafka
//! client properties.
//!
//! Secrets are never inline in a spec: each reference names a Secret and a key, mounted
//! read-only at `<secrets_dir>/<secretName>/<key>` (see `docs/ARCHITECTURE.md`). TLS files are
//! passed to librdkafka by path (`ssl.*.location`); SASL credentials are read from their files
//! (one trailing newline is dropped, as `echo`/`kubectl create secret --from-file` often add
//! one). A missing file is an error naming the cluster, the secret and the key.
//!
//! Order of precedence: derived properties first, then the user's `config` entries. Properties
//! mirrorflow owns (see [`crate::api::validate::owned_property_reason`]) are refused here too,
//! so a spec that never went through validation cannot override them.
//!
//! [`ClientProperties`] keeps the list and prints SASL passwords as `*****`: log it freely.

use std::fmt;
use std::path::{Path, PathBuf};

use rdkafka::ClientConfig;

use crate::api::validate::owned_property_reason;
use crate::api::{ClusterSpec, OAuthBearerSpec};

/// `fetch.queue.backoff.ms` for consumers with a bounded prefetch. librdkafka's default
/// (1 s) idles the fetcher whenever the bound was reached, which a busy consumer meets every
/// few batches and a reader catching up on a long topic on every fetch.
pub const FETCH_QUEUE_BACKOFF_MS: &str = "20";

/// Property names whose values are secret and must never be logged.
const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "sasl.oauthbearer.client.secret",
];

/// Why client properties could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A referenced secret file is missing or unreadable.
    #[error(
        "cluster {alias}: {field}: cannot read key {key:?} of Secret {secret:?} at {}: {source} \
         (mount the Secret at <secrets dir>/<secretName>/<key>)",
        path.display()
    )]
    Secret {
        /// Cluster alias.
        alias: String,
        /// Spec field holding the reference, e.g. `sasl.credentials.passwordKey`.
        field: &'static str,
        /// Secret name.
        secret: String,
        /// Key inside the Secret.
        key: String,
        /// Where the file was expected.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A secret file holds no text usable as a credential.
    #[error("cluster {alias}: {field}: key {key:?} of Secret {secret:?} is {problem}")]
    BadSecret {
        /// Cluster alias.
        alias: String,
        /// Spec field holding the reference.
        field: &'static str,
        /// Secret name.
        secret: String,
        /// Key inside the Secret.
        key: String,
        /// What is wrong (empty, not UTF-8).
        problem: &'static str,
    },
    /// A user `config` entry overrides a property mirrorflow owns.
    #[error("cluster {alias}: config.{key}: this property may not be set here: {reason}")]
    OwnedProperty {
        /// Cluster alias.
        alias: String,
        /// The property.
        key: String,
        /// Why, and where to set it instead.
        reason: &'static str,
    },
}

/// Ordered client properties; `Debug`/`Display` mask secret values.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ClientProperties(Vec<(String, String)>);

impl ClientProperties {
    /// Sets `key` (replacing an earlier value, keeping its position).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `defaults` without the keys set here: what a client gets beyond the user's
    /// properties, which win.
    pub fn unless_set<K: AsRef<str>, V>(
        &self,
        defaults: impl IntoIterator<Item = (K, V)>,
    ) -> Vec<(K, V)> {
        defaults
            .into_iter()
            .filter(|(k, _)| self.get(k.as_ref()).is_none())
            .collect()
    }

    /// All properties in order (unmasked: do not log).
    pub fn entries(&self) -> &[(String, String)] {
        &self.0
    }

    /// The properties with secret values replaced by `*****`, for logs.
    pub fn masked(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|(k, v)| {
                let v = if is_secret_property(k) {
                    "*****".to_string()
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect()
    }

    /// An rdkafka config holding these properties.
    pub fn to_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (k, v) in &self.0 {
            config.set(k, v);
        }
        config
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ClientProperties {
    /// Properties set in order (a later value of a key replaces an earlier one).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut p = Self::default();
        for (k, v) in pairs {
            p.set(k, v);
        }
        p
    }
}

impl fmt::Debug for ClientProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.masked()).finish()
    }
}

impl fmt::Display for ClientProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.masked().into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Whether a property's value must be masked in logs.
pub fn is_secret_property(key: &str) -> bool {
    let k = key.trim().to_ascii_lowercase();
    SECRET_PROPERTIES.contains(&k.as_str()) || k.contains("password") || k.contains("secret")
}

/// `security.protocol` for a cluster: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
pub fn security_protocol(tls: bool, sasl: bool) -> &'static str {
    match (tls, sasl) {
        (false, false) => "PLAINTEXT",
        (true, false) => "SSL",
        (false, true) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    }
}

/// Path of a mounted secret key.
pub fn secret_path(secrets_dir: &Path, secret: &str, key: &str) -> PathBuf {
    secrets_dir.join(secret).join(key)
}

/// The client properties for `cluster`, reading secrets from `secrets_dir`.
pub fn client_properties(
    cluster: &ClusterSpec,
    secrets_dir: &Path,
) -> Result<ClientProperties, ConfigError> {
    let alias = cluster.alias.as_str();
    let mut props = ClientProperties::default();
    props.set("bootstrap.servers", cluster.bootstrap_servers.trim());
    props.set(
        "security.protocol",
        security_protocol(cluster.tls.is_some(), cluster.sasl.is_some()),
    );
    // KIP-714 client metrics: pushed to brokers that ask for them, and kept in six
    // histograms per broker connection whether or not any broker asks (3.8 MB of a loaded
    // worker's heap). Nothing of ours reads them; `config` may turn them back on.
    props.set("enable.metrics.push", "false");
    if let Some(tls) = &cluster.tls {
        if let Some(ca) = &tls.ca {
            let path = existing_file(alias, "tls.ca", secrets_dir, &ca.secret_name, &ca.key)?;
            props.set("ssl.ca.location", path.display().to_string());
        }
        if let Some(cert) = &tls.client_cert {
            let crt = existing_file(
                alias,
                "tls.clientCert.certKey",
                secrets_dir,
                &cert.secret_name,
                &cert.cert_key,
            )?;
            let key = existing_file(
                alias,
                "tls.clientCert.keyKey",
                secrets_dir,
                &cert.secret_name,
                &cert.key_key,
            )?;
            props.set("ssl.certificate.location", crt.display().to_string());
            props.set("ssl.key.location", key.display().to_string());
        }
        // librdkafka's defaults are the same since 2.0; set explicitly so that no build or
        // default change can switch verification off unnoticed.
        if tls.insecure_skip_verify {
            props.set("enable.ssl.certificate.verification", "false");
            props.set("ssl.endpoint.identification.algorithm", "none");
        } else {
            props.set("enable.ssl.certificate.verification", "true");
            props.set("ssl.endpoint.identification.algorithm", "https");
        }
    }
    if let Some(sasl) = &cluster.sasl {
        props.set("sasl.mechanism", sasl.mechanism.as_str());
        if let Some(creds) = &sasl.credentials {
            let username = read_credential(
                alias,
                "sasl.credentials.usernameKey",
                secrets_dir,
                &creds.secret_name,
                &creds.username_key,
            )?;
            let password = read_credential(
                alias,
                "sasl.credentials.passwordKey",
                secrets_dir,
                &creds.secret_name,
                &creds.password_key,
            )?;
            props.set("sasl.username", username);
            props.set("sasl.password", password);
        }
        if let Some(o) = &sasl.oauth_bearer {
            oauth_bearer_properties(alias, o, secrets_dir, &mut props)?;
        }
    }
    for (key, value) in &cluster.config {
        if let Some(reason) = owned_property_reason(key) {
            return Err(ConfigError::OwnedProperty {
                alias: alias.to_string(),
                key: key.clone(),
                reason,
            });
        }
        props.set(key.trim(), value.as_str());
    }
    Ok(props)
}

/// librdkafka's built-in OIDC client-credentials login (it fetches and refreshes tokens
/// itself, through libcurl; the `curl` feature of rdkafka builds it in).
fn oauth_bearer_properties(
    alias: &str,
    o: &OAuthBearerSpec,
    secrets_dir: &Path,
    props: &mut ClientProperties,
) -> Result<(), ConfigError> {
    let secret = read_credential(
        alias,
        "sasl.oauthBearer.clientSecret",
        secrets_dir,
        &o.client_secret.secret_name,
        &o.client_secret.key,
    )?;
    props.set("sasl.oauthbearer.method", "oidc");
    props.set(
        "sasl.oauthbearer.token.endpoint.url",
        o.token_endpoint_url.trim(),
    );
    props.set("sasl.oauthbearer.client.id", o.client_id.trim());
    props.set("sasl.oauthbearer.client.secret", secret);
    if let Some(scope) = o.scope.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        props.set("sasl.oauthbearer.scope", scope);
    }
    if !o.extensions.is_empty() {
        let joined: Vec<String> = o
            .extensions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        props.set("sasl.oauthbearer.extensions", joined.join(","));
    }
    if let Some(ca) = &o.ca {
        let path = existing_file(
            alias,
            "sasl.oauthBearer.ca",
            secrets_dir,
            &ca.secret_name,
            &ca.key,
        )?;
        props.set("https.ca.location", path.display().to_string());
    }
    Ok(())
}

/// The mounted files `cluster`'s client properties are built from (TLS files, credentials,
/// the OAUTHBEARER client secret and CA): what a rotation changes.
pub fn secret_files(cluster: &ClusterSpec, secrets_dir: &Path) -> Vec<PathBuf> {
    cluster
        .secret_keys()
        .into_iter()
        .map(|(secret, key)| secret_path(secrets_dir, secret, key))
        .collect()
}

/// [`client_properties`] as an rdkafka [`ClientConfig`].
pub fn client_config(
    cluster: &ClusterSpec,
    secrets_dir: &Path,
) -> Result<ClientConfig, ConfigError> {
    Ok(client_properties(cluster, secrets_dir)?.to_client_config())
}

fn existing_file(
    alias: &str,
    field: &'static str,
    secrets_dir: &Path,
    secret: &str,
    key: &str,
) -> Result<PathBuf, ConfigError> {
    let path = secret_path(secrets_dir, secret, key);
    // Opening (not just stat) proves the worker can read it; librdkafka would fail later
    // with a far less helpful message.
    match std::fs::File::open(&path) {
        Ok(_) => Ok(path),
        Err(source) => Err(ConfigError::Secret {
            alias: alias.to_string(),
            field,
            secret: secret.to_string(),
            key: key.to_string(),
            path,
            source,
        }),
    }
}

fn read_credential(
    alias: &str,
    field: &'static str,
    secrets_dir: &Path,
    secret: &str,
    key: &str,
) -> Result<String, ConfigError> {
    let path = secret_path(secrets_dir, secret, key);
    let bytes = std::fs::read(&path).map_err(|source| ConfigError::Secret {
        alias: alias.to_string(),
        field,
        secret: secret.to_string(),
        key: key.to_string(),
        path: path.clone(),
        source,
    })?;
    let bad = |problem| ConfigError::BadSecret {
        alias: alias.to_string(),
        field,
        secret: secret.to_string(),
        key: key.to_string(),
        problem,
    };
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text"))?;
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text)
        .to_string();
    if text.is_empty() {
        return Err(bad("empty"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ClientCertRef, CredentialsRef, OAuthBearerSpec, SaslMechanism, SaslSpec, SecretKeyRef,
        TlsSpec,
    };
    use pretty_assertions::assert_eq;
    use std::collections::BTreeMap;

    fn cluster() -> ClusterSpec {
        ClusterSpec {
            alias: "dc1".into(),
            bootstrap_servers: "k1:9092,k2:9092".into(),
            ..Default::default()
        }
    }

    fn sasl(mechanism: SaslMechanism) -> Option<SaslSpec> {
        Some(SaslSpec {
            mechanism,
            credentials: Some(CredentialsRef {
                secret_name: "creds".into(),
                username_key: "username".into(),
                password_key: "password".into(),
            }),
            oauth_bearer: None,
        })
    }

    fn tls(ca: bool, client: bool) -> Option<TlsSpec> {
        Some(TlsSpec {
            ca: ca.then(|| SecretKeyRef {
                secret_name: "ca".into(),
                key: "ca.crt".into(),
            }),
            client_cert: client.then(|| ClientCertRef {
                secret_name: "client".into(),
                cert_key: "tls.crt".into(),
                key_key: "tls.key".into(),
            }),
            insecure_skip_verify: false,
        })
    }

    fn oauth() -> Option<SaslSpec> {
        Some(SaslSpec {
            mechanism: SaslMechanism::OAuthBearer,
            credentials: None,
            oauth_bearer: Some(OAuthBearerSpec {
                token_endpoint_url: "https://idp.example/token".into(),
                client_id: "mirror".into(),
                client_secret: SecretKeyRef {
                    secret_name: "oidc".into(),
                    key: "client-secret".into(),
                },
                scope: Some("kafka".into()),
                extensions: BTreeMap::from([
                    ("logicalCluster".into(), "lkc-1".into()),
                    ("identityPoolId".into(), "pool-2".into()),
                ]),
                ca: Some(SecretKeyRef {
                    secret_name: "ca".into(),
                    key: "ca.crt".into(),
                }),
            }),
        })
    }

    fn secrets() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            ("creds", "username", "alice\n"),
            ("creds", "password", "s3cret"),
            ("ca", "ca.crt", "-----BEGIN CERTIFICATE-----\n"),
            ("client", "tls.crt", "crt"),
            ("client", "tls.key", "key"),
            ("blank", "username", "\n"),
            ("blank", "password", "x"),
            ("oidc", "client-secret", "oidc-s3cret\n"),
        ];
        for (secret, key, content) in files {
            std::fs::create_dir_all(dir.path().join(secret)).unwrap();
            std::fs::write(dir.path().join(secret).join(key), content).unwrap();
        }
        dir
    }

    #[test]
    fn properties_table() {
        let dir = secrets();
        let d = dir.path().display().to_string();
        let mut user_config = BTreeMap::new();
        user_config.insert("client.id".to_string(), "mine".to_string());
        user_config.insert("linger.ms".to_string(), "7".to_string());
        user_config.insert("enable.metrics.push".to_string(), "true".to_string());
        type Case = (&'static str, ClusterSpec, Vec<(&'static str, String)>);
        let cases: Vec<Case> = vec![
            (
                "plaintext",
                cluster(),
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "PLAINTEXT".into()),
                    ("enable.metrics.push", "false".into()),
                ],
            ),
            (
                "tls with system trust store",
                ClusterSpec {
                    tls: Some(TlsSpec::default()),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SSL".into()),
                    ("enable.metrics.push", "false".into()),
                    ("enable.ssl.certificate.verification", "true".into()),
                    ("ssl.endpoint.identification.algorithm", "https".into()),
                ],
            ),
            (
                "tls without verification (test clusters only)",
                ClusterSpec {
                    tls: Some(TlsSpec {
                        insecure_skip_verify: true,
                        ..TlsSpec::default()
                    }),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SSL".into()),
                    ("enable.metrics.push", "false".into()),
                    ("enable.ssl.certificate.verification", "false".into()),
                    ("ssl.endpoint.identification.algorithm", "none".into()),
                ],
            ),
            (
                "oauthbearer oidc client credentials over tls",
                ClusterSpec {
                    tls: Some(TlsSpec::default()),
                    sasl: oauth(),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SASL_SSL".into()),
                    ("enable.metrics.push", "false".into()),
                    ("enable.ssl.certificate.verification", "true".into()),
                    ("ssl.endpoint.identification.algorithm", "https".into()),
                    ("sasl.mechanism", "OAUTHBEARER".into()),
                    ("sasl.oauthbearer.method", "oidc".into()),
                    (
                        "sasl.oauthbearer.token.endpoint.url",
                        "https://idp.example/token".into(),
                    ),
                    ("sasl.oauthbearer.client.id", "mirror".into()),
                    ("sasl.oauthbearer.client.secret", "oidc-s3cret".into()),
                    ("sasl.oauthbearer.scope", "kafka".into()),
                    (
                        "sasl.oauthbearer.extensions",
                        "identityPoolId=pool-2,logicalCluster=lkc-1".into(),
                    ),
                    ("https.ca.location", format!("{d}/ca/ca.crt")),
                ],
            ),
            (
                "tls with ca and client cert",
                ClusterSpec {
                    tls: tls(true, true),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SSL".into()),
                    ("enable.metrics.push", "false".into()),
                    ("ssl.ca.location", format!("{d}/ca/ca.crt")),
                    ("ssl.certificate.location", format!("{d}/client/tls.crt")),
                    ("ssl.key.location", format!("{d}/client/tls.key")),
                    ("enable.ssl.certificate.verification", "true".into()),
                    ("ssl.endpoint.identification.algorithm", "https".into()),
                ],
            ),
            (
                "sasl plaintext, trailing newline dropped",
                ClusterSpec {
                    sasl: sasl(SaslMechanism::ScramSha512),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SASL_PLAINTEXT".into()),
                    ("enable.metrics.push", "false".into()),
                    ("sasl.mechanism", "SCRAM-SHA-512".into()),
                    ("sasl.username", "alice".into()),
                    ("sasl.password", "s3cret".into()),
                ],
            ),
            (
                "sasl ssl with user config last",
                ClusterSpec {
                    tls: tls(true, false),
                    sasl: sasl(SaslMechanism::Plain),
                    config: user_config.clone(),
                    ..cluster()
                },
                vec![
                    ("bootstrap.servers", "k1:9092,k2:9092".into()),
                    ("security.protocol", "SASL_SSL".into()),
                    ("enable.metrics.push", "true".into()),
                    ("ssl.ca.location", format!("{d}/ca/ca.crt")),
                    ("enable.ssl.certificate.verification", "true".into()),
                    ("ssl.endpoint.identification.algorithm", "https".into()),
                    ("sasl.mechanism", "PLAIN".into()),
                    ("sasl.username", "alice".into()),
                    ("sasl.password", "s3cret".into()),
                    ("client.id", "mine".into()),
                    ("linger.ms", "7".into()),
                ],
            ),
        ];
        for (name, spec, want) in cases {
            let got = client_properties(&spec, dir.path()).unwrap();
            let want: Vec<(String, String)> =
                want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(got.entries(), want.as_slice(), "{name}");
        }
    }

    #[test]
    fn errors_name_secret_key_and_field() {
        let dir = secrets();
        let missing_password = ClusterSpec {
            sasl: Some(SaslSpec {
                mechanism: SaslMechanism::Plain,
                credentials: Some(CredentialsRef {
                    secret_name: "creds".into(),
                    username_key: "username".into(),
                    password_key: "pw".into(),
                }),
                oauth_bearer: None,
            }),
            ..cluster()
        };
        let missing_ca = ClusterSpec {
            tls: Some(TlsSpec {
                ca: Some(SecretKeyRef {
                    secret_name: "nope".into(),
                    key: "ca.crt".into(),
                }),
                client_cert: None,
                insecure_skip_verify: false,
            }),
            ..cluster()
        };
        let blank_user = ClusterSpec {
            sasl: Some(SaslSpec {
                mechanism: SaslMechanism::Plain,
                credentials: Some(CredentialsRef {
                    secret_name: "blank".into(),
                    username_key: "username".into(),
                    password_key: "password".into(),
                }),
                oauth_bearer: None,
            }),
            ..cluster()
        };
        let mut owned = BTreeMap::new();
        owned.insert("sasl.password".to_string(), "inline".to_string());
        let owned = ClusterSpec {
            config: owned,
            ..cluster()
        };
        let cases = [
            (
                missing_password,
                vec!["dc1", "sasl.credentials.passwordKey", "\"pw\"", "\"creds\""],
            ),
            (missing_ca, vec!["dc1", "tls.ca", "\"ca.crt\"", "\"nope\""]),
            (
                blank_user,
                vec!["sasl.credentials.usernameKey", "\"blank\"", "empty"],
            ),
            (owned, vec!["config.sasl.password", "typed tls and sasl"]),
        ];
        for (spec, needles) in cases {
            let msg = client_properties(&spec, dir.path())
                .unwrap_err()
                .to_string();
            for n in needles {
                assert!(msg.contains(n), "{msg:?} should contain {n:?}");
            }
            assert!(!msg.contains("inline"), "secret value leaked: {msg}");
        }
    }

    #[test]
    fn masking_hides_secrets() {
        let dir = secrets();
        let spec = ClusterSpec {
            sasl: sasl(SaslMechanism::Plain),
            ..cluster()
        };
        let props = client_properties(&spec, dir.path()).unwrap();
        let oidc = ClusterSpec {
            tls: Some(TlsSpec::default()),
            sasl: oauth(),
            ..cluster()
        };
        let oidc = client_properties(&oidc, dir.path()).unwrap();
        for shown in [format!("{oidc}"), format!("{oidc:?}")] {
            assert!(!shown.contains("oidc-s3cret"), "{shown}");
            assert!(shown.contains("sasl.oauthbearer.client.secret"), "{shown}");
        }
        for shown in [format!("{props}"), format!("{props:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("sasl.password"), "{shown}");
            assert!(shown.contains("alice"), "{shown}");
        }
        let cases = [
            ("sasl.password", true),
            ("ssl.key.password", true),
            ("SASL.PASSWORD", true),
            ("sasl.username", false),
            ("bootstrap.servers", false),
        ];
        for (key, want) in cases {
            assert_eq!(is_secret_property(key), want, "{key}");
        }
    }

    #[test]
    fn secret_files_are_every_referenced_key() {
        let d = Path::new("/s");
        let spec = ClusterSpec {
            tls: tls(true, true),
            sasl: oauth(),
            ..cluster()
        };
        let got: Vec<String> = secret_files(&spec, d)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        // The CA is referenced twice (brokers and token endpoint): listed once.
        assert_eq!(
            got,
            vec![
                "/s/ca/ca.crt",
                "/s/client/tls.crt",
                "/s/client/tls.key",
                "/s/oidc/client-secret",
            ]
        );
        assert!(secret_files(&cluster(), d).is_empty());
    }

    #[test]
    fn security_protocol_table() {
        let cases = [
            (false, false, "PLAINTEXT"),
            (true, false, "SSL"),
            (false, true, "SASL_PLAINTEXT"),
            (true, true, "SASL_SSL"),
        ];
        for (tls, sasl, want) in cases {
            assert_eq!(security_protocol(tls, sasl), want);
        }
    }
}
