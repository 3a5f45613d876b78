//! `karpenter settings`: the effective settings after flags, environment and defaults, checked
//! as `run` will check them. Useful to see what a Helm-rendered environment configures.

use std::io::Write;

use karpenter_config::Settings;

use super::Status;

/// Prints the settings and the result of their validation.
pub fn run(
    settings: &Settings,
    for_run: bool,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    let _ = writeln!(out, "{settings:#?}");
    let checked = if for_run {
        settings.validate_for_run()
    } else {
        settings.validate()
    };
    match checked {
        Ok(()) => Status::Success,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            Status::Problems
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_for_run_without_a_cluster_name_name_the_setting() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run(&Settings::default(), true, &mut out, &mut err);
        assert_eq!(status, Status::Problems);
        assert!(String::from_utf8_lossy(&err).contains("CLUSTER_NAME"));
    }

    #[test]
    fn default_settings_are_valid_for_simulation() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(
            run(&Settings::default(), false, &mut out, &mut err),
            Status::Success
        );
        assert!(String::from_utf8_lossy(&out).contains("batch_idle_duration: 1s"));
    }
}
