//! Batching: a plug's cache of requests taken in one batch allocation, and a batched
//! completion giving its tags back a bitmap word at a time.
//!
//! Every test builds its own host; the driver ([`Hold`]) keeps what it is given until the
//! test ends it.

#![cfg(not(loom))]

#[path = "common/fifo.rs"]
mod fifo;

use std::sync::Arc;

use blkmq_core::testing::Hold;
use blkmq_core::*;
use fifo::Fifo;

type Queue = Arc<RequestQueue<Hold<StdPlatform>>>;

/// A host of `depth` tags on one CPU and one hardware queue, and a queue on it.
fn single(depth: usize) -> (Arc<Host<Hold<StdPlatform>>>, Queue) {
    let host = Host::new(
        TagSet::builder(depth),
        StdPlatform::with_cpus(1),
        Hold::new(),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    (host, queue)
}

/// The `i`th of a row of bios no two of which merge.
fn apart(i: u64) -> Bio {
    Bio::new(Op::Read, i * 16, 8)
}

/// Ends everything the driver holds.
fn end_all(host: &Host<Hold<StdPlatform>>, queue: &Queue) {
    queue
        .end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
}

#[test]
fn a_plug_with_a_cache_takes_its_requests_from_it() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(8);
    queue.submit_plugged(&mut plug, apart(0)).unwrap();
    // One batch allocation: this request and seven more.
    assert_eq!((host.set().busy(), plug.cached(), queue.usage()), (8, 7, 1));
    for i in 1..8 {
        queue.submit_plugged(&mut plug, apart(i)).unwrap();
        // No allocation: the cached requests serve the bios.
        assert_eq!(host.set().busy(), 8);
        assert_eq!(queue.usage(), i as usize + 1);
    }
    assert_eq!((plug.len(), plug.cached()), (8, 0));
    plug.flush();
    let held = host.driver().take();
    assert_eq!(held.len(), 8);
    for (i, rq) in held.iter().enumerate() {
        assert_eq!(queue.io(rq).unwrap().sector(), i as u64 * 16);
    }
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn a_plug_without_an_expected_count_caches_nothing() {
    let (host, queue) = single(64);
    let mut plug = Plug::new();
    queue.submit_plugged(&mut plug, apart(0)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (1, 0));
    drop(plug);
    end_all(&host, &queue);
    assert_eq!(host.set().busy(), 0);
}

#[test]
fn unused_cached_requests_go_back_on_flush_and_on_drop() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(8);
    queue.submit_plugged(&mut plug, apart(0)).unwrap();
    assert_eq!(plug.cached(), 7);
    plug.flush();
    // The driver holds one; the seven cached tags are back.
    assert_eq!((host.set().busy(), plug.cached(), queue.usage()), (1, 0, 1));
    // The count starts again after a flush: the next bio fills the cache again.
    queue.submit_plugged(&mut plug, apart(1)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (9, 7));
    drop(plug);
    assert_eq!((host.set().busy(), queue.usage()), (2, 2));
    end_all(&host, &queue);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn the_cache_holds_no_more_than_the_plug_expects() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(3);
    for i in 0..3 {
        queue.submit_plugged(&mut plug, apart(i)).unwrap();
        assert_eq!(host.set().busy(), 3);
    }
    // Past the expected count: a request of its own.
    queue.submit_plugged(&mut plug, apart(3)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (4, 0));
    drop(plug);
    end_all(&host, &queue);
    assert_eq!(host.set().busy(), 0);
}

#[test]
fn a_bio_that_merges_takes_no_cached_request() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(4);
    for i in 0..3 {
        queue
            .submit_plugged(&mut plug, Bio::new(Op::Write, i * 8, 8))
            .unwrap();
    }
    assert_eq!((plug.len(), plug.cached(), queue.usage()), (1, 3, 1));
    plug.flush();
    let held = host.driver().take();
    assert_eq!(held.len(), 1);
    assert_eq!(queue.io(&held[0]).unwrap().sectors(), 24);
    assert_eq!(host.set().busy(), 1);
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

