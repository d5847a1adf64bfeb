//! [`DbusSystemd`] on a private `dbus-daemon` (Debian's `dbus`, as
//! `tests/node_shutdown.rs` uses) against a small pretend systemd: the wire types of
//! each call, a job signal that comes before the call's reply, a job signal from
//! another client ignored, systemd's error replies by name, and a job that never ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use zbus::message::Type;
use zbus::{Connection, OwnedObjectPath, OwnedVariant};

// The integration tests' private bus, shared by path.
#[allow(unreachable_pub)]
#[path = "../../../tests/common/dbus.rs"]
mod dbus;
use dbus::Bus;

use super::systemd::{BusError, PropValue, Property, SystemdManager};
use super::systemd_dbus::DbusSystemd;

const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const PATH: &str = "/org/freedesktop/systemd1";

/// Each call's limit: short, since one test waits it out, and long enough that a
/// loaded machine (the whole lib suite at once) answers every other call within it.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// A property value as the pretend systemd decodes it.
fn decode(v: &OwnedVariant) -> PropValue {
    if let Ok(b) = bool::try_from(v) {
        return PropValue::Bool(b);
    }
    if let Ok(n) = u64::try_from(v) {
        return PropValue::U64(n);
    }
    if let Ok(s) = <&str>::try_from(v) {
        return PropValue::Str(s.to_string());
    }
    let list = v
        .try_clone()
        .ok()
        .and_then(|v| Vec::<String>::try_from(v).ok());
    PropValue::Strs(list.unwrap_or_else(|| panic!("an unexpected property type: {v:?}")))
}

/// `a(sv)` as the pretend systemd reads it.
type Props = Vec<(String, OwnedVariant)>;

type Seen = Arc<Mutex<Vec<(String, String, Vec<(String, PropValue)>)>>>;

/// `org.freedesktop.systemd1` on the bus: units named `exists…` already exist, `gone…`
/// are not loaded, `slow…` never finish, `failing…` end "failed"; every other job
/// ends "done", its `JobRemoved` sent before the call's reply. A spoofer on another
/// connection says "done" first for each job of `failing…`.
async fn pretend_systemd(address: &str, seen: Seen) -> Connection {
    let conn = zbus::connection::Builder::address(address)
        .build()
        .await
        .unwrap();
    conn.request_name("org.freedesktop.systemd1").await.unwrap();
    let spoofer = zbus::connection::Builder::address(address)
        .build()
        .await
        .unwrap();
    let c = conn.clone();
    tokio::spawn(async move {
        let mut calls = zbus::MessageStream::from(&c);
        let mut next_job = 0_u32;
        while let Some(Ok(msg)) = calls.next().await {
            if msg.message_type() != Type::MethodCall {
                continue;
            }
            next_job += 1;
            answer(&c, &spoofer, &msg, next_job, &seen).await;
        }
    });
    conn
}

