//! Stamps the build's commit into `KARPENTER_COMMIT` (read by `karpenter::logging::COMMIT`),
//! the `commit` field of every log line: Karpenter's `vcs.revision` cut to 7 characters, with
//! `-dirty` when tracked files differ from HEAD.
//!
//! - `KARPENTER_COMMIT` set at build time wins (a Docker context has no `.git`:
//!   `--build-arg`/`ENV KARPENTER_COMMIT=$(git rev-parse --short=7 HEAD)`).
//! - Release builds (the image, `cargo build --release`) read git, and re-run when HEAD, the
//!   branch's ref, `packed-refs` or the index change.
//! - Debug builds carry no commit, as Go binaries built by `go run`/`go test` carry no
//!   `vcs.revision`: the daemon then writes Karpenter's `Unable to read vcs.revision from
//!   binary` line. This keeps incremental builds cheap: re-running a build script rebuilds its
//!   whole package, and this package is the largest of the workspace, so a debug build must not
//!   re-run it on every commit. The script runs once and never again unless it or the variable
//!   changes.

use std::path::PathBuf;
use std::process::Command;

/// Characters of the revision kept, as Karpenter's `env.GetRevision` keeps.
const SHORT_REVISION: usize = 7;

fn git(args: &[&str]) -> Option<String> {
    // No optional locks: `git status` must not rewrite the index this script watches.
    let output = Command::new("git")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout)
        .ok()
        .map(|text| text.trim().to_owned())
}

/// A path inside the git directory (worktrees have their own HEAD and index but share refs).
fn git_path(name: &str) -> Option<PathBuf> {
    git(&["rev-parse", "--git-path", name]).map(PathBuf::from)
}

/// The checkout's revision, `None` without git or a repository.
fn revision() -> Option<String> {
    let mut watched = vec![
        "HEAD".to_owned(),
        "index".to_owned(),
        "packed-refs".to_owned(),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in &watched {
        if let Some(path) = git_path(name)
            && path.exists()
        {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let revision = git(&["rev-parse", "HEAD"])?;
    let short: String = revision.chars().take(SHORT_REVISION).collect();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    Some(if dirty {
        format!("{short}-dirty")
    } else {
        short
    })
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KARPENTER_COMMIT");
    let given = std::env::var("KARPENTER_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let commit = given.or_else(|| if release { revision() } else { None });
    if let Some(commit) = commit {
        println!("cargo:rustc-env=KARPENTER_COMMIT={commit}");
    }
}
