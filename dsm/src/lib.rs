//! dsm
