//! API types: the `MirrorFlow` and `OffsetCheckpoint` custom resources, their defaults,
//! validation shared by controller and worker, and loading from YAML files.

pub mod audit;
pub mod checkpoint;
pub mod defaults;
pub mod failover;
pub mod flow;
pub mod load;
pub mod status;
pub mod validate;

#[cfg(test)]
mod tests;

pub use audit::{Audit, AuditCounts, AuditReport};
pub use checkpoint::*;
pub use failover::{
    Diverged, FailbackPartition, FailbackReport, FailoverGroup, FailoverMode, FailoverPartition,
    FailoverPhase, FailoverReport, FailoverRequest, FAILBACK_PARTITIONS_SHOWN,
};
pub use flow::*;
pub use load::{load_flow_file, parse_flow_file, FlowFile, LoadError};
pub use validate::{validate_checkpoint, validate_flow, FieldError, ValidationErrors};

use kube::CustomResourceExt;

/// API group of both resources.
pub const GROUP: &str = "mirrorflow.io";
/// API version of both resources.
pub const VERSION: &str = "v1alpha1";
/// Where the controller mounts each referenced Secret (`<dir>/<secretName>/<key>`), and where
/// workers and the CLI look for them by default.
pub const SECRETS_DIR: &str = "/var/run/mirrorflow/secrets";

/// Longest MirrorFlow name: its StatefulSet `<name>-worker` must stay within 52 characters
/// (room for the pods' `controller-revision-hash` label).
pub const MAX_FLOW_NAME_LEN: usize = 52 - "-worker".len();

/// The CRDs as one multi-document YAML string (what `mirrorflow crdgen` prints and `crds/` holds).
pub fn crds_yaml() -> String {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("CRD serializes"));
    }
    out
}

/// Regular expressions are checked by the API server (CEL's RE2, close to Rust's `regex`);
/// the controller and workers still compile them with `regex` (InvalidSpec).
const REGEX_RULE: &str = "''.matches(self) || !''.matches(self)";
const REGEX_MESSAGE: &str = "must be a valid regular expression (matched against whole names)";
/// A pattern's maximum length and a list's maximum size: bounds that keep the CEL rules'
/// cost within the API server's budget.
const MAX_PATTERN_LEN: u64 = 1024;
const MAX_PATTERNS: u64 = 256;

/// The CRDs: what the types derive, plus what a derive cannot say (the API server allows
/// nothing on `metadata` but restrictions of `name`, not even a description): the MirrorFlow's name must
/// form its children's names (a DNS-1035 label, like the Service `<name>-worker`, at most
/// [`MAX_FLOW_NAME_LEN`]), and every include/exclude pattern must be a regular expression.
pub fn crds(
) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    let name_rule = serde_json::json!({
        "type": "object",
        "properties": {"name": {
            "type": "string",
            "description": "The flow's name: a DNS-1035 label of at most 45 characters (its StatefulSet, Service, ServiceAccount, Role and PodDisruptionBudget are <name>-worker).",
            "maxLength": MAX_FLOW_NAME_LEN,
            "x-kubernetes-validations": [{
                "rule": "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "message": "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, ending with a letter or digit): the flow's Service is named <name>-worker",
            }],
        }},
    });
    let mut flow = serde_json::to_value(MirrorFlow::crd()).expect("CRD serializes");
    let mut checkpoint = serde_json::to_value(OffsetCheckpoint::crd()).expect("CRD serializes");
    {
        let root = &mut flow["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        root["properties"]["metadata"] = name_rule;
        for list in ["include", "exclude"] {
            pattern_list(
                &mut root["properties"]["spec"]["properties"]["topics"]["properties"][list],
            );
        }
    }
    {
        let root = &mut checkpoint["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        for list in ["include", "exclude"] {
            pattern_list(
                &mut root["properties"]["spec"]["properties"]["groups"]["properties"][list],
            );
        }
    }
    [flow, checkpoint]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("CRD deserializes"))
        .collect()
}

fn pattern_list(list: &mut serde_json::Value) {
    assert!(list.is_object(), "a pattern list in the schema");
    list["maxItems"] = MAX_PATTERNS.into();
    let items = &mut list["items"];
    items["maxLength"] = MAX_PATTERN_LEN.into();
    items["x-kubernetes-validations"] =
        serde_json::json!([{"rule": REGEX_RULE, "message": REGEX_MESSAGE}]);
}
