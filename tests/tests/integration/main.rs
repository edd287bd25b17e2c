//! Cross-crate integration tests: the recorded corpora replay to their stored roots.

mod corpus;
