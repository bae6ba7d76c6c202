//! Replays the checked-in seed corpora of the fuzz targets (`sbitmap_ops`, `tagset_ops`,
//! `queue_ops`, `deadline_ops`, `bfq_ops`, `data_ops`) on stable, so that every `cargo test`
//! runs what the fuzzer found interesting, without nightly or libFuzzer.
//!
//! Each file in `fuzz/seeds/<target>/` is decoded exactly as `fuzz_target!` decodes its input
//! (`arbitrary_take_rest` of a `(Config, Vec<Op>)`, after the same minimum-length check) and
//! run through the same model. A corpus must exist, every seed must decode, and together the
//! seeds must reach every op kind and the target's configuration modes (for `sbitmap_ops` both
//! allocation modes and both targets; for `tagset_ops` per-queue and shared host tags, each
//! with and without scheduler tags; for `queue_ops` per-queue and shared host tags, with and
//! without an elevator, each with a driver taking requests one at a time and in batches; for
//! `deadline_ops` one and two hardware queues, each with per-queue and shared host tags; for
//! `bfq_ops` one and two hardware queues, each on a rotational device and not, each with
//! `low_latency` on and off; for `data_ops` each elevator, its driver walking segments and
//! mapping them, and devices with and without a write cache), so a corpus that goes missing or
//! stale fails here instead of silently testing nothing.

// The models run real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};

/// The seeds of fuzz target `target`, sorted; the corpus must exist and hold some.
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "seed corpus {} is empty", dir.display());
    paths
}

/// What a fuzz target taking an `I` would run for `bytes`; `None` where it rejects the input.
fn decode<I: for<'a> Arbitrary<'a>>(bytes: &[u8]) -> Option<I> {
    if bytes.len() < I::size_hint(0).0 {
        return None;
    }
    I::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

/// Decodes and runs every seed of `target` through `run`; returns each seed's op kinds and
/// configuration mode.
fn replay<I, M, E>(
    target: &str,
    run: impl Fn(&I) -> Result<(), E>,
    describe: impl Fn(&I) -> (Vec<&'static str>, M),
) -> (BTreeSet<&'static str>, BTreeSet<M>)
where
    I: for<'a> Arbitrary<'a> + std::fmt::Debug,
    M: Ord,
    E: Display,
{
    let paths = seeds(target);
    let mut kinds = BTreeSet::new();
    let mut modes = BTreeSet::new();
    let mut ops_run = 0;
    for path in &paths {
        let bytes = fs::read(path).expect("a readable seed");
        let input: I =
            decode(&bytes).unwrap_or_else(|| panic!("{}: does not decode", path.display()));
        if let Err(failure) = run(&input) {
            panic!("{}: {input:?}\n{failure}", path.display());
        }
        let (seed_kinds, mode) = describe(&input);
        ops_run += seed_kinds.len();
        kinds.extend(seed_kinds);
        modes.insert(mode);
    }
    println!("{target}: {} seeds, {ops_run} ops", paths.len());
    (kinds, modes)
}

/// The kinds of `all` no seed reached.
fn missing<'a>(all: &[&'a str], kinds: &BTreeSet<&str>) -> Vec<&'a str> {
    all.iter().copied().filter(|k| !kinds.contains(k)).collect()
}

#[test]
fn seed_corpus_passes_the_model() {
    use blkmq_model::sbitmap::{Config, Op, run};

    let (kinds, modes) = replay(
        "sbitmap_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            (kinds, (config.round_robin, config.queue.is_some()))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        4,
        "seeds cover only (round_robin, queue) = {modes:?}"
    );
}

#[test]
fn tagset_seed_corpus_passes_the_model() {
    use blkmq_model::tagset::{Config, MAX_MODEL_QUEUES, Op, run};

    let (kinds, modes) = replay(
        "tagset_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            // Whether some queue slot starts with scheduler tags (`Config::schedulers`).
            let slots = 1 + u32::from(config.queues) % MAX_MODEL_QUEUES as u32;
            let sched = u32::from(config.schedulers) & ((1 << slots) - 1) != 0;
            (kinds, (config.shared_tags, sched))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        4,
        "seeds cover only (shared_tags, scheduler tags) = {modes:?}"
    );
}

#[test]
fn queue_seed_corpus_passes_the_checks() {
    use blkmq_model::queue::{Config, MAX_QUEUES, Op, run};

    let (kinds, modes) = replay(
        "queue_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            // Whether some queue starts with the elevator (`Config::elevators`).
            let queues = 1 + u32::from(config.queues) % MAX_QUEUES as u32;
            let elevator = u32::from(config.elevators) & ((1 << queues) - 1) != 0;
            (kinds, (config.shared_tags, elevator, config.batch_driver))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        8,
        "seeds cover only (shared_tags, elevator, batch_driver) = {modes:?}"
    );
}

#[test]
fn deadline_seed_corpus_passes_the_model() {
    use blkmq_model::deadline::{Config, MAX_HW_QUEUES, Op, run};

    let (kinds, modes) = replay(
        "deadline_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            let hw_queues = 1 + usize::from(config.hw_queues) % MAX_HW_QUEUES;
            (kinds, (hw_queues, config.shared_tags))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        4,
        "seeds cover only (hardware queues, shared_tags) = {modes:?}"
    );
}

#[test]
fn bfq_seed_corpus_passes_the_model() {
    use blkmq_model::bfq::{Config, MAX_HW_QUEUES, Op, run};

    let (kinds, modes) = replay(
        "bfq_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            let hw_queues = 1 + usize::from(config.tags.hw_queues) % MAX_HW_QUEUES;
            (kinds, (hw_queues, config.rotational, config.low_latency))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        8,
        "seeds cover only (hardware queues, rotational, low_latency) = {modes:?}"
    );
}

#[test]
fn data_seed_corpus_passes_the_model() {
    use blkmq_model::data::{Config, ELEVATORS, Op, run};

    let (kinds, modes) = replay(
        "data_ops",
        |(config, ops): &(Config, Vec<Op>)| run(config, ops),
        |(config, ops)| {
            let kinds = ops.iter().map(Op::kind).collect();
            let elevator = ELEVATORS[usize::from(config.elevator) % ELEVATORS.len()];
            (kinds, (elevator, config.map_sg, config.limits.write_cache))
        },
    );
    let missing = missing(Op::KINDS, &kinds);
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    let drivers: BTreeSet<_> = modes.iter().map(|&(e, m, _)| (e, m)).collect();
    assert_eq!(
        drivers.len(),
        6,
        "seeds cover only (elevator, map_sg) = {drivers:?}"
    );
    let caches: BTreeSet<_> = modes.iter().map(|&(_, _, c)| c).collect();
    assert_eq!(caches.len(), 2, "seeds cover only write_cache = {caches:?}");
}
