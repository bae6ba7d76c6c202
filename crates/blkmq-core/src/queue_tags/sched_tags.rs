//! Scheduler tags: the requests of a queue with an elevator, apart from the driver tags.

use alloc::boxed::Box;

use crate::error::{ConfigError, TagError};
use crate::platform::Platform;
use crate::request::{Request, Rq, RqIo};
use crate::tags::{MapParams, RequestInit, TagMap};
use crate::tagset::{MAX_SCHED_DEPTH, TagSetFlags, next_pool_id};

use super::{QueueTags, SchedTags};

impl<T, P: Platform> QueueTags<T, P> {
    /// Gives the queue scheduler tags of `nr_requests` (default `2 * min(depth, 128)`, as
    /// Linux) per map, preallocating their requests with `init_request`. From now on
    /// requests come from them, and take driver tags at dispatch.
    ///
    /// # Errors
    /// [`ConfigError::BadNrRequests`] for 0 or above [`MAX_SCHED_DEPTH`], or not above the
    /// reserved tags; [`ConfigError::NoScheduler`] when the set was made with
    /// [`TagSetFlags::NO_SCHED`]; [`ConfigError::SchedulerBusy`] when scheduler tags the
    /// queue already has still have requests out (they stay). Replacing idle scheduler tags
    /// frees them.
    ///
    /// ```
    /// use blkmq_core::{Alloc, ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(32).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// queue.attach_scheduler(None, |init| assert!(init.scheduler)).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(64)); // 2 x depth
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!((queue.sched_busy(), set.busy()), (1, 0)); // no driver tag yet
    /// queue.free(rq).unwrap();
    /// let err = queue.attach_scheduler(Some(0), |_| ()).unwrap_err();
    /// assert!(matches!(err, ConfigError::BadNrRequests { nr_requests: 0, .. }));
    /// ```
    pub fn attach_scheduler(
        &mut self,
        nr_requests: Option<usize>,
        mut init_request: impl FnMut(RequestInit) -> T,
    ) -> Result<(), ConfigError> {
        if self.set.flags().contains(TagSetFlags::NO_SCHED) {
            return Err(ConfigError::NoScheduler);
        }
        let depth = self.set.depth();
        let nr_requests = nr_requests.unwrap_or(2 * depth.min(128));
        if nr_requests == 0 || nr_requests > MAX_SCHED_DEPTH || nr_requests <= self.set.reserved() {
            return Err(ConfigError::BadNrRequests {
                nr_requests,
                max: MAX_SCHED_DEPTH,
            });
        }
        // Checked before anything is made: scheduler tags with requests out stay.
        if self.sched_busy() != 0 {
            return Err(ConfigError::SchedulerBusy);
        }
        let id = next_pool_id().ok_or(ConfigError::IdentitiesExhausted)?;
        let maps = (0..self.set.maps.len())
            .map(|map| {
                let params = MapParams {
                    depth: nr_requests,
                    reserved: self.set.reserved(),
                    nr_cpus: self.set.nr_cpus(),
                    round_robin: false,
                    driver: false,
                    map,
                    // Declared by the elevator (`set_min_shallow_depth`) before it limits.
                    min_shallow_depth: None,
                };
                TagMap::new(&params, &mut init_request)
            })
            .collect::<Result<Box<[_]>, _>>()?;
        if self.sched.is_some() {
            // Idle (checked above): freeing them needs only the iteration lock.
            let _guard = self.set.iter_lock.lock();
            self.sched = None;
        }
        self.sched = Some(SchedTags { id, maps });
        self.key_stride = self.compute_key_stride();
        Ok(())
    }

    /// Requests one map spans in the key space: the larger of the driver and scheduler
    /// arrays (as computed when the scheduler tags last came or went).
    #[inline(always)]
    fn key_stride(&self) -> usize {
        self.key_stride
    }

    /// [`key_stride`](Self::key_stride) computed afresh from the arrays.
    pub(super) fn compute_key_stride(&self) -> usize {
        let driver = self.maps().first().map_or(0, |m| m.requests.len());
        let sched = self
            .sched
            .as_ref()
            .and_then(|s| s.maps.first())
            .map_or(0, |m| m.requests.len());
        driver.max(sched)
    }

    /// The I/O of a request an elevator holds (what [`io`](Self::io) gives), resolved
    /// against the scheduler tags first, where an elevator's requests come from; `None`
    /// when `rq` is not this queue's.
    #[inline]
    pub(crate) fn elv_io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo> {
        let request = self.elv_request(rq)?;
        // SAFETY: `rq` is the request's unique token and the result borrows it, so no
        // `&mut RqIo` (which needs the token borrowed mutably) can exist meanwhile.
        Some(unsafe { request.io_ref() })
    }

    /// [`elv_io`](Self::elv_io), to change.
    #[inline]
    pub(crate) fn elv_io_mut<'a>(&'a self, rq: &'a mut Rq) -> Option<&'a mut RqIo> {
        let request = self.elv_request(rq)?;
        // SAFETY: we hold the unique token mutably for the result's lifetime.
        Some(unsafe { request.io_mut() })
    }

    /// The request `rq` names, tried as a scheduler request first.
    #[inline(always)]
    fn elv_request(&self, rq: &Rq) -> Option<&Request<T>> {
        if let Some(sched) = self.sched.as_ref().filter(|s| s.id == rq.pool()) {
            let request = sched.maps.get(rq.map())?.requests.get(rq.index())?;
            return request
                .is_owned_by(self.id, rq.generation())
                .then_some(request);
        }
        self.request(rq).ok()
    }

