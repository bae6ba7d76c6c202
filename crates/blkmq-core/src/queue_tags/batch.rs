//! Tags given back in batches: a batched completion's, and a plug's unused cache.

use core::ptr;

use blkmq_sbitmap::{BitBatch, SbitmapError};

use crate::bio::Bio;
use crate::platform::Platform;
use crate::request::{Request, Rq};
use crate::segment::SegSpan;
use crate::tags::TagMap;
use crate::tagset::TagSetFlags;

use super::{Alloc, QueueTags};

/// Normal driver tags of one bitmap word of one map, released and not yet put back:
/// gathered over consecutive requests and put with one atomic operation (Linux's
/// `blk_mq_flush_tag_batch`), when a tag of another word or map comes, or on
/// [`flush`](Self::flush) or drop.
///
/// # Invariants
/// `mask` is empty unless `map` is set; its bits are bits of the word starting at bit
/// `offset` of `map`'s normal bitmap, each held and its request released (`Free`).
pub(crate) struct FreeBatch<'a, T, P: Platform> {
    map: Option<&'a TagMap<T, P::RawMutex>>,
    offset: usize,
    mask: usize,
    /// The CPU whose hint the put points at the batch.
    cpu: usize,
}

impl<'a, T, P: Platform> FreeBatch<'a, T, P> {
    /// An empty batch.
    pub(crate) const fn new() -> Self {
        Self {
            map: None,
            offset: 0,
            mask: 0,
            cpu: 0,
        }
    }

    /// Adds normal bit `bit` of `map` (its tag less the reserved ones), whose request the
    /// caller released; `cpu` is the request's allocating CPU.
    #[inline(always)]
    pub(crate) fn add(&mut self, map: &'a TagMap<T, P::RawMutex>, bit: usize, cpu: usize) {
        let offset = bit & !(map.normal.bits_per_word() - 1);
        let same = self
            .map
            .is_some_and(|m| ptr::eq(m, map) && self.offset == offset);
        if !same {
            self.flush();
            self.map = Some(map);
            self.offset = offset;
        }
        self.mask |= 1 << (bit - offset);
        self.cpu = cpu;
    }

    /// Puts back what the batch holds, in one atomic operation, and counts it towards the
    /// bitmap's wake-ups as that many single puts.
    #[inline]
    pub(crate) fn flush(&mut self) {
        let Some(map) = self.map.take() else {
            return;
        };
        let batch = BitBatch::new(self.offset, core::mem::take(&mut self.mask));
        match map.normal.put_batch(batch, map.hint(self.cpu)) {
            Ok(()) => {}
            // A bit of the batch was free already (a broken invariant, as a single put that
            // finds its tag free): the batch was refused whole, so the others go one by one.
            Err(SbitmapError::NotAllocated { .. }) => Self::put_each(map, batch, self.cpu),
            Err(_) => debug_assert!(false, "a batch of one word of the map"),
        }
    }

    #[cold]
    fn put_each(map: &TagMap<T, P::RawMutex>, batch: BitBatch, cpu: usize) {
        for bit in batch.iter() {
            let _ = map.normal.put(bit, map.hint(cpu));
        }
    }
}

impl<T, P: Platform> Drop for FreeBatch<'_, T, P> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl<T, P: Platform> QueueTags<T, P> {
    /// Whether [`alloc_batch`](Self::alloc_batch) takes its requests from one bitmap word
    /// with one atomic operation (no scheduler tags, no fair sharing, no strict
    /// round-robin order): then a plug may cache requests taken ahead.
    #[inline]
    pub(crate) fn batch_allocates(&self) -> bool {
        self.sched.is_none()
            && !self.set.is_shared()
            && !self.set.flags().contains(TagSetFlags::ROUND_ROBIN)
    }

    /// Allocates up to `slots.len()` requests for `alloc` (a plain one: see
    /// [`batch_allocates`](Self::batch_allocates)) from one bitmap word with one atomic
    /// operation, into `slots` from the first; returns how many. The plug's cache fill:
    /// [`alloc_batch`](Self::alloc_batch) in one pass, into fixed room.
    #[inline]
    pub(crate) fn alloc_cached(&self, alloc: &Alloc, slots: &mut [Option<Rq>]) -> usize {
        if alloc.hctx >= self.nr_hw_queues || alloc.reserved || alloc.shallow_depth.is_some() {
            return 0;
        }
        let maps = self.maps();
        let m = if maps.len() == 1 { 0 } else { alloc.hctx };
        let map = &maps[m];
        let Some(batch) = map.get_batch(alloc.cpu, slots.len()) else {
            return 0;
        };
        let mut got = 0;
        for (bit, slot) in batch.iter().zip(slots.iter_mut()) {
            let tag = bit + map.nr_reserved;
            let request = &map.requests[tag];
            // SAFETY: the batch gave us this tag alone, so nobody else reaches `io`.
            unsafe { request.io_mut() }.reset(alloc.cpu as u32, false);
            let generation = request.claim(alloc.hctx as u32, self.id);
            *slot = Some(Rq::new(self.set_id, m, tag, generation));
            got += 1;
        }
        got
    }

    /// Puts `bio` (with its data segments `segments`) on `rq`, a request of a plug's cache
    /// (nothing on it); the request it names, or `None` when the token is not ours (the
    /// queue's tags were replaced since the cache was filled), and then nothing changed.
    #[inline(always)]
    pub(crate) fn set_cached_bio(
        &self,
        rq: &mut Rq,
        bio: Bio,
        segments: SegSpan,
    ) -> Option<&Request<T>> {
        if rq.pool() != self.set_id {
            return None;
        }
        let request = self
            .maps()
            .get(rq.map())
            .and_then(|map| map.requests.get(rq.index()))?;
        if !request.is_owned_by(self.id, rq.generation()) {
            return None;
        }
        // SAFETY: the token is live and ours (just checked), and the caller owns it: nobody
        // else reaches `io`.
        let io = unsafe { request.io_mut() };
        debug_assert_eq!(io.nr_bios(), 0, "a cached request carries nothing");
        io.set_bio(bio);
        io.set_span(segments);
        Some(request)
    }

    /// Frees a request with nothing on it (a plug's unused cached request): our own normal
    /// driver request, not counted, goes into `batch`; any other is freed at once. A token
    /// not ours is left alone.
    #[inline]
    pub(crate) fn free_into<'a>(&'a self, rq: Rq, batch: &mut FreeBatch<'a, T, P>) {
        if let Some((map, tag, cpu)) = self.release_plain(&rq) {
            batch.add(map, tag - map.nr_reserved, cpu);
            return;
        }
        let _ = self.free(rq);
    }
}
