//! The em3d application (being written).
