//! Joulecast: energy, power and time history and predictions for HPC
//! applications, served over HTTP from PostgreSQL.

pub mod accuracy;
pub mod cache;
pub mod cli;
pub mod config;
pub mod db;
pub mod domain;
pub mod embedded;
pub mod extrap;
pub mod hostlist;
pub mod http;
pub mod import;
pub mod ingest;
pub mod model;
pub mod predict;
pub mod sacct;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tokens;
pub mod validate;
