//! Placeholder; the keyed bench follows.
fn main() {}
