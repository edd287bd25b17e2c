//! Cross-crate integration tests; see tests/.
