//! A Kafka-aware TCP proxy for network faults in tests and benches: added latency, requests
//! of one API held until released, or a blackhole (nothing forwarded, connections kept open).
//!
//! Put a broker behind it with [`super::brokers::LocalBroker::start_proxied`]: the broker
//! advertises the proxy's address, so every client connection (bootstrap and leaders) goes
//! through it. Client→broker bytes are parsed into Kafka request frames (4-byte length, then
//! `api_key` INT16) so faults can target one API; broker→client bytes are copied as they come.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Kafka API keys worth naming in tests.
pub mod api {
    /// Produce.
    pub const PRODUCE: i16 = 0;
    /// Fetch.
    pub const FETCH: i16 = 1;
    /// ListOffsets (watermarks, offsets for times).
    pub const LIST_OFFSETS: i16 = 2;
    /// Metadata.
    pub const METADATA: i16 = 3;
    /// EndTxn (commit or abort a transaction).
    pub const END_TXN: i16 = 26;
}

/// What the proxy does to traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Added to every client request before it is forwarded (one-way latency).
    pub latency: Duration,
    /// Requests of this API (and, per connection, everything after them: Kafka answers in
    /// order) are held until the faults change.
    pub hold_api: Option<i16>,
    /// Nothing is forwarded either way; connections stay open (a network partition that
    /// looks like a slow peer, not a refused connection).
    pub blackhole: bool,
}

struct Shared {
    upstream: Mutex<Option<SocketAddr>>,
    faults: watch::Sender<Faults>,
    held: AtomicUsize,
    requests: AtomicU64,
}

/// A running proxy; dropping it stops accepting (open connections end with their peers).
pub struct KafkaProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl KafkaProxy {
    /// Listens on a free loopback port; forwards once [`KafkaProxy::set_upstream`] is called.
    pub async fn bind() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: Mutex::new(None),
            faults: watch::channel(Faults::default()).0,
            held: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let upstream = *s.upstream.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(up) = upstream {
                        if let Ok(server) = TcpStream::connect(up).await {
                            serve(client, server, s).await;
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where connections are forwarded (new connections only).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(upstream);
    }

    /// Replaces the faults (held requests go on if they are no longer held).
    pub fn set(&self, faults: Faults) {
        self.shared.faults.send_replace(faults);
    }

    /// The current faults.
    pub fn faults(&self) -> Faults {
        self.shared.faults.borrow().clone()
    }

    /// Requests being held right now.
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Client requests seen so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(client: TcpStream, server: TcpStream, s: Arc<Shared>) {
    let (mut cr, cw) = client.into_split();
    let (sr, mut sw) = server.into_split();
    // Frames with the instant they may be forwarded; the writer keeps their order.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = {
        let s = s.clone();
        async move {
            let mut faults = s.faults.subscribe();
            loop {
                let mut len = [0u8; 4];
                if cr.read_exact(&mut len).await.is_err() {
                    return;
                }
                let n = u32::from_be_bytes(len) as usize;
                let mut frame = len.to_vec();
                frame.resize(4 + n, 0);
                if cr.read_exact(&mut frame[4..]).await.is_err() {
                    return;
                }
                s.requests.fetch_add(1, Ordering::SeqCst);
                let api = (n >= 2).then(|| i16::from_be_bytes([frame[4], frame[5]]));
                let mut counted = false;
                loop {
                    let f = faults.borrow_and_update().clone();
                    let hold = f.blackhole || (f.hold_api.is_some() && f.hold_api == api);
                    if !hold {
                        break;
                    }
                    if !counted {
                        s.held.fetch_add(1, Ordering::SeqCst);
                        counted = true;
                    }
                    if faults.changed().await.is_err() {
                        return;
                    }
                }
                if counted {
                    s.held.fetch_sub(1, Ordering::SeqCst);
                }
                let latency = faults.borrow().latency;
                if tx.send((Instant::now() + latency, frame)).is_err() {
                    return;
                }
            }
        }
    };
    let writer = async move {
        while let Some((at, frame)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if sw.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let back = copy_unless_blackholed(sr, cw, s.faults.subscribe());
    tokio::select! {
        _ = async { tokio::join!(reader, writer) } => {}
        _ = back => {}
    }
}

async fn copy_unless_blackholed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Faults>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while faults.borrow_and_update().blackhole {
            if faults.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers each 4-byte-length frame with the same frame.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1024];
                    while let Ok(n) = c.read(&mut buf).await {
                        if n == 0 || c.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn frame(api: i16) -> Vec<u8> {
        let mut body = api.to_be_bytes().to_vec();
        body.extend([0, 0, 0, 0, 0, 1]);
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend(body);
        f
    }

    #[tokio::test]
    async fn holds_one_api_until_released() {
        let p = KafkaProxy::bind().await.unwrap();
        p.set_upstream(echo().await);
        let mut c = TcpStream::connect(p.addr()).await.unwrap();
        let mut got = vec![0u8; 12];
        c.write_all(&frame(api::METADATA)).await.unwrap();
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(api::METADATA));
        p.set(Faults {
            hold_api: Some(api::LIST_OFFSETS),
            ..Faults::default()
        });
        c.write_all(&frame(api::LIST_OFFSETS)).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.held() == 0 {
            assert!(Instant::now() < deadline, "the request is held");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        p.set(Faults::default());
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(api::LIST_OFFSETS));
        assert_eq!(p.held(), 0);
        assert_eq!(p.requests(), 2);
    }
}
