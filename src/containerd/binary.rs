//! Which containerd binary a managed containerd runs, and which release it is.
//!
//! The release decides the config format: containerd 2.x reads `version = 3`, where the
//! CRI plugin is split into `io.containerd.cri.v1.runtime` and `io.containerd.cri.v1.images`;
//! 1.x reads `version = 2`. The binary's own `--version` decides, never a guess from a
//! socket, because the config must be written before containerd runs.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{ContainerdError, find_in_path};

/// The containerd config format a release reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// `version = 2`: containerd 1.x, one `io.containerd.grpc.v1.cri` plugin section.
    V2,
    /// `version = 3`: containerd 2.x, the CRI plugin split into runtime and images.
    V3,
}

impl ConfigFormat {
    /// The `version` the config file declares.
    pub fn number(self) -> u32 {
        match self {
            ConfigFormat::V2 => 2,
            ConfigFormat::V3 => 3,
        }
    }
}

/// A containerd binary and the release it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdBinary {
    /// The executable.
    pub path: PathBuf,
    /// The release as `containerd --version` prints it (`v2.3.0`, Debian's `1.7.24~ds1`).
    pub version: String,
    /// Major and minor release numbers.
    pub release: (u32, u32),
}

impl ContainerdBinary {
    /// `explicit` (`--containerd-binary`) if given, else the first `containerd` in PATH,
    /// with its release read from `--version`.
    pub async fn locate(explicit: Option<&Path>) -> Result<Self, ContainerdError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => find_in_path("containerd").ok_or(ContainerdError::BinaryNotFound)?,
        };
        Self::at(path).await
    }

    /// The binary at `path`, with its release read from `path --version`.
    pub async fn at(path: PathBuf) -> Result<Self, ContainerdError> {
        let out = tokio::process::Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|source| ContainerdError::Io {
                context: format!("running {} --version", path.display()),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let parsed = parse_version_line(&text).filter(|_| out.status.success());
        let Some((version, release)) = parsed else {
            return Err(ContainerdError::UnknownVersion {
                binary: path,
                output: text.trim().chars().take(200).collect(),
            });
        };
        Ok(ContainerdBinary {
            path,
            version,
            release,
        })
    }

    /// The config format this release reads.
    pub fn config_format(&self) -> ConfigFormat {
        if self.release.0 >= 2 {
            ConfigFormat::V3
        } else {
            ConfigFormat::V2
        }
    }

    /// A tool of the same release (`ctr`, `containerd-shim-runc-v2`): the file beside the
    /// binary when there is one, else the one in PATH, else the bare name.
    pub fn sibling(&self, name: &str) -> PathBuf {
        let beside = self.path.parent().map(|d| d.join(name));
        match beside {
            Some(p) if p.is_file() => p,
            _ => find_in_path(name).unwrap_or_else(|| PathBuf::from(name)),
        }
    }
}

/// The release in `containerd --version`'s line, `containerd <module> <version> <revision>`:
/// the version text and its (major, minor).
fn parse_version_line(line: &str) -> Option<(String, (u32, u32))> {
    let mut words = line.split_whitespace();
    if words.next()? != "containerd" {
        return None;
    }
    let version = words.nth(1)?;
    let mut numbers = version.trim_start_matches('v').split(['.', '-', '+', '~']);
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    Some((version.to_string(), (major, minor)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lines_of_each_release() {
        let cases = [
            (
                "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n",
                "1.6.20~ds1",
                (1, 6),
            ),
            (
                "containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1",
                "1.7.24~ds1",
                (1, 7),
            ),
            (
                "containerd github.com/containerd/containerd/v2 2.1.9+unknown ",
                "2.1.9+unknown",
                (2, 1),
            ),
            (
                "containerd containerd.io v2.3.0 1ad9dc0ee41f8c3d0ad1d4d9d0ea8e2e81ff2f0a",
                "v2.3.0",
                (2, 3),
            ),
        ];
        for (line, version, release) in cases {
            assert_eq!(
                parse_version_line(line),
                Some((version.to_string(), release)),
                "{line}"
            );
        }
        for bad in [
            "",
            "runc version 1.1.5",
            "containerd x",
            "containerd x vX.Y",
        ] {
            assert_eq!(parse_version_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_release_decides_the_format() {
        let b = |release| ContainerdBinary {
            path: PathBuf::from("/usr/bin/containerd"),
            version: String::new(),
            release,
        };
        assert_eq!(b((1, 6)).config_format(), ConfigFormat::V2);
        assert_eq!(b((1, 7)).config_format(), ConfigFormat::V2);
        assert_eq!(b((2, 0)).config_format(), ConfigFormat::V3);
        assert_eq!(b((2, 3)).config_format(), ConfigFormat::V3);
    }

    #[tokio::test]
    async fn a_binary_that_is_not_containerd_is_named() {
        let err = ContainerdBinary::at(PathBuf::from("/bin/true"))
            .await
            .expect_err("true prints nothing");
        let msg = err.to_string();
        assert!(msg.contains("/bin/true"), "{msg}");
        let err = ContainerdBinary::at(PathBuf::from("/nonexistent/containerd"))
            .await
            .expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/containerd"), "{err}");
    }
}
