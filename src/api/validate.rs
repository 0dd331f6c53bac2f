//! Validation shared by the controller and the worker.
//!
//! The CRD schema already makes the API server enforce types, enums, ranges, patterns and the
//! cross-field CEL rules. Standalone mode never passes through an API server, so everything is
//! checked again here, plus what a schema cannot express: regexes compile, owned client
//! properties are not overridden, bootstrap servers are `host:port`.

use std::fmt;

use regex::Regex;

use super::{ClusterSpec, MirrorFlowSpec, OffsetCheckpointSpec, SaslMechanism, SaslSpec};

/// One problem, naming the field (JSON path from the resource root) and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub value: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (got {:?})", self.field, self.message, self.value)
    }
}

/// All problems found in one spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    fn push(
        &mut self,
        field: impl Into<String>,
        value: impl fmt::Display,
        message: impl Into<String>,
    ) {
        self.0.push(FieldError {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        });
    }

    /// The fields in error, in order.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.field.as_str()).collect()
    }

    fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Client properties mirrorflow sets itself; overriding them would break delivery guarantees,
/// offset validation or security handling.
pub const OWNED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "group.instance.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "isolation.level",
    "transactional.id",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "transaction.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "security.protocol",
    "enable.ssl.certificate.verification",
    "enable.sasl.oauthbearer.unsecure.jwt",
];

/// Property prefixes handled by the typed `tls` / `sasl` fields (`https.*` configures the
/// TLS of the OAUTHBEARER token endpoint).
pub const OWNED_PREFIXES: &[&str] = &["ssl.", "sasl.", "ssl_", "https.", "security."];

/// Why a client property may not be set through `config`, if it may not.
pub fn owned_property_reason(key: &str) -> Option<&'static str> {
    let k = key.trim().to_ascii_lowercase();
    if OWNED_PROPERTIES.contains(&k.as_str()) {
        return Some(match k.as_str() {
            "bootstrap.servers" | "metadata.broker.list" => "set it in bootstrapServers",
            "security.protocol" => "it follows from the tls and sasl fields",
            "enable.ssl.certificate.verification" => {
                "certificates are always verified; for a test cluster only, set tls.insecureSkipVerify: true (the flow then shows an InsecureTls condition)"
            }
            "enable.sasl.oauthbearer.unsecure.jwt" => {
                "unsigned tokens are never used; configure sasl.oauthBearer with a token endpoint"
            }
            "auto.offset.reset" => "offset validation and startFrom decide positions",
            "isolation.level"
            | "transactional.id"
            | "enable.idempotence"
            | "enable.gapless.guarantee" => "it follows from spec.delivery",
            "transaction.timeout.ms" | "message.timeout.ms" | "delivery.timeout.ms" => {
                "the worker sets its delivery and transaction timeouts together (ExactlyOnce \
                 needs message.timeout.ms <= transaction.timeout.ms) and waits on them"
            }
            _ => "mirrorflow manages consumer groups and offsets itself",
        });
    }
    if OWNED_PREFIXES.iter().any(|p| k.starts_with(p)) {
        return Some("use the typed tls and sasl fields (secrets come from Secret references)");
    }
    None
}

/// Why a client property value would break the delivery guarantees, if it would: `acks`
/// other than all, more than 5 requests in flight per connection (the idempotent producer
/// keeps order only up to 5), or no retries.
pub fn unsafe_property_value(key: &str, value: &str) -> Option<String> {
    let k = key.trim().to_ascii_lowercase();
    let v = value.trim();
    match k.as_str() {
        "acks" | "request.required.acks" if !matches!(v, "all" | "-1") => Some(format!(
            "{k}={v} lets the target acknowledge records it could still lose; mirrorflow \
             needs acks=all (leave it unset)"
        )),
        "max.in.flight.requests.per.connection" | "max.in.flight" => match v.parse::<u32>() {
            Ok(1..=5) => None,
            _ => Some(format!(
                "{k}={v}: the idempotent producer keeps per-partition order only with 1 to 5 \
                 requests in flight"
            )),
        },
        "retries" | "message.send.max.retries" if v == "0" => Some(format!(
            "{k}=0 turns every transient broker error into a failed batch; leave it unset"
        )),
        _ => None,
    }
}

