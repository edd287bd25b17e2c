//! Criterion benchmarks for the kernel; see benches/.
