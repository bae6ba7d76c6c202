//! Executes ops against a real tag set and the model, checking the tag layer's promises.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

use super::model::{
    Bitmap, Expect, MAX_STALE, Pool, QueueModel, Region, ReqModel, SchedModel, Setup, Want, World,
    default_bits_per_word, wake_batch,
};
use super::verify::{payload, verify};
use super::{
    AllocKind, BioSpec, Config, Failure, ForeignCall, HctxCall, MAX_ASYNC_FREES, MAX_MODEL_CPUS,
    MAX_MODEL_DEPTH, MAX_MODEL_HW_QUEUES, MAX_MODEL_QUEUES, Op, Stage, TestPlatform,
};
use crate::sbitmap::WakeCount;

use blkmq_core::RequestInit;
use blkmq_core::Status;
use blkmq_core::{Alloc, QueueTags};
use blkmq_core::{ConfigError, TagError};
use blkmq_core::{DEFAULT_MAX_QUEUES, DEFAULT_TIMEOUT_NS, MAX_SCHED_DEPTH, TagSet, TagSetFlags};
use blkmq_core::{Rq, RqState};

pub(super) type Set = TagSet<u32, TestPlatform>;
pub(super) type Queue = QueueTags<u32, TestPlatform>;

/// The most requests one [`Op::AllocBatch`] asks for, plus one.
const BATCH_RANGE: usize = 10;

/// The status the runner ends a bio with that the core handed back (a refused merge).
const HANDED_BACK: Status = Status::Resource;

/// The configuration, reduced into range.
fn reduce(config: &Config) -> Setup {
    let depth = 1 + usize::from(config.depth) % MAX_MODEL_DEPTH;
    let reserved = usize::from(config.reserved) % depth.min(4);
    Setup {
        depth,
        reserved,
        hw_queues: 1 + usize::from(config.hw_queues) % MAX_MODEL_HW_QUEUES,
        shared_tags: config.shared_tags,
        round_robin: config.round_robin,
        slots: 1 + usize::from(config.queues) % MAX_MODEL_QUEUES,
        max_queues: config.max_queues.map_or(DEFAULT_MAX_QUEUES, |m| {
            1 + usize::from(m) % MAX_MODEL_QUEUES
        }),
        cpus: 1 + usize::from(config.cpus) % MAX_MODEL_CPUS,
        bio_capacity: config.bio_slots.map_or(4 * depth, |s| usize::from(s) % 17),
        driver_bpw: default_bits_per_word(depth - reserved),
    }
}

/// Checks the `init_request` calls of one build: one per tag of each of `nr_maps` maps.
fn check_inits(
    inits: &[RequestInit],
    nr_maps: usize,
    depth: usize,
    scheduler: bool,
) -> Result<(), String> {
    ensure!(
        inits.len() == nr_maps * depth,
        "init_request ran {} times for {nr_maps} maps of {depth}",
        inits.len()
    );
    let seen: BTreeSet<(usize, usize)> = inits.iter().map(|i| (i.map, i.tag)).collect();
    ensure!(
        seen.len() == inits.len()
            && inits
                .iter()
                .all(|i| i.map < nr_maps && i.tag < depth && i.scheduler == scheduler),
        "init_request saw {inits:?} for {nr_maps} maps of {depth} (scheduler {scheduler})"
    );
    Ok(())
}

