//! An in-memory CRI runtime for unit tests (never in the release binary): sandboxes,
//! containers with exits and OOM kills, images, `ExecSync` results, and failures that
//! tests inject per call. Times follow tokio's clock, so tests run on a paused clock;
//! CRI timestamps (wall-clock ns) are derived from it when read, so "finished 10 s
//! ago" means 10 s of tokio time, as the runtime manager's back-off expects.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use tokio::time::Instant;

use super::api::{ContainerEvents, Cri, CriFuture, CriRead, ExecOutput};
use super::listing::{ListedContainer, ListedSandbox, pairs_of};
use super::remote::CriError;
use crate::pod::TerminatedReason;

/// Exit code of a container stopped by the agent (SIGTERM'd busybox: 128 + 15).
pub(crate) const STOPPED_EXIT_CODE: i32 = 143;
/// Exit code of an OOM-killed container, as containerd reports it (with reason
/// `TerminatedReason::OomKilled`).
pub(crate) const OOM_EXIT_CODE: i32 = 137;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Created,
    Running,
    Exited,
}

#[derive(Debug, Clone)]
struct Sandbox {
    config: cri::PodSandboxConfig,
    ready: bool,
    ip: String,
    created: Instant,
    /// Creation order: breaks ties between objects created at the same (paused) instant.
    seq: u64,
}

#[derive(Debug, Clone)]
struct Container {
    sandbox_id: String,
    config: cri::ContainerConfig,
    log_path: String,
    image: String,
    image_ref: String,
    state: State,
    created: Instant,
    seq: u64,
    started: Option<Instant>,
    finished: Option<Instant>,
    exit_code: i32,
    reason: String,
    /// The writable layer's (bytes, inodes) `ListContainerStats` reports; None: unknown.
    writable_layer: Option<(u64, u64)>,
    /// The memory `ListContainerStats` reports the container using; None: unknown.
    memory_usage: Option<u64>,
}

/// "The next `times` calls of `call` (whose pod name contains `pod`) fail with `code`."
#[derive(Debug, Clone)]
struct Failure {
    call: &'static str,
    pod: Option<String>,
    times: usize,
    code: tonic::Code,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    sandboxes: BTreeMap<String, Sandbox>,
    containers: BTreeMap<String, Container>,
    /// Image reference → image ID.
    images: HashMap<String, String>,
    /// Image ID → (size in bytes, pinned), for ListImages.
    image_meta: HashMap<String, (u64, bool)>,
    /// Images added so far (their IDs count up, never reused after a removal).
    image_seq: u64,
    failures: Vec<Failure>,
    exec: HashMap<String, Result<ExecOutput, tonic::Code>>,
    calls: Vec<Call>,
    /// How long each PullImage takes (zero: it answers at once).
    pull_delay: Duration,
    pulls_in_flight: usize,
    max_pulls_in_flight: usize,
    /// What the verbose Status names as the sandbox image.
    sandbox_image: Option<String>,
    /// Whether GetContainerEvents is served (else `Unimplemented`, as containerd 1.6).
    events_served: bool,
    /// The open GetContainerEvents streams.
    event_subscribers: Vec<EventSender>,
    /// Image → the one `user:password` its registry accepts (else a pull is refused).
    registry_logins: HashMap<String, String>,
    /// The `user:password` each PullImage carried ("" for none), in order.
    pull_logins: Vec<String>,
}

type EventSender =
    tokio::sync::mpsc::UnboundedSender<Result<cri::ContainerEventResponse, CriError>>;

/// Counts a pull as in flight until it ends or is dropped.
struct PullInFlight<'a>(&'a FakeRuntime);

impl Drop for PullInFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().pulls_in_flight -= 1;
    }
}

/// One recorded CRI call: its name and the pod (and container) it was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub call: &'static str,
    pub pod: String,
    pub container: String,
}

/// The in-memory runtime. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub(crate) struct FakeRuntime {
    inner: Mutex<Inner>,
}

fn status(call: &'static str, code: tonic::Code, message: impl Into<String>) -> CriError {
    CriError::Status {
        call,
        code,
        message: message.into(),
    }
}

fn not_found(call: &'static str, what: &str, id: &str) -> CriError {
    status(
        call,
        tonic::Code::NotFound,
        format!("{what} {id:?} not found"),
    )
}

/// A wall-clock timestamp (ns) for a tokio instant: as long before now as `at` is
/// before tokio's now.
fn wall_ns(at: Instant) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i64;
    now - Instant::now().saturating_duration_since(at).as_nanos() as i64
}

