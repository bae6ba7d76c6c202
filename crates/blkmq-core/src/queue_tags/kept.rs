//! A driver tag kept across a batch: the tag of a request just ended, its request freed but
//! the tag still set in the bitmap, handed to the next request made on the same hardware
//! queue by the same context ([`RequestQueue::run_batch`](crate::RequestQueue::run_batch)).
//! A completion that submits the next I/O then neither puts a tag back nor takes one: two
//! locked operations on the bitmap fewer, and the next request is the line just used.

use crate::bio::Bio;
use crate::platform::Platform;
use crate::request::{Request, Rq};
use crate::segment::SegSpan;
use crate::sync::{AtomicU64, Ordering};

use super::{Alloc, QueueTags};

/// A kept tag: its map, the tag, and the CPU whose hint it goes back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    map: u16,
    tag: u16,
    cpu: u32,
}

/// In a [`KeptSlot`]: nothing kept. No kept tag packs to it: a tag is below the deepest tag
/// set's depth, far below `u16::MAX`.
const EMPTY: u64 = u64::MAX;

impl Kept {
    /// The normal driver tag `tag` of map `map`, allocated from `cpu`.
    #[inline(always)]
    pub(crate) fn new(map: usize, tag: usize, cpu: usize) -> Self {
        // Maps and tags fit 16 bits (see `Rq`); a CPU index fits 32.
        debug_assert!(map <= usize::from(u16::MAX) && tag < usize::from(u16::MAX));
        Self {
            map: map as u16,
            tag: tag as u16,
            cpu: cpu as u32,
        }
    }

    fn pack(self) -> u64 {
        (u64::from(self.map) << 48) | (u64::from(self.tag) << 32) | u64::from(self.cpu)
    }

    fn unpack(word: u64) -> Option<Self> {
        (word != EMPTY).then_some(Self {
            map: (word >> 48) as u16,
            tag: (word >> 32) as u16,
            cpu: word as u32,
        })
    }
}

/// Room for one kept tag, written and read by one context at a time (a hardware queue's
/// batch runner): an atomic only so that sharing it needs no `unsafe`, its loads and
/// stores relaxed.
pub(crate) struct KeptSlot(AtomicU64);

impl KeptSlot {
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(EMPTY))
    }

    /// Keeps `kept` if nothing is kept yet; whether it did.
    #[inline(always)]
    pub(crate) fn keep(&self, kept: Kept) -> bool {
        if self.0.load(Ordering::Relaxed) != EMPTY {
            return false;
        }
        self.0.store(kept.pack(), Ordering::Relaxed);
        true
    }

    /// The kept tag, if any, taken out.
    #[inline(always)]
    pub(crate) fn take(&self) -> Option<Kept> {
        let kept = Kept::unpack(self.0.load(Ordering::Relaxed))?;
        self.0.store(EMPTY, Ordering::Relaxed);
        Some(kept)
    }
}

impl<T, P: Platform> QueueTags<T, P> {
    /// A request made on `kept`'s tag for `alloc` and carrying `bio` (with its data
    /// segments `segments`), and the request it names; the tag back when it cannot serve
    /// `alloc` (not the common case of an allocation, or another map's tag).
    #[inline(always)]
    pub(crate) fn alloc_kept(
        &self,
        kept: Kept,
        alloc: &Alloc,
        bio: Bio,
        segments: SegSpan,
    ) -> Result<(Rq, &Request<T>), Kept> {
        let maps = self.maps();
        let m = if maps.len() == 1 { 0 } else { alloc.hctx };
        if !self.is_plain(alloc) || usize::from(kept.map) != m {
            return Err(kept);
        }
        let tag = usize::from(kept.tag);
        let request = &maps[m].requests[tag];
        // SAFETY: the tag is still set in the bitmap and kept for us alone since its last
        // request ended and was freed: nobody else reaches `io`.
        let io = unsafe { request.io_mut() };
        io.reset(alloc.cpu as u32, false);
        io.set_bio(bio);
        io.set_span(segments);
        let generation = request.claim(alloc.hctx as u32, self.id);
        Ok((Rq::new(self.set_id, m, tag, generation), request))
    }

    /// Puts a kept tag back in its bitmap.
    pub(crate) fn put_kept(&self, kept: Kept) {
        if let Some(map) = self.maps().get(usize::from(kept.map)) {
            // A kept tag is set in its bitmap: the put cannot fail.
            let _ = map.put_normal(usize::from(kept.tag), kept.cpu as usize);
        }
    }
}
