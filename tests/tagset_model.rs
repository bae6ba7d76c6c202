//! Model tests of `blkmq-core`'s tag sets: random configurations and operation sequences, run
//! single-threaded against a reference model by `blkmq_model::tagset::run`, which checks every
//! documented promise after every op (see that module). The fuzz target `tagset_ops` in
//! `fuzz/` runs the same model on inputs decoded with `arbitrary`; here proptest generates
//! them, so that a plain `cargo test` explores and shrinks too. Concurrency is loom's business,
//! not this file's.

// The model runs real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

use std::collections::BTreeSet;

use blkmq_core::{Alloc, ConfigError, TagError, TagSet, TagSetFlags};
use blkmq_model::tagset::{
    AllocKind, BioSpec, Config, ForeignCall, HctxCall, MAX_MODEL_CPUS, MAX_MODEL_HW_QUEUES,
    MAX_MODEL_QUEUES, Op, TestPlatform, run,
};
use proptest::prelude::*;

/// Operations per sequence, at most.
const MAX_OPS: usize = 120;

fn config() -> impl Strategy<Value = Config> {
    (
        // Small sets fill up (and reach the full and over-share paths) within a sequence.
        prop_oneof![3 => 0u8..=15, 1 => any::<u8>()],
        any::<u8>(),
        0..MAX_MODEL_HW_QUEUES as u8,
        any::<bool>(),
        proptest::bool::weighted(0.2),
        // Mostly several queues, so that fair sharing is on.
        prop_oneof![1 => Just(0u8), 3 => 1..MAX_MODEL_QUEUES as u8],
        proptest::option::weighted(0.15, any::<u8>()),
        0..MAX_MODEL_CPUS as u8,
        proptest::option::weighted(0.4, 0u8..=16),
        any::<u8>(),
        0u8..16,
    )
        .prop_map(
            |(
                depth,
                reserved,
                hw_queues,
                shared_tags,
                round_robin,
                queues,
                max_queues,
                cpus,
                bio_slots,
                schedulers,
                nr_requests,
            )| Config {
                depth,
                reserved,
                hw_queues,
                shared_tags,
                round_robin,
                queues,
                max_queues,
                cpus,
                bio_slots,
                schedulers,
                nr_requests,
            },
        )
}

fn kind() -> impl Strategy<Value = AllocKind> {
    prop_oneof![
        6 => Just(AllocKind::Normal),
        2 => Just(AllocKind::Reserved),
        2 => any::<u8>().prop_map(AllocKind::Shallow),
    ]
}

fn bio() -> impl Strategy<Value = BioSpec> {
    (any::<u8>(), any::<u16>(), any::<u8>()).prop_map(|(op, sector, sectors)| BioSpec {
        op,
        sector,
        sectors,
    })
}

fn foreign_call() -> impl Strategy<Value = ForeignCall> {
    prop_oneof![
        Just(ForeignCall::Request),
        Just(ForeignCall::Io),
        Just(ForeignCall::SetBio),
        Just(ForeignCall::AppendBio),
        Just(ForeignCall::PrependBio),
        Just(ForeignCall::GetDriverTag),
        Just(ForeignCall::PutDriverTag),
        Just(ForeignCall::Start),
        Just(ForeignCall::Requeue),
        Just(ForeignCall::ForEachBio),
        Just(ForeignCall::MergeInto),
        Just(ForeignCall::MergeFrom),
        Just(ForeignCall::Free),
        Just(ForeignCall::Complete),
    ]
}

