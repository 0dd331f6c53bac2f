//! API types: the `MirrorFlow` and `OffsetCheckpoint` custom resources, their defaults,
//! validation shared by controller and worker, and loading from YAML files.

pub mod checkpoint;
pub mod defaults;
pub mod flow;
pub mod load;
pub mod validate;

#[cfg(test)]
mod tests;

pub use checkpoint::*;
pub use flow::*;
pub use load::{load_flow_file, parse_flow_file, FlowFile, LoadError};
pub use validate::{validate_checkpoint, validate_flow, FieldError, ValidationErrors};

use kube::CustomResourceExt;

/// API group of both resources.
pub const GROUP: &str = "mirrorflow.io";
/// API version of both resources.
pub const VERSION: &str = "v1alpha1";

/// The CRDs as one multi-document YAML string (what `mirrorflow crdgen` prints and `crds/` holds).
pub fn crds_yaml() -> String {
    let mut out = String::new();
    for crd in [MirrorFlow::crd(), OffsetCheckpoint::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("CRD serializes"));
    }
    out
}
