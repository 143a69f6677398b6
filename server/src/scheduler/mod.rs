//! Admission and (later) selection. This module holds the rules that decide whether a request
//! may proceed at all; account permits, pool queues and binding arrive with the scheduler issue.

pub mod admission;
