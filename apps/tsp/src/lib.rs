//! The tsp application (being written).
