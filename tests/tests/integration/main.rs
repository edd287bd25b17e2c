//! Cross-crate integration tests: the recorded corpora replay to their stored roots, and
//! ARCHITECTURE.md's crate graph is Cargo's.

mod corpus;
mod crate_graph;
