//! The node's certificate requests, as kubelet makes them (`certificate/kubelet.go`,
//! client-go's `certificate/csr/csr.go`): a fresh ECDSA P-256 key, a CSR for
//! `CN=system:node:<node>, O=system:nodes` (a serving one also names the node's
//! addresses), sent as a `certificates.k8s.io/v1` CertificateSigningRequest to the
//! client signer `kubernetes.io/kube-apiserver-client-kubelet` or the serving signer
//! `kubernetes.io/kubelet-serving`, then waited on until it is approved and issued, or
//! denied, or failed, or the wait times out.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

/// How often the CSR is read back while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Which of kubelet's two certificates a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signer {
    /// The client certificate the apiserver clients present.
    Client,
    /// The secure port's serving certificate (`serverTLSBootstrap`).
    Serving,
}

impl Signer {
    /// The signer the CSR names.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signer::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Signer::Serving => "kubernetes.io/kubelet-serving",
        }
    }

    /// kubelet's usages for an ECDSA key (client-go's `DefaultKubelet*GetUsages`: no
    /// `key encipherment`, which only an RSA key needs).
    pub(crate) fn usages(self) -> [&'static str; 2] {
        match self {
            Signer::Client => ["digital signature", "client auth"],
            Signer::Serving => ["digital signature", "server auth"],
        }
    }
}

/// What a certificate for this node must say (client-go's `Config.GetTemplate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub node: String,
    /// Subject alternative names; empty for the client certificate.
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Template {
    /// The client certificate's: the subject alone.
    pub(crate) fn client(node: &str) -> Template {
        Template {
            node: node.to_string(),
            dns_names: Vec::new(),
            ips: Vec::new(),
        }
    }

    /// The serving certificate's: kubelet's `addressesToHostnamesAndIPs` over the
    /// node's addresses, in their order, each once (Hostname, ExternalDNS and
    /// InternalDNS are names; InternalIP and ExternalIP are IPs; an address that does
    /// not parse as an IP is left out). None when there is no address to name, as
    /// kubelet requests nothing until it knows one.
    pub(crate) fn serving(node: &str, addresses: &[NodeAddress]) -> Option<Template> {
        let mut t = Template::client(node);
        for a in addresses.iter().filter(|a| !a.address.is_empty()) {
            match a.type_.as_str() {
                "Hostname" | "ExternalDNS" | "InternalDNS" if !t.dns_names.contains(&a.address) => {
                    t.dns_names.push(a.address.clone());
                }
                "InternalIP" | "ExternalIP" => {
                    if let Ok(ip) = a.address.parse::<IpAddr>()
                        && !t.ips.contains(&ip)
                    {
                        t.ips.push(ip);
                    }
                }
                _ => {}
            }
        }
        (!t.dns_names.is_empty() || !t.ips.is_empty()).then_some(t)
    }

    fn common_name(&self) -> String {
        format!("system:node:{}", self.node)
    }

    /// client-go's `certSatisfiesTemplate`: the certificate's CN, organizations, DNS
    /// names and IPs are the template's, as sets. A certificate that cannot be read
    /// satisfies nothing.
    pub(crate) fn satisfied_by(&self, cert_pem: &[u8]) -> bool {
        let Some(pem) = certificate_blocks(cert_pem).next() else {
            return false;
        };
        let Ok(cert) = pem.parse_x509() else {
            return false;
        };
        let subject = cert.subject();
        let cn: Vec<&str> = (subject.iter_common_name())
            .filter_map(|a| a.as_str().ok())
            .collect();
        let orgs: BTreeSet<&str> = (subject.iter_organization())
            .filter_map(|a| a.as_str().ok())
            .collect();
        let (mut dns, mut ips) = (BTreeSet::new(), BTreeSet::new());
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        dns.insert(d.to_string());
                    }
                    x509_parser::extensions::GeneralName::IPAddress(b) => {
                        ips.insert(ip_of(b));
                    }
                    _ => {}
                }
            }
        }
        cn.first().copied() == Some(self.common_name().as_str())
            && orgs == BTreeSet::from(["system:nodes"])
            && dns == self.dns_names.iter().cloned().collect()
            && ips == self.ips.iter().map(|ip| Some(*ip)).collect()
    }
}

/// The PEM `CERTIFICATE` blocks in `pem`, in order (a certificate-and-key file is
/// fine; reading stops at the first block that is not PEM).
pub(crate) fn certificate_blocks(pem: &[u8]) -> impl Iterator<Item = x509_parser::pem::Pem> + '_ {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .map_while(Result::ok)
        .filter(|p| p.label == "CERTIFICATE")
}

/// A SAN's IP bytes (4 or 16), or None when they are neither.
fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// A key and the PEM CSR made with it.
pub(crate) struct NodeRequest {
    /// PKCS#8 PEM.
    pub key_pem: String,
    pub csr_pem: String,
}

