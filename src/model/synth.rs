//! Synthetic histories for the accuracy suite (filled in below).
