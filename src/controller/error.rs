//! Reconcile errors and their categories. A category is at once an event reason and the
//! `category` label of the error metric, so dashboards, events and logs use one vocabulary.

/// What kind of problem a reconcile hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    /// The spec (or the name) fails validation; nothing is changed until it is fixed.
    InvalidSpec,
    /// An OffsetCheckpoint's `spec.flowRef` names no MirrorFlow.
    FlowNotFound,
    /// A Kubernetes API call failed (network, RBAC, conflict, admission...).
    KubeApi,
    /// An object could not be serialized.
    Serialization,
    /// The object lacks metadata the API server always sets (namespace, uid).
    MissingMetadata,
}

impl ErrorCategory {
    /// Every category, e.g. to pre-register metric label values.
    pub const ALL: [ErrorCategory; 5] = [
        Self::InvalidSpec,
        Self::FlowNotFound,
        Self::KubeApi,
        Self::Serialization,
        Self::MissingMetadata,
    ];

    /// PascalCase name: the event reason and metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidSpec => "InvalidSpec",
            Self::FlowNotFound => "FlowNotFound",
            Self::KubeApi => "KubeApi",
            Self::Serialization => "Serialization",
            Self::MissingMetadata => "MissingMetadata",
        }
    }
}

/// A reconcile failure; invalid specs and missing flows are not errors (they become
/// conditions), only what a retry may fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {kind} {namespace}/{name}: {source}")]
    Kube {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        // Boxed: kube::Error is large and Results of it travel through every reconcile.
        #[source]
        source: Box<kube::Error>,
    },
    #[error("serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind} {name:?} has no {field}")]
    MissingMetadata {
        kind: &'static str,
        name: String,
        field: &'static str,
    },
}

impl Error {
    /// The category of this error.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Self::Kube { .. } => ErrorCategory::KubeApi,
            Self::Serialize { .. } => ErrorCategory::Serialization,
            Self::MissingMetadata { .. } => ErrorCategory::MissingMetadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_names_are_unique_pascal_case() {
        let names: std::collections::BTreeSet<_> =
            ErrorCategory::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCategory::ALL.len());
        for n in names {
            assert!(
                n.chars().next().unwrap().is_ascii_uppercase()
                    && n.chars().all(|c| c.is_ascii_alphanumeric()),
                "{n}"
            );
        }
    }

    #[test]
    fn errors_map_to_categories() {
        let e = Error::MissingMetadata {
            kind: "MirrorFlow",
            name: "a".into(),
            field: "metadata.namespace",
        };
        assert_eq!(e.category(), ErrorCategory::MissingMetadata);
        assert_eq!(e.to_string(), "MirrorFlow \"a\" has no metadata.namespace");
        let e = Error::Serialize {
            what: "status",
            source: serde_json::from_str::<i32>("x").unwrap_err(),
        };
        assert_eq!(e.category(), ErrorCategory::Serialization);
    }
}
