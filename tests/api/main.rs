//! Integration tests: the real router and the real binary against a real
//! PostgreSQL. One test binary, so that one build serves all of them.

mod admission;
mod apps;
mod auth;
mod batch;
mod budgets;
mod capacity;
mod caps;
mod contract;
mod embedded;
mod hygiene;
mod imports;
mod jobs;
mod k8s;
mod layout;
mod metrics;
mod nodes;
mod outage;
mod power;
mod predictions;
mod prometheus;
mod real_data;
mod runs;
mod sacct_script;
mod scalability;
mod schemathesis;
mod slurm;
mod stateful;
mod stats;
mod support;
mod times;
mod ui;
