//! Offset validation: classify out-of-range positions, detect topic resets, apply resets.
pub mod classify;
pub mod reset;
