//! The README's quick start (`examples/quick_start.rs`) runs to the end: every bio of its
//! two threads ends, through BFQ, on the default `StdPlatform`, with no kick or timer code.

#[path = "../examples/quick_start.rs"]
mod quick_start;

#[test]
fn the_quick_start_runs() {
    quick_start::main();
}
