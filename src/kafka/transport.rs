//! The many-group client's connections: plaintext or TLS (rustls), with what SASL needs, read
//! from the cluster's librdkafka properties, and frames read and written within a deadline.
//! A property this transport does not serve (GSSAPI, OAUTHBEARER, encrypted keys, keystores,
//! inline PEMs) leaves the cluster on librdkafka's path, named in [`Security::from_config`]'s
//! answer.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme, StreamOwned,
};

use super::error::Error;
use super::scram::Mechanism as ScramMechanism;

/// How a cluster authenticates clients over SASL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sasl {
    /// PLAIN.
    Plain {
        /// User.
        user: String,
        /// Password.
        password: String,
    },
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram {
        /// The hash.
        mechanism: ScramMechanism,
        /// User.
        user: String,
        /// Password.
        password: String,
    },
}

impl Sasl {
    /// The mechanism's name as SaslHandshake sends it.
    pub fn mechanism(&self) -> &'static str {
        match self {
            Self::Plain { .. } => "PLAIN",
            Self::Scram {
                mechanism: ScramMechanism::Sha256,
                ..
            } => "SCRAM-SHA-256",
            Self::Scram {
                mechanism: ScramMechanism::Sha512,
                ..
            } => "SCRAM-SHA-512",
        }
    }
}

/// A cluster's connection settings.
#[derive(Clone)]
pub struct Security {
    /// TLS, when `security.protocol` is SSL or SASL_SSL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL, when `security.protocol` is SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<Sasl>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(Sasl::mechanism))
            .finish()
    }
}

/// Why this transport does not serve a cluster's settings (the cluster keeps librdkafka's
/// path): the property and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotServed(pub String);

impl From<String> for NotServed {
    fn from(why: String) -> Self {
        Self(why)
    }
}

/// Properties that would need more than this transport serves.
const NOT_SERVED: &[&str] = &[
    "ssl.key.password",
    "ssl.keystore.location",
    "ssl.key.pem",
    "ssl.certificate.pem",
    "ssl.ca.pem",
    "ssl.engine.location",
    "ssl.providers",
];

