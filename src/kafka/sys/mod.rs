//! The unsafe room: every call into librdkafka (and only those) that needs `unsafe`, behind
//! safe types and functions. The crate denies `unsafe_code` everywhere else. What each piece
//! relies on, what would break it and which test guards it: `README.md` beside this file.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod acl;
pub mod admin;
pub mod consume;
pub mod events;
mod handle;
pub mod produce;
pub mod topic_config;
pub mod topic_id;