fn matches(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The container filters `ListContainers` and `ListContainerStats` share: an empty
/// field matches everything.
fn selected(
    (want_id, want_sandbox, selector): (&str, &str, &HashMap<String, String>),
    id: &str,
    c: &Container,
) -> bool {
    (want_id.is_empty() || id == want_id)
        && (want_sandbox.is_empty() || c.sandbox_id == want_sandbox)
        && matches(selector, &c.config.labels)
}

fn pod_name_of_sandbox(sb: &Sandbox) -> String {
    sb.config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default()
}

impl Container {
    fn name(&self) -> String {
        self.config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default()
    }
    fn pod_name(&self) -> String {
        self.config
            .labels
            .get(crate::kuberuntime::POD_NAME_LABEL)
            .cloned()
            .unwrap_or_default()
    }
    fn image_spec(&self) -> cri::ImageSpec {
        cri::ImageSpec {
            image: self.image.clone(),
            ..self.config.image.clone().unwrap_or_default()
        }
    }
    fn cri_state(&self) -> i32 {
        match self.state {
            State::Created => cri::ContainerState::ContainerCreated as i32,
            State::Running => cri::ContainerState::ContainerRunning as i32,
            State::Exited => cri::ContainerState::ContainerExited as i32,
        }
    }
    fn exit(&mut self, code: i32, reason: TerminatedReason) {
        if self.state == State::Running {
            self.state = State::Exited;
            self.finished = Some(Instant::now());
            self.exit_code = code;
            self.reason = reason.as_str().to_string();
        }
    }
}

impl Inner {
    /// Records the call and returns the injected failure, if one is due.
    fn enter(
        &mut self,
        call: &'static str,
        pod: String,
        container: String,
    ) -> Result<(), CriError> {
        self.calls.push(Call {
            call,
            pod: pod.clone(),
            container,
        });
        let due = self.failures.iter_mut().find(|f| {
            f.call == call && f.times > 0 && f.pod.as_ref().is_none_or(|p| pod.contains(p))
        });
        match due {
            Some(f) => {
                f.times -= 1;
                Err(status(call, f.code, "injected failure"))
            }
            None => Ok(()),
        }
    }

    fn new_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{:06}", self.next_id)
    }

    fn sandbox_pod(&self, id: &str) -> String {
        self.sandboxes
            .get(id)
            .map(pod_name_of_sandbox)
            .unwrap_or_default()
    }

    fn container_subject(&self, id: &str) -> (String, String) {
        self.containers
            .get(id)
            .map(|c| (c.pod_name(), c.name()))
            .unwrap_or_default()
    }
}

impl FakeRuntime {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    /// Serve GetContainerEvents from now on; events are sent by the test
    /// ([`FakeRuntime::send_container_event`]), not by the calls.
    pub(crate) fn serve_container_events(&self) {
        self.lock().events_served = true;
    }

    /// Send `event` on every open GetContainerEvents stream.
    pub(crate) fn send_container_event(&self, event: cri::ContainerEventResponse) {
        self.lock()
            .event_subscribers
            .retain(|s| s.send(Ok(event.clone())).is_ok());
    }

    /// End every open GetContainerEvents stream with `code`, as a runtime restart does.
    pub(crate) fn break_container_events(&self, code: tonic::Code) {
        for s in self.lock().event_subscribers.drain(..) {
            let _ = s.send(Err(status("GetContainerEvents", code, "stream broken")));
        }
    }

    /// How many GetContainerEvents streams are open.
    pub(crate) fn container_event_subscribers(&self) -> usize {
        let mut inner = self.lock();
        inner.event_subscribers.retain(|s| !s.is_closed());
        inner.event_subscribers.len()
    }

    /// Every PullImage takes `d` (on tokio's clock) from now on.
    pub(crate) fn set_pull_delay(&self, d: Duration) {
        self.lock().pull_delay = d;
    }

    /// Pulls of `image` are refused as a registry refuses them (401) unless they carry
    /// this login.
    pub(crate) fn require_pull_login(&self, image: &str, username: &str, password: &str) {
        self.lock()
            .registry_logins
            .insert(image.to_string(), format!("{username}:{password}"));
    }

    /// The `user:password` each PullImage carried so far ("" when none), in order.
    pub(crate) fn pull_logins(&self) -> Vec<String> {
        self.lock().pull_logins.clone()
    }

    /// The most PullImage calls that were under way at once.
    pub(crate) fn max_pulls_in_flight(&self) -> usize {
        self.lock().max_pulls_in_flight
    }

    /// PullImage calls under way now.
    pub(crate) fn pulls_in_flight(&self) -> usize {
        self.lock().pulls_in_flight
    }

