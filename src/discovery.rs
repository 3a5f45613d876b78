//! Cluster discovery: the facts about the cluster that nodes' user data needs, found at startup
//! as Karpenter v1.5 finds them (`pkg/operator/operator.go`, `pkg/providers/launchtemplate`).
//! `karpenter run` and the simulation's daemon both call [`discover`], so a simulation finds its
//! cluster through the same path a deployment does.
//!
//! ```text
//! CLUSTER_NAME ------------------------------------------------> name
//! CLUSTER_ENDPOINT, else EKS DescribeCluster(name).endpoint ----> endpoint (failure: startup fails,
//!                                                                  "failed detecting cluster endpoint")
//! EKS DescribeCluster(name) serviceIpv4Cidr, else serviceIpv6Cidr -> service CIDR (AL2023's
//!                                                                  nodeadm; failure: a warning, and
//!                                                                  AL2023 EC2NodeClasses stay not ready)
//! CLUSTER_CA_BUNDLE, else the kube client's CA (kubeconfig
//!   certificate-authority(-data) or in-cluster ca.crt) ----------> CA bundle (base64 PEM; none:
//!                                                                  nodes fetch it themselves)
//! kube-system/kube-dns Service clusterIP ------------------------> DNS (best effort)
//! EKS_CONTROL_PLANE: EKS DescribeCluster(name).version, else
//!   the API server's /version ------------------------------------> the Kubernetes version's
//!                                                                  source ([`version_source`])
//! ```
//!
//! One `DescribeCluster` serves both the endpoint and the CIDR. Karpenter resolves the CIDR
//! lazily, on the first reconcile of an AL2023 EC2NodeClass, and retries it there; here it is
//! resolved once at startup (each call already retried by the AWS call policy), and the daemon is
//! built with the result.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Service;
use karpenter_actors::ports::aws_error::AwsError;
use karpenter_actors::ports::eks::{EksApi, EksCluster};
use karpenter_actors::ports::version::KubernetesVersionSource;
use karpenter_actors::providers::version::EksVersionSource;
use karpenter_config::Settings;
use karpenter_core::domain::userdata::ClusterInfo;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Api, Client};

use crate::kube::version::KubeVersionSource;

/// The namespace and name of the cluster DNS Service Karpenter reads.
pub const KUBE_DNS_NAMESPACE: &str = "kube-system";
pub const KUBE_DNS_SERVICE: &str = "kube-dns";
/// Bytes of base64 per PEM line (RFC 7468).
const PEM_LINE: usize = 64;

/// Where the kube client's CA comes from.
#[derive(Debug, Clone, Copy)]
pub enum KubeCa<'a> {
    /// The configuration the client was built from: this kubeconfig, or (`None`) kube's
    /// inference (in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`).
    Config(Option<&'a Path>),
    /// A client with no TLS configuration (the in-process emulator of a simulation).
    None,
}

/// What discovery needs.
#[derive(Clone, Copy)]
pub struct DiscoveryInputs<'a> {
    pub settings: &'a Settings,
    pub eks: &'a dyn EksApi,
    pub client: &'a Client,
    pub kube_ca: KubeCa<'a>,
}

impl std::fmt::Debug for DiscoveryInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryInputs")
            .field("cluster_name", &self.settings.cluster_name)
            .field("eks", &self.eks)
            .field("kube_ca", &self.kube_ca)
            .finish_non_exhaustive()
    }
}

/// Why the cluster could not be discovered (the daemon does not start).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("CLUSTER_NAME is not set; discovery needs the EKS cluster's name")]
    NoClusterName,
    /// Karpenter's log message for the same failure.
    #[error(
        "failed detecting cluster endpoint: EKS DescribeCluster of cluster {cluster:?} failed \
         (set CLUSTER_ENDPOINT, or allow eks:DescribeCluster)"
    )]
    Endpoint {
        cluster: String,
        #[source]
        source: AwsError,
    },
    #[error("failed detecting cluster endpoint: EKS cluster {cluster:?} has no endpoint yet")]
    NoEndpoint { cluster: String },
    #[error("reading the kube client's CA for the nodes (set CLUSTER_CA_BUNDLE to skip it)")]
    KubeCa(#[source] KubeCaError),
}