/// Picks two distinct elements of a slice mutably.
fn two_mut<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two distinct elements");
    if a < b {
        let (left, right) = items.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = items.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

/// Records a request an attempt that expected a tag of `region` got.
fn record(
    queue: &Queue,
    world: &mut World,
    q: usize,
    hctx: usize,
    region: Region,
    counted: bool,
    rq: Rq,
) -> Result<(), String> {
    let tag = rq.tag() as usize;
    let id = world.next_id();
    world.take(region, tag, id)?;
    let pool = region.bitmap.pool;
    let request = queue
        .request(&rq)
        .map_err(|e| format!("request() of a fresh {rq:?}: {e:?}"))?;
    let generation = request.generation();
    if let Some(&last) = world.generations.get(&(pool, tag)) {
        ensure!(
            generation != last,
            "tag {tag} of {pool:?} allocated again with the same generation {generation}"
        );
    }
    world.generations.insert((pool, tag), generation);
    let driver_tag = match pool {
        Pool::Driver { .. } => Some(tag),
        Pool::Sched { .. } => None,
    };
    world.reqs.push(ReqModel {
        id,
        queue: q,
        hctx,
        rq: Some(rq),
        pool,
        tag,
        driver_tag,
        counted,
        bios: Vec::new(),
        state: RqState::Idle,
        generation,
        deadline: None,
    });
    if counted {
        let m = pool.map();
        let users = world.active_queues(m);
        let in_flight = world.in_flight(q, m);
        ensure!(
            users <= 1 || in_flight <= world.fair_share(users),
            "queue {q} holds {in_flight} counted tags of map {m}, over its share {} of {users} \
             active queues",
            world.fair_share(users)
        );
    }
    Ok(())
}

/// Checks one allocation result against what the model expected, recording what it got.
fn settle_alloc(
    queue: &Queue,
    world: &mut World,
    q: usize,
    hctx: usize,
    expect: Expect,
    result: Result<Rq, TagError>,
) -> Result<(), String> {
    match (expect, result) {
        (Expect::Fail(e), Err(got)) if e == got => Ok(()),
        (Expect::Block, Err(TagError::WouldBlock)) => Ok(()),
        (Expect::Get { region, counted }, Ok(rq)) => {
            record(queue, world, q, hctx, region, counted, rq)
        }
        (expect, result) => Err(format!("alloc: expected {expect:?}, got {result:?}")),
    }
}

/// Checks one poll of an asynchronous allocation; returns whether it is done.
fn settle_poll(
    queue: &Queue,
    world: &mut World,
    q: usize,
    hctx: usize,
    expect: Expect,
    poll: Poll<Result<Rq, TagError>>,
) -> Result<bool, String> {
    match (expect, poll) {
        (Expect::Fail(e), Poll::Ready(Err(got))) if e == got => Ok(true),
        (Expect::Block, Poll::Pending) => Ok(false),
        (Expect::Get { region, counted }, Poll::Ready(Ok(rq))) => {
            record(queue, world, q, hctx, region, counted, rq)?;
            Ok(true)
        }
        (expect, poll) => Err(format!("poll: expected {expect:?}, got {poll:?}")),
    }
}

/// Frees (or, with a status, completes) request `i`; returns the bitmaps it gave tags back to.
fn free_at(
    queues: &[Option<Queue>],
    world: &mut World,
    i: usize,
    status: Option<Status>,
) -> Result<Vec<Bitmap>, String> {
    let (req, freed) = world.release(i);
    let queue = queues[req.queue].as_ref().expect("a request's queue");
    world
        .book
        .expect_ends(&req.bios, status.unwrap_or(Status::IoErr));
    let id = req.id;
    let rq = req.rq.expect("a request with its token");
    let result = match status {
        Some(status) => queue.complete(rq, status),
        None => queue.free(rq),
    };
    ensure!(result.is_ok(), "freeing request {id}: {result:?}");
    Ok(freed)
}

/// Whether request `r` holds a tag of `bitmap`.
fn holds(world: &World, r: &ReqModel, bitmap: Bitmap) -> bool {
    let reserved = world.setup.reserved;
    match bitmap.pool {
        Pool::Driver { map } => r
            .driver_tag
            .is_some_and(|t| r.pool.map() == map && (t < reserved) == bitmap.reserved),
        pool => r.pool == pool && (r.tag < reserved) == bitmap.reserved,
    }
}

/// The token [`Runner::foreign`] picked: request `live`'s, or else stale token `stale`.
fn token_of(world: &mut World, live: Option<usize>, stale: usize) -> &mut Rq {
    match live {
        Some(i) => world.reqs[i].token(),
        None => &mut world.stale[stale],
    }
}

/// Queue slot `q`'s model of `mark_idle` on map `m`.
fn model_mark_idle(world: &mut World, q: usize, m: usize) -> bool {
    world.in_flight(q, m) == 0 && world.deactivate(q, m)
}

/// Executes ops against one tag set and the model.
pub(super) struct Runner {
    // Dropped in this order: the queues and the set end their bios before the model's book
    // stops listening.
    queues: Vec<Option<Queue>>,
    set: Arc<Set>,
    world: World,
}

impl Runner {
    /// Builds the set and attaches the queues `config` describes.
    pub(super) fn build(config: &Config) -> Result<Self, Failure> {
        let fail = |message| Failure {
            stage: Stage::Setup,
            message,
        };
        let setup = reduce(config);
        let mut flags = TagSetFlags::empty();
        if setup.shared_tags {
            flags |= TagSetFlags::SHARED_HOST_TAGS;
        }
        if setup.round_robin {
            flags |= TagSetFlags::ROUND_ROBIN;
        }
        let mut builder = TagSet::builder(setup.depth)
            .hw_queues(setup.hw_queues)
            .reserved(setup.reserved)
            .flags(flags)
            .max_queues(setup.max_queues);
        if let Some(slots) = config.bio_slots {
            builder = builder.bio_slots(usize::from(slots) % 17);
        }
        let mut inits = Vec::new();
        let set = builder
            .build(TestPlatform::new(setup.cpus), |init| {
                inits.push(init);
                payload(init.map, init.tag, init.scheduler)
            })
            .map_err(|e| fail(format!("build: {e:?}")))?;
        check_inits(&inits, setup.nr_maps(), setup.depth, false).map_err(fail)?;
        let mut runner = Self {
            queues: (0..setup.slots).map(|_| None).collect(),
            set,
            world: World::new(setup),
        };
        let nr_requests = setup.reserved + 1 + usize::from(config.nr_requests) % 16;
        for q in 0..setup.slots {
            runner.attach(q).map_err(fail)?;
            if config.schedulers & (1 << q) != 0 && runner.queues[q].is_some() {
                runner
                    .attach_scheduler(q, Some(nr_requests))
                    .map_err(fail)?;
            }
        }
        runner.check().map_err(fail)?;
        Ok(runner)
    }

    /// Runs `ops`, then frees everything.
    pub(super) fn run(mut self, ops: &[Op]) -> Result<(), Failure> {
        for (index, op) in ops.iter().enumerate() {
            self.world.now += 1_000;
            self.set.platform().advance(1_000);
            let any_order = matches!(op, Op::Detach { .. });
            self.step(op)
                .and_then(|()| self.world.book.settle(any_order))
                .and_then(|()| self.check())
                .map_err(|message| Failure {
                    stage: Stage::Op { index, op: *op },
                    message,
                })?;
        }
        self.teardown().map_err(|message| Failure {
            stage: Stage::Teardown,
            message,
        })
    }

    fn check(&self) -> Result<(), String> {
        verify(&self.set, &self.queues, &self.world)
    }

    fn slot(&self, queue: u8) -> usize {
        usize::from(queue) % self.world.setup.slots
    }

    fn hctx(&self, hctx: u8) -> usize {
        usize::from(hctx) % self.world.setup.hw_queues
    }

    fn cpu(&self, cpu: u8) -> usize {
        usize::from(cpu) % (self.world.setup.cpus + 2)
    }

    /// The request an `index` picks among those with their tokens, if any.
    fn pick(&self, index: u16) -> Option<usize> {
        let live = self.world.live();
        (!live.is_empty()).then(|| live[usize::from(index) % live.len()])
    }

    /// What `kind` asks of queue slot `q`: a shallow limit is reduced modulo the normal
    /// capacity of the bitmap it allocates from, plus 2.
    fn want(&self, q: usize, kind: AllocKind) -> Want {
        match kind {
            AllocKind::Normal => Want::Normal(None),
            AllocKind::Reserved => Want::Reserved,
            AllocKind::Shallow(s) => {
                let pool = self
                    .world
                    .sched_pool(q, 0)
                    .unwrap_or(Pool::Driver { map: 0 });
                let capacity = self.world.normal_capacity(pool);
                Want::Normal(Some(usize::from(s) % (capacity + 2)))
            }
        }
    }

    fn alloc_of(hctx: usize, cpu: usize, want: Want) -> Alloc {
        let alloc = Alloc::new(hctx, cpu);
        match want {
            Want::Reserved => alloc.reserved(),
            Want::Normal(None) => alloc,
            Want::Normal(Some(s)) => alloc.shallow(s),
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Alloc {
                queue,
                hctx,
                cpu,
                kind,
            } => self.alloc(self.slot(queue), self.hctx(hctx), self.cpu(cpu), kind),
            Op::AllocBatch {
                queue,
                hctx,
                cpu,
                kind,
                nr,
            } => self.alloc_batch(
                self.slot(queue),
                self.hctx(hctx),
                self.cpu(cpu),
                kind,
                usize::from(nr) % BATCH_RANGE,
            ),
            Op::AllocAsync {
                queue,
                hctx,
                cpu,
                kind,
                counting,
                frees,
                pick,
                idle,
            } => {
                let idle = idle.map(|i| self.slot(i));
                let frees = usize::from(frees) % (MAX_ASYNC_FREES + 1);
                self.alloc_async(
                    self.slot(queue),
                    self.hctx(hctx),
                    self.cpu(cpu),
                    kind,
                    counting,
                    (frees, usize::from(pick), idle),
                )
            }
            Op::Free { index } => match self.pick(index) {
                Some(i) => free_at(&self.queues, &mut self.world, i, None).map(|_| ()),
                None => Ok(()),
            },
            Op::Complete { index, status } => match self.pick(index) {
                Some(i) => {
                    let status = Status::ALL[usize::from(status) % Status::ALL.len()];
                    free_at(&self.queues, &mut self.world, i, Some(status)).map(|_| ())
                }
                None => Ok(()),
            },
            Op::GetDriverTag { index } => {
                self.pick(index).map_or(Ok(()), |i| self.get_driver_tag(i))
            }
            Op::PutDriverTag { index } => {
                self.pick(index).map_or(Ok(()), |i| self.put_driver_tag(i))
            }
            Op::Start { index } => self.pick(index).map_or(Ok(()), |i| self.start(i)),
            Op::Requeue { index } => self.pick(index).map_or(Ok(()), |i| self.requeue(i)),
            Op::TryComplete { index, stale } => self
                .pick(index)
                .map_or(Ok(()), |i| self.try_complete(i, stale)),
            Op::SetBio { index, bio } => self.pick(index).map_or(Ok(()), |i| self.set_bio(i, bio)),
            Op::AppendBio { index, bio } => self
                .pick(index)
                .map_or(Ok(()), |i| self.merge_bio(i, bio, false)),
            Op::PrependBio { index, bio } => self
                .pick(index)
                .map_or(Ok(()), |i| self.merge_bio(i, bio, true)),
            Op::MergeRequests { into, from } => self.merge_requests(into, from),
            Op::MarkIdle { queue, hctx } => self.mark_idle(self.slot(queue), self.hctx(hctx)),
            Op::UpdateDepth { depth } => self.update_depth(usize::from(depth)),
            Op::AttachScheduler { queue, nr_requests } => {
                let nr = nr_requests.map(|n| usize::from(n) % (self.world.setup.reserved + 20));
                self.attach_scheduler(self.slot(queue), nr)
            }
            Op::DetachScheduler { queue } => self.detach_scheduler(self.slot(queue)),
            Op::SetNrRequests { queue, nr_requests } => {
                self.set_nr_requests(self.slot(queue), usize::from(nr_requests))
            }
            Op::SetMinShallowDepth { queue, depth } => {
                self.set_min_shallow_depth(self.slot(queue), usize::from(depth))
            }
            Op::Attach { queue } => self.attach(self.slot(queue)),
            Op::Detach { queue } => self.detach(self.slot(queue)),
            Op::TagToRq { queue, hctx, tag } => {
                let hctx = usize::from(hctx) % (self.world.setup.hw_queues + 1);
                let tag = usize::from(tag) % (self.world.setup.depth + 2);
                self.tag_to_rq(self.slot(queue), hctx, tag)
            }
            Op::ForEachBusy {
                queue,
                hctx,
                stop_after,
            } => {
                let queue = queue.map(|q| self.slot(q));
                let hctx = hctx.map(|h| usize::from(h) % (self.world.setup.hw_queues + 1));
                self.for_each_busy(queue, hctx, usize::from(stop_after))
            }
            Op::Foreign { queue, index, call } => self.foreign(self.slot(queue), index, call),
            Op::BadHctx { queue, over, call } => {
                let hctx = self.world.setup.hw_queues + usize::from(over);
                self.bad_hctx(self.slot(queue), hctx, call)
            }
        }
    }

    // ----- allocation -----

    fn alloc(&mut self, q: usize, hctx: usize, cpu: usize, kind: AllocKind) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let want = self.want(q, kind);
        let expect = self.world.predict_alloc(q, hctx, want);
        let result = queue.alloc(&Self::alloc_of(hctx, cpu, want));
        settle_alloc(queue, &mut self.world, q, hctx, expect, result)
    }

    fn alloc_batch(
        &mut self,
        q: usize,
        hctx: usize,
        cpu: usize,
        kind: AllocKind,
        nr: usize,
    ) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let want = self.want(q, kind);
        let world = &mut self.world;
        let mut out = Vec::new();
        let result = queue.alloc_batch(&Self::alloc_of(hctx, cpu, want), nr, &mut out);
        if hctx >= world.setup.hw_queues {
            let expected = TagError::NoSuchHwQueue {
                hctx,
                nr_hw_queues: world.setup.hw_queues,
            };
            ensure!(
                result == Err(expected) && out.is_empty(),
                "alloc_batch on hctx {hctx}: {result:?} with {} requests, expected {expected:?}",
                out.len()
            );
            return Ok(());
        }
        // Round-robin driver tags go one at a time too: batches do not keep the order.
        let single = want != Want::Normal(None)
            || (world.sched(q).is_none() && (world.is_shared() || world.setup.round_robin));
        if single {
            // One allocation after another, stopping at the first that finds nothing.
            let got = out.len();
            for rq in out {
                let expect = world.predict_alloc(q, hctx, want);
                settle_alloc(queue, world, q, hctx, expect, Ok(rq))?;
            }
            return match result {
                Ok(n) => {
                    ensure!(n == got, "alloc_batch said {n}, but gave {got}");
                    if n < nr {
                        let expect = world.predict_alloc(q, hctx, want);
                        ensure!(
                            expect == Expect::Block,
                            "alloc_batch stopped at {n} of {nr}, but the model expected {expect:?}"
                        );
                    }
                    Ok(())
                }
                Err(e) => {
                    let expect = world.predict_alloc(q, hctx, want);
                    ensure!(
                        expect == Expect::Fail(e),
                        "alloc_batch failed with {e:?} after {got}, the model expected {expect:?}"
                    );
                    Ok(())
                }
            };
        }
        // One word's worth with one atomic operation, no fair sharing.
        let m = world.setup.map_index(hctx);
        let pool = world.sched_pool(q, m).unwrap_or(Pool::Driver { map: m });
        let region = Region {
            bitmap: Bitmap {
                pool,
                reserved: false,
            },
            shallow: None,
        };
        let got = out.len();
        ensure!(
            result == Ok(got),
            "alloc_batch({nr}) returned {result:?} with {got} requests"
        );
        if nr == 0 || !world.has_free(region) {
            ensure!(
                got == 0,
                "alloc_batch({nr}) got {got} (free {})",
                world.has_free(region)
            );
            return Ok(());
        }
        let bpw = match pool {
            Pool::Driver { .. } => world.setup.driver_bpw,
            Pool::Sched { .. } => world.sched(q).map_or(1, |s| s.bpw),
        };
        ensure!(
            (1..=nr.min(bpw)).contains(&got),
            "alloc_batch({nr}) got {got} requests from words of {bpw}"
        );
        let reserved = world.setup.reserved;
        let words: BTreeSet<usize> = out
            .iter()
            .map(|rq| (rq.tag() as usize).saturating_sub(reserved) / bpw)
            .collect();
        ensure!(
            words.len() == 1,
            "alloc_batch took tags of several words: {:?}",
            out.iter().map(Rq::tag).collect::<Vec<_>>()
        );
        for rq in out {
            record(queue, world, q, hctx, region, false, rq)?;
        }
        Ok(())
    }

    /// An asynchronous allocation, polled once, then again after each of `frees` frees and
    /// after an optional `mark_idle`; dropped if still pending.
    fn alloc_async(
        &mut self,
        q: usize,
        hctx: usize,
        cpu: usize,
        kind: AllocKind,
        counting: bool,
        (frees, pick, idle): (usize, usize, Option<usize>),
    ) -> Result<(), String> {
        if self.queues[q].is_none() {
            return Ok(());
        }
        let want = self.want(q, kind);
        let queues: &[Option<Queue>] = &self.queues;
        let world = &mut self.world;
        let queue = queues[q].as_ref().expect("checked above");
        let wakes = Arc::new(WakeCount::default());
        let waker = if counting {
            Waker::from(Arc::clone(&wakes))
        } else {
            Waker::noop().clone()
        };
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(queue.alloc_async(Self::alloc_of(hctx, cpu, want)));

        let expect = world.predict_alloc(q, hctx, want);
        let poll = future.as_mut().poll(&mut cx);
        if settle_poll(queue, world, q, hctx, expect, poll)? {
            return Ok(());
        }
        // Registered on `bitmap`: each free of it counts towards a wake-up.
        let bitmap = world.wait_bitmap(q, hctx, want);
        let mut seen = 0;
        let mut since = 0;
        let woken = |seen: usize| -> Result<bool, String> {
            let now = wakes.count();
            ensure!(
                now <= seen + 1,
                "woken {} times for one registration",
                now - seen
            );
            Ok(now > seen)
        };
        for round in 0..frees {
            let live = world.live();
            let candidates: Vec<usize> = live
                .iter()
                .copied()
                .filter(|&i| holds(world, &world.reqs[i], bitmap))
                .collect();
            let i = match (candidates.len(), live.len()) {
                (0, 0) => break,
                (0, n) => live[(pick + round) % n],
                (n, _) => candidates[(pick + round) % n],
            };
            let freed = free_at(queues, world, i, None)?;
            world.book.settle(false)?;
            if freed.contains(&bitmap) {
                since += 1;
            }
            let batch = world.wake_batch_of(bitmap);
            let was_woken = woken(seen)?;
            ensure!(
                !counting || was_woken || since < batch,
                "lost wake-up: {since} frees of {bitmap:?} (wake batch {batch}) since the \
                 allocation registered, and it was not woken"
            );
            let expect = world.predict_alloc(q, hctx, want);
            let poll = future.as_mut().poll(&mut cx);
            if settle_poll(queue, world, q, hctx, expect, poll)? {
                return Ok(());
            }
            if was_woken {
                // The wake-up took its entry: the poll registered anew.
                since = 0;
                seen = wakes.count();
            }
        }
        if let Some(iq) = idle {
            if let Some(idle_queue) = queues[iq].as_ref() {
                let m = world.setup.map_index(hctx);
                let expected = model_mark_idle(world, iq, m);
                let got = idle_queue.mark_idle(hctx);
                ensure!(
                    got == expected,
                    "mark_idle({hctx}) of queue {iq} while waiting: {got}, expected {expected}"
                );
                let was_woken = woken(seen)?;
                let everyone = got
                    && bitmap
                        == Bitmap {
                            pool: Pool::Driver { map: m },
                            reserved: false,
                        };
                ensure!(
                    !counting || was_woken || !everyone,
                    "queue {iq} went idle on map {m}, but the allocation waiting there was not \
                     woken"
                );
                let expect = world.predict_alloc(q, hctx, want);
                let poll = future.as_mut().poll(&mut cx);
                settle_poll(queue, world, q, hctx, expect, poll)?;
            }
        }
        // Still pending: dropped here, which withdraws it and changes nothing else.
        Ok(())
    }

    // ----- driver tags -----

    fn get_driver_tag(&mut self, i: usize) -> Result<(), String> {
        let world = &mut self.world;
        let (q, pool, tag, has) = {
            let r = &world.reqs[i];
            (r.queue, r.pool, r.tag, r.driver_tag.is_some())
        };
        let queue = self.queues[q].as_ref().expect("a request's queue");
        let expect = match pool {
            Pool::Driver { .. } => None,
            Pool::Sched { .. } if has => None,
            Pool::Sched { map, .. } => {
                let want = if tag < world.setup.reserved {
                    Want::Reserved
                } else {
                    Want::Normal(None)
                };
                Some(world.predict_driver(q, map, want))
            }
        };
        let result = queue.get_driver_tag(world.reqs[i].token());
        match (expect, result) {
            (None, Ok(true)) | (Some(Expect::Block), Ok(false)) => Ok(()),
            (Some(Expect::Get { region, counted }), Ok(true)) => {
                let driver_tag = queue
                    .request(world.reqs[i].token())
                    .map_err(|e| format!("request(): {e:?}"))?
                    .driver_tag() as usize;
                let id = world.reqs[i].id;
                world.take(region, driver_tag, id)?;
                let r = &mut world.reqs[i];
                r.driver_tag = Some(driver_tag);
                r.counted = counted;
                let m = pool.map();
                let users = world.active_queues(m);
                let in_flight = world.in_flight(q, m);
                ensure!(
                    !counted || users <= 1 || in_flight <= world.fair_share(users),
                    "queue {q} holds {in_flight} counted tags of map {m}, over its share of \
                     {users} active queues"
                );
                Ok(())
            }
            (expect, result) => Err(format!(
                "get_driver_tag: expected {expect:?}, got {result:?}"
            )),
        }
    }

    fn put_driver_tag(&mut self, i: usize) -> Result<(), String> {
        let world = &mut self.world;
        let r = &world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        let expected = match (r.pool, r.driver_tag) {
            (Pool::Driver { .. }, _) | (Pool::Sched { .. }, Some(_)) => Ok(()),
            (Pool::Sched { .. }, None) => Err(TagError::DriverTag),
        };
        let is_sched = matches!(r.pool, Pool::Sched { .. });
        let result = queue.put_driver_tag(world.reqs[i].token());
        ensure!(
            result == expected,
            "put_driver_tag: {result:?}, expected {expected:?}"
        );
        if is_sched && result.is_ok() {
            world.release_driver_tag(i);
        }
        Ok(())
    }

    // ----- life cycle -----

    fn start(&mut self, i: usize) -> Result<(), String> {
        let world = &mut self.world;
        let now = world.now;
        let r = &mut world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        let result = queue.start(r.token(), now);
        if r.state != RqState::Idle {
            // Only an idle request starts; the deadline is set all the same.
            let expected = Err(TagError::WrongState { state: r.state });
            ensure!(
                result == expected,
                "start: {result:?}, expected {expected:?}"
            );
            r.deadline = Some(now + DEFAULT_TIMEOUT_NS);
            world
                .deadlines
                .insert((r.pool, r.tag), now + DEFAULT_TIMEOUT_NS);
            return Ok(());
        }
        ensure!(result.is_ok(), "start: {result:?}");
        r.state = RqState::InFlight;
        // A start is a new dispatch: the generation moves on.
        r.generation += 1;
        r.deadline = Some(now + DEFAULT_TIMEOUT_NS);
        let key = (r.pool, r.tag);
        world.deadlines.insert(key, now + DEFAULT_TIMEOUT_NS);
        Ok(())
    }

    fn requeue(&mut self, i: usize) -> Result<(), String> {
        let r = &mut self.world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        let result = queue.requeue(r.token());
        if r.state != RqState::InFlight {
            let expected = Err(TagError::WrongState { state: r.state });
            ensure!(
                result == expected,
                "requeue: {result:?}, expected {expected:?}"
            );
            return Ok(());
        }
        ensure!(result.is_ok(), "requeue: {result:?}");
        r.state = RqState::Idle;
        Ok(())
    }

    fn try_complete(&mut self, i: usize, stale: bool) -> Result<(), String> {
        let r = &mut self.world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        let request = queue
            .request(r.token())
            .map_err(|e| format!("request(): {e:?}"))?;
        let generation = if stale {
            r.generation.wrapping_sub(1)
        } else {
            r.generation
        };
        let expected = !stale && r.state == RqState::InFlight;
        let got = request.try_complete(generation);
        ensure!(
            got == expected,
            "try_complete({generation}) of a request of generation {} in state {:?}: {got}",
            r.generation,
            r.state
        );
        if got {
            r.state = RqState::Complete;
            // The loser of the race.
            ensure!(
                !request.try_complete(generation),
                "try_complete succeeded twice"
            );
        }
        Ok(())
    }

    // ----- bios -----

    fn set_bio(&mut self, i: usize, spec: BioSpec) -> Result<(), String> {
        let world = &mut self.world;
        let (bio, model) = world.book.make(spec);
        let r = &mut world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        world.book.expect_ends(&r.bios, Status::IoErr);
        let result = queue.set_bio(r.token(), bio);
        ensure!(result.is_ok(), "set_bio: {result:?}");
        r.bios.clear();
        r.bios.push(model);
        world.book.hand_over(model.seq);
        Ok(())
    }

    /// `append_bio`, or with `front` `prepend_bio`.
    fn merge_bio(&mut self, i: usize, spec: BioSpec, front: bool) -> Result<(), String> {
        let world = &mut self.world;
        let (bio, model) = world.book.make(spec);
        let room = world.bio_slots_free() > 0;
        let r = &mut world.reqs[i];
        let queue = self.queues[r.queue].as_ref().expect("a request's queue");
        let accept = r.bios.is_empty() || room;
        let result = if front {
            queue.prepend_bio(r.token(), bio)
        } else {
            queue.append_bio(r.token(), bio)
        };
        match result {
            Ok(Ok(())) if accept => {
                if front {
                    r.bios.insert(0, model);
                } else {
                    r.bios.push(model);
                }
                world.book.hand_over(model.seq);
                Ok(())
            }
            Ok(Err(back)) if !accept => {
                ensure!(
                    world.book.seq_of(&back) == Some(model.seq),
                    "a refused merge handed back {back:?}, not the bio it was given"
                );
                world.book.end_returned(back, HANDED_BACK);
                Ok(())
            }
            result => Err(format!(
                "{}: {result:?}, expected {} ({} slots free)",
                if front { "prepend_bio" } else { "append_bio" },
                if accept { "Ok(Ok(()))" } else { "the bio back" },
                world.bio_slots_free()
            )),
        }
    }

    fn merge_requests(&mut self, into: u16, from: u16) -> Result<(), String> {
        let Some(i) = self.pick(into) else {
            return Ok(());
        };
        let world = &mut self.world;
        let q = world.reqs[i].queue;
        let others: Vec<usize> = world
            .live()
            .into_iter()
            .filter(|&j| j != i && world.reqs[j].queue == q)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let j = others[usize::from(from) % others.len()];
        let room = world.bio_slots_free() > 0;
        let queue = self.queues[q].as_ref().expect("a request's queue");
        let (a, b) = two_mut(&mut world.reqs, i, j);
        let expected = b.bios.is_empty() || a.bios.is_empty() || room;
        let result = queue.merge_requests(a.token(), b.token());
        ensure!(
            result == Ok(expected),
            "merge_requests of {} and {} bios: {result:?}, expected {expected} (room {room})",
            a.bios.len(),
            b.bios.len()
        );
        if expected {
            a.bios.append(&mut b.bios);
        }
        Ok(())
    }

    // ----- fair sharing and depth -----

    fn mark_idle(&mut self, q: usize, hctx: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let world = &mut self.world;
        let expected = if hctx < world.setup.hw_queues {
            model_mark_idle(world, q, world.setup.map_index(hctx))
        } else {
            false
        };
        let got = queue.mark_idle(hctx);
        ensure!(
            got == expected,
            "mark_idle({hctx}): {got}, expected {expected}"
        );
        Ok(())
    }

    fn update_depth(&mut self, depth: usize) -> Result<(), String> {
        let world = &mut self.world;
        let setup = world.setup;
        let depth = depth % (setup.depth + 2);
        let min = setup.reserved + 1;
        let expected = if (min..=setup.depth).contains(&depth) {
            Ok(())
        } else {
            Err(ConfigError::BadDepthUpdate {
                depth,
                min,
                max: setup.depth,
            })
        };
        let result = self.set.update_depth(depth);
        ensure!(
            result == expected,
            "update_depth({depth}): {result:?}, expected {expected:?}"
        );
        if result.is_ok() {
            world.depth = depth;
            for map in &mut world.driver {
                map.wake_batch = wake_batch(depth - setup.reserved, usize::MAX);
            }
        }
        Ok(())
    }

    // ----- scheduler tags -----

    fn attach_scheduler(&mut self, q: usize, nr: Option<usize>) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_mut() else {
            return Ok(());
        };
        let world = &mut self.world;
        let setup = world.setup;
        let nr_requests = nr.unwrap_or(2 * world.depth.min(128));
        let bad = ConfigError::BadNrRequests {
            nr_requests,
            max: MAX_SCHED_DEPTH,
        };
        let invalid =
            nr_requests == 0 || nr_requests > MAX_SCHED_DEPTH || nr_requests <= setup.reserved;
        let busy = world
            .sched(q)
            .is_some_and(|s| s.held.iter().any(|m| !m.is_empty()));
        let expected = if invalid {
            Err(bad)
        } else if busy {
            Err(ConfigError::SchedulerBusy)
        } else {
            Ok(())
        };
        let mut inits = Vec::new();
        let result = queue.attach_scheduler(nr, |init| {
            inits.push(init);
            payload(init.map, init.tag, init.scheduler)
        });
        ensure!(
            result == expected,
            "attach_scheduler({nr:?}): {result:?}, expected {expected:?}"
        );
        if result.is_err() {
            ensure!(
                inits.is_empty(),
                "a refused attach_scheduler still built requests"
            );
        }
        if result.is_err() {
            return Ok(());
        }
        check_inits(&inits, setup.nr_maps(), nr_requests, true)?;
        let epoch = world.next_epoch;
        world.next_epoch += 1;
        let normal = nr_requests - setup.reserved;
        world.queues[q].as_mut().expect("attached").sched = Some(SchedModel {
            epoch,
            initial: nr_requests,
            nr: nr_requests,
            // None declared until the elevator calls `set_min_shallow_depth`.
            min_shallow: usize::MAX,
            bpw: default_bits_per_word(normal),
            held: (0..setup.nr_maps()).map(|_| Default::default()).collect(),
            wake_batch: wake_batch(normal, usize::MAX),
        });
        Ok(())
    }

    fn detach_scheduler(&mut self, q: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_mut() else {
            return Ok(());
        };
        let world = &mut self.world;
        let expected = match world.sched(q) {
            None => Err(TagError::NoScheduler),
            Some(s) if s.held.iter().any(|m| !m.is_empty()) => Err(TagError::Busy),
            Some(_) => Ok(()),
        };
        let result = queue.detach_scheduler();
        ensure!(
            result == expected,
            "detach_scheduler: {result:?}, expected {expected:?}"
        );
        if result.is_ok() {
            world.queues[q].as_mut().expect("attached").sched = None;
        }
        Ok(())
    }

    fn set_nr_requests(&mut self, q: usize, nr: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let world = &mut self.world;
        let reserved = world.setup.reserved;
        let (nr, expected) = match world.sched(q) {
            None => (
                nr,
                Err(ConfigError::BadNrRequests {
                    nr_requests: nr,
                    max: MAX_SCHED_DEPTH,
                }),
            ),
            Some(s) => {
                let nr = nr % (s.initial + 2);
                let expected = if (reserved + 1..=s.initial).contains(&nr) {
                    Ok(())
                } else {
                    Err(ConfigError::BadDepthUpdate {
                        depth: nr,
                        min: reserved + 1,
                        max: s.initial,
                    })
                };
                (nr, expected)
            }
        };
        let result = queue.set_nr_requests(nr);
        ensure!(
            result == expected,
            "set_nr_requests({nr}): {result:?}, expected {expected:?}"
        );
        if result.is_ok() {
            let sched = world.queues[q]
                .as_mut()
                .and_then(|m| m.sched.as_mut())
                .expect("scheduler tags");
            sched.nr = nr;
            sched.wake_batch = wake_batch(nr - reserved, sched.min_shallow);
        }
        Ok(())
    }

    fn set_min_shallow_depth(&mut self, q: usize, depth: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let world = &mut self.world;
        let reserved = world.setup.reserved;
        let (depth, expected) = match world.sched(q) {
            None => (
                depth,
                Err(ConfigError::BadNrRequests {
                    nr_requests: 0,
                    max: MAX_SCHED_DEPTH,
                }),
            ),
            Some(s) => {
                // The limit is the normal depth: shallow limits count normal tags.
                let limit = s.nr - reserved;
                let depth = depth % (limit + 2);
                let expected = if depth == 0 || depth > limit {
                    Err(ConfigError::BadShallowDepth {
                        shallow_depth: depth,
                        depth: limit,
                    })
                } else {
                    Ok(())
                };
                (depth, expected)
            }
        };
        let result = queue.set_min_shallow_depth(depth);
        ensure!(
            result == expected,
            "set_min_shallow_depth({depth}): {result:?}, expected {expected:?}"
        );
        if result.is_ok() {
            let sched = world.queues[q]
                .as_mut()
                .and_then(|m| m.sched.as_mut())
                .expect("scheduler tags");
            sched.min_shallow = depth;
            sched.wake_batch = wake_batch(sched.nr - reserved, depth);
        }
        Ok(())
    }

    // ----- request queues -----

    fn attach(&mut self, q: usize) -> Result<(), String> {
        if self.queues[q].is_some() {
            return Ok(());
        }
        let world = &mut self.world;
        let max = world.setup.max_queues;
        let result = self.set.attach();
        match result {
            Ok(queue) if world.attached() < max => {
                self.queues[q] = Some(queue);
                world.queues[q] = Some(QueueModel {
                    active: alloc::vec![false; world.setup.nr_maps()],
                    sched: None,
                });
                Ok(())
            }
            Err(TagError::TooManyQueues { max: m }) if m == max && world.attached() >= max => {
                Ok(())
            }
            result => Err(format!(
                "attach with {} of {max} attached: {result:?}",
                world.attached()
            )),
        }
    }

    /// Drops the queue: every request it has out is freed, its bios ending with
    /// [`Status::IoErr`], and it no longer counts as active anywhere.
    fn detach(&mut self, q: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].take() else {
            return Ok(());
        };
        let world = &mut self.world;
        while let Some(i) = world.reqs.iter().position(|r| r.queue == q) {
            let (req, _) = world.release(i);
            world.book.expect_ends(&req.bios, Status::IoErr);
            // The token names a request that is free now, and may be allocated again by
            // anyone: kept, to check that no queue accepts it.
            if let Some(rq) = req.rq {
                if world.stale.len() == MAX_STALE {
                    // The oldest goes; a stale token holds nothing.
                    let _ = world.stale.remove(0);
                }
                world.stale.push(rq);
            }
        }
        for m in 0..world.setup.nr_maps() {
            world.deactivate(q, m);
        }
        world.queues[q] = None;
        drop(queue);
        Ok(())
    }

    // ----- lookups -----

    fn tag_to_rq(&mut self, q: usize, hctx: usize, tag: usize) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let world = &self.world;
        let expected = if hctx >= world.setup.hw_queues || tag >= world.setup.depth {
            None
        } else {
            let m = world.setup.map_index(hctx);
            world
                .reqs
                .iter()
                .find(|r| r.queue == q && r.pool.map() == m && r.driver_tag == Some(tag))
                .map(|r| (r.tag as u32, tag as u32, r.hctx))
        };
        let got = queue
            .tag_to_rq(hctx, tag as u32)
            .map(|r| (r.tag(), r.driver_tag(), r.hctx()));
        ensure!(
            got == expected,
            "tag_to_rq({hctx}, {tag}) gave (tag, driver tag, hctx) {got:?}, expected {expected:?}"
        );
        Ok(())
    }

    fn for_each_busy(
        &mut self,
        queue: Option<usize>,
        hctx: Option<usize>,
        stop_after: usize,
    ) -> Result<(), String> {
        let world = &self.world;
        let setup = world.setup;
        if queue.is_some_and(|q| self.queues[q].is_none()) {
            return Ok(());
        }
        // The set's iteration takes no hardware queue.
        let hctx = hctx.filter(|_| queue.is_some());
        // In iteration order: map by map, by driver tag (reserved tags first); each with its
        // queue's identity and its state.
        let ids: Vec<Option<u32>> = self
            .queues
            .iter()
            .map(|q| q.as_ref().map(|q| q.id()))
            .collect();
        let mut busy: Vec<(usize, u32, usize, u32, Option<u32>, RqState)> = world
            .reqs
            .iter()
            .filter(|r| queue.is_none_or(|q| r.queue == q))
            .filter(|r| {
                hctx.is_none_or(|h| r.hctx == h && (setup.nr_maps() == 1 || r.pool.map() == h))
            })
            .filter_map(|r| {
                r.driver_tag.map(|t| {
                    (
                        r.pool.map(),
                        t as u32,
                        r.hctx,
                        r.tag as u32,
                        ids[r.queue],
                        r.state,
                    )
                })
            })
            .collect();
        busy.sort_unstable_by_key(|b| (b.0, b.1));
        let stop_after = 1 + stop_after % (busy.len() + 2);
        let expected: Vec<(usize, u32, u32, Option<u32>, RqState)> = busy
            .iter()
            .take(stop_after)
            .map(|&(_, t, h, own, id, state)| (h, t, own, id, state))
            .collect();
        let mut seen = Vec::new();
        let mut visit = |b: blkmq_core::BusyRq<'_, u32>| {
            seen.push((b.hctx, b.tag, b.request.tag(), Some(b.queue), b.state));
            seen.len() < stop_after
        };
        match queue {
            None => self.set.for_each_busy(&mut visit),
            Some(q) => self.queues[q]
                .as_ref()
                .expect("checked above")
                .for_each_busy(hctx, &mut visit),
        }
        ensure!(
            seen == expected,
            "for_each_busy(queue {queue:?}, hctx {hctx:?}) stopping after {stop_after} saw \
             (hctx, tag, own tag, queue, state) {seen:?}, expected {expected:?}"
        );
        Ok(())
    }

    // ----- bad inputs -----

    fn foreign(&mut self, b: usize, index: u16, call: ForeignCall) -> Result<(), String> {
        let Some(queue) = self.queues[b].as_ref() else {
            return Ok(());
        };
        let world = &mut self.world;
        // Other queues' requests with their tokens, then the stale tokens.
        let theirs: Vec<usize> = world
            .live()
            .into_iter()
            .filter(|&i| world.reqs[i].queue != b)
            .collect();
        let n = theirs.len() + world.stale.len();
        if n == 0 {
            return Ok(());
        }
        let pick = usize::from(index) % n;
        let live = theirs.get(pick).copied();
        let stale = pick.saturating_sub(theirs.len());
        let whose = match live {
            Some(i) => format!("the token of a request of queue {}", world.reqs[i].queue),
            None => String::from("a stale token (its queue was dropped)"),
        };
        let own = world.live().into_iter().find(|&j| world.reqs[j].queue == b);
        // A bio the call refuses is dropped, never ended: it is not handed over.
        let bio = world
            .book
            .make(BioSpec {
                op: 0,
                sector: index,
                sectors: 8,
            })
            .0;
        let result: Result<(), TagError> = match call {
            ForeignCall::Request => queue.request(token_of(world, live, stale)).map(|_| ()),
            ForeignCall::Io => queue.io(token_of(world, live, stale)).map(|_| ()),
            ForeignCall::SetBio => queue.set_bio(token_of(world, live, stale), bio),
            ForeignCall::AppendBio => queue
                .append_bio(token_of(world, live, stale), bio)
                .map(|_| ()),
            ForeignCall::PrependBio => queue
                .prepend_bio(token_of(world, live, stale), bio)
                .map(|_| ()),
            ForeignCall::GetDriverTag => queue
                .get_driver_tag(token_of(world, live, stale))
                .map(|_| ()),
            ForeignCall::PutDriverTag => queue.put_driver_tag(token_of(world, live, stale)),
            ForeignCall::Start => {
                let now = world.now;
                queue.start(token_of(world, live, stale), now)
            }
            ForeignCall::Requeue => queue.requeue(token_of(world, live, stale)),
            ForeignCall::ForEachBio => {
                let mut called = 0;
                let result = queue.for_each_bio(token_of(world, live, stale), |_| called += 1);
                ensure!(
                    called == 0,
                    "for_each_bio with {whose} visited {called} bios"
                );
                result
            }
            ForeignCall::MergeInto | ForeignCall::MergeFrom => {
                let Some(j) = own else {
                    return Ok(());
                };
                let (theirs, ours) = match live {
                    Some(i) => {
                        let (theirs, ours) = two_mut(&mut world.reqs, i, j);
                        (theirs.token(), ours.token())
                    }
                    None => (&mut world.stale[stale], world.reqs[j].token()),
                };
                let result = if call == ForeignCall::MergeInto {
                    queue.merge_requests(theirs, ours)
                } else {
                    queue.merge_requests(ours, theirs)
                };
                result.map(|_| ())
            }
            ForeignCall::Free | ForeignCall::Complete => {
                // The refused call hands the token back: it goes back where it came from.
                let rq = match live {
                    Some(i) => world.reqs[i].rq.take().expect("a request with its token"),
                    None => world.stale.remove(stale),
                };
                let result = if call == ForeignCall::Free {
                    queue.free(rq)
                } else {
                    queue.complete(rq, Status::Ok)
                };
                result.map_err(|misused| {
                    match live {
                        Some(i) => world.reqs[i].rq = Some(misused.rq),
                        None => world.stale.insert(stale, misused.rq),
                    }
                    misused.error
                })
            }
        };
        ensure!(
            result == Err(TagError::ForeignRequest),
            "{call:?} on queue {b} with {whose}: {result:?}, expected ForeignRequest"
        );
        Ok(())
    }

    fn bad_hctx(&mut self, q: usize, hctx: usize, call: HctxCall) -> Result<(), String> {
        let Some(queue) = self.queues[q].as_ref() else {
            return Ok(());
        };
        let setup = self.world.setup;
        let error = TagError::NoSuchHwQueue {
            hctx,
            nr_hw_queues: setup.hw_queues,
        };
        // A hardware queue that does not exist has no map, even when one map serves all.
        let map: Option<usize> = None;
        match call {
            HctxCall::Alloc => {
                let result = queue.alloc(&Alloc::new(hctx, 0));
                ensure!(
                    result.as_ref().err() == Some(&error),
                    "alloc on hctx {hctx}: {result:?}, expected {error:?}"
                );
                Ok(())
            }
            HctxCall::AllocBatch => self.alloc_batch(q, hctx, 0, AllocKind::Normal, 4),
            HctxCall::AllocAsync => {
                self.alloc_async(q, hctx, 0, AllocKind::Normal, true, (0, 0, None))
            }
            HctxCall::MarkIdle => self.mark_idle(q, hctx),
            HctxCall::TagToRq => {
                let got = queue.tag_to_rq(hctx, 0).map(|r| r.tag());
                ensure!(got.is_none(), "tag_to_rq({hctx}, 0) gave tag {got:?}");
                Ok(())
            }
            HctxCall::Queries => {
                let world = &self.world;
                let expected = (
                    map.is_some_and(|m| world.queue(q).active[m]),
                    map.map_or(0, |m| world.in_flight(q, m)),
                    map.map_or(0, |m| world.active_queues(m)),
                    map.map_or(0, |m| world.reported_fair_share(m)),
                );
                let got = (
                    queue.is_active(hctx),
                    queue.in_flight(hctx),
                    self.set.active_queues(hctx),
                    self.set.fair_share(hctx),
                );
                ensure!(
                    got == expected,
                    "(is_active, in_flight, active_queues, fair_share) of hctx {hctx}: {got:?}, \
                     expected {expected:?}"
                );
                Ok(())
            }
            HctxCall::ForEachBusy => self.for_each_busy(Some(q), Some(hctx), 0),
        }
    }

    // ----- the end -----

    /// Frees every request, detaches every scheduler and queue, and checks that everything
    /// came back.
    fn teardown(mut self) -> Result<(), String> {
        let mut turn = 0;
        while let Some(&i) = self.world.live().first() {
            let status = (turn % 2 == 0).then_some(Status::Ok);
            free_at(&self.queues, &mut self.world, i, status)?;
            self.world.book.settle(false)?;
            turn += 1;
        }
        // Orphans (requests whose tokens were lost) keep their scheduler tags busy.
        for q in 0..self.queues.len() {
            if self.world.sched(q).is_some() {
                self.detach_scheduler(q)?;
            }
        }
        self.check()?;
        let orphans = self.world.reqs.len();
        for (q, queue) in self.queues.iter().enumerate() {
            if let Some(queue) = queue {
                let theirs = self.world.reqs.iter().filter(|r| r.queue == q);
                let counted = theirs
                    .filter(|r| r.counted && r.driver_tag.is_some())
                    .count();
                let in_flight: usize = (0..self.world.setup.hw_queues)
                    .filter(|&h| self.world.setup.map_index(h) == h)
                    .map(|h| queue.in_flight(h))
                    .sum();
                ensure!(
                    in_flight == counted,
                    "queue {q}: in_flight() adds up to {in_flight} at the end, {counted} orphans \
                     hold counted tags"
                );
            }
        }
        // Dropping the queues reclaims the orphans.
        for q in 0..self.queues.len() {
            self.detach(q)?;
            self.world.book.settle(true)?;
            self.check()?;
        }
        ensure!(
            self.set.busy() == 0,
            "busy() = {} at the end ({orphans} orphans reclaimed)",
            self.set.busy()
        );
        ensure!(
            self.set.bio_slots_in_use() == 0,
            "bio_slots_in_use() = {} at the end",
            self.set.bio_slots_in_use()
        );
        let outstanding = self.world.book.outstanding();
        ensure!(
            outstanding.is_empty(),
            "bios never ended: {outstanding:?} ({} ended)",
            self.world.book.nr_ended()
        );
        ensure!(
            self.set.nr_queues() == 0,
            "nr_queues() = {} with every queue dropped",
            self.set.nr_queues()
        );
        for h in 0..self.world.setup.hw_queues {
            ensure!(
                self.set.active_queues(h) == 0,
                "active_queues({h}) = {} with every queue dropped",
                self.set.active_queues(h)
            );
        }
        ensure!(
            Arc::strong_count(&self.set) == 1,
            "the set is still referenced {} times",
            Arc::strong_count(&self.set)
        );
        Ok(())
    }
}
