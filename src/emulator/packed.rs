//! Stored objects' JSON, compressed against a dictionary made of the kind's own objects.
//!
//! Objects of one kind repeat each other: the pods of a workload differ in their name, uid,
//! node and timestamps, and every Node or NodeClaim carries the same keys and mostly the same
//! labels. Compressed on its own a 1.3 KB pod shrinks to about half; against a dictionary of
//! a few pods of its kind, to about a tenth. At 50,000 pods and 5,000 nodes the stored JSON
//! was 130 MB of the process's heap; packed, it is a few tens.
//!
//! ```text
//! store.stamp(json) --> Packer::learn(json)  (a sample of a new shape while the samples are
//!                   |                          small: the dictionary is rebuilt from them)
//!                   --> Packer::pack(json) --> Packed::Zstd(frame, the dictionary it needs)
//!                                          \-> Packed::Plain(json)  (no dictionary, no gain)
//! read (render, value) --> Packed::bytes() --> the JSON, decompressed with the frame's dictionary
//! ```
//!
//! A dictionary never changes once made: a frame holds the decoder of the one it was compressed
//! against, so a rebuild leaves older frames readable. Compression runs under the store's write
//! lock with the store's context; reads decompress in parallel, each thread with its own context.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use zstd_safe::{CCtx, CDict, DCtx, DDict};

/// Samples of a kind's objects kept to make its dictionary: an object of a new shape is added
/// while they are under this size.
const DICTIONARY_LIMIT: usize = 32 * 1024;
/// Below this size every object is a sample, whatever its shape (so a kind whose objects carry
/// no labels, like Events, still gets a few).
const DICTIONARY_FLOOR: usize = 4 * 1024;
/// zstd's fastest level: a pod compresses in a few microseconds, and against a dictionary of its
/// kind the higher levels gain little.
const LEVEL: i32 = 1;

/// One object's JSON as stored.
pub(crate) enum Packed {
    Plain(Bytes),
    Zstd {
        frame: Box<[u8]>,
        len: u32,
        dictionary: Arc<DDict<'static>>,
    },
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain(json) => f.debug_tuple("Plain").field(&json.len()).finish(),
            Self::Zstd { frame, len, .. } => f
                .debug_struct("Zstd")
                .field("frame", &frame.len())
                .field("len", len)
                .finish_non_exhaustive(),
        }
    }
}

thread_local! {
    /// Each reading thread's decompression context (reads run in parallel under the store's
    /// read lock).
    static DECOMPRESSOR: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

impl Packed {
    /// The JSON.
    pub fn bytes(&self) -> Bytes {
        match self {
            Self::Plain(json) => json.clone(),
            Self::Zstd {
                frame,
                len,
                dictionary,
            } => Bytes::from(unpack(frame, *len as usize, dictionary)),
        }
    }

    /// The length of the JSON.
    pub fn len(&self) -> usize {
        match self {
            Self::Plain(json) => json.len(),
            Self::Zstd { len, .. } => *len as usize,
        }
    }

    /// The dictionary this object needs, as its address (shared by many objects) and size.
    pub fn dictionary(&self) -> Option<(*const (), usize)> {
        match self {
            Self::Plain(_) => None,
            Self::Zstd { dictionary, .. } => {
                Some((Arc::as_ptr(dictionary).cast::<()>(), dictionary.sizeof()))
            }
        }
    }

    /// Bytes held for this object (the frame, or the plain JSON).
    pub fn stored_len(&self) -> usize {
        match self {
            Self::Plain(json) => json.len(),
            Self::Zstd { frame, .. } => frame.len(),
        }
    }
}

/// The frame decompressed. A frame this module wrote always decompresses; were it ever not to,
/// the result is empty, which every reader treats as an unreadable object (as it did a JSON
/// serialization failure).
fn unpack(frame: &[u8], len: usize, dictionary: &DDict<'static>) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let done = DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let context = match &mut *cell {
            Some(context) => context,
            empty => empty.insert(DCtx::try_create()?),
        };
        context
            .decompress_using_ddict(&mut out, frame, dictionary)
            .ok()
    });
    if done != Some(len) {
        out.clear();
    }
    out
}

/// A kind's dictionary and the samples it is made from.
#[derive(Default)]
pub(crate) struct Packer {
    samples: Vec<u8>,
    dictionary: Option<Dictionary>,
    context: Option<CCtx<'static>>,
    /// Where a frame is written before it is copied out at its size.
    frame: Vec<u8>,
}