#[cfg(test)]
#[test]
fn unsafe_values_name_the_value() {
    let why = unsafe_property_value("ACKS", "1").unwrap();
    assert!(why.contains("acks=1") && why.contains("acks=all"), "{why}");
    assert_eq!(unsafe_property_value("linger.ms", "0"), None);
    assert_eq!(unsafe_property_value("retries", "2147483647"), None);
}

/// Is `s` a DNS-1123 label (lowercase alphanumerics and '-', 1..=63, alphanumeric ends)?
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Compile a list of patterns as full-match regexes, reporting each bad one.
pub fn compile_patterns(
    field: &str,
    patterns: &[String],
    errs: &mut ValidationErrors,
) -> Vec<Regex> {
    let mut out = Vec::with_capacity(patterns.len());
    for (i, p) in patterns.iter().enumerate() {
        match full_match_regex(p) {
            Ok(r) => out.push(r),
            Err(e) => errs.push(
                format!("{field}[{i}]"),
                p,
                format!("invalid regular expression: {}", first_line(&e.to_string())),
            ),
        }
    }
    out
}

/// A regex anchored at both ends, as MM2's include/exclude lists are.
pub fn full_match_regex(p: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{p})$"))
}

fn first_line(s: &str) -> String {
    // regex errors are multi-line with a caret diagram; keep the summary at the end.
    s.lines().last().unwrap_or(s).trim().to_string()
}

