//! What an EKS cluster holds in Kubernetes before Karpenter is installed, as far as Karpenter
//! reads it: the `kube-system/kube-dns` Service, whose cluster IP (inside the service CIDR kwok's
//! EKS reports) the daemon's discovery hands to the kubelets as their DNS address. The
//! cluster-only server seeds it, so a `karpenter run` finds it where it finds it in EKS. (The
//! scenario runner does not: a Service would draw from the emulator's seeded name generator and
//! change every report.)

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use karpenter_actors::kwok::cloud_provider::KWOK_CLUSTER_DNS;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::discovery::{KUBE_DNS_NAMESPACE, KUBE_DNS_SERVICE};

/// The cluster DNS address the seeded Service has (EKS's: the tenth address of the service CIDR).
#[must_use]
pub fn cluster_dns_ip() -> IpAddr {
    IpAddr::V4(KWOK_CLUSTER_DNS)
}

/// The `kube-dns` Service as EKS creates it (`CoreDNS` behind it on port 53).
#[must_use]
pub fn kube_dns_service() -> Service {
    let port = |name: &str, protocol: &str| ServicePort {
        name: Some(name.to_owned()),
        port: 53,
        protocol: Some(protocol.to_owned()),
        ..ServicePort::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some(KUBE_DNS_SERVICE.to_owned()),
            namespace: Some(KUBE_DNS_NAMESPACE.to_owned()),
            labels: Some(
                [
                    ("k8s-app".to_owned(), "kube-dns".to_owned()),
                    (
                        "eks.amazonaws.com/component".to_owned(),
                        "kube-dns".to_owned(),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_dns_ip().to_string()),
            ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
            selector: Some([("k8s-app".to_owned(), "kube-dns".to_owned())].into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Creates the `kube-dns` Service (already there is fine).
pub async fn seed_kube_dns(client: &Client) -> Result<(), kube::Error> {
    let services: Api<Service> = Api::namespaced(client.clone(), KUBE_DNS_NAMESPACE);
    match services
        .create(&PostParams::default(), &kube_dns_service())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
