//! Random operation sequences on a tag set and its request queues, checked against the
//! reference model of `blkmq_model::tagset` after every op.
//!
//! The input is decoded with `arbitrary` (`arbitrary_take_rest` of a `(Config, Vec<Op>)`);
//! `tests/fuzz_corpus.rs` decodes the checked-in seeds the same way on stable.

#![no_main]

use blkmq_model::tagset::{Config, Op, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Config, Vec<Op>)| {
    let (config, ops) = input;
    if let Err(failure) = run(&config, &ops) {
        panic!("{config:?}\n{failure}");
    }
});
