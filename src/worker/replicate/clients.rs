//! The Kafka clients of one worker: the source consumer, metadata and admin clients of both
//! clusters, and their properties. Built once; bad configuration is fatal.

use std::sync::Arc;

use rdkafka::consumer::StreamConsumer;
use tracing::info;

use super::intake::create_consumer;
use super::settings::{EngineError, EngineSettings};
use crate::api::MirrorFlowSpec;
use crate::kafka::config::{client_properties, ClientProperties};
use crate::kafka::context::LogContext;
use crate::kafka::health::FlowHealth;
use crate::kafka::topics::{self, Admin, MetaClient};
use crate::worker::error::Error as WorkerError;

/// A worker's clients.
pub struct Clients {
    pub source_props: ClientProperties,
    pub target_props: ClientProperties,
    /// Shared with the refresh task and with records read ahead while a batch is written.
    pub consumer: Arc<StreamConsumer<LogContext>>,
    pub source_meta: MetaClient,
    pub target_meta: MetaClient,
    pub source_admin: Arc<Admin>,
    pub target_admin: Arc<Admin>,
}

impl Clients {
    /// Builds the clients of `spec` (Secrets from `settings.secrets_dir`). Missing secrets
    /// and bad properties are fatal, naming the field.
    pub fn connect(
        settings: &EngineSettings,
        spec: &MirrorFlowSpec,
        health: &FlowHealth,
    ) -> Result<Self, EngineError> {
        let fatal = |what: &str, e: WorkerError| EngineError::Fatal(e.context(what));
        let source_props = client_properties(&spec.source, &settings.secrets_dir)
            .map_err(|e| fatal("spec.source", e.into()))?;
        let target_props = client_properties(&spec.target, &settings.secrets_dir)
            .map_err(|e| fatal("spec.target", e.into()))?;
        info!(source = %source_props, target = %target_props, "client properties");
        // One context per client: each reports its own connection health.
        let (s, t) = (&health.source, &health.target);
        let consumer = create_consumer(settings, spec, &source_props, s.context())
            .map_err(|e| fatal("source consumer", crate::kafka::Error::from(e).into()))?;
        let source_meta = topics::meta_client(&source_props, s.context())
            .map_err(|e| fatal("source client", crate::kafka::Error::from(e).into()))?;
        let target_meta = topics::meta_client(&target_props, t.context())
            .map_err(|e| fatal("target client", crate::kafka::Error::from(e).into()))?;
        let source_admin = topics::admin_client(&source_props, s.context())
            .map_err(|e| fatal("source admin client", crate::kafka::Error::from(e).into()))?;
        let target_admin = topics::admin_client(&target_props, t.context())
            .map_err(|e| fatal("target admin client", crate::kafka::Error::from(e).into()))?;
        Ok(Self {
            source_props,
            target_props,
            consumer: Arc::new(consumer),
            source_meta,
            target_meta,
            source_admin: Arc::new(source_admin),
            target_admin: Arc::new(target_admin),
        })
    }
}
