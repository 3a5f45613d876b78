//! The `NodeClassActor`: one per `EC2NodeClass`, keyed by its name, in a family under the
//! daemon's root group (reference 1.3, 2.2 `nodeclass` and `nodeclass.hash`, 4.2, 5.1).
//!
//! Data flow:
//!
//! ```text
//! Daemon::observe: EC2NodeClass changed / NodeClaim deleted (classes being deleted) / relist
//!     --Reconcile--> NodeClassActor --reads--> ClusterView (the class, its NodeClaims)
//!                                   --calls--> providers in crate::providers (subnets, security
//!                                              groups, AMIs + SSM, instance profiles), Ec2Api
//!                                   --writes--> ClusterApi (finalizer, hash annotations,
//!                                               NodeClaim re-stamps, status, events)
//!     own timer --Requeue--> itself (Karpenter's requeue intervals, error backoff)
//! ```
//!
//! The actor is a [`Reconciler`]: the kit reads the class, stops the actor when it is gone,
//! keeps only the latest requeue ([`Coalesce::Latest`]: a reconcile's answer replaces the
//! pending timer, and a class with nothing left to do has none) and retries a failed reconcile
//! after 1 s doubling to 1 min. The first instance waits for the daemon's event; a restarted
//! one looks again at once.
//!
//! A reconcile of a live class:
//!
//! 1. adds the `karpenter.k8s.aws/termination` finalizer and the hash annotations
//!    ([`metadata`]); when the class's hash version is not ours (Karpenter's `v4`, or an older
//!    one of ours) its NodeClaims are re-stamped first;
//! 2. resolves AMIs (requeue 5 min; 1 min when none match), subnets (1 min), security groups
//!    (5 min; 1 min when none match) and the instance profile, each setting its condition
//!    with Karpenter's reasons; a failed AWS call leaves that part of the status as it was;
//! 3. validates ([`validation`]): dependencies, tags, user data, dry-run authorization;
//! 4. marks the class not ready when it is AL2023 and the cluster CIDR is unknown;
//! 5. writes the status when it changed, with the API server's optimistic concurrency
//!    (`ClusterApi::update_ec2nodeclass_status` re-applies the plan on a conflict).
//!
//! A class being deleted waits for its NodeClaims, then deletes its instance profile and
//! launch templates and drops the finalizer ([`finalize`]). Errors are returned to the kit
//! (counted, last error kept) and retried with a capped exponential backoff; the steps after a
//! failed one still run, so one reconcile may report several ([`NodeClassErrors`]).
//!
//! # Conditions and reasons
//!
//! | condition | status | reason | when |
//! |---|---|---|---|
//! | `AMIsReady` | True | `AMIsReady` | at least one AMI resolved |
//! | | False | `AMINotFound` | the selector (or alias, for this Kubernetes version) matches none |
//! | `SubnetsReady` | True / False | `SubnetsReady` / `SubnetsNotFound` | |
//! | `SecurityGroupsReady` | True / False | `SecurityGroupsReady` / `SecurityGroupsNotFound` | |
//! | `InstanceProfileReady` | True | `InstanceProfileReady` | profile exists with the role, or `instanceProfile` given |
//! | | False | `InstanceProfileCreationFailed` (ours) | IAM refused (not throttling or a server error) |
//! | `ValidationSucceeded` | Unknown / False | `DependenciesNotReady` | a resolution condition is Unknown / False |
//! | | False | `TagValidationFailed` | `spec.tags` sets a tag Karpenter owns |
//! | | False | `UserDataValidationFailed` (ours) | user data or kubelet settings do not render |
//! | | False | `CreateFleetAuthCheckFailed`, `CreateLaunchTemplateAuthCheckFailed`, `RunInstancesAuthCheckFailed` | a dry run was unauthorized |
//! | | True | `ValidationSucceeded` | all dry runs would succeed |
//! | `Ready` | True | `Ready` | every condition above True |
//! | | False / Unknown | `UnhealthyDependents` / `ReconcilingDependents` | message lists the others |
//! | | False | `NodeClassNotReady` | AL2023 and the cluster's service CIDR is unknown |
//!
//! Capacity reservations (`ReservedCapacity` gate) are not resolved by this build; their
//! condition is neither written nor required for `Ready`.