impl Security {
    /// The settings of `config`, or why this transport cannot serve it (the caller keeps
    /// librdkafka's path). Reads the certificate files it names.
    pub fn from_config(config: &ClientConfig) -> Result<Self, NotServed> {
        let protocol = config
            .get("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_lowercase();
        let (tls, sasl) = match protocol.as_str() {
            "plaintext" => (false, false),
            "ssl" => (true, false),
            "sasl_plaintext" => (false, true),
            "sasl_ssl" => (true, true),
            other => return Err(format!("security.protocol {other:?}").into()),
        };
        if let Some(p) = NOT_SERVED.iter().find(|p| config.get(p).is_some()) {
            return Err(format!("{p} is set").into());
        }
        Ok(Self {
            tls: tls.then(|| tls_config(config)).transpose()?.map(Arc::new),
            sasl: sasl.then(|| sasl_config(config)).transpose()?,
        })
    }
}

fn sasl_config(config: &ClientConfig) -> Result<Sasl, NotServed> {
    let mechanism = config.get("sasl.mechanism").unwrap_or("GSSAPI");
    let user = config.get("sasl.username").unwrap_or_default().to_string();
    let password = config.get("sasl.password").unwrap_or_default().to_string();
    if mechanism.eq_ignore_ascii_case("PLAIN") {
        return Ok(Sasl::Plain { user, password });
    }
    match ScramMechanism::from_name(mechanism) {
        Some(mechanism) => Ok(Sasl::Scram {
            mechanism,
            user,
            password,
        }),
        None => Err(format!("sasl.mechanism {mechanism}").into()),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_config(config: &ClientConfig) -> Result<rustls::ClientConfig, NotServed> {
    let mut roots = RootCertStore::empty();
    match config.get("ssl.ca.location") {
        Some(path) => {
            for cert in CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("ssl.ca.location {path}: {e}"))?
            {
                let cert = cert.map_err(|e| format!("ssl.ca.location {path}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("ssl.ca.location {path}: {e}"))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let verify_chain = config
        .get("enable.ssl.certificate.verification")
        .is_none_or(|v| !v.eq_ignore_ascii_case("false"));
    let verify_name = config
        .get("ssl.endpoint.identification.algorithm")
        .is_none_or(|v| !v.eq_ignore_ascii_case("none"));
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| format!("ssl.ca.location: {e}"))?;
    let verifier = Arc::new(Verifier {
        webpki,
        verify_chain,
        verify_name,
    });
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (
        config.get("ssl.certificate.location"),
        config.get("ssl.key.location"),
    ) {
        (Some(crt), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(crt)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("ssl.certificate.location {crt}: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("ssl.key.location {key}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}").into())
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(NotServed(
            "only one of ssl.certificate.location and ssl.key.location".into(),
        )),
    }
}

/// librdkafka's two switches: `enable.ssl.certificate.verification` (the chain) and
/// `ssl.endpoint.identification.algorithm` (the host name), on rustls's WebPKI verifier.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    verify_chain: bool,
    verify_name: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.verify_chain {
            return Ok(ServerCertVerified::assertion());
        }
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.verify_name => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// One connection.
pub enum Stream {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// Wraps `tcp` in TLS (handshake within `deadline`) when `tls` is given. `host` is the
    /// name (or address) the certificate must be for.
    pub fn open(
        tcp: TcpStream,
        host: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        deadline: Deadline,
    ) -> Result<Self, Error> {
        let Some(tls) = tls else {
            return Ok(Self::Plain(tcp));
        };
        let name = match host.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(host.to_string())
                .map_err(|e| Error::Client(format!("TLS server name {host:?}: {e}")))?,
        };
        let mut conn = ClientConnection::new(tls.clone(), name)
            .map_err(|e| Error::Client(format!("TLS: {e}")))?;
        let mut tcp = tcp;
        while conn.is_handshaking() {
            bound(&tcp, deadline)?;
            conn.complete_io(&mut tcp)
                .map_err(|e| Error::Client(format!("TLS handshake: {e}")))?;
        }
        Ok(Self::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }

    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &s.sock,
        }
    }

    /// Writes `bytes` whole before `deadline`.
    pub fn send(&mut self, bytes: &[u8], deadline: Deadline) -> Result<(), Error> {
        bound(self.tcp(), deadline)?;
        self.write_all(bytes)
            .and_then(|_| self.flush())
            .map_err(|e| io_error("send", e, deadline))
    }

    /// Reads one size-prefixed frame (without its prefix) before `deadline`. A frame larger
    /// than `max` is refused, and memory grows with the bytes that arrive, not with the size
    /// the peer announces.
    pub fn receive(&mut self, max: usize, deadline: Deadline) -> Result<Vec<u8>, Error> {
        let mut size = [0u8; 4];
        self.read_full(&mut size, deadline)?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| Error::Protocol("negative frame size".into()))?;
        if size > max {
            return Err(Error::Protocol(format!("answer of {size} bytes refused")));
        }
        const CHUNK: usize = 64 << 10;
        let mut frame = Vec::with_capacity(size.min(CHUNK));
        let mut chunk = [0u8; CHUNK];
        while frame.len() < size {
            let want = (size - frame.len()).min(CHUNK);
            let n = self.read_some(&mut chunk[..want], deadline)?;
            frame.extend_from_slice(&chunk[..n]);
        }
        Ok(frame)
    }

    fn read_full(&mut self, buf: &mut [u8], deadline: Deadline) -> Result<(), Error> {
        let mut filled = 0;
        while filled < buf.len() {
            filled += self.read_some(&mut buf[filled..], deadline)?;
        }
        Ok(())
    }

    fn read_some(&mut self, buf: &mut [u8], deadline: Deadline) -> Result<usize, Error> {
        loop {
            bound(self.tcp(), deadline)?;
            match self.read(buf) {
                Ok(0) => return Err(Error::Client("receive: connection closed".into())),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error("receive", e, deadline)),
            }
        }
    }
}

/// When a call must be done by: its start plus its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// Time left, zero once passed.
    pub fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// The error of a call that ran out of time.
    pub fn timeout(&self) -> Error {
        Error::Timeout(self.budget)
    }
}

/// Socket timeouts set to what is left until `deadline`; a passed deadline is a timeout.
fn bound(tcp: &TcpStream, deadline: Deadline) -> Result<(), Error> {
    let left = deadline.left();
    if left.is_zero() {
        return Err(deadline.timeout());
    }
    tcp.set_read_timeout(Some(left))
        .and_then(|_| tcp.set_write_timeout(Some(left)))
        .map_err(|e| Error::Client(e.to_string()))
}

fn io_error(what: &str, e: io::Error, deadline: Deadline) -> Error {
    let timed_out = matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    );
    if timed_out && deadline.left().is_zero() {
        return deadline.timeout();
    }
    Error::Client(format!("{what}: {e}"))
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(props: &[(&str, &str)]) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in props {
            c.set(*k, *v);
        }
        c
    }

