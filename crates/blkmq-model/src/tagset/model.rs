//! The reference model: who holds which tag of which bitmap, who is active where, and what
//! the documentation says an allocation may get given that.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use blkmq_sbitmap::SbitmapError;

use super::bios::{BioModel, Book};
use blkmq_core::TagError;
use blkmq_core::{Rq, RqState};

/// The most waiters a wake-up batch wakes (`blkmq_sbitmap::MAX_WAKE_BATCH`).
const MAX_WAKE_BATCH: usize = blkmq_sbitmap::MAX_WAKE_BATCH;
/// Wait queues of a bitmap (`blkmq_sbitmap::WAIT_QUEUES`).
const WAIT_QUEUES: usize = blkmq_sbitmap::WAIT_QUEUES;

/// A model request's identity, unique within a run.
pub(super) type ReqId = u64;

/// The documented wake batch: `clamp(min(usable, min_shallow_depth) / 8, 1, 8)`.
pub(super) fn wake_batch(usable: usize, min_shallow_depth: usize) -> usize {
    (usable.min(min_shallow_depth) / WAIT_QUEUES).clamp(1, MAX_WAKE_BATCH)
}

/// The bits per word of a bitmap of `depth` bits built with the default word size: the
/// geometry a shallow allocation's per-word shares depend on.
pub(super) fn default_bits_per_word(depth: usize) -> usize {
    blkmq_sbitmap::Sbitmap::new(depth.max(1)).map_or(1, |m| m.bits_per_word())
}

/// The configuration, reduced into range.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setup {
    /// Tags per map at creation, reserved included.
    pub(super) depth: usize,
    pub(super) reserved: usize,
    pub(super) hw_queues: usize,
    pub(super) shared_tags: bool,
    pub(super) round_robin: bool,
    /// Queue slots.
    pub(super) slots: usize,
    pub(super) max_queues: usize,
    pub(super) cpus: usize,
    /// Room in the set's bio pool.
    pub(super) bio_capacity: usize,
    /// The bits per word of a driver map's normal bitmap.
    pub(super) driver_bpw: usize,
}

impl Setup {
    pub(super) fn nr_maps(&self) -> usize {
        if self.shared_tags { 1 } else { self.hw_queues }
    }

    /// The map serving `hctx`, as `TagSet::map_index` picks it (even for a bad `hctx`).
    pub(super) fn map_index(&self, hctx: usize) -> usize {
        if self.nr_maps() == 1 { 0 } else { hctx }
    }
}

/// Which preallocated request array (and its bitmaps) a tag belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Pool {
    /// Driver map `map` of the set.
    Driver { map: usize },
    /// Map `map` of the scheduler tags of queue slot `queue`, attached as `epoch`.
    Sched {
        queue: usize,
        epoch: u64,
        map: usize,
    },
}

impl Pool {
    pub(super) fn map(self) -> usize {
        match self {
            Pool::Driver { map } | Pool::Sched { map, .. } => map,
        }
    }
}

/// One bitmap: a pool's reserved or normal tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Bitmap {
    pub(super) pool: Pool,
    pub(super) reserved: bool,
}

/// The tags an allocation may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Region {
    pub(super) bitmap: Bitmap,
    /// A shallow limit on the normal tags (already checked against the minimum).
    pub(super) shallow: Option<usize>,
}

/// What an allocation attempt must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// Fail with this error.
    Fail(TagError),
    /// Find nothing (NOWAIT: `WouldBlock`; async: pending; driver tag: `false`).
    Block,
    /// Get a tag of `region`; `counted` towards the queue's fair share.
    Get { region: Region, counted: bool },
}

/// What is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    Reserved,
    Normal(Option<usize>),
}

/// A driver map.
pub(super) struct DriverMap {
    /// Tag -> the request holding it as its driver tag.
    pub(super) held: BTreeMap<usize, ReqId>,
    /// The wake batch of the normal bitmap.
    pub(super) wake_batch: usize,
}

/// A queue's scheduler tags.
pub(super) struct SchedModel {
    pub(super) epoch: u64,
    /// `nr_requests` at attach: the most it may grow back to.
    pub(super) initial: usize,
    /// `nr_requests` now.
    pub(super) nr: usize,
    pub(super) min_shallow: usize,
    /// Bits per word of the normal bitmaps.
    pub(super) bpw: usize,
    /// Per map: tag -> request.
    pub(super) held: Vec<BTreeMap<usize, ReqId>>,
    pub(super) wake_batch: usize,
}

