//! Model tests of `blkmq-sbitmap`: random configurations and operation sequences, run
//! single-threaded against a reference model by `blkmq_model::sbitmap::run`, which checks every
//! documented promise after every op (see that module). The fuzz target in `fuzz/` runs the
//! same model on inputs decoded with `arbitrary`; here proptest generates them, so that a plain
//! `cargo test` explores and shrinks too. Concurrency is loom's business, not this file's.

// The model runs real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

use blkmq_model::sbitmap::{BogusBatch, BogusPut, Config, MAX_MODEL_DEPTH, Op, QueueConfig, run};
use blkmq_sbitmap::{AllocHint, BitBatch, Sbitmap, SbitmapError};
use proptest::prelude::*;

/// Operations per sequence, at most.
const MAX_OPS: usize = 200;

fn depth() -> impl Strategy<Value = u16> {
    // Small maps fill up (and exercise the full-map paths) within a sequence's length.
    prop_oneof![3 => 1u16..=24, 1 => 1u16..=MAX_MODEL_DEPTH as u16]
}

fn shift() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![
        6 => Just(None),
        6 => (0u8..=6).prop_map(Some),
        // Above log2(usize::BITS): building must fail.
        1 => Just(Some(7)),
    ]
}

fn map_config() -> impl Strategy<Value = Config> {
    (depth(), shift(), any::<bool>()).prop_map(|(depth, shift, round_robin)| Config {
        depth,
        shift,
        round_robin,
        queue: None,
    })
}

fn queue_config() -> impl Strategy<Value = Config> {
    (depth(), shift(), any::<bool>())
        .prop_flat_map(|(depth, shift, round_robin)| {
            let min_shallow_depth = proptest::option::of(0..=depth);
            (Just((depth, shift, round_robin)), min_shallow_depth)
        })
        .prop_map(|((depth, shift, round_robin), min_shallow_depth)| Config {
            depth,
            shift,
            round_robin,
            queue: Some(QueueConfig { min_shallow_depth }),
        })
}

fn bogus_put() -> impl Strategy<Value = BogusPut> {
    prop_oneof![
        Just(BogusPut::OutOfRange),
        Just(BogusPut::NeverAllocated),
        Just(BogusPut::DoublePut),
    ]
}

fn bogus_batch() -> impl Strategy<Value = BogusBatch> {
    prop_oneof![
        Just(BogusBatch::Misaligned),
        Just(BogusBatch::PastCapacity),
        Just(BogusBatch::NeverAllocated),
        Just(BogusBatch::DoublePut),
    ]
}

/// Depth-like numbers: mostly within a small map's range, sometimes anything.
fn small() -> impl Strategy<Value = u16> {
    prop_oneof![3 => 0u16..=32, 1 => any::<u16>()]
}

