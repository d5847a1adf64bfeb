//! The files a managed containerd starts from: its TOML config, in the format its release
//! reads, and the CNI conflist of its pod network.
//!
//! The settings are the same in both formats; only where they live differs. In 2.x
//! (`version = 3`) the CRI plugin `io.containerd.grpc.v1.cri` keeps only the streaming
//! server; the runtimes, CNI and SELinux settings moved to `io.containerd.cri.v1.runtime`,
//! and the snapshotter and sandbox image (now `pinned_images.sandbox`) to
//! `io.containerd.cri.v1.images`.

use std::ffi::OsStr;
use std::fs;
use std::io;

use super::{CNI_BIN_DIR, CNI_CONFLIST_NAME, CniSettings, ConfigFormat, ContainerdLayout};

/// What a config is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct ConfigInputs<'a> {
    /// The format the containerd binary reads.
    pub format: ConfigFormat,
    /// The release's (major, minor): 2.1 renamed the CNI `bin_dir` to `bin_dirs`.
    pub release: (u32, u32),
    pub layout: &'a ContainerdLayout,
    pub cni: &'a CniSettings,
    pub sandbox_image: &'a str,
}

/// A TOML basic string: quotes and backslashes escaped.
fn toml_str(s: impl AsRef<OsStr>) -> String {
    let s = s.as_ref().to_string_lossy();
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// containerd's config for `inputs.layout`, in `inputs.format`.
///
/// Snapshotters that cannot work here (btrfs, zfs, devmapper, aufs) are disabled: they only
/// add start-up probing and log noise.
pub fn render_config(inputs: &ConfigInputs<'_>) -> String {
    let mut out = common_part(inputs);
    match inputs.format {
        ConfigFormat::V2 => out.push_str(&cri_v2(inputs)),
        ConfigFormat::V3 => out.push_str(&cri_v3(inputs)),
    }
    out
}

/// What both formats share: the header, root and state, sockets, and the `opt` plugin.
fn common_part(i: &ConfigInputs<'_>) -> String {
    let version = i.format.number();
    format!(
        r#"# Written by oxlet at every start of its managed containerd; edits are lost.
# Pod network: bridge {bridge_comment}, subnet {subnet_comment} (see cni conf_dir).
version = {version}
root = {root}
state = {state}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}
"#,
        bridge_comment = i.cni.bridge.replace('\n', " "),
        subnet_comment = i.cni.subnet.replace('\n', " "),
        root = toml_str(&i.layout.root),
        state = toml_str(&i.layout.state),
        socket = toml_str(&i.layout.socket),
        ttrpc = toml_str(&i.layout.ttrpc_socket),
        opt = toml_str(&i.layout.opt_dir),
    )
}