impl DiscoveryError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NoClusterName => "settings",
            Self::Endpoint { source, .. } => source.category(),
            Self::NoEndpoint { .. } => "no_endpoint",
            Self::KubeCa(_) => "kube_ca",
        }
    }
}

/// Why the kube client's CA could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeCaError {
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("finding a Kubernetes configuration (in-cluster or KUBECONFIG)")]
    Infer(#[source] kube::config::InferConfigError),
}

/// Discovers the cluster (see the module docs).
pub async fn discover(inputs: DiscoveryInputs<'_>) -> Result<ClusterInfo, DiscoveryError> {
    let settings = inputs.settings;
    let name = settings
        .cluster_name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(DiscoveryError::NoClusterName)?;
    let configured_endpoint = settings
        .cluster_endpoint
        .as_ref()
        .map(|url| url.as_str().to_owned());
    let described = match inputs.eks.describe_cluster(&name).await {
        Ok(cluster) => Some(cluster),
        Err(source) if configured_endpoint.is_none() => {
            return Err(DiscoveryError::Endpoint {
                cluster: name,
                source,
            });
        }
        Err(error) => {
            tracing::error!(
                cluster = %name,
                error = karpenter_actors::logs::err(&error),
                "failed detecting cluster CIDR; AL2023 EC2NodeClasses stay not ready"
            );
            None
        }
    };
    let endpoint = match configured_endpoint {
        Some(endpoint) => endpoint,
        None => described
            .as_ref()
            .and_then(|c| c.endpoint.clone())
            .ok_or_else(|| DiscoveryError::NoEndpoint {
                cluster: name.clone(),
            })?,
    };
    tracing::debug!("cluster-endpoint" = %endpoint, "discovered cluster endpoint");
    let service_cidr = described
        .as_ref()
        .and_then(EksCluster::service_cidr)
        .map(str::to_owned);
    match (&service_cidr, &described) {
        (Some(cidr), Some(cluster)) => tracing::debug!(
            "cluster-cidr" = %cidr,
            "ip-family" = cluster.ip_family.as_str(),
            version = cluster.version.as_deref().unwrap_or(""),
            "discovered cluster CIDR"
        ),
        (None, Some(_)) => tracing::error!(
            cluster = %name,
            error = "no service CIDR in the DescribeCluster response",
            "failed detecting cluster CIDR; AL2023 EC2NodeClasses stay not ready"
        ),
        _ => {}
    }
    let ca_bundle = match settings.cluster_ca_bundle.clone().filter(|b| !b.is_empty()) {
        Some(bundle) => Some(bundle),
        None => kube_ca_bundle(inputs.kube_ca)
            .await
            .map_err(DiscoveryError::KubeCa)?,
    };
    let dns_ips = match cluster_dns(inputs.client).await {
        Ok(Some(ip)) => {
            tracing::debug!("kube-dns-ip" = %ip, "discovered kube dns");
            vec![ip]
        }
        Ok(None) => {
            tracing::debug!(
                "unable to detect the IP of the kube-dns service: no cluster IP; nodes use their \
                 bootstrap's DNS default"
            );
            Vec::new()
        }
        // Karpenter goes on without it: custom DNS setups have no kube-dns Service.
        Err(error) => {
            tracing::debug!(
                error = karpenter_actors::logs::err(&error),
                "unable to detect the IP of the kube-dns service"
            );
            Vec::new()
        }
    };
    Ok(ClusterInfo {
        name,
        endpoint,
        ca_bundle,
        dns_ips,
        service_cidr,
    })
}

