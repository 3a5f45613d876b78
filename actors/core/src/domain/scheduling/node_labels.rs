//! An existing node's labels, read in place from the object they come from.
//!
//! Every Provisioner run and every disruption round builds a snapshot with an [`ExistingNode`]
//! per node; at 5,000 nodes of about 40 labels each, copying the labels into each snapshot was
//! a fifth of the Provisioner's memory at a scale-up's peak and part of every build. The view
//! keeps each Node and NodeClaim behind an `Arc`, so a snapshot holds the `Arc` and reads the
//! labels through it; a node made up by a simulation owns its map.
//!
//! A Node's or NodeClaim's labels are a [`LabelMap`] (a Node's hostname its own, the rest
//! shared between objects), a made-up node's a `BTreeMap`, so `NodeLabels` reads as a map
//! through its own methods (`get`, `iter` in key order, `len`) rather than handing out either;
//! functions that read labels of both take an iterator of entries, as
//! `Requirements::from_labels` does.
//!
//! [`ExistingNode`]: super::ExistingNode

use std::collections::{BTreeMap, btree_map};
use std::fmt;
use std::sync::Arc;

use crate::apis::label_map::{self, LabelMap};
use crate::apis::{SlimNode, SlimNodeClaim};

/// The object a node's labels are read from.
#[derive(Clone)]
enum Shared {
    /// The registered Node.
    Node(Arc<SlimNode>),
    /// The NodeClaim, before its Node registers.
    Claim(Arc<SlimNodeClaim>),
}

/// A node's labels: a Node's, a NodeClaim's, or a map of their own. Reads as a map (`get`,
/// `iter` in key order, `len`); a change first copies them into a map of their own.
#[derive(Clone, Default)]
pub struct NodeLabels {
    shared: Option<Shared>,
    /// Labels of their own (a node a simulation made up, or labels someone changed); read
    /// instead of `shared` when set.
    owned: Option<Arc<BTreeMap<String, String>>>,
}

/// Where the labels are: their own map, or a Node's or NodeClaim's [`LabelMap`].
enum Source<'a> {
    Map(&'a BTreeMap<String, String>),
    Shared(&'a LabelMap),
    Nothing,
}

/// The entries of [`NodeLabels`], in key order.
#[derive(Debug)]
pub enum Iter<'a> {
    Map(btree_map::Iter<'a, String, String>),
    Shared(label_map::Iter<'a>),
    Nothing,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Map(entries) => entries.next(),
            Self::Shared(entries) => entries.next(),
            Self::Nothing => None,
        }
    }
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
    pub fn claim(claim: Arc<SlimNodeClaim>) -> Self {
        Self {
            shared: Some(Shared::Claim(claim)),
            owned: None,
        }
    }

    fn source(&self) -> Source<'_> {
        let shared = match (&self.owned, &self.shared) {
            (Some(owned), _) => return Source::Map(owned),
            (None, Some(Shared::Node(node))) => node.metadata.labels.as_ref(),
            (None, Some(Shared::Claim(claim))) => claim.metadata.labels.as_ref(),
            (None, None) => None,
        };
        shared.map_or(Source::Nothing, Source::Shared)
    }

    /// The value of `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&String> {
        match self.source() {
            Source::Map(map) => map.get(key),
            Source::Shared(map) => map.get(key),
            Source::Nothing => None,
        }
    }

    #[must_use]
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every label, in key order.
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        match self.source() {
            Source::Map(map) => Iter::Map(map.iter()),
            Source::Shared(map) => Iter::Shared(map.iter()),
            Source::Nothing => Iter::Nothing,
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        match self.source() {
            Source::Map(map) => map.len(),
            Source::Shared(map) => map.len(),
            Source::Nothing => 0,
        }
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The labels as a map of their own.
    #[must_use]
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The labels to change: copied into a map of their own first.
    fn to_mut(&mut self) -> &mut BTreeMap<String, String> {
        if self.owned.is_none() {
            self.owned = Some(Arc::new(self.to_map()));
            self.shared = None;
        }
        Arc::make_mut(self.owned.get_or_insert_with(Arc::default))
    }

    /// Sets `key` to `value` (in a map of their own); the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        self.to_mut().insert(key, value)
    }

    /// Removes `key` (from a map of their own); the value it had.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.to_mut().remove(key)
    }
}

impl<'a> IntoIterator for &'a NodeLabels {
    type Item = (&'a String, &'a String);
    type IntoIter = Iter<'a>;

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
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for NodeLabels {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for NodeLabels {}

/// Equal to the map they read as.
impl PartialEq<BTreeMap<String, String>> for NodeLabels {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_reads_as_its_map_and_none_as_empty() {
        let labels = BTreeMap::from([("topology.kubernetes.io/zone".to_owned(), "z1".to_owned())]);
        let mut node = SlimNode::default();
        node.metadata.labels = Some(labels.clone().into());
        let mut claim: SlimNodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": "c" },
            "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": [],
            },
        }))
        .unwrap();
        claim.metadata.labels = Some(labels.clone().into());
        let node = Arc::new(node);
        let from_node = NodeLabels::node(Arc::clone(&node));
        assert_eq!(from_node, labels);
        let (read, held) = (
            from_node.get("topology.kubernetes.io/zone").unwrap(),
            node.metadata
                .labels
                .as_ref()
                .unwrap()
                .get("topology.kubernetes.io/zone")
                .unwrap(),
        );
        assert!(std::ptr::eq(read, held), "read in place, not copied");
        assert_eq!(NodeLabels::claim(Arc::new(claim)), labels);
        assert_eq!(NodeLabels::from(labels.clone()), labels);
        assert!(NodeLabels::default().is_empty());
        assert!(NodeLabels::node(Arc::new(SlimNode::default())).is_empty());
        assert_eq!(NodeLabels::from(labels.clone()), from_node);
        // A change copies: the Node keeps its labels.
        let mut changed = from_node.clone();
        changed.insert("team".into(), "a".into());
        assert_eq!(changed.len(), 2);
        assert_eq!(from_node, labels);
        assert_eq!(node.metadata.labels.as_ref().unwrap(), &labels);
    }
}
