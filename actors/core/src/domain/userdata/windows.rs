//! Windows 2019/2022: one `<powershell>` block, the user's script first, then
//! `Start-EKSBootstrap.ps1` with the kubelet flags (Karpenter's `windows.go`).
//!
//! Users often wrap their script in `<powershell>` tags themselves; Karpenter nests them, and
//! `EC2Launch` then runs the user's block only, so the node never bootstraps. Here the user's
//! outer tags are unwrapped, anything after their closing tag (`<persist>true</persist>`) goes
//! after ours, and unbalanced or repeated tags are an error.

use super::kubelet::{ResolvedKubelet, powershell_quote};
use super::{UserDataError, UserDataInput};
use crate::apis::ec2nodeclass::AmiFamily;

const OPEN_TAG: &str = "<powershell>";
const CLOSE_TAG: &str = "</powershell>";
/// Where the EKS Windows AMI keeps its bootstrap script.
const BOOTSTRAP_SCRIPT_LINE: &str =
    "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"";

pub(crate) fn render(family: AmiFamily, input: &UserDataInput) -> Result<String, UserDataError> {
    let kubelet = ResolvedKubelet::resolve(family, input)?;
    let (script, trailer) = split_user_script(input.user_data.as_deref().unwrap_or_default())
        .map_err(|reason| UserDataError::InvalidPowerShell { family, reason })?;
    let cluster = &input.cluster;

    let mut out = String::from(OPEN_TAG);
    out.push('\n');
    if !script.is_empty() {
        out.push_str(script);
        out.push('\n');
    }
    out.push_str(BOOTSTRAP_SCRIPT_LINE);
    out.push('\n');
    out.push_str("& $EKSBootstrapScriptFile -EKSClusterName ");
    out.push_str(&powershell_quote(&cluster.name));
    out.push_str(" -APIServerEndpoint ");
    out.push_str(&powershell_quote(&cluster.endpoint));
    if let Some(ca) = &cluster.ca_bundle {
        out.push_str(" -Base64ClusterCA ");
        out.push_str(&powershell_quote(ca));
    }
    out.push_str(" -KubeletExtraArgs ");
    out.push_str(&powershell_quote(&kubelet.extra_args().join(" ")));
    if let Some(dns) = kubelet.first_cluster_dns() {
        out.push_str(" -DNSClusterIP ");
        out.push_str(&powershell_quote(dns));
    }
    out.push('\n');
    out.push_str(CLOSE_TAG);
    if !trailer.is_empty() {
        out.push('\n');
        out.push_str(trailer);
    }
    Ok(out)
}

/// Why a user's Windows script cannot be merged with ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PowerShellError {
    #[error("text before the <powershell> tag would not run")]
    TextBeforeTag,
    #[error("more than one <powershell> block")]
    SeveralBlocks,
    #[error("unbalanced <powershell> tags")]
    Unbalanced,
}

/// The user's script without its own `<powershell>` tags, and what followed the closing tag.
fn split_user_script(text: &str) -> Result<(&str, &str), PowerShellError> {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `text`.
    let lower = text.to_ascii_lowercase();
    let open = lower.find(OPEN_TAG);
    let close = lower.find(CLOSE_TAG);
    match (open, close) {
        (None, None) => Ok((text.trim_end(), "")),
        (Some(open), Some(close)) if open < close => {
            let inner_start = open + OPEN_TAG.len();
            let after = close + CLOSE_TAG.len();
            if !text[..open].trim().is_empty() {
                return Err(PowerShellError::TextBeforeTag);
            }
            if lower[inner_start..].contains(OPEN_TAG) || lower[after..].contains(CLOSE_TAG) {
                return Err(PowerShellError::SeveralBlocks);
            }
            Ok((
                text[inner_start..close]
                    .trim_matches(['\n', '\r'])
                    .trim_end(),
                text[after..].trim(),
            ))
        }
        _ => Err(PowerShellError::Unbalanced),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scripts_pass_through() {
        assert_eq!(
            split_user_script("Write-Host hi\n"),
            Ok(("Write-Host hi", ""))
        );
    }

    #[test]
    fn user_tags_are_unwrapped_and_persist_moves_after_ours() {
        let text = "<PowerShell>\nWrite-Host hi\n</PowerShell>\n<persist>true</persist>\n";
        assert_eq!(
            split_user_script(text),
            Ok(("Write-Host hi", "<persist>true</persist>"))
        );
    }

    #[test]
    fn unbalanced_or_repeated_tags_are_errors() {
        for text in [
            "<powershell>\nx",
            "x\n</powershell>",
            "</powershell><powershell>",
            "<powershell>a</powershell><powershell>b</powershell>",
            "echo\n<powershell>a</powershell>",
        ] {
            assert!(split_user_script(text).is_err(), "{text}");
        }
    }
}
