//! A real image registry for pull tests: Debian's `docker-registry` (distribution 2.8)
//! on loopback, with TLS from a CA of its own and, if asked, htpasswd logins. The test
//! bed's containerd trusts the CA through its registry hosts dir (`certs.d`), and the
//! registry is seeded by pushing the local test image with the bed's own `ctr`, from a
//! namespace of its own so the CRI's namespace still has to pull it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{BUSYBOX_IMAGE, Testbed, free_port, test_images_dir};

/// The registry binary `scripts/install-test-deps.sh` installs.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";
/// Where the seed image is imported before it is pushed (never the CRI's `k8s.io`).
const SEED_NAMESPACE: &str = "oxlet-seed";

/// One login the registry accepts.
#[derive(Debug, Clone)]
pub struct Login {
    pub username: String,
    pub password: String,
}

/// A running registry; killed and its storage removed when dropped.
pub struct Registry {
    child: Child,
    dir: PathBuf,
    host: String,
    login: Option<Login>,
}

impl Registry {
    /// Starts a registry (`login`: htpasswd auth, else anonymous pulls and pushes) that
    /// `bed`'s containerd trusts, seeded with the busybox test image as `repositories`.
    pub async fn start(bed: &Testbed, login: Option<Login>, repositories: &[&str]) -> Registry {
        // The tests fail, never skip, without it.
        assert!(
            Path::new(REGISTRY_BINARY).exists(),
            "{REGISTRY_BINARY} is missing: run scripts/install-test-deps.sh"
        );
        let dir = tempfile::Builder::new()
            .prefix("oxlet-registry-")
            .tempdir_in("/tmp")
            .expect("the registry's dir")
            .keep();
        let (cert, key) = self_signed_cert();
        fs::write(dir.join("cert.pem"), cert).unwrap();
        fs::write(dir.join("key.pem"), key).unwrap();
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n\
             http:\n  addr: {host}\n  tls:\n    certificate: {dir}/cert.pem\n    key: {dir}/key.pem\n",
            data = dir.join("data").display(),
            dir = dir.display(),
        );
        if let Some(l) = &login {
            // Cost 4 (bcrypt's least): the registry checks the hash on every request.
            let hash = bcrypt::hash(&l.password, 4).unwrap();
            fs::write(dir.join("htpasswd"), format!("{}:{hash}\n", l.username)).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: oxlet-test\n    path: {}/htpasswd\n",
                dir.display()
            ));
        }
        fs::write(dir.join("config.yml"), config).unwrap();
        let log = fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {REGISTRY_BINARY} (scripts/install-test-deps.sh installs it): {e}")
            });
        let reg = Registry {
            child,
            dir,
            host,
            login,
        };
        reg.wait_listening();
        reg.trust_in(bed);
        for repo in repositories {
            reg.push(bed, repo).await;
        }
        reg
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `<host>/<repository>`.
    pub fn image(&self, repository: &str) -> String {
        format!("{}/{repository}", self.host)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    fn wait_listening(&self) {
        let t = Instant::now();
        while std::net::TcpStream::connect(&self.host).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the registry does not listen on {}:\n{}",
                self.host,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `certs.d/<host>/hosts.toml`: containerd verifies the registry with its CA.
    fn trust_in(&self, bed: &Testbed) {
        let dir = bed.layout().certs_dir.join(&self.host);
        fs::create_dir_all(&dir).unwrap();
        let ca = self.dir.join("cert.pem");
        fs::write(
            dir.join("hosts.toml"),
            format!(
                "server = \"https://{h}\"\n\n[host.\"https://{h}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n  ca = \"{ca}\"\n",
                h = self.host,
                ca = ca.display()
            ),
        )
        .unwrap();
    }

    /// Pushes the busybox test image as `<host>/<repository>` with the bed's `ctr`.
    async fn push(&self, bed: &Testbed, repository: &str) {
        let archive = test_images_dir().join("oxlet-busybox.tar");
        let target = self.image(repository);
        let mut steps: Vec<Vec<String>> = vec![
            vec![
                "images".into(),
                "import".into(),
                archive.display().to_string(),
            ],
            vec![
                "images".into(),
                "tag".into(),
                "--force".into(),
                BUSYBOX_IMAGE.into(),
                target.clone(),
            ],
        ];
        // The hosts file the CRI pulls by: without it, ctr takes a bare 127.0.0.1 for a
        // plain-HTTP registry.
        let hosts_dir = bed.layout().certs_dir.display().to_string();
        let mut push = vec![
            "images".into(),
            "push".into(),
            format!("--hosts-dir={hosts_dir}"),
        ];
        if let Some(l) = &self.login {
            push.push(format!("--user={}:{}", l.username, l.password));
        }
        push.push(target);
        steps.push(push);
        for args in steps {
            let out = tokio::process::Command::new(bed.ctr())
                .arg(format!("--address={}", bed.socket().display()))
                .arg(format!("--namespace={SEED_NAMESPACE}"))
                .args(&args)
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "ctr {}: {}{}\nregistry log:\n{}",
                args[..2].join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A certificate for 127.0.0.1 and its key, self-signed (the test's CA is the cert).
fn self_signed_cert() -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    (c.cert.pem(), c.signing_key.serialize_pem())
}

/// A docker `config.json` holding `login` for `host`.
pub fn docker_config_json(host: &str, login: &Login) -> String {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", login.username, login.password));
    format!(r#"{{"auths":{{"{host}":{{"auth":"{auth}"}}}}}}"#)
}

/// A static pod running `image` with pull policy `policy` in its container `main`.
/// (A static pod may not name pull secrets: the file source refuses it, as the
/// apiserver refuses its mirror.)
pub fn pull_pod(name: &str, image: &str, policy: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
         image: {image}\n    imagePullPolicy: {policy}\n    command: [\"sleep\", \"3600\"]\n"
    )
}
