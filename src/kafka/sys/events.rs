//! The target producer's events (delivery reports, statistics, errors) served on the task
//! that waits for them, not on a polling thread: librdkafka calls back when its main queue
//! gets an event after being empty, and the callback wakes the waiting task, which drains the
//! queue. (rdkafka's `ThreadedProducer` polls in 100 ms slices and spins through the last
//! millisecond of each.)

use std::ffi::c_void;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use rdkafka::bindings as rd;
use rdkafka::producer::{BaseProducer, Producer};

use crate::kafka::delivery::DeliveryContext;

/// A producer whose reports go to a [`crate::kafka::delivery::Tracker`], polled by whoever waits
/// on it (see [`ProducerEvents`]).
pub type DeliveryProducer = BaseProducer<DeliveryContext>;

/// Events served per call: a full queue never holds the loop for long.
const SERVE_MAX: usize = 256;

/// librdkafka's main queue of a client (a reference counted handle).
struct MainQueue(*mut rd::rd_kafka_queue_t);

// SAFETY: librdkafka's queues are locked internally; the handle (a reference librdkafka
// counts) may be used and released on any thread.
unsafe impl Send for MainQueue {}
// SAFETY: as for `Send`: every call made through a shared reference (`rd_kafka_queue_length`)
// takes the queue's lock.
unsafe impl Sync for MainQueue {}

/// What librdkafka's queue callback sets, on one of its threads.
#[derive(Default)]
struct Signal {
    /// The queue got an event since the waiting task last looked.
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    fn take(&self) -> bool {
        self.raised.swap(false, Ordering::AcqRel)
    }
}

/// librdkafka's queue event callback: called with the queue's lock held when an event
/// arrives in the empty queue. Only sets the flag and wakes: nothing here may call back
/// into librdkafka.
unsafe extern "C" fn raise(_rk: *mut rd::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Signal` of a live `ProducerEvents`: its `Drop` disables this
    // callback (under the same lock) before the `Arc` is released.
    let signal = unsafe { &*opaque.cast::<Signal>() };
    signal.raised.store(true, Ordering::Release);
    signal.waker.wake();
}

/// The wake-up channel of one producer, and the producer to poll.
pub struct ProducerEvents {
    signal: Arc<Signal>,
    /// Events were left in the queue by the last `serve`.
    backlog: AtomicBool,
    queue: MainQueue,
    producer: Weak<DeliveryProducer>,
}

impl ProducerEvents {
    /// Signals `producer`'s main queue through a callback.
    pub fn new(producer: &Arc<DeliveryProducer>) -> io::Result<Self> {
        // SAFETY: the client outlives this call; the handle is destroyed in `drop`.
        let queue = unsafe { rd::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        if queue.is_null() {
            return Err(io::Error::other("librdkafka has no main queue"));
        }
        let signal = Arc::new(Signal::default());
        // SAFETY: valid queue; the opaque `Signal` lives until the callback is disabled.
        unsafe {
            rd::rd_kafka_queue_cb_event_enable(
                queue,
                Some(raise),
                Arc::as_ptr(&signal).cast_mut().cast(),
            )
        };
        Ok(Self {
            signal,
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
        if self.backlog.load(Ordering::Relaxed) || self.signal.take() {
            return Poll::Ready(());
        }
        self.signal.waker.register(cx.waker());
        // Raised between the check and the registration: its wake may have gone to the
        // previous waker.
        if self.signal.take() {
            return Poll::Ready(());
        }
        Poll::Pending
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
        // SAFETY: valid handle; disabling first (under the queue's lock, which the callback
        // runs under), so the callback never sees a released `Signal`.
        unsafe {
            rd::rd_kafka_queue_cb_event_enable(self.queue.0, None, std::ptr::null_mut());
            rd::rd_kafka_queue_destroy(self.queue.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::context::LogContext;
    use crate::kafka::delivery::Tracker;
    use rdkafka::config::ClientConfig;
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::BaseRecord;

    async fn signalled_within(events: &ProducerEvents, ms: u64) -> bool {
        tokio::time::timeout(
            Duration::from_millis(ms),
            ProducerEvents::signalled(Some(events)),
        )
        .await
        .is_ok()
    }

    // Nobody polls the producer: only librdkafka's callback can wake the waiting task.
    #[tokio::test]
    async fn a_report_wakes_the_waiting_task_and_only_then() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        let producer: Arc<DeliveryProducer> = Arc::new(
            ClientConfig::new()
                .set("bootstrap.servers", mock.bootstrap_servers())
                .create_with_context(DeliveryContext::new(
                    LogContext::new("test"),
                    Tracker::default(),
                ))
                .expect("producer"),
        );
        let events = ProducerEvents::new(&producer).expect("events");
        assert!(
            signalled_within(&events, 0).await,
            "the first check serves what came before"
        );
        assert!(events.serve());
        assert!(!signalled_within(&events, 200).await, "nothing was sent");
        for round in 0..3 {
            producer
                .send(BaseRecord::<(), str, usize>::with_opaque_to("t", 0).payload("v"))
                .map_err(|(e, _)| e)
                .expect("send");
            assert!(
                signalled_within(&events, 10_000).await,
                "round {round}: the report's signal"
            );
            assert!(events.serve());
            assert_eq!(
                producer.in_flight_count(),
                0,
                "round {round}: the report was served"
            );
            assert!(
                !signalled_within(&events, 100).await,
                "round {round}: served, no new event"
            );
        }
        // Dropped: the callback is off before its signal is released; the producer lives on.
        drop(events);
        producer
            .send(BaseRecord::<(), str, usize>::with_opaque_to("t", 0).payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
        crate::kafka::producer::flush(&producer, Duration::from_secs(10)).expect("flush");
    }
}
