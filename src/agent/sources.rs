//! The pod sources: the static pod directory, the manifest URL and, in cluster mode,
//! the apiserver, each sending snapshots to the merger, whose updates feed the sync loop.

use tokio::sync::mpsc;

use crate::config::{
    PodConfig, PodUpdate, SourceSnapshot, UrlSource, run_api_source, run_file_source,
    run_http_source, run_merger,
};
use crate::kubeclient::ApiClients;
use crate::options::Options;
use crate::pod::{API_SOURCE, FILE_SOURCE, HTTP_SOURCE};
use crate::tasks::{Backoff, Tasks};

/// The merged pod updates, and every configured source (housekeeping waits until
/// each has reported).
pub(super) struct Sources {
    pub updates: mpsc::Receiver<PodUpdate>,
    pub names: Vec<&'static str>,
}

/// Sources → merger → sync loop. A source is restarted if it ends; the merger and
/// the sync loop own their channels and cannot be, so their end stops the agent.
pub(super) fn start(opts: &Options, api: Option<&ApiClients>, tasks: &Tasks) -> Sources {
    let mut names = Vec::new();
    let (snap_tx, snap_rx) = mpsc::channel(16);
    spawn_file_source(opts, &snap_tx, &mut names, tasks);
    spawn_http_source(opts, &snap_tx, &mut names, tasks);
    spawn_api_source(opts, api, &snap_tx, &mut names, tasks);
    drop(snap_tx);
    let updates = spawn_merger(snap_rx, &names, tasks);
    Sources { updates, names }
}

/// The static pod directory (`--pod-manifest-path`), when given.
fn spawn_file_source(
    opts: &Options,
    snapshots: &mpsc::Sender<SourceSnapshot>,
    sources: &mut Vec<&'static str>,
    tasks: &Tasks,
) {
    let Some(path) = opts.sources.static_pod_path.clone() else {
        return;
    };
    sources.push(FILE_SOURCE);
    let (freq, node, tx) = (
        opts.sources.file_check_frequency,
        opts.node.name.clone(),
        snapshots.clone(),
    );
    tasks.spawn_restarting("file-source", Backoff::default(), move |cancel| {
        let source = run_file_source(path.clone(), freq, node.clone(), tx.clone(), cancel);
        async move {
            source.await;
            Ok(())
        }
    });
}

/// The manifest URL (`--manifest-url`), polled, when given.
fn spawn_http_source(
    opts: &Options,
    snapshots: &mpsc::Sender<SourceSnapshot>,
    sources: &mut Vec<&'static str>,
    tasks: &Tasks,
) {
    let Some(url) = opts.sources.manifest_url.clone() else {
        return;
    };
    sources.push(HTTP_SOURCE);
    let (freq, headers, node, tx) = (
        opts.sources.http_check_frequency,
        opts.sources.manifest_url_header.clone(),
        opts.node.name.clone(),
        snapshots.clone(),
    );
    tasks.spawn_restarting("http-source", Backoff::default(), move |cancel| {
        let source = UrlSource::new(url.clone(), headers.clone(), node.clone());
        let run = run_http_source(source, freq, tx.clone(), cancel);
        async move {
            run.await;
            Ok(())
        }
    });
}

/// The apiserver pod source (cluster mode only): its first list is part of
/// sources-ready, so housekeeping never kills pods the apiserver still wants.
fn spawn_api_source(
    opts: &Options,
    api: Option<&ApiClients>,
    snapshots: &mpsc::Sender<SourceSnapshot>,
    sources: &mut Vec<&'static str>,
    tasks: &Tasks,
) {
    let Some(api) = api else { return };
    sources.push(API_SOURCE);
    let (client, node, tx) = (api.main.clone(), opts.node.name.clone(), snapshots.clone());
    tasks.spawn_restarting("api-source", Backoff::default(), move |cancel| {
        let run = run_api_source(client.clone(), node.clone(), tx.clone(), cancel);
        async move {
            run.await;
            Ok(())
        }
    });
}

/// The merger, a critical task: it turns the sources' snapshots into the pod updates
/// the sync loop reads.
fn spawn_merger(
    snapshots: mpsc::Receiver<SourceSnapshot>,
    sources: &[&'static str],
    tasks: &Tasks,
) -> mpsc::Receiver<PodUpdate> {
    let (update_tx, update_rx) = mpsc::channel(50);
    let config = PodConfig::default();
    let no_sources = sources.is_empty();
    tasks.spawn_critical("config-merger", move |cancel| async move {
        // With no source the merger has nothing to do; the channel stays open so the
        // sync loop (housekeeping, resyncs) runs on, as kubelet's does.
        let open = no_sources.then(|| update_tx.clone());
        run_merger(config, snapshots, update_tx).await;
        if open.is_some() {
            cancel.cancelled().await;
        }
        Ok(())
    });
    update_rx
}
