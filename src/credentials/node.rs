//! The node's own registry logins, found where kubelet's default docker config provider
//! looks: `config.json` in the kubelet root dir, the working dir, `$HOME/.docker` and
//! `/.docker`, else `.dockercfg` in the root dir, the working dir, `$HOME` and `/`. The
//! first file that reads wins; what was read is kept for five minutes (kubelet's
//! `CachingDockerConfigProvider`), so a changed file counts within that time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::docker_config::LoginSource;
use super::docker_config::{self, DockerConfig, DockerConfigError, MAX_CONFIG_BYTES};
use super::keyring::Keyring;
use crate::locks::Locked as _;

/// How long the files' content is trusted before they are read again.
pub(crate) const NODE_CONFIG_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// The node's keyring, read lazily and cached.
#[derive(Debug)]
pub(crate) struct NodeKeyring {
    json_dirs: Vec<PathBuf>,
    dockercfg_dirs: Vec<PathBuf>,
    lifetime: Duration,
    cached: Mutex<Option<(Instant, Arc<Keyring>)>>,
}

impl NodeKeyring {
    /// kubelet's search path for `root_dir` (`--root-dir`), this process's working dir
    /// and `$HOME`.
    pub(crate) fn new(root_dir: &Path) -> NodeKeyring {
        let cwd = std::env::current_dir().ok();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut json_dirs = vec![root_dir.to_path_buf()];
        let mut dockercfg_dirs = vec![root_dir.to_path_buf()];
        json_dirs.extend(cwd.clone());
        dockercfg_dirs.extend(cwd);
        json_dirs.extend(home.as_ref().map(|h| h.join(".docker")));
        dockercfg_dirs.extend(home);
        json_dirs.push(PathBuf::from("/.docker"));
        dockercfg_dirs.push(PathBuf::from("/"));
        NodeKeyring::with_dirs(json_dirs, dockercfg_dirs, NODE_CONFIG_LIFETIME)
    }

    /// A keyring reading only these dirs (tests).
    pub(crate) fn with_dirs(
        json_dirs: Vec<PathBuf>,
        dockercfg_dirs: Vec<PathBuf>,
        lifetime: Duration,
    ) -> NodeKeyring {
        NodeKeyring {
            json_dirs,
            dockercfg_dirs,
            lifetime,
            cached: Mutex::new(None),
        }
    }

    /// No files at all (no node credentials).
    pub(crate) fn empty() -> NodeKeyring {
        NodeKeyring::with_dirs(Vec::new(), Vec::new(), NODE_CONFIG_LIFETIME)
    }

    /// The keyring as the files were at most `lifetime` ago.
    pub(crate) fn keyring(&self) -> Arc<Keyring> {
        if let Some((at, k)) = self.cached.locked().as_ref()
            && at.elapsed() < self.lifetime
        {
            return k.clone();
        }
        let mut keyring = Keyring::default();
        if let Some(cfg) = self.read() {
            keyring.add(&cfg, &LoginSource::Node);
        }
        let keyring = Arc::new(keyring);
        *self.cached.locked() = Some((Instant::now(), keyring.clone()));
        keyring
    }

    /// The first `config.json` that reads, else the first `.dockercfg`.
    fn read(&self) -> Option<DockerConfig> {
        let json = self.json_dirs.iter().map(|d| d.join("config.json"));
        let old = self.dockercfg_dirs.iter().map(|d| d.join(".dockercfg"));
        for (path, parse) in json
            .map(|p| (p, docker_config::parse_config_json as Parser))
            .chain(old.map(|p| (p, docker_config::parse_dockercfg as Parser)))
        {
            match read_file(&path, parse) {
                Ok(Some(cfg)) => {
                    info!(path = %path.display(), registries = cfg.len(), "read the node's registry credentials");
                    return Some(cfg);
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "skipping an unreadable docker config");
                }
            }
        }
        debug!("no docker config on the node: images are pulled with pod credentials only");
        None
    }
}

type Parser = fn(&[u8], &str) -> Result<DockerConfig, DockerConfigError>;

/// Why a node docker config file was skipped (logged, never fatal).
#[derive(Debug, thiserror::Error)]
enum NodeConfigError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Config(#[from] DockerConfigError),
}

/// `Ok(None)` when the file is not there.
fn read_file(path: &Path, parse: Parser) -> Result<Option<DockerConfig>, NodeConfigError> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_CONFIG_BYTES).unwrap_or(u64::MAX) + 1;
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(Some(parse(&bytes, &path.display().to_string())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(k: &Keyring, repo: &str) -> Vec<String> {
        k.lookup(repo)
            .into_iter()
            .map(|l| l.credential.username)
            .collect()
    }

    #[test]
    fn config_json_is_searched_in_order_before_dockercfg() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let json =
            |u: &str| format!(r#"{{"auths":{{"reg.io":{{"username":"{u}","password":"p"}}}}}}"#);
        std::fs::write(b.join("config.json"), json("from-b")).unwrap();
        std::fs::write(
            a.join(".dockercfg"),
            r#"{"reg.io":{"username":"old","password":"p"}}"#,
        )
        .unwrap();
        let node =
            NodeKeyring::with_dirs(vec![a.clone(), b.clone()], vec![a.clone()], Duration::ZERO);
        assert_eq!(users(&node.keyring(), "reg.io/x"), ["from-b"]);

        // A broken file is skipped, the next one is read.
        std::fs::write(a.join("config.json"), "{not json").unwrap();
        assert_eq!(users(&node.keyring(), "reg.io/x"), ["from-b"]);
        std::fs::write(a.join("config.json"), json("from-a")).unwrap();
        assert_eq!(users(&node.keyring(), "reg.io/x"), ["from-a"]);

        // No config.json anywhere: the .dockercfg is read.
        std::fs::remove_file(a.join("config.json")).unwrap();
        std::fs::remove_file(b.join("config.json")).unwrap();
        assert_eq!(users(&node.keyring(), "reg.io/x"), ["old"]);
    }

    #[test]
    fn what_was_read_is_kept_for_the_lifetime() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().to_path_buf();
        let node = NodeKeyring::with_dirs(vec![dir.clone()], vec![], Duration::from_secs(3600));
        assert!(node.keyring().is_empty());
        std::fs::write(
            dir.join("config.json"),
            r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#,
        )
        .unwrap();
        assert!(node.keyring().is_empty(), "cached for the lifetime");
        let fresh = NodeKeyring::with_dirs(vec![dir], vec![], Duration::from_secs(3600));
        assert_eq!(users(&fresh.keyring(), "reg.io/x"), ["u"]);
    }

    #[test]
    fn kubelets_search_path_starts_at_the_root_dir() {
        let node = NodeKeyring::new(Path::new("/var/lib/kubelet"));
        assert_eq!(node.json_dirs[0], Path::new("/var/lib/kubelet"));
        assert_eq!(node.json_dirs.last().unwrap(), Path::new("/.docker"));
        assert_eq!(node.dockercfg_dirs.last().unwrap(), Path::new("/"));
    }
}
