//! Per-pod conversions kept from one run to the next.
//!
//! The Provisioner (each batch) and the disruption actor (each round that sees a change) read
//! every pod of the view and convert it: requests parsed from quantities, labels, affinity
//! terms, tolerations and spread constraints copied into the scheduler's types. Between two
//! runs of a scale-up most pods are unchanged, and at 50,000 pods the conversions were most of
//! a run.
//!
//! ```text
//! run: begin --> get(pod) per pod: same uid and resourceVersion as last time -> the kept value
//!                                  else -> convert: equal to the kept value -> the kept value
//!                                                   else -> the new one, kept
//!      --> sweep: forget the pods this run did not read (deleted, or no longer asked for)
//! ```
//!
//! A pod's `resourceVersion` changes with every write (the API server's and the emulator's
//! rule), so (uid, resourceVersion) names one content. A pod without either (a hand-made test
//! object) is converted every time and not kept. The cache holds no `Pod`: only the key and
//! the value, so a pod replaced in the view is not kept alive here. It keeps the key small: a
//! uid in the API server's form (a lowercase UUID) as its 128 bits, a decimal resourceVersion
//! (etcd's revision) as a number, any other text as it is.

use karpenter_core::apis::SlimPod;
use rustc_hash::FxHashMap;

/// Conversions of pods to `T`, kept while the pods do not change.
#[derive(Debug)]
pub struct PodCache<T> {
    entries: FxHashMap<Uid, Kept<T>>,
    /// The current run, stamped on every entry it reads.
    run: u64,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Kept<T> {
    resource_version: Version,
    value: T,
    run: u64,
}

/// A pod's uid: a lowercase UUID as its two halves, any other text as it is. Each text has
/// one form, so two uids are equal exactly when their texts are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Uid {
    Uuid([u64; 2]),
    Text(Box<str>),
}

impl Uid {
    pub(crate) fn of(text: &str) -> Self {
        parse_uuid(text).map_or_else(|| Self::Text(text.into()), Self::Uuid)
    }
}

/// `8-4-4-4-12` lowercase hex digits, as two 64-bit halves.
fn parse_uuid(text: &str) -> Option<[u64; 2]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&at| bytes[at] != b'-') {
        return None;
    }
    let mut value: u128 = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if matches!(at, 8 | 13 | 18 | 23) {
            continue;
        }
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            _ => return None,
        };
        value = (value << 4) | u128::from(digit);
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the two halves of the 128 bits, each truncated on purpose"
    )]
    Some([(value >> 64) as u64, value as u64])
}

/// A resourceVersion: a decimal number without leading zeros as the number, any other text as
/// it is (equal exactly when the texts are).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Text(Box<str>),
}

impl Version {
    fn of(text: &str) -> Self {
        let canonical = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        match text.parse() {
            Ok(number) if canonical => Self::Number(number),
            _ => Self::Text(text.into()),
        }
    }
}

impl<T> Default for PodCache<T> {
    fn default() -> Self {
        Self {
            entries: FxHashMap::default(),
            run: 0,
            hits: 0,
            misses: 0,
        }
    }
}

impl<T: Clone + PartialEq> PodCache<T> {
    /// The pod's conversion: the kept one when the pod is the one it was made from, else
    /// `convert(pod)` (kept for the next run). A new version that converts to what the kept
    /// one did (a status write the conversion does not read) keeps the earlier value, so the
    /// snapshots still holding it and the next ones share it.
    pub fn get(&mut self, pod: &SlimPod, convert: impl FnOnce(&SlimPod) -> T) -> T {
        let (Some(uid), Some(version)) = (
            pod.metadata.uid.as_deref(),
            pod.metadata.resource_version.as_deref(),
        ) else {
            self.misses += 1;
            return convert(pod);
        };
        let run = self.run;
        let (uid, version) = (Uid::of(uid), Version::of(version));
        if let Some(kept) = self.entries.get_mut(&uid)
            && kept.resource_version == version
        {
            self.hits += 1;
            kept.run = run;
            return kept.value.clone();
        }
        self.misses += 1;
        let value = convert(pod);
        if let Some(kept) = self.entries.get_mut(&uid)
            && kept.value == value
        {
            kept.resource_version = version;
            kept.run = run;
            return kept.value.clone();
        }
        self.entries.insert(
            uid,
            Kept {
                resource_version: version,
                value: value.clone(),
                run,
            },
        );
        value
    }

    /// Ends a run: forgets every pod it did not read, and gives back the room of a table
    /// left mostly empty ([`crate::table_room`]: after a scale-up of 50,000 pending pods the
    /// Provisioner's table of them held 9 MB while empty).
    pub fn sweep(&mut self) {
        let run = self.run;
        self.entries.retain(|_, kept| kept.run == run);
        if crate::table_room::mostly_empty(self.entries.capacity(), self.entries.len()) {
            self.entries.shrink_to_fit();
        }
        self.run += 1;
    }

    /// Pods kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no pod is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Conversions answered from the cache and made, since it was created.
    #[must_use]
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use karpenter_core::apis::SlimPod as Pod;

    use super::*;

    fn pod(uid: Option<&str>, version: Option<&str>, node: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = uid.map(std::sync::Arc::from);
        pod.metadata.resource_version = version.map(Box::from);
        pod.spec = Some(
            karpenter_core::apis::SharedPodSpec {
                node_name: Some(node.to_owned()),
                ..Default::default()
            }
            .into(),
        );
        pod
    }

    fn node_of(pod: &Pod) -> String {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default()
            .to_owned()
    }

