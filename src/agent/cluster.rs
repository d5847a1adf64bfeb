//! Cluster mode (`--kubeconfig`): the apiserver clients and their certificate
//! rotation, the event recorder and its sink, the ConfigMap/Secret/token managers, and
//! the pod status writer with the mirror pods. Standalone, events are only logged.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::{Shared, Workers};
use crate::events::{EventRecorder, EventType};
use crate::kubeclient::ApiClients;
use crate::logging::STARTUP_TARGET;
use crate::options::Options;
use crate::tasks::{Backoff, Tasks};

/// The apiserver clients when `--kubeconfig` is given (kubelet, too, refuses to start
/// with a kubeconfig it cannot use); None runs standalone.
pub(super) async fn api_clients(opts: &Options) -> anyhow::Result<Option<ApiClients>> {
    let Some(path) = &opts.cluster.kubeconfig else {
        return Ok(None);
    };
    let settings = crate::kubeclient::ClientSettings {
        qps: opts.cluster.kube_api_qps,
        burst: opts.cluster.kube_api_burst,
        node_status_update_frequency: opts.status.update_frequency,
        node_lease_duration: opts.status.lease_duration,
    };
    let cert_dir = opts
        .cluster
        .cert_dir
        .clone()
        .unwrap_or_else(|| opts.process.root_dir.join("pki"));
    if let Some(boot) = &opts.cluster.bootstrap_kubeconfig {
        crate::kubeclient::Bootstrap {
            kubeconfig: path.clone(),
            bootstrap_kubeconfig: boot.clone(),
            cert_dir: cert_dir.clone(),
            node_name: opts.node.name.clone(),
            wait: crate::kubeclient::BOOTSTRAP_WAIT,
        }
        .run()
        .await?;
    }
    let clients = if opts.cluster.rotate_certificates {
        crate::kubeclient::build_rotating(path, settings, &cert_dir).await?
    } else {
        crate::kubeclient::build(path, settings).await?
    };
    if let Some((cert, file)) = crate::kubeclient::client_certificate_in_use(path).await {
        info!(
            target: STARTUP_TARGET,
            subject = cert.subject,
            notAfter = %cert.not_after,
            file,
            "the apiserver clients present this client certificate"
        );
    }
    info!(
        target: STARTUP_TARGET,
        server = %clients.server,
        kubeAPIQPS = settings.qps,
        kubeAPIBurst = settings.burst,
        heartbeatTimeout = %crate::duration::format_go_duration(settings.heartbeat_timeout()),
        "apiserver clients built from {}: pods bound to this node, node status and lease, pod statuses, mirror pods and events go through the apiserver",
        path.display()
    );
    Ok(Some(clients))
}

/// `rotateCertificates`: the task that renews the cert dir's client certificate
/// before it expires, when the clients present it (see `kubeclient::rotation`).
pub(super) fn start_cert_rotation(opts: &Options, api: &ApiClients, tasks: &Tasks) {
    let Some(slot) = api.cert_slot.clone() else {
        if opts.cluster.rotate_certificates {
            info!(target: STARTUP_TARGET, "rotateCertificates is set, but the kubeconfig's client certificate is not <cert-dir>/kubelet-client-current.pem; it is not rotated");
        }
        return;
    };
    let rotation = crate::kubeclient::Rotation {
        cert_dir: opts
            .cluster
            .cert_dir
            .clone()
            .unwrap_or_else(|| opts.process.root_dir.join("pki")),
        bootstrap_kubeconfig: opts.cluster.bootstrap_kubeconfig.clone(),
        node_name: opts.node.name.clone(),
        slot,
        client: api.main.clone(),
        wait: crate::kubeclient::ROTATION_WAIT,
        jitter: fastrand::f64(),
    };
    if let Some((cert, at)) = rotation.next_deadline() {
        info!(target: STARTUP_TARGET, subject = cert.subject, notAfter = %cert.not_after, rotationDeadline = %at, "client certificate rotation is on");
    }
    // Restarting: a failed or panicked pass must never end rotation for good.
    tasks.spawn_restarting("cert-rotation", Backoff::default(), move |cancel| {
        rotation.clone().run(cancel)
    });
}

