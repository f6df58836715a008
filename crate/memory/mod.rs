//! Memory: what a run holds (tracker); later, what it will hold (planner) and the cap.

pub mod tracker;

pub use tracker::{MemorySample, MemoryTracker};