/// The cluster DNS address: the `kube-system/kube-dns` Service's cluster IP, as Karpenter reads
/// it; `None` when the Service is missing or has no (parseable) cluster IP.
pub async fn cluster_dns(client: &Client) -> Result<Option<IpAddr>, kube::Error> {
    let services: Api<Service> = Api::namespaced(client.clone(), KUBE_DNS_NAMESPACE);
    let service = services.get_opt(KUBE_DNS_SERVICE).await?;
    Ok(service
        .and_then(|s| s.spec)
        .and_then(|s| s.cluster_ip)
        .and_then(|ip| ip.parse().ok()))
}

/// The kube client's CA as `CLUSTER_CA_BUNDLE` spells it (base64 of the PEM certificates); `None`
/// when the configuration has none (plain HTTP, or the system roots).
pub async fn kube_ca_bundle(source: KubeCa<'_>) -> Result<Option<String>, KubeCaError> {
    let config = match source {
        KubeCa::None => return Ok(None),
        KubeCa::Config(Some(path)) => {
            let kubeconfig = |source| KubeCaError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let parsed = Kubeconfig::read_from(path).map_err(kubeconfig)?;
            kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
                .await
                .map_err(kubeconfig)?
        }
        KubeCa::Config(None) => kube::Config::infer().await.map_err(KubeCaError::Infer)?,
    };
    Ok(config.root_cert.as_deref().and_then(ca_bundle_of))
}

/// Base64 of the PEM encoding of DER certificates; `None` for none.
#[must_use]
pub fn ca_bundle_of(certificates: &[Vec<u8>]) -> Option<String> {
    if certificates.is_empty() {
        return None;
    }
    let mut pem = String::new();
    for der in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = STANDARD.encode(der);
        // Base64 is ASCII, so byte chunks are character chunks.
        for line in body.as_bytes().chunks(PEM_LINE) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(STANDARD.encode(pem))
}

