//! Random operation sequences on a host and its request queues — submission, completion,
//! requeue, a driver that pushes back, quiesce, freeze, stop, timeouts, elevator switches —
//! checked by `blkmq_model::queue` after every op and after a final drain.
//!
//! The input is decoded with `arbitrary` (`arbitrary_take_rest` of a `(Config, Vec<Op>)`);
//! `tests/fuzz_corpus.rs` decodes the checked-in seeds the same way on stable.

#![no_main]

use blkmq_model::queue::{Config, Op, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Config, Vec<Op>)| {
    let (config, ops) = input;
    if let Err(failure) = run(&config, &ops) {
        panic!("{config:?}\n{failure}");
    }
});