/// The plug tells a bio that touches neither end of its last request from one that may
/// merge by that request's sectors, which each merge moves: at the front and the back in
/// turn, every bio lands in the one request, and only a bio clear of it takes another.
#[test]
fn merges_at_either_end_keep_the_last_request_s_ends() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(4);
    for sector in [64, 56, 72, 48, 80, 40] {
        queue
            .submit_plugged(&mut plug, Bio::new(Op::Write, sector, 8))
            .unwrap();
        assert_eq!(plug.len(), 1, "the bio at {sector} merged");
    }
    // Clear of both ends (32..88): a request of its own; then one at its back merges.
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 96, 8))
        .unwrap();
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 104, 8))
        .unwrap();
    // The older request's end is no longer the plug's last: no merge there.
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 88, 4))
        .unwrap();
    assert_eq!(plug.len(), 3);
    plug.flush();
    let held = host.driver().take();
    let spans: Vec<_> = held
        .iter()
        .map(|rq| {
            let io = queue.io(rq).unwrap();
            (io.sector(), io.sectors())
        })
        .collect();
    assert_eq!(spans, [(40, 48), (96, 16), (88, 4)]);
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn a_freeze_does_not_wait_for_a_plugs_cache() {
    let (host, queue) = single(64);
    let mut plug = Plug::with_ios(8);
    queue.submit_plugged(&mut plug, apart(0)).unwrap();
    queue.freeze_start();
    // Refused while frozen, cache or not.
    let back = queue.submit_plugged(&mut plug, apart(1)).unwrap_err();
    assert_eq!(back.sector, 16);
    // The cached requests hold no usage: only the plugged request keeps the freeze waiting.
    assert_eq!((queue.usage(), plug.cached()), (1, 7));
    assert!(!queue.is_drained());
    // Flushed while frozen: the request goes to the driver, the cache back.
    plug.flush();
    assert_eq!((host.set().busy(), queue.usage()), (1, 1));
    end_all(&host, &queue);
    assert!(queue.is_drained());
    assert_eq!(host.set().busy(), 0);
    queue.unfreeze();
    queue.submit_plugged(&mut plug, back).unwrap();
    assert_eq!(plug.cached(), 7);
    drop(plug);
    end_all(&host, &queue);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn short_of_tags_the_cache_takes_what_it_can() {
    let (host, queue) = single(64);
    for i in 0..62 {
        queue.submit(apart(100 + i)).unwrap();
    }
    let direct = host.driver().take();
    assert_eq!(host.set().busy(), 62);
    let mut plug = Plug::with_ios(8);
    let mut taken = 0;
    let back = loop {
        match queue.submit_plugged(&mut plug, apart(taken)) {
            Ok(()) => taken += 1,
            Err(bio) => break bio,
        }
    };
    // Both free tags served the plug, and the bio after them came back untouched.
    assert_eq!((taken, back.sector), (2, 32));
    assert_eq!(
        (host.set().busy(), plug.cached(), queue.usage()),
        (64, 0, 64)
    );
    drop(plug);
    end_all(&host, &queue);
    queue
        .end_requests(direct.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn the_cache_serves_only_its_own_hardware_queue() {
    let host = Host::new(
        TagSet::builder(64).hw_queues(2),
        StdPlatform::with_cpus(2),
        Hold::new(),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let platform = queue.platform();
    platform.pin_current_thread(0);
    let mut plug = Plug::with_ios(8);
    queue.submit_plugged(&mut plug, apart(0)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (8, 7));
    // Another CPU, another hardware queue: its own request, the cache untouched.
    platform.pin_current_thread(1);
    queue.submit_plugged(&mut plug, apart(1)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (9, 7));
    platform.pin_current_thread(0);
    queue.submit_plugged(&mut plug, apart(2)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (9, 6));
    plug.flush();
    let held = host.driver().take();
    let hctxs: Vec<usize> = held
        .iter()
        .map(|rq| queue.request(rq).unwrap().hctx())
        .collect();
    assert_eq!(hctxs, [0, 1, 0]);
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn the_cache_serves_only_its_own_queue_alone_on_its_tags() {
    let host = Host::new(TagSet::builder(64), StdPlatform::with_cpus(1), Hold::new()).unwrap();
    let a = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let b = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    // Two queues share the tag set: fair sharing is for single allocations, no cache.
    let mut plug = Plug::with_ios(8);
    a.submit_plugged(&mut plug, apart(0)).unwrap();
    b.submit_plugged(&mut plug, apart(1)).unwrap();
    assert_eq!((host.set().busy(), plug.cached()), (2, 0));
    drop(plug);
    let held = host.driver().take();
    for rq in held {
        let queue = if a.request(&rq).is_some() { &a } else { &b };
        queue.end_request(rq, Status::Ok).unwrap();
    }
    assert_eq!((host.set().busy(), a.usage(), b.usage()), (0, 0, 0));
}

#[test]
fn a_queue_with_an_elevator_takes_no_cached_request() {
    let host = Host::new(TagSet::builder(64), StdPlatform::with_cpus(1), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)).elevator(Box::new(Fifo::new())))
        .unwrap();
    let mut plug = Plug::with_ios(8);
    for i in 0..4 {
        queue.submit_plugged(&mut plug, apart(i)).unwrap();
    }
    assert_eq!((plug.cached(), queue.usage()), (0, 4));
    drop(plug);
    end_all(&host, &queue);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn a_batched_completion_gives_every_tag_back() {
    // Four hardware queues of 64 tags each (16 to a bitmap word), requests of all of them
    // interleaved in one batch: every tag comes back, whichever word or map it is of.
    let host = Host::new(
        TagSet::builder(64).hw_queues(4),
        StdPlatform::with_cpus(4),
        Hold::new(),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    for i in 0..160 {
        queue.platform().pin_current_thread((i % 4) as usize);
        queue.submit(apart(i)).unwrap();
    }
    assert_eq!((host.set().busy(), host.in_driver()), (160, 160));
    let held = host.driver().take();
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
    // And the tags are good for the next round: all of them at once.
    for i in 0..256 {
        queue.platform().pin_current_thread((i % 4) as usize);
        queue.submit(apart(i)).unwrap();
    }
    assert_eq!(host.set().busy(), 256);
    end_all(&host, &queue);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn a_batch_refused_part_way_gives_back_the_tags_before_it() {
    let host = Host::new(TagSet::builder(64), StdPlatform::with_cpus(1), Hold::new()).unwrap();
    let a = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let b = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    for i in 0..4 {
        a.submit(apart(i)).unwrap();
    }
    b.submit(apart(4)).unwrap();
    let held = host.driver().take();
    // Three of `a`'s, then `b`'s: refused, and the rest comes back unlooked at.
    let mut order = held;
    order.swap(3, 4);
    let unended = a
        .end_requests(order.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap_err();
    assert_eq!(unended.misused.error, TagError::ForeignRequest);
    let rest: Vec<_> = unended.rest.collect();
    assert_eq!(rest.len(), 1);
    // The three ended have their tags back.
    assert_eq!((host.set().busy(), a.usage()), (2, 1));
    b.end_request(unended.misused.rq, unended.status).unwrap();
    a.end_requests(rest).unwrap();
    assert_eq!((host.set().busy(), a.usage(), b.usage()), (0, 0, 0));
}

#[test]
fn a_batched_completion_wakes_every_waiter_it_makes_room_for() {
    // Depth 8: a wake-up for every free. Eight submitters wait for room; one batch of
    // eight frees lets all of them in, as eight single ends would.
    let (host, queue) = single(8);
    for i in 0..8 {
        queue.submit(apart(i)).unwrap();
    }
    let held = host.driver().take();
    std::thread::scope(|s| {
        let waiters: Vec<_> = (0..8)
            .map(|i| {
                let queue = &queue;
                s.spawn(move || queue.submit_wait(apart(8 + i)))
            })
            .collect();
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        for waiter in waiters {
            waiter.join().unwrap();
        }
    });
    assert_eq!(host.driver().len(), 8);
    end_all(&host, &queue);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}
