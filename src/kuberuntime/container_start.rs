//! kubelet's `kuberuntime_container.go`, its start half: `startSpec` and
//! `startContainer` (the image, the container config with what the resource managers
//! grant, `CreateContainer`, `StartContainer`, the legacy log symlink, the postStart
//! hook). The CRI config itself is built in `container.rs`; the back-off check and
//! SyncPod's start steps are in `container_start_steps.rs`.

use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use tracing::{info, warn};

use super::container::{self, ContainerRequest, PodEnv};
use super::container_kill::{stop_plan, termination_grace};
use super::errors::ContainerStartError;
use super::labels::ContainerType;
use super::lifecycle;
use super::manager::RuntimeManager;
use super::termination;
use super::types::{ContainerState, PodRuntimeStatus};
use crate::events::EventType::{Normal, Warning};
use crate::events::{ObjectRef, reason};
use crate::images::{ImageError, runtime_reason};
use crate::pod::{WaitingReason, pod_ref, pod_uid};
use crate::podenv::ImageUser;

/// What every container started in one sync shares, as kubelet hands it to each
/// `startContainer`: the pod, its runtime status, its sandbox and its environment.
pub(super) struct StartContext<'a> {
    pub(super) pod: &'a Pod,
    pub(super) status: &'a PodRuntimeStatus,
    pub(super) sandbox_id: &'a str,
    pub(super) sandbox_config: &'a cri::PodSandboxConfig,
    pub(super) env: &'a PodEnv,
    /// The pod's `imagePullSecrets` that could be fetched.
    pub(super) pull_secrets: &'a [Arc<Secret>],
}

/// One container being started (kubelet's `startSpec`, with its sync's context): the
/// names its logs, metrics and waiting reason go under.
pub(super) struct ContainerStart<'a> {
    pub(super) ctx: &'a StartContext<'a>,
    pub(super) container: &'a Container,
    pub(super) kind: ContainerType,
    pub(super) pod_ref: String,
    pub(super) uid: &'a str,
    pub(super) name: &'a str,
    /// An ephemeral container's `targetContainerName`, whose process namespace it joins.
    pub(super) target: Option<&'a str>,
}

impl<'a> ContainerStart<'a> {
    pub(super) fn new(
        ctx: &'a StartContext<'a>,
        container: &'a Container,
        kind: ContainerType,
    ) -> Self {
        ContainerStart {
            ctx,
            container,
            kind,
            pod_ref: pod_ref(ctx.pod),
            uid: pod_uid(ctx.pod),
            name: &container.name,
            target: None,
        }
    }

    /// The container type label of kubelet's start metrics.
    fn metric_type(&self) -> &'static str {
        match self.kind {
            ContainerType::Init => "init_container",
            ContainerType::Regular => "container",
            ContainerType::Ephemeral => "ephemeral_container",
        }
    }

    /// kubelet's start failures by reason (a bounded set of codes).
    fn count_failure(&self, reason: WaitingReason) {
        crate::metrics::kubelet()
            .started_containers_errors
            .with_label_values(&[self.metric_type(), reason.as_str()])
            .inc();
    }
}

/// The image volumes container `c` mounts, each as a container whose image and pull
/// policy are the volume's (`volumes[].image.reference`, `pullPolicy`), so the one
/// image puller pulls it; the container's own name keeps its events and back-off.
fn image_volume_pulls(pod: &Pod, c: &Container) -> Vec<(String, Container)> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut out = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        let image = (volumes.unwrap_or_default().iter())
            .find(|v| v.name == vm.name)
            .and_then(|v| v.image.as_ref());
        let Some(image) = image else { continue };
        if out.iter().any(|(name, _)| *name == vm.name) {
            continue;
        }
        let as_container = Container {
            name: c.name.clone(),
            image: image.reference.clone(),
            image_pull_policy: image.pull_policy.clone(),
            ..Default::default()
        };
        out.push((vm.name.clone(), as_container));
    }
    out
}

impl RuntimeManager {
    /// Starts one container with kubelet's `startContainer` steps: back-off check,
    /// image, config, create, start, postStart hook. Ok(Some(d)) means "in back-off,
    /// retry after d"; Err is a real failure (already in the reason cache).
    pub(super) async fn start_container(
        &self,
        ctx: &StartContext<'_>,
        c: &Container,
        kind: ContainerType,
    ) -> Result<Option<Duration>, ContainerStartError> {
        self.start_one(ContainerStart::new(ctx, c, kind)).await
    }

