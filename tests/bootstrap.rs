//! `--bootstrap-kubeconfig` against the in-repo apiserver and the real binary: a
//! missing `--kubeconfig` makes oxlet send a node CSR, which the test signs with its
//! own CA and approves; oxlet then stores the pair, writes the kubeconfig and starts.
//! A second start with that kubeconfig sends no CSR; a denied CSR ends oxlet with a
//! clear error and exit code 1.

mod agent;
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use testapi::TestApiServer;

const WAIT: Duration = Duration::from_secs(30);

/// The test's CA, signing as kube-controller-manager's kubelet client signer would.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        Ca {
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Signs the CSR's PEM for a year, keeping its subject and key.
    fn sign(&self, csr_pem: &str) -> String {
        self.sign_for(csr_pem, time::Duration::days(365))
    }

    /// Signs the CSR's PEM from a second ago for `life`.
    fn sign_for(&self, csr_pem: &str, life: time::Duration) -> String {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).unwrap();
        let now = time::OffsetDateTime::now_utc();
        csr.params.not_before = now - time::Duration::seconds(1);
        csr.params.not_after = now + life;
        csr.signed_by(&self.issuer).unwrap().pem()
    }
}

/// The first CSR the server holds, waiting for it.
async fn wait_csr(server: &TestApiServer, ox: &Oxlet) -> CertificateSigningRequest {
    wait_new_csr(server, ox, &[]).await
}

/// A CSR the server holds whose name is not in `seen`, waiting for it.
async fn wait_new_csr(
    server: &TestApiServer,
    ox: &Oxlet,
    seen: &[&str],
) -> CertificateSigningRequest {
    let t = std::time::Instant::now();
    loop {
        let csrs = server.list::<CertificateSigningRequest>(None).unwrap();
        if let Some(csr) = csrs
            .into_iter()
            .find(|c| !seen.contains(&c.metadata.name.as_deref().unwrap_or_default()))
        {
            return csr;
        }
        assert!(t.elapsed() < WAIT, "no CSR\n{}", tail(&ox.log(), 40));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn request_pem(csr: &CertificateSigningRequest) -> String {
    String::from_utf8(csr.spec.request.0.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_csr_is_approved_stored_and_used_then_reused() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");
    let args = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--bootstrap-kubeconfig={}", server.kubeconfig().display()),
        format!("--cert-dir={}", cert_dir.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut ox = Oxlet::start(&bed, &args);

    // The CSR is kubelet's: the node's subject, the kubelet client signer and usages.
    let csr = wait_csr(&server, &ox).await;
    let name = csr.metadata.name.clone().unwrap();
    assert!(name.starts_with("csr-"), "{name}");
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr.spec.usages.as_deref().unwrap(),
        ["digital signature", "client auth"]
    );
    let parsed = rcgen::CertificateSigningRequestParams::from_pem(&request_pem(&csr)).unwrap();
    let cn = format!(
        "{:?}",
        parsed
            .params
            .distinguished_name
            .get(&rcgen::DnType::CommonName)
    );
    assert!(cn.contains("system:node:testnode"), "{cn}");
    // Not started before the certificate is there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ox.get("/pods").await.is_none());

    let ca = Ca::new();
    server
        .approve_csr(&name, Some(ca.sign(&request_pem(&csr)).as_bytes()))
        .unwrap();
    ox.wait_up(WAIT).await;

    // The store and the kubeconfig, as kubelet leaves them.
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).unwrap();
    let target = target.to_str().unwrap();
    assert!(
        target.starts_with("kubelet-client-") && target.ends_with(".pem"),
        "{target}"
    );
    let mode = std::fs::metadata(cert_dir.join(target))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let pair = std::fs::read_to_string(&current).unwrap();
    assert!(pair.contains("BEGIN CERTIFICATE") && pair.contains("PRIVATE KEY"));
    let written = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        written.contains(&format!("client-certificate: \"{}\"", current.display())),
        "{written}"
    );
    assert!(written.contains(&format!("client-key: \"{}\"", current.display())));
    let log = ox.log();
    assert!(
        log.contains("the apiserver clients present this client certificate")
            && log.contains("CN=system:node:testnode"),
        "{}",
        tail(&log, 40)
    );

    // A second start uses the valid kubeconfig: no new CSR, the same pair.
    ox.sigterm();
    ox.spawn(&args);
    ox.wait_up(WAIT).await;
    assert_eq!(
        server
            .list::<CertificateSigningRequest>(None)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        std::fs::read_link(&current).unwrap().to_str().unwrap(),
        target
    );
    assert_eq!(std::fs::read_dir(&cert_dir).unwrap().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_csr_is_a_clear_error_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    // It fails before the runtime is needed.
    let mut ox = Oxlet::in_dir(
        &dir.path().join("oxlet"),
        Some("unix:///nonexistent/oxlet-test.sock".into()),
    );
    ox.spawn(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--bootstrap-kubeconfig={}", server.kubeconfig().display()),
        &format!("--cert-dir={}", dir.path().join("pki").display()),
    ]);
    let mut csr = wait_csr(&server, &ox).await;
    let name = csr.metadata.name.clone().unwrap();
    csr.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "Denied".into(),
            status: "True".into(),
            reason: Some("NotThisNode".into()),
            message: Some("denied by the test".into()),
            ..Default::default()
        }]),
        certificate: None,
    });
    server.put(&csr).unwrap();
    let status = ox.wait_exit(WAIT);
    assert_eq!(status.code(), Some(1), "{}", tail(&ox.log(), 20));
    let log = ox.log();
    assert!(
        log.contains(&format!(
            "CertificateSigningRequest {name} was denied (reason \"NotThisNode\", message \"denied by the test\")"
        )),
        "{}",
        tail(&log, 20)
    );
    assert!(!Path::new(&kubeconfig).exists());
}