pub mod finalize;
pub mod metadata;
pub mod status;
pub mod validation;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::deps::ClusterVersion;
use crate::logs;
use crate::ports::aws_error::AwsError;
use crate::ports::clock::Clock;
use crate::ports::cloud_provider::CloudProvider;
use crate::ports::cluster::{ClusterApi, ClusterError};
use crate::ports::cluster_view::ClusterView;
use crate::ports::ec2::Ec2Api;
use crate::providers::amis::{AmiError, AmiProvider};
use crate::providers::instance_profiles::{
    InstanceProfileError, InstanceProfileProvider, profile_name, profile_tags,
};
use crate::providers::security_groups::{SecurityGroupProvider, status_security_groups};
use crate::providers::subnets::{SubnetProvider, status_subnets};
use crate::runtime::{
    Action, ActorCtx, ActorError, Backoff, Cause, Coalesce, ControllerId, ReconcileError,
    ReconcilePolicy, Reconciler, RestartPolicy, Start, Supervised,
};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::conditions::{READY, ec2nodeclass as types};
use karpenter_core::apis::ec2nodeclass::AmiFamily;
use karpenter_core::domain::nodeclass_hash::{HASH_VERSION, nodeclass_hash, resolved_ami_family};
use karpenter_core::domain::tags::launch_tags;
use karpenter_core::domain::userdata::ClusterInfo;
use karpenter_core::errors;

use self::status::{ConditionUpdate, StatusPlan};
use self::validation::{UserDataCheck, Verdict};

/// Requeue after AMIs resolved (Karpenter's AMI reconciler).
pub const AMI_REQUEUE: Duration = Duration::from_mins(5);
/// Requeue while no AMI matches: users often tag their images after creating the class.
pub const AMI_NOT_FOUND_REQUEUE: Duration = Duration::from_mins(1);
/// Requeue of the subnet reconciler, found or not (free addresses change all the time).
pub const SUBNET_REQUEUE: Duration = Duration::from_mins(1);
/// Requeue after security groups resolved.
pub const SECURITY_GROUP_REQUEUE: Duration = Duration::from_mins(5);
/// Requeue while no security group matches.
pub const SECURITY_GROUP_NOT_FOUND_REQUEUE: Duration = Duration::from_mins(1);
/// Requeue after IAM refused the instance profile: someone has to fix a policy first.
pub const INSTANCE_PROFILE_FAILED_REQUEUE: Duration = Duration::from_mins(1);
/// Requeue when a dry run was throttled or the new profile is not visible to EC2 yet (IAM is
/// eventually consistent within seconds).
pub const VALIDATION_RETRY: Duration = Duration::from_secs(10);
/// Retries of a failed reconcile: 1 s, doubling per failure in a row, at most a minute
/// (Karpenter's controllers cap theirs at a minute).
pub const ERROR_BACKOFF: Backoff =
    Backoff::exponential(Duration::from_secs(1), Duration::from_mins(1));

/// What every `NodeClassActor` uses, built once at startup; cheap to clone.
#[derive(Debug, Clone)]
pub struct NodeClassDeps {
    pub cluster: Arc<dyn ClusterApi>,
    pub view: Arc<dyn ClusterView>,
    /// Condition transition times.
    pub clock: Arc<dyn Clock>,
    /// Dry runs and launch-template cleanup.
    pub ec2: Arc<dyn Ec2Api>,
    pub subnets: Arc<SubnetProvider>,
    pub security_groups: Arc<SecurityGroupProvider>,
    pub amis: Arc<AmiProvider>,
    pub instance_profiles: Arc<InstanceProfileProvider>,
    /// Cluster name, endpoint, CA, DNS and service CIDR: tags, profile names, user data.
    pub cluster_info: ClusterInfo,
    pub region: String,
    pub kubernetes_version: ClusterVersion,
    /// Chooses the dry runs' instance type among the class's types (v1.5 dynamic validation);
    /// `None` (or an empty choice) uses Karpenter's fallback types.
    pub cloud: Option<Arc<dyn CloudProvider>>,
}

