//! A small seeded pseudo-random generator, so that a simulation run repeats exactly.
//!
//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
//! OOPSLA 2014): one 64-bit word of state, a Weyl increment and a 64-bit finaliser. It is
//! not for cryptography; it is fast, passes BigCrush, and gives the same sequence on every
//! platform, which is all a simulation needs.

/// A seeded SplitMix64 generator.
///
/// The same seed always gives the same sequence:
///
/// ```
/// use blkmq_sim::SimRng;
///
/// let mut a = SimRng::new(42);
/// let mut b = SimRng::new(42);
/// let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
/// assert_eq!(first, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
/// assert_ne!(SimRng::new(43).next_u64(), first[0]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimRng {
    state: u64,
}

/// The golden-ratio Weyl increment of SplitMix64.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SimRng {
    /// A generator seeded with `seed`.
    ///
    /// ```
    /// use blkmq_sim::SimRng;
    /// // The reference SplitMix64 output for seed 0.
    /// assert_eq!(SimRng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    /// ```
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    ///
    /// ```
    /// use blkmq_sim::SimRng;
    /// let mut rng = SimRng::new(7);
    /// assert_ne!(rng.next_u64(), rng.next_u64());
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `0..n` (0 when `n` is 0), without modulo bias (Lemire's
    /// multiply-and-reject).
    ///
    /// ```
    /// use blkmq_sim::SimRng;
    /// let mut rng = SimRng::new(1);
    /// assert!((0..1000).all(|_| rng.below(6) < 6));
    /// assert_eq!(rng.below(0), 0);
    /// assert_eq!(rng.below(1), 0);
    /// ```
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(n);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// `true` with probability `numerator / denominator` (never when the denominator is 0).
    ///
    /// ```
    /// use blkmq_sim::SimRng;
    /// let mut rng = SimRng::new(3);
    /// assert!((0..100).all(|_| rng.chance(1, 1)));
    /// assert!((0..100).all(|_| !rng.chance(0, 1)));
    /// let hits = (0..10_000).filter(|_| rng.chance(1, 4)).count();
    /// assert!((2_200..2_800).contains(&hits));
    /// ```
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        denominator != 0 && self.below(denominator) < numerator
    }

    /// Shuffles `items` in place (Fisher-Yates).
    ///
    /// ```
    /// use blkmq_sim::SimRng;
    /// let mut order: Vec<u32> = (0..10).collect();
    /// SimRng::new(9).shuffle(&mut order);
    /// let mut sorted = order.clone();
    /// sorted.sort();
    /// assert_eq!(sorted, (0..10).collect::<Vec<_>>()); // a permutation
    /// assert_ne!(order, sorted);
    /// ```
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