/// Where the Kubernetes version is read, at startup and by the `VersionActor`: EKS
/// `DescribeCluster` of `CLUSTER_NAME` with `EKS_CONTROL_PLANE`, else the API server's `/version`
/// (Karpenter's `providers.version`).
#[must_use]
pub fn version_source(
    settings: &Settings,
    client: &Client,
    eks: Arc<dyn EksApi>,
) -> Arc<dyn KubernetesVersionSource> {
    match (&settings.cluster_name, settings.eks_control_plane) {
        (Some(cluster), true) => Arc::new(EksVersionSource::new(eks, cluster)),
        // Without a cluster name there is no EKS cluster to ask (`run` refuses to start then).
        _ => Arc::new(KubeVersionSource::new(client.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_actors::kwok::eks::{KWOK_CLUSTER_ENDPOINT, KWOK_SERVICE_CIDR, KwokEks};
    use karpenter_actors::ports::aws_error::AwsService;
    use karpenter_config::HttpUrl;

    fn settings(endpoint: Option<&str>) -> Settings {
        Settings {
            cluster_name: Some("kwok".into()),
            cluster_endpoint: endpoint.and_then(|e| HttpUrl::parse(e).ok()),
            ..Settings::default()
        }
    }

    async fn run(settings: &Settings, eks: &KwokEks) -> Result<ClusterInfo, DiscoveryError> {
        let emulator = crate::emulator::Emulator::new().unwrap();
        let client = emulator.client();
        discover(DiscoveryInputs {
            settings,
            eks,
            client: &client,
            kube_ca: KubeCa::None,
        })
        .await
    }

    #[tokio::test]
    async fn the_endpoint_and_cidr_come_from_describe_cluster_when_not_set() {
        let eks = KwokEks::with_cluster("kwok");
        let info = run(&settings(None), &eks).await.unwrap();
        assert_eq!(info.name, "kwok");
        assert_eq!(info.endpoint, KWOK_CLUSTER_ENDPOINT);
        assert_eq!(info.service_cidr.as_deref(), Some(KWOK_SERVICE_CIDR));
        assert_eq!(info.ca_bundle, None);
        assert!(
            info.dns_ips.is_empty(),
            "no kube-dns Service in a bare emulator"
        );
    }

    #[tokio::test]
    async fn a_set_endpoint_wins_and_a_failed_describe_only_loses_the_cidr() {
        let eks = KwokEks::with_cluster("kwok");
        let info = run(&settings(Some("https://api.example.com")), &eks)
            .await
            .unwrap();
        assert_eq!(info.endpoint, "https://api.example.com");
        assert_eq!(info.service_cidr.as_deref(), Some(KWOK_SERVICE_CIDR));

        let unauthorized = AwsError::new(
            AwsService::Eks,
            "DescribeCluster",
            Some("AccessDeniedException"),
            "not authorized to perform: eks:DescribeCluster",
        )
        .with_status(403);
        eks.faults().fail_next("DescribeCluster", 1, unauthorized);
        let info = run(&settings(Some("https://api.example.com")), &eks)
            .await
            .unwrap();
        assert_eq!(info.endpoint, "https://api.example.com");
        assert_eq!(info.service_cidr, None);
    }

    #[tokio::test]
    async fn a_missing_cluster_without_an_endpoint_fails_naming_the_cluster() {
        let eks = KwokEks::default();
        let error = run(&settings(None), &eks).await.unwrap_err();
        let text = karpenter_core::errors::chain(&error);
        assert!(
            text.starts_with("failed detecting cluster endpoint"),
            "{text}"
        );
        assert!(text.contains("\"kwok\""), "{text}");
        assert!(text.contains("No cluster found for name: kwok."), "{text}");
        assert_eq!(error.category(), "not_found");
    }

    #[tokio::test]
    async fn the_ca_bundle_setting_is_used_as_given() {
        let eks = KwokEks::with_cluster("kwok");
        let mut with_bundle = settings(None);
        with_bundle.cluster_ca_bundle = Some("U0VUVElORw==".into());
        let info = run(&with_bundle, &eks).await.unwrap();
        assert_eq!(info.ca_bundle.as_deref(), Some("U0VUVElORw=="));
    }

    #[tokio::test]
    async fn a_kubeconfigs_certificate_authority_data_comes_back_as_the_ca_bundle() {
        let bundle = ca_bundle_of(&[(0..200).collect()]).unwrap();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:6443', \
             certificate-authority-data: {bundle}}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n"
        );
        let path = std::env::temp_dir().join(format!(
            "karpenter-discovery-{}.kubeconfig",
            std::process::id()
        ));
        std::fs::write(&path, kubeconfig).unwrap();
        let found = kube_ca_bundle(KubeCa::Config(Some(&path))).await;
        let _ = std::fs::remove_file(&path);
        assert_eq!(found.unwrap(), Some(bundle));
        assert_eq!(kube_ca_bundle(KubeCa::None).await.unwrap(), None);
    }

    #[test]
    fn der_certificates_become_base64_pem_as_cluster_ca_bundle_has_it() {
        assert_eq!(ca_bundle_of(&[]), None);
        let der: Vec<u8> = (0..=255).collect();
        let bundle = ca_bundle_of(&[der.clone(), vec![1, 2, 3]]).unwrap();
        let pem = String::from_utf8(STANDARD.decode(bundle).unwrap()).unwrap();
        let blocks: Vec<&str> = pem
            .split("-----END CERTIFICATE-----\n")
            .filter(|b| !b.is_empty())
            .collect();
        assert_eq!(blocks.len(), 2, "{pem}");
        let first: String = blocks[0]
            .trim_start_matches("-----BEGIN CERTIFICATE-----\n")
            .lines()
            .inspect(|line| assert!(line.len() <= PEM_LINE, "{line}"))
            .collect();
        assert_eq!(STANDARD.decode(first).unwrap(), der);
    }
}
