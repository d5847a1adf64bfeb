//! Certificate rotation: the deadline, the task's decisions, and the clients
//! presenting a swapped certificate to a real HTTPS server on their next request.

use std::time::Duration;

use base64::Engine as _;

use super::bootstrap::CertInfo;
use super::cert_store::CertStore;
use super::rotation::{Credentials, applies, backoff, credentials, deadline};
use super::test_apiserver::{Pki, TestApiserver};
use super::{ClientSettings, build_rotating};

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn cert(from: &str, to: &str) -> CertInfo {
    CertInfo {
        subject: "CN=system:node:n1".into(),
        not_before: at(from),
        not_after: at(to),
    }
}

#[test]
fn the_deadline_is_70_to_90_percent_of_the_lifetime() {
    // 1000 s of life.
    let c = cert("2026-01-01T00:00:00Z", "2026-01-01T00:16:40Z");
    assert_eq!(deadline(&c, 0.0), at("2026-01-01T00:11:40Z"));
    assert_eq!(deadline(&c, 0.5), at("2026-01-01T00:13:20Z"));
    let late = deadline(&c, 0.999_999);
    assert!(late < at("2026-01-01T00:15:00.001Z") && late > at("2026-01-01T00:14:59Z"));
    // Out-of-range draws stay inside the window.
    assert_eq!(deadline(&c, -3.0), at("2026-01-01T00:11:40Z"));
    assert_eq!(deadline(&c, 7.0), at("2026-01-01T00:15:00Z"));
    // A year, as kind's certificates: between 255.5 and 328.5 days in.
    let year = cert("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z");
    for r in [0.0, 0.25, 0.75, 0.99] {
        let d = deadline(&year, r)
            .duration_since(year.not_before)
            .as_secs_f64()
            / 86400.0;
        assert!((255.5..=328.5).contains(&d), "{d}");
    }
    // A certificate whose not-after precedes its not-before is due at once.
    let odd = cert("2026-01-01T00:10:00Z", "2026-01-01T00:00:00Z");
    assert_eq!(deadline(&odd, 0.5), at("2026-01-01T00:10:00Z"));
}

#[test]
fn the_csr_goes_out_with_the_current_cert_until_it_expires() {
    let exp = at("2026-01-01T00:00:00Z");
    let before = at("2025-12-31T23:59:59Z");
    assert_eq!(credentials(exp, before, true), Credentials::Current);
    assert_eq!(credentials(exp, before, false), Credentials::Current);
    assert_eq!(credentials(exp, exp, true), Credentials::Bootstrap);
    assert_eq!(credentials(exp, exp, false), Credentials::Expired);
}

#[test]
fn failures_back_off_from_2s_to_32s() {
    let waits: Vec<u64> = (1..=8).map(|n| backoff(n, 0.0).as_secs()).collect();
    assert_eq!(waits, [2, 4, 8, 16, 32, 32, 32, 32]);
    assert_eq!(backoff(1, 0.5), Duration::from_millis(2100));
    assert_eq!(backoff(u32::MAX, 1.0), Duration::from_millis(35200));
}

#[test]
fn only_the_cert_dirs_current_pair_is_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    config.auth_info.client_certificate =
        Some(pki.join("kubelet-client-current.pem").display().to_string());
    assert!(applies(&config, &pki));
    // The same directory named another way.
    assert!(applies(&config, &dir.path().join("pki/../pki")));
    assert!(!applies(&config, dir.path()));
    config.auth_info.client_certificate = Some(pki.join("client.crt").display().to_string());
    assert!(!applies(&config, &pki));
    config.auth_info.client_certificate = None;
    assert!(!applies(&config, &pki));
    config.auth_info.client_certificate =
        Some(pki.join("kubelet-client-current.pem").display().to_string());
    config.auth_info.client_certificate_data = Some("Zm9v".into());
    assert!(!applies(&config, &pki));
}

/// The swap, end to end: both clients present the first pair, the slot takes the
/// second, and the very next request (which would otherwise reuse the kept-alive
/// connection) presents the second.
#[tokio::test]
async fn after_a_swap_new_requests_present_the_new_certificate() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, "unused-token").await;
    let dir = tempfile::tempdir().unwrap();
    let cert_dir = dir.path().join("pki");
    let store = CertStore::new(&cert_dir);
    store
        .update(
            pki.client_cert_pem.as_bytes(),
            pki.client_key_pem.as_bytes(),
            jiff::Timestamp::now(),
        )
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD.encode(&pki.ca_pem);
    let current = store.current_path();
    let kubeconfig = dir.path().join("kubelet.conf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
             users:\n- name: u\n  user:\n    client-certificate: {p}\n    client-key: {p}\n\
             contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            server.url,
            p = current.display()
        ),
    )
    .unwrap();
    let settings = ClientSettings {
        qps: 50,
        burst: 100,
        node_status_update_frequency: Duration::from_secs(10),
        node_lease_duration: Duration::from_secs(40),
    };
    let clients = build_rotating(&kubeconfig, settings, &cert_dir)
        .await
        .unwrap();
    let slot = clients
        .cert_slot
        .clone()
        .expect("the cert dir's pair rotates");
    let der = |pem: &str| {
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    };
    let last_cert = || server.seen().last().unwrap().client_cert.clone();

    clients.main.apiserver_version().await.unwrap();
    assert_eq!(last_cert(), Some(der(&pki.client_cert_pem)));
    clients.heartbeat.apiserver_version().await.unwrap();
    assert_eq!(last_cert(), Some(der(&pki.client_cert_pem)));
    assert_eq!(
        slot.current_leaf().unwrap().to_vec(),
        der(&pki.client_cert_pem)
    );

    let (cert2, key2) = pki.client_pair("system:node:kind-control-plane");
    store
        .update(cert2.as_bytes(), key2.as_bytes(), jiff::Timestamp::now())
        .unwrap();
    slot.replace(&store.read_current().unwrap().unwrap())
        .unwrap();
    for client in [&clients.main, &clients.heartbeat] {
        client.apiserver_version().await.unwrap();
        assert_eq!(last_cert(), Some(der(&cert2)));
    }
    // A pair without a key is refused and the slot keeps presenting the new one.
    assert!(slot.replace(cert2.as_bytes()).is_err());
    clients.main.apiserver_version().await.unwrap();
    assert_eq!(last_cert(), Some(der(&cert2)));
}

/// Without rotation applying (a certificate outside the cert dir), the clients are
/// the plain ones.
#[tokio::test]
async fn a_certificate_elsewhere_builds_the_plain_clients() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let pair = dir.path().join("client.pem");
    std::fs::write(
        &pair,
        format!("{}{}", pki.client_cert_pem, pki.client_key_pem),
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    client-certificate: {p}\n    client-key: {p}\n\
             contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            p = pair.display()
        ),
    )
    .unwrap();
    let settings = ClientSettings {
        qps: 5,
        burst: 10,
        node_status_update_frequency: Duration::from_secs(10),
        node_lease_duration: Duration::from_secs(40),
    };
    let clients = build_rotating(&kubeconfig, settings, &dir.path().join("pki"))
        .await
        .unwrap();
    assert!(clients.cert_slot.is_none());
}
