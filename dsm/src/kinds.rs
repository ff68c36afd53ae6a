//! Message kinds of the engine and of the message-based strategies, in one place that both
//! import (the typed codec in `wire.rs` will replace these numbers).

pub const HOME: u16 = 10;
pub const FETCH: u16 = 11;
pub const DIFF: u16 = 12;
pub const DROP: u16 = 13;
pub const NOTICE: u16 = 14;
pub const LOCK_ACQ: u16 = 20;
pub const LOCK_REL: u16 = 21;
pub const BARRIER: u16 = 22;
pub const FLAG_SET: u16 = 23;
pub const FLAG_WAIT: u16 = 24;
pub const STOP: u16 = 30;