/// The `containerd` section under `prefix` with the runc runtime; `extra` goes first
/// in it (1.x keeps the snapshotter there).
fn runc_runtime(prefix: &str, extra: &str, i: &ConfigInputs<'_>) -> String {
    format!(
        r#"
  [{prefix}.containerd]
{extra}    # Without this, every CreateContainer fails: "container.Runtime.Name must be set".
    default_runtime_name = "runc"

    [{prefix}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [{prefix}.containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = {runc_root}
        SystemdCgroup = false
"#,
        runc_root = toml_str(&i.layout.runc_root),
    )
}

/// The CNI section, under `prefix`.
fn cni_section(prefix: &str, i: &ConfigInputs<'_>) -> String {
    let bin = if i.release >= (2, 1) {
        format!("bin_dirs = [{}]", toml_str(CNI_BIN_DIR))
    } else {
        format!("bin_dir = {}", toml_str(CNI_BIN_DIR))
    };
    format!(
        "
  [{prefix}.cni]
    {bin}
    conf_dir = {conf_dir}
    max_conf_num = 1
",
        conf_dir = toml_str(&i.layout.cni_conf_dir),
    )
}

/// 1.x: one CRI plugin section holds everything.
fn cri_v2(i: &ConfigInputs<'_>) -> String {
    const CRI: &str = "plugins.\"io.containerd.grpc.v1.cri\"";
    let mut out = format!(
        r#"
[{CRI}]
  sandbox_image = {sandbox_image}
  # No CAP_SYS_RESOURCE here: never try to lower a container's oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
"#,
        sandbox_image = toml_str(i.sandbox_image),
    );
    out.push_str(&cdi_settings(i));
    out.push_str(&runc_runtime(CRI, "    snapshotter = \"overlayfs\"\n", i));
    out.push_str(&cni_section(CRI, i));
    out.push_str(&registry_section(CRI, i));
    out
}

/// CDI on, with the layout's spec dirs: the CRI's `cdi_devices` (DRA claims, device
/// plugins' CDI names) are resolved from them. 1.6 has no CDI: nothing is written.
fn cdi_settings(i: &ConfigInputs<'_>) -> String {
    if i.release < (1, 7) {
        return String::new();
    }
    let dirs: Vec<String> = i.layout.cdi_spec_dirs.iter().map(toml_str).collect();
    format!(
        "  enable_cdi = true\n  cdi_spec_dirs = [{}]\n",
        dirs.join(", ")
    )
}

/// Where the registry hosts files are, under `prefix` (kind writes the same key).
fn registry_section(prefix: &str, i: &ConfigInputs<'_>) -> String {
    format!(
        "
  [{prefix}.registry]
    config_path = {certs}
",
        certs = toml_str(&i.layout.certs_dir),
    )
}

/// 2.x: the streaming server stays in `grpc.v1.cri`; runtime and images have their own.
fn cri_v3(i: &ConfigInputs<'_>) -> String {
    const RUNTIME: &str = "plugins.\"io.containerd.cri.v1.runtime\"";
    const IMAGES: &str = "plugins.\"io.containerd.cri.v1.images\"";
    let mut out = format!(
        r#"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{IMAGES}]
  snapshotter = "overlayfs"

  [{IMAGES}.pinned_images]
    sandbox = {sandbox_image}
{registry}
[{RUNTIME}]
  # No CAP_SYS_RESOURCE here: never try to lower a container's oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
{cdi}"#,
        sandbox_image = toml_str(i.sandbox_image),
        registry = registry_section(IMAGES, i),
        cdi = cdi_settings(i),
    );
    out.push_str(&runc_runtime(RUNTIME, "", i));
    out.push_str(&cni_section(RUNTIME, i));
    // NRI is on by default in 2.x and listens on one machine-wide socket
    // (/var/run/nri/nri.sock): two managed containerds would fight over it.
    out.push_str("\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n");
    out
}

/// The CNI conflist: bridge (gateway on the bridge so the host reaches pod IPs, no
/// masquerade so nothing touches iptables) with host-local IPAM, plus loopback.
pub fn render_cni_conflist(layout: &ContainerdLayout, cni: &CniSettings) -> String {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "oxlet",
        "plugins": [
            {
                "type": "bridge",
                "bridge": cni.bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": cni.subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": layout.cni_data_dir,
                }
            },
            { "type": "loopback" }
        ]
    });
    let mut s = serde_json::to_string_pretty(&conf).expect("a JSON value always serialises");
    s.push('\n');
    s
}