/// The event recorder: log-only standalone; with an apiserver, its queue is drained by
/// the event sink (kubelet's `makeEventRecorder`). Records the node's `Starting`.
pub(super) fn spawn_event_sink(
    opts: &Options,
    api: Option<&ApiClients>,
    tasks: &Tasks,
) -> EventRecorder {
    let recorder = match api {
        None => EventRecorder::log_only(),
        Some(api) => {
            let (recorder, queue) = EventRecorder::queued(crate::events::MAX_QUEUED_EVENTS);
            let queue = Arc::new(tokio::sync::Mutex::new(queue));
            let settings = crate::events::SinkSettings::new(
                opts.cluster.event_record_qps,
                opts.cluster.event_burst,
                opts.node.name.clone(),
            );
            let client = api.main.clone();
            tasks.spawn_restarting("event-sink", Backoff::default(), move |cancel| {
                let (client, settings, queue) = (client.clone(), settings.clone(), queue.clone());
                async move {
                    let mut queue = queue.lock_owned().await;
                    crate::events::run_sink(client, settings, &mut queue, cancel).await;
                    Ok(())
                }
            });
            recorder
        }
    };
    let node = crate::events::ObjectRef::node(&opts.node.name);
    let starting = crate::events::reason::STARTING;
    recorder.event(&node, EventType::Normal, starting, "Starting kubelet.");
    recorder
}

/// The ConfigMap, Secret and token managers of cluster mode, on the
/// main client; `None` without an apiserver, so these volumes and env vars keep failing
/// with a clear error as in standalone mode.
pub(super) fn object_manager(
    api: Option<&ApiClients>,
    node_name: &str,
) -> Option<Arc<crate::objects::ObjectManager>> {
    let source = crate::objects::KubeObjects::new(api?.main.clone());
    Some(Arc::new(
        crate::objects::ObjectManager::new(Arc::new(source)).with_node_name(node_name),
    ))
}

/// The reconcile period of the status writer and mirror pods: kubelet's 10 s, or
/// `OXLET_TEST_STATUS_PERIOD_MS` (test-only: integration tests shorten it).
fn status_period() -> Duration {
    std::env::var("OXLET_TEST_STATUS_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(crate::status::RECONCILE_PERIOD, Duration::from_millis)
}

/// Cluster mode: the pod status writer and the mirror pods, each a restarting task on
/// the main client. A pod may be finally deleted once its worker finished, or when it
/// has no worker and nothing of it runs.
pub(super) fn spawn_status_writer(
    opts: &Options,
    api: &ApiClients,
    shared: &Shared,
    workers: Workers,
    (mirror_wake, sources_ready): (Arc<tokio::sync::Notify>, tokio::sync::watch::Receiver<bool>),
    tasks: &Tasks,
) {
    use crate::status::{Finished, MirrorPods, StatusWriter};
    use crate::syncloop::Lifecycle;
    let period = status_period();
    let cache = shared.pod_cache.clone();
    let finished: Finished = Arc::new(move |uid: &str| match workers.lifecycle(uid) {
        Some(l) => l == Lifecycle::Finished,
        None => cache.get(uid).is_none_or(|p| {
            !p.containers
                .iter()
                .any(|c| c.state == crate::kuberuntime::ContainerState::Running)
                && !p.sandboxes.iter().any(|s| s.ready)
        }),
    });
    let (client, s, p) = (
        api.main.clone(),
        shared.statuses.clone(),
        shared.pods.clone(),
    );
    let mirror_created = Arc::new(tokio::sync::Notify::new());
    let created = mirror_created.clone();
    tasks.spawn_restarting("pod-status-writer", Backoff::default(), move |cancel| {
        let writer = StatusWriter::new(
            client.clone(),
            s.clone(),
            p.clone(),
            finished.clone(),
            period,
        )
        .with_mirror_created(created.clone());
        async move {
            writer.run(cancel).await;
            Ok(())
        }
    });
    let mirrors = Arc::new(
        MirrorPods::new(
            api.main.clone(),
            shared.pods.clone(),
            opts.node.name.clone(),
            period,
        )
        .with_wake(mirror_wake)
        .with_sources_ready(sources_ready)
        .with_created_hook(mirror_created),
    );
    tasks.spawn_restarting("mirror-pods", Backoff::default(), move |cancel| {
        let m = mirrors.clone();
        async move {
            m.run(cancel).await;
            Ok(())
        }
    });
}