    /// A dense index of the request `rq` names, below [`nr_keys`](Self::nr_keys): its map
    /// times the largest array, plus its tag.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// assert_eq!(queue.key_of(&rq), 4 + rq.tag() as usize);
    /// assert_eq!(queue.nr_keys(), 8);
    /// queue.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn key_of(&self, rq: &Rq) -> usize {
        rq.map() * self.key_stride() + rq.index()
    }

    /// How many distinct [`key_of`](Self::key_of) values this queue's requests can have.
    #[inline]
    pub fn nr_keys(&self) -> usize {
        self.maps().len() * self.key_stride()
    }

    /// Frees the scheduler tags; requests come from driver tags again.
    ///
    /// # Errors
    /// [`TagError::NoScheduler`] without scheduler tags; [`TagError::Busy`] while any of
    /// their requests is out.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.detach_scheduler().unwrap_err(), TagError::NoScheduler);
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.detach_scheduler().unwrap_err(), TagError::Busy);
    /// queue.free(rq).unwrap();
    /// queue.detach_scheduler().unwrap();
    /// assert!(!queue.has_scheduler());
    /// ```
    pub fn detach_scheduler(&mut self) -> Result<(), TagError> {
        let sched = self.sched.as_ref().ok_or(TagError::NoScheduler)?;
        if sched.maps.iter().any(|m| m.busy() != 0) {
            return Err(TagError::Busy);
        }
        let _guard = self.set.iter_lock.lock();
        self.sched = None;
        self.key_stride = self.compute_key_stride();
        Ok(())
    }

    /// Whether the queue has scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(!queue.has_scheduler());
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// assert!(queue.has_scheduler());
    /// ```
    pub fn has_scheduler(&self) -> bool {
        self.sched.is_some()
    }

    /// Scheduler requests per map (`nr_requests`), when there are scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.nr_requests(), None);
    /// queue.attach_scheduler(Some(24), |_| ()).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(24));
    /// ```
    pub fn nr_requests(&self) -> Option<usize> {
        self.sched.as_ref().map(|s| s.maps[0].depth())
    }

    /// Changes `nr_requests` within the depth the scheduler tags were made with.
    ///
    /// # Errors
    /// [`ConfigError::BadDepthUpdate`] outside it; [`ConfigError::BadNrRequests`] without
    /// scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(matches!(queue.set_nr_requests(4), Err(ConfigError::BadNrRequests { .. })));
    /// queue.attach_scheduler(Some(32), |_| ()).unwrap();
    /// queue.set_nr_requests(8).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(8));
    /// assert!(queue.set_nr_requests(33).is_err()); // beyond the depth they were made with
    /// ```
    pub fn set_nr_requests(&self, nr_requests: usize) -> Result<(), ConfigError> {
        let sched = self.sched.as_ref().ok_or(ConfigError::BadNrRequests {
            nr_requests,
            max: MAX_SCHED_DEPTH,
        })?;
        for map in sched.maps.iter() {
            map.resize(nr_requests)?;
        }
        Ok(())
    }

    /// Declares the smallest shallow limit allocations will use on the scheduler tags (an
    /// elevator's `depth_updated`), which sizes the wake-up batch so none is lost.
    ///
    /// # Errors
    /// [`ConfigError::BadNrRequests`] without scheduler tags; [`ConfigError::BadShallowDepth`]
    /// for 0 or beyond the normal scheduler tags (`nr_requests` less the reserved ones).
    ///
    /// ```
    /// use blkmq_core::{ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(16).reserved(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(queue.set_min_shallow_depth(4).is_err()); // no scheduler tags
    /// queue.attach_scheduler(Some(16), |_| ()).unwrap();
    /// queue.set_min_shallow_depth(4).unwrap();
    /// let err = queue.set_min_shallow_depth(15).unwrap_err(); // 14 normal tags
    /// assert_eq!(err, ConfigError::BadShallowDepth { shallow_depth: 15, depth: 14 });
    /// ```
    pub fn set_min_shallow_depth(&self, depth: usize) -> Result<(), ConfigError> {
        let sched = self.sched.as_ref().ok_or(ConfigError::BadNrRequests {
            nr_requests: 0,
            max: MAX_SCHED_DEPTH,
        })?;
        let limit = sched.maps[0].normal.depth();
        if depth == 0 || depth > limit {
            return Err(ConfigError::BadShallowDepth {
                shallow_depth: depth,
                depth: limit,
            });
        }
        for map in sched.maps.iter() {
            map.normal.set_min_shallow_depth(depth);
        }
        Ok(())
    }

    /// Scheduler requests out, over every map.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.sched_busy(), 0);
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// assert_eq!(queue.sched_busy(), 2);
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// assert_eq!(queue.sched_busy(), 0);
    /// ```
    pub fn sched_busy(&self) -> usize {
        self.sched
            .as_ref()
            .map_or(0, |s| s.maps.iter().map(TagMap::busy).sum())
    }

    /// Scheduler tag map `m` (beside driver map `m`), when there are scheduler tags: for
    /// state dumps.
    pub(crate) fn sched_map(&self, m: usize) -> Option<&TagMap<T, P::RawMutex>> {
        self.sched.as_ref()?.maps.get(m)
    }
}
