//! The rules of `NodeClaim`s (reference section 1.2).

use super::common;
use super::path::{FieldPath, Violations};
use crate::apis::labels::LabelUse;
use crate::apis::nodeclaim::NodeClaimSpec;
use crate::apis::requirements::Requirement;

/// Every rule violation of a `NodeClaim` spec.
pub fn check(spec: &NodeClaimSpec, out: &mut Violations) {
    let path = FieldPath::root().child("spec");
    let requirements: Vec<Requirement> = spec
        .requirements
        .iter()
        .map(super::super::requirements::NodeClaimRequirement::as_requirement)
        .collect();
    common::requirements(
        &requirements,
        LabelUse::NodeClaimRequirement,
        &path.child("requirements"),
        out,
    );
    common::node_class_ref(&spec.node_class_ref, &path.child("nodeClassRef"), out);
    common::taints(
        &[
            (&spec.taints, path.child("taints")),
            (&spec.startup_taints, path.child("startupTaints")),
        ],
        out,
    );
}