async fn answer(c: &Connection, spoofer: &Connection, msg: &zbus::Message, id: u32, seen: &Seen) {
    let h = msg.header();
    let member = h.member().map(ToString::to_string).unwrap_or_default();
    // zbus spells a body's signature as one structure: `(sb)` for the wire's `sb`.
    let signature = msg.body().signature().to_string();
    let signature = signature
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(&signature)
        .to_string();
    let record = |unit: &str, props: Vec<(String, PropValue)>| {
        seen.lock()
            .unwrap()
            .push((member.clone(), unit.to_string(), props));
    };
    let (unit, props) = match member.as_str() {
        "Subscribe" => return c.reply(&h, &()).await.unwrap(),
        "Get" => {
            let (iface, prop): (String, String) = msg.body().deserialize().unwrap();
            assert_eq!((iface.as_str(), prop.as_str()), (MANAGER, "Version"));
            return c
                .reply(&h, &zbus::Variant::from("252.22-1~deb12u1"))
                .await
                .unwrap();
        }
        "StartTransientUnit" => {
            assert_eq!(signature, "ssa(sv)a(sa(sv))");
            let (unit, mode, props, aux): (String, String, Props, Vec<(String, Props)>) =
                msg.body().deserialize().unwrap();
            assert_eq!(mode, "replace");
            assert!(aux.is_empty());
            (
                unit,
                props.iter().map(|(n, v)| (n.clone(), decode(v))).collect(),
            )
        }
        "SetUnitProperties" => {
            assert_eq!(signature, "sba(sv)");
            let (unit, runtime, props): (String, bool, Vec<(String, OwnedVariant)>) =
                msg.body().deserialize().unwrap();
            assert!(runtime);
            record(
                &unit,
                props.iter().map(|(n, v)| (n.clone(), decode(v))).collect(),
            );
            return c.reply(&h, &()).await.unwrap();
        }
        "StopUnit" => {
            let (unit, mode): (String, String) = msg.body().deserialize().unwrap();
            assert_eq!(mode, "replace");
            (unit, Vec::new())
        }
        "ResetFailedUnit" => {
            let (unit,): (String,) = msg.body().deserialize().unwrap();
            record(&unit, Vec::new());
            return c.reply(&h, &()).await.unwrap();
        }
        other => {
            return c
                .reply_error(
                    &h,
                    "org.freedesktop.DBus.Error.UnknownMethod",
                    &format!("no {other}"),
                )
                .await
                .unwrap();
        }
    };
    record(&unit, props);
    if unit.starts_with("exists") && member == "StartTransientUnit" {
        let text = format!("Unit {unit} already exists.");
        return c
            .reply_error(&h, "org.freedesktop.systemd1.UnitExists", &text)
            .await
            .unwrap();
    }
    if unit.starts_with("gone") {
        let text = format!("Unit {unit} not loaded.");
        return c
            .reply_error(&h, "org.freedesktop.systemd1.NoSuchUnit", &text)
            .await
            .unwrap();
    }
    let job = OwnedObjectPath::try_from(format!("{PATH}/job/{id}")).unwrap();
    let removed = |result: &'static str| (id, job.clone(), unit.clone(), result);
    if unit.starts_with("failing") {
        spoofer
            .emit_signal(None::<&str>, PATH, MANAGER, "JobRemoved", &removed("done"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.emit_signal(
            None::<&str>,
            PATH,
            MANAGER,
            "JobRemoved",
            &removed("failed"),
        )
        .await
        .unwrap();
    } else if !unit.starts_with("slow") {
        c.emit_signal(None::<&str>, PATH, MANAGER, "JobRemoved", &removed("done"))
            .await
            .unwrap();
    }
    c.reply(&h, &job).await.unwrap();
}

fn props(list: &[Property]) -> Vec<(String, PropValue)> {
    list.iter()
        .map(|(n, v)| ((*n).to_string(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reach_systemd_with_systemds_types_and_jobs_are_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::start(dir.path());
    let seen = Seen::default();
    let _systemd = pretend_systemd(&bus.address, seen.clone()).await;
    let client = DbusSystemd::start_on(Some(bus.address.clone()), CALL_LIMIT).unwrap();

    assert_eq!(client.version(), Ok(252));
    let start =
        super::systemd::start_properties("kubepods.slice", "-.slice", crate::cm::CgroupVersion::V2);
    assert_eq!(
        client.start_transient_unit("kubepods.slice", &start),
        Ok("done".to_string())
    );
    let set: Vec<Property> = vec![
        ("CPUWeight", PropValue::U64(157)),
        ("MemoryMax", PropValue::U64(u64::MAX)),
    ];
    client.set_unit_properties("kubepods.slice", &set).unwrap();
    assert_eq!(client.stop_unit("kubepods.slice"), Ok("done".to_string()));
    client.reset_failed_unit("kubepods.slice").unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (
                "StartTransientUnit".to_string(),
                "kubepods.slice".to_string(),
                props(&start)
            ),
            (
                "SetUnitProperties".to_string(),
                "kubepods.slice".to_string(),
                props(&set)
            ),
            ("StopUnit".to_string(), "kubepods.slice".to_string(), vec![]),
            (
                "ResetFailedUnit".to_string(),
                "kubepods.slice".to_string(),
                vec![]
            ),
        ]
    );

    // systemd's error replies keep their names.
    let exists = client
        .start_transient_unit("exists.slice", &start)
        .unwrap_err();
    assert!(
        matches!(&exists, BusError::Method { name, .. } if name == "org.freedesktop.systemd1.UnitExists"),
        "{exists}"
    );
    let gone = client.stop_unit("gone.slice").unwrap_err();
    assert_eq!(
        gone.to_string(),
        "org.freedesktop.systemd1.NoSuchUnit: Unit gone.slice not loaded."
    );
    // Another client's JobRemoved for the same job is not systemd's word.
    assert_eq!(
        client.start_transient_unit("failing.slice", &start),
        Ok("failed".to_string())
    );
    // A job that never ends is a timeout, and the next call still works.
    assert_eq!(
        client.start_transient_unit("slow.slice", &start),
        Err(BusError::Timeout(CALL_LIMIT))
    );
    assert_eq!(client.stop_unit("kubepods.slice"), Ok("done".to_string()));
}

#[test]
fn no_bus_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let address = format!("unix:path={}", dir.path().join("none").display());
    let client = DbusSystemd::start_on(Some(address), CALL_LIMIT).unwrap();
    let e = client.stop_unit("kubepods.slice").unwrap_err();
    assert!(
        matches!(&e, BusError::Transport(t) if t.contains("connecting")),
        "{e}"
    );
}
