//! Discovery and the periodic checks run beside the replication loop: a refresh held up by a
//! cluster that does not answer does not hold up the records. On Apache Kafka: the source
//! behind the testkit's proxy.

mod replication_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mirrorflow::api::Delivery;
use mirrorflow::testkit::brokers::{broker_or_skip, produce, proxied_broker_or_skip, BrokerKind};
use mirrorflow::testkit::proxy::{api, Faults};
use replication_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_flow_while_a_refresh_is_held() {
    let Some((source, proxy)) = proxied_broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let Some(target) = broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let topic = "orders";
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    source.create_topic(topic, 2, &[]).await.unwrap();
    let first = records("a", 2, 20);
    produce(&sb, topic, &first).await.unwrap();
    // Refreshes every second; a held one must never time out during the test.
    let spec = flow_spec(&source, &target, Delivery::AtLeastOnce);
    let mut tuning = test_tuning(50);
    tuning.io_timeout = Duration::from_secs(600);
    let mut w = start_worker("held", spec, 0, 1, tuning);
    w.wait_positions(topic, &ends(&first)).await;

    // Every ListOffsets request (the refresh's watermarks) is held from now on: the next
    // refresh stalls in it. The consumer fetches on connections of its own.
    proxy.set(Faults {
        hold_api: Some(api::LIST_OFFSETS),
        ..Faults::default()
    });
    let begin = Instant::now();
    while proxy.held() == 0 {
        assert!(begin.elapsed() < WAIT, "no refresh asked for watermarks");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = records("b", 2, 300);
    produce(&sb, topic, &second).await.unwrap();
    let want: BTreeMap<i32, i64> = ends(&first)
        .into_iter()
        .map(|(p, n)| (p, n + ends(&second)[&p]))
        .collect();
    w.wait_positions(topic, &want).await;
    assert!(
        proxy.held() > 0,
        "the refresh was still held while the new records were replicated"
    );
    proxy.set(Faults::default());
    w.stop().await.unwrap();
    let n = first.len() + second.len();
    let src = read_n(&sb, topic, n).await;
    let dst = read_n(&tb, &format!("dc1.{topic}"), n).await;
    assert_same(&src, &dst, "orders after a held refresh");
}
