//! The gauss application (being written).
