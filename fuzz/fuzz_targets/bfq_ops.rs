//! Random operation sequences on BFQ driven as a request queue drives it — inserts of
//! several issuers (alone, in batches, at the head), bio merges, dispatches, completions,
//! requeues, clock steps and idle timers, tunable, group, weight and depth changes —
//! checked after every op and after a final drain by `blkmq_model::bfq`.
//!
//! The input is decoded with `arbitrary` (`arbitrary_take_rest` of a `(Config, Vec<Op>)`);
//! `tests/fuzz_corpus.rs` decodes the checked-in seeds the same way on stable.

#![no_main]

use blkmq_model::bfq::{Config, Op, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Config, Vec<Op>)| {
    let (config, ops) = input;
    if let Err(failure) = run(&config, &ops) {
        panic!("{config:?}\n{failure}");
    }
});
