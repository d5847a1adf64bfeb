use super::*;
use std::os::unix::fs::PermissionsExt as _;

const IMAGE: &str = "reg.example:5000/team/app:1";
const REF: &str = "sha256:aaaa";

fn secret(name: &str, hash: &str) -> SecretCoordinates {
    SecretCoordinates {
        uid: format!("uid-{name}"),
        namespace: "ns".into(),
        name: name.into(),
        credential_hash: hash.into(),
    }
}

fn pulled_with(records: &PullRecords, creds: &PullCredentials) {
    records.record_intent(IMAGE).unwrap();
    records.record_pulled(IMAGE, REF, Some(creds));
}

fn open(policy: VerifyPolicy) -> (tempfile::TempDir, PullRecords) {
    let dir = tempfile::tempdir().unwrap();
    let records = PullRecords::open(dir.path(), policy).unwrap();
    (dir, records)
}

#[test]
fn policies_and_allowlists_are_validated_as_kubelet() {
    for name in [
        "NeverVerify",
        "NeverVerifyPreloadedImages",
        "NeverVerifyAllowlistedImages",
        "AlwaysVerify",
    ] {
        assert_eq!(VerifyPolicy::parse(name, &[]).unwrap().name(), name);
    }
    assert_eq!(
        VerifyPolicy::parse("Sometimes", &[])
            .unwrap_err()
            .to_string(),
        "unsupported value of imagePullCredentialsVerificationPolicy: \"Sometimes\""
    );
    let list = |items: &[&str]| items.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert!(
        VerifyPolicy::parse("AlwaysVerify", &list(&["busybox"]))
            .unwrap_err()
            .to_string()
            .starts_with("can't set `preloadedImagesVerificationAllowlist`")
    );
    for (pattern, error) in [
        (
            " busybox",
            "leading/trailing spaces are not allowed:  busybox",
        ),
        ("/*", "at least registry hostname is required"),
        (
            "reg.io/*/x",
            "not a valid wildcard pattern, only patterns ending with '/*' are allowed: reg.io/*/x",
        ),
        (
            "busybox:1",
            "neither tag nor digest is accepted in an image reference: busybox:1",
        ),
    ] {
        let e = VerifyPolicy::parse("NeverVerifyAllowlistedImages", &list(&[pattern]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, error, "{pattern}");
    }
    let policy = VerifyPolicy::parse(
        "NeverVerifyAllowlistedImages",
        &list(&["busybox", "reg.io:5000/team/*"]),
    )
    .unwrap();
    assert_eq!(policy.allowlist(), ["busybox", "reg.io:5000/team/*"]);
    // Familiar and full names are one image, as kubelet 1.36 compares them.
    assert!(!policy.requires_verification("docker.io/library/busybox", true));
    assert!(!policy.requires_verification("reg.io:5000/team/app", true));
    assert!(policy.requires_verification("reg.io:5000/teamx/app", false));
    assert!(policy.requires_verification("docker.io/library/alpine", false));
}

#[test]
fn the_policy_decides_which_present_images_are_checked() {
    let (_d, preloaded) = open(VerifyPolicy::NeverVerifyPreloadedImages);
    // Never pulled by the agent: preloaded, not checked.
    assert_eq!(preloaded.access(IMAGE, REF, &[], None), Access::NotVerified);
    let (_d, always) = open(VerifyPolicy::AlwaysVerify);
    assert!(matches!(
        always.access(IMAGE, REF, &[], None),
        Access::MustPull(_)
    ));
    let (_d, never) = open(VerifyPolicy::NeverVerify);
    pulled_with(&never, &PullCredentials::default());
    assert_eq!(never.access(IMAGE, REF, &[], None), Access::NotVerified);
}

#[test]
fn a_secret_pulled_image_is_for_pods_with_that_secret_or_that_login() {
    let (dir, records) = open(VerifyPolicy::NeverVerifyPreloadedImages);
    let a = secret("a", "hash-a");
    pulled_with(
        &records,
        &PullCredentials {
            kubernetes_secrets: vec![a.clone()],
            ..Default::default()
        },
    );
    assert!(matches!(
        records.access(IMAGE, REF, &[], None),
        Access::MustPull(_)
    ));
    assert!(matches!(
        records.access(IMAGE, REF, &[secret("b", "hash-b")], None),
        Access::MustPull(_)
    ));
    assert_eq!(
        records.access(IMAGE, REF, std::slice::from_ref(&a), None),
        Access::SecretMatches
    );
    // Another secret with the same login matches, and is kept for next time.
    let copy = secret("copy", "hash-a");
    assert_eq!(
        records.access(IMAGE, REF, std::slice::from_ref(&copy), None),
        Access::SecretMatches
    );
    let text =
        std::fs::read_to_string(dir.path().join("image_manager/pulled").join(file_name(REF)))
            .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["kind"], "ImagePulledRecord");
    assert_eq!(v["apiVersion"], "kubelet.config.k8s.io/v1alpha1");
    assert_eq!(v["imageRef"], REF);
    let names: Vec<&str> = v["credentialMapping"]["reg.example:5000/team/app"]["kubernetesSecrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "copy"]);
    // Another tag of the same repository resolves to the same record.
    assert_eq!(
        records.access("reg.example:5000/team/app:2", REF, &[a], None),
        Access::SecretMatches
    );
    // Another repository that resolved to the same image was never checked.
    assert!(matches!(
        records.access("reg.example:5000/other/app:1", REF, &[], None),
        Access::MustPull(_)
    ));
}

#[test]
fn an_anonymous_or_node_pull_is_for_every_pod_and_wins_over_secrets() {
    let (_d, records) = open(VerifyPolicy::AlwaysVerify);
    pulled_with(
        &records,
        &PullCredentials {
            kubernetes_secrets: vec![secret("a", "h")],
            ..Default::default()
        },
    );
    pulled_with(&records, &PullCredentials::node_wide());
    assert_eq!(records.access(IMAGE, REF, &[], None), Access::NodeWide);
    let sa = ServiceAccountCoordinates {
        uid: "u".into(),
        namespace: "ns".into(),
        name: "builder".into(),
    };
    let (_d, records) = open(VerifyPolicy::AlwaysVerify);
    pulled_with(
        &records,
        &PullCredentials {
            kubernetes_service_accounts: vec![sa.clone()],
            ..Default::default()
        },
    );
    assert_eq!(
        records.access(IMAGE, REF, &[], Some(&sa)),
        Access::ServiceAccountMatches
    );
    assert!(matches!(
        records.access(IMAGE, REF, &[], None),
        Access::MustPull(_)
    ));
}

#[test]
fn an_intent_left_by_a_crash_makes_the_image_the_agents_with_unknown_credentials() {
    let dir = tempfile::tempdir().unwrap();
    {
        let records =
            PullRecords::open(dir.path(), VerifyPolicy::NeverVerifyPreloadedImages).unwrap();
        records.record_intent(IMAGE).unwrap();
        // The agent dies mid-pull.
    }
    let records = PullRecords::open(dir.path(), VerifyPolicy::NeverVerifyPreloadedImages).unwrap();
    // Before the runtime is asked, the intent alone says the agent pulled it.
    assert!(matches!(
        records.access(IMAGE, REF, &[], None),
        Access::MustPull(_)
    ));
    let image = cri::Image {
        id: REF.into(),
        repo_tags: vec![IMAGE.into()],
        ..Default::default()
    };
    records.recover_intents(&[image]);
    let pulling = dir.path().join("image_manager/pulling");
    assert_eq!(std::fs::read_dir(&pulling).unwrap().count(), 0);
    assert!(matches!(
        records.access(IMAGE, REF, &[], None),
        Access::MustPull(_)
    ));
    let pulled = dir.path().join("image_manager/pulled").join(file_name(REF));
    let mode = std::fs::metadata(&pulled).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "records are root's alone");
}

#[test]
fn a_failed_pull_ends_its_intent_and_records_of_removed_images_are_pruned() {
    let (dir, records) = open(VerifyPolicy::NeverVerifyPreloadedImages);
    records.record_intent(IMAGE).unwrap();
    records.record_intent(IMAGE).unwrap();
    records.record_failed(IMAGE);
    let pulling = dir.path().join("image_manager/pulling");
    assert_eq!(
        std::fs::read_dir(&pulling).unwrap().count(),
        1,
        "one pull still runs"
    );
    records.record_failed(IMAGE);
    assert_eq!(std::fs::read_dir(&pulling).unwrap().count(), 0);

    pulled_with(&records, &PullCredentials::node_wide());
    let before = jiff::Timestamp::now();
    let present: HashSet<String> = [REF.to_string()].into();
    assert_eq!(records.prune(&present, before), 0, "still present");
    let later = before + jiff::SignedDuration::from_secs(1);
    assert_eq!(records.prune(&HashSet::new(), later), 1);
    assert_eq!(records.access(IMAGE, REF, &[], None), Access::NotVerified);
}