/// A queue slot's attached queue.
pub(super) struct QueueModel {
    /// Counted active on each driver map.
    pub(super) active: Vec<bool>,
    pub(super) sched: Option<SchedModel>,
}

/// A request out.
pub(super) struct ReqModel {
    pub(super) id: ReqId,
    pub(super) queue: usize,
    pub(super) hctx: usize,
    /// The token; `None` only for a request whose token was lost (an orphan), which stays
    /// out until its queue is dropped and reclaims it. A refused free or completion hands
    /// the token back, so no call of the model makes one.
    pub(super) rq: Option<Rq>,
    /// The array that owns the request.
    pub(super) pool: Pool,
    /// Its tag there.
    pub(super) tag: usize,
    /// Its driver tag (on driver map `pool.map()`), if it holds one.
    pub(super) driver_tag: Option<usize>,
    /// Whether the driver tag counts towards the fair share.
    pub(super) counted: bool,
    pub(super) bios: Vec<BioModel>,
    pub(super) state: RqState,
    pub(super) generation: u64,
    /// The deadline `start` gave it, once started.
    pub(super) deadline: Option<u64>,
}

impl ReqModel {
    /// The token of a request that still has one.
    pub(super) fn token(&mut self) -> &mut Rq {
        self.rq.as_mut().expect("a request with its token")
    }
}

/// The most stale tokens a run keeps.
pub(super) const MAX_STALE: usize = 16;

/// The whole model.
pub(super) struct World {
    pub(super) setup: Setup,
    /// Driver depth now, reserved included.
    pub(super) depth: usize,
    pub(super) driver: Vec<DriverMap>,
    pub(super) queues: Vec<Option<QueueModel>>,
    /// Requests out, in allocation order.
    pub(super) reqs: Vec<ReqModel>,
    pub(super) next_req: ReqId,
    pub(super) next_epoch: u64,
    /// The generation each request (by pool and tag) last showed.
    pub(super) generations: BTreeMap<(Pool, usize), u64>,
    /// The last deadline each request (by pool and tag) was given.
    pub(super) deadlines: BTreeMap<(Pool, usize), u64>,
    pub(super) book: Book,
    /// The run's clock, for `start`.
    pub(super) now: u64,
    /// Tokens of requests a dropped queue reclaimed: no queue may accept them again.
    pub(super) stale: Vec<Rq>,
}

impl World {
    pub(super) fn new(setup: Setup) -> Self {
        let normal = setup.depth - setup.reserved;
        Self {
            setup,
            depth: setup.depth,
            driver: (0..setup.nr_maps())
                .map(|_| DriverMap {
                    held: BTreeMap::new(),
                    wake_batch: wake_batch(normal, usize::MAX),
                })
                .collect(),
            queues: (0..setup.slots).map(|_| None).collect(),
            reqs: Vec::new(),
            next_req: 0,
            next_epoch: 0,
            generations: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            book: Book::new(),
            now: 0,
            stale: Vec::new(),
        }
    }

    /// The requests that still have their tokens, by position.
    pub(super) fn live(&self) -> Vec<usize> {
        (0..self.reqs.len())
            .filter(|&i| self.reqs[i].rq.is_some())
            .collect()
    }

    pub(super) fn attached(&self) -> usize {
        self.queues.iter().flatten().count()
    }

    pub(super) fn is_shared(&self) -> bool {
        self.attached() > 1
    }

    pub(super) fn queue(&self, q: usize) -> &QueueModel {
        self.queues[q].as_ref().expect("an attached queue")
    }

    pub(super) fn sched(&self, q: usize) -> Option<&SchedModel> {
        self.queues[q].as_ref().and_then(|m| m.sched.as_ref())
    }

    pub(super) fn sched_pool(&self, q: usize, map: usize) -> Option<Pool> {
        self.sched(q).map(|s| Pool::Sched {
            queue: q,
            epoch: s.epoch,
            map,
        })
    }

