use super::*;
use crate::cm::resources::tests::container;
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

const GI: u64 = 1 << 30;

fn pod(containers: Vec<Container>) -> Pod {
    Pod {
        metadata: serde_json::from_value(json!({"name": "p", "namespace": "ns", "uid": "u1"}))
            .unwrap(),
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Burstable pod of one container.
fn burstable(reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Pod {
    pod(vec![container("c", reqs, lims)])
}

fn settings(oom: Option<bool>, swap: Option<SwapBehavior>) -> MemorySettings {
    MemorySettings {
        single_process_oom_kill: oom,
        swap_behavior: swap,
    }
}

/// kubelet's own test node: 40Gi of memory, 5Gi of swap.
fn limited_v2() -> MemoryPolicy {
    let s = settings(None, Some(SwapBehavior::LimitedSwap));
    MemoryPolicy::new(CgroupVersion::V2, &s, true, 40 * GI, 5 * GI)
}

fn resources(p: &MemoryPolicy, pod: &Pod) -> cri::LinuxContainerResources {
    let c = &pod.spec.as_ref().unwrap().containers[0];
    let mut r = cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    p.apply(pod, c, &mut r);
    r
}

fn decision(p: &MemoryPolicy, pod: &Pod) -> Option<SwapDecision> {
    p.swap_decision(pod, &pod.spec.as_ref().unwrap().containers[0])
}

#[test]
fn swap_behavior_parses_kubelets_three_values_and_refuses_others() {
    assert_eq!(SwapBehavior::parse(""), Ok(None));
    assert_eq!(
        SwapBehavior::parse("NoSwap"),
        Ok(Some(SwapBehavior::NoSwap))
    );
    assert_eq!(
        SwapBehavior::parse("LimitedSwap"),
        Ok(Some(SwapBehavior::LimitedSwap))
    );
    for bad in ["UnlimitedSwap", "limitedswap", " NoSwap"] {
        assert_eq!(
            SwapBehavior::parse(bad).unwrap_err().to_string(),
            r#"must be one of: "", "LimitedSwap" or "NoSwap""#
        );
    }
}

#[test]
fn cgroup_v1_refuses_an_explicit_false_single_process_oom_kill_and_limited_swap() {
    use CgroupVersion::{Hybrid, V1, V2};
    for v in [V1, Hybrid] {
        assert_eq!(
            check_settings(v, &settings(Some(false), None))
                .unwrap_err()
                .to_string(),
            "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"
        );
        assert_eq!(
            check_settings(v, &settings(None, Some(SwapBehavior::LimitedSwap)))
                .unwrap_err()
                .to_string(),
            "swap feature is enabled and LimitedSwap but it is only supported with cgroupv2"
        );
        for ok in [
            settings(None, None),
            settings(Some(true), Some(SwapBehavior::NoSwap)),
        ] {
            assert_eq!(check_settings(v, &ok), Ok(()));
        }
    }
    let all = settings(Some(false), Some(SwapBehavior::LimitedSwap));
    assert_eq!(check_settings(V2, &all), Ok(()));
}

#[test]
fn the_swap_controller_is_oxlets_own_cgroups_memory_swap_max_on_v2() {
    let dir = tempfile::tempdir().unwrap();
    let own = "0::/kubelet.slice/kubelet.service\n";
    assert!(!swap_controller_available(
        CgroupVersion::V2,
        dir.path(),
        own
    ));
    let svc = dir.path().join("kubelet.slice/kubelet.service");
    std::fs::create_dir_all(&svc).unwrap();
    std::fs::write(svc.join("memory.swap.max"), "max\n").unwrap();
    assert!(swap_controller_available(
        CgroupVersion::V2,
        dir.path(),
        own
    ));
    // No unified line: no controller.
    assert!(!swap_controller_available(
        CgroupVersion::V2,
        dir.path(),
        "4:memory:/x\n"
    ));
    // v1 and hybrid: memsw at the memory controller's root.
    assert!(!swap_controller_available(
        CgroupVersion::Hybrid,
        dir.path(),
        own
    ));
    std::fs::create_dir_all(dir.path().join("memory")).unwrap();
    std::fs::write(dir.path().join("memory/memory.memsw.limit_in_bytes"), "1\n").unwrap();
    assert!(swap_controller_available(CgroupVersion::V1, dir.path(), ""));
}

#[test]
fn v2_groups_the_oom_kill_unless_single_process_oom_kill_is_true() {
    let p = burstable(&[("memory", "32Mi")], &[("memory", "32Mi")]);
    for (oom, want) in [(None, true), (Some(false), true), (Some(true), false)] {
        let policy = MemoryPolicy::new(CgroupVersion::V2, &settings(oom, None), false, GI, 0);
        assert_eq!(policy.oom_group(), want, "{oom:?}");
        let r = resources(&policy, &p);
        assert_eq!(r.unified.contains_key("memory.oom.group"), want);
        // No swap controller: nothing about swap.
        assert!(!r.unified.contains_key("memory.swap.max"));
        assert_eq!(r.memory_swap_limit_in_bytes, 0);
    }
    // v1 (and hybrid) never: a single process is killed there.
    for v in [CgroupVersion::V1, CgroupVersion::Hybrid] {
        let policy = MemoryPolicy::new(v, &settings(None, None), false, GI, 0);
        assert!(!policy.oom_group());
        assert!(resources(&policy, &p).unified.is_empty());
    }
}

#[test]
fn no_swap_is_memory_swap_max_zero_on_v2_and_memsw_equal_to_the_limit_on_v1() {
    let p = burstable(&[("memory", "32Mi")], &[("memory", "64Mi")]);
    let v2 = MemoryPolicy::new(CgroupVersion::V2, &settings(None, None), true, GI, GI);
    let r = resources(&v2, &p);
    assert_eq!(r.unified["memory.swap.max"], "0");
    assert_eq!(r.unified["memory.oom.group"], "1");
    assert_eq!(
        decision(&v2, &p),
        Some(SwapDecision::NoSwap("memorySwap.swapBehavior is NoSwap"))
    );
    let v1 = MemoryPolicy::new(CgroupVersion::V1, &settings(None, None), true, GI, GI);
    let r = resources(&v1, &p);
    assert!(r.unified.is_empty());
    assert_eq!(r.memory_swap_limit_in_bytes, 64 << 20);
    // A v1 host without memsw: no swap setting at all.
    let bare = MemoryPolicy::new(CgroupVersion::V1, &settings(None, None), false, GI, GI);
    assert_eq!(resources(&bare, &p).memory_swap_limit_in_bytes, 0);
    assert_eq!(MemoryPolicy::default(), bare);
}

#[test]
fn limited_swap_gives_a_burstable_container_its_requests_share_of_the_nodes_swap() {
    let p = limited_v2();
    // kubelet's test: 1Gi of 40Gi memory, 5Gi of swap: 128Mi.
    let b = burstable(&[("memory", "1Gi")], &[("memory", "2Gi")]);
    assert_eq!(decision(&p, &b), Some(SwapDecision::Limited(128 << 20)));
    let r = resources(&p, &b);
    assert_eq!(r.unified["memory.swap.max"], (128u64 << 20).to_string());
    assert_eq!(r.unified["memory.oom.group"], "1");
    // A request without a limit swaps too.
    let request_only = burstable(&[("memory", "2Gi")], &[]);
    assert_eq!(
        decision(&p, &request_only),
        Some(SwapDecision::Limited(256 << 20))
    );
    // The float64 formula, truncated: 100Mi of 3Gi, 1Gi of swap.
    let mem = 3 * GI;
    assert_eq!(limited_swap_bytes(100 << 20, mem, GI), Ok(34_952_533));
    assert_eq!(limited_swap_bytes(0, mem, GI), Ok(0));
    assert_eq!(limited_swap_bytes(1, mem, 0), Ok(0));
}

#[test]
fn limited_swap_gives_no_swap_to_other_classes_and_equal_request_and_limit() {
    let p = limited_v2();
    let cases = [
        (
            pod(vec![container(
                "c",
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )]),
            "the pod is not Burstable",
        ),
        (
            pod(vec![container("c", &[], &[])]),
            "the pod is not Burstable",
        ),
        // Burstable through cpu; memory request = limit.
        (
            burstable(&[("cpu", "100m"), ("memory", "1Gi")], &[("memory", "1Gi")]),
            "the container's memory request equals its limit",
        ),
        // A limit alone: the request defaults to it.
        (
            burstable(&[], &[("memory", "1Gi")]),
            "the container's memory request equals its limit",
        ),
        // Burstable through another container; this one asks for no memory.
        (
            pod(vec![
                container("c", &[("cpu", "100m")], &[]),
                container("d", &[("memory", "1Gi")], &[]),
            ]),
            "the container has no memory request or limit",
        ),
    ];
    for (pod, reason) in cases {
        assert_eq!(decision(&p, &pod), Some(SwapDecision::NoSwap(reason)));
        assert_eq!(resources(&p, &pod).unified["memory.swap.max"], "0");
    }
}

#[test]
fn limited_swap_gives_no_swap_to_critical_pods() {
    let p = limited_v2();
    let critical = Some(SwapDecision::NoSwap(
        "the pod is critical (static, mirror, or priority 2000000000 and up)",
    ));
    let annotated = |k: &str, v: &str| {
        let mut b = burstable(&[("memory", "1Gi")], &[("memory", "2Gi")]);
        b.metadata.annotations = Some([(k.to_string(), v.to_string())].into());
        b
    };
    assert_eq!(
        decision(&p, &annotated("kubernetes.io/config.source", "file")),
        critical
    );
    assert_eq!(
        decision(&p, &annotated("kubernetes.io/config.mirror", "x")),
        critical
    );
    // From the apiserver: not static.
    assert!(matches!(
        decision(&p, &annotated("kubernetes.io/config.source", "api")),
        Some(SwapDecision::Limited(_))
    ));
    let with_priority = |prio: i32| {
        let mut b = burstable(&[("memory", "1Gi")], &[("memory", "2Gi")]);
        b.spec.as_mut().unwrap().priority = Some(prio);
        b
    };
    assert_eq!(decision(&p, &with_priority(2_000_000_000)), critical);
    assert!(matches!(
        decision(&p, &with_priority(1_999_999_999)),
        Some(SwapDecision::Limited(_))
    ));
}

#[test]
fn a_request_above_the_nodes_memory_gets_no_swap() {
    let s = settings(None, Some(SwapBehavior::LimitedSwap));
    let p = MemoryPolicy::new(CgroupVersion::V2, &s, true, GI, GI);
    let big = burstable(&[("memory", "2Gi")], &[]);
    assert_eq!(
        decision(&p, &big),
        Some(SwapDecision::NoSwap("its swap could not be calculated"))
    );
    assert_eq!(resources(&p, &big).unified["memory.swap.max"], "0");
    assert_eq!(
        limited_swap_bytes(2 << 30, GI, GI).unwrap_err().to_string(),
        "container request 2147483648 is larger than total node memory 1073741824"
    );
    assert_eq!(
        limited_swap_bytes(1, 0, GI).unwrap_err().to_string(),
        "total node memory is 0"
    );
}
