//! The object managers against a fake source (a map and a counter) and a fake clock.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapProjection, Container, EnvFromSource, PodSpec,
    ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;

#[derive(Default)]
struct Fake {
    config_maps: Mutex<HashMap<String, ConfigMap>>,
    gets: AtomicUsize,
    tokens: AtomicUsize,
    now: Mutex<Option<SystemTime>>,
}

impl ObjectSource for Fake {
    fn config_map<'a>(&'a self, _: &'a str, name: &'a str) -> ObjectFuture<'a, Option<ConfigMap>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let got = self.config_maps.lock().unwrap().get(name).cloned();
        Box::pin(async move { Ok(got) })
    }
    fn secret<'a>(&'a self, _: &'a str, _: &'a str) -> ObjectFuture<'a, Option<Secret>> {
        Box::pin(async { Ok(None) })
    }
    fn claim<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> ObjectFuture<'a, Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>> {
        Box::pin(async { Ok(None) })
    }
    fn volume<'a>(
        &'a self,
        _: &'a str,
    ) -> ObjectFuture<'a, Option<k8s_openapi::api::core::v1::PersistentVolume>> {
        Box::pin(async { Ok(None) })
    }
    fn node<'a>(
        &'a self,
        _: &'a str,
    ) -> ObjectFuture<'a, Option<k8s_openapi::api::core::v1::Node>> {
        Box::pin(async { Ok(None) })
    }
    fn runtime_class<'a>(
        &'a self,
        name: &'a str,
    ) -> ObjectFuture<'a, Option<k8s_openapi::api::node::v1::RuntimeClass>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let found = (name == "gvisor").then(|| k8s_openapi::api::node::v1::RuntimeClass {
            handler: "runsc".into(),
            ..Default::default()
        });
        Box::pin(async move { Ok(found) })
    }
    fn service_account<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> ObjectFuture<'a, Option<ServiceAccount>> {
        Box::pin(async { Ok(None) })
    }
    fn token<'a>(
        &'a self,
        _: &'a str,
        sa: &'a str,
        r: &'a TokenRequest,
    ) -> ObjectFuture<'a, TokenRequest> {
        let n = self.tokens.fetch_add(1, Ordering::SeqCst);
        let now = self.now.lock().unwrap().unwrap();
        let secs = r.spec.as_ref().unwrap().expiration_seconds.unwrap();
        let mut out = r.clone();
        out.status = Some(TokenRequestStatus {
            token: Some(format!("{sa}-{n}")),
            expiration_timestamp: Some(Time(
                jiff::Timestamp::try_from(now + Duration::from_secs(secs as u64)).unwrap(),
            )),
        });
        Box::pin(async move { Ok(out) })
    }
}

fn cm(data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    }
}