fn validate_cluster(path: &str, c: &ClusterSpec, errs: &mut ValidationErrors) {
    if !is_dns1123_label(&c.alias) {
        errs.push(
            format!("{path}.alias"),
            &c.alias,
            "must be a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
        );
    }
    if c.bootstrap_servers.trim().is_empty() {
        errs.push(
            format!("{path}.bootstrapServers"),
            &c.bootstrap_servers,
            "must not be empty",
        );
    } else {
        for server in c.bootstrap_servers.split(',') {
            let server = server.trim();
            let ok = server
                .rsplit_once(':')
                .map(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
                .unwrap_or(false);
            if !ok {
                errs.push(
                    format!("{path}.bootstrapServers"),
                    server,
                    "each entry must be host:port with a port in 1..65535",
                );
            }
        }
    }
    for (key, value) in &c.config {
        if let Some(why) = owned_property_reason(key) {
            // The value may be a secret: name the key only.
            errs.push(
                format!("{path}.config[{key:?}]"),
                key,
                format!("property {key:?} is managed by mirrorflow: {why}"),
            );
        } else if let Some(why) = unsafe_property_value(key, value) {
            errs.push(format!("{path}.config[{key:?}]"), value, why);
        }
    }
    if let Some(tls) = &c.tls {
        if let Some(ca) = &tls.ca {
            check_secret_ref(
                &format!("{path}.tls.ca"),
                &ca.secret_name,
                &[("key", &ca.key)],
                errs,
            );
        }
        if let Some(cc) = &tls.client_cert {
            check_secret_ref(
                &format!("{path}.tls.clientCert"),
                &cc.secret_name,
                &[("certKey", &cc.cert_key), ("keyKey", &cc.key_key)],
                errs,
            );
        }
    }
    if let Some(sasl) = &c.sasl {
        validate_sasl(path, c, sasl, errs);
    }
}

fn validate_sasl(path: &str, c: &ClusterSpec, sasl: &SaslSpec, errs: &mut ValidationErrors) {
    let mech = sasl.mechanism;
    if mech.needs_tls() && c.tls.is_none() {
        errs.push(
            format!("{path}.sasl.mechanism"),
            mech.as_str(),
            format!(
                "{} sends the {} as clear text without TLS: set {path}.tls (or use SCRAM-SHA-256/512)",
                mech.as_str(),
                if mech == SaslMechanism::Plain { "password" } else { "bearer token" }
            ),
        );
    }
    match (mech, &sasl.credentials, &sasl.oauth_bearer) {
        (SaslMechanism::OAuthBearer, None, Some(o)) => {
            let url = o.token_endpoint_url.trim();
            if !(url.starts_with("https://") || is_loopback_http(url)) {
                errs.push(
                    format!("{path}.sasl.oauthBearer.tokenEndpointUrl"),
                    url,
                    "must be an https:// URL (http:// only to a loopback address such as a local token proxy: the client secret travels in the request)",
                );
            }
            if o.client_id.trim().is_empty() {
                errs.push(
                    format!("{path}.sasl.oauthBearer.clientId"),
                    &o.client_id,
                    "must not be empty",
                );
            }
            check_secret_ref(
                &format!("{path}.sasl.oauthBearer.clientSecret"),
                &o.client_secret.secret_name,
                &[("key", &o.client_secret.key)],
                errs,
            );
            if let Some(ca) = &o.ca {
                check_secret_ref(
                    &format!("{path}.sasl.oauthBearer.ca"),
                    &ca.secret_name,
                    &[("key", &ca.key)],
                    errs,
                );
            }
            for (k, v) in &o.extensions {
                // librdkafka joins them as k=v,k=v.
                if k.is_empty() || k.contains([',', '=']) || v.contains(',') {
                    errs.push(
                        format!("{path}.sasl.oauthBearer.extensions[{k:?}]"),
                        k,
                        "extension names must be non-empty without ',' or '=', values without ','",
                    );
                }
            }
        }
        (SaslMechanism::OAuthBearer, _, _) => errs.push(
            format!("{path}.sasl.oauthBearer"),
            "absent",
            "mechanism OAUTHBEARER needs sasl.oauthBearer and no sasl.credentials",
        ),
        (_, Some(cr), None) => check_secret_ref(
            &format!("{path}.sasl.credentials"),
            &cr.secret_name,
            &[
                ("usernameKey", &cr.username_key),
                ("passwordKey", &cr.password_key),
            ],
            errs,
        ),
        (_, _, _) => errs.push(
            format!("{path}.sasl.credentials"),
            "absent",
            format!(
                "mechanism {} needs sasl.credentials and no sasl.oauthBearer",
                mech.as_str()
            ),
        ),
    }
}

/// `http://` to localhost, 127.0.0.1 or [::1] (with an optional port and path).
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && !h.ends_with(':') && port.parse::<u16>().is_ok() => h,
        _ => authority,
    };
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

fn check_secret_ref(path: &str, name: &str, keys: &[(&str, &str)], errs: &mut ValidationErrors) {
    // Secret names are DNS-1123 subdomains; they also become directory names in the worker.
    let name_ok = !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns1123_label);
    if !name_ok {
        errs.push(
            format!("{path}.secretName"),
            name,
            "must be a DNS-1123 subdomain (a Secret name)",
        );
    }
    for (field, key) in keys {
        let key_ok = !key.is_empty()
            && key.len() <= 253
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
            && *key != "."
            && *key != "..";
        if !key_ok {
            errs.push(
                format!("{path}.{field}"),
                key,
                "must be a Secret key: alphanumerics, '-', '_' or '.'",
            );
        }
    }
}

/// Kafka's legal topic name characters.
fn is_legal_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Validate a MirrorFlow spec; every problem is reported, each naming its field.
pub fn validate_flow(spec: &MirrorFlowSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    validate_cluster("spec.source", &spec.source, &mut errs);
    validate_cluster("spec.target", &spec.target, &mut errs);
    if spec.source.alias == spec.target.alias {
        errs.push(
            "spec.target.alias",
            &spec.target.alias,
            "must differ from spec.source.alias (aliases name the clusters in topic names and internal topics)",
        );
    }
    validate_topic_patterns(spec, &mut errs);
    validate_replication_factors(spec, &mut errs);
    validate_start(spec, &mut errs);
    validate_topic_handling(spec, &mut errs);
    validate_workers(spec, &mut errs);
    if let Some(reset) = &spec.reset {
        validate_reset(reset, &mut errs);
    }
    errs.into_result()
}