    /// A conversion to the pod's node name that counts its calls.
    fn counting(calls: &Cell<u32>) -> impl FnMut(&Pod) -> String + '_ {
        |pod: &Pod| {
            calls.set(calls.get() + 1);
            node_of(pod)
        }
    }

    #[test]
    fn a_pod_is_converted_again_only_when_its_version_changes() {
        let mut cache = PodCache::default();
        let calls = Cell::new(0);
        let mut convert = counting(&calls);
        for _ in 0..2 {
            assert_eq!(
                cache.get(&pod(Some("u1"), Some("1"), "a"), &mut convert),
                "a"
            );
        }
        assert_eq!(calls.get(), 1, "the same version is read from the cache");
        // A new version with other content: converted again, and that is what is kept.
        for _ in 0..2 {
            assert_eq!(
                cache.get(&pod(Some("u1"), Some("2"), "b"), &mut convert),
                "b"
            );
        }
        assert_eq!(calls.get(), 2);
        assert_eq!(cache.counts(), (2, 2));
    }

    #[test]
    fn a_new_version_converting_to_the_same_value_keeps_the_earlier_one() {
        let mut cache: PodCache<std::sync::Arc<String>> = PodCache::default();
        let convert = |pod: &Pod| std::sync::Arc::new(node_of(pod));
        let first = cache.get(&pod(Some("u1"), Some("1"), "a"), convert);
        // A status write: a new version the conversion does not tell apart.
        let same = cache.get(&pod(Some("u1"), Some("2"), "a"), convert);
        assert!(std::sync::Arc::ptr_eq(&first, &same));
        // And that version is now the kept one: no conversion for it next time.
        let calls = Cell::new(0);
        let again = cache.get(&pod(Some("u1"), Some("2"), "a"), |pod| {
            calls.set(calls.get() + 1);
            convert(pod)
        });
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        assert_eq!(calls.get(), 0);
        // Other content replaces it.
        let moved = cache.get(&pod(Some("u1"), Some("3"), "b"), convert);
        assert_eq!(*moved, "b");
        assert!(!std::sync::Arc::ptr_eq(&first, &moved));
    }

    #[test]
    fn uids_and_versions_are_equal_exactly_when_their_texts_are() {
        let uuid = "013ad24e-60ea-4be7-ab1a-ebfce469b6d0";
        assert!(matches!(Uid::of(uuid), Uid::Uuid(_)));
        assert_eq!(Uid::of(uuid), Uid::of(uuid));
        for other in [
            "013ad24e-60ea-4be7-ab1a-ebfce469b6d1",
            "013AD24E-60EA-4BE7-AB1A-EBFCE469B6D0",
            "013ad24e60ea-4be7-ab1a-ebfce469b6d0-",
            "u1",
        ] {
            assert_ne!(Uid::of(uuid), Uid::of(other), "{other}");
            assert_eq!(Uid::of(other), Uid::of(other), "{other}");
        }
        assert!(matches!(Version::of("12345"), Version::Number(12345)));
        assert!(matches!(Version::of("0"), Version::Number(0)));
        for (a, b) in [
            ("7", "07"),
            ("1", "1a"),
            ("18446744073709551616", "0"),
            ("", "0"),
        ] {
            assert_ne!(Version::of(a), Version::of(b), "{a} {b}");
            assert_eq!(Version::of(a), Version::of(a), "{a}");
        }
    }

    #[test]
    fn a_sweep_gives_back_the_room_of_pods_gone() {
        let mut cache = PodCache::default();
        let pods: Vec<Pod> = (0..10_000)
            .map(|i| pod(Some(&format!("u{i}")), Some("1"), "a"))
            .collect();
        for pod in &pods {
            cache.get(pod, node_of);
        }
        cache.sweep();
        assert_eq!(cache.len(), 10_000);
        assert!(cache.entries.capacity() >= 10_000);
        // The next run reads a tenth of them: the table shrinks to fit those.
        for pod in &pods[..1_000] {
            cache.get(pod, node_of);
        }
        cache.sweep();
        assert_eq!(cache.len(), 1_000);
        assert!(
            cache.entries.capacity() < 4_096,
            "room for {}",
            cache.entries.capacity()
        );
        // More than a quarter of the room used: not worth a copy (shrunk to fit, 600 pods
        // would leave room for 896).
        for pod in &pods[..600] {
            cache.get(pod, node_of);
        }
        cache.sweep();
        assert_eq!(cache.len(), 600);
        assert!(
            cache.entries.capacity() > 1_000,
            "shrunk to {}",
            cache.entries.capacity()
        );
    }

    #[test]
    fn pods_without_uid_or_version_are_never_kept() {
        let mut cache = PodCache::default();
        let calls = Cell::new(0);
        let mut convert = counting(&calls);
        for _ in 0..2 {
            cache.get(&pod(None, Some("1"), "a"), &mut convert);
            cache.get(&pod(Some("u1"), None, "a"), &mut convert);
        }
        assert_eq!(calls.get(), 4);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_sweep_forgets_the_pods_the_run_did_not_read() {
        let mut cache = PodCache::default();
        cache.get(&pod(Some("u1"), Some("1"), "a"), node_of);
        cache.get(&pod(Some("u2"), Some("1"), "b"), node_of);
        cache.sweep();
        assert_eq!(cache.len(), 2, "both were read in the first run");
        cache.get(&pod(Some("u2"), Some("1"), "b"), node_of);
        cache.sweep();
        assert_eq!(cache.len(), 1, "u1 was not read in the second run");
        let calls = Cell::new(0);
        cache.get(&pod(Some("u1"), Some("1"), "a"), |p| {
            calls.set(1);
            node_of(p)
        });
        assert_eq!(calls.get(), 1, "a forgotten pod is converted again");
    }
}
