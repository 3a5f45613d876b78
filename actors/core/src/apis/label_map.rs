//! [`LabelMap`]: a label or annotation map as a watched Node keeps it, held once for every
//! Node that has the same one.
//!
//! A `BTreeMap<String, String>` of a Node's 24 labels is four B-tree nodes and 48 strings,
//! about 3.2 KB, and its four annotations another 0.8 KB; at 5,000 nodes that was 20 MB of the
//! view. But the Nodes of one pool, instance type, zone and capacity type carry the same labels
//! and the same annotations, except `kubernetes.io/hostname`, which names the node. A
//! `LabelMap` keeps the entries of such a per-node key ([`OWN_KEYS`]) with the node and shares
//! the rest, interned, with every map that has the same ones.
//!
//! ```text
//! BTreeMap (decoded) --> LabelMap::from --> own: [hostname entry]
//!                                       \-> shared: Arc<BTreeMap> (interned: one per distinct rest)
//! get(key) / iter() (both parts, in key order) / len() / to_map()
//! ```
//!
//! It reads as a map (`get`, `contains_key`, `iter` in key order, `len`), compares, hashes,
//! prints and serializes as the map it stands for; a change ([`LabelMap::insert`]) builds a
//! new one.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::iter::Peekable;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::labels::HOSTNAME;
use crate::domain::interner::Interner;

/// Keys whose value names one object: kept with it, never in the shared part.
pub const OWN_KEYS: &[&str] = &[HOSTNAME];

/// Every shared part made, one per distinct value.
static SHARED: Interner<BTreeMap<String, String>> = Interner::new();

/// A map of labels or annotations: the entries of [`OWN_KEYS`] its own, the rest shared (see
/// the module docs).
#[derive(Clone, Default)]
pub struct LabelMap {
    shared: Arc<BTreeMap<String, String>>,
    /// The entries of [`OWN_KEYS`], in key order.
    own: Box<[(String, String)]>,
}

impl LabelMap {
    /// The value of `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&String> {
        if OWN_KEYS.contains(&key) {
            return self.own.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        }
        self.shared.get(key)
    }

    #[must_use]
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.len() + self.own.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, in key order.
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            shared: self.shared.iter().peekable(),
            own: self.own.iter().peekable(),
        }
    }

    /// The map it stands for, as a map of its own.
    #[must_use]
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Sets `key` to `value`; the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let mut map = self.to_map();
        let old = map.insert(key, value);
        *self = Self::from(map);
        old
    }

    /// Whether the shared part of `self` is the very one of `other` (tests).
    #[must_use]
    pub fn shares_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl From<BTreeMap<String, String>> for LabelMap {
    fn from(mut map: BTreeMap<String, String>) -> Self {
        let mut own: Vec<(String, String)> = OWN_KEYS
            .iter()
            .filter_map(|key| map.remove_entry(*key))
            .collect();
        own.sort_unstable();
        Self {
            shared: SHARED.intern(map),
            own: own.into_boxed_slice(),
        }
    }
}

/// The entries of a [`LabelMap`] in key order: its two parts merged.
#[derive(Debug)]
pub struct Iter<'a> {
    shared: Peekable<std::collections::btree_map::Iter<'a, String, String>>,
    own: Peekable<std::slice::Iter<'a, (String, String)>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        let own_first = match (self.shared.peek(), self.own.peek()) {
            (Some((shared, _)), Some((own, _))) => own < *shared,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if own_first {
            self.own.next().map(|(k, v)| (k, v))
        } else {
            self.shared.next()
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (shared, own) = (self.shared.len(), self.own.len());
        (shared + own, Some(shared + own))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a LabelMap {
    type Item = (&'a String, &'a String);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq for LabelMap {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.shared, &other.shared) || self.shared == other.shared)
            && self.own == other.own
    }
}

impl Eq for LabelMap {}

/// Equal to the map it stands for.
impl PartialEq<BTreeMap<String, String>> for LabelMap {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Hash for LabelMap {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for entry in self {
            entry.hash(state);
        }
    }
}

impl fmt::Debug for LabelMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for LabelMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for LabelMap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_labels(host: &str, zone: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (HOSTNAME.to_owned(), host.to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
            ("topology.kubernetes.io/zone".to_owned(), zone.to_owned()),
            ("a-first".to_owned(), "1".to_owned()),
            ("z-last".to_owned(), "2".to_owned()),
        ])
    }

    #[test]
    fn reads_as_the_map_it_stands_for_in_key_order() {
        let map = node_labels("ip-1", "z1");
        let labels = LabelMap::from(map.clone());
        assert_eq!(labels.len(), 5);
        assert_eq!(labels.get(HOSTNAME).map(String::as_str), Some("ip-1"));
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("z1")
        );
        assert_eq!(labels.get("missing"), None);
        assert!(labels.contains_key("a-first"));
        assert!(labels.iter().eq(map.iter()), "merged in key order");
        assert_eq!(labels.iter().len(), 5);
        assert_eq!(labels.to_map(), map);
        assert_eq!(labels, map);
        assert!(LabelMap::default().is_empty());
        assert_eq!(format!("{labels:?}"), format!("{map:?}"));
    }

    #[test]
    fn maps_equal_but_for_the_hostname_share_the_rest() {
        let (a, b, other) = (
            LabelMap::from(node_labels("ip-1", "z1")),
            LabelMap::from(node_labels("ip-2", "z1")),
            LabelMap::from(node_labels("ip-3", "z2")),
        );
        assert!(a.shares_with(&b));
        assert!(!a.shares_with(&other));
        assert_ne!(a, b, "the hostnames differ");
        assert_eq!(a, LabelMap::from(node_labels("ip-1", "z1")));
    }

    #[test]
    fn a_change_builds_a_new_map_and_leaves_the_shared_one() {
        let a = LabelMap::from(node_labels("ip-1", "z1"));
        let mut b = a.clone();
        assert_eq!(b.insert("team".to_owned(), "x".to_owned()), None);
        assert_eq!(b.get("team").map(String::as_str), Some("x"));
        assert_eq!(a.get("team"), None);
        assert!(!a.shares_with(&b));
        assert_eq!(
            b.insert(HOSTNAME.to_owned(), "ip-9".to_owned()).as_deref(),
            Some("ip-1")
        );
        assert_eq!(b.get(HOSTNAME).map(String::as_str), Some("ip-9"));
    }

    #[test]
    fn equal_maps_hash_equally_and_serialize_as_a_map() {
        use std::hash::BuildHasher;
        let hasher = std::hash::RandomState::new();
        let a = LabelMap::from(node_labels("ip-1", "z1"));
        let b = LabelMap::from(node_labels("ip-1", "z1"));
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            json,
            serde_json::to_value(node_labels("ip-1", "z1")).unwrap()
        );
        let back: LabelMap = serde_json::from_value(json).unwrap();
        assert_eq!(back, a);
    }
}