    /// Makes `image` present, with ID `sha256:<n>`.
    pub(crate) fn add_image(&self, image: &str) {
        let mut inner = self.lock();
        if !inner.images.contains_key(image) {
            inner.image_seq += 1;
            let id = format!("sha256:{:064x}", inner.image_seq);
            inner.images.insert(image.to_string(), id);
        }
    }

    /// Makes `image` present with a size and the runtime's `pinned` flag; returns its ID.
    pub(crate) fn add_image_sized(&self, image: &str, size: u64, pinned: bool) -> String {
        self.add_image(image);
        let mut inner = self.lock();
        let id = inner.images[image].clone();
        inner.image_meta.insert(id.clone(), (size, pinned));
        id
    }

    /// The IDs of the images present, sorted.
    pub(crate) fn image_ids(&self) -> Vec<String> {
        let inner = self.lock();
        let mut ids: Vec<String> = inner.images.values().cloned().collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The next `times` calls of `call` (a CRI method name such as "CreateContainer")
    /// fail with `code`; with `pod`, only calls about a pod whose name contains it.
    pub(crate) fn fail_next(
        &self,
        call: &'static str,
        pod: Option<&str>,
        times: usize,
        code: tonic::Code,
    ) {
        self.lock().failures.push(Failure {
            call,
            pod: pod.map(str::to_string),
            times,
            code,
        });
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls of one kind, as "pod/container" (or "pod" for sandbox calls).
    pub(crate) fn calls_of(&self, call: &str) -> Vec<String> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.call == call)
            .map(|c| {
                if c.container.is_empty() {
                    c.pod.clone()
                } else {
                    format!("{}/{}", c.pod, c.container)
                }
            })
            .collect()
    }

    /// The sandbox container `id` runs in; None when `id` is not a container.
    pub(crate) fn container_sandbox(&self, id: &str) -> Option<String> {
        self.lock().containers.get(id).map(|c| c.sandbox_id.clone())
    }

    /// The newest container named `container` of the pod named `pod`.
    pub(crate) fn container_id(&self, pod: &str, container: &str) -> Option<String> {
        let inner = self.lock();
        inner
            .containers
            .iter()
            .filter(|(_, c)| c.pod_name() == pod && c.name() == container)
            .max_by_key(|(_, c)| c.seq)
            .map(|(id, _)| id.clone())
    }

    /// How many instances (any state) the container has in the runtime.
    pub(crate) fn container_count(&self, pod: &str, container: &str) -> usize {
        let inner = self.lock();
        inner
            .containers
            .values()
            .filter(|c| c.pod_name() == pod && c.name() == container)
            .count()
    }