/// Why no certificate was obtained.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CsrError {
    #[error("cannot make a key and CSR for node {node}")]
    Generate {
        node: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("cannot create the CertificateSigningRequest")]
    Create(#[source] kube::Error),
    #[error("CertificateSigningRequest {name}: cannot read it back")]
    Get {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CertificateSigningRequest {name} was denied (reason {reason:?}, message {message:?})")]
    Denied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("CertificateSigningRequest {name} failed (reason {reason:?}, message {message:?})")]
    Failed {
        name: String,
        reason: String,
        message: String,
    },
    #[error(
        "CertificateSigningRequest {name}: no certificate was issued within {timeout:?} (is a CSR approver running?)"
    )]
    Timeout { name: String, timeout: Duration },
}

/// A new P-256 key and its CSR for `system:node:<node>` in group `system:nodes`,
/// naming the template's DNS names and IPs.
pub(crate) fn node_request(template: &Template) -> Result<NodeRequest, CsrError> {
    let generate = |source| CsrError::Generate {
        node: template.node.clone(),
        source,
    };
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate)?;
    let mut params = rcgen::CertificateParams::new(template.dns_names.clone()).map_err(generate)?;
    params
        .subject_alt_names
        .extend(template.ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, template.common_name());
    params.distinguished_name = dn;
    let csr = params.serialize_request(&key).map_err(generate)?;
    Ok(NodeRequest {
        key_pem: key.serialize_pem(),
        csr_pem: csr.pem().map_err(generate)?,
    })
}

/// The CSR object kubelet posts (`expirationSeconds` unset: the signer decides).
pub(crate) fn csr_object(csr_pem: &str, signer: Signer) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: signer.name().into(),
            usages: Some(signer.usages().iter().map(|u| (*u).to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// Posts the CSR and waits up to `timeout` for the issued certificate (PEM).
pub(crate) async fn request_certificate(
    client: &kube::Client,
    csr_pem: &str,
    signer: Signer,
    timeout: Duration,
) -> Result<Vec<u8>, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let created = api
        .create(&PostParams::default(), &csr_object(csr_pem, signer))
        .await
        .map_err(CsrError::Create)?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(
        csr = name,
        signer = signer.name(),
        "created a CertificateSigningRequest; waiting for its approval and certificate"
    );
    let deadline = tokio::time::Instant::now() + timeout;
    let mut current = created;
    loop {
        if let Some(cert) = issued(&name, &current)? {
            return Ok(cert);
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(CsrError::Timeout { name, timeout });
        }
        tokio::time::sleep(POLL).await;
        match api.get(&name).await {
            Ok(c) => current = c,
            // A lost connection is retried until the deadline; a gone CSR is not.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(CsrError::Get {
                    name: name.clone(),
                    source: kube::Error::Api(s),
                });
            }
            Err(e) => tracing::debug!(csr = name, error = %e, "cannot read the CSR; retrying"),
        }
    }
}