impl NodeClassDeps {
    /// The actors' dependencies from the daemon's, with fresh providers over its AWS ports.
    #[must_use]
    pub fn from_daemon(deps: &crate::deps::Deps) -> Self {
        let aws = &deps.aws;
        Self {
            cluster: Arc::clone(&deps.cluster),
            view: Arc::clone(&deps.view),
            clock: Arc::clone(&deps.clock),
            ec2: Arc::clone(&aws.ec2),
            subnets: Arc::new(SubnetProvider::new(Arc::clone(&aws.ec2))),
            security_groups: Arc::new(SecurityGroupProvider::new(Arc::clone(&aws.ec2))),
            amis: Arc::new(AmiProvider::new(Arc::clone(&aws.ec2), Arc::clone(&aws.ssm))),
            instance_profiles: Arc::new(InstanceProfileProvider::new(Arc::clone(&aws.iam))),
            cluster_info: deps.cluster_info.clone(),
            region: deps.region.clone(),
            kubernetes_version: deps.kubernetes_version.clone(),
            cloud: Some(Arc::clone(&deps.cloud)),
        }
    }
}

/// A failed step of a reconcile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeClassError {
    #[error("updating ec2nodeclass {name}")]
    Update {
        name: String,
        #[source]
        source: ClusterError,
    },
    #[error("re-stamping nodeclaim {nodeclaim} with the new hash version")]
    Restamp {
        nodeclaim: String,
        #[source]
        source: ClusterError,
    },
    #[error("resolving amis")]
    Amis(#[source] AmiError),
    #[error("resolving subnets")]
    Subnets(#[source] AwsError),
    #[error("resolving security groups")]
    SecurityGroups(#[source] AwsError),
    #[error("reconciling the instance profile")]
    InstanceProfile(#[source] InstanceProfileError),
    #[error("validating the controller's ec2 authorization")]
    Validation(#[source] AwsError),
    #[error("deleting the launch templates of ec2nodeclass {name}")]
    LaunchTemplates {
        name: String,
        #[source]
        source: AwsError,
    },
}

impl NodeClassError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Update { source, .. } | Self::Restamp { source, .. } => source.category(),
            Self::Amis(error) => error.category(),
            Self::Subnets(error)
            | Self::SecurityGroups(error)
            | Self::Validation(error)
            | Self::LaunchTemplates { source: error, .. } => error.category(),
            Self::InstanceProfile(error) => error.category(),
        }
    }
}

/// The failed steps of one reconcile, in order (the steps after a failure still run).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassErrors(pub Vec<NodeClassError>);

impl NodeClassErrors {
    /// The first failure's label.
    #[must_use]
    pub fn category(&self) -> &'static str {
        self.0.first().map_or("unknown", NodeClassError::category)
    }
}

impl fmt::Display for NodeClassErrors {
    /// Each failure with its sources, `; ` between them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&errors::chain(error))?;
        }
        Ok(())
    }
}

impl std::error::Error for NodeClassErrors {}

impl ReconcileError for NodeClassErrors {
    fn category(&self) -> &'static str {
        NodeClassErrors::category(self)
    }
}

impl From<NodeClassError> for NodeClassErrors {
    fn from(error: NodeClassError) -> Self {
        Self(vec![error])
    }
}

/// What the steps of one reconcile produced.
#[derive(Debug, Default)]
struct Step {
    plan: StatusPlan,
    /// Each step's requeue interval; the soonest wins.
    requeue: Vec<Duration>,
    errors: Vec<NodeClassError>,
}

/// A cached dry-run verdict.
#[derive(Debug, Clone)]
struct CachedVerdict {
    key: u64,
    failure: Option<&'static str>,
    expires: Instant,
}

/// One per `EC2NodeClass`.
#[derive(Debug)]
pub struct NodeClassActor {
    name: String,
    deps: NodeClassDeps,
    verdict: Option<CachedVerdict>,
    last_waiting_event: Option<Instant>,
}

impl Supervised for NodeClassActor {
    const KIND: &'static str = "NodeClassActor";
    // Karpenter's EC2NodeClass controller.
    const CONTROLLER: ControllerId =
        ControllerId::of_kind("nodeclass", "karpenter.k8s.aws", "EC2NodeClass");
    // A class sees a change per spec edit, status write and NodeClaim deletion during its own
    // deletion; every message makes it re-read the store, so 32 queued is plenty.
    const MAILBOX_CAPACITY: usize = 32;
    // Stops for good when its class is gone; restarted only after a failure.
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = NodeClassDeps;

