//! Fair sharing of a tag map between the request queues active on it, and taking and
//! freeing driver tags under it (Linux's `blk_mq_tag_busy`, `hctx_may_queue`).

use crate::error::TagError;
use crate::platform::Platform;
use crate::sync::Ordering;

use super::QueueTags;

impl<T, P: Platform> QueueTags<T, P> {
    /// Counts this queue active on map `m` (Linux's `blk_mq_tag_busy`).
    #[inline]
    fn mark_active(&self, m: usize) {
        let activity = &self.activity[m];
        if activity.active.load(Ordering::Relaxed) || activity.active.swap(true, Ordering::AcqRel) {
            return;
        }
        // INVARIANT: marked active, then counted: only the swap's winner counts.
        let map = &self.set.maps[m];
        let users = map.active_queues.fetch_add(1, Ordering::SeqCst) + 1;
        map.users_changed(users);
        // Once per change to active: the service idles the queue when it goes quiet.
        self.set
            .platform()
            .service_after(crate::queue::IDLE_INTERVAL_NS);
    }

    /// Marks this queue idle on `hctx`'s map if it holds no counted tag there, giving its
    /// share back to the other queues (Linux's `blk_mq_tag_idle`, run from the timeout
    /// work). Returns whether it went idle. [`Host::service`](crate::Host::service) calls
    /// it for every queue of its host at each [`IDLE_INTERVAL_NS`](crate::IDLE_INTERVAL_NS).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// let b = set.attach().unwrap();
    /// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let other = b.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(set.fair_share(0), 32); // two active queues share 64 tags
    /// b.free(other).unwrap();
    /// assert!(b.mark_idle(0));
    /// assert_eq!(set.fair_share(0), 64);
    /// a.free(rq).unwrap();
    /// ```
    pub fn mark_idle(&self, hctx: usize) -> bool {
        let Some(m) = self.set.map_of(hctx) else {
            return false;
        };
        if self.activity[m].in_flight.load(Ordering::SeqCst) != 0 {
            return false;
        }
        self.deactivate(m)
    }

    pub(super) fn deactivate(&self, m: usize) -> bool {
        if !self.activity[m].active.swap(false, Ordering::AcqRel) {
            return false;
        }
        // INVARIANT: marked idle, then uncounted: only the swap's winner uncounts.
        let map = &self.set.maps[m];
        let users = map.active_queues.fetch_sub(1, Ordering::SeqCst) - 1;
        map.users_changed(users);
        // Waiters of other queues may fit in the larger share now.
        map.normal.wake_all();
        true
    }

    /// Whether this queue may take one more normal driver tag of map `m` (Linux's
    /// `hctx_may_queue`).
    #[inline(always)]
    fn may_queue(&self, m: usize) -> bool {
        let map = &self.set.maps[m];
        let users = map.active_queues.load(Ordering::SeqCst);
        if users <= 1 {
            return true;
        }
        self.activity[m].in_flight.load(Ordering::SeqCst) < map.fair_share(users)
    }

    /// Takes a driver tag of map `m`, with fair sharing; `Ok(None)` when none may be had.
    /// Returns the tag and whether it counts towards the fair share.
    #[inline(always)]
    pub(super) fn get_driver_tag_raw(
        &self,
        m: usize,
        cpu: usize,
        reserved: bool,
        shallow: Option<usize>,
    ) -> Result<Option<(usize, bool)>, TagError> {
        let map = &self.set.maps[m];
        if reserved {
            return Ok(map.get_reserved()?.map(|tag| (tag, false)));
        }
        if !self.set.is_shared() {
            return Ok(map.get_normal(cpu, shallow)?.map(|tag| (tag, false)));
        }
        self.mark_active(m);
        if !self.may_queue(m) {
            return Ok(None);
        }
        let Some(tag) = map.get_normal(cpu, shallow)? else {
            return Ok(None);
        };
        // INVARIANT: counted, and the caller records it (`counted`) for the free.
        self.activity[m].in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(Some((tag, true)))
    }

    /// Frees driver tag `tag` of map `m`.
    #[inline(always)]
    pub(super) fn put_driver_tag_raw(
        &self,
        m: usize,
        tag: usize,
        cpu: usize,
        counted: bool,
    ) -> Result<(), TagError> {
        if !counted {
            return self.set.maps[m].put(tag, cpu);
        }
        // SeqCst, before the tag is freed: a waiter over its share that misses this
        // decrement registered first (`share_waiters`, then the bitmap's `ws_active`), and
        // the free's loads below see it (the bitmap's Dekker pair, fenced inside `put`).
        self.activity[m].in_flight.fetch_sub(1, Ordering::SeqCst);
        let freed = self.set.maps[m].put(tag, cpu);
        if self.activity[m].share_waiters.load(Ordering::SeqCst) != 0 {
            self.set.maps[m].normal.wake_all();
        }
        freed
    }
}
