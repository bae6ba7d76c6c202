//! Random data I/O with random segment layouts and queue limits — reads, writes, discards,
//! write-zeroes and flushes, through no elevator, mq-deadline or BFQ, with plugs, merges,
//! splits, requeues, partial ends, requests turned down and errors — checked byte for byte
//! against a model disk by `blkmq_model::data`.
//!
//! The input is decoded with `arbitrary` (`arbitrary_take_rest` of a `(Config, Vec<Op>)`);
//! `tests/fuzz_corpus.rs` decodes the checked-in seeds the same way on stable.

#![no_main]

use blkmq_model::data::{Config, Op, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Config, Vec<Op>)| {
    let (config, ops) = input;
    if let Err(failure) = run(&config, &ops) {
        panic!("{config:?}\n{failure}");
    }
});
