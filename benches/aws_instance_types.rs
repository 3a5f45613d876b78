//! Placeholder, filled in below.
fn main() {}
