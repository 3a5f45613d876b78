//! Pure decision logic: no IO, no clocks, no actors. Each module owns one concept; the
//! Provisioner, the disruption controller and the AWS layer call into them.
//!
//! - [`resources`]: quantities and resource lists as integers, pod requests.
//! - [`requirements`]: Karpenter's requirements algebra over label keys.
//! - [`instance_type`]: instance types, offerings, prices, truncation with `minValues`.
//! - [`scheduling`]: the scheduler that turns pending pods into a plan of NodeClaims.

pub mod instance_type;
pub mod requirements;
pub mod resources;
pub mod scheduling;
