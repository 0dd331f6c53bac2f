//! The client side of SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks it
//! (KIP-84): no channel binding, no authorization id. Pure: the nonce is given, the messages
//! are bytes in and out; `kafka::group_client` carries them in SaslAuthenticate frames.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2};

/// Highest iteration count accepted from a server: Kafka allows 4,096 to 16,384; a larger
/// count would only make us spend CPU on an untrusted server's request.
const MAX_ITERATIONS: u32 = 65_536;

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl Mechanism {
    /// The mechanism named `name` (`SCRAM-SHA-256` or `SCRAM-SHA-512`, any case).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_uppercase().as_str() {
            "SCRAM-SHA-256" => Some(Self::Sha256),
            "SCRAM-SHA-512" => Some(Self::Sha512),
            _ => None,
        }
    }

    fn algorithms(
        self,
    ) -> (
        pbkdf2::Algorithm,
        hmac::Algorithm,
        &'static digest::Algorithm,
    ) {
        match self {
            Self::Sha256 => (
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
                &digest::SHA256,
            ),
            Self::Sha512 => (
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
                &digest::SHA512,
            ),
        }
    }
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// The server's message does not follow RFC 5802.
    #[error("SCRAM: malformed server message ({0})")]
    Malformed(&'static str),
    /// The server's nonce does not extend ours.
    #[error("SCRAM: the server's nonce does not start with the client's")]
    Nonce,
    /// An iteration count outside 1..=65,536.
    #[error("SCRAM: iteration count {0} refused")]
    Iterations(u64),
    /// The server refused (`e=` in its final message).
    #[error("SCRAM: the server refused: {0}")]
    Refused(String),
    /// The server's signature is wrong: it does not know the password.
    #[error("SCRAM: the server's signature does not verify")]
    ServerSignature,
}

/// One exchange: [`Client::first`], then [`Client::fin`] with the server's first message,
/// then [`Client::verify`] with its final message.
#[derive(Debug, Clone)]
pub struct Client {
    mechanism: Mechanism,
    password: String,
    first_bare: String,
    nonce: String,
    /// Set by `fin`: the server signature to expect.
    expected: Option<Vec<u8>>,
}

/// `=` and `,` escaped as RFC 5802 `saslname` asks.
fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

impl Client {
    /// An exchange for `user` / `password` with the client nonce `nonce` (printable, no `,`).
    pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> Self {
        Self {
            mechanism,
            password: password.to_string(),
            first_bare: format!("n={},r={nonce}", saslname(user)),
            nonce: nonce.to_string(),
            expected: None,
        }
    }

    /// The client's first message.
    pub fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.first_bare).into_bytes()
    }

    /// The client's final message (with the proof), from the server's first message.
    pub fn fin(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in server_first.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("m", _)) => return Err(ScramError::Malformed("mandatory extension")),
                _ => {}
            }
        }
        let nonce = nonce.ok_or(ScramError::Malformed("no nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = B64
            .decode(salt.ok_or(ScramError::Malformed("no salt"))?)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u64 = iterations
            .ok_or(ScramError::Malformed("no iteration count"))?
            .parse()
            .map_err(|_| ScramError::Malformed("iteration count is not a number"))?;
        let rounds = u32::try_from(iterations)
            .ok()
            .filter(|i| *i <= MAX_ITERATIONS)
            .and_then(std::num::NonZeroU32::new)
            .ok_or(ScramError::Iterations(iterations))?;
        let (kdf, mac, hash) = self.mechanism.algorithms();
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(kdf, rounds, &salt, self.password.as_bytes(), &mut salted);
        let salted = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac::sign(&hmac::Key::new(mac, stored_key.as_ref()), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature =
            hmac::sign(&hmac::Key::new(mac, server_key.as_ref()), auth.as_bytes());
        self.expected = Some(server_signature.as_ref().to_vec());
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server's final message: it proves the server knows the password.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text =
            std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_string()));
        }
        let v = text
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or(ScramError::Malformed("no server signature"))?;
        let got = B64
            .decode(v)
            .map_err(|_| ScramError::Malformed("server signature is not base64"))?;
        let expected = self
            .expected
            .as_deref()
            .ok_or(ScramError::Malformed("final message before the first"))?;
        // Not secret: the server proves itself to us, a timing difference tells it nothing.
        if got != expected {
            return Err(ScramError::ServerSignature);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil".
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    fn rfc7677() -> Client {
        Client::new(Mechanism::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    }

    #[test]
    fn the_rfc_7677_exchange() {
        let mut c = rfc7677();
        assert_eq!(c.first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO".to_vec());
        let fin = c.fin(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Ok(())
        );
    }

    #[test]
    fn bad_server_messages_are_refused() {
        let cases: Vec<(&str, &str, ScramError)> = vec![
            (
                "foreign nonce",
                "r=other123,s=QQ==,i=4096",
                ScramError::Nonce,
            ),
            (
                "nonce not extended",
                "r=rOprNGfwEbeRWgbNEkqO,s=QQ==,i=4096",
                ScramError::Nonce,
            ),
            (
                "no salt",
                "r=rOprNGfwEbeRWgbNEkqOx,i=4096",
                ScramError::Malformed("no salt"),
            ),
            (
                "bad salt",
                "r=rOprNGfwEbeRWgbNEkqOx,s=*,i=4096",
                ScramError::Malformed("salt is not base64"),
            ),
            (
                "zero iterations",
                "r=rOprNGfwEbeRWgbNEkqOx,s=QQ==,i=0",
                ScramError::Iterations(0),
            ),
            (
                "too many iterations",
                "r=rOprNGfwEbeRWgbNEkqOx,s=QQ==,i=10000000",
                ScramError::Iterations(10_000_000),
            ),
            (
                "mandatory extension",
                "m=x,r=rOprNGfwEbeRWgbNEkqOx,s=QQ==,i=4096",
                ScramError::Malformed("mandatory extension"),
            ),
        ];
        for (name, server_first, want) in cases {
            assert_eq!(rfc7677().fin(server_first.as_bytes()), Err(want), "{name}");
        }
        let mut c = rfc7677();
        c.fin(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            c.verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            Err(ScramError::ServerSignature)
        );
        assert_eq!(
            c.verify(b"e=invalid-proof"),
            Err(ScramError::Refused("invalid-proof".into()))
        );
    }

    #[test]
    fn names_are_escaped_and_mechanisms_named() {
        let c = Client::new(Mechanism::Sha512, "a=b,c", "p", "n");
        assert_eq!(c.first(), b"n,,n=a=3Db=2Cc,r=n".to_vec());
        assert_eq!(
            Mechanism::from_name("scram-sha-512"),
            Some(Mechanism::Sha512)
        );
        assert_eq!(
            Mechanism::from_name("SCRAM-SHA-256"),
            Some(Mechanism::Sha256)
        );
        assert_eq!(Mechanism::from_name("PLAIN"), None);
    }
}