fn pod(uid: &str, cms: &[&str], token: bool) -> Pod {
    let mut sources: Vec<VolumeProjection> = cms
        .iter()
        .map(|n| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: n.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    if token {
        sources.push(VolumeProjection {
            service_account_token: Some(ServiceAccountTokenProjection {
                path: "token".into(),
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                env_from: Some(vec![EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "env".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "v".into(),
                projected: Some(ProjectedVolumeSource {
                    sources: Some(sources),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn manager(fake: &Arc<Fake>, start: SystemTime) -> (ObjectManager, Arc<Mutex<SystemTime>>) {
    *fake.now.lock().unwrap() = Some(start);
    let now = Arc::new(Mutex::new(start));
    let n = now.clone();
    let clock: Clock = Arc::new(move || *n.lock().unwrap());
    (
        ObjectManager::with_clock(fake.clone(), clock, Duration::from_secs(5)),
        now,
    )
}

#[tokio::test]
async fn objects_are_cached_for_the_ttl_and_missing_ones_say_so() {
    let fake = Arc::new(Fake::default());
    fake.config_maps
        .lock()
        .unwrap()
        .insert("a".into(), cm(&[("k", "1")]));
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let (m, now) = manager(&fake, t0);
    let p = pod("u1", &["a", "missing"], false);
    let got = m.resolve(&p).await;
    let a = PodObjects::config_map(Some(&got), "ns", "a", false)
        .unwrap()
        .unwrap();
    assert_eq!(a.data.as_ref().unwrap()["k"], "1");
    let err = PodObjects::config_map(Some(&got), "ns", "missing", false).unwrap_err();
    assert_eq!(err.to_string(), "configmaps \"missing\" not found");
    assert_eq!(
        PodObjects::config_map(Some(&got), "ns", "missing", true).unwrap(),
        None
    );
    // "env" (envFrom, optional) is fetched too: three objects.
    assert_eq!(fake.gets.load(Ordering::SeqCst), 3);
    fake.config_maps
        .lock()
        .unwrap()
        .insert("a".into(), cm(&[("k", "2")]));
    m.resolve(&p).await;
    assert_eq!(fake.gets.load(Ordering::SeqCst), 3, "served from the cache");
    *now.lock().unwrap() = t0 + Duration::from_secs(5);
    let got = m.resolve(&p).await;
    assert_eq!(
        fake.gets.load(Ordering::SeqCst),
        6,
        "refetched after the TTL"
    );
    let a = PodObjects::config_map(Some(&got), "ns", "a", false)
        .unwrap()
        .unwrap();
    assert_eq!(a.data.as_ref().unwrap()["k"], "2");
    // Without an apiserver: kubelet's message.
    let err = PodObjects::config_map(None, "ns", "a", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "couldn't get configMap ns/a, no kubeClient defined"
    );
}

#[tokio::test]
async fn cache_entries_go_with_the_last_pod_that_references_them() {
    let fake = Arc::new(Fake::default());
    let (m, _) = manager(&fake, SystemTime::UNIX_EPOCH + Duration::from_secs(10));
    m.resolve(&pod("u1", &["a", "b"], false)).await;
    m.resolve(&pod("u2", &["b"], false)).await;
    assert_eq!(m.cached_len(), 3); // a, b, env
    m.forget_pod("u1");
    assert_eq!(m.cached_len(), 2); // b, env (u2)
    m.forget_pod("u2");
    assert_eq!(m.cached_len(), 0);
}

#[tokio::test]
async fn oversized_objects_are_refused() {
    let fake = Arc::new(Fake::default());
    let big = "x".repeat(MAX_OBJECT_BYTES);
    fake.config_maps
        .lock()
        .unwrap()
        .insert("big".into(), cm(&[("k", &big)]));
    let (m, _) = manager(&fake, SystemTime::UNIX_EPOCH + Duration::from_secs(10));
    let got = m.resolve(&pod("u1", &["big"], false)).await;
    let err = PodObjects::config_map(Some(&got), "ns", "big", false).unwrap_err();
    assert!(matches!(err, ObjectError::TooLarge { .. }), "{err}");
}

#[tokio::test]
async fn tokens_are_bound_to_the_pod_and_rotated_at_eighty_percent() {
    let fake = Arc::new(Fake::default());
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let (m, now) = manager(&fake, t0);
    let p = pod("u1", &[], true);
    let want = TokenWant {
        audience: None,
        expiration_seconds: 3600,
    };
    let tok = |o: &PodObjects| o.tokens[&want].clone().unwrap();
    assert_eq!(tok(&m.resolve(&p).await), "default-0");
    *now.lock().unwrap() = t0 + Duration::from_secs(2880);
    assert_eq!(tok(&m.resolve(&p).await), "default-0", "not yet at 80 %");
    *now.lock().unwrap() = t0 + Duration::from_secs(2881);
    *fake.now.lock().unwrap() = Some(t0 + Duration::from_secs(2881));
    assert_eq!(tok(&m.resolve(&p).await), "default-1", "rotated");
    // Another pod gets its own token (bound to it).
    assert_eq!(tok(&m.resolve(&pod("u2", &[], true)).await), "default-2");
    let r = token::bound_request(&p, &want);
    let b = r.spec.unwrap().bound_object_ref.unwrap();
    assert_eq!(
        (b.kind.as_deref(), b.uid.as_deref()),
        (Some("Pod"), Some("u1"))
    );
}

#[tokio::test]
async fn the_pods_runtime_class_is_read_cached_and_a_missing_one_says_so() {
    let fake = Arc::new(Fake::default());
    let (m, _) = manager(&fake, SystemTime::UNIX_EPOCH + Duration::from_secs(10));
    let with_class = |uid: &str, class: &str| {
        let mut p = pod(uid, &[], false);
        p.spec.as_mut().unwrap().runtime_class_name = Some(class.into());
        p
    };
    let before = fake.gets.load(Ordering::SeqCst);
    let got = m.resolve(&with_class("u1", "gvisor")).await;
    let class = got.runtime_class.unwrap().unwrap();
    assert_eq!(class.handler, "runsc");
    assert_eq!(m.cached_runtime_class("gvisor").unwrap().handler, "runsc");
    m.resolve(&with_class("u2", "gvisor")).await;
    // One fetch of the class for both pods (the rest is the pods' optional "env").
    let class_gets = fake.gets.load(Ordering::SeqCst) - before;
    assert_eq!(class_gets, 1 + 1, "env once, the class once");
    let err = m
        .resolve(&with_class("u3", "kata"))
        .await
        .runtime_class
        .unwrap()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "runtimeclasses.node.k8s.io \"kata\" not found"
    );
    assert!(m.cached_runtime_class("kata").is_none());
    let none = m.resolve(&pod("u4", &[], false)).await;
    assert!(none.runtime_class.is_none());
}
