//! One tag map: normal and reserved bitmaps, the requests they number, per-CPU hints.
//!
//! Reserved tags are numbered first (`0..reserved`), normal tags after them, as Linux does, so
//! a driver can tell them apart by value. A map serves either one hardware queue or, with
//! shared host tags, every hardware queue of the set.

use alloc::boxed::Box;
use core::ptr;

use blkmq_sbitmap::{AllocHint, BitBatch, Sbitmap, SbitmapQueue};
use crossbeam_utils::CachePadded;

use crate::error::{ConfigError, TagError};
use crate::request::Request;
use crate::sync::{AtomicPtr, AtomicUsize};

/// What `init_request` is told about the request it initialises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInit {
    /// The tag map: the hardware queue with per-queue tags, 0 with shared host tags.
    pub map: usize,
    /// The request's tag in that map.
    pub tag: usize,
    /// Whether the request belongs to scheduler tags rather than driver tags.
    pub scheduler: bool,
}

/// The tags of one map and the requests they number.
///
/// # Invariants
/// * Tags `0..nr_reserved` are the `reserved` bitmap's bits, the rest `normal`'s bits
///   offset by `nr_reserved`; `requests` has one request per tag of the depth the map was
///   made with (`initial_depth`), and resizing moves only the normal bitmap's depth within it.
/// * Whoever gets a tag's bit owns its request until it puts the bit back: it claims the
///   request (`Free -> Idle`) after the get and releases it (`-> Free`) before the put, so
///   a request whose bit is clear is `Free`.
/// * `rqs` is empty for a scheduler map; for a driver map, `rqs[tag]` is non-null only
///   while a scheduler request holds driver tag `tag` (see [`TagSet`](crate::TagSet)).
/// * `active_queues` counts the queues whose activity on this map is marked active, and the
///   normal bitmap's wake batch is recomputed on every change of it.
pub(crate) struct TagMap<T, R: lock_api::RawMutex> {
    pub(crate) normal: SbitmapQueue<R>,
    pub(crate) reserved: Option<SbitmapQueue<R>>,
    pub(crate) nr_reserved: usize,
    /// Per-CPU allocation hints into `normal`.
    hints: Box<[CachePadded<AllocHint>]>,
    reserved_hint: AllocHint,
    /// The requests this map numbers, preallocated: `requests[tag]`.
    pub(crate) requests: Box<[Request<T>]>,
    /// Driver tag -> a request of scheduler tags holding it (null otherwise). Empty for
    /// scheduler maps.
    pub(crate) rqs: Box<[AtomicPtr<Request<T>>]>,
    /// Request queues (or, with per-queue tags, their hardware contexts) counted active.
    pub(crate) active_queues: CachePadded<AtomicUsize>,
    /// The depth the map was created with; it never grows beyond.
    pub(crate) initial_depth: usize,
}

pub(crate) struct MapParams {
    pub(crate) depth: usize,
    pub(crate) reserved: usize,
    pub(crate) nr_cpus: usize,
    pub(crate) round_robin: bool,
    pub(crate) driver: bool,
    pub(crate) map: usize,
    pub(crate) min_shallow_depth: Option<usize>,
}

impl<T, R: lock_api::RawMutex> TagMap<T, R> {
    pub(crate) fn new(
        p: &MapParams,
        init: &mut impl FnMut(RequestInit) -> T,
    ) -> Result<Self, ConfigError> {
        let normal_depth = p.depth - p.reserved;
        let mut builder = Sbitmap::builder(normal_depth).round_robin(p.round_robin);
        if let Some(min) = p.min_shallow_depth {
            builder = builder.min_shallow_depth(min);
        }
        let normal = builder.build_queue_with::<R>()?;
        let reserved = match p.reserved {
            0 => None,
            n => Some(Sbitmap::builder(n).build_queue_with::<R>()?),
        };
        let requests = (0..p.depth)
            .map(|tag| {
                let payload = init(RequestInit {
                    map: p.map,
                    tag,
                    scheduler: !p.driver,
                });
                Request::new(tag as u32, p.driver, payload)
            })
            .collect();
        let rqs = if p.driver {
            (0..p.depth)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect()
        } else {
            Box::default()
        };
        Ok(Self {
            normal,
            reserved,
            nr_reserved: p.reserved,
            hints: (0..p.nr_cpus)
                .map(|cpu| CachePadded::new(AllocHint::spread(cpu, p.nr_cpus)))
                .collect(),
            reserved_hint: AllocHint::new(p.map as u64),
            requests,
            rqs,
            active_queues: CachePadded::new(AtomicUsize::new(0)),
            initial_depth: p.depth,
        })
    }

