//! The barnes application (being written).