fn op() -> impl Strategy<Value = Op> {
    let hint = any::<u8>();
    prop_oneof![
        10 => hint.prop_map(|hint| Op::Get { hint }),
        6 => (hint, small()).prop_map(|(hint, depth)| Op::GetShallow { hint, depth }),
        4 => (hint, 0u8..=70).prop_map(|(hint, nr)| Op::GetBatch { hint, nr }),
        12 => (any::<u16>(), hint).prop_map(|(index, hint)| Op::Put { index, hint }),
        3 => (any::<u16>(), any::<u64>(), hint)
            .prop_map(|(pick, select, hint)| Op::PutBatch { pick, select, hint }),
        2 => (any::<u16>(), bogus_put()).prop_map(|(bit, kind)| Op::PutBogus { bit, kind }),
        2 => (any::<u16>(), bogus_batch())
            .prop_map(|(pick, kind)| Op::PutBatchBogus { pick, kind }),
        2 => small().prop_map(|depth| Op::Resize { depth }),
        2 => (hint, small()).prop_map(|(hint, bit)| Op::Rehint { hint, bit }),
        1 => small().prop_map(|bit| Op::TestBit { bit }),
        2 => (small(), small()).prop_map(|(start, stop_after)| Op::ForEachSet { start, stop_after }),
        1 => Just(Op::Dump),
        5 => (hint, proptest::option::weighted(0.3, small()))
            .prop_map(|(hint, shallow)| Op::Wait { hint, shallow }),
        2 => any::<u8>().prop_map(|index| Op::PollWaiter { index }),
        4 => Just(Op::PollWoken),
        2 => any::<u8>().prop_map(|index| Op::DropWaiter { index }),
        1 => Just(Op::WakeAll),
        1 => (0u8..=20).prop_map(|users| Op::RecalculateWakeBatch { users }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 0..=MAX_OPS)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sbitmap_matches_model(config in map_config(), ops in ops()) {
        if let Err(e) = run(&config, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn sbitmap_queue_matches_model(config in queue_config(), ops in ops()) {
        if let Err(e) = run(&config, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// Every op kind, in both modes and on both targets, through a fixed sequence that fills a
/// small map, shrinks and regrows it and waits on it.
#[test]
fn fixed_sequence_covers_every_op() {
    let mut ops = Vec::new();
    for i in 0..10u8 {
        ops.push(Op::Get { hint: i });
    }
    ops.extend([
        Op::Wait {
            hint: 0,
            shallow: None,
        },
        Op::Wait {
            hint: 1,
            shallow: Some(4),
        },
        Op::GetShallow { hint: 2, depth: 3 },
        Op::GetBatch { hint: 3, nr: 4 },
        Op::Put { index: 3, hint: 0 },
        Op::PollWoken,
        Op::PutBatch {
            pick: 0,
            select: !0,
            hint: 1,
        },
        Op::PutBogus {
            bit: 1,
            kind: BogusPut::DoublePut,
        },
        Op::PutBogus {
            bit: 2,
            kind: BogusPut::NeverAllocated,
        },
        Op::PutBogus {
            bit: 3,
            kind: BogusPut::OutOfRange,
        },
        Op::PutBatchBogus {
            pick: 1,
            kind: BogusBatch::Misaligned,
        },
        Op::PutBatchBogus {
            pick: 2,
            kind: BogusBatch::PastCapacity,
        },
        Op::PutBatchBogus {
            pick: 3,
            kind: BogusBatch::NeverAllocated,
        },
        Op::PutBatchBogus {
            pick: 4,
            kind: BogusBatch::DoublePut,
        },
        Op::Resize { depth: 4 },
        Op::Resize { depth: 0 },
        Op::Resize { depth: 11 },
        Op::Rehint { hint: 0, bit: 7 },
        Op::TestBit { bit: 12 },
        Op::ForEachSet {
            start: 5,
            stop_after: 3,
        },
        Op::Dump,
        Op::PollWaiter { index: 0 },
        Op::RecalculateWakeBatch { users: 3 },
        Op::WakeAll,
        Op::DropWaiter { index: 0 },
        Op::Resize { depth: 10 },
    ]);
    for _ in 0..4 {
        ops.extend([Op::Put { index: 0, hint: 1 }, Op::PollWoken]);
    }
    let kinds: std::collections::BTreeSet<_> = ops.iter().map(Op::kind).collect();
    assert_eq!(kinds.len(), Op::KINDS.len(), "the sequence misses a kind");
    for round_robin in [false, true] {
        for queue in [
            None,
            Some(QueueConfig {
                min_shallow_depth: Some(2),
            }),
        ] {
            let config = Config {
                depth: 10,
                shift: Some(2),
                round_robin,
                queue,
            };
            run(&config, &ops).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        }
    }
}

/// Building fails as documented, and the model accepts exactly that.
#[test]
fn bad_configs_fail_to_build() {
    let zero = Config {
        depth: 0,
        shift: None,
        round_robin: false,
        queue: None,
    };
    assert_eq!(
        Sbitmap::builder(0).build().unwrap_err(),
        SbitmapError::ZeroDepth
    );
    run(&zero, &[Op::Get { hint: 0 }]).unwrap();
    let wide = Config {
        depth: 8,
        shift: Some(7),
        round_robin: false,
        queue: None,
    };
    run(&wide, &[Op::Get { hint: 0 }]).unwrap();
}

/// A batch put that names a bit already put, while that earlier put still waits in the word's
/// deferred-clear mask (as it does until an allocator finds the word full), reports the double
/// put and frees none of the batch's other bits.
#[test]
fn failed_batch_put_changes_nothing() {
    let map = Sbitmap::builder(8).shift(3).build().unwrap();
    let hint = AllocHint::at(0);
    let a = map.get(&hint).unwrap();
    let b = map.get(&hint).unwrap();
    assert_eq!((a, b), (0, 1));
    map.put(a, &hint).unwrap();
    // Bit 0 is put again, together with the still held bit 1.
    let result = map.put_batch(BitBatch::new(0, 0b11), &hint);
    assert_eq!(result, Err(SbitmapError::NotAllocated { bit: 0 }));
    assert_eq!(
        map.test_bit(1),
        Ok(true),
        "the failed batch put freed bit 1"
    );
    assert_eq!(map.weight(), 1);
}