/// `spec.topics` and `spec.topicConfigs`: at least one pattern, each a regex.
fn validate_topic_patterns(spec: &MirrorFlowSpec, errs: &mut ValidationErrors) {
    if spec.topics.include.is_empty() {
        errs.push(
            "spec.topics.include",
            "[]",
            "must list at least one pattern (use \".*\" for all topics)",
        );
    }
    compile_patterns("spec.topics.include", &spec.topics.include, errs);
    compile_patterns("spec.topics.exclude", &spec.topics.exclude, errs);
    compile_patterns(
        "spec.topicConfigs.exclude",
        &spec.topic_configs.exclude,
        errs,
    );
}

/// `spec.source.startFrom`: a source of positions, with a legal topic name; none on the target.
fn validate_start(spec: &MirrorFlowSpec, errs: &mut ValidationErrors) {
    if spec.target.start_from.is_some() {
        errs.push(
            "spec.target.startFrom",
            "set",
            "is not used: positions are taken on the source; set spec.source.startFrom",
        );
    }
    let Some(start) = &spec.source.start_from else {
        return;
    };
    match (&start.mirror_maker2, &start.after_failover) {
        (None, None) => errs.push(
            "spec.source.startFrom",
            "{}",
            "names where positions come from: set exactly one of mirrorMaker2, afterFailover",
        ),
        (Some(_), Some(a)) => errs.push(
            "spec.source.startFrom.afterFailover",
            &a.flow,
            "is set beside mirrorMaker2: set exactly one of them",
        ),
        (Some(mm2), None) => {
            if let Some(t) = mm2.offsets_topic.as_deref().filter(|t| !is_legal_topic(t)) {
                errs.push(
                    "spec.source.startFrom.mirrorMaker2.offsetsTopic",
                    t,
                    "must be a Kafka topic name (1-249 of letters, digits, '.', '_', '-')",
                );
            }
        }
        (None, Some(a)) => {
            if a.flow_ref().is_none() {
                errs.push(
                    "spec.source.startFrom.afterFailover.flow",
                    &a.flow,
                    "must name the failed-over flow as NAMESPACE/NAME",
                );
            }
            if a.id.is_empty() {
                errs.push(
                    "spec.source.startFrom.afterFailover.id",
                    "\"\"",
                    "must be the failover's spec.failover.id",
                );
            }
        }
    }
}

/// Replication factors: none on the source (nothing is created there), 1.. elsewhere.
fn validate_replication_factors(spec: &MirrorFlowSpec, errs: &mut ValidationErrors) {
    if let Some(rf) = spec.source.replication_factor {
        errs.push(
            "spec.source.replicationFactor",
            rf,
            "is not used: mirrorflow creates no topics on the source; set spec.target.replicationFactor (target topics) or spec.internalTopics.replicationFactor",
        );
    }
    for (field, rf) in [
        (
            "spec.target.replicationFactor",
            spec.target.replication_factor,
        ),
        (
            "spec.internalTopics.replicationFactor",
            spec.internal_topics.replication_factor,
        ),
    ] {
        if let Some(rf) = rf.filter(|rf| !(1..=i32::from(i16::MAX)).contains(rf)) {
            errs.push(
                field,
                rf,
                "must be at least 1 (leave it unset for the brokers' default.replication.factor)",
            );
        }
    }
}

/// How topics are found again, named on the target, and their offsets synced.
fn validate_topic_handling(spec: &MirrorFlowSpec, errs: &mut ValidationErrors) {
    let r = spec.topics.refresh_interval_seconds;
    if !(1..=3600).contains(&r) {
        errs.push(
            "spec.topics.refreshIntervalSeconds",
            r,
            "must be between 1 and 3600",
        );
    }
    // Checked under Identity too: heartbeats topics are prefixed there as well (MM2).
    let s = &spec.replication_policy.separator;
    if s.is_empty()
        || s.len() > 8
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        errs.push(
            "spec.replicationPolicy.separator",
            s,
            "must be 1-8 characters legal in topic names (letters, digits, '.', '_', '-')",
        );
    }
    if spec.offset_syncs.lag_max < 1 {
        errs.push(
            "spec.offsetSyncs.lagMax",
            spec.offset_syncs.lag_max,
            "must be at least 1",
        );
    }
}

