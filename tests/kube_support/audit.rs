//! The API server's audit log (JSON lines, one per ServiceAccount request when it completes):
//! who asked for what, so the suite counts a controller's API calls per flow and per minute.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::Deserialize;

/// One request.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub verb: String,
    pub user: User,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub stage_timestamp: Timestamp,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub username: String,
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
    #[serde(default)]
    pub api_group: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: i32,
}

impl AuditEvent {
    /// The token's id (`authentication.kubernetes.io/credential-id`): tells two processes
    /// of one ServiceAccount apart.
    pub fn credential(&self) -> Option<&str> {
        self.user
            .extra
            .get("authentication.kubernetes.io/credential-id")
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    pub fn resource(&self) -> String {
        let o = self.object_ref.clone().unwrap_or_default();
        match o.subresource {
            Some(s) => format!("{}/{s}", o.resource),
            None => o.resource,
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object_ref
            .as_ref()
            .and_then(|o| o.namespace.as_deref())
    }

    pub fn is_watch(&self) -> bool {
        self.verb == "watch"
    }

    pub fn is_lease(&self) -> bool {
        self.object_ref
            .as_ref()
            .is_some_and(|o| o.resource == "leases")
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// Whether RBAC refused it (not an admission webhook or policy).
    pub fn forbidden_by_rbac(&self) -> bool {
        self.annotations
            .get("authorization.k8s.io/decision")
            .map(String::as_str)
            == Some("forbid")
    }

    pub fn code(&self) -> i32 {
        self.response_status.as_ref().map(|s| s.code).unwrap_or(0)
    }

    /// `verb resource ns/name` for messages.
    pub fn describe(&self) -> String {
        let o = self.object_ref.clone().unwrap_or_default();
        format!(
            "{} {} {}/{} -> {}",
            self.verb,
            self.resource(),
            o.namespace.unwrap_or_default(),
            o.name.unwrap_or_default(),
            self.code()
        )
    }
}

/// The audit log file.
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Every event so far (a line being written is skipped).
    pub fn events(&self) -> Vec<AuditEvent> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<AuditEvent>(l).ok())
            .collect()
    }

    /// Events of `user` completed in `[from, to)`.
    pub fn of_user(&self, user: &str, from: Timestamp, to: Timestamp) -> Vec<AuditEvent> {
        self.events()
            .into_iter()
            .filter(|e| {
                e.user.username == user && e.stage_timestamp >= from && e.stage_timestamp < to
            })
            .collect()
    }
}
