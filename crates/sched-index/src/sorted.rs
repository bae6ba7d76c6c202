//! The requests an elevator holds, by key, in a sector order and an end hash.

use alloc::vec::Vec;

use blkmq_core::{Bio, ElvCx, MergeKind, Rq};

use crate::{EndHash, SectorForest};

/// The requests an elevator holds, by key, with their sector order and end hash: the
/// storage and the merge operations mq-deadline and BFQ share (Linux's `elv_rb_*`,
/// `elv_rqhash_*` and the `elv_merge` hooks over them).
///
/// A request is held either *sorted* ([`hold_sorted`](Self::hold_sorted): in one of the
/// sector-sorted trees and filed by its end, a merge candidate) or outside the orders
/// ([`hold`](Self::hold): on a dispatch list, say). The trees are read through
/// [`forest`](Self::forest) (`first`, `lower_bound`, `next`, `tree_of`, ...); changes go
/// through the methods here, which keep the requests, the trees and the hash
/// together. Which tree a request goes to, and which requests may merge, is the
/// scheduler's policy: the merge methods take the tree, or a filter over `(key, tree)`.
///
/// ```
/// use blkmq_sched_index::SortedRequests;
/// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut tags = set.attach().unwrap();
/// tags.attach_scheduler(None, |_| ()).unwrap();
/// let limits = QueueLimits::new(1 << 20);
/// let cx = ElvCx::new(&tags, &limits, 0);
/// let mut held = SortedRequests::new(1, tags.nr_keys());
/// for sector in [64, 0] {
///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
///     let key = cx.key(&rq);
///     held.hold_sorted(0, key, rq, sector, sector + 8);
/// }
/// // A bio at 8 merges at the back of the request at 0, the first in sector order.
/// let (key, kind) = held.request_merge(&cx, &Bio::new(Op::Read, 8, 8), 0, true, |_, _| true).unwrap();
/// assert_eq!((held.forest().first(0), kind), (Some(key), MergeKind::Back));
/// for key in held.held_keys().collect::<Vec<_>>() {
///     tags.free(held.take_request(key).unwrap()).unwrap();
/// }
/// ```
#[derive(Debug)]
pub struct SortedRequests {
    slots: Vec<Option<Rq>>,
    sorted: SectorForest,
    ends: EndHash,
}

impl SortedRequests {
    /// The sector-sorted trees, to read (changes go through the methods of `self`).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    ///
    /// let held = SortedRequests::new(2, 16);
    /// assert!(held.forest().is_empty(1));
    /// assert_eq!(held.forest().nr_trees(), 2);
    /// ```
    #[inline]
    pub fn forest(&self) -> &SectorForest {
        &self.sorted
    }

    /// Room for requests of keys `0..nr_keys` in `nr_trees` empty trees.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    ///
    /// let held = SortedRequests::new(6, 64);
    /// assert_eq!((held.forest().nr_trees(), held.forest().nr_keys(), held.held_keys().count()), (6, 64, 0));
    /// ```
    pub fn new(nr_trees: usize, nr_keys: usize) -> Self {
        let mut slots = Vec::with_capacity(nr_keys);
        slots.resize_with(nr_keys, || None);
        Self {
            slots,
            sorted: SectorForest::new(nr_trees, nr_keys),
            ends: EndHash::new(nr_keys),
        }
    }

    /// Makes room for keys `0..nr_keys` (never less than now) in `nr_trees` empty trees:
    /// the requests held stay held, out of every order (allocates: call it where the
    /// queue's depth changes, not per request).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 4);
    /// held.hold_sorted(0, 2, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// held.resize(2, 16);
    /// assert_eq!((held.forest().nr_trees(), held.forest().nr_keys()), (2, 16));
    /// assert!(held.request(2).is_some() && !held.forest().contains(2)); // held, in no tree
    /// # tags.free(held.take_request(2).unwrap()).unwrap();
    /// ```
    pub fn resize(&mut self, nr_trees: usize, nr_keys: usize) {
        let nr_keys = nr_keys.max(self.slots.len());
        let mut slots = Vec::with_capacity(nr_keys);
        slots.append(&mut self.slots);
        slots.resize_with(nr_keys, || None);
        self.slots = slots;
        self.sorted = SectorForest::new(nr_trees, nr_keys);
        self.ends = EndHash::new(nr_keys);
    }

    /// Adds an empty tree and returns its index (see [`SectorForest::add_tree`]).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    ///
    /// let mut held = SortedRequests::new(0, 8);
    /// assert_eq!((held.add_tree(), held.forest().nr_trees()), (0, 1));
    /// ```
    pub fn add_tree(&mut self) -> usize {
        self.sorted.add_tree()
    }

