//! The leadership gate in front of every write port the actors hold.
//!
//! ```text
//! actor --write--> Gated* (LeadershipGate open?) --yes--> the real port (kube-rs, aws-sdk, kwok)
//!                                                 --no---> an error naming the refusal
//! ```
//!
//! The elector keeps the gate open until the renew deadline after its last renewal
//! (`crate::kube::leader`), so no write leaves a replica that may have lost the lease, even while
//! its actors are still being stopped. Reads pass. The ports checked here are the ones of
//! `Deps`: the `ClusterApi`, the `CloudProvider` (create, delete and tag), and the AWS ports'
//! writes (EC2 launches, terminations, launch templates and tags, IAM instance profiles, SQS
//! receives and deletes: a receive hides a message from the real leader for its visibility
//! timeout). In `karpenter run` the kube client and the cloud provider's own EC2 port are gated
//! as well, at the moment the request is sent (`crate::kube::client::GateLayer`, `gated_ec2`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use karpenter_actors::deps::AwsPorts;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::cloud_provider::{
    CloudProvider, CloudProviderError, DriftReason, InstanceTypes, RepairPolicy,
};
use karpenter_actors::ports::cluster::{
    Change, ClusterApi, ClusterError, ClusterEvent, Deletion, Eviction, ObjectKind, name_of,
};
use karpenter_actors::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, Image, Instance, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRef, RunInstancesRequest, SecurityGroup, SpotPrice,
    SpotPriceHistoryRequest, Subnet, Tags,
};
use karpenter_actors::ports::iam::{IamApi, InstanceProfile};
use karpenter_actors::ports::sqs::{ReceiveRequest, SqsApi, SqsMessage};
use karpenter_core::apis::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
    SlimNode, SlimNodeClaim,
};

use crate::kube::leader::LeadershipGate;

/// The AWS error code of a refused call (not an AWS code: no AWS error has it).
pub const NOT_LEADING_CODE: &str = "NotLeading";
const NOT_LEADING_MESSAGE: &str = "this replica does not hold the leader lease";

fn cluster_refusal(kind: ObjectKind, name: &str) -> ClusterError {
    ClusterError::Forbidden {
        kind,
        name: name.to_owned(),
        message: NOT_LEADING_MESSAGE.to_owned(),
    }
}

fn aws_refusal(service: AwsService, operation: &'static str) -> AwsError {
    AwsError::new(
        service,
        operation,
        Some(NOT_LEADING_CODE),
        NOT_LEADING_MESSAGE,
    )
}

/// [`ClusterApi`] behind the gate.
#[derive(Debug)]
pub struct GatedClusterApi {
    inner: Arc<dyn ClusterApi>,
    gate: LeadershipGate,
}

impl GatedClusterApi {
    #[must_use]
    pub fn new(inner: Arc<dyn ClusterApi>, gate: LeadershipGate) -> Self {
        Self { inner, gate }
    }

    fn check(&self, kind: ObjectKind, name: &str) -> Result<(), ClusterError> {
        self.gate.check().map_err(|_| cluster_refusal(kind, name))
    }
}

#[async_trait]
impl ClusterApi for GatedClusterApi {
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError> {
        let name = nodeclaim
            .metadata
            .name
            .as_deref()
            .or(nodeclaim.metadata.generate_name.as_deref())
            .unwrap_or_default();
        self.check(ObjectKind::NodeClaim, name)?;
        self.inner.create_nodeclaim(nodeclaim).await
    }

    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError> {
        self.check(ObjectKind::NodeClaim, name)?;
        self.inner.delete_nodeclaim(name).await
    }

    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        self.check(ObjectKind::NodeClaim, name)?;
        self.inner.update_nodeclaim(name, change).await
    }

    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        self.check(ObjectKind::NodeClaim, name)?;
        self.inner.update_nodeclaim_status(name, change).await
    }

    async fn update_nodeclaim_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        self.check(ObjectKind::NodeClaim, name_of(&known.metadata))?;
        self.inner.update_nodeclaim_from(known, change).await
    }

    async fn update_nodeclaim_status_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        self.check(ObjectKind::NodeClaim, name_of(&known.metadata))?;
        self.inner.update_nodeclaim_status_from(known, change).await
    }

    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError> {
        self.check(ObjectKind::NodePool, name)?;
        self.inner.update_nodepool(name, change).await
    }

    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError> {
        self.check(ObjectKind::NodePool, name)?;
        self.inner.update_nodepool_status(name, change).await
    }

    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError> {
        self.check(ObjectKind::EC2NodeClass, name)?;
        self.inner.update_ec2nodeclass(name, change).await
    }

    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError> {
        self.check(ObjectKind::EC2NodeClass, name)?;
        self.inner.update_ec2nodeclass_status(name, change).await
    }

    async fn update_node(
        &self,
        name: &str,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        self.check(ObjectKind::Node, name)?;
        self.inner.update_node(name, change).await
    }

    async fn update_node_from(
        &self,
        known: &SlimNode,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        self.check(
            ObjectKind::Node,
            known.metadata.name.as_deref().unwrap_or_default(),
        )?;
        self.inner.update_node_from(known, change).await
    }

    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError> {
        self.check(ObjectKind::Node, name)?;
        self.inner.delete_node(name).await
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError> {
        self.check(ObjectKind::Pod, &format!("{namespace}/{name}"))?;
        self.inner.evict_pod(namespace, name).await
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deletion, ClusterError> {
        self.check(ObjectKind::Pod, &format!("{namespace}/{name}"))?;
        self.inner
            .delete_pod(namespace, name, grace_period_seconds)
            .await
    }

    async fn publish_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        self.check(
            ObjectKind::Event,
            event.regarding.name.as_deref().unwrap_or_default(),
        )?;
        self.inner.publish_event(event).await
    }
}