    /// [`Self::start_container`] for a start already described.
    pub(super) async fn start_one(
        &self,
        s: ContainerStart<'_>,
    ) -> Result<Option<Duration>, ContainerStartError> {
        let (ctx, c) = (s.ctx, s.container);
        let pod = ctx.pod;
        if let Some(left) = self.do_back_off(&s) {
            return Ok(Some(left));
        }
        // kubelet counts a start attempt once it passed the back-off check.
        crate::metrics::kubelet()
            .started_containers
            .with_label_values(&[s.metric_type()])
            .inc();

        // Step 1: pull the image (kubelet's EnsureImageExists).
        let secrets: Vec<&Secret> = ctx.pull_secrets.iter().map(AsRef::as_ref).collect();
        let image_ref = match self
            .images
            .ensure_image(self.cri.as_ref(), pod, c, ctx.sandbox_config, &secrets)
            .await
        {
            Ok(r) => r,
            Err(e) => return self.image_not_ready(&s, e),
        };
        // And the image volumes it mounts (kubelet's getImageVolumes): each pulled with
        // its own policy and the pod's pull secrets; a failure is this container's.
        let mut image_volumes = std::collections::HashMap::new();
        for (volume, as_container) in image_volume_pulls(pod, c) {
            match (self.images)
                .ensure_image(
                    self.cri.as_ref(),
                    pod,
                    &as_container,
                    ctx.sandbox_config,
                    &secrets,
                )
                .await
            {
                Ok(r) => image_volumes.insert(volume, r),
                Err(e) => return self.image_not_ready(&s, e),
            };
        }

        // Step 2: create the container.
        let (mut config, restart_count) =
            (self.generate_container_config(&s, &image_ref, image_volumes)).await?;
        self.hooks.pre_create(pod, c, &mut config);
        let log_path =
            std::path::PathBuf::from(&ctx.sandbox_config.log_directory).join(&config.log_path);
        let id = self.create_container(&s, config, restart_count).await?;
        if let Some(grants) = &self.grants {
            grants.container_created(pod, s.name, &id);
        }
        self.hooks.pre_start(pod, c, &id);

        // Step 3: start the container.
        self.start_created_container(&s, &id).await?;
        self.link_container_log(pod, s.name, &id, &log_path);

        // Step 4: run the postStart hook, if there is one.
        self.run_post_start_hook(&s, &id).await?;
        self.reasons.clear(s.uid, s.name);
        // kubelet's SetActuatedResources: what it was started with is what it runs with.
        if s.kind != ContainerType::Ephemeral
            && crate::allocation::is_resizable(c, s.kind == ContainerType::Init)
        {
            let given = c.resources.clone().unwrap_or_default();
            super::resize::record(self.actuated.as_deref(), pod, s.name, given);
            // The pod cgroup was made from the same pod.
            if self
                .actuated
                .as_ref()
                .and_then(|a| a.pod(s.uid))
                .is_none_or(|p| p.pod_level.is_none())
            {
                self.record_pod_level(pod);
            }
        }
        Ok(None)
    }

    /// Records why the container waits (and counts the failure), and returns that as
    /// the error.
    fn start_failed(
        &self,
        s: &ContainerStart<'_>,
        reason: WaitingReason,
        message: String,
    ) -> ContainerStartError {
        s.count_failure(reason);
        self.reasons.set(s.uid, s.name, reason, message.clone());
        ContainerStartError {
            container: s.name.to_string(),
            reason,
            message,
        }
    }

    /// The image is not there: in back-off (a waiting reason, retried when it ends) or
    /// failed to pull (a start failure).
    fn image_not_ready(
        &self,
        s: &ContainerStart<'_>,
        e: ImageError,
    ) -> Result<Option<Duration>, ContainerStartError> {
        match e.retry_after {
            Some(retry) => {
                s.count_failure(e.reason);
                self.reasons.set(s.uid, s.name, e.reason, e.message);
                Ok(Some(retry))
            }
            None => Err(self.start_failed(s, e.reason, e.message)),
        }
    }

    /// Bad paths or volumes: the container cannot be configured (kubelet's reason,
    /// and startContainer's Warning `Failed` event on the container).
    fn config_error(
        &self,
        s: &ContainerStart<'_>,
        e: &dyn std::fmt::Display,
    ) -> ContainerStartError {
        warn!(pod = %s.pod_ref, podUID = %s.uid, container = s.name, error = %e, "invalid container configuration");
        (self.events).event(
            &ObjectRef::container(s.ctx.pod, s.name),
            Warning,
            reason::FAILED,
            format!("Error: {e}"),
        );
        self.start_failed(s, WaitingReason::CreateContainerConfigError, e.to_string())
    }

