//! The target producer's events (delivery reports, statistics, errors) served on the task
//! that waits for them, not on a polling thread: librdkafka writes to an eventfd when its
//! main queue gets an event, tokio's reactor wakes the waiting task, which drains the queue.
//!
//! rdkafka's `ThreadedProducer` polls in 100 ms slices and, its timeout being whole
//! milliseconds, spins through the last one of each; with its wake-ups that thread was 12 %
//! of the worker's CPU at 100 B records (`perf`, docs/PERFORMANCE.md).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::producer::{BaseProducer, Producer};
use tokio::io::unix::AsyncFd;

use crate::kafka::delivery::DeliveryContext;

/// A producer whose reports go to a [`crate::kafka::delivery::Tracker`], polled by whoever waits
/// on it (see [`ProducerEvents`]).
pub type DeliveryProducer = BaseProducer<DeliveryContext>;

/// Events served per call: a full queue never holds the loop for long.
const SERVE_MAX: usize = 256;

/// librdkafka's main queue of a client (a reference counted handle).
struct MainQueue(*mut rd::rd_kafka_queue_t);

// librdkafka queue handles are thread safe.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

/// The wake-up channel of one producer, and the producer to poll.
pub struct ProducerEvents {
    fd: AsyncFd<OwnedFd>,
    /// Events were left in the queue by the last `serve`.
    backlog: AtomicBool,
    queue: MainQueue,
    producer: Weak<DeliveryProducer>,
}

impl ProducerEvents {
    /// Signals `producer`'s main queue on a new eventfd. Must run inside the tokio runtime.
    pub fn new(producer: &Arc<DeliveryProducer>) -> io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new fd nobody else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `owned` is a valid fd, neither replaced nor closed while registered.
        let fd = unsafe { AsyncFd::register(owned)? };
        // SAFETY: the client outlives this call; the handle is destroyed in `drop`.
        let queue = unsafe { rd::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        if queue.is_null() {
            return Err(io::Error::other("librdkafka has no main queue"));
        }
        // An eventfd takes 8-byte writes; librdkafka copies the payload.
        let one = 1u64.to_ne_bytes();
        // SAFETY: valid queue and fd; the fd stays open until the signal is disabled.
        unsafe {
            rd::rd_kafka_queue_io_event_enable(
                queue,
                fd.get_ref().as_raw_fd(),
                one.as_ptr().cast(),
                one.len(),
            )
        };
        Ok(Self {
            fd,
            // Events queued before the signal was enabled are served on the first check.
            backlog: AtomicBool::new(true),
            queue: MainQueue(queue),
            producer: Arc::downgrade(producer),
        })
    }

    /// Serves the events queued now (delivery reports run the producer context's callback),
    /// at most [`SERVE_MAX`]; what is left is served on the next signal check. Returns false
    /// once the producer is gone.
    pub fn serve(&self) -> bool {
        let Some(producer) = self.producer.upgrade() else {
            return false;
        };
        self.backlog.store(false, Ordering::Relaxed);
        for _ in 0..SERVE_MAX {
            // SAFETY: valid handle while `self` lives.
            if unsafe { rd::rd_kafka_queue_length(self.queue.0) } == 0 {
                return true;
            }
            // One event, without blocking.
            producer.poll(Duration::ZERO);
        }
        // librdkafka signals again only for new events: remember these.
        self.backlog.store(true, Ordering::Relaxed);
        true
    }

    /// Ready when librdkafka signalled new events (the signal is consumed: serve them) or
    /// some are left from the last [`ProducerEvents::serve`]; registers `cx` otherwise.
    pub fn poll_signal(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.backlog.load(Ordering::Relaxed) {
            return Poll::Ready(());
        }
        match self.fd.poll_read_ready(cx) {
            Poll::Ready(Ok(mut guard)) => {
                let mut buf = [0u8; 8];
                // SAFETY: reads 8 bytes into `buf` from our eventfd (non-blocking).
                let _ = unsafe {
                    libc::read(
                        self.fd.get_ref().as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                guard.clear_ready();
                Poll::Ready(())
            }
            // The reactor is gone (runtime shutting down): nothing to wait for.
            Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Ready when librdkafka signalled a new event; pending forever without `events`.
    pub async fn signalled(events: Option<&Self>) {
        match events {
            Some(ev) => std::future::poll_fn(|cx| ev.poll_signal(cx)).await,
            None => std::future::pending().await,
        }
    }

    /// Serves events until `done` is ready. The queue is looked at only when librdkafka
    /// signalled it (no lock per poll of a busy loop).
    pub fn poll_serving<T>(
        &self,
        cx: &mut Context<'_>,
        mut done: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        loop {
            if let Poll::Ready(v) = done(cx) {
                return Poll::Ready(v);
            }
            if self.poll_signal(cx).is_pending() || !self.serve() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for ProducerEvents {
    fn drop(&mut self) {
        // SAFETY: valid handle; disabling first, so librdkafka never writes to a closed fd.
        unsafe {
            rd::rd_kafka_queue_io_event_enable(self.queue.0, -1, std::ptr::null(), 0);
            rd::rd_kafka_queue_destroy(self.queue.0);
        }
    }
}
