//! The simulated AWS account: kwok's EC2, SQS, EventBridge, IAM, SSM, Pricing and EKS (the
//! cluster the daemon discovers) wired together (spot interruption warnings flow EC2 ->
//! EventBridge -> the interruption queue), as the daemon's AWS ports. Also the chaos hooks a
//! scenario uses on them.
//!
//! Data flow: `karpenter simulate` and the tests build a [`KwokAws`] with the simulated clock,
//! hand [`KwokAws::ports`] to the daemon's `Deps`, create the interruption queue and its
//! EventBridge rules ([`KwokAws::create_interruption_queue`], what `karpenter interruption
//! setup` or Karpenter's `CloudFormation` template does in a real account), and keep the [`KwokAws`] to drive events (capacity limits,
//! spot interruptions, lost instances, injected API errors).

use karpenter_core::domain::instance_type::CapacityType;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::sim::scenario::file::{AwsService, CapacityPool};
use karpenter_actors::deps::AwsPorts;
use karpenter_actors::interruption::setup;
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eks::KwokEks;
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::faults::Faults;
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::ports::aws_error::{AwsError, AwsService as PortService};
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::ec2::{
    CreateFleetRequest, CreateLaunchTemplateRequest, Ec2Api as _, FleetLaunchTemplateConfig,
    FleetOverride, Instance, LaunchTemplateData, Tags,
};

/// Kubernetes versions whose AMI aliases kwok's SSM answers (v1.5's supported range).
pub const SSM_ALIAS_VERSIONS: [&str; 8] = [
    "1.26", "1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33",
];
/// The made-up AMIs kwok's EC2 describes (x86-64 and arm64).
const IMAGE_X86: &str = "ami-00000000000000001";
const IMAGE_ARM: &str = "ami-00000000000000002";

/// The operations each kwok service answers (a chaos fault naming another is refused).
const OPERATIONS: [(AwsService, &[&str]); 6] = [
    (
        AwsService::Ec2,
        &[
            "CreateFleet",
            "CreateLaunchTemplate",
            "CreateTags",
            "DeleteLaunchTemplate",
            "DescribeAvailabilityZones",
            "DescribeImages",
            "DescribeInstanceTypeOfferings",
            "DescribeInstanceTypes",
            "DescribeInstances",
            "DescribeLaunchTemplates",
            "DescribeSecurityGroups",
            "DescribeSpotPriceHistory",
            "DescribeSubnets",
            "RunInstances",
            "TerminateInstances",
        ],
    ),
    (
        AwsService::Sqs,
        &[
            "CreateQueue",
            "DeleteMessage",
            "GetQueueAttributes",
            "GetQueueUrl",
            "ReceiveMessage",
            "SendMessage",
        ],
    ),
    (
        AwsService::EventBridge,
        &["PutEvents", "PutRule", "PutTargets"],
    ),
    (
        AwsService::Iam,
        &[
            "AddRoleToInstanceProfile",
            "CreateInstanceProfile",
            "DeleteInstanceProfile",
            "GetInstanceProfile",
            "RemoveRoleFromInstanceProfile",
        ],
    ),
    (AwsService::Ssm, &["GetParameter"]),
    (AwsService::Pricing, &["GetProducts"]),
];

/// What the simulated account refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    /// A chaos fault names an operation the service does not answer.
    #[error("{operation:?} is not an operation kwok's {service} answers ({known})")]
    UnknownOperation {
        service: &'static str,
        operation: String,
        /// The operations it answers, comma-separated.
        known: String,
    },
    /// kwok's EC2 could not load its catalogue for the region.
    #[error("setting up kwok's EC2")]
    Ec2(#[source] karpenter_actors::kwok::ec2::KwokEc2Error),
}

impl WorldError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::UnknownOperation { .. } => "unknown_operation",
            Self::Ec2(_) => "kwok_ec2",
        }
    }
}