    /// Sandboxes and containers left in the runtime.
    pub(crate) fn object_counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.sandboxes.len(), inner.containers.len())
    }

    /// The labels and annotations the container was created with.
    pub(crate) fn container_metadata(
        &self,
        id: &str,
    ) -> Option<(HashMap<String, String>, HashMap<String, String>)> {
        let inner = self.lock();
        let c = inner.containers.get(id)?;
        Some((c.config.labels.clone(), c.config.annotations.clone()))
    }

    /// The Linux resources the container was created with.
    pub(crate) fn container_resources(&self, id: &str) -> Option<cri::LinuxContainerResources> {
        let inner = self.lock();
        inner
            .containers
            .get(id)?
            .config
            .linux
            .as_ref()?
            .resources
            .clone()
    }

    /// Sets the sandbox image the verbose Status reports.
    #[cfg(test)]
    pub(crate) fn set_sandbox_image(&self, image: &str) {
        self.lock().sandbox_image = Some(image.to_string());
    }

    /// Sets the writable layer `ListContainerStats` reports for a container.
    pub(crate) fn set_writable_layer(&self, id: &str, bytes: u64, inodes: u64) {
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.writable_layer = Some((bytes, inodes));
        }
    }

    /// Sets the memory the container's stats report it using.
    pub(crate) fn set_memory_usage(&self, id: &str, bytes: u64) {
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.memory_usage = Some(bytes);
        }
    }

    /// The running container exits with `code` (reason "Completed" or "Error").
    pub(crate) fn exit_container(&self, id: &str, code: i32) {
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.exit(code, TerminatedReason::of_exit(code));
        }
    }

    /// The running container is OOM-killed (exit 137, reason OOMKilled).
    pub(crate) fn oom_kill(&self, id: &str) {
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.exit(OOM_EXIT_CODE, TerminatedReason::OomKilled);
        }
    }

    /// The runtime's OOM event for a container that already exited with 137: its reason
    /// becomes OOMKilled (containerd 2.x may publish `TaskOOM` after `TaskExit`).
    pub(crate) fn late_oom_event(&self, id: &str) {
        if let Some(c) = self.lock().containers.get_mut(id)
            && c.state == State::Exited
        {
            c.reason = TerminatedReason::OomKilled.as_str().to_string();
        }
    }

    /// What `ExecSync` in this container returns (default: exit 0, no output).
    pub(crate) fn set_exec_result(&self, id: &str, result: Result<ExecOutput, tonic::Code>) {
        self.lock().exec.insert(id.to_string(), result);
    }

    fn sandbox_status_of(id: &str, sb: &Sandbox) -> cri::PodSandboxStatus {
        cri::PodSandboxStatus {
            id: id.to_string(),
            metadata: sb.config.metadata.clone(),
            state: if sb.ready {
                cri::PodSandboxState::SandboxReady as i32
            } else {
                cri::PodSandboxState::SandboxNotready as i32
            },
            created_at: wall_ns(sb.created) + sb.seq as i64,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: sb.ip.clone(),
                ..Default::default()
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: sb
                        .config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|s| s.namespace_options.clone()),
                }),
            }),
            labels: sb.config.labels.clone(),
            annotations: sb.config.annotations.clone(),
            ..Default::default()
        }
    }

    fn container_status_of(id: &str, c: &Container) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: id.to_string(),
            metadata: c.config.metadata.clone(),
            state: c.cri_state(),
            created_at: wall_ns(c.created) + c.seq as i64,
            started_at: c.started.map_or(0, wall_ns),
            finished_at: c.finished.map_or(0, wall_ns),
            exit_code: c.exit_code,
            image: Some(c.image_spec()),
            image_ref: c.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: c.log_path.clone(),
            resources: c.config.linux.as_ref().map(|l| cri::ContainerResources {
                linux: l.resources.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

fn ready<T: Send + 'static>(res: Result<T, CriError>) -> CriFuture<'static, T> {
    Box::pin(std::future::ready(res))
}

impl CriRead for FakeRuntime {
    fn version(&self) -> CriFuture<'_, cri::VersionResponse> {
        let res = self.lock().enter("Version", String::new(), String::new());
        ready(res.map(|()| cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    fn status(&self) -> CriFuture<'_, cri::StatusResponse> {
        let res = self.lock().enter("Status", String::new(), String::new());
        // A healthy runtime: both of its conditions true.
        let ready_as = |kind: &str| cri::RuntimeCondition {
            r#type: kind.to_string(),
            status: true,
            ..Default::default()
        };
        ready(res.map(|()| cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![ready_as("RuntimeReady"), ready_as("NetworkReady")],
            }),
            ..Default::default()
        }))
    }

    fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> CriFuture<'_, Vec<ListedSandbox>> {
        let mut inner = self.lock();
        let res = inner.enter("ListPodSandbox", String::new(), String::new());
        let f = filter.unwrap_or_default();
        let items = inner
            .sandboxes
            .iter()
            .filter(|(id, s)| {
                (f.id.is_empty() || **id == f.id) && matches(&f.label_selector, &s.config.labels)
            })
            .map(|(id, s)| {
                let st = Self::sandbox_status_of(id, s);
                ListedSandbox {
                    id: id.clone(),
                    metadata: st.metadata,
                    state: st.state,
                    created_at: st.created_at,
                    labels: pairs_of(&st.labels),
                }
            })
            .filter(|s| f.state.as_ref().is_none_or(|w| w.state == s.state))
            .collect();
        ready(res.map(|()| items))
    }

    fn pod_sandbox_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::PodSandboxStatus> {
        let mut inner = self.lock();
        let pod = inner.sandbox_pod(id);
        let res = inner
            .enter("PodSandboxStatus", pod, String::new())
            .and_then(|()| {
                inner
                    .sandboxes
                    .get(id)
                    .map(|s| Self::sandbox_status_of(id, s))
                    .ok_or_else(|| not_found("PodSandboxStatus", "sandbox", id))
            });
        ready(res)
    }

    fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> CriFuture<'_, Vec<ListedContainer>> {
        let mut inner = self.lock();
        let res = inner.enter("ListContainers", String::new(), String::new());
        let f = filter.unwrap_or_default();
        let items = inner
            .containers
            .iter()
            .filter(|(id, c)| {
                selected((&f.id, &f.pod_sandbox_id, &f.label_selector), id, c)
                    && f.state.as_ref().is_none_or(|w| w.state == c.cri_state())
            })
            .map(|(id, c)| ListedContainer {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image_ref: c.image_ref.clone(),
                state: c.cri_state(),
                created_at: wall_ns(c.created) + c.seq as i64,
                labels: pairs_of(&c.config.labels),
                annotations: pairs_of(&c.config.annotations),
            })
            .collect();
        ready(res.map(|()| items))
    }

    fn container_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::ContainerStatus> {
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        let res = inner.enter("ContainerStatus", pod, name).and_then(|()| {
            inner
                .containers
                .get(id)
                .map(|c| Self::container_status_of(id, c))
                .ok_or_else(|| not_found("ContainerStatus", "container", id))
        });
        ready(res)
    }

    fn image_status<'a>(&'a self, image: &'a str) -> CriFuture<'a, Option<cri::Image>> {
        let mut inner = self.lock();
        let res = inner.enter("ImageStatus", String::new(), image.to_string());
        let found = inner.images.get(image).map(|id| cri::Image {
            id: id.clone(),
            repo_tags: vec![image.to_string()],
            ..Default::default()
        });
        ready(res.map(|()| found))
    }

    fn list_images(&self) -> CriFuture<'_, Vec<cri::Image>> {
        let mut inner = self.lock();
        let res = inner.enter("ListImages", String::new(), String::new());
        let mut by_id: BTreeMap<String, cri::Image> = BTreeMap::new();
        for (name, id) in &inner.images {
            let (size, pinned) = inner.image_meta.get(id).copied().unwrap_or_default();
            let img = by_id.entry(id.clone()).or_insert_with(|| cri::Image {
                id: id.clone(),
                size,
                pinned,
                ..Default::default()
            });
            img.repo_tags.push(name.clone());
        }
        ready(res.map(|()| by_id.into_values().collect()))
    }

    /// One image filesystem at `/`, whose inodes are the fake's images.
    fn sandbox_image(&self) -> CriFuture<'_, Option<String>> {
        let mut inner = self.lock();
        let res = inner.enter("Status", String::new(), String::new());
        let image = inner.sandbox_image.clone();
        ready(res.map(|()| image))
    }

    fn image_fs_info(&self) -> CriFuture<'_, Vec<cri::FilesystemUsage>> {
        let mut inner = self.lock();
        let res = inner.enter("ImageFsInfo", String::new(), String::new());
        let images = inner.images.len() as u64;
        ready(res.map(|()| {
            vec![cri::FilesystemUsage {
                fs_id: Some(cri::FilesystemIdentifier {
                    mountpoint: "/".into(),
                }),
                inodes_used: Some(cri::UInt64Value { value: images }),
                ..Default::default()
            }]
        }))
    }

    /// Each matching container with its writable layer when one was set
    /// ([`FakeRuntime::set_writable_layer`]).
    fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> CriFuture<'_, Vec<cri::ContainerStats>> {
        let mut inner = self.lock();
        let res = inner.enter("ListContainerStats", String::new(), String::new());
        let f = filter.unwrap_or_default();
        let items = inner
            .containers
            .iter()
            .filter(|(id, c)| selected((&f.id, &f.pod_sandbox_id, &f.label_selector), id, c))
            .map(|(id, c)| cri::ContainerStats {
                attributes: Some(cri::ContainerAttributes {
                    id: id.clone(),
                    metadata: c.config.metadata.clone(),
                    labels: c.config.labels.clone(),
                    annotations: c.config.annotations.clone(),
                }),
                writable_layer: c
                    .writable_layer
                    .map(|(bytes, inodes)| cri::FilesystemUsage {
                        fs_id: Some(cri::FilesystemIdentifier {
                            mountpoint: "/".into(),
                        }),
                        used_bytes: Some(cri::UInt64Value { value: bytes }),
                        inodes_used: Some(cri::UInt64Value { value: inodes }),
                        ..Default::default()
                    }),
                memory: c.memory_usage.map(|bytes| cri::MemoryUsage {
                    usage_bytes: Some(cri::UInt64Value { value: bytes }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        ready(res.map(|()| items))
    }

    fn container_events(&self) -> CriFuture<'_, ContainerEvents> {
        ready(self.open_event_stream())
    }
}

impl FakeRuntime {
    fn open_event_stream(&self) -> Result<ContainerEvents, CriError> {
        use futures::StreamExt as _;
        let mut inner = self.lock();
        inner.enter("GetContainerEvents", String::new(), String::new())?;
        if !inner.events_served {
            return Err(status(
                "GetContainerEvents",
                tonic::Code::Unimplemented,
                "method GetContainerEvents not implemented",
            ));
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        inner.event_subscribers.push(tx);
        let events = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(events.boxed())
    }
}

impl Cri for FakeRuntime {
    /// Like containerd: by ID or reference, and a missing image is no error.
    fn remove_image<'a>(&'a self, image: &'a str) -> CriFuture<'a, ()> {
        let mut inner = self.lock();
        let res = inner.enter("RemoveImage", String::new(), image.to_string());
        if res.is_ok() {
            let id = inner
                .images
                .get(image)
                .cloned()
                .unwrap_or_else(|| image.to_string());
            inner.images.retain(|_, v| *v != id);
            inner.image_meta.remove(&id);
        }
        ready(res)
    }

    fn run_pod_sandbox<'a>(
        &'a self,
        config: cri::PodSandboxConfig,
        _runtime_handler: &'a str,
    ) -> CriFuture<'a, String> {
        let mut inner = self.lock();
        let pod = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        if let Err(e) = inner.enter("RunPodSandbox", pod, String::new()) {
            return ready(Err(e));
        }
        let id = inner.new_id("sb");
        let seq = inner.next_id;
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == cri::NamespaceMode::Node as i32);
        let ip = if host_network {
            String::new()
        } else {
            format!(
                "10.88.{}.{}",
                (inner.next_id / 250) % 250,
                inner.next_id % 250 + 2
            )
        };
        inner.sandboxes.insert(
            id.clone(),
            Sandbox {
                config,
                ready: true,
                ip,
                created: Instant::now(),
                seq,
            },
        );
        ready(Ok(id))
    }

    /// Stopping a sandbox stops its containers too, as containerd does.
    fn stop_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        let mut inner = self.lock();
        let pod = inner.sandbox_pod(id);
        if let Err(e) = inner.enter("StopPodSandbox", pod, String::new()) {
            return ready(Err(e));
        }
        let Some(sb) = inner.sandboxes.get_mut(id) else {
            return ready(Err(not_found("StopPodSandbox", "sandbox", id)));
        };
        sb.ready = false;
        for c in inner.containers.values_mut().filter(|c| c.sandbox_id == id) {
            c.exit(STOPPED_EXIT_CODE, TerminatedReason::Error);
        }
        ready(Ok(()))
    }

    fn remove_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        let mut inner = self.lock();
        let pod = inner.sandbox_pod(id);
        if let Err(e) = inner.enter("RemovePodSandbox", pod, String::new()) {
            return ready(Err(e));
        }
        if inner.sandboxes.remove(id).is_none() {
            return ready(Err(not_found("RemovePodSandbox", "sandbox", id)));
        }
        inner.containers.retain(|_, c| c.sandbox_id != id);
        ready(Ok(()))
    }

    fn create_container<'a>(
        &'a self,
        sandbox_id: &'a str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriFuture<'a, String> {
        const CALL: &str = "CreateContainer";
        let mut inner = self.lock();
        let pod = inner.sandbox_pod(sandbox_id);
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        if let Err(e) = inner.enter(CALL, pod, name) {
            return ready(Err(e));
        }
        if !inner.sandboxes.get(sandbox_id).is_some_and(|s| s.ready) {
            return ready(Err(not_found(CALL, "ready sandbox", sandbox_id)));
        }
        // Like containerd: the config names an image by ID or reference; the status
        // shows its reference as `image` and its ID as `image_ref`.
        let asked = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let Some((image, image_ref)) = inner
            .images
            .iter()
            .find(|(name, id)| **id == asked || **name == asked)
            .map(|(name, id)| (name.clone(), id.clone()))
        else {
            return ready(Err(not_found(CALL, "image", &asked)));
        };
        let log_path = std::path::Path::new(&sandbox_config.log_directory)
            .join(&config.log_path)
            .to_string_lossy()
            .into_owned();
        // containerd creates the log file with the container; best effort here, as
        // tests without the pod's log directory need none.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path);
        let id = inner.new_id("c");
        let seq = inner.next_id;
        inner.containers.insert(
            id.clone(),
            Container {
                sandbox_id: sandbox_id.to_string(),
                config,
                log_path,
                image,
                image_ref,
                state: State::Created,
                created: Instant::now(),
                seq,
                started: None,
                finished: None,
                exit_code: 0,
                reason: String::new(),
                writable_layer: None,
                memory_usage: None,
            },
        );
        ready(Ok(id))
    }

    fn start_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        const CALL: &str = "StartContainer";
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter(CALL, pod, name) {
            return ready(Err(e));
        }
        let res = match inner.containers.get_mut(id) {
            None => Err(not_found(CALL, "container", id)),
            Some(c) if c.state != State::Created => Err(status(
                CALL,
                tonic::Code::FailedPrecondition,
                "container is not in created state",
            )),
            Some(c) => {
                c.state = State::Running;
                c.started = Some(Instant::now());
                Ok(())
            }
        };
        ready(res)
    }

    fn stop_container<'a>(&'a self, id: &'a str, _timeout_secs: i64) -> CriFuture<'a, ()> {
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter("StopContainer", pod, name) {
            return ready(Err(e));
        }
        let res = match inner.containers.get_mut(id) {
            None => Err(not_found("StopContainer", "container", id)),
            Some(c) => {
                c.exit(STOPPED_EXIT_CODE, TerminatedReason::Error);
                Ok(())
            }
        };
        ready(res)
    }

    fn remove_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter("RemoveContainer", pod, name) {
            return ready(Err(e));
        }
        let res = match inner.containers.remove(id) {
            None => Err(not_found("RemoveContainer", "container", id)),
            Some(_) => Ok(()),
        };
        ready(res)
    }

    /// As containerd 1.7 and 2.x: a created or running container takes the new
    /// resources (its status reports them from then on); an exited one refuses.
    fn update_container_resources<'a>(
        &'a self,
        id: &'a str,
        resources: cri::LinuxContainerResources,
    ) -> CriFuture<'a, ()> {
        const CALL: &str = "UpdateContainerResources";
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter(CALL, pod, name) {
            return ready(Err(e));
        }
        let res = match inner.containers.get_mut(id) {
            Some(c) if matches!(c.state, State::Running | State::Created) => {
                let linux = c.config.linux.get_or_insert_with(Default::default);
                linux.resources = Some(resources);
                Ok(())
            }
            Some(_) => Err(status(
                CALL,
                tonic::Code::FailedPrecondition,
                "container is not running",
            )),
            None => Err(not_found(CALL, "container", id)),
        };
        ready(res)
    }

    /// As containerd: only a running container's log is reopened, creating the file
    /// again at its log path when it was renamed away.
    fn reopen_container_log<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        const CALL: &str = "ReopenContainerLog";
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter(CALL, pod, name) {
            return ready(Err(e));
        }
        let res = match inner.containers.get(id) {
            Some(c) if c.state == State::Running => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&c.log_path)
                .map(drop)
                .map_err(|e| status(CALL, tonic::Code::Internal, e.to_string())),
            _ => Err(status(
                CALL,
                tonic::Code::FailedPrecondition,
                "container is not running",
            )),
        };
        ready(res)
    }

    fn pull_image<'a>(
        &'a self,
        image: &'a str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> CriFuture<'a, String> {
        let pod = sandbox_config
            .and_then(|c| c.metadata)
            .map(|m| m.name)
            .unwrap_or_default();
        let login = auth.map_or_else(String::new, |a| format!("{}:{}", a.username, a.password));
        let res = {
            let mut inner = self.lock();
            inner.pull_logins.push(login.clone());
            let refused = inner
                .registry_logins
                .get(image)
                .is_some_and(|wanted| *wanted != login);
            inner
                .enter("PullImage", pod, image.to_string())
                .and_then(|()| match refused {
                    true => Err(status(
                        "PullImage",
                        tonic::Code::Unknown,
                        format!("failed to resolve reference {image:?}: 401 Unauthorized"),
                    )),
                    false => Ok(()),
                })
        };
        if let Err(e) = res {
            return ready(Err(e));
        }
        Box::pin(async move {
            let delay = {
                let mut inner = self.lock();
                inner.pulls_in_flight += 1;
                inner.max_pulls_in_flight = inner.max_pulls_in_flight.max(inner.pulls_in_flight);
                inner.pull_delay
            };
            let _in_flight = PullInFlight(self);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            self.add_image(image);
            Ok(self.lock().images[image].clone())
        })
    }

    fn stream_url(&self, _req: super::api::StreamRequest) -> CriFuture<'_, String> {
        ready(Err(status(
            "Exec",
            tonic::Code::Unimplemented,
            "the fake runtime has no streaming server",
        )))
    }

    fn checkpoint_container<'a>(
        &'a self,
        _id: &'a str,
        _location: &'a str,
        _timeout: Option<Duration>,
    ) -> CriFuture<'a, ()> {
        ready(Err(status(
            "CheckpointContainer",
            tonic::Code::Unimplemented,
            "the fake runtime does not checkpoint",
        )))
    }

    fn exec_sync<'a>(
        &'a self,
        id: &'a str,
        _cmd: Vec<String>,
        timeout: Duration,
    ) -> CriFuture<'a, ExecOutput> {
        const CALL: &str = "ExecSync";
        let mut inner = self.lock();
        let (pod, name) = inner.container_subject(id);
        if let Err(e) = inner.enter(CALL, pod, name) {
            return ready(Err(e));
        }
        if !inner
            .containers
            .get(id)
            .is_some_and(|c| c.state == State::Running)
        {
            return ready(Err(not_found(CALL, "running container", id)));
        }
        match inner.exec.get(id).cloned() {
            None => ready(Ok(ExecOutput::default())),
            Some(Ok(out)) => ready(Ok(out)),
            // A command that does not finish: the runtime gives up at the timeout.
            Some(Err(tonic::Code::DeadlineExceeded)) => Box::pin(async move {
                tokio::time::sleep(timeout).await;
                Err(status(CALL, tonic::Code::DeadlineExceeded, "timeout"))
            }),
            Some(Err(code)) => ready(Err(status(CALL, code, "exec failed"))),
        }
    }
}

