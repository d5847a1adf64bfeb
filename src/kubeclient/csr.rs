//! The node's client certificate request, as kubelet makes it
//! (`certificate/kubelet.go`, client-go's `certificate/csr/csr.go`): a fresh ECDSA P-256
//! key, a CSR for `CN=system:node:<node>, O=system:nodes`, sent as a
//! `certificates.k8s.io/v1` CertificateSigningRequest to the signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, then waited on until it is approved
//! and issued, or denied, or failed, or the wait times out.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

/// kubelet's client signer.
pub(crate) const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// kubelet's usages for an ECDSA key (no `key encipherment`, which only RSA needs).
pub(crate) const USAGES: [&str; 2] = ["digital signature", "client auth"];
/// How often the CSR is read back while waiting.
const POLL: Duration = Duration::from_millis(500);

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

/// A new P-256 key and its CSR for `system:node:<node>` in group `system:nodes`.
pub(crate) fn node_request(node: &str) -> Result<NodeRequest, CsrError> {
    let generate = |source| CsrError::Generate {
        node: node.to_string(),
        source,
    };
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(generate)?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    let csr = params.serialize_request(&key).map_err(generate)?;
    Ok(NodeRequest {
        key_pem: key.serialize_pem(),
        csr_pem: csr.pem().map_err(generate)?,
    })
}

/// The CSR object kubelet posts (`expirationSeconds` unset: the signer decides).
pub(crate) fn csr_object(csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(USAGES.iter().map(|u| (*u).to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// Posts the CSR and waits up to `timeout` for the issued certificate (PEM).
pub(crate) async fn request_certificate(
    client: &kube::Client,
    csr_pem: &str,
    timeout: Duration,
) -> Result<Vec<u8>, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let created = api
        .create(&PostParams::default(), &csr_object(csr_pem))
        .await
        .map_err(CsrError::Create)?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(
        csr = name,
        signer = SIGNER,
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
fn issued(name: &str, csr: &CertificateSigningRequest) -> Result<Option<Vec<u8>>, CsrError> {
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
        let req = node_request("node-1").unwrap();
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

        let obj = csr_object(&req.csr_pem);
        assert_eq!(obj.metadata.generate_name.as_deref(), Some("csr-"));
        assert_eq!(obj.spec.signer_name, SIGNER);
        assert_eq!(
            obj.spec.usages.as_deref().unwrap(),
            ["digital signature", "client auth"]
        );
        assert_eq!(obj.spec.expiration_seconds, None);
        assert_eq!(obj.spec.request.0, req.csr_pem.as_bytes());
    }

    fn with(conditions: &[(&str, &str)], cert: Option<&[u8]>) -> CertificateSigningRequest {
        let mut csr = csr_object("x");
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
        assert_eq!(issued("c", &csr_object("x")).unwrap(), None);
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
}