    /// Queues counted active on driver map `m`.
    pub(super) fn active_queues(&self, m: usize) -> usize {
        self.queues.iter().flatten().filter(|q| q.active[m]).count()
    }

    /// Driver tags of queue `q` on map `m` that count towards its fair share.
    pub(super) fn in_flight(&self, q: usize, m: usize) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.queue == q && r.pool.map() == m && r.counted && r.driver_tag.is_some())
            .count()
    }

    /// `max(ceil(normal depth / users), 4)`.
    pub(super) fn fair_share(&self, users: usize) -> usize {
        (self.depth - self.setup.reserved)
            .div_ceil(users.max(1))
            .max(4)
    }

    /// What `TagSet::fair_share` reports for map `m`.
    pub(super) fn reported_fair_share(&self, m: usize) -> usize {
        if self.is_shared() {
            self.fair_share(self.active_queues(m))
        } else {
            self.depth - self.setup.reserved
        }
    }

    /// Normal tags of `pool` allocations may use now.
    pub(super) fn normal_depth(&self, pool: Pool) -> usize {
        match pool {
            Pool::Driver { .. } => self.depth - self.setup.reserved,
            Pool::Sched { queue, .. } => self
                .sched(queue)
                .map_or(0, |s| s.nr)
                .saturating_sub(self.setup.reserved),
        }
    }

    /// Normal tags of `pool` at creation.
    pub(super) fn normal_capacity(&self, pool: Pool) -> usize {
        match pool {
            Pool::Driver { .. } => self.setup.depth - self.setup.reserved,
            Pool::Sched { queue, .. } => self
                .sched(queue)
                .map_or(0, |s| s.initial)
                .saturating_sub(self.setup.reserved),
        }
    }

    /// All tags of `pool` at creation (the length of its request array).
    pub(super) fn pool_capacity(&self, pool: Pool) -> usize {
        self.normal_capacity(pool) + self.setup.reserved
    }

    fn bits_per_word(&self, pool: Pool) -> usize {
        match pool {
            Pool::Driver { .. } => self.setup.driver_bpw,
            Pool::Sched { queue, .. } => self.sched(queue).map_or(1, |s| s.bpw),
        }
    }

    pub(super) fn held(&self, pool: Pool) -> &BTreeMap<usize, ReqId> {
        match pool {
            Pool::Driver { map } => &self.driver[map].held,
            Pool::Sched { queue, map, .. } => &self.sched(queue).expect("scheduler tags").held[map],
        }
    }

    pub(super) fn held_mut(&mut self, pool: Pool) -> &mut BTreeMap<usize, ReqId> {
        match pool {
            Pool::Driver { map } => &mut self.driver[map].held,
            Pool::Sched { queue, map, .. } => {
                &mut self.queues[queue]
                    .as_mut()
                    .and_then(|q| q.sched.as_mut())
                    .expect("scheduler tags")
                    .held[map]
            }
        }
    }

    /// The wake batch of `bitmap`.
    pub(super) fn wake_batch_of(&self, bitmap: Bitmap) -> usize {
        if bitmap.reserved {
            return wake_batch(self.setup.reserved, usize::MAX);
        }
        match bitmap.pool {
            Pool::Driver { map } => self.driver[map].wake_batch,
            Pool::Sched { queue, .. } => self.sched(queue).map_or(1, |s| s.wake_batch),
        }
    }

    /// Whether `tag` lies in `region`: below the reserved count for reserved tags; else among
    /// the normal tags below the current depth and, under a shallow limit `d`, within its
    /// word's share — word `i` covering normal bits `[b, e)` may use its low
    /// `floor(e * d / depth) - floor(b * d / depth)` bits (`Sbitmap::get_shallow`).
    pub(super) fn allowed(&self, region: Region, tag: usize) -> bool {
        let reserved = self.setup.reserved;
        if region.bitmap.reserved {
            return tag < reserved;
        }
        let Some(bit) = tag.checked_sub(reserved) else {
            return false;
        };
        let depth = self.normal_depth(region.bitmap.pool);
        if bit >= depth {
            return false;
        }
        match region.shallow {
            Some(d) if d < depth => {
                let bpw = self.bits_per_word(region.bitmap.pool);
                let word = bit / bpw;
                let begin = (word * bpw) as u64;
                let end = ((word + 1) * bpw).min(depth) as u64;
                let (depth, d) = (depth as u64, d as u64);
                let share = (end * d / depth - begin * d / depth) as usize;
                bit - word * bpw < share
            }
            _ => true,
        }
    }

    /// Whether some tag of `region` is free.
    pub(super) fn has_free(&self, region: Region) -> bool {
        let held = self.held(region.bitmap.pool);
        let end = self.setup.reserved + self.normal_depth(region.bitmap.pool);
        (0..end).any(|tag| self.allowed(region, tag) && !held.contains_key(&tag))
    }

    /// A shallow limit the bitmap refuses: below its declared minimum (none is declared on
    /// driver maps, so every limit below their capacity is refused) and below its capacity.
    fn check_shallow(&self, pool: Pool, shallow: Option<usize>) -> Result<(), TagError> {
        let Some(s) = shallow else {
            return Ok(());
        };
        let min = match pool {
            Pool::Driver { .. } => usize::MAX,
            Pool::Sched { queue, .. } => self.sched(queue).map_or(usize::MAX, |s| s.min_shallow),
        };
        if s < self.normal_capacity(pool) && s < min {
            return Err(TagError::Bitmap(SbitmapError::ShallowBelowMinimum {
                shallow_depth: s,
                min_shallow_depth: min,
            }));
        }
        Ok(())
    }

    /// `Block` or `Get` of `region`, by whether it has a free tag.
    fn get_or_block(&self, region: Region, counted: bool) -> Expect {
        if self.has_free(region) {
            Expect::Get { region, counted }
        } else {
            Expect::Block
        }
    }

    /// Counts queue `q` active on map `m` (`mark_active`), which resizes the wake batch.
    fn mark_active(&mut self, q: usize, m: usize) {
        let queue = self.queues[q].as_mut().expect("an attached queue");
        if queue.active[m] {
            return;
        }
        queue.active[m] = true;
        self.users_changed(m);
    }

    /// Counts queue `q` idle on map `m`; whether it was active.
    pub(super) fn deactivate(&mut self, q: usize, m: usize) -> bool {
        let queue = self.queues[q].as_mut().expect("an attached queue");
        if !queue.active[m] {
            return false;
        }
        queue.active[m] = false;
        self.users_changed(m);
        true
    }

    /// The normal bitmap's wake batch follows the share of its active users.
    fn users_changed(&mut self, m: usize) {
        let users = self.active_queues(m).max(1);
        let share = (self.depth - self.setup.reserved).div_ceil(users);
        self.driver[m].wake_batch = wake_batch(share, usize::MAX);
    }

    /// A driver tag for queue `q` on map `m` (`get_driver_tag_raw`), with its side effect: in
    /// a shared set a normal attempt marks the queue active first, whatever comes of it.
    pub(super) fn predict_driver(&mut self, q: usize, m: usize, want: Want) -> Expect {
        let pool = Pool::Driver { map: m };
        match want {
            Want::Reserved => {
                if self.setup.reserved == 0 {
                    return Expect::Fail(TagError::NoReservedTags);
                }
                let region = Region {
                    bitmap: Bitmap {
                        pool,
                        reserved: true,
                    },
                    shallow: None,
                };
                self.get_or_block(region, false)
            }
            Want::Normal(Some(_)) => Expect::Fail(TagError::NoScheduler),
            Want::Normal(shallow) => {
                let region = Region {
                    bitmap: Bitmap {
                        pool,
                        reserved: false,
                    },
                    shallow,
                };
                if !self.is_shared() {
                    if let Err(e) = self.check_shallow(pool, shallow) {
                        return Expect::Fail(e);
                    }
                    return self.get_or_block(region, false);
                }
                self.mark_active(q, m);
                let users = self.active_queues(m);
                if users > 1 && self.in_flight(q, m) >= self.fair_share(users) {
                    return Expect::Block;
                }
                if let Err(e) = self.check_shallow(pool, shallow) {
                    return Expect::Fail(e);
                }
                self.get_or_block(region, true)
            }
        }
    }

    /// One allocation attempt of queue `q` (`try_alloc`), side effects included.
    pub(super) fn predict_alloc(&mut self, q: usize, hctx: usize, want: Want) -> Expect {
        let hw_queues = self.setup.hw_queues;
        if hctx >= hw_queues {
            return Expect::Fail(TagError::NoSuchHwQueue {
                hctx,
                nr_hw_queues: hw_queues,
            });
        }
        let m = self.setup.map_index(hctx);
        let Some(pool) = self.sched_pool(q, m) else {
            return self.predict_driver(q, m, want);
        };
        match want {
            Want::Reserved => {
                if self.setup.reserved == 0 {
                    return Expect::Fail(TagError::NoReservedTags);
                }
                let region = Region {
                    bitmap: Bitmap {
                        pool,
                        reserved: true,
                    },
                    shallow: None,
                };
                self.get_or_block(region, false)
            }
            Want::Normal(shallow) => {
                if let Err(e) = self.check_shallow(pool, shallow) {
                    return Expect::Fail(e);
                }
                let region = Region {
                    bitmap: Bitmap {
                        pool,
                        reserved: false,
                    },
                    shallow,
                };
                self.get_or_block(region, false)
            }
        }
    }

    /// The bitmap an allocation of queue `q` waits on (`wait_queue`).
    pub(super) fn wait_bitmap(&self, q: usize, hctx: usize, want: Want) -> Bitmap {
        let m = self.setup.map_index(hctx);
        let pool = self.sched_pool(q, m).unwrap_or(Pool::Driver { map: m });
        Bitmap {
            pool,
            reserved: want == Want::Reserved,
        }
    }

    /// Checks a tag an attempt expected to `Get` got and records who holds it.
    pub(super) fn take(
        &mut self,
        region: Region,
        tag: usize,
        id: ReqId,
    ) -> Result<(), alloc::string::String> {
        let pool = region.bitmap.pool;
        let capacity = self.pool_capacity(pool);
        ensure!(
            tag < capacity,
            "tag {tag} handed out of a pool of {capacity} ({region:?})"
        );
        if let Some(holder) = self.held(pool).get(&tag) {
            return Err(alloc::format!(
                "tag {tag} of {pool:?} handed out twice (request {holder} holds it)"
            ));
        }
        ensure!(
            self.allowed(region, tag),
            "tag {tag} lies outside {region:?} (reserved {}, normal depth {})",
            self.setup.reserved,
            self.normal_depth(pool)
        );
        self.held_mut(pool).insert(tag, id);
        Ok(())
    }

    /// A new request's identity.
    pub(super) fn next_id(&mut self) -> ReqId {
        self.next_req += 1;
        self.next_req
    }

    /// Bio pool slots in use: every bio of a request but its first takes one.
    pub(super) fn bio_slots_in_use(&self) -> usize {
        self.reqs
            .iter()
            .map(|r| r.bios.len().saturating_sub(1))
            .sum()
    }

    pub(super) fn bio_slots_free(&self) -> usize {
        self.setup.bio_capacity - self.bio_slots_in_use()
    }

    /// Forgets request `i`'s tags (the core freed them) and returns the bitmaps freed.
    pub(super) fn release(&mut self, i: usize) -> (ReqModel, Vec<Bitmap>) {
        let req = self.reqs.remove(i);
        let mut freed = Vec::new();
        let reserved = self.setup.reserved;
        if let Some(tag) = req.driver_tag {
            let pool = Pool::Driver {
                map: req.pool.map(),
            };
            self.driver[req.pool.map()].held.remove(&tag);
            freed.push(Bitmap {
                pool,
                reserved: tag < reserved,
            });
        }
        if let Pool::Sched { .. } = req.pool {
            self.held_mut(req.pool).remove(&req.tag);
            freed.push(Bitmap {
                pool: req.pool,
                reserved: req.tag < reserved,
            });
        }
        (req, freed)
    }

    /// Drops request `i`'s driver tag (scheduler requests only).
    pub(super) fn release_driver_tag(&mut self, i: usize) -> Option<Bitmap> {
        let reserved = self.setup.reserved;
        let req = &mut self.reqs[i];
        let tag = req.driver_tag.take()?;
        req.counted = false;
        let map = req.pool.map();
        self.driver[map].held.remove(&tag);
        Some(Bitmap {
            pool: Pool::Driver { map },
            reserved: tag < reserved,
        })
    }
}
