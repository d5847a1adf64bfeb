//! A private bus for the tests that talk D-Bus (a pretend systemd, a pretend logind):
//! `dbus-daemon` with a system-bus configuration of the test's own (any local user may
//! own any name), listening on a socket in the test's directory. Shared by the unit
//! tests of oxlet's systemd client (included by path) and the integration tests.

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct Bus {
    daemon: Child,
    /// The address a client dials (`unix:path=…`).
    pub address: String,
}

impl Bus {
    /// Starts the daemon with its configuration and socket in `dir`.
    pub fn start(dir: &Path) -> Bus {
        let config = dir.join("system.conf");
        let socket = dir.join("system_bus_socket");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .spawn()
            .expect(
                "dbus-daemon (Debian's dbus package; scripts/install-test-deps.sh installs it)",
            );
        let mut out = daemon.stdout.take().unwrap();
        let mut address = Vec::new();
        let mut byte = [0_u8; 1];
        while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            address.push(byte[0]);
        }
        let address = String::from_utf8(address).unwrap();
        assert!(address.starts_with("unix:"), "{address:?}");
        Bus { daemon, address }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}