/// [`CloudProvider`] behind the gate: launches, terminations and instance tagging are refused,
/// the rest reads.
#[derive(Debug)]
pub struct GatedCloudProvider {
    inner: Arc<dyn CloudProvider>,
    gate: LeadershipGate,
}

impl GatedCloudProvider {
    #[must_use]
    pub fn new(inner: Arc<dyn CloudProvider>, gate: LeadershipGate) -> Self {
        Self { inner, gate }
    }
}

#[async_trait]
impl CloudProvider for GatedCloudProvider {
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Ec2, "CreateFleet"))?;
        self.inner.create(nodeclaim).await
    }

    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Ec2, "TerminateInstances"))?;
        self.inner.delete(nodeclaim).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.inner.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.inner.list().await
    }

    async fn list_brief(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.inner.list_brief().await
    }

    fn node_registered(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode) {
        self.inner.node_registered(nodeclaim, node);
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<InstanceTypes, CloudProviderError> {
        self.inner.instance_types(nodepool).await
    }

    async fn is_drifted(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        self.inner.is_drifted(nodeclaim).await
    }

    fn validation_launches(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<(String, String)>, CloudProviderError> {
        self.inner.validation_launches(nodeclass)
    }

    async fn tag_instance(
        &self,
        nodeclaim: &SlimNodeClaim,
        tags: &Tags,
    ) -> Result<(), CloudProviderError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Ec2, "CreateTags"))?;
        self.inner.tag_instance(nodeclaim, tags).await
    }

    fn repair_policies(&self) -> Cow<'static, [RepairPolicy]> {
        self.inner.repair_policies()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// [`Ec2Api`] behind the gate (every call that changes something, dry runs included: they are
/// the actors' only).
#[derive(Debug)]
pub struct GatedEc2 {
    inner: Arc<dyn Ec2Api>,
    gate: LeadershipGate,
}

impl GatedEc2 {
    fn check(&self, operation: &'static str) -> Result<(), AwsError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Ec2, operation))
    }
}

/// `ec2` with its writes behind `gate`.
#[must_use]
pub fn gated_ec2(ec2: Arc<dyn Ec2Api>, gate: &LeadershipGate) -> Arc<dyn Ec2Api> {
    Arc::new(GatedEc2 {
        inner: ec2,
        gate: gate.clone(),
    })
}

#[async_trait]
impl Ec2Api for GatedEc2 {
    async fn describe_instance_types(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        self.inner.describe_instance_types(filters).await
    }

    async fn describe_instance_type_offerings(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError> {
        self.inner.describe_instance_type_offerings(filters).await
    }

    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError> {
        self.inner.describe_spot_price_history(request).await
    }

    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, AwsError> {
        self.inner.describe_subnets(filters).await
    }

    async fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        self.inner.describe_security_groups(filters).await
    }

    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError> {
        self.inner.describe_images(request).await
    }

    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError> {
        self.inner.describe_availability_zones().await
    }

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError> {
        self.check("CreateLaunchTemplate")?;
        self.inner.create_launch_template(request).await
    }

    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError> {
        self.inner.describe_launch_templates(request).await
    }

    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError> {
        self.check("DeleteLaunchTemplate")?;
        self.inner.delete_launch_template(template).await
    }

    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError> {
        self.check("CreateFleet")?;
        self.inner.create_fleet(request).await
    }

    async fn run_instances(
        &self,
        request: &RunInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.check("RunInstances")?;
        self.inner.run_instances(request).await
    }

    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.inner.describe_instances(request).await
    }

    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError> {
        self.check("TerminateInstances")?;
        self.inner.terminate_instances(instance_ids).await
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError> {
        self.check("CreateTags")?;
        self.inner.create_tags(resource_ids, tags).await
    }
}

/// [`IamApi`] behind the gate.
#[derive(Debug)]
struct GatedIam {
    inner: Arc<dyn IamApi>,
    gate: LeadershipGate,
}

impl GatedIam {
    fn check(&self, operation: &'static str) -> Result<(), AwsError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Iam, operation))
    }
}

#[async_trait]
impl IamApi for GatedIam {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfile, AwsError> {
        self.inner.get_instance_profile(name).await
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        path: &str,
        tags: &Tags,
    ) -> Result<InstanceProfile, AwsError> {
        self.check("CreateInstanceProfile")?;
        self.inner.create_instance_profile(name, path, tags).await
    }

