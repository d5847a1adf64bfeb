//! `--bootstrap-kubeconfig` against the in-repo apiserver and the real binary: a
//! missing `--kubeconfig` makes oxlet send a node CSR, which the test signs with its
//! own CA and approves; oxlet then stores the pair, writes the kubeconfig and starts.
//! A second start with that kubeconfig sends no CSR; a denied CSR ends oxlet with a
//! clear error and exit code 1. With `--rotate-server-certificates` the secure port's
//! certificate comes the same way, from the serving signer, and is rotated too.

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
    /// The CA's own certificate, for clients that trust it.
    cert_pem: String,
}

impl Ca {
    fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        let cert_pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            cert_pem,
        }
    }

    fn pem(&self) -> String {
        self.cert_pem.clone()
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
    // The client pair and its `-current` link, and nothing new beside them (the
    // secure port's self-signed kubelet.crt and kubelet.key share the directory).
    let client_files = std::fs::read_dir(&cert_dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("kubelet-client")
        })
        .count();
    assert_eq!(client_files, 2);
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
            "CertificateSigningRequest {name} was denied (reason \\\"NotThisNode\\\", message \\\"denied by the test\\\")"
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

/// The first CSR to `signer` whose name is not in `seen`, waiting for it.
async fn wait_signer_csr(
    server: &TestApiServer,
    ox: &Oxlet,
    signer: &str,
    seen: &[String],
) -> CertificateSigningRequest {
    let t = std::time::Instant::now();
    loop {
        let found = (server.list::<CertificateSigningRequest>(None).unwrap())
            .into_iter()
            .find(|c| {
                c.spec.signer_name == signer
                    && !seen
                        .iter()
                        .any(|s| Some(s.as_str()) == c.metadata.name.as_deref())
            });
        if let Some(csr) = found {
            return csr;
        }
        assert!(
            t.elapsed() < WAIT,
            "no {signer} CSR\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn serving_csrs(server: &TestApiServer) -> Vec<String> {
    (server.list::<CertificateSigningRequest>(None).unwrap())
        .into_iter()
        .filter(|c| c.spec.signer_name == SERVING_SIGNER)
        .filter_map(|c| c.metadata.name)
        .collect()
}

const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The certificate (DER) the secure port presents to a client trusting `ca` and
/// checking the name `name`, or why the handshake failed.
async fn presented(port: u16, ca: &str, name: &str) -> Result<Vec<u8>, String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tls = connector
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    Ok(leaf.as_ref().to_vec())
}

/// Waits until the secure port presents a certificate other than `old`.
async fn wait_presented(
    port: u16,
    ca: &str,
    name: &str,
    old: Option<&[u8]>,
    ox: &Oxlet,
) -> Vec<u8> {
    let t = std::time::Instant::now();
    loop {
        let now = presented(port, ca, name).await;
        match now {
            Ok(der) if Some(der.as_slice()) != old => return der,
            _ => {}
        }
        assert!(
            t.elapsed() < WAIT,
            "the secure port never presented a new certificate ({now:?})\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts oxlet against `server` with `--rotate-server-certificates`, its secure
/// port on `port` and the node's InternalIP `node_ip`.
fn start_serving_bootstrap(
    bed: &Testbed,
    server: &TestApiServer,
    cert_dir: &Path,
    port: u16,
    node_ip: &str,
) -> Oxlet {
    let args = [
        format!("--kubeconfig={}", server.kubeconfig().display()),
        format!("--cert-dir={}", cert_dir.display()),
        "--rotate-server-certificates=true".to_string(),
        format!("--port={port}"),
        format!("--node-ip={node_ip}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Oxlet::start(bed, &args)
}

/// `serverTLSBootstrap` (`--rotate-server-certificates`), as kubelet's serving
/// certificate manager: no self-signed pair; a CSR to the serving signer naming the
/// node's addresses; handshakes fail until it is issued, then present it; a
/// short-lived one is rotated before it expires; a restart serves the stored one at
/// once and sends no CSR, unless the node's addresses changed, which sends one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_certificate_is_requested_presented_rotated_and_kept() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let cert_dir = dir.path().join("pki");
    let port = free_port();
    let mut ox = start_serving_bootstrap(&bed, &server, &cert_dir, port, "127.0.0.1");

    // The CSR is kubelet's: the node's subject and addresses, the serving signer.
    let first = wait_signer_csr(&server, &ox, SERVING_SIGNER, &[]).await;
    assert_eq!(
        first.spec.usages.as_deref().unwrap(),
        ["digital signature", "server auth"]
    );
    let parsed = rcgen::CertificateSigningRequestParams::from_pem(&request_pem(&first)).unwrap();
    let dn = &parsed.params.distinguished_name;
    let cn = format!("{:?}", dn.get(&rcgen::DnType::CommonName));
    let o = format!("{:?}", dn.get(&rcgen::DnType::OrganizationName));
    assert!(
        cn.contains("\"system:node:testnode\"") && o.contains("\"system:nodes\""),
        "{cn} {o}"
    );
    let sans = format!("{:?}", parsed.params.subject_alt_names);
    assert!(
        sans.contains("\"testnode\"") && sans.contains("127.0.0.1"),
        "{sans}"
    );
    assert!(
        !cert_dir.join("kubelet.crt").exists(),
        "no self-signed pair is made"
    );

    // Until it is issued, the port is open but no handshake succeeds.
    let ca = Ca::new();
    let ca_pem = ca.pem();
    ox.wait_up(WAIT).await;
    let e = presented(port, &ca_pem, "127.0.0.1").await.unwrap_err();
    assert!(e.starts_with("handshake"), "{e}");

    let life = time::Duration::seconds(10);
    let first_name = first.metadata.name.clone().unwrap();
    server
        .approve_csr(
            &first_name,
            Some(ca.sign_for(&request_pem(&first), life).as_bytes()),
        )
        .unwrap();
    let issued = std::time::Instant::now();
    // Presented under both of its names, in the store as kubelet keeps it.
    let one = wait_presented(port, &ca_pem, "127.0.0.1", None, &ox).await;
    assert_eq!(presented(port, &ca_pem, "testnode").await.unwrap(), one);
    let current = cert_dir.join("kubelet-server-current.pem");
    let target = std::fs::read_link(&current).unwrap();
    assert!(
        target.to_str().unwrap().starts_with("kubelet-server-"),
        "{target:?}"
    );
    let mode = std::fs::metadata(cert_dir.join(&target))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Rotated before it expires, not before 70 % of its life; the new one is
    // presented from the next handshake.
    let second = wait_signer_csr(
        &server,
        &ox,
        SERVING_SIGNER,
        std::slice::from_ref(&first_name),
    )
    .await;
    let at = issued.elapsed();
    assert!(
        at >= Duration::from_secs(5) && at < Duration::from_secs(10),
        "second CSR after {at:?}"
    );
    assert_ne!(request_pem(&second), request_pem(&first));
    let second_name = second.metadata.name.clone().unwrap();
    server
        .approve_csr(
            &second_name,
            Some(ca.sign(&request_pem(&second)).as_bytes()),
        )
        .unwrap();
    let two = wait_presented(port, &ca_pem, "127.0.0.1", Some(&one), &ox).await;
    ox.wait_logged("rotated the serving certificate", 1, WAIT)
        .await;
    ox.sigterm();

    // A restart serves the stored certificate at once and asks for nothing.
    let mut ox = start_serving_bootstrap(&bed, &server, &cert_dir, port, "127.0.0.1");
    assert_eq!(
        wait_presented(port, &ca_pem, "127.0.0.1", None, &ox).await,
        two
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(serving_csrs(&server).len(), 2, "{}", tail(&ox.log(), 20));
    ox.sigterm();

    // New addresses: the stored certificate no longer names them, so a CSR goes out
    // at once, for the new ones; the old certificate is served meanwhile.
    let ox = start_serving_bootstrap(&bed, &server, &cert_dir, port, "127.0.0.2");
    let third = wait_signer_csr(&server, &ox, SERVING_SIGNER, &[first_name, second_name]).await;
    let sans = format!(
        "{:?}",
        rcgen::CertificateSigningRequestParams::from_pem(&request_pem(&third))
            .unwrap()
            .params
            .subject_alt_names
    );
    assert!(
        sans.contains("127.0.0.2") && !sans.contains("127.0.0.1"),
        "{sans}"
    );
    assert_eq!(
        wait_presented(port, &ca_pem, "testnode", None, &ox).await,
        two
    );
    let log = ox.log();
    assert!(
        log.contains("does not name what a new request would"),
        "{}",
        tail(&log, 30)
    );
}