/// client-go's `ensureCompatible`/`WaitForCertificate` verdict: Denied and Failed end
/// the wait, Approved with a certificate ends it with the certificate.
pub(crate) fn issued(
    name: &str,
    csr: &CertificateSigningRequest,
) -> Result<Option<Vec<u8>>, CsrError> {
    let Some(status) = &csr.status else {
        return Ok(None);
    };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            continue;
        }
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => {
                return Err(CsrError::Denied {
                    name: name.to_string(),
                    reason,
                    message,
                });
            }
            "Failed" => {
                return Err(CsrError::Failed {
                    name: name.to_string(),
                    reason,
                    message,
                });
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    Ok(status
        .certificate
        .as_ref()
        .filter(|c| approved && !c.0.is_empty())
        .map(|c| c.0.clone()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    use rcgen::PublicKeyData as _;

    use super::*;

    #[test]
    fn the_request_is_kubelets() {
        let req = node_request(&Template::client("node-1")).unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&req.csr_pem).unwrap();
        let dn = &parsed.params.distinguished_name;
        let cn = format!("{:?}", dn.get(&rcgen::DnType::CommonName));
        let o = format!("{:?}", dn.get(&rcgen::DnType::OrganizationName));
        assert!(cn.contains("\"system:node:node-1\""), "{cn}");
        assert!(o.contains("\"system:nodes\""), "{o}");
        assert!(parsed.public_key.algorithm() == &rcgen::PKCS_ECDSA_P256_SHA256);
        // The key is the CSR's key.
        let key = rcgen::KeyPair::from_pem(&req.key_pem).unwrap();
        assert_eq!(key.public_key_raw(), parsed.public_key.der_bytes());

        let obj = csr_object(&req.csr_pem, Signer::Client);
        assert_eq!(obj.metadata.generate_name.as_deref(), Some("csr-"));
        assert_eq!(
            obj.spec.signer_name,
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(
            obj.spec.usages.as_deref().unwrap(),
            ["digital signature", "client auth"]
        );
        assert_eq!(obj.spec.expiration_seconds, None);
        assert_eq!(obj.spec.request.0, req.csr_pem.as_bytes());
    }

    fn with(conditions: &[(&str, &str)], cert: Option<&[u8]>) -> CertificateSigningRequest {
        let mut csr = csr_object("x", Signer::Client);
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| CertificateSigningRequestCondition {
                        type_: (*t).into(),
                        status: (*s).into(),
                        reason: Some("R".into()),
                        message: Some("M".into()),
                        ..CertificateSigningRequestCondition::default()
                    })
                    .collect(),
            ),
            certificate: cert.map(|c| ByteString(c.to_vec())),
        });
        csr
    }

    #[test]
    fn the_wait_ends_as_client_gos() {
        assert_eq!(issued("c", &csr_object("x", Signer::Client)).unwrap(), None);
        assert_eq!(
            issued("c", &with(&[("Approved", "True")], None)).unwrap(),
            None
        );
        // A certificate without approval is not taken.
        assert_eq!(issued("c", &with(&[], Some(b"C"))).unwrap(), None);
        assert_eq!(
            issued("c", &with(&[("Approved", "True")], Some(b"C"))).unwrap(),
            Some(b"C".to_vec())
        );
        let denied = issued("csr-x", &with(&[("Denied", "True")], None)).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "CertificateSigningRequest csr-x was denied (reason \"R\", message \"M\")"
        );
        assert!(matches!(
            issued(
                "c",
                &with(&[("Approved", "True"), ("Failed", "True")], Some(b"C"))
            ),
            Err(CsrError::Failed { .. })
        ));
        assert_eq!(
            issued("c", &with(&[("Denied", "False")], None)).unwrap(),
            None
        );
    }

    fn address(type_: &str, address: &str) -> NodeAddress {
        NodeAddress {
            type_: type_.into(),
            address: address.into(),
        }
    }

    /// kubelet's `addressesToHostnamesAndIPs`: names and IPs in the addresses' order,
    /// each once; no template without an address.
    #[test]
    fn the_serving_template_names_the_nodes_addresses() {
        let t = Template::serving(
            "n1",
            &[
                address("InternalIP", "10.0.0.5"),
                address("Hostname", "n1"),
                address("ExternalIP", "fd00::5"),
                address("InternalDNS", "n1.cluster.local"),
                address("InternalIP", "10.0.0.5"),
                address("Hostname", ""),
                address("ExternalIP", "not-an-ip"),
            ],
        )
        .unwrap();
        assert_eq!(t.dns_names, ["n1", "n1.cluster.local"]);
        assert_eq!(
            t.ips,
            [
                "10.0.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        assert_eq!(Template::serving("n1", &[address("Hostname", "")]), None);
        assert_eq!(Template::serving("n1", &[]), None);
    }

    /// The serving CSR carries the template's SANs and goes to the serving signer;
    /// a certificate satisfies the template only with the same names, as sets.
    #[test]
    fn a_serving_request_names_the_addresses_and_a_certificate_must_match() {
        let t = Template::serving(
            "n1",
            &[address("InternalIP", "10.0.0.5"), address("Hostname", "n1")],
        )
        .unwrap();
        let req = node_request(&t).unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&req.csr_pem).unwrap();
        let sans = format!("{:?}", parsed.params.subject_alt_names);
        assert!(
            sans.contains("\"n1\"") && sans.contains("10.0.0.5"),
            "{sans}"
        );
        let obj = csr_object(&req.csr_pem, Signer::Serving);
        assert_eq!(obj.spec.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(
            obj.spec.usages.as_deref().unwrap(),
            ["digital signature", "server auth"]
        );

        // Signed as the CSR asks: satisfies it.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let sign = |csr_pem: &str| {
            rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
                .unwrap()
                .signed_by(&issuer)
                .unwrap()
                .pem()
        };
        let cert = sign(&req.csr_pem);
        assert!(t.satisfied_by(cert.as_bytes()));
        // Another address set, another node, or the client certificate: not.
        let moved = Template::serving(
            "n1",
            &[address("InternalIP", "10.0.0.6"), address("Hostname", "n1")],
        )
        .unwrap();
        assert!(!moved.satisfied_by(cert.as_bytes()));
        let other = Template {
            node: "n2".into(),
            ..t.clone()
        };
        assert!(!other.satisfied_by(cert.as_bytes()));
        let client = sign(&node_request(&Template::client("n1")).unwrap().csr_pem);
        assert!(!t.satisfied_by(client.as_bytes()));
        assert!(Template::client("n1").satisfied_by(client.as_bytes()));
        assert!(!t.satisfied_by(b"no certificate"));
    }
}