    async fn add_role_to_instance_profile(
        &self,
        profile: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        self.check("AddRoleToInstanceProfile")?;
        self.inner.add_role_to_instance_profile(profile, role).await
    }

    async fn remove_role_from_instance_profile(
        &self,
        profile: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        self.check("RemoveRoleFromInstanceProfile")?;
        self.inner
            .remove_role_from_instance_profile(profile, role)
            .await
    }

    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsError> {
        self.check("DeleteInstanceProfile")?;
        self.inner.delete_instance_profile(name).await
    }
}

/// [`SqsApi`] behind the gate.
#[derive(Debug)]
struct GatedSqs {
    inner: Arc<dyn SqsApi>,
    gate: LeadershipGate,
}

impl GatedSqs {
    fn check(&self, operation: &'static str) -> Result<(), AwsError> {
        self.gate
            .check()
            .map_err(|_| aws_refusal(AwsService::Sqs, operation))
    }
}

#[async_trait]
impl SqsApi for GatedSqs {
    async fn get_queue_url(&self, queue_name: &str) -> Result<String, AwsError> {
        self.inner.get_queue_url(queue_name).await
    }

    async fn create_queue(&self, queue_name: &str) -> Result<String, AwsError> {
        self.check("CreateQueue")?;
        self.inner.create_queue(queue_name).await
    }

    async fn get_queue_arn(&self, queue_url: &str) -> Result<String, AwsError> {
        self.inner.get_queue_arn(queue_url).await
    }

    async fn receive_messages(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<SqsMessage>, AwsError> {
        self.check("ReceiveMessage")?;
        self.inner.receive_messages(queue_url, request).await
    }

    async fn delete_message(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsError> {
        self.check("DeleteMessage")?;
        self.inner.delete_message(queue_url, receipt_handle).await
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
    ) -> Result<BTreeMap<String, String>, AwsError> {
        self.inner.get_queue_attributes(queue_url).await
    }

    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        self.check("SetQueueAttributes")?;
        self.inner.set_queue_attributes(queue_url, attributes).await
    }

    async fn send_message(&self, queue_url: &str, body: &str) -> Result<String, AwsError> {
        self.check("SendMessage")?;
        self.inner.send_message(queue_url, body).await
    }
}

/// The AWS ports of the actors with their writes behind `gate` (SSM, Pricing, EventBridge and
/// EKS are not written by the actors).
#[must_use]
pub fn gated_aws(aws: &AwsPorts, gate: &LeadershipGate) -> AwsPorts {
    AwsPorts {
        ec2: gated_ec2(Arc::clone(&aws.ec2), gate),
        sqs: Arc::new(GatedSqs {
            inner: Arc::clone(&aws.sqs),
            gate: gate.clone(),
        }),
        iam: Arc::new(GatedIam {
            inner: Arc::clone(&aws.iam),
            gate: gate.clone(),
        }),
        eventbridge: Arc::clone(&aws.eventbridge),
        ssm: Arc::clone(&aws.ssm),
        pricing: Arc::clone(&aws.pricing),
        eks: Arc::clone(&aws.eks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_actors::ports::clock::SystemClock;
    use karpenter_actors::testing::{CloudOperation, FakeCloudProvider, FakeClusterApi};
    use tokio::time::{Duration, Instant};

    fn claim(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_the_gate_is_open_and_reads_always() {
        let gate = LeadershipGate::new();
        let fake = Arc::new(FakeClusterApi::new());
        let cluster = GatedClusterApi::new(fake.clone(), gate.clone());
        let refused = cluster.create_nodeclaim(&claim("a")).await.unwrap_err();
        assert!(
            matches!(&refused, ClusterError::Forbidden { message, .. } if message.contains("leader lease")),
            "{refused:?}"
        );
        assert!(
            fake.calls().is_empty(),
            "the refused write never reached the port"
        );

        gate.open_until(Instant::now() + Duration::from_secs(10));
        cluster.create_nodeclaim(&claim("b")).await.unwrap();
        assert_eq!(fake.calls().len(), 1);

        let cloud = Arc::new(FakeCloudProvider::new(Arc::new(SystemClock)));
        let gated_cloud = GatedCloudProvider::new(cloud.clone(), gate.clone());
        tokio::time::sleep(Duration::from_secs(10)).await;
        let error = gated_cloud.create(&claim("b")).await.unwrap_err();
        assert!(
            matches!(&error, CloudProviderError::Aws(aws) if aws.code.as_deref() == Some(NOT_LEADING_CODE)),
            "{error:?}"
        );
        assert!(cloud.calls_of(CloudOperation::Create).is_empty());
        let tags = Tags::from([("Name".to_owned(), "node-a".to_owned())]);
        let error = gated_cloud
            .tag_instance(&SlimNodeClaim::from(claim("b")), &tags)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, CloudProviderError::Aws(aws) if aws.operation == "CreateTags"),
            "{error:?}"
        );
        assert!(cloud.calls_of(CloudOperation::TagInstance).is_empty());
        // Reads go on: a standby's and a stopping leader's views stay current.
        assert!(gated_cloud.list().await.is_ok());
    }
}
