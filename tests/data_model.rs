//! The data path's model test: random reads, writes (with PREFLUSH and FUA), discards,
//! write-zeroes and flushes, on devices with and without a write cache, with
//! random segment layouts and queue limits, through no elevator, mq-deadline and BFQ, with
//! plugs and adjacent bios that merge, bios split to the limits, requests the driver turns
//! down, hands back or ends in part, and errors, checked byte for byte against a model disk by
//! `blkmq_model::data::run` (see that module for every check). The fuzz target `data_ops` in
//! `fuzz/` runs the same model; here proptest generates its inputs, so that a plain
//! `cargo test` explores and shrinks too.

// The model runs real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

use arbitrary::{Arbitrary, Unstructured};
use blkmq_model::data::{Config, IoSpec, Layout, LimitsSpec, Op, Place, run};
use proptest::prelude::*;

/// Operations per sequence, at most.
const MAX_OPS: usize = 120;

/// Cases per elevator: the three together run in well under 30 s in a debug build.
const CASES: u32 = 128;

fn limits() -> impl Strategy<Value = LimitsSpec> {
    (
        any::<u8>(),
        // Mostly 512-byte blocks, where bios of many segments fit.
        prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        proptest::option::weighted(0.4, any::<u8>()),
        proptest::option::weighted(0.7, any::<u8>()),
        proptest::option::weighted(0.7, any::<u8>()),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                capacity,
                block_shift,
                max_sectors,
                max_segments,
                segment_shift,
                boundary_shift,
                chunk,
                discard,
                write_zeroes,
                (rotational, write_cache, fua),
            )| LimitsSpec {
                capacity,
                block_shift,
                max_sectors,
                max_segments,
                segment_shift,
                boundary_shift,
                chunk,
                discard,
                write_zeroes,
                rotational,
                write_cache,
                fua,
            },
        )
}

fn config(elevator: u8) -> impl Strategy<Value = Config> {
    (any::<u8>(), any::<bool>(), any::<u8>(), limits()).prop_map(
        move |(depth, map_sg, sg_entries, limits)| Config {
            elevator,
            depth,
            map_sg,
            sg_entries,
            limits,
        },
    )
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        any::<u8>(),
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(segments, sizes, gaps, start, follow, buffer)| Layout {
            segments,
            sizes,
            gaps,
            start,
            follow,
            buffer,
        })
}

fn io() -> impl Strategy<Value = IoSpec> {
    (
        any::<u8>(),
        // Mostly next to the last I/O, so that bios merge.
        prop_oneof![
            2 => any::<u16>().prop_map(Place::At),
            3 => Just(Place::After),
            1 => Just(Place::Before),
        ],
        // Mostly short bios, some long enough to split.
        prop_oneof![4 => 0u8..8, 1 => any::<u8>()],
        layout(),
        proptest::bool::weighted(0.5),
        any::<u8>(),
        any::<bool>(),
        // Mostly neither PREFLUSH nor FUA.
        prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
    )
        .prop_map(
            |(kind, place, blocks, layout, plugged, issuer, sync, flush)| IoSpec {
                kind,
                place,
                blocks,
                layout,
                plugged,
                issuer,
                sync,
                flush,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => io().prop_map(Op::Io),
        1 => any::<bool>().prop_map(|plugged| Op::Flush { plugged }),
        1 => Just(Op::Unplug),
        // Mostly `Ok`, which moves the bytes.
        6 => (any::<u8>(), prop_oneof![4 => Just(0u8), 1 => any::<u8>()])
            .prop_map(|(index, status)| Op::End { index, status }),
        // Mostly `Ok`, and within the request.
        3 => (
            any::<u8>(),
            prop_oneof![3 => 0u8..64, 1 => any::<u8>()],
            prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
        )
            .prop_map(|(index, blocks, status)| Op::Partial { index, blocks, status }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(index, kick)| Op::Requeue { index, kick }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(count, dev)| Op::Busy { count, dev }),
        1 => any::<u8>().prop_map(|ms| Op::Service { ms }),
        1 => Just(Op::Barrier),
    ]
}

/// A run of 2 to 7 I/Os of one kind, each starting where the one before ended, all plugged
/// or none, their buffers following each other in memory or not: what merges.
fn burst() -> impl Strategy<Value = Vec<Op>> {
    (io(), 1usize..7, any::<bool>(), any::<bool>()).prop_map(|(first, more, plugged, follow)| {
        let first = IoSpec { plugged, ..first };
        let next = IoSpec {
            place: Place::After,
            layout: Layout {
                follow,
                ..first.layout
            },
            ..first
        };
        std::iter::once(first)
            .chain(std::iter::repeat_n(next, more))
            .map(Op::Io)
            .collect()
    })
}

/// Sequences of ops and bursts, at most `MAX_OPS` ops long.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![4 => op().prop_map(|op| vec![op]), 1 => burst()],
        0..MAX_OPS / 2,
    )
    .prop_map(|runs| runs.into_iter().flatten().take(MAX_OPS).collect())
}

