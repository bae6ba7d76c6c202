//! The caller-owned allocation hint.

use crate::sync::{AtomicU32, Ordering};

/// Where the next allocation from a [`Sbitmap`](crate::Sbitmap) starts looking.
///
/// The hint belongs to the caller, typically one per CPU (blkmq-core keeps a cache-padded
/// slot per CPU), so that CPUs start on different words and stay on them: a get leaves the
/// hint on the word it allocated from, and a put writes the freed bit back so the next get on
/// that CPU reuses a cache-hot word.
///
/// Loads and stores are relaxed: a hint is only a starting point, and every bitmap operation
/// is correct whatever value it holds. Sharing one hint between threads is therefore safe,
/// merely less local.
///
/// ```
/// use blkmq_sbitmap::{AllocHint, Sbitmap};
///
/// let map = Sbitmap::new(128).unwrap();
/// // One hint per CPU, seeded differently so CPUs spread over the words.
/// let hints: Vec<AllocHint> = (0..4).map(AllocHint::new).collect();
/// let bit = map.get(&hints[2]).unwrap();
/// map.put(bit, &hints[2]).unwrap();
/// ```
#[derive(Debug)]
pub struct AllocHint {
    next: AtomicU32,
}

impl AllocHint {
    /// A hint whose starting point is a well-mixed function of `seed` (a CPU number, say), so
    /// that hints created from consecutive seeds start on unrelated words.
    ///
    /// A value beyond the bitmap's depth is read as a fraction of the map (`value / 2^32`) on
    /// first use, so one hint suits a bitmap of any depth.
    pub fn new(seed: u64) -> Self {
        Self::at(mix(seed) as u32)
    }

    /// The hint of CPU `index` out of `count`, spreading the CPUs evenly over the map: CPU
    /// `i` starts `i / count` of the way into it, whatever its depth. Unlike hashed seeds,
    /// no two CPUs share a starting word while there are at least as many words as CPUs.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(256).unwrap(); // four words of 64 bits
    /// let starts: Vec<usize> =
    ///     (0..4).map(|cpu| map.get(&AllocHint::spread(cpu, 4)).unwrap()).collect();
    /// assert_eq!(starts, vec![0, 64, 128, 192]);
    /// ```
    pub fn spread(index: usize, count: usize) -> Self {
        let count = count.max(1) as u64;
        let index = (index as u64) % count;
        // A fraction of 2^32; `Sbitmap` maps it onto `0..depth` (see `reduce`).
        Self::at(((index << 32) / count) as u32)
    }

    /// A hint that starts exactly at `bit`.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::builder(64).round_robin(true).build().unwrap();
    /// assert_eq!(map.get(&AllocHint::at(5)), Some(5));
    /// ```
    pub fn at(bit: u32) -> Self {
        Self {
            next: AtomicU32::new(bit),
        }
    }

    /// The bit the next allocation will start from; a value beyond the depth stands for a
    /// fraction of the map, `value / 2^32`.
    ///
    /// ```
    /// use blkmq_sbitmap::AllocHint;
    /// assert_eq!(AllocHint::at(7).value(), 7);
    /// ```
    #[inline]
    pub fn value(&self) -> u32 {
        self.next.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set(&self, bit: usize) {
        self.next.store(bit as u32, Ordering::Relaxed);
    }
}

/// SplitMix64's finaliser: a cheap, well-distributed mix of a seed.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
