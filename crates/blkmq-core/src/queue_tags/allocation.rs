//! Allocation: without waiting, asynchronously, blocking, and in batches.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use blkmq_sbitmap::{SbitmapQueue, Waiter};

use crate::bio::Bio;
use crate::error::TagError;
use crate::platform::Platform;
use crate::request::{Request, Rq};
use crate::segment::SegSpan;
use crate::sync::Ordering;
use crate::tagset::TagSetFlags;

use super::{Alloc, QueueTags};

impl<T, P: Platform> QueueTags<T, P> {
    /// Allocates a request without waiting (NOWAIT).
    ///
    /// # Errors
    /// [`TagError::WouldBlock`] when no tag is free or this queue's fair share is used up;
    /// [`TagError::NoSuchHwQueue`], [`TagError::NoReservedTags`], or a bitmap error for a
    /// shallow limit below the declared minimum.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(0, 1)).unwrap();
    /// assert_ne!(a.tag(), b.tag());
    /// assert_eq!(queue.alloc(&Alloc::new(0, 0)).unwrap_err(), TagError::WouldBlock);
    /// let bad = queue.alloc(&Alloc::new(1, 0)).unwrap_err();
    /// assert_eq!(bad, TagError::NoSuchHwQueue { hctx: 1, nr_hw_queues: 1 });
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// ```
    #[inline(always)]
    pub fn alloc(&self, alloc: &Alloc) -> Result<Rq, TagError> {
        if !self.is_plain(alloc) {
            return self.alloc_general(alloc);
        }
        self.alloc_plain(alloc).map(|(rq, _)| rq)
    }

    /// Allocates a request that carries `bio` (with its data segments `segments`) from the
    /// start: in the common case the bio goes in through the allocation's own reach into
    /// the request, with no second look-up of the token. The bio comes back with the error.
    ///
    /// With `start`, the request's accounting start stamp is set to it on the way
    /// ([`stamp_start`](crate::stats::stamp_start)).
    #[inline(always)]
    pub(crate) fn alloc_with_bio(
        &self,
        alloc: &Alloc,
        bio: Bio,
        segments: SegSpan,
        start: Option<u64>,
    ) -> Result<Rq, (TagError, Bio)> {
        if self.is_plain(alloc) {
            let (rq, request) = self.alloc_plain(alloc).map_err(|e| (e, bio))?;
            // SAFETY: `rq`, made just now, is the request's only token and is ours here:
            // nobody else reaches `io`.
            let io = unsafe { request.io_mut() };
            io.set_bio(bio);
            io.set_span(segments);
            if let Some(now) = start {
                crate::stats::stamp_start(io, now);
            }
            return Ok(rq);
        }
        if let Some(sched) = self.sched.as_ref().filter(|_| self.is_plain_sched(alloc)) {
            // An elevator's normal allocation (the common case with one): a scheduler
            // tag, the bio set through the allocation's own reach into the request.
            let m = self.set.map_index(alloc.hctx);
            let map = &sched.maps[m];
            let tag = match map.get_normal(alloc.cpu, alloc.shallow_depth) {
                Ok(Some(tag)) => tag,
                Ok(None) => return Err((TagError::WouldBlock, bio)),
                Err(e) => return Err((e, bio)),
            };
            let request = &map.requests[tag];
            // SAFETY: we hold the tag just allocated, so nobody else reaches `io`.
            let io = unsafe { request.io_mut() };
            io.reset(alloc.cpu as u32, false);
            io.sched_data = [0; 2];
            io.set_bio(bio);
            io.set_span(segments);
            if let Some(now) = start {
                crate::stats::stamp_start(io, now);
            }
            let generation = request.claim(alloc.hctx as u32, self.id);
            return Ok(Rq::new(sched.id, m, tag, generation));
        }
        let mut rq = self.alloc_general(alloc).map_err(|e| (e, bio))?;
        match self.set_bio_segments(&mut rq, bio, segments) {
            Ok(()) => {
                if let (Some(now), Ok(io)) = (start, self.io_mut(&mut rq)) {
                    crate::stats::stamp_start(io, now);
                }
                Ok(rq)
            }
            // Our own fresh request: cannot happen. Should it, nothing is lost.
            Err(e) => {
                let _ = self.free(rq);
                Err((e, bio))
            }
        }
    }

    /// Whether `alloc` is the common case, done inline by
    /// [`alloc_plain`](Self::alloc_plain): a normal driver tag with no sharing, no limit,
    /// no scheduler.
    #[inline(always)]
    pub(super) fn is_plain(&self, alloc: &Alloc) -> bool {
        !alloc.reserved
            && alloc.shallow_depth.is_none()
            && self.sched.is_none()
            && alloc.hctx < self.nr_hw_queues
            && !self.set.is_shared()
    }

