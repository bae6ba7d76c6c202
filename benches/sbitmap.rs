//! Placeholder until the benches land.
fn main() {}
