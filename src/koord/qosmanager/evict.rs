//! What every eviction strategy of the QoS manager shares (koordlet's
//! `qosmanager/plugins/util/evict.go`): the pods a pod's eviction policy allows, the
//! round that goes down the sorted victims until the release is met, the cache of
//! pods evicted recently, and the reason and message koordlet gives.
//!
//! A pod evicted in an earlier round and still here counts, when the round reaches
//! it, for what it uses now (it is on its way out); one that is gone counts for
//! nothing, so a second round right after the first evicts what is still missing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::inputs::PodUsage;
use crate::pod::pod_uid;

/// How long an evicted pod stays in the evicted cache (koordinator's default
/// expiring cache).
pub(crate) const EVICTED_TTL: Duration = Duration::from_secs(120);
/// A pod's list of the eviction features allowed on it (JSON).
const EVICTION_POLICY: &str = "koordinator.sh/eviction-policy";

/// Whether the pod's `koordinator.sh/eviction-policy` allows `feature` (no annotation
/// allows all; a list that is not JSON allows none), as koordlet's
/// `IsEvictionPolicyAllowed`.
pub(crate) fn policy_allows(pod: &Pod, feature: &str) -> bool {
    let Some(text) = super::inputs::annotation(pod, EVICTION_POLICY) else {
        return true;
    };
    serde_json::from_str::<Vec<String>>(text).is_ok_and(|l| l.iter().any(|p| p == feature))
}

/// Pods evicted recently (koordlet's evictor cache) and the last round that
/// evicted, for the cool-down.
#[derive(Debug)]
pub(crate) struct EvictState {
    evicted: HashMap<String, Instant>,
    last_round: Option<Instant>,
    cool_down: Duration,
}

impl EvictState {
    /// A cache with `cool_down` after an evicting round; `last_round` starts a
    /// cool-down at once (koordlet's CPU evictor starts cooling when it is made).
    pub(crate) fn new(cool_down: Duration, last_round: Option<Instant>) -> Self {
        EvictState {
            evicted: HashMap::new(),
            last_round,
            cool_down,
        }
    }

    /// Whether the cool-down after the last evicting round is still running.
    pub(crate) fn cooling(&self, now: Instant) -> bool {
        self.last_round
            .is_some_and(|t| now.duration_since(t) < self.cool_down)
    }

    fn expire(&mut self, now: Instant) {
        self.evicted
            .retain(|_, t| now.duration_since(*t) < EVICTED_TTL);
    }

    /// Starts the cool-down: a round evicted (by another trigger sharing it).
    pub(crate) fn evicted_now(&mut self, now: Instant) {
        self.last_round = Some(now);
    }

    /// Whether the pod was evicted less than 2 minutes ago.
    pub(crate) fn is_evicted(&self, uid: &str) -> bool {
        self.evicted.contains_key(uid)
    }

    /// The pods to evict this round, in order (koordlet's `KillAndEvictPods`): down
    /// `victims` until `release` is met, each counting its `amount`; a victim evicted
    /// earlier counts its amount now and is not picked again. Records the picked ones
    /// and, when there are any, the round.
    pub(crate) fn pick<'a>(
        &mut self,
        victims: &[&'a PodUsage],
        amount: impl Fn(&PodUsage) -> f64,
        release: f64,
        now: Instant,
    ) -> Vec<&'a PodUsage> {
        self.expire(now);
        let mut released = 0.0;
        let mut picked = Vec::new();
        for v in victims {
            if released >= release {
                break;
            }
            released += amount(v);
            let uid = pod_uid(&v.pod);
            if self.is_evicted(uid) {
                continue;
            }
            self.evicted.insert(uid.to_string(), now);
            picked.push(*v);
        }
        if !picked.is_empty() {
            self.last_round = Some(now);
        }
        picked
    }
}

/// koordlet's reason for an eviction task (`EvictReasonPrefix` + the feature gate).
pub(crate) fn reason(feature: &str) -> String {
    format!("trigger by koordlet feature {feature}")
}

/// koordlet's message on the evicted pod (`KillAndEvictPods`).
pub(crate) fn message(feature: &str, victim: &PodUsage) -> String {
    format!(
        "{}, kill pod: {}",
        reason(feature),
        victim.pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids<'a>(picked: &[&'a PodUsage]) -> Vec<&'a str> {
        picked.iter().map(|p| pod_uid(&p.pod)).collect()
    }

    #[test]
    fn a_round_stops_at_the_release_and_an_evicted_pod_counts_only_while_here() {
        let a = PodUsage::test("a", true, 0.0, 50.0);
        let b = PodUsage::test("b", true, 0.0, 30.0);
        let c = PodUsage::test("c", true, 0.0, 20.0);
        let mem = |p: &PodUsage| p.memory_bytes;
        let cool = Duration::from_secs(4);
        let mut s = EvictState::new(cool, None);
        let t0 = Instant::now();
        assert!(!s.cooling(t0));
        assert_eq!(ids(&s.pick(&[&a, &b, &c], mem, 60.0, t0)), ["a", "b"]);
        assert!(s.cooling(t0 + Duration::from_secs(3)));
        assert!(!s.cooling(t0 + cool));
        // Both still here and using what they did: nothing more for the same target.
        let t1 = t0 + cool;
        assert!(s.pick(&[&a, &b, &c], mem, 60.0, t1).is_empty());
        // A larger target takes the next one, the evicted ones counted first.
        assert_eq!(ids(&s.pick(&[&a, &b, &c], mem, 90.0, t1)), ["c"]);
        // Gone, they count for nothing: a second round evicts what is still missing.
        let d = PodUsage::test("d", true, 0.0, 40.0);
        let e = PodUsage::test("e", true, 0.0, 40.0);
        let t2 = t1 + cool;
        assert_eq!(ids(&s.pick(&[&d, &e], mem, 60.0, t2)), ["d", "e"]);
        // Still here but using nothing any more (killed): counts nothing either.
        let killed = PodUsage::test("d", true, 0.0, 0.0);
        let f = PodUsage::test("f", true, 0.0, 70.0);
        assert_eq!(ids(&s.pick(&[&killed, &f], mem, 60.0, t2 + cool)), ["f"]);
        // After 2 minutes the cache forgets them.
        assert!(s.pick(&[], mem, 0.0, t0 + EVICTED_TTL + cool).is_empty());
        assert!(!s.is_evicted("a"));
    }

    #[test]
    fn the_eviction_policy_annotation_lists_the_features_allowed() {
        let with = |value: Option<&str>| {
            let mut p = Pod::default();
            if let Some(v) = value {
                p.metadata.annotations =
                    Some([(EVICTION_POLICY.to_string(), v.to_string())].into());
            }
            p
        };
        assert!(policy_allows(&with(None), "BEMemoryEvict"));
        assert!(policy_allows(
            &with(Some(r#"["BEMemoryEvict","BECPUEvict"]"#)),
            "BEMemoryEvict"
        ));
        assert!(!policy_allows(
            &with(Some(r#"["BECPUEvict"]"#)),
            "BEMemoryEvict"
        ));
        assert!(!policy_allows(&with(Some("[]")), "BEMemoryEvict"));
        assert!(
            !policy_allows(&with(Some("BEMemoryEvict")), "BEMemoryEvict"),
            "not JSON"
        );
    }
}
