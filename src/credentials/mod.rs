//! Registry credentials for image pulls (kubelet's `pkg/credentialprovider` and
//! `credentialprovider/secrets`): the docker config formats, the keyring that matches a
//! repository to its logins, the node's own docker config, and a pod's
//! `imagePullSecrets`, and the credential provider plugins
//! (`--image-credential-provider-config`). Pod logins come first, then the node's docker
//! config, then the plugins' (kubelet's union keyring); a pull tries each in turn.

mod docker_config;
mod keyring;
mod node;
mod plugin;

use k8s_openapi::api::core::v1::Secret;

pub(crate) use docker_config::{Credential, DockerConfigError, Login, LoginSource};
pub(crate) use keyring::Keyring;
pub(crate) use node::NodeKeyring;
pub(crate) use plugin::{AccountError, AccountFuture, CredentialPlugins, ServiceAccounts};

/// The secret type and key of a `config.json`-style pull secret.
pub(crate) const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
pub(crate) const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// The secret type and key of the older `.dockercfg` pull secret.
pub(crate) const DOCKERCFG_TYPE: &str = "kubernetes.io/dockercfg";
pub(crate) const DOCKERCFG_KEY: &str = ".dockercfg";

/// kubelet's `MakeDockerKeyring`: the logins of the pull secrets, each read by its type
/// (a secret of another type, or without its key, adds nothing). One secret that does
/// not parse fails them all, as in kubelet, and the pull fails with its reason.
pub(crate) fn keyring_from_secrets(secrets: &[&Secret]) -> Result<Keyring, DockerConfigError> {
    let mut keyring = Keyring::default();
    for s in secrets {
        let what = format!(
            "secret {}/{}",
            s.metadata.namespace.as_deref().unwrap_or_default(),
            s.metadata.name.as_deref().unwrap_or_default()
        );
        let data = |key: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
                .filter(|b| !b.is_empty())
        };
        let cfg = match s.type_.as_deref() {
            Some(DOCKER_CONFIG_JSON_TYPE) => match data(DOCKER_CONFIG_JSON_KEY) {
                Some(b) => docker_config::parse_config_json(b, &what)?,
                None => continue,
            },
            Some(DOCKERCFG_TYPE) => match data(DOCKERCFG_KEY) {
                Some(b) => docker_config::parse_dockercfg(b, &what)?,
                None => continue,
            },
            _ => continue,
        };
        let source = LoginSource::Secret {
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
            uid: s.metadata.uid.clone().unwrap_or_default(),
        };
        keyring.add(&cfg, &source);
    }
    Ok(keyring)
}

/// The logins to try for `repository`: each keyring's matches in turn (kubelet's
/// union keyring: the pod's secrets, the node's docker config, the plugins').
pub(crate) fn lookup(keyrings: &[&Keyring], repository: &str) -> Vec<Login> {
    (keyrings.iter())
        .flat_map(|k| k.lookup(repository))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn secret(name: &str, type_: &str, key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    fn users(v: Vec<Login>) -> Vec<String> {
        v.into_iter().map(|l| l.credential.username).collect()
    }

    #[test]
    fn both_secret_kinds_are_read_by_their_type() {
        let json = secret(
            "a",
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            r#"{"auths":{"reg.io":{"username":"json","password":"p"}}}"#,
        );
        let old = secret(
            "b",
            DOCKERCFG_TYPE,
            DOCKERCFG_KEY,
            r#"{"reg.io/team":{"username":"cfg","password":"p"}}"#,
        );
        // The right key under the wrong type is not a pull secret.
        let opaque = secret(
            "c",
            "Opaque",
            DOCKER_CONFIG_JSON_KEY,
            r#"{"auths":{"reg.io":{"username":"opaque","password":"p"}}}"#,
        );
        let k = keyring_from_secrets(&[&json, &old, &opaque]).unwrap();
        assert_eq!(users(k.lookup("reg.io/team/app")), ["cfg", "json"]);
    }

    #[test]
    fn one_broken_secret_fails_with_its_name() {
        let good = secret(
            "good",
            DOCKERCFG_TYPE,
            DOCKERCFG_KEY,
            r#"{"reg.io":{"username":"u","password":"p"}}"#,
        );
        let bad = secret(
            "broken",
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            "{",
        );
        let e = keyring_from_secrets(&[&good, &bad]).unwrap_err();
        assert!(e.to_string().contains("secret ns/broken"), "{e}");
    }

    #[test]
    fn pod_logins_come_before_the_nodes() {
        let pod = keyring_from_secrets(&[&secret(
            "a",
            DOCKERCFG_TYPE,
            DOCKERCFG_KEY,
            r#"{"reg.io":{"username":"pod","password":"p"}}"#,
        )])
        .unwrap();
        let node = keyring_from_secrets(&[&secret(
            "n",
            DOCKERCFG_TYPE,
            DOCKERCFG_KEY,
            r#"{"reg.io/x":{"username":"node","password":"p"}}"#,
        )])
        .unwrap();
        let found = lookup(&[&pod, &node], "reg.io/x/y");
        assert_eq!(
            found[0].source,
            LoginSource::Secret {
                namespace: "ns".into(),
                name: "a".into(),
                uid: String::new()
            },
            "each login says which secret it came from"
        );
        assert_eq!(users(found), ["pod", "node"]);
        assert_eq!(
            users(lookup(&[&pod, &Keyring::default()], "other.io/x")),
            Vec::<String>::new()
        );
    }
}