/// `--rotate-certificates`: a certificate that lives 10 s is renewed by a second CSR
/// before it expires (70-90 % of its life), the current link moves to the new pair,
/// and oxlet keeps serving throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lived_certificate_is_rotated_before_it_expires() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");
    let args = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--bootstrap-kubeconfig={}", server.kubeconfig().display()),
        format!("--cert-dir={}", cert_dir.display()),
        "--rotate-certificates=true".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ox = Oxlet::start(&bed, &args);
    let ca = Ca::new();
    let first = wait_csr(&server, &ox).await;
    let life = time::Duration::seconds(10);
    server
        .approve_csr(
            first.metadata.name.as_deref().unwrap(),
            Some(ca.sign_for(&request_pem(&first), life).as_bytes()),
        )
        .unwrap();
    let issued = std::time::Instant::now();
    ox.wait_up(WAIT).await;
    let current = cert_dir.join("kubelet-client-current.pem");
    let first_target = std::fs::read_link(&current).unwrap();
    let log = ox.log();
    assert!(
        log.contains("client certificate rotation is on") && log.contains("rotationDeadline"),
        "{}",
        tail(&log, 40)
    );

    // The second CSR comes before expiry, and not before 70 % of the life (7 s, less
    // the second the certificate was back-dated).
    let second = wait_new_csr(&server, &ox, &[first.metadata.name.as_deref().unwrap()]).await;
    let at = issued.elapsed();
    assert!(
        at >= Duration::from_secs(5) && at < Duration::from_secs(10),
        "second CSR after {at:?}"
    );
    let cn = format!(
        "{:?}",
        rcgen::CertificateSigningRequestParams::from_pem(&request_pem(&second))
            .unwrap()
            .params
            .distinguished_name
            .get(&rcgen::DnType::CommonName)
    );
    assert!(cn.contains("system:node:testnode"), "{cn}");
    // A new key: the request differs from the first.
    assert_ne!(request_pem(&second), request_pem(&first));
    server
        .approve_csr(
            second.metadata.name.as_deref().unwrap(),
            Some(ca.sign(&request_pem(&second)).as_bytes()),
        )
        .unwrap();

    // The link moves to a new pair file; oxlet keeps serving.
    let t = std::time::Instant::now();
    loop {
        let target = std::fs::read_link(&current).unwrap();
        if target != first_target {
            let name = target.to_str().unwrap();
            assert!(name.starts_with("kubelet-client-") && name.ends_with(".pem"));
            break;
        }
        assert!(
            t.elapsed() < WAIT,
            "the link did not move\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        cert_dir.join(&first_target).exists(),
        "the old pair is kept"
    );
    ox.wait_logged("rotated the client certificate", 1, WAIT)
        .await;
    assert!(ox.get("/pods").await.is_some(), "oxlet stopped serving");
    // The new certificate lives a year: no third CSR soon after.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server
            .list::<CertificateSigningRequest>(None)
            .unwrap()
            .len(),
        2
    );
    assert!(ox.get("/pods").await.is_some());
}