/// Pods and a runtime manager over a fake runtime, for the crate's unit tests.
#[cfg(test)]
pub(crate) mod support {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;

    use super::FakeRuntime;
    use crate::kuberuntime::RuntimeManager;
    use crate::kuberuntime::SandboxEnv;

    pub(crate) const IMAGE: &str = "localhost/oxlet-test/busybox:1";

    /// A pod `name` (UID `uid-<name>`) with the given init and app containers, all on
    /// [`IMAGE`], host network (so it needs no IP), grace 1 s.
    pub(crate) fn pod(name: &str, init: &[&str], containers: &[&str], restart: &str) -> Pod {
        let c = |n: &&str| {
            serde_json::json!({
                "name": n, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            })
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {
                "restartPolicy": restart,
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 1,
                "initContainers": init.iter().map(c).collect::<Vec<_>>(),
                "containers": containers.iter().map(c).collect::<Vec<_>>(),
            }
        }))
        .expect("valid test pod")
    }

    /// A fake runtime holding [`IMAGE`], a manager over it, and the temporary
    /// directories the manager writes pod and log directories to.
    pub(crate) struct FakeNode {
        pub fake: Arc<FakeRuntime>,
        pub manager: Arc<RuntimeManager>,
        pub dir: tempfile::TempDir,
    }

    impl FakeNode {
        pub(crate) fn new() -> Self {
            Self::with_events(crate::events::EventRecorder::log_only())
        }

        /// A node whose runtime manager records its events with `events`.
        pub(crate) fn with_events(events: crate::events::EventRecorder) -> Self {
            let fake = Arc::new(FakeRuntime::new());
            fake.add_image(IMAGE);
            let dir = tempfile::tempdir().expect("tempdir");
            let manager = Arc::new(Self::manager_over(&fake, &dir).with_events(events));
            FakeNode { fake, manager, dir }
        }

        /// Another manager over the same runtime and directories: a restarted agent.
        pub(crate) fn manager_over(
            fake: &Arc<FakeRuntime>,
            dir: &tempfile::TempDir,
        ) -> RuntimeManager {
            // The agent makes the pods directory at start.
            std::fs::create_dir_all(dir.path().join("pods")).unwrap();
            let env = SandboxEnv {
                pod_logs_dir: dir.path().join("logs"),
                dns: Default::default(),
                pods_dir: dir.path().join("pods"),
                cgroups: Arc::new(crate::contracts::RuntimeDefaultCgroups),
                node_memory_bytes: 1 << 30,
                min_oom_score_adj: -999,
                memory: Default::default(),
                cfs_period_us: Some(100_000),
                security: Default::default(),
                allocatable: Default::default(),
            };
            // The actuated resources in the node's directory, read back by the next manager.
            let actuated = crate::allocation::ResourceState::open(
                dir.path(),
                crate::allocation::ACTUATED_STATE_FILE,
            )
            .expect("actuated state");
            RuntimeManager::new(fake.clone(), env, "192.0.2.10".into())
                .with_actuated(Arc::new(actuated))
        }

        /// One sync of `pod` against a fresh read of the runtime.
        pub(crate) async fn sync(
            &self,
            pod: &Pod,
        ) -> Result<crate::kuberuntime::SyncOutcome, crate::kuberuntime::SyncError> {
            let status = self
                .manager
                .get_pod_status(
                    pod.metadata.uid.as_deref().unwrap(),
                    pod.metadata.name.as_deref().unwrap(),
                    "default",
                )
                .await?;
            self.manager.sync_pod(pod, &status).await
        }
    }
}
