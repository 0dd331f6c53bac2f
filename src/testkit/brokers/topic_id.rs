//! Topic ids for tests: a thin use of the product's DescribeTopics call
//! ([`crate::kafka::topic_id`]) through a throw-away admin client.

use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

use crate::kafka::topic_id::describe_topic_ids;

/// Blocking: the base64 topic id of `topic` on `bootstrap` (reached with `config`), `None`
/// when the broker reports the all-zero id (no id support). Errors are strings naming the
/// topic.
pub(super) fn describe_topic_id(
    config: &ClientConfig,
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| format!("admin client for {bootstrap}: {e}"))?;
    let topic = topic.to_string();
    describe_topic_ids(&admin, std::slice::from_ref(&topic), timeout)?
        .remove(&topic)
        .unwrap_or_else(|| {
            Err(format!(
                "describe topic {topic}: topic missing from the answer"
            ))
        })
}
