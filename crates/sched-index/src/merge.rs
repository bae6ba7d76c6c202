//! The elevator side of merging a bio (Linux's `blk_mq_sched_try_merge`: `elv_merge`, the
//! bio merge, then `attempt_back_merge` / `attempt_front_merge` of the request with its
//! neighbour), run over an elevator's storage.

use blkmq_core::{Bio, Elevator, ElvCx, MergeKind, Rq};

/// The requests an elevator holds, by [key](ElvCx::key): what [`bio_merge`] needs of an
/// elevator's storage besides its merge hooks ([`Elevator::request_merge`],
/// [`Elevator::request_merged`], [`Elevator::requests_merged`]).
///
/// [`SortedRequests`](crate::SortedRequests) answers each of these; [`bio_merge`]'s example
/// implements them over a map.
///
/// ```
/// use blkmq_core::{Elevator, ElvCx, MergeKind, Rq};
/// use blkmq_sched_index::{HeldRequests, SortedRequests};
///
/// /// Holds its requests in one sector-sorted tree.
/// struct Sorted(SortedRequests);
/// # impl Elevator for Sorted {
/// #     fn name(&self) -> &'static str { "sorted" }
/// #     fn insert_requests(&mut self, _: &ElvCx, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
/// #     fn has_work(&self, _: usize) -> bool { false }
/// # }
/// impl HeldRequests for Sorted {
///     fn request(&self, key: usize) -> Option<&Rq> {
///         self.0.request(key)
///     }
///     fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
///         self.0.request_mut(key)
///     }
///     fn next_request(&mut self, _: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
///         self.0.next_request(key, kind)
///     }
///     fn take_request(&mut self, key: usize) -> Option<Rq> {
///         self.0.take_request(key)
///     }
/// }
///
/// let mut sorted = Sorted(SortedRequests::new(1, 8));
/// assert!(sorted.request(0).is_none() && sorted.take_request(7).is_none());
/// ```
pub trait HeldRequests: Elevator {
    /// The held request with `key`.
    ///
    /// [`bio_merge`]'s example implements it.
    fn request(&self, key: usize) -> Option<&Rq>;

    /// The held request with `key`, to change.
    ///
    /// [`bio_merge`]'s example implements it.
    fn request_mut(&mut self, key: usize) -> Option<&mut Rq>;

