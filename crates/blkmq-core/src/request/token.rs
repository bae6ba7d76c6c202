//! The token of an allocated request.

use core::num::NonZeroU64;

/// The token of an allocated request: whoever holds it owns the request's I/O side.
///
/// Returned by allocation, consumed by freeing; it cannot be cloned, so a request is never
/// freed twice through it. It is two words and holds no reference, so it moves freely through
/// lists and across threads, and in registers from call to call. Dropping one without freeing it leaks its tag, which is why it
/// is `#[must_use]`.
///
/// # Invariants
/// * Exactly one `Rq` exists per allocated request: allocation makes it, freeing consumes
///   it, and it can neither be cloned nor made outside this crate.
/// * It names the request by its tags' identity (`pool`), map and tag, and records the
///   allocation count the request had when allocated. Identities are never reused and every
///   look-up compares both, so a token outliving its request (or its queue) names nothing.
/// * `packed` is never zero (identities start at 1), so an `Option<Rq>` is two words.
///
/// ```
/// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
/// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
/// let rq = std::thread::spawn(move || rq).join().unwrap(); // tokens move freely
/// assert_eq!(b.request(&rq).unwrap_err(), TagError::ForeignRequest); // not b's
/// a.free(rq).unwrap();
/// ```
#[must_use = "dropping an Rq leaks its tag; free it"]
#[derive(Debug, PartialEq, Eq)]
pub struct Rq {
    /// `pool << 32 | map << 16 | tag`, in one word. Pool identities are never reused, so
    /// this names one request of one live pool, or none. Pool identities start at 1, so
    /// the word is never zero: an `Option<Rq>` is two words too, and comes back from a
    /// function (an elevator's dispatch) in registers.
    packed: NonZeroU64,
    /// The request's allocation count when it was allocated: a token kept past its
    /// request's life (say, of a dropped queue) never matches the request's next allocation.
    generation: u64,
}

impl Rq {
    #[inline(always)]
    pub(crate) fn new(pool: u32, map: usize, tag: usize, generation: u64) -> Self {
        let packed =
            (u64::from(pool) << 32) | ((map as u64 & 0xffff) << 16) | (tag as u64 & 0xffff);
        debug_assert_ne!(pool, 0, "pool identities start at 1");
        Self {
            // Pool 0 is never handed out; should one come, the token names pool `u32::MAX`,
            // which is never handed out either: no request at all.
            packed: NonZeroU64::new(packed).unwrap_or(NonZeroU64::MAX),
            generation,
        }
    }

    /// The generation the request was allocated at.
    #[inline(always)]
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The identity of the tags that own the request.
    #[inline(always)]
    pub(crate) fn pool(&self) -> u32 {
        (self.packed.get() >> 32) as u32
    }

    /// The tag map within them.
    #[inline(always)]
    pub(crate) fn map(&self) -> usize {
        ((self.packed.get() >> 16) & 0xffff) as usize
    }

    /// The tag as an index.
    #[inline(always)]
    pub(crate) fn index(&self) -> usize {
        (self.packed.get() & 0xffff) as usize
    }

    /// The request's tag in the tags that own it (see [`Request::tag`](super::Request::tag)).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(rq.tag(), queue.request(&rq).unwrap().tag());
    /// queue.free(rq).unwrap();
    /// ```
    pub fn tag(&self) -> u32 {
        (self.packed.get() & 0xffff) as u32
    }
}
