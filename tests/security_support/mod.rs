//! Helpers for `tests/security.rs` and `tests/kafka_testkit.rs`: certificates made by the
//! test (rcgen; never committed) and a local OIDC token endpoint that records its calls.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A test CA.
pub struct Ca {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

/// When a leaf certificate is valid.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From yesterday for ten years.
    Current,
    /// Ended years ago.
    Expired,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A server certificate for `sans` (IP addresses or DNS names).
    pub fn server(&self, sans: &[&str], validity: Validity) -> Leaf {
        self.leaf(
            "broker",
            sans,
            validity,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate named `cn`.
    pub fn client(&self, cn: &str) -> Leaf {
        self.leaf(
            cn,
            &[],
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    fn leaf(
        &self,
        cn: &str,
        sans: &[&str],
        validity: Validity,
        eku: ExtendedKeyUsagePurpose,
    ) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![eku];
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let now = time::OffsetDateTime::now_utc();
        match validity {
            Validity::Current => {
                p.not_before = now - time::Duration::days(1);
                p.not_after = now + time::Duration::days(3650);
            }
            Validity::Expired => {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
        }
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// Writes `leaf` and `ca` as `<dir>/<name>.{crt,key}` and `<dir>/<name>-ca.crt`.
pub fn write_tls_files(
    dir: &Path,
    name: &str,
    leaf: &Leaf,
    ca: &str,
) -> mirrorflow::testkit::kafka::KafkaTls {
    std::fs::create_dir_all(dir).unwrap();
    let files = mirrorflow::testkit::kafka::KafkaTls {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
        ca: dir.join(format!("{name}-ca.crt")),
    };
    std::fs::write(&files.cert, &leaf.cert).unwrap();
    std::fs::write(&files.key, &leaf.key).unwrap();
    std::fs::write(&files.ca, ca).unwrap();
    files
}

/// One call the token endpoint received.
#[derive(Debug, Clone)]
pub struct TokenCall {
    pub authorization: Option<String>,
    pub body: String,
}

/// A local OIDC token endpoint (client credentials grant) answering with an unsecured JWT
/// (`alg: none`, no signature: what Kafka's default OAUTHBEARER validator checks) for `sub`
/// with `scope`, recording every call.
pub struct TokenEndpoint {
    pub url: String,
    pub calls: Arc<Mutex<Vec<TokenCall>>>,
    task: JoinHandle<()>,
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl TokenEndpoint {
    pub async fn start(sub: &str, scope: &str) -> Self {
        use axum::routing::post;
        let calls: Arc<Mutex<Vec<TokenCall>>> = Arc::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let jwt = format!(
            "{}.{}.",
            b64url(br#"{"alg":"none"}"#),
            b64url(
                serde_json::json!({"sub": sub, "iat": now, "exp": now + 3600, "scope": scope})
                    .to_string()
                    .as_bytes()
            ),
        );
        let c = calls.clone();
        let app = axum::Router::new().route(
            "/token",
            post(move |headers: axum::http::HeaderMap, body: String| {
                let c = c.clone();
                let jwt = jwt.clone();
                async move {
                    c.lock().unwrap().push(TokenCall {
                        authorization: headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string),
                        body,
                    });
                    axum::Json(serde_json::json!({
                        "access_token": jwt, "token_type": "bearer", "expires_in": 3600
                    }))
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/token"),
            calls,
            task,
        }
    }
}

/// `<dir>/secrets`, laid out like the kubelet's Secret mounts.
pub fn secrets_dir(dir: &Path) -> PathBuf {
    let d = dir.join("secrets");
    std::fs::create_dir_all(&d).unwrap();
    d
}
