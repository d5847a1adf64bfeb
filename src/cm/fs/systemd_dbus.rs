//! [`DbusSystemd`]: the real [`SystemdManager`], systemd's manager on the system bus
//! (the one `DBUS_SYSTEM_BUS_ADDRESS` names, else the system's socket), through zbus.
//!
//! [`CgroupFs`](super::CgroupFs) is synchronous and zbus is async on tokio, so one
//! thread of its own owns a current-thread runtime and the connection, and takes the
//! calls from a channel; each call runs as a task there, so a job that takes long does
//! not hold up the others. The caller waits for its answer on a channel of its own,
//! through `block_in_place` on a multi-thread runtime so the worker's other tasks move
//! on. Every call, its job included, is bounded by [`JOB_TIMEOUT`]. The queue needs no
//! bound of its own: each caller waits for its answer before it asks again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::mpsc;
use tracing::debug;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath, OwnedVariant, Variant};

use super::systemd::{BusError, JOB_TIMEOUT, PropValue, Property, SystemdManager, parse_version};
use crate::locks::Locked as _;

const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const DBUS: &str = "org.freedesktop.DBus";
const DBUS_PATH: &str = "/org/freedesktop/DBus";
/// A dependency stopped or started with the unit's job replaces a queued one, as runc's.
const MODE: &str = "replace";
/// How much longer than a call's own bound the caller waits before it gives up on
/// the thread.
const REPLY_MARGIN: Duration = Duration::from_secs(5);

/// One call to make.
#[derive(Debug)]
enum Call {
    Start(String, Vec<Property>),
    Set(String, Vec<Property>),
    Stop(String),
    ResetFailed(String),
    Version,
}

/// A call's answer: a job's result, a version, or nothing.
#[derive(Debug)]
enum Answer {
    Job(String),
    Version(u32),
    Done,
}

type Reply = std::sync::mpsc::SyncSender<Result<Answer, BusError>>;

/// systemd's manager over D-Bus (see the module doc).
#[derive(Debug)]
pub(crate) struct DbusSystemd {
    calls: mpsc::UnboundedSender<(Call, Reply)>,
    timeout: Duration,
}

/// Which bus, and how long a call may take.
#[derive(Debug, Clone)]
struct Target {
    /// `None`: the system bus; a test's private bus otherwise.
    address: Option<String>,
    timeout: Duration,
}

impl DbusSystemd {
    /// Starts the thread for the system bus; it connects at the first call (and again
    /// after the connection broke), so a bus that comes later is found.
    pub(crate) fn start() -> std::io::Result<DbusSystemd> {
        DbusSystemd::start_on(None, JOB_TIMEOUT)
    }

    /// The same on the bus at `address` (a test's), with calls bounded by `timeout`.
    pub(super) fn start_on(
        address: Option<String>,
        timeout: Duration,
    ) -> std::io::Result<DbusSystemd> {
        let (calls, queue) = mpsc::unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let target = Target { address, timeout };
        std::thread::Builder::new()
            .name("systemd-dbus".to_string())
            .spawn(move || runtime.block_on(serve(queue, target)))?;
        Ok(DbusSystemd { calls, timeout })
    }