    /// kubelet's `generateContainerConfig`: the restart count, log directory, env,
    /// mounts and image user that make the CRI container config.
    async fn generate_container_config(
        &self,
        s: &ContainerStart<'_>,
        image_ref: &str,
        image_volumes: std::collections::HashMap<String, String>,
    ) -> Result<(cri::ContainerConfig, i32), ContainerStartError> {
        let (pod, c, env, uid, name) = (s.ctx.pod, s.container, s.ctx.env, s.uid, s.name);
        // kubelet's getTargetID: the target must be running, its ID names the namespace.
        let pid_target = match s.target {
            None => None,
            Some(t) => match s.ctx.status.latest(t) {
                Some(r) if r.state == ContainerState::Running => Some(r.id.as_str()),
                _ => {
                    let e = format!("unable to find target container {t}");
                    return Err(self.config_error(s, &e));
                }
            },
        };
        let pod_log_dir = std::path::PathBuf::from(&s.ctx.sandbox_config.log_directory);
        let log_dir = match container::container_log_dir(&pod_log_dir, name) {
            Ok(d) => d,
            Err(e) => return Err(self.config_error(s, &e)),
        };
        let restart_count = match s.ctx.status.latest(name) {
            Some(st) => st.restart_count + 1,
            None => container::restart_count_from_logs(&log_dir),
        };
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            warn!(pod = %s.pod_ref, podUID = %uid, container = name, error = %e, "cannot create container log directory");
        }
        let envs = match container::environment(pod, c, env) {
            Ok(envs) => envs,
            Err(e) => return Err(self.config_error(s, &e)),
        };
        let mut mounts = match crate::volumes::container_mounts(
            pod,
            c,
            &self.sandbox_env.pods_dir,
            &envs,
            env.objects.as_deref(),
            &self.sandbox_env.allocatable,
            &crate::volumes::MountFeatures {
                supports_rro: self.supports_recursive_read_only(pod),
                image_volumes,
            },
        ) {
            Ok(m) => m,
            Err(e) => return Err(self.config_error(s, &e)),
        };
        match termination::message_mount(&self.sandbox_env.pods_dir, uid, c, restart_count) {
            Ok(m) => mounts.extend(m),
            Err(e) => return Err(self.config_error(s, &e)),
        }
        // kubelet's getImageUser: runAsNonRoot is checked against the image's user.
        let image_user = match self.cri.image_status(image_ref).await {
            Ok(image) => ImageUser::of(image.as_ref()),
            Err(e) => return Err(self.config_error(s, &e)),
        };
        match crate::podenv::hosts_mount(
            pod,
            c,
            &self.sandbox_env.pods_dir,
            &env.pod_ips,
            &self.sandbox_env.dns.cluster_domain,
            std::path::Path::new(crate::podenv::NODE_HOSTS),
        ) {
            Ok(m) => mounts.extend(m),
            Err(e) => return Err(self.config_error(s, &e)),
        }
        let config = match container::container_config(&ContainerRequest {
            pod,
            container: c,
            kind: s.kind,
            restart_count,
            image_ref,
            env,
            mounts,
            oom_score_adj: crate::cm::clamp_oom_score_adj(
                crate::cm::container_oom_score_adj(pod, c, self.sandbox_env.node_memory_bytes),
                self.sandbox_env.min_oom_score_adj,
            ),
            cfs_period_us: self.sandbox_env.cfs_period_us,
            memory: &self.sandbox_env.memory,
            image_user: &image_user,
            security: &self.sandbox_env.security,
            pid_target,
            userns: (s.ctx.sandbox_config.linux.as_ref())
                .and_then(|l| l.security_context.as_ref())
                .and_then(|sc| sc.namespace_options.as_ref())
                .and_then(|ns| ns.userns_options.as_ref()),
        }) {
            Ok(c) => c,
            Err(e) => return Err(self.config_error(s, &e)),
        };
        let mut config = config;
        if let Some(grants) = &self.grants {
            match grants.container_grants(pod, c).await {
                Ok(g) => super::grants::apply(&mut config, g),
                Err(e) => return Err(self.config_error(s, &e)),
            }
        }
        Ok((config, restart_count))
    }

    /// startContainer's CreateContainer call, with its `Failed` or `Created` event;
    /// returns the new container's ID.
    async fn create_container(
        &self,
        s: &ContainerStart<'_>,
        config: cri::ContainerConfig,
        restart_count: i32,
    ) -> Result<String, ContainerStartError> {
        let (pod, uid, name) = (s.ctx.pod, s.uid, s.name);
        let id = match self
            .cri
            .create_container(s.ctx.sandbox_id, config, s.ctx.sandbox_config.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                warn!(pod = %s.pod_ref, podUID = %uid, container = name, error = %e, "failed to create container");
                (self.events).event(
                    &ObjectRef::container(pod, name),
                    Warning,
                    reason::FAILED,
                    format!("Error: {}", runtime_reason(&e)),
                );
                return Err(self.start_failed(
                    s,
                    WaitingReason::CreateContainerError,
                    e.to_string(),
                ));
            }
        };
        info!(pod = %s.pod_ref, podUID = %uid, container = name, containerID = %id, restartCount = restart_count, "created container");
        (self.events).event(
            &ObjectRef::container(pod, name),
            Normal,
            reason::CREATED,
            format!("Created container: {name}"),
        );
        Ok(id)
    }

    /// startContainer's StartContainer call, with its `Failed` or `Started` event.
    async fn start_created_container(
        &self,
        s: &ContainerStart<'_>,
        id: &str,
    ) -> Result<(), ContainerStartError> {
        let (uid, name) = (s.uid, s.name);
        let container_ref = ObjectRef::container(s.ctx.pod, name);
        if let Err(e) = self.cri.start_container(id).await {
            warn!(pod = %s.pod_ref, podUID = %uid, container = name, containerID = %id, error = %e, "failed to start container");
            (self.events).event(
                &container_ref,
                Warning,
                reason::FAILED,
                format!("Error: {}", runtime_reason(&e)),
            );
            return Err(self.start_failed(s, WaitingReason::RunContainerError, e.to_string()));
        }
        info!(pod = %s.pod_ref, podUID = %uid, container = name, containerID = %id, "started container");
        (self.events).event(
            &container_ref,
            Normal,
            reason::STARTED,
            format!("Started container {name}"),
        );
        Ok(())
    }

    /// startContainer's step 4: runs the container's postStart hook, if it has one; a
    /// hook that fails kills the container (kubelet's `FailedPostStartHook`).
    async fn run_post_start_hook(
        &self,
        s: &ContainerStart<'_>,
        id: &str,
    ) -> Result<(), ContainerStartError> {
        let (pod, c, uid, name) = (s.ctx.pod, s.container, s.uid, s.name);
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return Ok(());
        };
        let pod_ref = &s.pod_ref;
        let container_ref = ObjectRef::container(pod, name);
        let target = lifecycle::HookTarget {
            pod_ip: s.ctx.env.pod_ips.first().cloned().unwrap_or_default(),
        };
        info!(pod = %pod_ref, podUID = %uid, container = name, containerID = %id, "running postStart hook");
        let run =
            lifecycle::run_handler(self.cri.as_ref(), id, pod, c, hook, &target, Duration::ZERO);
        if let Err(e) = run.await {
            let msg = e.to_string();
            warn!(pod = %pod_ref, podUID = %uid, container = name, containerID = %id, event = "FailedPostStartHook", error = %msg, "postStart hook failed, killing the container");
            (self.events).event(
                &container_ref,
                Warning,
                reason::FAILED_POST_START_HOOK,
                msg.clone(),
            );
            (self.events).event(
                &container_ref,
                Normal,
                reason::KILLING,
                "FailedPostStartHook",
            );
            let grace = termination_grace(pod);
            let plan = stop_plan(pod, id, name, grace);
            info!(pod = %pod_ref, podUID = %uid, container = name, containerID = %id, reason = "FailedPostStartHook", gracePeriod = grace, "killing container");
            if let Err(e) = self.stop_with_hooks(pod, &plan, &target, None).await {
                warn!(pod = %pod_ref, podUID = %uid, container = name, containerID = %id, error = %e, "failed to kill container after its postStart hook failed");
            }
            return Err(self.start_failed(s, WaitingReason::PostStartHookError, msg));
        }
        info!(pod = %pod_ref, podUID = %uid, container = name, containerID = %id, "postStart hook completed");
        Ok(())
    }

    /// Links the started container's log from the legacy symlink dir; a failure is
    /// only logged, as in kubelet.
    fn link_container_log(&self, pod: &Pod, name: &str, id: &str, log: &std::path::Path) {
        let Some(dir) = &self.log_symlink_dir else {
            return;
        };
        let of = crate::logs::LinkOf {
            pod: pod.metadata.name.as_deref().unwrap_or_default(),
            namespace: pod.metadata.namespace.as_deref().unwrap_or("default"),
            container: name,
            id,
        };
        if let Err(e) = crate::logs::create_log_link(dir, self.pod_logs_dir(), of, log) {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = name, containerID = %id, error = %e, "failed to create legacy container log symlink");
        }
    }
}
