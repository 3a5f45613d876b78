//! Families: per-object actors (one NodeClaimActor per NodeClaim, one NodePoolActor per
//! NodePool, ...) under their own group, started on demand, found and routed to by key.
//!
//! Flow: [`Family::ensure`] returns the actor for a key, spawning it if there is none;
//! [`Family::remove`] stops it when its object goes away (queued messages fail with `Stopped`).
//! A restarted member keeps its address, so it stays reachable under the same key. A member
//! that stops itself normally (a transient actor calling `ctx.stop()`) or is stopped leaves the
//! map when its group sees it terminate; the next `ensure` for that key starts a fresh one.
//!
//! Restart intensity is counted per member: a member that keeps failing is parked (it keeps
//! its key and address; sends to it fail at once until its retry) while its siblings go on,
//! and the family escalates only when many distinct members fail (see [`super::group`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::actor::{Handles, Mail, Supervised};
use super::address::ActorRef;
use super::control::Command;
use super::error::{Overflow, SendError, SpawnError};
use super::group::{ChildId, GroupRef, GroupSpec, ParkHook, ParkPolicy};

struct Member<A: Supervised> {
    child: ChildId,
    actor: ActorRef<A>,
}

type Members<A> = Arc<Mutex<HashMap<Arc<str>, Member<A>>>>;

/// Per-key actors of kind `A` under one group.
pub struct Family<A: Supervised> {
    group: GroupRef,
    deps: Arc<A::Deps>,
    members: Members<A>,
}

impl<A: Supervised> Clone for Family<A> {
    fn clone(&self) -> Self {
        Self {
            group: self.group.clone(),
            deps: Arc::clone(&self.deps),
            members: Arc::clone(&self.members),
        }
    }
}

impl<A: Supervised> fmt::Debug for Family<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("kind", &A::KIND)
            .field("group", &self.group.name())
            .field("members", &self.len())
            .finish_non_exhaustive()
    }
}

fn lock<A: Supervised>(members: &Members<A>) -> MutexGuard<'_, HashMap<Arc<str>, Member<A>>> {
    members.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: Supervised> Family<A> {
    pub(crate) fn start(
        parent: &GroupRef,
        mut spec: GroupSpec,
        deps: Arc<A::Deps>,
        on_park: Option<ParkHook>,
    ) -> Result<Self, SpawnError> {
        // A family's members are independent objects: one failing member is parked on its own.
        spec.parking.get_or_insert_with(ParkPolicy::default);
        let members: Members<A> = Arc::default();
        let weak = Arc::downgrade(&members);
        let hook = Box::new(move |key: &str, child: ChildId| {
            if let Some(members) = weak.upgrade() {
                let mut members = lock::<A>(&members);
                // Only the member that left: the key may already belong to a newer actor.
                if members.get(key).is_some_and(|m| m.child == child) {
                    members.remove(key);
                }
            }
        });
        let group = GroupRef::start(parent.kit(), spec, Some(parent), None, Some(hook), on_park)?;
        Ok(Self {
            group,
            deps,
            members,
        })
    }

    /// The actor for `key`, spawned now if there is none.
    pub fn ensure(&self, key: &str) -> Result<ActorRef<A>, SpawnError> {
        let mut members = lock::<A>(&self.members);
        if let Some(member) = members.get(key) {
            return Ok(member.actor.clone());
        }
        let key: Arc<str> = Arc::from(key);
        let (actor, child) = self
            .group
            .spawn_member::<A>(Arc::clone(&key), Arc::clone(&self.deps))?;
        members.insert(
            key,
            Member {
                child,
                actor: actor.clone(),
            },
        );
        Ok(actor)
    }

    /// The actor for `key`, if running.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<ActorRef<A>> {
        lock::<A>(&self.members)
            .get(key)
            .map(|member| member.actor.clone())
    }

    /// Stops the actor for `key` (its object is gone). Returns whether there was one.
    #[allow(clippy::must_use_candidate, reason = "callers usually do not care")]
    pub fn remove(&self, key: &str) -> bool {
        let removed = lock::<A>(&self.members).remove(key);
        match removed {
            Some(member) => {
                member.actor.command(Command::Stop);
                true
            }
            None => false,
        }
    }

    /// Keys with a running actor, sorted.
    #[must_use]
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = lock::<A>(&self.members)
            .keys()
            .map(ToString::to_string)
            .collect();
        keys.sort();
        keys
    }

    /// Running actors.
    #[must_use]
    pub fn len(&self) -> usize {
        lock::<A>(&self.members).len()
    }

    /// Whether no actor runs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The family's group (to stop it with all its members).
    #[must_use]
    pub fn group(&self) -> &GroupRef {
        &self.group
    }

    /// [`ActorRef::request`] to the actor for `key`; `NoActor` if there is none.
    pub async fn request<M: Mail>(
        &self,
        key: &str,
        message: M,
        timeout: Duration,
    ) -> Result<M::Reply, SendError>
    where
        A: Handles<M>,
    {
        let actor = self.get(key).ok_or_else(|| SendError::NoActor {
            kind: A::KIND,
            key: Arc::from(key),
        })?;
        actor.request(message, timeout).await
    }

    /// [`ActorRef::try_send_event`] to the actor for `key`; `NoActor` if there is none.
    pub fn try_send_event<M: Mail>(&self, key: &str, message: M) -> Result<(), Overflow>
    where
        A: Handles<M>,
    {
        match self.get(key) {
            Some(actor) => actor.try_send_event(message),
            None => Err(Overflow::NoActor {
                kind: A::KIND,
                key: Arc::from(key),
                message: M::NAME,
            }),
        }
    }

    /// [`ActorRef::nudge`] to the actor for `key`, if any.
    pub fn nudge<M: Mail>(&self, key: &str, message: M) -> Result<(), Overflow>
    where
        A: Handles<M>,
    {
        match self.get(key) {
            Some(actor) => actor.nudge(message),
            None => Err(Overflow::NoActor {
                kind: A::KIND,
                key: Arc::from(key),
                message: M::NAME,
            }),
        }
    }

    /// [`ActorRef::send_lossy`] to the actor for `key`, if any.
    pub fn send_lossy<M: Mail>(&self, key: &str, message: M)
    where
        A: Handles<M>,
    {
        if let Some(actor) = self.get(key) {
            actor.send_lossy(message);
        }
    }
}