    fn call(&self, call: Call) -> Result<Answer, BusError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.calls
            .send((call, reply))
            .map_err(|_| BusError::Transport("the systemd D-Bus thread has stopped".into()))?;
        let wait = || {
            answer
                .recv_timeout(self.timeout + REPLY_MARGIN)
                .unwrap_or(Err(BusError::Timeout(self.timeout + REPLY_MARGIN)))
        };
        let on_workers = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_workers {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        }
    }

    fn job(&self, call: Call) -> Result<String, BusError> {
        match self.call(call)? {
            Answer::Job(result) => Ok(result),
            other => Err(unexpected(&other)),
        }
    }

    fn done(&self, call: Call) -> Result<(), BusError> {
        match self.call(call)? {
            Answer::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(answer: &Answer) -> BusError {
    let kind = match answer {
        Answer::Job(_) => "a job",
        Answer::Version(_) => "a version",
        Answer::Done => "no value",
    };
    BusError::Transport(format!("the systemd D-Bus thread answered with {kind}"))
}

impl SystemdManager for DbusSystemd {
    fn start_transient_unit(&self, unit: &str, props: &[Property]) -> Result<String, BusError> {
        self.job(Call::Start(unit.to_string(), props.to_vec()))
    }

    fn set_unit_properties(&self, unit: &str, props: &[Property]) -> Result<(), BusError> {
        self.done(Call::Set(unit.to_string(), props.to_vec()))
    }

    fn stop_unit(&self, unit: &str) -> Result<String, BusError> {
        self.job(Call::Stop(unit.to_string()))
    }

    fn reset_failed_unit(&self, unit: &str) -> Result<(), BusError> {
        self.done(Call::ResetFailed(unit.to_string()))
    }

    fn version(&self) -> Result<u32, BusError> {
        match self.call(Call::Version)? {
            Answer::Version(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }
}

/// The connection, shared by the call tasks; taken away when it broke.
type Slot = Arc<Mutex<Option<Connection>>>;

/// The thread's loop: each call a task with the connection (made when there is none).
async fn serve(mut queue: mpsc::UnboundedReceiver<(Call, Reply)>, target: Target) {
    let slot: Slot = Arc::default();
    let timeout = target.timeout;
    while let Some((call, reply)) = queue.recv().await {
        let conn = match connection(&slot, &target).await {
            Ok(c) => c,
            Err(e) => {
                let _ = reply.send(Err(e));
                continue;
            }
        };
        let slot = slot.clone();
        tokio::spawn(async move {
            let answer = match tokio::time::timeout(timeout, run(&conn, call)).await {
                Ok(answer) => answer,
                Err(_) => Err(BusError::Timeout(timeout)),
            };
            // Anything but systemd's own error reply may be a broken connection (or
            // a systemd that re-executed under a new bus name): connect anew.
            if matches!(answer, Err(BusError::Transport(_) | BusError::Timeout(_))) {
                slot.locked().take();
            }
            let _ = reply.send(answer);
        });
    }
}

/// The connection in `slot`, or a new one to the bus.
async fn connection(slot: &Slot, target: &Target) -> Result<Connection, BusError> {
    if let Some(conn) = slot.locked().clone() {
        return Ok(conn);
    }
    let connect = async {
        match &target.address {
            None => Connection::system().await,
            Some(address) => {
                zbus::connection::Builder::address(address.as_str())
                    .build()
                    .await
            }
        }
    };
    let conn = tokio::time::timeout(target.timeout, connect)
        .await
        .map_err(|_| BusError::Timeout(target.timeout))?
        .map_err(|e| transport("connecting to the system bus", &e))?;
    // Signals go out only once a client subscribed (systemd's `Subscribe`); job
    // signals also reach the client that queued the job, so a refusal is no failure.
    // Bounded like every call: a hung systemd must not hold the thread's loop.
    match tokio::time::timeout(target.timeout, manager_call(&conn, "Subscribe", &())).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            debug!(error = %e, "systemd refused Subscribe; waiting for job signals anyway");
        }
        Err(_) => return Err(BusError::Timeout(target.timeout)),
    }
    *slot.locked() = Some(conn.clone());
    Ok(conn)
}

fn transport(what: &str, e: &zbus::Error) -> BusError {
    BusError::Transport(format!("{what}: {e}"))
}

/// A zbus error as the driver tells them apart: systemd's error replies by name.
fn bus_error(method: &str, e: zbus::Error) -> BusError {
    match e {
        zbus::Error::MethodError(name, message, _) => BusError::Method {
            name: name.to_string(),
            message: message.unwrap_or_default(),
        },
        zbus::Error::FDO(e) => {
            use zbus::DBusError as _;
            BusError::Method {
                name: e.name().to_string(),
                message: e.description().unwrap_or_default().to_string(),
            }
        }
        other => transport(method, &other),
    }
}

async fn manager_call<B>(
    conn: &Connection,
    method: &str,
    body: &B,
) -> Result<zbus::Message, BusError>
where
    B: serde::Serialize + zbus::Type,
{
    conn.call_method(Some(SYSTEMD), SYSTEMD_PATH, Some(MANAGER), method, body)
        .await
        .map_err(|e| bus_error(method, e))
}

/// The properties as D-Bus takes them: `a(sv)`.
fn variants(props: &[Property]) -> Vec<(&str, Variant<'_>)> {
    props
        .iter()
        .map(|(name, value)| {
            let v = match value {
                PropValue::Bool(b) => Variant::from(*b),
                PropValue::U64(n) => Variant::from(*n),
                PropValue::Str(s) => Variant::from(s.as_str()),
                PropValue::Strs(list) => {
                    Variant::from(list.iter().map(String::as_str).collect::<Vec<&str>>())
                }
            };
            (*name, v)
        })
        .collect()
}

async fn run(conn: &Connection, call: Call) -> Result<Answer, BusError> {
    match call {
        Call::Start(unit, props) => {
            // No auxiliary units: `a(sa(sv))` empty.
            let aux: Vec<(&str, Vec<(&str, Variant<'_>)>)> = Vec::new();
            let body = (unit.as_str(), MODE, variants(&props), aux);
            job(conn, &unit, "StartTransientUnit", &body).await
        }
        Call::Stop(unit) => job(conn, &unit, "StopUnit", &(unit.as_str(), MODE)).await,
        Call::Set(unit, props) => {
            let body = (unit.as_str(), true, variants(&props));
            manager_call(conn, "SetUnitProperties", &body).await?;
            Ok(Answer::Done)
        }
        Call::ResetFailed(unit) => {
            manager_call(conn, "ResetFailedUnit", &(unit.as_str(),)).await?;
            Ok(Answer::Done)
        }
        Call::Version => version(conn).await,
    }
}

/// systemd's unique bus name: job signals are taken from it alone, so no other
/// client of the bus can end a wait with a signal of its own.
async fn systemd_owner(conn: &Connection) -> Result<String, BusError> {
    let reply = conn
        .call_method(
            Some(DBUS),
            DBUS_PATH,
            Some(DBUS),
            "GetNameOwner",
            &(SYSTEMD,),
        )
        .await
        .map_err(|e| bus_error("GetNameOwner", e))?;
    reply
        .body()
        .deserialize::<String>()
        .map_err(|e| transport("reading systemd's bus name", &e))
}

/// Calls `method`, which queues a job for `unit`, and waits for the job's
/// `JobRemoved`. The signal is listened for before the call: the job may end before
/// its path comes back.
async fn job<B>(conn: &Connection, unit: &str, method: &str, body: &B) -> Result<Answer, BusError>
where
    B: serde::Serialize + zbus::Type,
{
    let owner = systemd_owner(conn).await?;
    let rule = MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(owner.as_str())
        .path(SYSTEMD_PATH)
        .interface(MANAGER)
        .member("JobRemoved")
        .arg(2, unit)
        .build()
        .map_err(|e| transport("matching JobRemoved", &e))?;
    let mut removed = MessageStream::for_match_rule(rule, conn, None)
        .await
        .map_err(|e| transport("listening for JobRemoved", &e))?;
    let reply = manager_call(conn, method, body).await?;
    let path: OwnedObjectPath = reply
        .body()
        .deserialize()
        .map_err(|e| transport(method, &e))?;
    while let Some(msg) = removed.next().await {
        let Ok(msg) = msg else { continue };
        // JobRemoved(u id, o job, s unit, s result).
        let Ok((_, job, _, result)) = msg
            .body()
            .deserialize::<(u32, OwnedObjectPath, String, String)>()
        else {
            continue;
        };
        if job == path {
            debug!(unit = %unit, method = %method, jobResult = %result, "systemd job removed");
            return Ok(Answer::Job(result));
        }
    }
    Err(BusError::Transport(format!(
        "the bus connection closed while waiting for the {method} job"
    )))
}

/// The manager's `Version` property.
async fn version(conn: &Connection) -> Result<Answer, BusError> {
    let reply = conn
        .call_method(
            Some(SYSTEMD),
            SYSTEMD_PATH,
            Some(PROPERTIES),
            "Get",
            &(MANAGER, "Version"),
        )
        .await
        .map_err(|e| bus_error("Get Version", e))?;
    let value: OwnedVariant = reply
        .body()
        .deserialize()
        .map_err(|e| transport("reading systemd's Version", &e))?;
    let text =
        String::try_from(value).map_err(|e| transport("systemd's Version is not a string", &e))?;
    parse_version(&text)
        .map(Answer::Version)
        .ok_or_else(|| BusError::Transport(format!("systemd's Version {text:?} has no number")))
}
