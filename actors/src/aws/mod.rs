//! The AWS group (ARCHITECTURE's `AwsSupervisor`): one supervised actor per AWS subsystem, so
//! each has a mailbox, restarts and `karpenter_actor_*` metrics, shows in `karpenter actors`,
//! and can be targeted by a fault plan.
//!
//! ```text
//! aws (one-for-one, group-level intensity)
//!   CreateFleetBatcherActor        create-fleet          launches, batched (35 ms / 1 s / 1000)
//!   DescribeInstancesBatcherActor  describe-instances    gets, batched (100 ms / 1 s / 500)
//!   TerminateInstancesBatcherActor terminate-instances   deletes, batched (100 ms / 1 s / 500)
//!   UnavailableOfferingsActor      unavailable-offerings the ICE cache's expiry
//!   LaunchTemplateJanitorActor     launch-templates      deletes templates unused for a minute
//!   CatalogueRefreshActor          aws-catalogue         instance types and prices, 12 h / 1 min
//! ```
//!
//! Data flow: callers keep calling the providers ([`AwsProviders`]) as before; the providers
//! hand batched calls to the batcher actors and write the ICE cache, whose actor expires the
//! marks; the janitor and the refresh run on their own timers. Hot reads (instance types and
//! their offerings, the ICE cache, prices) stay synchronous on the providers' shared state.
//!
//! The group is started by whoever builds the providers ([`AwsActors::start`]): the daemon's
//! assembly starts it as a second root at process start, beside the leader-elected actors, so
//! the catalogue refresh (which gates `/readyz`) runs on a standby replica too; tests start it
//! on a kit of their own. There is no actor-less mode: a batcher that was never started fails
//! every request at once.
//!
//! Intensity is counted per group, not per child: these are singletons, and one that keeps
//! failing (more than 5 restarts a minute) means the AWS layer is broken; the group escalates
//! and the process exits for Kubernetes to restart it.

pub mod catalogue;

use crate::providers::cloud_provider::AwsProviders;
use crate::providers::launch_templates::LaunchTemplateJanitorActor;
use crate::providers::unavailable::UnavailableOfferingsActor;
use crate::runtime::{ActorRef, GroupRef, SpawnError};
use catalogue::{CatalogueDeps, CatalogueRefreshActor, CatalogueStatus};

/// The name of the AWS group (a root of its own in the daemon).
pub const AWS_GROUP: &str = "aws";

/// The kinds of the AWS group's actors: the only actors a standby replica runs.
pub const AWS_ACTOR_KINDS: [&str; 6] = [
    "CreateFleetBatcherActor",
    "DescribeInstancesBatcherActor",
    "TerminateInstancesBatcherActor",
    "UnavailableOfferingsActor",
    "LaunchTemplateJanitorActor",
    "CatalogueRefreshActor",
];

/// Which AWS actors to start.
#[derive(Debug, Clone, Default)]
pub struct AwsActorOptions {
    /// Refresh the catalogue (now and every 12 hours), reporting to this status; `None` for a
    /// catalogue loaded once by the caller (simulations, most tests).
    pub refresh: Option<CatalogueStatus>,
}

/// The AWS subsystem actors of one set of providers.
#[derive(Debug, Clone)]
pub struct AwsActors {
    group: GroupRef,
    offerings: ActorRef<UnavailableOfferingsActor>,
    janitor: ActorRef<LaunchTemplateJanitorActor>,
    refresh: Option<ActorRef<CatalogueRefreshActor>>,
}

impl AwsActors {
    /// Starts every AWS actor of `providers` under `group`, in the order of the module docs.
    pub fn start(
        group: &GroupRef,
        providers: &AwsProviders,
        options: AwsActorOptions,
    ) -> Result<Self, SpawnError> {
        providers.instances.start(group)?;
        let offerings = UnavailableOfferingsActor::start(group, &providers.unavailable)?;
        let janitor = LaunchTemplateJanitorActor::start(group, &providers.launch_templates)?;
        let refresh = match options.refresh {
            Some(status) => Some(group.spawn::<CatalogueRefreshActor>(
                CatalogueRefreshActor::KEY,
                CatalogueDeps {
                    providers: providers.clone(),
                    status,
                },
            )?),
            None => None,
        };
        Ok(Self {
            group: group.clone(),
            offerings,
            janitor,
            refresh,
        })
    }

    /// The group they run in.
    #[must_use]
    pub fn group(&self) -> &GroupRef {
        &self.group
    }

    /// The ICE cache's expiry actor.
    #[must_use]
    pub fn offerings(&self) -> &ActorRef<UnavailableOfferingsActor> {
        &self.offerings
    }

    /// The launch-template janitor.
    #[must_use]
    pub fn janitor(&self) -> &ActorRef<LaunchTemplateJanitorActor> {
        &self.janitor
    }

    /// The catalogue refresh, when started.
    #[must_use]
    pub fn refresh(&self) -> Option<&ActorRef<CatalogueRefreshActor>> {
        self.refresh.as_ref()
    }
}