/// Create the layout's dirs and write containerd's config and the CNI conflist.
pub fn write_config(inputs: &ConfigInputs<'_>) -> io::Result<()> {
    let layout = inputs.layout;
    layout.create_dirs()?;
    fs::write(&layout.config, render_config(inputs))?;
    fs::write(
        layout.cni_conf_dir.join(CNI_CONFLIST_NAME),
        render_cni_conflist(layout, inputs.cni),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containerd::DEFAULT_SANDBOX_IMAGE;

    fn render(format: ConfigFormat, release: (u32, u32), base: &str) -> String {
        let layout = ContainerdLayout::new(base);
        render_config(&ConfigInputs {
            format,
            release,
            layout: &layout,
            cni: &CniSettings::default(),
            sandbox_image: DEFAULT_SANDBOX_IMAGE,
        })
    }

    /// What both formats hold, wherever it lives.
    const SHARED: [&str; 15] = [
        "root = \"/var/lib/oxlet/containerd/root\"",
        "state = \"/var/lib/oxlet/containerd/state\"",
        "address = \"/var/lib/oxlet/containerd/containerd.sock\"",
        "address = \"/var/lib/oxlet/containerd/containerd.sock.ttrpc\"",
        "restrict_oom_score_adj = true",
        "default_runtime_name = \"runc\"",
        "runtime_type = \"io.containerd.runc.v2\"",
        "Root = \"/var/lib/oxlet/containerd/runc\"",
        "SystemdCgroup = false",
        "conf_dir = \"/var/lib/oxlet/containerd/cni/net.d\"",
        "stream_server_address = \"127.0.0.1\"",
        "stream_server_port = \"0\"",
        "snapshotter = \"overlayfs\"",
        "\"io.containerd.snapshotter.v1.btrfs\"",
        "path = \"/var/lib/oxlet/containerd/opt\"",
    ];

    #[test]
    fn version_2_keeps_everything_in_the_cri_plugin() {
        let c = render(ConfigFormat::V2, (1, 7), "/var/lib/oxlet/containerd");
        for want in SHARED.iter().chain(&[
            "version = 2",
            "sandbox_image = \"localhost/oxlet/pause:1\"",
            "bin_dir = \"/usr/lib/cni\"",
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd]",
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]",
            "[plugins.\"io.containerd.grpc.v1.cri\".cni]",
            "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = \"/var/lib/oxlet/containerd/certs.d\"",
        ]) {
            assert!(c.contains(want), "config lacks {want:?}:\n{c}");
        }
        assert!(!c.contains("cri.v1"), "{c}");
        assert!(
            c.contains("enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n"),
            "{c}"
        );
        let cri_section = c
            .split("[plugins.\"io.containerd.grpc.v1.cri\"]")
            .nth(1)
            .unwrap();
        assert!(
            cri_section
                .split("\n[")
                .next()
                .unwrap()
                .contains("enable_cdi"),
            "CDI is a setting of the CRI plugin itself:\n{c}"
        );
        // 1.6 knows no CDI.
        let c = render(ConfigFormat::V2, (1, 6), "/x");
        assert!(!c.contains("cdi"), "{c}");
        assert_eq!(
            c.matches(".containerd]").count(),
            1,
            "one containerd section:\n{c}"
        );
    }

    #[test]
    fn version_3_splits_runtime_and_images() {
        let c = render(ConfigFormat::V3, (2, 1), "/var/lib/oxlet/containerd");
        for want in SHARED.iter().chain(&[
            "version = 3",
            "[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n    sandbox = \"localhost/oxlet/pause:1\"",
            "bin_dirs = [\"/usr/lib/cni\"]",
            "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]",
            "[plugins.\"io.containerd.cri.v1.runtime\".cni]",
            "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true",
            "[plugins.\"io.containerd.cri.v1.images\".registry]\n    config_path = \"/var/lib/oxlet/containerd/certs.d\"",
        ]) {
            assert!(c.contains(want), "config lacks {want:?}:\n{c}");
        }
        assert!(!c.contains("sandbox_image"), "{c}");
        let runtime = c
            .split("[plugins.\"io.containerd.cri.v1.runtime\"]")
            .nth(1)
            .unwrap();
        assert!(
            runtime
                .split("\n[")
                .next()
                .unwrap()
                .contains("enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]"),
            "CDI is a setting of the runtime plugin:\n{c}"
        );
        assert!(!c.contains("grpc.v1.cri\".containerd"), "{c}");
        // 2.0 has no bin_dirs yet.
        let c = render(ConfigFormat::V3, (2, 0), "/x");
        assert!(c.contains("bin_dir = \"/usr/lib/cni\""), "{c}");
    }

    #[test]
    fn config_escapes_strings() {
        for format in [ConfigFormat::V2, ConfigFormat::V3] {
            let c = render(format, (2, 1), "/tmp/we\"ird\\dir");
            assert!(c.contains(r#"root = "/tmp/we\"ird\\dir/root""#), "{c}");
        }
    }
}