/// What the workers run with: how many, their window, heartbeats and image.
fn validate_workers(spec: &MirrorFlowSpec, errs: &mut ValidationErrors) {
    if !(1..=1000).contains(&spec.workers.replicas) {
        errs.push(
            "spec.workers.replicas",
            spec.workers.replicas,
            "must be between 1 and 1000",
        );
    }
    if !(1..=1024).contains(&spec.workers.in_flight_mib) {
        errs.push(
            "spec.workers.inFlightMiB",
            spec.workers.in_flight_mib,
            "must be between 1 and 1024 (MiB of record data in flight per worker)",
        );
    }
    let h = spec.heartbeats.interval_seconds;
    if !(0..=3600).contains(&h) {
        errs.push(
            "spec.heartbeats.intervalSeconds",
            h,
            "must be between 0 (no heartbeats) and 3600",
        );
    }
    if let Some(image) = &spec.workers.image {
        if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
            errs.push(
                "spec.workers.image",
                image,
                "must be a non-empty image reference without spaces",
            );
        }
    }
}

/// `spec.reset`: an id, and legal partitions, each listed once.
fn validate_reset(reset: &super::ResetRequest, errs: &mut ValidationErrors) {
    if reset.id.is_empty() || reset.id.len() > 128 {
        errs.push("spec.reset.id", &reset.id, "must be 1-128 characters");
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, tp) in reset.partitions.iter().enumerate() {
        if !is_legal_topic(&tp.topic) {
            errs.push(
                format!("spec.reset.partitions[{i}].topic"),
                &tp.topic,
                "must be a Kafka topic name (1-249 of letters, digits, '.', '_', '-')",
            );
        }
        if tp.partition < 0 {
            errs.push(
                format!("spec.reset.partitions[{i}].partition"),
                tp.partition,
                "must be >= 0",
            );
        }
        if !seen.insert((&tp.topic, tp.partition)) {
            errs.push(
                format!("spec.reset.partitions[{i}]"),
                format!("{}-{}", tp.topic, tp.partition),
                "is listed twice",
            );
        }
    }
}

/// Validate an OffsetCheckpoint spec.
pub fn validate_checkpoint(spec: &OffsetCheckpointSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let name = &spec.flow_ref.name;
    if name.is_empty() || name.len() > 253 || !name.split('.').all(is_dns1123_label) {
        errs.push(
            "spec.flowRef.name",
            name,
            "must be the name of a MirrorFlow (a DNS-1123 subdomain)",
        );
    }
    if spec.groups.include.is_empty() {
        errs.push(
            "spec.groups.include",
            "[]",
            "must list at least one pattern (use \".*\" for all groups)",
        );
    }
    compile_patterns("spec.groups.include", &spec.groups.include, &mut errs);
    compile_patterns("spec.groups.exclude", &spec.groups.exclude, &mut errs);
    if !(1..=3600).contains(&spec.interval_seconds) {
        errs.push(
            "spec.intervalSeconds",
            spec.interval_seconds,
            "must be between 1 and 3600",
        );
    }
    let r = spec.groups.refresh_interval_seconds;
    if !(1..=3600).contains(&r) {
        errs.push(
            "spec.groups.refreshIntervalSeconds",
            r,
            "must be between 1 and 3600",
        );
    }
    if !spec.sync_group_offsets && !spec.emit_checkpoints_topic {
        errs.push(
            "spec.emitCheckpointsTopic",
            false,
            "at least one of syncGroupOffsets and emitCheckpointsTopic must be true",
        );
    }
    errs.into_result()
}
