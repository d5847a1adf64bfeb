//! A pretend systemd manager for the unit tests: the units it knows, every call made
//! to it in order, and answers a test scripts (a failed job, an error reply).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::systemd::{BusError, Property, SystemdManager};
use crate::locks::Locked as _;

/// One call, as the fake saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FakeCall {
    Start(String, Vec<Property>),
    Set(String, Vec<Property>),
    Stop(String),
    ResetFailed(String),
}

#[derive(Debug)]
pub(crate) struct FakeSystemd {
    calls: Mutex<Vec<FakeCall>>,
    units: Mutex<BTreeSet<String>>,
    /// Scripted answers to the next start or stop of a unit.
    start: Mutex<BTreeMap<String, Result<String, BusError>>>,
    stop: Mutex<BTreeMap<String, Result<String, BusError>>>,
    version: Result<u32, BusError>,
}

impl FakeSystemd {
    /// A systemd of `version` that knows no unit yet.
    pub(crate) fn new(version: u32) -> FakeSystemd {
        FakeSystemd::answering_version(Ok(version))
    }

    pub(crate) fn answering_version(version: Result<u32, BusError>) -> FakeSystemd {
        FakeSystemd {
            calls: Mutex::default(),
            units: Mutex::default(),
            start: Mutex::default(),
            stop: Mutex::default(),
            version,
        }
    }

    /// A unit systemd already has (left by an earlier run).
    pub(crate) fn add_unit(&self, unit: &str) {
        self.units.locked().insert(unit.to_string());
    }

    pub(crate) fn units(&self) -> Vec<String> {
        self.units.locked().iter().cloned().collect()
    }

    pub(crate) fn script_start(&self, unit: &str, answer: Result<String, BusError>) {
        self.start.locked().insert(unit.to_string(), answer);
    }

    pub(crate) fn script_stop(&self, unit: &str, answer: Result<String, BusError>) {
        self.stop.locked().insert(unit.to_string(), answer);
    }

    pub(crate) fn calls(&self) -> Vec<FakeCall> {
        self.calls.locked().clone()
    }

    pub(crate) fn clear_calls(&self) {
        self.calls.locked().clear();
    }

    /// The properties of the last `SetUnitProperties` on `unit`.
    pub(crate) fn last_set(&self, unit: &str) -> Option<Vec<Property>> {
        self.calls.locked().iter().rev().find_map(|c| match c {
            FakeCall::Set(u, props) if u == unit => Some(props.clone()),
            _ => None,
        })
    }
}

/// systemd's error reply `org.freedesktop.systemd1.<name>`.
pub(crate) fn reply(name: &str, message: &str) -> BusError {
    BusError::Method {
        name: format!("org.freedesktop.systemd1.{name}"),
        message: message.to_string(),
    }
}

impl SystemdManager for FakeSystemd {
    fn start_transient_unit(&self, unit: &str, props: &[Property]) -> Result<String, BusError> {
        self.calls
            .locked()
            .push(FakeCall::Start(unit.to_string(), props.to_vec()));
        if let Some(answer) = self.start.locked().remove(unit) {
            return answer;
        }
        if !self.units.locked().insert(unit.to_string()) {
            return Err(reply("UnitExists", &format!("Unit {unit} already exists.")));
        }
        Ok("done".to_string())
    }

    fn set_unit_properties(&self, unit: &str, props: &[Property]) -> Result<(), BusError> {
        self.calls
            .locked()
            .push(FakeCall::Set(unit.to_string(), props.to_vec()));
        Ok(())
    }

    fn stop_unit(&self, unit: &str) -> Result<String, BusError> {
        self.calls.locked().push(FakeCall::Stop(unit.to_string()));
        if let Some(answer) = self.stop.locked().remove(unit) {
            return answer;
        }
        if self.units.locked().remove(unit) {
            Ok("done".to_string())
        } else {
            Err(reply("NoSuchUnit", &format!("Unit {unit} not loaded.")))
        }
    }

    fn reset_failed_unit(&self, unit: &str) -> Result<(), BusError> {
        self.calls
            .locked()
            .push(FakeCall::ResetFailed(unit.to_string()));
        if self.units.locked().contains(unit) {
            Ok(())
        } else {
            Err(reply("NoSuchUnit", &format!("Unit {unit} not loaded.")))
        }
    }

    fn version(&self) -> Result<u32, BusError> {
        self.version.clone()
    }
}