struct Dictionary {
    encoder: CDict<'static>,
    decoder: Arc<DDict<'static>>,
}

impl Packer {
    /// Adds `json` to the samples when it is of a shape not seen yet (`new_shape`) or the
    /// samples are few, and there is room; the dictionary is then rebuilt.
    pub fn learn(&mut self, json: &[u8], new_shape: bool) {
        let room = self.samples.len() + json.len() <= DICTIONARY_LIMIT;
        if !room || !(new_shape || self.samples.len() < DICTIONARY_FLOOR) {
            return;
        }
        self.samples.extend_from_slice(json);
        // A dictionary that cannot be made (zstd out of memory) leaves the previous one.
        if let (Some(encoder), Some(decoder)) = (
            CDict::try_create(&self.samples, LEVEL),
            DDict::try_create(&self.samples),
        ) {
            self.dictionary = Some(Dictionary {
                encoder,
                decoder: Arc::new(decoder),
            });
        }
    }

    /// `json` compressed against the current dictionary, or as it is when there is none yet or
    /// compressing does not make it smaller.
    pub fn pack(&mut self, json: &Bytes) -> Packed {
        let (Some(dictionary), Ok(len)) = (&self.dictionary, u32::try_from(json.len())) else {
            return Packed::Plain(json.clone());
        };
        let context = match &mut self.context {
            Some(context) => context,
            empty => match CCtx::try_create() {
                Some(context) => empty.insert(context),
                None => return Packed::Plain(json.clone()),
            },
        };
        let frame = &mut self.frame;
        frame.clear();
        frame.reserve(zstd_safe::compress_bound(json.len()));
        match context.compress_using_cdict(frame, json, &dictionary.encoder) {
            Ok(written) if written < json.len() => Packed::Zstd {
                frame: Box::from(frame.as_slice()),
                len,
                dictionary: Arc::clone(&dictionary.decoder),
            },
            _ => Packed::Plain(json.clone()),
        }
    }

    /// Bytes held by the samples and the current dictionary's encoder (its decoder counts with
    /// the objects that hold it).
    pub fn held_bytes(&self) -> usize {
        self.samples.capacity()
            + self.frame.capacity()
            + self.dictionary.as_ref().map_or(0, |d| d.encoder.sizeof())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str) -> Bytes {
        Bytes::from(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                             "uid": format!("uid-of-{name}")},
                "spec": {"nodeName": node, "containers": [{
                    "name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]},
                "status": {"phase": "Running"}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn without_a_dictionary_the_json_is_kept_as_it_is() {
        let mut packer = Packer::default();
        let json = pod("web-0", "node-a");
        let stored = packer.pack(&json);
        assert!(matches!(stored, Packed::Plain(_)));
        assert_eq!(stored.bytes(), json);
    }

    #[test]
    fn objects_like_the_samples_pack_small_and_read_back_whole() {
        let mut packer = Packer::default();
        packer.learn(&pod("web-0", "node-a"), true);
        let json = pod("web-1", "node-b");
        let stored = packer.pack(&json);
        assert!(matches!(stored, Packed::Zstd { .. }), "{stored:?}");
        assert!(
            stored.stored_len() * 4 < json.len(),
            "{} of {}",
            stored.stored_len(),
            json.len()
        );
        assert_eq!(stored.bytes(), json);
    }

    #[test]
    fn a_rebuilt_dictionary_leaves_older_frames_readable() {
        let mut packer = Packer::default();
        packer.learn(&pod("web-0", "node-a"), true);
        let first = pod("web-1", "node-b");
        let old = packer.pack(&first);
        packer.learn(b"{\"kind\":\"Other\",\"spec\":{\"replicas\":3}}", true);
        let second = pod("web-2", "node-c");
        let new = packer.pack(&second);
        assert_eq!(old.bytes(), first);
        assert_eq!(new.bytes(), second);
    }

    #[test]
    fn samples_stop_at_the_limit_and_known_shapes_only_fill_the_floor() {
        let mut packer = Packer::default();
        let json = pod("web-0", "node-a");
        for _ in 0..100 {
            packer.learn(&json, false);
        }
        assert!(packer.samples.len() >= DICTIONARY_FLOOR);
        assert!(packer.samples.len() < DICTIONARY_FLOOR + json.len());
        for _ in 0..100 {
            packer.learn(&json, true);
        }
        assert!(packer.samples.len() <= DICTIONARY_LIMIT);
        assert!(packer.samples.len() + json.len() > DICTIONARY_LIMIT);
    }
}