/// The kwok name of `operation` on `service`, or the operations it answers.
pub fn kwok_operation(service: AwsService, operation: &str) -> Result<&'static str, WorldError> {
    let known = OPERATIONS
        .iter()
        .find(|(s, _)| *s == service)
        .map_or(&[][..], |(_, ops)| *ops);
    known
        .iter()
        .find(|op| **op == operation)
        .copied()
        .ok_or_else(|| WorldError::UnknownOperation {
            service: service.as_str(),
            operation: operation.to_owned(),
            known: known.join(", "),
        })
}

/// The port's name of a scenario's AWS service.
#[must_use]
pub fn port_service(service: AwsService) -> PortService {
    match service {
        AwsService::Ec2 => PortService::Ec2,
        AwsService::Sqs => PortService::Sqs,
        AwsService::EventBridge => PortService::EventBridge,
        AwsService::Iam => PortService::Iam,
        AwsService::Ssm => PortService::Ssm,
        AwsService::Pricing => PortService::Pricing,
    }
}

/// The HTTP status AWS answers an error code with (throttling and outages 503, internal 500,
/// the rest 400).
fn status_of(code: &str) -> u16 {
    match code {
        "RequestLimitExceeded"
        | "Throttling"
        | "ThrottlingException"
        | "ServiceUnavailable"
        | "Unavailable" => 503,
        "InternalError" | "InternalFailure" | "InternalServerError" => 500,
        _ => 400,
    }
}

/// One instance to launch with [`KwokAws::launch`].
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub launch_template: &'a str,
    pub instance_type: &'a str,
    pub zone: &'a str,
    pub capacity_type: CapacityType,
    pub tags: Tags,
}

/// How the simulated account is set up.
#[derive(Debug, Clone)]
pub struct KwokAwsConfig {
    pub region: String,
    pub cluster_name: String,
    /// EC2's pending -> running (and shutting-down -> terminated) time.
    pub launch_latency: Duration,
}

/// kwok's services, wired together.
#[derive(Debug, Clone)]
pub struct KwokAws {
    pub ec2: Arc<KwokEc2>,
    pub sqs: Arc<KwokSqs>,
    pub eventbridge: Arc<KwokEventBridge>,
    pub iam: Arc<KwokIam>,
    pub ssm: Arc<KwokSsm>,
    pub pricing: Arc<KwokPricing>,
    /// The cluster itself (`DescribeCluster`): the daemon discovers its endpoint and service
    /// CIDR here.
    pub eks: Arc<KwokEks>,
    /// The images the public AMI aliases point at now, by architecture.
    alias_images: Arc<Mutex<BTreeMap<String, String>>>,
}

impl KwokAws {
    /// Builds the account; fails when the region is not in kwok's catalogue.
    pub fn new(config: &KwokAwsConfig, clock: Arc<dyn Clock>) -> Result<Self, WorldError> {
        let sqs = Arc::new(KwokSqs::new(&config.region));
        let eventbridge = Arc::new(KwokEventBridge::new(
            &config.region,
            Arc::clone(&sqs),
            Arc::clone(&clock),
        ));
        let mut ec2_config = KwokEc2Config::new(&config.region, &config.cluster_name);
        ec2_config.launch_latency = config.launch_latency;
        let ec2 = Arc::new(
            KwokEc2::new(
                ec2_config,
                KwokEc2Deps {
                    clock,
                    events: Some(Arc::clone(&eventbridge)),
                },
            )
            .map_err(WorldError::Ec2)?,
        );
        Ok(Self {
            ec2,
            sqs,
            eventbridge,
            iam: Arc::new(KwokIam::default()),
            ssm: Arc::new(KwokSsm::with_aliases(
                &SSM_ALIAS_VERSIONS,
                IMAGE_X86,
                IMAGE_ARM,
            )),
            pricing: Arc::new(KwokPricing::new(1.0)),
            eks: Arc::new(KwokEks::with_cluster(&config.cluster_name)),
            alias_images: Arc::new(Mutex::new(BTreeMap::from([
                ("arm64".to_owned(), IMAGE_ARM.to_owned()),
                ("x86_64".to_owned(), IMAGE_X86.to_owned()),
            ]))),
        })
    }