fn check(config: &Config, ops: &[Op]) -> Result<(), TestCaseError> {
    run(config, ops).map_err(|failure| TestCaseError::fail(failure.to_string()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn bytes_survive_the_queue_without_an_elevator(
        config in config(0),
        ops in ops(),
    ) {
        check(&config, &ops)?;
    }

    #[test]
    fn bytes_survive_mq_deadline(
        config in config(1),
        ops in ops(),
    ) {
        check(&config, &ops)?;
    }

    #[test]
    fn bytes_survive_bfq(
        config in config(2),
        ops in ops(),
    ) {
        check(&config, &ops)?;
    }

    /// Whatever bytes `arbitrary` makes of them, as the fuzz target decodes its input.
    #[test]
    fn any_decoded_input_passes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok((config, ops)) =
            <(Config, Vec<Op>)>::arbitrary_take_rest(Unstructured::new(&bytes))
        {
            check(&config, &ops)?;
        }
    }
}

/// A bio of several segments, split in two requests, written, read back and overwritten
/// while the driver ends one piece with an error.
#[test]
fn a_split_write_reads_back() {
    let limits = LimitsSpec {
        capacity: 0,
        block_shift: 0,
        max_sectors: 1,
        max_segments: 3,
        segment_shift: 0,
        boundary_shift: 0,
        chunk: None,
        discard: Some(0),
        write_zeroes: None,
        rotational: false,
        write_cache: true,
        fua: false,
    };
    for elevator in 0..3 {
        for map_sg in [false, true] {
            let config = Config {
                elevator,
                depth: 3,
                map_sg,
                sg_entries: 1,
                limits,
            };
            let layout = Layout {
                segments: 5,
                sizes: 1234,
                gaps: 0b0101,
                start: 9,
                follow: false,
                buffer: false,
            };
            let io = |kind, blocks| {
                Op::Io(IoSpec {
                    kind,
                    place: Place::At(3),
                    blocks,
                    layout,
                    plugged: false,
                    issuer: 0,
                    sync: true,
                    flush: 3,
                })
            };
            let ops = [
                io(4, 23),
                Op::End {
                    index: 0,
                    status: 0,
                },
                io(0, 23),
                io(4, 23),
                Op::End {
                    index: 0,
                    status: 1,
                },
                Op::Barrier,
                io(0, 23),
                Op::Partial {
                    index: 0,
                    blocks: 5,
                    status: 0,
                },
                Op::Partial {
                    index: 0,
                    blocks: 2,
                    status: 2,
                },
                Op::Requeue {
                    index: 0,
                    kick: true,
                },
                Op::Partial {
                    index: 0,
                    blocks: 200,
                    status: 0,
                },
                io(6, 7),
                io(0, 23),
            ];
            run(&config, &ops).unwrap_or_else(|f| panic!("{config:?}: {f}"));
        }
    }
}

/// The generated runs reach what the model is for: merges, splits, multi-segment requests
/// and joined mappings, tables too small, requeues, requests turned down, errors, and bytes
/// read back and written, through each elevator.
#[test]
fn the_generated_runs_reach_every_path() {
    use blkmq_model::data::{Stats, run_counted};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

    for elevator in 0..3 {
        let mut runner = TestRunner::new_with_rng(
            ProptestConfig::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[elevator; 32]),
        );
        let strategy = (config(elevator), ops());
        let mut total = Stats::default();
        for _ in 0..CASES {
            let (config, ops) = strategy.new_tree(&mut runner).unwrap().current();
            let stats = run_counted(&config, &ops).unwrap_or_else(|f| panic!("{config:?}: {f}"));
            total.add(&stats);
        }
        println!("elevator {elevator}: {total:?}");
        let Stats {
            ended_ok,
            ended_err,
            merged,
            split,
            multi_segment,
            joined,
            sg_too_small,
            partial,
            flushes,
            requeued,
            turned_down,
            barriers,
            bytes_read,
            bytes_written,
            bios,
        } = total;
        for (what, count) in [
            ("requests ended Ok", ended_ok),
            ("requests failed", ended_err),
            ("merged requests", merged),
            ("split bios", split),
            ("multi-segment requests", multi_segment),
            ("joined mappings", joined),
            ("tables too small", sg_too_small),
            ("partial ends", partial),
            ("flush requests", flushes),
            ("requeues", requeued),
            ("requests turned down", turned_down),
            ("barriers", barriers),
            ("bytes read", bytes_read),
            ("bytes written", bytes_written),
            ("bios", bios),
        ] {
            assert!(count > 0, "elevator {elevator}: no {what} in {CASES} runs");
        }
    }
}
