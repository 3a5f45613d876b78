//! The AWS group for tests: providers need their actors (batchers, ICE expiry, janitor) to
//! launch, get or delete anything, and a test that builds providers by hand starts them here, on
//! a kit of its own, inside its actix system (`#[actix::test]`).

use prometheus_client::registry::Registry;

use crate::aws::{AWS_GROUP, AwsActorOptions, AwsActors};
use crate::providers::cloud_provider::AwsProviders;
use crate::runtime::{ActorKit, GroupSpec, KitOptions, RootGroup};

/// A kit whose root is the AWS group, and the actors started in it.
#[derive(Debug)]
pub struct AwsTestKit {
    pub kit: ActorKit,
    /// The kit's `karpenter_actor_*` metrics.
    pub registry: Registry,
    /// The AWS group.
    pub root: RootGroup,
}

impl AwsTestKit {
    /// An empty AWS group on a fresh kit, for providers started piecemeal
    /// (`InstancesProvider::start`, `UnavailableOfferingsActor::start`).
    #[must_use]
    pub fn new(options: KitOptions) -> Self {
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, options);
        let root = kit
            .root(GroupSpec::one_for_one(AWS_GROUP))
            .unwrap_or_else(|error| unreachable_in_tests(&error));
        Self {
            kit,
            registry,
            root,
        }
    }

    /// [`Self::new`] with every AWS actor of `providers` started (no catalogue refresh).
    #[must_use]
    pub fn with_providers(providers: &AwsProviders) -> (Self, AwsActors) {
        let kit = Self::new(KitOptions::default());
        let actors = AwsActors::start(&kit.root, providers, AwsActorOptions::default())
            .unwrap_or_else(|error| unreachable_in_tests(&error));
        (kit, actors)
    }
}

/// Outside an actix system nothing can start; a test doing that is broken.
#[expect(
    clippy::panic,
    reason = "a test helper: failing to start is a broken test"
)]
fn unreachable_in_tests(error: &crate::runtime::SpawnError) -> ! {
    panic!("starting the AWS test kit: {error} (run inside #[actix::test])")
}
