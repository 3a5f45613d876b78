//! Pure decisions over snapshots: no I/O, no clocks read, no actors. Each module takes data and
//! returns data; the actors and adapters carry the results out.
//!
//! - [`amifamily`]: per-family facts (default block devices, feature flags, SSM alias
//!   parameters) and the choice of AMIs among `DescribeImages` candidates.
//! - [`interruption`]: parsing interruption queue messages and planning what to do about them.
//! - [`userdata`]: the user data of every AMI family, merged with the user's.

pub mod amifamily;
pub mod interruption;
pub mod userdata;