    /// The keys of the requests held, in key order.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(5, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// held.hold_sorted(0, 1, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// assert_eq!(held.held_keys().collect::<Vec<_>>(), [1, 5]);
    /// # for key in [1, 5] { tags.free(held.take_request(key).unwrap()).unwrap(); }
    /// ```
    pub fn held_keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(key, slot)| slot.as_ref().map(|_| key))
    }

    /// The request held with `key` (what [`HeldRequests::request`](crate::HeldRequests::request)
    /// gives).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request(3).is_some() && held.request(2).is_none() && held.request(99).is_none());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request(&self, key: usize) -> Option<&Rq> {
        self.slots.get(key)?.as_ref()
    }

    /// The request held with `key`, to change.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request_mut(3).is_some() && held.request_mut(4).is_none());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        self.slots.get_mut(key)?.as_mut()
    }

    /// Holds `rq` with `key` outside the orders (a dispatch list's request, say).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request(3).is_some() && !held.forest().contains(3));
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn hold(&mut self, key: usize, rq: Rq) {
        self.slots[key] = Some(rq);
    }

    /// Holds `rq` with `key` in tree `t` at `sector`, filed under `end` (the sector it
    /// ends at): a merge candidate.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(2, 8);
    /// held.hold_sorted(1, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 100, 108);
    /// assert_eq!((held.forest().tree_of(3), held.forest().sector(3)), (Some(1), 100));
    /// # tags.free(held.take_request(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn hold_sorted(&mut self, t: usize, key: usize, rq: Rq, sector: u64, end: u64) {
        self.sorted.insert(t, key, sector);
        self.ends.insert(key, end);
        self.slots[key] = Some(rq);
    }

    /// Takes `key` out of its tree and the end hash, giving back the end it was filed under
    /// (`None`: it was in neither); its request stays held.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// assert_eq!(held.unlink(3), Some(8)); // the end it was filed under
    /// assert_eq!(held.unlink(3), None); // already out: nothing
    /// assert!(held.forest().is_empty(0) && held.request(3).is_some());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn unlink(&mut self, key: usize) -> Option<u64> {
        self.sorted.remove(key);
        self.ends.remove(key)
    }

    /// Gives back the request held with `key`, leaving the orders as they are (for one
    /// already unlinked, or held outside them).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// let rq = held.take(3).unwrap();
    /// assert!(held.take(3).is_none() && held.take(99).is_none());
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn take(&mut self, key: usize) -> Option<Rq> {
        self.slots.get_mut(key)?.take()
    }

    /// Takes `key` out of its tree and the end hash and gives its request back (what
    /// [`HeldRequests::take_request`](crate::HeldRequests::take_request) does).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// let rq = held.take_request(3).unwrap();
    /// assert!(held.forest().is_empty(0) && held.request(3).is_none());
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn take_request(&mut self, key: usize) -> Option<Rq> {
        self.unlink(key);
        self.take(key)
    }

    /// Whether the request held with `key` may take `bio` at its `kind` end.
    #[inline]
    fn fits(&self, cx: &ElvCx<'_>, key: usize, bio: &Bio, kind: MergeKind) -> bool {
        self.slots[key]
            .as_ref()
            .and_then(|rq| cx.io(rq).ok())
            .is_some_and(|io| cx.limits().merge_kind(io, bio) == Some(kind))
    }

    /// A sorted request `bio` merges into (what
    /// [`Elevator::request_merge`](blkmq_core::Elevator::request_merge) finds): at the back, one
    /// ending where it starts that `accept(key, its tree)` takes; else, with `front`, at
    /// the front, one of tree `t` starting where it ends. Only a request that can take
    /// the bio counts: one that cannot does not hide another that can.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(2, tags.nr_keys());
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap();
    /// let key = cx.key(&rq);
    /// held.hold_sorted(1, key, rq, 16, 24);
    /// let (back, front) = (Bio::new(Op::Read, 24, 8), Bio::new(Op::Read, 8, 8));
    /// assert_eq!(held.request_merge(&cx, &back, 1, true, |_, t| t == 1), Some((key, MergeKind::Back)));
    /// assert_eq!(held.request_merge(&cx, &back, 1, true, |_, t| t == 0), None); // not its tree
    /// assert_eq!(held.request_merge(&cx, &front, 1, true, |_, _| true), Some((key, MergeKind::Front)));
    /// assert_eq!(held.request_merge(&cx, &front, 1, false, |_, _| true), None); // no front merges
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_merge(
        &self,
        cx: &ElvCx<'_>,
        bio: &Bio,
        t: usize,
        front: bool,
        accept: impl Fn(usize, usize) -> bool,
    ) -> Option<(usize, MergeKind)> {
        let back = self.ends.find(bio.sector, |k| {
            self.sorted.tree_of(k).is_some_and(|tree| accept(k, tree))
                && self.fits(cx, k, bio, MergeKind::Back)
        });
        if let Some(key) = back {
            return Some((key, MergeKind::Back));
        }
        if !front {
            return None;
        }
        let end = bio.end_sector();
        let mut at = self.sorted.lower_bound(t, end);
        while let Some(key) = at {
            if self.sorted.sector(key) != end {
                return None;
            }
            if self.fits(cx, key, bio, MergeKind::Front) {
                return Some((key, MergeKind::Front));
            }
            at = self.sorted.next(key);
        }
        None
    }

    /// A bio merged into the request held with `key` at its `kind` end (what
    /// [`Elevator::request_merged`](blkmq_core::Elevator::request_merged) sees): a front merge
    /// moves it in its tree to its new start, a back merge files it under its new end.
    /// Returns its length now (sectors); `None`, changing nothing, when no request of
    /// this queue is held with `key`.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap();
    /// let key = cx.key(&rq);
    /// held.hold_sorted(0, key, rq, 16, 24);
    /// cx.merge_bio(held.request_mut(key).unwrap(), Bio::new(Op::Read, 8, 8)).unwrap();
    /// assert_eq!(held.request_merged(&cx, key, MergeKind::Front), Some(16));
    /// assert_eq!(held.forest().sector(key), 8);
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<u64> {
        let io = cx.io(self.slots[key].as_ref()?).ok()?;
        let (sector, end, sectors) = (io.sector(), io.end_sector(), io.sectors());
        match kind {
            MergeKind::Front => {
                if let Some(t) = self.sorted.tree_of(key) {
                    self.sorted.remove(key);
                    self.sorted.insert(t, key, sector);
                }
            }
            MergeKind::Back => self.ends.insert(key, end),
        }
        Some(sectors)
    }

    /// After a `kind` merge into `key`, the sorted request that may now merge with it
    /// (what [`HeldRequests::next_request`](crate::HeldRequests::next_request) gives): the next in
    /// its tree after a back merge, the previous one after a front merge.
    ///
    /// ```
    /// use blkmq_core::MergeKind;
    /// use blkmq_sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 1, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// held.hold_sorted(0, 2, tags.alloc(&Alloc::new(0, 0)).unwrap(), 8, 16);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert_eq!(held.next_request(1, MergeKind::Back), Some(2));
    /// assert_eq!(held.next_request(2, MergeKind::Front), Some(1));
    /// assert_eq!(held.next_request(3, MergeKind::Back), None); // in no tree
    /// # for key in [1, 2, 3] { tags.free(held.take_request(key).unwrap()).unwrap(); }
    /// ```
    #[inline]
    pub fn next_request(&self, key: usize, kind: MergeKind) -> Option<usize> {
        if !self.sorted.contains(key) {
            return None;
        }
        match kind {
            MergeKind::Back => self.sorted.next(key),
            MergeKind::Front => self.sorted.prev(key),
        }
    }

    /// A request was appended to the one held with `into` (what
    /// [`Elevator::requests_merged`](blkmq_core::Elevator::requests_merged) sees): `into` is
    /// filed under its new end. Returns its length now (sectors); `None`, changing
    /// nothing, when no request of this queue is held with `into`.
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut keys = Vec::new();
    /// for sector in [0, 8] {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     keys.push(cx.key(&rq));
    ///     held.hold_sorted(0, cx.key(&rq), rq, sector, sector + 8);
    /// }
    /// let from = held.take_request(keys[1]).unwrap();
    /// cx.merge_requests(held.request_mut(keys[0]).unwrap(), from).unwrap();
    /// assert_eq!(held.requests_merged(&cx, keys[0]), Some(16));
    /// let bio = Bio::new(Op::Read, 16, 8);
    /// assert_eq!(held.request_merge(&cx, &bio, 0, false, |_, _| true), Some((keys[0], MergeKind::Back)));
    /// # tags.free(held.take_request(keys[0]).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize) -> Option<u64> {
        let io = cx.io(self.slots[into].as_ref()?).ok()?;
        let (end, sectors) = (io.end_sector(), io.sectors());
        self.ends.insert(into, end);
        Some(sectors)
    }

    /// An insert merge: appends `rq`, which starts at `sector`, to a sorted request
    /// ending there that `accept(key, its tree)` takes and that can take it; gives back
    /// that request's key, or `rq` when none takes it. The caller then finishes the merge
    /// as after [`requests_merged`](Self::requests_merged) (which files the survivor under
    /// its new end).
    ///
    /// ```
    /// use blkmq_sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut make = |sector| {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     rq
    /// };
    /// let (first, next, far) = (make(0), make(8), make(100));
    /// let key = cx.key(&first);
    /// held.hold_sorted(0, key, first, 0, 8);
    /// assert_eq!(held.insert_merge(&cx, next, 8, |_, _| true), Ok(key));
    /// assert_eq!(held.requests_merged(&cx, key), Some(16));
    /// let far = held.insert_merge(&cx, far, 100, |_, _| true).unwrap_err(); // touches none
    /// # tags.free(far).unwrap();
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    pub fn insert_merge(
        &mut self,
        cx: &ElvCx<'_>,
        rq: Rq,
        sector: u64,
        accept: impl Fn(usize, usize) -> bool,
    ) -> Result<usize, Rq> {
        let into = self.ends.find(sector, |k| {
            self.sorted.tree_of(k).is_some_and(|tree| accept(k, tree))
                && self.slots[k]
                    .as_ref()
                    .is_some_and(|target| cx.can_append(target, &rq))
        });
        let Some(into) = into else {
            return Err(rq);
        };
        let Some(target) = self.slots[into].as_mut() else {
            return Err(rq);
        };
        cx.merge_requests(target, rq).map(|()| into)
    }
}