    fn build(key: &str, deps: &NodeClassDeps) -> Result<Self, ActorError> {
        Ok(Self {
            name: key.to_owned(),
            deps: deps.clone(),
            verdict: None,
            last_waiting_event: None,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.start_reconciling();
        Ok(())
    }
}

impl Reconciler for NodeClassActor {
    type Object = EC2NodeClass;
    type Error = NodeClassErrors;
    // A restarted instance lost its predecessor's timer: it looks again at once.
    const POLICY: ReconcilePolicy = ReconcilePolicy {
        coalesce: Coalesce::Latest,
        backoff: ERROR_BACKOFF,
        start: Start::RequeueAfterRestart,
    };

    fn fetch(&self, key: &str) -> Option<Arc<EC2NodeClass>> {
        self.deps.view.ec2nodeclass(key)
    }

    async fn reconcile(
        &mut self,
        class: Arc<EC2NodeClass>,
        _cause: Cause,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<Action, NodeClassErrors> {
        let deleting = class.metadata.deletion_timestamp.is_some();
        let outcome = if deleting {
            ctx.set_state("finalizing");
            self.finalize(&class).await
        } else {
            ctx.set_state("reconciling");
            self.reconcile_class(&class).await
        };
        ctx.set_state(match outcome {
            Ok(Action::Requeue(_)) if deleting => "waiting-for-nodeclaims",
            Ok(Action::Requeue(_)) => "reconciled",
            Ok(Action::AwaitChange) => "idle",
            Err(_) => "retrying",
        });
        outcome
    }
}

impl NodeClassActor {
    /// Reconciles a live class.
    async fn reconcile_class(&mut self, class: &EC2NodeClass) -> Result<Action, NodeClassErrors> {
        if metadata::metadata_stale(class) && !self.stamp(class).await? {
            return Ok(Action::AwaitChange);
        }
        let now = self.deps.clock.now();
        let mut step = Step::default();
        self.resolve_amis(class, now, &mut step).await;
        self.resolve_subnets(class, &mut step).await;
        self.resolve_security_groups(class, &mut step).await;
        self.reconcile_instance_profile(class, &mut step).await;

        let spec = &class.spec;
        let mut projected = class.status.clone().unwrap_or_default();
        step.plan
            .apply(&mut projected, class.metadata.generation, now);
        let user_data = validation::check_user_data(spec, &self.deps.cluster_info);
        match self.validate(class, &projected, &user_data).await {
            Ok((update, retry)) => {
                if let Some(update) = update {
                    step.plan.set(update);
                }
                step.requeue.extend(retry);
            }
            Err(error) => step.errors.push(error),
        }

        // Karpenter's readiness reconciler: nodeadm cannot join without the service CIDR.
        if resolved_ami_family(spec) == AmiFamily::AL2023
            && user_data == UserDataCheck::ClusterCidrUnknown
        {
            step.plan.ready_override = Some(ConditionUpdate::not_ready(
                READY,
                types::REASON_NODE_CLASS_NOT_READY,
                "Failed to detect the cluster CIDR",
            ));
        }

        if let Err(error) = self.write_status(class, &step.plan, now).await {
            step.errors.push(error);
        }
        if step.errors.is_empty() {
            Ok(Action::requeue(
                step.requeue.into_iter().min().unwrap_or(SUBNET_REQUEUE),
            ))
        } else {
            Err(NodeClassErrors(step.errors))
        }
    }

    /// Adds the finalizer and hash annotations, re-stamping NodeClaims first on a hash-version
    /// change. `false` when the class is gone.
    async fn stamp(&self, class: &EC2NodeClass) -> Result<bool, NodeClassError> {
        if metadata::hash_version(class) != Some(HASH_VERSION) {
            self.restamp_nodeclaims(class).await?;
        }
        match self
            .deps
            .cluster
            .update_ec2nodeclass(&self.name, &metadata::stamp_class)
            .await
        {
            Ok(_) => Ok(true),
            // Deleted meanwhile: the watch brings the deletion.
            Err(ClusterError::NotFound { .. }) => Ok(false),
            Err(source) => Err(NodeClassError::Update {
                name: self.name.clone(),
                source,
            }),
        }
    }

    async fn resolve_amis(&self, class: &EC2NodeClass, now: Timestamp, step: &mut Step) {
        let version = self.deps.kubernetes_version.get().to_string();
        let listed = self
            .deps
            .amis
            .list(&class.spec.ami_selector_terms, &version, now)
            .await;
        let not_found = |message: String, step: &mut Step| {
            step.plan.amis = Some(Vec::new());
            step.plan.set(ConditionUpdate::not_ready(
                types::AMIS_READY,
                types::REASON_AMI_NOT_FOUND,
                message,
            ));
            step.requeue.push(AMI_NOT_FOUND_REQUEUE);
        };
        match listed {
            Ok(resolved) if resolved.amis.is_empty() => {
                not_found("AMISelector did not match any AMIs".to_owned(), step);
            }
            Ok(resolved) => {
                let known = class.status.as_ref().map(|s| &s.amis);
                if known != Some(&resolved.amis) {
                    let ids: Vec<&str> = resolved.amis.iter().map(|a| a.id.as_str()).collect();
                    tracing::debug!(ids = %ids.join(", "), "discovered amis");
                }
                step.plan.amis = Some(resolved.amis);
                step.plan.set(ConditionUpdate::ready(types::AMIS_READY));
                step.requeue.push(AMI_REQUEUE);
            }
            Err(error) if error.is_selector_problem() => not_found(error.to_string(), step),
            Err(error) => step.errors.push(NodeClassError::Amis(error)),
        }
    }

    async fn resolve_subnets(&self, class: &EC2NodeClass, step: &mut Step) {
        match self
            .deps
            .subnets
            .list(&class.spec.subnet_selector_terms)
            .await
        {
            Ok(subnets) if subnets.is_empty() => {
                step.plan.subnets = Some(Vec::new());
                step.plan.set(ConditionUpdate::not_ready(
                    types::SUBNETS_READY,
                    types::REASON_SUBNETS_NOT_FOUND,
                    "SubnetSelector did not match any Subnets",
                ));
                step.requeue.push(SUBNET_REQUEUE);
            }
            Ok(subnets) => {
                let found = status_subnets(&subnets);
                if class.status.as_ref().map(|s| &s.subnets) != Some(&found) {
                    tracing::debug!(subnets = %logs::json(&found), "discovered subnets");
                }
                step.plan.subnets = Some(found);
                step.plan.set(ConditionUpdate::ready(types::SUBNETS_READY));
                step.requeue.push(SUBNET_REQUEUE);
            }
            Err(error) => step.errors.push(NodeClassError::Subnets(error)),
        }
    }

    async fn resolve_security_groups(&self, class: &EC2NodeClass, step: &mut Step) {
        let terms = &class.spec.security_group_selector_terms;
        match self.deps.security_groups.list(terms).await {
            Ok(groups) if groups.is_empty() => {
                step.plan.security_groups = Some(Vec::new());
                step.plan.set(ConditionUpdate::not_ready(
                    types::SECURITY_GROUPS_READY,
                    types::REASON_SECURITY_GROUPS_NOT_FOUND,
                    "SecurityGroupSelector did not match any SecurityGroups",
                ));
                step.requeue.push(SECURITY_GROUP_NOT_FOUND_REQUEUE);
            }
            Ok(groups) => {
                let found = status_security_groups(&groups);
                if class.status.as_ref().map(|s| &s.security_groups) != Some(&found) {
                    tracing::debug!(
                        "security-groups" = %logs::json(&found),
                        "discovered security groups"
                    );
                }
                step.plan.security_groups = Some(found);
                step.plan
                    .set(ConditionUpdate::ready(types::SECURITY_GROUPS_READY));
                step.requeue.push(SECURITY_GROUP_REQUEUE);
            }
            Err(error) => step.errors.push(NodeClassError::SecurityGroups(error)),
        }
    }

    async fn reconcile_instance_profile(&self, class: &EC2NodeClass, step: &mut Step) {
        let spec = &class.spec;
        let Some(role) = spec.role.as_deref() else {
            step.plan.instance_profile = Some(spec.instance_profile.clone());
            step.plan
                .set(ConditionUpdate::ready(types::INSTANCE_PROFILE_READY));
            return;
        };
        let cluster = &self.deps.cluster_info.name;
        let region = &self.deps.region;
        let name = profile_name(cluster, region, &self.name);
        let tags = profile_tags(&spec.tags, cluster, region, &self.name);
        match self.deps.instance_profiles.ensure(&name, role, &tags).await {
            Ok(()) => {
                step.plan.instance_profile = Some(Some(name));
                step.plan
                    .set(ConditionUpdate::ready(types::INSTANCE_PROFILE_READY));
            }
            Err(error) if !error.aws().is_retryable() => {
                step.plan.set(ConditionUpdate::not_ready(
                    types::INSTANCE_PROFILE_READY,
                    types::REASON_INSTANCE_PROFILE_CREATION_FAILED,
                    errors::chain(&error),
                ));
                step.requeue.push(INSTANCE_PROFILE_FAILED_REQUEUE);
            }
            Err(error) => step.errors.push(NodeClassError::InstanceProfile(error)),
        }
    }

    /// The first (instance type, AMI id) the cloud provider picks for the dry runs from the
    /// class's types as this reconcile resolved it; `None` falls back to Karpenter's types.
    fn preferred_launch(
        &self,
        class: &EC2NodeClass,
        projected: &karpenter_core::apis::EC2NodeClassStatus,
    ) -> Option<(String, String)> {
        let cloud = self.deps.cloud.as_ref()?;
        let mut resolved = class.clone();
        resolved.status = Some(projected.clone());
        match cloud.validation_launches(&resolved) {
            Ok(launches) => launches.into_iter().next(),
            Err(error) => {
                tracing::debug!(
                    error = logs::err(&error),
                    "validation falls back to the default instance types"
                );
                None
            }
        }
    }

    /// The `ValidationSucceeded` update (none when a retry keeps the current one) and how soon
    /// to look again.
    async fn validate(
        &mut self,
        class: &EC2NodeClass,
        projected: &karpenter_core::apis::EC2NodeClassStatus,
        user_data: &UserDataCheck,
    ) -> Result<(Option<ConditionUpdate>, Option<Duration>), NodeClassError> {
        if let Some(update) = validation::dependencies_not_ready(&projected.conditions) {
            return Ok((Some(update), None));
        }
        let spec = &class.spec;
        // The class's own dry runs launch for no NodePool (Karpenter's `GetTags` without labels).
        let tags = match launch_tags(&self.name, spec, &self.deps.cluster_info.name, "") {
            Ok(tags) => tags,
            Err(error) => {
                return Ok((
                    Some(ConditionUpdate::not_ready(
                        types::VALIDATION_SUCCEEDED,
                        types::REASON_TAG_VALIDATION_FAILED,
                        error.to_string(),
                    )),
                    None,
                ));
            }
        };
        if let UserDataCheck::Invalid(message) = user_data {
            return Ok((
                Some(ConditionUpdate::not_ready(
                    types::VALIDATION_SUCCEEDED,
                    types::REASON_USER_DATA_VALIDATION_FAILED,
                    message.clone(),
                )),
                None,
            ));
        }
        let key = validation::cache_key(spec, projected, &tags);
        if let Some(cached) = &self.verdict
            && cached.key == key
            && cached.expires > Instant::now()
        {
            return Ok((Some(verdict_condition(cached.failure)), None));
        }
        let preferred = self.preferred_launch(class, projected);
        let chosen = preferred
            .as_ref()
            .and_then(|(name, id)| {
                let ami = projected.amis.iter().find(|a| &a.id == id)?;
                Some((name.as_str(), ami))
            })
            .or_else(|| validation::validation_launch(&projected.amis));
        let Some((instance_type, ami)) = chosen else {
            return Ok((
                Some(ConditionUpdate::unknown(
                    types::VALIDATION_SUCCEEDED,
                    types::REASON_DEPENDENCIES_NOT_READY,
                    validation::DEPENDENCIES_MESSAGE,
                )),
                None,
            ));
        };
        let rendered = match user_data {
            UserDataCheck::Rendered(rendered) => Some(rendered),
            _ => None,
        };
        let input = validation::DryRunInput {
            class_name: &self.name,
            spec,
            status: projected,
            tags: &tags,
            user_data: rendered,
            instance_type,
            image_id: &ami.id,
        };
        let verdict = validation::dry_runs(self.deps.ec2.as_ref(), &input)
            .await
            .map_err(NodeClassError::Validation)?;
        let failure = match verdict {
            Verdict::Passed => None,
            Verdict::Failed(reason) => Some(reason),
            Verdict::Retry(message) => {
                tracing::debug!("validation retry: {message}");
                return Ok((None, Some(VALIDATION_RETRY)));
            }
        };
        self.verdict = Some(CachedVerdict {
            key,
            failure,
            expires: Instant::now() + validation::VALIDATION_CACHE_TTL,
        });
        Ok((Some(verdict_condition(failure)), None))
    }

    async fn write_status(
        &self,
        class: &EC2NodeClass,
        plan: &StatusPlan,
        now: Timestamp,
    ) -> Result<(), NodeClassError> {
        let generation = class.metadata.generation;
        let current = class.status.clone().unwrap_or_default();
        let mut next = current.clone();
        plan.apply(&mut next, generation, now);
        if class.status.is_some() && next == current {
            return Ok(());
        }
        let change = |status: &mut karpenter_core::apis::EC2NodeClassStatus| {
            plan.apply(status, generation, now);
        };
        match self
            .deps
            .cluster
            .update_ec2nodeclass_status(&self.name, &change)
            .await
        {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(source) => Err(NodeClassError::Update {
                name: self.name.clone(),
                source,
            }),
        }
    }

    /// Stamps the class's NodeClaims with our hash version (and hash, unless drifted).
    async fn restamp_nodeclaims(&self, class: &EC2NodeClass) -> Result<(), NodeClassError> {
        let hash = nodeclass_hash(&class.spec);
        let change =
            |nodeclaim: &mut karpenter_core::apis::NodeClaim| metadata::restamp(nodeclaim, &hash);
        for nodeclaim in self.deps.view.nodeclaims() {
            if !metadata::uses_class(&nodeclaim, &self.name) || !metadata::needs_restamp(&nodeclaim)
            {
                continue;
            }
            let name = nodeclaim.metadata.name.clone().unwrap_or_default();
            match self.deps.cluster.update_nodeclaim(&name, &change).await {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                Err(source) => {
                    return Err(NodeClassError::Restamp {
                        nodeclaim: name,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Deletion: wait for NodeClaims, then clean up and drop the finalizer.
    async fn finalize(&mut self, class: &EC2NodeClass) -> Result<Action, NodeClassErrors> {
        if !metadata::has_finalizer(class) {
            return Ok(Action::AwaitChange);
        }
        if !self.deps.view.is_synced() {
            // An empty list of NodeClaims means nothing before the first list.
            return Ok(Action::requeue(finalize::UNSYNCED_RECHECK));
        }
        let mut waiting: Vec<String> = self
            .deps
            .view
            .nodeclaims()
            .iter()
            .filter(|c| metadata::uses_class(c, &self.name))
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if !waiting.is_empty() {
            waiting.sort();
            let due = self
                .last_waiting_event
                .is_none_or(|at| at.elapsed() >= finalize::WAITING_EVENT_INTERVAL);
            if due {
                let event = finalize::waiting_event(class, &waiting);
                // Events are best effort: a failure is logged, the wait goes on.
                if let Err(error) = self.deps.cluster.publish_event(&event).await {
                    tracing::debug!(error = logs::err(&error), "failed publishing event");
                }
                self.last_waiting_event = Some(Instant::now());
            }
            return Ok(Action::requeue(finalize::WAITING_EVENT_INTERVAL));
        }
        let cluster = self.deps.cluster_info.name.clone();
        if class.spec.role.is_some() {
            let name = profile_name(&cluster, &self.deps.region, &self.name);
            self.deps
                .instance_profiles
                .delete(&name)
                .await
                .map_err(NodeClassError::InstanceProfile)?;
        }
        let deleted =
            finalize::delete_launch_templates(self.deps.ec2.as_ref(), &cluster, &self.name)
                .await
                .map_err(|source| NodeClassError::LaunchTemplates {
                    name: self.name.clone(),
                    source,
                })?;
        tracing::debug!(count = deleted, "deleted launch template(s)");
        match self
            .deps
            .cluster
            .update_ec2nodeclass(&self.name, &metadata::remove_finalizer)
            .await
        {
            Ok(_) | Err(ClusterError::NotFound { .. }) => {}
            Err(source) => {
                return Err(NodeClassError::Update {
                    name: self.name.clone(),
                    source,
                }
                .into());
            }
        }
        self.verdict = None;
        Ok(Action::AwaitChange)
    }
}

/// `ValidationSucceeded` from a dry-run verdict.
fn verdict_condition(failure: Option<&'static str>) -> ConditionUpdate {
    match failure {
        None => ConditionUpdate::ready(types::VALIDATION_SUCCEEDED),
        Some(reason) => ConditionUpdate::not_ready(
            types::VALIDATION_SUCCEEDED,
            reason,
            validation::failure_message(reason),
        ),
    }
}
