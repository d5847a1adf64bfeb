//! logind over the system bus (zbus, on tokio): the real [`Logind`]. The bus is the
//! one `DBUS_SYSTEM_BUS_ADDRESS` names, else the system's socket, as every D-Bus client's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use zbus::{Connection, MatchRule, MessageStream, OwnedVariant};

use super::logind::{InhibitLock, Logind, LogindError};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const SYSTEMD_MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// Who takes the lock and why, as `systemd-inhibit --list` shows it: kubelet's words,
/// so tools that look for the node agent's lock find it.
const INHIBIT_WHO: &str = "kubelet";
const INHIBIT_WHY: &str = "Kubelet needs time to handle node shutdown";

/// Where logind reads drop-ins, and kubelet's file there (the same name, so an oxlet
/// that replaces a kubelet on a node replaces its drop-in instead of adding one).
pub(crate) const LOGIND_DROP_IN_DIR: &str = "/etc/systemd/logind.conf.d";
const DROP_IN: &str = "99-kubelet.conf";

/// logind on the system bus.
pub(crate) struct SystemLogind {
    conn: Option<Connection>,
    drop_in_dir: PathBuf,
}

impl SystemLogind {
    /// Not yet connected; drop-ins go to `drop_in_dir` ([`LOGIND_DROP_IN_DIR`] on a node).
    pub(crate) fn new(drop_in_dir: PathBuf) -> Self {
        SystemLogind {
            conn: None,
            drop_in_dir,
        }
    }

    fn conn(&self) -> Result<&Connection, LogindError> {
        self.conn.as_ref().ok_or(LogindError::NotConnected)
    }
}

fn bus(what: &'static str) -> impl FnOnce(zbus::Error) -> LogindError {
    move |source| LogindError::Bus { what, source }
}

impl Logind for SystemLogind {
    async fn connect(&mut self) -> Result<(), LogindError> {
        self.conn = None;
        self.conn = Some(
            Connection::system()
                .await
                .map_err(bus("connecting to the system bus"))?,
        );
        Ok(())
    }

    async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        const WHAT: &str = "reading logind's InhibitDelayMaxUSec";
        let reply = self
            .conn()?
            .call_method(
                Some(LOGIND),
                LOGIND_PATH,
                Some(PROPERTIES),
                "Get",
                &(LOGIND_MANAGER, "InhibitDelayMaxUSec"),
            )
            .await
            .map_err(bus(WHAT))?;
        let value: OwnedVariant = reply.body().deserialize().map_err(bus(WHAT))?;
        let usec = u64::try_from(value).map_err(|e| LogindError::Reply {
            what: WHAT,
            reason: format!("not a uint64: {e}"),
        })?;
        Ok(Duration::from_micros(usec))
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError> {
        const WHAT: &str = "taking a delay inhibitor lock from logind";
        let reply = self
            .conn()?
            .call_method(
                Some(LOGIND),
                LOGIND_PATH,
                Some(LOGIND_MANAGER),
                "Inhibit",
                &("shutdown", INHIBIT_WHO, INHIBIT_WHY, "delay"),
            )
            .await
            .map_err(bus(WHAT))?;
        let fd: zbus::OwnedFd = reply.body().deserialize().map_err(bus(WHAT))?;
        Ok(InhibitLock(fd.into()))
    }

    async fn override_inhibit_delay(&self, delay: Duration) -> Result<(), LogindError> {
        write_drop_in(&self.drop_in_dir, delay)
    }

    async fn reload_logind(&self) -> Result<(), LogindError> {
        self.conn()?
            .call_method(
                Some(SYSTEMD),
                SYSTEMD_PATH,
                Some(SYSTEMD_MANAGER),
                "KillUnit",
                &("systemd-logind.service", "all", 1_i32),
            )
            .await
            .map_err(bus("asking systemd to reload logind (SIGHUP)"))?;
        Ok(())
    }

    async fn shutdown_events(&self) -> Result<BoxStream<'static, bool>, LogindError> {
        const WHAT: &str = "watching logind's PrepareForShutdown";
        let rule = MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface(LOGIND_MANAGER)
            .member("PrepareForShutdown")
            .path(LOGIND_PATH)
            .build()
            .map_err(bus(WHAT))?;
        let stream = MessageStream::for_match_rule(rule, self.conn()?, None)
            .await
            .map_err(bus(WHAT))?;
        // A message that is not a boolean is no shutdown news (kubelet skips it too).
        Ok(stream
            .filter_map(|m| async move { m.ok()?.body().deserialize::<bool>().ok() })
            .boxed())
    }
}

/// kubelet's logind drop-in: `InhibitDelayMaxSec` in whole seconds (rounded), written
/// whole (a temporary file renamed over it), mode 0644 in a 0755 directory.
pub(crate) fn write_drop_in(dir: &Path, delay: Duration) -> Result<(), LogindError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let path = dir.join(DROP_IN);
    let err = |source| LogindError::DropIn {
        path: path.display().to_string(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(err)?;
    let text = format!(
        "# Written by oxlet's node shutdown manager: logind waits this long for its lock.\n[Login]\nInhibitDelayMaxSec={}\n",
        delay.as_secs_f64().round()
    );
    let tmp = dir.join(format!(".{DROP_IN}.tmp"));
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_sets_the_delay_in_whole_seconds() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("logind.conf.d");
        write_drop_in(&d, Duration::from_millis(30_600)).unwrap();
        let file = d.join("99-kubelet.conf");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains("\n[Login]\nInhibitDelayMaxSec=31\n"),
            "{text}"
        );
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        write_drop_in(&d, Duration::from_secs(40)).unwrap();
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .ends_with("InhibitDelayMaxSec=40\n")
        );
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "no temporary left"
        );
    }

    #[tokio::test]
    async fn calls_before_connecting_say_so() {
        let l = SystemLogind::new(PathBuf::from("/nonexistent"));
        assert!(matches!(
            l.inhibit_delay_max().await,
            Err(LogindError::NotConnected)
        ));
    }
}
