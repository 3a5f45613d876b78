//! Pure decisions over snapshots: no I/O, no clocks read, no actors. Each module takes data and
//! returns data; the actors and adapters carry the results out.
//!
//! - [`resources`]: quantities and resource lists as integers, pod requests.
//! - [`requirements`]: Karpenter's requirements algebra over label keys.
//! - [`instance_type`]: instance types, offerings, prices, truncation with `minValues`.
//! - [`interner`]: one shared allocation per distinct pod shape or label map.
//! - [`scheduling`]: the scheduler that turns pending pods into a plan of NodeClaims.
//! - [`amifamily`]: per-family facts (default block devices, feature flags, SSM alias
//!   parameters) and the choice of AMIs among `DescribeImages` candidates.
//! - [`userdata`]: the user data of every AMI family, merged with the user's.
//! - [`interruption`]: parsing interruption queue messages and planning what to do about them.
//! - [`nodeclass_hash`]: the `EC2NodeClass` static-field hash that drift detection compares.
//! - [`limits`]: what a NodePool runs (`status.resources`) and what is left of its limits,
//!   in-flight launches included for the Provisioner.
//! - [`nodepool_hash`]: the NodePool template hash static drift compares.
//! - [`pods`]: whether a pod is provisionable (Karpenter's `IsProvisionable`) and whether a
//!   pod change is a pod event on its node (`nodeclaim.podevents`).
//! - [`consolidatable`]: whether a NodeClaim is consolidatable yet (`consolidateAfter` since its
//!   last pod event or initialization) and the pod event dedupe.
//! - [`tags`]: the tags of launched instances (the class's and the ones Karpenter owns) and of
//!   registered ones (`Name`, NodeClaim, EKS cluster).
//! - [`repair`]: Node Repair: the cloud provider's repair policies, when an unhealthy node is
//!   due for replacement, and the 20% pool health rule.
//! - [`version`]: the supported Kubernetes versions.
//! - [`drift`]: whether a launched NodeClaim drifted from its NodePool (template hash,
//!   requirements, instance type gone), before the cloud provider's own drift checks.
//! - [`disruption`]: voluntary disruption (consolidation, emptiness, drift, budgets): which
//!   nodes to remove or replace in one round, and the validation of that decision.

pub mod amifamily;
pub mod consolidatable;
pub mod disruption;
pub mod drift;
pub mod instance_type;
pub mod interner;
pub mod interruption;
pub mod limits;
pub mod nodeclass_hash;
pub mod nodepool_hash;
pub mod pods;
pub mod repair;
pub mod requirements;
pub mod resources;
pub mod scheduling;
pub mod tags;
pub mod userdata;
pub mod version;