    /// A new EKS-optimized AMI release: new images (one per architecture) published in EC2,
    /// every public alias parameter in SSM pointed at them, the previous images deprecated (so
    /// Karpenter drops its cached alias at once rather than after its 24-hour TTL). Returns the
    /// new image ids by architecture.
    pub fn release_amis(&self) -> BTreeMap<String, String> {
        let mut current = self
            .alias_images
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let released = self.ec2.release_images(&current);
        for (arch, new) in &released {
            if let Some(old) = current.get(arch) {
                self.ssm.repoint(old, new);
            }
        }
        current.clone_from(&released);
        released
    }

    /// The narrow AWS ports for the daemon.
    #[must_use]
    pub fn ports(&self) -> AwsPorts {
        AwsPorts {
            ec2: self.ec2.clone(),
            sqs: self.sqs.clone(),
            eventbridge: self.eventbridge.clone(),
            iam: self.iam.clone(),
            ssm: self.ssm.clone(),
            pricing: self.pricing.clone(),
            eks: self.eks.clone(),
        }
    }

    /// Creates the interruption queue `name` and the EventBridge rules that feed it, as
    /// `karpenter interruption setup` does in a real account; returns the queue URL.
    pub async fn create_interruption_queue(
        &self,
        name: &str,
        cluster: &str,
    ) -> Result<String, AwsError> {
        let applied =
            setup::ensure(self.sqs.as_ref(), self.eventbridge.as_ref(), name, cluster).await?;
        Ok(applied.queue_url)
    }

    /// Launches one instance through the EC2 API as something other than Karpenter would (a
    /// person, another tool, a Karpenter that crashed before recording it): a launch template
    /// named `launch_template`, then an instant fleet of one. Returns the instance.
    pub async fn launch(&self, launch: &Launch<'_>) -> Result<Instance, AwsError> {
        let template = CreateLaunchTemplateRequest {
            name: launch.launch_template.to_owned(),
            data: LaunchTemplateData {
                image_id: Some(IMAGE_X86.to_owned()),
                ..LaunchTemplateData::default()
            },
            ..CreateLaunchTemplateRequest::default()
        };
        match self.ec2.create_launch_template(&template).await {
            Ok(_) => {}
            Err(error)
                if error
                    .code
                    .as_deref()
                    .is_some_and(|c| c.contains("AlreadyExists")) => {}
            Err(error) => return Err(error),
        }
        let subnet = self
            .ec2
            .subnets()
            .iter()
            .find(|s| s.zone == launch.zone)
            .cloned()
            .unwrap_or_default();
        let request = CreateFleetRequest {
            client_token: None,
            capacity_type: launch.capacity_type,
            total_target_capacity: 1,
            allocation_strategy: "lowest-price".to_owned(),
            launch_template_configs: vec![FleetLaunchTemplateConfig {
                launch_template_name: launch.launch_template.to_owned(),
                version: "$Latest".to_owned(),
                overrides: vec![FleetOverride {
                    instance_type: launch.instance_type.to_owned(),
                    subnet_id: subnet.id,
                    zone: launch.zone.to_owned(),
                    image_id: None,
                }],
            }],
            tags: launch.tags.clone(),
            context: None,
            dry_run: false,
        };
        let response = self.ec2.create_fleet(&request).await?;
        let id = response
            .instances
            .first()
            .and_then(|i| i.instance_ids.first())
            .cloned();
        let found = id.and_then(|id| self.ec2.instances().into_iter().find(|i| i.id == id));
        found.ok_or_else(|| {
            let why = response
                .errors
                .first()
                .map_or_else(String::new, |e| format!("{}: {}", e.code, e.message));
            AwsError::new(
                PortService::Ec2,
                "CreateFleet",
                None,
                format!("no instance launched {why}"),
            )
        })
    }

