//! The lu application (being written).