    #[test]
    fn which_settings_this_transport_serves() {
        // (properties, Ok(tls, sasl mechanism) | Err(text the refusal contains))
        type Want = Result<(bool, Option<&'static str>), &'static str>;
        let cases: Vec<(Vec<(&str, &str)>, Want)> = vec![
            (vec![], Ok((false, None))),
            (vec![("security.protocol", "PLAINTEXT")], Ok((false, None))),
            (vec![("security.protocol", "ssl")], Ok((true, None))),
            (
                vec![
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                ],
                Ok((false, Some("PLAIN"))),
            ),
            (
                vec![
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "SCRAM-SHA-512"),
                ],
                Ok((true, Some("SCRAM-SHA-512"))),
            ),
            (
                vec![
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "OAUTHBEARER"),
                ],
                Err("sasl.mechanism OAUTHBEARER"),
            ),
            (
                vec![("security.protocol", "SASL_SSL")],
                Err("sasl.mechanism GSSAPI"),
            ),
            (
                vec![("security.protocol", "SSL"), ("ssl.key.password", "x")],
                Err("ssl.key.password is set"),
            ),
            (
                vec![
                    ("security.protocol", "SSL"),
                    ("ssl.ca.location", "/nonexistent/ca.pem"),
                ],
                Err("ssl.ca.location /nonexistent/ca.pem"),
            ),
            (
                vec![("security.protocol", "SSL"), ("ssl.key.location", "/k.pem")],
                Err("only one of ssl.certificate.location and ssl.key.location"),
            ),
            (
                vec![("security.protocol", "carrier-pigeon")],
                Err("security.protocol"),
            ),
        ];
        for (props, want) in cases {
            let got = Security::from_config(&config(&props));
            match (want, got) {
                (Ok((tls, sasl)), Ok(s)) => {
                    assert_eq!(s.tls.is_some(), tls, "{props:?}");
                    assert_eq!(s.sasl.as_ref().map(Sasl::mechanism), sasl, "{props:?}");
                }
                (Err(text), Err(e)) => assert!(e.0.contains(text), "{props:?}: {e}"),
                (want, got) => panic!("{props:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn frames_are_capped_and_grow_with_what_arrives() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            // 1: a frame announcing 200 MiB.
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(&(200i32 << 20).to_be_bytes()).unwrap();
            // 2: the same, then 3 bytes and the end of the connection.
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(&(200i32 << 20).to_be_bytes()).unwrap();
            s.write_all(b"abc").unwrap();
            drop(s);
            // 3: one whole frame, then a size and silence.
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(&5i32.to_be_bytes()).unwrap();
            s.write_all(b"hello").unwrap();
            s.write_all(&5i32.to_be_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(800));
        });
        let deadline = || Deadline::after(Duration::from_millis(300));
        let mut a = Stream::Plain(TcpStream::connect(addr).unwrap());
        let e = a.receive(100 << 20, deadline()).unwrap_err();
        assert!(e.to_string().contains("209715200 bytes refused"), "{e}");
        let mut b = Stream::Plain(TcpStream::connect(addr).unwrap());
        let e = b.receive(256 << 20, deadline()).unwrap_err();
        assert!(e.to_string().contains("connection closed"), "{e}");
        let mut c = Stream::Plain(TcpStream::connect(addr).unwrap());
        assert_eq!(c.receive(1 << 20, deadline()).unwrap(), b"hello");
        let e = c.receive(1 << 20, deadline()).unwrap_err();
        assert_eq!(e, Error::Timeout(Duration::from_millis(300)));
        server.join().unwrap();
    }
}
