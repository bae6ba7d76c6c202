//! Replays the checked-in seed corpus of the `sbitmap_ops` fuzz target on stable, so that every
//! `cargo test` runs what the fuzzer found interesting, without nightly or libFuzzer.
//!
//! Each file in `fuzz/seeds/sbitmap_ops/` is decoded exactly as `fuzz_target!` decodes its
//! input (`arbitrary_take_rest` of a `(Config, Vec<Op>)`, after the same minimum-length check)
//! and run through the same model. The corpus must exist, every seed must decode, and together
//! the seeds must reach every op kind, both allocation modes and both targets, so a corpus that
//! goes missing or stale fails here instead of silently testing nothing.

// The model runs real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use blkmq_sbitmap::ops::{Config, Op, run};

type Input = (Config, Vec<Op>);

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/sbitmap_ops")
}

/// What the fuzz target would run for `bytes`; `None` where it rejects the input.
fn decode(bytes: &[u8]) -> Option<Input> {
    if bytes.len() < <Input as Arbitrary>::size_hint(0).0 {
        return None;
    }
    <Input as Arbitrary>::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

#[test]
fn seed_corpus_passes_the_model() {
    let dir = seeds_dir();
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "seed corpus {} is empty", dir.display());

    let mut kinds = BTreeSet::new();
    let mut modes = BTreeSet::new();
    let mut ops_run = 0;
    for path in &paths {
        let bytes = fs::read(path).expect("a readable seed");
        let (config, ops) =
            decode(&bytes).unwrap_or_else(|| panic!("{}: does not decode", path.display()));
        if let Err(failure) = run(&config, &ops) {
            panic!("{}: {config:?}\n{failure}", path.display());
        }
        kinds.extend(ops.iter().map(Op::kind));
        modes.insert((config.round_robin, config.queue.is_some()));
        ops_run += ops.len();
    }

    let missing: Vec<_> = Op::KINDS.iter().filter(|k| !kinds.contains(*k)).collect();
    assert!(missing.is_empty(), "no seed has an op of kind {missing:?}");
    assert_eq!(
        modes.len(),
        4,
        "seeds cover only (round_robin, queue) = {modes:?}"
    );
    println!("{} seeds, {ops_run} ops", paths.len());
}