    /// After a `kind` merge into `key`, the held request that may now merge with it: the
    /// next in sector order after a back merge, the previous one after a front merge.
    ///
    /// [`bio_merge`]'s example implements it.
    fn next_request(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize>;

    /// Removes the request with `key` from every order and gives it back (it is about to
    /// merge into another).
    ///
    /// [`bio_merge`]'s example implements it.
    fn take_request(&mut self, key: usize) -> Option<Rq>;
}

/// Tries to merge `bio` into a request `elv` holds; gives it back when none takes it. What
/// an elevator's [`Elevator::bio_merge`] calls to merge as Linux does.
///
/// The sequence: [`Elevator::request_merge`] names a held request that `bio` touches and
/// the end; [`Elevator::allow_merge`] may refuse; the bio merges within the queue's limits
/// ([`ElvCx::merge_bio`]) and [`Elevator::request_merged`] hears of it. Then that request
/// may merge with its neighbour ([`HeldRequests::next_request`]): the later of the two is
/// taken out ([`HeldRequests::take_request`]), appended to the earlier and freed, and
/// [`Elevator::requests_merged`] hears of it; if that merge fails after all, the request
/// taken goes back through [`Elevator::insert_request`].
///
/// ```
/// use blkmq_core::*;
/// use blkmq_sched_index::{HeldRequests, bio_merge};
/// use std::collections::BTreeMap;
///
/// /// Keeps its requests by key and in sector order, and merges through the hooks.
/// #[derive(Default)]
/// struct Sorted {
///     held: Vec<Option<Rq>>,
///     by_start: BTreeMap<u64, usize>,
///     merges: usize,
/// }
/// impl Sorted {
///     fn io<'a>(&'a self, cx: &'a ElvCx<'_>, key: usize) -> Option<&'a RqIo> {
///         cx.io(self.request(key)?).ok()
///     }
/// }
/// impl Elevator for Sorted {
/// #     fn name(&self) -> &'static str { "sorted" }
///     fn depth_updated(&mut self, _: usize, nr_keys: usize) {
///         self.held.resize_with(nr_keys, || None);
///     }
///     fn insert_requests(&mut self, cx: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
///         for rq in rqs {
///             let key = cx.key(&rq);
///             self.by_start.insert(cx.io(&rq).unwrap().sector(), key);
///             self.held[key] = Some(rq);
///         }
///     }
///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
///         let (_, key) = self.by_start.pop_first()?;
///         self.held[key].take()
///     }
///     fn has_work(&self, _: usize) -> bool {
///         !self.by_start.is_empty()
///     }
///     fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
///         if let Some((_, &key)) = self.by_start.range(..bio.sector).next_back() {
///             if self.io(cx, key)?.end_sector() == bio.sector {
///                 return Some((key, MergeKind::Back));
///             }
///         }
///         Some((*self.by_start.get(&bio.end_sector())?, MergeKind::Front))
///     }
///     fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
///         if kind == MergeKind::Front {
///             // Its start moved.
///             self.by_start.retain(|_, k| *k != key);
///             let start = self.io(cx, key).unwrap().sector();
///             self.by_start.insert(start, key);
///         }
///     }
///     fn requests_merged(&mut self, _: &ElvCx<'_>, _: usize, _: usize) {
///         self.merges += 1;
///     }
///     fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
///         bio_merge(self, cx, bio)
///     }
/// }
/// impl HeldRequests for Sorted {
///     fn request(&self, key: usize) -> Option<&Rq> {
///         self.held.get(key)?.as_ref()
///     }
///     fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
///         self.held.get_mut(key)?.as_mut()
///     }
///     fn next_request(&mut self, cx: &ElvCx, key: usize, kind: MergeKind) -> Option<usize> {
///         // The neighbour in sector order; the queue checks that they touch.
///         let start = self.io(cx, key)?.sector();
///         let next = match kind {
///             MergeKind::Back => self.by_start.range(start + 1..).next(),
///             MergeKind::Front => self.by_start.range(..start).next_back(),
///         };
///         next.map(|(_, &k)| k)
///     }
///     fn take_request(&mut self, key: usize) -> Option<Rq> {
///         self.by_start.retain(|_, k| *k != key);
///         self.held.get_mut(key)?.take()
///     }
/// }
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut tags = set.attach().unwrap();
/// tags.attach_scheduler(None, |_| ()).unwrap();
/// let limits = QueueLimits::new(1 << 20);
/// let cx = ElvCx::new(&tags, &limits, 0);
/// let mut elv = Sorted::default();
/// elv.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
/// for sector in [16, 0] {
///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
///     elv.insert_requests(&cx, &mut core::iter::once(rq), false);
/// }
/// // 8..16 joins the request at 0 at its back, which then takes in the one at 16.
/// elv.bio_merge(&cx, Bio::new(Op::Read, 8, 8)).unwrap();
/// assert!(elv.bio_merge(&cx, Bio::new(Op::Read, 100, 8)).is_err()); // touches none
/// assert_eq!(elv.merges, 1);
/// let rq = elv.dispatch_request(&cx, 0).unwrap();
/// let io = cx.io(&rq).unwrap();
/// assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (0, 24, 3));
/// assert!(!elv.has_work(0));
/// tags.free(rq).unwrap();
/// ```
///
/// # Errors
/// The bio, untouched, when no held request takes it.
#[inline]
pub fn bio_merge<E: HeldRequests + ?Sized>(
    elv: &mut E,
    cx: &ElvCx<'_>,
    bio: Bio,
) -> Result<(), Bio> {
    let Some((key, kind)) = elv.request_merge(cx, &bio) else {
        return Err(bio);
    };
    let allowed = match elv.request(key).map(|rq| cx.io(rq)) {
        Some(Ok(io)) => elv.allow_merge(io, &bio),
        _ => false,
    };
    if !allowed {
        return Err(bio);
    }
    let Some(rq) = elv.request_mut(key) else {
        return Err(bio);
    };
    cx.merge_bio(rq, bio)?;
    elv.request_merged(cx, key, kind);
    if let Some(other) = elv.next_request(cx, key, kind) {
        let (into, from) = match kind {
            MergeKind::Back => (key, other),
            MergeKind::Front => (other, key),
        };
        merge_held(elv, cx, into, from);
    }
    Ok(())
}

/// Appends held request `from` to held request `into` when the queue's rules allow,
/// through the hooks; `from` goes back to the elevator if the merge fails after all.
fn merge_held<E: HeldRequests + ?Sized>(elv: &mut E, cx: &ElvCx<'_>, into: usize, from: usize) {
    let fits = match (elv.request(into), elv.request(from)) {
        (Some(a), Some(b)) => cx.can_append(a, b),
        _ => false,
    };
    if !fits {
        return;
    }
    let Some(from_rq) = elv.take_request(from) else {
        return;
    };
    let back = match elv.request_mut(into) {
        Some(into_rq) => cx.merge_requests(into_rq, from_rq).err(),
        None => Some(from_rq),
    };
    match back {
        None => elv.requests_merged(cx, into, from),
        Some(rq) => elv.insert_request(cx, rq, false),
    }
}
