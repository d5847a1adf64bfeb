//! The manager against the fake logind and a fake pod terminator, in paused time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fake::FakeLogind;
use super::groups::PriorityGrace;
use super::manager::{Manager, ManagerDeps, SHUTDOWN_MESSAGE, SHUTDOWN_REASON};
use super::{ShutdownAdmission, from_settings};
use crate::contracts::{
    NodeShutdownState, PodAdmitAttributes, PodAdmitHandler, PodTerminator, Termination,
};
use crate::events::EventRecorder;

/// Pods that stop `takes` after their kill, or at their grace if that is sooner (a pod
/// that ignores SIGTERM is killed then).
#[derive(Default)]
struct FakePods {
    pods: Vec<Arc<Pod>>,
    takes: HashMap<String, Duration>,
    /// (name, grace, when) of each kill.
    kills: Mutex<Vec<(String, i64, Instant)>>,
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

impl FakePods {
    fn add(&mut self, n: &str, priority: Option<i32>, grace: Option<i64>, takes: Duration) {
        self.pods.push(Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(n.into()),
                namespace: Some("default".into()),
                uid: Some(n.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority,
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            ..Default::default()
        }));
        self.takes.insert(n.into(), takes);
    }

    fn kills(&self) -> Vec<(String, i64, Instant)> {
        self.kills.lock().unwrap().clone()
    }
}

impl PodTerminator for FakePods {
    fn running_pods(&self) -> Vec<Arc<Pod>> {
        let kills = self.kills();
        self.pods
            .iter()
            .filter(|p| !kills.iter().any(|k| k.0 == name(p)))
            .cloned()
            .collect()
    }

    fn terminate(&self, pod: Arc<Pod>, t: Termination) -> bool {
        assert_eq!(
            (t.reason.as_str(), t.message.as_str()),
            (SHUTDOWN_REASON, SHUTDOWN_MESSAGE)
        );
        self.kills
            .lock()
            .unwrap()
            .push((name(&pod), t.grace_seconds, Instant::now()));
        true
    }

    fn terminated(&self, uid: &str) -> bool {
        self.kills().iter().any(|(n, grace, at)| {
            let grace = Duration::from_secs(u64::try_from(*grace).unwrap());
            n == uid && Instant::now() >= *at + self.takes[n].min(grace)
        })
    }
}

struct Running {
    logind: FakeLogind,
    state: Arc<NodeShutdownState>,
    pods: Arc<FakePods>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    start: Instant,
}

/// Starts a manager with `groups`, and waits until it watches (or gave up).
async fn run(logind: FakeLogind, groups: Vec<PriorityGrace>, pods: FakePods) -> Running {
    let state = Arc::new(NodeShutdownState::default());
    let pods = Arc::new(pods);
    let cancel = CancellationToken::new();
    let manager = Manager::new(ManagerDeps {
        logind: logind.clone(),
        groups,
        state: state.clone(),
        pods: pods.clone(),
        events: EventRecorder::log_only(),
        node_name: "n1".into(),
        sigusr1: false,
        times: None,
    });
    let task = tokio::spawn(manager.run(cancel.clone()));
    let start = Instant::now();
    while logind.state().signals.is_none() && logind.state().connects == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    Running {
        logind,
        state,
        pods,
        cancel,
        task,
        start,
    }
}