    /// Limits capacity pools (launches beyond them get ICE).
    pub fn limit_capacity(&self, pools: &[CapacityPool]) {
        for pool in pools {
            self.ec2.set_capacity(
                &pool.instance_type,
                &pool.zone,
                pool.capacity_type,
                pool.available,
            );
        }
    }

    /// The fault hooks of one service.
    #[must_use]
    pub fn faults(&self, service: AwsService) -> &Faults {
        match service {
            AwsService::Ec2 => self.ec2.faults(),
            AwsService::Sqs => self.sqs.faults(),
            AwsService::EventBridge => self.eventbridge.faults(),
            AwsService::Iam => self.iam.faults(),
            AwsService::Ssm => self.ssm.faults(),
            AwsService::Pricing => self.pricing.faults(),
        }
    }

    /// The next `count` calls of `operation` fail with the AWS error `code`.
    pub fn fail_next(
        &self,
        service: AwsService,
        operation: &str,
        count: u32,
        code: &str,
    ) -> Result<(), WorldError> {
        let operation = kwok_operation(service, operation)?;
        let error = AwsError::new(
            port_service(service),
            operation,
            Some(code),
            format!("injected by the scenario's chaos plan: {code}"),
        )
        .with_status(status_of(code))
        .with_request_id("kwok-chaos");
        self.faults(service).fail_next(
            operation,
            usize::try_from(count).unwrap_or(usize::MAX),
            error,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::clock::SimClock;
    use karpenter_actors::ports::sqs::INTERRUPTION_RECEIVE;
    use karpenter_actors::ports::sqs::SqsApi as _;

    fn world() -> KwokAws {
        KwokAws::new(
            &KwokAwsConfig {
                region: "us-west-2".into(),
                cluster_name: "simulated".into(),
                launch_latency: Duration::from_secs(15),
            },
            Arc::new(SimClock::at_epoch()),
        )
        .expect("us-west-2 is in the catalogue")
    }

    #[test]
    fn unknown_operations_are_refused_with_the_known_ones() {
        assert_eq!(
            kwok_operation(AwsService::Ec2, "CreateFleet"),
            Ok("CreateFleet")
        );
        let error = kwok_operation(AwsService::Ssm, "PutParameter").unwrap_err();
        assert!(error.to_string().contains("GetParameter"), "{error}");
        assert_eq!(error.category(), "unknown_operation");
    }

    #[tokio::test(start_paused = true)]
    async fn injected_errors_hit_the_next_calls_only() {
        let world = world();
        world
            .fail_next(
                AwsService::Ec2,
                "DescribeSubnets",
                1,
                "RequestLimitExceeded",
            )
            .unwrap();
        let error = world.ec2.describe_subnets(&[]).await.unwrap_err();
        assert_eq!(error.code.as_deref(), Some("RequestLimitExceeded"));
        assert!(world.ec2.describe_subnets(&[]).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn spot_interruptions_reach_the_interruption_queue() {
        let world = world();
        let url = world
            .create_interruption_queue("simulated", "simulated")
            .await
            .unwrap();
        assert!(world.ec2.interrupt_spot("i-404").await.is_err());
        let spot = world
            .launch(&Launch {
                launch_template: "outside",
                instance_type: "m5.large",
                zone: "us-west-2a",
                capacity_type: CapacityType::Spot,
                tags: Tags::new(),
            })
            .await
            .unwrap();
        world.ec2.interrupt_spot(&spot.id).await.unwrap();
        let received = world
            .sqs
            .receive_messages(&url, INTERRUPTION_RECEIVE)
            .await
            .unwrap();
        assert_eq!(received.len(), 1);
        assert!(received[0].body.contains(&spot.id), "{}", received[0].body);
        assert!(world.ec2.hourly_price(&spot).is_some_and(|p| p > 0.0));
        assert!(world.ec2.reclaim(&spot.id));
        assert!(!world.ec2.reclaim(&spot.id), "already shutting down");
    }
}