    #[inline(always)]
    pub(crate) fn hint(&self, cpu: usize) -> &AllocHint {
        // CPUs are dense indices below `nr_cpus`, so the division is for misuse only.
        match self.hints.get(cpu) {
            Some(hint) => hint,
            None => &self.hints[cpu % self.hints.len()],
        }
    }

    /// Allocates a normal tag (numbered after the reserved ones), within `shallow` if given.
    #[inline(always)]
    pub(crate) fn get_normal(
        &self,
        cpu: usize,
        shallow: Option<usize>,
    ) -> Result<Option<usize>, TagError> {
        let bit = match shallow {
            None => self.normal.get(self.hint(cpu)),
            Some(depth) => self.normal.get_shallow(self.hint(cpu), depth)?,
        };
        Ok(bit.map(|bit| bit + self.nr_reserved))
    }

    /// Allocates a reserved tag.
    pub(crate) fn get_reserved(&self) -> Result<Option<usize>, TagError> {
        let reserved = self.reserved.as_ref().ok_or(TagError::NoReservedTags)?;
        Ok(reserved.get(&self.reserved_hint))
    }

    /// Allocates up to `nr` normal tags of one bitmap word.
    pub(crate) fn get_batch(&self, cpu: usize, nr: usize) -> Option<BitBatch> {
        self.normal.get_batch(self.hint(cpu), nr)
    }

    /// Frees normal tag `tag` (at least `nr_reserved`), writing it back to `cpu`'s hint.
    #[inline(always)]
    pub(crate) fn put_normal(&self, tag: usize, cpu: usize) -> Result<(), TagError> {
        self.normal
            .put(tag - self.nr_reserved, self.hint(cpu))
            .map_err(TagError::Bitmap)
    }

    /// Frees `tag`, writing it back to `cpu`'s hint.
    #[inline(always)]
    pub(crate) fn put(&self, tag: usize, cpu: usize) -> Result<(), TagError> {
        if tag < self.nr_reserved {
            let reserved = self.reserved.as_ref().ok_or(TagError::NoReservedTags)?;
            reserved.put(tag, &self.reserved_hint)?;
        } else {
            self.normal.put(tag - self.nr_reserved, self.hint(cpu))?;
        }
        Ok(())
    }

    /// Calls `f` with every allocated tag, reserved first; stops when `f` returns false.
    pub(crate) fn for_each_busy_tag(&self, mut f: impl FnMut(usize) -> bool) -> bool {
        let mut go_on = true;
        if let Some(reserved) = &self.reserved {
            reserved.for_each_set(0, |tag| {
                go_on = f(tag);
                go_on
            });
        }
        if go_on {
            let offset = self.nr_reserved;
            self.normal.for_each_set(0, |bit| {
                go_on = f(bit + offset);
                go_on
            });
        }
        go_on
    }

    /// Allocated tags, reserved and normal.
    pub(crate) fn busy(&self) -> usize {
        self.normal.weight() + self.reserved.as_ref().map_or(0, |r| r.weight())
    }

    /// Current depth (reserved + normal).
    pub(crate) fn depth(&self) -> usize {
        self.nr_reserved + self.normal.depth()
    }

    /// Changes the depth within the initial one; reserved tags are never resized.
    pub(crate) fn resize(&self, depth: usize) -> Result<(), ConfigError> {
        let min = self.nr_reserved + 1;
        if depth < min || depth > self.initial_depth {
            return Err(ConfigError::BadDepthUpdate {
                depth,
                min,
                max: self.initial_depth,
            });
        }
        self.normal.resize(depth - self.nr_reserved)?;
        Ok(())
    }

    /// The fair share of the normal tags when `users` queues are active:
    /// `max(ceil(depth / users), 4)`.
    #[inline]
    pub(crate) fn fair_share(&self, users: usize) -> usize {
        let depth = self.normal.depth();
        depth.div_ceil(users.max(1)).max(4)
    }

    pub(crate) fn users_changed(&self, users: usize) {
        self.normal.recalculate_wake_batch(users.max(1));
    }
}
