//! variants
