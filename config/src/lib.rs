//! Configuration of the karpenter daemon.
//!
//! This crate owns the typed [`Settings`]: one field per Karpenter v1.5 setting, built from
//! command-line flags with env var fallbacks, using Karpenter's env names (`BATCH_MAX_DURATION`),
//! flag names (`--batch-max-duration`) and defaults, so an existing Karpenter deployment's
//! environment configures this daemon unchanged. It also owns the value types those settings
//! parse into ([`FeatureGates`], [`LogLevel`], [`PreferencePolicy`], [`HttpUrl`], Go-syntax
//! durations) and the startup validation ([`Settings::validate_for_run`]). (The simulator's
//! scenario files are the binary's, beside their one user: `karpenter::sim::scenario::file`.)
//!
//! Data flow: the binary flattens [`Settings`] into its `run` and `simulate` subcommands and clap
//! parses it once at startup (flag, else env var, else default; a malformed value stops the binary
//! with a message naming the flag, the env var and the rule). The binary then validates it
//! ([`Settings::validate_for_run`] for `run`, [`Settings::validate`] for `simulate`) and passes it,
//! or the parts each component needs, explicitly down to the actors. Nothing else reads the
//! environment: there is no global settings object. Tests and the simulator build settings with
//! [`Settings::default`] or [`Settings::from_args_and_env`], which never read the process
//! environment.

mod choices;
mod duration;
mod error;
mod feature_gates;
mod settings;
mod url;
mod validation;
mod values;

pub use choices::{LogLevel, PreferencePolicy};
pub use duration::{
    MAX_GO_DURATION, ParseDurationError, ParseDurationErrorKind, format_go_duration,
    parse_go_duration,
};
pub use error::SettingsError;
pub use feature_gates::{FeatureGates, FeatureGatesError};
pub use settings::Settings;
pub use url::{HttpUrl, UrlError};
pub use values::ValueError;
