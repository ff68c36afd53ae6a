//! The ilink application (being written).