    /// Whether `alloc` is an elevator's common case, done inline by
    /// [`alloc_with_bio`](Self::alloc_with_bio): a normal scheduler tag (its shallow limit,
    /// if any, applies) for a hardware queue that exists.
    #[inline(always)]
    fn is_plain_sched(&self, alloc: &Alloc) -> bool {
        !alloc.reserved && alloc.hctx < self.nr_hw_queues
    }

    /// The common case of an allocation (see [`is_plain`](Self::is_plain)), inline: the
    /// token and the request it names.
    #[inline(always)]
    fn alloc_plain(&self, alloc: &Alloc) -> Result<(Rq, &Request<T>), TagError> {
        let maps = self.maps();
        let m = if maps.len() == 1 { 0 } else { alloc.hctx };
        let map = &maps[m];
        let Some(bit) = map.normal.get(map.hint(alloc.cpu)) else {
            return Err(TagError::WouldBlock);
        };
        let tag = bit + map.nr_reserved;
        let request = &map.requests[tag];
        // SAFETY: we hold the tag just allocated, so nobody else reaches `io`.
        unsafe { request.io_mut() }.reset(alloc.cpu as u32, false);
        let generation = request.claim(alloc.hctx as u32, self.id);
        Ok((Rq::new(self.set_id, m, tag, generation), request))
    }

    #[inline(never)]
    fn alloc_general(&self, alloc: &Alloc) -> Result<Rq, TagError> {
        self.try_alloc(alloc)?.ok_or(TagError::WouldBlock)
    }

    /// One allocation attempt: `Ok(None)` when it would have to wait.
    #[inline(always)]
    fn try_alloc(&self, alloc: &Alloc) -> Result<Option<Rq>, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        let cpu = alloc.cpu;
        match &self.sched {
            None => {
                // Shallow limits are an elevator's, on scheduler tags.
                if alloc.shallow_depth.is_some() {
                    return Err(TagError::NoScheduler);
                }
                let Some((tag, counted)) = self.get_driver_tag_raw(m, cpu, alloc.reserved, None)?
                else {
                    return Ok(None);
                };
                let request = &self.set.maps[m].requests[tag];
                // SAFETY: we hold the tag just allocated, so nobody else reaches `io`.
                let io = unsafe { request.io_mut() };
                io.reset(cpu as u32, counted);
                let generation = request.claim(alloc.hctx as u32, self.id);
                Ok(Some(Rq::new(self.set.id, m, tag, generation)))
            }
            Some(sched) => {
                let map = &sched.maps[m];
                let tag = if alloc.reserved {
                    map.get_reserved()?
                } else {
                    map.get_normal(cpu, alloc.shallow_depth)?
                };
                let Some(tag) = tag else {
                    return Ok(None);
                };
                let request = &map.requests[tag];
                // SAFETY: we hold the tag just allocated.
                let io = unsafe { request.io_mut() };
                io.reset(cpu as u32, false);
                io.sched_data = [0; 2];
                let generation = request.claim(alloc.hctx as u32, self.id);
                Ok(Some(Rq::new(sched.id, m, tag, generation)))
            }
        }
    }

    /// The bitmap an allocation like `alloc` waits on.
    fn wait_queue(&self, alloc: &Alloc) -> Result<&SbitmapQueue<P::RawMutex>, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        let map = match &self.sched {
            None => &self.set.maps[m],
            Some(sched) => &sched.maps[m],
        };
        if alloc.reserved {
            map.reserved.as_ref().ok_or(TagError::NoReservedTags)
        } else {
            Ok(&map.normal)
        }
    }

    /// Allocates a request, waiting (asynchronously, on any executor) while no tag is free
    /// or this queue is over its fair share.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let set = TagSet::builder(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let held = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut waiting = pin!(queue.alloc_async(Alloc::new(0, 0)));
    /// assert!(waiting.as_mut().poll(&mut cx).is_pending());
    /// queue.free(held).unwrap();
    /// let Poll::Ready(Ok(rq)) = waiting.as_mut().poll(&mut cx) else { panic!() };
    /// queue.free(rq).unwrap();
    /// ```
    pub fn alloc_async(&self, alloc: Alloc) -> AllocFuture<'_, T, P> {
        AllocFuture {
            queue: self,
            alloc,
            waiter: None,
            share_map: None,
        }
    }

    /// Allocates a request, parking the thread while it has to wait (`std`).
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc), except that it waits instead of
    /// [`TagError::WouldBlock`].
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let held = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| queue.alloc_blocking(Alloc::new(0, 0)).unwrap());
    ///     queue.free(held).unwrap(); // wakes the waiter, whether it waits yet or not
    ///     let rq = waiter.join().unwrap();
    ///     queue.free(rq).unwrap();
    /// });
    /// assert_eq!(set.busy(), 0);
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn alloc_blocking(&self, alloc: Alloc) -> Result<Rq, TagError> {
        if let Some(rq) = self.try_alloc(&alloc)? {
            return Ok(rq);
        }
        blkmq_sbitmap::block_on(self.alloc_async(alloc))
    }

    /// Allocates up to `nr` requests at once, pushing them into `out` (a plug's request
    /// cache); returns how many. Without a shallow limit, a reserved request or fair sharing
    /// in force, the tags come from one bitmap word with one atomic operation.
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc), except that running short returns fewer, not an error.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::with_cpus(1), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut cache = Vec::new();
    /// let got = queue.alloc_batch(&Alloc::new(0, 0), 8, &mut cache).unwrap();
    /// assert!(got >= 1 && got == cache.len());
    /// for rq in cache { queue.free(rq).unwrap(); }
    /// ```
    pub fn alloc_batch(
        &self,
        alloc: &Alloc,
        nr: usize,
        out: &mut impl Extend<Rq>,
    ) -> Result<usize, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        // One at a time where a batch cannot honour the rules: reserved tags, a shallow
        // limit, a fair share, or strict round-robin order (which batches do not keep).
        let single = alloc.reserved
            || alloc.shallow_depth.is_some()
            || (self.sched.is_none()
                && (self.set.is_shared() || self.set.flags().contains(TagSetFlags::ROUND_ROBIN)));
        if single {
            let mut got = 0;
            while got < nr {
                let Some(rq) = self.try_alloc(alloc)? else {
                    break;
                };
                out.extend(core::iter::once(rq));
                got += 1;
            }
            return Ok(got);
        }
        let (map, pool) = match &self.sched {
            None => (&self.set.maps[m], self.set.id),
            Some(sched) => (&sched.maps[m], sched.id),
        };
        let Some(batch) = map.get_batch(alloc.cpu, nr) else {
            return Ok(0);
        };
        // Claim every request before handing any out: should `out` panic, the rest are
        // ours already, and dropping the queue frees them.
        for bit in batch.iter() {
            let request = &map.requests[bit + map.nr_reserved];
            // SAFETY: the batch gave us this tag alone.
            let io = unsafe { request.io_mut() };
            io.reset(alloc.cpu as u32, false);
            if self.sched.is_some() {
                io.sched_data = [0; 2];
            }
            request.claim(alloc.hctx as u32, self.id);
        }
        out.extend(batch.iter().map(|bit| {
            let tag = bit + map.nr_reserved;
            let request = &map.requests[tag];
            Rq::new(pool, m, tag, request.allocation())
        }));
        Ok(batch.len())
    }
}

