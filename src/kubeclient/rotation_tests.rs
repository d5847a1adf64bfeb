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

/// A renewal over a real store whose `renew` is never reached: only `plan` is asked.
struct Planned {
    store: CertStore,
    template: super::csr::Template,
}

impl super::rotation::Renewal for Planned {
    const KIND: &'static str = "serving";
    const USERS: &'static str = "nobody";
    const REQUEST_WHEN_MISSING: bool = true;

    fn store(&self) -> CertStore {
        self.store.clone()
    }

    fn outdated(&self, pem: &[u8]) -> bool {
        !self.template.satisfied_by(pem)
    }

    async fn renew(&self) -> Result<std::path::PathBuf, super::rotation::RotationError> {
        unreachable!("plan only")
    }
}

/// A certificate for `template`'s request, valid from a minute ago for an hour,
/// and the request's key.
fn issued_for(template: &super::csr::Template) -> (String, String) {
    let req = super::csr::node_request(template).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut csr = rcgen::CertificateSigningRequestParams::from_pem(&req.csr_pem).unwrap();
    let now = time::OffsetDateTime::now_utc();
    csr.params.not_before = now - time::Duration::minutes(1);
    csr.params.not_after = now + time::Duration::hours(1);
    (csr.signed_by(&issuer).unwrap().pem(), req.key_pem)
}

/// The serving certificate's decisions: request at once when there is none, when the
/// stored one holds no certificate, or when it names other addresses; otherwise wait
/// for the deadline, 70-90 % into its life.
#[test]
fn the_serving_certificate_is_requested_at_once_only_when_missing_or_outdated() {
    use k8s_openapi::api::core::v1::NodeAddress;
    let addr = |t: &str, a: &str| NodeAddress {
        type_: t.into(),
        address: a.into(),
    };
    let here = [addr("InternalIP", "10.0.0.5"), addr("Hostname", "n1")];
    let moved = [addr("InternalIP", "10.0.0.6"), addr("Hostname", "n1")];
    let template = |a: &[NodeAddress]| super::csr::Template::serving("n1", a).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let r = Planned {
        store: CertStore::serving(dir.path()),
        template: template(&here),
    };
    let now = jiff::Timestamp::now();
    let plan = |r: &Planned| super::rotation::plan(r, 0.5, now).unwrap();

    assert_eq!(plan(&r), Duration::ZERO, "none stored");
    r.store.update(b"not a certificate\n", b"K\n", now).unwrap();
    assert_eq!(plan(&r), Duration::ZERO, "nothing readable stored");

    let (cert, key) = issued_for(&template(&here));
    r.store
        .update(
            cert.as_bytes(),
            key.as_bytes(),
            now + jiff::SignedDuration::from_secs(1),
        )
        .unwrap();
    let wait = plan(&r);
    // 80 % of an hour from a minute ago, give or take the test's own seconds.
    assert!(
        wait > Duration::from_secs(46 * 60) && wait < Duration::from_secs(48 * 60),
        "{wait:?}"
    );

    let (cert, key) = issued_for(&template(&moved));
    r.store
        .update(
            cert.as_bytes(),
            key.as_bytes(),
            now + jiff::SignedDuration::from_secs(2),
        )
        .unwrap();
    assert_eq!(plan(&r), Duration::ZERO, "other addresses");
}
