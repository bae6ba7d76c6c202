//! The state checks run after every op: everything the set, the queues and each request show
//! must agree with the model.

use alloc::string::String;
use alloc::vec::Vec;

use super::model::{Pool, World};
use super::runner::{Queue, Set};
use blkmq_core::{NO_TAG, unique_tag};

/// The driver payload `init_request` makes in a run: which map and tag, and whether the
/// request belongs to scheduler tags, so each request can be checked to be the right one.
pub(super) fn payload(map: usize, tag: usize, scheduler: bool) -> u32 {
    (u32::from(scheduler) << 31) | ((map as u32) << 16) | tag as u32
}

/// Checks the set and every queue and request against the model.
pub(super) fn verify(set: &Set, queues: &[Option<Queue>], world: &World) -> Result<(), String> {
    let setup = &world.setup;
    ensure!(
        set.depth() == world.depth,
        "depth() = {}, the model has {}",
        set.depth(),
        world.depth
    );
    ensure!(
        set.nr_queues() == world.attached() && set.is_shared() == world.is_shared(),
        "nr_queues() = {} (shared {}), the model has {} attached",
        set.nr_queues(),
        set.is_shared(),
        world.attached()
    );
    let busy: usize = world.driver.iter().map(|m| m.held.len()).sum();
    ensure!(
        set.busy() == busy,
        "busy() = {}, the model holds {busy} driver tags",
        set.busy()
    );
    ensure!(
        set.bio_slots_in_use() == world.bio_slots_in_use(),
        "bio_slots_in_use() = {}, the model's requests chain {}",
        set.bio_slots_in_use(),
        world.bio_slots_in_use()
    );
    for h in 0..setup.hw_queues {
        let m = setup.map_index(h);
        let (active, share) = (world.active_queues(m), world.reported_fair_share(m));
        ensure!(
            set.active_queues(h) == active && set.fair_share(h) == share,
            "hctx {h}: active_queues() = {}, fair_share() = {}; the model has {active} and {share}",
            set.active_queues(h),
            set.fair_share(h)
        );
    }
    for (q, slot) in queues.iter().enumerate() {
        match (slot, &world.queues[q]) {
            (None, None) => {}
            (Some(queue), Some(model)) => {
                let sched = model.sched.as_ref();
                ensure!(
                    queue.has_scheduler() == sched.is_some()
                        && queue.nr_requests() == sched.map(|s| s.nr),
                    "queue {q}: has_scheduler() = {}, nr_requests() = {:?}; the model has {:?}",
                    queue.has_scheduler(),
                    queue.nr_requests(),
                    sched.map(|s| s.nr)
                );
                let sched_busy: usize = sched.map_or(0, |s| s.held.iter().map(|m| m.len()).sum());
                ensure!(
                    queue.sched_busy() == sched_busy,
                    "queue {q}: sched_busy() = {}, the model holds {sched_busy}",
                    queue.sched_busy()
                );
                for h in 0..setup.hw_queues {
                    let m = setup.map_index(h);
                    let (active, in_flight) = (model.active[m], world.in_flight(q, m));
                    ensure!(
                        queue.is_active(h) == active && queue.in_flight(h) == in_flight,
                        "queue {q}, hctx {h}: is_active() = {}, in_flight() = {}; the model has \
                         {active} and {in_flight}",
                        queue.is_active(h),
                        queue.in_flight(h)
                    );
                }
            }
            (slot, model) => {
                return Err(alloc::format!(
                    "queue slot {q}: attached {}, in the model {}",
                    slot.is_some(),
                    model.is_some()
                ));
            }
        }
    }
    for r in &world.reqs {
        // An orphan has no token to look at it through; busy iteration and `tag_to_rq`
        // still see it.
        let Some(rq) = &r.rq else {
            continue;
        };
        let queue = queues[r.queue].as_ref().expect("a request's queue");
        let request = queue
            .request(rq)
            .map_err(|e| alloc::format!("request {}: request() = {e:?}", r.id))?;
        let scheduler = matches!(r.pool, Pool::Sched { .. });
        let driver_tag = r.driver_tag.map_or(NO_TAG, |t| t as u32);
        let got = (
            request.tag(),
            request.driver_tag(),
            request.hctx(),
            request.state(),
            request.generation(),
            *request.payload(),
            request.unique_tag(),
        );
        let expected = (
            r.tag as u32,
            driver_tag,
            r.hctx,
            r.state,
            r.generation,
            payload(r.pool.map(), r.tag, scheduler),
            r.driver_tag.map(|t| unique_tag(r.hctx, t as u32)),
        );
        ensure!(
            got == expected,
            "request {} (queue {}, {:?}): (tag, driver tag, hctx, state, generation, payload, \
             unique tag) = {got:?}, expected {expected:?}",
            r.id,
            r.queue,
            r.pool
        );
        // Documented: 0 before it starts. Known deviation (reported): a reused request shows
        // the deadline its previous I/O was given until it starts, since neither allocation
        // nor freeing resets it; anything else is a failure.
        let stale = world.deadlines.get(&(r.pool, r.tag)).copied();
        let deadline = request.deadline_ns();
        let fine = match r.deadline {
            Some(d) => deadline == d,
            None => deadline == 0 || Some(deadline) == stale,
        };
        ensure!(
            fine,
            "request {}: deadline_ns() = {deadline}, expected {:?} (before a start: 0, or the \
             slot's last deadline {stale:?})",
            r.id,
            r.deadline
        );
        let io = queue
            .io(rq)
            .map_err(|e| alloc::format!("request {}: io() = {e:?}", r.id))?;
        let sectors: u64 = r.bios.iter().map(|b| u64::from(b.sectors)).sum();
        ensure!(
            io.nr_bios() as usize == r.bios.len() && io.sectors() == sectors,
            "request {}: nr_bios() = {}, sectors() = {}; the model has {} bios of {sectors}",
            r.id,
            io.nr_bios(),
            io.sectors(),
            r.bios.len()
        );
        if let Some(first) = r.bios.first() {
            ensure!(
                io.sector() == first.sector
                    && io.op() == first.op
                    && io.first_bio().map(|b| b.payload) == Some(u64::from(first.seq)),
                "request {}: starts at {} with {:?}, its first bio {first:?}",
                r.id,
                io.sector(),
                io.op()
            );
        }
        let mut chain = Vec::new();
        queue
            .for_each_bio(rq, |bio| chain.push(bio.payload as u32))
            .map_err(|e| alloc::format!("request {}: for_each_bio() = {e:?}", r.id))?;
        let expected: Vec<u32> = r.bios.iter().map(|b| b.seq).collect();
        ensure!(
            chain == expected,
            "request {}: bios {chain:?} front to back, expected {expected:?}",
            r.id
        );
    }
    // The tag maps and the requests tell the same story.
    let holders = world.reqs.iter().filter(|r| r.driver_tag.is_some()).count();
    ensure!(
        holders == busy,
        "{holders} requests hold driver tags, the maps hold {busy}"
    );
    for r in &world.reqs {
        if let Some(t) = r.driver_tag {
            let pool = Pool::Driver { map: r.pool.map() };
            ensure!(
                world.held(pool).get(&t) == Some(&r.id),
                "request {} holds driver tag {t}, its map says {:?}",
                r.id,
                world.held(pool).get(&t)
            );
        }
        if let Pool::Sched { .. } = r.pool {
            ensure!(
                world.held(r.pool).get(&r.tag) == Some(&r.id),
                "request {} holds scheduler tag {}, its map says {:?}",
                r.id,
                r.tag,
                world.held(r.pool).get(&r.tag)
            );
        }
    }
    Ok(())
}