/// The future of [`QueueTags::alloc_async`].
///
/// ```
/// use blkmq_core::{Alloc, StdPlatform, TagSet};
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let future = pin!(queue.alloc_async(Alloc::new(0, 0)));
/// let Poll::Ready(Ok(rq)) = future.poll(&mut Context::from_waker(Waker::noop())) else {
///     panic!("a tag is free");
/// };
/// queue.free(rq).unwrap();
/// ```
pub struct AllocFuture<'q, T, P: Platform> {
    queue: &'q QueueTags<T, P>,
    alloc: Alloc,
    waiter: Option<Waiter<'q, P::RawMutex>>,
    /// The map on whose `share_waiters` this future counts, while it does.
    share_map: Option<usize>,
}

impl<T, P: Platform> AllocFuture<'_, T, P> {
    fn stop_sharing(&mut self) {
        if let Some(m) = self.share_map.take() {
            self.queue.activity[m]
                .share_waiters
                .fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<T, P: Platform> Drop for AllocFuture<'_, T, P> {
    fn drop(&mut self) {
        self.stop_sharing();
    }
}

impl<T, P: Platform> Future for AllocFuture<'_, T, P> {
    type Output = Result<Rq, TagError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let queue = this.queue;
        let alloc = this.alloc;
        if this.waiter.is_none() {
            // Errors (a bad queue index, no reserved tags) come back at once, not after a wait.
            if let Some(rq) = queue.try_alloc(&alloc)? {
                return Poll::Ready(Ok(rq));
            }
            let wait_queue = queue.wait_queue(&alloc)?;
            let m = queue.set.map_index(alloc.hctx);
            if queue.sched.is_none() && !alloc.reserved && queue.set.is_shared() {
                // Before the waiter's attempts: see `Activity::share_waiters`.
                queue.activity[m]
                    .share_waiters
                    .fetch_add(1, Ordering::SeqCst);
                this.share_map = Some(m);
            }
            let hint = match &queue.sched {
                None => queue.set.maps[m].hint(alloc.cpu),
                Some(sched) => sched.maps[m].hint(alloc.cpu),
            };
            this.waiter = Some(wait_queue.waiter(hint));
        }
        let waiter = this.waiter.as_mut().expect("set above");
        let polled = waiter.poll_get_with(cx, || match queue.try_alloc(&alloc) {
            Ok(Some(rq)) => Some(Ok(rq)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        });
        if polled.is_ready() {
            this.stop_sharing();
        }
        polled
    }
}

impl<T, P: Platform> fmt::Debug for AllocFuture<'_, T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocFuture")
            .field("alloc", &self.alloc)
            .field("waiting", &self.waiter.is_some())
            .finish()
    }
}
