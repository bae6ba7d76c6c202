//! Random operation sequences on mq-deadline driven as a request queue drives it — inserts
//! (alone, in batches, at the head), bio merges, dispatches, completions, requeues, clock
//! steps, tunable and depth changes — checked against the reference model of
//! `blkmq_model::deadline` after every op and after a final drain.
//!
//! The input is decoded with `arbitrary` (`arbitrary_take_rest` of a `(Config, Vec<Op>)`);
//! `tests/fuzz_corpus.rs` decodes the checked-in seeds the same way on stable.

#![no_main]

use blkmq_model::deadline::{Config, Op, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Config, Vec<Op>)| {
    let (config, ops) = input;
    if let Err(failure) = run(&config, &ops) {
        panic!("{config:?}\n{failure}");
    }
});
