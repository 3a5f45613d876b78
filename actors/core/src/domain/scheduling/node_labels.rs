//! An existing node's labels, read in place from the object they come from.
//!
//! Every Provisioner run and every disruption round builds a snapshot with an [`ExistingNode`]
//! per node; at 5,000 nodes of about 40 labels each, copying the labels into each snapshot was
//! a fifth of the Provisioner's memory at a scale-up's peak and part of every build. The view
//! keeps each Node and NodeClaim behind an `Arc`, so a snapshot holds the `Arc` and reads the
//! labels through it; a node made up by a simulation owns its map.
//!
//! [`ExistingNode`]: super::ExistingNode

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::apis::SlimNode;
use crate::apis::nodeclaim::NodeClaim;

/// The labels of no object.
static NONE: BTreeMap<String, String> = BTreeMap::new();

/// The object a node's labels are read from.
#[derive(Clone)]
enum Shared {
    /// The registered Node.
    Node(Arc<SlimNode>),
    /// The NodeClaim, before its Node registers.
    Claim(Arc<NodeClaim>),
}

/// A node's labels: a Node's, a NodeClaim's, or a map of their own. Reads as the map; a
/// change first copies them into a map of their own.
#[derive(Clone, Default)]
pub struct NodeLabels {
    shared: Option<Shared>,
    /// Labels of their own (a node a simulation made up, or labels someone changed); read
    /// instead of `shared` when set.
    owned: Option<Arc<BTreeMap<String, String>>>,
}

impl NodeLabels {
    /// The labels of a registered Node.
    #[must_use]
    pub fn node(node: Arc<SlimNode>) -> Self {
        Self {
            shared: Some(Shared::Node(node)),
            owned: None,
        }
    }

    /// The labels of a NodeClaim.
    #[must_use]
    pub fn claim(claim: Arc<NodeClaim>) -> Self {
        Self {
            shared: Some(Shared::Claim(claim)),
            owned: None,
        }
    }
}

impl Deref for NodeLabels {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &Self::Target {
        let labels = match (&self.owned, &self.shared) {
            (Some(owned), _) => Some(&**owned),
            (None, Some(Shared::Node(node))) => node.metadata.labels.as_ref(),
            (None, Some(Shared::Claim(claim))) => claim.metadata.labels.as_ref(),
            (None, None) => None,
        };
        labels.unwrap_or(&NONE)
    }
}

impl DerefMut for NodeLabels {
    fn deref_mut(&mut self) -> &mut Self::Target {
        if self.owned.is_none() {
            self.owned = Some(Arc::new((**self).clone()));
            self.shared = None;
        }
        Arc::make_mut(self.owned.get_or_insert_with(Arc::default))
    }
}

impl<'a> IntoIterator for &'a NodeLabels {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<BTreeMap<String, String>> for NodeLabels {
    fn from(labels: BTreeMap<String, String>) -> Self {
        Self {
            shared: None,
            owned: Some(Arc::new(labels)),
        }
    }
}

impl<const N: usize> From<[(String, String); N]> for NodeLabels {
    fn from(pairs: [(String, String); N]) -> Self {
        BTreeMap::from(pairs).into()
    }
}

impl FromIterator<(String, String)> for NodeLabels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        pairs.into_iter().collect::<BTreeMap<_, _>>().into()
    }
}

impl fmt::Debug for NodeLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for NodeLabels {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for NodeLabels {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_reads_as_its_map_and_none_as_empty() {
        let labels = BTreeMap::from([("topology.kubernetes.io/zone".to_owned(), "z1".to_owned())]);
        let mut node = SlimNode::default();
        node.metadata.labels = Some(labels.clone());
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": "c" },
            "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": [],
            },
        }))
        .unwrap();
        claim.metadata.labels = Some(labels.clone());
        let node = Arc::new(node);
        let from_node = NodeLabels::node(Arc::clone(&node));
        assert_eq!(*from_node, labels);
        assert!(
            std::ptr::eq(
                &raw const *from_node,
                node.metadata.labels.as_ref().unwrap()
            ),
            "read in place, not copied"
        );
        assert_eq!(*NodeLabels::claim(Arc::new(claim)), labels);
        assert_eq!(*NodeLabels::from(labels.clone()), labels);
        assert!(NodeLabels::default().is_empty());
        assert!(NodeLabels::node(Arc::new(SlimNode::default())).is_empty());
        assert_eq!(NodeLabels::from(labels.clone()), from_node);
        // A change copies: the Node keeps its labels.
        let mut changed = from_node.clone();
        changed.insert("team".into(), "a".into());
        assert_eq!(changed.len(), 2);
        assert_eq!(*from_node, labels);
        assert_eq!(node.metadata.labels.as_ref(), Some(&labels));
    }
}
