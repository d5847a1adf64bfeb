//! The apiserver writer: drains the recorder's queue, correlates each event and
//! writes it as a core/v1 Event (POST, or a strategic-merge PATCH of `count`,
//! `lastTimestamp` and `message` for a repeat), as client-go's `recordToSink` does.
//!
//! Writes are paced by their own token bucket (`eventRecordQPS`/`eventBurst`, like
//! kubelet's separate event client). A write that cannot reach the apiserver is
//! retried up to 12 times, then dropped; one the apiserver refuses is dropped at once.
//! The recorder never waits for any of this: its queue drops when full.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::correlator::{Correlated, Correlator, EventRecord};
use super::{EventQueue, Queued};
use crate::kubeclient::TokenBucket;

/// client-go's `maxTriesPerEvent`.
const MAX_TRIES: u32 = 12;
/// client-go's `defaultSleepDuration` between tries.
const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// How the sink writes.
#[derive(Debug, Clone)]
pub(crate) struct SinkSettings {
    /// `eventRecordQPS` (0: client-go's default of 5, as for any rest client).
    pub qps: u32,
    /// `eventBurst`.
    pub burst: u32,
    /// `source.host` and `reportingInstance`: the node name.
    pub host: String,
    /// Between tries of a write the apiserver did not answer.
    pub retry_sleep: Duration,
}

impl SinkSettings {
    pub(crate) fn new(qps: u32, burst: u32, host: String) -> SinkSettings {
        SinkSettings {
            qps,
            burst,
            host,
            retry_sleep: RETRY_SLEEP,
        }
    }
}

/// What became of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    Dropped,
    Cancelled,
}

/// Runs until `cancel` or until every recorder is gone.
pub(crate) async fn run_sink(
    client: kube::Client,
    settings: SinkSettings,
    queue: &mut EventQueue,
    cancel: CancellationToken,
) {
    let mut correlator = Correlator::default();
    // Two census counts: the pods' entries go as the pods do; the Node's stay.
    let entries = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    crate::census::watch("event correlator: pods", &entries, |n| {
        n[0].load(Ordering::Relaxed)
    });
    crate::census::watch("event correlator: other objects", &entries, |n| {
        n[1].load(Ordering::Relaxed)
    });
    let count = |c: &Correlator| {
        let pods = c.pod_entries();
        entries[0].store(pods, Ordering::Relaxed);
        entries[1].store(c.entries() - pods, Ordering::Relaxed);
    };
    let mut bucket = TokenBucket::new(settings.qps, settings.burst);
    let mut dropped = 0u64;
    loop {
        let queued = tokio::select! {
            () = cancel.cancelled() => return,
            r = queue.recv() => match r { Some(r) => r, None => return },
        };
        let recorded = match queued {
            Queued::Event(e) => e,
            Queued::Forget(uid) => {
                correlator.forget(&uid);
                count(&correlator);
                continue;
            }
        };
        let correlated = correlator.correlate(&recorded, Instant::now());
        count(&correlator);
        let write = match correlated {
            Correlated::Skip => {
                debug!(reason = %recorded.reason, "event spam-filtered");
                continue;
            }
            Correlated::Create(r) => (r, false),
            Correlated::Update(r) => (r, true),
        };
        match write_with_retries(&client, &settings, &mut bucket, write, &cancel).await {
            Outcome::Written => {}
            Outcome::Dropped => {
                dropped += 1;
                debug!(dropped, "event dropped");
            }
            Outcome::Cancelled => return,
        }
    }
}

/// Why one write did not happen.
enum WriteError {
    /// The apiserver answered no: retrying would not help.
    Refused(Box<kube::core::Status>),
    /// The apiserver was not reached.
    Unreachable(kube::Error),
}

async fn write_with_retries(
    client: &kube::Client,
    settings: &SinkSettings,
    bucket: &mut TokenBucket,
    (record, update): (EventRecord, bool),
    cancel: &CancellationToken,
) -> Outcome {
    for attempt in 1..=MAX_TRIES {
        while let Err(wait) = bucket.try_take(Instant::now()) {
            tokio::select! {
                () = cancel.cancelled() => return Outcome::Cancelled,
                () = tokio::time::sleep(wait) => {}
            }
        }
        match write(client, settings, &record, update).await {
            Ok(()) => return Outcome::Written,
            Err(WriteError::Refused(status)) => {
                debug!(name = %record.name, code = status.code, message = %status.message,
                    "apiserver refused the event");
                return Outcome::Dropped;
            }
            Err(WriteError::Unreachable(e)) => {
                debug!(name = %record.name, attempt, error = %e, "cannot write the event");
            }
        }
        if attempt < MAX_TRIES {
            tokio::select! {
                () = cancel.cancelled() => return Outcome::Cancelled,
                () = tokio::time::sleep(settings.retry_sleep) => {}
            }
        }
    }
    Outcome::Dropped
}

/// One write: a PATCH for a repeat (a POST if the original is gone), else a POST.
async fn write(
    client: &kube::Client,
    settings: &SinkSettings,
    record: &EventRecord,
    update: bool,
) -> Result<(), WriteError> {
    let event = to_event(settings, record);
    let ns = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let classify = |e: kube::Error| match e {
        kube::Error::Api(s) => WriteError::Refused(s),
        other => WriteError::Unreachable(other),
    };
    if update {
        let patch = serde_json::json!({
            "count": record.count,
            "lastTimestamp": Time(record.last),
            "message": record.message,
        });
        match api
            .patch(
                &record.name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            // client-go creates the event anew when the one to update is gone.
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(classify(e)),
        }
    }
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(e) => Err(classify(e)),
    }
}

/// The core/v1 Event of a record; a node's events go to the `default` namespace.
fn to_event(settings: &SinkSettings, r: &EventRecord) -> Event {
    let o = &r.object;
    let namespace = if o.namespace.is_empty() {
        "default".to_owned()
    } else {
        o.namespace.clone()
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Event {
        metadata: ObjectMeta {
            name: Some(r.name.clone()),
            namespace: Some(namespace),
            annotations: (!r.annotations.is_empty()).then(|| r.annotations.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some(o.kind.to_owned()),
            namespace: some(&o.namespace),
            name: some(&o.name),
            uid: some(&o.uid),
            field_path: some(&o.field_path),
            ..ObjectReference::default()
        },
        reason: Some(r.reason.to_string()),
        message: Some(r.message.clone()),
        type_: Some(r.kind.as_str().to_owned()),
        count: Some(r.count),
        first_timestamp: Some(Time(r.first)),
        last_timestamp: Some(Time(r.last)),
        source: Some(EventSource {
            component: Some(super::COMPONENT.to_owned()),
            host: Some(settings.host.clone()),
        }),
        reporting_component: Some(super::COMPONENT.to_owned()),
        reporting_instance: Some(settings.host.clone()),
        ..Event::default()
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
