//! The sor application (being written).
