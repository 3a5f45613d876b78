//! A growable bit set over small integer ids (instance types of a pool, slots, topology
//! domains). Word-at-a-time operations let the scheduler skip 64 ineligible nodes per step.

/// Bits per word.
const WORD: usize = 64;

/// A set of `usize` ids. Equality and hashing ignore trailing empty words, so equal sets are
/// equal however they were built.
#[derive(Debug, Clone, Default)]
pub struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    fn significant(&self) -> &[u64] {
        let len = self
            .words
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1);
        &self.words[..len]
    }
}

impl PartialEq for BitSet {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for BitSet {}

impl std::hash::Hash for BitSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl BitSet {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `{0, .., len - 1}`.
    #[must_use]
    pub fn full(len: usize) -> Self {
        let mut words = vec![u64::MAX; len.div_ceil(WORD)];
        if let Some(last) = words.last_mut()
            && !len.is_multiple_of(WORD)
        {
            *last = (1u64 << (len % WORD)) - 1;
        }
        Self { words }
    }

    /// Adds an id.
    pub fn insert(&mut self, id: usize) {
        let word = id / WORD;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (id % WORD);
    }

    /// Removes an id.
    pub fn remove(&mut self, id: usize) {
        if let Some(word) = self.words.get_mut(id / WORD) {
            *word &= !(1 << (id % WORD));
        }
    }

    /// Whether the id is in the set.
    #[must_use]
    #[inline]
    pub fn contains(&self, id: usize) -> bool {
        self.words
            .get(id / WORD)
            .is_some_and(|w| w & (1 << (id % WORD)) != 0)
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// How many ids are in the set.
    #[must_use]
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The word holding ids `64 * index ..`; zero past the end.
    #[must_use]
    #[inline]
    pub fn word(&self, index: usize) -> u64 {
        self.words.get(index).copied().unwrap_or(0)
    }

    /// How many words the set spans.
    #[must_use]
    pub fn word_len(&self) -> usize {
        self.words.len()
    }

    /// Keeps only ids also in `other`.
    pub fn intersect_with(&mut self, other: &Self) {
        for (i, word) in self.words.iter_mut().enumerate() {
            *word &= other.word(i);
        }
    }

    /// The intersection as a new set.
    #[must_use]
    pub fn and(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.intersect_with(other);
        out
    }

    /// Whether the two sets share an id.
    #[must_use]
    #[cfg(test)]
    pub fn intersects(&self, other: &Self) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// The smallest id in the set.
    #[must_use]
    pub fn first(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * WORD + w.trailing_zeros() as usize)
    }

    /// The ids in increasing order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let base = i * WORD;
            BitsOf(word).map(move |bit| base + bit)
        })
    }
}

impl FromIterator<usize> for BitSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut set = Self::new();
        for id in iter {
            set.insert(id);
        }
        set
    }
}

/// The set bits of one word, lowest first.
#[derive(Debug, Clone)]
pub struct BitsOf(pub u64);

impl Iterator for BitsOf {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

impl DoubleEndedIterator for BitsOf {
    #[inline]
    fn next_back(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let bit = 63 - self.0.leading_zeros() as usize;
        self.0 &= !(1u64 << bit);
        Some(bit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_insert_remove_and_iterate_in_order() {
        let mut set: BitSet = [3, 70, 1, 200].into_iter().collect();
        assert!(set.contains(70) && !set.contains(71));
        set.remove(70);
        assert_eq!(set.iter().collect::<Vec<_>>(), [1, 3, 200]);
        assert_eq!(set.iter().rev().collect::<Vec<_>>(), [200, 3, 1]);
        assert_eq!(set.len(), 3);
        assert_eq!(set.first(), Some(1));
    }

    #[test]
    fn full_sets_stop_at_their_length() {
        let set = BitSet::full(65);
        assert_eq!(set.len(), 65);
        assert!(set.contains(64) && !set.contains(65));
        let other: BitSet = [64, 100].into_iter().collect();
        assert_eq!(set.and(&other).iter().collect::<Vec<_>>(), [64]);
        assert!(set.intersects(&other));
    }
}
