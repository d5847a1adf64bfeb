//! `scripts/install-deps.sh` run for real against a machine of the test's own: a
//! PATH of stub `dpkg-query`, `apt-get` and `systemctl` that record every call and
//! play the packages' part (apt "installs" a package's binaries; Debian's containerd
//! package starts its service despite the policy), and `OXLET_INSTALL_ROOT` for the
//! files it looks at. The script must refuse Docker's `containerd.io` before changing
//! anything, install only what is missing, use a containerd already on PATH, stop only
//! a service the install started, and never disable one.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fake machine: `bin` (PATH), `root` (OXLET_INSTALL_ROOT), `state` (packages,
/// services and the calls log).
struct Machine {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    root: PathBuf,
    state: PathBuf,
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Machine {
    /// `packages`: what dpkg lists as installed; `binaries`: stubs on PATH;
    /// `active`: services running before the script.
    fn new(packages: &[&str], binaries: &[&str], active: &[&str]) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let (bin, root, state) = (
            dir.path().join("bin"),
            dir.path().join("root"),
            dir.path().join("state"),
        );
        for d in [
            &bin,
            &state,
            &root.join("usr/sbin"),
            &root.join("run/systemd/system"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        // The few real tools the script and the stubs use; nothing else is on PATH.
        for tool in ["chmod", "rm", "mkdir", "cat", "grep"] {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.exists())
                .unwrap();
            std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
        }
        for b in binaries {
            write_exec(&bin.join(b), "#!/bin/sh\nexit 0\n");
        }
        std::fs::write(state.join("packages"), packages.join("\n") + "\n").unwrap();
        for s in active {
            std::fs::write(state.join(s), "active").unwrap();
        }
        let s = state.display();
        let b = bin.display();
        let r = root.display();
        write_exec(&bin.join("id"), "#!/bin/sh\necho 0\n");
        write_exec(
            &bin.join("dpkg-query"),
            &format!(
                "#!/bin/sh\necho \"dpkg-query $*\" >>{s}/calls\n\
                 for p; do :; done\n\
                 grep -qx \"$p\" {s}/packages && printf 'install ok installed' && exit 0\nexit 1\n"
            ),
        );
        // apt-get install: each package's binaries appear; containerd's service starts.
        write_exec(
            &bin.join("apt-get"),
            &format!(
                "#!/bin/sh\necho \"apt-get $*\" >>{s}/calls\n\
                 [ \"$1\" = install ] || exit 0\n\
                 for p; do case $p in\n\
                   containerd) printf '#!/bin/sh\\n' >{b}/containerd; chmod 755 {b}/containerd; echo active >{s}/containerd.service;;\n\
                   runc) printf '#!/bin/sh\\n' >{b}/runc; chmod 755 {b}/runc;;\n\
                   iproute2) printf '#!/bin/sh\\n' >{b}/ip; chmod 755 {b}/ip;;\n\
                   protobuf-compiler) printf '#!/bin/sh\\n' >{b}/protoc; chmod 755 {b}/protoc;;\n\
                   containernetworking-plugins) mkdir -p {r}/usr/lib/cni; printf '#!/bin/sh\\n' >{r}/usr/lib/cni/bridge; chmod 755 {r}/usr/lib/cni/bridge;;\n\
                   busybox-static) echo busybox-static >>{s}/packages;;\n\
                 esac; done\n"
            ),
        );
        write_exec(
            &bin.join("systemctl"),
            &format!(
                "#!/bin/sh\necho \"systemctl $*\" >>{s}/calls\n\
                 case $1 in\n\
                   is-active) for u; do :; done; grep -qx active {s}/$u 2>/dev/null;;\n\
                   stop) echo inactive >{s}/$2;;\n\
                   *) exit 0;;\n\
                 esac\n"
            ),
        );
        Machine {
            _dir: dir,
            bin,
            root,
            state,
        }
    }

    /// Runs the script; (success, stderr, calls made).
    fn run(&self) -> (bool, String, Vec<String>) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-deps.sh");
        let out = Command::new("/bin/bash")
            .arg(script)
            .env_clear()
            .env("PATH", &self.bin)
            .env("OXLET_INSTALL_ROOT", &self.root)
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(self.state.join("calls")).unwrap_or_default();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            calls.lines().map(str::to_string).collect(),
        )
    }

    fn service(&self, unit: &str) -> String {
        std::fs::read_to_string(self.state.join(unit))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

fn changes(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| !c.starts_with("dpkg-query"))
        .collect()
}

#[test]
fn docker_containerd_io_is_refused_before_anything_changes() {
    // Docker's package, with the containerd and runc it ships.
    let m = Machine::new(
        &["containerd.io"],
        &["containerd", "runc"],
        &["containerd.service"],
    );
    let (ok, stderr, calls) = m.run();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("Docker's containerd.io package is installed; nothing was changed"),
        "{stderr}"
    );
    assert!(changes(&calls).is_empty(), "{calls:?}");
    assert!(!m.root.join("usr/sbin/policy-rc.d").exists());
    assert_eq!(m.service("containerd.service"), "active");
}

#[test]
fn a_bare_machine_gets_the_runtime_parts_and_no_service_is_disabled() {
    let m = Machine::new(&[], &[], &[]);
    let (ok, stderr, calls) = m.run();
    assert!(ok, "{stderr}\n{calls:?}");
    let install: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("apt-get install"))
        .collect();
    assert_eq!(
        install,
        [
            "apt-get install -y -q --no-install-recommends containerd runc containernetworking-plugins busybox-static protobuf-compiler iproute2"
        ]
    );
    // Only the runtime: no test tooling.
    assert!(
        !calls
            .iter()
            .any(|c| c.contains("docker-registry") && c.starts_with("apt-get"))
    );
    // The install started containerd's service: it is stopped, never disabled.
    assert!(
        calls
            .iter()
            .any(|c| c == "systemctl stop containerd.service"),
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c.contains("disable")), "{calls:?}");
    assert_eq!(m.service("containerd.service"), "inactive");
    // The policy that kept services from starting is gone again.
    assert!(!m.root.join("usr/sbin/policy-rc.d").exists());
    // A second run finds everything and changes nothing.
    let before = calls.len();
    let (ok, _, calls) = m.run();
    assert!(ok);
    assert!(changes(&calls[before..]).is_empty(), "{calls:?}");
}

#[test]
fn a_containerd_already_running_is_used_and_left_alone() {
    // An upstream containerd and runc on PATH (not Debian's packages), its service running.
    let m = Machine::new(&[], &["containerd", "runc"], &["containerd.service"]);
    let (ok, stderr, calls) = m.run();
    assert!(ok, "{stderr}\n{calls:?}");
    let install: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("apt-get install"))
        .collect();
    assert_eq!(
        install,
        [
            "apt-get install -y -q --no-install-recommends containernetworking-plugins busybox-static protobuf-compiler iproute2"
        ]
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("systemctl stop") || c.contains("disable")),
        "{calls:?}"
    );
    assert_eq!(m.service("containerd.service"), "active");
}
