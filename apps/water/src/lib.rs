//! The water application (being written).