fn hctx_call() -> impl Strategy<Value = HctxCall> {
    prop_oneof![
        Just(HctxCall::Alloc),
        Just(HctxCall::AllocBatch),
        Just(HctxCall::AllocAsync),
        Just(HctxCall::MarkIdle),
        Just(HctxCall::TagToRq),
        Just(HctxCall::Queries),
        Just(HctxCall::ForEachBusy),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let q = any::<u8>();
    let index = any::<u16>();
    prop_oneof![
        16 => (q, any::<u8>(), any::<u8>(), kind())
            .prop_map(|(queue, hctx, cpu, kind)| Op::Alloc { queue, hctx, cpu, kind }),
        3 => (q, any::<u8>(), any::<u8>(), kind(), any::<u8>())
            .prop_map(|(queue, hctx, cpu, kind, nr)| Op::AllocBatch { queue, hctx, cpu, kind, nr }),
        4 => (
            (q, any::<u8>(), any::<u8>(), kind()),
            (any::<bool>(), any::<u8>(), any::<u16>(), proptest::option::of(q)),
        )
            .prop_map(|((queue, hctx, cpu, kind), (counting, frees, pick, idle))| {
                Op::AllocAsync { queue, hctx, cpu, kind, counting, frees, pick, idle }
            }),
        8 => index.prop_map(|index| Op::Free { index }),
        5 => (index, any::<u8>()).prop_map(|(index, status)| Op::Complete { index, status }),
        5 => index.prop_map(|index| Op::GetDriverTag { index }),
        2 => index.prop_map(|index| Op::PutDriverTag { index }),
        2 => index.prop_map(|index| Op::Start { index }),
        1 => index.prop_map(|index| Op::Requeue { index }),
        1 => (index, any::<bool>()).prop_map(|(index, stale)| Op::TryComplete { index, stale }),
        3 => (index, bio()).prop_map(|(index, bio)| Op::SetBio { index, bio }),
        3 => (index, bio()).prop_map(|(index, bio)| Op::AppendBio { index, bio }),
        2 => (index, bio()).prop_map(|(index, bio)| Op::PrependBio { index, bio }),
        2 => (index, index).prop_map(|(into, from)| Op::MergeRequests { into, from }),
        3 => (q, any::<u8>()).prop_map(|(queue, hctx)| Op::MarkIdle { queue, hctx }),
        1 => any::<u8>().prop_map(|depth| Op::UpdateDepth { depth }),
        1 => (q, proptest::option::of(any::<u8>()))
            .prop_map(|(queue, nr_requests)| Op::AttachScheduler { queue, nr_requests }),
        1 => q.prop_map(|queue| Op::DetachScheduler { queue }),
        1 => (q, any::<u8>())
            .prop_map(|(queue, nr_requests)| Op::SetNrRequests { queue, nr_requests }),
        1 => (q, any::<u8>()).prop_map(|(queue, depth)| Op::SetMinShallowDepth { queue, depth }),
        2 => q.prop_map(|queue| Op::Attach { queue }),
        2 => q.prop_map(|queue| Op::Detach { queue }),
        2 => (q, any::<u8>(), any::<u8>()).prop_map(|(queue, hctx, tag)| Op::TagToRq { queue, hctx, tag }),
        2 => (proptest::option::of(q), proptest::option::of(any::<u8>()), any::<u8>())
            .prop_map(|(queue, hctx, stop_after)| Op::ForEachBusy { queue, hctx, stop_after }),
        2 => (q, index, foreign_call()).prop_map(|(queue, index, call)| Op::Foreign { queue, index, call }),
        1 => (q, any::<u8>(), hctx_call()).prop_map(|(queue, over, call)| Op::BadHctx { queue, over, call }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 0..=MAX_OPS)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn tag_set_matches_model(config in config(), ops in ops()) {
        if let Err(failure) = run(&config, &ops) {
            return Err(TestCaseError::fail(format!("{config:?}\n{failure}")));
        }
    }
}

/// A configuration for the fixed tests: `depth` tags, one reserved, two hardware queues, two
/// request queues, the second with scheduler tags.
fn fixed(depth: u8, shared_tags: bool) -> Config {
    Config {
        depth: depth - 1,
        reserved: 1,
        hw_queues: 1,
        shared_tags,
        round_robin: false,
        queues: 1,
        max_queues: None,
        cpus: 1,
        bio_slots: Some(3),
        schedulers: 0b10,
        nr_requests: 5,
    }
}

/// Two request queues (as `Config` counts them: `queues` is one less) on a set of `depth + 1`
/// tags with one hardware queue, one CPU, no reserved tag and no scheduler.
fn plain(depth: u8) -> Config {
    Config {
        depth,
        reserved: 0,
        hw_queues: 0,
        shared_tags: false,
        round_robin: false,
        queues: 1,
        max_queues: None,
        cpus: 0,
        bio_slots: None,
        schedulers: 0,
        nr_requests: 0,
    }
}

/// Every op kind, through a fixed sequence that fills a small set past the fair share,
/// merges, waits, idles, resizes and reattaches, on both kinds of tag maps.
#[test]
fn fixed_sequence_covers_every_op() {
    let normal = |queue, hctx| Op::Alloc {
        queue,
        hctx,
        cpu: hctx,
        kind: AllocKind::Normal,
    };
    let bio = |sector| BioSpec {
        op: 1,
        sector,
        sectors: 8,
    };
    let mut ops = Vec::new();
    // Queue 0 takes its share of the normal tags and then some; queue 1 allocates from its
    // scheduler tags and dispatches.
    for i in 0..8 {
        ops.push(normal(0, i));
    }
    for i in 0..6 {
        ops.extend([
            normal(1, i),
            Op::GetDriverTag {
                index: 8 + u16::from(i),
            },
        ]);
    }
    ops.extend([
        Op::Alloc {
            queue: 0,
            hctx: 0,
            cpu: 0,
            kind: AllocKind::Reserved,
        },
        Op::Alloc {
            queue: 1,
            hctx: 1,
            cpu: 5,
            kind: AllocKind::Shallow(2),
        },
        Op::AllocBatch {
            queue: 1,
            hctx: 0,
            cpu: 0,
            kind: AllocKind::Normal,
            nr: 3,
        },
        Op::AllocAsync {
            queue: 0,
            hctx: 0,
            cpu: 0,
            kind: AllocKind::Normal,
            counting: true,
            frees: 3,
            pick: 0,
            idle: Some(1),
        },
        Op::SetBio {
            index: 0,
            bio: bio(0),
        },
        Op::AppendBio {
            index: 0,
            bio: bio(8),
        },
        Op::PrependBio {
            index: 1,
            bio: bio(100),
        },
        Op::AppendBio {
            index: 1,
            bio: bio(108),
        },
        Op::MergeRequests { into: 0, from: 0 },
        Op::AppendBio {
            index: 2,
            bio: bio(200),
        },
        Op::AppendBio {
            index: 2,
            bio: bio(208),
        },
        Op::Start { index: 0 },
        Op::TryComplete {
            index: 0,
            stale: true,
        },
        Op::TryComplete {
            index: 0,
            stale: false,
        },
        Op::Start { index: 1 },
        Op::Requeue { index: 1 },
        Op::PutDriverTag { index: 9 },
        Op::TagToRq {
            queue: 0,
            hctx: 0,
            tag: 3,
        },
        Op::ForEachBusy {
            queue: None,
            hctx: None,
            stop_after: 200,
        },
        Op::ForEachBusy {
            queue: Some(1),
            hctx: Some(0),
            stop_after: 2,
        },
        Op::Foreign {
            queue: 1,
            index: 0,
            call: ForeignCall::MergeFrom,
        },
        Op::Foreign {
            queue: 1,
            index: 1,
            call: ForeignCall::Free,
        },
        Op::BadHctx {
            queue: 0,
            over: 3,
            call: HctxCall::AllocAsync,
        },
        Op::Complete {
            index: 0,
            status: 4,
        },
        Op::Free { index: 3 },
        Op::MarkIdle { queue: 0, hctx: 0 },
        Op::UpdateDepth { depth: 9 },
        Op::SetNrRequests {
            queue: 1,
            nr_requests: 4,
        },
        Op::SetMinShallowDepth { queue: 1, depth: 2 },
        Op::DetachScheduler { queue: 1 },
        Op::Detach { queue: 1 },
        Op::Attach { queue: 1 },
        Op::AttachScheduler {
            queue: 1,
            nr_requests: None,
        },
        normal(1, 0),
    ]);
    let kinds: BTreeSet<_> = ops.iter().map(Op::kind).collect();
    let missing: Vec<_> = Op::KINDS.iter().filter(|k| !kinds.contains(*k)).collect();
    assert!(missing.is_empty(), "the sequence misses {missing:?}");
    for shared_tags in [false, true] {
        for depth in [8, 16] {
            let config = fixed(depth, shared_tags);
            run(&config, &ops).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        }
    }
}

/// A queue that goes idle wakes an allocation waiting on its fair share: queue 1 allocates
/// and frees (so it is active, holding nothing), queue 0 fills its share of 4, and its async
/// allocation waits on the share; marking queue 1 idle must wake it, and its next poll gets a
/// tag. Both the wake-up and the poll are checked by the model.
#[test]
fn idle_queue_wakes_a_waiter_over_its_share() {
    let config = Config {
        shared_tags: true,
        ..plain(7)
    };
    let normal = |queue| Op::Alloc {
        queue,
        hctx: 0,
        cpu: 0,
        kind: AllocKind::Normal,
    };
    let mut ops = vec![normal(1), Op::Free { index: 0 }];
    ops.extend((0..5).map(|_| normal(0)));
    ops.push(Op::AllocAsync {
        queue: 0,
        hctx: 0,
        cpu: 0,
        kind: AllocKind::Normal,
        counting: true,
        frees: 0,
        pick: 0,
        idle: Some(1),
    });
    ops.push(Op::ForEachBusy {
        queue: Some(0),
        hctx: None,
        stop_after: 100,
    });
    run(&config, &ops).unwrap();
}

/// A token kept past its queue: queue 0 is dropped with a request out, queue 1 gets the same
/// request (the only tag) next, and the stale token must not reach it — not to look at, not
/// to free.
#[test]
fn stale_token_cannot_touch_the_next_allocation() {
    let config = plain(0);
    let alloc = |queue| Op::Alloc {
        queue,
        hctx: 0,
        cpu: 0,
        kind: AllocKind::Normal,
    };
    let foreign = |call| Op::Foreign {
        queue: 1,
        index: 0,
        call,
    };
    let ops = [
        alloc(0),
        Op::Detach { queue: 0 },
        alloc(1),
        Op::SetBio {
            index: 0,
            bio: BioSpec {
                op: 0,
                sector: 0,
                sectors: 8,
            },
        },
        foreign(ForeignCall::Request),
        foreign(ForeignCall::SetBio),
        foreign(ForeignCall::Start),
        foreign(ForeignCall::MergeInto),
        foreign(ForeignCall::Free),
        Op::TagToRq {
            queue: 1,
            hctx: 0,
            tag: 0,
        },
    ];
    run(&config, &ops).unwrap();
}

/// Another queue's token, for a request taken while its queue was alone (so not counted
/// towards a fair share, the cheapest kind to free): refused by every call, `free` and
/// `complete` included, though they consume the token; the request stays out, and its bio
/// ends only when its own queue is dropped.
#[test]
fn foreign_token_is_refused() {
    let config = Config {
        reserved: 1,
        hw_queues: 1,
        ..plain(7)
    };
    let alloc = Op::Alloc {
        queue: 0,
        hctx: 1,
        cpu: 0,
        kind: AllocKind::Normal,
    };
    let foreign = |index, call| Op::Foreign {
        queue: 1,
        index,
        call,
    };
    let mut ops = vec![Op::Detach { queue: 1 }, alloc, alloc, alloc];
    ops.push(Op::SetBio {
        index: 2,
        bio: BioSpec {
            op: 1,
            sector: 64,
            sectors: 8,
        },
    });
    ops.push(Op::Attach { queue: 1 });
    for call in [
        ForeignCall::Request,
        ForeignCall::Io,
        ForeignCall::SetBio,
        ForeignCall::AppendBio,
        ForeignCall::PrependBio,
        ForeignCall::GetDriverTag,
        ForeignCall::PutDriverTag,
        ForeignCall::Start,
        ForeignCall::Requeue,
        ForeignCall::ForEachBio,
    ] {
        ops.push(foreign(0, call));
    }
    ops.extend([
        foreign(0, ForeignCall::Free),
        foreign(0, ForeignCall::Complete),
        foreign(0, ForeignCall::Free),
        Op::ForEachBusy {
            queue: Some(0),
            hctx: None,
            stop_after: 10,
        },
        Op::Detach { queue: 0 },
    ]);
    run(&config, &ops).unwrap();
}

/// Fair sharing as the model states it, against the API directly: with two active queues on
/// 16 normal tags each may hold 8, then its NOWAIT allocation fails while tags are free; when
/// the other goes idle, the whole depth is its share.
#[test]
fn fair_share_limits_an_active_queue() {
    let set = TagSet::builder(16)
        .build(TestPlatform::new(1), |_| ())
        .unwrap();
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let theirs = b.alloc(&Alloc::new(0, 0)).unwrap();
    let mut ours = Vec::new();
    for _ in 0..8 {
        ours.push(a.alloc(&Alloc::new(0, 0)).unwrap());
    }
    assert_eq!(set.fair_share(0), 8);
    assert_eq!(a.alloc(&Alloc::new(0, 0)), Err(TagError::WouldBlock));
    assert_eq!(set.busy(), 9, "tags are still free");
    b.free(theirs).unwrap();
    assert!(b.mark_idle(0));
    assert_eq!(set.fair_share(0), 16);
    ours.push(a.alloc(&Alloc::new(0, 0)).unwrap());
    for rq in ours {
        a.free(rq).unwrap();
    }
    assert_eq!(set.busy(), 0);
}

/// Building refuses what it documents; the model only ever builds valid sets.
#[test]
fn bad_configs_fail_to_build() {
    let build = |builder: blkmq_core::TagSetBuilder, cpus| {
        builder.build(TestPlatform::new(cpus), |_| ()).map(|_| ())
    };
    assert_eq!(build(TagSet::builder(0), 1), Err(ConfigError::ZeroDepth));
    assert_eq!(
        build(TagSet::builder(4).reserved(4), 1),
        Err(ConfigError::TooManyReserved {
            reserved: 4,
            depth: 4
        })
    );
    assert_eq!(
        build(TagSet::builder(4).hw_queues(0), 1),
        Err(ConfigError::ZeroHwQueues)
    );
    assert_eq!(
        build(TagSet::builder(4).max_queues(0), 1),
        Err(ConfigError::ZeroQueues)
    );
    assert_eq!(build(TagSet::builder(4), 0), Err(ConfigError::ZeroCpus));
    assert_eq!(
        build(
            TagSet::builder(4).flags(TagSetFlags::SHARED_HOST_TAGS | TagSetFlags::ROUND_ROBIN),
            2
        ),
        Ok(())
    );
}