impl Running {
    /// Waits (in paused time) until `done`, at most `limit`.
    async fn until(&self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let t = Instant::now();
        while !done(self) {
            assert!(t.elapsed() < limit, "{what} within {limit:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// kubelet's two groups from 30 s / 10 s.
fn two_groups() -> Vec<PriorityGrace> {
    from_settings(secs(30), secs(10), &[])
}

#[tokio::test(start_paused = true)]
async fn groups_are_stopped_lowest_priority_first_each_within_its_budget() {
    let mut pods = FakePods::default();
    // Regular pods: one quick, one that ignores SIGTERM (stops at its grace), one whose
    // own grace period is shorter than the group's.
    pods.add("quick", None, Some(60), secs(1));
    pods.add("stubborn", Some(10), None, secs(3600));
    pods.add("short", Some(0), Some(5), secs(3600));
    pods.add("critical", Some(2_000_001_000), Some(60), secs(2));
    let r = run(FakeLogind::with_delay(secs(60)), two_groups(), pods).await;
    assert_eq!(r.logind.locks(), 1);
    assert!(!r.logind.released(0));
    r.logind.signal(true);
    r.until(secs(40), "the lock released", |r| r.logind.released(0))
        .await;
    assert!(r.state.is_shutting_down());
    let kills = r.pods.kills();
    let by_name: HashMap<_, _> = kills
        .iter()
        .map(|(n, g, at)| (n.as_str(), (*g, *at)))
        .collect();
    // The regular group, at once, with the group's 20 s or a shorter own grace.
    assert_eq!(by_name["quick"].0, 20);
    assert_eq!(by_name["stubborn"].0, 20);
    assert_eq!(by_name["short"].0, 5);
    let first = by_name["quick"].1;
    assert!(first - r.start < secs(1));
    // The critical group once the regular group's budget is over (a pod still stopping
    // holds it that long), with the critical 10 s.
    let (grace, at) = by_name["critical"];
    assert_eq!(grace, 10);
    let waited = at - first;
    assert!(waited >= secs(20) && waited < secs(21), "{waited:?}");
    // Released once the critical pod stopped (2 s), not after its whole budget.
    assert!(Instant::now() - at < secs(3));
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_group_that_stops_early_lets_the_next_start_at_once_and_empty_groups_are_skipped() {
    let mut pods = FakePods::default();
    pods.add("a", None, None, secs(2));
    pods.add("b", None, None, secs(3));
    let groups = vec![
        PriorityGrace {
            priority: 0,
            seconds: 20,
        },
        PriorityGrace {
            priority: 1000,
            seconds: 5,
        },
        PriorityGrace {
            priority: 2000,
            seconds: 30,
        },
    ];
    let mut more = pods;
    more.add("c", Some(2500), None, secs(1));
    let r = run(FakeLogind::with_delay(secs(60)), groups, more).await;
    r.logind.signal(true);
    r.until(secs(60), "the lock released", |r| r.logind.released(0))
        .await;
    let kills = r.pods.kills();
    let at = |n: &str| kills.iter().find(|k| k.0 == n).unwrap().2;
    let gap = at("c") - at("a");
    assert!(gap >= secs(3) && gap < secs(4), "{gap:?}");
    assert!(Instant::now() - r.start < secs(6));
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_shutdown_takes_the_lock_again_and_admits_pods_again() {
    let r = run(
        FakeLogind::with_delay(secs(60)),
        two_groups(),
        FakePods::default(),
    )
    .await;
    let admission = ShutdownAdmission {
        state: r.state.clone(),
    };
    let pod = Pod::default();
    let attrs = PodAdmitAttributes {
        pod: &pod,
        other_pods: &[],
    };
    assert!(admission.admit(&attrs).is_ok());
    r.logind.signal(true);
    r.until(secs(5), "released", |r| r.logind.released(0)).await;
    let refused = admission.admit(&attrs).unwrap_err();
    assert_eq!(
        (refused.reason.as_str(), refused.message.as_str()),
        (
            "NodeShutdown",
            "Pod was rejected as the node is shutting down."
        )
    );
    r.logind.signal(false);
    r.until(secs(5), "a second lock", |r| r.logind.locks() == 2)
        .await;
    assert!(!r.state.is_shutting_down());
    assert!(admission.admit(&attrs).is_ok());
    assert!(!r.logind.released(1));
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_short_logind_delay_is_raised_by_a_drop_in_and_a_reload() {
    let logind = FakeLogind::with_delay(secs(5));
    logind.state().honour_drop_in = true;
    let r = run(logind, two_groups(), FakePods::default()).await;
    r.until(secs(5), "subscribed", |r| {
        r.logind.state().signals.is_some()
    })
    .await;
    {
        let s = r.logind.state();
        assert_eq!((s.drop_ins.as_slice(), s.reloads), (&[secs(30)][..], 1));
        assert_eq!(s.locks.len(), 1);
    }
    r.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_logind_or_with_a_delay_that_stays_short_it_gives_up_once_and_waits() {
    for short_delay in [false, true] {
        let logind = FakeLogind::with_delay(secs(5));
        logind.state().no_bus = !short_delay;
        let r = run(logind, two_groups(), FakePods::default()).await;
        // Idle from then on: no retry, no lock, the node untouched.
        tokio::time::sleep(secs(30)).await;
        {
            let s = r.logind.state();
            assert_eq!(s.connects, 1);
            assert!(s.locks.is_empty() && s.signals.is_none());
            assert_eq!(s.reloads, usize::from(short_delay));
        }
        assert!(!r.state.is_shutting_down());
        assert!(
            !r.task.is_finished(),
            "the manager waits for the agent's end"
        );
        r.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn when_the_bus_goes_away_it_reconnects_every_second_with_a_new_lock() {
    let r = run(
        FakeLogind::with_delay(secs(60)),
        two_groups(),
        FakePods::default(),
    )
    .await;
    r.logind.state().no_bus = true;
    r.logind.drop_bus();
    r.until(secs(2), "the old lock released", |r| r.logind.released(0))
        .await;
    tokio::time::sleep(secs(3)).await;
    let tries = r.logind.state().connects;
    assert!((3..=5).contains(&tries), "{tries}");
    r.logind.state().no_bus = false;
    r.until(secs(2), "watching again", |r| {
        r.logind.state().signals.is_some()
    })
    .await;
    assert_eq!(r.logind.locks(), 2);
    assert!(!r.logind.released(1));
    r.logind.signal(true);
    r.until(secs(2), "the shutdown handled", |r| {
        r.state.is_shutting_down()
    })
    .await;
    r.stop().await;
}
